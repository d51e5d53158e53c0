//! The exact Gram-matrix DP attention (`dpattn::gram_attention`, `docs/PRIVACY.md` §3.6).
//!
//! Expected values come from float64 code written here: the column clip (plain `√Σx²`,
//! scaled to `α·(1 − (n + 16)·2⁻⁵²)` when longer), the Gram matrix of the clipped columns,
//! the grid release `Grid::release(A_ij, z)` with `z` the discrete Gaussian of the documented
//! element's window, the softmax of the released rows, and the calibration formula of
//! `grid_release` recomputed from the analytic Gaussian multiplier.

use crate::support;

use dpattn::accounting::composition::Rho;
use dpattn::accounting::cost::Accountant;
use dpattn::accounting::ledger::{Amount, Ledger};
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::calibration::gaussian_mechanism::analytic_gaussian_sigma;
use dpattn::gram_attention::{
    GramAttentionParams, gram_attention_keyed, gram_attention_scratch_len,
};
use dpattn::sampling::{ExactSampler, KeyedStream, NoiseKey};
use dpattn::session::Draw;
use dpattn::{BatchedMut, BatchedRef, Error, PrivacyBudget};
use support::problem::{Rng, norm};

const U: f64 = 1.0 / 9_007_199_254_740_992.0;

/// The clipped columns' Gram matrix of one `n × d` problem, in plain float64.
fn clipped_gram(x: &[f64], n: usize, d: usize, alpha: f64) -> Vec<f64> {
    let target = alpha * (1.0 - (n as f64 + 16.0) * f64::EPSILON);
    let mut y = x.to_vec();
    for c in 0..d {
        let col: Vec<f64> = (0..n).map(|i| x[i * d + c]).collect();
        let f = if col.iter().any(|v| !v.is_finite()) {
            0.0
        } else {
            let nc = norm(&col);
            if nc <= target { 1.0 } else { target / nc }
        };
        for i in 0..n {
            y[i * d + c] = if f == 0.0 { 0.0 } else { x[i * d + c] * f };
        }
    }
    let mut a = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            a[i * n + j] = (0..d).map(|c| y[i * d + c] * y[j * d + c]).sum();
        }
    }
    a
}

fn release(
    x: &[f64],
    shape: [usize; 4],
    params: &GramAttentionParams,
    key: &NoiseKey,
    stream: u64,
    ledger: Option<&mut dyn Accountant>,
) -> dpattn::Result<(Vec<f64>, Vec<f64>, dpattn::gram_attention::GramReport)> {
    let [b, h, n, d] = shape;
    let (mut ob, mut op) = (vec![f64::NAN; b * h * n * n], vec![f64::NAN; b * h * n * n]);
    let report = gram_attention_keyed(
        BatchedMut::contiguous(&mut ob, [b, h, n, n]).unwrap(),
        BatchedMut::contiguous(&mut op, [b, h, n, n]).unwrap(),
        BatchedRef::contiguous(x, shape).unwrap(),
        params,
        Draw { key, stream },
        ledger,
        &mut vec![0.0; gram_attention_scratch_len(d)],
    )?;
    Ok((ob, op, report))
}

#[test]
fn release_is_the_clipped_gram_on_the_grid_plus_the_addressed_integer_noise() {
    // 2 × 3 problems of 5 × 12; columns of norm up to 3α (most clipped), one NaN column.
    let (b, h, n, d) = (2, 3, 5, 12);
    let mut r = Rng(17);
    let alpha = 0.8;
    let mut x: Vec<f64> = (0..b * h * n * d).map(|_| r.uniform() * 1.2).collect();
    x[3 * d + 7] = f64::NAN; // problem 0, row 3, column 7: becomes the zero column
    let params = GramAttentionParams::new(PrivacyBudget::new(1.0, 1e-6).unwrap(), alpha, 0.3);
    let key = NoiseKey::for_replay([31; 32]);
    let (ob, op, report) = release(&x, [b, h, n, d], &params, &key, 9, None).unwrap();
    let grid = report.grid;
    let lambda = grid.resolution();
    let draw = KeyedStream::new(&key, 9);
    let per = n * (n + 1) / 2;
    let mut skipped = 0;
    for p in 0..b * h {
        let a = clipped_gram(&x[p * n * d..(p + 1) * n * d], n, d, alpha);
        let bm = &ob[p * n * n..(p + 1) * n * n];
        let mut idx = p * per;
        for i in 0..n {
            for j in i..n {
                let got = bm[i * n + j];
                assert_eq!((got / lambda).fract(), 0.0, "problem {p} ({i}, {j}) off the grid");
                assert_eq!(bm[j * n + i], got, "symmetric");
                let frac = (a[i * n + j] / lambda).abs().fract();
                if (frac - 0.5).abs() < 1e-6 {
                    skipped += 1;
                } else {
                    let z = grid.integer_noise().sample_at(&draw, idx as u64).unwrap();
                    assert_eq!(got, grid.grid().release(a[i * n + j], z), "problem {p} ({i}, {j})");
                }
                idx += 1;
            }
        }
        // P: the row softmax of the released B.
        for i in 0..n {
            let row = &bm[i * n..(i + 1) * n];
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for j in 0..n {
                let want = (row[j] - m).exp() / s;
                assert!((op[p * n * n + i * n + j] - want).abs() < 1e-14);
            }
        }
    }
    assert!(skipped < 2, "{skipped} values at a rounding boundary");
}

