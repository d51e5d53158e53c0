//! The output-perturbation DP cross-attention mechanism (`dpattn::output_perturbation`):
//! the per-row sensitivity against its closed forms, the sensitivity bound by brute force
//! and its tightness, the released noise, the clamping and the ledger charges.
//!
//! Expected values come from math and from float64 code written in this file — never from
//! the mechanism's output:
//!
//! * closed forms `Δ = 2R_v / (1 + (n − 1)e^{−2a})` (softmax) and
//!   `Δ = 2R_v · cosh a / (cosh a + n − 1)` (`cosh`), evaluated in double-double arithmetic
//!   (≈ 1e-28 relative), so "the returned bound is ≥ the exact value" is checked for real;
//! * a plain float64 clamped attention (`‖row‖ > R` ⇒ the row is scaled to norm `R`) for
//!   the brute-force neighbour search, the tightness construction of `docs/PRIVACY.md` §2.2
//!   and the noise-free part of the release;
//! * noise elements recomputed with `Gaussian::new(σ).sample_at::<f64>` at the logical
//!   index `((b · heads + h) · s_q + i) · d_v + c`, and the analytic Gaussian calibration
//!   of `calibration::gaussian_mechanism` applied to the sensitivity.
//!
//! Tolerances: brute force `‖o − o'‖ ≤ Δ · (1 + 1e-12)` (float64 rounding of the test's
//! own attention); tightness within `1e-9` relative in float64, `1e-4` relative end to end
//! through the `f32` mechanism (f32 attention, f32 inputs, the clamp's `2^-21` slack); the
//! `f32` release within `1e-5 · (R_v + |expected|)` of the float64 expectation. The
//! statistical test runs at the toolkit's `ALPHA` = 1e-6 with a fixed key.

use crate::support;

use dpattn::accounting::composition::Rho;
use dpattn::accounting::cost::Accountant;
use dpattn::accounting::ledger::{Amount, Ledger};
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::accounting::rdp::DEFAULT_ORDERS;
use dpattn::attention::{AttentionParams, attention_scratch_len};
use dpattn::calibration::gaussian_mechanism::analytic_gaussian_sigma;
use dpattn::grid_release::{GaussianGrid, GridFormat};
use dpattn::noisy_attention::{NoiseSpec, NoiseStream, noisy_attention};
use dpattn::output_perturbation::{
    AttentionErrorModel, OutputPerturbationParams, attention_error_bound,
    output_perturbation_attention_keyed, output_perturbation_grid, output_perturbation_scratch_len,
    output_perturbation_sensitivity, row_sensitivity, worst_case_sensitivity,
};
use dpattn::sampling::{ExactSampler, FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn::session::Draw;
use dpattn::{
    BatchedMut, BatchedRef, Delta, Epsilon, Error, Kernel, Mask, NoiseMode, PrivacyBudget, Scale,
    ScoreFn,
};
use support::problem::{Rng, Shape, norm, shape};
use support::stats::{ALPHA, ks_test, mean_z, moments, normal_cdf, var_z, z_accepts};

/// Written into every output before a call, to prove what was (not) written.
const SENTINEL: f32 = -1234.5;
/// The `f32` release against the float64 expectation: `1e-5 · (R_v + |expected|)`.
const TOL_F32: f64 = 1e-5;

// ---------------------------------------------------------------------------------------
// Deterministic inputs
// ---------------------------------------------------------------------------------------

fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

fn scaled(x: &[f64], c: f64) -> Vec<f64> {
    x.iter().map(|v| v * c).collect()
}

// ---------------------------------------------------------------------------------------
// The float64 clamped attention of this file
// ---------------------------------------------------------------------------------------

/// `row` scaled to norm `bound` if it is longer (the mechanism's clamp, without slack).
fn clamp(row: &[f64], bound: f64) -> Vec<f64> {
    let n = norm(row);
    if n > bound { scaled(row, bound / n) } else { row.to_vec() }
}

/// One query row against the visible `keys`/`values` (already clamped): weights
/// `f(a_j) / Σ f(a_l)` with `a_j = scale · q·k_j` (`exp` shifted by the maximum, `cosh`
/// direct: `|a| < 50` here), times the values. No visible key: the zero row.
fn attend(
    q: &[f64],
    keys: &[Vec<f64>],
    values: &[Vec<f64>],
    scale: f64,
    score: ScoreFn,
) -> Vec<f64> {
    let dv = values.first().map_or(0, Vec::len);
    let mut o = vec![0.0; dv];
    if keys.is_empty() {
        return o;
    }
    let a: Vec<f64> = keys.iter().map(|k| scale * dot(q, k)).collect();
    let m = a.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = a
        .iter()
        .map(|&x| {
            assert!(x.abs() < 50.0, "test data: logit {x}");
            match score {
                ScoreFn::Exp => (x - m).exp(),
                ScoreFn::Cosh => x.cosh(),
            }
        })
        .collect();
    let den: f64 = w.iter().sum();
    for (wj, vj) in w.iter().zip(values) {
        for (oc, x) in o.iter_mut().zip(vj) {
            *oc += wj / den * x;
        }
    }
    o
}

/// The noise-free release of a context, in float64: every key row clamped to `R_k`, every
/// value row to `R_v` (per head), then attention over the kept keys. `[b, h, s_q, d_v]`.
fn clamped_attention(c: &Context, rk: f64, rv: f64, scale: f64, score: ScoreFn) -> Vec<f64> {
    let s = c.s;
    let mut out = Vec::with_capacity(s.out_len());
    for b in 0..s.b {
        for h in 0..s.h {
            let bh = b * s.h + h;
            let (mut keys, mut values) = (Vec::new(), Vec::new());
            for j in 0..s.sk {
                if c.pad.as_ref().is_none_or(|p| p[b * s.sk + j]) {
                    let k: Vec<f64> =
                        c.k[(bh * s.sk + j) * s.d..][..s.d].iter().map(|&x| f64::from(x)).collect();
                    let v: Vec<f64> = c.v[(bh * s.sk + j) * s.dv..][..s.dv]
                        .iter()
                        .map(|&x| f64::from(x))
                        .collect();
                    keys.push(clamp(&k, rk));
                    values.push(clamp(&v, rv));
                }
            }
            for i in 0..s.sq {
                let q: Vec<f64> =
                    c.q[(bh * s.sq + i) * s.d..][..s.d].iter().map(|&x| f64::from(x)).collect();
                let o = attend(&q, &keys, &values, scale, score);
                out.extend(if o.is_empty() { vec![0.0; s.dv] } else { o });
            }
        }
    }
    out
}

/// The per-row bound `2R_v · T` in plain float64 (for sums; the exact check uses [`Dd`]).
fn closed_form(n: usize, a: f64, rv: f64, score: ScoreFn) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let others = (n - 1) as f64;
    let t = match score {
        ScoreFn::Exp => 1.0 / (1.0 + others * (-2.0 * a).exp()),
        ScoreFn::Cosh => a.cosh() / (a.cosh() + others),
    };
    2.0 * rv * t
}

// ---------------------------------------------------------------------------------------
// Double-double arithmetic for the exact closed forms
// ---------------------------------------------------------------------------------------

/// `hi + lo` with `|lo| ≤ ulp(hi)/2`: about 106 bits.
#[derive(Debug, Clone, Copy)]
struct Dd(f64, f64);

fn two_sum(a: f64, b: f64) -> Dd {
    let s = a + b;
    let bb = s - a;
    Dd(s, (a - (s - bb)) + (b - bb))
}

fn quick_two_sum(a: f64, b: f64) -> Dd {
    let s = a + b;
    Dd(s, b - (s - a))
}

impl Dd {
    fn from(x: f64) -> Self {
        Dd(x, 0.0)
    }

    fn add(self, o: Dd) -> Dd {
        let s = two_sum(self.0, o.0);
        let t = two_sum(self.1, o.1);
        let r = quick_two_sum(s.0, s.1 + t.0);
        quick_two_sum(r.0, r.1 + t.1)
    }

    fn mul(self, o: Dd) -> Dd {
        let p = self.0 * o.0;
        let e = self.0.mul_add(o.0, -p) + (self.0 * o.1 + self.1 * o.0);
        quick_two_sum(p, e)
    }

    fn div(self, o: Dd) -> Dd {
        let q1 = self.0 / o.0;
        let r = self.add(o.mul(Dd::from(-q1)));
        let q2 = r.0 / o.0;
        let r = r.add(o.mul(Dd::from(-q2)));
        let q3 = r.0 / o.0;
        quick_two_sum(q1, q2).add(Dd::from(q3))
    }

