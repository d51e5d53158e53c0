//! Public-parameter calibration of the Gaussian-sampling mechanism of paper 000
//! (`dpattn::gaussian_sampling_attention`), against `docs/PAPERS.md` §0: the golden
//! values of T0-A (P0-AC1), the scaling table of T0-C (P0-AC2), rescaling invariance P0-D9
//! (P0-AC11), input validation, and monotonicity of the admissible range of `k`.
//!
//! **Expected values** are the reference values of `docs/PAPERS.md` (cited by table) or
//! closed forms of §0.3 evaluated in this file, never library outputs. Every tabulated
//! number was re-derived with 50-digit `mpmath` while writing this file; all agree.
//!
//! **Tolerances.** Integers exact. A printed real must be right in every printed digit:
//! `|x − printed| ≤` half a unit in its last printed place ([`assert_printed`]): ~2e-11
//! relative for `s = 2.7950849719e-6`, 1e-8…2e-3 relative for the 3–10 digit values (P0-AC1's
//! "1e-9 relative" is finer than what the table prints; `0.238` is also checked exactly).
//! Exception: ε_min, up to 1e-5 above the printed root (integer `k`, see its test). Library
//! values against this file's own closed forms: `REL = 1e-12`. Rescaling (P0-AC11): 8–16
//! `f64::EPSILON` relative (a few roundings on each side, the library's outward rounding).

use dpattn::gaussian_sampling_attention::{
    AccuracyCoupling, Calibration, DeltaConstants, Domain, K_LIMIT, RhoModel, SensitivityBound,
    check_privacy, delta_threshold, error_bound_paper, error_bound_tight, feasible_k, k_max, k_min,
    max_beta, min_epsilon_for_k, min_feasible_epsilon, rho, sensitivity, uniform_baseline_bound,
};
use dpattn::{Error, PrivacyBudget, Result};

const REL: f64 = 1e-12;

/// Half a unit in the last printed place: `"8.51199e-6"` → 5e-12.
fn half_unit(printed: &str) -> f64 {
    let (mant, exp) =
        printed.split_once('e').map_or((printed, 0), |(m, e)| (m, e.parse().unwrap()));
    let frac = mant.split_once('.').map_or(0, |(_, f)| f.len() as i32);
    0.5 * 10f64.powi(exp - frac)
}

#[track_caller]
fn assert_printed(x: f64, printed: &str, what: &str) {
    let p: f64 = printed.parse().unwrap();
    let tol = half_unit(printed) * (1.0 + 1e-9);
    assert!((x - p).abs() <= tol, "{what}: got {x:e}, table prints {printed} (tol {tol:e})");
}

#[track_caller]
fn assert_rel(x: f64, want: f64, rel: f64, what: &str) {
    assert!((x / want - 1.0).abs() <= rel, "{what}: got {x:e}, want {want:e} (rel {rel:e})");
}

#[track_caller]
fn out_of_range<T: std::fmt::Debug>(r: Result<T>, want: &str) {
    match r {
        Err(Error::OutOfRange { name, .. }) if name == want => {}
        other => panic!("expected OutOfRange naming `{want}`, got {other:?}"),
    }
}

#[track_caller]
fn infeasible<T: std::fmt::Debug>(r: Result<T>) -> (&'static str, f64, f64) {
    match r {
        Err(Error::Infeasible { condition, lhs, rhs }) => (condition, lhs, rhs),
        other => panic!("expected Infeasible, got {other:?}"),
    }
}

// T0-A policy: n = 4, α = √(0.2/4096), η = 0.05, β = 5e-6, ε = 0.09, δ = 1e-6, γ = 0.01.
const N: usize = 4;
const EPS: f64 = 0.09;
const DELTA: f64 = 1e-6;
const GAMMA: f64 = 0.01;

