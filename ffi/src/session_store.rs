//! Sessions on a durable budget store from C: `dpattn_session_open_sqlite`,
//! `dpattn_session_open_postgres` (the `dpattn-store` crate).
//!
//! **Guarantee.** A session opened on a store is the same `dpattn_session` handle every
//! release takes, with its ledger and stream counter in a database instead of process
//! memory: each release's charge is checked and committed in one transaction *before* the
//! release draws noise or writes output (a crash after the charge loses budget, never
//! privacy); stream ids come from ranges leased atomically, so sessions in different
//! processes or on different machines never share a `(key, stream)` pair; a store that
//! cannot be reached or cannot commit refuses the release with
//! `DPATTN_STATUS_STORE_UNAVAILABLE` and nothing is charged or written. With
//! `dpattn_session_set_charge_id`, a release is idempotent: retrying it under the same
//! charge id (after a timeout, from another replica) is charged once and redraws the same
//! noise. The master key is stored only under `DPATTN_STORE_KEY_IN_STORE`, and then the
//! database is as sensitive as the data.

use std::ffi::c_char;

use dpattn_store::{KeyRequest, PostgresStore, SqliteStore, StoreSession};

use crate::args::{Out, c_str, read};
use crate::boundary::{FfiError, ffi_status, unknown};
use crate::handle::Handle;
use crate::ledger::dpattn_ledger;
use crate::session::{FfiSession, dpattn_session};
use crate::status::dpattn_status;
use crate::tensor::dpattn_key;

/// `key_policy` of `dpattn_session_open_*`: the caller holds the master key (`key` must not
/// be NULL); the store keeps only the key id's epoch and a key check value, never the key.
pub const DPATTN_STORE_KEY_CALLER: u32 = 0;
/// `key_policy` of `dpattn_session_open_*`: the store keeps the master key (`key` must be
/// NULL): generated from the operating system the first time the key id is opened, read
/// back afterwards. **The database is then as sensitive as the data**: whoever reads it
/// can subtract the noise of every release.
pub const DPATTN_STORE_KEY_IN_STORE: u32 = 1;

/// Opens a store session on `store` (boxed), checking the shared arguments.
///
/// # Safety
/// As the `dpattn_session_open_*` callers.
unsafe fn open_on(
    store: impl FnOnce() -> Result<Box<dyn dpattn_store::BudgetStore>, FfiError>,
    owner_id: *const c_char,
    budget: *const dpattn_ledger,
    key_id: *const c_char,
    key: *const dpattn_key,
    key_policy: u32,
    out_session: *mut *mut dpattn_session,
) -> Result<(), FfiError> {
    let out = Out::new(out_session, "out_session")?;
    // SAFETY: forwarded caller contract.
    let owner = unsafe { c_str(owner_id, "owner_id") }?;
    // SAFETY: forwarded caller contract.
    let key_id = unsafe { c_str(key_id, "key_id") }?;
    let budget = dpattn_ledger::lookup(budget, "budget")?.with(|l| l.clone());
    let caller_key = match key_policy {
        DPATTN_STORE_KEY_CALLER => {
            // SAFETY: forwarded caller contract.
            Some(unsafe { read(key, "key") }?.to_core())
        }
        DPATTN_STORE_KEY_IN_STORE if key.is_null() => None,
        DPATTN_STORE_KEY_IN_STORE => {
            return Err(FfiError::Core(dpattn_core::Error::OutOfRange {
                name: "key",
                value: f64::NAN,
                allowed: "NULL with DPATTN_STORE_KEY_IN_STORE (the store generates and keeps the key)",
            }));
        }
        p => {
            return Err(unknown(
                "key_policy",
                p,
                "DPATTN_STORE_KEY_CALLER (0), DPATTN_STORE_KEY_IN_STORE (1)",
            ));
        }
    };
    let request = match &caller_key {
        Some(k) => KeyRequest::Caller(k),
        None => KeyRequest::InStore,
    };
    let session = StoreSession::open_with(
        store()?,
        owner,
        &budget,
        key_id,
        request,
        dpattn_store::DEFAULT_LEASE_SIZE,
    )?;
    let handle = dpattn_session::into_handle(FfiSession::Store {
        session: Box::new(session),
        next_charge_id: None,
    });
    // SAFETY: non-NULL (checked), writable per the caller contract.
    unsafe { out.write(handle) };
    Ok(())
}