    /// `e^x` for `|x| ≤ 40`: halve `x` (exactly) to `|y| ≤ 2^-10`, Taylor to 14 terms
    /// (remainder < 1e-45), square back. Relative error ≲ 2^16 · 1e-32 < 1e-27.
    fn exp(x: f64) -> Dd {
        assert!(x.abs() <= 40.0);
        let (mut y, mut m) = (x, 0);
        while y.abs() > 1.0 / 1024.0 {
            y *= 0.5;
            m += 1;
        }
        let (mut term, mut sum) = (Dd::from(1.0), Dd::from(1.0));
        for k in 1..=14 {
            term = term.mul(Dd::from(y)).div(Dd::from(f64::from(k)));
            sum = sum.add(term);
        }
        for _ in 0..m {
            sum = sum.mul(sum);
        }
        sum
    }
}

/// The exact `2R_v · T(n, a)` in double-double (`n ≥ 1`).
fn exact_bound(n: usize, a: f64, rv: f64, score: ScoreFn) -> Dd {
    let one = Dd::from(1.0);
    let others = Dd::from((n - 1) as f64);
    let t = match score {
        ScoreFn::Exp => one.div(one.add(others.mul(Dd::exp(-2.0 * a)))),
        ScoreFn::Cosh => {
            let cosh = Dd::exp(a).add(Dd::exp(-a)).mul(Dd::from(0.5));
            cosh.div(cosh.add(others))
        }
    };
    Dd::from(2.0 * rv).mul(t)
}

// ---------------------------------------------------------------------------------------
// 1. row_sensitivity against the closed forms
// ---------------------------------------------------------------------------------------

#[test]
fn row_sensitivity_is_the_closed_form_rounded_up() {
    let a_grid = [0.0, 1e-9, 0.1, 0.5, std::f64::consts::LN_2, 1.0, 2.5, 5.0, 10.0];
    let n_grid = [2usize, 3, 5, 10, 40, 1000, 123_457, 1 << 40];
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        for rv in [0.5, 1.0, 1.7, 1e-3, 250.0] {
            assert_eq!(row_sensitivity(0, 1.0, rv, score).unwrap(), 0.0, "n = 0");
            for a in a_grid {
                // One visible key: the whole ball, exactly 2 R_v.
                assert_eq!(row_sensitivity(1, a, rv, score).unwrap(), 2.0 * rv, "n = 1, a = {a}");
                for n in n_grid {
                    let got = row_sensitivity(n, a, rv, score).unwrap();
                    let exact = exact_bound(n, a, rv, score);
                    // got − exact, exactly (Sterbenz) up to the 1e-28 of the double-double.
                    let excess = (got - exact.0) - exact.1;
                    let ctx = format!("{score:?} n = {n}, a = {a}, R_v = {rv}: {got} vs {exact:?}");
                    assert!(excess >= -1e-25 * exact.0, "below the exact value: {ctx}");
                    assert!(excess <= 1e-12 * exact.0, "more than 1e-12 above: {ctx}");
                }
            }
            // A dense random sweep: where libm rounds e^{-2a} or cosh a the wrong way, only
            // the library's padding keeps the result above the exact value.
            let mut r = Rng(rv.to_bits());
            for _ in 0..2000 {
                let a = r.range(0.0, 12.0);
                let n = 2 + r.below(5000);
                let got = row_sensitivity(n, a, rv, score).unwrap();
                let exact = exact_bound(n, a, rv, score);
                let excess = (got - exact.0) - exact.1;
                let ctx = format!("{score:?} n = {n}, a = {a}, R_v = {rv}: {got} vs {exact:?}");
                assert!(excess >= -1e-25 * exact.0, "below the exact value: {ctx}");
                assert!(excess <= 1e-12 * exact.0, "more than 1e-12 above: {ctx}");
            }
            // Where T = 1/n exactly (a = 0), "≥" is decided exactly by one FMA:
            // sign(got · n − 2R_v) is the sign of the exact residual.
            for n in [3usize, 7, 10, 1000, 999_999] {
                let got = row_sensitivity(n, 0.0, rv, score).unwrap();
                assert!(
                    got.mul_add(n as f64, -2.0 * rv) >= 0.0,
                    "{score:?} n = {n}: {got} < 2R_v/n"
                );
            }
        }
    }
}

#[test]
fn row_sensitivity_is_monotone() {
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        // Strictly decreasing in n for a > 0 and at a = 0 (T = 1/n).
        for a in [0.0, 0.3, 1.0, 4.0, 10.0] {
            let mut prev = row_sensitivity(1, a, 1.0, score).unwrap();
            for n in (2..=200).chain([1000, 10_000, 1 << 30]) {
                let d = row_sensitivity(n, a, 1.0, score).unwrap();
                assert!(d < prev, "{score:?} a = {a}: Δ({n}) = {d} ≥ previous {prev}");
                prev = d;
            }
        }
        // Strictly increasing in a (n ≥ 2), up to 2R_v.
        for n in [2usize, 3, 10, 1000] {
            let mut prev = row_sensitivity(n, 0.0, 1.0, score).unwrap();
            for step in 1..=120 {
                let a = f64::from(step) * 0.125;
                let d = row_sensitivity(n, a, 1.0, score).unwrap();
                assert!(d > prev, "{score:?} n = {n}: Δ(a = {a}) = {d} ≤ previous {prev}");
                assert!(d <= 2.0, "{score:?}: {d} > 2R_v");
                prev = d;
            }
        }
        // Linear in R_v (within the upward rounding).
        let one = row_sensitivity(17, 1.3, 1.0, score).unwrap();
        let three = row_sensitivity(17, 1.3, 3.0, score).unwrap();
        assert!((three / (3.0 * one) - 1.0).abs() < 1e-15);
    }
}