fn alpha() -> f64 {
    (0.2f64 / 4096.0).sqrt()
}
fn example() -> Domain {
    Domain::new(alpha(), 0.05, 5e-6).unwrap()
}
fn budget(eps: f64) -> PrivacyBudget {
    PrivacyBudget::new(eps, DELTA).unwrap()
}
fn cal(constants: DeltaConstants, sensitivity: SensitivityBound) -> Calibration {
    Calibration { constants, sensitivity, ..Calibration::PAPER_LITERAL }
}
const PAPER: RhoModel = RhoModel::PaperNominal { c: 1.0 };
const ALL_PRIVACY: [(DeltaConstants, SensitivityBound); 4] = [
    (DeltaConstants::Theorem41, SensitivityBound::PaperSqrtN),
    (DeltaConstants::Definition55, SensitivityBound::PaperSqrtN),
    (DeltaConstants::Theorem41, SensitivityBound::Tight),
    (DeltaConstants::Definition55, SensitivityBound::Tight),
];

/// P0-AC1 / T0-A: sensitivity, `K_P` and the four `k_max` (Thm 4.1 / Def 5.5 × paper / P0-D6 `s`).
#[test]
fn ac1_sensitivity_and_k_max() {
    let d = example();
    let s = sensitivity(N, &d, SensitivityBound::PaperSqrtN).unwrap();
    assert_printed(s, "2.7950849719e-6", "s = 2αβ√n/η");
    let st = sensitivity(N, &d, SensitivityBound::Tight).unwrap();
    assert_rel(st, s / 2.0, REL, "tight s = s/√n");
    // (PRIV-a) 0.1ε/L = 6.5144e-4 > s, and K_P = ε²/(100 s² L) = 750460.86 (closed form).
    let l = (1.0 / DELTA).ln();
    assert_printed(0.1 * EPS / l, "6.5144e-4", "0.1ε/L");
    let kp = EPS * EPS / (100.0 * s * s * l);
    assert_printed(kp, "750460.86", "K_P");
    let want = [750_460u64, 9_380_760, 3_001_843, 37_523_043];
    for ((c, b), want) in ALL_PRIVACY.into_iter().zip(want) {
        let got = k_max(N, &d, budget(EPS), &cal(c, b)).unwrap();
        assert_eq!(got, Some(want), "k_max with {c:?}, {b:?}");
    }
    assert_eq!(kp.ceil() as u64 - 1, want[0], "k_max = ⌈K_P⌉ − 1");
}

/// P0-AC1 / T0-A: `k_min` for the paper coupling (C = 1) with the `ρ` bracket, the coupled
/// rigorous `k_min` (infeasible), the decoupled `k_min^DS`, and the feasible ranges.
#[test]
fn ac1_k_min_and_feasibility() {
    let lit = Calibration::PAPER_LITERAL;
    assert_eq!(k_min(N, EPS, GAMMA, &lit).unwrap(), 258_944);
    let (above, below) =
        (rho(258_944, N, GAMMA, PAPER).unwrap(), rho(258_943, N, GAMMA, PAPER).unwrap());
    assert!(above < 0.009 && 0.009 <= below, "ρ(258944) = {above}, ρ(258943) = {below}");
    assert_printed(above, "0.0089999913", "ρ(258944)");
    assert_printed(below, "0.0090000088", "ρ(258943)");
    // §0.3 closed form: u* = (√(1 + 0.4ε) − 1)/2 = 0.0089204260, k_min = ⌊m/u*²⌋ + 1.
    let u = ((1.0 + 0.4 * EPS).sqrt() - 1.0) / 2.0;
    assert_printed(u, "0.0089204260", "u*");
    let m = 16.0 + (1.0 / GAMMA).ln();
    assert_eq!((m / (u * u)).floor() as u64 + 1, 258_944);

    let d = example();
    assert_eq!(feasible_k(N, &d, budget(EPS), GAMMA, &lit).unwrap(), 258_944..=750_460);
    // Paper coupling with the rigorous ρ₂: k_min = 1,369,964 > k_max = 750,460.
    let coupled = Calibration { rho: RhoModel::GaussianSpectral, ..lit };
    assert_eq!(k_min(N, EPS, GAMMA, &coupled).unwrap(), 1_369_964);
    let (cond, lhs, rhs) = infeasible(feasible_k(N, &d, budget(EPS), GAMMA, &coupled));
    assert!(cond.contains("k_min") && cond.contains("k_max"), "condition: {cond}");
    assert_eq!((lhs, rhs), (1_369_964.0, 750_460.0));
    // Decoupled, ε_acc = 0.09: k_min^DS = 16,867; the privacy side (k_max) is unchanged.
    let rig = Calibration::rigorous(0.09);
    assert_eq!(k_min(N, EPS, GAMMA, &rig).unwrap(), 16_867);
    assert_eq!(feasible_k(N, &d, budget(EPS), GAMMA, &rig).unwrap(), 16_867..=750_460);
}

