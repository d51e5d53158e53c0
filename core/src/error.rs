//! The one error type of `dpattn-core`.
//!
//! Every fallible routine in the crate returns [`Result<T>`](crate::Result). User input —
//! shapes, strides, buffer lengths, floating-point values, privacy parameters, scratch
//! sizes — is validated and reported through [`Error`]; no routine panics on it. A panic in
//! this crate is a bug.
//!
//! **Errors and private data** (`docs/PRIVACY.md` §9). An error's `Display` and `Debug` carry
//! no value computed from private data: no measured statistic, no index into private data,
//! no count of private entries. A refusal of private data names what failed
//! ([`Error::PrivateNonFinite`], [`Error::DomainViolation`]); its numbers live in a
//! [`PrivateDetail`], printed as `<withheld>`, which the data holder reads through
//! [`Error::private_detail`]. Errors about public inputs (shapes, parameters, public arrays)
//! keep their values: they are public.

use core::fmt;

/// What went wrong, with enough context to fix the call.
///
/// The enum is `#[non_exhaustive]`: later mechanisms may add variants, and the C ABI maps
/// each variant to a stable status code. `PartialEq` compares the `f64` fields with `==`,
/// so an error that carries a NaN value is not equal to itself; match on the variant
/// (`matches!`) in that case.
///
/// `Display` and `Debug` are safe to log: values computed from private data are kept in a
/// [`PrivateDetail`] and withheld from both (see [`Error::private_detail`]).
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
    /// A NaN or infinity in a **public** input (a parameter array such as a covariance, a
    /// standard deviation, a public query or a model's weights): its position is public.
    /// Non-finite private data is [`Error::PrivateNonFinite`].
    NonFinite {
        /// The argument holding the value.
        arg: &'static str,
        /// Logical index of the first non-finite value, counted in row-major order over the
        /// argument's logical shape (not its memory offset).
        index: usize,
    },
    /// A NaN or infinity in **private** data that the routine refuses rather than sanitises
    /// (a non-private audit routine, an attention kernel, a mechanism whose documented
    /// setting refuses). The refusal itself depends on private data: report it only to the
    /// data holder. Where the value sits is withheld from `Display` and `Debug`;
    /// [`Error::private_detail`] returns its logical index (row-major over the argument's
    /// logical shape).
    PrivateNonFinite {
        /// The argument holding the value.
        arg: &'static str,
        /// The logical index of the first non-finite value (withheld when printed).
        detail: PrivateDetail,
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
        /// The condition that must hold, as the module docs write it, e.g. `"2αβ√n/η < Δ"`.
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
    /// (e.g. a column of `X` longer than the declared `α`), a matrix that must be positive
    /// definite is not, or private data is too large for the computation's floating-point
    /// range. **The refusal itself depends on private data**: report it only to the data
    /// holder. The measured value (or count) is withheld from `Display` and `Debug`;
    /// [`Error::private_detail`] returns it.
    DomainViolation {
        /// The condition that failed, naming the public bound, e.g.
        /// `"every column norm ‖X[:, c]‖₂ ≤ α"`.
        condition: &'static str,
        /// The measured statistic or the count of offending entries (withheld when printed).
        detail: PrivateDetail,
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
    /// A durable budget store (the `dpattn-store` crate) could not be reached or did not
    /// commit a charge: the database is unreachable, locked past its timeout, read-only or
    /// failed mid-transaction. Nothing was charged, so nothing was released; the same
    /// request may succeed later (with the same charge id it is charged at most once).
    StoreUnavailable {
        /// What failed, e.g. `"the ledger store could not commit the charge"`.
        what: &'static str,
    },
    /// A durable budget store holds state that contradicts the request: a charge id already
    /// recorded with another cost or other stream ids, a budget or key that differs from the
    /// stored one, or a record this library did not write. Nothing was charged or released,
    /// and repeating the same request cannot succeed.
    StoreConflict {
        /// What disagrees, e.g. `"a charge id recorded with another cost"`.
        what: &'static str,
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
            Error::PrivateNonFinite { arg, .. } => write!(
                f,
                "non-finite value (NaN or infinity) in the private input `{arg}`; its position is withheld (Error::private_detail); this refusal depends on private data"
            ),
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
            Error::DomainViolation { condition, .. } => write!(
                f,
                "private input outside the declared domain: `{condition}` fails; the measured value is withheld (Error::private_detail); this refusal depends on private data"
            ),
            Error::UnitMismatch { ledger, charge } => write!(
                f,
                "privacy unit mismatch: the ledger accounts for {ledger}, the release protects {charge}; use one ledger per unit"
            ),
            Error::MemoryLimit { what, needed_bytes, limit_bytes } => write!(
                f,
                "{what} would need an estimated {needed_bytes} bytes, over the memory limit of {limit_bytes} bytes"
            ),
            Error::StoreUnavailable { what } => write!(
                f,
                "budget store unavailable: {what}; nothing was charged or released (a retry with the same charge id is charged at most once)"
            ),
            Error::StoreConflict { what } => {
                write!(f, "budget store conflict: {what}; nothing was charged or released")
            }
        }
    }
}