#[test]
fn row_sensitivity_rejects_bad_bounds_and_worst_case_is_sqrt_rows_times_row() {
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        for a in [-1e-300, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let r = row_sensitivity(3, a, 1.0, score);
            assert!(matches!(r, Err(Error::OutOfRange { .. })), "a = {a}: {r:?}");
        }
        for rv in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let r = row_sensitivity(3, 1.0, rv, score);
            assert!(matches!(r, Err(Error::OutOfRange { .. })), "R_v = {rv}: {r:?}");
        }
        // worst_case_sensitivity: √rows · Δ(n, scale · R_q · R_k), rounded up.
        for (rows, n, rq, rk, rv, scale) in [
            (64usize, 1024usize, 2.0, 2.0, 1.0, 0.125),
            (3, 5, 0.7, 1.3, 0.4, 0.9),
            (1, 1, 1.0, 1.0, 2.0, 1.0),
        ] {
            let got = worst_case_sensitivity(rows, n, rq, rk, rv, scale, score).unwrap();
            let exact = exact_bound(n, scale * rq * rk, rv, score).0 * (rows as f64).sqrt();
            assert!(
                got >= exact * (1.0 - 1e-15) && got <= exact * (1.0 + 1e-12),
                "{got} vs {exact}"
            );
        }
        for bad in [0.0, -1.0, f64::NAN] {
            assert!(worst_case_sensitivity(2, 3, bad, 1.0, 1.0, 1.0, score).is_err());
            assert!(worst_case_sensitivity(2, 3, 1.0, bad, 1.0, 1.0, score).is_err());
            assert!(worst_case_sensitivity(2, 3, 1.0, 1.0, bad, 1.0, score).is_err());
            assert!(worst_case_sensitivity(2, 3, 1.0, 1.0, 1.0, bad, score).is_err());
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. The bound by brute force, and its tightness
// ---------------------------------------------------------------------------------------

/// A small public/private instance: `heads` heads, `sq` public queries per head, `n` key
/// positions (keys `d`-dimensional, values `dv`-dimensional), all visible.
struct Instance {
    heads: usize,
    sq: usize,
    d: usize,
    scale: f64,
    rk: f64,
    rv: f64,
    score: ScoreFn,
    /// `q[h][i]`.
    q: Vec<Vec<Vec<f64>>>,
    /// `k[h][j]`, `v[h][j]` (raw: clamped when used).
    k: Vec<Vec<Vec<f64>>>,
    v: Vec<Vec<Vec<f64>>>,
}

impl Instance {
    /// Clamped attention of every (head, row): `out[h][i]`.
    fn outputs(&self, k: &[Vec<Vec<f64>>], v: &[Vec<Vec<f64>>]) -> Vec<Vec<Vec<f64>>> {
        (0..self.heads)
            .map(|h| {
                let keys: Vec<Vec<f64>> = k[h].iter().map(|r| clamp(r, self.rk)).collect();
                let values: Vec<Vec<f64>> = v[h].iter().map(|r| clamp(r, self.rv)).collect();
                self.q[h]
                    .iter()
                    .map(|q| attend(q, &keys, &values, self.scale, self.score))
                    .collect()
            })
            .collect()
    }

    /// `Δ_b` of the library for this instance's public queries (float64 queries, so the
    /// norms are exactly the test's).
    fn library_frobenius(&self, n: usize) -> f64 {
        let flat: Vec<f64> = self.q.iter().flatten().flatten().copied().collect();
        let q = BatchedRef::contiguous(&flat, [1, self.heads, self.sq, self.d]).unwrap();
        let params = dp_params(self.rk, self.rv, self.scale, self.score, None);
        let mut s = [0.0];
        output_perturbation_sensitivity(q, &params, n, &mut s).unwrap();
        s[0]
    }
}

/// A key row for head `h` and query direction `u`: random (norm up to 1.6 R_k, so some are
/// clamped), aligned or anti-aligned with `u` at norm R_k or beyond (clamped back to ±R_k·u),
/// or zero (logit 0: the `cosh` minimum).
fn key_row(r: &mut Rng, d: usize, u: &[f64], rk: f64) -> Vec<f64> {
    match r.below(6) {
        0 | 1 => r.vector(d, 1.6 * rk),
        2 => scaled(u, rk),
        3 => scaled(u, -rk * r.range(1.0, 3.0)),
        4 => scaled(u, rk * r.range(1.0, 3.0)),
        _ => vec![0.0; d],
    }
}

/// A value row: random (norm up to 1.6 R_v), or `±R_v · e` (beyond, to be clamped back).
fn value_row(r: &mut Rng, dv: usize, e: &[f64], rv: f64) -> Vec<f64> {
    match r.below(4) {
        0 | 1 => r.vector(dv, 1.6 * rv),
        2 => scaled(e, rv * r.range(1.0, 2.0)),
        _ => scaled(e, -rv * r.range(1.0, 2.0)),
    }
}

#[test]
fn brute_force_neighbours_never_exceed_the_bound() {
    // 2 scores × 5 n × 3 d × 2 d_v = 60 configurations × 500 instances = 30 000 trials,
    // each with 1–2 heads × 3 public queries. A third of the instances are adversarial
    // (every other key at the row's minimum score, values −R_v·e), the rest random with
    // adversarial rows mixed in; the replaced position gets a random or adversarial
    // (key, value). Checked: every row's ‖o − o'‖ ≤ row_sensitivity(n, scale·‖q‖·R_k, R_v)
    // and the Frobenius change over all heads and rows ≤ output_perturbation_sensitivity,
    // both with 1e-12 relative slack for the float64 rounding of the test's attention.
    let mut r = Rng(2024);
    let mut trials = 0usize;
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        let mut worst_row = 0.0f64;
        let mut worst_frob = 0.0f64;
        for n in [2usize, 3, 5, 10, 40] {
            for d in [1usize, 2, 4] {
                for dv in [1usize, 3] {
                    for _ in 0..500 {
                        trials += 1;
                        let heads = 1 + r.below(2);
                        let sq = 3;
                        let (rk, rv) = (r.range(0.5, 2.0), r.range(0.5, 2.0));
                        let scale = r.range(0.1, 2.0);
                        let adversarial = r.below(3) == 0;
                        let mut inst = Instance {
                            heads,
                            sq,
                            d,
                            scale,
                            rk,
                            rv,
                            score,
                            q: Vec::new(),
                            k: Vec::new(),
                            v: Vec::new(),
                        };
                        let mut dirs = Vec::new();
                        for _ in 0..heads {
                            // Query norms 0, small and large; the first query's direction
                            // drives the adversarial rows of this head.
                            let u = r.direction(d);
                            let e = r.direction(dv);
                            let qs: Vec<Vec<f64>> = (0..sq)
                                .map(|i| match (i, r.below(4)) {
                                    (0, _) => scaled(&u, r.range(0.2, 3.0)),
                                    (_, 0) => vec![0.0; d],
                                    (_, 1) => scaled(&u, r.range(0.0, 3.0)),
                                    _ => r.vector(d, 3.0),
                                })
                                .collect();
                            let (ks, vs): (Vec<_>, Vec<_>) = (0..n)
                                .map(|_| {
                                    if adversarial {
                                        let k = match score {
                                            ScoreFn::Exp => scaled(&u, -rk),
                                            ScoreFn::Cosh => vec![0.0; d],
                                        };
                                        (k, scaled(&e, -rv))
                                    } else {
                                        (key_row(&mut r, d, &u, rk), value_row(&mut r, dv, &e, rv))
                                    }
                                })
                                .unzip();
                            inst.q.push(qs);
                            inst.k.push(ks);
                            inst.v.push(vs);
                            dirs.push((u, e));
                        }
                        // Replace position p in every head.
                        let p = r.below(n);
                        let (mut k2, mut v2) = (inst.k.clone(), inst.v.clone());
                        for (h, (u, e)) in dirs.iter().enumerate() {
                            k2[h][p] = key_row(&mut r, d, u, rk);
                            v2[h][p] = value_row(&mut r, dv, e, rv);
                            if adversarial && r.below(2) == 0 {
                                // The old row at the maximum score with value +R_v·e.
                                inst.k[h][p] = scaled(u, rk);
                                inst.v[h][p] = scaled(e, rv);
                            }
                        }
                        let o1 = inst.outputs(&inst.k, &inst.v);
                        let o2 = inst.outputs(&k2, &v2);
                        let mut frob_sq = 0.0;
                        for h in 0..heads {
                            for i in 0..sq {
                                let diff: Vec<f64> =
                                    o1[h][i].iter().zip(&o2[h][i]).map(|(a, b)| a - b).collect();
                                let change = norm(&diff);
                                frob_sq += change * change;
                                let a = scale * norm(&inst.q[h][i]) * rk;
                                let bound = row_sensitivity(n, a, rv, score).unwrap();
                                assert!(
                                    change <= bound * (1.0 + 1e-12),
                                    "{score:?} n {n} d {d} dv {dv} head {h} row {i}: \
                                     change {change} > bound {bound}"
                                );
                                worst_row = worst_row.max(change / bound);
                            }
                        }
                        let frob = frob_sq.sqrt();
                        let delta_b = inst.library_frobenius(n);
                        assert!(
                            frob <= delta_b * (1.0 + 1e-12),
                            "{score:?} n {n} d {d} dv {dv}: Frobenius change {frob} > Δ_b {delta_b}"
                        );
                        worst_frob = worst_frob.max(frob / delta_b);
                    }
                }
            }
        }
        // The search is not vacuous: the adversarial instances come close to the bound.
        assert!(worst_row > 0.99, "{score:?}: worst row ratio only {worst_row}");
        assert!(worst_frob > 0.5, "{score:?}: worst Frobenius ratio only {worst_frob}");
    }
    assert!(trials >= 30_000);
}

/// The worst case of `docs/PRIVACY.md` §2.2 for one head: queries along `u`, every other
/// key at the row's minimum score (`−R_k u` for softmax, `0` for `cosh`) with value
/// `−R_v e`; position `p` changes from `(R_k u, R_v e)` to (minimum-score key, `−R_v e`).
/// Returns `(keys, values, keys', values')`.
#[allow(clippy::type_complexity)]
fn worst_case(
    n: usize,
    p: usize,
    u: &[f64],
    e: &[f64],
    rk: f64,
    rv: f64,
    score: ScoreFn,
) -> (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let low = match score {
        ScoreFn::Exp => scaled(u, -rk),
        ScoreFn::Cosh => vec![0.0; u.len()],
    };
    let mut k = vec![low.clone(); n];
    let mut v = vec![scaled(e, -rv); n];
    let (k2, v2) = (k.clone(), v.clone());
    k[p] = scaled(u, rk);
    v[p] = scaled(e, rv);
    (k, v, k2, v2)
}

#[test]
fn the_bound_is_attained() {
    // ‖o − o'‖ = 2R_v · T exactly in the construction above: float64 within 1e-9 relative.
    let mut r = Rng(7);
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        for n in [1usize, 2, 3, 5, 10, 40, 1000] {
            for qn in [0.0, 0.3, 1.0, 2.5] {
                let (d, dv) = (3, 2);
                let (u, e) = (r.direction(d), r.direction(dv));
                let (rk, rv, scale) = (1.3, 0.8, 0.7);
                let q = scaled(&u, qn);
                let p = r.below(n);
                let (k, v, k2, v2) = worst_case(n, p, &u, &e, rk, rv, score);
                let o1 = attend(&q, &k, &v, scale, score);
                let o2 = attend(&q, &k2, &v2, scale, score);
                let change = norm(&o1.iter().zip(&o2).map(|(a, b)| a - b).collect::<Vec<_>>());
                let bound = row_sensitivity(n, scale * norm(&q) * rk, rv, score).unwrap();
                assert!(
                    (change / bound - 1.0).abs() < 1e-9,
                    "{score:?} n {n} ‖q‖ {qn}: change {change} vs bound {bound}"
                );
            }
        }
    }
}

