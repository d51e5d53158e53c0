//! Privacy accounting: composition theorems, zCDP conversions and the budget ledger.
//!
//! Every expected value names its source. Reference numbers were computed independently
//! of this crate, by hand from the stated formula with 40-digit arithmetic (mpmath); the
//! intermediate values are written out so each can be rechecked with a calculator. The
//! CKS20 optimum was found by golden-section search on the objective itself (not on its
//! derivative, which is what the crate uses).

use dpattn::accounting::composition::{
    Rho, advanced_composition, advanced_composition_step_epsilon, basic_composition,
    basic_composition_k, zcdp_compose, zcdp_from_pure, zcdp_gaussian, zcdp_rho_for,
    zcdp_rho_for_bs16, zcdp_to_epsilon, zcdp_to_epsilon_bs16,
};
use dpattn::accounting::ledger::{Amount, Charge, Ledger};
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::accounting::rdp::{DEFAULT_ORDERS, RdpCurve};
use dpattn::{Delta, Epsilon, Error, PrivacyBudget, Sensitivity};

fn pb(e: f64, d: f64) -> PrivacyBudget {
    PrivacyBudget::new(e, d).unwrap()
}
fn eps(e: f64) -> Epsilon {
    Epsilon::new(e).unwrap()
}
fn delta(d: f64) -> Delta {
    Delta::new(d).unwrap()
}
fn rho(r: f64) -> Rho {
    Rho::new(r).unwrap()
}

/// `got` is an upper bound on `exact` (allowing for `exact` itself being the nearest double
/// to a real number) and within `rel` of it.
fn assert_upper(got: f64, exact: f64, rel: f64) {
    assert!(got >= exact.next_down(), "{got} is below the exact {exact}");
    assert!(got <= exact + rel * exact.abs(), "{got} is not within {rel} of {exact}");
}

/// `got` is a lower bound on `exact` and within `rel` of it.
fn assert_lower(got: f64, exact: f64, rel: f64) {
    assert!(got <= exact.next_up(), "{got} is above the exact {exact}");
    assert!(got >= exact - rel * exact.abs(), "{got} is not within {rel} of {exact}");
}

/// A small deterministic generator for the property tests (xorshift64*).
struct Gen(u64);
impl Gen {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Log-uniform on `[lo, hi]`.
    fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + self.unit() * (hi.ln() - lo.ln())).exp()
    }
}

// ---------------------------------------------------------------------- basic composition

#[test]
fn basic_composition_adds_epsilons_and_deltas() {
    // Dwork & Roth 2014, Thm 3.16: (Σεᵢ, Σδᵢ). Dyadic inputs: the sums are exact.
    let t = basic_composition(&[pb(0.5, 0.0), pb(0.25, 2f64.powi(-20)), pb(0.125, 2f64.powi(-21))])
        .unwrap();
    assert_eq!(t.epsilon().get(), 0.875);
    assert_eq!(t.delta().get(), 3.0 * 2f64.powi(-21));
    // k-fold: (kε, kδ).
    let t = basic_composition_k(pb(0.125, 2f64.powi(-30)), 8).unwrap();
    assert_eq!((t.epsilon().get(), t.delta().get()), (1.0, 2f64.powi(-27)));
    // Inexact sums are rounded up: 0.1 + 0.2 is above the double 0.30000000000000004's
    // predecessor, and the result is never below the real sum of the two doubles.
    let t = basic_composition(&[pb(0.1, 0.0), pb(0.2, 0.0)]).unwrap();
    assert!(t.epsilon().get() >= 0.1 + 0.2);
}

#[test]
fn basic_composition_edges() {
    assert!(matches!(basic_composition(&[]), Err(Error::OutOfRange { .. })));
    assert!(matches!(basic_composition_k(pb(1.0, 0.0), 0), Err(Error::OutOfRange { .. })));
    // Overflow of Σε and Σδ ≥ 1 are infeasible, never infinite or NaN.
    assert!(matches!(
        basic_composition_k(pb(f64::MAX, 0.0), 2),
        Err(Error::Infeasible { lhs, .. }) if lhs == f64::INFINITY
    ));
    assert!(matches!(
        basic_composition(&[pb(1.0, 0.6), pb(1.0, 0.4)]),
        Err(Error::Infeasible { condition: "sum of deltas < 1", .. })
    ));
    // Huge k with a tiny ε stays finite; k is rounded up when it is not a double.
    let t = basic_composition_k(pb(1e-300, 0.0), u64::MAX).unwrap();
    assert!(t.epsilon().get() >= 1.8446744073709552e-281);
}

