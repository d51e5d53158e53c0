//! Shared by the GPU tests (`cuda/tests/gpu_gaussian_sampling.rs`) and the host block
//! emulation (`tests/cuda-host/tests/gaussian_sampling.rs`) of the Gaussian-sampling
//! kernels: the inputs, the CPU release they are compared with, and the comparison.
//!
//! The expected values are the CPU's `gaussian_sampling_attention` with
//! `Sampler::FactorFree` and `OutOfDomain::ClipAndRidge` on the same key and stream: the
//! kernels draw the same normals and compute each sample `gᵢ` with the same operations, so
//! * with `k ≤ MIN_CHUNK_SAMPLES` (one chunk, the CPU's summation order) `B` and `P` are
//!   **bit-identical** to the CPU's;
//! * otherwise only the order in which the `k` outer products are added differs, and each
//!   of the two sums of `k` terms `g_i g_j` has error at most `(k − 1)·u·Σ|g_i g_j| ≤
//!   (k − 1)·u·k·√(B_ii·B_jj)` (Cauchy–Schwarz; `u = 2⁻⁵³`), so after the division by `k`
//!   `|ΔB_ij| ≤ 2k·u·√(B_ii·B_jj)`; `log P_ij` moves by at most twice the largest `|ΔB_il|`
//!   of its row (the row shift and the normaliser are 1-Lipschitz in `B`), plus the
//!   rounding of the row's exponentials and sum, `(2n + 16)·u`.
#![allow(dead_code)]

use dpattn_core::accounting::ledger::Ledger;
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_core::gaussian_sampling_attention::{
    Domain, GaussianSamplingParams, OutOfDomain, Sampler,
    gaussian_sampling_attention_keyed as cpu_attention, gaussian_sampling_attention_scratch_len,
};
use dpattn_core::sampling::NoiseKey;
use dpattn_core::session::Draw;
use dpattn_core::{BatchedMut, BatchedRef, Element, Layout4, PrivacyBudget, ScoreFn};
use dpattn_cuda::gaussian_sampling_attention::{MIN_CHUNK_SAMPLES, SamplingPlan};

/// Unit roundoff of `f64`.
pub(crate) const U: f64 = f64::EPSILON / 2.0;

pub(crate) fn key(seed: u8) -> NoiseKey {
    NoiseKey::for_replay(core::array::from_fn(|i| seed.wrapping_mul(31).wrapping_add(i as u8)))
}

pub(crate) fn params(k: u64, score: ScoreFn) -> GaussianSamplingParams {
    let mut p = GaussianSamplingParams::new(
        PrivacyBudget::new(0.5, 1e-6).unwrap(),
        Domain::new(0.1, 0.05, 1e-6).unwrap(),
        k,
    );
    p.sampler = Sampler::FactorFree;
    p.out_of_domain = OutOfDomain::ClipAndRidge;
    p.score = score;
    p.unsafe_float() // paper 000 has no floating-point-safe form
}

pub(crate) fn ledger() -> Ledger {
    Ledger::new_approx(PrivacyUnit::FeatureColumn, PrivacyBudget::new(1000.0, 0.5).unwrap())
}

/// `X` in a `[batch, n, heads, d]` buffer (the usual projection output) viewed as
/// `[batch, heads, n, d]`, or contiguous; entries of both signs, some columns longer than
/// `α = 0.1` (clipped), all rounded to `T`.
pub(crate) fn input<T: Element + From<f32>>(
    shape: [usize; 4],
    interleaved: bool,
) -> (Vec<T>, Layout4) {
    let [batch, heads, n, d] = shape;
    let layout = if interleaved {
        Layout4::new(shape, [n * heads * d, d, heads * d, 1]).unwrap()
    } else {
        Layout4::contiguous(shape).unwrap()
    };
    let mut x = vec![T::from(0.0); layout.required_len()];
    for b in 0..batch {
        for h in 0..heads {
            for r in 0..n {
                for c in 0..d {
                    let i = layout.logical_index(b, h, r, c);
                    let v = ((i.wrapping_mul(2_654_435_761) % 2001) as f32 / 1000.0 - 1.0) * 0.03;
                    let v = if c % 5 == 0 { v * 8.0 } else { v };
                    x[layout.offset(b, h, r, c)] = T::from(v);
                }
            }
        }
    }
    (x, layout)
}

