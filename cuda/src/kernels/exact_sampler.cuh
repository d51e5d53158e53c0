// Exact samplers on per-element windows (docs/RANDOMNESS.md §4): the port of
// core/src/sampling/{bit_source, exact_sampler, lazy_compare, exact_bernoulli,
// discrete_laplace, discrete_gaussian, gaussian_cells}.rs. Integer arithmetic only (u64, and u128 as two
// u64); no floating-point value takes part in any decision. One thread draws one element
// from its own window, so the integers equal the CPU's `sample_at(stream, element)`.
//
// Results: a function returning `int` gives 0 (false) or 1 (true), or a negative status
// (DP_EXHAUSTED: the window ran out; DP_OVERFLOW: a counter or a sample left its integer
// type), which the caller passes up at once, as the CPU's `?` does. Probability of either:
// below 2^-1000 for every sampler here.
#pragma once

#define DP_EXHAUSTED (-1)
#define DP_OVERFLOW (-2)
#define DP_TRY(expr)                    \
    do {                                \
        int dp_try_r_ = (expr);         \
        if (dp_try_r_ < 0) return dp_try_r_; \
    } while (0)

// ---- u128 as two u64 --------------------------------------------------------------------

struct DpU128 {
    u64 lo, hi;
};
DP_FN DpU128 dp_u128(u64 lo) { return DpU128{lo, 0}; }
DP_FN DpU128 dp_mul64(u64 a, u64 b) { return DpU128{a * b, dp_umulhi(a, b)}; }
DP_FN bool dp_lt128(DpU128 a, DpU128 b) { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo); }
DP_FN bool dp_is_zero128(DpU128 a) { return (a.lo | a.hi) == 0; }
DP_FN DpU128 dp_add128(DpU128 a, DpU128 b) {
    u64 lo = a.lo + b.lo;
    return DpU128{lo, a.hi + b.hi + (lo < a.lo ? 1ull : 0ull)};
}
DP_FN DpU128 dp_sub128(DpU128 a, DpU128 b) {
    return DpU128{a.lo - b.lo, a.hi - b.hi - (a.lo < b.lo ? 1ull : 0ull)};
}
DP_FN DpU128 dp_shl1_128(DpU128 a) { return DpU128{a.lo << 1, (a.hi << 1) | (a.lo >> 63)}; }
// a >> n for 0 <= n < 128.
DP_FN DpU128 dp_shr128(DpU128 a, u32 n) {
    if (n == 0) return a;
    if (n >= 64) return DpU128{a.hi >> (n - 64), 0};
    return DpU128{(a.lo >> n) | (a.hi << (64 - n)), a.hi >> n};
}
// (a / d, a mod d) for d >= 1: binary long division, the remainder kept below d (the digit
// of remainder r and next bit c is 2r + c >= d, tested as r >= d − r − c: nothing
// overflows). Only for rare sizes (quotients of 128-bit values); 128 steps.
DP_NOINLINE DpU128 dp_divmod128(DpU128 a, u64 d, u64* rem) {
    DpU128 q = DpU128{0, 0};
    u64 r = 0;
    for (int i = 127; i >= 0; --i) {
        const u64 c = i >= 64 ? (a.hi >> (i - 64)) & 1ull : (a.lo >> i) & 1ull;
        const bool digit = r >= d - r - c;
        r = digit ? r - (d - r - c) : (r << 1) | c;
        q = dp_shl1_128(q);
        q.lo |= digit ? 1ull : 0ull;
    }
    *rem = r;
    return q;
}

// ---- the element's window (bit_source.rs) -----------------------------------------------

// 2^24 − 1 continuation blocks per element.
#define DP_CONTINUATION_BLOCKS 16777215ull

// Words of element `element`'s window: block `element` of the stream, then blocks
// (j + 1)·2^40 + element for j = 0 .. 2^24 − 2.
struct DpWindow {
    const DpKey* key;
    u64 stream;
    u64 element;
    u64 continuation;
    u32 next;
    u32 w[16];
};

