//! DP-Forward (`dpattn::dp_forward`, paper 003) in the default exact mode: the clipped
//! hidden states released on a public grid `Λ·ℤ` with exact discrete Gaussian noise
//! (`docs/PRIVACY.md` §6.5, `docs/RANDOMNESS.md` §5.4).
//!
//! Expected values come from the documented formulas, recomputed here:
//! * the calibration: `S` = `2C`, `2C√n` or `2C√c`; `d` = the coordinates one neighbour
//!   changes; `Λ` the largest power of two with `√d·Λ ≤ S/256`, raised until
//!   `M/Λ + 12s ≤ I` (`M` = `C`, or `C + 12·max r·max c` for diagonal factors);
//!   `S′ = S + √d·Λ`, `σ_c = floor·S′/S`, `s = √((σ_c/Λ)² + 16)`, scaled noise
//!   `√((f·σ_c/Λ)² + 16)` with `f = max(1, r_i·c_j/floor)`;
//! * the release: `(round(ĉ/Λ) + z)·Λ` with `round` half away from zero and `z` the exact
//!   sampler's draw at window element `first + r·dim + j`;
//! * matrix factors: the extra noise has covariance `Σ⊗Ψ − floor²·I`, and whitening it with
//!   this test's own eigendecompositions gives back `±N₂` at elements
//!   `8·(first + rows·dim) + r·dim + j` of the standard normal draw;
//! * accuracy at the quickstart's sizes: the exact noise scale `√(σ_c² + 16Λ²)` against the
//!   float floor, and the mean relative error of 1000 releases per mode.
//!
//! Statistical checks use fixed keys (deterministic) at the toolkit's `ALPHA = 1e-6`.

use crate::support;

use dpattn::accounting::composition::Rho;
use dpattn::accounting::ledger::Ledger;
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::dp_forward::{
    CertifiedMatrixGaussian, ClipMode, ClipRegion, DpForwardParams, Neighbours, NoiseFactors,
    NoisePosition, SensitivityRule, clip_hidden, dp_forward_keyed, dp_forward_scratch_len,
};
use dpattn::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};
use dpattn::sampling::{
    ExactSampler, FixedWordSampler, Gaussian, KeyedStream, MatrixGaussian, NoiseFloat, NoiseKey,
};
use dpattn::session::Draw;
use dpattn::{Error, MatMut, MatRef, NoiseMode, PrivacyBudget};
use nalgebra::{DMatrix, SymmetricEigen};
use support::problem::Rng;
use support::stats::z_accepts;

fn rel(a: f64, b: f64) -> f64 {
    ((a - b) / b).abs()
}

fn key(b: u8) -> NoiseKey {
    NoiseKey::for_replay([b; 32])
}

#[allow(clippy::too_many_arguments)]
fn params(
    epsilon: f64,
    c: f64,
    region: ClipRegion,
    neighbours: Neighbours,
    position: NoisePosition,
    tokens: usize,
    dim: usize,
) -> DpForwardParams {
    DpForwardParams {
        budget: PrivacyBudget::new(epsilon, 1e-5).unwrap(),
        releases: 1,
        clip_norm: c,
        region,
        mode: ClipMode::Clip,
        neighbours,
        position,
        tokens,
        dim,
        rule: SensitivityRule::Derived,
        noise_mode: NoiseMode::Exact,
    }
}

/// Frobenius clipping, sequence neighbours at the embedding.
fn seq(epsilon: f64, c: f64, tokens: usize, dim: usize) -> DpForwardParams {
    let (r, n) = (ClipRegion::Frobenius, Neighbours::Sequence);
    params(epsilon, c, r, n, NoisePosition::Embedding, tokens, dim)
}

/// The documented calibration, recomputed.
#[derive(Debug, Clone, Copy)]
struct Expected {
    lambda: f64,
    s_prime: f64,
    sigma_c: f64,
    s: f64,
    /// `Λ` of the accuracy rule alone.
    accuracy_lambda: f64,
}