#[test]
fn the_mechanism_attains_its_frobenius_sensitivity_on_the_worst_case() {
    // Two neighbouring contexts (the worst case in every head, queries of three norms
    // along one direction per head) released with the same key and stream: the noise is
    // the same element by element, so ‖out − out'‖_F is the attention change, which must
    // equal Δ_b within 1e-4 (f32 attention and inputs, the 2^-21 clamp slack, the f32
    // rounding of the noisy outputs).
    let mut r = Rng(8);
    let s = shape(1, 2, 3, 12, 4, 3);
    let (rk, rv, scale) = (1.25, 0.75, 0.6);
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        let (mut c1, mut c2) = (Context::zeros(s), Context::zeros(s));
        for h in 0..s.h {
            let (u, e) = (r.direction(s.d), r.direction(s.dv));
            for (i, qn) in [0.5, 1.2, 2.0].iter().enumerate() {
                c1.set_q(0, h, i, &scaled(&u, *qn));
            }
            let (k, v, k2, v2) = worst_case(s.sk, 5, &u, &e, rk, rv, score);
            for j in 0..s.sk {
                c1.set_kv(0, h, j, &k[j], &v[j]);
                c2.set_kv(0, h, j, &k2[j], &v2[j]);
            }
        }
        c2.q = c1.q.clone();
        let params = dp_params(rk, rv, scale, score, None);
        let key = NoiseKey::for_replay([1; 32]);
        let (o1, sigma1) = release(&c1, &params, &key, 3, None).unwrap();
        let (o2, sigma2) = release(&c2, &params, &key, 3, None).unwrap();
        assert_eq!(sigma1, sigma2, "σ depends on public data only");
        let frob = o1
            .iter()
            .zip(&o2)
            .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
            .sum::<f64>()
            .sqrt();
        let delta_b = sensitivity(&c1, &params)[0];
        assert!((frob / delta_b - 1.0).abs() < 1e-4, "{score:?}: change {frob} vs Δ_b {delta_b}");
        // And in float64 (no rounding but the test's): the same, within 1e-9.
        let e1 = clamped_attention(&c1, rk, rv, scale, score);
        let e2 = clamped_attention(&c2, rk, rv, scale, score);
        let f64_frob = e1.iter().zip(&e2).map(|(a, b)| (a - b).powi(2)).sum::<f64>().sqrt();
        assert!((f64_frob / delta_b - 1.0).abs() < 1e-6, "{score:?}: {f64_frob} vs {delta_b}");
    }
}

// ---------------------------------------------------------------------------------------
// 3. The mechanism
// ---------------------------------------------------------------------------------------

/// A release's inputs in `f32`, densely packed, with an optional key-padding mask.
#[derive(Debug, Clone)]
struct Context {
    s: Shape,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    pad: Option<Vec<bool>>,
}

impl Context {
    fn zeros(s: Shape) -> Self {
        Context {
            s,
            q: vec![0.0; s.b * s.h * s.sq * s.d],
            k: vec![0.0; s.b * s.h * s.sk * s.d],
            v: vec![0.0; s.b * s.h * s.sk * s.dv],
            pad: None,
        }
    }

    /// Random queries (norms up to `qmax`), keys and values with norms up to `kmax`, `vmax`
    /// (beyond the bounds when larger than them).
    fn random(s: Shape, r: &mut Rng, qmax: f64, kmax: f64, vmax: f64) -> Self {
        let mut c = Context::zeros(s);
        for b in 0..s.b {
            for h in 0..s.h {
                for i in 0..s.sq {
                    c.set_q(b, h, i, &r.vector(s.d, qmax));
                }
                for j in 0..s.sk {
                    let (k, v) = (r.vector(s.d, kmax), r.vector(s.dv, vmax));
                    c.set_kv(b, h, j, &k, &v);
                }
            }
        }
        c
    }

    fn set_q(&mut self, b: usize, h: usize, i: usize, x: &[f64]) {
        let s = self.s;
        for (o, x) in self.q[((b * s.h + h) * s.sq + i) * s.d..][..s.d].iter_mut().zip(x) {
            *o = *x as f32;
        }
    }

    fn set_kv(&mut self, b: usize, h: usize, j: usize, k: &[f64], v: &[f64]) {
        let s = self.s;
        for (o, x) in self.k[((b * s.h + h) * s.sk + j) * s.d..][..s.d].iter_mut().zip(k) {
            *o = *x as f32;
        }
        for (o, x) in self.v[((b * s.h + h) * s.sk + j) * s.dv..][..s.dv].iter_mut().zip(v) {
            *o = *x as f32;
        }
    }

    /// Number of kept keys of batch element `b`.
    fn visible(&self, b: usize) -> usize {
        let sk = self.s.sk;
        self.pad.as_ref().map_or(sk, |p| p[b * sk..(b + 1) * sk].iter().filter(|&&x| x).count())
    }

    fn views(&self) -> (BatchedRef<'_, f32>, BatchedRef<'_, f32>, BatchedRef<'_, f32>) {
        let s = self.s;
        (
            BatchedRef::contiguous(&self.q, [s.b, s.h, s.sq, s.d]).unwrap(),
            BatchedRef::contiguous(&self.k, [s.b, s.h, s.sk, s.d]).unwrap(),
            BatchedRef::contiguous(&self.v, [s.b, s.h, s.sk, s.dv]).unwrap(),
        )
    }
}

/// Parameters with `(ε, δ) = (1, 1e-5)` and a custom scale.
fn dp_params<'a>(
    rk: f64,
    rv: f64,
    scale: f64,
    score: ScoreFn,
    key_padding: Option<&'a [bool]>,
) -> OutputPerturbationParams<'a> {
    OutputPerturbationParams {
        key_norm: rk,
        value_norm: rv,
        budget: PrivacyBudget::new(1.0, 1e-5).unwrap(),
        scale: Scale::Custom(scale),
        score,
        key_padding,
        kernel: Kernel::Auto,
        // Sections 3 and 4 pin the float noise draw; section 5 tests the exact mode.
        noise_mode: NoiseMode::UnsafeFloat,
    }
}

/// `output_perturbation` into `out` (sentinel-filled by the caller) with `sigma` of
/// `batch · heads` entries.
fn try_release_into(
    c: &Context,
    params: &OutputPerturbationParams<'_>,
    key: &NoiseKey,
    stream: u64,
    ledger: Option<&mut dyn Accountant>,
    out: &mut [f32],
    sigma: &mut [f64],
) -> dpattn::Result<()> {
    let s = c.s;
    let (q, k, v) = c.views();
    let o = BatchedMut::contiguous(out, [s.b, s.h, s.sq, s.dv]).unwrap();
    let mut scratch = vec![0f32; output_perturbation_scratch_len(s.d, s.dv).unwrap()];
    output_perturbation_attention_keyed(
        o,
        q,
        k,
        v,
        params,
        Draw { key, stream },
        ledger,
        sigma,
        &mut scratch,
    )
    .map(|_| ())
}

/// A release without a ledger: the output and `σ` per `(b, h)`.
fn release(
    c: &Context,
    params: &OutputPerturbationParams<'_>,
    key: &NoiseKey,
    stream: u64,
    ledger: Option<&mut dyn Accountant>,
) -> dpattn::Result<(Vec<f32>, Vec<f64>)> {
    let mut out = vec![SENTINEL; c.s.out_len()];
    let mut sigma = vec![f64::NAN; c.s.b * c.s.h];
    try_release_into(c, params, key, stream, ledger, &mut out, &mut sigma)?;
    Ok((out, sigma))
}

/// The library's `Δ_b` for every batch element.
fn sensitivity(c: &Context, params: &OutputPerturbationParams<'_>) -> Vec<f64> {
    let (q, _, _) = c.views();
    let mut out = vec![f64::NAN; c.s.b];
    output_perturbation_sensitivity(q, params, c.s.sk, &mut out).unwrap();
    out
}

/// `Δ_b` from the closed form in float64: `√(Σ_{h,i} (2R_v T(n_b, scale‖q‖R_k))²)`.
fn closed_form_delta_b(c: &Context, b: usize, rk: f64, rv: f64, scale: f64, score: ScoreFn) -> f64 {
    let s = c.s;
    let n = c.visible(b);
    let mut sum = 0.0;
    for h in 0..s.h {
        for i in 0..s.sq {
            let q = &c.q[((b * s.h + h) * s.sq + i) * s.d..][..s.d];
            let qn = q.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
            sum += closed_form(n, scale * qn * rk, rv, score).powi(2);
        }
    }
    sum.sqrt()
}

