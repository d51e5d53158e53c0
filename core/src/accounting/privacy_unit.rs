//! [`PrivacyUnit`]: what two neighbouring inputs differ in — the thing a guarantee protects.
//!
//! A privacy loss is only meaningful for a unit: `(ε, δ)` for one token of a context says
//! nothing about a whole document, and guarantees for different units do not compose into a
//! bound for either. So every mechanism declares the unit its guarantee is about, a
//! [`Ledger`](super::ledger::Ledger) is created for one unit, and a charge from a mechanism
//! whose guarantee does not cover that unit is refused ([`Error::UnitMismatch`]).
//!
//! Units cover each other only in one case: a guarantee for any `c` tokens changing
//! ([`PrivacyUnit::Tokens`]`(c)`, DP-Forward's token level) covers every group of at most `c`
//! tokens, so a ledger for groups of `c′ ≤ c` tokens accepts it (group privacy the other way
//! round would need the group-privacy conversion, which no mechanism applies silently).

use core::fmt;
use core::num::NonZeroU32;

use crate::error::{Error, Result};

/// What neighbouring inputs differ in (`docs/PRIVACY.md` §1 gives each mechanism's relation).
///
/// ```
/// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
/// // A guarantee for any 4 changed tokens also covers 1 changed token, not the reverse.
/// let four = PrivacyUnit::tokens(4)?;
/// assert!(four.covers(PrivacyUnit::TOKEN));
/// assert!(!PrivacyUnit::TOKEN.covers(four));
/// assert!(!PrivacyUnit::Prompt.covers(PrivacyUnit::Record));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PrivacyUnit {
    /// Up to `c ≥ 1` tokens (positions) of one private context or sequence change: their
    /// key and value rows in every head (output perturbation and paper 001's trees and
    /// sketch, `c = 1`), or `c` rows of a hidden-state matrix (DP-Forward's token level).
    /// Replace-one; the length is public.
    Tokens(NonZeroU32),
    /// One feature column of one problem's `X` moves by at most the mechanism's `β`
    /// (paper 000, the Gram-matrix attention).
    FeatureColumn,
    /// One whole sequence (DP-Forward's sequence level: local DP for its owner).
    Sequence,
    /// One training prompt (NoisyHead, paper 004); replace-one.
    Prompt,
    /// One training record is added or removed (DP-SGD, paper 002; Poisson sampling).
    Record,
}

impl PrivacyUnit {
    /// One token: [`PrivacyUnit::Tokens`]`(1)`.
    pub const TOKEN: Self = Self::Tokens(NonZeroU32::MIN);

    /// Up to `count ≥ 1` tokens.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `count = 0`.
    pub fn tokens(count: u32) -> Result<Self> {
        NonZeroU32::new(count).map(Self::Tokens).ok_or(Error::OutOfRange {
            name: "privacy unit token count",
            value: 0.0,
            allowed: ">= 1",
        })
    }

    /// Whether a guarantee for `self` is also a guarantee for `ledger_unit`.
    pub fn covers(self, ledger_unit: PrivacyUnit) -> bool {
        match (self, ledger_unit) {
            (Self::Tokens(c), Self::Tokens(l)) => c >= l,
            (a, b) => a == b,
        }
    }

    /// A short name for messages.
    ///
    /// ```
    /// use dpattn_core::accounting::privacy_unit::PrivacyUnit;
    /// assert_eq!(PrivacyUnit::Record.name(), "one record (add/remove)");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Self::Tokens(c) if c.get() == 1 => "one token",
            Self::Tokens(_) => "a group of tokens",
            Self::FeatureColumn => "one feature column",
            Self::Sequence => "one sequence",
            Self::Prompt => "one prompt",
            Self::Record => "one record (add/remove)",
        }
    }

    /// `Ok` when a mechanism protecting `self` may charge a ledger kept for `ledger_unit`.
    ///
    /// # Errors
    /// [`Error::UnitMismatch`] otherwise.
    pub fn check_charge(self, ledger_unit: PrivacyUnit) -> Result<()> {
        if self.covers(ledger_unit) {
            Ok(())
        } else {
            Err(Error::UnitMismatch { ledger: ledger_unit.name(), charge: self.name() })
        }
    }
}

impl fmt::Display for PrivacyUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tokens(c) if c.get() > 1 => write!(f, "up to {c} tokens"),
            u => f.write_str(u.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covering_is_equality_except_for_token_groups() {
        let three = PrivacyUnit::tokens(3).unwrap();
        let all = [
            PrivacyUnit::TOKEN,
            three,
            PrivacyUnit::FeatureColumn,
            PrivacyUnit::Sequence,
            PrivacyUnit::Prompt,
            PrivacyUnit::Record,
        ];
        for a in all {
            for b in all {
                let want = a == b || (a == three && b == PrivacyUnit::TOKEN);
                assert_eq!(a.covers(b), want, "{a:?} covers {b:?}");
                assert_eq!(a.check_charge(b).is_ok(), want);
            }
        }
        assert!(matches!(
            PrivacyUnit::Prompt.check_charge(PrivacyUnit::TOKEN),
            Err(Error::UnitMismatch { ledger: "one token", charge: "one prompt" })
        ));
        assert!(PrivacyUnit::tokens(0).is_err());
    }
}
