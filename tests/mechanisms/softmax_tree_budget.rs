//! Budgets, copy counts, error estimates, memory and input validation of the faithful softmax-tree
//! mechanism of paper 001 (`dpattn::softmax_tree`, `dpattn::softmax_tree_cross_attention`), and the
//! moment sketch of extension P1-X1 (`dpattn::moment_sketch`), against `docs/PAPERS.md` §1
//! (sections §1.x, tables T1-x and the IDs below are those of that file):
//!
//! * P1-AC6: the Config A budget hierarchy of T1-J (`l = 1` and `l = 49`), down to node budgets,
//!   TLap bounds and standard deviations, and the accountant's totals (P1-15), both from
//!   `softmax_budget` and from a built `SoftmaxTreeCrossAttention`; P1-X2 (tight accounting).
//! * P1-AC12: the 32 cells of the theorem-bound table T1-K, and P1-X5's worst-case bound.
//! * T1-I: the copy counts `l` (NetHoeffding and Paper, with the odd rule).
//! * §1.6: `s_min`, and the temperature extension (P1-X6 / P1-1).
//! * P1-AC10 (P1-11): signed weights defeat the paper's relative error bound.
//! * T1-L: the memory formula and table, and the refusal to build over the memory limit.
//! * P1-X1: the moment sketch's calibration, noise distribution, accuracy and ledger charge.
//! * §1.9: parameter ranges, shapes, public-query and private-domain policies.
//!
//! **Expected values** are the printed numbers of `docs/PAPERS.md` or its closed forms
//! evaluated in this file, never library outputs. Every printed number used here was
//! re-derived with 40-digit `mpmath` while writing this file; all agree except T1-L's
//! `3.6 GiB`, which is 3.549 GiB (as T1-L notes; see [`assert_table`]).
//!
//! **Known library bugs** (tests named `bug_*`, expected to fail until fixed): NetHoeffding
//! accepts a negative `k`; Tight accounting reports a spend an ulp above its target, so a
//! ledger sized to the target refuses the build.
//!
//! **Tolerances.** T1-J (P1-AC6): relative 1e-5 (the table prints 5–6 digits); the "actual ε"
//! row, printed with 4–5 digits: 1e-3.
//! P1-AC12 and T1-L tables ([`assert_table`]): 1% for a value printed with ≥ 3 significant
//! digits, 1.5% with fewer, or within half a unit of the last printed digit. Library values
//! against this file's closed forms: 1e-9 relative (the library rounds privacy values
//! outward by a few ulps).
//!
//! **Modes.** The printed noise values (T1-K, P1-X5, P1-X1's float noise law) are the
//! paper's float TLap and Gaussian, pinned in `NoiseMode::UnsafeFloat`; the exact release
//! (the default) is checked against them (at most 1% more noise) and, for the moment sketch,
//! against its documented calibration recomputed here (`docs/PRIVACY.md` §4.6).
//!
//! **Parameter note.** T1-K and T1-I use `p_f = 0.01`, the default of `AdaptiveParams::new`;
//! the library's strict range is `(0, 0.01]` (§1.9), closed at 0.01. The checks also run
//! with `strict = false` and with `p_f = 0.01·(1 − 1e-9)`, which give the same `l`.

use crate::support;

use std::sync::LazyLock;

use dpattn::accounting::composition::Rho;
use dpattn::accounting::ledger::{Amount, Ledger};
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::calibration::gaussian_mechanism::analytic_gaussian_sigma;
use dpattn::moment_sketch::SketchGrid;
use dpattn::moment_sketch::{MomentSketch, MomentSketchParams, SketchNoise};
use dpattn::sampling::ExactSampler;
use dpattn::sampling::{KeyedStream, NoiseKey, TruncatedLaplace};
use dpattn::session::Draw;
use dpattn::softmax_tree::{
    Accounting, AdaptiveParams, Copies, DpTreeSoftmax, DpTreeSoftmaxAdaptive, QueryPolicy,
    SoftmaxTreeParams, Temperature, copy_count, min_degree, softmax_budget, taylor_relative_error,
};
use dpattn::softmax_tree_cross_attention::{
    DomainPolicy, SoftmaxTreeCrossAttention, SoftmaxTreeCrossAttentionParams, check_domain,
    estimate_cross_attention_bytes, estimate_error,
};
use dpattn::{Error, MatRef, NoiseMode, PrivacyBudget, Result};
use support::problem::Rng;
use support::stats::{ks_test, mean_z, moments, normal_cdf, var_z, z_accepts};

/// Library values against closed forms evaluated here.
const REL: f64 = 1e-9;

#[track_caller]
fn assert_rel(x: f64, want: f64, rel: f64, what: &str) {
    assert!((x / want - 1.0).abs() <= rel, "{what}: got {x:e}, want {want:e} (rel {rel:e})");
}

/// Half a unit in the last printed place: `"2.7e-3"` → 5e-5.
fn half_unit(printed: &str) -> f64 {
    let (mant, exp) =
        printed.split_once('e').map_or((printed, 0), |(m, e)| (m, e.parse().unwrap()));
    let frac = mant.split_once('.').map_or(0, |(_, f)| f.len() as i32);
    0.5 * 10f64.powi(exp - frac)
}

/// Significant digits of a printed number (`"0.0345"` → 3, `"940"` → 3, `"9e4"` → 1).
fn sig_digits(printed: &str) -> usize {
    let mant = printed.split_once('e').map_or(printed, |(m, _)| m);
    mant.chars().filter(char::is_ascii_digit).skip_while(|&c| c == '0').count()
}

/// A table value printed with few digits: within 1% (≥ 3 significant digits) or 1.5%
/// (fewer), or within half a unit of the last printed digit. The half-unit rule is needed
/// for T1-K's `2.7e-3` (2.659e-3, 1.54% off) and T1-L's `0.02 GiB` (0.0162); the 1.5% rule
/// for T1-L's `3.6 GiB` (3.549 GiB, which rounds to 3.5: the rounding slip T1-L notes).
#[track_caller]
fn assert_table(x: f64, printed: &str, what: &str) {
    let p: f64 = printed.parse().unwrap();
    let rel = if sig_digits(printed) >= 3 { 0.01 } else { 0.015 };
    let ok = (x / p - 1.0).abs() <= rel || (x - p).abs() <= half_unit(printed) * (1.0 + 1e-9);
    assert!(ok, "{what}: got {x:e}, table prints {printed} (rel {rel} or half a unit)");
}

#[track_caller]
fn out_of_range<T: std::fmt::Debug>(r: Result<T>, want: &str) {
    match r {
        Err(Error::OutOfRange { name, .. }) if name == want => {}
        other => panic!("expected OutOfRange naming `{want}`, got {other:?}"),
    }
}

fn stream(seed: u8, id: u64) -> KeyedStream {
    draw(seed, id).keyed(0)
}

/// The randomness of one release: stream `id` of the test key `[seed; 32]`.
fn draw(seed: u8, id: u64) -> Draw<'static> {
    static KEYS: LazyLock<Vec<NoiseKey>> =
        LazyLock::new(|| (0..=255).map(|s| NoiseKey::for_replay([s; 32])).collect());
    Draw { key: &KEYS[usize::from(seed)], stream: id }
}

/// `T_s(z) = Σ_{t ≤ s} z^t/t!`.
fn taylor(z: f64, s: u32) -> f64 {
    let (mut term, mut sum) = (1.0, 1.0);
    for t in 1..=s {
        term *= z / f64::from(t);
        sum += term;
    }
    sum
}

/// §1.6: the smallest `s` with `(e^z − T_s(z))/T_s(z) ≤ ε_s` at `z = z_max`.
fn s_min(z_max: f64, eps_s: f64) -> u32 {
    (0..64).find(|&s| (z_max.exp() - taylor(z_max, s)) / taylor(z_max, s) <= eps_s).unwrap()
}

/// `C(n, k)`.
fn binom(n: u64, k: u64) -> u64 {
    (1..=k).fold(1, |acc, i| acc * (n - k + i) / i)
}

/// `Σ_a β_a = Σ_{|a| ≤ s} (√τ R)^{|a|}/√(a!)` over all multi-indices of `d` variables (§1.6),
/// by recursion over the coordinates.
fn sum_beta(d: usize, s: u32, tau: f64, radius: f64) -> f64 {
    fn rec(coords_left: usize, degree_left: u32, f: f64) -> f64 {
        if coords_left == 0 {
            return 1.0;
        }
        let mut total = 0.0;
        let mut term = 1.0; // f^m / √(m!)
        for m in 0..=degree_left {
            if m > 0 {
                term *= f / f64::from(m).sqrt();
            }
            total += term * rec(coords_left - 1, degree_left - m, f);
        }
        total
    }
    rec(d, s, tau.sqrt() * radius)
}

/// The paper's setting of P1-AC6 / P1-AC12: `R = R_w = 1`, `ε = 1`, `δ = δ′ = 1e-6`, `c = 0.09`,
/// `ε_s = 0.01`.
fn paper_tree() -> SoftmaxTreeParams {
    SoftmaxTreeParams::paper(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6).unwrap(), 1e-6)
}

fn random_matrix(rng: &mut Rng, n: usize, d: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n * d).map(|_| rng.range(lo, hi)).collect()
}

// ---------------------------------------------------------------------------------------
// P1-AC6: T1-J Config A

