//! The store suite on SQLite (a temporary file per test), and what only SQLite has: a
//! database locked by another connection, a file that is not a database, a missing
//! directory, a read-only file, SQLite's own integrity check after killed writers, and no
//! key bytes anywhere in the file.

mod common;

use std::time::Duration;

use common::{Backend, EPS, Ids, TempDir, budget, release, session};
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_store::{SqliteStore, StoreError};

fn with_backend(tag: &str, f: impl FnOnce(&Backend)) {
    let dir = TempDir::new(tag);
    f(&Backend::Sqlite(dir.path("budget.sqlite")));
}

#[test]
fn charges_survive_reopening() {
    with_backend("reopen", common::charges_survive_reopening);
}

#[test]
fn retries_are_idempotent() {
    with_backend("retry", common::retries_are_idempotent);
}

#[test]
fn concurrent_duplicates_are_refused() {
    with_backend("dup", common::concurrent_duplicates_are_refused);
}

#[test]
fn refusals_charge_and_release_nothing() {
    with_backend("refuse", common::refusals_charge_and_release_nothing);
}

#[test]
fn keys_are_checked_and_stored_only_on_request() {
    with_backend("keys", common::keys_are_checked_and_stored_only_on_request);
}

#[test]
fn leases_never_overlap_or_wrap() {
    with_backend("lease", common::leases_never_overlap_or_wrap);
}

#[test]
fn threads_share_one_budget() {
    with_backend("threads", common::threads_share_one_budget);
}

#[test]
fn eight_processes_share_one_budget() {
    with_backend("procs", |b| common::processes_share_one_budget(b, 8));
}

#[test]
fn a_charge_survives_a_kill_before_the_release() {
    with_backend("killed", common::a_charge_survives_a_kill_before_the_release);
}

#[test]
fn random_kills_never_lose_a_charge() {
    with_backend("chaos", |b| common::random_kills_never_lose_a_charge(b, 4, 4));
}

#[test]
fn tampering_is_detected() {
    with_backend("tamper", common::tampering_is_detected);
}

/// The helper process of the multi-process tests (spawned with `DPATTN_STORE_WORKER`).
#[test]
#[ignore = "helper process of the multi-process tests: runs only when they spawn it"]
fn worker() {
    common::worker_main();
}

#[test]
fn a_locked_database_refuses_the_charge_and_releases_nothing() {
    let dir = TempDir::new("locked");
    let backend = Backend::Sqlite(dir.path("budget.sqlite"));
    let ids = Ids::fresh("locked");
    let b = budget(PrivacyUnit::TOKEN, 1.0);
    let mut s = session(backend.impatient_store(Duration::from_millis(200)), &ids, &b, 8).unwrap();
    release(&mut s, "before", EPS).unwrap();
    // Another process holds the write lock (an exclusive transaction).
    let holder = rusqlite::Connection::open(dir.path("budget.sqlite")).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    match release(&mut s, "during", EPS) {
        Err(e @ StoreError::Unavailable { .. }) => {
            assert!(e.to_string().contains("locked"), "{e}");
            assert!(e.is_retryable());
        }
        other => panic!("{other:?}"),
    }
    holder.execute_batch("ROLLBACK").unwrap();
    drop(holder);
    assert_eq!(s.ledger().unwrap().charges(), 1, "the refused charge left nothing");
    // The same request later goes through, once.
    release(&mut s, "during", EPS).unwrap();
    release(&mut s, "during", EPS).unwrap();
    assert_eq!(s.ledger().unwrap().charges(), 2);
}

#[test]
fn unusable_files_are_refused() {
    let dir = TempDir::new("files");
    // Not a database.
    let junk = dir.path("junk.sqlite");
    std::fs::write(&junk, vec![0x55u8; 8192]).unwrap();
    match SqliteStore::open(&junk) {
        Err(StoreError::Corrupt { what }) => assert!(what.contains("not a database"), "{what}"),
        other => panic!("{other:?}"),
    }
    // A directory that does not exist.
    match SqliteStore::open(dir.path("missing/budget.sqlite")) {
        Err(e @ StoreError::Unavailable { .. }) => assert!(e.is_retryable()),
        other => panic!("{other:?}"),
    }
    // A read-only file. Root ignores file modes, so this part needs an unprivileged user.
    let path = dir.path("ro.sqlite");
    let ids = Ids::fresh("ro");
    let b = budget(PrivacyUnit::TOKEN, 1.0);
    drop(session(Box::new(SqliteStore::open(&path).unwrap()), &ids, &b, 8).unwrap());
    // Checkpoint the WAL into the file and remove it, so only the main file remains.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;")
        .unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&path, perms).unwrap();
    let privileged = std::fs::OpenOptions::new().write(true).open(&path).is_ok();
    if privileged {
        eprintln!(
            "unusable_files_are_refused: running as root, the read-only file case is not checkable"
        );
    } else {
        match SqliteStore::open(&path) {
            Err(StoreError::Unavailable { detail, .. }) => {
                assert!(detail.contains("readonly") || detail.contains("read-only"), "{detail}")
            }
            other => panic!("a read-only database must be refused: {other:?}"),
        }
    }
}

#[test]
fn no_key_bytes_are_written_to_the_file() {
    let dir = TempDir::new("nokey");
    let backend = Backend::Sqlite(dir.path("budget.sqlite"));
    let ids = Ids::fresh("nokey");
    let b = budget(PrivacyUnit::TOKEN, 1.0);
    let mut s = session(backend.store(), &ids, &b, 8).unwrap();
    for i in 0..3 {
        release(&mut s, &format!("k{i}"), EPS).unwrap();
    }
    let epoch_key =
        dpattn_core::session::epoch_key(&ids.key(), s.source().epoch()).expose_bytes().to_vec();
    drop(s);
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(&dir.0).unwrap() {
        bytes.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    assert!(bytes.len() > 4096, "the database and its WAL were read");
    let contains = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    assert!(!contains(&ids.key), "the master key is in the database files");
    assert!(!contains(&epoch_key), "the epoch key is in the database files");
    // The check: a key stored on request is found by the same scan.
    let kept_dir = TempDir::new("kept");
    let kept_path = kept_dir.path("kept.sqlite");
    let kept = dpattn_store::StoreSession::open(
        SqliteStore::open(&kept_path).unwrap(),
        "owner",
        &b,
        "kept-key",
        dpattn_store::KeyRequest::InStore,
    )
    .unwrap();
    let key = kept.source().master_key().expose_bytes().to_vec();
    drop(kept);
    let mut kb = Vec::new();
    for entry in std::fs::read_dir(&kept_dir.0).unwrap() {
        kb.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    assert!(kb.windows(32).any(|w| w == key.as_slice()), "the scan finds a stored key");
}