/// P0-AC1 / T0-A, the row "at k = 500,000" and the bounds.
#[test]
fn ac1_values_at_k_500000_and_bounds() {
    let (k, b, d) = (500_000, budget(EPS), example());
    let dt = |c| delta_threshold(k, b, c).unwrap();
    assert_printed(dt(DeltaConstants::Theorem41), "3.42432e-6", "Δ_4.1");
    assert_printed(dt(DeltaConstants::Definition55), "1.21068e-5", "Δ_5.5");
    let rho_p = rho(k, N, GAMMA, PAPER).unwrap();
    let rho_2 = rho(k, N, GAMMA, RhoModel::GaussianSpectral).unwrap();
    assert_printed(rho_p, "0.00646074", "ρ (paper, C = 1)");
    assert_printed(rho_2, "0.0149193", "ρ₂ (Davidson–Szarek)");
    assert_printed(10.0 * rho_p, "0.064607", "ε needed for (ACC)");
    let t41 = cal(DeltaConstants::Theorem41, SensitivityBound::PaperSqrtN);
    let d55 = cal(DeltaConstants::Definition55, SensitivityBound::PaperSqrtN);
    assert_printed(min_epsilon_for_k(N, k, &d, DELTA, &t41).unwrap(), "0.073462", "min ε, Thm 4.1");
    assert_printed(min_epsilon_for_k(N, k, &d, DELTA, &d55).unwrap(), "0.020778", "min ε, Def 5.5");
    // β_max at ε = 0.09 and k = k_min = 258,944 (domain.beta is ignored).
    let beta = max_beta(N, 258_944, &d, b, &t41).unwrap();
    assert_printed(beta, "8.51199e-6", "β_max");
    assert_printed(error_bound_paper(EPS, 0.05), "0.238", "4(1 + ε + 2r)r");
    assert_rel(error_bound_paper(EPS, 0.05), 0.238, REL, "4(1 + ε + 2r)r (exact)");
    assert_printed(error_bound_tight(rho_2, 0.05), "1.4925e-3", "2(e^{ρ₂r} − 1)");
    assert_printed(uniform_baseline_bound(0.05), "0.10254", "2(e^r − 1)");
}

/// P0-AC1 / §0.3 and T0-A: ε_min = 0.0689072, the positive root of 0.1ε³ − cε − c² = 0 with
/// c = 10 s √(Lm), which ignores the integer rounding of k. The library's ε_min is the
/// smallest double with a non-empty *integer* range [k_min, k_max]; ⌊·⌋+1 and ⌈·⌉−1 only
/// shrink the range, so it lies at or above the real root, by at most ~2·1/(2k) ≈ 2.3e-6
/// relative (one step of k at k ≈ 4.4e5, where k_max ∝ ε² and k_min ∝ ε⁻²; observed
/// 2.3e-8). Hence: ≥ printed − half unit, ≤ printed·(1 + 1e-5).
#[test]
fn ac1_min_feasible_epsilon() {
    let d = example();
    let e = min_feasible_epsilon(N, &d, DELTA, GAMMA, &Calibration::PAPER_LITERAL).unwrap();
    let (lo, hi) = (0.0689072 - half_unit("0.0689072"), 0.0689072 * (1.0 + 1e-5));
    assert!((lo..=hi).contains(&e), "ε_min = {e} not in [{lo}, {hi}]");
    // The cubic itself, solved here by bisection, agrees with T0-A to every digit.
    let s = sensitivity(N, &d, SensitivityBound::PaperSqrtN).unwrap();
    let (l, m) = ((1.0 / DELTA).ln(), 16.0 + (1.0 / GAMMA).ln());
    let c = 10.0 * s * (l * m).sqrt();
    assert_printed(c, "4.71592e-4", "c");
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if 0.1 * mid.powi(3) - c * mid - c * c > 0.0 { hi = mid } else { lo = mid }
    }
    assert_printed(hi, "0.0689072", "cubic root ε₀");
    assert!(e >= hi * (1.0 - 1e-12), "the integer ε_min {e} is below the real root {hi}");
    // Bisection endpoint: feasible at ε_min, not one double below it.
    let lit = Calibration::PAPER_LITERAL;
    assert!(feasible_k(N, &d, budget(e), GAMMA, &lit).is_ok());
    infeasible(feasible_k(N, &d, budget(e.next_down()), GAMMA, &lit));
}

