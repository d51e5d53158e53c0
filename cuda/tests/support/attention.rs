//! Shared by the GPU tests of the fused attention (`cuda/tests/gpu_attention.rs`) and
//! its host emulation (`tests/cuda-host/tests/attention.rs`): inputs, the float64 CPU
//! reference (`noisy_attention_f64`) and the comparison with its tolerances.
#![allow(dead_code)]

use dpattn_core::attention::{AttentionParams, attention_scratch_len};
use dpattn_core::noisy_attention::{NoiseSpec, NoiseStream, noisy_attention_f64};
use dpattn_core::sampling::NoiseKey;
use dpattn_core::{BatchedMut, BatchedRef, Mask, Scale, ScoreFn};
use dpattn_cuda::attention::{AttnDtype, GpuTensor};

/// Runs a case on q, k, v bytes with a key (`bshd`: operands in `[B, S, H, D]` memory) and
/// returns the output as `[b, h, s_q, d]` values.
pub(crate) type Runner<'a> = &'a dyn Fn(&Case, &[u8], &[u8], &[u8], &NoiseKey, bool) -> Vec<f64>;

/// Deterministic inputs in [-1, 1) (a small LCG; values are data, not noise).
pub(crate) fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The values as the device holds them (rounded to the dtype) and their bits.
pub(crate) fn encode(x: &[f32], dtype: AttnDtype) -> (Vec<f32>, Vec<u8>) {
    match dtype {
        AttnDtype::F32 => (x.to_vec(), x.iter().flat_map(|v| v.to_le_bytes()).collect()),
        AttnDtype::Bf16 => {
            let h: Vec<half::bf16> = x.iter().map(|&v| half::bf16::from_f32(v)).collect();
            (
                h.iter().map(|v| v.to_f32()).collect(),
                h.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        }
        AttnDtype::F16 => {
            let h: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
            (
                h.iter().map(|v| v.to_f32()).collect(),
                h.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        }
    }
}

pub(crate) fn decode(bytes: &[u8], dtype: AttnDtype) -> Vec<f64> {
    match dtype {
        AttnDtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        AttnDtype::Bf16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes(c.try_into().unwrap()).to_f64())
            .collect(),
        AttnDtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f64())
            .collect(),
    }
}

pub(crate) struct Case {
    pub(crate) dtype: AttnDtype,
    pub(crate) shape: [usize; 4], // q: [b, h, s_q, d]
    pub(crate) s_k: usize,
    pub(crate) causal: bool,
    pub(crate) score: ScoreFn,
    pub(crate) out_sigma: Option<Vec<f64>>,
    pub(crate) logit_sigma: Option<Vec<f64>>,
}

/// Between `[b, h, seq, d]` row-major memory and PyTorch's `[b, seq, h, d]` (`to_bshd`) or
/// back.
pub(crate) fn permute<T: Copy>(x: &[T], [b, h, seq, d]: [usize; 4], to_bshd: bool) -> Vec<T> {
    let mut out = x.to_vec();
    for bi in 0..b {
        for hi in 0..h {
            for i in 0..seq {
                for c in 0..d {
                    let bhsd = ((bi * h + hi) * seq + i) * d + c;
                    let bshd = ((bi * seq + i) * h + hi) * d + c;
                    if to_bshd {
                        out[bshd] = x[bhsd];
                    } else {
                        out[bhsd] = x[bshd];
                    }
                }
            }
        }
    }
    out
}

pub(crate) fn cpu_reference(c: &Case, q: &[f32], k: &[f32], v: &[f32], key: &NoiseKey) -> Vec<f64> {
    let [b, h, sq, d] = c.shape;
    let (params, spec) = (params_of(c), spec_of(c, key));
    let mut out = vec![0.0f64; b * h * sq * d];
    noisy_attention_f64(
        BatchedMut::contiguous(&mut out, [b, h, sq, d]).unwrap(),
        BatchedRef::contiguous(q, [b, h, sq, d]).unwrap(),
        BatchedRef::contiguous(k, [b, h, c.s_k, d]).unwrap(),
        BatchedRef::contiguous(v, [b, h, c.s_k, d]).unwrap(),
        &params,
        &spec,
        &mut vec![0.0; attention_scratch_len(d, d).unwrap()],
    )
    .unwrap();
    out
}

