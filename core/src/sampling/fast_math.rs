//! Branch-free `ln u` and `sin/cos 2πu` for `u ∈ (0, 1]`, the transcendental kernels of the
//! continuous samplers.
//!
//! **Guarantee.** The polynomials are fdlibm's (as in `libm`'s `log`, `__sin`, `__cos`);
//! what differs is that the inputs are restricted to the uniform grid, so the special cases
//! (zero, negatives, subnormals, infinities, Payne–Hanek reduction) cannot occur and every
//! branch is gone: the loops vectorise. Range reduction for `2πu` is exact in `u`-space
//! (`r = u − q/4` is exact), so the only error is the final `r · 2π` rounding plus the kernel
//! error: both functions stay within 2 ulp of `libm` on the grid (tested). The code uses only
//! `+ − × ÷`, integer bit operations and the IEEE conversions, so a CUDA port compiled with
//! FMA contraction off (`--fmad=false`) reproduces it bit for bit.
//!
//! No paper section: an implementation detail of `docs/RANDOMNESS.md` §3.

// The constants are fdlibm's, digit for digit as published, so a port can be diffed.
#![allow(clippy::excessive_precision)]

const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
const LG1: f64 = 6.666_666_666_666_735_130e-1;
const LG2: f64 = 3.999_999_999_940_941_908e-1;
const LG3: f64 = 2.857_142_874_366_239_149e-1;
const LG4: f64 = 2.222_219_843_214_978_396e-1;
const LG5: f64 = 1.818_357_216_161_805_012e-1;
const LG6: f64 = 1.531_383_769_920_937_332e-1;
const LG7: f64 = 1.479_819_860_511_658_591e-1;

const S1: f64 = -1.666_666_666_666_663_243_48e-1;
const S2: f64 = 8.333_333_333_322_489_461_24e-3;
const S3: f64 = -1.984_126_982_985_794_931_34e-4;
const S4: f64 = 2.755_731_370_707_006_767_89e-6;
const S5: f64 = -2.505_076_025_340_686_341_95e-8;
const S6: f64 = 1.589_690_995_211_550_102_21e-10;

const C1: f64 = 4.166_666_666_666_660_190_37e-2;
const C2: f64 = -1.388_888_888_887_410_957_49e-3;
const C3: f64 = 2.480_158_728_947_672_941_78e-5;
const C4: f64 = -2.755_731_435_139_066_330_35e-7;
const C5: f64 = 2.087_572_321_298_174_827_90e-9;
const C6: f64 = -1.135_964_755_778_819_482_65e-11;

/// `ln u` for a normal `u ∈ (0, 1]` (fdlibm `log` without its special cases).
#[inline(always)]
pub(crate) fn ln_unit(u: f64) -> f64 {
    let ui = u.to_bits();
    // Reduce u = 2^k · x with x ∈ [√2/2, √2).
    let hx = ((ui >> 32) as u32).wrapping_add(0x3ff0_0000 - 0x3fe6_a09e);
    let k = ((hx >> 20) as i32) - 0x3ff;
    let hx = (hx & 0x000f_ffff) + 0x3fe6_a09e;
    let x = f64::from_bits((u64::from(hx) << 32) | (ui & 0xffff_ffff));
    let f = x - 1.0;
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    let r = t2 + t1;
    let dk = f64::from(k);
    s * (hfsq + r) + dk * LN2_LO - hfsq + f + dk * LN2_HI
}

