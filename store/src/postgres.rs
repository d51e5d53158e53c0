//! [`PostgresStore`]: ledgers and leases in PostgreSQL, for replicas on many machines.
//!
//! **Guarantee.** Every [`BudgetStore`] method is one transaction. A charge locks its
//! ledger row with `SELECT … FOR UPDATE` before reading it, so concurrent charges to one
//! ledger — from any connection, process or machine — are serialised: each reads the
//! ledger the previous one committed (under `READ COMMITTED`, a statement that waited for
//! the lock sees the committed row), the core decides, and the new ledger and the charge
//! row are written before `COMMIT`. A lease locks its key row the same way, so leased
//! ranges never overlap. A transaction that PostgreSQL aborts with a serialization
//! failure or a deadlock (SQLSTATE `40001`, `40P01`) is retried from the start (up to
//! [`PostgresOptions::retries`] times); any other failure — no server, a dropped
//! connection, a lock not granted within `lock_timeout` — refuses the call
//! ([`StoreError::Unavailable`]) with nothing charged. A connection that was closed is
//! reopened at the next call, not within the failing one: a charge whose `COMMIT`
//! acknowledgement was lost is reported as unavailable and found again, not charged twice,
//! when it is retried under the same charge id.
//!
//! The connection string is libpq's (`host=… port=… user=… dbname=…` or a
//! `postgresql://` URL). TLS is not built in: connect over a Unix socket, the loopback
//! interface, or a TLS-terminating proxy.

use std::str::FromStr;
use std::time::Duration;

use dpattn_core::accounting::ledger::Ledger;
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use postgres::error::SqlState;
use postgres::{Client, Config, NoTls, Row, Transaction};

use crate::BudgetStore;
use crate::error::{Result, StoreError};
use crate::logic::{self, Decision};
use crate::record::{
    ChargeOutcome, ChargeRecord, ChargeRequest, KeyRecord, KeyRequest, Lease, check_id,
    decode_ledger, encode_cost, encode_ledger, mode_text, unit_text,
};
use crate::sql::{self, RawCharge, from_db, to_db};
use crate::sqlite::key_record;

/// Options of [`PostgresStore::connect_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostgresOptions {
    /// Connect timeout when the connection string sets none. Default 5 s.
    pub connect_timeout: Duration,
    /// `lock_timeout` of the session: how long a charge waits for another transaction's
    /// lock on its ledger row before it is refused. Default 10 s.
    pub lock_timeout: Duration,
    /// How many times a transaction aborted by a serialization failure or a deadlock is
    /// retried. Default 8.
    pub retries: u32,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(10),
            retries: 8,
        }
    }
}

/// A ledger and lease store in a PostgreSQL database (module docs).
pub struct PostgresStore {
    config: Config,
    options: PostgresOptions,
    client: Option<Client>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config may hold a password: print only where it points.
        f.debug_struct("PostgresStore")
            .field("hosts", &self.config.get_hosts())
            .field("ports", &self.config.get_ports())
            .field("dbname", &self.config.get_dbname())
            .field("connected", &self.client.as_ref().is_some_and(|c| !c.is_closed()))
            .finish()
    }
}

/// An error inside a transaction: PostgreSQL's (maybe retryable) or the store's.
enum TxError {
    Pg(postgres::Error),
    Store(StoreError),
}

impl From<postgres::Error> for TxError {
    fn from(e: postgres::Error) -> Self {
        TxError::Pg(e)
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Store(e)
    }
}

/// PostgreSQL's message, with the SQLSTATE when the server sent one.
fn pg_detail(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let source = std::error::Error::source(e).map(|s| format!(": {s}")).unwrap_or_default();
            format!("{e}{source}")
        }
    }
}

fn unavailable(e: &postgres::Error) -> StoreError {
    StoreError::Unavailable { backend: "postgres", detail: pg_detail(e) }
}