/// One column of the T1-J table, as printed.
struct ConfigAColumn {
    l: u32,
    copy: [&'static str; 3],
    distance: [&'static str; 2],
    node: [&'static str; 2],
    node_bound_std: [&'static str; 2],
    ones_node: [&'static str; 3],
    features_epsilon: &'static str,
    target: &'static str,
}

const CONFIG_A: [ConfigAColumn; 2] = [
    ConfigAColumn {
        l: 1,
        copy: ["0.5", "5e-7", "5e-7"],
        distance: ["4.59827e-4", "2.38095e-9"],
        node: ["1.53276e-5", "7.93651e-11"],
        node_bound_std: ["1.49769e6", "1.84458e5"],
        ones_node: ["5.55556e-3", "5.55556e-9", "4725.05"],
        features_epsilon: "0.021228",
        target: "0.1667",
    },
    ConfigAColumn {
        l: 49,
        copy: ["0.0102041", "1.02041e-8", "1.02041e-8"],
        distance: ["8.3734e-6", "4.85909e-11"],
        node: ["2.79113e-7", "1.6197e-12"],
        node_bound_std: ["8.14293e7", "1.01291e7"],
        ones_node: ["1.13379e-4", "1.13379e-10", "231480"],
        features_epsilon: "4.329e-4",
        target: "3.40e-3",
    },
];

const A_REL: f64 = 1e-5;
/// Config A: `n = 1000` → `N = 1024`, `L = 10`; `d = 4`, `s = 4`, `r = C(8, 4) = 70`.
const A_DEPTH: u32 = 10;
const A_FEATURES: usize = 70;

fn p(s: &str) -> f64 {
    s.parse().unwrap()
}

/// Checks every T1-J entry of one column against the budget of one copy.
#[track_caller]
fn check_config_a_column(b: &dpattn::softmax_tree::SoftmaxBudget, col: &ConfigAColumn) {
    let l = col.l;
    let tag = |what: &str| format!("Config A l = {l}: {what}");
    assert_rel(b.copy.epsilon().get(), p(col.copy[0]), A_REL, &tag("ε_S"));
    assert_rel(b.copy.delta().get(), p(col.copy[1]), A_REL, &tag("δ_S"));
    assert_rel(b.delta_prime, p(col.copy[2]), A_REL, &tag("δ′_S"));
    assert_eq!(b.features, A_FEATURES);
    assert_rel(b.distance.epsilon().get(), p(col.distance[0]), A_REL, &tag("ε_D"));
    assert_rel(b.distance.delta().get(), p(col.distance[1]), A_REL, &tag("δ_D"));
    let (ne, nd) = (b.feature_node.epsilon().get(), b.feature_node.delta().get());
    assert_rel(ne, p(col.node[0]), A_REL, &tag("feature node ε"));
    assert_rel(nd, p(col.node[1]), A_REL, &tag("feature node δ"));
    // Γ = 1 and R_w = 1: every feature tree has Δ_q = 2 R_w Γ^q = 2.
    let tlap = TruncatedLaplace::new(2.0, ne, nd).unwrap();
    assert_rel(tlap.bound(), p(col.node_bound_std[0]), A_REL, &tag("B_node"));
    assert_rel(tlap.variance().sqrt(), p(col.node_bound_std[1]), A_REL, &tag("node std"));
    for q in 0..3 {
        let t = b.feature_tlap(q, 1.0, 1.0).unwrap();
        assert_rel(t.bound(), p(col.node_bound_std[0]), A_REL, &tag("feature_tlap bound"));
        assert_rel(t.variance().sqrt(), p(col.node_bound_std[1]), A_REL, &tag("feature std"));
    }
    let (oe, od) = (b.ones_node.epsilon().get(), b.ones_node.delta().get());
    assert_rel(oe, p(col.ones_node[0]), A_REL, &tag("D_0 node ε"));
    assert_rel(od, p(col.ones_node[1]), A_REL, &tag("D_0 node δ"));
    let ones = TruncatedLaplace::new(2.0, oe, od).unwrap();
    assert_rel(ones.bound(), p(col.ones_node[2]), A_REL, &tag("D_0 B"));
    assert_rel(b.ones_tlap(1.0).unwrap().bound(), p(col.ones_node[2]), A_REL, &tag("ones_tlap"));

    // The accountant: the r feature structures under advanced composition with slack δ′_S/2.
    let feat = b.achieved_features().unwrap();
    let eps_s = b.copy.epsilon().get();
    assert_rel(feat.epsilon().get(), p(col.features_epsilon), 1e-3, &tag("actual ε (features)"));
    assert_rel(eps_s / 3.0, p(col.target), 2e-3, &tag("target ε_S/3"));
    // P1-15: with c = 0.09 the features use ≈ √2·c ≈ 13% of their third.
    let share = feat.epsilon().get() / (eps_s / 3.0);
    assert!((0.12..0.14).contains(&share), "{}: share {share}", tag("feature share"));
}

/// P1-AC6: `softmax_budget` reproduces both columns of the T1-J table, with the copy budget
/// derived from the total as the hierarchy prescribes (PerEntry: ε/2, then /l).
#[test]
fn ac6_config_a_budget_hierarchy() {
    let (eps, delta, delta_prime) = (1.0, 1e-6, 1e-6);
    for col in &CONFIG_A {
        let l = f64::from(col.l);
        let copy = PrivacyBudget::new(eps / 2.0 / l, delta / 2.0 / l).unwrap();
        let b = softmax_budget(copy, delta_prime / 2.0 / l, 0.09, 70, A_DEPTH, Accounting::Paper)
            .unwrap();
        check_config_a_column(&b, col);
    }
}

/// P1-AC6 / P1-15: the accountant's totals. Closed form (§1.7): the copy spends
/// `(ε_feat + ε_S/3, rδ_D + δ′_S/2 + δ_S/3) = (ε_feat + ε_S/3, 2δ_S/3 + δ′_S/2)`, which is
/// within the target `(ε_S, δ_S + δ′_S)`.
#[test]
fn ac6_achieved_totals_within_targets() {
    for col in &CONFIG_A {
        let l = f64::from(col.l);
        let (es, ds, dps) = (0.5 / l, 0.5e-6 / l, 0.5e-6 / l);
        let b = softmax_budget(
            PrivacyBudget::new(es, ds).unwrap(),
            dps,
            0.09,
            A_FEATURES,
            A_DEPTH,
            Accounting::Paper,
        )
        .unwrap();
        let feat = b.achieved_features().unwrap();
        // Advanced composition (Dwork–Rothblum–Vadhan): √(2r ln(1/δ″))ε_D + rε_D(e^{ε_D} − 1).
        let (ed, r) = (b.distance.epsilon().get(), A_FEATURES as f64);
        let adv = (2.0 * r * (2.0 / dps).ln()).sqrt() * ed + r * ed * ed.exp_m1();
        assert_rel(feat.epsilon().get(), adv.min(r * ed), REL, "feature ε closed form");
        assert_rel(feat.delta().get(), r * b.distance.delta().get() + dps / 2.0, REL, "feat δ");
        let total = b.achieved().unwrap();
        assert_rel(total.epsilon().get(), adv + es / 3.0, REL, "total ε");
        assert_rel(total.delta().get(), 2.0 * ds / 3.0 + dps / 2.0, REL, "total δ");
        assert!(total.epsilon().get() <= es, "l = {l}: ε {:?} > {es}", total.epsilon());
        assert!(total.delta().get() <= ds + dps, "l = {l}: δ {:?}", total.delta());
        // P1-15: "about 2ε/3 + tiny".
        assert!(total.epsilon().get() < 0.55 * es);
    }
}

/// P1-AC6 through the public builder: a faithful (PerEntry, `l = 1`) `SoftmaxTreeCrossAttention` on
/// Config A data has exactly the T1-J copy budget, and its accountant and ledger agree.
#[test]
fn ac6_config_a_through_softmax_tree_cross_attention() {
    let (n, d) = (1000, 4);
    let params = SoftmaxTreeCrossAttentionParams::faithful(paper_tree(), Copies::Fixed(1));
    // T1-L: (d+1)·l·(r+1)·3·(2N−2)·8 bytes ≈ 0.02 GiB.
    let bytes = estimate_cross_attention_bytes(n, d, &params).unwrap();
    assert_eq!(bytes, 5 * 71 * 3 * (2 * 1024 - 2) * 8);
    assert!(bytes < 20 << 20, "{bytes} bytes");

    let mut rng = Rng(6);
    let keys = random_matrix(&mut rng, n, d, 0.0, 1.0);
    let vals = random_matrix(&mut rng, n, d, -1.0, 1.0);
    let total = PrivacyBudget::new(2.5, 5e-6).unwrap();
    let mut ledger: Ledger = Ledger::new_approx(PrivacyUnit::TOKEN, total);
    let att = SoftmaxTreeCrossAttention::new_keyed(
        MatRef::from_row_major(&keys, n, d).unwrap(),
        MatRef::from_row_major(&vals, n, d).unwrap(),
        &params,
        draw(1, 0),
        Some(&mut ledger),
    )
    .unwrap();
    assert_eq!(att.copies(), 1);
    assert_eq!(att.feature_map().degree(), 4);
    assert_eq!(att.feature_map().features(), A_FEATURES);
    check_config_a_column(att.copy_budget(), &CONFIG_A[0]);

    // Per entry (A_0 and A_k): ≤ (ε, δ + δ′) = (1, 2e-6). Whole vector: (d+1) structures.
    let copy = att.copy_budget().achieved().unwrap();
    let entry = att.per_entry_privacy().unwrap();
    assert_rel(entry.epsilon().get(), 2.0 * copy.epsilon().get(), REL, "per-entry ε");
    assert!(entry.epsilon().get() <= 1.0 && entry.delta().get() <= 2e-6, "{entry:?}");
    let whole = att.achieved_privacy().unwrap();
    assert_rel(whole.epsilon().get(), 5.0 * copy.epsilon().get(), REL, "whole ε");
    assert_rel(whole.delta().get(), 5.0 * copy.delta().get(), REL, "whole δ");
    assert!(whole.epsilon().get() <= 2.5 && whole.delta().get() <= 5e-6, "{whole:?}");
    assert_eq!(ledger.charges(), 1);
    let Amount::Approx { epsilon, delta } = ledger.spent() else { panic!("approx ledger") };
    assert_rel(epsilon, whole.epsilon().get(), REL, "ledger ε");
    assert_rel(delta, whole.delta().get(), REL, "ledger δ");

    let mut out = [0.0; 4];
    let info = att.query(&[0.5, 0.25, 1.0, 0.0], &mut out).unwrap();
    assert!(info.denominator.is_finite() || info.nonpositive_denominator);
}

/// P1-X2: tight accounting spends at most `(ε_S, δ_S + δ′_S)`, nearly all of it, and gives the
/// feature structures a larger `ε_D` (less noise) than the paper's split.
#[test]
fn e2_tight_accounting() {
    for col in &CONFIG_A {
        let l = f64::from(col.l);
        let (es, ds, dps) = (0.5 / l, 0.5e-6 / l, 0.5e-6 / l);
        let copy = PrivacyBudget::new(es, ds).unwrap();
        let paper =
            softmax_budget(copy, dps, 0.09, A_FEATURES, A_DEPTH, Accounting::Paper).unwrap();
        let tight =
            softmax_budget(copy, dps, 0.09, A_FEATURES, A_DEPTH, Accounting::Tight).unwrap();
        let got = tight.achieved().unwrap();
        // Up to a few ulps of outward rounding in the report: see
        // `bug_tight_accounting_report_exceeds_target` for the strict check.
        let ulps = 1.0 + 8.0 * f64::EPSILON;
        assert!(got.epsilon().get() <= es * ulps, "l = {l}: tight ε {:?} > {es}", got.epsilon());
        assert!(got.delta().get() <= (ds + dps) * ulps, "l = {l}: tight δ {:?}", got.delta());
        assert!(got.epsilon().get() >= 0.999 * es, "l = {l}: tight leaves budget unused");
        let (et, ep) = (tight.distance.epsilon().get(), paper.distance.epsilon().get());
        // Advanced composition at 2ε_S/3 with c unused: ε_D grows by roughly 2/(3·13%) ≈ 5×.
        assert!(et > 4.0 * ep, "l = {l}: tight ε_D {et:e} vs paper {ep:e}");
        // D_0 keeps (ε_S/3, δ_S/3).
        assert_rel(tight.ones_node.epsilon().get(), es / 90.0, REL, "tight D_0 node ε");
        let v = |b: &dpattn::softmax_tree::SoftmaxBudget| {
            b.feature_tlap(1, 1.0, 1.0).unwrap().variance()
        };
        assert!(v(&tight) < v(&paper) / 16.0, "tight noise not smaller");
    }
}

// ---------------------------------------------------------------------------------------
// P1-AC12 and P1-X5

/// P1-AC12 settings with `p_f = 0.01` (relaxed mode admits the closed end, see module docs).
/// The P1-AC12 settings with the paper's float TLap (the table's numbers).
fn ac12_params(copies: Copies) -> SoftmaxTreeCrossAttentionParams {
    let mut tree = paper_tree();
    tree.strict = false;
    tree.noise_mode = NoiseMode::UnsafeFloat;
    let mut p = SoftmaxTreeCrossAttentionParams::new(tree);
    p.adaptive.copies = copies;
    p.adaptive.p_fail = 0.01;
    p
}

/// P1-AC12: `estimate_error` reproduces the 32 cells of the table (PerVector split,
/// `10(σ_AV + R_w σ_D)/n`), and the NetHoeffding column uses `l = 29, 49, 93, 187`.
#[test]
fn ac12_theorem_bound_table() {
    const NS: [usize; 4] = [10_000, 1_000_000, 1_000_000_000, 1_000_000_000_000];
    type Row = (usize, usize, usize, [(&'static str, &'static str); 4]);
    // (d, r, NetHoeffding l, [(l = 1, adaptive) at n = 1e4, 1e6, 1e9, 1e12]).
    #[rustfmt::skip]
    const TABLE: [Row; 4] = [
        (2, 15, 29, [("6.96e3", "2.23e5"), ("119", "3.8e3"), ("0.218", "6.98"), ("3.4e-4", "0.0108")]),
        (4, 70, 49, [("5.51e4", "3.01e6"), ("940", "5.13e4"), ("1.73", "94.3"), ("2.7e-3", "0.145")]),
        (8, 495, 93, [("7.14e5", "7.48e7"), ("1.22e4", "1.28e6"), ("22.4", "2.35e3"), ("0.0345", "3.61")]),
        (16, 4845, 187, [("1.34e7", "2.87e9"), ("2.3e5", "4.9e7"), ("422", "9e4"), ("0.649", "139")]),
    ];
    let fixed = ac12_params(Copies::Fixed(1));
    let adaptive = ac12_params(Copies::NetHoeffding { k: 10.0 });
    for (d, r, l, row) in TABLE {
        assert_eq!(fixed.adaptive.tree.feature_map(d).unwrap().features(), r, "r at d = {d}");
        for (n, (want_fixed, want_adaptive)) in NS.into_iter().zip(row) {
            let e = estimate_error(n, d, &fixed).unwrap();
            assert_eq!(e.copies, 1);
            assert_table(e.additive, want_fixed, &format!("P1-AC12 d = {d}, n = {n:e}, l = 1"));
            // R_w = 1: A_0 (weight bound 1) and A_k have the same σ.
            assert_rel(e.sigma_weighted, e.sigma_normaliser, REL, "σ_AV = σ_D at R_w = 1");
            assert_rel(e.additive, 20.0 * e.sigma_weighted / n as f64, REL, "10(σ+σ)/n");
            assert_rel(e.relative, 0.02 / 0.99, REL, "2ε_s/(1 − ε_s)");
            let a = estimate_error(n, d, &adaptive).unwrap();
            assert_eq!(a.copies, l, "NetHoeffding l at d = {d}");
            assert_table(
                a.additive,
                want_adaptive,
                &format!("P1-AC12 d = {d}, n = {n:e}, l = {l}"),
            );
            // The exact release (the default) costs at most 1% more (every l = 1 cell; the
            // adaptive ones up to d = 4, as calibrating the exact node noise at the smallest
            // node budgets takes seconds in a debug build).
            let cells = if d <= 4 { vec![(fixed, e), (adaptive, a)] } else { vec![(fixed, e)] };
            for (p, float) in cells {
                let mut xp = p;
                xp.adaptive.tree.noise_mode = NoiseMode::Exact;
                let x = estimate_error(n, d, &xp).unwrap();
                assert_eq!(
                    (x.noise_mode, float.noise_mode),
                    (NoiseMode::Exact, NoiseMode::UnsafeFloat)
                );
                let ratio = x.additive / float.additive;
                assert!((1.0..1.01).contains(&ratio), "d = {d}, n = {n:e}: exact/float {ratio}");
                let ratio = x.worst_case_weighted / float.worst_case_weighted;
                assert!(
                    (1.0..1.01).contains(&ratio),
                    "d = {d}, n = {n:e}: P1-X5 exact/float {ratio}"
                );
            }
        }
    }
}

/// P1-X5: the deterministic per-copy bound for d = 4, n = 1e6, `l = 1` (PerVector) is 2.7e10,
/// about the per-copy 10σ of the `l = 49` structure (2.6e10).
#[test]
fn e5_worst_case_bound() {
    let one = estimate_error(1_000_000, 4, &ac12_params(Copies::Fixed(1))).unwrap();
    assert_rel(one.worst_case_weighted, 2.7e10, 0.02, "P1-X5 worst case, l = 1");
    let many =
        estimate_error(1_000_000, 4, &ac12_params(Copies::NetHoeffding { k: 10.0 })).unwrap();
    assert_eq!(many.copies, 49);
    assert_rel(10.0 * many.sigma_weighted, 2.6e10, 0.02, "10σ per copy, l = 49");
    // The same order of magnitude; both far above the l = 1 σ.
    let ratio = one.worst_case_weighted / (10.0 * many.sigma_weighted);
    assert!((0.9..1.2).contains(&ratio), "worst case / 10σ = {ratio}");
    assert!(one.worst_case_weighted > 10.0 * one.sigma_weighted);
}

// ---------------------------------------------------------------------------------------
// T1-I copy counts

/// T1-I at `R = 1`, `ε_s = 0.01`, `p_f = 0.01`, `s = 4`.
#[test]
fn copy_counts_of_table_t1_i() {
    // (d, r, NetHoeffding l, Paper C = 1 l as printed (before the odd rule)).
    let table = [(2, 15, 29, 149), (4, 70, 49, 742), (8, 495, 93, 5589), (16, 4845, 187, 58058)];
    for (d, r, net, paper) in table {
        assert_eq!(binom(d as u64 + 4, 4), r as u64);
        let got = copy_count(Copies::NetHoeffding { k: 10.0 }, d, r, 1.0, 0.01, 0.01).unwrap();
        assert_eq!(got, net, "NetHoeffding d = {d}");
        let got = copy_count(Copies::Paper { c: 1.0 }, d, r, 1.0, 0.01, 0.01).unwrap();
        let odd = if paper % 2 == 0 { paper + 1 } else { paper };
        assert_eq!(got, odd, "Paper C = 1 d = {d} (printed {paper}, forced odd)");
        assert_eq!(got % 2, 1);
        // The §1.8 formula by hand: ⌈C r ln(dR/(ε_s p_f))⌉ = printed value.
        assert_eq!((r as f64 * (d as f64 / 1e-4).ln()).ceil() as u64, paper);
        // Through the parameter structs (relaxed, p_f = 0.01) and strict (p_f just below).
        let mut a = ac12_params(Copies::NetHoeffding { k: 10.0 }).adaptive;
        assert_eq!(a.copy_count(d).unwrap() as u64, net);
        a.tree.strict = true;
        a.p_fail = 0.01 * (1.0 - 1e-9);
        assert_eq!(a.copy_count(d).unwrap() as u64, net);
    }
    // The library default is the tables' p_f = 0.01, accepted in strict mode; p_f = 0.005
    // gives ⌈(d ln(⌈√d/0.02⌉ + 1) + ln 200)/0.4802⌉, forced odd.
    let mut default = AdaptiveParams::new(paper_tree());
    assert_eq!(default.p_fail, 0.01);
    assert!(default.tree.strict);
    for (d, want) in [(2, 29), (4, 49), (8, 93), (16, 187)] {
        assert_eq!(default.copy_count(d).unwrap(), want, "default p_f d = {d}");
    }
    default.p_fail = 0.005;
    for (d, want) in [(2, 29), (4, 51), (8, 95), (16, 189)] {
        let axis = ((d as f64).sqrt() / 0.02).ceil() + 1.0;
        let raw = ((d as f64 * axis.ln() + 200f64.ln()) / (2.0 * 0.49 * 0.49)).ceil() as usize;
        assert_eq!(raw | 1, want, "hand formula d = {d}");
        assert_eq!(default.copy_count(d).unwrap(), want, "p_f = 0.005, d = {d}");
    }
    // Fixed: even values round up to odd (P1-16).
    for (l, want) in [(1, 1), (2, 3), (4, 5), (49, 49)] {
        assert_eq!(copy_count(Copies::Fixed(l), 4, 70, 1.0, 0.01, 0.01).unwrap(), want);
    }
}

// ---------------------------------------------------------------------------------------
// §1.6 s_min and the temperature

/// §1.6's `s_min(R, ε_s)` table through `SoftmaxTreeParams::feature_map` (τ = 1/d, so
/// `z_max = R²` whatever `d`), and the worst-case relative errors printed for R = 1.
#[test]
fn s_min_table_and_temperature() {
    let eps = [0.1, 0.05, 0.01, 1e-3, 1e-4, 1e-6];
    let table: [(f64, [u32; 6]); 6] = [
        (1.0, [2, 3, 4, 5, 6, 9]),
        (1.5, [4, 5, 6, 8, 10, 12]),
        (2.0, [7, 8, 9, 11, 13, 17]),
        (2.5, [10, 11, 13, 15, 17, 21]),
        (3.0, [13, 14, 17, 20, 22, 26]),
        (4.0, [21, 23, 26, 30, 33, 38]),
    ];
    for (radius, row) in table {
        for (&e, want) in eps.iter().zip(row) {
            assert_eq!(s_min(radius * radius, e), want, "hand Poisson criterion R = {radius}");
            for d in [1, 3] {
                let mut p = paper_tree();
                p.radius = radius;
                p.eps_s = e;
                p.strict = e < 0.1; // ε_s = 0.1 is outside the strict range (0, 0.1)
                let map = p.feature_map(d).unwrap();
                assert_eq!(map.degree(), want, "s_min(R = {radius}, ε_s = {e}), d = {d}");
                assert_rel(map.z_max(radius), radius * radius, 1e-14, "z_max = R²");
            }
        }
    }
    assert_rel(taylor_relative_error(1.0, 3), 1.936e-2, 1e-3, "s = 3 at R = 1");
    assert_rel(taylor_relative_error(1.0, 4), 3.673e-3, 1e-3, "s = 4 at R = 1");
    assert_rel(taylor_relative_error(1.0, 5), 5.945e-4, 1e-3, "s = 5 at R = 1");

    // The paper's setting: s = 4 for every d at R = 1, ε_s = 0.01.
    for d in [1, 2, 4, 8, 16] {
        assert_eq!(paper_tree().feature_map(d).unwrap().degree(), 4);
    }
    // P1-X6: τ = 1/√d gives z_max = τ d R² = √d, so s grows with d as min_degree predicts.
    for d in [1usize, 2, 4, 9, 16] {
        let mut p = paper_tree();
        p.temperature = Temperature::Custom(1.0 / (d as f64).sqrt());
        let map = p.feature_map(d).unwrap();
        let z = (d as f64).sqrt();
        assert_rel(map.z_max(1.0), z, 1e-14, "z_max = √d");
        assert_eq!(map.degree(), s_min(z, 0.01), "degree at d = {d}");
        assert_eq!(map.degree(), min_degree(z, 0.01).unwrap());
    }
    // d = 16: z_max = 4 is the R = 2 row (s = 9), and Γ_{2, s ≥ 3} = 8/√6.
    let mut p = paper_tree();
    p.temperature = Temperature::Custom(0.25);
    let map = p.feature_map(16).unwrap();
    assert_eq!(map.degree(), 9);
    assert_eq!(map.features() as u64, binom(25, 9));
    assert_rel(map.range(1.0), 8.0 / 6f64.sqrt(), 1e-12, "Γ at z_max = 4");
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        p.temperature = Temperature::Custom(bad);
        out_of_range(p.feature_map(4), "temperature");
    }
}

// ---------------------------------------------------------------------------------------
// P1-AC10 (P1-11)

/// P1-AC10: with signed weights the Taylor kernel's error is 40% of `wᵀexp`, violating the
/// paper's "ε_s relative" claim, but within the corrected `ε_s Σ|w| e^{xy}`.
#[test]
fn ac10_signed_weights_regression() {
    let xs: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];
    let w: [f64; 5] = [1.0, -4.0, 6.0, -4.0, 1.0];
    let y: f64 = 1.0;
    // d = 1 so τ = 1/d = 1; s = 4 from the paper's ε_s = 0.01 at R = 1.
    let map = paper_tree().feature_map(1).unwrap();
    assert_eq!((map.degree(), map.tau()), (4, 1.0));
    let exact: f64 = xs.iter().zip(&w).map(|(x, wi)| wi * (x * y).exp()).sum();
    let hand: f64 = xs.iter().zip(&w).map(|(x, wi)| wi * taylor(x * y, 4)).sum();
    let poly: f64 = xs.iter().zip(&w).map(|(&x, wi)| wi * map.kernel(&[x], &[y])).sum();
    // Closed forms: a 4th forward difference with step h = 1/4: (e^h − 1)^4 and h^4·(4!/4!).
    assert_rel(exact, 0.25f64.exp_m1().powi(4), 1e-12, "wᵀexp closed form");
    assert_rel(hand, 0.25f64.powi(4), 1e-12, "Σ w T_4 closed form");
    assert_rel(poly, hand, 1e-12, "TaylorFeatureMap::kernel");
    assert_rel(exact, 0.0065077, 1e-4, "P1-AC10 wᵀexp");
    assert_rel(poly, 0.0039063, 1e-4, "P1-AC10 polynomial");
    let err = exact - poly;
    assert_rel(err, 0.0026015, 1e-4, "P1-AC10 error");
    assert!(err / exact > 0.39, "relative error {}", err / exact);
    assert!(err > 0.01 * exact.abs(), "the paper's ε_s|wᵀexp| bound must fail here");
    let abs_sum: f64 = xs.iter().zip(&w).map(|(x, wi)| wi.abs() * (x * y).exp()).sum();
    assert_rel(0.01 * abs_sum, 0.27215, 1e-4, "corrected bound ε_s Σ|w|e^{xy}");
    assert!(err <= 0.01 * abs_sum);
    // Also within the sharper worst-case relative error of s = 4 (3.673e-3).
    assert!(err <= taylor_relative_error(1.0, 4) * abs_sum);
}

// ---------------------------------------------------------------------------------------
// T1-L memory

/// T1-L: the estimate is `(d+1)·l·(r+1)·3·(2N−2)·8` bytes and reproduces the table; a build
/// over the limit fails with `MemoryLimit` before allocating.
#[test]
fn memory_of_table_t1_l() {
    const MIB: f64 = (1u64 << 20) as f64;
    const GIB: f64 = (1u64 << 30) as f64;
    // (n, N, d, r, one DPTreeSoftmax, unit, × (d+1) in GiB).
    let table: [(usize, u64, usize, u64, &str, f64, &str); 7] = [
        (1_000, 1024, 4, 70, "3.3", MIB, "0.02"),
        (1_000, 1024, 8, 495, "23.2", MIB, "0.20"),
        (10_000, 16384, 4, 70, "53.2", MIB, "0.26"),
        (10_000, 16384, 8, 495, "372", MIB, "3.27"),
        (10_000, 16384, 16, 4845, "3.6", GIB, "60.3"),
        (1_000_000, 1_048_576, 4, 70, "3.3", GIB, "16.6"),
        (1_000_000, 1_048_576, 8, 495, "23.3", GIB, "209"),
    ];
    let fixed = SoftmaxTreeCrossAttentionParams::new(paper_tree());
    let mut one = fixed;
    one.adaptive.copies = Copies::Fixed(1);
    for (n, big_n, d, r, per_softmax, unit, total) in table {
        let formula = (d as u64 + 1) * (r + 1) * 3 * (2 * big_n - 2) * 8;
        let got = estimate_cross_attention_bytes(n, d, &one).unwrap();
        assert_eq!(got, formula, "n = {n}, d = {d}");
        let what = format!("T1-L n = {n}, d = {d}");
        assert_table(got as f64 / (d as f64 + 1.0) / unit, per_softmax, &what);
        assert_table(got as f64 / GIB, total, &what);
    }
    // With l copies the estimate scales by l (NetHoeffding, default p_f = 0.01: l = 49).
    let net = estimate_cross_attention_bytes(1_000, 4, &fixed).unwrap();
    assert_eq!(net, 49 * 5 * 71 * 3 * 2046 * 8);

    // Over the 1 GiB default: d = 16, n = 1e4 needs 60 GiB; refused before building.
    let (n, d) = (10_000, 16);
    let keys = vec![0.5; n * d];
    let vals = vec![0.0; n * d];
    let (k, v) = (
        MatRef::from_row_major(&keys, n, d).unwrap(),
        MatRef::from_row_major(&vals, n, d).unwrap(),
    );
    let want = 17 * 4846 * 3 * (2 * 16384 - 2) * 8;
    match SoftmaxTreeCrossAttention::new_keyed(k, v, &one, draw(2, 0), None) {
        Err(Error::MemoryLimit { needed_bytes, limit_bytes, .. }) => {
            assert_eq!((needed_bytes, limit_bytes), (want, 1 << 30));
        }
        other => panic!("expected MemoryLimit, got {other:?}"),
    }
    // One DPTreeSoftmax of the same size (3.6 GiB) and an adaptive structure are refused too.
    let w = vec![1.0; n];
    match DpTreeSoftmax::new_keyed(k, &w, &paper_tree(), draw(2, 1), None) {
        Err(Error::MemoryLimit { needed_bytes, .. }) => assert_eq!(needed_bytes, want / 17),
        other => panic!("expected MemoryLimit, got {other:?}"),
    }
    let ad = AdaptiveParams::new(paper_tree());
    let r = DpTreeSoftmaxAdaptive::new_keyed(k, &w, &ad, draw(2, 2), None);
    assert!(matches!(r, Err(Error::MemoryLimit { .. })), "{r:?}");

    // The limit is inclusive: exactly the estimate builds, one byte less is refused.
    let (n, d) = (64, 2);
    let keys = vec![0.25; n * d];
    let vals = vec![0.5; n * d];
    let (k, v) = (
        MatRef::from_row_major(&keys, n, d).unwrap(),
        MatRef::from_row_major(&vals, n, d).unwrap(),
    );
    let need = estimate_cross_attention_bytes(n, d, &one).unwrap();
    assert_eq!(need, 3 * 16 * 3 * 126 * 8);
    let mut p = one;
    p.adaptive.tree.memory_limit_bytes = need;
    assert!(SoftmaxTreeCrossAttention::new_keyed(k, v, &p, draw(2, 3), None).is_ok());
    p.adaptive.tree.memory_limit_bytes = need - 1;
    match SoftmaxTreeCrossAttention::new_keyed(k, v, &p, draw(2, 3), None) {
        Err(Error::MemoryLimit { needed_bytes, limit_bytes, .. }) => {
            assert_eq!((needed_bytes, limit_bytes), (need, need - 1));
        }
        other => panic!("expected MemoryLimit, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// P1-X1: the moment sketch

fn sketch_params(d_budget: f64) -> MomentSketchParams {
    MomentSketchParams::new(1.0, 1.0, PrivacyBudget::new(1.0, d_budget).unwrap())
}

/// P1-X1 calibration: Gaussian `Δ₂ = 2√(T_s(z_max))·√(1 + d R_w²)` with the analytic Gaussian
/// σ; Laplace `Δ₁ = 2·Σβ·(1 + d R_w)` with `b = Δ₁/ε`; mismatched δ are refused.
#[test]
fn e1_calibration() {
    for (d, rw, radius) in [(2usize, 1.0, 1.0), (4, 1.0, 1.0), (3, 2.5, 1.5)] {
        let df = d as f64;
        let mut p = sketch_params(1e-6);
        (p.weight_bound, p.radius) = (rw, radius);
        let s = s_min(radius * radius, 0.01);
        let (sens, sigma) = p.calibrate(d).unwrap();
        // The library adds a 1e-9 relative margin for rounding in P(k) (SENSITIVITY_MARGIN).
        let want = 2.0 * taylor(radius * radius, s).sqrt() * (1.0 + df * rw * rw).sqrt();
        assert_rel(sens, want * (1.0 + 1e-9), 1e-12, "Gaussian Δ₂");
        assert_eq!(sigma, analytic_gaussian_sigma(1.0, 1e-6, sens).unwrap());

        let mut lp = p;
        lp.noise = SketchNoise::Laplace;
        lp.budget = PrivacyBudget::new(0.5, 0.0).unwrap();
        let (sens, b) = lp.calibrate(d).unwrap();
        let want = 2.0 * sum_beta(d, s, 1.0 / df, radius) * (1.0 + df * rw) * (1.0 + 1e-9);
        assert_rel(sens, want, 1e-12, "Laplace Δ₁");
        assert_rel(b, want / 0.5, 1e-12, "Laplace b = Δ₁/ε");
    }
    // §1.6 (ranges β_a): Σβ at d = 2, s = 4, τ = 1/2, R = 1 (hand value 4.84118).
    assert_rel(sum_beta(2, 4, 0.5, 1.0), 4.841_181_696, 1e-9, "Σβ");

    let mut p = sketch_params(0.0); // Gaussian with δ = 0
    out_of_range(p.calibrate(2), "delta");
    p.noise = SketchNoise::Laplace;
    assert!(p.calibrate(2).is_ok());
    p.budget = PrivacyBudget::new(1.0, 1e-6).unwrap(); // Laplace with δ > 0
    out_of_range(p.calibrate(2), "delta");
    let (k, v) = ([0.5, 0.5], [0.0, 0.0]);
    let r = MomentSketch::new_keyed(
        MatRef::from_row_major(&k, 1, 2).unwrap(),
        MatRef::from_row_major(&v, 1, 2).unwrap(),
        &p,
        draw(3, 0),
        None,
    );
    out_of_range(r, "delta");
}

/// P1-X1 noise: over 2000 stream ids, `M̃ − M` (M the non-private exact sketch) has mean 0,
/// variance σ² and a normal distribution (z-tests and KS at ALPHA); Laplace: variance 2b².
#[test]
fn e1_noise_statistics() {
    let (n, d) = (8, 2);
    let mut rng = Rng(11);
    let keys = random_matrix(&mut rng, n, d, 0.0, 1.0);
    let vals = random_matrix(&mut rng, n, d, -1.0, 1.0);
    let (k, v) = (
        MatRef::from_row_major(&keys, n, d).unwrap(),
        MatRef::from_row_major(&vals, n, d).unwrap(),
    );
    for noise in [SketchNoise::Gaussian, SketchNoise::Laplace] {
        let mut p = sketch_params(1e-6);
        p.noise_mode = NoiseMode::UnsafeFloat;
        let runs = match noise {
            SketchNoise::Gaussian => 2000,
            SketchNoise::Laplace => {
                p.noise = noise;
                p.budget = PrivacyBudget::new(1.0, 0.0).unwrap();
                1000
            }
        };
        let exact = MomentSketch::non_private_exact(k, v, &p).unwrap();
        let m = exact.sketch();
        assert_eq!(m.len(), 15 * 3, "r × (d+1)");
        let (_, scale) = exact.calibration();
        let mut diffs = Vec::with_capacity(runs * m.len());
        for id in 0..runs as u64 {
            let s = MomentSketch::new_keyed(k, v, &p, draw(4, id), None).unwrap();
            assert_eq!(s.calibration(), exact.calibration());
            diffs.extend(s.sketch().iter().zip(m).map(|(a, b)| a - b));
        }
        let mo = moments(&diffs);
        let (var, m4) = match noise {
            SketchNoise::Gaussian => (scale * scale, 3.0 * scale.powi(4)),
            SketchNoise::Laplace => (2.0 * scale * scale, 24.0 * scale.powi(4)),
        };
        let (zm, zv) = (mean_z(&mo, 0.0, var), var_z(&mo, var, m4));
        assert!(z_accepts(zm) && z_accepts(zv), "{noise:?}: mean z {zm}, var z {zv}");
        let ks = match noise {
            SketchNoise::Gaussian => ks_test(&diffs, |x| normal_cdf(x / scale)),
            SketchNoise::Laplace => ks_test(&diffs, |x| {
                if x < 0.0 { 0.5 * (x / scale).exp() } else { 1.0 - 0.5 * (-x / scale).exp() }
            }),
        };
        assert!(ks.accepts(), "{noise:?}: KS {ks:?}");
    }
}

/// `γ_k = ku/(1 − ku)`, `u = 2^−53`.
fn gamma(k: f64) -> f64 {
    let u = f64::EPSILON / 2.0;
    k * u / (1.0 - k * u)
}

/// P1-X1 in exact mode (the default): the documented calibration recomputed here (per-token
/// sensitivity with the feature map's `(1 + γ_{6s+1})`, blocked summation error
/// `E = γ_h·n·Δ/2` with `h = ⌊√n⌋ + ⌈n/⌊√n⌋⌉`, the grid rule `√D·Λ ≤ Δ/256` (Gaussian) or
/// `D·Λ ≤ Δ/256` (Laplace) over `D = r(d+1)` entries, `Δ′ = Δ + 2E + √D·Λ` or `Δ + 2E + D·Λ`,
/// `s = √((σ(ε, δ, Δ′)/Λ)² + 16)` or `b = Δ′/(Λε)`), and every entry is
/// `Λ·(round(m/Λ) + Z)`, `m` the noise-free (blocked) sum and `Z` the grid's integer noise
/// at element `i·(d+1) + c`; errors leave the ledger untouched.
#[test]
fn e1_exact_release_is_the_integer_noise_on_the_grid() {
    let (n, d) = (50, 3);
    let mut rng = Rng(12);
    // Some entries outside the domain: clamped.
    let keys = random_matrix(&mut rng, n, d, -0.2, 1.2);
    let vals = random_matrix(&mut rng, n, d, -1.5, 1.5);
    let (k, v) = (
        MatRef::from_row_major(&keys, n, d).unwrap(),
        MatRef::from_row_major(&vals, n, d).unwrap(),
    );
    let (df, nf) = (d as f64, n as f64);
    let s = s_min(1.0, 0.01);
    let r = binom((d as u64) + u64::from(s), u64::from(s)) as f64;
    let entries = r * (df + 1.0);
    let block = (nf.sqrt()).floor();
    let h = block + (nf / block).ceil();
    for noise in [SketchNoise::Gaussian, SketchNoise::Laplace] {
        let mut p = sketch_params(1e-6);
        if noise == SketchNoise::Laplace {
            p.noise = noise;
            p.budget = PrivacyBudget::new(0.7, 0.0).unwrap();
        }
        let eval = 1.0 + gamma(6.0 * f64::from(s) + 1.0);
        let (delta, per_entry) = match noise {
            SketchNoise::Gaussian => {
                (2.0 * eval * taylor(1.0, s).sqrt() * (1.0 + df).sqrt(), entries.sqrt())
            }
            SketchNoise::Laplace => {
                let beta = sum_beta(d, s, 1.0 / df, 1.0) / (1.0 - gamma(6.0 * f64::from(s)));
                (2.0 * eval * beta * (1.0 + df), entries)
            }
        };
        let lambda = 2f64.powi((delta / (256.0 * per_entry)).log2().floor() as i32);
        let err = gamma(h) * nf * delta / 2.0;
        let rounded = delta + 2.0 * err + per_entry * lambda;

        let (st, dr) = (stream(8, 1), draw(8, 1));
        let mut ledger: Ledger =
            Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(2.0, 1e-5).unwrap());
        let sk = MomentSketch::new_keyed(k, v, &p, dr, Some(&mut ledger)).unwrap();
        assert_eq!((ledger.charges(), ledger.unsafe_float_charges()), (1, 0));
        assert_eq!((sk.noise_mode(), sk.resolution()), (NoiseMode::Exact, Some(lambda)));
        let grid = *sk.grid().unwrap();
        assert_eq!(grid, p.exact_grid(d, n).unwrap());
        assert_rel(grid.rounded_sensitivity(), rounded, 1e-12, "Δ′");
        assert_eq!(sk.calibration(), (grid.rounded_sensitivity(), grid.scale()));
        match grid {
            SketchGrid::Gaussian(g) => {
                let sigma_c = analytic_gaussian_sigma(1.0, 1e-6, rounded).unwrap();
                let want = ((sigma_c / lambda).powi(2) + 16.0).sqrt();
                assert_rel(g.integer_noise().sigma(), want, 1e-9, "discrete Gaussian s");
            }
            SketchGrid::Laplace(g) => {
                assert_rel(g.integer_noise().scale_f64(), rounded / (lambda * 0.7), 1e-9, "b");
            }
        }
        let draw = |i: u64| match &grid {
            SketchGrid::Gaussian(g) => g.integer_noise().sample_at(&st, i).unwrap(),
            SketchGrid::Laplace(g) => g.integer_noise().sample_at(&st, i).unwrap(),
        };
        let (kc, vc) = (clamp_all(&keys, 0.0, 1.0), clamp_all(&vals, -1.0, 1.0));
        let exact = MomentSketch::non_private_exact(
            MatRef::from_row_major(&kc, n, d).unwrap(),
            MatRef::from_row_major(&vc, n, d).unwrap(),
            &p,
        )
        .unwrap();
        assert_eq!(sk.sketch().len() as f64, entries);
        // The noise-free sum is blocked: blocks of ⌊√n⌋ = 7 tokens, then the blocks in order.
        let map = exact.feature_map();
        let (rr, cols) = (map.features(), d + 1);
        let (mut total, mut part) = (vec![0.0; rr * cols], vec![0.0; rr * cols]);
        let mut u = vec![0.0; rr];
        for j in 0..n {
            map.eval_into(&kc[j * d..(j + 1) * d], &mut u).unwrap();
            for (i, &ui) in u.iter().enumerate() {
                for c in 0..cols {
                    let vcj = if c == 0 { 1.0 } else { vc[j * d + c - 1] };
                    part[i * cols + c] += ui * vcj;
                }
            }
            if (j + 1) % 7 == 0 || j + 1 == n {
                total.iter_mut().zip(&mut part).for_each(|(t, p)| {
                    *t += *p;
                    *p = 0.0;
                });
            }
        }
        assert_eq!(exact.sketch(), &total[..]);
        for (i, (&got, &m)) in sk.sketch().iter().zip(exact.sketch()).enumerate() {
            let idx = got / lambda;
            assert!(idx.fract() == 0.0 && idx.abs() < 2f64.powi(53), "entry {i} off the grid");
            assert_eq!(got, ((m / lambda).round() + draw(i as u64) as f64) * lambda, "entry {i}");
        }
        // A refused charge: no sketch, the ledger as it was.
        let mut small: Ledger =
            Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(0.1, 1e-5).unwrap());
        let r = MomentSketch::new_keyed(k, v, &p, dr, Some(&mut small));
        assert!(matches!(r, Err(Error::Infeasible { .. })), "{r:?}");
        assert_eq!(
            (small.charges(), small.spent()),
            (0, Amount::Approx { epsilon: 0.0, delta: 0.0 })
        );
        // The unsafe float path is counted as such.
        let mut fp = p;
        fp.noise_mode = NoiseMode::UnsafeFloat;
        let f = MomentSketch::new_keyed(k, v, &fp, dr, Some(&mut ledger)).unwrap();
        assert_eq!((ledger.charges(), ledger.unsafe_float_charges()), (2, 1));
        assert_eq!((f.noise_mode(), f.resolution()), (NoiseMode::UnsafeFloat, None));
    }
}

/// The exact calibration where its terms are visible: the summation error at `n = 1e6` and
/// `1e9` (`2E/Δ ≈ 2·10^−7` and `7·10^−3`), and the feature map's `γ_{6s+1}` at `s = 64`
/// (`≈ 4·10^−14`), against the documented formulas to 1e-14.
#[test]
fn e1_exact_calibration_terms() {
    let mut p = sketch_params(1e-6);
    for n in [1_000_000usize, 1_000_000_000] {
        let d = 2;
        let s = s_min(1.0, 0.01);
        let entries = (binom(2 + u64::from(s), u64::from(s)) * 3) as f64;
        let delta =
            2.0 * (1.0 + gamma(6.0 * f64::from(s) + 1.0)) * taylor(1.0, s).sqrt() * 3f64.sqrt();
        let lambda = 2f64.powi((delta / (256.0 * entries.sqrt())).log2().floor() as i32);
        let nf = n as f64;
        let block = nf.sqrt().floor();
        let err = gamma(block + (nf / block).ceil()) * nf * delta / 2.0;
        let g = p.exact_grid(d, n).unwrap();
        assert_eq!(g.resolution(), lambda);
        let want = delta + 2.0 * err + entries.sqrt() * lambda;
        assert_rel(g.rounded_sensitivity(), want, 1e-14, &format!("Δ′ at n = {n}"));
    }
    // s = 64 at d = 1 (τ = 1, R = 1): r = 65.
    p.eps_s = 1e-91;
    assert_eq!(p.feature_map(1).unwrap().degree(), 64);
    let eval = 1.0 + gamma(6.0 * 64.0 + 1.0);
    let delta = 2.0 * eval * taylor(1.0, 64).sqrt() * 2f64.sqrt();
    let entries = 130f64;
    let lambda = 2f64.powi((delta / (256.0 * entries.sqrt())).log2().floor() as i32);
    let err = gamma(2.0) * delta / 2.0; // n = 1: h = 1 + 1
    let g = p.exact_grid(1, 1).unwrap();
    assert_rel(
        g.rounded_sensitivity(),
        delta + 2.0 * err + entries.sqrt() * lambda,
        1e-14,
        "s = 64",
    );
}

fn clamp_all(x: &[f64], lo: f64, hi: f64) -> Vec<f64> {
    x.iter().map(|v| v.clamp(lo, hi)).collect()
}

/// Exact softmax attention `Σ e^{q·k/d} v / Σ e^{q·k/d}` and `D⁻¹A|V|`.
fn exact_attention(q: &[f64], keys: &[f64], vals: &[f64], d: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut num, mut abs, mut den) = (vec![0.0; d], vec![0.0; d], 0.0);
    for (k, v) in keys.chunks_exact(d).zip(vals.chunks_exact(d)) {
        let w = (q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / d as f64).exp();
        den += w;
        for c in 0..d {
            num[c] += w * v[c];
            abs[c] += w * v[c].abs();
        }
    }
    (num.iter().map(|x| x / den).collect(), abs.iter().map(|x| x / den).collect())
}

/// P1-X1 accuracy at n = 1e5, d = 2, ε = 1, δ = 1e-6: the sketch is within a derived bound of
/// exact softmax attention, and far more accurate than the trees' P1-AC12 estimate.
///
/// Bound: the noise of `⟨P(q), M̃_{:,c}⟩` is `N(0, σ²‖P(q)‖²)` with `‖P(q)‖² ≤ T_4(1)`, so
/// (10σ, probability 1 − 1e-23) `|η| ≤ ν := 10σ√T_4(1)`; the true polynomial denominator
/// is ≥ n and the P1-X8 clamps only move answers towards the truth, so
/// `|Õ − O_poly| ≤ ν(1 + R_w)/(n − ν)`. The kernel adds (P1-11, §1.9)
/// `|O_poly − O| ≤ (2ε_s/(1−ε_s))·(D⁻¹A|V|)` with `ε_s = 3.673e-3`, the worst-case relative
/// error of `s = 4` at `z_max = 1` (§1.6).
#[test]
fn e1_accuracy_against_exact_attention() {
    let (n, d) = (100_000, 2);
    let mut rng = Rng(21);
    let keys = random_matrix(&mut rng, n, d, 0.0, 1.0);
    let vals = random_matrix(&mut rng, n, d, -1.0, 1.0);
    let (k, v) = (
        MatRef::from_row_major(&keys, n, d).unwrap(),
        MatRef::from_row_major(&vals, n, d).unwrap(),
    );
    let p = sketch_params(1e-6);
    let noisy = MomentSketch::new_keyed(k, v, &p, draw(5, 0), None).unwrap();
    let poly = MomentSketch::non_private_exact(k, v, &p).unwrap();
    let (_, sigma) = noisy.calibration();
    let nu = 10.0 * sigma * taylor(1.0, 4).sqrt();
    let noise_bound = nu * 2.0 / (n as f64 - nu);
    let eps_s = 3.673e-3;
    let kernel_rel = 2.0 * eps_s / (1.0 - eps_s);

    let mut queries: Vec<[f64; 2]> = vec![[0.0, 0.0], [1.0, 1.0], [1.0, 0.0]];
    queries.extend((0..61).map(|_| [rng.unit(), rng.unit()]));
    let (mut sum_abs, mut count, mut max_noise) = (0.0, 0, 0.0f64);
    let (mut out, mut out_poly) = ([0.0; 2], [0.0; 2]);
    for q in &queries {
        noisy.query(q, &mut out).unwrap();
        poly.query(q, &mut out_poly).unwrap();
        let (exact, avg_abs) = exact_attention(q, &keys, &vals, d);
        for c in 0..d {
            let kernel_err = (out_poly[c] - exact[c]).abs();
            assert!(kernel_err <= kernel_rel * avg_abs[c], "q = {q:?}: kernel error {kernel_err}");
            let noise_err = (out[c] - out_poly[c]).abs();
            max_noise = max_noise.max(noise_err);
            assert!(noise_err <= noise_bound, "q = {q:?}: noise error {noise_err} > {noise_bound}");
            let err = (out[c] - exact[c]).abs();
            assert!(err <= noise_bound + kernel_rel * avg_abs[c], "q = {q:?}: error {err}");
            sum_abs += err;
            count += 1;
        }
    }
    let mae = sum_abs / count as f64;
    let bound = noise_bound + kernel_rel * 1.0;
    assert!(mae <= bound, "mean absolute error {mae} > {bound}");
    assert!(max_noise > 0.0, "the sketch must be noisy");
    // Against the trees (P1-AC12 settings, PerVector, non-adaptive) at the same n.
    let mut tp = SoftmaxTreeCrossAttentionParams::new(paper_tree());
    tp.adaptive.copies = Copies::Fixed(1);
    let trees = estimate_error(n, d, &tp).unwrap().additive;
    assert!(trees > 100.0, "trees' additive estimate at n = 1e5: {trees}");
    assert!(mae < 1e-4 * trees, "sketch MAE {mae} vs trees' estimate {trees}");
}

/// P1-X1 ledger: a Gaussian sketch charges its `(ε, δ)` to an approximate-DP ledger and its
/// zCDP `ρ = Δ′²/(2σ²)` to a zCDP ledger (the Gaussian mechanism's ρ, Bun & Steinke 2016
/// Prop. 1.6; the discrete Gaussian's, CKS20, with `Δ′` the rounded sensitivity and `σ = s·Λ`
/// of the public calibration); a Laplace sketch charges `Pure(ε)` (a zCDP ledger takes it as
/// `ρ = ε²/2`). A ledger kept for another unit refuses the release.
#[test]
fn e1_ledger_charges() {
    let (n, d) = (16, 2);
    let mut rng = Rng(31);
    let keys = random_matrix(&mut rng, n, d, 0.0, 1.0);
    let vals = random_matrix(&mut rng, n, d, -1.0, 1.0);
    let (k, v) = (
        MatRef::from_row_major(&keys, n, d).unwrap(),
        MatRef::from_row_major(&vals, n, d).unwrap(),
    );
    let gauss = MomentSketchParams::new(1.0, 1.0, PrivacyBudget::new(0.75, 1e-6).unwrap());
    let mut approx: Ledger =
        Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(2.0, 1e-5).unwrap());
    MomentSketch::new_keyed(k, v, &gauss, draw(7, 0), Some(&mut approx)).unwrap();
    assert_eq!(approx.spent(), Amount::Approx { epsilon: 0.75, delta: 1e-6 });
    let mut zcdp: Ledger = Ledger::new_zcdp(PrivacyUnit::TOKEN, Rho::new(1.0).unwrap());
    let g = MomentSketch::new_keyed(k, v, &gauss, draw(7, 1), Some(&mut zcdp)).unwrap();
    let grid = gauss.exact_grid(d, n).unwrap();
    let rho = (grid.rounded_sensitivity() / grid.scale()).powi(2) / 2.0;
    let Amount::Zcdp { rho: spent } = zcdp.spent() else { panic!("zCDP ledger") };
    assert_rel(spent, rho, 1e-12, "Gaussian sketch ρ");
    assert_eq!(g.rho(), Some(spent));
    // The float path: the analytic Gaussian's σ at the float sensitivity Δ.
    let mut float = gauss;
    float.noise_mode = NoiseMode::UnsafeFloat;
    let mut z2: Ledger = Ledger::new_zcdp(PrivacyUnit::TOKEN, Rho::new(1.0).unwrap());
    MomentSketch::new_keyed(k, v, &float, draw(7, 5), Some(&mut z2)).unwrap();
    let (delta, sigma) = float.calibrate(d).unwrap();
    assert_eq!(sigma, analytic_gaussian_sigma(0.75, 1e-6, delta).unwrap());
    let Amount::Zcdp { rho: spent_f } = z2.spent() else { panic!("zCDP ledger") };
    assert_rel(spent_f, (delta / sigma).powi(2) / 2.0, 1e-12, "float sketch ρ");
    assert_eq!(z2.unsafe_float_charges(), 1);
    // A ledger kept for another unit: refused, no sketch.
    let mut prompts: Ledger =
        Ledger::new_approx(PrivacyUnit::Prompt, PrivacyBudget::new(2.0, 1e-5).unwrap());
    let r = MomentSketch::new_keyed(k, v, &gauss, draw(7, 6), Some(&mut prompts));
    assert!(matches!(r, Err(Error::UnitMismatch { .. })), "{r:?}");
    assert_eq!(prompts.charges(), 0);

    let mut lap = gauss;
    lap.noise = SketchNoise::Laplace;
    lap.budget = PrivacyBudget::new(0.5, 0.0).unwrap();
    MomentSketch::new_keyed(k, v, &lap, draw(7, 2), Some(&mut zcdp)).unwrap();
    let Amount::Zcdp { rho: total } = zcdp.spent() else { panic!("zCDP ledger") };
    assert_rel(total, spent + 0.125, 1e-12, "ρ after the Laplace sketch");
    MomentSketch::new_keyed(k, v, &lap, draw(7, 3), Some(&mut approx)).unwrap();
    assert_eq!(approx.spent(), Amount::Approx { epsilon: 1.25, delta: 1e-6 });
    assert_eq!(approx.charges(), 2);
    // A refused charge returns no sketch.
    let mut small: Ledger =
        Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(0.25, 1e-5).unwrap());
    let r = MomentSketch::new_keyed(k, v, &lap, draw(7, 4), Some(&mut small));
    assert!(matches!(r, Err(Error::Infeasible { .. })), "{r:?}");
    assert_eq!(small.charges(), 0);
}

// ---------------------------------------------------------------------------------------
// §1.9 bad input: typed errors, never a panic

/// A tiny in-domain problem: n = 4, d = 2.
fn tiny() -> (Vec<f64>, Vec<f64>) {
    (vec![0.1, 0.8, 0.6, 0.3, 0.9, 0.2, 1.0, 0.0], vec![0.5, -0.5, 1.0, 0.0, -1.0, 0.25, 0.0, 1.0])
}

fn tiny_params() -> SoftmaxTreeCrossAttentionParams {
    let mut p = SoftmaxTreeCrossAttentionParams::new(paper_tree());
    p.adaptive.copies = Copies::Fixed(1);
    p
}

fn mat(x: &[f64], rows: usize, cols: usize) -> MatRef<'_, f64> {
    MatRef::from_row_major(x, rows, cols).unwrap()
}