impl core::error::Error for Error {}

impl Error {
    /// The values behind a refusal of private data — for the **data holder only**: a
    /// measured statistic, the index of an offending entry, a count of offending entries.
    /// `None` for every error about public inputs (whose values are in the error itself).
    ///
    /// Neither `Display` nor `Debug` of an error prints these values, so an error can be
    /// logged; what this returns must not be (it is computed from private data, and a
    /// refusal of private data is not covered by any privacy guarantee).
    ///
    /// ```
    /// use dpattn_core::{Error, PrivateDetail};
    /// let e = Error::PrivateNonFinite { arg: "x", detail: PrivateDetail::from_index(4321) };
    /// assert!(!format!("{e} {e:?}").contains("4321"));
    /// assert_eq!(e.private_detail().and_then(|d| d.index()), Some(4321));
    /// assert_eq!(Error::SizeOverflow { what: "n" }.private_detail(), None);
    /// ```
    pub fn private_detail(&self) -> Option<PrivateDetail> {
        match *self {
            Error::PrivateNonFinite { detail, .. } | Error::DomainViolation { detail, .. } => {
                Some(detail)
            }
            _ => None,
        }
    }

    /// [`Error::PrivateNonFinite`] for the entry at logical `index` of the private `arg`.
    pub(crate) fn private_non_finite(arg: &'static str, index: usize) -> Self {
        Error::PrivateNonFinite { arg, detail: PrivateDetail::from_index(index) }
    }
}

/// Values computed from private data that explain a refusal: a measured statistic, the
/// logical index (and value) of an offending entry, or a count of offending entries.
///
/// `Debug` prints `PrivateDetail(<withheld>)` and there is no `Display`, so an [`Error`]
/// that holds one can be printed, logged or sent across the C ABI without its values. The
/// data holder reads them through the accessors, or prints them deliberately with
/// [`reveal`](Self::reveal).
///
/// ```
/// use dpattn_core::PrivateDetail;
/// let d = PrivateDetail::from_entry(4321, 123456.789);
/// assert_eq!(format!("{d:?}"), "PrivateDetail(<withheld>)");
/// assert_eq!((d.index(), d.value(), d.count()), (Some(4321), Some(123456.789), None));
/// assert_eq!(d.reveal().to_string(), "entry 4321 (value 123456.789)");
/// ```
#[derive(Clone, Copy, PartialEq)]
pub struct PrivateDetail(Detail);

#[derive(Clone, Copy, PartialEq)]
enum Detail {
    Measured(f64),
    Index(usize),
    Entry(usize, f64),
    Count(u64),
}

impl PrivateDetail {
    /// A statistic measured on the data (a norm, an eigenvalue, a pivot, a bound).
    pub fn from_measured(value: f64) -> Self {
        Self(Detail::Measured(value))
    }

    /// The logical index of the first offending entry.
    pub fn from_index(index: usize) -> Self {
        Self(Detail::Index(index))
    }