#[test]
fn released_noise_is_gaussian_with_the_calibrated_sigma() {
    // 2 batch elements (the second with 3 of 8 keys padded, same queries) × 2 heads × 100
    // rows × 128 = 51 200 noise values (out − the float64 clamped attention), each divided
    // by its σ_b: mean z-test, variance z-test (μ4 = 3) and KS against N(0, 1) at
    // ALPHA = 1e-6. The f32 rounding (~1e-6 of σ) and the clamp slack are negligible.
    let mut r = Rng(99);
    let s = shape(2, 2, 100, 8, 4, 128);
    let mut c = Context::random(s, &mut r, 2.0, 2.0, 2.0);
    let half = s.h * s.sq * s.d;
    let (q0, q1) = c.q.split_at_mut(half);
    q1.copy_from_slice(q0);
    let mut pad = vec![true; s.b * s.sk];
    for j in [1, 4, 6] {
        pad[s.sk + j] = false;
    }
    c.pad = Some(pad);
    let (rk, rv, scale) = (1.0, 1.0, 0.5);
    let params = dp_params(rk, rv, scale, ScoreFn::Exp, c.pad.as_deref());
    let key = NoiseKey::for_replay([9; 32]);
    let (out, sigma) = release(&c, &params, &key, 17, None).unwrap();

    // σ_b = analytic_gaussian_sigma(ε, δ, Δ_b) for every head of b, and Δ_b is the closed
    // form (rounded up: within [−1e-14, 1e-12] relative of the plain float64 sum).
    let delta = sensitivity(&c, &params);
    for b in 0..s.b {
        let want = closed_form_delta_b(&c, b, rk, rv, scale, ScoreFn::Exp);
        assert!(delta[b] / want - 1.0 >= -1e-14 && delta[b] / want - 1.0 <= 1e-12, "Δ_{b}");
        let sb = analytic_gaussian_sigma(1.0, 1e-5, delta[b]).unwrap();
        for h in 0..s.h {
            assert_eq!(sigma[b * s.h + h], sb, "σ of (b, h) = ({b}, {h})");
        }
    }
    // Fewer visible keys, same queries: strictly larger sensitivity and noise.
    assert!(delta[1] > delta[0] && sigma[s.h] > sigma[0], "Δ = {delta:?}, σ = {sigma:?}");

    let exact = clamped_attention(&c, rk, rv, scale, ScoreFn::Exp);
    let per_b = s.h * s.sq * s.dv;
    let z: Vec<f64> = out
        .iter()
        .zip(&exact)
        .enumerate()
        .map(|(idx, (o, e))| (f64::from(*o) - e) / sigma[(idx / per_b) * s.h])
        .collect();
    assert!(z.len() >= 50_000);
    let m = moments(&z);
    let (zm, zv) = (mean_z(&m, 0.0, 1.0), var_z(&m, 1.0, 3.0));
    assert!(z_accepts(zm), "mean {} (z = {zm})", m.mean);
    assert!(z_accepts(zv), "variance {} (z = {zv})", m.var);
    let ks = ks_test(&z, normal_cdf);
    assert!(ks.p_value >= ALPHA, "KS against N(0, 1): {ks:?}");
}

#[test]
fn release_is_clamped_attention_plus_the_addressed_draw() {
    // Batch 0: all 70 keys; batch 1: a random 3/4 of them; batch 2: none (σ = 0, output
    // exactly zero). Keys and values up to 3× their bounds (most get clamped), 70 keys
    // (two key blocks). Expected: the float64 clamped attention plus element
    // ((b·H + h)·s_q + i)·d_v + c of Gaussian(σ_b) on (key, stream), f32 within 1e-5.
    let mut r = Rng(5);
    let s = shape(3, 2, 7, 70, 5, 6);
    let (rk, rv, scale) = (0.8, 1.5, 0.45);
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        let mut c = Context::random(s, &mut r, 2.5, 3.0 * rk, 3.0 * rv);
        let mut pad: Vec<bool> = (0..s.b * s.sk).map(|_| r.below(4) != 0).collect();
        pad[..s.sk].fill(true);
        pad[2 * s.sk..].fill(false);
        c.pad = Some(pad);
        let params = dp_params(rk, rv, scale, score, c.pad.as_deref());
        let key = NoiseKey::for_replay([77; 32]);
        let stream = 123_456_789;
        let (out, sigma) = release(&c, &params, &key, stream, None).unwrap();
        let exact = clamped_attention(&c, rk, rv, scale, score);
        let draw = KeyedStream::new(&key, stream);
        let per_b = s.h * s.sq * s.dv;
        for (idx, (o, e)) in out.iter().zip(&exact).enumerate() {
            let b = idx / per_b;
            let h = (idx / (s.sq * s.dv)) % s.h;
            let sg = sigma[b * s.h + h];
            if b == 2 {
                assert_eq!(sg, 0.0);
                assert_eq!(*o, 0.0, "{score:?}: fully padded batch element, element {idx}");
                continue;
            }
            assert!(sg > 0.0);
            let z = Gaussian::new(sg).unwrap().sample_at::<f64>(&draw, idx as u64).unwrap();
            let want = e + z;
            let got = f64::from(*o);
            assert!(
                (got - want).abs() <= TOL_F32 * (rv + want.abs()),
                "{score:?} element {idx}: got {got}, want {want} (attention {e}, noise {z})"
            );
        }
        // The clamping matters here: without it the expectation would be far off.
        let unclamped = clamped_attention(&c, f64::INFINITY, f64::INFINITY, scale, score);
        let far = exact.iter().zip(&unclamped).filter(|(a, b)| (*a - *b).abs() > 1e-2).count();
        assert!(far > exact.len() / 4, "{score:?}: test data barely clamped ({far})");
    }
}

#[test]
fn release_noise_is_the_noisy_attention_output_draw() {
    // Same key and stream, σ per (b, h) as returned: output_perturbation equals
    // noisy_attention (output noise only) bitwise on rows already inside the bounds (the
    // clamp factor is then exactly 1), and within 1e-5 on rows pre-clamped by the test.
    let mut r = Rng(6);
    let s = shape(2, 3, 11, 20, 4, 5);
    let (rk, rv, scale) = (1.0, 2.0, 0.8);
    let key = NoiseKey::for_replay([55; 32]);
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        for inside in [true, false] {
            let (kmax, vmax) = if inside { (0.9 * rk, 0.9 * rv) } else { (3.0 * rk, 3.0 * rv) };
            let mut c = Context::random(s, &mut r, 2.0, kmax, vmax);
            let mut pad = vec![true; s.b * s.sk];
            pad[s.sk + 3..s.sk + 9].fill(false);
            c.pad = Some(pad);
            let params = dp_params(rk, rv, scale, score, c.pad.as_deref());
            let (out, sigma) = release(&c, &params, &key, 40, None).unwrap();
            // Pre-clamp the private rows in the test (to norm exactly R, in f64, then f32).
            let mut pre = c.clone();
            for b in 0..s.b {
                for h in 0..s.h {
                    for j in 0..s.sk {
                        let bh = (b * s.h + h) * s.sk + j;
                        let k: Vec<f64> =
                            c.k[bh * s.d..][..s.d].iter().map(|&x| f64::from(x)).collect();
                        let v: Vec<f64> =
                            c.v[bh * s.dv..][..s.dv].iter().map(|&x| f64::from(x)).collect();
                        pre.set_kv(b, h, j, &clamp(&k, rk), &clamp(&v, rv));
                    }
                }
            }
            let spec = NoiseSpec {
                key: &key,
                output: Some(NoiseStream { stream: 40, sigma: &sigma }),
                logits: None,
            };
            let ap = AttentionParams {
                mask: Mask { causal: false, key_padding: pre.pad.as_deref() },
                scale: Scale::Custom(scale),
                score,
                kernel: Kernel::Auto,
            };
            let mut noisy = vec![SENTINEL; s.out_len()];
            let (q, k, v) = pre.views();
            let o = BatchedMut::contiguous(&mut noisy, [s.b, s.h, s.sq, s.dv]).unwrap();
            noisy_attention(
                o,
                q,
                k,
                v,
                &ap,
                &spec,
                &mut vec![0f32; attention_scratch_len(s.d, s.dv).unwrap()],
            )
            .unwrap();
            for (idx, (a, b)) in out.iter().zip(&noisy).enumerate() {
                if inside {
                    assert_eq!(a.to_bits(), b.to_bits(), "{score:?} element {idx}: {a} vs {b}");
                } else {
                    let (a, b) = (f64::from(*a), f64::from(*b));
                    assert!(
                        (a - b).abs() <= TOL_F32 * (rv + b.abs()),
                        "{score:?} element {idx}: {a} vs {b}"
                    );
                }
            }
        }
    }
}

#[test]
fn noise_changes_with_the_key_and_the_stream_and_is_replayable() {
    let mut r = Rng(10);
    let s = shape(1, 2, 9, 6, 3, 4);
    let c = Context::random(s, &mut r, 1.0, 1.0, 1.0);
    let params = dp_params(1.0, 1.0, 0.5, ScoreFn::Exp, None);
    let (k1, k2) = (NoiseKey::for_replay([1; 32]), NoiseKey::for_replay([2; 32]));
    let (a, sa) = release(&c, &params, &k1, 0, None).unwrap();
    let (b, sb) = release(&c, &params, &k1, 0, None).unwrap();
    assert_eq!(sa, sb);
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "not replayable");
    for (name, other) in [
        ("key", release(&c, &params, &k2, 0, None).unwrap().0),
        ("stream", release(&c, &params, &k1, 1, None).unwrap().0),
    ] {
        let same = a.iter().zip(&other).filter(|(x, y)| x == y).count();
        assert_eq!(same, 0, "another {name} gives {same} equal elements");
    }
}