/// §0.3: k_max is the largest k with (PRIV): check_privacy(k_max) passes, k_max + 1 fails on
/// PRIV-b; k_max = ⌈K_P⌉ − 1 (Thm 4.1) or ⌊ε²/(8s²L)⌋ (Def 5.5), computed here.
#[test]
fn k_max_is_the_privacy_boundary() {
    let configs =
        [(4, EPS, 1e-6, 5e-6), (1, 0.5, 1e-3, 1e-4), (16, 0.02, 1e-9, 3e-7), (64, 0.9, 0.05, 1e-6)];
    for (n, eps, delta, beta) in configs {
        let d = Domain::new(alpha(), 0.05, beta).unwrap();
        let b = PrivacyBudget::new(eps, delta).unwrap();
        for (c, sb) in ALL_PRIVACY {
            let calib = cal(c, sb);
            let k = k_max(n, &d, b, &calib).unwrap().unwrap();
            check_privacy(n, k, &d, b, &calib).unwrap();
            let (cond, lhs, rhs) = infeasible(check_privacy(n, k + 1, &d, b, &calib));
            assert!(cond.contains("PRIV-b") && lhs >= rhs, "{cond}: {lhs} vs {rhs}");
            let s = sensitivity(n, &d, sb).unwrap();
            let l = (1.0 / delta).ln();
            let closed = match c {
                DeltaConstants::Theorem41 => (eps * eps / (100.0 * s * s * l)).ceil() - 1.0,
                DeltaConstants::Definition55 => (eps * eps / (8.0 * s * s * l)).floor(),
            };
            assert_eq!(k as f64, closed, "n={n} ε={eps} δ={delta} β={beta} {c:?} {sb:?}");
        }
    }
    // Capped at K_LIMIT = 2^53 when β is tiny; one more sample is out of range, not infeasible.
    assert_eq!(K_LIMIT, 1u64 << 53);
    let d = Domain::new(alpha(), 0.05, 1e-16).unwrap();
    let lit = Calibration::PAPER_LITERAL;
    assert_eq!(k_max(N, &d, budget(EPS), &lit).unwrap(), Some(K_LIMIT));
    out_of_range(check_privacy(N, K_LIMIT + 1, &d, budget(EPS), &lit), "k");
}

