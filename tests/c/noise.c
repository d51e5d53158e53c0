/*
 * The keyed noise family from C99: raw ChaCha20 words against RFC 8439, every sampler's
 * determinism and addressability, and its distribution by z-tests with fixed keys.
 *
 * Statistical threshold: every test is two-sided at significance 1e-6, i.e.
 * |estimate - expected| / standard_error < Z = 4.8916 (Phi^-1(1 - 5e-7) = 4.89164).
 * With >= 1e5 samples the CLT makes the standardised mean of i.i.d. values with finite
 * fourth moment normal to well below that level. The standard error of a mean is
 * sqrt(Var/n); of a second moment E[x^2] it is sqrt((E[x^4] - E[x^2]^2)/n), with E[x^4]
 * in closed form where known (Gaussian 3 s^4, Laplace 24 b^4) and the sample fourth moment
 * otherwise. The keys are fixed, so each test is deterministic; a wrong sampler (scale off
 * by 1 %, a biased sign) fails by far more than Z.
 */
#include "dpattn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define Z_CRIT 4.8916
#define N_STAT 200000

static dpattn_key make_key(unsigned char base) {
    dpattn_key k;
    int i;
    for (i = 0; i < 32; i++) k.bytes[i] = (uint8_t)(base + i);
    return k;
}

/* z-statistic of an estimate against its expected value. */
static double zstat(double est, double expect, double se) { return fabs(est - expect) / se; }

/* Mean and second/fourth moments about 0 of a double array. */
static void moments(const double *x, size_t n, double *m1, double *m2, double *m4) {
    size_t i;
    double s1 = 0, s2 = 0, s4 = 0;
    for (i = 0; i < n; i++) {
        double v = x[i];
        s1 += v;
        s2 += v * v;
        s4 += v * v * v * v;
    }
    *m1 = s1 / (double)n;
    *m2 = s2 / (double)n;
    *m4 = s4 / (double)n;
}

static int test_rfc8439(void) {
    /* RFC 8439 §2.3.2: key 00..1f, nonce 000000090000004a00000000, block counter 1. In the
       64-bit counter / 64-bit stream layout: counter = 1 | 0x09000000 << 32 and stream id
       0x4a000000; the block's first word is at word position 16 * counter. */
    static const unsigned char serial[64] = {
        0x10, 0xf1, 0xe7, 0xe4, 0xd1, 0x3b, 0x59, 0x15, 0x50, 0x0f, 0xdd, 0x1f, 0xa3, 0x20, 0x71, 0xc4,
        0xc7, 0xd1, 0xf4, 0xc7, 0x33, 0xc0, 0x68, 0x03, 0x04, 0x22, 0xaa, 0x9a, 0xc3, 0xd4, 0x6c, 0x4e,
        0xd2, 0x82, 0x64, 0x46, 0x07, 0x9f, 0xaa, 0x09, 0x14, 0xc2, 0xd7, 0x05, 0xd9, 0x8b, 0x02, 0xa2,
        0xb5, 0x12, 0x9c, 0xd1, 0xde, 0x16, 0x4e, 0xb9, 0xcb, 0xd0, 0x83, 0xe8, 0xa2, 0x50, 0x3c, 0x4e};
    dpattn_key key = make_key(0);
    uint64_t counter = 1u | ((uint64_t)0x09000000u << 32);
    uint64_t lo = counter << 4, hi = counter >> 60;
    uint32_t w[20], part[5];
    int i;
    CHECK(dpattn_stream_words(&key, 0x4a000000u, lo, hi, w, 16) == DPATTN_STATUS_OK);
    for (i = 0; i < 16; i++) {
        const unsigned char *b = serial + 4 * i;
        uint32_t want = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        CHECK(w[i] == want);
    }
    /* A range that starts mid-block and crosses into the next block. */
    CHECK(dpattn_stream_words(&key, 0x4a000000u, lo + 13, hi, part, 5) == DPATTN_STATUS_OK);
    CHECK(part[0] == w[13] && part[1] == w[14] && part[2] == w[15]);
    CHECK(dpattn_stream_words(&key, 0x4a000000u, lo, hi, w, 20) == DPATTN_STATUS_OK);
    CHECK(part[3] == w[16] && part[4] == w[17]);
    /* The last 4 words of a stream (position 2^68 - 4 = hi 0xf, lo all ones minus 3). */
    CHECK(dpattn_stream_words(&key, 1, UINT64_MAX - 3, 0xf, w, 4) == DPATTN_STATUS_OK);
    memset(part, 0xab, sizeof part);
    CHECK(dpattn_stream_words(&key, 1, UINT64_MAX - 3, 0xf, part, 5) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("first_word") && part[0] == 0xababababu);
    CHECK(dpattn_stream_words(NULL, 1, 0, 0, part, 5) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("key"));
    CHECK(dpattn_stream_words(&key, 1, 0, 0, NULL, 5) == DPATTN_STATUS_NULL_ARGUMENT && msg_has("out"));
    return 0;
}

