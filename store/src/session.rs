//! [`StoreSession`]: the core's session — a master key, fresh stream ids, a ledger — with
//! the ledger and the stream counter in a [`BudgetStore`] instead of process memory.
//!
//! **Guarantee.**
//!
//! * *Every release is charged before it draws.* [`StoreSession::begin`] lends a release
//!   its [`Draw`] and a [`StoreAccountant`], which implements the core's [`Accountant`]:
//!   each `charge` is one store transaction, checked by the core's ledger logic, committed
//!   before the call returns. The core's mechanisms charge before they draw noise or write
//!   output, so `*_keyed(.., release.draw, Some(&mut release.accountant), ..)` draws only
//!   after a committed charge, and a refused or failed charge (over budget, unit mismatch,
//!   store unreachable) returns an error with nothing drawn or written.
//! * *A `(key, stream)` pair serves one release.* Fresh stream ids come from ranges leased
//!   in one transaction each ([`LeasedSource`]), so no two sessions — threads, processes
//!   or replicas — ever hold the same stream id of one key id. The exception is deliberate:
//!   a *retry* (a charge id already recorded) gets the recorded stream ids back, so the
//!   retried release reproduces the same noise instead of adding a second, uncharged one.
//!   **A charge id must therefore name one request**: retrying it with other inputs would
//!   put two releases on one noise draw (their difference reveals the difference of the
//!   inputs). Derive charge ids from the request (a client's request id), never reuse one
//!   for new data.
//! * *Keys.* The session holds the master key in memory. The store holds only the key
//!   id's epoch and key check value — unless the session was opened with
//!   [`KeyRequest::InStore`], and then the database is as sensitive as the data.
//!
//! The draws are the core's: a release at stream id `s` of key id `k` draws exactly what
//! `NoiseSource::for_replay(master, epoch(k), s).reserve(n)` draws, so the core's replay
//! and audit tools work on store sessions (the charge log records key id, epoch and
//! stream ids of every release).

use dpattn_core::Error;
use dpattn_core::accounting::cost::{Accountant, Cost};
use dpattn_core::accounting::ledger::{Amount, Ledger};
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_core::grid_release::NoiseMode;
use dpattn_core::sampling::NoiseKey;
use dpattn_core::session::{Draw, epoch_key};

use crate::BudgetStore;
use crate::error::{Result, StoreError};
use crate::record::{ChargeOutcome, ChargeRequest, DrawRecord, KeyRecord, KeyRequest, check_id};

/// Stream ids leased per store round trip unless the caller says otherwise.
pub const DEFAULT_LEASE_SIZE: u64 = 1024;

/// Fresh stream ids of one key id, taken from leased ranges: the store-backed counterpart
/// of the core's `NoiseSource` (same master key, epoch key and draws; module docs). Ids of a
/// lease that are not used before the session ends are never handed out again.
pub struct LeasedSource {
    key_id: String,
    epoch: u64,
    master: NoiseKey,
    key: NoiseKey,
    next: u64,
    end: u64,
    lease_size: u64,
    holder: String,
}

impl std::fmt::Debug for LeasedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedSource")
            .field("key_id", &self.key_id)
            .field("epoch", &self.epoch)
            .field("next", &self.next)
            .field("end", &self.end)
            .field("lease_size", &self.lease_size)
            .finish_non_exhaustive()
    }
}

impl LeasedSource {
    /// A source for `master` registered as `record` (from [`BudgetStore::open_key`]); it
    /// leases `lease_size ≥ 1` ids at a time under the name `holder`.
    pub fn new(master: NoiseKey, record: &KeyRecord, lease_size: u64, holder: &str) -> Self {
        let key = epoch_key(&master, record.epoch);
        Self {
            key_id: record.key_id.clone(),
            epoch: record.epoch,
            master,
            key,
            next: 0,
            end: 0,
            lease_size: lease_size.max(1),
            holder: holder.to_owned(),
        }
    }

    /// The key id.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The key id's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The master key (for audit and a key store). As sensitive as the data.
    pub fn master_key(&self) -> &NoiseKey {
        &self.master
    }

    /// The next unused stream id of the current lease (equal to its end when it is used up
    /// or before the first lease).
    pub fn next_stream(&self) -> u64 {
        self.next
    }

    /// Ids left in the current lease.
    pub fn remaining(&self) -> u64 {
        self.end - self.next
    }

    /// Reserves `streams ≥ 1` fresh consecutive ids: from the current lease when it has
    /// room, else from a new lease of `max(lease_size, streams)` ids (one transaction). The
    /// ids are consumed even if the release then fails.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for `streams = 0`; the store's lease errors (nothing is
    /// reserved then).
    pub fn reserve(&mut self, store: &mut dyn BudgetStore, streams: u64) -> Result<Draw<'_>> {
        let first = self.reserve_ids(store, streams)?;
        Ok(Draw { key: &self.key, stream: first })
    }

    fn reserve_ids(&mut self, store: &mut dyn BudgetStore, streams: u64) -> Result<u64> {
        if streams == 0 {
            return Err(StoreError::Invalid { what: "a release needs at least one stream id" });
        }
        if self.end - self.next < streams {
            let lease = store.lease(&self.key_id, self.lease_size.max(streams), &self.holder)?;
            self.next = lease.first;
            self.end = lease.first + lease.count; // no overflow: the store checked it
        }
        let first = self.next;
        self.next += streams;
        Ok(first)
    }
}