// ------------------------------------------------------------------- advanced composition

#[test]
fn advanced_composition_matches_dwork_roth_3_20() {
    // Dwork & Roth 2014, Thm 3.20: ε' = √(2k ln(1/δ'))·ε + k·ε·(e^ε − 1), δ_total = kδ + δ'.
    //
    // ε = 0.1, k = 100, δ' = 1e-6:
    //   ln(1/δ') = 13.815510557964274…, 2k·ln(1/δ') = 2763.1021115928548…,
    //   √… = 52.565217697569320…, × 0.1 = 5.2565217697569320,
    //   e^0.1 − 1 = 0.10517091807564762…, k·ε·(e^ε − 1) = 1.0517091807564762,
    //   ε' = 6.3082309505134082.
    let t = advanced_composition(pb(0.1, 1e-8), 100, delta(1e-6)).unwrap();
    assert_upper(t.epsilon().get(), 6.308_230_950_513_408, 1e-14);
    // δ_total = 100·1e-8 + 1e-6 = 2e-6.
    assert_upper(t.delta().get(), 2e-6, 1e-15);

    // ε = 0.01, k = 10 000, δ' = 1e-5:
    //   ln(1/δ') = 11.512925464970229…, 2k·ln(1/δ') = 230258.50929940457…,
    //   √… · 0.01 = 4.7985259121880812, k·ε·(e^ε − 1) = 100 · 0.010050167084168058
    //   = 1.0050167084168058, ε' = 5.8035426206048869.
    let t = advanced_composition(pb(0.01, 0.0), 10_000, delta(1e-5)).unwrap();
    assert_upper(t.epsilon().get(), 5.803_542_620_604_887, 1e-14);
    assert_eq!(t.delta().get(), 1e-5);
}

#[test]
fn advanced_composition_is_monotone() {
    let s = delta(1e-6);
    let at = |e: f64, k: u64, d: Delta| advanced_composition(pb(e, 0.0), k, d).unwrap();
    let mut g = Gen(0x1234_5678_9abc_def1);
    for _ in 0..300 {
        let e = g.log_uniform(1e-6, 2.0);
        let k = 1 + (g.log_uniform(1.0, 1e9) as u64);
        let base = at(e, k, s).epsilon().get();
        // Increasing in ε and in k, decreasing in δ'.
        assert!(at(e * 1.001, k, s).epsilon().get() >= base);
        assert!(at(e, k + 1, s).epsilon().get() >= base);
        assert!(at(e, k, delta(1e-3)).epsilon().get() <= base);
    }
}

#[test]
fn advanced_composition_edges() {
    // δ' must be in (0, 1): 0 is refused here, and 1 cannot even be built as a Delta.
    assert!(matches!(
        advanced_composition(pb(0.1, 0.0), 10, Delta::ZERO),
        Err(Error::OutOfRange { name: "slack delta'", .. })
    ));
    assert!(Delta::new(1.0).is_err() && Delta::new(-0.1).is_err());
    assert!(matches!(
        advanced_composition(pb(0.1, 0.0), 0, delta(1e-6)),
        Err(Error::OutOfRange { .. })
    ));
    // k·δ + δ' ≥ 1 is infeasible.
    assert!(matches!(
        advanced_composition(pb(0.1, 0.01), 100, delta(1e-6)),
        Err(Error::Infeasible { condition: "k * delta + delta' < 1", .. })
    ));
    // k = 1: the formula itself, √(2 ln(1/δ'))·ε + ε(e^ε − 1); with δ' = e⁻² it is
    // 2ε + ε(e^ε − 1) = 0.2 + 0.1·0.10517091807564762 = 0.21051709180756476.
    let t = advanced_composition(pb(0.1, 0.0), 1, delta((-2f64).exp())).unwrap();
    assert_upper(t.epsilon().get(), 0.210_517_091_807_564_76, 1e-14);
    // ε → 0: the √k term dominates and stays positive and finite.
    let t = advanced_composition(pb(1e-300, 0.0), 1 << 40, delta(1e-9)).unwrap();
    let root = (2.0 * 2f64.powi(40) * 1e9f64.ln()).sqrt() * 1e-300;
    assert_upper(t.epsilon().get(), root, 1e-12);
    // Very large ε: e^ε overflows; reported as infeasible, never as inf or NaN.
    assert!(matches!(
        advanced_composition(pb(800.0, 0.0), 1, delta(0.5)),
        Err(Error::Infeasible { .. })
    ));
    // Huge k with a sizeable ε overflows too.
    assert!(advanced_composition(pb(700.0, 0.0), u64::MAX, delta(0.5)).is_err());
}