fn build_tiny(p: &SoftmaxTreeCrossAttentionParams) -> Result<SoftmaxTreeCrossAttention> {
    let (k, v) = tiny();
    SoftmaxTreeCrossAttention::new_keyed(
        MatRef::from_row_major(&k, 4, 2)?,
        MatRef::from_row_major(&v, 4, 2)?,
        p,
        draw(8, 0),
        None,
    )
}

/// §1.9 strict ranges: `ε ∈ (0, 1]`, `δ, δ′ ∈ (0, 1)`, `c, ε_s ∈ (0, 0.1)`,
/// `p_f ∈ (0, 0.01)`, `R, R_w ≥ 1`; the relaxed flag widens them.
#[test]
fn strict_parameter_ranges() {
    assert!(build_tiny(&tiny_params()).is_ok());
    type Mutation = fn(&mut SoftmaxTreeCrossAttentionParams);
    let cases: [(&str, Mutation); 14] = [
        ("c", |p| p.adaptive.tree.c = 0.1),
        ("c", |p| p.adaptive.tree.c = 0.0),
        ("c", |p| p.adaptive.tree.c = f64::NAN),
        ("eps_s", |p| p.adaptive.tree.eps_s = 0.1),
        ("eps_s", |p| p.adaptive.tree.eps_s = 0.0),
        ("radius", |p| p.adaptive.tree.radius = 0.999),
        ("radius", |p| p.adaptive.tree.radius = f64::INFINITY),
        ("weight_bound", |p| p.adaptive.tree.weight_bound = 0.5),
        ("epsilon", |p| p.adaptive.tree.budget = PrivacyBudget::new(1.5, 1e-6).unwrap()),
        ("delta", |p| p.adaptive.tree.budget = PrivacyBudget::new(0.5, 0.0).unwrap()),
        ("delta_prime", |p| p.adaptive.tree.delta_prime = 0.0),
        ("delta_prime", |p| p.adaptive.tree.delta_prime = 1.0),
        ("p_fail", |p| p.adaptive.p_fail = 0.0101),
        ("p_fail", |p| p.adaptive.p_fail = 0.0),
    ];
    for (name, mutate) in cases {
        let mut p = tiny_params();
        mutate(&mut p);
        out_of_range(build_tiny(&p), name);
        out_of_range(estimate_error(1000, 2, &p), name);
        out_of_range(estimate_cross_attention_bytes(1000, 2, &p), name);
    }
    // δ′ = NaN and the single structures.
    let mut t = paper_tree();
    t.delta_prime = f64::NAN;
    out_of_range(t.feature_map(2), "delta_prime");
    let (k, _) = tiny();
    let keys = MatRef::from_row_major(&k, 4, 2).unwrap();
    t = paper_tree();
    t.c = 0.2;
    out_of_range(DpTreeSoftmax::new_keyed(keys, &[1.0; 4], &t, draw(8, 1), None), "c");
    // ε = 1 exactly is accepted (Config A uses it).
    assert!(paper_tree().feature_map(2).is_ok());
    // Relaxed: ε > 1, c ≤ 0.7, ε_s < 1, R, R_w > 0.
    let mut p = tiny_params();
    p.adaptive.tree.strict = false;
    p.adaptive.tree.budget = PrivacyBudget::new(2.0, 1e-6).unwrap();
    p.adaptive.tree.c = 0.7;
    p.adaptive.tree.eps_s = 0.2;
    p.adaptive.tree.radius = 0.5;
    p.adaptive.tree.weight_bound = 0.5;
    p.adaptive.p_fail = 0.05;
    assert!(estimate_error(1000, 2, &p).is_ok());
    p.adaptive.tree.c = 0.71;
    out_of_range(estimate_error(1000, 2, &p), "c");
    // Tight accounting ignores c.
    let mut p = tiny_params();
    p.adaptive.tree.accounting = Accounting::Tight;
    p.adaptive.tree.c = 5.0;
    assert!(build_tiny(&p).is_ok());
}