/* Bitwise equality of two double arrays. */
static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static int test_gaussian(void) {
    dpattn_key key = make_key(1), other = make_key(2);
    double *x = malloc(N_STAT * sizeof *x), *y = malloc(N_STAT * sizeof *y);
    float *f = malloc(N_STAT * sizeof *f);
    double m1, m2, m4, sigma = 2.5, s2 = 6.25;
    size_t i;
    CHECK(x && y && f);
    CHECK(dpattn_fill_gaussian(&key, 7, 0, sigma, DPATTN_DTYPE_F64, x, N_STAT) == DPATTN_STATUS_OK);
    moments(x, N_STAT, &m1, &m2, &m4);
    CHECK(zstat(m1, 0.0, sigma / sqrt(N_STAT)) < Z_CRIT);
    /* E[x^2] = s^2, Var(x^2) = 3 s^4 - s^4 = 2 s^4. */
    CHECK(zstat(m2, s2, sqrt(2.0 * s2 * s2 / N_STAT)) < Z_CRIT);
    /* Determinism and addressability: same call, same bits; a sub-range starting at an odd
       index (mid Box-Muller pair) equals the slice of the full call. */
    CHECK(dpattn_fill_gaussian(&key, 7, 0, sigma, DPATTN_DTYPE_F64, y, N_STAT) == DPATTN_STATUS_OK);
    CHECK(same_bits(x, y, N_STAT * sizeof *x));
    CHECK(dpattn_fill_gaussian(&key, 7, 1001, sigma, DPATTN_DTYPE_F64, y, 333) == DPATTN_STATUS_OK);
    CHECK(same_bits(x + 1001, y, 333 * sizeof *x));
    /* Another key or another stream: different noise. */
    CHECK(dpattn_fill_gaussian(&other, 7, 0, sigma, DPATTN_DTYPE_F64, y, 64) == DPATTN_STATUS_OK);
    CHECK(!same_bits(x, y, 64 * sizeof *x));
    CHECK(dpattn_fill_gaussian(&key, 8, 0, sigma, DPATTN_DTYPE_F64, y, 64) == DPATTN_STATUS_OK);
    CHECK(!same_bits(x, y, 64 * sizeof *x));
    /* Scaling: sigma multiplies the standard normal of the same words exactly-ish (one
       rounding in the product: relative 2^-52). */
    CHECK(dpattn_fill_gaussian(&key, 7, 0, 1.0, DPATTN_DTYPE_F64, y, 100) == DPATTN_STATUS_OK);
    for (i = 0; i < 100; i++) CHECK(fabs(x[i] - sigma * y[i]) <= 4e-16 * fabs(x[i]) + 1e-300);
    /* f32: its own layout (24-bit uniforms), same law. */
    CHECK(dpattn_fill_gaussian(&key, 7, 0, sigma, DPATTN_DTYPE_F32, f, N_STAT) == DPATTN_STATUS_OK);
    for (i = 0; i < N_STAT; i++) x[i] = f[i];
    moments(x, N_STAT, &m1, &m2, &m4);
    CHECK(zstat(m1, 0.0, sigma / sqrt(N_STAT)) < Z_CRIT);
    CHECK(zstat(m2, s2, sqrt(2.0 * s2 * s2 / N_STAT)) < Z_CRIT);
    {
        float g[10];
        CHECK(dpattn_fill_gaussian(&key, 7, 5, sigma, DPATTN_DTYPE_F32, g, 10) == DPATTN_STATUS_OK);
        CHECK(same_bits(f + 5, g, sizeof g));
    }
    free(x);
    free(y);
    free(f);
    return 0;
}

