//! Accuracy tests of `calibration::normal` (Φ, Φc, ln Φ, ln Φc, Φ⁻¹, Φc⁻¹, Φ⁻¹∘exp)
//! against 50-digit mpmath values, plus symmetry, monotonicity, round trips and input
//! validation.
//!
//! The reference table `tests/data/normal_reference.rs` is generated (no Python is
//! needed to build or test) by
//!
//! ```text
//! python3 -m venv .venv && .venv/bin/pip install mpmath
//! .venv/bin/python scripts/reference/normal_reference.py > tests/data/normal_reference.rs
//! ```
//!
//! Tolerances: relative 1e-13 for every reference value that is a normal `f64`. Where the
//! true Φ or Φc is subnormal (|x| ≥ 37.5) or below the smallest subnormal, the format
//! itself cannot hold 1e-13 relative; there the test asks for 1e-13 relative plus
//! `SUBNORMAL_ULPS` units of 2⁻¹⁰⁷⁴.

use dpattn::Error;
use dpattn::calibration::normal::{
    log_normal_cdf, log_normal_sf, normal_cdf, normal_isf, normal_quantile, normal_quantile_log,
    normal_sf,
};

// Generated 17-significant-digit literals: more digits than an f64 holds, and values such
// as ln ½ = −ln 2 written out, on purpose.
#[allow(clippy::excessive_precision, clippy::approx_constant)]
mod reference {
    include!("../data/normal_reference.rs");
}
use reference::{CDF_TABLE, QUANTILE_LOG_TABLE, QUANTILE_TABLE};

const REL: f64 = 1e-13;
/// Allowed error, in units of the smallest subnormal, where the true value is subnormal.
const SUBNORMAL_ULPS: f64 = 4.0;
const TINY: f64 = f64::from_bits(1); // 2⁻¹⁰⁷⁴, the smallest subnormal

/// Relative error of `got` w.r.t. `want`; for subnormal `want`, the error in units of
/// 2⁻¹⁰⁷⁴ beyond `SUBNORMAL_ULPS` is scaled into the same "≤ REL passes" measure.
fn err(got: f64, want: f64) -> f64 {
    if got == want {
        return 0.0;
    }
    let d = (got - want).abs();
    if want.abs() >= f64::MIN_POSITIVE {
        d / want.abs()
    } else if d <= SUBNORMAL_ULPS * TINY + REL * want.abs() {
        0.0
    } else {
        f64::INFINITY
    }
}

#[test]
fn cdf_sf_and_logs_match_mpmath() {
    let names = ["normal_cdf", "normal_sf", "log_normal_cdf", "log_normal_sf"];
    let fns: [fn(f64) -> f64; 4] = [normal_cdf, normal_sf, log_normal_cdf, log_normal_sf];
    let mut max = [0.0f64; 4];
    for &(x, c, s, lc, ls) in CDF_TABLE {
        for (i, want) in [c, s, lc, ls].into_iter().enumerate() {
            let got = fns[i](x);
            let e = err(got, want);
            assert!(e <= REL, "{}({x:e}) = {got:e}, want {want:e}: error {e:e}", names[i]);
            max[i] = max[i].max(e);
        }
    }
    for (n, m) in names.iter().zip(max) {
        println!("{n}: max relative error over {} points = {m:.2e}", CDF_TABLE.len());
    }
}

#[test]
fn quantiles_match_mpmath() {
    let (mut mq, mut mi) = (0.0f64, 0.0f64);
    for &(p, want) in QUANTILE_TABLE {
        let got = normal_quantile(p).unwrap();
        let e = err(got, want);
        assert!(e <= REL, "normal_quantile({p:e}) = {got:e}, want {want:e}: error {e:e}");
        mq = mq.max(e);
        let got = normal_isf(p).unwrap();
        let e = err(got, -want);
        assert!(e <= REL, "normal_isf({p:e}) = {got:e}, want {:e}: error {e:e}", -want);
        mi = mi.max(e);
    }
    let mut ml = 0.0f64;
    for &(lp, want) in QUANTILE_LOG_TABLE {
        let got = normal_quantile_log(lp).unwrap();
        let e = err(got, want);
        assert!(e <= REL, "normal_quantile_log({lp:e}) = {got:e}, want {want:e}: error {e:e}");
        ml = ml.max(e);
    }
    println!("normal_quantile: max relative error = {mq:.2e}");
    println!("normal_isf: max relative error = {mi:.2e}");
    println!("normal_quantile_log: max relative error = {ml:.2e}");
}

