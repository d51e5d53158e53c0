//! The one error type of `dpattn-core`.
//!
//! Every fallible routine in the crate returns [`Result<T>`](crate::Result). User input —
//! shapes, strides, buffer lengths, floating-point values, privacy parameters, scratch
//! sizes — is validated and reported through [`Error`]; no routine panics on it. A panic in
//! this crate is a bug.

use core::fmt;

/// What went wrong, with enough context to fix the call.
///
/// The enum is `#[non_exhaustive]`: later mechanisms may add variants, and the C ABI maps
/// each variant to a stable status code. `PartialEq` compares the `f64` fields with `==`,
/// so an error that carries a NaN value is not equal to itself; match on the variant
/// (`matches!`) in that case.
///
/// ```
/// use dpattn_core::Error;
/// let e = Error::ScratchTooSmall { needed: 64, got: 10 };
/// assert_eq!(e.to_string(), "scratch buffer too small: needed 64 elements, got 10");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// An argument's extent along one axis does not match what the call requires.
    ShapeMismatch {
        /// The argument, e.g. `"k"`.
        arg: &'static str,
        /// The axis or quantity, e.g. `"dim"` or `"batch"`.
        axis: &'static str,
        /// The extent the call requires.
        expected: usize,
        /// The extent that was passed.
        got: usize,
    },
    /// A buffer is shorter than its shape and strides require.
    BufferTooShort {
        /// The argument whose buffer is too short.
        arg: &'static str,
        /// Elements required (largest addressed offset + 1).
        needed: usize,
        /// Elements in the buffer.
        got: usize,
    },
    /// A NaN or infinity in an input.
    NonFinite {
        /// The argument holding the value.
        arg: &'static str,
        /// Logical index of the first non-finite value, counted in row-major order over the
        /// argument's logical shape (not its memory offset).
        index: usize,
    },
    /// A scalar parameter outside its domain (this includes zero sizes where a size must be
    /// positive, and strides that would alias output elements).
    OutOfRange {
        /// The parameter, e.g. `"epsilon"`.
        name: &'static str,
        /// The value that was passed (integers are shown as `f64`).
        value: f64,
        /// The allowed set, in interval notation, e.g. `"(0, inf)"`.
        allowed: &'static str,
    },
    /// Caller-provided scratch is smaller than the routine's `*_scratch_len` says.
    ScratchTooSmall {
        /// Elements required.
        needed: usize,
        /// Elements provided.
        got: usize,
    },
    /// A size computed from the inputs (an element count, an offset, a byte count) does
    /// not fit in `usize`.
    SizeOverflow {
        /// What was being computed.
        what: &'static str,
    },
    /// A convenience wrapper (feature `alloc`) could not allocate its output or scratch.
    AllocationFailed {
        /// What was being allocated.
        what: &'static str,
        /// Elements requested.
        elements: usize,
    },
    /// The requested privacy guarantee cannot be met with these parameters: the named
    /// condition `lhs < rhs` (or the relation stated in `condition`) fails.
    Infeasible {
        /// The condition that must hold, as written in the spec, e.g. `"2αβ√n/η < Δ"`.
        condition: &'static str,
        /// Value of the condition's left-hand side.
        lhs: f64,
        /// Value of the condition's right-hand side.
        rhs: f64,
    },
    /// An exact (rejection) sampler used up the whole window of the keyed noise stream
    /// reserved for one element (see `docs/RANDOMNESS.md`). The probability of this is
    /// below 2^-1000 for every sampler in the crate; it is reported rather than silently
    /// reading another element's randomness.
    RandomnessExhausted {
        /// Logical index of the element whose window ran out.
        element: u64,
    },
    /// The request needs a capability this build or this CPU does not have, e.g. an AVX2
    /// kernel forced on a CPU without AVX2.
    Unsupported {
        /// What is missing.
        what: &'static str,
    },
    /// Private input lies outside the public domain the privacy guarantee is stated for
    /// (e.g. a column of `X` longer than the declared `α`), or a matrix that must be
    /// positive definite is not. **The refusal itself depends on private data**: report it
    /// only to the data holder (see `gaussian_sampling_attention`).
    DomainViolation {
        /// The condition that failed, e.g. `"max column norm ≤ α"`.
        condition: &'static str,
        /// The measured (private) value.
        measured: f64,
        /// The declared bound it was compared with.
        declared: f64,
    },
    /// A mechanism charged a ledger kept for another privacy unit: guarantees about
    /// different units cannot be added up (`accounting::privacy_unit`).
    UnitMismatch {
        /// The ledger's unit.
        ledger: &'static str,
        /// The unit the mechanism's guarantee is about.
        charge: &'static str,
    },
    /// A structure's memory estimate (computed from public parameters before anything is
    /// allocated) exceeds the limit the caller set.
    MemoryLimit {
        /// What would have been built.
        what: &'static str,
        /// Estimated bytes.
        needed_bytes: u64,
        /// The caller's limit in bytes.
        limit_bytes: u64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::ShapeMismatch { arg, axis, expected, got } => {
                write!(f, "shape mismatch: `{arg}` has {axis} = {got}, expected {expected}")
            }
            Error::BufferTooShort { arg, needed, got } => write!(
                f,
                "buffer `{arg}` too short: its shape and strides address {needed} elements, it has {got}"
            ),
            Error::NonFinite { arg, index } => {
                write!(f, "non-finite value (NaN or infinity) in `{arg}` at logical index {index}")
            }
            Error::OutOfRange { name, value, allowed } => {
                write!(f, "parameter `{name}` = {value} is out of range; allowed: {allowed}")
            }
            Error::ScratchTooSmall { needed, got } => {
                write!(f, "scratch buffer too small: needed {needed} elements, got {got}")
            }
            Error::SizeOverflow { what } => write!(f, "size overflow computing {what}"),
            Error::AllocationFailed { what, elements } => {
                write!(f, "could not allocate {elements} elements for {what}")
            }
            Error::Infeasible { condition, lhs, rhs } => write!(
                f,
                "infeasible privacy parameters: condition `{condition}` fails (left side {lhs}, right side {rhs})"
            ),
            Error::RandomnessExhausted { element } => write!(
                f,
                "the noise-stream window of element {element} is exhausted (an exact sampler needed more randomness than its window holds)"
            ),
            Error::Unsupported { what } => write!(f, "unsupported: {what}"),
            Error::DomainViolation { condition, measured, declared } => write!(
                f,
                "private input outside the declared domain: `{condition}` fails (measured {measured}, declared {declared}); this refusal depends on private data"
            ),
            Error::UnitMismatch { ledger, charge } => write!(
                f,
                "privacy unit mismatch: the ledger accounts for {ledger}, the release protects {charge}; use one ledger per unit"
            ),
            Error::MemoryLimit { what, needed_bytes, limit_bytes } => write!(
                f,
                "{what} would need an estimated {needed_bytes} bytes, over the memory limit of {limit_bytes} bytes"
            ),
        }
    }
}