static int test_other_continuous(void) {
    dpattn_key key = make_key(3);
    double *x = malloc(N_STAT * sizeof *x), *y = malloc(N_STAT * sizeof *y);
    double m1, m2, m4, b = 0.75, rate = 4.0, bound, var, eps = 1.0, del = 0.01, t;
    size_t i;
    CHECK(x && y);
    /* Uniform on (0, 1]: mean 1/2, variance 1/12. */
    CHECK(dpattn_fill_uniform(&key, 1, 0, DPATTN_DTYPE_F64, x, N_STAT) == DPATTN_STATUS_OK);
    moments(x, N_STAT, &m1, &m2, &m4);
    for (i = 0; i < N_STAT; i++) CHECK(x[i] > 0.0 && x[i] <= 1.0);
    CHECK(zstat(m1, 0.5, sqrt(1.0 / 12.0 / N_STAT)) < Z_CRIT);
    CHECK(dpattn_fill_uniform(&key, 1, 77, DPATTN_DTYPE_F64, y, 10) == DPATTN_STATUS_OK);
    CHECK(same_bits(x + 77, y, 10 * sizeof *x));
    /* Laplace(b): mean 0, E[x^2] = 2 b^2, E[x^4] = 24 b^4. */
    CHECK(dpattn_fill_laplace(&key, 2, 0, b, DPATTN_DTYPE_F64, x, N_STAT) == DPATTN_STATUS_OK);
    moments(x, N_STAT, &m1, &m2, &m4);
    CHECK(zstat(m1, 0.0, sqrt(2.0 * b * b / N_STAT)) < Z_CRIT);
    CHECK(zstat(m2, 2 * b * b, sqrt((24 - 4) * b * b * b * b / N_STAT)) < Z_CRIT);
    CHECK(dpattn_fill_laplace(&key, 2, 5, b, DPATTN_DTYPE_F64, y, 10) == DPATTN_STATUS_OK);
    CHECK(same_bits(x + 5, y, 10 * sizeof *x));
    /* Exponential(rate): mean 1/rate, variance 1/rate^2, all positive. */
    CHECK(dpattn_fill_exponential(&key, 3, 0, rate, DPATTN_DTYPE_F64, x, N_STAT) == DPATTN_STATUS_OK);
    moments(x, N_STAT, &m1, &m2, &m4);
    for (i = 0; i < N_STAT; i++) CHECK(x[i] >= 0.0);
    CHECK(zstat(m1, 1 / rate, sqrt(1 / (rate * rate) / N_STAT)) < Z_CRIT);
    /* Truncated Laplace TLap(1, 1, 0.01): bound and variance in closed form (docs/PAPERS.md §1.3):
       t = ln(1 + (e^eps - 1)/(2 delta)), B = t/eps, Var = (2/eps^2)(1 - delta(t^2+2t)/(e^eps-1)).
       docs/PAPERS.md T1-A lists B = 4.464920 for these parameters. */
    t = log1p(expm1(eps) / (2 * del));
    CHECK(dpattn_truncated_laplace_bound(1.0, eps, del, &bound, &var) == DPATTN_STATUS_OK);
    CHECK(fabs(bound / (t / eps) - 1) < 1e-13 && fabs(bound - 4.464920) < 1e-6);
    CHECK(fabs(var / (2 / (eps * eps) * (1 - del * (t * t + 2 * t) / expm1(eps))) - 1) < 1e-12);
    CHECK(dpattn_fill_truncated_laplace(&key, 4, 0, 1.0, eps, del, DPATTN_DTYPE_F64, x, N_STAT) ==
          DPATTN_STATUS_OK);
    moments(x, N_STAT, &m1, &m2, &m4);
    for (i = 0; i < N_STAT; i++) CHECK(fabs(x[i]) <= bound);
    CHECK(zstat(m1, 0.0, sqrt(var / N_STAT)) < Z_CRIT);
    CHECK(zstat(m2, var, sqrt((m4 - m2 * m2) / N_STAT)) < Z_CRIT);
    free(x);
    free(y);
    return 0;
}

