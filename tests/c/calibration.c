/*
 * Calibration and accounting from C99, against reference values (docs/PAPERS.md §3.9:
 * Balle–Wang analytic Gaussian computed with 60-digit mpmath, given to 12 significant
 * digits; docs/PAPERS.md A.2.4: Opacus' accountant golden values) and against closed
 * forms and naive double-precision references written here.
 *
 * Tolerances: published 12-digit values are compared at 1e-11 relative (the rounding of
 * the 12th digit is 5e-12 relative); closed forms evaluated in double at 1e-14 (a few
 * ulps of a handful of libm calls); calibrated values must never be below the exact one
 * (they are rounded up), which is checked where an exact reference exists.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static double rel(double a, double b) { return fabs(a / b - 1.0); }

/* Φ(x) from C's erfc: accurate to a few ulps in absolute terms. */
static double phi(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

/* The analytic Gaussian profile δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ), naively. */
static double profile(double eps, double mu) {
    return phi(mu / 2 - eps / mu) - exp(eps) * phi(-mu / 2 - eps / mu);
}

/* CKS20 Thm 7 naively: δ = P[Y > a] − e^ε P[Y > a + Δ], a = εσ²/Δ − Δ/2, Y ~ N_Z(0, σ²),
   by direct summation over |y| ≤ 60σ (the rest is below e^-1800). */
static double dg_profile(double eps, double sigma, double sens) {
    double a = eps * sigma * sigma / sens - sens / 2, z = 0, p1 = 0, p2 = 0;
    long y, lim = (long)(60 * sigma) + 10;
    for (y = -lim; y <= lim; y++) {
        double w = exp(-(double)y * (double)y / (2 * sigma * sigma));
        z += w;
        if ((double)y > a) p1 += w;
        if ((double)y > a + sens) p2 += w;
    }
    return (p1 - exp(eps) * p2) / z;
}

static int test_gaussian(void) {
    double s, e, d;
    /* docs/PAPERS.md T3-A (δ = 1e-5, S = 1 and S = 2), T3-B (δ = 1e-6), T3-D (branch A). */
    static const double table[][4] = {
        /* ε, δ, Δ, σ_aMGM */
        {0.1, 1e-5, 1, 30.749566132},       {0.5, 1e-5, 1, 7.03182667558},
        {1, 1e-5, 1, 3.73063163482},        {1, 1e-5, 2, 7.46126326963},
        {16, 1e-5, 1, 0.344177428496},      {24, 1e-5, 1, 0.252945852753},
        {1, 1e-6, 1, 4.22467888933},        {8, 1e-6, 1, 0.652935384358},
        {0.5, 0.3, 1, 0.865868816946},      {0.01, 0.1, 1, 3.80944380611},
    };
    size_t i;
    for (i = 0; i < sizeof table / sizeof table[0]; i++) {
        CHECK(dpattn_analytic_gaussian_sigma(table[i][0], table[i][1], table[i][2], &s) == DPATTN_STATUS_OK);
        CHECK(rel(s, table[i][3]) < 1e-10);
        /* The result meets δ by the naive profile too (up to its own 1e-15 absolute error). */
        CHECK(profile(table[i][0], table[i][2] / s) <= table[i][1] * (1 + 1e-9));
    }
    /* T3-E profile values, and the naive erfc formula; ε = 0 is 2Φ(μ/2) − 1. */
    CHECK(dpattn_analytic_gaussian_delta(1.0, 1.0, 1.0, &d) == DPATTN_STATUS_OK);
    CHECK(rel(d, 0.126936737507) < 1e-11 && rel(d, profile(1.0, 1.0)) < 1e-13);
    CHECK(dpattn_analytic_gaussian_delta(4.0, 1.0, 2.0, &d) == DPATTN_STATUS_OK);
    CHECK(rel(d, 0.0849533186711) < 1e-11);
    CHECK(dpattn_analytic_gaussian_delta(0.0, 1.0, 2.0, &d) == DPATTN_STATUS_OK);
    CHECK(rel(d, 0.682689492137) < 1e-11 && rel(d, erf(1.0 / sqrt(2.0))) < 1e-14);
    /* T3-E inverse values at δ = 1e-5. */
    CHECK(dpattn_analytic_gaussian_epsilon(1.0, 1e-5, 1.0, &e) == DPATTN_STATUS_OK);
    CHECK(rel(e, 4.37717809568) < 1e-11);
    CHECK(dpattn_analytic_gaussian_epsilon(2.0, 1e-5, 1.0, &e) == DPATTN_STATUS_OK);
    CHECK(rel(e, 1.99309140442) < 1e-11);
    /* Classical: σ = Δ √(2 ln(1.25/δ)) / ε (Dwork–Roth Thm A.1), rounded up; T3-A σ_GM. */
    CHECK(dpattn_classical_gaussian_sigma(0.5, 1e-5, 1.0, &s) == DPATTN_STATUS_OK);
    CHECK(rel(s, 9.68961052521) < 1e-11);
    CHECK(s >= sqrt(2 * log(1.25 / 1e-5)) / 0.5 && rel(s, sqrt(2 * log(1.25 / 1e-5)) / 0.5) < 1e-14);
    CHECK(dpattn_classical_gaussian_sigma(0.1, 1e-5, 2.0, &s) == DPATTN_STATUS_OK);
    CHECK(rel(s, 96.8961052521) < 1e-11);
    CHECK(dpattn_classical_gaussian_epsilon(s, 1e-5, 2.0, &e) == DPATTN_STATUS_OK);
    CHECK(e <= 0.1 && rel(e, 0.1) < 1e-14);
    /* Outside ε < 1 the classical formula is not a theorem: refused. */
    s = -1;
    CHECK(dpattn_classical_gaussian_sigma(1.0, 1e-5, 1.0, &s) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("epsilon") && s == -1);
    CHECK(dpattn_classical_gaussian_epsilon(1.0, 1e-5, 1.0, &e) == DPATTN_STATUS_INFEASIBLE);
    /* Analytic errors: δ = 0 and δ = 1 out of range, bad sensitivity, NULL out. */
    CHECK(dpattn_analytic_gaussian_sigma(1.0, 0.0, 1.0, &s) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(dpattn_analytic_gaussian_sigma(1.0, 1.0, 1.0, &s) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(dpattn_analytic_gaussian_sigma(-1.0, 1e-5, 1.0, &s) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    CHECK(dpattn_analytic_gaussian_sigma(1.0, 1e-5, NAN, &s) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sensitivity"));
    CHECK(dpattn_analytic_gaussian_sigma(1.0, 1e-5, 1.0, NULL) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out_sigma"));
    CHECK(dpattn_analytic_gaussian_epsilon(0.0, 1e-5, 1.0, &e) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sigma"));
    CHECK(dpattn_analytic_gaussian_delta(INFINITY, 1.0, 1.0, &d) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(s == -1);
    return 0;
}

static int test_laplace_discrete_normal(void) {
    double b, e, s, d, x, bound, var;
    /* Laplace b = Δ/ε, rounded up: exact for 1/0.5, the double just above 1/3 for ε = 3. */
    CHECK(dpattn_laplace_scale(1.0, 0.5, &b) == DPATTN_STATUS_OK && b == 2.0);
    CHECK(dpattn_laplace_scale(1.0, 3.0, &b) == DPATTN_STATUS_OK);
    CHECK(b * 3.0 >= 1.0 && b >= 1.0 / 3.0 && b <= nextafter(1.0 / 3.0, 1.0));
    CHECK(dpattn_laplace_epsilon(4.0, 2.0, &e) == DPATTN_STATUS_OK && e == 0.5);
    CHECK(dpattn_laplace_scale(1.0, 0.0, &b) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("epsilon"));
    CHECK(dpattn_laplace_epsilon(-1.0, 1.0, &e) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("scale"));
    /* Truncated Laplace with δ = 0: infinite bound, Laplace variance 2(Δ/ε)^2. */
    CHECK(dpattn_truncated_laplace_bound(2.0, 0.5, 0.0, &bound, &var) == DPATTN_STATUS_OK);
    CHECK(isinf(bound) && var == 32.0);
    CHECK(dpattn_truncated_laplace_bound(1.0, 1.0, 0.6, &bound, &var) == DPATTN_STATUS_OUT_OF_RANGE);
    /* Discrete Gaussian profile against the naive lattice sum (CKS20 Thm 7). The core's
       value is an upper bound padded by 1e-12 relative; the naive sum's error is ~1e-15. */
    CHECK(dpattn_discrete_gaussian_delta(1.0, 3.0, 2, &d) == DPATTN_STATUS_OK);
    CHECK(d >= dg_profile(1.0, 3.0, 2.0) && rel(d, dg_profile(1.0, 3.0, 2.0)) < 1e-10);
    CHECK(dpattn_discrete_gaussian_delta(0.5, 1.5, 1, &d) == DPATTN_STATUS_OK);
    CHECK(d >= dg_profile(0.5, 1.5, 1.0) && rel(d, dg_profile(0.5, 1.5, 1.0)) < 1e-10);
    /* σ for (1, 1e-5), Δ = 1: meets δ, and 1e-9 less would not (tightness), and it is close
       to the continuous analytic 3.7306 (T3-A). */
    CHECK(dpattn_discrete_gaussian_sigma(1.0, 1e-5, 1, &s) == DPATTN_STATUS_OK);
    CHECK(dg_profile(1.0, s, 1.0) <= 1e-5 * (1 + 1e-9) && dg_profile(1.0, s * (1 - 1e-9), 1.0) > 1e-5 * (1 - 1e-6));
    CHECK(fabs(s - 3.7306) < 0.05);
    CHECK(dpattn_discrete_gaussian_epsilon(s, 1e-5, 1, &e) == DPATTN_STATUS_OK);
    CHECK(e <= 1.0 + 1e-9 && e > 1.0 - 1e-6);
    CHECK(dpattn_discrete_gaussian_sigma(1.0, 1e-5, 0, &s) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sensitivity"));
    /* Normal distribution: known constants and C's erfc. */
    CHECK(dpattn_normal_cdf(0.0) == 0.5);
    CHECK(fabs(dpattn_normal_cdf(1.96) - 0.9750021048517795) < 1e-15);
    CHECK(rel(dpattn_normal_sf(10.0), 7.619853024160527e-24) < 1e-13);
    CHECK(rel(dpattn_normal_cdf(-5.0), 0.5 * erfc(5.0 / sqrt(2.0))) < 1e-13);
    CHECK(isnan(dpattn_normal_cdf(NAN)));
    CHECK(dpattn_normal_quantile(0.975, &x) == DPATTN_STATUS_OK && fabs(x - 1.959963984540054) < 1e-14);
    CHECK(dpattn_normal_isf(1e-300, &x) == DPATTN_STATUS_OK);
    CHECK(rel(0.5 * erfc(x / sqrt(2.0)), 1e-300) < 1e-12);
    x = 5;
    CHECK(dpattn_normal_quantile(0.0, &x) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("p") && x == 5);
    CHECK(dpattn_normal_isf(1.0, &x) == DPATTN_STATUS_OUT_OF_RANGE && x == 5);
    return 0;
}

static int test_composition_zcdp(void) {
    double eps[3] = {0.5, 0.25, 0.125}, del[3] = {1e-6, 0.0, 2e-6}, e, d, r, l, best = INFINITY, a;
    /* Basic composition: exactly representable sums are exact. */
    CHECK(dpattn_basic_composition(eps, del, 3, &e, &d) == DPATTN_STATUS_OK);
    CHECK(e == 0.875 && d >= 3e-6 && rel(d, 3e-6) < 1e-15);
    CHECK(dpattn_basic_composition_k(0.125, 1e-7, 8, &e, &d) == DPATTN_STATUS_OK && e == 1.0);
    CHECK(rel(d, 8e-7) < 1e-15);
    CHECK(dpattn_basic_composition_k(1.0, 0.5, 2, &e, &d) == DPATTN_STATUS_INFEASIBLE && msg_has("delta"));
    CHECK(dpattn_basic_composition(eps, del, 0, &e, &d) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_basic_composition(NULL, del, 3, &e, &d) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("epsilons"));
    /* Advanced composition (Dwork–Roth Thm 3.20): √(2k ln(1/δ')) ε + k ε (e^ε − 1). */
    CHECK(dpattn_advanced_composition(0.1, 1e-8, 100, 1e-6, &e, &d) == DPATTN_STATUS_OK);
    a = sqrt(200 * log(1e6)) * 0.1 + 100 * 0.1 * expm1(0.1);
    CHECK(e >= a && rel(e, a) < 1e-14 && fabs(e - 6.3082310) < 1e-6);
    CHECK(d >= 100 * 1e-8 + 1e-6 && rel(d, 100 * 1e-8 + 1e-6) < 1e-14);
    CHECK(dpattn_advanced_composition_step_epsilon(1.0, 1000, 1e-6, &e) == DPATTN_STATUS_OK);
    CHECK(sqrt(2000 * log(1e6)) * e + 1000 * e * expm1(e) <= 1.0 && e > 0.0058121);
    CHECK(dpattn_advanced_composition(0.1, 0.0, 10, 0.0, &e, &d) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("slack"));
    /* zCDP (Bun–Steinke Prop 1.4, 1.6, 1.3). */
    CHECK(dpattn_zcdp_from_pure(0.5, &r) == DPATTN_STATUS_OK && r == 0.125);
    CHECK(dpattn_zcdp_gaussian(1.0, 2.0, &r) == DPATTN_STATUS_OK && r == 0.125);
    CHECK(dpattn_zcdp_to_epsilon_bs16(0.5, exp(-8.0), &e) == DPATTN_STATUS_OK && fabs(e - 4.5) < 1e-12);
    CHECK(dpattn_zcdp_rho_for_bs16(4.5, exp(-8.0), &r) == DPATTN_STATUS_OK && fabs(r - 0.5) < 1e-12 && r <= 0.5);
    /* CKS20 Cor 13: inf over α > 1 of αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α), here by
       a grid search (step 1e-4 near the optimum α ≈ 5.4, so the grid minimum is within
       ~1e-8 of the infimum). */
    l = log(1e5);
    for (a = 1.0001; a < 50; a += 1e-4) {
        double v = a * 0.5 + (l - log(a)) / (a - 1) + log1p(-1 / a);
        if (v < best) best = v;
    }
    CHECK(dpattn_zcdp_to_epsilon(0.5, 1e-5, &e) == DPATTN_STATUS_OK);
    CHECK(e >= best - 1e-8 && e <= best + 1e-12 && fabs(e - 4.72839) < 1e-5);
    CHECK(dpattn_zcdp_rho_for(1.0, 1e-5, &r) == DPATTN_STATUS_OK);
    CHECK(dpattn_zcdp_to_epsilon(r, 1e-5, &e) == DPATTN_STATUS_OK && e <= 1.0 && e > 1.0 - 1e-9);
    CHECK(dpattn_zcdp_to_epsilon(0.5, 0.0, &e) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("delta"));
    CHECK(dpattn_zcdp_gaussian(1.0, 0.0, &r) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sigma"));
    return 0;
}

static int test_rdp(void) {
    double orders[160], opacus[151], rdp[3], e, o, d, z, x;
    static const double few[3] = {2.0, 4.0, 8.0};
    int i;
    CHECK(DPATTN_RDP_DEFAULT_ORDER_COUNT == 156);
    CHECK(dpattn_rdp_default_orders(orders, 160) == DPATTN_STATUS_OK);
    CHECK(orders[0] == 1.1 && orders[98] == 10.9 && orders[99] == 11.0 && orders[151] == 63.0);
    CHECK(orders[152] == 128.0 && orders[155] == 1024.0);
    CHECK(dpattn_rdp_default_orders(orders, 100) == DPATTN_STATUS_BUFFER_TOO_SHORT);
    /* Plain Gaussian (q = 1): ε(α) = α/(2z²) (Mironov 2017), rounded up. */
    CHECK(dpattn_rdp_sampled_gaussian(1.0, 2.0, 3.0, &x) == DPATTN_STATUS_OK && x == 0.375);
    CHECK(dpattn_rdp_sampled_gaussian(0.0, 2.0, 3.0, &x) == DPATTN_STATUS_OK && x == 0.0);
    /* Integer order, by the binomial expansion written here: A_α = Σ_k C(α,k) q^k (1−q)^{α−k}
       e^{(k²−k)/(2z²)}, ε = ln A_α / (α − 1) (MTZ19 §3.3); α = 3, q = 0.1, z = 1. */
    {
        double q = 0.1, A = pow(1 - q, 3) + 3 * q * pow(1 - q, 2) + 3 * q * q * (1 - q) * exp(1.0) +
                            q * q * q * exp(3.0);
        CHECK(dpattn_rdp_sampled_gaussian(q, 1.0, 3.0, &x) == DPATTN_STATUS_OK);
        CHECK(x >= log(A) / 2 * (1 - 1e-14) && rel(x, log(A) / 2) < 1e-12);
    }
    /* Conversion (Balle et al. 2020 Thm 21): ε = min_α ε(α) + ln((α−1)/α) − (ln δ + ln α)/(α−1)
       for the curve α/2 on orders 2, 4, 8: best at α = 4. */
    rdp[0] = 1.0;
    rdp[1] = 2.0;
    rdp[2] = 4.0;
    CHECK(dpattn_rdp_epsilon(few, rdp, 3, 1e-5, &e, &o) == DPATTN_STATUS_OK && o == 4.0);
    x = 2.0 + log(0.75) - (log(1e-5) + log(4.0)) / 3;
    CHECK(e >= x && e - x < 1e-13);
    CHECK(dpattn_rdp_delta(few, rdp, 3, e, &d, &o) == DPATTN_STATUS_OK && rel(d, 1e-5) < 1e-12);
    /* Opacus' golden value (docs/PAPERS.md A.2.4): q = 0.04, σ = 1.5, 2250 steps,
       δ = 1e-5, on Opacus' orders 1.1..10.9 (step 0.1) and 12..63: ε = 7.32911117143. */
    for (i = 0; i < 151; i++) opacus[i] = i < 99 ? 1.0 + (i + 1) / 10.0 : (double)(i - 99 + 12);
    CHECK(dpattn_rdp_sampled_gaussian_epsilon(0.04, 1.5, 2250, opacus, 151, 1e-5, &e, &o) == DPATTN_STATUS_OK);
    CHECK(fabs(e - 7.32911117143) < 1e-9);
    CHECK(dpattn_rdp_sampled_gaussian_epsilon(0.04, 1.5, 2250, NULL, 0, 1e-5, &x, &o) == DPATTN_STATUS_OK);
    CHECK(x <= e); /* the default orders are a superset */
    /* Opacus get_noise_multiplier(ε = 8, δ = 1e-5, q = 0.04, 2000 steps) = 1.3562 (with its
       0.01 ε tolerance); ours is tight: ε(z) ≤ 8 < ε(z(1 − 1e-8)) + 1e-6. */
    CHECK(dpattn_rdp_calibrate_sampled_gaussian(0.04, 2000, 8.0, 1e-5, opacus, 151, &z) == DPATTN_STATUS_OK);
    CHECK(fabs(z - 1.3562) < 0.005);
    CHECK(dpattn_rdp_sampled_gaussian_epsilon(0.04, z, 2000, opacus, 151, 1e-5, &e, &o) == DPATTN_STATUS_OK && e <= 8.0);
    CHECK(dpattn_rdp_sampled_gaussian_epsilon(0.04, z * (1 - 1e-8), 2000, opacus, 151, 1e-5, &e, &o) == DPATTN_STATUS_OK);
    CHECK(e > 8.0 - 1e-6);
    /* Errors name the argument; out-params untouched. */
    e = -1;
    CHECK(dpattn_rdp_sampled_gaussian(1.5, 1.0, 2.0, &e) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("sampling_rate"));
    CHECK(dpattn_rdp_sampled_gaussian(0.5, 1.0, 1.0, &e) == DPATTN_STATUS_OUT_OF_RANGE && msg_has("order"));
    CHECK(dpattn_rdp_epsilon(few, NULL, 3, 1e-5, &e, &o) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("rdp"));
    rdp[1] = NAN;
    CHECK(dpattn_rdp_epsilon(few, rdp, 3, 1e-5, &e, &o) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_rdp_sampled_gaussian_epsilon(0.04, 1.5, 10, NULL, 0, 0.0, &e, &o) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("delta"));
    CHECK(dpattn_rdp_calibrate_sampled_gaussian(0.04, 0, 1.0, 1e-5, NULL, 0, &e) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("steps") && e == -1);
    return 0;
}

int dpattn_c_calibration(void) {
    int line;
    if ((line = test_gaussian()) != 0) return line;
    if ((line = test_laplace_discrete_normal()) != 0) return line;
    if ((line = test_composition_zcdp()) != 0) return line;
    if ((line = test_rdp()) != 0) return line;
    return 0;
}