/// Opens a session whose ledger and stream ids live in the SQLite database at `path`
/// (created if absent; one file in WAL mode, for every process of one machine). The ledger
/// is the one of `owner_id` for `budget`'s privacy unit: stored from `budget` the first
/// time, afterwards the stored ledger (what was spent stays spent; a `budget` with another
/// total or kind is refused). `budget` is only read (a ledger handle from
/// `dpattn_ledger_new_*`; the caller keeps it). `key_id` names the master key, which the
/// caller passes in `key` (`DPATTN_STORE_KEY_CALLER`; the store keeps a check value and
/// refuses another key under the same id) or the store keeps (`DPATTN_STORE_KEY_IN_STORE`,
/// `key` NULL). Writes the session to `*out_session` (free with `dpattn_session_free`).
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_INVALID_HANDLE`,
/// `DPATTN_STATUS_OUT_OF_RANGE` (a string that is not UTF-8, an empty or longer than 256
/// bytes id, an unknown `key_policy`, a key with `DPATTN_STORE_KEY_IN_STORE`),
/// `DPATTN_STATUS_STORE_UNAVAILABLE` (the file cannot be opened, created or written, or is
/// locked past the 10 s busy timeout) or `DPATTN_STATUS_STORE_CONFLICT` (another budget or
/// key is stored under these ids, or the file is not a dpattn store).
///
/// # Safety
/// `path`, `owner_id` and `key_id` must be NULL or NUL-terminated strings; `key` NULL or a
/// `dpattn_key`; `out_session` NULL or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_open_sqlite(
    path: *const c_char,
    owner_id: *const c_char,
    budget: *const dpattn_ledger,
    key_id: *const c_char,
    key: *const dpattn_key,
    key_policy: u32,
    out_session: *mut *mut dpattn_session,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let path = unsafe { c_str(path, "path") }?;
        let store = || Ok(Box::new(SqliteStore::open(path)?) as Box<dyn dpattn_store::BudgetStore>);
        // SAFETY: forwarded caller contract.
        unsafe { open_on(store, owner_id, budget, key_id, key, key_policy, out_session) }
    })
}

/// Opens a session whose ledger and stream ids live in the PostgreSQL database of
/// `conninfo` (libpq `key=value` pairs or a `postgresql://` URL; no TLS: use a Unix
/// socket, the loopback interface or a TLS-terminating proxy), shared by every replica that
/// opens the same ids. Otherwise as `dpattn_session_open_sqlite`; the store waits at most
/// 10 s for a lock on the ledger (`DPATTN_STATUS_STORE_UNAVAILABLE` after that), and a
/// connection the server dropped is reopened at the next call (the call that found it
/// dropped is refused, nothing charged).
///
/// Returns as `dpattn_session_open_sqlite`; `DPATTN_STATUS_OUT_OF_RANGE` also for a
/// connection string that does not parse.
///
/// # Safety
/// As `dpattn_session_open_sqlite`, with `conninfo` for `path`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_open_postgres(
    conninfo: *const c_char,
    owner_id: *const c_char,
    budget: *const dpattn_ledger,
    key_id: *const c_char,
    key: *const dpattn_key,
    key_policy: u32,
    out_session: *mut *mut dpattn_session,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let conninfo = unsafe { c_str(conninfo, "conninfo") }?;
        let store = || {
            Ok(Box::new(PostgresStore::connect(conninfo)?) as Box<dyn dpattn_store::BudgetStore>)
        };
        // SAFETY: forwarded caller contract.
        unsafe { open_on(store, owner_id, budget, key_id, key, key_policy, out_session) }
    })
}