fn expected(s_true: f64, d: u64, bound: f64, floor: f64, index_bound: f64) -> Expected {
    let sd = (d as f64).sqrt();
    let target = s_true / 256.0;
    let mut k = (target / sd).log2().floor() as i32;
    while 2f64.powi(k) * sd > target {
        k -= 1;
    }
    while 2f64.powi(k + 1) * sd <= target {
        k += 1;
    }
    let accuracy_lambda = 2f64.powi(k);
    loop {
        let lambda = 2f64.powi(k);
        let s_prime = s_true + sd * lambda;
        let sigma_c = floor * s_prime / s_true;
        let s = ((sigma_c / lambda).powi(2) + 16.0).sqrt();
        if bound / lambda + 12.0 * s <= index_bound && s <= 2f64.powi(31) {
            return Expected { lambda, s_prime, sigma_c, s, accuracy_lambda };
        }
        k += 1;
    }
}

fn index_bound(format: GridFormat) -> f64 {
    if format == GridFormat::F64 { 2f64.powi(53) - 1.0 } else { 2f64.powi(24) - 1.0 }
}

/// Checks a grid against the recomputed calibration.
fn assert_calibration(g: &GaussianGrid, e: &Expected, what: &str) {
    assert_eq!(g.resolution(), e.lambda, "{what}: Λ");
    let sp = g.rounded_sensitivity();
    assert!(sp >= e.s_prime * (1.0 - 1e-15) && rel(sp, e.s_prime) < 1e-14, "{what}: S′ {sp}");
    let sc = g.continuous_sigma();
    assert!(sc >= e.sigma_c * (1.0 - 1e-15) && rel(sc, e.sigma_c) < 1e-13, "{what}: σ_c {sc}");
    let s = g.integer_noise().sigma();
    assert!(s >= e.s * (1.0 - 1e-14) && s <= e.s * (1.0 + 1e-8), "{what}: s {s} vs {}", e.s);
}

// ---------------------------------------------------------------------------------------
// Calibration

#[test]
fn exact_grid_matches_the_documented_calibration() {
    let emb = NoisePosition::Embedding;
    let (frob, rows) = (ClipRegion::Frobenius, ClipRegion::Rows);
    let code = DpForwardParams {
        rule: SensitivityRule::ReleasedCode,
        ..params(8.0, 1.0, frob, Neighbours::Sequence, NoisePosition::Pooled, 1, 768)
    };
    // (params, true S, d): S and d from the module table, independently of the library.
    let cases: Vec<(DpForwardParams, f64, u64, &str)> = vec![
        (seq(1.0, 0.5, 128, 768), 1.0, 128 * 768, "Frobenius, sequence, 128 x 768"),
        (seq(8.0, 1.0, 1, 768), 2.0, 768, "Frobenius, sequence, 1 x 768"),
        (params(1.0, 0.25, rows, Neighbours::Sequence, emb, 16, 64), 2.0, 16 * 64, "Rows, seq"),
        (
            params(2.0, 1.0, rows, Neighbours::Tokens(3), emb, 8, 32),
            2.0 * 3f64.sqrt(),
            3 * 32,
            "Rows, Tokens(3): c·dim coordinates",
        ),
        (
            params(2.0, 1.0, rows, Neighbours::Tokens(20), emb, 8, 32),
            2.0 * 8f64.sqrt(),
            8 * 32,
            "Rows, Tokens(20) > n",
        ),
        (
            params(2.0, 1.0, frob, Neighbours::Tokens(1), emb, 8, 32),
            2.0,
            8 * 32,
            "Frobenius, Tokens(1): the whole sequence moves",
        ),
        (DpForwardParams { releases: 3, ..seq(1.0, 0.5, 4, 8) }, 1.0, 32, "k = 3"),
        (code, 2.0, 768, "released code: Δ = the true S"),
        (seq(0.01, 1.0, 128, 768), 2.0, 128 * 768, "ε = 0.01: representability"),
    ];
    let mut representability_won = [false; 2];
    for (p, s_true, d, what) in cases {
        assert!(rel(p.sensitivity().unwrap(), s_true) < 1e-15, "{what}: S");
        let floor = p.noise_floor().unwrap();
        for (fi, format) in [GridFormat::F64, GridFormat::F32].into_iter().enumerate() {
            let g = p.exact_grid(format).unwrap();
            let e = expected(s_true, d, p.clip_norm, floor, index_bound(format));
            assert_calibration(&g, &e, &format!("{what} {format:?}"));
            // The exact release keeps the float calibration's S/floor ratio.
            let ratio = g.rounded_sensitivity() / g.continuous_sigma();
            assert!(rel(ratio, s_true / floor) < 1e-13, "{what}: S′/σ_c {ratio}");
            if e.lambda == e.accuracy_lambda {
                assert!(g.inflation() <= 1.0 / 256.0 + 1e-15, "{what}: inflation");
            } else {
                representability_won[fi] = true;
                assert!(e.lambda > e.accuracy_lambda);
            }
        }
    }
    // The ε = 0.01 case at f32 is held back by the format's 2^24 indices, not at f64.
    assert_eq!(representability_won, [false, true]);
}

