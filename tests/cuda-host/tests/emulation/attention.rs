//! The fused attention kernels (`cuda/src/kernels/flash_attention.cu` on tensor cores and
//! `flash_attention_f32.cu`) run whole on the host by `attention_emulation.cpp` — one
//! thread per CUDA thread, `ldmatrix`/`mma.sync`/`cp.async`/shuffles replaced by their PTX
//! ISA semantics (`warp_emulation.h`) — on the very parameter block the crate launches
//! (`dpattn_cuda::attention::launch_image`), and compared with the float64 CPU noisy
//! attention with the GPU tests' cases and tolerances (`cuda/tests/support/attention.rs`).
//!
//! What this proves without a GPU: the kernels' indexing, fragment layouts, swizzles,
//! online softmax, masks, noise indices and epilogue, and the Rust launch planning
//! (strides, σ modes, grid). What it cannot: timing, the real tensor cores' summation
//! order, and asynchronous-copy hazards (a missing `cp.async.wait` is invisible here;
//! compute-sanitizer's racecheck in `scripts/gpu-test.sh` covers it on a GPU).

#[path = "../../../../cuda/tests/support/attention.rs"]
mod support;

use dpattn_core::sampling::NoiseKey;
use dpattn_cuda::attention::{AttnDtype, launch_image};
use dpattn_cuda_host_check as host;
use support::{Case, check_case, decode};

/// Bytes at a 16-byte aligned address (the kernels copy rows in 16-byte chunks).
struct Aligned(Vec<u128>);

impl Aligned {
    fn from(bytes: &[u8]) -> Self {
        let mut v = vec![0u128; bytes.len().div_ceil(16)];
        for (i, chunk) in bytes.chunks(16).enumerate() {
            let mut w = [0u8; 16];
            w[..chunk.len()].copy_from_slice(chunk);
            v[i] = u128::from_ne_bytes(w);
        }
        Aligned(v)
    }

    fn ptr(&self) -> u64 {
        self.0.as_ptr() as u64
    }

    fn bytes(&self, len: usize) -> Vec<u8> {
        self.0.iter().flat_map(|w| w.to_ne_bytes()).take(len).collect()
    }
}

/// The emulated launch of `c` (same arguments as the GPU test's `run_gpu`).
fn run_emulated(c: &Case, q: &[u8], k: &[u8], v: &[u8], key: &NoiseKey, bshd: bool) -> Vec<f64> {
    let [b, h, sq, d] = c.shape;
    let size = c.dtype.size();
    let (qa, ka, va) = (Aligned::from(q), Aligned::from(k), Aligned::from(v));
    let out_len = b * h * sq * d * size;
    // All-ones bytes are NaN in every dtype: an element the kernel does not write shows.
    let out = Aligned::from(&vec![0xffu8; out_len]);
    let tensor = |ptr: u64, seq: usize| support::tensor(c, ptr, seq, bshd);
    let (params, spec) = (support::params_of(c), support::spec_of(c, key));
    let image = launch_image(
        c.dtype,
        &tensor(out.ptr(), sq),
        &tensor(qa.ptr(), sq),
        &tensor(ka.ptr(), c.s_k),
        &tensor(va.ptr(), c.s_k),
        &params,
        Some(&spec),
    )
    .unwrap();
    assert_eq!(image.threads, 128);
    let tables = image.sigma_tables.clone();
    let ptr = |t: &Option<Vec<f64>>| t.as_ref().map_or(0, |v| v.as_ptr() as u64);
    let bytes = image.params_bytes([ptr(&tables[0]), ptr(&tables[1])]);
    let entry = match (c.dtype, d) {
        (AttnDtype::Bf16, 64) => host::dpck_attention_bf16_64,
        (AttnDtype::Bf16, 128) => host::dpck_attention_bf16_128,
        (AttnDtype::F16, 64) => host::dpck_attention_f16_64,
        (AttnDtype::F16, 128) => host::dpck_attention_f16_128,
        (AttnDtype::F32, 64) => host::dpck_attention_f32_64,
        (AttnDtype::F32, 128) => host::dpck_attention_f32_128,
        other => panic!("no kernel for {other:?}"),
    };
    let (gx, gy, _) = image.grid;
    // SAFETY: every pointer in the parameter block addresses a live host buffer of the
    // planned length (q, k, v, out above; the σ tables in `tables`), checked by
    // `launch_image`; the kernel reads and writes only within them.
    unsafe { entry(bytes.as_ptr(), gx, gy) };
    let raw = decode(&out.bytes(out_len), c.dtype);
    if bshd { support::permute(&raw, [b, h, sq, d], false) } else { raw }
}

fn check(c: Case, seed: u64) {
    check_case(c, seed, &run_emulated, false);
}

#[test]
fn noise_off_matches_the_f64_reference() {
    for (c, seed) in support::noise_off_cases() {
        check(c, seed);
    }
}

#[test]
fn cosh_score_matches_the_f64_reference() {
    for (c, seed) in support::cosh_cases() {
        check(c, seed);
    }
}

#[test]
fn noise_on_matches_the_cpu_noisy_attention() {
    for (c, seed) in support::noise_on_cases() {
        check(c, seed);
    }
}