/// The [`Accountant`] of one release on a [`StoreSession`]: each charge is a store
/// transaction under the release's charge id (module docs).
pub struct StoreAccountant<'s> {
    store: &'s mut dyn BudgetStore,
    owner: &'s str,
    unit: PrivacyUnit,
    total: Amount,
    charge_id: String,
    part: u32,
    draw: DrawRecord,
    charged: u32,
    already: u32,
    error: &'s mut Option<StoreError>,
}

impl StoreAccountant<'_> {
    /// The release's charge id.
    pub fn charge_id(&self) -> &str {
        &self.charge_id
    }

    /// Charges this release recorded anew.
    pub fn charged(&self) -> u32 {
        self.charged
    }

    /// Charges this release found already recorded (a retry) and did not charge again.
    pub fn already_charged(&self) -> u32 {
        self.already
    }

    /// The store's error behind the last refused charge, with its details.
    pub fn last_error(&self) -> Option<&StoreError> {
        self.error.as_ref()
    }
}

impl Accountant for StoreAccountant<'_> {
    fn unit(&self) -> PrivacyUnit {
        self.unit
    }

    fn total(&self) -> Amount {
        self.total
    }

    fn charge(
        &mut self,
        unit: PrivacyUnit,
        cost: &Cost,
        mode: NoiseMode,
    ) -> dpattn_core::Result<()> {
        let req = ChargeRequest {
            owner: self.owner,
            ledger_unit: self.unit,
            charge_id: &self.charge_id,
            part: self.part,
            unit,
            cost,
            mode,
            draw: &self.draw,
        };
        match self.store.charge(&req) {
            Ok(outcome) => {
                self.part += 1;
                match outcome {
                    ChargeOutcome::Charged(_) => self.charged += 1,
                    ChargeOutcome::AlreadyCharged(_) => self.already += 1,
                }
                Ok(())
            }
            Err(e) => {
                let core = e.to_core();
                *self.error = Some(e);
                Err(core)
            }
        }
    }
}

/// What one release borrows from a [`StoreSession`].
pub struct StoreRelease<'s> {
    /// The key and the first of the release's stream ids.
    pub draw: Draw<'s>,
    /// The key id's epoch (for audit).
    pub epoch: u64,
    /// Whether the charge id was already recorded: the release redraws the recorded stream
    /// ids, and its charges are not charged again.
    pub retried: bool,
    /// Where the release is charged.
    pub accountant: StoreAccountant<'s>,
}

/// A session whose ledger and stream counter live in a [`BudgetStore`] (module docs).
pub struct StoreSession {
    store: Box<dyn BudgetStore>,
    owner: String,
    unit: PrivacyUnit,
    total: Amount,
    source: LeasedSource,
    last_error: Option<StoreError>,
    holder: String,
    auto_ids: u64,
}

