//! The matrix normal sampler `MN(0, Σ, Ψ)` against its closed form, with fixed seeds at the
//! significance level `ALPHA = 1e-6` of `tests/support/stats.rs`.
//!
//! **The battery.** `vec(Z) ~ N(0, Ψ ⊗ Σ)`, i.e. `Cov(Z_ij, Z_kl) = Σ_ik Ψ_jl`. For every pair
//! of entries `(a, b)` of `Z` (all 21 pairs of a 3 × 2 matrix, variances included) the
//! empirical second moment `Ĉ_ab = (1/N) Σ_s x_a x_b` (the mean is known to be 0) is
//! z-tested against `K_ab = Σ_ik Ψ_jl`. Its variance is the Wishart one: for a centred
//! Gaussian vector, Isserlis' theorem gives `E[x_a² x_b²] = K_aa K_bb + 2 K_ab²`, so
//! `Var(x_a x_b) = K_aa K_bb + K_ab²` and `z = (Ĉ_ab − K_ab) / √((K_aa K_bb + K_ab²) / N)`.
//! Then a KS test of the fixed linear functional `L = Σ w_ij Z_ij` against its exact law
//! `N(0, wᵀ (Ψ ⊗ Σ) w)`.
//!
//! **Power.** A sampler whose standard deviation is 2% too large (covariance `1.02² Σ`) must
//! be rejected by the same battery at the same `N = 10^5`. Each variance entry is then off by
//! 4.04%, an expected `z = 0.0404 / √(2 / N) ≈ 9.0` on each of the six diagonal entries
//! against a critical value of 4.89, so a rejection is certain (about 4 standard deviations
//! of margin on every one of the six). The KS test alone would not see it at this `N`
//! (`sup |Φ(x/1.02) − Φ(x)| ≈ 0.0049` against a critical `D ≈ 0.0085`); the battery rejects
//! when any of its tests does.

use crate::support;

use dpattn::sampling::{
    FixedWordSampler, Gaussian, KeyedStream, MatrixGaussian, NoiseKey, PSD_TOL, SYMMETRY_TOL,
    matrix_gaussian_scratch_len,
};
use dpattn::{Error, MatMut, MatRef};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use support::stats::*;

/// Row covariance: standard deviations (1, 2, 0.5), all correlations 0.5.
fn sigma3() -> [f64; 9] {
    let s = [1.0, 2.0, 0.5];
    core::array::from_fn(|k| {
        let (i, j) = (k / 3, k % 3);
        s[i] * s[j] * if i == j { 1.0 } else { 0.5 }
    })
}

/// Column covariance: diag(1, 3).
const PSI2: [f64; 4] = [1.0, 0.0, 0.0, 3.0];

/// Weights of the linear functional for the KS test.
const W: [f64; 6] = [1.0, -1.0, 0.5, 2.0, -0.25, 1.5];

const DRAWS: usize = 100_000;

fn view(data: &[f64], n: usize) -> MatRef<'_, f64> {
    MatRef::from_row_major(data, n, n).unwrap()
}

struct Battery {
    /// (|z|, a, b) of the worst covariance entry.
    worst: (f64, usize, usize),
    ks: Outcome,
}

impl Battery {
    fn accepts(&self) -> bool {
        z_accepts(self.worst.0) && self.ks.accepts()
    }
}

/// Draws `DRAWS` samples of `mg` (n × m) from a seeded ChaCha20 and tests them against
/// `MN(0, sigma, psi)`.
fn battery(mg: &MatrixGaussian, sigma: &[f64], psi: &[f64], seed: u8) -> Battery {
    let (n, m) = (mg.rows(), mg.cols());
    let d = n * m;
    // K[a][b] with a = i·m + j (row-major naming of the entries of Z).
    let k = |a: usize, b: usize| sigma[(a / m) * n + b / m] * psi[(a % m) * m + b % m];
    let mut rng = ChaCha20Rng::from_seed([seed; 32]);
    let mut scratch = vec![0.0; mg.scratch_len()];
    let mut z = vec![0.0f64; d];
    let mut sums = vec![0.0f64; d * d];
    let mut functional = Vec::with_capacity(DRAWS);
    for _ in 0..DRAWS {
        mg.sample_into(MatMut::from_row_major(&mut z, n, m).unwrap(), &mut rng, &mut scratch)
            .unwrap();
        for a in 0..d {
            for b in a..d {
                sums[a * d + b] += z[a] * z[b];
            }
        }
        functional.push(z.iter().zip(&W).map(|(x, w)| x * w).sum::<f64>());
    }
    let nf = DRAWS as f64;
    let mut worst = (0.0, 0, 0);
    for a in 0..d {
        for b in a..d {
            let var = k(a, a) * k(b, b) + k(a, b) * k(a, b);
            let zscore = (sums[a * d + b] / nf - k(a, b)) / (var / nf).sqrt();
            if zscore.abs() > worst.0 {
                worst = (zscore.abs(), a, b);
            }
        }
    }
    let var_l: f64 =
        (0..d).flat_map(|a| (0..d).map(move |b| (a, b))).map(|(a, b)| W[a] * W[b] * k(a, b)).sum();
    let sd = var_l.sqrt();
    let ks = ks_test(&functional, |x| normal_cdf(x / sd));
    eprintln!(
        "worst |z| {:.3} at entries {:?}; KS D {:.5}, p {:.3e}",
        worst.0,
        (worst.1, worst.2),
        ks.statistic,
        ks.p_value
    );
    Battery { worst, ks }
}