/// P0-AC2 / T0-C (ε = 0.09, δ = 1e-6, γ = 0.01): k_min (paper, C = 1) and k^DS_min (ε_acc =
/// 0.09) exact; s_max = Δ_4.1(k_min) and αβ/η = s_max/(2√n) to 4 significant digits (the
/// half-unit rule); each also against the §0.3 closed forms computed here.
#[test]
fn ac2_scaling_table() {
    let table = [
        (2, 108_141, "7.363e-6", "2.603e-6", 13_316),
        (4, 258_944, "4.758e-6", "1.190e-6", 16_867),
        (16, 3_275_005, "1.338e-6", "1.672e-7", 32_147),
        (64, 51_531_973, "3.373e-7", "2.108e-8", 77_364),
        (256, 823_643_466, "8.437e-8", "2.637e-9", 226_426),
    ];
    let (l, lg) = ((1.0 / DELTA).ln(), (1.0 / GAMMA).ln());
    let u = ((1.0 + 0.4 * EPS).sqrt() - 1.0) / 2.0;
    let a = (1.0 + EPS / (1.0 + EPS)).sqrt() - 1.0;
    let unit = Domain::new(1.0, 1.0, 0.0).unwrap(); // max_beta = largest αβ/η
    for (n, kmin, smax, ab_eta, kds) in table {
        let nf = n as f64;
        let k = k_min(n, EPS, GAMMA, &Calibration::PAPER_LITERAL).unwrap();
        assert_eq!(k, kmin, "k_min, n = {n}");
        assert_eq!((((nf * nf + lg) / (u * u)).floor()) as u64 + 1, kmin, "⌊m/u*²⌋ + 1, n = {n}");
        let s = delta_threshold(k, budget(EPS), DeltaConstants::Theorem41).unwrap();
        assert_printed(s, smax, "s_max");
        assert_rel(s, 0.1 * EPS / (kmin as f64 * l).sqrt(), REL, "s_max = 0.1ε/√(k_min L)");
        let r = max_beta(n, k, &unit, budget(EPS), &Calibration::PAPER_LITERAL).unwrap();
        assert_printed(r, ab_eta, "largest αβ/η");
        assert_rel(r, s / (2.0 * nf.sqrt()), REL, "αβ/η = s_max/(2√n)");
        let ds = k_min(n, EPS, GAMMA, &Calibration::rigorous(0.09)).unwrap();
        assert_eq!(ds, kds, "k^DS, n = {n}");
        let k_ds = ((nf.sqrt() + (2.0 * (2.0 / GAMMA).ln()).sqrt()) / a).powi(2).ceil();
        assert_eq!(k_ds as u64, kds, "⌈((√n + √(2 ln(2/γ)))/a*)²⌉, n = {n}");
    }
}

/// P0-AC11 / P0-D9: X → cX maps (α, η, β) → (cα, c²η, cβ); s (to a few ulps), k_max, k_min, the
/// feasible range, min ε at k and ε_min are unchanged; β_max scales by c.
#[test]
fn ac11_rescaling_invariance() {
    let (d, lit) = (example(), Calibration::PAPER_LITERAL);
    let beta_max = max_beta(N, 258_944, &d, budget(EPS), &lit).unwrap();
    let e_min = min_feasible_epsilon(N, &d, DELTA, GAMMA, &lit).unwrap();
    for c in [0.5, 3.0, 1e3, 1e-3] {
        let dc = Domain::new(c * d.alpha, c * c * d.eta, c * d.beta).unwrap();
        for (consts, sb) in ALL_PRIVACY {
            let calib = cal(consts, sb);
            let (s, sc) = (sensitivity(N, &d, sb).unwrap(), sensitivity(N, &dc, sb).unwrap());
            assert_rel(sc, s, 8.0 * f64::EPSILON, "s(cX)");
            let km = |dom| k_max(N, dom, budget(EPS), &calib).unwrap();
            assert_eq!(km(&dc), km(&d), "k_max(cX), c = {c}");
            let (me, mec) = (
                min_epsilon_for_k(N, 500_000, &d, DELTA, &calib).unwrap(),
                min_epsilon_for_k(N, 500_000, &dc, DELTA, &calib).unwrap(),
            );
            assert_rel(mec, me, 16.0 * f64::EPSILON, "min ε at k");
        }
        let range = feasible_k(N, &dc, budget(EPS), GAMMA, &lit).unwrap();
        assert_eq!(range, 258_944..=750_460, "k_min..=k_max of cX, c = {c}");
        let bc = max_beta(N, 258_944, &dc, budget(EPS), &lit).unwrap();
        assert_rel(bc, c * beta_max, 16.0 * f64::EPSILON, "β_max(cX) = c·β_max");
        let ec = min_feasible_epsilon(N, &dc, DELTA, GAMMA, &lit).unwrap();
        assert_rel(ec, e_min, 1e-12, "ε_min(cX)");
    }
}