pub(crate) struct Release {
    pub(crate) b: Vec<f64>,
    pub(crate) p: Vec<f64>,
}

pub(crate) fn cpu_release<T: Element>(
    x: &[T],
    layout: Layout4,
    params: &GaussianSamplingParams,
    key: &NoiseKey,
    stream_id: u64,
    ledger: &mut Ledger,
) -> Release {
    let [batch, heads, n, d] = layout.shape();
    let len = batch * heads * n * n;
    let (mut b, mut p) = (vec![0.0; len], vec![0.0; len]);
    let mut scratch =
        vec![
            0.0;
            gaussian_sampling_attention_scratch_len(n, d, params.sampler, params.out_of_domain)
                .unwrap()
        ];
    cpu_attention(
        BatchedMut::contiguous(&mut b, [batch, heads, n, n]).unwrap(),
        BatchedMut::contiguous(&mut p, [batch, heads, n, n]).unwrap(),
        BatchedRef::new(x, layout).unwrap(),
        params,
        Draw { key, stream: stream_id },
        Some(ledger),
        &mut scratch,
    )
    .unwrap();
    Release { b, p }
}

/// Asserts the GPU release equals the CPU's: bit for bit with one chunk, within the
/// reassociation bound of the module docs otherwise. Returns the largest
/// `|ΔB_ij| / √(B_ii·B_jj)` seen.
pub(crate) fn compare(gpu: &Release, cpu: &Release, shape: [usize; 4], k: u64, what: &str) -> f64 {
    let [batch, heads, n, _] = shape;
    let one_chunk = SamplingPlan::new(shape, k).unwrap().chunks == 1;
    assert_eq!(one_chunk, k <= MIN_CHUNK_SAMPLES);
    let tol_b = 2.0 * k as f64 * U;
    let mut worst = 0.0f64;
    for prob in 0..batch * heads {
        let at = |i: usize, j: usize| prob * n * n + i * n + j;
        for i in 0..n {
            let mut row_db = 0.0f64;
            for j in 0..n {
                let (g, c) = (gpu.b[at(i, j)], cpu.b[at(i, j)]);
                assert!(g.is_finite() && g == gpu.b[at(j, i)], "{what}: B not symmetric/finite");
                if one_chunk {
                    assert_eq!(g.to_bits(), c.to_bits(), "{what}: B[{prob}][{i}][{j}] {g} vs {c}");
                }
                let scale = (cpu.b[at(i, i)] * cpu.b[at(j, j)]).sqrt();
                let rel = (g - c).abs() / scale;
                assert!(
                    rel <= tol_b,
                    "{what}: B[{prob}][{i}][{j}] {g} vs {c} ({rel:e} > {tol_b:e})"
                );
                worst = worst.max(rel);
                row_db = row_db.max((g - c).abs());
            }
            let tol_p = 2.0 * row_db + (2 * n + 16) as f64 * U;
            let mut sum = 0.0;
            for j in 0..n {
                let (g, c) = (gpu.p[at(i, j)], cpu.p[at(i, j)]);
                if one_chunk {
                    assert_eq!(g.to_bits(), c.to_bits(), "{what}: P[{prob}][{i}][{j}] {g} vs {c}");
                }
                assert!(
                    (g - c).abs() <= tol_p * c,
                    "{what}: P[{prob}][{i}][{j}] {g} vs {c} (tol {tol_p:e})"
                );
                sum += g;
            }
            assert!((sum - 1.0).abs() < 1e-12, "{what}: row {i} of P sums to {sum}");
        }
    }
    worst
}
