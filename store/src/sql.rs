//! The schema and the statements both backends run, in PostgreSQL's `$n` parameter syntax
//! (the SQLite backend rewrites `$` to `?`, SQLite's numbered parameters).
//!
//! **Guarantee.** The schema enforces what the decisions rely on, independently of this
//! code: one ledger per `(owner, unit)`, one row per `(owner, unit, charge_id, part)`,
//! unique ordinals per ledger, charges only for stored ledgers, leases only for registered
//! key ids and at most one lease starting at each stream id. Unsigned 64-bit values
//! (epochs, stream ids) are stored as the signed 64-bit integer with the same bits.

use crate::error::{Result, StoreError};
use crate::record::{ChargeRecord, DrawRecord, decode_cost, parse_mode, parse_unit};

/// The schema version this crate writes and accepts.
pub(crate) const SCHEMA_VERSION: &str = "dpattn-store 1";

/// The tables, with `{BLOB}`, `{INT}` and `{STRICT}` filled in per backend.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS dpattn_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
){STRICT};
CREATE TABLE IF NOT EXISTS dpattn_ledgers (
    owner TEXT NOT NULL,
    unit TEXT NOT NULL,
    opening {BLOB} NOT NULL,
    record {BLOB} NOT NULL,
    log_len {INT} NOT NULL,
    PRIMARY KEY (owner, unit)
){STRICT};
CREATE TABLE IF NOT EXISTS dpattn_charges (
    owner TEXT NOT NULL,
    unit TEXT NOT NULL,
    charge_id TEXT NOT NULL,
    part {INT} NOT NULL,
    ordinal {INT} NOT NULL,
    release_unit TEXT NOT NULL,
    cost {BLOB} NOT NULL,
    mode TEXT NOT NULL,
    key_id TEXT NOT NULL,
    epoch {INT} NOT NULL,
    stream {INT} NOT NULL,
    streams {INT} NOT NULL,
    PRIMARY KEY (owner, unit, charge_id, part),
    UNIQUE (owner, unit, ordinal),
    FOREIGN KEY (owner, unit) REFERENCES dpattn_ledgers (owner, unit)
){STRICT};
CREATE TABLE IF NOT EXISTS dpattn_keys (
    key_id TEXT PRIMARY KEY,
    epoch {INT} NOT NULL,
    check_value {BLOB} NOT NULL,
    master_key {BLOB},
    next_stream {INT} NOT NULL
){STRICT};
CREATE TABLE IF NOT EXISTS dpattn_leases (
    key_id TEXT NOT NULL REFERENCES dpattn_keys (key_id),
    first_stream {INT} NOT NULL,
    stream_count {INT} NOT NULL,
    holder TEXT NOT NULL,
    PRIMARY KEY (key_id, first_stream)
){STRICT};
";

pub(crate) const INSERT_VERSION: &str =
    "INSERT INTO dpattn_meta (name, value) VALUES ('schema', $1) ON CONFLICT (name) DO NOTHING";
pub(crate) const SELECT_VERSION: &str = "SELECT value FROM dpattn_meta WHERE name = 'schema'";

pub(crate) const INSERT_LEDGER: &str = "INSERT INTO dpattn_ledgers (owner, unit, opening, record, log_len) \
     VALUES ($1, $2, $3, $3, 0) ON CONFLICT (owner, unit) DO NOTHING";
pub(crate) const SELECT_LEDGER: &str =
    "SELECT record, log_len FROM dpattn_ledgers WHERE owner = $1 AND unit = $2";
pub(crate) const SELECT_OPENING: &str =
    "SELECT opening FROM dpattn_ledgers WHERE owner = $1 AND unit = $2";
pub(crate) const UPDATE_LEDGER: &str = "UPDATE dpattn_ledgers SET record = $3, log_len = log_len + 1 \
     WHERE owner = $1 AND unit = $2";

const CHARGE_COLUMNS: &str =
    "charge_id, part, ordinal, release_unit, cost, mode, key_id, epoch, stream, streams";
pub(crate) fn select_charge() -> String {
    format!(
        "SELECT {CHARGE_COLUMNS} FROM dpattn_charges \
         WHERE owner = $1 AND unit = $2 AND charge_id = $3 AND part = $4"
    )
}
pub(crate) fn select_log() -> String {
    format!(
        "SELECT {CHARGE_COLUMNS} FROM dpattn_charges WHERE owner = $1 AND unit = $2 ORDER BY ordinal"
    )
}
pub(crate) const INSERT_CHARGE: &str = "INSERT INTO dpattn_charges \
     (owner, unit, charge_id, part, ordinal, release_unit, cost, mode, key_id, epoch, stream, streams) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

pub(crate) const SELECT_KEY: &str =
    "SELECT epoch, check_value, master_key, next_stream FROM dpattn_keys WHERE key_id = $1";
pub(crate) const INSERT_KEY: &str = "INSERT INTO dpattn_keys (key_id, epoch, check_value, master_key, next_stream) \
     VALUES ($1, $2, $3, $4, 0) ON CONFLICT (key_id) DO NOTHING";
pub(crate) const UPDATE_NEXT_STREAM: &str =
    "UPDATE dpattn_keys SET next_stream = $2 WHERE key_id = $1";
pub(crate) const INSERT_LEASE: &str = "INSERT INTO dpattn_leases (key_id, first_stream, stream_count, holder) \
     VALUES ($1, $2, $3, $4)";
pub(crate) const SELECT_LEASES: &str =
    "SELECT first_stream, stream_count, holder FROM dpattn_leases WHERE key_id = $1";
pub(crate) const SELECT_ALL_KEYS: &str = "SELECT key_id, next_stream FROM dpattn_keys";
pub(crate) const SELECT_LOG_LENGTHS: &str = "SELECT l.owner, l.unit, l.log_len, \
     (SELECT count(*) FROM dpattn_charges c WHERE c.owner = l.owner AND c.unit = l.unit) \
     FROM dpattn_ledgers l";

/// A `u64` in a signed 64-bit column (same bits).
pub(crate) fn to_db(x: u64) -> i64 {
    x as i64
}

/// The `u64` of a signed 64-bit column.
pub(crate) fn from_db(x: i64) -> u64 {
    x as u64
}

/// A charge row as read, before it is checked.
pub(crate) struct RawCharge {
    pub(crate) charge_id: String,
    pub(crate) part: i64,
    pub(crate) ordinal: i64,
    pub(crate) release_unit: String,
    pub(crate) cost: Vec<u8>,
    pub(crate) mode: String,
    pub(crate) key_id: String,
    pub(crate) epoch: i64,
    pub(crate) stream: i64,
    pub(crate) streams: i64,
}

impl RawCharge {
    /// The checked record.
    pub(crate) fn into_record(self) -> Result<ChargeRecord> {
        let part = u32::try_from(self.part)
            .map_err(|_| StoreError::Corrupt { what: format!("charge part {}", self.part) })?;
        let ordinal = u64::try_from(self.ordinal).map_err(|_| StoreError::Corrupt {
            what: format!("charge ordinal {}", self.ordinal),
        })?;
        Ok(ChargeRecord {
            charge_id: self.charge_id,
            part,
            ordinal,
            unit: parse_unit(&self.release_unit)?,
            cost: decode_cost(&self.cost)?,
            mode: parse_mode(&self.mode)?,
            draw: DrawRecord {
                key_id: self.key_id,
                epoch: from_db(self.epoch),
                stream: from_db(self.stream),
                streams: from_db(self.streams),
            },
        })
    }
}
