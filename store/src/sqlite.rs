//! [`SqliteStore`]: the embedded default — one database file in WAL mode, shared safely by
//! every thread and process of one machine.
//!
//! **Guarantee.** Every [`BudgetStore`] method runs in one `BEGIN IMMEDIATE` transaction:
//! SQLite takes the database's write lock at `BEGIN`, so two charges (or two leases) from
//! any threads or processes never interleave — each reads the ledger the previous one
//! committed, and the core's decision holds for the composition of all of them. A
//! transaction that fails or whose process dies before `COMMIT` leaves nothing (WAL
//! recovery discards it at the next open). `synchronous = FULL` makes each commit durable
//! across power loss, not just process crashes (WAL's default `NORMAL` could roll back the
//! last commits after a power cut, and with them charges whose releases went out). A
//! database that is locked past the busy timeout, read-only, missing, or not a database
//! refuses the charge ([`StoreError::Unavailable`], [`StoreError::Corrupt`]): nothing is
//! charged, and nothing may be released.
//!
//! The file must live on a local file system: SQLite's locks are not reliable over network
//! file systems (use PostgreSQL for replicas on several machines).

use std::path::Path;
use std::time::Duration;

use dpattn_core::accounting::ledger::Ledger;
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_core::sampling::NoiseKey;
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

use crate::BudgetStore;
use crate::error::{Result, StoreError};
use crate::logic::{self, Decision};
use crate::record::{
    ChargeOutcome, ChargeRecord, ChargeRequest, KeyRecord, KeyRequest, Lease, check_id,
    decode_ledger, encode_cost, encode_ledger, mode_text, unit_text,
};
use crate::sql::{self, RawCharge, from_db, to_db};

/// Options of [`SqliteStore::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqliteOptions {
    /// How long a transaction waits for another connection's write lock before the call is
    /// refused ([`StoreError::Unavailable`], "database is locked"). Default 10 s.
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self { busy_timeout: Duration::from_secs(10) }
    }
}

/// A ledger and lease store in one SQLite file (module docs).
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
}

/// Classifies a SQLite error: a file that is not a database (or is damaged) is
/// [`StoreError::Corrupt`]; everything else — locked, busy, read-only, I/O, cannot open — is
/// [`StoreError::Unavailable`].
fn db_err(e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt { what: format!("sqlite: {e}") }
        }
        _ => StoreError::Unavailable { backend: "sqlite", detail: e.to_string() },
    }
}

/// A `$n` statement in SQLite's `?n` syntax.
fn q(sql: &str) -> String {
    sql.replace('$', "?")
}

impl SqliteStore {
    /// Opens (creating if absent) the store at `path` with the default options.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be opened or written;
    /// [`StoreError::Corrupt`] for a file that is not a dpattn-store database.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating if absent) the store at `path`: WAL mode, `synchronous = FULL`,
    /// foreign keys on, the schema created or its version checked.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(db_err)?;
        conn.busy_timeout(options.busy_timeout).map_err(db_err)?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(db_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Unavailable {
                backend: "sqlite",
                detail: format!(
                    "the database could not be switched to WAL mode (it is in {mode:?} mode)"
                ),
            });
        }
        conn.pragma_update(None, "synchronous", "FULL").map_err(db_err)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(db_err)?;
        let mut store = Self { conn };
        store.run(|tx| {
            let ddl = sql::SCHEMA
                .replace("{BLOB}", "BLOB")
                .replace("{INT}", "INTEGER")
                .replace("{STRICT}", " STRICT");
            tx.execute_batch(&ddl).map_err(db_err)?;
            tx.execute(&q(sql::INSERT_VERSION), params![sql::SCHEMA_VERSION]).map_err(db_err)?;
            let v: String = tx.query_row(sql::SELECT_VERSION, [], |r| r.get(0)).map_err(db_err)?;
            if v != sql::SCHEMA_VERSION {
                return Err(StoreError::Corrupt {
                    what: format!("schema version {v:?}, expected {:?}", sql::SCHEMA_VERSION),
                });
            }
            Ok(())
        })?;
        Ok(store)
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction and commits when it returns `Ok`; an
    /// error (or a panic) rolls everything back.
    fn run<R>(&mut self, f: impl FnOnce(&Transaction<'_>) -> Result<R>) -> Result<R> {
        let tx =
            self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_err)?;
        let r = f(&tx)?;
        tx.commit().map_err(db_err)?;
        Ok(r)
    }

    /// The underlying connection (for inspection; writing through it bypasses every check).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

