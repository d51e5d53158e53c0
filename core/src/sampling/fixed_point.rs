//! Unsigned fixed-point arithmetic in `Q127` (`v` stands for `v / 2^127`, so `1` is
//! `2^127`) for the constant-time sampler (`constant_time_gaussian`): a 256-bit product,
//! `e^{−y}` by a fixed-length Horner scheme and squarings, and two divisions used only
//! while setting a sampler up (on public parameters).
//!
//! **Guarantee (error bounds, in units of `2^−127`).** [`mul`] rounds down (error in
//! `(−1, 0]`). [`exp_neg`]`::<N>(y, k)` for `y ≤ 1/4` returns `e^{−2^k·y}` within
//! `2^k·(3 + T) + 2^k − 1` of the true value, where `T = y^N/N!·2^127` bounds the truncation
//! of the series: the Horner value is within `3` of the truncated series (each step
//! `t_j = c_j − y·t_{j+1}` adds under `2`, the rounded coefficient and the rounded product,
//! and damps the previous error by `y ≤ 1/4`), which is within `T` of `e^{−y}` (alternating
//! series), and each squaring at most doubles an error and adds one rounding. An error of
//! `e` units in `y` itself adds `2^k·e` (the derivative of `e^{−y}` is at most `1`).
//!
//! **Timing.** [`mul`], [`mul_shr`] and [`exp_neg`] run the same instructions whatever the
//! values (fixed loop lengths; shifts by public amounts; 64-bit multiplications, constant-
//! time on the CPUs this crate targets). [`div_pow2`] and [`div_wide`] branch on their
//! operands and are used only on public parameters.

/// `1` in `Q127`.
pub(crate) const ONE: u128 = 1 << 127;

/// `⌊2^127 / j!⌋` for `j = 0 … 23`: the Taylor coefficients of `e^{−y}`.
const INV_FACT: [u128; 24] = {
    let mut c = [0u128; 24];
    let mut fact = 1u128; // j! < 2^79 for j ≤ 23
    let mut j = 0;
    while j < 24 {
        if j > 0 {
            fact *= j as u128;
        }
        c[j] = if j == 0 { ONE } else { ONE / fact };
        j += 1;
    }
    c
};

/// The 256-bit product `a·b` as `(high, low)` 128-bit halves.
#[inline(always)]
pub(crate) fn mul_wide(a: u128, b: u128) -> (u128, u128) {
    const M: u128 = u64::MAX as u128;
    let (a1, a0) = (a >> 64, a & M);
    let (b1, b0) = (b >> 64, b & M);
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    // The middle column: at most 3·(2^64 − 1), no overflow in u128.
    let mid = (p00 >> 64) + (p01 & M) + (p10 & M);
    let low = (mid << 64) | (p00 & M);
    let high = p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
    (high, low)
}

/// `⌊a·b / 2^127⌋` for `a, b ≤ 2^127` (the `Q127` product, rounded down).
#[inline(always)]
pub(crate) fn mul(a: u128, b: u128) -> u128 {
    let (h, l) = mul_wide(a, b);
    (h << 1) | (l >> 127)
}

/// `⌊a·b / 2^sh⌋` for `1 ≤ sh ≤ 255` (public) when the result fits in 128 bits.
#[inline(always)]
pub(crate) fn mul_shr(a: u128, b: u128, sh: u32) -> u128 {
    debug_assert!((1..=255).contains(&sh));
    let (h, l) = mul_wide(a, b);
    if sh >= 128 { h >> (sh - 128) } else { (h << (128 - sh)) | (l >> sh) }
}

/// `e^{−2^k·y}` in `Q127` for `y ≤ 1/4` in `Q127`, from the first `N ≤ 24` terms of the
/// Taylor series at `y` (module docs for the error).
#[inline(always)]
pub(crate) fn exp_neg<const N: usize>(y: u128, k: u32) -> u128 {
    debug_assert!(y <= ONE >> 2 && (1..=24).contains(&N));
    // Horner on the coefficients: t_j = 1/j! − y·t_{j+1}, each in [0, 1/j!].
    let mut t = INV_FACT[N - 1];
    let mut j = N - 1;
    while j >= 1 {
        j -= 1;
        t = INV_FACT[j] - mul(y, t);
    }
    for _ in 0..k {
        t = mul(t, t);
    }
    t
}

/// `⌊2^e / d⌋` for `d ≥ 1` when the quotient fits in 128 bits (setup only: branches on
/// its operands).
pub(crate) fn div_pow2(e: u32, d: u128) -> u128 {
    debug_assert!((1..ONE).contains(&d));
    let (mut q, mut r) = (0u128, 0u128);
    for bit in (0..=e).rev() {
        r = (r << 1) | u128::from(bit == e);
        if r >= d {
            r -= d;
            if bit < 128 {
                q |= 1 << bit;
            }
        }
    }
    q
}