// ---------------------------------------------------------------------------------------
// 4. The ledger
// ---------------------------------------------------------------------------------------

fn small_context(seed: u64) -> Context {
    let mut r = Rng(seed);
    let s = shape(2, 2, 5, 9, 3, 4);
    let mut c = Context::random(s, &mut r, 1.5, 1.5, 1.5);
    let mut pad = vec![true; s.b * s.sk];
    pad[s.sk..s.sk + 4].fill(false); // batch 1: fewer keys, larger Δ_b
    c.pad = Some(pad);
    c
}

#[test]
fn approximate_ledger_is_charged_epsilon_delta_once_per_call() {
    let c = small_context(1);
    let mut params = dp_params(1.0, 1.0, 0.5, ScoreFn::Exp, c.pad.as_deref());
    params.budget = PrivacyBudget::new(0.5, 1e-6).unwrap();
    let mut ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(2.0, 1e-5).unwrap());
    let key = NoiseKey::for_replay([3; 32]);
    release(&c, &params, &key, 0, Some(&mut ledger)).unwrap();
    assert_eq!(ledger.charges(), 1);
    assert_eq!(ledger.spent(), Amount::Approx { epsilon: 0.5, delta: 1e-6 });
    release(&c, &params, &key, 1, Some(&mut ledger)).unwrap();
    assert_eq!(ledger.charges(), 2);
    assert_eq!(ledger.spent(), Amount::Approx { epsilon: 1.0, delta: 2e-6 });
}

#[test]
fn zcdp_and_rdp_ledgers_are_charged_the_gaussian_rho() {
    // ρ = max_b Δ_b² / (2σ_b²) from the returned σ and the library's Δ_b, within 1e-12.
    let c = small_context(2);
    let params = dp_params(1.0, 1.0, 0.5, ScoreFn::Cosh, c.pad.as_deref());
    let key = NoiseKey::for_replay([4; 32]);
    let delta = sensitivity(&c, &params);
    let mut ledger = Ledger::new_zcdp(PrivacyUnit::TOKEN, Rho::new(10.0).unwrap());
    let (_, sigma) = release(&c, &params, &key, 0, Some(&mut ledger)).unwrap();
    let rho = (0..c.s.b)
        .map(|b| delta[b] * delta[b] / (2.0 * sigma[b * c.s.h] * sigma[b * c.s.h]))
        .fold(0.0, f64::max);
    assert!(rho > 0.0);
    let Amount::Zcdp { rho: spent } = ledger.spent() else { panic!("{:?}", ledger.spent()) };
    assert!((spent / rho - 1.0).abs() < 1e-12, "spent ρ {spent} vs Δ²/2σ² = {rho}");
    assert_eq!(ledger.charges(), 1);

    let mut rdp =
        Ledger::new_rdp(PrivacyUnit::TOKEN, Epsilon::new(20.0).unwrap(), Delta::new(1e-5).unwrap())
            .unwrap();
    release(&c, &params, &key, 0, Some(&mut rdp)).unwrap();
    assert_eq!(rdp.charges(), 1);
    let curve = rdp.rdp_curve().unwrap();
    for (alpha, eps) in DEFAULT_ORDERS.iter().zip(curve.rdp()) {
        assert!(
            (eps / (alpha * rho) - 1.0).abs() < 1e-12,
            "ε({alpha}) = {eps} vs αρ = {}",
            alpha * rho
        );
    }
}

#[test]
fn a_refused_charge_releases_nothing_and_leaves_the_ledger_unchanged() {
    let c = small_context(3);
    let params = dp_params(1.0, 1.0, 0.5, ScoreFn::Exp, c.pad.as_deref());
    let key = NoiseKey::for_replay([5; 32]);
    let mut out = vec![SENTINEL; c.s.out_len()];
    let mut sigma = vec![0.0; c.s.b * c.s.h];

    // (ε, δ) = (1, 1e-5) does not fit in ε = 0.75.
    let mut approx =
        Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(0.75, 1e-3).unwrap());
    let before = approx.spent();
    let r = try_release_into(&c, &params, &key, 0, Some(&mut approx), &mut out, &mut sigma);
    assert!(matches!(r, Err(Error::Infeasible { .. })), "{r:?}");
    assert!(out.iter().all(|x| x.to_bits() == SENTINEL.to_bits()), "output written");
    assert_eq!((approx.spent(), approx.charges()), (before, 0));

    // ρ ≈ 0.036 does not fit in 1e-3.
    let mut zcdp = Ledger::new_zcdp(PrivacyUnit::TOKEN, Rho::new(1e-3).unwrap());
    let r = try_release_into(&c, &params, &key, 0, Some(&mut zcdp), &mut out, &mut sigma);
    assert!(matches!(r, Err(Error::Infeasible { .. })), "{r:?}");
    assert!(out.iter().all(|x| x.to_bits() == SENTINEL.to_bits()), "output written");
    assert_eq!((zcdp.spent(), zcdp.charges()), (Amount::Zcdp { rho: 0.0 }, 0));
}

#[test]
fn invalid_input_errors_without_charging() {
    let c = small_context(4);
    let key = NoiseKey::for_replay([6; 32]);
    let s = c.s;
    let base = dp_params(1.0, 1.0, 0.5, ScoreFn::Exp, c.pad.as_deref());
    let check = |name: &str,
                 c: &Context,
                 params: &OutputPerturbationParams<'_>,
                 sigma_len: usize,
                 ok: &dyn Fn(&Error) -> bool| {
        let mut ledger =
            Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(10.0, 1e-3).unwrap());
        let mut out = vec![SENTINEL; s.out_len()];
        let mut sigma = vec![0.0; sigma_len];
        let r = try_release_into(c, params, &key, 0, Some(&mut ledger), &mut out, &mut sigma);
        match r {
            Err(ref e) if ok(e) => {}
            _ => panic!("{name}: unexpected {r:?}"),
        }
        assert_eq!(ledger.charges(), 0, "{name}: charged");
        assert_eq!(ledger.spent(), Amount::Approx { epsilon: 0.0, delta: 0.0 }, "{name}");
        assert!(out.iter().all(|x| x.to_bits() == SENTINEL.to_bits()), "{name}: output written");
    };
    let bh = s.b * s.h;

    let mut p = base;
    p.budget = PrivacyBudget::new(1.0, 0.0).unwrap();
    check("δ = 0", &c, &p, bh, &|e| matches!(e, Error::OutOfRange { name: "delta", .. }));

    let mut nan_q = c.clone();
    nan_q.q[7] = f32::NAN;
    check("NaN in q", &nan_q, &base, bh, &|e| matches!(e, Error::NonFinite { arg: "q", .. }));

    // Bounds must be in [2^-60, 2^60] (documented range); the scale finite and > 0.
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-30, 1e30] {
        let mut p = base;
        p.key_norm = bad;
        check(&format!("key_norm {bad}"), &c, &p, bh, &|e| matches!(e, Error::OutOfRange { .. }));
        let mut p = base;
        p.value_norm = bad;
        check(&format!("value_norm {bad}"), &c, &p, bh, &|e| matches!(e, Error::OutOfRange { .. }));
    }
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let mut p = base;
        p.scale = Scale::Custom(bad);
        check(&format!("scale {bad}"), &c, &p, bh, &|e| matches!(e, Error::OutOfRange { .. }));
    }

    check("σ slice too short", &c, &base, bh - 1, &|e| {
        matches!(e, Error::ShapeMismatch { arg: "sigma", .. })
    });
    let short_pad = vec![true; s.b * s.sk - 1];
    let mut p = base;
    p.key_padding = Some(&short_pad);
    check("key padding length", &c, &p, bh, &|e| matches!(e, Error::ShapeMismatch { .. }));

    // A scratch that is too small is also refused before the charge.
    let mut ledger =
        Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(10.0, 1e-3).unwrap());
    let mut out = vec![SENTINEL; s.out_len()];
    let (q, k, v) = c.views();
    let o = BatchedMut::contiguous(&mut out, [s.b, s.h, s.sq, s.dv]).unwrap();
    let r = output_perturbation_attention_keyed(
        o,
        q,
        k,
        v,
        &base,
        Draw { key: &key, stream: 0 },
        Some(&mut ledger),
        &mut [0.0; 4],
        &mut [0f32; 8],
    );
    assert!(matches!(r, Err(Error::ScratchTooSmall { .. })), "{r:?}");
    assert_eq!(ledger.charges(), 0);
    assert!(out.iter().all(|x| x.to_bits() == SENTINEL.to_bits()));
}