/// Sets the charge id of the next release on a store session (1 to 256 bytes of UTF-8):
/// the idempotency key of one request. A release under a charge id already recorded is not
/// charged again and draws the recorded stream ids, so retrying the *same request* returns
/// the same output; **never reuse a charge id for other inputs** (two releases on one noise
/// draw reveal the difference of their inputs). The id is used by the next release only;
/// without one, each release gets a fresh id. The same id with another cost is refused with
/// `DPATTN_STATUS_STORE_CONFLICT`.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_INVALID_HANDLE`,
/// `DPATTN_STATUS_OUT_OF_RANGE` (not UTF-8, empty or too long) or
/// `DPATTN_STATUS_UNSUPPORTED` (a session in memory: its charges are not durable).
///
/// # Safety
/// `charge_id` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_set_charge_id(
    session: *mut dpattn_session,
    charge_id: *const c_char,
) -> dpattn_status {
    ffi_status(|| {
        let handle = dpattn_session::lookup(session, "session")?;
        // SAFETY: forwarded caller contract.
        let id = unsafe { c_str(charge_id, "charge_id") }?;
        if id.is_empty() || id.len() > dpattn_store::record::MAX_ID_LEN {
            return Err(FfiError::Core(dpattn_core::Error::OutOfRange {
                name: "charge_id",
                value: id.len() as f64,
                allowed: "1 to 256 bytes",
            }));
        }
        handle.with(|s| match s {
            FfiSession::Store { next_charge_id, .. } => {
                *next_charge_id = Some(id.to_owned());
                Ok(())
            }
            FfiSession::Memory { .. } => Err(FfiError::Core(dpattn_core::Error::Unsupported {
                what: "charge ids on a session in memory (open the session on a store)",
            })),
        })
    })
}