#[test]
fn special_values() {
    assert_eq!(normal_cdf(0.0), 0.5);
    assert_eq!(normal_sf(0.0), 0.5);
    assert_eq!(normal_cdf(f64::NEG_INFINITY), 0.0);
    assert_eq!(normal_cdf(f64::INFINITY), 1.0);
    assert_eq!(normal_sf(f64::INFINITY), 0.0);
    assert_eq!(normal_sf(f64::NEG_INFINITY), 1.0);
    assert_eq!(log_normal_cdf(f64::NEG_INFINITY), f64::NEG_INFINITY);
    assert_eq!(log_normal_cdf(f64::INFINITY), 0.0);
    assert_eq!(log_normal_sf(f64::INFINITY), f64::NEG_INFINITY);
    assert_eq!(log_normal_sf(f64::NEG_INFINITY), 0.0);
    for f in [normal_cdf, normal_sf, log_normal_cdf, log_normal_sf] {
        assert!(f(f64::NAN).is_nan());
        // Huge finite arguments: finite or the correctly saturated value, never NaN.
        for x in [f64::MAX, -f64::MAX, 1e154, -1e154, 1e200, -1e200] {
            assert!(!f(x).is_nan(), "NaN at {x:e}");
        }
    }
    // ln Φ(−x) ≈ −x²/2 while x²/2 is representable; −∞ beyond.
    assert!((log_normal_cdf(-1e150) / -5e299 - 1.0).abs() < 1e-13);
    assert_eq!(log_normal_cdf(-1e200), f64::NEG_INFINITY);
    assert_eq!(normal_quantile(0.5), Ok(0.0));
    assert_eq!(normal_isf(0.5), Ok(0.0));
}

#[test]
fn symmetry() {
    let mut x = -40.0;
    while x <= 40.0 {
        let (a, b) = (normal_cdf(x), normal_cdf(-x));
        assert!((a + b - 1.0).abs() <= 2.0 * f64::EPSILON, "Φ({x}) + Φ({}) = {}", -x, a + b);
        assert_eq!(normal_sf(x), normal_cdf(-x));
        assert_eq!(log_normal_sf(x), log_normal_cdf(-x));
        if (1e-300..=0.5).contains(&a) {
            let (qa, qb) = (normal_quantile(a).unwrap(), normal_isf(a).unwrap());
            assert_eq!(qa, -qb);
        }
        x += 1.0 / 128.0;
    }
}

/// Nondecreasing (Φ, ln Φ) / nonincreasing (Φc, ln Φc) on a grid that crosses every
/// switch-over point of the implementation.
#[test]
fn monotone_on_grid() {
    let mut grid = Vec::new();
    let mut x = -45.0;
    while x <= 45.0 {
        grid.push(x);
        x += 1.0 / 256.0;
    }
    for k in 0..=400 {
        let v = 45.0 * 10f64.powf(k as f64 / 100.0);
        grid.push(v);
        grid.push(-v);
    }
    // Fine steps around the switch-over points.
    for c in [-37.5, -35.0, -26.0 * core::f64::consts::SQRT_2, 0.0, 35.0, 37.5] {
        for i in -200..=200 {
            grid.push(c + i as f64 * 1e-12);
        }
    }
    grid.sort_by(f64::total_cmp);
    for w in grid.windows(2) {
        let (a, b) = (w[0], w[1]);
        assert!(normal_cdf(a) <= normal_cdf(b), "Φ not monotone at {a}, {b}");
        assert!(normal_sf(a) >= normal_sf(b), "Φc not monotone at {a}, {b}");
        assert!(log_normal_cdf(a) <= log_normal_cdf(b), "ln Φ not monotone at {a}, {b}");
        assert!(log_normal_sf(a) >= log_normal_sf(b), "ln Φc not monotone at {a}, {b}");
    }
    // The quantiles too.
    let mut prev = f64::NEG_INFINITY;
    for k in 0..=3000 {
        let p = 10f64.powf(-300.0 + 300.0 * k as f64 / 3000.0) * 0.5;
        let q = normal_quantile(p).unwrap();
        assert!(q >= prev, "Φ⁻¹ not monotone at {p:e}");
        prev = q;
    }
}

/// How much Φ moves, relatively, when its argument moves by one ulp: the round-trip error
/// that a faithfully rounded Φ⁻¹(p) (within one ulp of the true quantile) causes by itself
/// (|x|·ulp(x)·φ/Φ ≈ x²·2⁻⁵² in the tail: about 3e-13 at p = 1e-300, so 1e-13 cannot be
/// asked of the round trip there).
fn inherent(x: f64) -> f64 {
    let ulp = f64::from_bits(x.abs().to_bits() + 1) - x.abs();
    let hazard = if x.abs() > 1.0 { x.abs() + 1.0 / x.abs() } else { 1.6 };
    ulp * hazard
}