#[test]
fn non_finite_private_rows_are_released_as_zero_rows() {
    // Refusing a private NaN/∞ would leak it, so the mechanism clamps such a row to the
    // zero row: the release equals (bitwise, same key and stream) the release with that
    // key or value row set to zero, and the call is charged like any other.
    let c = small_context(6);
    let s = c.s;
    let params = dp_params(1.0, 1.0, 0.5, ScoreFn::Exp, c.pad.as_deref());
    let key = NoiseKey::for_replay([8; 32]);
    // Key row (b 0, h 1, j 2) and value row (b 1, h 0, j 7) (position 7 of batch 1 is kept).
    let krow = ((s.h + 1) * s.sk + 2) * s.d;
    let vrow = ((s.h * s.sk) + 7) * s.dv;
    for (bad, which) in
        [(f32::NAN, "k"), (f32::INFINITY, "k"), (f32::NEG_INFINITY, "v"), (f32::NAN, "v")]
    {
        let (mut poisoned, mut zeroed) = (c.clone(), c.clone());
        if which == "k" {
            poisoned.k[krow + 1] = bad;
            zeroed.k[krow..krow + s.d].fill(0.0);
        } else {
            poisoned.v[vrow] = bad;
            zeroed.v[vrow..vrow + s.dv].fill(0.0);
        }
        let mut ledger =
            Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(10.0, 1e-3).unwrap());
        let (a, sa) = release(&poisoned, &params, &key, 2, Some(&mut ledger))
            .unwrap_or_else(|e| panic!("{bad} in {which}: {e:?}"));
        assert_eq!(ledger.charges(), 1);
        let (b, sb) = release(&zeroed, &params, &key, 2, None).unwrap();
        assert_eq!(sa, sb);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x.to_bits(), y.to_bits(), "{bad} in {which}: element {i}: {x} vs {y}");
        }
    }
}

#[test]
fn a_context_with_no_visible_key_releases_zeros() {
    // Every key padded: Δ_b = 0 for every batch element, σ = 0, the output is exactly zero
    // (a constant, so nothing private is released). The approximate ledger is still
    // charged (ε, δ) per call (documented: one release per call).
    let mut c = small_context(5);
    c.pad = Some(vec![false; c.s.b * c.s.sk]);
    let params = dp_params(1.0, 1.0, 0.5, ScoreFn::Exp, c.pad.as_deref());
    let key = NoiseKey::for_replay([7; 32]);
    assert!(sensitivity(&c, &params).iter().all(|&d| d == 0.0));
    let mut approx = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(2.0, 1e-4).unwrap());
    let (out, sigma) = release(&c, &params, &key, 0, Some(&mut approx)).unwrap();
    assert!(sigma.iter().all(|&x| x == 0.0), "{sigma:?}");
    assert!(out.iter().all(|&x| x == 0.0));
    assert_eq!(approx.charges(), 1);

    // Regression: with a zCDP (or RDP) ledger this valid call once failed: every Δ_b is 0,
    // so ρ = max_b Δ_b²/(2σ_b²) = 0 and `Rho::new(0.0)` is an error. A release of a
    // constant costs nothing on those ledgers.
    let mut zcdp = Ledger::new_zcdp(PrivacyUnit::TOKEN, Rho::new(1.0).unwrap());
    let r = release(&c, &params, &key, 0, Some(&mut zcdp));
    let (out, sigma) = r.unwrap_or_else(|e| panic!("zCDP ledger, no visible key: {e:?}"));
    assert!(sigma.iter().all(|&x| x == 0.0) && out.iter().all(|&x| x == 0.0));
    assert_eq!(zcdp.spent(), Amount::Zcdp { rho: 0.0 });
}

// ---------------------------------------------------------------------------------------
// 5. The exact (default) mode: the release on a public grid with exact integer noise
// ---------------------------------------------------------------------------------------

fn exact_mode(p: OutputPerturbationParams<'_>) -> OutputPerturbationParams<'_> {
    OutputPerturbationParams { noise_mode: NoiseMode::Exact, ..p }
}

/// Batch element `b`'s grid as the library computes it (for `f32` outputs).
fn grid_of(c: &Context, params: &OutputPerturbationParams<'_>, b: usize) -> Option<GaussianGrid> {
    let (q, _, _) = c.views();
    let model = AttentionErrorModel::CPU_F64;
    output_perturbation_grid(q, params, c.s.sk, c.s.dv, &model, GridFormat::F32, b).unwrap()
}

#[test]
fn exact_release_is_the_clamped_attention_on_the_grid_plus_the_addressed_integer_noise() {
    // As `release_is_clamped_attention_plus_the_addressed_draw`, in exact mode: element
    // `idx` of batch element `b` must be `Grid::release(x, z)` with `x` the float64 clamped
    // attention of this file and `z` the discrete Gaussian of element `idx`'s window. The
    // test's attention and the library's f64 kernel agree to ~1e-15, so the grid index can
    // differ only where `x/Λ` lies within 1e-6 of a rounding boundary (skipped, counted).
    let mut r = Rng(5);
    let s = shape(3, 2, 7, 70, 5, 6);
    let (rk, rv, scale) = (0.8, 1.5, 0.45);
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        let mut c = Context::random(s, &mut r, 2.5, 3.0 * rk, 3.0 * rv);
        let mut pad: Vec<bool> = (0..s.b * s.sk).map(|_| r.below(4) != 0).collect();
        pad[..s.sk].fill(true);
        pad[2 * s.sk..].fill(false);
        c.pad = Some(pad);
        let params = exact_mode(dp_params(rk, rv, scale, score, c.pad.as_deref()));
        let key = NoiseKey::for_replay([77; 32]);
        let stream = 123_456_789;
        let (out, sigma) = release(&c, &params, &key, stream, None).unwrap();
        let exact = clamped_attention(&c, rk, rv, scale, score);
        let draw = KeyedStream::new(&key, stream);
        let per_b = s.h * s.sq * s.dv;
        let mut near_boundary = 0;
        for b in 0..s.b {
            let grid = grid_of(&c, &params, b);
            if b == 2 {
                assert!(grid.is_none(), "no visible key: no noise");
                assert!(out[b * per_b..(b + 1) * per_b].iter().all(|&o| o == 0.0));
                assert!(sigma[b * s.h..(b + 1) * s.h].iter().all(|&x| x == 0.0));
                continue;
            }
            let grid = grid.unwrap();
            let lambda = grid.resolution();
            assert!(sigma[b * s.h..(b + 1) * s.h].iter().all(|&x| x == grid.sigma()));
            for idx in b * per_b..(b + 1) * per_b {
                let got = f64::from(out[idx]);
                assert_eq!((got / lambda).fract(), 0.0, "{score:?} {idx}: not on the grid");
                let x = exact[idx];
                let frac = (x / lambda).abs().fract();
                if (frac - 0.5).abs() < 1e-6 {
                    near_boundary += 1;
                    continue;
                }
                let z = grid.integer_noise().sample_at(&draw, idx as u64).unwrap();
                let want = grid.grid().release(x, z);
                assert_eq!(got, want, "{score:?} element {idx}: attention {x}, noise {z}");
            }
        }
        assert!(near_boundary < 3, "{near_boundary} values at a rounding boundary");
    }
}

#[test]
fn exact_calibration_follows_the_documented_rule() {
    // Λ_b = 2^⌊log₂(Δ_b / (256 √(H·s_q·d_v)))⌋ (the accuracy rule; R_v + 12σ fits the f32
    // index range here), Δ′ = Δ_b + 2E + √(H·s_q·d_v)·Λ with E negligible, and the discrete
    // Gaussian's s = √((σ₁(ε, δ)·Δ′/Λ)² + 16), σ₁ the analytic Gaussian at sensitivity 1.
    let mut r = Rng(21);
    let s = shape(2, 3, 9, 40, 6, 5);
    let c = Context::random(s, &mut r, 2.0, 1.0, 1.0);
    let params = exact_mode(dp_params(1.0, 1.0, 0.4, ScoreFn::Exp, None));
    let delta = sensitivity(&c, &params);
    let m = analytic_gaussian_sigma(1.0, 1e-5, 1.0).unwrap();
    let dims = (s.h * s.sq * s.dv) as f64;
    for (b, &db) in delta.iter().enumerate() {
        let g = grid_of(&c, &params, b).unwrap();
        let want_lambda = 2f64.powi((db / (256.0 * dims.sqrt())).log2().floor() as i32);
        assert_eq!(g.resolution(), want_lambda, "Λ_{b}");
        let sens = g.rounded_sensitivity();
        let plain = db + dims.sqrt() * want_lambda;
        assert!(sens >= plain && sens <= plain * (1.0 + 1e-9), "Δ′_{b} = {sens} vs {plain}");
        let s_want = ((m * sens / want_lambda).powi(2) + 16.0).sqrt();
        let s_got = g.integer_noise().sigma();
        assert!(s_got >= s_want && s_got <= s_want * (1.0 + 1e-8), "s_{b}: {s_got} vs {s_want}");
        assert!(g.inflation() <= 1.0 / 256.0 + 1e-9);
    }
}