/// Writes a new ledger handle holding a snapshot of the session's ledger to `*out_ledger`:
/// on a store session, the stored ledger read now (every process's charges included); on a
/// session in memory, a copy of its ledger. Free it with `dpattn_ledger_free`; charging the
/// snapshot changes neither the session nor the store.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_INVALID_HANDLE`,
/// `DPATTN_STATUS_UNSUPPORTED` (a replay session without a ledger) or
/// `DPATTN_STATUS_STORE_UNAVAILABLE`.
///
/// # Safety
/// `out_ledger` must be NULL or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_ledger_snapshot(
    session: *const dpattn_session,
    out_ledger: *mut *mut dpattn_ledger,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_ledger, "out_ledger")?;
        let ledger = dpattn_session::lookup(session, "session")?.with(|s| match s {
            FfiSession::Store { session, .. } => Ok(session.ledger()?),
            FfiSession::Memory { ledger: Some(l), .. } => Ok(l.with(|l| l.clone())),
            FfiSession::Memory { ledger: None, .. } => {
                Err(FfiError::Core(dpattn_core::Error::Unsupported {
                    what: "a ledger snapshot of a replay session without a ledger",
                }))
            }
        })?;
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe { out.write(dpattn_ledger::into_handle(ledger)) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;
    use std::ptr::{null, null_mut};

    use dpattn_core::output_perturbation as op;

    use super::*;
    use crate::attention::tests::{data, t, tm};
    use crate::last_error::last_error_string;
    use crate::ledger::{
        DPATTN_UNIT_PROMPT, DPATTN_UNIT_TOKENS, dpattn_ledger_charges, dpattn_ledger_free,
        dpattn_ledger_new_approx, dpattn_privacy_unit,
    };
    use crate::output_perturbation::{
        dpattn_output_perturbation_attention, dpattn_output_perturbation_params,
    };
    use crate::session::{
        dpattn_session_free, dpattn_session_master_key, dpattn_session_position,
        dpattn_session_save, dpattn_session_state_len,
    };
    use crate::tensor::DPATTN_DTYPE_F32;

    const TOKEN: dpattn_privacy_unit = dpattn_privacy_unit { kind: DPATTN_UNIT_TOKENS, tokens: 1 };
    const SQ: [usize; 4] = [1, 1, 2, 4];
    const SK: [usize; 4] = [1, 1, 6, 4];

    fn cs(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    struct TempDir(std::path::PathBuf);
    impl TempDir {
        fn new() -> Self {
            let mut b = [0u8; 8];
            getrandom_fill(&mut b);
            let name: String = b.iter().map(|x| format!("{x:02x}")).collect();
            let d = std::env::temp_dir().join(format!("dpattn-ffi-store-{name}"));
            std::fs::create_dir_all(&d).unwrap();
            TempDir(d)
        }
        fn file(&self, name: &str) -> CString {
            cs(self.0.join(name).to_str().unwrap())
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Random bytes (from a fresh OS key, the core's only std source of randomness).
    fn getrandom_fill(b: &mut [u8]) {
        let k = dpattn_core::sampling::NoiseKey::generate().unwrap();
        let n = b.len();
        b.copy_from_slice(&k.expose_bytes()[..n]);
    }

    fn approx(unit: dpattn_privacy_unit, epsilon: f64) -> *mut dpattn_ledger {
        let mut l = null_mut();
        // SAFETY: valid out-pointer.
        let st = unsafe { dpattn_ledger_new_approx(unit, epsilon, 1e-3, &mut l) };
        assert_eq!(st, dpattn_status::Ok);
        l
    }

    fn open_sqlite(
        path: &CString,
        owner: &str,
        budget: *const dpattn_ledger,
        key: &dpattn_key,
    ) -> Result<*mut dpattn_session, dpattn_status> {
        let (owner, key_id) = (cs(owner), cs("key-1"));
        let mut s = null_mut();
        // SAFETY: live locals.
        let st = unsafe {
            dpattn_session_open_sqlite(
                path.as_ptr(),
                owner.as_ptr(),
                budget,
                key_id.as_ptr(),
                key,
                DPATTN_STORE_KEY_CALLER,
                &mut s,
            )
        };
        if st == dpattn_status::Ok { Ok(s) } else { Err(st) }
    }

    /// Charges recorded in the session's store, through a snapshot.
    fn stored_charges(s: *const dpattn_session) -> u64 {
        let mut l = null_mut();
        // SAFETY: valid out-pointer.
        let st = unsafe { dpattn_session_ledger_snapshot(s, &mut l) };
        assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
        let mut n = u64::MAX;
        // SAFETY: live handle, valid out-pointer; freed once.
        unsafe {
            assert_eq!(dpattn_ledger_charges(l, &mut n), dpattn_status::Ok);
            dpattn_ledger_free(l);
        }
        n
    }

    /// One output-perturbation release of `(epsilon, 1e-6)` through the C entry point
    /// under `charge_id` (if any): the output bits, or the status with the output checked
    /// untouched (NaN sentinels).
    fn release(
        s: *mut dpattn_session,
        charge_id: Option<&str>,
        epsilon: f64,
    ) -> Result<Vec<u32>, dpattn_status> {
        if let Some(id) = charge_id {
            let id = cs(id);
            // SAFETY: live local.
            let st = unsafe { dpattn_session_set_charge_id(s, id.as_ptr()) };
            if st != dpattn_status::Ok {
                return Err(st);
            }
        }
        let (q, k, v) = (data(8, 1), data(24, 2), data(24, 3));
        let mut out = vec![f32::NAN; 8];
        let mut sigma = [0f64; 1];
        let mut scratch = vec![0f32; op::output_perturbation_scratch_len(4, 4).unwrap()];
        let p = dpattn_output_perturbation_params {
            key_norm: 1.5,
            value_norm: 2.0,
            epsilon,
            delta: 1e-6,
            ..Default::default()
        };
        // SAFETY: live locals of the stated lengths; `s` is any value.
        let st = unsafe {
            dpattn_output_perturbation_attention(
                &tm(&mut out, SQ, DPATTN_DTYPE_F32),
                &t(&q, SQ, DPATTN_DTYPE_F32),
                &t(&k, SK, DPATTN_DTYPE_F32),
                &t(&v, SK, DPATTN_DTYPE_F32),
                &p,
                s,
                sigma.as_mut_ptr(),
                sigma.len(),
                scratch.as_mut_ptr(),
                scratch.len(),
            )
        };
        if st == dpattn_status::Ok {
            assert!(out.iter().all(|x| x.is_finite()));
            Ok(out.iter().map(|x| x.to_bits()).collect())
        } else {
            assert!(out.iter().all(|x| x.is_nan()), "output written on failure");
            Err(st)
        }
    }

    #[test]
    fn a_sqlite_session_charges_the_store_before_releasing_and_survives_reopening() {
        let dir = TempDir::new();
        let path = dir.file("budget.sqlite");
        let budget = approx(TOKEN, 0.5); // room for four releases of epsilon 0.125
        let key = dpattn_key { bytes: [42; 32] };
        let s = open_sqlite(&path, "doc-1", budget, &key).unwrap();
        let first = release(s, Some("req-1"), 0.125).unwrap();
        let (epoch, next) = {
            let (mut e, mut n) = (0, 0);
            // SAFETY: live locals.
            assert_eq!(unsafe { dpattn_session_position(s, &mut e, &mut n) }, dpattn_status::Ok);
            (e, n)
        };
        assert_eq!(next, op::STREAMS, "the first lease starts at stream id 0");
        // A retry of the same request: not charged again, the same output bit for bit.
        assert_eq!(release(s, Some("req-1"), 0.125).unwrap(), first);
        assert_eq!(stored_charges(s), 1);
        // The same id with another cost is refused, with the store's message.
        assert_eq!(release(s, Some("req-1"), 0.25), Err(dpattn_status::StoreConflict));
        assert!(last_error_string().contains("req-1"), "{}", last_error_string());
        // Releases without an id get fresh ids: each is charged.
        let other = release(s, None, 0.125).unwrap();
        assert_ne!(other, first);
        assert_eq!(stored_charges(s), 2);
        // The master key is the caller's; the epoch is the key id's (public).
        let mut k = dpattn_key { bytes: [0; 32] };
        // SAFETY: live locals.
        assert_eq!(unsafe { dpattn_session_master_key(s, &mut k) }, dpattn_status::Ok);
        assert_eq!(k.bytes, key.bytes);
        // A store session keeps its state in the store: nothing to save.
        let mut buf = vec![0u8; dpattn_session_state_len()];
        // SAFETY: `buf` is writable for its length.
        let st = unsafe { dpattn_session_save(s, buf.as_mut_ptr(), buf.len()) };
        assert_eq!(st, dpattn_status::Unsupported);
        // SAFETY: freed once.
        unsafe { dpattn_session_free(s) };
        // Reopened (a restart): the charges are there, the same epoch, fresh stream ids.
        let s = open_sqlite(&path, "doc-1", budget, &key).unwrap();
        assert_eq!(stored_charges(s), 2);
        let (mut e, mut n) = (0, 0);
        // SAFETY: live locals.
        assert_eq!(unsafe { dpattn_session_position(s, &mut e, &mut n) }, dpattn_status::Ok);
        assert_eq!(e, epoch);
        release(s, Some("req-3"), 0.125).unwrap();
        release(s, Some("req-4"), 0.125).unwrap();
        assert_eq!(release(s, Some("req-5"), 0.125), Err(dpattn_status::Infeasible));
        assert_eq!(stored_charges(s), 4);
        // SAFETY: freed once.
        unsafe { dpattn_session_free(s) };
        // Another budget under the same owner, or another key under the same key id.
        let bigger = approx(TOKEN, 5.0);
        assert_eq!(open_sqlite(&path, "doc-1", bigger, &key), Err(dpattn_status::StoreConflict));
        let wrong = dpattn_key { bytes: [43; 32] };
        assert_eq!(open_sqlite(&path, "doc-2", budget, &wrong), Err(dpattn_status::StoreConflict));
        assert!(last_error_string().contains("key-1"), "{}", last_error_string());
        // A ledger for prompts refuses a release that protects a token.
        let prompts = approx(dpattn_privacy_unit { kind: DPATTN_UNIT_PROMPT, tokens: 0 }, 5.0);
        let p = open_sqlite(&path, "doc-3", prompts, &key).unwrap();
        assert_eq!(release(p, Some("x"), 0.125), Err(dpattn_status::UnitMismatch));
        assert_eq!(stored_charges(p), 0);
        // SAFETY: live handles, freed once.
        unsafe {
            dpattn_session_free(p);
            for l in [budget, bigger, prompts] {
                dpattn_ledger_free(l);
            }
        }
    }

    #[test]
    fn unreachable_stores_and_bad_arguments_are_refused_with_nothing_written() {
        let dir = TempDir::new();
        let budget = approx(TOKEN, 1.0);
        let key = dpattn_key { bytes: [7; 32] };
        let sentinel = 0x10 as *mut dpattn_session;
        let (owner, key_id, path) = (cs("o"), cs("k"), dir.file("b.sqlite"));
        let call = |path: *const c_char,
                    owner: *const c_char,
                    budget: *const dpattn_ledger,
                    key_id: *const c_char,
                    key: *const dpattn_key,
                    policy: u32| {
            let mut s = sentinel;
            // SAFETY: every pointer is NULL, a live local or a handle value.
            let st = unsafe {
                dpattn_session_open_sqlite(path, owner, budget, key_id, key, policy, &mut s)
            };
            assert_eq!(s, sentinel, "nothing written on failure");
            (st, last_error_string())
        };
        let c = DPATTN_STORE_KEY_CALLER;
        let (st, msg) = call(null(), owner.as_ptr(), budget, key_id.as_ptr(), &key, c);
        assert_eq!(st, dpattn_status::NullArgument);
        assert!(msg.contains("path"));
        let (st, msg) = call(path.as_ptr(), null(), budget, key_id.as_ptr(), &key, c);
        assert_eq!(st, dpattn_status::NullArgument);
        assert!(msg.contains("owner_id"));
        let (st, _) = call(path.as_ptr(), owner.as_ptr(), null(), key_id.as_ptr(), &key, c);
        assert_eq!(st, dpattn_status::NullArgument);
        let (st, msg) = call(path.as_ptr(), owner.as_ptr(), budget, key_id.as_ptr(), null(), c);
        assert_eq!(st, dpattn_status::NullArgument);
        assert!(msg.contains("key"));
        let (st, _) = call(path.as_ptr(), owner.as_ptr(), budget, key_id.as_ptr(), &key, 7);
        assert_eq!(st, dpattn_status::OutOfRange);
        let (st, _) = call(
            path.as_ptr(),
            owner.as_ptr(),
            budget,
            key_id.as_ptr(),
            &key,
            DPATTN_STORE_KEY_IN_STORE,
        );
        assert_eq!(st, dpattn_status::OutOfRange, "a key with the in-store policy");
        let empty = cs("");
        let (st, _) = call(path.as_ptr(), empty.as_ptr(), budget, key_id.as_ptr(), &key, c);
        assert_eq!(st, dpattn_status::OutOfRange);
        let bad = [0xFFu8, 0];
        let (st, _) = call(path.as_ptr(), bad.as_ptr().cast(), budget, key_id.as_ptr(), &key, c);
        assert_eq!(st, dpattn_status::OutOfRange);
        // A folder that does not exist: the store is unreachable.
        let missing = dir.file("no/such/dir/b.sqlite");
        let (st, msg) = call(missing.as_ptr(), owner.as_ptr(), budget, key_id.as_ptr(), &key, c);
        assert_eq!(st, dpattn_status::StoreUnavailable, "{msg}");
        // A file that is not a database.
        let junk = dir.0.join("junk.sqlite");
        std::fs::write(&junk, vec![0x55u8; 8192]).unwrap();
        let junk = cs(junk.to_str().unwrap());
        let (st, msg) = call(junk.as_ptr(), owner.as_ptr(), budget, key_id.as_ptr(), &key, c);
        assert_eq!(st, dpattn_status::StoreConflict, "{msg}");
        // A session locked out of its database at release time: refused before any
        // output, nothing charged; the same charge id goes through once the lock is gone.
        // (The session is built here with a 100 ms busy timeout instead of 10 s.)
        let store = SqliteStore::open_with(
            dir.0.join("b.sqlite"),
            dpattn_store::SqliteOptions { busy_timeout: std::time::Duration::from_millis(100) },
        )
        .unwrap();
        let ledger = dpattn_ledger::lookup(budget, "b").unwrap().with(|l| l.clone());
        let core_key = key.to_core();
        let session =
            StoreSession::open(store, "locked", &ledger, "k", KeyRequest::Caller(&core_key))
                .unwrap();
        let s = dpattn_session::into_handle(FfiSession::Store {
            session: Box::new(session),
            next_charge_id: None,
        });
        // Another connection holds the write lock (as another process would).
        let holder = SqliteStore::open(dir.0.join("b.sqlite")).unwrap();
        holder.connection().execute_batch("BEGIN EXCLUSIVE").unwrap();
        assert_eq!(release(s, Some("r"), 0.125), Err(dpattn_status::StoreUnavailable));
        assert!(last_error_string().contains("locked"), "{}", last_error_string());
        assert_eq!(stored_charges_after_unlock(&holder, s), 0);
        let out = release(s, Some("r"), 0.125).unwrap();
        assert_eq!(release(s, Some("r"), 0.125).unwrap(), out);
        assert_eq!(stored_charges(s), 1);
        // Charge ids: NULL, empty, on a memory session.
        let (empty_id, id) = (cs(""), cs("x"));
        // SAFETY: live locals and handles.
        unsafe {
            assert_eq!(dpattn_session_set_charge_id(s, null()), dpattn_status::NullArgument);
            assert_eq!(
                dpattn_session_set_charge_id(s, empty_id.as_ptr()),
                dpattn_status::OutOfRange
            );
            let mut mem = null_mut();
            assert_eq!(crate::session::dpattn_session_new(budget, &mut mem), dpattn_status::Ok);
            assert_eq!(dpattn_session_set_charge_id(mem, id.as_ptr()), dpattn_status::Unsupported);
            assert_eq!(stored_charges(mem), 0, "a memory session's snapshot is its ledger");
            let mut l = null_mut();
            assert_eq!(
                dpattn_session_ledger_snapshot(mem, null_mut()),
                dpattn_status::NullArgument
            );
            assert_eq!(
                dpattn_session_ledger_snapshot(budget.cast(), &mut l),
                dpattn_status::InvalidHandle
            );
            dpattn_session_free(mem);
            dpattn_session_free(s);
            dpattn_ledger_free(budget);
        }
    }

    /// Releases the lock `holder` took, then reads the stored charges of `s`.
    fn stored_charges_after_unlock(holder: &SqliteStore, s: *const dpattn_session) -> u64 {
        holder.connection().execute_batch("ROLLBACK").unwrap();
        stored_charges(s)
    }

    #[test]
    fn a_postgres_session_charges_the_server() {
        let Some(conninfo) = postgres_conninfo() else { return };
        let budget = approx(TOKEN, 0.25);
        let key = dpattn_key { bytes: [9; 32] };
        let mut b = [0u8; 8];
        getrandom_fill(&mut b);
        let suffix: String = b.iter().map(|x| format!("{x:02x}")).collect();
        let (conn, owner, key_id) =
            (cs(&conninfo), cs(&format!("ffi-owner-{suffix}")), cs(&format!("ffi-key-{suffix}")));
        let open = |s: &mut *mut dpattn_session| {
            // SAFETY: live locals.
            unsafe {
                dpattn_session_open_postgres(
                    conn.as_ptr(),
                    owner.as_ptr(),
                    budget,
                    key_id.as_ptr(),
                    &key,
                    DPATTN_STORE_KEY_CALLER,
                    s,
                )
            }
        };
        let mut s = null_mut();
        assert_eq!(open(&mut s), dpattn_status::Ok, "{}", last_error_string());
        let a = release(s, Some("a"), 0.125).unwrap();
        assert_eq!(release(s, Some("a"), 0.125).unwrap(), a);
        let mut s2 = null_mut();
        assert_eq!(open(&mut s2), dpattn_status::Ok);
        release(s2, Some("b"), 0.125).unwrap();
        assert_eq!(release(s, Some("c"), 0.125), Err(dpattn_status::Infeasible));
        assert_eq!((stored_charges(s), stored_charges(s2)), (2, 2));
        // No server: refused at open, nothing written.
        let nowhere = cs("host=127.0.0.1 port=1 user=x dbname=y connect_timeout=2");
        let mut s3 = 0x10 as *mut dpattn_session;
        // SAFETY: live locals.
        let st = unsafe {
            dpattn_session_open_postgres(
                nowhere.as_ptr(),
                owner.as_ptr(),
                budget,
                key_id.as_ptr(),
                &key,
                DPATTN_STORE_KEY_CALLER,
                &mut s3,
            )
        };
        assert_eq!(st, dpattn_status::StoreUnavailable);
        assert_eq!(s3, 0x10 as *mut dpattn_session);
        // SAFETY: live handles, freed once.
        unsafe {
            dpattn_session_free(s);
            dpattn_session_free(s2);
            dpattn_ledger_free(budget);
        }
    }

    /// `DPATTN_TEST_POSTGRES`, or a loud skip — a failure under the test command and CI.
    fn postgres_conninfo() -> Option<String> {
        if let Ok(c) = std::env::var("DPATTN_TEST_POSTGRES") {
            return Some(c);
        }
        let flag =
            |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(
            !(flag("DPATTN_REQUIRE_POSTGRES") || flag("CI")),
            "DPATTN_TEST_POSTGRES is not set: the PostgreSQL session test needs a server \
             (scripts/test.sh starts one); it may not be skipped under CI"
        );
        eprintln!(
            "\n*** SKIPPED: the PostgreSQL session test of dpattn-ffi — DPATTN_TEST_POSTGRES is \
             not set (bash scripts/test.sh starts a server) ***\n"
        );
        None
    }
}
