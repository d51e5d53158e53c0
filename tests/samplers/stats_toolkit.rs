//! Self-tests of the statistical toolkit in `tests/support/stats.rs` against independent
//! references: closed forms, published table values, and seeded ChaCha20 data.

use crate::support;

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use support::stats::*;

/// Uniform on [0, 1) with 53 random bits.
fn unif(rng: &mut ChaCha20Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

fn uniforms(seed: u8, n: usize) -> Vec<f64> {
    let mut rng = ChaCha20Rng::from_seed([seed; 32]);
    (0..n).map(|_| unif(&mut rng)).collect()
}

fn assert_rel(got: f64, want: f64, rel: f64, what: &str) {
    assert!(
        (got - want).abs() <= rel * want.abs(),
        "{what}: got {got:e}, want {want:e} (rel err {:e})",
        ((got - want) / want).abs()
    );
}

fn assert_abs(got: f64, want: f64, abs: f64, what: &str) {
    assert!((got - want).abs() <= abs, "{what}: got {got}, want {want}");
}

// ------------------------------------------------------------------- special functions

#[test]
fn erfc_matches_table_values() {
    // Reference values (to double precision) from the DLMF / Abramowitz–Stegun tables.
    let table = [
        (0.0, 1.0),
        (0.1, 0.887_537_083_981_715),
        (0.5, 0.479_500_122_186_953_5),
        (1.0, 0.157_299_207_050_285_13),
        (1.5, 0.033_894_853_524_689_27),
        (2.0, 0.004_677_734_981_047_266),
        (2.5, 4.069_520_174_449_59e-4),
        (3.0, 2.209_049_699_858_544e-5),
        (4.0, 1.541_725_790_028_002e-8),
        (5.0, 1.537_459_794_428_035e-12),
        (6.0, 2.151_973_671_249_892e-17),
        (-1.0, 1.842_700_792_949_715),
    ];
    for (x, want) in table {
        assert_rel(erfc(x), want, 1e-12, &format!("erfc({x})"));
    }
    // Φ(1.959963984540054) = 0.975, Φ(−x) = 1 − Φ(x).
    assert_rel(normal_cdf(1.959_963_984_540_054), 0.975, 1e-14, "normal_cdf");
    assert_rel(normal_sf(1.959_963_984_540_054), 0.025, 1e-12, "normal_sf");
    assert_rel(normal_cdf(-3.0), 1.349_898_031_630_094_6e-3, 1e-12, "normal_cdf(-3)");
}

#[test]
fn ln_gamma_matches_factorials_and_half_integers() {
    let mut fact: f64 = 1.0;
    for n in 1..=30u32 {
        // Γ(n) = (n − 1)!
        assert_rel(ln_gamma(f64::from(n)).exp(), fact, 1e-13, &format!("Γ({n})"));
        fact *= f64::from(n);
    }
    let sqrt_pi = core::f64::consts::PI.sqrt();
    assert_rel(ln_gamma(0.5).exp(), sqrt_pi, 1e-14, "Γ(1/2)");
    assert_rel(ln_gamma(1.5).exp(), sqrt_pi / 2.0, 1e-14, "Γ(3/2)");
    assert_rel(ln_gamma(0.1).exp(), 9.513_507_698_668_732, 1e-13, "Γ(0.1)");
}

#[test]
fn chi_square_sf_with_two_df_is_exponential() {
    for i in 0..=400 {
        let x = f64::from(i) * 0.25;
        assert_rel(chi_square_sf(x, 2.0), (-x / 2.0).exp(), 1e-12, &format!("Q2({x})"));
    }
}

#[test]
fn chi_square_sf_with_even_df_matches_poisson_sums() {
    // Q(k, x/2) = e^{−x/2} Σ_{j<k} (x/2)^j / j! for integer k = df/2.
    for df in [4u32, 6, 10, 20] {
        for i in 1..=120 {
            let x = f64::from(i) * 0.5;
            let h = x / 2.0;
            let (mut term, mut sum) = (1.0, 0.0);
            for j in 0..df / 2 {
                if j > 0 {
                    term *= h / f64::from(j);
                }
                sum += term;
            }
            let want = (-h).exp() * sum;
            assert_rel(chi_square_sf(x, f64::from(df)), want, 1e-11, &format!("Q{df}({x})"));
        }
    }
}

#[test]
fn chi_square_sf_with_one_df_is_erfc() {
    // Q(1/2, x/2) = erfc(√(x/2)); reference values of erfc from tables, not from `erfc`.
    let table = [
        (0.5, 0.479_500_122_186_953_5),
        (1.0, 0.157_299_207_050_285_13),
        (2.0, 0.004_677_734_981_047_266),
        (3.0, 2.209_049_699_858_544e-5),
        (5.0, 1.537_459_794_428_035e-12),
    ];
    for (z, want) in table {
        let x = 2.0 * z * z;
        assert_rel(chi_square_sf(x, 1.0), want, 1e-11, &format!("Q1({x})"));
    }
    // And against the toolkit's (independently implemented) erfc on a fine grid.
    for i in 1..=500 {
        let x = f64::from(i) * 0.1;
        assert_rel(chi_square_sf(x, 1.0), erfc((x / 2.0).sqrt()), 1e-11, &format!("Q1({x})"));
    }
}

#[test]
fn chi_square_sf_matches_table_critical_values() {
    // (quantile, df, upper-tail probability), from the standard χ² table (3 decimals).
    let table = [
        (3.841, 1.0, 0.05),
        (6.635, 1.0, 0.01),
        (10.828, 1.0, 0.001),
        (18.307, 10.0, 0.05),
        (23.209, 10.0, 0.01),
        (43.773, 30.0, 0.05),
        (59.703, 30.0, 0.001),
        (124.342, 100.0, 0.05),
        (149.449, 100.0, 0.001),
    ];
    for (x, df, p) in table {
        // Three decimals of x move p by at most pdf·5e-4 < 1e-3 of p here.
        assert_rel(chi_square_sf(x, df), p, 1e-3, &format!("χ²({df}) at {x}"));
    }
    assert_eq!(chi_square_sf(0.0, 3.0), 1.0);
    assert_eq!(chi_square_sf(f64::INFINITY, 3.0), 0.0);
}

#[test]
fn kolmogorov_sf_matches_table_critical_values() {
    for (x, p) in [(1.2238, 0.10), (1.3581, 0.05), (1.6276, 0.01), (1.9495, 0.001)] {
        assert_abs(kolmogorov_sf(x), p, 3e-5, &format!("Q_K({x})"));
    }
    // P(K ≤ 1) = 0.7300003283, P(K ≤ 0.5) = 0.0360547563 (Marsaglia–Tsang–Wang).
    assert_abs(kolmogorov_sf(1.0), 1.0 - 0.730_000_328_3, 1e-9, "Q_K(1)");
    assert_abs(kolmogorov_sf(0.5), 1.0 - 0.036_054_756_3, 1e-9, "Q_K(0.5)");
    // The two series agree where they switch, and the function decreases.
    let (below, above) = (kolmogorov_sf(1.18 - 1e-12), kolmogorov_sf(1.18));
    assert_abs(below, above, 1e-12, "series switch at 1.18");
    let mut prev = 1.0;
    for i in 0..=400 {
        let q = kolmogorov_sf(f64::from(i) * 0.01);
        assert!(q <= prev && (0.0..=1.0).contains(&q), "not monotone at {i}");
        prev = q;
    }
    assert_eq!(kolmogorov_sf(0.0), 1.0);
    // Q(x) ≈ 2e^{−2x²} far out: Q⁻¹(1e−6) ≈ √(ln(2e6)/2) = 2.69336.
    let x = kolmogorov_isf(ALPHA);
    assert_abs(x, (2e6f64.ln() / 2.0).sqrt(), 1e-9, "Q_K⁻¹(1e-6)");
    assert_rel(kolmogorov_sf(x), ALPHA, 1e-9, "Q_K(Q_K⁻¹)");
}

#[test]
fn z_critical_is_the_two_sided_normal_quantile() {
    // Φ⁻¹(1 − 5e−7) = 4.891638475698…
    assert_abs(z_critical(), 4.891_638_475_698, 1e-9, "z_critical");
    assert_rel(normal_two_sided_p(z_critical()), ALPHA, 1e-9, "p(z_critical)");
    assert!(z_accepts(4.89) && !z_accepts(4.9) && !z_accepts(-4.9));
}

// -------------------------------------------------------------------- simple statistics

#[test]
fn moments_binomial_and_outcome_arithmetic() {
    let m = moments(&[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(m.n, 4);
    assert_abs(m.mean, 2.5, 1e-15, "mean");
    assert_abs(m.var, 5.0 / 3.0, 1e-15, "var");
    assert_abs(m.m4, (2.0 * 1.5f64.powi(4) + 2.0 * 0.5f64.powi(4)) / 4.0, 1e-15, "m4");
    assert_abs(mean_z(&m, 2.0, 1.0), 0.5 / (0.25f64).sqrt(), 1e-15, "mean_z");
    assert_abs(var_z(&m, 1.0, 3.0), (5.0 / 3.0 - 1.0) / (2.0f64 / 4.0).sqrt(), 1e-15, "var_z");
    assert_abs(binomial_z(60, 100, 0.5), 2.0, 1e-15, "binomial_z");
    assert_abs(binomial_z(10, 100, 0.1), 0.0, 1e-15, "binomial_z");
    let o = Outcome { statistic: 0.0, p_value: ALPHA, df: 1 };
    assert!(o.accepts() && !o.rejects());
    let o = Outcome { statistic: 0.0, p_value: ALPHA / 2.0, df: 1 };
    assert!(o.rejects() && !o.accepts());
    let o = Outcome { statistic: 0.0, p_value: f64::NAN, df: 1 };
    assert!(o.rejects());
}

#[test]
fn moments_of_uniform_data_pass_the_z_tests() {
    // U[0, 1): μ = 1/2, σ² = 1/12, μ4 = 1/80.
    let xs = uniforms(11, 200_000);
    let m = moments(&xs);
    assert!(z_accepts(mean_z(&m, 0.5, 1.0 / 12.0)));
    assert!(z_accepts(var_z(&m, 1.0 / 12.0, 1.0 / 80.0)));
    assert_abs(m.m4, 1.0 / 80.0, 2e-4, "m4");
    // A mean off by 1% is far outside: z ≈ 0.005/√(1/12/2e5) ≈ 7.7.
    assert!(!z_accepts(mean_z(&m, 0.505, 1.0 / 12.0)));
    // A variance off by 2%: z ≈ 0.00167/√((1/80 − 1/144)/2e5) ≈ 10.
    assert!(!z_accepts(var_z(&m, 1.02 / 12.0, 1.0 / 80.0)));
}

#[test]
fn correlation_z_detects_dependence_only() {
    let xs = uniforms(12, 100_000);
    let ys = uniforms(13, 100_000);
    assert!(z_accepts(correlation_z(&xs, &ys)));
    assert!(z_accepts(lag_correlation_z(&xs, 1)));
    // y = x + noise: r ≈ 0.45, z ≈ 140.
    let zs: Vec<f64> = xs.iter().zip(&ys).map(|(x, y)| x + 2.0 * y).collect();
    assert!(correlation_z(&xs, &zs) > 100.0);
    assert_abs(correlation(&xs, &xs), 1.0, 1e-12, "r(x, x)");
    // A sequence with x[i] and x[i + 1] sharing a term.
    let ma: Vec<f64> = xs.windows(2).map(|w| w[0] + w[1]).collect();
    assert!(lag_correlation_z(&ma, 1) > 100.0);
}

// ------------------------------------------------------------------------- KS test

#[test]
fn ks_statistic_is_exact_on_small_samples() {
    let id = |x: f64| x;
    let o = ks_test(&[0.5], id);
    assert_abs(o.statistic, 0.5, 0.0, "D of one point");
    assert_eq!(o.df, 0);
    // Points 0.1, 0.2, 0.9: F_n − F at 0.2⁺ is 2/3 − 0.2 = 0.4667 (the sup).
    let o = ks_test(&[0.9, 0.1, 0.2], id);
    assert_abs(o.statistic, 2.0 / 3.0 - 0.2, 1e-15, "D of three points");
    // Ties: three copies of 0.5 jump F_n from 0 to 1 at 0.5: D = 0.5.
    let o = ks_test(&[0.5, 0.5, 0.5], id);
    assert_abs(o.statistic, 0.5, 1e-15, "D with ties");
    // Two copies of 0.25 and one 0.75: F_n(0.25) = 2/3, D = 2/3 − 1/4.
    let o = ks_test(&[0.75, 0.25, 0.25], id);
    assert_abs(o.statistic, 2.0 / 3.0 - 0.25, 1e-15, "D with ties");
}

#[test]
fn ks_test_accepts_the_right_cdf_and_rejects_wrong_ones() {
    let xs = uniforms(21, 100_000);
    let right = ks_test(&xs, |x| x.clamp(0.0, 1.0));
    assert!(right.accepts(), "{right:?}");
    // Critical D at 1e5: ≈ 2.6934/316.4 = 0.0085.
    assert_abs(ks_critical(100_000), 2.693_36 / (316.227_77 + 0.12), 1e-5, "ks_critical");
    assert!(right.statistic < ks_critical(100_000));
    // x^1.1: max |x − x^1.1| ≈ 0.035 ≫ 0.0085.
    let wrong = ks_test(&xs, |x: f64| x.clamp(0.0, 1.0).powf(1.1));
    assert!(wrong.rejects(), "{wrong:?}");
    // A shift by 0.01 (> 0.0085).
    let shifted = ks_test(&xs, |x: f64| (x - 0.01).clamp(0.0, 1.0));
    assert!(shifted.rejects(), "{shifted:?}");
    // Standard normal data from Box–Muller against Φ, and against N(0, 1.1²).
    let us = uniforms(22, 100_000);
    let zs: Vec<f64> = us
        .chunks_exact(2)
        .flat_map(|c| {
            let r = (-2.0 * (1.0 - c[0]).ln()).sqrt();
            let t = 2.0 * core::f64::consts::PI * c[1];
            [r * t.cos(), r * t.sin()]
        })
        .collect();
    assert!(ks_test(&zs, normal_cdf).accepts());
    assert!(ks_test(&zs, |x| normal_cdf(x / 1.1)).rejects());
}

#[test]
fn ks_p_values_are_calibrated() {
    // 400 KS tests of 500 uniforms each: P(p < 0.05) should be 0.05 (and P(p < 0.5) 0.5)
    // if the Stephens-corrected asymptotic p-value is right at moderate n.
    let mut rng = ChaCha20Rng::from_seed([23; 32]);
    let (mut below_05, mut below_50) = (0u64, 0u64);
    let trials = 400u64;
    for _ in 0..trials {
        let xs: Vec<f64> = (0..500).map(|_| unif(&mut rng)).collect();
        let p = ks_test(&xs, |x| x).p_value;
        below_05 += u64::from(p < 0.05);
        below_50 += u64::from(p < 0.5);
    }
    assert!(z_accepts(binomial_z(below_05, trials, 0.05)), "{below_05}/{trials} below 0.05");
    assert!(z_accepts(binomial_z(below_50, trials, 0.5)), "{below_50}/{trials} below 0.5");
}

#[test]
fn ks_critical_is_where_the_p_value_crosses_alpha() {
    for n in [1_000usize, 100_000, 1_000_000] {
        let d = ks_critical(n);
        let sn = (n as f64).sqrt();
        let p = kolmogorov_sf((sn + 0.12 + 0.11 / sn) * d);
        assert_rel(p, ALPHA, 1e-8, &format!("p at ks_critical({n})"));
    }
}

// -------------------------------------------------------------------------- χ² test

#[test]
fn chi_square_gof_accepts_fair_dice_and_rejects_loaded_ones() {
    let mut rng = ChaCha20Rng::from_seed([31; 32]);
    let mut counts = [0u64; 6];
    for _ in 0..60_000 {
        counts[(rng.next_u64() % 6) as usize] += 1;
    }
    let fair = chi_square_gof(&counts, &[1.0 / 6.0; 6]);
    assert!(fair.accepts(), "{fair:?}");
    assert_eq!(fair.df, 5);
    let loaded = chi_square_gof(&counts, &[0.18, 0.18, 0.16, 0.16, 0.16, 0.16]);
    assert!(loaded.rejects(), "{loaded:?}");
}

#[test]
fn chi_square_gof_statistic_by_hand() {
    // Expected 25 each; X² = (5² + 5² + 0 + 0)/25 = 2, df = 3.
    let o = chi_square_gof(&[30, 20, 25, 25], &[0.25; 4]);
    assert_abs(o.statistic, 2.0, 1e-12, "X²");
    assert_eq!(o.df, 3);
    assert_abs(o.p_value, chi_square_sf(2.0, 3.0), 0.0, "p");
}

#[test]
fn chi_square_gof_pools_sparse_tails() {
    // n = 100: expected counts 1, 2, 3, 44, 44, 3, 2, 1. Pooled: [1+2+3=6], [44], [44],
    // and the right tail 3+2+1 = 6: four bins, df = 3.
    let probs = [0.01, 0.02, 0.03, 0.44, 0.44, 0.03, 0.02, 0.01];
    let obs = [1, 2, 3, 44, 44, 3, 2, 1];
    let o = chi_square_gof(&obs, &probs);
    assert_eq!(o.df, 3);
    assert_abs(o.statistic, 0.0, 1e-12, "X²");
    // A right tail short of 5 joins the bin before it: expected 10, 10, 79, 0.5, 0.5 →
    // [10], [10], [80]: df = 2, X² = (2² + 2² + 0)/10.
    let o = chi_square_gof(&[12, 8, 78, 1, 1], &[0.1, 0.1, 0.79, 0.005, 0.005]);
    assert_eq!(o.df, 2);
    assert_abs(o.statistic, 0.8, 1e-12, "X² with pooled tail");
}

#[test]
fn chi_square_gof_rejects_observations_in_impossible_bins() {
    let o = chi_square_gof(&[50, 49, 1], &[0.5, 0.5, 0.0]);
    assert!(o.rejects());
    assert_eq!(o.statistic, f64::INFINITY);
    // An empty impossible bin is fine.
    assert!(chi_square_gof(&[50, 50, 0], &[0.5, 0.5, 0.0]).accepts());
}

#[test]
#[should_panic(expected = "sum to")]
fn chi_square_gof_requires_probabilities_summing_to_one() {
    chi_square_gof(&[10, 10], &[0.5, 0.4]);
}

#[test]
fn chi_square_gof_open_adds_the_remainder_bin() {
    // Geometric(1/2) counts of 1000 draws, binned 0..=9, tail in the remainder.
    let mut rng = ChaCha20Rng::from_seed([32; 32]);
    let n = 100_000u64;
    let mut counts = [0u64; 10];
    for _ in 0..n {
        let k = rng.next_u64().trailing_zeros() as usize;
        if k < 10 {
            counts[k] += 1;
        }
    }
    let probs: Vec<f64> = (0..10).map(|k| 0.5f64.powi(k + 1)).collect();
    let o = chi_square_gof_open(&counts, &probs, n);
    assert!(o.accepts(), "{o:?}");
    // Remainder expected 1e5/1024 ≈ 98 ≥ 5: 11 bins, df = 10.
    assert_eq!(o.df, 10);
    let wrong: Vec<f64> = (0..10).map(|k| 0.45 * 0.55f64.powi(k)).collect();
    assert!(chi_square_gof_open(&counts, &wrong, n).rejects());
}

#[test]
fn chi_square_p_values_are_calibrated() {
    // 400 χ² tests of 600 fair die rolls each: P(p < 0.05) should be close to 0.05 (the
    // χ² approximation is good at expected counts 100).
    let mut rng = ChaCha20Rng::from_seed([33; 32]);
    let trials = 400u64;
    let mut below = 0u64;
    for _ in 0..trials {
        let mut counts = [0u64; 6];
        for _ in 0..600 {
            counts[(rng.next_u64() % 6) as usize] += 1;
        }
        below += u64::from(chi_square_gof(&counts, &[1.0 / 6.0; 6]).p_value < 0.05);
    }
    assert!(z_accepts(binomial_z(below, trials, 0.05)), "{below}/{trials} below 0.05");
}
