//! Validated privacy parameters.
//!
//! Mechanisms take these types rather than raw `f64`s, so a NaN, negative or infinite
//! budget is rejected once, at construction, with an [`Error::OutOfRange`] naming the
//! parameter; a mechanism can never be called with one.

use crate::error::{Error, Result};

/// A privacy loss ε: finite and `> 0`.
///
/// ```
/// use dpattn_core::Epsilon;
/// assert_eq!(Epsilon::new(0.5)?.get(), 0.5);
/// assert!(Epsilon::new(0.0).is_err());
/// assert!(Epsilon::new(f64::NAN).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Epsilon(f64);

impl Epsilon {
    /// Validates `epsilon`.
    pub fn new(epsilon: f64) -> Result<Self> {
        if epsilon.is_finite() && epsilon > 0.0 {
            Ok(Self(epsilon))
        } else {
            Err(Error::OutOfRange { name: "epsilon", value: epsilon, allowed: "(0, inf), finite" })
        }
    }

    /// The value.
    #[inline]
    pub fn get(self) -> f64 {
        self.0
    }
}

/// A failure probability δ: `0 <= δ < 1`.
///
/// ```
/// use dpattn_core::Delta;
/// assert_eq!(Delta::new(1e-5)?.get(), 1e-5);
/// assert_eq!(Delta::ZERO.get(), 0.0);
/// assert!(Delta::new(1.0).is_err());
/// assert!(Delta::new(-1e-9).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Delta(f64);

impl Delta {
    /// δ = 0 (pure differential privacy).
    pub const ZERO: Delta = Delta(0.0);

    /// Validates `delta`.
    pub fn new(delta: f64) -> Result<Self> {
        // `(0.0..1.0).contains` is false for NaN.
        if (0.0..1.0).contains(&delta) {
            Ok(Self(delta))
        } else {
            Err(Error::OutOfRange { name: "delta", value: delta, allowed: "[0, 1)" })
        }
    }

    /// Validates `delta` and also requires `delta > 0` (mechanisms such as the Gaussian
    /// mechanism have no pure-DP version).
    pub fn new_positive(delta: f64) -> Result<Self> {
        if delta > 0.0 && delta < 1.0 {
            Ok(Self(delta))
        } else {
            Err(Error::OutOfRange { name: "delta", value: delta, allowed: "(0, 1)" })
        }
    }

    /// The value.
    #[inline]
    pub fn get(self) -> f64 {
        self.0
    }
}

/// A sensitivity Δ (L1 or L2, as the mechanism states): finite and `> 0`.
///
/// ```
/// use dpattn_core::Sensitivity;
/// assert_eq!(Sensitivity::new(2.0)?.get(), 2.0);
/// assert!(Sensitivity::new(-2.0).is_err());
/// assert!(Sensitivity::new(f64::INFINITY).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Sensitivity(f64);

impl Sensitivity {
    /// Validates `sensitivity`.
    pub fn new(sensitivity: f64) -> Result<Self> {
        if sensitivity.is_finite() && sensitivity > 0.0 {
            Ok(Self(sensitivity))
        } else {
            Err(Error::OutOfRange {
                name: "sensitivity",
                value: sensitivity,
                allowed: "(0, inf), finite",
            })
        }
    }

    /// The value.
    #[inline]
    pub fn get(self) -> f64 {
        self.0
    }
}

/// An (ε, δ) pair.
///
/// ```
/// use dpattn_core::PrivacyBudget;
/// let b = PrivacyBudget::new(1.0, 1e-5)?;
/// assert_eq!((b.epsilon().get(), b.delta().get()), (1.0, 1e-5));
/// assert!(PrivacyBudget::new(1.0, f64::NAN).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrivacyBudget {
    epsilon: Epsilon,
    delta: Delta,
}

impl PrivacyBudget {
    /// Validates both parameters (ε first).
    pub fn new(epsilon: f64, delta: f64) -> Result<Self> {
        Ok(Self { epsilon: Epsilon::new(epsilon)?, delta: Delta::new(delta)? })
    }

    /// From already validated parts.
    pub fn from_parts(epsilon: Epsilon, delta: Delta) -> Self {
        Self { epsilon, delta }
    }

    /// ε.
    #[inline]
    pub fn epsilon(&self) -> Epsilon {
        self.epsilon
    }

    /// δ.
    #[inline]
    pub fn delta(&self) -> Delta {
        self.delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_every_non_finite_or_out_of_domain_value() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 0.0, -0.0] {
            assert!(Epsilon::new(bad).is_err(), "epsilon {bad}");
            assert!(Sensitivity::new(bad).is_err(), "sensitivity {bad}");
        }
        for bad in [f64::NAN, f64::INFINITY, -1e-300, 1.0, 1.5] {
            assert!(Delta::new(bad).is_err(), "delta {bad}");
        }
        assert!(Delta::new(0.0).is_ok());
        assert!(Delta::new_positive(0.0).is_err());
        assert!(Delta::new_positive(f64::NAN).is_err());
        assert!(Epsilon::new(f64::MIN_POSITIVE).is_ok());
        assert!(Delta::new(1.0 - f64::EPSILON).is_ok());
    }

    #[test]
    fn errors_name_the_parameter() {
        assert_eq!(
            PrivacyBudget::new(1.0, 2.0),
            Err(Error::OutOfRange { name: "delta", value: 2.0, allowed: "[0, 1)" })
        );
        assert!(matches!(
            PrivacyBudget::new(-1.0, 2.0),
            Err(Error::OutOfRange { name: "epsilon", .. })
        ));
    }
}