/// Ranges (§0.3) and errors (§0.2): out-of-range parameters give `OutOfRange` naming the parameter.
#[test]
fn bad_parameters_are_rejected_by_name() {
    let (d, lit, b) = (example(), Calibration::PAPER_LITERAL, budget(EPS));
    out_of_range(sensitivity(0, &d, SensitivityBound::PaperSqrtN), "n");
    out_of_range(k_max(0, &d, b, &lit), "n");
    out_of_range(rho(1000, 0, GAMMA, PAPER), "n");
    out_of_range(k_min(0, EPS, GAMMA, &lit), "n");
    for k in [0, K_LIMIT + 1, u64::MAX] {
        out_of_range(delta_threshold(k, b, DeltaConstants::Theorem41), "k");
        out_of_range(check_privacy(N, k, &d, b, &lit), "k");
        out_of_range(rho(k, N, GAMMA, PAPER), "k");
        out_of_range(min_epsilon_for_k(N, k, &d, DELTA, &lit), "k");
        out_of_range(max_beta(N, k, &d, b, &lit), "k");
    }
    // ε: 0 and NaN are refused by PrivacyBudget; ε ≥ 1 by the calibration (Thm 5.9 Req 1).
    for e in [0.0, -0.1, f64::NAN, f64::INFINITY] {
        out_of_range(PrivacyBudget::new(e, DELTA), "epsilon");
    }
    for e in [1.0, 1.5] {
        out_of_range(delta_threshold(10, budget(e), DeltaConstants::Theorem41), "epsilon");
        out_of_range(k_max(N, &d, budget(e), &lit), "epsilon");
    }
    // The paper coupling needs ε ∈ (0, 0.1) for accuracy (Thm 4.1 H3).
    for e in [0.0, 0.1, 0.5, f64::NAN] {
        out_of_range(k_min(N, e, GAMMA, &lit), "epsilon (Theorem 4.1 accuracy)");
    }
    // δ ∈ (0, 0.1) (P0-18): 0 passes PrivacyBudget (δ ∈ [0, 1)) but not the calibration.
    for delta in [0.0, 0.1, 0.2] {
        let bd = PrivacyBudget::new(EPS, delta).unwrap();
        out_of_range(delta_threshold(10, bd, DeltaConstants::Definition55), "delta");
        out_of_range(check_privacy(N, 10, &d, bd, &lit), "delta");
        out_of_range(min_epsilon_for_k(N, 10, &d, delta, &lit), "delta");
    }
    out_of_range(PrivacyBudget::new(EPS, f64::NAN), "delta");
    for g in [0.0, 1.0, -0.5, f64::NAN] {
        out_of_range(rho(1000, N, g, PAPER), "gamma");
        out_of_range(rho(1000, N, g, RhoModel::GaussianSpectral), "gamma");
        out_of_range(k_min(N, EPS, g, &lit), "gamma");
        out_of_range(feasible_k(N, &d, b, g, &lit), "gamma");
    }
    for c in [0.0, 0.5, f64::NAN, f64::INFINITY] {
        out_of_range(rho(1000, N, GAMMA, RhoModel::PaperNominal { c }), "C");
        let calib = Calibration { rho: RhoModel::PaperNominal { c }, ..lit };
        out_of_range(k_min(N, EPS, GAMMA, &calib), "C");
    }
    for e in [0.0, 0.1, -0.01, f64::NAN] {
        let calib = Calibration { coupling: AccuracyCoupling::Decoupled { eps_acc: e }, ..lit };
        out_of_range(k_min(N, EPS, GAMMA, &calib), "eps_acc");
    }
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        out_of_range(Domain::new(bad, 0.05, 1e-6), "alpha");
        out_of_range(Domain::new(alpha(), bad, 1e-6), "eta");
    }
    for bad in [-1e-9, f64::NAN, f64::INFINITY] {
        out_of_range(Domain::new(alpha(), 0.05, bad), "beta");
    }
    // Domain has public fields: an unvalidated one is still caught downstream.
    let raw = Domain { alpha: -1.0, eta: 0.05, beta: 1e-6 };
    out_of_range(sensitivity(N, &raw, SensitivityBound::Tight), "alpha");
}