/// `⌊a·2^128 / d⌋` for `a < d < 2^127` (setup only: branches on its operands).
pub(crate) fn div_wide(a: u128, d: u128) -> u128 {
    debug_assert!(a < d && d < ONE);
    let (mut q, mut r) = (0u128, a);
    for bit in (0..128).rev() {
        r <<= 1;
        if r >= d {
            r -= d;
            q |= 1 << bit;
        }
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `⌊e^{−y/2^127}·2^127⌋` and `⌊e^{−2^k·y/2^127}·2^127⌋`, from Python's `decimal` at
    /// 90 significant digits (an independent reference).
    const EXP_REF: [(u128, u32, u128); 10] = [
        (0, 0, 0x8000_0000_0000_0000_0000_0000_0000_0000),
        (1, 0, 0x7fff_ffff_ffff_ffff_ffff_ffff_ffff_ffff),
        (1 << 64, 0, 0x7fff_ffff_ffff_ffff_0000_0000_0000_0000),
        (1 << 120, 0, 0x7f00_ff55_aa88_93e5_ff2f_c4cc_a622_10b7),
        ((1 << 125) - 12345, 0, 0x63af_be7a_b208_2ba1_a0ae_5e4e_b1b4_9f6a),
        (3 << 123, 0, 0x6a1d_a04b_021d_ef01_64ee_c829_15df_2e0f),
        (0x0246_8acf_1357_9bde_0224_4668_8aac_cef1, 0, 0x7dbe_9afa_46a6_df34_1f71_d94c_f643_1deb),
        (1 << 125, 4, 0x0258_2ab7_0427_9e8e_fd15_e026_5855_c47a),
        ((1 << 124) + 999, 9, 0x0006_5a75_1cc8),
        (0x0091_a2b3_c4d5_e6f7_8089_119a_22ab_33bc, 9, 0x0d26_9408_806c_5a47_303b_7b8e_c4d1_654f),
    ];

    #[test]
    fn exp_neg_is_within_its_bound_of_the_decimal_reference() {
        for (y, k, want) in EXP_REF {
            // 2^k·(3 + T) + 2^k − 1 with T < 1 for y ≤ 1/4 and 24 terms.
            let bound = (1u128 << k) * 4 + (1 << k);
            let got = exp_neg::<24>(y, k);
            assert!(got.abs_diff(want) <= bound, "y = {y:#x}, k = {k}: {got:#x} vs {want:#x}");
        }
        // Power: the same comparison fails for a neighbouring argument.
        let (y, _, want) = EXP_REF[3];
        assert!(exp_neg::<24>(y + (1 << 110), 0).abs_diff(want) > 1 << 100);
        // 15 terms, as the constant-time sampler's acceptance uses them: y ≤ 2^−6.
        let (y, k) = (0x0246_8acf_1357_9bde_0224_4668_8aac_cef1, 0);
        let want = EXP_REF[6].2;
        assert!(exp_neg::<15>(y, k).abs_diff(want) <= 4);
        // Too few terms is visible: 10 terms at y = 1/4 miss by about 2^4·(1/4)^10/10! = 2^−37.8.
        assert!(exp_neg::<10>(1 << 125, 4).abs_diff(EXP_REF[7].2) > 1 << 80);
    }

    #[test]
    fn mul_wide_matches_schoolbook_on_extremes() {
        let m = u128::MAX;
        // (2^128 − 1)² = 2^256 − 2^129 + 1.
        assert_eq!(mul_wide(m, m), (m - 1, 1));
        assert_eq!(mul_wide(1 << 127, 2), (1, 0));
        assert_eq!(mul(ONE, ONE), ONE);
        assert_eq!(mul(ONE >> 1, ONE >> 1), ONE >> 2);
        assert_eq!(mul_shr(3 << 100, 5 << 100, 200), 15);
        assert_eq!(mul_shr(u128::MAX, 2, 1), u128::MAX);
    }

    #[test]
    fn setup_divisions() {
        assert_eq!(div_pow2(127, 3), ONE / 3);
        assert_eq!(div_pow2(190, 1 << 63), 1 << 127);
        // ⌊2^200 / (2^80 + 1)⌋ = 2^120 − 2^40 + ⌊2^0 − 1/(2^80+1)⌋ = 2^120 − 2^40.
        assert_eq!(div_pow2(200, (1 << 80) + 1), (1 << 120) - (1 << 40));
        assert_eq!(div_wide(1, 2), 1 << 127);
        assert_eq!(div_wide(1, 3), u128::MAX / 3);
        assert_eq!(div_wide(2, 3), u128::MAX / 3 * 2);
    }
}