/// `(sin 2πu, cos 2πu)` for `u = m · 2^-bits` with `1 ≤ m ≤ 2^bits`, `3 ≤ bits ≤ 53`.
///
/// The quadrant `q = round(4u)` and the remainder `m − q · 2^(bits−2)` are computed in
/// integers, so the reduced argument `x = 2π(u − q/4) ∈ [−π/4, π/4]` carries one rounding.
#[inline(always)]
pub(crate) fn sincos_2pi(m: u64, bits: u32) -> (f64, f64) {
    let q4 = (m + (1 << (bits - 3))) >> (bits - 2);
    let rem = m as i64 - (q4 << (bits - 2)) as i64;
    // 2π · 2^-bits is exact (a power-of-two scaling of the rounded 2π).
    let x = rem as f64 * (core::f64::consts::TAU * f64::from_bits((1023 - u64::from(bits)) << 52));
    let z = x * x;
    let w = z * z;
    let rs = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6);
    let sin = x + z * x * (S1 + z * rs);
    let rc = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6));
    let hz = 0.5 * z;
    let one_minus = 1.0 - hz;
    let cos = one_minus + (((1.0 - one_minus) - hz) + z * rc);
    // sin(x + qπ/2), cos(x + qπ/2): odd q swaps (sin, cos) → (cos, −sin); q ≥ 2 negates both.
    let swap = q4 & 1 == 1;
    let (a, b) = if swap { (cos, -sin) } else { (sin, cos) };
    let flip = ((q4 >> 1) & 1) << 63;
    (f64::from_bits(a.to_bits() ^ flip), f64::from_bits(b.to_bits() ^ flip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f64, b: f64) -> u64 {
        if a == b {
            return 0;
        }
        let spacing = f64::from_bits(b.abs().to_bits() + 1) - b.abs();
        ((a - b).abs() / spacing).ceil() as u64
    }

    /// Grid points (k + 1)·2^-53 spread over every binade and both ends.
    fn grid() -> impl Iterator<Item = f64> {
        grid_ints().map(|m| m as f64 * (1.0 / (1u64 << 53) as f64))
    }

    fn grid_ints() -> impl Iterator<Item = u64> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..200_000u64)
            .map(move |i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = match i % 4 {
                    0 => x >> 11,
                    1 => (x >> 11) >> (x % 53),
                    2 => (1u64 << 53) - 1 - ((x >> 11) >> (x % 53)),
                    _ => i,
                };
                k + 1
            })
            .chain([1 << 53, 1 << 52, 1 << 51, 3 << 51, 1 << 50, 1, (1 << 50) + 1, (1 << 50) - 1])
    }

    #[test]
    fn ln_is_within_one_ulp_of_libm() {
        for u in grid() {
            let (a, b) = (ln_unit(u), libm::log(u));
            assert!(ulps(a, b) <= 1, "ln({u:e}) = {a:e}, libm {b:e}");
        }
        assert_eq!(ln_unit(1.0), 0.0);
    }

    #[test]
    fn sincos_kernels_are_within_two_ulp_and_quadrants_match_libm() {
        for m in grid_ints() {
            let u = m as f64 * (1.0 / (1u64 << 53) as f64);
            let (s, c) = sincos_2pi(m, 53);
            // Kernel accuracy: against libm on the exactly reduced argument.
            let q4 = (4.0 * u).round();
            let r = u - 0.25 * q4;
            let (ks, kc) = libm::sincos(core::f64::consts::TAU * r);
            let (es, ec) = match (q4 as i64) & 3 {
                0 => (ks, kc),
                1 => (kc, -ks),
                2 => (-ks, -kc),
                _ => (-kc, ks),
            };
            assert!(
                ulps(s, es) <= 2 && ulps(c, ec) <= 2,
                "u = {u:e}: ({s:e}, {c:e}) vs ({es:e}, {ec:e})"
            );
            // Quadrant logic: against libm on the unreduced argument, whose own rounding of
            // 2πu costs up to ~7e-16 absolute.
            let (ls, lc) = libm::sincos(core::f64::consts::TAU * u);
            assert!((s - ls).abs() < 1e-15 && (c - lc).abs() < 1e-15, "u = {u:e}");
        }
        assert_eq!(sincos_2pi(1 << 53, 53), (0.0, 1.0));
        assert_eq!(sincos_2pi(1 << 51, 53), (1.0, -0.0));
        assert_eq!(sincos_2pi(1 << 52, 53), (-0.0, -1.0));
        // The 24-bit grid of the f32 samplers.
        for m in [1u64, 12345, 1 << 22, (1 << 23) + 7, 1 << 24] {
            let (s, c) = sincos_2pi(m, 24);
            let (s53, c53) = sincos_2pi(m << 29, 53);
            assert_eq!((s, c), (s53, c53));
        }
    }
}