/// Copy rules, shapes and sizes.
#[test]
fn copies_and_shapes() {
    let copies: [(Copies, &str); 6] = [
        (Copies::Fixed(0), "copies"),
        (Copies::NetHoeffding { k: 1.4 }, "k"),
        (Copies::NetHoeffding { k: 1.0 }, "k"),
        (Copies::NetHoeffding { k: f64::NAN }, "k"),
        (Copies::NetHoeffding { k: f64::INFINITY }, "k"),
        (Copies::Paper { c: 0.0 }, "C"),
    ];
    for (c, name) in copies {
        out_of_range(copy_count(c, 2, 15, 1.0, 0.01, 0.01), name);
        let mut p = tiny_params();
        p.adaptive.copies = c;
        out_of_range(build_tiny(&p), name);
    }
    // k = √2 rounded up (just above the limit): l is astronomically large, refused.
    let r =
        copy_count(Copies::NetHoeffding { k: std::f64::consts::SQRT_2 }, 2, 15, 1.0, 0.01, 0.01);
    assert!(matches!(r, Err(Error::SizeOverflow { .. }) | Err(Error::OutOfRange { .. })), "{r:?}");
    let r = copy_count(Copies::Fixed(u64::MAX), 2, 15, 1.0, 0.01, 0.01);
    assert!(matches!(r, Err(Error::SizeOverflow { .. })), "{r:?}");

    let (k, v) = tiny();
    let p = tiny_params();
    let build = |kr, kc, vr, vc| -> Result<SoftmaxTreeCrossAttention> {
        SoftmaxTreeCrossAttention::new_keyed(
            MatRef::from_row_major(&k[..kr * kc], kr, kc)?,
            MatRef::from_row_major(&v[..vr * vc], vr, vc)?,
            &p,
            draw(9, 0),
            None,
        )
    };
    let r = build(4, 2, 3, 2);
    assert!(matches!(r, Err(Error::ShapeMismatch { arg: "values", axis: "rows", .. })), "{r:?}");
    let r = build(4, 2, 4, 1);
    assert!(matches!(r, Err(Error::ShapeMismatch { arg: "values", axis: "cols", .. })), "{r:?}");
    out_of_range(build(0, 2, 0, 2), "n");
    out_of_range(build(4, 0, 4, 0), "dim");
    // A 1-row problem works (N = max(2, ·) = 2, P1-6).
    assert!(build(1, 2, 1, 2).is_ok());

    let keys = MatRef::from_row_major(&k, 4, 2).unwrap();
    let r = DpTreeSoftmax::new_keyed(keys, &[1.0; 3], &paper_tree(), draw(9, 1), None);
    assert!(matches!(r, Err(Error::ShapeMismatch { arg: "weights", .. })), "{r:?}");
    let ad = AdaptiveParams { copies: Copies::Fixed(3), ..AdaptiveParams::new(paper_tree()) };
    let r = DpTreeSoftmaxAdaptive::new_keyed(keys, &[1.0; 5], &ad, draw(9, 2), None);
    assert!(matches!(r, Err(Error::ShapeMismatch { arg: "weights", .. })), "{r:?}");
    let empty = MatRef::from_row_major(&k[..0], 0, 2).unwrap();
    out_of_range(DpTreeSoftmax::new_keyed(empty, &[], &paper_tree(), draw(9, 3), None), "n");

    // Moment sketch: n = 0, shapes, d = 0.
    let sp = sketch_params(1e-6);
    let sketch = |kr, kc, vr, vc| -> Result<MomentSketch> {
        MomentSketch::new_keyed(
            MatRef::from_row_major(&k[..kr * kc], kr, kc)?,
            MatRef::from_row_major(&v[..vr * vc], vr, vc)?,
            &sp,
            draw(9, 4),
            None,
        )
    };
    out_of_range(sketch(0, 2, 0, 2), "n");
    out_of_range(sketch(4, 0, 4, 0), "dim");
    let r = sketch(4, 2, 2, 2);
    assert!(matches!(r, Err(Error::ShapeMismatch { arg: "values", .. })), "{r:?}");
    let r = sketch(4, 2, 4, 1);
    assert!(matches!(r, Err(Error::ShapeMismatch { arg: "values", .. })), "{r:?}");
}