#[test]
fn the_f64_kernel_stays_within_the_computation_error_bound() {
    // The exact mode's E (docs/PRIVACY.md §2.5) against the f64 kernel's actual error on
    // random and extreme inputs (logits at ±a, one dominant key), measured against the
    // float64 attention of this file (itself within ~1e-15): the bound must hold, and it
    // must stay negligible next to the sensitivity.
    let mut r = Rng(3);
    for (s, qmax) in [(shape(1, 2, 5, 200, 8, 4), 3.0), (shape(1, 1, 4, 600, 16, 3), 8.0)] {
        let c = Context::random(s, &mut r, qmax, 1.0, 1.0);
        let (q, k, v) = c.views();
        let scale = 0.7;
        let params = AttentionParams { scale: Scale::Custom(scale), ..Default::default() };
        let mut out = vec![0f64; s.out_len()];
        let mut scratch = vec![0f64; attention_scratch_len(s.d, s.dv).unwrap()];
        dpattn::attention::attention_f64(
            BatchedMut::contiguous(&mut out, [s.b, s.h, s.sq, s.dv]).unwrap(),
            q,
            k,
            v,
            &params,
            &mut scratch,
        )
        .unwrap();
        let want = clamped_attention(&c, f64::INFINITY, f64::INFINITY, scale, ScoreFn::Exp);
        let a = scale * qmax * 1.0;
        let bound =
            attention_error_bound(&AttentionErrorModel::CPU_F64, 1, s.d, s.sk, a, 1.0).unwrap();
        for row in 0..s.b * s.h * s.sq {
            let e: f64 = (0..s.dv)
                .map(|c| (out[row * s.dv + c] - want[row * s.dv + c]).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!(e <= bound, "row {row}: error {e:e} above the bound {bound:e}");
        }
        assert!(bound < 1e-10, "{bound:e}");
    }
    // f32 arithmetic (a GPU kernel's model) at 8192 keys: the bound grows with n·u.
    let f32_model =
        AttentionErrorModel { unit_roundoff: 2f64.powi(-24), exp_error: 3e-7, key_block: 64 };
    let big = attention_error_bound(&f32_model, 1, 64, 8192, 0.5, 1.0).unwrap();
    assert!(big > 1e-3 && big < 1e-2, "{big}");
    assert!(attention_error_bound(&f32_model, 1, 64, 1 << 23, 0.5, 1.0).is_err());
}

/// One release (stream 4, no ledger) into an output of element type `O`.
fn release_as<O: dpattn::Element>(
    c: &Context,
    params: &OutputPerturbationParams<'_>,
    key: &NoiseKey,
) -> Vec<O> {
    let s = c.s;
    let (q, k, v) = c.views();
    let mut out = vec![O::from_f64(0.0); s.out_len()];
    let mut sigma = vec![0.0; s.b * s.h];
    let mut scratch = vec![0f32; output_perturbation_scratch_len(s.d, s.dv).unwrap()];
    let o = BatchedMut::contiguous(&mut out, [s.b, s.h, s.sq, s.dv]).unwrap();
    output_perturbation_attention_keyed(
        o,
        q,
        k,
        v,
        params,
        Draw { key, stream: 4 },
        None,
        &mut sigma,
        &mut scratch,
    )
    .unwrap();
    out
}

#[test]
fn exact_outputs_are_exact_in_every_output_type() {
    // f32 and f64 outputs hold exact multiples of Λ (the grid differs: f64 can hold more);
    // bf16 outputs are the f32 release rounded (post-processing of the integer).
    let mut r = Rng(8);
    let s = shape(1, 2, 6, 30, 4, 4);
    let c = Context::random(s, &mut r, 1.5, 1.0, 1.0);
    let params = exact_mode(dp_params(1.0, 1.0, 0.5, ScoreFn::Exp, None));
    let key = NoiseKey::for_replay([12; 32]);
    let o32: Vec<f32> = release_as(&c, &params, &key);
    let o16: Vec<half::bf16> = release_as(&c, &params, &key);
    let o64: Vec<f64> = release_as(&c, &params, &key);
    let lambda32 = grid_of(&c, &params, 0).unwrap().resolution();
    let (q64, _, _) = c.views();
    let model = AttentionErrorModel::CPU_F64;
    let lambda64 = output_perturbation_grid(q64, &params, s.sk, s.dv, &model, GridFormat::F64, 0)
        .unwrap()
        .unwrap()
        .resolution();
    for i in 0..s.out_len() {
        assert_eq!((f64::from(o32[i]) / lambda32).fract(), 0.0);
        assert_eq!((o64[i] / lambda64).fract(), 0.0);
        assert_eq!(o16[i], half::bf16::from_f32(o32[i]), "bf16 is the rounded f32 release");
    }
}

#[test]
fn exact_mode_charges_in_its_mode_and_the_unsafe_mode_is_counted() {
    let c = small_context(4);
    let key = NoiseKey::for_replay([1; 32]);
    let base = dp_params(1.0, 1.0, 0.5, ScoreFn::Exp, None);
    for mode in [NoiseMode::Exact, NoiseMode::UnsafeFloat] {
        let params = OutputPerturbationParams { noise_mode: mode, ..base };
        let mut ledger =
            Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(10.0, 1e-3).unwrap());
        release(&c, &params, &key, 0, Some(&mut ledger)).unwrap();
        assert_eq!(ledger.charges(), 1);
        assert_eq!(ledger.unsafe_float_charges(), u64::from(mode == NoiseMode::UnsafeFloat));
        assert_eq!(ledger.spent(), Amount::Approx { epsilon: 1.0, delta: 1e-5 });
    }
    // The exact mode's scratch is larger: the attention's own length is refused before the
    // charge, with nothing written.
    let params = exact_mode(base);
    let s = c.s;
    let mut ledger =
        Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(10.0, 1e-3).unwrap());
    let mut out = vec![SENTINEL; s.out_len()];
    let (q, k, v) = c.views();
    let o = BatchedMut::contiguous(&mut out, [s.b, s.h, s.sq, s.dv]).unwrap();
    let r = output_perturbation_attention_keyed(
        o,
        q,
        k,
        v,
        &params,
        Draw { key: &key, stream: 0 },
        Some(&mut ledger),
        &mut vec![0.0; s.b * s.h],
        &mut vec![0f32; attention_scratch_len(s.d, s.dv).unwrap()],
    );
    assert!(matches!(r, Err(Error::ScratchTooSmall { .. })), "{r:?}");
    assert_eq!(ledger.charges(), 0);
    assert!(out.iter().all(|x| x.to_bits() == SENTINEL.to_bits()));
}

#[test]
fn exact_mode_costs_under_one_percent_at_the_quickstart_sizes() {
    // examples/quickstart.rs: 4 heads, 16 public queries per head over a 1024-token context,
    // d = 64, R_k = 2, R_v = 1, queries of norm 2, scale 1/8, ε ∈ {0.5, …, 8}, δ = 1e-5.
    // (1) The exact release's noise scale is within 1% of the float release's σ_b (the
    // discrete Gaussian's standard deviation is at most its parameter). (2) Its empirical
    // relative error over 20 releases is within 1% of the float mode's, up to the sampling
    // error of the comparison (5 standard errors).
    let s = shape(1, 4, 16, 1024, 64, 64);
    let mut r = Rng(2024);
    let c = Context::random(s, &mut r, 2.0, 2.0, 1.0);
    let exact = clamped_attention(&c, 2.0, 1.0, 0.125, ScoreFn::Exp);
    let norm = exact.iter().map(|x| x * x).sum::<f64>().sqrt();
    for eps in [0.5, 8.0] {
        let mut base = dp_params(2.0, 1.0, 0.125, ScoreFn::Exp, None);
        base.budget = PrivacyBudget::new(eps, 1e-5).unwrap();
        let (_, sig_float) = release(&c, &base, &NoiseKey::for_replay([1; 32]), 0, None).unwrap();
        let ex = exact_mode(base);
        let (_, sig_exact) = release(&c, &ex, &NoiseKey::for_replay([1; 32]), 0, None).unwrap();
        assert!(sig_exact[0] / sig_float[0] <= 1.01, "ε = {eps}: {sig_exact:?} vs {sig_float:?}");
        let errs = |p: &OutputPerturbationParams<'_>| -> Vec<f64> {
            (0..20)
                .map(|i| {
                    let key = NoiseKey::for_replay([i as u8 + 7; 32]);
                    let (out, _) = release(&c, p, &key, i, None).unwrap();
                    let e: f64 =
                        out.iter().zip(&exact).map(|(o, x)| (f64::from(*o) - x).powi(2)).sum();
                    e.sqrt() / norm
                })
                .collect()
        };
        let (ef, ee) = (moments(&errs(&base)), moments(&errs(&ex)));
        let se = ((ef.var + ee.var) / 20.0).sqrt();
        assert!(
            ee.mean <= ef.mean * 1.01 + 5.0 * se,
            "ε = {eps}: exact {} vs float {} (se {se})",
            ee.mean,
            ef.mean
        );
    }
}