    /// The logical index of an offending entry and its value.
    pub fn from_entry(index: usize, value: f64) -> Self {
        Self(Detail::Entry(index, value))
    }

    /// How many entries (rows, columns, …) were offending.
    pub fn from_count(count: u64) -> Self {
        Self(Detail::Count(count))
    }

    /// The logical index of the offending entry, if the detail names one.
    pub fn index(&self) -> Option<usize> {
        match self.0 {
            Detail::Index(i) | Detail::Entry(i, _) => Some(i),
            _ => None,
        }
    }

    /// The measured statistic, or the offending entry's value.
    pub fn value(&self) -> Option<f64> {
        match self.0 {
            Detail::Measured(v) | Detail::Entry(_, v) => Some(v),
            _ => None,
        }
    }

    /// The number of offending entries, if the detail is a count.
    pub fn count(&self) -> Option<u64> {
        match self.0 {
            Detail::Count(n) => Some(n),
            _ => None,
        }
    }

    /// A `Display` of the values, for the data holder: `"measured 2.5"`, `"entry 7"`,
    /// `"entry 7 (value 1e300)"` or `"3 entries"` (values as `f64`'s `Debug` writes them,
    /// in exponent form when very large or small). Never log it.
    pub fn reveal(&self) -> impl fmt::Display + '_ {
        Revealed(self)
    }
}

impl fmt::Debug for PrivateDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateDetail(<withheld>)")
    }
}

struct Revealed<'a>(&'a PrivateDetail);

impl fmt::Display for Revealed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.0 {
            Detail::Measured(v) => write!(f, "measured {v:?}"),
            Detail::Index(i) => write!(f, "entry {i}"),
            Detail::Entry(i, v) => write!(f, "entry {i} (value {v:?})"),
            Detail::Count(1) => f.write_str("1 entry"),
            Detail::Count(n) => write!(f, "{n} entries"),
        }
    }
}

/// `Result` with [`Error`] as the error type.
pub type Result<T> = core::result::Result<T, Error>;

/// `a * b` for sizes, or [`Error::SizeOverflow`] naming `what`. The argument checks below
/// are public so that crates built on the core (the C ABI, the paper tools) refuse bad
/// arguments with the same errors and messages.
///
/// ```
/// use dpattn_core::{Error, error::mul_size};
/// assert_eq!(mul_size(3, 4, "rows·cols"), Ok(12));
/// let overflow = Error::SizeOverflow { what: "rows·cols" };
/// assert_eq!(mul_size(usize::MAX, 2, "rows·cols"), Err(overflow));
/// ```
#[inline]
pub fn mul_size(a: usize, b: usize, what: &'static str) -> Result<usize> {
    a.checked_mul(b).ok_or(Error::SizeOverflow { what })
}

/// `a + b` for sizes, or [`Error::SizeOverflow`] naming `what`.
///
/// ```
/// use dpattn_core::error::add_size;
/// assert_eq!(add_size(3, 4, "len"), Ok(7));
/// assert!(add_size(usize::MAX, 1, "len").is_err());
/// ```
#[inline]
pub fn add_size(a: usize, b: usize, what: &'static str) -> Result<usize> {
    a.checked_add(b).ok_or(Error::SizeOverflow { what })
}

/// `x ∈ (0, ∞)`, or [`Error::OutOfRange`] naming `name`.
///
/// ```
/// use dpattn_core::error::positive_finite;
/// assert_eq!(positive_finite("sigma", 0.5), Ok(0.5));
/// assert!(positive_finite("sigma", 0.0).is_err() && positive_finite("sigma", f64::NAN).is_err());
/// ```
#[inline]
pub fn positive_finite(name: &'static str, x: f64) -> Result<f64> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "(0, inf)" })
    }
}

/// `x ∈ (0, 1)`, or [`Error::OutOfRange`] naming `name`.
///
/// ```
/// use dpattn_core::error::open_unit;
/// assert_eq!(open_unit("delta", 1e-5), Ok(1e-5));
/// assert!(open_unit("delta", 1.0).is_err() && open_unit("delta", 0.0).is_err());
/// ```
#[inline]
pub fn open_unit(name: &'static str, x: f64) -> Result<f64> {
    if x > 0.0 && x < 1.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "(0, 1)" })
    }
}

