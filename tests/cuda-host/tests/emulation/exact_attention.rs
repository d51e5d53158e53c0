//! The GPU's exact output-perturbation release run on the host: the `f64` variant of the
//! fused `f32` attention kernel (`flash_attention_f32.cu` with `DP_F64`, by
//! `attention_emulation.cpp` on the parameter block the crate launches) and then
//! `dp_grid_release` reading its `f64` output (`grid_emulation.cpp`).
//!
//! Checked without a GPU: the `f64` kernel's output is within the computation-error bound
//! of [`GPU_F64`] of an independent `f64` attention (row by row, softmax and cosh, causal
//! and not, several tile counts) — and far inside the `f32` kernel's error; and the release
//! equals `Grid::release(attention, Z)` with the CPU's grids for that model and `Z` the
//! CPU's `DiscreteGaussian::sample_at` of element `((b·H + h)·S_q + i)·D + c`.
#![allow(unsafe_code)]

use dpattn_core::attention::AttentionParams;
use dpattn_core::grid_release::GridFormat;
use dpattn_core::output_perturbation::{
    AttentionErrorModel, OutputPerturbationParams, attention_error_bound, output_perturbation_grid,
};
use dpattn_core::sampling::{ExactSampler, KeyedStream, NoiseKey};
use dpattn_core::{BatchedRef, Kernel, Mask, NoiseMode, PrivacyBudget, Scale, ScoreFn};
use dpattn_cuda::attention::{AttnDtype, GpuTensor, launch_image};
use dpattn_cuda::grid_release::GridGroup;
use dpattn_cuda::output_perturbation::GPU_F64;
use dpattn_cuda_host_check as host;

/// `f32` values in a 16-byte aligned allocation (the kernels copy rows in 16-byte chunks).
fn aligned(v: &[f32]) -> Vec<u128> {
    let mut a = vec![0u128; v.len().div_ceil(4)];
    // SAFETY: `a` has room for `v.len()` f32 (4 per u128); plain bytes.
    unsafe { core::ptr::copy_nonoverlapping(v.as_ptr(), a.as_mut_ptr().cast::<f32>(), v.len()) };
    a
}

/// Deterministic values in `[-1, 1)`.
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Rows scaled into the ball of radius `r` (so the release's clamp would leave them).
fn in_ball(mut v: Vec<f32>, d: usize, r: f32) -> Vec<f32> {
    for row in v.chunks_mut(d) {
        let n = row.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt() as f32;
        let f = 0.999 * r / n.max(r);
        row.iter_mut().for_each(|x| *x *= f);
    }
    v
}

struct Case {
    shape: [usize; 4], // [batch, heads, s_q, d]
    s_k: usize,
    causal: bool,
    score: ScoreFn,
}

/// The emulated `f64` kernel's output, `[b, h, s_q, d]` contiguous.
fn run_f64_kernel(
    c: &Case,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    params: &AttentionParams<'_>,
) -> Vec<f64> {
    let [b, h, sq, d] = c.shape;
    let (qa, ka, va) = (aligned(q), aligned(k), aligned(v));
    let mut out = vec![f64::NAN; b * h * sq * d + 2];
    // 16-byte aligned start for the f64 output.
    let off = (out.as_ptr() as usize % 16) / 8;
    let optr = out[off..].as_mut_ptr() as u64;
    let t = |ptr: u64, seq| GpuTensor::contiguous(ptr, [b, h, seq, d]).unwrap();
    let image = launch_image(
        AttnDtype::F32,
        &t(optr, sq),
        &t(qa.as_ptr() as u64, sq),
        &t(ka.as_ptr() as u64, c.s_k),
        &t(va.as_ptr() as u64, c.s_k),
        params,
        None,
    )
    .unwrap();
    let bytes = image.params_bytes([0, 0]);
    let entry = if d == 64 { host::dpck_attention_f64_64 } else { host::dpck_attention_f64_128 };
    let (gx, gy, _) = image.grid;
    // SAFETY: the parameter block's pointers address the live buffers above (q, k, v of the
    // planned lengths, b·h·s_q·d f64 at `optr`); the kernel writes only rows below s_q.
    unsafe { entry(bytes.as_ptr(), gx, gy) };
    out[off..off + b * h * sq * d].to_vec()
}

/// An independent `f64` attention (two passes: max, then weights and sums), row by row.
fn reference(c: &Case, q: &[f32], k: &[f32], v: &[f32], scale: f64) -> Vec<f64> {
    let [b, h, sq, d] = c.shape;
    let mut out = vec![0.0; b * h * sq * d];
    for bh in 0..b * h {
        for i in 0..sq {
            let qi = &q[(bh * sq + i) * d..][..d];
            let end = if c.causal { (i + 1 + c.s_k).saturating_sub(sq).min(c.s_k) } else { c.s_k };
            if end == 0 {
                continue;
            }
            let logits: Vec<f64> = (0..end)
                .map(|j| {
                    let kj = &k[(bh * c.s_k + j) * d..][..d];
                    scale
                        * qi.iter().zip(kj).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>()
                })
                .collect();
            let w: Vec<f64> = match c.score {
                ScoreFn::Exp => {
                    let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    logits.iter().map(|x| (x - m).exp()).collect()
                }
                ScoreFn::Cosh => {
                    let m = logits.iter().map(|x| x.abs()).fold(0.0, f64::max);
                    logits.iter().map(|x| (x.abs() - m).exp() + (-x.abs() - m).exp()).collect()
                }
            };
            let l: f64 = w.iter().sum();
            for cc in 0..d {
                let acc: f64 =
                    (0..end).map(|j| w[j] * f64::from(v[(bh * c.s_k + j) * d + cc])).sum();
                out[(bh * sq + i) * d + cc] = acc / l;
            }
        }
    }
    out
}

fn params_for(c: &Case) -> AttentionParams<'static> {
    AttentionParams {
        mask: Mask { causal: c.causal, key_padding: None },
        scale: Scale::InvSqrtDim,
        score: c.score,
        ..AttentionParams::default()
    }
}