// Review finding (fixed): a negative `k` passed the old `k * k > 2` check.
#[test]
fn net_hoeffding_rejects_negative_k() {
    let r = copy_count(Copies::NetHoeffding { k: -10.0 }, 2, 15, 1.0, 0.01, 0.01);
    out_of_range(r, "k");
    let mut p = tiny_params();
    p.adaptive.copies = Copies::NetHoeffding { k: -10.0 };
    out_of_range(build_tiny(&p), "k");
}

// Review finding (fixed): the Tight split left no room for the report's upward rounding, so
// a ledger holding exactly (ε, δ + δ′) refused the build; the split now keeps a 1e-12 margin.
#[test]
fn tight_accounting_report_fits_its_target() {
    let (es, ds, dps) = (0.5, 5e-7, 5e-7);
    let copy = PrivacyBudget::new(es, ds).unwrap();
    let tight = softmax_budget(copy, dps, 0.09, A_FEATURES, A_DEPTH, Accounting::Tight).unwrap();
    let got = tight.achieved().unwrap();
    assert!(got.epsilon().get() <= es, "tight ε {:?} > {es}", got.epsilon());
    assert!(got.delta().get() <= ds + dps, "tight δ {:e} > {:e}", got.delta().get(), ds + dps);

    let keys: Vec<f64> = (0..16).map(|i| f64::from(i) / 16.0).collect();
    let mut p = SoftmaxTreeCrossAttentionParams::new(paper_tree());
    p.adaptive.tree.accounting = Accounting::Tight;
    p.adaptive.copies = Copies::Fixed(3);
    let mut ledger: Ledger =
        Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(1.0, 2e-6).unwrap());
    let r = SoftmaxTreeCrossAttention::new_keyed(
        mat(&keys, 4, 4),
        mat(&keys, 4, 4),
        &p,
        draw(13, 0),
        Some(&mut ledger),
    );
    assert!(r.is_ok(), "a ledger holding exactly (ε, δ + δ′) refuses the build: {r:?}");
}