/// §0.3 (PRIV-a), β = 0 (k_max = ∞), P0-D1 / P0-10 (empty domain n·η > d·α²).
#[test]
fn priv_a_unbounded_k_and_empty_domain() {
    let (lit, b) = (Calibration::PAPER_LITERAL, budget(EPS));
    // s = 2αβ·2/η with β = 1: s ≫ 0.1ε/L = 6.5e-4, so not even k = 1 is private.
    let huge = Domain::new(alpha(), 0.05, 1.0).unwrap();
    for r in [k_max(N, &huge, b, &lit).map(|_| ()), check_privacy(N, 1, &huge, b, &lit)] {
        let (cond, lhs, rhs) = infeasible(r);
        assert!(cond.contains("PRIV-a") && lhs >= rhs, "{cond}: {lhs} vs {rhs}");
        assert_rel(rhs, 0.1 * EPS / (1.0 / DELTA).ln(), 1e-12, "PRIV-a right side 0.1ε/L");
    }
    infeasible(feasible_k(N, &huge, b, GAMMA, &lit));
    // β = 0: every k is private.
    let zero = Domain::new(alpha(), 0.05, 0.0).unwrap();
    assert_eq!(sensitivity(N, &zero, SensitivityBound::PaperSqrtN).unwrap(), 0.0);
    assert_eq!(k_max(N, &zero, b, &lit).unwrap(), None);
    assert_eq!(feasible_k(N, &zero, b, GAMMA, &lit).unwrap(), 258_944..=K_LIMIT);
    check_privacy(N, K_LIMIT, &zero, b, &lit).unwrap();
    // Empty domain: n·η > d·α². Dyadic α = 2⁻⁶, η = 2⁻¹⁰ make n·η = d·α² exact at d = 4n:
    // the boundary is non-empty (≤), one column fewer is empty.
    let d = Domain::new(0.015625, 0.0009765625, 1e-6).unwrap();
    d.check_nonempty(4, 16).unwrap();
    d.check_nonempty(64, 4096).unwrap();
    let (cond, lhs, rhs) = infeasible(d.check_nonempty(4, 15));
    assert!(cond.contains("n·η") && lhs > rhs, "{cond}: {lhs} vs {rhs}");
    infeasible(d.check_nonempty(64, 255));
    // The T0-A domain is the real boundary n·η = d·α² = 0.2, but as doubles it lies 2.1e-17
    // on the empty side (exact rational check of 4·fl(0.05) vs 4096·fl(√(0.2/4096))²), so
    // d = 4096 is rightly refused; d = 4097 is not.
    infeasible(example().check_nonempty(N, 4096));
    example().check_nonempty(N, 4097).unwrap();
}

/// BUG (wrong error): `min_feasible_epsilon` with an out-of-range γ, δ or n answers
/// `Infeasible` ("a feasible k exists for some ε below the allowed maximum") instead of
/// `OutOfRange` naming the parameter: its bisection maps every error of `feasible_k` to
/// "not feasible". `k_min`, `feasible_k`, `min_epsilon_for_k` all name the parameter.
#[test]
fn min_feasible_epsilon_reports_bad_parameters() {
    let (d, lit) = (example(), Calibration::PAPER_LITERAL);
    let cases = [
        (min_feasible_epsilon(N, &d, DELTA, 1.5, &lit), "gamma"),
        (min_feasible_epsilon(N, &d, 0.2, GAMMA, &lit), "delta"),
        (min_feasible_epsilon(0, &d, DELTA, GAMMA, &lit), "n"),
    ];
    // BUG: all three currently return Error::Infeasible.
    let wrong: Vec<String> = cases
        .iter()
        .filter(|(r, want)| !matches!(r, Err(Error::OutOfRange { name, .. }) if name == want))
        .map(|(r, want)| format!("{want}: {r:?}"))
        .collect();
    assert!(wrong.is_empty(), "expected OutOfRange naming the parameter:\n{}", wrong.join("\n"));
}