#[test]
fn step_epsilon_round_trips_and_is_maximal() {
    let mut g = Gen(42);
    for _ in 0..200 {
        let total = g.log_uniform(1e-3, 20.0);
        let k = 1 + (g.log_uniform(1.0, 1e7) as u64);
        let slack = delta(g.log_uniform(1e-12, 0.1));
        let step = advanced_composition_step_epsilon(eps(total), k, slack).unwrap().get();
        // Never worse than basic composition (ε_total / k, rounded down).
        assert!(step >= total / k as f64 * (1.0 - 1e-15));
        let adv = advanced_composition(pb(step, 0.0), k, slack).unwrap().epsilon().get();
        let basic = step * k as f64;
        if adv <= total {
            // The advanced answer won (or tied): maximal among doubles.
            let next = advanced_composition(pb(step.next_up(), 0.0), k, slack).unwrap();
            assert!(next.epsilon().get() > total || step.next_up() * k as f64 <= total);
        } else {
            // The basic answer won: k · step ≤ ε_total (up to the rounding of k·step).
            assert!(basic <= total * (1.0 + 1e-15));
        }
    }
}

#[test]
fn step_epsilon_edges() {
    let s = delta(1e-6);
    // k = 1 with a large slack: the theorem allows a per-step ε above a small total
    // (√(2 ln(1/0.9)) = 0.459 < 1, so 0.459x + x(eˣ − 1) ≤ 0.01 at x = 0.020829366350801301).
    let one = advanced_composition_step_epsilon(eps(0.01), 1, delta(0.9)).unwrap().get();
    assert_lower(one, 0.020_829_366_350_801_3, 1e-14);
    // k = 1 with a small slack: basic composition (ε itself) is better and is returned.
    assert_eq!(advanced_composition_step_epsilon(eps(1.0), 1, s).unwrap().get(), 1.0);
    // Huge k: a tiny but positive per-step ε; composing it back stays within the total.
    let k = 1u64 << 60;
    let step = advanced_composition_step_epsilon(eps(1.0), k, s).unwrap();
    let back = advanced_composition(PrivacyBudget::from_parts(step, Delta::ZERO), k, s).unwrap();
    assert!(back.epsilon().get() <= 1.0 && step.get() > 1.0 / k as f64);
    // Errors: k = 0, δ' = 0, a total too small for any positive double.
    assert!(advanced_composition_step_epsilon(eps(1.0), 0, s).is_err());
    assert!(advanced_composition_step_epsilon(eps(1.0), 10, Delta::ZERO).is_err());
    assert!(matches!(
        advanced_composition_step_epsilon(eps(f64::from_bits(1)), u64::MAX, s),
        Err(Error::Infeasible { .. })
    ));
}

// ----------------------------------------------------------------------------------- zCDP