/// `x ∈ (0, 1]` (a sampling rate, a probability that may be 1), or [`Error::OutOfRange`]
/// naming `name`.
///
/// ```
/// use dpattn_core::error::rate;
/// assert_eq!(rate("q", 1.0), Ok(1.0));
/// assert!(rate("q", 0.0).is_err() && rate("q", 1.5).is_err());
/// ```
#[inline]
pub fn rate(name: &'static str, x: f64) -> Result<f64> {
    if x > 0.0 && x <= 1.0 {
        Ok(x)
    } else {
        Err(Error::OutOfRange { name, value: x, allowed: "(0, 1]" })
    }
}

/// `x ∈ [0, ∞)`, or [`Error::OutOfRange`] naming `name`.
///
/// ```
/// use dpattn_core::error::nonneg_finite;
/// assert_eq!(nonneg_finite("tau", 0.0), Ok(0.0));
/// assert!(nonneg_finite("tau", -1.0).is_err() && nonneg_finite("tau", f64::INFINITY).is_err());
/// ```
#[inline]
pub fn nonneg_finite(name: &'static str, x: f64) -> Result<f64> {
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

    /// Every rendering an error has (`Display`, `Debug`, alternate `Debug`).
    fn renderings(e: &Error) -> std::string::String {
        std::format!("{e}\n{e:?}\n{e:#?}")
    }

    #[test]
    fn private_values_are_withheld_from_display_and_debug() {
        let cases = [
            Error::PrivateNonFinite { arg: "x", detail: PrivateDetail::from_index(4321) },
            Error::DomainViolation {
                condition: "every column norm ≤ α",
                detail: PrivateDetail::from_measured(123456.789),
            },
            Error::DomainViolation {
                condition: "all entries in the box",
                detail: PrivateDetail::from_count(4321),
            },
            Error::DomainViolation {
                condition: "|x| / r < 2^53",
                detail: PrivateDetail::from_entry(4321, 123456.789),
            },
        ];
        for e in cases {
            let text = renderings(&e);
            for secret in ["4321", "123456", "789"] {
                assert!(!text.contains(secret), "{secret} leaked: {text}");
            }
            assert!(text.contains("withheld"), "{text}");
            let d = e.private_detail().expect("a private refusal has a detail");
            let revealed = d.reveal().to_string();
            assert!(revealed.contains("4321") || revealed.contains("123456.789"), "{revealed}");
        }
        let d = cases[3].private_detail().unwrap();
        assert_eq!((d.index(), d.value(), d.count()), (Some(4321), Some(123456.789), None));
        assert_eq!(cases[2].private_detail().unwrap().count(), Some(4321));
        assert_eq!(cases[1].private_detail().unwrap().value(), Some(123456.789));
        assert_eq!(Error::private_non_finite("x", 4321), cases[0]);
    }

    #[test]
    fn public_errors_keep_their_values_and_have_no_private_detail() {
        let e = Error::NonFinite { arg: "row_cov", index: 4321 };
        assert!(e.to_string().contains("4321"));
        assert_eq!(e.private_detail(), None);
        let e = Error::OutOfRange { name: "epsilon", value: 123456.789, allowed: "(0, 1)" };
        assert!(e.to_string().contains("123456.789"));
        assert_eq!(e.private_detail(), None);
    }

    #[test]
    fn revealed_details_read_as_sentences() {
        assert_eq!(PrivateDetail::from_measured(2.5).reveal().to_string(), "measured 2.5");
        let huge = PrivateDetail::from_entry(7, 1.2345678e300).reveal().to_string();
        assert_eq!(huge, "entry 7 (value 1.2345678e300)");
        assert_eq!(PrivateDetail::from_index(7).reveal().to_string(), "entry 7");
        assert_eq!(PrivateDetail::from_count(1).reveal().to_string(), "1 entry");
        assert_eq!(PrivateDetail::from_count(3).reveal().to_string(), "3 entries");
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