/// Φ(Φ⁻¹(p)) = p over p log-spaced in (1e-300, 0.5] and mirrored (1 − p), and the same
/// for Φc∘Φc⁻¹ and ln Φ∘Φ⁻¹∘exp.
#[test]
fn round_trips() {
    let mut worst = [0.0f64; 4];
    for k in 0..=6000 {
        let p = 0.5 * 10f64.powf(-300.0 * k as f64 / 6000.0);
        // Lower half: relative 1e-13 plus the error of rounding x to an f64.
        let x = normal_quantile(p).unwrap();
        let e = ((normal_cdf(x) - p) / p).abs();
        assert!(e <= REL + inherent(x), "Φ(Φ⁻¹({p:e})) = {:e}: {e:e}", normal_cdf(x));
        worst[0] = worst[0].max(e - inherent(x));
        // Upper tail through the inverse survival function.
        let x = normal_isf(p).unwrap();
        let e = ((normal_sf(x) - p) / p).abs();
        assert!(e <= REL + inherent(x), "Φc(Φc⁻¹({p:e})) = {:e}: {e:e}", normal_sf(x));
        // Mirrored: p' = 1 − p (rounded), near 1.
        let pm = 1.0 - p;
        if pm == 1.0 {
            continue;
        }
        let x = normal_quantile(pm).unwrap();
        let e = ((normal_cdf(x) - pm) / pm).abs();
        assert!(e <= REL, "Φ(Φ⁻¹({pm:e})) = {:e}: {e:e}", normal_cdf(x));
        worst[1] = worst[1].max(e);
        // ln p = ln(p): no loss of conditioning in the log domain.
        let lp = p.ln();
        let x = normal_quantile_log(lp).unwrap();
        let e = ((log_normal_cdf(x) - lp) / lp).abs();
        assert!(e <= REL, "lnΦ(Φ⁻¹(e^{lp:e})) = {:e}: {e:e}", log_normal_cdf(x));
        worst[2] = worst[2].max(e);
    }
    // normal_quantile_log far beyond underflow, and near ln p = 0 (upper tail).
    for k in 0..=2000 {
        for lp in [-(10f64.powf(-300.0 + 600.0 * k as f64 / 2000.0)), -(k as f64) * 0.5 - 1e-3] {
            let x = normal_quantile_log(lp).unwrap();
            let back = log_normal_cdf(x);
            // For p near 1, ln Φ(x) ≈ −Φc(x) inherits Φc's sensitivity to rounding x.
            let tol = REL + if x > 0.0 { inherent(x) } else { 0.0 };
            let e = ((back - lp) / lp).abs();
            assert!(e <= tol, "lnΦ(Φ⁻¹(e^{lp:e})) = {back:e}: {e:e}");
            worst[3] = worst[3].max(e - if x > 0.0 { inherent(x) } else { 0.0 });
        }
    }
    println!(
        "round trips, worst error beyond the one-ulp allowance (p, 1 − p, ln p, ln p far): {worst:?}"
    );
}

#[test]
fn bad_inputs_are_errors() {
    for p in [0.0, -0.0, 1.0, -0.5, 1.5, f64::INFINITY, f64::NEG_INFINITY, f64::MAX] {
        assert_eq!(
            normal_quantile(p),
            Err(Error::OutOfRange { name: "p", value: p, allowed: "(0, 1)" })
        );
        assert_eq!(
            normal_isf(p),
            Err(Error::OutOfRange { name: "q", value: p, allowed: "(0, 1)" })
        );
    }
    assert!(matches!(normal_quantile(f64::NAN), Err(Error::OutOfRange { name: "p", .. })));
    assert!(matches!(normal_isf(f64::NAN), Err(Error::OutOfRange { name: "q", .. })));
    for lp in [0.0, -0.0, 1e-300, 1.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
        assert!(
            matches!(normal_quantile_log(lp), Err(Error::OutOfRange { name: "log_p", .. })),
            "normal_quantile_log({lp}) should be an error"
        );
    }
    // The smallest valid inputs work.
    assert!(normal_quantile(TINY).unwrap() < -38.0);
    assert!(normal_isf(TINY).unwrap() > 38.0);
    assert!(normal_quantile_log(-f64::MAX).unwrap().is_finite());
    assert!(normal_quantile_log(-TINY).unwrap() > 38.0);
}