#[test]
fn zcdp_mechanisms_and_composition() {
    // Bun & Steinke 2016, Prop 1.6: Gaussian ρ = Δ²/(2σ²). Δ = 1, σ = 2 → 1/8; Δ = 3,
    // σ = 1.5 → 9/4.5 = 2.
    assert_eq!(zcdp_gaussian(Sensitivity::new(1.0).unwrap(), 2.0).unwrap().get(), 0.125);
    assert_eq!(zcdp_gaussian(Sensitivity::new(3.0).unwrap(), 1.5).unwrap().get(), 2.0);
    // σ = 10: ρ = 1/200 = 0.005, rounded up (0.005 is not a double).
    assert_upper(zcdp_gaussian(Sensitivity::new(1.0).unwrap(), 10.0).unwrap().get(), 0.005, 1e-15);
    assert!(zcdp_gaussian(Sensitivity::new(1.0).unwrap(), f64::NAN).is_err());
    assert!(matches!(
        zcdp_gaussian(Sensitivity::new(1e300).unwrap(), 1e-300),
        Err(Error::Infeasible { .. })
    ));
    // Bun & Steinke 2016, Prop 1.4: ε-DP ⇒ (ε²/2)-zCDP.
    assert_eq!(zcdp_from_pure(eps(1.0)).unwrap().get(), 0.5);
    assert_eq!(zcdp_from_pure(eps(3.0)).unwrap().get(), 4.5);
    assert!(matches!(zcdp_from_pure(eps(1e200)), Err(Error::Infeasible { .. })));
    // Bun & Steinke 2016, Lemma 1.7: ρ adds.
    assert_eq!(zcdp_compose(&[rho(0.125), rho(0.5), rho(2.0)]).unwrap().get(), 2.625);
    assert!(zcdp_compose(&[]).is_err());
    assert!(zcdp_compose(&[rho(f64::MAX), rho(f64::MAX)]).is_err());
}

#[test]
fn zcdp_to_epsilon_matches_the_papers() {
    // Bun & Steinke 2016, Prop 1.3: ρ + 2√(ρ ln(1/δ)). ρ = 0.5, δ = 1e-5:
    //   ln(1/δ) = 11.512925464970229, ρ·ln(1/δ) = 5.7564627324851145,
    //   2√… = 4.7985259121880812, ε = 5.2985259121880812.
    let bs = zcdp_to_epsilon_bs16(rho(0.5), delta(1e-5)).unwrap();
    assert_upper(bs, 5.298_525_912_188_081, 1e-14);
    // Canonne, Kamath, Steinke 2020, Cor 13: inf over α of
    // αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α). Golden-section search on this objective
    // gives 4.7283869849433139 at α = 5.43185; at α = 5 it is
    // 2.5 + (11.512925 − 1.609438)/4 + ln 0.8 = 4.7527283368198222.
    let tight = zcdp_to_epsilon(rho(0.5), delta(1e-5)).unwrap();
    assert_upper(tight, 4.728_386_984_943_314, 1e-12);
    // ρ = 0.1, δ = 1e-6: 2.1419389283854737 at α = 11.658.
    assert_upper(zcdp_to_epsilon(rho(0.1), delta(1e-6)).unwrap(), 2.141_938_928_385_474, 1e-12);
}

#[test]
fn zcdp_conversion_is_monotone_and_below_bun_steinke() {
    let mut g = Gen(7);
    for _ in 0..300 {
        let r = g.log_uniform(1e-8, 1e3);
        let d = g.log_uniform(1e-15, 0.5);
        let e = zcdp_to_epsilon(rho(r), delta(d)).unwrap();
        assert!(e <= zcdp_to_epsilon_bs16(rho(r), delta(d)).unwrap());
        // Increasing in ρ, decreasing in δ (up to the last-ulp noise of the optimiser).
        let tol = 1e-12 * e.max(1e-300);
        assert!(zcdp_to_epsilon(rho(r * 1.01), delta(d)).unwrap() >= e - tol);
        assert!(zcdp_to_epsilon(rho(r), delta(d * 0.5)).unwrap() >= e - tol);
    }
}