fn read_charge(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawCharge> {
    Ok(RawCharge {
        charge_id: r.get(0)?,
        part: r.get(1)?,
        ordinal: r.get(2)?,
        release_unit: r.get(3)?,
        cost: r.get(4)?,
        mode: r.get(5)?,
        key_id: r.get(6)?,
        epoch: r.get(7)?,
        stream: r.get(8)?,
        streams: r.get(9)?,
    })
}

fn find_charge_in(
    tx: &Connection,
    owner: &str,
    unit: &str,
    charge_id: &str,
    part: u32,
) -> Result<Option<ChargeRecord>> {
    tx.query_row(
        &q(&sql::select_charge()),
        params![owner, unit, charge_id, i64::from(part)],
        read_charge,
    )
    .optional()
    .map_err(db_err)?
    .map(RawCharge::into_record)
    .transpose()
}

/// `epoch, check_value, master_key, next_stream` of a key row.
type KeyRow = (i64, Vec<u8>, Option<Vec<u8>>, i64);

fn key_in(tx: &Connection, key_id: &str) -> Result<Option<KeyRecord>> {
    let row: Option<KeyRow> = tx
        .query_row(&q(sql::SELECT_KEY), params![key_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()
        .map_err(db_err)?;
    row.map(|(epoch, check, key, next)| key_record(key_id, epoch, &check, key.as_deref(), next))
        .transpose()
}

/// A key record from its columns (both backends).
pub(crate) fn key_record(
    key_id: &str,
    epoch: i64,
    check: &[u8],
    key: Option<&[u8]>,
    next: i64,
) -> Result<KeyRecord> {
    let corrupt = |what: &str| StoreError::Corrupt { what: format!("key id {key_id:?}: {what}") };
    let check_value: [u8; 16] = check.try_into().map_err(|_| corrupt("check value length"))?;
    let stored_key = match key {
        None => None,
        Some(k) => {
            let bytes: [u8; 32] = k.try_into().map_err(|_| corrupt("stored key length"))?;
            Some(NoiseKey::for_replay(bytes))
        }
    };
    Ok(KeyRecord {
        key_id: key_id.to_owned(),
        epoch: from_db(epoch),
        check_value,
        stored_key,
        next_stream: from_db(next),
    })
}

impl BudgetStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn open_ledger(&mut self, owner: &str, budget: &Ledger) -> Result<Ledger> {
        check_id(owner, "an owner id of 1 to 256 bytes without NUL")?;
        let unit = unit_text(budget.unit());
        let bytes = encode_ledger(budget);
        self.run(|tx| {
            tx.execute(&q(sql::INSERT_LEDGER), params![owner, unit, bytes]).map_err(db_err)?;
            let rec: Vec<u8> = tx
                .query_row(&q(sql::SELECT_LEDGER), params![owner, unit], |r| r.get(0))
                .map_err(db_err)?;
            let stored = decode_ledger(&rec)?;
            logic::check_budget(owner, &stored, budget)?;
            Ok(stored)
        })
    }

    fn ledger(&mut self, owner: &str, unit: PrivacyUnit) -> Result<Option<Ledger>> {
        let unit = unit_text(unit);
        let rec: Option<Vec<u8>> = self
            .conn
            .query_row(&q(sql::SELECT_LEDGER), params![owner, unit], |r| r.get(0))
            .optional()
            .map_err(db_err)?;
        rec.map(|r| decode_ledger(&r)).transpose()
    }

    fn charge(&mut self, req: &ChargeRequest<'_>) -> Result<ChargeOutcome> {
        check_id(req.charge_id, "a charge id of 1 to 256 bytes without NUL")?;
        let unit = unit_text(req.ledger_unit);
        self.run(|tx| {
            let row: Option<(Vec<u8>, i64)> = tx
                .query_row(&q(sql::SELECT_LEDGER), params![req.owner, unit], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()
                .map_err(db_err)?;
            let Some((record, log_len)) = row else {
                return Err(StoreError::NoLedger { owner: req.owner.to_owned() });
            };
            let current = decode_ledger(&record)?;
            let existing = find_charge_in(tx, req.owner, &unit, req.charge_id, req.part)?;
            match logic::decide_charge(&current, existing.as_ref(), req)? {
                Decision::Already => Ok(ChargeOutcome::AlreadyCharged(current)),
                Decision::Charge(next) => {
                    tx.execute(
                        &q(sql::UPDATE_LEDGER),
                        params![req.owner, unit, encode_ledger(&next)],
                    )
                    .map_err(db_err)?;
                    tx.execute(
                        &q(sql::INSERT_CHARGE),
                        params![
                            req.owner,
                            unit,
                            req.charge_id,
                            i64::from(req.part),
                            log_len,
                            unit_text(req.unit),
                            encode_cost(req.cost).to_vec(),
                            mode_text(req.mode),
                            req.draw.key_id,
                            to_db(req.draw.epoch),
                            to_db(req.draw.stream),
                            to_db(req.draw.streams),
                        ],
                    )
                    .map_err(db_err)?;
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
        find_charge_in(&self.conn, owner, &unit_text(unit), charge_id, part)
    }

    fn charge_log(
        &mut self,
        owner: &str,
        unit: PrivacyUnit,
    ) -> Result<(Ledger, Vec<ChargeRecord>)> {
        let unit = unit_text(unit);
        // One read transaction: the opening and the rows are of one snapshot.
        let tx =
            self.conn.transaction_with_behavior(TransactionBehavior::Deferred).map_err(db_err)?;
        let opening: Option<Vec<u8>> = tx
            .query_row(&q(sql::SELECT_OPENING), params![owner, unit], |r| r.get(0))
            .optional()
            .map_err(db_err)?;
        let opening = opening.ok_or_else(|| StoreError::NoLedger { owner: owner.to_owned() })?;
        let mut stmt = tx.prepare(&q(&sql::select_log())).map_err(db_err)?;
        let rows = stmt
            .query_map(params![owner, unit], read_charge)
            .map_err(db_err)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(db_err)?;
        drop(stmt);
        drop(tx); // read only: rolling back changes nothing
        let records = rows.into_iter().map(RawCharge::into_record).collect::<Result<Vec<_>>>()?;
        Ok((decode_ledger(&opening)?, records))
    }

    fn open_key(&mut self, key_id: &str, key: KeyRequest<'_>) -> Result<KeyRecord> {
        check_id(key_id, "a key id of 1 to 256 bytes without NUL")?;
        self.run(|tx| {
            let record = match key_in(tx, key_id)? {
                Some(r) => r,
                None => {
                    let fresh = logic::new_key_record(key_id, key)?;
                    let stored = fresh.stored_key.as_ref().map(|k| k.expose_bytes().to_vec());
                    tx.execute(
                        &q(sql::INSERT_KEY),
                        params![key_id, to_db(fresh.epoch), fresh.check_value.to_vec(), stored],
                    )
                    .map_err(db_err)?;
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
            let next: Option<i64> = tx
                .query_row(&q(sql::SELECT_KEY), params![key_id], |r| r.get(3))
                .optional()
                .map_err(db_err)?;
            let next = from_db(next.ok_or_else(|| StoreError::KeyMismatch {
                key_id: key_id.to_owned(),
                what: "not registered (open it first)",
            })?);
            let end = logic::lease_end(key_id, next, count)?;
            tx.execute(&q(sql::UPDATE_NEXT_STREAM), params![key_id, to_db(end)]).map_err(db_err)?;
            tx.execute(&q(sql::INSERT_LEASE), params![key_id, to_db(next), to_db(count), holder])
                .map_err(db_err)?;
            Ok(Lease { key_id: key_id.to_owned(), first: next, count, holder: holder.to_owned() })
        })
    }

    fn leases(&mut self, key_id: &str) -> Result<Vec<Lease>> {
        leases_in(&self.conn, key_id)
    }

    fn check_integrity(&mut self) -> Result<()> {
        let strings = |conn: &Connection, pragma: &str| -> Result<Vec<String>> {
            let mut stmt = conn.prepare(pragma).map_err(db_err)?;
            stmt.query_map([], |r| r.get::<_, String>(0))
                .map_err(db_err)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db_err)
        };
        let lines = strings(&self.conn, "PRAGMA integrity_check")?;
        if lines != ["ok"] {
            return Err(StoreError::Corrupt {
                what: format!("integrity_check: {}", lines.join("; ")),
            });
        }
        // foreign_key_check returns one row per orphan; its first column is the table.
        let orphans = strings(&self.conn, "PRAGMA foreign_key_check")?;
        if !orphans.is_empty() {
            return Err(StoreError::Corrupt {
                what: format!("foreign_key_check: orphan rows in {}", orphans.join(", ")),
            });
        }
        // One read transaction: the counts, keys and leases are of one snapshot.
        let tx =
            self.conn.transaction_with_behavior(TransactionBehavior::Deferred).map_err(db_err)?;
        let mut stmt = tx.prepare(sql::SELECT_LOG_LENGTHS).map_err(db_err)?;
        let lengths = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .map_err(db_err)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(db_err)?;
        drop(stmt);
        logic::check_log_lengths(&lengths)?;
        let mut stmt = tx.prepare(sql::SELECT_ALL_KEYS).map_err(db_err)?;
        let keys = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(db_err)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(db_err)?;
        drop(stmt);
        for (key_id, next) in keys {
            logic::check_leases(&key_id, from_db(next), &leases_in(&tx, &key_id)?)?;
        }
        Ok(())
    }
}

fn leases_in(conn: &Connection, key_id: &str) -> Result<Vec<Lease>> {
    let mut stmt = conn.prepare(&q(sql::SELECT_LEASES)).map_err(db_err)?;
    let mut out = stmt
        .query_map(params![key_id], |r| {
            Ok(Lease {
                key_id: key_id.to_owned(),
                first: from_db(r.get(0)?),
                count: from_db(r.get(1)?),
                holder: r.get(2)?,
            })
        })
        .map_err(db_err)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db_err)?;
    out.sort_by_key(|l| l.first);
    Ok(out)
}
