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

#[path = "../../../cuda/tests/support/attention.rs"]
mod support;

use dpattn_core::attention::AttentionParams;
use dpattn_core::noisy_attention::{NoiseSpec, NoiseStream};
use dpattn_core::sampling::NoiseKey;
use dpattn_core::{Mask, Scale, ScoreFn};
use dpattn_cuda::attention::{AttnDtype, GpuTensor, launch_image};
use dpattn_cuda_host_check as host;
use support::{Case, case, check_case, decode};

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
    let out = Aligned::from(&vec![0xa5u8; out_len]); // poison: every element must be written
    let tensor = |ptr: u64, seq: usize| {
        let shape = [b, h, seq, d];
        let strides = if bshd { [seq * h * d, d, h * d, 1] } else { [h * seq * d, seq * d, d, 1] };
        GpuTensor { ptr, len: b * h * seq * d, shape, strides }
    };
    let params = AttentionParams {
        mask: Mask { causal: c.causal, key_padding: None },
        scale: Scale::InvSqrtDim,
        score: c.score,
        ..AttentionParams::default()
    };
    let spec = NoiseSpec {
        key,
        output: c.out_sigma.as_deref().map(|sigma| NoiseStream { stream: 11, sigma }),
        logits: c.logit_sigma.as_deref().map(|sigma| NoiseStream { stream: 12, sigma }),
    };
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
    for dtype in AttnDtype::ALL {
        for d in [64, 128] {
            // Cross-attention with lengths that are not multiples of any tile.
            check(case(dtype, [2, 3, 100, d], 77, false), 1);
            // Causal self-attention across several key tiles.
            check(case(dtype, [1, 2, 130, d], 130, true), 2);
            // Causal with s_q < s_k (bottom-right: the last row sees every key)...
            check(case(dtype, [1, 1, 37, d], 300, true), 3);
            // ... and s_q > s_k: the first 50 rows see no key and are zero.
            check(case(dtype, [1, 2, 70, d], 20, true), 4);
            // A single query row (decode) against a long context.
            check(case(dtype, [3, 1, 1, d], 1000, false), 5);
        }
    }
}

#[test]
fn cosh_score_matches_the_f64_reference() {
    for dtype in AttnDtype::ALL {
        let mut c = case(dtype, [1, 2, 65, 64], 129, true);
        c.score = ScoreFn::Cosh;
        check(c, 6);
    }
}

#[test]
fn noise_on_matches_the_cpu_noisy_attention() {
    for dtype in AttnDtype::ALL {
        for d in [64, 128] {
            // Output noise per head, logit noise per (batch, head); odd s_k so logit noise
            // elements straddle Box–Muller pairs and ChaCha blocks.
            let mut c = case(dtype, [2, 2, 67, d], 93, false);
            c.out_sigma = Some(vec![0.05, 0.2]);
            c.logit_sigma = Some(vec![0.3, 0.0, 1.0, 0.5]);
            check(c, 7);
            let mut c = case(dtype, [1, 3, 90, d], 90, true);
            c.out_sigma = Some(vec![0.1; 3]);
            c.logit_sigma = Some(vec![0.25; 3]);
            check(c, 8);
        }
    }
}