static int test_discrete(void) {
    dpattn_key key = make_key(4);
    int64_t *z = malloc(N_STAT * sizeof *z), w[50];
    double *x = malloc(N_STAT * sizeof *x), m1, m2, m4, lam, var;
    uint64_t num, den;
    size_t i;
    CHECK(z && x);
    /* Discrete Laplace, scale t/s = 5/2: P(x) ∝ exp(-|x| s/t), variance 2e^-l/(1-e^-l)^2,
       l = s/t. */
    CHECK(dpattn_discrete_laplace_ratio(2.5, &num, &den) == DPATTN_STATUS_OK && num == 5 && den == 2);
    CHECK(dpattn_fill_discrete_laplace(&key, 1, 0, num, den, z, N_STAT) == DPATTN_STATUS_OK);
    for (i = 0; i < N_STAT; i++) x[i] = (double)z[i];
    moments(x, N_STAT, &m1, &m2, &m4);
    lam = 2.0 / 5.0;
    var = 2 * exp(-lam) / (expm1(-lam) * expm1(-lam));
    CHECK(zstat(m1, 0.0, sqrt(var / N_STAT)) < Z_CRIT);
    CHECK(zstat(m2, var, sqrt((m4 - m2 * m2) / N_STAT)) < Z_CRIT);
    /* Per-element windows: any sub-range equals the slice. */
    CHECK(dpattn_fill_discrete_laplace(&key, 1, 12345, num, den, w, 50) == DPATTN_STATUS_OK);
    CHECK(memcmp(z + 12345, w, sizeof w) == 0);
    /* Discrete Gaussian sigma = 7/2: variance sigma^2 up to e^{-2 pi^2 sigma^2} ≈ e^-241. */
    CHECK(dpattn_discrete_gaussian_ratio(3.5, &num, &den) == DPATTN_STATUS_OK && num == 7 && den == 2);
    CHECK(dpattn_fill_discrete_gaussian(&key, 2, 0, 7, 2, z, N_STAT) == DPATTN_STATUS_OK);
    for (i = 0; i < N_STAT; i++) x[i] = (double)z[i];
    moments(x, N_STAT, &m1, &m2, &m4);
    CHECK(zstat(m1, 0.0, sqrt(12.25 / N_STAT)) < Z_CRIT);
    /* For the (near-)Gaussian lattice law E[x^4] ≈ 3 sigma^4; use the sample m4. */
    CHECK(zstat(m2, 12.25, sqrt((m4 - m2 * m2) / N_STAT)) < Z_CRIT);
    CHECK(dpattn_fill_discrete_gaussian(&key, 2, 999, 7, 2, w, 50) == DPATTN_STATUS_OK);
    CHECK(memcmp(z + 999, w, sizeof w) == 0);
    /* A double sigma is rounded up to s/q with q a power of two. */
    CHECK(dpattn_discrete_gaussian_ratio(0.8, &num, &den) == DPATTN_STATUS_OK);
    CHECK((den & (den - 1)) == 0 && den >= (1u << 30) && (double)num / (double)den >= 0.8);
    /* Errors: element index beyond the 2^40 windows; zero scale; out untouched. */
    w[0] = 42;
    CHECK(dpattn_fill_discrete_gaussian(&key, 2, ((uint64_t)1 << 40) - 1, 7, 2, w, 2) ==
          DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("element") && w[0] == 42);
    CHECK(dpattn_fill_discrete_laplace(&key, 2, 0, 0, 1, w, 2) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("scale") && w[0] == 42);
    CHECK(dpattn_discrete_laplace_ratio(-1.0, &num, &den) == DPATTN_STATUS_OUT_OF_RANGE);
    free(z);
    free(x);
    return 0;
}

