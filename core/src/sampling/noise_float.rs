//! The two output precisions of the continuous samplers and how each turns stream words
//! into a uniform variate.
//!
//! **Guarantee.** [`NoiseFloat::open_uniform`] returns `(k + 1) · 2^-p` for a `p`-bit integer
//! `k` taken from the top bits of its words: `p = 53` for `f64` (two words, `k` = the top 53
//! bits of `w0 | w1 << 32`) and `p = 24` for `f32` (one word, `k = w0 >> 8`). Every one of
//! the `2^p` values is equally likely and exactly representable, so the variate lies in
//! `(0, 1]`: it is never 0 (logarithms stay finite) and equals 1 with probability `2^-p`.
//! The lowest bit of `w0` is not part of `k`; samplers use it as an independent sign bit.
//!
//! No paper section: part of the randomness contract in `docs/RANDOMNESS.md`.

/// `f32` or `f64`: the output types of the continuous samplers.
///
/// Both precisions compute in `f64` (with the branch-free kernels of `fast_math.rs`) and
/// round once at the end, so an `f32` output is the correctly rounded `f64` value up to the
/// kernels' 2 ulp; `f32` only saves words (24-bit uniforms).
pub trait NoiseFloat: Copy + PartialOrd + core::fmt::Debug + sealed::Sealed + 'static {
    /// Stream words one uniform variate consumes (2 for `f64`, 1 for `f32`).
    const UNIFORM_WORDS: u32;
    /// Random bits in one uniform variate (53 or 24).
    const UNIFORM_BITS: u32;
    /// The largest finite value of this type, as an `f64`.
    const MAX_FINITE: f64;

    /// The uniform variate in `(0, 1]` made from `words[..UNIFORM_WORDS]`, as an `f64`
    /// (exact for both precisions).
    ///
    /// ```
    /// use dpattn_core::sampling::NoiseFloat;
    /// assert_eq!(f32::open_uniform(&[0]), 2f64.powi(-24));
    /// assert_eq!(f32::open_uniform(&[u32::MAX]), 1.0);
    /// assert_eq!(f64::open_uniform(&[0, 0]), 2f64.powi(-53));
    /// ```
    fn open_uniform(words: &[u32]) -> f64 {
        Self::uniform_int(words) as f64
            * f64::from_bits((1023 - u64::from(Self::UNIFORM_BITS)) << 52)
    }

    /// The integer `k + 1 ∈ [1, 2^UNIFORM_BITS]` behind [`open_uniform`](Self::open_uniform).
    fn uniform_int(words: &[u32]) -> u64;

    /// The sign bit of a group: the lowest bit of its first word (not used by the uniform).
    fn sign_bit(words: &[u32]) -> bool {
        words[0] & 1 == 1
    }

    /// Rounds an `f64` to this type (to nearest).
    fn from_f64(x: f64) -> Self;
    /// Rounds an `f64` to this type toward zero (for values that must not grow in magnitude).
    fn from_f64_toward_zero(x: f64) -> Self;
    /// Widens to `f64` (exact).
    fn to_f64(self) -> f64;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

impl NoiseFloat for f64 {
    const UNIFORM_WORDS: u32 = 2;
    const UNIFORM_BITS: u32 = 53;
    const MAX_FINITE: f64 = f64::MAX;