DP_NOINLINE void dp_window_init(DpWindow* win, const DpKey* key, u64 stream, u64 element) {
    win->key = key;
    win->stream = stream;
    win->element = element;
    win->continuation = 0;
    win->next = 0;
    dp_chacha20_block(*key, element, stream, win->w);
}

DP_NOINLINE int dp_window_word(DpWindow* win, u32* out) {
    if (win->next == 16) {
        if (win->continuation == DP_CONTINUATION_BLOCKS) return DP_EXHAUSTED;
        win->continuation += 1;
        dp_chacha20_block(*win->key, (win->continuation << 40) | win->element, win->stream, win->w);
        win->next = 0;
    }
    *out = win->w[win->next];
    win->next += 1;
    return 0;
}

// ---- the samplers' bit buffer (BitBuf in exact_sampler.rs) ------------------------------

// The next `left` bits of the window, the first in the most significant place of `buf`
// (zero below them). Words are read whole; within a word the least significant bit comes
// first, so a word enters the buffer bit-reversed.
struct DpBits {
    DpWindow win;
    u64 buf;
    u32 left;
};

DP_FN void dp_bits_init(DpBits* b, const DpKey* key, u64 stream, u64 element) {
    dp_window_init(&b->win, key, stream, element);
    b->buf = 0;
    b->left = 0;
}

// Appends the next word (requires left <= 32).
DP_NOINLINE int dp_refill(DpBits* b) {
    u32 w;
    DP_TRY(dp_window_word(&b->win, &w));
    b->buf |= (u64)dp_brev(w) << (32 - b->left);
    b->left += 32;
    return 0;
}

// The next bit (0 or 1).
DP_FN int dp_bit(DpBits* b) {
    if (b->left == 0) DP_TRY(dp_refill(b));
    const int bit = (int)(b->buf >> 63);
    b->buf <<= 1;
    b->left -= 1;
    return bit;
}

// The next 32 bits as a number, the first bit most significant, left unconsumed.
DP_FN int dp_peek32(DpBits* b, u64* out) {
    if (b->left < 32) DP_TRY(dp_refill(b));
    *out = b->buf >> 32;
    return 0;
}

// Consumes n <= 32 bits (after dp_peek32).
DP_FN void dp_consume(DpBits* b, u32 n) {
    b->buf <<= n;
    b->left -= n;
}

// The next n <= 64 bits as a number, the first bit most significant.
DP_FN int dp_uint(DpBits* b, u32 n, u64* out) {
    const u32 hi_bits = n > 32 ? n - 32 : 0;
    const u32 parts[2] = {n - hi_bits, hi_bits};
    u64 v = 0;
    for (int i = 0; i < 2; ++i) {
        const u32 part = parts[i];
        if (part > 0) {
            u64 x;
            DP_TRY(dp_peek32(b, &x));
            x >>= 32 - part;
            dp_consume(b, part);
            v = (v << part) | x;
        }
    }
    *out = v;
    return 0;
}

// ---- lazy comparisons with num/den (lazy_compare.rs) ------------------------------------

// The first 32 binary digits d of num/den (0 < num < den), the remainder after them
// (num·2^32 = d·den + rem) and how many of them the comparison reads at most.
struct DpDigits {
    u64 d, rem;
    u32 len;
};

DP_NOINLINE DpDigits dp_digits(u64 num, u64 den) {
    u64 d, rem;
    if (den <= (1ull << 32)) {
        const u64 x = num << 32;
        d = x / den;
        rem = x - d * den;
    } else {
        // The quotient has 32 bits: 32 steps of long division (the digit of remainder r is
        // 2r >= den, tested as r >= den − r).
        d = 0;
        rem = num;
        for (int i = 0; i < 32; ++i) {
            const bool digit = rem >= den - rem;
            rem = digit ? rem - (den - rem) : rem << 1;
            d = (d << 1) | (digit ? 1ull : 0ull);
        }
    }
    DpDigits g;
    g.d = d;
    g.rem = rem;
    g.len = rem == 0 ? 32u - (u32)dp_ctz64(d) : 32u;
    return g;
}