#[test]
fn the_f64_kernel_is_within_its_error_bound() {
    let cases = [
        Case { shape: [1, 2, 33, 64], s_k: 200, causal: false, score: ScoreFn::Exp },
        Case { shape: [2, 1, 40, 128], s_k: 70, causal: true, score: ScoreFn::Exp },
        Case { shape: [1, 1, 32, 64], s_k: 1, causal: false, score: ScoreFn::Cosh },
        Case { shape: [1, 1, 20, 64], s_k: 97, causal: false, score: ScoreFn::Cosh },
    ];
    let (rk, rv) = (3.0f32, 2.0f32);
    for (ci, c) in cases.iter().enumerate() {
        let [b, h, sq, d] = c.shape;
        let q = data(b * h * sq * d, 10 + ci as u64);
        let k = in_ball(data(b * h * c.s_k * d, 20 + ci as u64), d, rk);
        let v = in_ball(data(b * h * c.s_k * d, 30 + ci as u64), d, rv);
        let p = params_for(c);
        let got = run_f64_kernel(c, &q, &k, &v, &p);
        let scale = 1.0 / (d as f64).sqrt();
        let want = reference(c, &q, &k, &v, scale);
        for (r, (g, w)) in got.chunks(d).zip(want.chunks(d)).enumerate() {
            let qn = q[r * d..][..d].iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            let a = scale * qn * f64::from(rk);
            // The model's bound for this row, plus the reference's own (at most the CPU
            // kernel's): both computations are within their bounds of the exact attention.
            let bound = |m: &AttentionErrorModel| {
                attention_error_bound(m, 1, d, c.s_k, a, f64::from(rv)).unwrap()
            };
            let e = bound(&GPU_F64) + bound(&AttentionErrorModel::CPU_F64);
            let dist = g.iter().zip(w).map(|(x, y)| (x - y).powi(2)).sum::<f64>().sqrt();
            assert!(g.iter().all(|x| x.is_finite()), "case {ci} row {r}: not written");
            assert!(dist <= e, "case {ci} row {r}: |gpu − ref| = {dist:e} > {e:e}");
            // And it is an f64 computation: far below the f32 unit roundoff.
            assert!(dist <= 1e-12 * f64::from(rv), "case {ci} row {r}: {dist:e}");
        }
    }
}