impl std::fmt::Debug for StoreSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSession")
            .field("backend", &self.store.backend())
            .field("owner", &self.owner)
            .field("unit", &self.unit)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl StoreSession {
    /// Opens the ledger of `owner` for `budget`'s unit (stored if new; otherwise its total
    /// must be `budget`'s, and what was spent stays spent) and the key id `key_id`, leasing
    /// [`DEFAULT_LEASE_SIZE`] stream ids at a time.
    ///
    /// # Errors
    /// [`StoreError::BudgetMismatch`], [`StoreError::KeyMismatch`],
    /// [`StoreError::Unavailable`], [`StoreError::Corrupt`], [`StoreError::Invalid`].
    pub fn open(
        store: impl BudgetStore + 'static,
        owner: &str,
        budget: &Ledger,
        key_id: &str,
        key: KeyRequest<'_>,
    ) -> Result<Self> {
        Self::open_with(Box::new(store), owner, budget, key_id, key, DEFAULT_LEASE_SIZE)
    }

    /// [`open`](Self::open) on a boxed store, leasing `lease_size` ids at a time (small
    /// leases waste fewer ids when processes die; large ones need fewer round trips).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(
        mut store: Box<dyn BudgetStore>,
        owner: &str,
        budget: &Ledger,
        key_id: &str,
        key: KeyRequest<'_>,
        lease_size: u64,
    ) -> Result<Self> {
        check_id(owner, "an owner id of 1 to 256 bytes without NUL")?;
        check_id(key_id, "a key id of 1 to 256 bytes without NUL")?;
        let ledger = store.open_ledger(owner, budget)?;
        let record = store.open_key(key_id, key)?;
        let master = match key {
            KeyRequest::Caller(k) => k.clone(),
            KeyRequest::InStore => record.stored_key.clone().ok_or(StoreError::KeyMismatch {
                key_id: key_id.to_owned(),
                what: "the store does not hold this key id's master key",
            })?,
        };
        let holder = format!("{:016x}{:016x}", crate::record::os_u64()?, crate::record::os_u64()?);
        let source = LeasedSource::new(master, &record, lease_size, &holder);
        Ok(Self {
            store,
            owner: owner.to_owned(),
            unit: ledger.unit(),
            total: ledger.total(),
            source,
            last_error: None,
            holder,
            auto_ids: 0,
        })
    }

    /// Starts one release under `charge_id`, with `streams ≥ 1` stream ids: fresh ones, or
    /// — when the charge id is already recorded — the recorded ones (a retry; module docs).
    ///
    /// # Errors
    /// [`StoreError::ChargeIdConflict`] when the recorded release used another key id or
    /// another number of stream ids; [`StoreError::Invalid`]; the store's errors.
    pub fn begin(&mut self, charge_id: &str, streams: u64) -> Result<StoreRelease<'_>> {
        check_id(charge_id, "a charge id of 1 to 256 bytes without NUL")?;
        if streams == 0 {
            return Err(StoreError::Invalid { what: "a release needs at least one stream id" });
        }
        self.last_error = None;
        let recorded = self.store.find_charge(&self.owner, self.unit, charge_id, 0)?;
        let (stream, retried) = match recorded {
            Some(rec) => {
                let d = &rec.draw;
                if d.key_id != self.source.key_id
                    || d.epoch != self.source.epoch
                    || d.streams != streams
                {
                    return Err(StoreError::ChargeIdConflict {
                        charge_id: charge_id.to_owned(),
                        what: "another key id or another number of stream ids",
                    });
                }
                (d.stream, true)
            }
            None => (self.source.reserve_ids(&mut *self.store, streams)?, false),
        };
        let draw = DrawRecord {
            key_id: self.source.key_id.clone(),
            epoch: self.source.epoch,
            stream,
            streams,
        };
        Ok(StoreRelease {
            draw: Draw { key: &self.source.key, stream },
            epoch: self.source.epoch,
            retried,
            accountant: StoreAccountant {
                store: &mut *self.store,
                owner: &self.owner,
                unit: self.unit,
                total: self.total,
                charge_id: charge_id.to_owned(),
                part: 0,
                draw,
                charged: 0,
                already: 0,
                error: &mut self.last_error,
            },
        })
    }

    /// Runs one release: `f` gets the draw and the accountant ([`begin`](Self::begin)) and
    /// must charge before it draws, as every core mechanism's `*_keyed` entry point does.
    ///
    /// # Errors
    /// The store's error when a charge was refused or failed (with its details);
    /// [`StoreError::Mechanism`] when `f` failed on its own; [`begin`](Self::begin)'s.
    pub fn release<R>(
        &mut self,
        charge_id: &str,
        streams: u64,
        f: impl FnOnce(Draw<'_>, &mut dyn Accountant) -> dpattn_core::Result<R>,
    ) -> Result<R> {
        let mut r = self.begin(charge_id, streams)?;
        let out = f(r.draw, &mut r.accountant);
        drop(r);
        out.map_err(|e| self.last_error.take().unwrap_or(StoreError::Mechanism(e)))
    }

    /// A fresh charge id unique to this session (a random session id and a counter): for
    /// callers without request ids. Such releases are charged once each but cannot be
    /// retried idempotently.
    pub fn new_charge_id(&mut self) -> String {
        self.auto_ids += 1;
        format!("auto-{}-{}", self.holder, self.auto_ids)
    }

    /// The stored ledger, read now (other processes' charges included).
    ///
    /// # Errors
    /// The store's errors.
    pub fn ledger(&mut self) -> Result<Ledger> {
        self.store
            .ledger(&self.owner, self.unit)?
            .ok_or_else(|| StoreError::NoLedger { owner: self.owner.clone() })
    }

    /// The owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The ledger's privacy unit.
    pub fn unit(&self) -> PrivacyUnit {
        self.unit
    }

    /// The ledger's total.
    pub fn total(&self) -> Amount {
        self.total
    }

    /// The stream-id source (key id, epoch, master key, position in the current lease).
    pub fn source(&self) -> &LeasedSource {
        &self.source
    }

    /// The store.
    pub fn store(&mut self) -> &mut dyn BudgetStore {
        &mut *self.store
    }

    /// The store's error behind the last refused charge of the last release.
    pub fn last_error(&self) -> Option<&StoreError> {
        self.last_error.as_ref()
    }

    /// Takes [`last_error`](Self::last_error) (the C ABI reports it once).
    pub fn take_last_error(&mut self) -> Option<StoreError> {
        self.last_error.take()
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        e.to_core()
    }
}
