//! # dpattn-store
//!
//! Durable privacy budgets for dpattn: a privacy budget that survives crashes and restarts
//! and is shared by a fleet of processes, kept in SQLite (one file, the embedded default) or
//! PostgreSQL (many replicas on many machines). The core stays `no_std` and free of I/O;
//! this crate is where budgets meet a database.
//!
//! **What is stored.** Per ledger — keyed by a caller-chosen *owner id* (a document, a user,
//! a dataset) and a [`PrivacyUnit`] — the core's encoded [`Ledger`] and a log of every
//! charge (its charge id, cost, unit, noise mode and the stream ids of its noise). Per *key
//! id*, an epoch, a key check value, the next unleased stream id and a log of leased
//! ranges. Never a master key, unless the caller asks ([`KeyRequest::InStore`]) — and then
//! the database is as sensitive as the data.
//!
//! **Guarantees** (`docs/PRIVACY.md` §11):
//!
//! * *Write-ahead.* A charge is checked and recorded in **one** transaction before the
//!   mechanism draws any noise or writes any output (the core's mechanisms charge their
//!   accountant first). A crash after the commit and before the release loses budget, never
//!   privacy.
//! * *Only down.* A stored budget is never replaced or raised: reopening a ledger with
//!   another total is refused, and every change is a charge accepted by the core's ledger.
//! * *Idempotent.* A charge carries a caller-supplied charge id. The same id with the same
//!   cost (unit, mode and draw) is recorded once; the same id with anything different is
//!   refused. A retried release reuses the recorded stream ids, so retrying the same request
//!   reproduces the same output instead of releasing fresh noise.
//! * *Refusal.* Over budget, unit mismatch, a conflicting charge id, or a store that cannot
//!   be reached or cannot commit: the charge is refused with a clear error and nothing is
//!   charged — and because the charge comes first, nothing is released.
//! * *Disjoint streams.* Stream ids are leased in ranges, one transaction per lease, so no
//!   two sessions, processes or replicas ever hold overlapping ranges of one key id, and the
//!   last id `2⁶⁴ − 1` is never leased.
//!
//! **Use.**
//!
//! ```
//! use dpattn_core::accounting::{ledger::Ledger, privacy_unit::PrivacyUnit};
//! use dpattn_core::accounting::cost::{Accountant, Cost};
//! use dpattn_core::sampling::NoiseKey;
//! use dpattn_core::{NoiseMode, PrivacyBudget};
//! use dpattn_store::{KeyRequest, SqliteStore, StoreSession};
//! let dir = std::env::temp_dir().join(format!("dpattn-store-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("budget.sqlite");
//! # let _ = std::fs::remove_file(&path);
//! let budget = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(1.0, 1e-6)?);
//! let key = NoiseKey::generate()?; // from your key store; the database never sees it
//! let mut session = StoreSession::open(
//!     SqliteStore::open(&path)?, "document-42", &budget, "service-key-1", KeyRequest::Caller(&key),
//! )?;
//! // One release: its charge is committed before the closure draws any noise.
//! let cost = Cost::Approx(PrivacyBudget::new(0.5, 1e-7)?);
//! session.release("request-0001", 1, |draw, accountant| {
//!     accountant.charge(PrivacyUnit::TOKEN, &cost, NoiseMode::Exact)?; // as a mechanism does
//!     let _noise_stream = draw.keyed(0); // ... then the noise
//!     Ok(())
//! })?;
//! // A retry of the same request is not charged again.
//! session.release("request-0001", 1, |_, a| a.charge(PrivacyUnit::TOKEN, &cost, NoiseMode::Exact))?;
//! assert_eq!(session.ledger()?.charges(), 1);
//! // Reopening (after a crash, in another process) sees the charge.
//! drop(session);
//! let mut again = StoreSession::open(
//!     SqliteStore::open(&path)?, "document-42", &budget, "service-key-1", KeyRequest::Caller(&key),
//! )?;
//! assert_eq!(again.ledger()?.charges(), 1);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Any mechanism's `*_keyed(.., draw, Some(accountant), ..)` entry point takes the
//! [`StoreRelease`]'s draw and accountant ([`StoreSession::begin`]), or run it inside
//! [`StoreSession::release`].

mod error;
pub mod logic;
pub mod postgres;
pub mod record;
mod session;
mod sql;
pub mod sqlite;

pub use error::{Result, StoreError};
pub use postgres::{PostgresOptions, PostgresStore};
pub use record::{
    ChargeOutcome, ChargeRecord, ChargeRequest, DrawRecord, KeyRecord, KeyRequest, Lease,
};
pub use session::{DEFAULT_LEASE_SIZE, LeasedSource, StoreAccountant, StoreRelease, StoreSession};
pub use sqlite::{SqliteOptions, SqliteStore};

use dpattn_core::accounting::ledger::Ledger;
use dpattn_core::accounting::privacy_unit::PrivacyUnit;