/// Runs one case through `run` (the GPU, or the host emulation of the kernel) and checks
/// it against the float64 CPU reference: relative error ≤ 1e-5 for `f32`, ≤ 1e-2 for the
/// 16-bit types (max-abs error over max-abs value); then, when `repeat`, that a second run
/// gives the same bits; and that PyTorch's `[B, S, H, D]` memory gives the same values.
pub(crate) fn check_case(c: Case, seed: u64, run: Runner<'_>, repeat: bool) {
    let [b, h, sq, d] = c.shape;
    let key = NoiseKey::for_replay([seed as u8; 32]);
    let (q, qb) = encode(&data(b * h * sq * d, seed), c.dtype);
    let (k, kb) = encode(&data(b * h * c.s_k * d, seed + 1), c.dtype);
    let (v, vb) = encode(&data(b * h * c.s_k * d, seed + 2), c.dtype);
    let want = cpu_reference(&c, &q, &k, &v, &key);
    let got = run(&c, &qb, &kb, &vb, &key, false);
    assert_eq!(got.len(), want.len());
    if let Some(i) = got.iter().position(|x| !x.is_finite()) {
        panic!("{:?} {:?}: output element {i} is {} (never written?)", c.dtype, c.shape, got[i]);
    }
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
    let err = got.iter().zip(&want).fold(0.0f64, |m, (g, w)| m.max((g - w).abs())) / scale;
    let tol = if c.dtype == AttnDtype::F32 { 1e-5 } else { 1e-2 };
    assert!(
        err <= tol,
        "{:?} {:?} s_k={} causal={} {:?}: relative error {err:e} > {tol:e}",
        c.dtype,
        c.shape,
        c.s_k,
        c.causal,
        c.score
    );
    // Deterministic: the same call gives the same bits, and PyTorch's [B, S, H, D] memory
    // (strided views) gives the same values as the contiguous layout.
    if repeat {
        assert_eq!(got, run(&c, &qb, &kb, &vb, &key, false));
    }
    let sh = |x: &[f32], seq| encode(&permute(x, [b, h, seq, d], true), c.dtype).1;
    let strided = run(&c, &sh(&q, sq), &sh(&k, c.s_k), &sh(&v, c.s_k), &key, true);
    assert_eq!(got, strided, "strided layout changed the result");
}

pub(crate) fn case(dtype: AttnDtype, shape: [usize; 4], s_k: usize, causal: bool) -> Case {
    Case { dtype, shape, s_k, causal, score: ScoreFn::Exp, out_sigma: None, logit_sigma: None }
}

/// The attention parameters of a case (scale `1/√D`).
pub(crate) fn params_of(c: &Case) -> AttentionParams<'static> {
    AttentionParams {
        mask: Mask { causal: c.causal, key_padding: None },
        scale: Scale::InvSqrtDim,
        score: c.score,
        ..AttentionParams::default()
    }
}

/// The noise of a case: output draw (key, 11), logit draw (key, 12).
pub(crate) fn spec_of<'a>(c: &'a Case, key: &'a NoiseKey) -> NoiseSpec<'a> {
    NoiseSpec {
        key,
        output: c.out_sigma.as_deref().map(|sigma| NoiseStream { stream: 11, sigma }),
        logits: c.logit_sigma.as_deref().map(|sigma| NoiseStream { stream: 12, sigma }),
    }
}

/// A `[b, h, seq, d]` operand of a case at `ptr`: contiguous, or in PyTorch's
/// `[B, S, H, D]` memory (`bshd`).
pub(crate) fn tensor(c: &Case, ptr: u64, seq: usize, bshd: bool) -> GpuTensor {
    let [b, h, _, d] = c.shape;
    let shape = [b, h, seq, d];
    let strides = if bshd { [seq * h * d, d, h * d, 1] } else { [h * seq * d, seq * d, d, 1] };
    GpuTensor { ptr, len: b * h * seq * d, shape, strides }
}

/// Noise off, every dtype and head dimension, with a seed each.
pub(crate) fn noise_off_cases() -> Vec<(Case, u64)> {
    let mut v = Vec::new();
    for dtype in AttnDtype::ALL {
        for d in [64, 128] {
            // Cross-attention with lengths that are not multiples of any tile.
            v.push((case(dtype, [2, 3, 100, d], 77, false), 1));
            // Causal self-attention across several key tiles.
            v.push((case(dtype, [1, 2, 130, d], 130, true), 2));
            // Causal with s_q < s_k (bottom-right: the last row sees every key)...
            v.push((case(dtype, [1, 1, 37, d], 300, true), 3));
            // ... and s_q > s_k: the first 50 rows see no key and are zero.
            v.push((case(dtype, [1, 2, 70, d], 20, true), 4));
            // A single query row (decode) against a long context.
            v.push((case(dtype, [3, 1, 1, d], 1000, false), 5));
        }
    }
    v
}

/// The cosh score, every dtype.
pub(crate) fn cosh_cases() -> Vec<(Case, u64)> {
    AttnDtype::ALL
        .iter()
        .map(|&dtype| {
            let mut c = case(dtype, [1, 2, 65, 64], 129, true);
            c.score = ScoreFn::Cosh;
            (c, 6)
        })
        .collect()
}

/// Output and logit noise on, every dtype and head dimension.
pub(crate) fn noise_on_cases() -> Vec<(Case, u64)> {
    let mut v = Vec::new();
    for dtype in AttnDtype::ALL {
        for d in [64, 128] {
            // Output noise per head, logit noise per (batch, head); odd s_k so logit noise
            // elements straddle Box–Muller pairs and ChaCha blocks.
            let mut c = case(dtype, [2, 2, 67, d], 93, false);
            c.out_sigma = Some(vec![0.05, 0.2]);
            c.logit_sigma = Some(vec![0.3, 0.0, 1.0, 0.5]);
            v.push((c, 7));
            let mut c = case(dtype, [1, 3, 90, d], 90, true);
            c.out_sigma = Some(vec![0.1; 3]);
            c.logit_sigma = Some(vec![0.25; 3]);
            v.push((c, 8));
        }
    }
    v
}