static int test_grid(void) {
    dpattn_key key = make_key(5);
    size_t n = N_STAT, i;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), m1, m2, m4, r;
    dpattn_grid_info info;
    CHECK(x && y);
    /* Laplace, Δ1 = 1, ε = 0.5, d = n: r = 2^(ceil(log2(Δ/ε)) - 40) = 2^(1 - 40) (Google's
       rule); the noise scale is (Δ + d r)/ε up to the exact integer ratio. */
    CHECK(dpattn_grid_laplace_describe(1.0, 0.5, n, DPATTN_GRID_DEFAULT_RESOLUTION, &info) ==
          DPATTN_STATUS_OK);
    r = ldexp(1.0, -39);
    CHECK(info.resolution_exponent == -39 && info.resolution == r && isnan(info.rho));
    CHECK(info.epsilon == 0.5);
    CHECK(fabs(info.rounded_sensitivity / (1.0 + (double)n * r) - 1) < 1e-15);
    CHECK(fabs(info.noise_scale / ((1.0 + (double)n * r) / 0.5) - 1) < 1e-12);
    CHECK(info.noise_scale >= (1.0 + (double)n * r) / 0.5 * (1 - 1e-15));
    for (i = 0; i < n; i++) x[i] = y[i] = (double)(i % 7) - 3.0;
    CHECK(dpattn_grid_laplace_add(&key, 1, 0, 1.0, 0.5, n, DPATTN_GRID_DEFAULT_RESOLUTION, y, n) ==
          DPATTN_STATUS_OK);
    for (i = 0; i < n; i++) {
        CHECK(fmod(y[i], r) == 0.0);
        y[i] -= x[i]; /* the noise: exact (both multiples of r, small) */
    }
    moments(y, n, &m1, &m2, &m4);
    {
        double b = info.noise_scale; /* continuous-Laplace moments: 2b^2, 24b^4 (the lattice
                                        is 2^40 times finer than b) */
        CHECK(zstat(m1, 0.0, sqrt(2 * b * b / n)) < Z_CRIT);
        CHECK(zstat(m2, 2 * b * b, sqrt(20 * b * b * b * b / n)) < Z_CRIT);
    }
    /* Gaussian, Δ2 = 1, σ = 4, d = 16, k = -20: ρ = (Δ + √d r)^2 / (2σ^2). */
    CHECK(dpattn_grid_gaussian_describe(1.0, 4.0, 16, -20, &info) == DPATTN_STATUS_OK);
    r = ldexp(1.0, -20);
    CHECK(info.resolution == r && isnan(info.epsilon));
    CHECK(info.integer_scale_num == (uint64_t)4 << 20 && info.integer_scale_den == 1);
    CHECK(info.rho >= (1 + 4 * r) * (1 + 4 * r) / 32 && fabs(info.rho / ((1 + 4 * r) * (1 + 4 * r) / 32) - 1) < 1e-14);
    CHECK(dpattn_grid_gaussian_describe(1.0, 4.0, n, DPATTN_GRID_DEFAULT_RESOLUTION, &info) ==
          DPATTN_STATUS_OK);
    CHECK(info.resolution == ldexp(1.0, 2 - 30)); /* σ/r = 2^30 */
    for (i = 0; i < n; i++) x[i] = y[i] = 0.5;
    CHECK(dpattn_grid_gaussian_add(&key, 2, 0, 1.0, 4.0, n, DPATTN_GRID_DEFAULT_RESOLUTION, y, n) ==
          DPATTN_STATUS_OK);
    for (i = 0; i < n; i++) y[i] -= x[i];
    moments(y, n, &m1, &m2, &m4);
    CHECK(zstat(m1, 0.0, sqrt(16.0 / n)) < Z_CRIT);
    CHECK(zstat(m2, 16.0, sqrt(2 * 256.0 / n)) < Z_CRIT);
    /* Addressable: coordinates 100..109 alone equal the slice of the full call. */
    for (i = 0; i < 10; i++) x[i] = 0.5;
    CHECK(dpattn_grid_gaussian_add(&key, 2, 100, 1.0, 4.0, n, DPATTN_GRID_DEFAULT_RESOLUTION, x, 10) ==
          DPATTN_STATUS_OK);
    for (i = 0; i < 10; i++) CHECK(x[i] - 0.5 == y[100 + i]);
    /* Data-dependent refusals leave the data untouched. */
    x[0] = 1.0;
    x[1] = NAN;
    CHECK(dpattn_grid_gaussian_add(&key, 3, 0, 1.0, 4.0, 2, DPATTN_GRID_DEFAULT_RESOLUTION, x, 2) ==
          DPATTN_STATUS_NON_FINITE);
    CHECK(msg_has("data") && x[0] == 1.0);
    /* Errors leak nothing (docs/PRIVACY.md §9): the message withholds the private position
       and value; dpattn_last_error_private_detail has them, for the data holder only. */
    {
        char detail[64];
        for (i = 0; i < 5000; i++) x[i] = 0.5;
        x[4321] = 1.2345678e300; /* |x| / r far above 2^53 */
        CHECK(dpattn_grid_laplace_add(&key, 3, 0, 1.0, 1.0, 5000, -2, x, 5000) ==
              DPATTN_STATUS_DOMAIN_VIOLATION);
        CHECK(msg_has("withheld") && !msg_has("4321") && !msg_has("12345678") && !msg_has("e300"));
        CHECK(dpattn_last_error_private_detail(NULL, 0) == strlen("entry 4321 (value 1.2345678e300)"));
        CHECK(dpattn_last_error_private_detail(detail, sizeof detail) > 0);
        CHECK(strcmp(detail, "entry 4321 (value 1.2345678e300)") == 0 && x[4321] == 1.2345678e300);
        x[4321] = -INFINITY;
        CHECK(dpattn_grid_laplace_add(&key, 3, 0, 1.0, 1.0, 5000, -2, x, 5000) ==
              DPATTN_STATUS_NON_FINITE);
        CHECK(msg_has("data") && !msg_has("4321"));
        CHECK(dpattn_last_error_private_detail(detail, sizeof detail) > 0 && strcmp(detail, "entry 4321") == 0);
        /* A success clears it. */
        x[4321] = 0.5;
        CHECK(dpattn_grid_laplace_add(&key, 3, 0, 1.0, 1.0, 5000, -2, x, 5000) == DPATTN_STATUS_OK);
        CHECK(dpattn_last_error_private_detail(NULL, 0) == 0);
    }
    CHECK(dpattn_grid_laplace_add(&key, 3, 1, 1.0, 1.0, 2, DPATTN_GRID_DEFAULT_RESOLUTION, x, 2) ==
          DPATTN_STATUS_SHAPE_MISMATCH);
    CHECK(dpattn_grid_laplace_describe(1.0, 1.0, 1, 5000, &info) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("resolution exponent"));
    free(x);
    free(y);
    return 0;
}