// Bernoulli(num/den) as the comparison of U with num/den whose first digits are `first`, 32
// digits at a time: the first digit where they differ decides (U < num/den exactly when
// U's digit is 0), consuming the bits up to it; false once the expansion ends.
DP_NOINLINE int dp_ratio_chunked(DpBits* b, DpDigits first, u64 den) {
    DpDigits g = first;
    for (;;) {
        u64 u;
        DP_TRY(dp_peek32(b, &u));
        const u32 j = (u32)dp_clz64(u ^ g.d) - 32;  // first differing digit (32: none)
        if (j < g.len) {
            dp_consume(b, j + 1);
            return u < g.d ? 1 : 0;
        }
        dp_consume(b, g.len);
        if (g.rem == 0) return 0;
        g = dp_digits(g.rem, den);
    }
}

// The comparison one digit at a time, for 0 < num < den in u128.
DP_NOINLINE int dp_ratio_bitwise128(DpBits* b, DpU128 num, DpU128 den) {
    DpU128 r = num;
    while (!dp_is_zero128(r)) {
        const DpU128 gap = dp_sub128(den, r);
        const bool digit = !dp_lt128(r, gap);
        r = digit ? dp_sub128(r, gap) : dp_shl1_128(r);
        const int bit = dp_bit(b);
        if (bit < 0) return bit;
        if ((bit == 1) != digit) return digit ? 1 : 0;
    }
    return 0;
}

// Bernoulli(num/den), den > 0 (num >= den: certain).
DP_FN int dp_bernoulli_ratio(DpBits* b, u64 num, u64 den) {
    if (num >= den) return 1;
    if (num == 0) return 0;
    return dp_ratio_chunked(b, dp_digits(num, den), den);
}

// Bernoulli(1/k), k >= 2.
DP_FN int dp_bernoulli_inverse(DpBits* b, u64 k) { return dp_ratio_chunked(b, dp_digits(1, k), k); }

// ---- Bernoulli(exp(−γ)) (exact_bernoulli.rs; CKS20 Algorithm 1) -------------------------

// Algorithm 1 for γ in (0, 1], `gamma` drawing Bernoulli(γ): K ← 1; while Bernoulli(γ/K)
// (drawn as Bernoulli(1/K), then Bernoulli(γ); K = 1 skips the first), K ← K + 1; return
// K odd.
template <class G>
DP_FN int dp_exp_loop(DpBits* b, G gamma) {
    int a = gamma(b);
    if (a <= 0) return a < 0 ? a : 1;
    u64 k = 2;
    for (;;) {
        int x = dp_bernoulli_inverse(b, k);
        if (x < 0) return x;
        if (x == 1) {
            x = gamma(b);
            if (x < 0) return x;
        }
        if (x == 0) return (int)(k & 1ull);
        if (k == ~0ull) return DP_OVERFLOW;
        k += 1;
    }
}

// Bernoulli(e^−1).
DP_NOINLINE int dp_exp_minus_one(DpBits* b) {
    return dp_exp_loop(b, [](DpBits*) { return 1; });
}

// Bernoulli(exp(−num/den)) for num <= den (num >= den means γ = 1).
DP_NOINLINE int dp_exp_u64(DpBits* b, u64 num, u64 den) {
    if (num == 0) return 1;
    if (num >= den) return dp_exp_minus_one(b);
    const DpDigits g = dp_digits(num, den);
    return dp_exp_loop(b, [=](DpBits* x) { return dp_ratio_chunked(x, g, den); });
}