// ---------------------------------------------------------------------------------------
// The release: grid value plus the windowed integer noise

/// `(round(c/Λ) + z)·Λ` with `round` half away from zero.
fn on_grid(c: f64, z: i64, lambda: f64) -> f64 {
    ((c / lambda).round() + z as f64) * lambda
}

/// Releases `x` (rows × dim at `stride`, T) and returns it with the report, the clipped
/// input (the library's clip on a copy) and the rows.
#[allow(clippy::too_many_arguments)]
fn run<T: NoiseFloat>(
    x: &[f64],
    rows: usize,
    stride: usize,
    p: &DpForwardParams,
    f: &NoiseFactors<'_>,
    k: &NoiseKey,
    stream: u64,
    first: u64,
) -> (Vec<T>, dpattn::dp_forward::DpForwardReport, Vec<T>) {
    let mut y: Vec<T> = x.iter().map(|&v| T::from_f64(v)).collect();
    let mut clipped = y.clone();
    clip_hidden(
        MatMut::new(&mut clipped, rows, p.dim, stride).unwrap(),
        p.tokens,
        p.region,
        p.mode,
        p.clip_norm,
    )
    .unwrap();
    let mut scratch = vec![0.0; dp_forward_scratch_len(f, p.tokens, p.dim)];
    let rep = dp_forward_keyed(
        MatMut::new(&mut y, rows, p.dim, stride).unwrap(),
        p,
        f,
        Draw { key: k, stream },
        first,
        None,
        &mut scratch,
    )
    .unwrap();
    (y, rep, clipped)
}

fn check_addressing<T: NoiseFloat>(name: &str) {
    const PAD: f64 = -1234.5;
    let k = key(5);
    let mut rng = Rng(0xe7ac7);
    for (tokens, dim) in [(3usize, 5usize), (2, 70)] {
        let p = seq(2.0, 1.0, tokens, dim);
        let stride = dim + 3;
        let rows = 3 * tokens;
        let format = if core::mem::size_of::<T>() == 8 { GridFormat::F64 } else { GridFormat::F32 };
        let g = p.exact_grid(format).unwrap();
        let lambda = g.resolution();
        // Sequence 0 inside the ball, 1 and 2 clipped; padding between rows.
        let mut x = vec![PAD; rows * stride];
        for r in 0..rows {
            let scale = if r < tokens { 0.05 } else { 1.0 };
            for j in 0..dim {
                x[r * stride + j] = rng.normal() * scale;
            }
        }
        let n = (rows * dim) as u64;
        for stream in [0u64, 9] {
            let s = KeyedStream::new(&k, stream);
            for first in [0u64, 17, (1 << 40) - n] {
                let (y, rep, c) =
                    run::<T>(&x, rows, stride, &p, &NoiseFactors::Iid, &k, stream, first);
                assert_eq!((rep.noise_mode, rep.resolution), (NoiseMode::Exact, Some(lambda)));
                assert_eq!(rep.scaled, 2, "{name}: sequences 1 and 2 are clipped");
                for r in 0..rows {
                    for j in 0..stride {
                        let v = y[r * stride + j].to_f64();
                        if j >= dim {
                            assert_eq!(v.to_bits(), T::from_f64(PAD).to_f64().to_bits(), "padding");
                            continue;
                        }
                        let e = first + (r * dim + j) as u64;
                        let z = g.integer_noise().sample_at(&s, e).unwrap();
                        let want = on_grid(c[r * stride + j].to_f64(), z, lambda);
                        assert_eq!(v, want, "{name} dim {dim} first {first} ({r}, {j})");
                        // Exactly representable in T (the conversion lost nothing).
                        assert_eq!(T::from_f64(want).to_f64(), want);
                        assert_eq!((v / lambda).fract(), 0.0);
                    }
                }
                // A batch equals its sequences released alone at shifted offsets.
                for b in 0..3 {
                    let seq_x = &x[b * tokens * stride..(b + 1) * tokens * stride];
                    let at = first + (b * tokens * dim) as u64;
                    let (one, _, _) =
                        run::<T>(seq_x, tokens, stride, &p, &NoiseFactors::Iid, &k, stream, at);
                    let whole = &y[b * tokens * stride..(b + 1) * tokens * stride];
                    assert!(
                        one.iter()
                            .zip(whole)
                            .all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits())
                    );
                }
            }
        }
    }
}