#[test]
fn covariance_is_the_kronecker_product_and_a_functional_is_exactly_normal() {
    let sigma = sigma3();
    let mg = MatrixGaussian::new(view(&sigma, 3), view(&PSI2, 2)).unwrap();
    assert_eq!(mg.iid_sigma(), None);
    let b = battery(&mg, &sigma, &PSI2, 11);
    assert!(b.accepts(), "worst z {:?}, KS {:?}", b.worst, b.ks);
}

#[test]
fn a_sampler_two_percent_too_wide_is_rejected() {
    let sigma = sigma3();
    let wide: Vec<f64> = sigma.iter().map(|x| x * 1.02 * 1.02).collect();
    let mg = MatrixGaussian::new(view(&wide, 3), view(&PSI2, 2)).unwrap();
    let b = battery(&mg, &sigma, &PSI2, 11);
    assert!(!b.accepts(), "2% too wide accepted: worst z {:?}, KS {:?}", b.worst, b.ks);
    // The rejection comes from the variances, as computed in the module docs.
    assert!(b.worst.0 > z_critical() && b.worst.1 == b.worst.2, "{:?}", b.worst);
}

#[test]
fn correlated_column_covariance_and_the_iid_path_pass_the_battery() {
    let sigma = sigma3();
    let psi = [2.0, 0.6, 0.6, 1.0];
    let mg = MatrixGaussian::new(view(&sigma, 3), view(&psi, 2)).unwrap();
    let b = battery(&mg, &sigma, &psi, 12);
    assert!(b.accepts(), "worst z {:?}, KS {:?}", b.worst, b.ks);

    // Σ = 0.49 I, Ψ = I: recognised as i.i.d. with σ = 0.7.
    let s = [0.49, 0.0, 0.0, 0.0, 0.49, 0.0, 0.0, 0.0, 0.49];
    let i2 = [1.0, 0.0, 0.0, 1.0];
    let mg = MatrixGaussian::new(view(&s, 3), view(&i2, 2)).unwrap();
    assert_eq!(mg.iid_sigma(), Some(0.7));
    let b = battery(&mg, &s, &i2, 13);
    assert!(b.accepts(), "worst z {:?}, KS {:?}", b.worst, b.ks);
}

#[test]
fn singular_covariances_sample_in_their_range_with_the_right_law() {
    // Σ = v vᵀ + u uᵀ has rank 2; its null space is spanned by v × u.
    let (v, u) = ([1.0, 2.0, -1.0], [0.5, 0.0, 1.0]);
    let sigma: [f64; 9] = core::array::from_fn(|k| {
        let (i, j) = (k / 3, k % 3);
        v[i] * v[j] + u[i] * u[j]
    });
    let null = [v[1] * u[2] - v[2] * u[1], v[2] * u[0] - v[0] * u[2], v[0] * u[1] - v[1] * u[0]];
    let null_norm = null.iter().map(|x| x * x).sum::<f64>().sqrt();
    // Ψ = 1 1ᵀ has rank 1: both columns of Z are equal.
    let psi = [1.0, 1.0, 1.0, 1.0];
    let mg = MatrixGaussian::new(view(&sigma, 3), view(&psi, 2)).unwrap();

    // The factors reproduce the covariances.
    for (f, c, n) in
        [(mg.row_factor().unwrap(), &sigma[..], 3), (mg.col_factor().unwrap(), &psi[..], 2)]
    {
        for i in 0..n {
            for j in 0..n {
                let s: f64 = (0..n).map(|k| f.row(i)[k] * f.row(j)[k]).sum();
                assert!((s - c[i * n + j]).abs() < 1e-12, "({i}, {j}): {s} vs {}", c[i * n + j]);
            }
        }
    }

    let stream = KeyedStream::new(&NoiseKey::for_replay([21; 32]), 0);
    let mut scratch = vec![0.0; matrix_gaussian_scratch_len(3, 2)];
    let mut z = [0.0f64; 6];
    for s in 0..1000u64 {
        mg.sample_keyed_into(
            MatMut::from_row_major(&mut z, 3, 2).unwrap(),
            &stream,
            6 * s,
            &mut scratch,
        )
        .unwrap();
        assert!(z.iter().any(|&x| x != 0.0));
        for j in 0..2 {
            // A zero eigenvalue is only known to about ε‖Σ‖, so noise of standard deviation
            // about √(ε‖Σ‖) ≈ 3e-8 may leave the range (here the Cholesky pivot of row 2 is
            // 6.7e-16 instead of 0, and the factor's entry (2, 2) is 2.6e-8). The bound is
            // 30 times that, on the unit normal of the range.
            let off: f64 = (0..3).map(|i| null[i] * z[i * 2 + j]).sum::<f64>() / null_norm;
            assert!(off.abs() <= 1e-6, "sample {s} column {j}: {off}");
        }
        for i in 0..3 {
            assert!((z[i * 2] - z[i * 2 + 1]).abs() <= 1e-12 * z[i * 2].abs());
        }
    }
    let b = battery(&mg, &sigma, &psi, 14);
    assert!(b.accepts(), "worst z {:?}, KS {:?}", b.worst, b.ks);
}