// Bernoulli(exp(−(n1/d1)·(n2/d2))) for n1 <= d1, n2 <= d2, Bernoulli(γ) drawn as
// Bernoulli(n1/d1) ∧ Bernoulli(n2/d2).
DP_NOINLINE int dp_exp_product(DpBits* b, u64 n1, u64 d1, u64 n2, u64 d2) {
    if (n1 == 0 || n2 == 0) return 1;
    if (n1 >= d1 || n2 >= d2) {
        const u64 n = n1 >= d1 ? n2 : n1;
        const u64 d = n1 >= d1 ? d2 : d1;
        return dp_exp_u64(b, n < d ? n : d, d);
    }
    const DpDigits g1 = dp_digits(n1, d1), g2 = dp_digits(n2, d2);
    return dp_exp_loop(b, [=](DpBits* x) {
        const int first = dp_ratio_chunked(x, g1, d1);
        return first <= 0 ? first : dp_ratio_chunked(x, g2, d2);
    });
}

// Bernoulli(exp(−num/den)) for num <= den in u128.
DP_FN int dp_exp_u128(DpBits* b, DpU128 num, DpU128 den) {
    if (num.hi == 0 && den.hi == 0) return dp_exp_u64(b, num.lo, den.lo);
    if (dp_is_zero128(num)) return 1;
    if (!dp_lt128(num, den)) return dp_exp_minus_one(b);
    return dp_exp_loop(b, [=](DpBits* x) { return dp_ratio_bitwise128(x, num, den); });
}

// Bernoulli(exp(−(whole + num/den))), num < den: `whole` draws of Bernoulli(e^−1),
// stopping at the first failure, then Bernoulli(exp(−num/den)).
DP_NOINLINE int dp_exp_split(DpBits* b, DpU128 whole, DpU128 num, DpU128 den) {
    for (DpU128 i = dp_u128(0); dp_lt128(i, whole); i = dp_add128(i, dp_u128(1))) {
        const int x = dp_exp_minus_one(b);
        if (x <= 0) return x;
    }
    return dp_exp_u128(b, num, den);
}

// ---- discrete Laplace (discrete_laplace.rs; CKS20 Algorithm 2) --------------------------

// Scale t/s: `ubits` bits per Lemire candidate (0 when t = 1), threshold 2^ubits mod t,
// s_shift = log2 s when s is a power of two, else −1.
struct DpDLap {
    u64 t, s, thresh;
    u32 ubits;
    int s_shift;
};

DP_FN DpDLap dp_dlap(u64 t, u64 s) {
    DpDLap l;
    l.t = t;
    l.s = s;
    if (t == 1) {
        l.ubits = 0;
    } else {
        const u32 bits = 64u - (u32)dp_clz64(t - 1) + 8u;
        l.ubits = bits < 64u ? bits : 64u;
    }
    // 2^ubits mod t; 2^64 mod t = (2^64 − t) mod t.
    l.thresh = l.ubits == 64 ? (0ull - t) % t : (1ull << l.ubits) % t;
    l.s_shift = (s & (s - 1)) == 0 ? dp_ctz64(s) : -1;
    return l;
}

// U uniform on {0, …, t − 1} by Lemire's multiply-and-reject on ubits-bit candidates.
DP_NOINLINE int dp_dlap_uniform(DpBits* b, const DpDLap* l, u64* out) {
    if (l->ubits == 0) {
        *out = 0;
        return 0;
    }
    for (;;) {
        u64 w;
        DP_TRY(dp_uint(b, l->ubits, &w));
        const DpU128 m = dp_mul64(w, l->t);
        const u64 low = l->ubits == 64 ? m.lo : m.lo & ((1ull << l->ubits) - 1);
        if (low >= l->thresh) {
            *out = dp_shr128(m, l->ubits).lo;
            return 0;
        }
    }
}