/// k_max on the T0-A α, η, with an infeasible (PRIV-a) configuration counted as 0.
fn km(n: usize, eps: f64, beta: f64, c: DeltaConstants, sb: SensitivityBound) -> u64 {
    let d = Domain::new(alpha(), 0.05, beta).unwrap();
    match k_max(n, &d, budget(eps), &cal(c, sb)) {
        Ok(k) => k.unwrap(),
        Err(Error::Infeasible { .. }) => 0,
        Err(e) => panic!("{e}"),
    }
}

/// §0.3 / P0-1 / P0-D6 monotonicity: k_max non-decreasing in ε, non-increasing in β and n;
/// Def 5.5 ≥ Thm 4.1, Tight ≥ PaperSqrtN (equal at n = 1); k_min non-increasing in ε under
/// the paper coupling and independent of ε when decoupled. An infeasible k_max counts as 0.
#[test]
fn monotonicity_on_a_grid() {
    let mut grid = Vec::new();
    for n in [1, 2, 4, 16, 64] {
        for e in [0.005, 0.02, 0.09, 0.3, 0.9] {
            grid.extend([1e-7, 1e-6, 5e-6, 2e-5, 1e-4].map(|b| (n, e, b)));
        }
    }
    let mut nonzero = 0;
    for (c, sb) in ALL_PRIVACY {
        for &(n, e, b) in &grid {
            let k = km(n, e, b, c, sb);
            nonzero += usize::from(k > 0);
            assert!(e >= 0.9 || km(n, e * 2.0, b, c, sb) >= k, "ε↑: n={n} ε={e} β={b}");
            assert!(km(n, e, b * 1.5, c, sb) <= k, "β↑: n={n} ε={e} β={b}");
            assert!(km(n * 2, e, b, c, sb) <= k, "n↑: n={n} ε={e} β={b}");
            assert!(km(n, e, b, DeltaConstants::Definition55, sb) >= k, "Def 5.5 ≥ Thm 4.1");
            let kt = km(n, e, b, c, SensitivityBound::Tight);
            assert!(kt >= k && (n > 1 || kt == k), "Tight ≥ PaperSqrtN, equal at n = 1 (√1 = 1)");
        }
    }
    assert!(nonzero > 200, "the grid must mostly be feasible ({nonzero})");
    for n in [1, 4, 16] {
        let ks: Vec<u64> = [0.005, 0.01, 0.02, 0.05, 0.09, 0.099]
            .iter()
            .map(|&e| k_min(n, e, GAMMA, &Calibration::PAPER_LITERAL).unwrap())
            .collect();
        assert!(ks.windows(2).all(|w| w[0] >= w[1]), "k_min(ε) n = {n}: {ks:?}");
        let ds = k_min(n, 0.01, GAMMA, &Calibration::rigorous(0.05)).unwrap();
        assert_eq!(ds, k_min(n, 0.9, GAMMA, &Calibration::rigorous(0.05)).unwrap());
    }
}

/// Review regression: a sensitivity that overflows must never pass the privacy check, and
/// β = 0 has sensitivity exactly 0 whatever α (no `∞ · 0 = NaN`).
#[test]
fn overflowing_sensitivities_never_pass() {
    let huge = Domain::new(f64::MAX, 1.0, 0.0).unwrap();
    assert_eq!(sensitivity(4, &huge, SensitivityBound::PaperSqrtN).unwrap(), 0.0);
    let huge = Domain { beta: 1.0, ..huge };
    assert!(sensitivity(4, &huge, SensitivityBound::PaperSqrtN).unwrap().is_infinite());
    let r = check_privacy(4, 10, &huge, budget(0.5), &Calibration::PAPER_LITERAL);
    assert!(matches!(r, Err(Error::Infeasible { .. })), "{r:?}");
}