#[test]
fn zcdp_inverse_round_trips() {
    // Closed form of Prop 1.3's inverse: ρ = (√(ln(1/δ) + ε) − √ln(1/δ))². ε = 1, δ = 1e-5:
    //   √12.512925464970229 = 3.5373613929…, √11.512925464970229 = 3.3930701…,
    //   ρ = 0.020819938339535461.
    let bs = zcdp_rho_for_bs16(pb(1.0, 1e-5)).unwrap().get();
    assert_lower(bs, 0.020_819_938_339_535_461, 1e-14);
    // CKS20 Cor 13's inverse (bisection on the golden-section optimum above):
    // ρ = 0.030556595197639566 — 47 % more ρ for the same (ε, δ).
    let tight = zcdp_rho_for(pb(1.0, 1e-5)).unwrap().get();
    assert_lower(tight, 0.030_556_595_197_639_566, 1e-10);
    let mut g = Gen(99);
    for _ in 0..100 {
        let e = g.log_uniform(1e-3, 50.0);
        let d = g.log_uniform(1e-12, 0.1);
        let r = zcdp_rho_for(pb(e, d)).unwrap();
        assert!(zcdp_to_epsilon(r, delta(d)).unwrap() <= e);
        assert!(zcdp_to_epsilon(rho(r.get().next_up()), delta(d)).unwrap() > e);
        assert!(r.get() >= zcdp_rho_for_bs16(pb(e, d)).unwrap().get());
        let rb = zcdp_rho_for_bs16(pb(e, d)).unwrap();
        assert!(zcdp_to_epsilon_bs16(rb, delta(d)).unwrap() <= e * (1.0 + 1e-14));
    }
}

#[test]
fn zcdp_edges() {
    // δ = 0 has no zCDP → (ε, δ) conversion.
    assert!(zcdp_to_epsilon(rho(0.5), Delta::ZERO).is_err());
    assert!(zcdp_to_epsilon_bs16(rho(0.5), Delta::ZERO).is_err());
    assert!(zcdp_rho_for(pb(1.0, 0.0)).is_err());
    // δ → 0: ln(1/δ) grows to 744 at the smallest subnormal; still finite.
    let e = zcdp_to_epsilon(rho(0.5), delta(f64::from_bits(1))).unwrap();
    // Prop 1.3: 0.5 + 2√(0.5 · 744.44) = 39.087…; CKS20 is a little below.
    assert!(e > 35.0 && e < 39.1);
    // ρ → 0: the mechanism is (0, δ)-DP (TV distance below δ).
    assert_eq!(zcdp_to_epsilon(rho(1e-14), delta(1e-5)).unwrap(), 0.0);
    // Huge ρ: finite while it fits in f64.
    assert!(zcdp_to_epsilon(rho(1e300), delta(1e-5)).unwrap() >= 1e300);
    // ε → 0 in the inverse: a tiny but positive ρ.
    let r = zcdp_rho_for(pb(1e-10, 1e-5)).unwrap();
    assert!(r.get() > 0.0 && zcdp_to_epsilon(r, delta(1e-5)).unwrap() <= 1e-10);
}

// --------------------------------------------------------------------------------- ledger

#[test]
fn refused_charges_leave_the_ledger_unchanged() {
    let mut ledgers = [
        Ledger::new_approx(PrivacyUnit::TOKEN, pb(1.0, 1e-6)),
        Ledger::new_zcdp(PrivacyUnit::TOKEN, rho(0.5)),
        Ledger::new_rdp(PrivacyUnit::TOKEN, eps(3.0), delta(1e-6)).unwrap(),
    ];
    for l in &mut ledgers {
        l.try_charge(PrivacyUnit::TOKEN, Charge::Pure(eps(0.5))).unwrap();
        let before = l.clone();
        for bad in [
            Charge::Pure(eps(10.0)),
            Charge::Approx(pb(0.1, 0.5)),
            Charge::Rdp(RdpCurve::from_values(DEFAULT_ORDERS, [1e3; 156]).unwrap()),
        ] {
            assert!(l.try_charge(PrivacyUnit::TOKEN, bad).is_err());
            assert_eq!(*l, before);
            assert_eq!((l.spent(), l.charges()), (before.spent(), 1));
        }
    }
}