impl core::error::Error for Error {}

/// `Result` with [`Error`] as the error type.
pub type Result<T> = core::result::Result<T, Error>;

/// `a * b` for sizes, or [`Error::SizeOverflow`] naming `what`.
#[inline]
pub(crate) fn mul_size(a: usize, b: usize, what: &'static str) -> Result<usize> {
    a.checked_mul(b).ok_or(Error::SizeOverflow { what })
}

/// `a + b` for sizes, or [`Error::SizeOverflow`] naming `what`.
#[inline]
pub(crate) fn add_size(a: usize, b: usize, what: &'static str) -> Result<usize> {
    a.checked_add(b).ok_or(Error::SizeOverflow { what })
}

/// `x ∈ (0, ∞)`, or [`Error::OutOfRange`] naming `name`.
#[inline]
pub(crate) fn positive_finite(name: &'static str, x: f64) -> Result<f64> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "(0, inf)" })
    }
}

/// `x ∈ (0, 1)`, or [`Error::OutOfRange`] naming `name`.
#[inline]
pub(crate) fn open_unit(name: &'static str, x: f64) -> Result<f64> {
    if x > 0.0 && x < 1.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "(0, 1)" })
    }
}

/// `x ∈ (0, 1]` (a sampling rate, a probability that may be 1), or [`Error::OutOfRange`]
/// naming `name`.
#[inline]
pub(crate) fn rate(name: &'static str, x: f64) -> Result<f64> {
    if x > 0.0 && x <= 1.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "(0, 1]" })
    }
}

/// `x ∈ [0, ∞)`, or [`Error::OutOfRange`] naming `name`.
#[inline]
pub(crate) fn nonneg_finite(name: &'static str, x: f64) -> Result<f64> {
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "[0, inf), finite" })
    }
}

/// Checks a radius or clipping norm (`C`, `G`, `R`, …) against `[1e-100, 1e100]`: far from
/// underflow and overflow in the products and quotients the mechanisms form with it
/// (`RG²`, `CG`, `C·(1 − m)/‖x‖`).
pub(crate) fn check_radius(name: &'static str, x: f64) -> Result<()> {
    if !(1e-100..=1e100).contains(&x) {
        return Err(Error::OutOfRange { name, value: x, allowed: "[1e-100, 1e100]" });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::ToString;

    #[test]
    fn messages_name_the_argument_and_values() {
        let e = Error::ShapeMismatch { arg: "k", axis: "dim", expected: 64, got: 32 };
        assert_eq!(e.to_string(), "shape mismatch: `k` has dim = 32, expected 64");
        let e = Error::OutOfRange { name: "epsilon", value: -1.0, allowed: "(0, inf)" };
        assert_eq!(e.to_string(), "parameter `epsilon` = -1 is out of range; allowed: (0, inf)");
        let e = Error::Infeasible { condition: "x < y", lhs: 2.0, rhs: 1.0 };
        assert!(e.to_string().contains("`x < y` fails (left side 2, right side 1)"));
    }

    #[test]
    fn size_helpers_detect_overflow() {
        assert_eq!(mul_size(3, 4, "n"), Ok(12));
        assert_eq!(mul_size(usize::MAX, 2, "n"), Err(Error::SizeOverflow { what: "n" }));
        assert_eq!(add_size(usize::MAX, 1, "m"), Err(Error::SizeOverflow { what: "m" }));
    }

    #[test]
    fn is_a_core_error() {
        fn takes(_: &dyn core::error::Error) {}
        takes(&Error::SizeOverflow { what: "x" });
    }
}