/// Entry `(r, j)` of an exact i.i.d. release is `(round(ĉ/Λ) + z)·Λ` with `z` the discrete
/// Gaussian's draw at window element `first + r·dim + j`, exactly representable in the
/// hidden states' type, for a batch of 3 with a row stride (padding untouched), across a
/// 64-element chunk (dim 70), at the last admissible `first`, two streams.
#[test]
fn exact_release_is_the_grid_value_plus_the_windowed_integer_noise() {
    check_addressing::<f64>("f64");
    check_addressing::<f32>("f32");
}

/// Diagonal factors: element `(r, j)` draws `N_ℤ(0, s_ij²)` with
/// `s_ij = √((f·σ_c/Λ)² + 16)`, `f = max(1, r_i·c_j/floor)`, on the grid calibrated with the
/// value bound `C + 12·max r·max c`.
#[test]
fn diagonal_noise_is_scaled_on_the_same_grid() {
    let (tokens, dim, batch) = (2usize, 70usize, 2usize);
    let p = seq(2.0, 1.0, tokens, dim);
    let floor = p.noise_floor().unwrap();
    let row_std = [floor, 2.5 * floor];
    let col_std: Vec<f64> =
        (0..dim).map(|j| if j % 7 == 0 { 1.0 } else { 1.0 + j as f64 / 10.0 }).collect();
    let f = NoiseFactors::Diagonal { row_std: &row_std, col_std: &col_std };
    let (k, stream, first) = (key(8), 4u64, 1000u64);
    let s = KeyedStream::new(&k, stream);
    let rows = tokens * batch;
    let mut rng = Rng(0xd1a9);
    let x: Vec<f64> = (0..rows * dim).map(|_| rng.normal() * 0.01).collect();
    for format in [GridFormat::F64, GridFormat::F32] {
        let bound = 1.0 + 12.0 * (2.5 * floor) * (1.0 + (dim - 1) as f64 / 10.0);
        let e = expected(2.0, (tokens * dim) as u64, bound, floor, index_bound(format));
        // The documented grid, through the public grid API.
        let spec = GaussianGridSpec {
            l2_sensitivity: 2.0,
            dimension: (tokens * dim) as u64,
            computation_error: 0.0,
            value_bound: bound,
            format,
        };
        let g = GaussianGrid::calibrate(&spec, floor / 2.0).unwrap();
        assert_calibration(&g, &e, &format!("diagonal {format:?}"));
        let (y, rep, c): (Vec<f64>, _, Vec<f64>) = if format == GridFormat::F64 {
            run::<f64>(&x, rows, dim, &p, &f, &k, stream, first)
        } else {
            let (y, rep, c) = run::<f32>(&x, rows, dim, &p, &f, &k, stream, first);
            (
                y.iter().map(|&v| f64::from(v)).collect(),
                rep,
                c.iter().map(|&v| f64::from(v)).collect(),
            )
        };
        assert_eq!(rep.resolution, Some(e.lambda), "{format:?}");
        let lambda = e.lambda;
        for r in 0..rows {
            for j in 0..dim {
                let factor = (row_std[r % tokens] * col_std[j] / floor).max(1.0);
                let noise = g.scaled_noise(factor).unwrap();
                let want_s = ((factor * e.sigma_c / lambda).powi(2) + 16.0).sqrt();
                let got_s = noise.sigma(); // rounded up to the sampler's rational
                assert!(
                    got_s >= want_s * (1.0 - 1e-14) && got_s <= want_s * (1.0 + 1e-8),
                    "({r}, {j}): s {got_s}"
                );
                if factor == 1.0 {
                    assert_eq!(noise, *g.integer_noise());
                }
                let z = noise.sample_at(&s, first + (r * dim + j) as u64).unwrap();
                assert_eq!(
                    y[r * dim + j],
                    on_grid(c[r * dim + j], z, lambda),
                    "{format:?} ({r}, {j})"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Matrix factors

fn sym_eigen(m: &[f64], n: usize) -> (DMatrix<f64>, Vec<f64>) {
    let e = SymmetricEigen::new(DMatrix::from_row_slice(n, n, m));
    (e.eigenvectors, e.eigenvalues.iter().copied().collect())
}

/// Matrix factors: the output is the i.i.d. grid release at the floor (recomputed from the
/// windows) plus data-independent float noise `R` with covariance `Σ⊗Ψ − floor²·I` (pairwise
/// second moments with Isserlis variances over 20 000 sequences; power: `Σ⊗Ψ` itself is
/// rejected), and whitening `R` with this test's eigendecompositions gives `±N₂` at the
/// documented elements `8·(first + rows·dim) + r·dim + j`.
#[test]
fn matrix_factors_add_data_independent_noise_to_the_grid_release() {
    let (n, d) = (3usize, 2usize);
    let p = seq(2.0, 1.0, n, d);
    let floor = p.noise_floor().unwrap();
    // Distinct eigenvalues; scaled so that λ_min(Σ)·λ_min(Ψ) = 1.44·floor².
    let sigma0 = [2.0, 0.6, -0.3, 0.6, 1.5, 0.2, -0.3, 0.2, 1.0];
    let psi = [1.0, 0.4, 0.4, 2.0];
    let (_, a0) = sym_eigen(&sigma0, n);
    let (_, b0) = sym_eigen(&psi, d);
    let amin = a0.iter().copied().fold(f64::INFINITY, f64::min);
    let bmin = b0.iter().copied().fold(f64::INFINITY, f64::min);
    let scale = 1.44 * floor * floor / (amin * bmin);
    let sigma: Vec<f64> = sigma0.iter().map(|v| v * scale).collect();
    let mg = MatrixGaussian::new(
        MatRef::from_row_major(&sigma, n, n).unwrap(),
        MatRef::from_row_major(&psi, d, d).unwrap(),
    )
    .unwrap();
    let cert = CertifiedMatrixGaussian::new(mg).unwrap();
    let f = NoiseFactors::Matrix(&cert);
    let g = p.exact_grid(GridFormat::F64).unwrap();
    let lambda = g.resolution();
    let (k, stream, first) = (key(13), 2u64, 40u64);
    let s = KeyedStream::new(&k, stream);
    const BATCH: usize = 20_000;
    let rows = BATCH * n;
    let total = (rows * d) as u64;
    let zero = vec![0.0f64; rows * d];
    let (y, rep, _) = run::<f64>(&zero, rows, d, &p, &f, &k, stream, first);
    assert_eq!(rep.resolution, Some(lambda));
    // R = output − grid release (zero stays zero under Clip).
    let mut z = vec![0i64; rows * d];
    g.integer_noise().fill_keyed(&s, first, &mut z).unwrap();
    let r: Vec<f64> = y.iter().zip(&z).map(|(&v, &z)| v - z as f64 * lambda).collect();

    // Data independence: a clipped non-zero input moves the output by its grid part only.
    let mut rng = Rng(0x3a7);
    let few = 4 * n;
    let x: Vec<f64> = (0..few * d).map(|_| rng.normal()).collect();
    let (y2, _, c2) = run::<f64>(&x, few, d, &p, &f, &k, stream, first);
    let (yz, _, _) = run::<f64>(&zero[..few * d], few, d, &p, &f, &k, stream, first);
    for i in 0..few * d {
        let grid_x = on_grid(c2[i], z[i], lambda);
        let grid_0 = z[i] as f64 * lambda;
        assert!(((y2[i] - grid_x) - (yz[i] - grid_0)).abs() < 1e-12, "element {i}");
    }

    // Whitening with this test's own eigendecompositions.
    let (pm, a) = sym_eigen(&sigma, n);
    let (qm, b) = sym_eigen(&psi, d);
    let base = 8 * (first + total);
    for seq in [0usize, 1, 7, BATCH - 1] {
        let rb = DMatrix::from_row_slice(n, d, &r[seq * n * d..(seq + 1) * n * d]);
        let m = pm.transpose() * rb * &qm;
        let mut got: Vec<f64> = (0..n * d)
            .map(|e| {
                let (kk, ll) = (e / d, e % d);
                (m[(kk, ll)] / (a[kk] * b[ll] - floor * floor).sqrt()).abs()
            })
            .collect();
        let mut want = vec![0.0f64; n * d];
        Gaussian::STANDARD.fill_keyed::<f64>(&s, base + (seq * n * d) as u64, &mut want).unwrap();
        let mut want: Vec<f64> = want.iter().map(|v| v.abs()).collect();
        got.sort_by(f64::total_cmp);
        want.sort_by(f64::total_cmp);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-9 * (1.0 + w), "sequence {seq}: |N₂| {g} vs {w}");
        }
    }

    // Covariance: pairwise second moments against K = Σ⊗Ψ − floor²·I.
    let kron = |sub: f64| {
        let (sigma, psi) = (&sigma, &psi);
        move |i: usize, j: usize| {
            let (ri, ci, rj, cj) = (i / d, i % d, j / d, j % d);
            sigma[ri * n + rj] * psi[ci * d + cj] - if i == j { sub } else { 0.0 }
        }
    };
    let worst = |cov: &dyn Fn(usize, usize) -> f64| {
        let nf = BATCH as f64;
        let mut worst = 0.0f64;
        for i in 0..n * d {
            for j in i..n * d {
                let m = (0..BATCH).map(|b| r[b * n * d + i] * r[b * n * d + j]).sum::<f64>() / nf;
                let var = (cov(i, i) * cov(j, j) + cov(i, j).powi(2)) / nf;
                worst = worst.max(((m - cov(i, j)) / var.sqrt()).abs());
            }
        }
        worst
    };
    let fitted = worst(&kron(floor * floor));
    assert!(z_accepts(fitted), "Cov(R) is not Σ⊗Ψ − floor²I: |z| {fitted}");
    let unsubtracted = worst(&kron(0.0));
    assert!(unsubtracted > 20.0, "Σ⊗Ψ itself not rejected: |z| {unsubtracted}");
}

// ---------------------------------------------------------------------------------------
// Refusals, ledgers, reports

#[test]
fn exact_refusals_leave_x_and_ledger_untouched() {
    let k = key(3);
    let mut ledger = Ledger::new_zcdp(PrivacyUnit::Sequence, Rho::new(10.0).unwrap());
    let mut refused = |x: &mut [f32], p: &DpForwardParams, f: &NoiseFactors<'_>, first: u64| {
        let x0: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
        let rows = x.len() / p.dim;
        let mut scratch = vec![0.0; dp_forward_scratch_len(f, p.tokens, p.dim)];
        let got = dp_forward_keyed(
            MatMut::from_row_major(x, rows, p.dim).unwrap(),
            p,
            f,
            Draw { key: &k, stream: 0 },
            first,
            Some(&mut ledger),
            &mut scratch,
        );
        assert!(x.iter().map(|v| v.to_bits()).eq(x0), "x written");
        assert_eq!(ledger.charges(), 0, "ledger charged");
        got
    };
    // C = 1e100 in f32: no f32 grid holds the clipped values (f64 does).
    let p = seq(1.0, 1e100, 1, 4);
    let got = refused(&mut [1.0f32; 4], &p, &NoiseFactors::Iid, 0);
    assert!(matches!(got, Err(Error::OutOfRange { .. })), "{got:?}");
    assert!(p.exact_grid(GridFormat::F64).is_ok());
    // Diagonal noise beyond the exact sampler's range (σ ≈ 1e30 floor).
    let p = seq(1.0, 1.0, 1, 4);
    let floor = p.noise_floor().unwrap();
    let (big, ones) = ([1e30 * floor], [1.0; 4]);
    let f = NoiseFactors::Diagonal { row_std: &big, col_std: &ones };
    let got = refused(&mut [0.5f32; 4], &p, &f, 0);
    assert!(matches!(got, Err(Error::OutOfRange { .. })), "{got:?}");
    // Matrix factors use ⌈rows·dim/8⌉ more elements: the last admissible first is
    // 2^40 − rows·dim − ⌈rows·dim/8⌉.
    let p = seq(1.0, 1.0, 2, 4);
    let eye2 = [1.0, 0.0, 0.0, 1.0];
    let eye4: Vec<f64> = (0..16).map(|i| if i % 5 == 0 { 1.0 } else { 0.0 }).collect();
    let s2 = 4.0 * p.noise_floor().unwrap().powi(2);
    let sig: Vec<f64> = eye2.iter().map(|v| v * s2).collect();
    let cert = CertifiedMatrixGaussian::new(
        MatrixGaussian::new(
            MatRef::from_row_major(&sig, 2, 2).unwrap(),
            MatRef::from_row_major(&eye4, 4, 4).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let f = NoiseFactors::Matrix(&cert);
    let (n, extra) = (3 * 2 * 4u64, (3 * 2 * 4u64).div_ceil(8));
    let got = refused(&mut [0.5f32; 24], &p, &f, (1 << 40) - n - extra + 1);
    assert!(matches!(got, Err(Error::OutOfRange { name: "first", .. })), "{got:?}");
    // The i.i.d. release of the same size fits there.
    let mut x = [0.5f32; 24];
    dp_forward_keyed(
        MatMut::from_row_major(&mut x, 6, 4).unwrap(),
        &p,
        &NoiseFactors::Iid,
        Draw { key: &k, stream: 0 },
        (1 << 40) - n - extra + 1,
        Some(&mut ledger),
        &mut [],
    )
    .unwrap();
    let mut scratch = vec![0.0; dp_forward_scratch_len(&f, 2, 4)];
    dp_forward_keyed(
        MatMut::from_row_major(&mut x, 6, 4).unwrap(),
        &p,
        &f,
        Draw { key: &k, stream: 1 },
        (1 << 40) - n - extra,
        Some(&mut ledger),
        &mut scratch,
    )
    .unwrap();
    assert_eq!(ledger.charges(), 2);
}

/// Both modes charge the same amounts; only the float path is counted as unsafe; the report
/// says which mode ran and gives `Λ` of `exact_grid`.
#[test]
fn exact_mode_charges_what_the_float_path_charges_and_reports_its_grid() {
    let p = seq(4.0, 1.0, 4, 8);
    let x0: Vec<f32> = (0..2 * 4 * 8).map(|i| (i % 7) as f32 - 3.0).collect();
    let mut spent = Vec::new();
    for mode in [NoiseMode::Exact, NoiseMode::UnsafeFloat] {
        let p = DpForwardParams { noise_mode: mode, ..p };
        let mut approx =
            Ledger::new_approx(PrivacyUnit::Sequence, PrivacyBudget::new(8.0, 1e-4).unwrap());
        let mut zcdp = Ledger::new_zcdp(PrivacyUnit::Sequence, Rho::new(10.0).unwrap());
        for ledger in [&mut approx, &mut zcdp] {
            let mut x = x0.clone();
            let rep = dp_forward_keyed(
                MatMut::from_row_major(&mut x, 8, 8).unwrap(),
                &p,
                &NoiseFactors::Iid,
                Draw { key: &key(7), stream: 0 },
                0,
                Some(ledger),
                &mut [],
            )
            .unwrap();
            assert_eq!(rep.noise_mode, mode);
            let want = match mode {
                NoiseMode::Exact => Some(p.exact_grid(GridFormat::F32).unwrap().resolution()),
                NoiseMode::UnsafeFloat => None,
                NoiseMode::ConstantTime => unreachable!("not a mode of this test"),
            };
            assert_eq!(rep.resolution, want);
        }
        let unsafe_count = u64::from(mode == NoiseMode::UnsafeFloat);
        assert_eq!((approx.charges(), approx.unsafe_float_charges()), (1, unsafe_count));
        assert_eq!((zcdp.charges(), zcdp.unsafe_float_charges()), (1, unsafe_count));
        spent.push((approx.spent(), zcdp.spent()));
    }
    assert_eq!(spent[0], spent[1]);
}

// ---------------------------------------------------------------------------------------
// Accuracy at the quickstart's sizes

/// `examples/quickstart.rs`'s DP-Forward rows: a pooled `1 × 768` feature normalised to
/// `C = 1` at ε = 8, δ = 1e-5, both sensitivity rules, `f32`. The exact noise's standard
/// deviation `√(σ_c² + 16Λ²)` (the discrete Gaussian's variance is `s²` to 1e-130 for
/// `s ≥ 4`) is within 1% of the float floor, computed from the formula; and the mean
/// relative error `‖release − ĉ‖/‖ĉ‖` over 1000 releases per mode agrees within 1%. Each
/// release's error has relative sd ≈ `1/√(2·768)` = 2.6%, so the mean of 1000 has sd
/// 0.08% per mode; the expected gap is the noise inflation (0.34%).
#[test]
fn exact_error_is_within_one_percent_of_the_float_error_at_quickstart_sizes() {
    const D: usize = 768;
    const RELEASES: usize = 1000;
    let feature: Vec<f32> = (0..D).map(|j| ((j * 37 % 101) as f32 / 50.0) - 1.0).collect();
    for rule in [SensitivityRule::Derived, SensitivityRule::ReleasedCode] {
        let p = DpForwardParams {
            mode: ClipMode::Normalize,
            rule,
            ..params(
                8.0,
                1.0,
                ClipRegion::Frobenius,
                Neighbours::Sequence,
                NoisePosition::Pooled,
                1,
                D,
            )
        };
        let floor = p.noise_floor().unwrap();
        // Scales: Λ = 2^-12 (√768·Λ ≤ 2/256), S′ = 2 + √768·Λ, σ_c = floor·S′/2.
        let lambda = 2f64.powi(-12);
        let sigma_c = floor * (2.0 + (D as f64).sqrt() * lambda) / 2.0;
        let exact_sd = (sigma_c * sigma_c + 16.0 * lambda * lambda).sqrt();
        let g = p.exact_grid(GridFormat::F32).unwrap();
        assert_eq!(g.resolution(), lambda);
        assert!(rel(g.sigma(), exact_sd) < 1e-8, "{rule:?}: sΛ {} vs {exact_sd}", g.sigma());
        let gap = exact_sd / floor - 1.0;
        assert!(gap > 0.0 && gap < 0.005, "{rule:?}: noise scale gap {gap}");
        // The clipped feature (the same in both modes).
        let mut c = feature.clone();
        clip_hidden(
            MatMut::from_row_major(&mut c, 1, D).unwrap(),
            1,
            ClipRegion::Frobenius,
            ClipMode::Normalize,
            1.0,
        )
        .unwrap();
        let c: Vec<f64> = c.iter().map(|&v| f64::from(v)).collect();
        let norm = c.iter().map(|v| v * v).sum::<f64>().sqrt();
        let mut mean = [0.0f64; 2];
        for (m, mode) in [NoiseMode::Exact, NoiseMode::UnsafeFloat].into_iter().enumerate() {
            let p = DpForwardParams { noise_mode: mode, ..p };
            let mut x: Vec<f32> = feature.repeat(RELEASES);
            dp_forward_keyed(
                MatMut::from_row_major(&mut x, RELEASES, D).unwrap(),
                &p,
                &NoiseFactors::Iid,
                Draw { key: &key(15), stream: m as u64 },
                0,
                None,
                &mut [],
            )
            .unwrap();
            for row in x.chunks_exact(D) {
                let err =
                    row.iter().zip(&c).map(|(&y, &c)| (f64::from(y) - c).powi(2)).sum::<f64>();
                mean[m] += err.sqrt() / norm / RELEASES as f64;
            }
        }
        let ratio = mean[0] / mean[1];
        assert!((ratio - 1.0).abs() < 0.01, "{rule:?}: exact/float error {ratio} ({mean:?})");
    }
}