    #[inline(always)]
    fn uniform_int(words: &[u32]) -> u64 {
        ((u64::from(words[0]) | (u64::from(words[1]) << 32)) >> 11) + 1
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn from_f64_toward_zero(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
}

impl NoiseFloat for f32 {
    const UNIFORM_WORDS: u32 = 1;
    const UNIFORM_BITS: u32 = 24;
    const MAX_FINITE: f64 = f32::MAX as f64;

    #[inline(always)]
    fn uniform_int(words: &[u32]) -> u64 {
        u64::from(words[0] >> 8) + 1
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn from_f64_toward_zero(x: f64) -> Self {
        let r = x as f32;
        if f64::from(r).abs() > x.abs() {
            if r > 0.0 { r.next_down() } else { r.next_up() }
        } else {
            r
        }
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

/// `-ln u` for a uniform variate.
#[inline(always)]
pub(crate) fn neg_ln(u: f64) -> f64 {
    -crate::sampling::fast_math::ln_unit(u)
}

/// Relative margin on the largest draws below, for the kernels' rounding (a few ulps).
const DRAW_MARGIN: f64 = 1.0 + 1.0 / (1u64 << 40) as f64;

/// An upper bound on `-ln u` over the uniform variates of `T`: `UNIFORM_BITS · ln 2`
/// (at `u = 2^-UNIFORM_BITS`; 36.74 for `f64`, 16.64 for `f32`), with the margin.
pub(crate) fn max_neg_ln<T: NoiseFloat>() -> f64 {
    f64::from(T::UNIFORM_BITS) * core::f64::consts::LN_2 * DRAW_MARGIN
}

/// An upper bound on `|r cos 2πu₂|`, `|r sin 2πu₂|` of the Box–Muller draw of `T`:
/// `√(2 · UNIFORM_BITS · ln 2)` (8.572 for `f64`, 5.768 for `f32`), with the margin.
pub(crate) fn max_box_muller<T: NoiseFloat>() -> f64 {
    libm::sqrt(2.0 * f64::from(T::UNIFORM_BITS) * core::f64::consts::LN_2) * DRAW_MARGIN
}

/// Refuses a scale whose largest output, `largest` (computed in `f64`), is not finite in
/// `T`: the draw would otherwise return `±∞` for the largest uniforms.
pub(crate) fn check_finite_draws<T: NoiseFloat>(
    name: &'static str,
    scale: f64,
    largest: f64,
) -> crate::error::Result<()> {
    let allowed = if T::UNIFORM_BITS == 53 {
        "small enough that the largest draw is finite in f64"
    } else {
        "small enough that the largest draw is finite in f32 (use f64 output)"
    };
    check_largest(name, scale, largest, T::MAX_FINITE, allowed)
}

/// Refuses a noise scale (`value`, named `name`) when the largest value a release can
/// produce, `largest` (noise magnitude plus the largest public bound on the data), exceeds
/// `max` (the largest finite value of the type it is computed or stored in; NaN refused).
/// The mechanisms' unsafe float paths call it before anything is charged, so a huge but
/// finite scale is a clear error instead of `±∞` outputs with an `Ok` status.
pub(crate) fn check_largest(
    name: &'static str,
    value: f64,
    largest: f64,
    max: f64,
    allowed: &'static str,
) -> crate::error::Result<()> {
    if largest <= max {
        Ok(())
    } else {
        Err(crate::error::Error::OutOfRange { name, value, allowed })
    }
}

/// Box–Muller: `r = sqrt(-2 ln u1)`, `(r cos 2πu2, r sin 2πu2)` with `u2 = m2 · 2^-bits`.
#[inline(always)]
pub(crate) fn box_muller(u1: f64, m2: u64, bits: u32) -> (f64, f64) {
    let r = libm::sqrt(-2.0 * crate::sampling::fast_math::ln_unit(u1));
    let (s, c) = crate::sampling::fast_math::sincos_2pi(m2, bits);
    (r * c, r * s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_f64_uses_the_top_53_bits_and_is_never_zero() {
        assert_eq!(f64::open_uniform(&[0, 0]), 2f64.powi(-53));
        assert_eq!(f64::open_uniform(&[u32::MAX, u32::MAX]), 1.0);
        // Bits 0..11 of w0 do not matter; bit 11 is the lowest bit of k.
        assert_eq!(f64::open_uniform(&[0x7ff, 0]), 2f64.powi(-53));
        assert_eq!(f64::open_uniform(&[0x800, 0]), 2.0 * 2f64.powi(-53));
        assert_eq!(f64::open_uniform(&[0, 0x8000_0000]), 0.5 + 2f64.powi(-53));
    }

    #[test]
    fn uniform_f32_uses_the_top_24_bits() {
        assert_eq!(f32::open_uniform(&[0xff]), 2f64.powi(-24));
        assert_eq!(f32::open_uniform(&[0x100]), 2.0 * 2f64.powi(-24));
        assert_eq!(f32::open_uniform(&[0x8000_0000]), 0.5 + 2f64.powi(-24));
    }

    #[test]
    fn box_muller_matches_the_formula() {
        let (a, b) = box_muller(0.25, 1 << 50, 53);
        let r = (-2.0 * 0.25f64.ln()).sqrt();
        assert!((a - r * (core::f64::consts::FRAC_PI_4).cos()).abs() < 1e-15);
        assert!((b - r * (core::f64::consts::FRAC_PI_4).sin()).abs() < 1e-15);
        assert_eq!(box_muller(1.0, 12345, 24), (0.0, 0.0));
    }
}