#[test]
fn the_iid_fast_path_equals_the_general_path_on_the_same_stream() {
    let (n, m, sd) = (5, 7, 1.7);
    let iid = MatrixGaussian::iid(n, m, sd).unwrap();
    let a: Vec<f64> = (0..n * n).map(|k| if k % (n + 1) == 0 { sd } else { 0.0 }).collect();
    let b: Vec<f64> = (0..m * m).map(|k| if k % (m + 1) == 0 { 1.0 } else { 0.0 }).collect();
    let dense = MatrixGaussian::from_factors(view(&a, n), view(&b, m)).unwrap();
    assert_eq!(dense.iid_sigma(), None);
    let cov: Vec<f64> = a.iter().map(|x| x * x).collect();
    let detected = MatrixGaussian::new(view(&cov, n), view(&b, m)).unwrap();
    assert!(detected.iid_sigma().is_some());

    let stream = KeyedStream::new(&NoiseKey::for_replay([31; 32]), 5);
    let draw = |g: &MatrixGaussian, first: u64| {
        let mut z = vec![0.0f64; n * m];
        let mut scratch = vec![0.0; g.scratch_len()];
        g.sample_keyed_into(
            MatMut::from_row_major(&mut z, n, m).unwrap(),
            &stream,
            first,
            &mut scratch,
        )
        .unwrap();
        z
    };
    for first in [0u64, 1, 1000] {
        let (x, y, w) = (draw(&iid, first), draw(&dense, first), draw(&detected, first));
        assert_eq!(x, y, "iid vs explicit factors, first = {first}");
        for (p, q) in x.iter().zip(&w) {
            assert!((p - q).abs() <= 1e-12 * p.abs(), "{p} vs {q}");
        }
        // And both are σ times the standard normal draw, element by element.
        for (k, p) in x.iter().enumerate() {
            assert_eq!(
                *p,
                sd * Gaussian::STANDARD.sample_at::<f64>(&stream, first + k as u64).unwrap()
            );
        }
    }

    // Same from a CryptoRng, with strided f32 output.
    let mut buf_a = vec![0.0f32; n * 9];
    let mut buf_b = vec![0.0f32; n * 9];
    let mut scratch = vec![0.0; dense.scratch_len()];
    iid.sample_into(
        MatMut::new(&mut buf_a, n, m, 9).unwrap(),
        &mut ChaCha20Rng::from_seed([1; 32]),
        &mut [],
    )
    .unwrap();
    dense
        .sample_into(
            MatMut::new(&mut buf_b, n, m, 9).unwrap(),
            &mut ChaCha20Rng::from_seed([1; 32]),
            &mut scratch,
        )
        .unwrap();
    assert_eq!(buf_a, buf_b);
    assert!(buf_a.chunks(9).all(|r| r[m..] == [0.0, 0.0]));
}

#[test]
fn keyed_draws_are_reproducible_and_addressed_by_element() {
    let sigma = sigma3();
    let mg = MatrixGaussian::new(view(&sigma, 3), view(&PSI2, 2)).unwrap();
    let stream = KeyedStream::new(&NoiseKey::for_replay([41; 32]), 2);
    let mut scratch = vec![0.0; mg.scratch_len()];
    let mut draw = |first: u64| {
        let mut z = [0.0f64; 6];
        mg.sample_keyed_into(
            MatMut::from_row_major(&mut z, 3, 2).unwrap(),
            &stream,
            first,
            &mut scratch,
        )
        .unwrap();
        z
    };
    assert_eq!(draw(60), draw(60));
    assert_ne!(draw(60), draw(66));
    // A sample is A·N·Bᵀ of the six standard normals from `first` on: the row factor is the
    // Cholesky factor, the column factor diag(1, √3).
    let a = mg.row_factor().unwrap();
    let z = draw(60);
    let mut nz = [0.0f64; 6];
    Gaussian::STANDARD.fill_keyed(&stream, 60, &mut nz).unwrap();
    let bdiag = [1.0, 3f64.sqrt()];
    for i in 0..3 {
        for j in 0..2 {
            let want: f64 = (0..3).map(|k| a.row(i)[k] * nz[k * 2 + j] * bdiag[j]).sum();
            assert!((z[i * 2 + j] - want).abs() < 1e-12, "({i}, {j})");
        }
    }
}