static int test_permutation(void) {
    dpattn_key key = make_key(6);
    uint64_t p[100], q[100], lo = 0, hi = 0, lo2, hi2, count[5] = {0, 0, 0, 0, 0};
    int seen[100];
    size_t i, draws = 50000;
    double chi2 = 0.0;
    CHECK(dpattn_sample_permutation(&key, 9, 0, 0, p, 100, &lo, &hi) == DPATTN_STATUS_OK);
    memset(seen, 0, sizeof seen);
    for (i = 0; i < 100; i++) {
        CHECK(p[i] < 100 && !seen[p[i]]);
        seen[p[i]] = 1;
    }
    /* 99 bounded draws, at least one word each. */
    CHECK(hi == 0 && lo >= 99);
    CHECK(dpattn_sample_permutation(&key, 9, 0, 0, q, 100, &lo2, &hi2) == DPATTN_STATUS_OK);
    CHECK(memcmp(p, q, sizeof p) == 0 && lo2 == lo && hi2 == hi);
    /* Chained draws from the returned position: a different permutation. */
    CHECK(dpattn_sample_permutation(&key, 9, lo, hi, q, 100, &lo2, &hi2) == DPATTN_STATUS_OK);
    CHECK(memcmp(p, q, sizeof p) != 0);
    /* Uniformity of the first entry of 50000 chained permutations of 5: chi-square with 4
       degrees of freedom, whose survival function is e^{-x/2}(1 + x/2); it equals 1e-6 at
       x = 33.38. */
    lo = 0;
    hi = 0;
    for (i = 0; i < draws; i++) {
        CHECK(dpattn_sample_permutation(&key, 10, lo, hi, q, 5, &lo, &hi) == DPATTN_STATUS_OK);
        count[q[0]]++;
    }
    for (i = 0; i < 5; i++) {
        double e = (double)draws / 5.0, d = (double)count[i] - e;
        chi2 += d * d / e;
    }
    CHECK(chi2 < 33.38);
    /* Errors: a start beyond the stream; NULL out-params. */
    CHECK(dpattn_sample_permutation(&key, 9, 0, 16, q, 5, &lo, &hi) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("first_word"));
    CHECK(dpattn_sample_permutation(&key, 9, 0, 0, q, 5, NULL, &hi) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(msg_has("out_next_word_lo"));
    return 0;
}

static int test_errors(void) {
    dpattn_key key = make_key(7);
    double out[4] = {9, 9, 9, 9};
    uint16_t half[4];
    CHECK(dpattn_fill_gaussian(NULL, 0, 0, 1.0, DPATTN_DTYPE_F64, out, 4) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(msg_has("key"));
    CHECK(dpattn_fill_gaussian(&key, 0, 0, 1.0, DPATTN_DTYPE_F64, NULL, 4) == DPATTN_STATUS_NULL_ARGUMENT);
    CHECK(msg_has("out"));
    CHECK(dpattn_fill_gaussian(&key, 0, 0, 1.0, DPATTN_DTYPE_F64, NULL, 0) == DPATTN_STATUS_OK);
    /* 16-bit outputs are not sampler types: out of range, the message lists the allowed. */
    CHECK(dpattn_fill_gaussian(&key, 0, 0, 1.0, DPATTN_DTYPE_F16, half, 4) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("dtype") && msg_has("DPATTN_DTYPE_F32") && msg_has("DPATTN_DTYPE_F64"));
    CHECK(dpattn_fill_uniform(&key, 0, 0, DPATTN_DTYPE_BF16, half, 4) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_fill_gaussian(&key, 0, 0, 0.0, DPATTN_DTYPE_F64, out, 4) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("sigma"));
    CHECK(dpattn_fill_gaussian(&key, 0, 0, NAN, DPATTN_DTYPE_F64, out, 4) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(dpattn_fill_laplace(&key, 0, 0, -1.0, DPATTN_DTYPE_F64, out, 4) == DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("scale"));
    CHECK(dpattn_fill_exponential(&key, 0, 0, INFINITY, DPATTN_DTYPE_F64, out, 4) ==
          DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("rate"));
    CHECK(dpattn_fill_truncated_laplace(&key, 0, 0, 1.0, 1.0, 0.75, DPATTN_DTYPE_F64, out, 4) ==
          DPATTN_STATUS_OUT_OF_RANGE);
    CHECK(msg_has("delta"));
    CHECK(dpattn_fill_gaussian(&key, 0, UINT64_MAX - 1, 1.0, DPATTN_DTYPE_F64, out, 4) ==
          DPATTN_STATUS_SIZE_OVERFLOW);
    CHECK(dpattn_fill_gaussian(&key, 0, 0, 1.0, DPATTN_DTYPE_F64, (char *)out + 1, 2) ==
          DPATTN_STATUS_MISALIGNED);
    CHECK(out[0] == 9 && out[3] == 9);
    return 0;
}

int dpattn_c_noise(void) {
    int line;
    if ((line = test_rfc8439()) != 0) return line;
    if ((line = test_gaussian()) != 0) return line;
    if ((line = test_other_continuous()) != 0) return line;
    if ((line = test_discrete()) != 0) return line;
    if ((line = test_grid()) != 0) return line;
    if ((line = test_permutation()) != 0) return line;
    if ((line = test_errors()) != 0) return line;
    return 0;
}
