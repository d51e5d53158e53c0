//! Element types a view can hold: `f32`, `f64`, and the 16-bit floats `half::f16` and
//! `half::bf16`, which are read by widening to `f32` (every f16/bf16 value is exactly
//! representable in `f32`, so widening loses nothing).

use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A floating-point element of a matrix view.
///
/// Sealed: implemented for `f32`, `f64`, [`half::f16`] and [`half::bf16`] only.
///
/// ```
/// use dpattn_core::Element;
/// assert_eq!(half::bf16::from_f32(1.5).to_f32(), 1.5);
/// assert_eq!(<half::f16 as Element>::NAME, "f16");
/// ```
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    /// Short type name, as used in error messages and the C ABI (`"f32"`, `"bf16"`, ...).
    const NAME: &'static str;
    /// The largest finite value of the type, as `f64`.
    const MAX: f64;
    /// The value widened (or, for `f64`, rounded) to `f32`.
    fn to_f32(self) -> f32;
    /// The value widened to `f64` (exact for every element type).
    fn to_f64(self) -> f64;
    /// `true` unless the value is NaN or ±infinity.
    fn is_finite(self) -> bool;
    /// An `f32` converted to this type: exact for `f32`/`f64`, rounded to nearest (ties to
    /// even) for `f16`/`bf16`; values beyond the type's range become ±infinity.
    fn from_f32(x: f32) -> Self;
    /// An `f64` converted to this type: exact for `f64`, rounded to nearest (ties to even)
    /// otherwise; values beyond the type's range become ±infinity.
    fn from_f64(x: f64) -> Self;
    /// `s` itself when `Self` is `f32` (kernels with an `f32` fast path use it), else `None`.
    #[inline(always)]
    fn as_f32_slice(s: &[Self]) -> Option<&[f32]> {
        let _ = s;
        None
    }
}

impl Element for f32 {
    const NAME: &'static str = "f32";
    const MAX: f64 = f32::MAX as f64;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn as_f32_slice(s: &[Self]) -> Option<&[f32]> {
        Some(s)
    }
}

impl Element for f64 {
    const NAME: &'static str = "f64";
    const MAX: f64 = f64::MAX;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        f64::from(x)
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x
    }
}

impl Element for f16 {
    const NAME: &'static str = "f16";
    const MAX: f64 = 65504.0;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f16::is_finite(self)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
}

impl Element for bf16 {
    const NAME: &'static str = "bf16";
    const MAX: f64 = bf16::MAX.to_f64_const();
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        bf16::is_finite(self)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_is_exact_for_half_types() {
        // Every f16 bit pattern that is finite widens exactly: round trip through f32.
        for bits in 0..=u16::MAX {
            let h = f16::from_bits(bits);
            if Element::is_finite(h) {
                assert_eq!(f16::from_f32(Element::to_f32(h)).to_bits(), bits);
                assert_eq!(Element::to_f64(h), f64::from(Element::to_f32(h)));
            }
            let b = bf16::from_bits(bits);
            if Element::is_finite(b) {
                assert_eq!(bf16::from_f32(Element::to_f32(b)).to_bits(), bits);
            }
        }
    }

    #[test]
    fn finiteness() {
        assert!(!Element::is_finite(f32::NAN));
        assert!(!Element::is_finite(f64::INFINITY));
        assert!(!Element::is_finite(f16::NEG_INFINITY));
        assert!(!Element::is_finite(bf16::NAN));
        assert!(Element::is_finite(bf16::MAX));
    }
}