DP_NOINLINE int dp_dlap_draw(DpBits* b, const DpDLap* l, i64* out) {
    for (;;) {
        u64 u;
        DP_TRY(dp_dlap_uniform(b, l, &u));
        const int d = dp_exp_u64(b, u, l->t);
        if (d < 0) return d;
        if (d == 0) continue;
        u64 v = 0;
        for (;;) {
            const int e = dp_exp_minus_one(b);
            if (e < 0) return e;
            if (e == 0) break;
            if (v == ~0ull) return DP_OVERFLOW;
            v += 1;
        }
        // x = t·V + U < 2^128.
        const DpU128 x = dp_add128(dp_mul64(l->t, v), dp_u128(u));
        DpU128 y;
        if (l->s_shift >= 0) {
            y = dp_shr128(x, (u32)l->s_shift);
        } else if (x.hi == 0) {
            y = dp_u128(x.lo / l->s);
        } else {
            u64 unused;
            y = dp_divmod128(x, l->s, &unused);
        }
        const int negative = dp_bit(b);
        if (negative < 0) return negative;
        if (negative == 1 && dp_is_zero128(y)) continue;
        if (y.hi != 0 || y.lo > 0x7fffffffffffffffull) return DP_OVERFLOW;
        *out = negative == 1 ? -(i64)y.lo : (i64)y.lo;
        return 0;
    }
}

// ---- discrete Gaussian (discrete_gaussian.rs; CKS20 Algorithm 3) ------------------------

// σ = s/q in lowest terms (as DiscreteGaussian::sigma_ratio gives it, which also checked
// the range): proposal DLap(t), t = ⌊s/q⌋ + 1; q2t = q²·t < 2^64; s2 = s²; B = s·q·t < 2^63.
// For σ ≥ 2^10 (and s < 2^50, which the range implies) the cell algorithm instead
// (gaussian_cells.rs): cell_q64 = 64q, its uniform `cell` on 0..w (w = ⌈s/64q⌉),
// cell_den = 2^13·s² < 2^113.
struct DpDGauss {
    DpDLap lap;
    u64 q2t, b;
    DpU128 s2;
    bool cells;
    u64 cell_s, cell_q64;
    DpDLap cell;
    DpU128 cell_den;
};

DP_FN DpDGauss dp_dgauss(u64 s, u64 q) {
    DpDGauss g;
    const u64 t = s / q + 1;
    g.lap = dp_dlap(t, 1);
    g.q2t = q * q * t;
    g.b = s * q * t;
    g.s2 = dp_mul64(s, s);
    g.cells = s / q >= 1024ull && s < (1ull << 50) && q < (1ull << 58);  // as Cells::new
    g.cell_s = s;
    g.cell_q64 = q << 6;
    const u64 w = g.cells ? (s + g.cell_q64 - 1) / g.cell_q64 : 1;
    g.cell = dp_dlap(w, 1);
    const DpU128 s2 = dp_mul64(s, s);
    g.cell_den = DpU128{s2.lo << 13, (s2.hi << 13) | (s2.lo >> 51)};
    return g;
}

// a·m for a u128 `a` and a u64 `m`; false when the product exceeds 128 bits.
DP_FN bool dp_mul128_64(DpU128 a, u64 m, DpU128* out) {
    const DpU128 lo = dp_mul64(a.lo, m);
    const DpU128 hi = dp_mul64(a.hi, m);
    const u64 top = lo.hi + hi.lo;
    if (hi.hi != 0 || top < lo.hi) return false;
    *out = DpU128{lo.lo, top};
    return true;
}

// (a / d, a mod d) for u128 a and d >= 1: binary long division with a 128-bit remainder.
// Only for exponents >= 1 in the cell algorithm (b >= 4096: probability below e^-2000).
DP_NOINLINE DpU128 dp_divmod128_128(DpU128 a, DpU128 d, DpU128* rem) {
    DpU128 q = DpU128{0, 0}, r = DpU128{0, 0};
    for (int i = 127; i >= 0; --i) {
        const u64 c = i >= 64 ? (a.hi >> (i - 64)) & 1ull : (a.lo >> i) & 1ull;
        // r < d < 2^128: 2r + c may need 129 bits; compare via r >= d − r − c.
        const DpU128 rest = dp_sub128(dp_sub128(d, r), dp_u128(c));
        const bool digit = !dp_lt128(r, rest);
        r = digit ? dp_sub128(r, rest) : dp_add128(dp_shl1_128(r), dp_u128(c));
        q = dp_shl1_128(q);
        q.lo |= digit ? 1ull : 0ull;
    }
    *rem = r;
    return q;
}