#[test]
fn calibration_follows_the_documented_rule() {
    // Δ = 2α(β + 2(n + 8)uα), m = n(n + 1)/2 coordinates: Λ = 2^⌊log₂(Δ/(256√m))⌋ and
    // s = √((σ₁(ε, δ)·Δ′/Λ)² + 16) with Δ′ = Δ + 2E + √m·Λ, E = √m·γ_d·d·α² (negligible).
    for (n, d, alpha, beta, eps) in
        [(4, 16, 1.0, 5e-6, 0.09), (8, 64, 0.5, 1.0, 1.0), (3, 3, 2.0, 4.0, 4.0)]
    {
        let p = GramAttentionParams::new(PrivacyBudget::new(eps, 1e-6).unwrap(), alpha, beta);
        let g = p.grid(n, d).unwrap();
        let delta = 2.0 * alpha * (beta + 2.0 * (n as f64 + 8.0) * U * alpha);
        let m = (n * (n + 1) / 2) as f64;
        let lambda = 2f64.powi((delta / (256.0 * m.sqrt())).log2().floor() as i32);
        assert_eq!(g.resolution(), lambda, "{n} {d}");
        let e = m.sqrt() * (d as f64 * U / (1.0 - d as f64 * U)) * d as f64 * alpha * alpha;
        let sens = delta + 2.0 * e + m.sqrt() * lambda;
        assert!((g.rounded_sensitivity() / sens - 1.0).abs() < 1e-12, "{n} {d}");
        let s = ((analytic_gaussian_sigma(eps, 1e-6, 1.0).unwrap() * sens / lambda).powi(2) + 16.0)
            .sqrt();
        let got = g.integer_noise().sigma();
        assert!(got >= s * (1.0 - 1e-12) && got <= s * (1.0 + 1e-8), "s: {got} vs {s}");
        assert!(g.inflation() <= 1.0 / 256.0 + 1e-9);
    }
}

#[test]
fn one_moved_column_moves_the_released_triangle_by_at_most_two_alpha_beta() {
    // Random problems and neighbours (one column moved by exactly β, before clipping), the
    // near-worst case (parallel columns of norm α and α − β), and replacement (β = 2α).
    let (n, d, alpha) = (6, 10, 1.0);
    let mut r = Rng(5);
    let upper = |a: &[f64], b: &[f64]| -> f64 {
        let mut s = 0.0;
        for i in 0..n {
            for j in i..n {
                s += (a[i * n + j] - b[i * n + j]).powi(2);
            }
        }
        s.sqrt()
    };
    let mut worst = 0.0f64;
    for trial in 0..2000 {
        let beta = [0.01, 0.3, 2.0][trial % 3];
        let x: Vec<f64> = (0..n * d).map(|_| r.uniform() * 0.8).collect();
        let c = r.below(d);
        let dir = r.direction(n);
        let mut y = x.clone();
        for i in 0..n {
            y[i * d + c] += beta * dir[i];
        }
        let gap = upper(&clipped_gram(&x, n, d, alpha), &clipped_gram(&y, n, d, alpha));
        assert!(gap <= 2.0 * alpha * beta * (1.0 + 1e-12), "trial {trial}: {gap} > 2αβ");
        worst = worst.max(gap / (2.0 * alpha * beta));
    }
    // Near attainment: x_c = α·e, y_c = (α − β)·e, every other column zero.
    let beta = 0.01;
    let (mut x, mut y) = (vec![0.0; n * d], vec![0.0; n * d]);
    x[0] = alpha * 0.999_999;
    y[0] = (alpha - beta) * 0.999_999;
    let gap = upper(&clipped_gram(&x, n, d, alpha), &clipped_gram(&y, n, d, alpha));
    assert!(gap <= 2.0 * alpha * beta * (1.0 + 1e-12), "{gap} > 2αβ");
    assert!(gap > 2.0 * alpha * beta * 0.99, "the bound is nearly attained: {gap}");
    assert!(worst > 0.1, "random neighbours reach {worst} of the bound");
}