fn retryable(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

impl PostgresStore {
    /// Connects with the default options and creates the schema if absent.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached;
    /// [`StoreError::Invalid`] for a connection string that does not parse;
    /// [`StoreError::Corrupt`] for a database with another schema version.
    pub fn connect(conninfo: &str) -> Result<Self> {
        Self::connect_with(conninfo, PostgresOptions::default())
    }

    /// [`connect`](Self::connect) with `options`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub fn connect_with(conninfo: &str, options: PostgresOptions) -> Result<Self> {
        let mut config = Config::from_str(conninfo).map_err(|_| StoreError::Invalid {
            what: "a PostgreSQL connection string (libpq key=value pairs or a postgresql:// URL)",
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        let mut store = Self { config, options, client: None };
        store.run(|tx| {
            // Concurrent first connections must not race on CREATE TABLE: one at a time.
            tx.batch_execute("SELECT pg_advisory_xact_lock(7237997064127100721)")?;
            let ddl = sql::SCHEMA
                .replace("{BLOB}", "BYTEA")
                .replace("{INT}", "BIGINT")
                .replace("{STRICT}", "");
            tx.batch_execute(&ddl)?;
            tx.execute(sql::INSERT_VERSION, &[&sql::SCHEMA_VERSION])?;
            let v: String = tx.query_one(sql::SELECT_VERSION, &[])?.get(0);
            if v != sql::SCHEMA_VERSION {
                return Err(StoreError::Corrupt {
                    what: format!("schema version {v:?}, expected {:?}", sql::SCHEMA_VERSION),
                }
                .into());
            }
            Ok(())
        })?;
        Ok(store)
    }

    /// The open client, reconnecting if there is none or it was closed.
    fn client(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            let mut client = self.config.connect(NoTls).map_err(|e| unavailable(&e))?;
            let ms = self.options.lock_timeout.as_millis().max(1);
            client
                .batch_execute(&format!("SET lock_timeout = {ms}"))
                .map_err(|e| unavailable(&e))?;
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("just connected"))
    }

    /// Runs `f` in a transaction and commits when it returns `Ok`; retries from the start on
    /// a serialization failure or a deadlock; otherwise an error rolls everything back.
    fn run<R>(
        &mut self,
        mut f: impl FnMut(&mut Transaction<'_>) -> std::result::Result<R, TxError>,
    ) -> Result<R> {
        let retries = self.options.retries;
        let mut attempt = 0;
        loop {
            let client = self.client()?;
            let outcome = match client.transaction() {
                Ok(mut tx) => match f(&mut tx) {
                    Ok(r) => tx.commit().map(|()| r).map_err(TxError::Pg),
                    Err(e) => Err(e),
                },
                Err(e) => Err(TxError::Pg(e)),
            };
            match outcome {
                Ok(r) => return Ok(r),
                Err(TxError::Store(e)) => return Err(e),
                Err(TxError::Pg(e)) if retryable(&e) && attempt < retries => attempt += 1,
                Err(TxError::Pg(e)) => {
                    if e.is_closed() {
                        self.client = None;
                    }
                    return Err(unavailable(&e));
                }
            }
        }
    }
}

fn read_charge(r: &Row) -> RawCharge {
    RawCharge {
        charge_id: r.get(0),
        part: r.get(1),
        ordinal: r.get(2),
        release_unit: r.get(3),
        cost: r.get(4),
        mode: r.get(5),
        key_id: r.get(6),
        epoch: r.get(7),
        stream: r.get(8),
        streams: r.get(9),
    }
}

fn find_charge_in(
    tx: &mut Transaction<'_>,
    owner: &str,
    unit: &str,
    charge_id: &str,
    part: u32,
) -> std::result::Result<Option<ChargeRecord>, TxError> {
    let row =
        tx.query_opt(&sql::select_charge(), &[&owner, &unit, &charge_id, &i64::from(part)])?;
    Ok(row.map(|r| read_charge(&r).into_record()).transpose()?)
}

fn key_in(
    tx: &mut Transaction<'_>,
    key_id: &str,
) -> std::result::Result<Option<KeyRecord>, TxError> {
    let row = tx.query_opt(&format!("{} FOR UPDATE", sql::SELECT_KEY), &[&key_id])?;
    Ok(row
        .map(|r| {
            let check: Vec<u8> = r.get(1);
            let key: Option<Vec<u8>> = r.get(2);
            key_record(key_id, r.get(0), &check, key.as_deref(), r.get(3))
        })
        .transpose()?)
}

impl BudgetStore for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn open_ledger(&mut self, owner: &str, budget: &Ledger) -> Result<Ledger> {
        check_id(owner, "an owner id of 1 to 256 bytes without NUL")?;
        let unit = unit_text(budget.unit());
        let bytes = encode_ledger(budget);
        self.run(|tx| {
            tx.execute(sql::INSERT_LEDGER, &[&owner, &unit, &bytes])?;
            let rec: Vec<u8> = tx.query_one(sql::SELECT_LEDGER, &[&owner, &unit])?.get(0);
            let stored = decode_ledger(&rec)?;
            logic::check_budget(owner, &stored, budget)?;
            Ok(stored)
        })
    }

    fn ledger(&mut self, owner: &str, unit: PrivacyUnit) -> Result<Option<Ledger>> {
        let unit = unit_text(unit);
        self.run(|tx| {
            let row = tx.query_opt(sql::SELECT_LEDGER, &[&owner, &unit])?;
            Ok(row.map(|r| decode_ledger(&r.get::<_, Vec<u8>>(0))).transpose()?)
        })
    }

    fn charge(&mut self, req: &ChargeRequest<'_>) -> Result<ChargeOutcome> {
        check_id(req.charge_id, "a charge id of 1 to 256 bytes without NUL")?;
        let unit = unit_text(req.ledger_unit);
        let release_unit = unit_text(req.unit);
        let cost = encode_cost(req.cost).to_vec();
        self.run(|tx| {
            // The row lock serialises every charge to this ledger, across machines.
            let row =
                tx.query_opt(&format!("{} FOR UPDATE", sql::SELECT_LEDGER), &[&req.owner, &unit])?;
            let Some(row) = row else {
                return Err(StoreError::NoLedger { owner: req.owner.to_owned() }.into());
            };
            let (record, log_len): (Vec<u8>, i64) = (row.get(0), row.get(1));
            let current = decode_ledger(&record)?;
            let existing = find_charge_in(tx, req.owner, &unit, req.charge_id, req.part)?;
            match logic::decide_charge(&current, existing.as_ref(), req)? {
                Decision::Already => Ok(ChargeOutcome::AlreadyCharged(current)),
                Decision::Charge(next) => {
                    tx.execute(sql::UPDATE_LEDGER, &[&req.owner, &unit, &encode_ledger(&next)])?;
                    tx.execute(
                        sql::INSERT_CHARGE,
                        &[
                            &req.owner,
                            &unit,
                            &req.charge_id,
                            &i64::from(req.part),
                            &log_len,
                            &release_unit,
                            &cost,
                            &mode_text(req.mode),
                            &req.draw.key_id,
                            &to_db(req.draw.epoch),
                            &to_db(req.draw.stream),
                            &to_db(req.draw.streams),
                        ],
                    )?;
                    Ok(ChargeOutcome::Charged(*next))
                }
            }
        })
    }

    fn find_charge(
        &mut self,
        owner: &str,
        unit: PrivacyUnit,
        charge_id: &str,
        part: u32,
    ) -> Result<Option<ChargeRecord>> {
        let unit = unit_text(unit);
        self.run(|tx| find_charge_in(tx, owner, &unit, charge_id, part))
    }

    fn charge_log(
        &mut self,
        owner: &str,
        unit: PrivacyUnit,
    ) -> Result<(Ledger, Vec<ChargeRecord>)> {
        let unit = unit_text(unit);
        self.run(|tx| {
            // Lock the ledger so the opening and the rows are of one moment.
            let opening =
                tx.query_opt(&format!("{} FOR UPDATE", sql::SELECT_OPENING), &[&owner, &unit])?;
            let Some(opening) = opening else {
                return Err(StoreError::NoLedger { owner: owner.to_owned() }.into());
            };
            let opening = decode_ledger(&opening.get::<_, Vec<u8>>(0))?;
            let rows = tx.query(&sql::select_log(), &[&owner, &unit])?;
            let records =
                rows.iter().map(|r| read_charge(r).into_record()).collect::<Result<Vec<_>>>()?;
            Ok((opening, records))
        })
    }

    fn open_key(&mut self, key_id: &str, key: KeyRequest<'_>) -> Result<KeyRecord> {
        check_id(key_id, "a key id of 1 to 256 bytes without NUL")?;
        self.run(|tx| {
            let record = match key_in(tx, key_id)? {
                Some(r) => r,
                None => {
                    let fresh = logic::new_key_record(key_id, key)?;
                    let stored = fresh.stored_key.as_ref().map(|k| k.expose_bytes().to_vec());
                    // A concurrent registration may win; then its record is read back.
                    tx.execute(
                        sql::INSERT_KEY,
                        &[&key_id, &to_db(fresh.epoch), &fresh.check_value.to_vec(), &stored],
                    )?;
                    key_in(tx, key_id)?.ok_or_else(|| StoreError::Corrupt {
                        what: format!("key id {key_id:?} vanished after its insert"),
                    })?
                }
            };
            logic::check_key(&record, key)?;
            Ok(record)
        })
    }

    fn lease(&mut self, key_id: &str, count: u64, holder: &str) -> Result<Lease> {
        self.run(|tx| {
            let row = tx.query_opt(&format!("{} FOR UPDATE", sql::SELECT_KEY), &[&key_id])?;
            let Some(row) = row else {
                return Err(StoreError::KeyMismatch {
                    key_id: key_id.to_owned(),
                    what: "not registered (open it first)",
                }
                .into());
            };
            let next = from_db(row.get(3));
            let end = logic::lease_end(key_id, next, count)?;
            tx.execute(sql::UPDATE_NEXT_STREAM, &[&key_id, &to_db(end)])?;
            tx.execute(sql::INSERT_LEASE, &[&key_id, &to_db(next), &to_db(count), &holder])?;
            Ok(Lease { key_id: key_id.to_owned(), first: next, count, holder: holder.to_owned() })
        })
    }

    fn leases(&mut self, key_id: &str) -> Result<Vec<Lease>> {
        self.run(|tx| leases_in(tx, key_id))
    }

    fn check_integrity(&mut self) -> Result<()> {
        // Foreign keys, primary keys and uniqueness are enforced by the server itself; what
        // is left is the consistency between tables that no constraint states, read from
        // one snapshot.
        let (lengths, keys) = self.run(|tx| {
            tx.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
            let lengths: Vec<(String, String, i64, i64)> = tx
                .query(sql::SELECT_LOG_LENGTHS, &[])?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect();
            let mut keys = Vec::new();
            for r in tx.query(sql::SELECT_ALL_KEYS, &[])? {
                let key_id: String = r.get(0);
                let leases = leases_in(tx, &key_id)?;
                keys.push((key_id, from_db(r.get(1)), leases));
            }
            Ok((lengths, keys))
        })?;
        logic::check_log_lengths(&lengths)?;
        for (key_id, next, leases) in keys {
            logic::check_leases(&key_id, next, &leases)?;
        }
        Ok(())
    }
}

fn leases_in(tx: &mut Transaction<'_>, key_id: &str) -> std::result::Result<Vec<Lease>, TxError> {
    let rows = tx.query(sql::SELECT_LEASES, &[&key_id])?;
    let mut out: Vec<Lease> = rows
        .iter()
        .map(|r| Lease {
            key_id: key_id.to_owned(),
            first: from_db(r.get(0)),
            count: from_db(r.get(1)),
            holder: r.get(2),
        })
        .collect();
    out.sort_by_key(|l| l.first);
    Ok(out)
}