// ---- the cell algorithm (gaussian_cells.rs) ---------------------------------------------

// Step 1a: k ≥ 0 with P(k) ∝ e^{−k²/2}: count Bernoulli(e^{−1/2}) successes; k ≥ 2 is kept
// with k(k−1)/2 draws of Bernoulli(e^{−1}).
DP_NOINLINE int dp_cells_k(DpBits* b, u64* out) {
    for (;;) {
        u64 k = 0;
        for (;;) {
            const int x = dp_exp_u64(b, 1, 2);
            if (x < 0) return x;
            if (x == 0) break;
            if (k == ~0ull) return DP_OVERFLOW;
            k += 1;
        }
        if (k < 2) {
            *out = k;
            return 0;
        }
        const DpU128 half = dp_shr128(dp_mul64(k, k - 1), 1);
        const int a = dp_exp_split(b, half, dp_u128(0), dp_u128(1));
        if (a < 0) return a;
        if (a == 1) {
            *out = k;
            return 0;
        }
    }
}

// Step 1: b ≥ 0 with P(b) ∝ e^{−b²/2·64²}: b = 64k + j, j six bits, kept with
// k draws of Bernoulli(exp(−j/64)) then Bernoulli(exp(−j²/8192)).
DP_NOINLINE int dp_cells_base(DpBits* b, u64* out) {
    for (;;) {
        u64 k, j;
        DP_TRY(dp_cells_k(b, &k));
        DP_TRY(dp_uint(b, 6, &j));
        int accept = 1;
        for (u64 i = 0; accept == 1 && i < k; ++i) {
            accept = dp_exp_u64(b, j, 64);
            if (accept < 0) return accept;
        }
        if (accept == 1) accept = dp_exp_u64(b, j * j, 8192);
        if (accept < 0) return accept;
        if (accept == 1) {
            if (k > (~0ull - j) >> 6) return DP_OVERFLOW;
            *out = (k << 6) + j;
            return 0;
        }
    }
}

// Steps 2–4: n = ⌈b·s/64q⌉ + u (restart past the cell's end, 64q·n ≥ (b+1)·s), kept with
// Bernoulli(exp(−(A − B)(A + B)/2^13 s²)), A = 64q·n, B = b·s; a sign bit, −0 restarting.
DP_NOINLINE int dp_cells_draw(DpBits* bits, const DpDGauss* g, i64* out) {
    for (;;) {
        u64 base, u;
        DP_TRY(dp_cells_base(bits, &base));
        DP_TRY(dp_dlap_uniform(bits, &g->cell, &u));
        const DpU128 big_b = dp_mul64(base, g->cell_s);
        u64 rem;
        DpU128 lo;
        if (big_b.hi == 0) {
            lo = dp_u128(big_b.lo / g->cell_q64);
            rem = big_b.lo % g->cell_q64;
        } else {
            lo = dp_divmod128(big_b, g->cell_q64, &rem);
        }
        if (rem != 0) lo = dp_add128(lo, dp_u128(1));
        const DpU128 n = dp_add128(lo, dp_u128(u));
        DpU128 a;
        if (!dp_mul128_64(n, g->cell_q64, &a)) return DP_OVERFLOW;
        if (!dp_lt128(a, dp_add128(big_b, dp_u128(g->cell_s)))) continue;
        const u64 diff = dp_sub128(a, big_b).lo;  // < s
        const DpU128 sum = dp_add128(a, big_b);
        if (dp_lt128(sum, a)) return DP_OVERFLOW;
        DpU128 num;
        if (!dp_mul128_64(sum, diff, &num)) return DP_OVERFLOW;
        if (!dp_is_zero128(num)) {
            int acc;
            if (dp_lt128(num, g->cell_den)) {
                acc = dp_exp_u128(bits, num, g->cell_den);
            } else {
                DpU128 r;
                const DpU128 whole = dp_divmod128_128(num, g->cell_den, &r);
                acc = dp_exp_split(bits, whole, r, g->cell_den);
            }
            if (acc < 0) return acc;
            if (acc == 0) continue;
        }
        const int negative = dp_bit(bits);
        if (negative < 0) return negative;
        if (negative == 1 && dp_is_zero128(n)) continue;
        if (n.hi != 0 || n.lo > 0x7fffffffffffffffull) return DP_OVERFLOW;
        *out = negative == 1 ? -(i64)n.lo : (i64)n.lo;
        return 0;
    }
}