/// A transactional home for ledgers and stream-id leases. Every method is one transaction:
/// it either commits whole or changes nothing. Implemented by [`SqliteStore`] and
/// [`PostgresStore`]; both make their decisions with [`logic`], so they behave alike.
pub trait BudgetStore: Send {
    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;

    /// Opens the ledger of `(owner, budget.unit())`: stores `budget` if there is none, and
    /// otherwise returns the stored ledger after checking that it has `budget`'s total and
    /// kind (what has been spent is the stored amount, whatever `budget` says).
    ///
    /// # Errors
    /// [`StoreError::BudgetMismatch`]; [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    fn open_ledger(&mut self, owner: &str, budget: &Ledger) -> Result<Ledger>;

    /// The stored ledger of `(owner, unit)`, if any.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    fn ledger(&mut self, owner: &str, unit: PrivacyUnit) -> Result<Option<Ledger>>;

    /// Checks and records one charge in one transaction, under a lock on the ledger
    /// ([`logic::decide_charge`]).
    ///
    /// # Errors
    /// [`StoreError::Refused`] (the ledger's refusal); [`StoreError::ChargeIdConflict`];
    /// [`StoreError::NoLedger`]; [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    fn charge(&mut self, req: &ChargeRequest<'_>) -> Result<ChargeOutcome>;

    /// The charge recorded under `charge_id` and `part` for the ledger of `(owner, unit)`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    fn find_charge(
        &mut self,
        owner: &str,
        unit: PrivacyUnit,
        charge_id: &str,
        part: u32,
    ) -> Result<Option<ChargeRecord>>;

    /// The ledger `(owner, unit)` was first stored with and its charges in ledger order.
    ///
    /// # Errors
    /// [`StoreError::NoLedger`]; [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    fn charge_log(&mut self, owner: &str, unit: PrivacyUnit)
    -> Result<(Ledger, Vec<ChargeRecord>)>;

    /// Registers `key_id` (a fresh epoch from the operating system, the key check value, and
    /// the key itself only for [`KeyRequest::InStore`]) or reads it back, checking that a
    /// caller's key has the registered key check value.
    ///
    /// # Errors
    /// [`StoreError::KeyMismatch`]; [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    fn open_key(&mut self, key_id: &str, key: KeyRequest<'_>) -> Result<KeyRecord>;

    /// Leases the next `count ≥ 1` stream ids of `key_id` to `holder` in one transaction.
    ///
    /// # Errors
    /// [`StoreError::StreamsExhausted`]; [`StoreError::KeyMismatch`] for an unregistered key
    /// id; [`StoreError::Unavailable`].
    fn lease(&mut self, key_id: &str, count: u64, holder: &str) -> Result<Lease>;

    /// Every lease of `key_id`, by first stream id.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]; [`StoreError::Corrupt`].
    fn leases(&mut self, key_id: &str) -> Result<Vec<Lease>>;

    /// The database's own consistency check (SQLite's `PRAGMA integrity_check` and
    /// `foreign_key_check`; for both, every ledger's charge count equals its rows).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] naming the first problem; [`StoreError::Unavailable`].
    fn check_integrity(&mut self) -> Result<()>;
}

/// A boxed store is a store (so `StoreSession::open` takes `Box<dyn BudgetStore>`).
impl<S: BudgetStore + ?Sized> BudgetStore for Box<S> {
    fn backend(&self) -> &'static str {
        (**self).backend()
    }
    fn open_ledger(&mut self, owner: &str, budget: &Ledger) -> Result<Ledger> {
        (**self).open_ledger(owner, budget)
    }
    fn ledger(&mut self, owner: &str, unit: PrivacyUnit) -> Result<Option<Ledger>> {
        (**self).ledger(owner, unit)
    }
    fn charge(&mut self, req: &ChargeRequest<'_>) -> Result<ChargeOutcome> {
        (**self).charge(req)
    }
    fn find_charge(
        &mut self,
        owner: &str,
        unit: PrivacyUnit,
        charge_id: &str,
        part: u32,
    ) -> Result<Option<ChargeRecord>> {
        (**self).find_charge(owner, unit, charge_id, part)
    }
    fn charge_log(
        &mut self,
        owner: &str,
        unit: PrivacyUnit,
    ) -> Result<(Ledger, Vec<ChargeRecord>)> {
        (**self).charge_log(owner, unit)
    }
    fn open_key(&mut self, key_id: &str, key: KeyRequest<'_>) -> Result<KeyRecord> {
        (**self).open_key(key_id, key)
    }
    fn lease(&mut self, key_id: &str, count: u64, holder: &str) -> Result<Lease> {
        (**self).lease(key_id, count, holder)
    }
    fn leases(&mut self, key_id: &str) -> Result<Vec<Lease>> {
        (**self).leases(key_id)
    }
    fn check_integrity(&mut self) -> Result<()> {
        (**self).check_integrity()
    }
}