#[test]
fn exact_fill_succeeds_and_the_next_charge_is_refused() {
    // Approximate DP, basic composition: 4 × (1/4, 2⁻²²) fills (1, 2⁻²⁰) exactly.
    let mut l = Ledger::new_approx(PrivacyUnit::TOKEN, pb(1.0, 2f64.powi(-20)));
    for _ in 0..4 {
        l.try_charge(PrivacyUnit::TOKEN, Charge::Approx(pb(0.25, 2f64.powi(-22)))).unwrap();
    }
    assert_eq!(l.remaining(), Amount::Approx { epsilon: 0.0, delta: 0.0 });
    assert!(matches!(
        l.try_charge(PrivacyUnit::TOKEN, Charge::Pure(eps(f64::from_bits(1)))),
        Err(Error::Infeasible { condition: "spent epsilon + charge epsilon <= total epsilon", .. })
    ));
    // zCDP: 8 Gaussian mechanisms with Δ = 1, σ = 2 (ρ = 1/8, Bun–Steinke Prop 1.6) fill ρ = 1.
    let g = zcdp_gaussian(Sensitivity::new(1.0).unwrap(), 2.0).unwrap();
    let mut l = Ledger::new_zcdp(PrivacyUnit::TOKEN, rho(1.0));
    for _ in 0..8 {
        l.try_charge(PrivacyUnit::TOKEN, Charge::Zcdp(g)).unwrap();
    }
    assert_eq!(l.spent(), Amount::Zcdp { rho: 1.0 });
    assert!(l.try_charge(PrivacyUnit::TOKEN, Charge::Zcdp(g)).is_err());
    assert_eq!(l.charges(), 8);
    // Ten charges of the double 0.1 sum to 1.0000000000000000555 > 1: the tenth is refused
    // (documented; the safe answer).
    let mut l = Ledger::new_approx(PrivacyUnit::TOKEN, pb(1.0, 0.0));
    for _ in 0..9 {
        l.try_charge(PrivacyUnit::TOKEN, Charge::Pure(eps(0.1))).unwrap();
    }
    assert!(l.try_charge(PrivacyUnit::TOKEN, Charge::Pure(eps(0.1))).is_err());
}

#[test]
fn spending_is_monotone() {
    let mut g = Gen(2024);
    let mut ledgers = [
        Ledger::new_approx(PrivacyUnit::TOKEN, pb(5.0, 1e-5)),
        Ledger::new_zcdp(PrivacyUnit::TOKEN, rho(2.0)),
        Ledger::new_rdp(PrivacyUnit::TOKEN, eps(8.0), delta(1e-6)).unwrap(),
    ];
    for l in &mut ledgers {
        let mut last_spent = l.spent();
        let mut last_left = l.remaining();
        let mut accepted = 0;
        for _ in 0..200 {
            let e = g.log_uniform(1e-3, 1.0);
            let charge = match l.total() {
                Amount::Approx { .. } => Charge::Approx(pb(e, g.log_uniform(1e-9, 1e-6))),
                Amount::Zcdp { .. } => Charge::Zcdp(rho(e * e / 4.0)),
                Amount::Rdp { .. } => {
                    if g.unit() < 0.5 {
                        Charge::Zcdp(rho(e * e / 4.0))
                    } else {
                        Charge::Pure(eps(e))
                    }
                }
            };
            if l.try_charge(PrivacyUnit::TOKEN, charge).is_ok() {
                accepted += 1;
            }
            let (s, r) = (l.spent(), l.remaining());
            let (s1, s0, r1, r0) = match (s, last_spent, r, last_left) {
                (
                    Amount::Approx { epsilon: a, delta: b },
                    Amount::Approx { epsilon: c, delta: d },
                    Amount::Approx { epsilon: e, delta: f },
                    Amount::Approx { epsilon: h, delta: i },
                ) => {
                    assert!(b >= d && f <= i);
                    (a, c, e, h)
                }
                (
                    Amount::Zcdp { rho: a },
                    Amount::Zcdp { rho: c },
                    Amount::Zcdp { rho: e },
                    Amount::Zcdp { rho: h },
                ) => (a, c, e, h),
                (
                    Amount::Rdp { epsilon: a, .. },
                    Amount::Rdp { epsilon: c, .. },
                    Amount::Rdp { epsilon: e, .. },
                    Amount::Rdp { epsilon: h, .. },
                ) => (a, c, e, h),
                _ => panic!("a ledger changed kind"),
            };
            assert!(s1 >= s0 && r1 <= r0 && r1 >= 0.0);
            (last_spent, last_left) = (s, r);
        }
        assert!(accepted as u64 == l.charges() && accepted > 0 && accepted < 200);
    }
}