// Bernoulli(exp(−a²/2)).
DP_FN int dp_exp_half_square(DpBits* b, DpU128 a) {
    const DpU128 two = dp_u128(2);
    if (a.hi == 0) {
        const DpU128 sq = dp_mul64(a.lo, a.lo);
        return dp_exp_split(b, dp_shr128(sq, 1), dp_u128(sq.lo & 1ull), two);
    }
    // exp(−a²/2) = exp(−a/2)^a.
    for (DpU128 i = dp_u128(0); dp_lt128(i, a); i = dp_add128(i, dp_u128(1))) {
        const int x = dp_exp_split(b, dp_shr128(a, 1), dp_u128(a.lo & 1ull), two);
        if (x <= 0) return x;
    }
    return 1;
}

// Algorithm 3's acceptance of the proposal y: with A = | |y|·q²t − s² | = a·B + r,
// exp(−(A/B)²/2) = exp(−a²/2)·exp(−r/B)^a·exp(−r²/2B²), drawn in that order.
DP_NOINLINE int dp_dgauss_accept(DpBits* bits, const DpDGauss* g, i64 y) {
    const u64 ay = y < 0 ? 0ull - (u64)y : (u64)y;
    const DpU128 p = dp_mul64(ay, g->q2t);
    const DpU128 num = dp_lt128(p, g->s2) ? dp_sub128(g->s2, p) : dp_sub128(p, g->s2);
    const DpU128 b = dp_u128(g->b);
    DpU128 a;
    u64 r;
    if (dp_lt128(num, b)) {
        a = dp_u128(0);
        r = num.lo;
    } else if (dp_lt128(num, dp_u128(2 * g->b))) {
        a = dp_u128(1);
        r = num.lo - g->b;
    } else if (num.hi == 0) {
        a = dp_u128(num.lo / g->b);
        r = num.lo % g->b;
    } else {
        a = dp_divmod128(num, g->b, &r);
    }
    if (!dp_is_zero128(a)) {
        const int x = dp_exp_half_square(bits, a);
        if (x <= 0) return x;
        if (r != 0) {
            for (DpU128 i = dp_u128(0); dp_lt128(i, a); i = dp_add128(i, dp_u128(1))) {
                const int e = dp_exp_u64(bits, r, g->b);
                if (e <= 0) return e;
            }
        }
    }
    if (r == 0) return 1;
    return dp_exp_product(bits, r, g->b, r, 2 * g->b);
}

DP_FN int dp_dgauss_draw(DpBits* bits, const DpDGauss* g, i64* out) {
    if (g->cells) return dp_cells_draw(bits, g, out);
    for (;;) {
        i64 y;
        DP_TRY(dp_dlap_draw(bits, &g->lap, &y));
        const int ok = dp_dgauss_accept(bits, g, y);
        if (ok < 0) return ok;
        if (ok == 1) {
            *out = y;
            return 0;
        }
    }
}

// Element `element` of the draw (key, stream) of N_Z(0, (s/q)²): DiscreteGaussian::sample_at.
DP_FN int dp_dgauss_sample_at(const DpKey* key, u64 stream, u64 element, const DpDGauss* g,
                              i64* out) {
    DpBits bits;
    dp_bits_init(&bits, key, stream, element);
    return dp_dgauss_draw(&bits, g, out);
}