#[test]
fn invalid_covariances_are_errors() {
    let ok = [1.0];
    let ok = view(&ok, 1);
    // Wrong shape.
    let rect = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0];
    assert_eq!(
        MatrixGaussian::new(ok, MatRef::from_row_major(&rect, 2, 3).unwrap()),
        Err(Error::ShapeMismatch { arg: "col_cov", axis: "cols", expected: 2, got: 3 })
    );
    assert!(matches!(
        MatrixGaussian::from_factors(MatRef::from_row_major(&rect, 3, 2).unwrap(), ok),
        Err(Error::ShapeMismatch { arg: "row_factor", .. })
    ));
    // NaN and infinity.
    let nan = [1.0, 0.0, 0.0, f64::NAN];
    assert_eq!(
        MatrixGaussian::new(view(&nan, 2), ok),
        Err(Error::NonFinite { arg: "row_cov", index: 3 })
    );
    let inf = [f64::INFINITY];
    assert!(matches!(MatrixGaussian::new(ok, view(&inf, 1)), Err(Error::NonFinite { .. })));
    // Not symmetric beyond the tolerance.
    let skew = [2.0, 1.0, 0.9, 2.0];
    match MatrixGaussian::new(view(&skew, 2), ok) {
        Err(Error::OutOfRange { name, value, .. }) => {
            assert!(name.contains("row_cov") && name.contains("asymmetry"), "{name}");
            assert!((value - 0.05).abs() < 1e-12 && value > SYMMETRY_TOL);
        }
        other => panic!("{other:?}"),
    }
    // Indefinite: eigenvalues 3, 1, −1 (relative −1/3).
    let indefinite = [1.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 2.0, 1.0];
    match MatrixGaussian::new(ok, view(&indefinite, 3)) {
        Err(Error::OutOfRange { name, value, .. }) => {
            assert!(name.contains("col_cov") && name.contains("eigenvalue"), "{name}");
            assert!((value + 1.0 / 3.0).abs() < 1e-12 && value < -PSD_TOL);
        }
        other => panic!("{other:?}"),
    }
    // Negative definite.
    let neg = [-1.0, 0.0, 0.0, -2.0];
    assert!(matches!(MatrixGaussian::new(view(&neg, 2), ok), Err(Error::OutOfRange { .. })));
    // The errors have readable messages.
    let msg = MatrixGaussian::new(ok, view(&indefinite, 3)).unwrap_err().to_string();
    assert!(msg.contains("positive semi-definite"), "{msg}");
}

#[test]
fn invalid_sampling_calls_are_errors() {
    let sigma = sigma3();
    let mg = MatrixGaussian::new(view(&sigma, 3), view(&PSI2, 2)).unwrap();
    let mut rng = ChaCha20Rng::from_seed([0; 32]);
    let mut out = [0.0f64; 6];
    let mut scratch = vec![0.0; 12];
    assert!(matches!(
        mg.sample_into(MatMut::from_row_major(&mut out, 2, 3).unwrap(), &mut rng, &mut scratch),
        Err(Error::ShapeMismatch { arg: "out", .. })
    ));
    assert_eq!(
        mg.sample_into(
            MatMut::from_row_major(&mut out, 3, 2).unwrap(),
            &mut rng,
            &mut scratch[..11]
        ),
        Err(Error::ScratchTooSmall { needed: 12, got: 11 })
    );
    assert_eq!(out, [0.0; 6]);
    let stream = KeyedStream::new(&NoiseKey::for_replay([0; 32]), 0);
    assert!(matches!(
        mg.sample_keyed_into(
            MatMut::from_row_major(&mut out, 3, 2).unwrap(),
            &stream,
            u64::MAX - 5,
            &mut scratch
        ),
        Err(Error::SizeOverflow { .. })
    ));
    assert!(
        mg.sample_keyed_into(
            MatMut::from_row_major(&mut out, 3, 2).unwrap(),
            &stream,
            u64::MAX - 6,
            &mut scratch
        )
        .is_ok()
    );
    assert!(matches!(MatrixGaussian::iid(3, 2, -1.0), Err(Error::OutOfRange { .. })));
}