#[test]
fn worked_example_zcdp_ledger() {
    // Total: the ρ that Bun–Steinke Prop 1.3 maps to (ε, δ) = (1, 1e-5):
    // ρ = (√(ln 10⁵ + 1) − √ln 10⁵)² = 0.020819938339535461 (as above).
    // Charges: Gaussian mechanisms, Δ = 1, σ = 10: ρ = 1/200 = 0.005 each (Prop 1.6).
    // 0.020819938… / 0.005 = 4.16: four fit, the fifth does not.
    let total = zcdp_rho_for_bs16(pb(1.0, 1e-5)).unwrap();
    let mut l = Ledger::new_zcdp(PrivacyUnit::TOKEN, total);
    let g = zcdp_gaussian(Sensitivity::new(1.0).unwrap(), 10.0).unwrap();
    for _ in 0..4 {
        l.try_charge(PrivacyUnit::TOKEN, Charge::Zcdp(g)).unwrap();
    }
    let err = l.try_charge(PrivacyUnit::TOKEN, Charge::Zcdp(g)).unwrap_err();
    let Error::Infeasible { condition, lhs, rhs } = err else { panic!("{err:?}") };
    assert_eq!(condition, "spent rho + charge rho <= total rho");
    assert_upper(lhs, 0.025, 1e-15);
    assert_eq!(rhs, total.get());
    let Amount::Zcdp { rho: left } = l.remaining() else { panic!() };
    assert_lower(left, 0.020_819_938_339_535_461 - 0.02, 1e-12);
    // A pure ε = 0.04 charge is ρ = 0.0008 (Prop 1.4) and still fits (0.0208 ≤ 0.02082);
    // ε = 0.05 (ρ = 0.00125) would not.
    assert!(l.clone().try_charge(PrivacyUnit::TOKEN, Charge::Pure(eps(0.05))).is_err());
    l.try_charge(PrivacyUnit::TOKEN, Charge::Pure(eps(0.04))).unwrap();
    assert_eq!(l.charges(), 5);
    // What was spent converts back within the original (ε, δ) by Prop 1.3.
    let Amount::Zcdp { rho: spent } = l.spent() else { panic!() };
    assert!(zcdp_to_epsilon_bs16(rho(spent), delta(1e-5)).unwrap() <= 1.0);
}

#[test]
fn worked_example_rdp_ledger() {
    // Target (ε, δ) = (2, 1e-5); charges: Gaussian mechanisms with Δ = 1, σ = 5, i.e.
    // ε(α) = α/50 (ρ = 0.02). After k charges the curve is α·0.02k, converted with CKS20
    // Prop 12 over the default orders (dp_accounting's list): by hand,
    //   k = 5: ρ = 0.1, best order 10.6: 1.06 + (11.512925 − 2.360854)/9.6 + ln(1 − 1/10.6)
    //          = 1.9142498748403740 ≤ 2;
    //   k = 6: ρ = 0.12: 2.1172946857273734 > 2 (refused).
    let mut l = Ledger::new_rdp(PrivacyUnit::TOKEN, eps(2.0), delta(1e-5)).unwrap();
    let gaussian = Charge::Rdp(
        RdpCurve::from_values(DEFAULT_ORDERS, DEFAULT_ORDERS.map(|a| a / 50.0)).unwrap(),
    );
    for _ in 0..5 {
        l.try_charge(PrivacyUnit::TOKEN, gaussian).unwrap();
    }
    let Amount::Rdp { epsilon, delta: d } = l.spent() else { panic!() };
    assert_upper(epsilon, 1.914_249_874_840_374, 1e-9);
    assert_eq!(d, 1e-5);
    let err = l.try_charge(PrivacyUnit::TOKEN, gaussian).unwrap_err();
    assert!(
        matches!(err, Error::Infeasible { lhs, rhs: 2.0, .. } if (lhs - 2.117_294_685_727_373).abs() < 1e-9)
    );
    // The same Gaussian as a zCDP charge composes to the same curve.
    let mut z = Ledger::new_rdp(PrivacyUnit::TOKEN, eps(2.0), delta(1e-5)).unwrap();
    for _ in 0..5 {
        z.try_charge(PrivacyUnit::TOKEN, Charge::Zcdp(rho(0.02))).unwrap();
    }
    let Amount::Rdp { epsilon: ez, .. } = z.spent() else { panic!() };
    assert!((ez - epsilon).abs() < 1e-12);
}