/// Public queries: rejected outside `[0, R]` or non-finite by default; `QueryPolicy::Clamp`
/// answers for the clamped query (NaN still rejected); scratch and output sizes checked.
#[test]
fn public_query_policy() {
    let att = build_tiny(&tiny_params()).unwrap();
    let mut out = [0.0; 2];
    assert!(att.query(&[0.5, 1.0], &mut out).is_ok());
    let r = att.query(&[0.5, f64::NAN], &mut out);
    assert!(matches!(r, Err(Error::NonFinite { arg: "y", index: 1 })), "{r:?}");
    let r = att.query(&[f64::INFINITY, 0.5], &mut out);
    assert!(matches!(r, Err(Error::NonFinite { arg: "y", index: 0 })), "{r:?}");
    for bad in [[1.5, 0.5], [0.5, -0.1], [-1e-300, 0.0]] {
        let r = att.query(&bad, &mut out);
        assert!(matches!(r, Err(Error::OutOfRange { .. })), "{bad:?}: {r:?}");
    }
    let r = att.query(&[0.5, 0.5, 0.5], &mut out);
    assert!(matches!(r, Err(Error::ShapeMismatch { arg: "y", .. })), "{r:?}");
    let r = att.query(&[0.5, 0.5], &mut [0.0; 3]);
    assert!(matches!(r, Err(Error::ShapeMismatch { arg: "out", .. })), "{r:?}");
    // Scratch: r + d + l = C(6, 4) + 2 + 1 = 18.
    assert_eq!(att.query_scratch_len(), 18);
    let mut scratch = vec![0.0; 17];
    let r = att.query_into(&[0.5, 0.5], &mut out, &mut scratch);
    assert!(matches!(r, Err(Error::ScratchTooSmall { needed: 18, got: 17 })), "{r:?}");

    // Clamp: the same structure (same stream) answers for the clamped point.
    let mut p = tiny_params();
    p.adaptive.tree.query_policy = QueryPolicy::Clamp;
    let clamp = build_tiny(&p).unwrap();
    let mut want = [0.0; 2];
    clamp.query(&[1.0, 0.0], &mut want).unwrap();
    for q in [[1.5, -0.2], [f64::INFINITY, f64::NEG_INFINITY]] {
        clamp.query(&q, &mut out).unwrap();
        assert_eq!(out, want, "clamped query {q:?}");
    }
    let r = clamp.query(&[f64::NAN, 0.5], &mut out);
    assert!(matches!(r, Err(Error::NonFinite { .. })), "{r:?}");

    // The single structures and the sketch follow the same policy.
    let (k, v) = tiny();
    let keys = MatRef::from_row_major(&k, 4, 2).unwrap();
    let s = DpTreeSoftmax::new_keyed(keys, &[1.0; 4], &paper_tree(), draw(10, 0), None).unwrap();
    assert!(matches!(s.query(&[2.0, 0.0]), Err(Error::OutOfRange { .. })));
    let r = s.query_into(&[0.5, 0.5], &mut vec![0.0; s.query_scratch_len() - 1]);
    assert!(matches!(r, Err(Error::ScratchTooSmall { .. })), "{r:?}");
    let sk = MomentSketch::new_keyed(
        keys,
        MatRef::from_row_major(&v, 4, 2).unwrap(),
        &sketch_params(1e-6),
        draw(10, 1),
        None,
    )
    .unwrap();
    assert!(matches!(sk.query(&[0.5, 1.01], &mut out), Err(Error::OutOfRange { .. })));
    assert!(matches!(sk.query(&[f64::NAN, 0.0], &mut out), Err(Error::NonFinite { .. })));
    let r = sk.query_into(&[0.5, 0.5], &mut out, &mut vec![0.0; sk.query_scratch_len() - 1]);
    assert!(matches!(r, Err(Error::ScratchTooSmall { .. })), "{r:?}");
}

