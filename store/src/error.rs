//! [`StoreError`]: why a durable store refused or failed.
//!
//! **Guarantee.** Every error of this crate means *nothing was charged by the failing call*
//! (a transaction that fails is rolled back whole), so a caller that releases only after an
//! `Ok` charge never releases without a recorded charge. The one exception is not an error:
//! a charge whose commit reached the database but whose acknowledgement was lost (the
//! connection dropped during `COMMIT`) is reported as [`StoreError::Unavailable`] although it
//! may be recorded; that errs on the safe side (budget spent, nothing released), and a retry
//! with the same charge id finds it and is not charged again.
//!
//! Errors are classified for the core's [`Accountant`](dpattn_core::accounting::cost::Accountant)
//! trait by [`StoreError::to_core`]: the ledger's own refusals keep their core error
//! (`Infeasible` over budget, `UnitMismatch`, `OutOfRange`/`Unsupported` for a cost the
//! ledger kind cannot take); a store that cannot be reached or cannot commit is
//! [`Error::StoreUnavailable`](dpattn_core::Error::StoreUnavailable) (a retry may succeed);
//! stored state that contradicts the request is
//! [`Error::StoreConflict`](dpattn_core::Error::StoreConflict) (a retry cannot succeed).
//! `Display` never prints key material.

use std::fmt;

use dpattn_core::Error;

/// Why a store call failed. Nothing was charged by the failing call (module docs).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StoreError {
    /// The ledger refused the charge (the core's decision, unchanged): over budget
    /// ([`Error::Infeasible`]), a release about another privacy unit
    /// ([`Error::UnitMismatch`]), a cost this kind of ledger cannot take.
    Refused(Error),
    /// The database could not be reached, was locked past its timeout, is read-only, or
    /// failed during the transaction. Retrying later may succeed.
    Unavailable {
        /// `"sqlite"` or `"postgres"`.
        backend: &'static str,
        /// The database's own message.
        detail: String,
    },
    /// The charge id is already recorded for this ledger with another cost, unit, noise
    /// mode or draw (key id, epoch or stream ids): one charge id names one release.
    ChargeIdConflict {
        /// The charge id.
        charge_id: String,
        /// What differs.
        what: &'static str,
    },
    /// The stored ledger for this owner and unit has another total or kind than the budget
    /// the caller opened it with: a stored budget is never replaced (it can only go down).
    BudgetMismatch {
        /// The owner id.
        owner: String,
    },
    /// The key id is registered with another master key (its key check value differs), or
    /// the caller asked for the stored key of a key id whose key the store does not hold.
    KeyMismatch {
        /// The key id.
        key_id: String,
        /// What is wrong.
        what: &'static str,
    },
    /// No ledger is stored for this owner and unit (open it with a budget first).
    NoLedger {
        /// The owner id.
        owner: String,
    },
    /// A stored record is not one this library wrote (or the schema has another version):
    /// the store is refused rather than trusted.
    Corrupt {
        /// What is wrong.
        what: String,
    },
    /// A stream-id lease would pass the last usable stream id of the key id (`2⁶⁴ − 2`):
    /// register a new key id.
    StreamsExhausted {
        /// The key id.
        key_id: String,
    },
    /// An argument is not valid (an empty or over-long id, zero streams).
    Invalid {
        /// What is wrong.
        what: &'static str,
    },
    /// The mechanism failed on its own (bad shapes, parameters or data), not the store: its
    /// core error. A mechanism fails before it charges or after; in the second case the
    /// charge stands (budget spent, nothing released), and a retry under the same charge
    /// id is not charged again.
    Mechanism(Error),
}

/// A `Result` with a [`StoreError`].
pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// The core error the [`Accountant`](dpattn_core::accounting::cost::Accountant) trait
    /// reports for this failure (module docs).
    pub fn to_core(&self) -> Error {
        match self {
            StoreError::Refused(e) | StoreError::Mechanism(e) => *e,
            StoreError::Unavailable { .. } => Error::StoreUnavailable {
                what: "the budget store could not be reached or could not commit the charge",
            },
            StoreError::ChargeIdConflict { .. } => Error::StoreConflict {
                what: "the charge id is recorded with another cost, unit, noise mode or draw",
            },
            StoreError::BudgetMismatch { .. } => Error::StoreConflict {
                what: "the stored ledger has another total or kind than the budget given",
            },
            StoreError::KeyMismatch { .. } => {
                Error::StoreConflict { what: "the key id is registered with another master key" }
            }
            StoreError::NoLedger { .. } => {
                Error::StoreConflict { what: "no ledger is stored for this owner and unit" }
            }
            StoreError::Corrupt { .. } => Error::StoreConflict {
                what: "a stored record is not one dpattn-store wrote (or another schema version)",
            },
            StoreError::StreamsExhausted { .. } => {
                Error::SizeOverflow { what: "the stream ids of the key id (register a new key id)" }
            }
            StoreError::Invalid { what } => {
                Error::OutOfRange { name: "store argument", value: f64::NAN, allowed: what }
            }
        }
    }

    /// Whether the same request may succeed later ([`StoreError::Unavailable`] only).
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

impl From<Error> for StoreError {
    fn from(e: Error) -> Self {
        StoreError::Refused(e)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Refused(e) => write!(f, "refused by the ledger: {e}"),
            StoreError::Unavailable { backend, detail } => write!(
                f,
                "{backend} budget store unavailable: {detail}; nothing was charged (a retry with the same charge id is charged at most once)"
            ),
            StoreError::ChargeIdConflict { charge_id, what } => write!(
                f,
                "charge id {charge_id:?} is already recorded with {what}; nothing was charged (one charge id names one release)"
            ),
            StoreError::BudgetMismatch { owner } => write!(
                f,
                "the stored ledger of owner {owner:?} has another total or kind than the budget given; a stored budget is never replaced"
            ),
            StoreError::KeyMismatch { key_id, what } => write!(f, "key id {key_id:?}: {what}"),
            StoreError::NoLedger { owner } => write!(
                f,
                "no ledger is stored for owner {owner:?} and this unit (open it with a budget first)"
            ),
            StoreError::Corrupt { what } => {
                write!(f, "the budget store holds a record dpattn-store did not write: {what}")
            }
            StoreError::StreamsExhausted { key_id } => {
                write!(f, "the stream ids of key id {key_id:?} are used up (register a new key id)")
            }
            StoreError::Invalid { what } => write!(f, "invalid store argument: {what}"),
            StoreError::Mechanism(e) => write!(f, "the release failed: {e}"),
        }
    }
}

impl std::error::Error for StoreError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unreachable_store_is_retryable_and_refusals_keep_their_core_error() {
        let over = Error::Infeasible { condition: "c", lhs: 2.0, rhs: 1.0 };
        assert_eq!(StoreError::Refused(over).to_core(), over);
        let down =
            StoreError::Unavailable { backend: "sqlite", detail: "database is locked".into() };
        assert!(down.is_retryable());
        assert!(matches!(down.to_core(), Error::StoreUnavailable { .. }));
        assert!(down.to_string().contains("database is locked"));
        let conflict =
            StoreError::ChargeIdConflict { charge_id: "r-1".into(), what: "another cost" };
        assert!(!conflict.is_retryable());
        assert!(matches!(conflict.to_core(), Error::StoreConflict { .. }));
        assert!(matches!(
            StoreError::StreamsExhausted { key_id: "k".into() }.to_core(),
            Error::SizeOverflow { .. }
        ));
    }
}