#[test]
fn mixed_charges_follow_the_documented_rules() {
    // Pure ε into a zCDP ledger is ε²/2 (Bun & Steinke Prop 1.4); (ε, 0) counts as pure.
    let mut z = Ledger::new_zcdp(PrivacyUnit::TOKEN, rho(1.0));
    z.try_charge(PrivacyUnit::TOKEN, Charge::Pure(eps(1.0))).unwrap();
    z.try_charge(PrivacyUnit::TOKEN, Charge::Approx(pb(0.5, 0.0))).unwrap();
    assert_eq!(z.spent(), Amount::Zcdp { rho: 0.625 });
    // (ε, δ > 0) has no zCDP/RDP bound; zCDP and RDP charges have no δ-free (ε, δ).
    assert!(matches!(
        z.try_charge(PrivacyUnit::TOKEN, Charge::Approx(pb(0.1, 1e-9))),
        Err(Error::OutOfRange { name: "charge delta", value, .. }) if value == 1e-9
    ));
    let curve = RdpCurve::from_values(DEFAULT_ORDERS, [0.01; 156]).unwrap();
    assert!(matches!(
        z.try_charge(PrivacyUnit::TOKEN, Charge::Rdp(curve)),
        Err(Error::OutOfRange { name: "charge", .. })
    ));
    let mut a = Ledger::new_approx(PrivacyUnit::TOKEN, pb(1.0, 1e-6));
    assert!(matches!(
        a.try_charge(PrivacyUnit::TOKEN, Charge::Zcdp(rho(0.01))),
        Err(Error::OutOfRange { name: "charge", .. })
    ));
    assert!(matches!(
        a.try_charge(PrivacyUnit::TOKEN, Charge::Rdp(curve)),
        Err(Error::OutOfRange { name: "charge", .. })
    ));
    let mut r = Ledger::new_rdp(PrivacyUnit::TOKEN, eps(1.0), delta(1e-6)).unwrap();
    assert!(r.try_charge(PrivacyUnit::TOKEN, Charge::Approx(pb(0.1, 1e-9))).is_err());
    // Pure ε into an RDP ledger: min(ε, αε²/2) at every order (Mironov Prop 3 / BS16 1.4).
    r.try_charge(PrivacyUnit::TOKEN, Charge::Pure(eps(0.5))).unwrap();
    let c = r.rdp_curve().unwrap();
    for (&alpha, &v) in DEFAULT_ORDERS.iter().zip(c.rdp()) {
        assert_upper(v, (alpha * 0.125).min(0.5), 1e-15);
    }
    assert_eq!(r.charges(), 1);
}

#[test]
fn ledger_edges() {
    // δ = 0 targets make no sense for RDP; an approximate ledger with δ = 0 is a pure ledger.
    assert!(Ledger::new_rdp(PrivacyUnit::TOKEN, eps(1.0), Delta::ZERO).is_err());
    let mut p = Ledger::new_approx(PrivacyUnit::TOKEN, pb(1.0, 0.0));
    assert!(p.try_charge(PrivacyUnit::TOKEN, Charge::Approx(pb(0.1, f64::from_bits(1)))).is_err());
    p.try_charge(PrivacyUnit::TOKEN, Charge::Pure(eps(1.0))).unwrap();
    // A huge pure charge into a zCDP ledger (ε²/2 overflows) is refused, not accepted as NaN.
    let mut z = Ledger::new_zcdp(PrivacyUnit::TOKEN, rho(f64::MAX));
    assert!(matches!(
        z.try_charge(PrivacyUnit::TOKEN, Charge::Pure(eps(1e200))),
        Err(Error::Infeasible { lhs, .. }) if lhs == f64::INFINITY
    ));
    // Very small targets: nothing fits an RDP ledger whose grid cannot certify them.
    let mut r = Ledger::new_rdp(PrivacyUnit::TOKEN, eps(1e-6), delta(1e-12)).unwrap();
    assert!(r.try_charge(PrivacyUnit::TOKEN, Charge::Zcdp(rho(1e-15))).is_err());
    assert_eq!(r.spent(), Amount::Rdp { epsilon: 0.0, delta: 1e-12 });
}