/// Private data: the default `Clamp` accepts NaN/±∞ and out-of-range rows and releases
/// exactly what the clamped data would give (NaN → 0); `DomainPolicy::Reject` refuses them
/// with `DomainViolation` (an opt-in that is not DP).
#[test]
fn private_domain_policy() {
    let (n, d) = (4, 2);
    let bad_k = [f64::NAN, 0.8, f64::INFINITY, 0.3, -3.0, 0.2, 1.0, 7.0];
    let bad_v = [0.5, f64::NEG_INFINITY, 1.0, f64::NAN, -1.0, 9.0, 0.0, 1.0];
    let clamped_k = [0.0, 0.8, 1.0, 0.3, 0.0, 0.2, 1.0, 1.0];
    let clamped_v = [0.5, -1.0, 1.0, 0.0, -1.0, 1.0, 0.0, 1.0];
    let m = |x| mat(x, n, d);
    let rep = check_domain(m(&bad_k), m(&bad_v), 1.0, 1.0);
    assert_eq!((rep.keys_outside, rep.values_outside, rep.non_finite), (2, 1, 4));

    let p = tiny_params();
    let got =
        SoftmaxTreeCrossAttention::new_keyed(m(&bad_k), m(&bad_v), &p, draw(12, 0), None).unwrap();
    let want =
        SoftmaxTreeCrossAttention::new_keyed(m(&clamped_k), m(&clamped_v), &p, draw(12, 0), None)
            .unwrap();
    assert_eq!(got, want, "Clamp must release exactly the clamped data's structures");
    let mut out = [0.0; 2];
    got.query(&[0.5, 0.5], &mut out).unwrap();
    assert!(out.iter().all(|o| o.is_finite() && o.abs() <= 1.0), "{out:?}");

    let w = [f64::NAN, f64::INFINITY, -5.0, 0.5];
    let t = paper_tree();
    let a = DpTreeSoftmax::new_keyed(m(&bad_k), &w, &t, draw(12, 1), None).unwrap();
    let b = DpTreeSoftmax::new_keyed(m(&clamped_k), &[0.0, 1.0, -1.0, 0.5], &t, draw(12, 1), None)
        .unwrap();
    assert_eq!(a, b, "DpTreeSoftmax clamps private rows");
    assert!(a.query(&[0.5, 0.5]).unwrap().is_finite());

    let sp = sketch_params(1e-6);
    let a = MomentSketch::new_keyed(m(&bad_k), m(&bad_v), &sp, draw(12, 2), None).unwrap();
    let b = MomentSketch::new_keyed(m(&clamped_k), m(&clamped_v), &sp, draw(12, 2), None).unwrap();
    assert_eq!(a.sketch(), b.sketch(), "MomentSketch clamps private rows");
    // The non-private constructors refuse non-finite data instead.
    let r = MomentSketch::non_private_exact(m(&bad_k), m(&clamped_v), &sp);
    assert!(matches!(r, Err(Error::PrivateNonFinite { arg: "keys", .. })), "{r:?}");

    let mut reject = tiny_params();
    reject.domain_policy = DomainPolicy::Reject;
    assert!(build_tiny(&reject).is_ok(), "in-domain data passes Reject");
    let one_bad_key = [0.1, 0.8, 0.6, 0.3, 0.9, 1.2, 1.0, 0.0];
    let (_, tv) = tiny();
    for (k, v) in [(&one_bad_key[..], &tv[..]), (&clamped_k, &bad_v), (&bad_k, &tv)] {
        let r = SoftmaxTreeCrossAttention::new_keyed(m(k), m(v), &reject, draw(12, 3), None);
        assert!(matches!(r, Err(Error::DomainViolation { .. })), "{r:?}");
        // The count of offending entries is private: in the detail, equal to check_domain's.
        let want = check_domain(
            m(k),
            m(v),
            reject.adaptive.tree.radius,
            reject.adaptive.tree.weight_bound,
        );
        let want = (want.keys_outside + want.values_outside + want.non_finite) as u64;
        let got = r.err().and_then(|e| e.private_detail()).and_then(|d| d.count());
        assert_eq!(got, Some(want));
    }
    let mut ledger: Ledger =
        Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(10.0, 1e-3).unwrap());
    let r = SoftmaxTreeCrossAttention::new_keyed(
        m(&one_bad_key),
        m(&tv),
        &reject,
        draw(12, 4),
        Some(&mut ledger),
    );
    assert!(matches!(r, Err(Error::DomainViolation { .. })), "{r:?}");
    assert_eq!(ledger.charges(), 0, "a refused build charges nothing");
}

