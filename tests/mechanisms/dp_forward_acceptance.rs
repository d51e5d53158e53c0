//! Acceptance tests of DP-Forward (`dpattn::dp_forward`, paper 003): the calibration of the
//! noise floor (Algorithm 1, exact k-release composition, the released code's `S = C`),
//! the sensitivity table against brute-force neighbouring pairs, Theorem 6's validator on
//! diagonal and general factors, randomized response, the MVG and classical-GM baselines,
//! the release hook itself (noise layout and statistics, ledgers) and its refusals:
//! `docs/PAPERS.md` §3.5–§3.10 (the acceptance checks are P3-AC1 … P3-AC10, the errata
//! P3-1 … P3-20).
//!
//! Expected values come from the reference tables of `docs/PAPERS.md` §3.9 (T3-A … T3-J) or
//! from math recomputed here, never from the library's output:
//! * table entries are kept as the printed strings, so that every "conservative side"
//!   check can allow for the half unit of the last printed digit;
//! * the 20-digit reference values (`EXACT_*`) were recomputed by the method of §3.9
//!   (mpmath, 60 digits, 400 bisection steps) and agree with every printed entry of the
//!   tables; they let the tests check that σ is never below the exact value;
//! * the MVG variance, randomized-response probabilities, sensitivities `2C√c`, singular
//!   values of rotated covariances and the zCDP cost `S²/(2σ²)` are written out again here.
//!
//! Statistical tests use fixed keys (deterministic) at the toolkit's `ALPHA = 1e-6`
//! (two-sided z bound 4.89).

use crate::support;

use dpattn::accounting::ledger::{Amount, Ledger};
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::accounting::zcdp::Rho;
use dpattn::calibration::amgm::amgm_sigma;
use dpattn::calibration::gaussian_mechanism::{
    classical_gaussian_sigma, classical_gaussian_sigma_unchecked,
};
use dpattn::dp_forward::{
    CertifiedMatrixGaussian, ClipMode, ClipRegion, DpForwardParams, Neighbours, NoiseFactors,
    NoisePosition, RandomizedResponse, SensitivityRule, SubLayer, check_factors, check_neighbours,
    clip_hidden, dp_forward_keyed, dp_forward_scratch_len, full_ldp_budget, randomize_label_in,
    sensitivity, spectral_norm_upper_bound,
};
use dpattn::sampling::{FixedWordSampler, Gaussian, KeyedStream, MatrixGaussian, NoiseKey};
use dpattn::session::Draw;
use dpattn::{Epsilon, Error, MatMut, MatRef, NoiseMode, PrivacyBudget};
use dpattn_paper::dp_forward::mvg_iid_std;
use nalgebra::DMatrix;
use support::problem::Rng;
use support::stats::{binomial_z, chi_square_gof, mean_z, moments, var_z, z_accepts};

type Res<T> = Result<T, Error>;

// ---------------------------------------------------------------------------------------
// Helpers

/// A printed table entry: its value and half a unit of its last printed digit.
fn printed(s: &str) -> (f64, f64) {
    let v: f64 = s.parse().expect("table entry");
    let (mant, exp) = match s.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().expect("exponent")),
        None => (s, 0),
    };
    let decimals = mant.split_once('.').map_or(0, |(_, f)| f.len()) as i32;
    (v, 0.5 * 10f64.powi(exp - decimals))
}

fn num(s: &str) -> f64 {
    s.parse().expect("reference value")
}

fn rel(a: f64, b: f64) -> f64 {
    (a / b - 1.0).abs()
}

/// `σ` matches the printed `entry` to `tol` relative, and is never below it by more than
/// 1e-12 relative beyond the entry's own printed rounding (the conservative side).
fn assert_table(sigma: f64, entry: &str, tol: f64, what: &str) {
    let (t, half) = printed(entry);
    assert!(rel(sigma, t) < tol, "{what}: {sigma} vs table {entry} (rel {:e})", rel(sigma, t));
    assert!(
        sigma >= t - half - 1e-12 * t,
        "{what}: {sigma} is below the table's {entry} (beyond its printed rounding)"
    );
}

/// `σ` is at or above the 20-digit exact value and within 1e-13 of it.
fn assert_exact(sigma: f64, exact: &str, what: &str) {
    let e = num(exact);
    assert!(sigma >= e, "{what}: {sigma} is below the exact {exact}");
    assert!(rel(sigma, e) < 1e-13, "{what}: {sigma} vs exact {exact} (rel {:e})", rel(sigma, e));
}

/// Frobenius clipping, sequence neighbours, one release, the derived sensitivity.
fn params(epsilon: f64, delta: f64, c: f64, tokens: usize, dim: usize) -> DpForwardParams {
    DpForwardParams {
        budget: PrivacyBudget::new(epsilon, delta).expect("budget"),
        releases: 1,
        clip_norm: c,
        region: ClipRegion::Frobenius,
        mode: ClipMode::Clip,
        neighbours: Neighbours::Sequence,
        position: NoisePosition::Embedding,
        tokens,
        dim,
        rule: SensitivityRule::Derived,
        noise_mode: NoiseMode::Exact,
    }
}

fn frob(x: &[f64]) -> f64 {
    x.iter().map(|v| v * v).sum::<f64>().sqrt()
}

fn diff_norm(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt()
}

fn clip64(
    x: &mut [f64],
    rows: usize,
    block_rows: usize,
    region: ClipRegion,
    mode: ClipMode,
    c: f64,
) {
    let cols = x.len() / rows;
    clip_hidden(MatMut::from_row_major(x, rows, cols).unwrap(), block_rows, region, mode, c)
        .unwrap();
}

fn key(b: u8) -> NoiseKey {
    NoiseKey::for_replay([b; 32])
}

fn bits(x: &[f64]) -> Vec<u64> {
    x.iter().map(|v| v.to_bits()).collect()
}

// ---------------------------------------------------------------------------------------
// T3-A, T3-B: calibration of the noise floor

/// T3-A, δ = 1e-5: (ε, σ S=1, σ S=2, Var S=2, exact σ S=1 at 60 digits, see the module docs).
const TABLE_T3A: [(f64, &str, &str, &str, &str); 9] = [
    (0.1, "30.749566132", "61.499132264", "3782.143269", "30.749566131977450239"),
    (0.5, "7.03182667558", "14.0636533512", "197.7863456", "7.0318266755824914427"),
    (1.0, "3.73063163482", "7.46126326963", "55.67044958", "3.7306316348159418322"),
    (2.0, "1.99381244564", "3.98762489129", "15.90115227", "1.9938124456435366861"),
    (4.0, "1.08116184952", "2.16232369904", "4.675643779", "1.081161849520239208"),
    (8.0, "0.600229072199", "1.2004581444", "1.441099756", "0.60022907219895155889"),
    (12.0, "0.431643858042", "0.863287716084", "0.7452656807", "0.43164385804204518789"),
    (16.0, "0.344177428496", "0.688354856993", "0.4738324091", "0.34417742849639353466"),
    (24.0, "0.252945852753", "0.505891705506", "0.2559264177", "0.25294585275322084064"),
];

#[test]
fn noise_floor_matches_table_t3a() -> Res<()> {
    for &(eps, s1, s2, var2, exact) in &TABLE_T3A {
        // S = 2: the paper's S₂ = 2C with C = 1 (Frobenius, sequence neighbours).
        let p2 = params(eps, 1e-5, 1.0, 128, 768);
        assert_eq!(p2.sensitivity()?, 2.0);
        let sigma2 = p2.noise_floor()?;
        assert_table(sigma2, s2, 1e-10, &format!("T3-A ε = {eps}, S = 2"));
        assert_exact(sigma2, &format!("{}", 2.0 * num(exact)), &format!("ε = {eps}, S = 2"));
        let (v, half) = printed(var2);
        assert!((sigma2 * sigma2 - v).abs() <= half + 1e-10 * v, "T3-A Var ε = {eps}");
        // S = 1 via C = 0.5.
        let p1 = DpForwardParams { clip_norm: 0.5, ..p2 };
        assert_eq!(p1.sensitivity()?, 1.0);
        let sigma1 = p1.noise_floor()?;
        assert_table(sigma1, s1, 1e-10, &format!("T3-A ε = {eps}, S = 1"));
        assert_exact(sigma1, exact, &format!("ε = {eps}, S = 1"));
        // σ is linear in S (P3-AC2).
        assert!(rel(sigma2, 2.0 * sigma1) < 1e-14, "linearity at ε = {eps}");
        // The floor does not depend on the shape for Frobenius clipping.
        let tiny = params(eps, 1e-5, 0.5, 1, 1).noise_floor()?;
        assert_eq!(tiny, sigma1);
    }
    // The high-ε values below the table (erfc/log tails, P3-R5; never the erf form).
    for (eps, s) in [(20.0, "0.290041418033"), (32.0, "0.204934900259"), (48.0, "0.154022451488")] {
        let sigma = params(eps, 1e-5, 0.5, 4, 4).noise_floor()?;
        assert_table(sigma, s, 1e-10, &format!("T3-A high ε = {eps}"));
    }
    Ok(())
}

/// T3-B, S = 1: (ε, [(δ, B, σ_aMGM, σ_GM, exact σ)]).
#[allow(clippy::type_complexity)]
const TABLE_T3B: [(f64, [(f64, &str, &str, &str, &str); 3]); 6] = [
    (
        0.5,
        [
            (1e-6, "0.124106149031", "8.05761848073", "10.5976050537", "8.0576184807250442552"),
            (1e-3, "0.216913719248", "4.61012795073", "7.55295906532", "4.61012795072814019"),
            (1e-8, "0.101383542721", "9.86353379617", "12.2127226433", "9.8635337961738332865"),
        ],
    ),
    (
        1.0,
        [
            (1e-6, "0.236704380663", "4.22467888933", "5.29880252685", "4.224678889326835283"),
            (1e-3, "0.388401248307", "2.57465701864", "3.77647953266", "2.574657018637206139"),
            (1e-8, "0.196066560214", "5.10030878753", "6.10636132165", "5.1003087875299271958"),
        ],
    ),
    (
        2.0,
        [
            (1e-6, "0.448334740395", "2.23047627119", "2.64940126343", "2.2304762711864173011"),
            (1e-3, "0.691927002142", "1.44523916093", "1.88823976633", "1.445239160929783513"),
            (1e-8, "0.376942180252", "2.65292676806", "3.05318066082", "2.652926768055825253"),
        ],
    ),
    (
        4.0,
        [
            (1e-6, "0.83785875709", "1.19351858716", "1.32470063171", "1.1935185871579852034"),
            (1e-3, "1.21495214598", "0.823077685245", "0.944119883165", "0.82307768524466130029"),
            (1e-8, "0.716546580527", "1.39558268391", "1.52659033041", "1.3955826839113021034"),
        ],
    ),
    (
        8.0,
        [
            (1e-6, "1.53154511757", "0.652935384358", "0.662350315856", "0.65293538435821594729"),
            (1e-3, "2.08327364546", "0.48001375248", "0.472059941582", "0.4800137524801104459"),
            (1e-8, "1.3361941701", "0.748394224714", "0.763295165206", "0.74839422471373748645"),
        ],
    ),
    (
        16.0,
        [
            (1e-6, "2.71288218572", "0.368611657839", "0.331175157928", "0.36861165783947294126"),
            (1e-3, "3.46493364387", "0.288605815516", "0.236029970791", "0.2886058155163907364"),
            (1e-8, "2.42080177377", "0.41308628027", "0.381647582603", "0.41308628027040262109"),
        ],
    ),
];

