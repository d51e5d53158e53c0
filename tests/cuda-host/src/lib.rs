//! The CUDA kernels' device code (`cuda/src/kernels/*.cuh`), compiled for the host by
//! `build.rs` and exposed for the tests in `tests/emulation/port.rs`, which compare it bit for bit
//! with `dpattn-core`. The GPU runs the same functions (compiled by NVRTC with
//! `--fmad=false`); `scripts/gpu-test.sh` checks the GPU's output against the CPU directly.
#![allow(unsafe_code)]

unsafe extern "C" {
    /// ChaCha20 block (port of `chacha20_block`).
    pub fn dpck_chacha20_block(key: *const u32, counter: u64, stream: u64, out: *mut u32);
    /// `ln u` on the grid.
    pub fn dpck_ln_unit(u: f64) -> f64;
    /// `(sin, cos)(2π m 2^-bits)`.
    pub fn dpck_sincos_2pi(m: u64, bits: u32, s: *mut f64, c: *mut f64);
    /// f32 → bf16 bits, round to nearest even.
    pub fn dpck_f32_to_bf16(x: f32) -> u16;
    /// f32 → f16 bits, round to nearest even (the host emulation of `cvt.rn.f16.f32`).
    pub fn dpck_f32_to_f16(x: f32) -> u16;
    /// f64 → f32 toward zero.
    pub fn dpck_f64_to_f32_rz(x: f64) -> f32;
    /// What `dp_fill` writes for elements `first .. first + n`.
    pub fn dpck_fill(
        sampler: i32,
        uw: i32,
        out_kind: i32,
        p: f64,
        key: *const u32,
        stream: u64,
        first: u64,
        n: u64,
        out: *mut core::ffi::c_void,
    );
    /// One row of `dp_clip_rows_gaussian` (sequential sum): 1 rescaled, 0 not, 2 sanitised
    /// (a non-finite row released as the zero row).
    pub fn dpck_clip_row(
        is_f32: i32,
        x32: *mut f32,
        x64: *mut f64,
        dim: u64,
        c: f64,
        sigma: f64,
        key: *const u32,
        stream: u64,
        e_begin: u64,
    ) -> i32;
    /// Words of an element's window (`dp_window_word`); with `continuation > 0`, as if the
    /// primary block and that many continuation blocks were used up. Returns 0, or −1 when
    /// the window runs out (`written` words were read before).
    pub fn dpck_window_words(
        key: *const u32,
        stream: u64,
        element: u64,
        continuation: u64,
        n: u64,
        out: *mut u32,
        written: *mut u64,
    ) -> i32;
    /// `dp_digits`: `⌊num·2^32/den⌋`, `num·2^32 mod den` and the digits read at most.
    pub fn dpck_digits(num: u64, den: u64, d: *mut u64, rem: *mut u64, len: *mut u32);
    /// `dp_divmod128`: `(hi·2^64 + lo) / d` and the remainder.
    pub fn dpck_divmod128(lo: u64, hi: u64, d: u64, q_lo: *mut u64, q_hi: *mut u64, rem: *mut u64);
    /// `dp_divmod128_128`: `a / d` and the remainder, each as `[lo, hi]`.
    pub fn dpck_divmod128_128(a: *const u64, d: *const u64, q: *mut u64, rem: *mut u64);
    /// `dp_mul128_64`: `a·m` as `[lo, hi]`; 1 if it fits in 128 bits, else 0.
    pub fn dpck_mul128_64(a: *const u64, m: u64, out: *mut u64) -> i32;
    /// `Bernoulli(num/den)` from an element's window: 0, 1 or a negative status.
    pub fn dpck_bernoulli(key: *const u32, stream: u64, element: u64, num: u64, den: u64) -> i32;
    /// `Bernoulli(exp(−(whole + num/den)))`, `u128`s as `[lo, hi]`.
    pub fn dpck_bernoulli_exp(
        key: *const u32,
        stream: u64,
        element: u64,
        whole: *const u64,
        num: *const u64,
        den: *const u64,
    ) -> i32;
    /// The discrete Laplace of scale `t/s` at an element: 0 (value in `out`) or a status.
    pub fn dpck_discrete_laplace(
        key: *const u32,
        stream: u64,
        element: u64,
        t: u64,
        s: u64,
        out: *mut i64,
    ) -> i32;
    /// The discrete Gaussian `σ = s/q` (lowest terms) at an element.
    pub fn dpck_discrete_gaussian(
        key: *const u32,
        stream: u64,
        element: u64,
        s: u64,
        q: u64,
        out: *mut i64,
    ) -> i32;
    /// `dp_grid_index`.
    pub fn dpck_grid_index(x: f64, k: i32, bound: i64) -> i64;
    /// `dp_grid_value`.
    pub fn dpck_grid_value(m: i64, k: i32, bound: i64) -> f64;
    /// `dp_sat_add`.
    pub fn dpck_sat_add(a: i64, b: i64) -> i64;
    /// One value of the grid release (`dp_grid_release_value`).
    pub fn dpck_grid_release_value(
        x: f64,
        k: i32,
        bound: i64,
        s: u64,
        q: u64,
        key: *const u32,
        stream: u64,
        element: u64,
        out: *mut f64,
    ) -> i32;
    /// One row of `dp_clip_rows_exact` (sequential sum): 1 rescaled, 0 not, 2 sanitised,
    /// negative a sampler status.
    pub fn dpck_clip_row_exact(
        is_f32: i32,
        x32: *mut f32,
        x64: *mut f64,
        dim: u64,
        c: f64,
        k: i32,
        bound: i64,
        s: u64,
        q: u64,
        key: *const u32,
        stream: u64,
        e_begin: u64,
    ) -> i32;
    /// The kernel `dp_grid_release` run on the host (`grid_emulation.cpp`) over `blocks`
    /// blocks: `groups` are `GridGroup`s, `status` receives its two words, `src` is null or
    /// the noiseless `f64` values in logical order.
    pub fn dpck_grid_release_kernel(
        is_f32: i32,
        x: *mut core::ffi::c_void,
        shape: *const u64,
        strides: *const u64,
        total: u64,
        first: u64,
        group_len: u64,
        groups: *const core::ffi::c_void,
        key: *const u32,
        stream: u64,
        blocks: u32,
        status: *mut u64,
        src: *const f64,
    );
    /// Logit noise elements `e`, `e + 1` of the fused attention (`dp_noise2`).
    pub fn dpck_noise2(key: *const u32, stream: u64, e: u64, sigma: f64, out: *mut f32);
    /// Output noise elements `e .. e + 8` (`dp_noise8`, `e` a multiple of 8).
    pub fn dpck_noise8(key: *const u32, stream: u64, e: u64, sigma: f64, out: *mut f32);
    /// `[sizeof, out_stream, key, batch, scale, pad]` of `DpAttnParams`.
    pub fn dpck_attn_params_layout(out: *mut u64);
    /// The fused attention epilogue for one block (`dp_stage_pair` then `dp_store_rows`).
    pub fn dpck_store_rows(
        d: i32,
        x: *const f32,
        rows: i32,
        row0: u32,
        b: u32,
        h: u32,
        heads: u32,
        s_q: u32,
        out: *mut f32,
        ld: u64,
        key: *const u32,
        stream: u64,
        sigma: f64,
    ) -> i32;
    /// The whole Gaussian-sampling release of `gaussian_sampling.cu` (clip factors, partial
    /// sums, `B` and `P`) run on the host by `block_emulation.cpp`, one thread per CUDA
    /// thread: `is_f32` selects the type of `x`; `chunk_len`, `chunks`, `group` are the
    /// plan's; `factor_blocks` is the grid of the clip-factor kernel.
    pub fn dpck_gs_release(
        is_f32: i32,
        x: *const core::ffi::c_void,
        batch: u64,
        heads: u64,
        n: u64,
        d: u64,
        sb: u64,
        sh: u64,
        sr: u64,
        alpha: f64,
        eta: f64,
        key: *const u32,
        stream: u64,
        k: u64,
        chunk_len: u64,
        chunks: u64,
        group: u64,
        cosh_score: i32,
        factor_blocks: u32,
        out_b: *mut f64,
        out_p: *mut f64,
    );
    /// The fused attention kernel `flash_attention.cu` (bf16, D = 64) run on the host by
    /// `attention_emulation.cpp` over a `(gx, gy)` grid, on the parameter block `params`
    /// (`LaunchImage::params_bytes`, host addresses); likewise the five other variants.
    pub fn dpck_attention_bf16_64(params: *const u8, gx: u32, gy: u32);
    /// `flash_attention.cu`, bf16, D = 128.
    pub fn dpck_attention_bf16_128(params: *const u8, gx: u32, gy: u32);
    /// `flash_attention.cu`, f16, D = 64.
    pub fn dpck_attention_f16_64(params: *const u8, gx: u32, gy: u32);
    /// `flash_attention.cu`, f16, D = 128.
    pub fn dpck_attention_f16_128(params: *const u8, gx: u32, gy: u32);
    /// `flash_attention_f32.cu`, D = 64.
    pub fn dpck_attention_f32_64(params: *const u8, gx: u32, gy: u32);
    /// `flash_attention_f32.cu`, D = 128.
    pub fn dpck_attention_f32_128(params: *const u8, gx: u32, gy: u32);
    /// `flash_attention_f32.cu` with `DP_F64` (f64 arithmetic and output), D = 64.
    pub fn dpck_attention_f64_64(params: *const u8, gx: u32, gy: u32);
    /// `flash_attention_f32.cu` with `DP_F64`, D = 128.
    pub fn dpck_attention_f64_128(params: *const u8, gx: u32, gy: u32);
}