/// Review finding: a configuration whose composed whole-release `(ε, δ)` is vacuous (PerEntry,
/// `d = 4`, `δ = δ′ = 0.5`: about `5·(δ/3 + δ′/4) ≈ 1.46 ≥ 1`) is refused from public
/// parameters alone, before any data is read, and nothing is charged.
#[test]
fn vacuous_composed_guarantee_is_refused_before_building() {
    let mut t = paper_tree();
    t.budget = PrivacyBudget::new(1.0, 0.5).unwrap();
    t.delta_prime = 0.5;
    let p = SoftmaxTreeCrossAttentionParams::faithful(t, Copies::Fixed(1));
    let keys: Vec<f64> = (0..32).map(|i| f64::from(i % 7) / 7.0).collect();
    let mut ledger: Ledger =
        Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(100.0, 0.999).unwrap());
    let r = SoftmaxTreeCrossAttention::new_keyed(
        mat(&keys, 8, 4),
        mat(&keys, 8, 4),
        &p,
        draw(21, 0),
        Some(&mut ledger),
    );
    assert!(matches!(r, Err(Error::Infeasible { .. })), "{r:?}");
    assert_eq!(ledger.charges(), 0);
}

// ---------------------------------------------------------------------------------------
// Sessions: the construction is the release

/// The default API: every structure of paper 001 built from a [`Session`] takes one fresh
/// stream id and charges the session's ledger what it achieves (DPTree and DPTreeDistance:
/// their `(ε, δ)`; the others: their `achieved_privacy`; the Gaussian sketch: its `(ε, δ)`).
/// Two builds never share a stream id, so the same data gives independent noise.
#[test]
fn sessions_charge_every_build_on_a_fresh_stream() {
    use dpattn::session::Session;
    use dpattn::softmax_tree::{
        DistanceParams, DpTree, DpTreeDistance, DpTreeHighDim, HighDimParams, PRIVACY_UNIT, STREAMS,
    };
    assert_eq!((PRIVACY_UNIT, STREAMS), (PrivacyUnit::TOKEN, 1));
    assert_eq!(dpattn::moment_sketch::PRIVACY_UNIT, PrivacyUnit::TOKEN);
    assert_eq!(dpattn::softmax_tree_cross_attention::PRIVACY_UNIT, PrivacyUnit::TOKEN);
    let (n, d) = (6, 2);
    let mut rng = Rng(0x5E55);
    let keys = random_matrix(&mut rng, n, d, 0.0, 1.0);
    let vals = random_matrix(&mut rng, n, d, -1.0, 1.0);
    let w: Vec<f64> = vals.iter().step_by(d).copied().collect();
    let x: Vec<f64> = keys.iter().step_by(d).copied().collect();
    let (k, v) = (mat(&keys, n, d), mat(&vals, n, d));
    let ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(50.0, 0.5).unwrap());
    let mut session = Session::new(ledger).unwrap();
    let first = session.next_stream();
    let mut want = (0.0, 0.0);
    let mut add = |b: PrivacyBudget| {
        want.0 += b.epsilon().get();
        want.1 += b.delta().get();
    };

    let tb = PrivacyBudget::new(0.5, 1e-6).unwrap();
    let t1 = DpTree::new(&w, 1.0, tb, &mut session).unwrap();
    let t2 = DpTree::new(&w, 1.0, tb, &mut session).unwrap();
    add(tb);
    add(tb);
    // Independent noise: the same data on two streams gives different nodes.
    assert!((2..2 * t1.n_leaves()).any(|v| t1.node(v) != t2.node(v)));
    let dp = DistanceParams {
        p: 2,
        range: 1.0,
        weight_bound: 1.0,
        budget: PrivacyBudget::new(0.5, 1e-4).unwrap(),
        noise_mode: NoiseMode::Exact,
    };
    DpTreeDistance::new(&x, &w, &dp, &mut session).unwrap();
    add(dp.budget);
    let hp = HighDimParams {
        p: 1,
        range: 1.0,
        weight_bound: 1.0,
        budget: PrivacyBudget::new(0.5, 1e-6).unwrap(),
        delta_prime: 1e-6,
        c: 0.09,
        noise_mode: NoiseMode::Exact,
    };
    add(DpTreeHighDim::new(k, &w, &hp, &mut session).unwrap().achieved_privacy().unwrap());
    add(DpTreeSoftmax::new(k, &w, &paper_tree(), &mut session)
        .unwrap()
        .achieved_privacy()
        .unwrap());
    let mut ad = AdaptiveParams::new(paper_tree());
    ad.copies = Copies::Fixed(3);
    add(DpTreeSoftmaxAdaptive::new(k, &w, &ad, &mut session).unwrap().achieved_privacy().unwrap());
    let mut cp = SoftmaxTreeCrossAttentionParams::new(paper_tree());
    cp.adaptive.copies = Copies::Fixed(1);
    add(SoftmaxTreeCrossAttention::new(k, v, &cp, &mut session)
        .unwrap()
        .achieved_privacy()
        .unwrap());
    let sp = sketch_params(1e-6);
    MomentSketch::new(k, v, &sp, &mut session).unwrap();
    add(sp.budget);

    assert_eq!(session.next_stream(), first + 8);
    assert_eq!((session.ledger().charges(), session.ledger().unsafe_float_charges()), (8, 0));
    let Amount::Approx { epsilon, delta } = session.ledger().spent() else { panic!("approx") };
    assert_rel(epsilon, want.0, 1e-12, "ε spent");
    assert_rel(delta, want.1, 1e-12, "δ spent");

    // A zCDP ledger cannot take the trees' (ε, δ > 0): refused, nothing returned, the stream
    // id consumed; the Gaussian sketch is charged its ρ.
    let mut zs =
        Session::new(Ledger::new_zcdp(PrivacyUnit::TOKEN, Rho::new(1.0).unwrap())).unwrap();
    let z0 = zs.next_stream();
    let r = DpTree::new(&w, 1.0, tb, &mut zs);
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
    let r = SoftmaxTreeCrossAttention::new(k, v, &cp, &mut zs);
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
    assert_eq!((zs.ledger().charges(), zs.next_stream()), (0, z0 + 2));
    let s = MomentSketch::new(k, v, &sp, &mut zs).unwrap();
    assert_eq!(zs.ledger().spent(), Amount::Zcdp { rho: s.rho().unwrap() });

    // A ledger kept for another unit refuses every build.
    let mut ps = Session::new(Ledger::new_approx(
        PrivacyUnit::Prompt,
        PrivacyBudget::new(50.0, 0.5).unwrap(),
    ))
    .unwrap();
    let r = DpTreeSoftmax::new(k, &w, &paper_tree(), &mut ps);
    assert!(matches!(r, Err(Error::UnitMismatch { .. })), "{r:?}");
    let r = MomentSketch::new(k, v, &sp, &mut ps);
    assert!(matches!(r, Err(Error::UnitMismatch { .. })), "{r:?}");
    assert_eq!(ps.ledger().charges(), 0);
}