#[test]
fn the_exact_release_rounds_the_f64_attention_and_adds_the_cpus_integers() {
    let c = Case { shape: [3, 2, 40, 64], s_k: 150, causal: false, score: ScoreFn::Exp };
    let [b, h, sq, d] = c.shape;
    let q = data(b * h * sq * d, 1);
    let k = in_ball(data(b * h * c.s_k * d, 2), d, 1.5);
    let v = in_ball(data(b * h * c.s_k * d, 3), d, 2.0);
    let op = OutputPerturbationParams {
        key_norm: 1.5,
        value_norm: 2.0,
        budget: PrivacyBudget::new(1.0, 1e-6).unwrap(),
        scale: Scale::InvSqrtDim,
        score: ScoreFn::Exp,
        key_padding: None,
        kernel: Kernel::Auto,
        noise_mode: NoiseMode::Exact,
    };
    let attn =
        AttentionParams { mask: Mask { causal: false, key_padding: None }, ..params_for(&c) };
    let noiseless = run_f64_kernel(&c, &q, &k, &v, &attn);
    // The grids the GPU path uses: the CPU's calibration for the GPU kernel's error model.
    let qv = BatchedRef::contiguous(&q, c.shape).unwrap();
    let grids: Vec<_> = (0..b)
        .map(|bi| {
            output_perturbation_grid(qv, &op, c.s_k, d, &GPU_F64, GridFormat::F32, bi)
                .unwrap()
                .unwrap()
        })
        .collect();
    let groups: Vec<GridGroup> = grids.iter().map(GridGroup::gaussian).collect();
    let key = NoiseKey::for_replay([0x5a; 32]);
    let draw = KeyedStream::new(&key, 9);
    // The release into a [B, S, H, D] f32 buffer (strided view of [B, H, S, D]).
    let (sh, ss) = (d as u64, (h * d) as u64);
    let shape = [b as u64, h as u64, sq as u64, d as u64];
    let strides = [sq as u64 * ss, sh, ss, 1];
    let mut out = vec![f32::NAN; b * sq * h * d];
    let mut status = [0u64; 2];
    // SAFETY: `out` holds the strided tensor, `groups` one GridGroup per batch element,
    // `noiseless` one f64 per logical element, `status` two u64, the key 8 words.
    unsafe {
        host::dpck_grid_release_kernel(
            1,
            out.as_mut_ptr().cast(),
            shape.as_ptr(),
            strides.as_ptr(),
            (b * h * sq * d) as u64,
            0,
            (h * sq * d) as u64,
            groups.as_ptr().cast(),
            draw.key_words().as_ptr(),
            9,
            2,
            status.as_mut_ptr(),
            noiseless.as_ptr(),
        )
    };
    assert_eq!(status, [0, u64::MAX]);
    let exact = reference(&c, &q, &k, &v, 1.0 / (d as f64).sqrt());
    let mut same = 0;
    for bi in 0..b {
        let g = &grids[bi];
        let lambda = g.resolution();
        for hi in 0..h {
            for i in 0..sq {
                for cc in 0..d {
                    let e = (((bi * h + hi) * sq + i) * d + cc) as u64;
                    let z = g.integer_noise().sample_at(&draw, e).unwrap();
                    let got = f64::from(out[bi * sq * h * d + i * h * d + hi * d + cc]);
                    // Exactly the grid release of the emulated kernel's value ...
                    let want = g.grid().release(noiseless[e as usize], z);
                    assert_eq!(got.to_bits(), want.to_bits(), "element {e}");
                    // ... and of an independent f64 attention, up to one grid step where the
                    // two computations straddle a rounding boundary.
                    let indep = g.grid().release(exact[e as usize], z);
                    assert!((got - indep).abs() <= lambda, "element {e}: {got:e} vs {indep:e}");
                    same += usize::from(got == indep);
                }
            }
        }
    }
    assert!(same * 1000 >= 999 * b * h * sq * d, "{same} of {} equal", b * h * sq * d);
}