#[test]
fn ledgers_are_charged_the_composed_cost_and_errors_change_nothing() {
    let (b, h, n, d) = (2, 2, 3, 4);
    let x = vec![0.25; b * h * n * d];
    let params = GramAttentionParams::new(PrivacyBudget::new(0.5, 1e-6).unwrap(), 1.0, 0.5);
    let key = NoiseKey::for_replay([1; 32]);
    let mut approx =
        Ledger::new_approx(PrivacyUnit::FeatureColumn, PrivacyBudget::new(10.0, 1e-3).unwrap());
    let (_, _, rep) = release(&x, [b, h, n, d], &params, &key, 0, Some(&mut approx)).unwrap();
    assert_eq!(approx.spent(), Amount::Approx { epsilon: 2.0, delta: 4e-6 });
    assert_eq!(approx.unsafe_float_charges(), 0);
    let disjoint = GramAttentionParams { batch_elements_disjoint: true, ..params };
    let mut approx =
        Ledger::new_approx(PrivacyUnit::FeatureColumn, PrivacyBudget::new(10.0, 1e-3).unwrap());
    release(&x, [b, h, n, d], &disjoint, &key, 0, Some(&mut approx)).unwrap();
    assert_eq!(approx.spent(), Amount::Approx { epsilon: 1.0, delta: 2e-6 });
    let mut zcdp = Ledger::new_zcdp(PrivacyUnit::FeatureColumn, Rho::new(10.0).unwrap());
    release(&x, [b, h, n, d], &params, &key, 0, Some(&mut zcdp)).unwrap();
    let Amount::Zcdp { rho } = zcdp.spent() else { panic!() };
    assert!(rho >= 4.0 * rep.grid.rho() && rho <= 4.0 * rep.grid.rho() * (1.0 + 1e-12));

    // Refusals: nothing charged, nothing written.
    let bad = [
        GramAttentionParams { neighbour_distance: 2.5, ..params },
        GramAttentionParams { column_norm: 0.0, ..params },
        GramAttentionParams { budget: PrivacyBudget::new(0.5, 0.0).unwrap(), ..params },
    ];
    for p in bad {
        let mut l =
            Ledger::new_approx(PrivacyUnit::FeatureColumn, PrivacyBudget::new(10.0, 1e-3).unwrap());
        let e = release(&x, [b, h, n, d], &p, &key, 0, Some(&mut l));
        assert!(matches!(e, Err(Error::OutOfRange { .. })), "{e:?}");
        assert_eq!(l.charges(), 0);
    }
    let mut ob = vec![7.0; b * h * n * n];
    let mut op = vec![7.0; b * h * n * n];
    let mut l =
        Ledger::new_approx(PrivacyUnit::FeatureColumn, PrivacyBudget::new(10.0, 1e-3).unwrap());
    let e = gram_attention_keyed(
        BatchedMut::contiguous(&mut ob, [b, h, n, n]).unwrap(),
        BatchedMut::contiguous(&mut op, [b, h, n, n]).unwrap(),
        BatchedRef::contiguous(&x, [b, h, n, d]).unwrap(),
        &params,
        Draw { key: &key, stream: 0 },
        Some(&mut l),
        &mut [0.0; 3], // d = 4 needed
    );
    assert!(matches!(e, Err(Error::ScratchTooSmall { .. })), "{e:?}");
    assert_eq!(l.charges(), 0);
    assert!(ob.iter().chain(&op).all(|&v| v == 7.0));
    // A budget that does not fit: refused before anything is written.
    let mut tiny =
        Ledger::new_approx(PrivacyUnit::FeatureColumn, PrivacyBudget::new(1.0, 1e-3).unwrap());
    assert!(release(&x, [b, h, n, d], &params, &key, 0, Some(&mut tiny)).is_err());
    assert_eq!(tiny.charges(), 0);
    // Private NaN/∞ never refuses.
    let mut y = x.clone();
    y[5] = f64::INFINITY;
    y[6] = f64::NAN;
    assert!(release(&y, [b, h, n, d], &params, &key, 0, None).is_ok());
}