#[test]
fn noise_floor_matches_table_t3b() -> Res<()> {
    for &(eps, row) in &TABLE_T3B {
        for &(delta, b, sigma_t, _gm, exact) in &row {
            let sigma = params(eps, delta, 0.5, 16, 32).noise_floor()?;
            let what = format!("T3-B ε = {eps}, δ = {delta}");
            assert_table(sigma, sigma_t, 1e-10, &what);
            assert_exact(sigma, exact, &what);
            // B = S/σ at S = 1, rounded down (σ up): never above the table beyond rounding.
            let (bt, half) = printed(b);
            assert!(rel(1.0 / sigma, bt) < 1e-10, "{what}: B");
            assert!(1.0 / sigma <= bt + half + 1e-12 * bt, "{what}: B above the table");
        }
    }
    Ok(())
}

#[test]
fn noise_floor_is_monotone() -> Res<()> {
    // σ decreases as ε grows and as δ grows (P3-AC2).
    let deltas = [1e-8, 1e-6, 1e-5, 1e-3];
    let epsilons = [0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0];
    for &d in &deltas {
        let s: Vec<f64> =
            epsilons.iter().map(|&e| params(e, d, 1.0, 2, 2).noise_floor().unwrap()).collect();
        assert!(s.windows(2).all(|w| w[0] > w[1]), "δ = {d}: {s:?}");
    }
    for &e in &epsilons {
        let s: Vec<f64> =
            deltas.iter().map(|&d| params(e, d, 1.0, 2, 2).noise_floor().unwrap()).collect();
        assert!(s.windows(2).all(|w| w[0] > w[1]), "ε = {e}: {s:?}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// T3-C: exact composition of k releases

#[test]
fn releases_compose_exactly_table_t3c() -> Res<()> {
    // (ε_total, σ per release for k = 3, σ for k = 1, exact k = 3 value at 60 digits).
    let table = [
        (1.0, "6.461643536", "3.730631635", "6.4616435358249529746"),
        (2.0, "3.453384457", "1.993812446", "3.4533844566177659795"),
        (4.0, "1.872627255", "1.081161850", "1.8726272545741913099"),
        (8.0, "1.039627249", "0.6002290722", "1.0396272492285120022"),
        (16.0, "0.596132793", "0.3441774285", "0.59613279297415794232"),
    ];
    for (eps, k3, k1, exact) in table {
        let one = params(eps, 1e-5, 0.5, 128, 768);
        let three = DpForwardParams { releases: 3, ..one };
        let what = format!("T3-C ε = {eps}");
        let s3 = three.noise_floor()?;
        assert!(rel(s3, num(k3)) < 1e-9, "{what}: k = 3 gives {s3}, table {k3}");
        assert_exact(s3, exact, &format!("{what}, k = 3"));
        let s1 = one.noise_floor()?;
        assert!(rel(s1, num(k1)) < 1e-9, "{what}: k = 1 gives {s1}, table {k1}");
        // Sensitivity × √k: the k = 3 floor is √3 times the single-release floor.
        assert!(rel(s3, 3f64.sqrt() * s1) < 1e-13, "{what}: √3 rule");
        // The plan's guarantee is the whole budget, not k times it.
        assert_eq!(three.guarantee()?, PrivacyBudget::new(eps, 1e-5)?);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// T3-G: the released code's S = C and its effective ε

#[test]
fn released_code_rule_reports_effective_epsilon_table_t3g() -> Res<()> {
    // (nominal ε, effective ε for S₂ = 2C, exact effective ε recomputed with mpmath).
    let table = [
        (0.5, "1.0672991", "1.0672990993824326352"),
        (1.0, "2.1546767", "2.1546766576676986529"),
        (2.0, "4.3929109", "4.3929108749348761079"),
        (4.0, "9.0847313", "9.0847313029954755725"),
        (8.0, "19.121181", "19.121181325976879544"),
        (12.0, "29.789126", "29.789126022382757544"),
        (16.0, "40.918925", "40.918925276200950952"),
    ];
    for (eps, eff, exact) in table {
        let derived = params(eps, 1e-5, 1.0, 128, 768);
        let code = DpForwardParams { rule: SensitivityRule::ReleasedCode, ..derived };
        let what = format!("T3-G nominal ε = {eps}");
        // The true sensitivity stays 2C; the noise is that of S = C (the T3-A S = 1 column).
        assert_eq!(code.sensitivity()?, 2.0);
        let s_code = code.noise_floor()?;
        let s1 = TABLE_T3A.iter().find(|r| r.0 == eps).expect("T3-A row").1;
        assert_table(s_code, s1, 1e-10, &what);
        assert!(rel(s_code, derived.noise_floor()? / 2.0) < 1e-14, "{what}: half the noise");
        let g = code.guarantee()?;
        assert_eq!(g.delta().get(), 1e-5);
        let e = g.epsilon().get();
        assert!(rel(e, num(eff)) < 1e-6, "{what}: effective ε {e}, table {eff}");
        assert!(rel(e, num(exact)) < 1e-9, "{what}: effective ε {e}, exact {exact}");
        assert!(e > 2.0 * eps, "{what}: the code's ε is more than doubled (P3-1)");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Sensitivities: the module table and brute force after clip_hidden

#[test]
fn sensitivity_table_values() -> Res<()> {
    for c in [1e-3, 0.5, 1.0, 3.7, 1e6] {
        for tokens in [1usize, 2, 4, 5, 9, 16, 128] {
            let frob_seq = sensitivity(ClipRegion::Frobenius, Neighbours::Sequence, c, tokens)?;
            assert!(frob_seq >= 2.0 * c && rel(frob_seq, 2.0 * c) < 1e-15, "2C at C = {c}");
            let rows_seq = sensitivity(ClipRegion::Rows, Neighbours::Sequence, c, tokens)?;
            let want = 2.0 * c * (tokens as f64).sqrt();
            assert!(rows_seq >= want * (1.0 - 1e-16) && rel(rows_seq, want) < 1e-15);
            for count in [1usize, 2, 3, 4, 9, 200] {
                let t = Neighbours::Tokens(count);
                let s_rows = sensitivity(ClipRegion::Rows, t, c, tokens)?;
                let want = 2.0 * c * (count.min(tokens) as f64).sqrt();
                assert!(
                    s_rows >= want * (1.0 - 1e-16) && rel(s_rows, want) < 1e-15,
                    "Rows, Tokens({count}), n = {tokens}, C = {c}: {s_rows} vs {want}"
                );
                let s_frob = sensitivity(ClipRegion::Frobenius, t, c, tokens)?;
                assert!(s_frob >= 2.0 * c && rel(s_frob, 2.0 * c) < 1e-15);
            }
        }
    }
    // Perfect squares are exact (module docs).
    assert_eq!(sensitivity(ClipRegion::Rows, Neighbours::Tokens(4), 1.0, 128)?, 4.0);
    assert_eq!(sensitivity(ClipRegion::Rows, Neighbours::Sequence, 0.5, 16)?, 4.0);
    // √2 is irrational: rounded up, never down.
    assert!(sensitivity(ClipRegion::Rows, Neighbours::Tokens(2), 1.0, 8)? >= 2.0 * 2f64.sqrt());
    // The params agree with the free function.
    let p = DpForwardParams {
        region: ClipRegion::Rows,
        neighbours: Neighbours::Tokens(3),
        ..params(1.0, 1e-5, 0.75, 8, 4)
    };
    assert_eq!(p.sensitivity()?, sensitivity(ClipRegion::Rows, Neighbours::Tokens(3), 0.75, 8)?);
    // The floor follows the sensitivity: Rows with Tokens(4) at C = 0.5 is S = 2C·2 = 2,
    // Rows with sequence neighbours over 16 rows at C = 0.125 is S = 2C·4 = 1 (T3-A, ε = 1).
    let rows4 = DpForwardParams { clip_norm: 0.5, neighbours: Neighbours::Tokens(4), ..p };
    assert_table(rows4.noise_floor()?, "7.46126326963", 1e-10, "Rows, Tokens(4)");
    let rows16 =
        DpForwardParams { clip_norm: 0.125, neighbours: Neighbours::Sequence, tokens: 16, ..p };
    assert_table(rows16.noise_floor()?, "3.73063163482", 1e-10, "Rows, sequence, n = 16");
    Ok(())
}

/// Clips `x` and `y` (`tokens × dim` each) and returns `‖clip(x) − clip(y)‖_F`.
fn clipped_distance(
    x: &[f64],
    y: &[f64],
    tokens: usize,
    region: ClipRegion,
    mode: ClipMode,
    c: f64,
) -> f64 {
    let (mut a, mut b) = (x.to_vec(), y.to_vec());
    clip64(&mut a, tokens, tokens, region, mode, c);
    clip64(&mut b, tokens, tokens, region, mode, c);
    diff_norm(&a, &b)
}

#[test]
fn sensitivity_bounds_and_is_reached_by_antipodal_pairs() -> Res<()> {
    let mut rng = Rng(0x5e45_171f);
    let modes = [ClipMode::Clip, ClipMode::Normalize, ClipMode::ReleasedCode];
    for (tokens, dim) in [(1usize, 5usize), (4, 6), (9, 3), (5, 7)] {
        for c in [0.5, 1.0, 3.7] {
            // Far outside the ball (every row too), so Clip reaches the sphere as well.
            let x: Vec<f64> = (0..tokens * dim).map(|_| 20.0 * c * rng.normal()).collect();
            let neg: Vec<f64> = x.iter().map(|v| -v).collect();
            for mode in modes {
                let reach = mode != ClipMode::ReleasedCode; // its 1e-6 stabiliser stays inside
                let what = format!("n = {tokens}, d = {dim}, C = {c}, {mode:?}");
                // Frobenius, sequence neighbours: antipodal sequences are 2C apart.
                let s = sensitivity(ClipRegion::Frobenius, Neighbours::Sequence, c, tokens)?;
                let d = clipped_distance(&x, &neg, tokens, ClipRegion::Frobenius, mode, c);
                assert!(d <= s, "{what}: Frobenius {d} > {s}");
                if reach {
                    assert!(d >= s * (1.0 - 1e-12), "{what}: Frobenius {d} does not reach {s}");
                }
                // Rows, sequence neighbours: every row antipodal, 2C√n.
                let s = sensitivity(ClipRegion::Rows, Neighbours::Sequence, c, tokens)?;
                let d = clipped_distance(&x, &neg, tokens, ClipRegion::Rows, mode, c);
                assert!(d <= s, "{what}: Rows {d} > {s}");
                if reach {
                    assert!(d >= s * (1.0 - 1e-12), "{what}: Rows {d} does not reach {s}");
                }
                // Rows, Tokens(count): `count` rows antipodal, 2C√min(count, n).
                for count in 1..=tokens + 2 {
                    let mut y = x.clone();
                    for v in &mut y[..count.min(tokens) * dim] {
                        *v = -*v;
                    }
                    let s = sensitivity(ClipRegion::Rows, Neighbours::Tokens(count), c, tokens)?;
                    let d = clipped_distance(&x, &y, tokens, ClipRegion::Rows, mode, c);
                    assert!(d <= s, "{what}: Tokens({count}) {d} > {s}");
                    if reach {
                        assert!(d >= s * (1.0 - 1e-12), "{what}: Tokens({count}) {d} < {s}");
                    }
                }
                // Frobenius, Tokens(1): one non-zero row, negated: still 2C.
                let mut one = vec![0.0; tokens * dim];
                one[..dim].copy_from_slice(&x[..dim]);
                let mut one_neg = one.clone();
                for v in &mut one_neg[..dim] {
                    *v = -*v;
                }
                let s = sensitivity(ClipRegion::Frobenius, Neighbours::Tokens(1), c, tokens)?;
                let d = clipped_distance(&one, &one_neg, tokens, ClipRegion::Frobenius, mode, c);
                assert!(d <= s && (!reach || d >= s * (1.0 - 1e-12)), "{what}: Frob Tokens(1)");
            }
        }
    }
    Ok(())
}

#[test]
fn sensitivity_bounds_random_neighbours() -> Res<()> {
    let mut rng = Rng(0xbadc_0ffe);
    let modes = [ClipMode::Clip, ClipMode::Normalize, ClipMode::ReleasedCode];
    let (tokens, dim) = (6usize, 5usize);
    for trial in 0..300 {
        let c = rng.range(0.1, 4.0);
        let mode = modes[trial % 3];
        // Scales from well inside to far outside the ball.
        let sx = c * 10f64.powf(rng.range(-2.0, 2.0));
        let sy = c * 10f64.powf(rng.range(-2.0, 2.0));
        let x: Vec<f64> = (0..tokens * dim).map(|_| sx * rng.normal()).collect();
        let y_any: Vec<f64> = (0..tokens * dim).map(|_| sy * rng.normal()).collect();
        for region in [ClipRegion::Frobenius, ClipRegion::Rows] {
            let s = sensitivity(region, Neighbours::Sequence, c, tokens)?;
            let d = clipped_distance(&x, &y_any, tokens, region, mode, c);
            assert!(d <= s, "trial {trial}: {region:?} sequence {d} > {s}");
        }
        // Token neighbours: `count` random rows replaced.
        let count = 1 + rng.below(tokens + 1);
        let mut y = x.clone();
        let mut changed = 0;
        for r in 0..tokens {
            if changed < count && rng.unit() < 0.6 {
                changed += 1;
                for v in &mut y[r * dim..(r + 1) * dim] {
                    *v = sy * rng.normal();
                }
            }
        }
        for region in [ClipRegion::Frobenius, ClipRegion::Rows] {
            let s = sensitivity(region, Neighbours::Tokens(count), c, tokens)?;
            let d = clipped_distance(&x, &y, tokens, region, mode, c);
            assert!(d <= s, "trial {trial}: {region:?} Tokens({count}) {d} > {s}");
        }
    }
    Ok(())
}

#[test]
fn sensitivity_bounds_f32_antipodal_pairs() -> Res<()> {
    let mut rng = Rng(0xf32);
    let (tokens, dim) = (4usize, 8usize);
    for c in [0.3, 1.0, 7.0] {
        let x: Vec<f32> = (0..tokens * dim).map(|_| (10.0 * c * rng.normal()) as f32).collect();
        let neg: Vec<f32> = x.iter().map(|v| -v).collect();
        for region in [ClipRegion::Frobenius, ClipRegion::Rows] {
            for mode in [ClipMode::Clip, ClipMode::Normalize, ClipMode::ReleasedCode] {
                let (mut a, mut b) = (x.clone(), neg.clone());
                clip_hidden(MatMut::from_row_major(&mut a, tokens, dim)?, tokens, region, mode, c)?;
                clip_hidden(MatMut::from_row_major(&mut b, tokens, dim)?, tokens, region, mode, c)?;
                let d = a
                    .iter()
                    .zip(&b)
                    .map(|(&p, &q)| (f64::from(p) - f64::from(q)).powi(2))
                    .sum::<f64>()
                    .sqrt();
                let s = sensitivity(region, Neighbours::Sequence, c, tokens)?;
                assert!(d <= s, "f32 {region:?} {mode:?} C = {c}: {d} > {s}");
                assert!(d >= s * (1.0 - 1e-5), "f32 {region:?} {mode:?}: {d} far below {s}");
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Clipping (docs/PAPERS.md §3.7, "Bounding"; P3-AC7)

#[test]
fn clip_modes_bound_each_block() -> Res<()> {
    let mut rng = Rng(0xc11b);
    let (tokens, dim, batch) = (3usize, 4usize, 5usize);
    let c = 1.5;
    // Sequence norms: inside, on, outside the ball; one zero sequence.
    let scales = [0.1, 0.5, 10.0, 1e6, 0.0];
    let mut x = Vec::new();
    for &s in &scales {
        let dir = rng.direction(tokens * dim);
        x.extend(dir.iter().map(|v| v * s * c));
    }
    let rows = tokens * batch;
    // Clip: blocks inside the ball are bitwise untouched, the others land on the sphere.
    let mut y = x.clone();
    let r = clip_hidden(
        MatMut::from_row_major(&mut y, rows, dim)?,
        tokens,
        ClipRegion::Frobenius,
        ClipMode::Clip,
        c,
    )?;
    assert_eq!(r.scaled, 2);
    assert!(rel(r.max_norm, 1e6 * c) < 1e-12);
    for (b, &s) in scales.iter().enumerate() {
        let blk = |v: &Vec<f64>| v[b * tokens * dim..(b + 1) * tokens * dim].to_vec();
        let n = frob(&blk(&y));
        assert!(n <= c, "block {b}: {n} > C");
        if s * c <= c * 0.999 {
            assert_eq!(bits(&blk(&y)), bits(&blk(&x)), "block {b} inside the ball changed");
        } else {
            assert!(n >= c * (1.0 - 1e-12), "block {b}: {n} not on the sphere");
        }
    }
    // Idempotent: clipping again changes nothing.
    let mut z = y.clone();
    let r2 = clip_hidden(
        MatMut::from_row_major(&mut z, rows, dim)?,
        tokens,
        ClipRegion::Frobenius,
        ClipMode::Clip,
        c,
    )?;
    assert_eq!(r2.scaled, 0);
    assert_eq!(bits(&z), bits(&y));
    // Normalize: every non-zero block has norm C (to 1e-12, never above); zero stays zero.
    let mut y = x.clone();
    clip_hidden(
        MatMut::from_row_major(&mut y, rows, dim)?,
        tokens,
        ClipRegion::Frobenius,
        ClipMode::Normalize,
        c,
    )?;
    for (b, &s) in scales.iter().enumerate() {
        let blk = &y[b * tokens * dim..(b + 1) * tokens * dim];
        let n = frob(blk);
        if s == 0.0 {
            assert!(blk.iter().all(|&v| v == 0.0));
        } else {
            assert!(n <= c && n >= c * (1.0 - 1e-12), "normalised block {b}: {n}");
            // Direction preserved.
            let xb = &x[b * tokens * dim..(b + 1) * tokens * dim];
            let cos = xb.iter().zip(blk).map(|(p, q)| p * q).sum::<f64>() / (frob(xb) * n);
            assert!((cos - 1.0).abs() < 1e-12);
        }
    }
    // The released code's coefficient min(1, C/(‖x‖ + 1e-6)).
    let mut y = x.clone();
    clip_hidden(
        MatMut::from_row_major(&mut y, rows, dim)?,
        tokens,
        ClipRegion::Frobenius,
        ClipMode::ReleasedCode,
        c,
    )?;
    for b in 0..batch {
        let xb = &x[b * tokens * dim..(b + 1) * tokens * dim];
        let yb = &y[b * tokens * dim..(b + 1) * tokens * dim];
        let nx = frob(xb);
        let coef = (c / (nx + 1e-6)).min(1.0);
        assert!(frob(yb) <= c, "code block {b}");
        assert!((frob(yb) - coef * nx).abs() <= 1e-12 * c, "code block {b}: coef");
    }
    // Rows: each row on its own; a change in one row leaves the others alone.
    let mut a = x.clone();
    clip_hidden(
        MatMut::from_row_major(&mut a, rows, dim)?,
        tokens,
        ClipRegion::Rows,
        ClipMode::Normalize,
        c,
    )?;
    let mut x2 = x.clone();
    for v in &mut x2[dim..2 * dim] {
        *v *= -3.0;
    }
    let mut b2 = x2.clone();
    clip_hidden(
        MatMut::from_row_major(&mut b2, rows, dim)?,
        tokens,
        ClipRegion::Rows,
        ClipMode::Normalize,
        c,
    )?;
    for r in 0..rows {
        let (ra, rb) = (&a[r * dim..(r + 1) * dim], &b2[r * dim..(r + 1) * dim]);
        let n = frob(ra);
        assert!(n <= c && (n == 0.0 || n >= c * (1.0 - 1e-12)), "row {r}: {n}");
        if r != 1 {
            assert_eq!(bits(ra), bits(rb), "row {r} changed");
        }
    }
    Ok(())
}

#[test]
fn clip_extreme_magnitudes() -> Res<()> {
    // Entries near f64::MAX (the norm overflows if formed naively) and subnormals.
    for (v, c) in [(f64::MAX, 1.0), (1e300, 2.0), (5e-324, 1.0), (1e-310, 1e-100)] {
        for mode in [ClipMode::Clip, ClipMode::Normalize] {
            let mut x = [v, -v, v, v];
            clip_hidden(MatMut::from_row_major(&mut x, 2, 2)?, 2, ClipRegion::Frobenius, mode, c)?;
            assert!(x.iter().all(|t| t.is_finite()));
            let n = frob(&x);
            assert!(n <= c, "{v:e}, {mode:?}: {n} > {c}");
            let expect_sphere = mode == ClipMode::Normalize || v > c;
            if expect_sphere {
                assert!(n >= c * (1.0 - 1e-12), "{v:e}, {mode:?}: {n}");
                // All four entries equal magnitude C/2.
                assert!(x.iter().all(|t| rel(t.abs(), c / 2.0) < 1e-12));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Theorem 6 (docs/PAPERS.md §3.6, T3-I)

const U_T3I: [f64; 2] = [3.730631634815942, 7.461263269631884];
const V_T3I: [f64; 3] = [1.0, 1.5, 2.0];

fn params_t3i() -> DpForwardParams {
    params(1.0, 1e-5, 0.5, 2, 3) // S = 2C = 1
}

#[test]
fn theorem6_diagonal_test_vector_t3i() -> Res<()> {
    let p = params_t3i();
    // The worst-case Δ = e₁e₁ᵀ gives ‖U⁻¹ΔV⁻ᵀ‖_F = 1/(u₁v₁) = B (T3-I).
    assert!(rel(1.0 / (U_T3I[0] * V_T3I[0]), 0.2680511232112942) < 1e-15);
    let diag = NoiseFactors::Diagonal { row_std: &U_T3I, col_std: &V_T3I };
    // Deliberate deviation from T3-I / P3-AC8 (documented in docs/PAPERS.md T3-I): the
    // vector's product 3.730631634815942 is, as an f64, only 1.2e-17 (0.03 ulp) above the exact
    // S/B = 3.73063163481594183… (60 digits). Our floor carries the calibrator's conservative
    // rounding (σ re-checked, then SAFETY_ULPS up): it sits a few ulps above the exact value, so a
    // vector that sits exactly on the boundary cannot be certified in f64 and is refused, on the
    // safe side. What must hold instead: the floor is within 1e-15 relative of the vector's
    // product, never below the exact value, and the vector is accepted once it clears the floor by
    // 1e-15 relative.
    let floor = p.noise_floor()?;
    let product = U_T3I[0] * V_T3I[0];
    assert!(
        floor >= 3.730_631_634_815_942 && /* the smallest f64 ≥ exact S/B */ rel(floor, product) < 1e-15,
        "floor {floor}"
    );
    assert!(matches!(check_factors(&p, &diag), Err(Error::Infeasible { .. })));
    let u_up = [U_T3I[0] * (1.0 + 1e-15), U_T3I[1]];
    check_factors(&p, &NoiseFactors::Diagonal { row_std: &u_up, col_std: &V_T3I })?;
    Ok(())
}

#[test]
fn theorem6_diagonal_validator() -> Res<()> {
    let p = params_t3i();
    let floor = p.noise_floor()?;
    // Within 1e-12 of the exact boundary the vector is accepted, and the floor returned.
    let u_up = [U_T3I[0] * (1.0 + 1e-12), U_T3I[1]];
    assert_eq!(
        check_factors(&p, &NoiseFactors::Diagonal { row_std: &u_up, col_std: &V_T3I })?,
        floor
    );
    // Smallest row std × 0.999: refused, lhs the product and rhs the floor.
    let u_low = [U_T3I[0] * 0.999, U_T3I[1]];
    match check_factors(&p, &NoiseFactors::Diagonal { row_std: &u_low, col_std: &V_T3I }) {
        Err(Error::Infeasible { lhs, rhs, .. }) => {
            assert!(rel(lhs, 0.999 * U_T3I[0]) < 1e-15, "lhs {lhs}");
            assert_eq!(rhs, floor);
        }
        other => panic!("expected Infeasible, got {other:?}"),
    }
    // Smallest column std × 0.999: refused too.
    let v_low = [0.999, 1.5, 2.0];
    assert!(matches!(
        check_factors(&p, &NoiseFactors::Diagonal { row_std: &u_up, col_std: &v_low }),
        Err(Error::Infeasible { .. })
    ));
    // Only the two smallest singular values matter: raising the others changes nothing,
    // and the order of the entries is irrelevant.
    let u_big = [1e6, U_T3I[0] * (1.0 + 1e-12)];
    let v_big = [50.0, 1.0, 1e3];
    assert!(
        check_factors(&p, &NoiseFactors::Diagonal { row_std: &u_big, col_std: &v_big }).is_ok()
    );
    // Only the product matters: (a·t, b/t) with t = 2 (exact) is the same mechanism.
    let u2 = [u_up[0] * 2.0, u_up[1] * 2.0];
    let v2 = [0.5, 0.75, 1.0];
    assert!(check_factors(&p, &NoiseFactors::Diagonal { row_std: &u2, col_std: &v2 }).is_ok());
    // I.i.d. always passes and returns the floor.
    assert_eq!(check_factors(&p, &NoiseFactors::Iid)?, floor);
    Ok(())
}

fn mat(rows: usize, data: &[f64]) -> MatRef<'_, f64> {
    MatRef::from_row_major(data, rows, data.len() / rows).unwrap()
}

fn certified(sigma: &[f64], n: usize, psi: &[f64], d: usize) -> Res<CertifiedMatrixGaussian> {
    CertifiedMatrixGaussian::new(MatrixGaussian::new(mat(n, sigma), mat(d, psi))?)
}

#[test]
fn theorem6_matrix_factors_diagonal_covariances() -> Res<()> {
    let p = params_t3i();
    let v2: Vec<f64> = V_T3I.iter().map(|v| v * v).collect();
    let psi = [v2[0], 0.0, 0.0, 0.0, v2[1], 0.0, 0.0, 0.0, v2[2]];
    for (factor, accept) in [(1.0001, true), (0.999, false)] {
        let u0 = U_T3I[0] * factor;
        let sigma = [u0 * u0, 0.0, 0.0, U_T3I[1] * U_T3I[1]];
        let m = certified(&sigma, 2, &psi, 3)?;
        let (su, sv) = m.sigma_min_bounds();
        // Certified lower bounds: never above the exact σ_min, and tight.
        assert!(su <= u0 * (1.0 + 1e-15) && su >= u0 * (1.0 - 1e-9), "su {su} vs {u0}");
        assert!((1.0 - 1e-9..=1.0 + 1e-15).contains(&sv), "sv {sv}");
        let got = check_factors(&p, &NoiseFactors::Matrix(&m));
        if accept {
            assert_eq!(got?, p.noise_floor()?);
        } else {
            assert!(matches!(got, Err(Error::Infeasible { .. })), "{factor}: {got:?}");
        }
    }
    Ok(())
}

#[test]
fn theorem6_matrix_factors_rotated_covariances() -> Res<()> {
    let p = params_t3i();
    // Σ = R(θ)·diag(λ₁, λ₂)·R(θ)ᵀ: σ_min of any factor A with AAᵀ = Σ is √min(λ).
    let (s, c) = 0.6f64.sin_cos();
    // Ψ = Q·diag(1, 2.25, 4)·Qᵀ with the Householder reflection Q = I − 2wwᵀ,
    // w = (1, 2, 2)/3: σ_min of its factor is 1.
    let w = [1.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0];
    let lam_v = [1.0, 2.25, 4.0];
    let q = |i: usize, j: usize| f64::from(u8::from(i == j)) - 2.0 * w[i] * w[j];
    let mut psi = [0.0; 9];
    for i in 0..3 {
        for j in 0..3 {
            psi[i * 3 + j] = (0..3).map(|k| q(i, k) * lam_v[k] * q(j, k)).sum();
        }
    }
    for i in 0..3 {
        for j in 0..i {
            let m = 0.5 * (psi[i * 3 + j] + psi[j * 3 + i]);
            psi[i * 3 + j] = m;
            psi[j * 3 + i] = m;
        }
    }
    for (factor, accept) in [(1.0001, true), (0.999, false)] {
        let u0 = U_T3I[0] * factor;
        let (l1, l2) = (u0 * u0, U_T3I[1] * U_T3I[1]);
        let off = c * s * (l1 - l2);
        let sigma = [c * c * l1 + s * s * l2, off, off, s * s * l1 + c * c * l2];
        let m = certified(&sigma, 2, &psi, 3)?;
        let (su, sv) = m.sigma_min_bounds();
        assert!(su <= u0 * (1.0 + 1e-13) && su >= u0 * (1.0 - 1e-9), "su {su} vs exact {u0}");
        assert!((1.0 - 1e-9..=1.0 + 1e-13).contains(&sv), "sv {sv} vs exact 1");
        let got = check_factors(&p, &NoiseFactors::Matrix(&m));
        if accept {
            assert_eq!(got?, p.noise_floor()?);
        } else {
            assert!(matches!(got, Err(Error::Infeasible { .. })), "{factor}: {got:?}");
        }
    }
    // An i.i.d. matrix normal is certified exactly: (σ, 1).
    let iid = CertifiedMatrixGaussian::new(MatrixGaussian::iid(2, 3, 4.0)?)?;
    assert_eq!(iid.sigma_min_bounds(), (4.0, 1.0));
    assert!(check_factors(&p, &NoiseFactors::Matrix(&iid)).is_ok());
    // A singular row covariance certifies 0 and is refused.
    let sing = certified(&[1.0, 1.0, 1.0, 1.0], 2, &psi, 3)?;
    assert_eq!(sing.sigma_min_bounds().0, 0.0);
    assert!(matches!(
        check_factors(&p, &NoiseFactors::Matrix(&sing)),
        Err(Error::Infeasible { .. })
    ));
    Ok(())
}

#[test]
fn spectral_norm_upper_bound_is_certified() -> Res<()> {
    let mut rng = Rng(0x5bec);
    for trial in 0..50 {
        let (r, c) = (1 + rng.below(7), 1 + rng.below(7));
        let w: Vec<f64> =
            (0..r * c).map(|_| rng.normal() * 10f64.powf(rng.range(-3.0, 3.0))).collect();
        let ub = spectral_norm_upper_bound(MatRef::from_row_major(&w, r, c)?)?;
        let exact = DMatrix::from_row_slice(r, c, &w).singular_values().max();
        assert!(ub >= exact * (1.0 - 1e-14), "trial {trial}: {ub} < σ_max {exact}");
        // Never worse than the Frobenius norm.
        assert!(ub <= frob(&w) * (1.0 + 1e-14), "trial {trial}");
    }
    let bad = [1.0, f64::NAN, 0.0, 1.0];
    assert!(matches!(spectral_norm_upper_bound(mat(2, &bad)), Err(Error::NonFinite { .. })));
    let empty: [f64; 0] = [];
    assert!(matches!(
        spectral_norm_upper_bound(MatRef::from_row_major(&empty, 0, 3)?),
        Err(Error::OutOfRange { .. })
    ));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Randomized response (docs/PAPERS.md §3.7, "Labels"; T3-J)

#[test]
fn randomized_response_keep_probability_table_t3j() -> Res<()> {
    let table = [
        (9f64.ln(), 0.900000, 0.818182),
        (2.2, 0.900250, 0.818594),
        (1.0, 0.731059, 0.576117),
        (2.0, 0.880797, 0.786986),
        (4.0, 0.982014, 0.964663),
    ];
    for (eps, k2, k3) in table {
        for (k, want) in [(2u32, k2), (3, k3)] {
            let rr = RandomizedResponse::new(Epsilon::new(eps)?, k)?;
            let keep = rr.keep_probability();
            assert!((keep - want).abs() < 1e-6, "ε = {eps}, k = {k}: {keep} vs {want}");
            let ideal = eps.exp() / (eps.exp() + f64::from(k) - 1.0);
            assert!(rel(keep, ideal) < 1e-14);
            // The realised flip probability is never below the ideal one.
            let flip = rr.flip_probability();
            assert!(flip >= (1.0 - ideal) * (1.0 - 1e-15), "ε = {eps}, k = {k}: flip {flip}");
            assert!(flip <= (1.0 - ideal) * (1.0 + 1e-14) + 1e-18);
        }
    }
    Ok(())
}

#[test]
fn randomized_response_binary_frequency() -> Res<()> {
    let n = 200_000usize;
    for (eps, label) in [(9f64.ln(), 0u32), (2.2, 1)] {
        let rr = RandomizedResponse::new(Epsilon::new(eps)?, 2)?;
        let mut labels = vec![label; n];
        rr.randomize(&mut labels, &KeyedStream::new(&key(11), 3), 0)?;
        assert!(labels.iter().all(|&l| l < 2));
        let kept = labels.iter().filter(|&&l| l == label).count() as u64;
        let p = eps.exp() / (eps.exp() + 1.0);
        let z = binomial_z(kept, n as u64, p);
        assert!(z_accepts(z), "ε = {eps}: kept {kept}/{n}, z = {z}");
    }
    Ok(())
}

#[test]
fn randomized_response_three_classes_frequency() -> Res<()> {
    let n = 200_000usize;
    let eps = 1.0;
    let rr = RandomizedResponse::new(Epsilon::new(eps)?, 3)?;
    let truth: Vec<u32> = (0..n).map(|i| (i % 3) as u32).collect();
    let mut labels = truth.clone();
    rr.randomize(&mut labels, &KeyedStream::new(&key(12), 0), 1000)?;
    let mut counts = [[0u64; 3]; 3];
    for (&t, &o) in truth.iter().zip(&labels) {
        counts[t as usize][o as usize] += 1;
    }
    let p = eps.exp() / (eps.exp() + 2.0);
    let kept: u64 = (0..3).map(|t| counts[t][t]).sum();
    let z = binomial_z(kept, n as u64, p);
    assert!(z_accepts(z), "kept {kept}/{n}, z = {z}");
    for (t, row) in counts.iter().enumerate() {
        // The two other labels are equally likely.
        let others: Vec<u64> = (0..3).filter(|&o| o != t).map(|o| row[o]).collect();
        let flips = others[0] + others[1];
        let z = binomial_z(others[0], flips, 0.5);
        assert!(z_accepts(z), "true {t}: others {others:?}, z = {z}");
        // And the whole row has the RR distribution.
        let probs: Vec<f64> = (0..3).map(|o| if o == t { p } else { (1.0 - p) / 2.0 }).collect();
        assert!(chi_square_gof(row, &probs).accepts(), "true {t}: row {row:?}");
    }
    Ok(())
}

#[test]
fn randomized_response_windows_are_positional() -> Res<()> {
    // Label i uses the window of index first + i, wherever the call starts.
    let rr = RandomizedResponse::new(Epsilon::new(0.5)?, 5)?;
    let s = KeyedStream::new(&key(13), 1);
    let truth: Vec<u32> = (0..64).map(|i| i % 5).collect();
    let mut all = truth.clone();
    rr.randomize(&mut all, &s, 100)?;
    let mut tail = truth[20..].to_vec();
    rr.randomize(&mut tail, &s, 120)?;
    assert_eq!(&all[20..], &tail[..]);
    let mut again = truth.clone();
    rr.randomize(&mut again, &s, 100)?;
    assert_eq!(all, again);
    // ε₂ = 0.5 over 5 classes flips most labels.
    assert!(all.iter().zip(&truth).filter(|(a, b)| a != b).count() > 20);
    Ok(())
}

#[test]
fn randomize_label_in_candidate_set() -> Res<()> {
    let cands = [3u32, 7, 9, 12];
    let eps = 1.5;
    let e = Epsilon::new(eps)?;
    let s = KeyedStream::new(&key(14), 0);
    let n = 100_000u64;
    // Label in the set: kept with e^ε/(e^ε + k' − 1), else uniform over the other three.
    let mut counts = [0u64; 4];
    for i in 0..n {
        let out = randomize_label_in(7, &cands, e, &s, i)?;
        let pos = cands.iter().position(|&c| c == out).expect("output outside the set");
        counts[pos] += 1;
    }
    let p = eps.exp() / (eps.exp() + 3.0);
    let z = binomial_z(counts[1], n, p);
    assert!(z_accepts(z), "kept {} of {n}, z = {z}", counts[1]);
    let q = (1.0 - p) / 3.0;
    assert!(chi_square_gof(&counts, &[q, p, q, q]).accepts(), "{counts:?}");
    // Label outside the set: uniform over the set.
    let mut counts = [0u64; 4];
    for i in 0..n {
        let out = randomize_label_in(5, &cands, e, &s, n + i)?;
        let pos = cands.iter().position(|&c| c == out).expect("output outside the set");
        counts[pos] += 1;
    }
    assert!(chi_square_gof(&counts, &[0.25; 4]).accepts(), "{counts:?}");
    // A single candidate is always the answer.
    assert_eq!(randomize_label_in(4, &[4], e, &s, 0)?, 4);
    assert_eq!(randomize_label_in(2, &[4], e, &s, 0)?, 4);
    Ok(())
}

#[test]
fn full_ldp_budget_adds_epsilons() -> Res<()> {
    // Theorem 4: (ε₁ + ε₂, δ).
    let b = full_ldp_budget(PrivacyBudget::new(8.0, 1e-5)?, Epsilon::new(9f64.ln())?)?;
    assert!(
        b.epsilon().get() >= 8.0 + 9f64.ln() && rel(b.epsilon().get(), 8.0 + 9f64.ln()) < 1e-15
    );
    assert_eq!(b.delta().get(), 1e-5);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// T3-H: MVG baseline

/// The i.i.d. MVG variance written out again (docs/PAPERS.md §3.4), with the cancellation-free form
/// of `−β + √(β² + 8αε)`. Returns (variance, α, β, ζ, budget).
fn mvg_reference(eps: f64, delta: f64, n: usize, d: usize, s2: f64, gamma: f64) -> [f64; 5] {
    let r = n.min(d);
    let h: f64 = (1..=r).map(|j| 1.0 / j as f64).sum();
    let h_half: f64 = (1..=r).map(|j| 1.0 / (j as f64).sqrt()).sum();
    let nd = (n * d) as f64;
    let zeta = 2.0 * (-nd * delta.ln()).sqrt() - 2.0 * delta.ln() + nd;
    let alpha = (h + h_half) * gamma * gamma + 2.0 * h * gamma * s2;
    let beta = 2.0 * nd.powf(0.25) * h * s2 * zeta;
    let root = 8.0 * alpha * eps / (beta + (beta * beta + 8.0 * alpha * eps).sqrt());
    let budget = root * root / (4.0 * alpha * alpha);
    [nd.sqrt() / budget, alpha, beta, zeta, budget]
}

#[test]
fn mvg_baseline_table_t3h() -> Res<()> {
    // The reference formula reproduces the intermediates of docs/PAPERS.md T3-H at ε = 8.
    let [_, a1, b1, z1, bud1] = mvg_reference(8.0, 1e-5, 128, 768, 1.0, 1.0);
    assert!(rel(a1, 37.510669) < 1e-7 && rel(b1, 1.9328341e7) < 1e-7);
    assert!(rel(z1, 100454.72) < 1e-7 && rel(bud1, 6.8525276e-13) < 1e-7);
    let [_, a2, b2, _, bud2] = mvg_reference(8.0, 1e-5, 128, 768, 2.0, 1.0);
    assert!(rel(a2, 48.376963) < 1e-7 && rel(b2, 3.8656683e7) < 1e-7);
    assert!(rel(bud2, 1.7131319e-13) < 1e-7);
    // (ε, std S=1, var S=1, std S=2, var S=2, aMGM std S=1).
    let table = [
        (0.5, "3.42245e8", "1.17132e17", "6.8449e8", "4.68527e17", "7.0318"),
        (1.0, "1.71123e8", "2.92829e16", "3.42245e8", "1.17132e17", "3.7306"),
        (2.0, "8.55613e7", "7.32074e15", "1.71123e8", "2.92829e16", "1.9938"),
        (4.0, "4.27807e7", "1.83018e15", "8.55613e7", "7.32074e15", "1.0812"),
        (8.0, "2.13903e7", "4.57546e14", "4.27807e7", "1.83018e15", "0.60023"),
        (16.0, "1.06952e7", "1.14387e14", "2.13903e7", "4.57546e14", "0.34418"),
    ];
    for (eps, std1, var1, std2, var2, amgm) in table {
        for (s2, std, var) in [(1.0, std1, var1), (2.0, std2, var2)] {
            let got = mvg_iid_std(eps, 1e-5, 128, 768, s2, 1.0)?;
            let what = format!("T3-H ε = {eps}, S = {s2}");
            assert!(rel(got, num(std)) < 1e-5, "{what}: std {got} vs {std}");
            assert!(rel(got * got, num(var)) < 1e-5, "{what}: var {} vs {var}", got * got);
            let reference = mvg_reference(eps, 1e-5, 128, 768, s2, 1.0)[0].sqrt();
            assert!(rel(got, reference) < 1e-12, "{what}: {got} vs formula {reference}");
        }
        let floor = params(eps, 1e-5, 0.5, 128, 768).noise_floor()?;
        let (t, half) = printed(amgm);
        assert!((floor - t).abs() <= half, "T3-H aMGM ε = {eps}: {floor}");
        // P3-12: the MVG std is more than seven orders of magnitude above aMGM's.
        assert!(mvg_iid_std(eps, 1e-5, 128, 768, 1.0, 1.0)? / floor > 1e7);
    }
    // n = 1, d = 768, ε = 8, S = 2: variance 4.60135e7.
    let s = mvg_iid_std(8.0, 1e-5, 1, 768, 2.0, 1.0)?;
    assert!(rel(s * s, 4.60135e7) < 1e-5, "n = 1: var {}", s * s);
    assert!(rel(s * s, mvg_reference(8.0, 1e-5, 1, 768, 2.0, 1.0)[0]) < 1e-12);
    // Refusals.
    assert!(matches!(mvg_iid_std(0.0, 1e-5, 2, 2, 1.0, 1.0), Err(Error::OutOfRange { .. })));
    assert!(matches!(mvg_iid_std(1.0, 0.0, 2, 2, 1.0, 1.0), Err(Error::OutOfRange { .. })));
    assert!(matches!(mvg_iid_std(1.0, 1e-5, 0, 2, 1.0, 1.0), Err(Error::OutOfRange { .. })));
    assert!(matches!(mvg_iid_std(1.0, 1e-5, 2, 2, 1.0, f64::NAN), Err(Error::OutOfRange { .. })));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// docs/PAPERS.md §3.4 and P3-7: the classical Gaussian mechanism

fn gm_ratio(eps: f64, delta: f64) -> f64 {
    classical_gaussian_sigma_unchecked(eps, delta, 1.0).unwrap()
        / amgm_sigma(eps, delta, 1.0).unwrap()
}

#[test]
fn classical_gm_refuses_large_epsilon_and_matches_tables() -> Res<()> {
    for eps in [1.0, 1.5, 2.0, 8.0, 24.0, 0.0, -1.0, f64::NAN] {
        assert!(
            matches!(
                classical_gaussian_sigma(eps, 1e-5, 1.0),
                Err(Error::OutOfRange { name: "epsilon", .. })
            ),
            "ε = {eps} accepted"
        );
    }
    // T3-A σ_GM columns (S = 1, S = 2) and the ratio to aMGM.
    let gm = [
        (0.1, "48.4480526261", "96.8961052521", "1.57557"),
        (0.5, "9.68961052521", "19.3792210504", "1.37796"),
        (1.0, "4.84480526261", "9.68961052521", "1.29866"),
        (2.0, "2.4224026313", "4.84480526261", "1.21496"),
        (4.0, "1.21120131565", "2.4224026313", "1.12028"),
        (8.0, "0.605600657826", "1.21120131565", "1.00895"),
        (12.0, "0.403733771884", "0.807467543768", "0.93534"),
        (16.0, "0.302800328913", "0.605600657826", "0.87978"),
        (24.0, "0.201866885942", "0.403733771884", "0.798064"),
    ];
    for (eps, s1, s2, ratio) in gm {
        let u1 = classical_gaussian_sigma_unchecked(eps, 1e-5, 1.0)?;
        let u2 = classical_gaussian_sigma_unchecked(eps, 1e-5, 2.0)?;
        assert_table(u1, s1, 1e-10, &format!("σ_GM ε = {eps}, S = 1"));
        assert_table(u2, s2, 1e-10, &format!("σ_GM ε = {eps}, S = 2"));
        // The formula itself, written out.
        let formula = (2.0 * (1.25f64 / 1e-5).ln()).sqrt() / eps;
        assert!(u1 >= formula * (1.0 - 1e-15) && rel(u1, formula) < 1e-14);
        if eps < 1.0 {
            assert_eq!(classical_gaussian_sigma(eps, 1e-5, 1.0)?, u1);
        }
        let (r, half) = printed(ratio);
        assert!((gm_ratio(eps, 1e-5) - r).abs() <= half + 1e-12, "ratio at ε = {eps}");
    }
    // T3-B σ_GM columns.
    for &(eps, row) in &TABLE_T3B {
        for &(delta, _, _, gm_t, _) in &row {
            let u = classical_gaussian_sigma_unchecked(eps, delta, 1.0)?;
            assert_table(u, gm_t, 1e-10, &format!("T3-B σ_GM ε = {eps}, δ = {delta}"));
        }
    }
    // Classical ≥ analytic for every ε < 1 (P3-AC3).
    for delta in [1e-8, 1e-6, 1e-5, 1e-3] {
        for eps in [0.01, 0.1, 0.3, 0.5, 0.9, 0.99] {
            assert!(classical_gaussian_sigma(eps, delta, 1.0)? >= amgm_sigma(eps, delta, 1.0)?);
        }
    }
    Ok(())
}

#[test]
fn classical_gm_crosses_amgm_at_8_42() -> Res<()> {
    // δ = 1e-5: the ratio crosses 1 at ε = 8.419771302 (§3.4, P3-AC3).
    assert!(gm_ratio(8.41, 1e-5) > 1.0);
    assert!(gm_ratio(8.43, 1e-5) < 1.0);
    let (mut lo, mut hi) = (8.41, 8.43);
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if gm_ratio(mid, 1e-5) > 1.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    assert!((lo - 8.419771302).abs() < 1e-9, "crossing at {lo}");
    // δ = 1e-6: at ε ≈ 8.7821.
    assert!(gm_ratio(8.7820, 1e-6) > 1.0);
    assert!(gm_ratio(8.7822, 1e-6) < 1.0);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The release hook: noise layout, statistics, ledgers

#[test]
fn release_noise_layout_is_positional_and_data_independent() -> Res<()> {
    let (tokens, dim, batch) = (3usize, 5usize, 4usize);
    // The float noise's layout (the exact release's: tests/mechanisms/dp_forward_exact.rs).
    let p = DpForwardParams {
        mode: ClipMode::Normalize,
        noise_mode: NoiseMode::UnsafeFloat,
        ..params(2.0, 1e-5, 1.0, tokens, dim)
    };
    let floor = p.noise_floor()?;
    let k = key(21);
    let (stream, first) = (7u64, 1000u64);
    let rows = tokens * batch;
    // Zero input stays zero under Normalize: the release is pure noise, element (r, j) the
    // standard normal element first + r·dim + j, times σ.
    let mut z = vec![0.0f64; rows * dim];
    let rep = dp_forward_keyed(
        MatMut::from_row_major(&mut z, rows, dim)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &k, stream },
        first,
        None,
        &mut [],
    )?;
    assert_eq!(rep.scaled, 0);
    let s = KeyedStream::new(&k, stream);
    for (i, &v) in z.iter().enumerate() {
        let n = Gaussian::STANDARD.sample_at::<f64>(&s, first + i as u64)?;
        assert_eq!(v, floor * n, "element {i}");
    }
    // A batch release equals the sequences released alone at shifted offsets.
    let mut rng = Rng(0x1a7);
    let x: Vec<f64> = (0..rows * dim).map(|_| rng.normal()).collect();
    let mut whole = x.clone();
    dp_forward_keyed(
        MatMut::from_row_major(&mut whole, rows, dim)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &k, stream },
        first,
        None,
        &mut [],
    )?;
    for b in 0..batch {
        let block = tokens * dim;
        let mut one = x[b * block..(b + 1) * block].to_vec();
        dp_forward_keyed(
            MatMut::from_row_major(&mut one, tokens, dim)?,
            &p,
            &NoiseFactors::Iid,
            Draw { key: &k, stream },
            first + (b * block) as u64,
            None,
            &mut [],
        )?;
        assert_eq!(bits(&one), bits(&whole[b * block..(b + 1) * block]), "sequence {b}");
    }
    // The noise does not depend on the data: release(x) − release(0) = clip(x).
    let mut clipped = x.clone();
    clip64(&mut clipped, rows, tokens, ClipRegion::Frobenius, ClipMode::Normalize, 1.0);
    for (i, ((w, n), c)) in whole.iter().zip(&z).zip(&clipped).enumerate() {
        assert!((w - n - c).abs() < 1e-12 * (1.0 + n.abs()), "element {i}");
    }
    // Another stream id gives other noise.
    let mut other = vec![0.0f64; rows * dim];
    dp_forward_keyed(
        MatMut::from_row_major(&mut other, rows, dim)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &k, stream: stream + 1 },
        first,
        None,
        &mut [],
    )?;
    assert!(other.iter().zip(&z).all(|(a, b)| a != b));
    Ok(())
}

#[test]
fn release_noise_statistics_iid_and_diagonal() -> Res<()> {
    let (tokens, dim, batch) = (4usize, 50usize, 500usize);
    let rows = tokens * batch;
    let p = params(1.0, 1e-5, 0.5, tokens, dim); // σ = 3.7306316348 (T3-A)
    let floor = p.noise_floor()?;
    // I.i.d.: per-entry variance (S/B)² (P3-AC6).
    let mut z = vec![0.0f64; rows * dim];
    dp_forward_keyed(
        MatMut::from_row_major(&mut z, rows, dim)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &key(31), stream: 0 },
        0,
        None,
        &mut [],
    )?;
    let m = moments(&z);
    let var = floor * floor;
    assert!(z_accepts(mean_z(&m, 0.0, var)), "iid mean {}", m.mean);
    assert!(z_accepts(var_z(&m, var, 3.0 * var * var)), "iid var {} vs {var}", m.var);
    assert!(rel(var, num("3.7306316348159418322").powi(2)) < 1e-13);
    // Diagonal: Z_ij = u_i·N_ij·v_j, so Z_ij/(u_i v_j) is standard normal.
    let u: Vec<f64> = (0..tokens).map(|i| floor * (1.0 + i as f64)).collect();
    let v: Vec<f64> = (0..dim).map(|j| 1.0 + 0.02 * j as f64).collect();
    let f = NoiseFactors::Diagonal { row_std: &u, col_std: &v };
    let mut z = vec![0.0f64; rows * dim];
    dp_forward_keyed(
        MatMut::from_row_major(&mut z, rows, dim)?,
        &p,
        &f,
        Draw { key: &key(32), stream: 0 },
        0,
        None,
        &mut [],
    )?;
    let w: Vec<f64> =
        z.iter().enumerate().map(|(i, &x)| x / (u[(i / dim) % tokens] * v[i % dim])).collect();
    let m = moments(&w);
    assert!(z_accepts(mean_z(&m, 0.0, 1.0)) && z_accepts(var_z(&m, 1.0, 3.0)), "diag {m:?}");
    // f32 output: the same noise, rounded.
    let mut z32 = vec![0.0f32; tokens * dim];
    let mut z64 = vec![0.0f64; tokens * dim];
    dp_forward_keyed(
        MatMut::from_row_major(&mut z32, tokens, dim)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &key(33), stream: 0 },
        0,
        None,
        &mut [],
    )?;
    dp_forward_keyed(
        MatMut::from_row_major(&mut z64, tokens, dim)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &key(33), stream: 0 },
        0,
        None,
        &mut [],
    )?;
    assert!(z32.iter().zip(&z64).all(|(&a, &b)| a == b as f32));
    Ok(())
}

#[test]
fn release_noise_statistics_matrix_normal() -> Res<()> {
    // Cov(Z_ij, Z_kl) = Σ_ik·Ψ_jl (docs/PAPERS.md §3.4), for a non-diagonal Σ and Ψ.
    let (tokens, dim, batch) = (2usize, 3usize, 20_000usize);
    let p = params(4.0, 1e-5, 0.5, tokens, dim);
    let floor = p.noise_floor()?;
    let f2 = floor * floor;
    let sigma = [16.0 * f2, 6.0 * f2, 6.0 * f2, 8.0 * f2]; // σ_min(A) = √(12 − √52)·σ ≈ 2.19σ
    let psi = [1.0, 0.3, -0.2, 0.3, 1.5, 0.4, -0.2, 0.4, 2.0];
    let m = certified(&sigma, 2, &psi, 3)?;
    let f = NoiseFactors::Matrix(&m);
    check_factors(&p, &f)?;
    let mut scratch = vec![0.0; dp_forward_scratch_len(&f, tokens, dim)];
    let rows = tokens * batch;
    let mut z = vec![0.0f64; rows * dim];
    dp_forward_keyed(
        MatMut::from_row_major(&mut z, rows, dim)?,
        &p,
        &f,
        Draw { key: &key(41), stream: 2 },
        0,
        None,
        &mut scratch,
    )?;
    let cov = |a: usize, b: usize| sigma[(a / dim) * 2 + b / dim] * psi[(a % dim) * 3 + b % dim];
    let e = tokens * dim;
    for a in 0..e {
        for b in a..e {
            let mean: f64 = z.chunks_exact(e).map(|s| s[a] * s[b]).sum::<f64>() / batch as f64;
            let sd = ((cov(a, a) * cov(b, b) + cov(a, b).powi(2)) / batch as f64).sqrt();
            let zs = (mean - cov(a, b)) / sd;
            assert!(z_accepts(zs), "Cov({a}, {b}) = {mean} vs {}, z = {zs}", cov(a, b));
        }
    }
    Ok(())
}

#[test]
fn ledger_charges_per_release() -> Res<()> {
    let (tokens, dim) = (2usize, 4usize);
    let x0: Vec<f64> = (0..3 * tokens * dim).map(|i| i as f64 - 5.0).collect();
    // Approximate DP, one release: charged (ε, δ) once per call (the batch is parallel).
    let p = params(1.0, 1e-5, 1.0, tokens, dim);
    let mut ledger = Ledger::new_approx(PrivacyUnit::Sequence, PrivacyBudget::new(2.5, 2.5e-5)?);
    for call in 1..=2u64 {
        let mut x = x0.clone();
        dp_forward_keyed(
            MatMut::from_row_major(&mut x, 3 * tokens, dim)?,
            &p,
            &NoiseFactors::Iid,
            Draw { key: &key(51), stream: 0 },
            1000 * call,
            Some(&mut ledger),
            &mut [],
        )?;
        assert_eq!(ledger.charges(), call);
    }
    let Amount::Approx { epsilon, delta } = ledger.spent() else { panic!("approx ledger") };
    assert!(rel(epsilon, 2.0) < 1e-15 && rel(delta, 2e-5) < 1e-15);
    // A third release does not fit: refused, x and the ledger untouched.
    let mut x = x0.clone();
    let got = dp_forward_keyed(
        MatMut::from_row_major(&mut x, 3 * tokens, dim)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &key(51), stream: 0 },
        5000,
        Some(&mut ledger),
        &mut [],
    );
    assert!(matches!(got, Err(Error::Infeasible { .. })), "{got:?}");
    assert_eq!(bits(&x), bits(&x0));
    assert_eq!(ledger.charges(), 2);

    // The released code's rule charges the effective ε: nominal 8 is 19.121181 (T3-G).
    let code = DpForwardParams {
        rule: SensitivityRule::ReleasedCode,
        ..params(8.0, 1e-5, 1.0, tokens, dim)
    };
    let mut ledger = Ledger::new_approx(PrivacyUnit::Sequence, PrivacyBudget::new(20.0, 1e-5)?);
    let mut x = x0.clone();
    dp_forward_keyed(
        MatMut::from_row_major(&mut x, 3 * tokens, dim)?,
        &code,
        &NoiseFactors::Iid,
        Draw { key: &key(52), stream: 0 },
        0,
        Some(&mut ledger),
        &mut [],
    )?;
    let Amount::Approx { epsilon, .. } = ledger.spent() else { panic!("approx ledger") };
    assert!(rel(epsilon, 19.121181) < 1e-6, "charged ε {epsilon}");
    // Its zCDP cost uses the true S = 2C: ρ = (2C)²/(2σ²) with σ = C/B(8, 1e-5).
    let sc = code.noise_floor()?;
    assert!(rel(code.release_rho()?.get(), 4.0 / (2.0 * sc * sc)) < 1e-14);
    assert!(rel(code.release_rho()?.get(), 2.0 / num("0.60022907219895155889").powi(2)) < 1e-13);
    // An RDP ledger takes the same exact zCDP charge.
    let mut rdp =
        Ledger::new_rdp(PrivacyUnit::Sequence, Epsilon::new(50.0)?, dpattn::Delta::new(1e-5)?)?;
    let mut x = x0.clone();
    dp_forward_keyed(
        MatMut::from_row_major(&mut x, 3 * tokens, dim)?,
        &code,
        &NoiseFactors::Iid,
        Draw { key: &key(55), stream: 0 },
        0,
        Some(&mut rdp),
        &mut [],
    )?;
    assert_eq!(rdp.charges(), 1);

    // zCDP, k = 3 releases: each charged ρ = S²/(2σ²) with the true S = 2C and σ the floor;
    // three of them cost B²/2 with B = A(1, 1e-5) = 0.2680511232112942 (T3-I).
    let p3 = DpForwardParams { releases: 3, ..params(1.0, 1e-5, 0.5, tokens, dim) };
    let sigma = p3.noise_floor()?;
    let rho_one = 1.0 / (2.0 * sigma * sigma);
    assert!(rel(rho_one, num("0.011975234109139405638")) < 1e-13);
    let mut ledger = Ledger::new_zcdp(PrivacyUnit::Sequence, Rho::new(1.0)?);
    for call in 1..=3u64 {
        let mut x = x0.clone();
        dp_forward_keyed(
            MatMut::from_row_major(&mut x, 3 * tokens, dim)?,
            &p3,
            &NoiseFactors::Iid,
            Draw { key: &key(53), stream: call },
            0,
            Some(&mut ledger),
            &mut [],
        )?;
        let Amount::Zcdp { rho } = ledger.spent() else { panic!("zCDP ledger") };
        assert!(rho >= call as f64 * rho_one * (1.0 - 1e-15), "call {call}: ρ {rho}");
        assert!(rel(rho, call as f64 * rho_one) < 1e-13, "call {call}: ρ {rho}");
    }
    let Amount::Zcdp { rho } = ledger.spent() else { panic!("zCDP ledger") };
    assert!(rel(rho, 0.2680511232112942f64.powi(2) / 2.0) < 1e-12, "three releases: ρ {rho}");
    assert!(rel(p3.release_rho()?.get(), rho_one) < 1e-14);
    // A zCDP ledger too small for the next release: refused, untouched.
    let mut small = Ledger::new_zcdp(PrivacyUnit::Sequence, Rho::new(rho_one * 1.5)?);
    let mut x = x0.clone();
    dp_forward_keyed(
        MatMut::from_row_major(&mut x, 3 * tokens, dim)?,
        &p3,
        &NoiseFactors::Iid,
        Draw { key: &key(54), stream: 0 },
        0,
        Some(&mut small),
        &mut [],
    )?;
    let mut x = x0.clone();
    let got = dp_forward_keyed(
        MatMut::from_row_major(&mut x, 3 * tokens, dim)?,
        &p3,
        &NoiseFactors::Iid,
        Draw { key: &key(54), stream: 1 },
        0,
        Some(&mut small),
        &mut [],
    );
    assert!(matches!(got, Err(Error::Infeasible { .. })), "{got:?}");
    assert_eq!(bits(&x), bits(&x0));
    assert_eq!(small.charges(), 1);
    Ok(())
}

#[test]
fn release_on_strided_rows_matches_contiguous() -> Res<()> {
    // Any row stride: the noise follows the logical element, the padding is never written.
    let (tokens, dim, batch, stride) = (2usize, 5usize, 3usize, 8usize);
    let rows = tokens * batch;
    let p = DpForwardParams { region: ClipRegion::Rows, ..params(2.0, 1e-5, 1.0, tokens, dim) };
    let mut rng = Rng(0x57_21de);
    let dense: Vec<f64> = (0..rows * dim).map(|_| 3.0 * rng.normal()).collect();
    let mut strided = vec![f64::MAX; rows * stride];
    for r in 0..rows {
        strided[r * stride..r * stride + dim].copy_from_slice(&dense[r * dim..(r + 1) * dim]);
    }
    let u = [1.0e3, 2.0e3];
    let v = [1.0, 1.0, 1.5, 2.0, 1.0];
    let f = NoiseFactors::Diagonal { row_std: &u, col_std: &v };
    let mut a = dense.clone();
    dp_forward_keyed(
        MatMut::from_row_major(&mut a, rows, dim)?,
        &p,
        &f,
        Draw { key: &key(81), stream: 4 },
        17,
        None,
        &mut [],
    )?;
    dp_forward_keyed(
        MatMut::new(&mut strided, rows, dim, stride)?,
        &p,
        &f,
        Draw { key: &key(81), stream: 4 },
        17,
        None,
        &mut [],
    )?;
    for r in 0..rows {
        assert_eq!(
            bits(&strided[r * stride..r * stride + dim]),
            bits(&a[r * dim..(r + 1) * dim]),
            "row {r}"
        );
        assert!(
            strided[r * stride + dim..(r + 1) * stride].iter().all(|&x| x == f64::MAX),
            "padding {r}"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Refusals

fn out_of_range(r: Res<f64>, want: &str) {
    match r {
        Err(Error::OutOfRange { name, .. }) if name == want => {}
        other => panic!("expected OutOfRange {{ name: {want:?} }}, got {other:?}"),
    }
}

#[test]
fn params_refusals() -> Res<()> {
    let base = params(1.0, 1e-5, 1.0, 4, 8);
    base.validate()?;
    for c in [0.0, -1.0, f64::NAN, 1e101, f64::INFINITY, 1e-101] {
        let p = DpForwardParams { clip_norm: c, ..base };
        out_of_range(p.noise_floor(), "clip_norm");
        assert!(matches!(p.validate(), Err(Error::OutOfRange { name: "clip_norm", .. })));
        assert!(matches!(
            sensitivity(ClipRegion::Frobenius, Neighbours::Sequence, c, 4),
            Err(Error::OutOfRange { .. })
        ));
        let mut x = [1.0f64; 4];
        let before = bits(&x);
        assert!(matches!(
            clip_hidden(
                MatMut::from_row_major(&mut x, 2, 2)?,
                1,
                ClipRegion::Frobenius,
                ClipMode::Clip,
                c
            ),
            Err(Error::OutOfRange { name: "clip_norm", .. })
        ));
        assert_eq!(bits(&x), before);
    }
    // The extremes of the allowed range are accepted.
    for c in [1e-100, 1e100] {
        DpForwardParams { clip_norm: c, ..base }.noise_floor()?;
    }
    // δ = 0: no Gaussian noise gives pure DP.
    out_of_range(
        DpForwardParams { budget: PrivacyBudget::new(1.0, 0.0)?, ..base }.noise_floor(),
        "delta",
    );
    out_of_range(DpForwardParams { releases: 0, ..base }.noise_floor(), "releases");
    out_of_range(DpForwardParams { tokens: 0, ..base }.noise_floor(), "tokens");
    out_of_range(DpForwardParams { dim: 0, ..base }.noise_floor(), "dim");
    out_of_range(sensitivity(ClipRegion::Rows, Neighbours::Sequence, 1.0, 0), "tokens");
    // tokens·dim overflowing usize.
    assert!(matches!(
        DpForwardParams { tokens: usize::MAX, dim: 2, ..base }.validate(),
        Err(Error::SizeOverflow { .. })
    ));
    // Tokens(0).
    out_of_range(
        DpForwardParams { neighbours: Neighbours::Tokens(0), ..base }.noise_floor(),
        "neighbours",
    );
    out_of_range(sensitivity(ClipRegion::Rows, Neighbours::Tokens(0), 1.0, 4), "neighbours");
    // Token-level neighbours after attention (or at the pooled feature): Unsupported.
    for sub in [SubLayer::Mha, SubLayer::AddNorm1, SubLayer::Ffn, SubLayer::AddNorm2] {
        let position = NoisePosition::Encoder { layer: 0, sub };
        let p = DpForwardParams { neighbours: Neighbours::Tokens(1), position, ..base };
        assert!(matches!(p.noise_floor(), Err(Error::Unsupported { .. })), "{sub:?}");
        assert!(matches!(
            check_neighbours(Neighbours::Tokens(1), position),
            Err(Error::Unsupported { .. })
        ));
        // Sequence neighbours are fine there.
        DpForwardParams { position, ..base }.validate()?;
    }
    let pooled = DpForwardParams { position: NoisePosition::Pooled, tokens: 1, ..base };
    pooled.validate()?;
    assert!(matches!(
        DpForwardParams { neighbours: Neighbours::Tokens(1), ..pooled }.validate(),
        Err(Error::Unsupported { .. })
    ));
    // Token-level neighbours at the embedding are fine.
    DpForwardParams { neighbours: Neighbours::Tokens(2), region: ClipRegion::Rows, ..base }
        .validate()?;
    // Pooled with tokens ≠ 1.
    out_of_range(DpForwardParams { tokens: 4, ..pooled }.noise_floor(), "tokens");
    // The released code's rule only with Frobenius clipping and sequence neighbours.
    let code = DpForwardParams { rule: SensitivityRule::ReleasedCode, ..base };
    code.validate()?;
    assert!(matches!(
        DpForwardParams { region: ClipRegion::Rows, ..code }.noise_floor(),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        DpForwardParams { neighbours: Neighbours::Tokens(1), ..code }.guarantee(),
        Err(Error::Unsupported { .. })
    ));
    Ok(())
}

#[test]
fn factor_refusals() -> Res<()> {
    let p = params_t3i(); // tokens 2, dim 3
    let good_u = [4.0, 8.0];
    let good_v = [1.0, 1.5, 2.0];
    let check = |u: &[f64], v: &[f64]| {
        check_factors(&p, &NoiseFactors::Diagonal { row_std: u, col_std: v })
    };
    check(&good_u, &good_v)?;
    assert!(matches!(
        check(&[4.0, f64::NAN], &good_v),
        Err(Error::NonFinite { arg: "row_std", index: 1 })
    ));
    assert!(matches!(
        check(&good_u, &[1.0, f64::INFINITY, 2.0]),
        Err(Error::NonFinite { arg: "col_std", index: 1 })
    ));
    assert!(matches!(check(&[0.0, 8.0], &good_v), Err(Error::OutOfRange { name: "row_std", .. })));
    assert!(matches!(
        check(&good_u, &[1.0, -1.5, 2.0]),
        Err(Error::OutOfRange { name: "col_std", .. })
    ));
    assert!(matches!(
        check(&[4.0, 8.0, 9.0], &good_v),
        Err(Error::ShapeMismatch { arg: "row_std", .. })
    ));
    assert!(matches!(
        check(&good_u, &[1.0, 1.5]),
        Err(Error::ShapeMismatch { arg: "col_std", .. })
    ));
    // A non-PSD covariance is refused by MatrixGaussian::new (eigenvalues 3 and −1).
    let psi = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
    assert!(matches!(
        MatrixGaussian::new(mat(2, &[1.0, 2.0, 2.0, 1.0]), mat(3, &psi)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        MatrixGaussian::new(
            mat(2, &[1.0, 0.0, 0.0, 1.0]),
            mat(3, &[1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 1.0])
        ),
        Err(Error::OutOfRange { .. })
    ));
    // A matrix normal of the wrong shape.
    let wrong = certified(&[16.0, 0.0, 0.0, 16.0], 2, &[1.0, 0.0, 0.0, 1.0], 2)?;
    assert!(matches!(
        check_factors(&p, &NoiseFactors::Matrix(&wrong)),
        Err(Error::ShapeMismatch { .. })
    ));
    Ok(())
}

#[test]
fn release_refusals_leave_x_and_ledger_untouched() -> Res<()> {
    let (tokens, dim) = (2usize, 3usize);
    let p = params(1.0, 1e-5, 0.5, tokens, dim);
    let k = key(61);
    let x0: Vec<f64> = (0..2 * tokens * dim).map(|i| 0.3 * i as f64 - 1.0).collect();
    let rows = 2 * tokens;
    let mut ledger = Ledger::new_approx(PrivacyUnit::Sequence, PrivacyBudget::new(10.0, 1e-3)?);
    let mut zledger = Ledger::new_zcdp(PrivacyUnit::Sequence, Rho::new(10.0)?);
    let untouched = |x: &[f64], l: &Ledger, z: &Ledger| {
        assert_eq!(bits(x), bits(&x0));
        assert_eq!((l.charges(), z.charges()), (0, 0));
        assert_eq!(l.spent(), Amount::Approx { epsilon: 0.0, delta: 0.0 });
        assert_eq!(z.spent(), Amount::Zcdp { rho: 0.0 });
    };
    // A NaN in x is private data and is sanitised, not refused: tests/accounting/private_errors.rs.
    // Wrong number of columns.
    let mut x = x0.clone();
    let got = dp_forward_keyed(
        MatMut::from_row_major(&mut x, rows * dim / 2, 2)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &k, stream: 0 },
        0,
        Some(&mut ledger),
        &mut [],
    );
    assert!(matches!(got, Err(Error::ShapeMismatch { arg: "x", axis: "cols", .. })), "{got:?}");
    untouched(&x, &ledger, &zledger);
    // Rows not a multiple of tokens (3 rows, tokens 2), and zero rows.
    let mut x3 = x0[..3 * dim].to_vec();
    let got = dp_forward_keyed(
        MatMut::from_row_major(&mut x3, 3, dim)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &k, stream: 0 },
        0,
        Some(&mut ledger),
        &mut [],
    );
    assert!(matches!(got, Err(Error::ShapeMismatch { arg: "x", .. })), "{got:?}");
    assert_eq!(bits(&x3), bits(&x0[..3 * dim]));
    let mut empty: [f64; 0] = [];
    let got = dp_forward_keyed(
        MatMut::from_row_major(&mut empty, 0, dim)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &k, stream: 0 },
        0,
        Some(&mut ledger),
        &mut [],
    );
    assert!(matches!(got, Err(Error::ShapeMismatch { .. })), "{got:?}");
    untouched(&x0, &ledger, &zledger);
    // An approximate-DP ledger cannot take one release of a k = 3 plan.
    let p3 = DpForwardParams { releases: 3, ..p };
    let mut x = x0.clone();
    let got = dp_forward_keyed(
        MatMut::from_row_major(&mut x, rows, dim)?,
        &p3,
        &NoiseFactors::Iid,
        Draw { key: &k, stream: 0 },
        0,
        Some(&mut ledger),
        &mut [],
    );
    assert!(matches!(got, Err(Error::Unsupported { .. })), "{got:?}");
    untouched(&x, &ledger, &zledger);
    // Overflowing first.
    for first in [u64::MAX, u64::MAX - (rows * dim) as u64 + 1] {
        let mut x = x0.clone();
        let got = dp_forward_keyed(
            MatMut::from_row_major(&mut x, rows, dim)?,
            &p,
            &NoiseFactors::Iid,
            Draw { key: &k, stream: 0 },
            first,
            Some(&mut zledger),
            &mut [],
        );
        assert!(matches!(got, Err(Error::SizeOverflow { .. })), "first {first}: {got:?}");
        untouched(&x, &ledger, &zledger);
    }
    // Infeasible diagonal factors.
    let (u, v) = ([1.0, 1.0], [1.0, 1.0, 1.0]);
    let mut x = x0.clone();
    let got = dp_forward_keyed(
        MatMut::from_row_major(&mut x, rows, dim)?,
        &p,
        &NoiseFactors::Diagonal { row_std: &u, col_std: &v },
        Draw { key: &k, stream: 0 },
        0,
        Some(&mut zledger),
        &mut [],
    );
    assert!(matches!(got, Err(Error::Infeasible { .. })), "{got:?}");
    untouched(&x, &ledger, &zledger);
    // Scratch too small for a matrix normal.
    let m =
        certified(&[16.0, 0.0, 0.0, 64.0], 2, &[1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 3.0], 3)?;
    let f = NoiseFactors::Matrix(&m);
    let need = dp_forward_scratch_len(&f, tokens, dim);
    assert!(need > 0);
    let mut short = vec![0.0; need - 1];
    let mut x = x0.clone();
    let got = dp_forward_keyed(
        MatMut::from_row_major(&mut x, rows, dim)?,
        &p,
        &f,
        Draw { key: &k, stream: 0 },
        0,
        Some(&mut zledger),
        &mut short,
    );
    assert!(matches!(got, Err(Error::ScratchTooSmall { .. })), "{got:?}");
    untouched(&x, &ledger, &zledger);
    // Exact mode: element indices must stay below 2^40 (per-element windows,
    // docs/RANDOMNESS.md §4); one past the last admissible offset is refused untouched.
    let n = (rows * dim) as u64;
    let mut x = x0.clone();
    let got = dp_forward_keyed(
        MatMut::from_row_major(&mut x, rows, dim)?,
        &p,
        &NoiseFactors::Iid,
        Draw { key: &k, stream: 0 },
        (1 << 40) - n + 1,
        Some(&mut zledger),
        &mut [],
    );
    assert!(matches!(got, Err(Error::OutOfRange { name: "first", .. })), "{got:?}");
    untouched(&x, &ledger, &zledger);
    // The last admissible offsets still work (2^40 − n exact, u64::MAX − n for the float
    // noise), each charging the ledger once.
    for (mode, first) in [(NoiseMode::Exact, (1 << 40) - n), (NoiseMode::UnsafeFloat, u64::MAX - n)]
    {
        let mut x = x0.clone();
        dp_forward_keyed(
            MatMut::from_row_major(&mut x, rows, dim)?,
            &DpForwardParams { noise_mode: mode, ..p },
            &NoiseFactors::Iid,
            Draw { key: &k, stream: 0 },
            first,
            Some(&mut zledger),
            &mut [],
        )?;
        assert!(x.iter().all(|v| v.is_finite()));
    }
    assert_eq!((zledger.charges(), zledger.unsafe_float_charges()), (2, 1));
    Ok(())
}

#[test]
fn randomized_response_refusals() -> Res<()> {
    let e = Epsilon::new(1.0)?;
    let s = KeyedStream::new(&key(71), 0);
    for k in [0u32, 1, 32_769] {
        assert!(
            matches!(RandomizedResponse::new(e, k), Err(Error::OutOfRange { name: "classes", .. })),
            "k = {k}"
        );
    }
    RandomizedResponse::new(e, 32_768)?;
    assert!(matches!(
        RandomizedResponse::new(Epsilon::new(1e-10)?, 2),
        Err(Error::OutOfRange { name: "epsilon", .. })
    ));
    // A label ≥ classes: refused and nothing changed (every label is checked first).
    let rr = RandomizedResponse::new(e, 3)?;
    let mut labels = [0u32, 1, 2, 3, 0];
    assert!(matches!(
        rr.randomize(&mut labels, &s, 0),
        Err(Error::OutOfRange { name: "label", .. })
    ));
    assert_eq!(labels, [0, 1, 2, 3, 0]);
    // Candidate sets: empty, repeated.
    assert!(matches!(
        randomize_label_in(1, &[], e, &s, 0),
        Err(Error::OutOfRange { name: "candidates", .. })
    ));
    assert!(matches!(
        randomize_label_in(1, &[1, 2, 1], e, &s, 0),
        Err(Error::OutOfRange { name: "candidates", .. })
    ));
    assert!(matches!(
        randomize_label_in(1, &[1, 2], Epsilon::new(1e-12)?, &s, 0),
        Err(Error::OutOfRange { name: "epsilon", .. })
    ));
    // Windows past the end of the stream.
    assert!(matches!(
        randomize_label_in(1, &[1, 2], e, &s, u64::MAX),
        Err(Error::SizeOverflow { .. })
    ));
    let mut labels = [0u32; 2];
    assert!(matches!(rr.randomize(&mut labels, &s, u64::MAX - 1), Err(Error::SizeOverflow { .. })));
    assert_eq!(labels, [0, 0]);
    Ok(())
}
