//! The store suite, run against SQLite (`tests/sqlite.rs`) and PostgreSQL
//! (`tests/postgres.rs`) alike, and the worker processes it spawns.
//!
//! Every release here is a real one: output-perturbation attention
//! (`output_perturbation_attention_keyed`) drawing from the session's draw and charging the
//! store through its accountant, so "nothing released" is checked on the output buffer.
//!
//! Worker processes are this test binary run again on its ignored `worker` test with
//! `DPATTN_STORE_WORKER` set (std's `Child::kill` is SIGKILL on Unix).

#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dpattn_core::accounting::cost::{Accountant, Cost};
use dpattn_core::accounting::ledger::{Amount, Ledger};
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_core::output_perturbation::{
    OutputPerturbationParams, STREAMS, output_perturbation_attention_keyed,
    output_perturbation_scratch_len,
};
use dpattn_core::sampling::NoiseKey;
use dpattn_core::session::{Draw, NoiseSource};
use dpattn_core::{
    BatchedMut, BatchedRef, Error, Kernel, NoiseMode, PrivacyBudget, Scale, ScoreFn,
};
use dpattn_store::logic::audit;
use dpattn_store::{
    BudgetStore, KeyRequest, PostgresOptions, PostgresStore, SqliteOptions, SqliteStore,
    StoreError, StoreSession,
};

/// Where the suite's store lives.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection string.
    Postgres(String),
}

impl Backend {
    /// A new connection with the default options.
    pub fn store(&self) -> Box<dyn BudgetStore> {
        match self {
            Backend::Sqlite(p) => Box::new(SqliteStore::open(p).expect("open sqlite store")),
            Backend::Postgres(c) => Box::new(PostgresStore::connect(c).expect("connect postgres")),
        }
    }

    /// A new connection that gives up on a lock after `wait`.
    pub fn impatient_store(&self, wait: Duration) -> Box<dyn BudgetStore> {
        match self {
            Backend::Sqlite(p) => Box::new(
                SqliteStore::open_with(p, SqliteOptions { busy_timeout: wait }).expect("open"),
            ),
            Backend::Postgres(c) => Box::new(
                PostgresStore::connect_with(
                    c,
                    PostgresOptions { lock_timeout: wait, ..Default::default() },
                )
                .expect("connect"),
            ),
        }
    }

    /// Runs statements directly on the database, around every check (to tamper with it).
    pub fn raw_sql(&self, sql: &str) {
        match self {
            Backend::Sqlite(p) => {
                let c = rusqlite::Connection::open(p).expect("open raw");
                c.busy_timeout(Duration::from_secs(10)).unwrap();
                c.execute_batch(sql).expect("raw sql");
            }
            Backend::Postgres(conn) => {
                let mut c = postgres::Client::connect(conn, postgres::NoTls).expect("raw connect");
                c.batch_execute(sql).expect("raw sql");
            }
        }
    }

    /// A one-number query run directly on the database.
    pub fn raw_count(&self, sql: &str) -> i64 {
        match self {
            Backend::Sqlite(p) => {
                let c = rusqlite::Connection::open(p).expect("open raw");
                c.query_row(sql, [], |r| r.get(0)).expect("raw query")
            }
            Backend::Postgres(conn) => {
                let mut c = postgres::Client::connect(conn, postgres::NoTls).expect("raw connect");
                c.query_one(sql, &[]).expect("raw query").get(0)
            }
        }
    }

    /// A backend of its own for a test that damages its database on purpose: the same
    /// SQLite file (each SQLite test has its own), or a fresh PostgreSQL database (dropped
    /// by the guard).
    pub fn isolated(&self) -> (Backend, Option<DropDatabase>) {
        match self {
            Backend::Sqlite(_) => (self.clone(), None),
            Backend::Postgres(conn) => {
                let name = format!("dpattn_test_{}", random_hex());
                self.raw_sql(&format!("CREATE DATABASE {name}"));
                let own = Backend::Postgres(format!("{conn} dbname={name}"));
                (own, Some(DropDatabase { admin: conn.clone(), name }))
            }
        }
    }

    fn env(&self) -> [(&'static str, String); 2] {
        match self {
            Backend::Sqlite(p) => [
                ("DPATTN_STORE_BACKEND", "sqlite".into()),
                ("DPATTN_STORE_LOCATION", p.display().to_string()),
            ],
            Backend::Postgres(c) => {
                [("DPATTN_STORE_BACKEND", "postgres".into()), ("DPATTN_STORE_LOCATION", c.clone())]
            }
        }
    }

    fn from_env() -> Backend {
        let loc = std::env::var("DPATTN_STORE_LOCATION").expect("DPATTN_STORE_LOCATION");
        match std::env::var("DPATTN_STORE_BACKEND").as_deref() {
            Ok("sqlite") => Backend::Sqlite(loc.into()),
            Ok("postgres") => Backend::Postgres(loc),
            other => panic!("DPATTN_STORE_BACKEND = {other:?}"),
        }
    }
}

/// Drops a PostgreSQL test database.
pub struct DropDatabase {
    admin: String,
    name: String,
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// A random hex string (unique ids, so tests sharing one PostgreSQL database never meet).
pub fn random_hex() -> String {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("dpattn-store-{tag}-{}", random_hex()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Ids of one test: owner and key id, fresh per call.
#[derive(Debug, Clone)]
pub struct Ids {
    pub owner: String,
    pub key_id: String,
    pub key: [u8; 32],
}

impl Ids {
    pub fn fresh(tag: &str) -> Self {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).unwrap();
        let r = random_hex();
        Ids { owner: format!("{tag}-owner-{r}"), key_id: format!("{tag}-key-{r}"), key }
    }

    pub fn key(&self) -> NoiseKey {
        NoiseKey::for_replay(self.key)
    }
}

/// The approximate-DP budget every suite ledger has: room for exactly `capacity(..)`
/// releases of `release_budget(EPS)`.
pub fn budget(unit: PrivacyUnit, epsilon: f64) -> Ledger {
    Ledger::new_approx(unit, PrivacyBudget::new(epsilon, 1e-3).unwrap())
}

/// The ε of one suite release (exactly representable, so capacities are exact).
pub const EPS: f64 = 0.125;

/// A session on `backend` over `budget`, the caller's key, leases of `lease` ids.
pub fn session(
    store: Box<dyn BudgetStore>,
    ids: &Ids,
    budget: &Ledger,
    lease: u64,
) -> Result<StoreSession, StoreError> {
    let key = ids.key();
    StoreSession::open_with(store, &ids.owner, budget, &ids.key_id, KeyRequest::Caller(&key), lease)
}

/// What one release wrote, as bits.
pub type Output = [u32; 8];

/// The output buffer's untouched value (a NaN: no release writes one).
pub const SENTINEL: f32 = f32::NAN;

fn params(epsilon: f64) -> OutputPerturbationParams<'static> {
    OutputPerturbationParams {
        key_norm: 1.0,
        value_norm: 1.0,
        budget: PrivacyBudget::new(epsilon, 1e-6).unwrap(),
        scale: Scale::InvSqrtDim,
        score: ScoreFn::Exp,
        key_padding: None,
        kernel: Kernel::Auto,
        noise_mode: NoiseMode::Exact,
    }
}

fn inputs() -> (Vec<f32>, Vec<f32>) {
    let q = (0..8).map(|i| (i as f32 * 0.37).sin() * 0.5).collect();
    let kv = (0..16).map(|i| (i as f32 * 0.71).cos() * 0.5).collect();
    (q, kv)
}

/// The mechanism of every suite release, on `draw` and `accountant`.
fn mechanism(
    out: &mut [f32; 8],
    epsilon: f64,
    draw: Draw<'_>,
    accountant: &mut dyn Accountant,
) -> dpattn_core::Result<()> {
    let (q, kv) = inputs();
    let mut scratch = vec![0f32; output_perturbation_scratch_len(4, 4)?];
    output_perturbation_attention_keyed(
        BatchedMut::contiguous(out, [1, 1, 2, 4])?,
        BatchedRef::contiguous(&q, [1, 1, 2, 4])?,
        BatchedRef::contiguous(&kv, [1, 1, 4, 4])?,
        BatchedRef::contiguous(&kv, [1, 1, 4, 4])?,
        &params(epsilon),
        draw,
        Some(accountant),
        &mut [0.0],
        &mut scratch,
    )
    .map(|_| ())
}

/// The cost one suite release of `epsilon` charges, as the mechanism states it (captured
/// by an accountant that refuses, so nothing is drawn).
pub fn release_cost(epsilon: f64) -> Cost {
    struct Capture(Option<Cost>);
    impl Accountant for Capture {
        fn unit(&self) -> PrivacyUnit {
            PrivacyUnit::TOKEN
        }
        fn total(&self) -> Amount {
            Amount::Approx { epsilon: 1.0, delta: 1e-3 }
        }
        fn charge(&mut self, _: PrivacyUnit, cost: &Cost, _: NoiseMode) -> dpattn_core::Result<()> {
            self.0 = Some(*cost);
            Err(Error::Unsupported { what: "capture only" })
        }
    }
    let mut cap = Capture(None);
    let key = NoiseKey::for_replay([1; 32]);
    let mut out = [0f32; 8];
    let r = mechanism(&mut out, epsilon, Draw { key: &key, stream: 0 }, &mut cap);
    assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
    cap.0.expect("the mechanism charged")
}

/// One output-perturbation release of `(ε, 1e-6)` under `charge_id` on a one-token
/// ledger, through the mechanism's keyed entry point: its first stream id and its output.
/// On failure the output buffer is checked untouched (nothing released).
pub fn release(
    session: &mut StoreSession,
    charge_id: &str,
    epsilon: f64,
) -> Result<(u64, Output), StoreError> {
    let mut out = [SENTINEL; 8];
    let mut stream = u64::MAX;
    let r = session.release(charge_id, STREAMS, |draw, accountant| {
        stream = draw.stream;
        mechanism(&mut out, epsilon, draw, accountant)
    });
    match r {
        Ok(()) => {
            assert!(out.iter().all(|x| x.is_finite()), "a release writes its whole output");
            Ok((stream, out.map(f32::to_bits)))
        }
        Err(e) => {
            let untouched = out.iter().all(|x| x.to_bits() == SENTINEL.to_bits());
            assert!(untouched, "a refused release wrote output: {e}");
            Err(e)
        }
    }
}

/// How many suite releases fit `budget`, and the ledger after them, by the core's
/// in-memory ledger (the reference the store must match exactly).
pub fn in_memory_capacity(budget: &Ledger) -> (u64, Ledger) {
    let cost = release_cost(EPS);
    let mut ledger = budget.clone();
    let mut n = 0;
    while ledger.charge(PrivacyUnit::TOKEN, &cost, NoiseMode::Exact).is_ok() {
        n += 1;
    }
    (n, ledger)
}

/// Checks the store's own integrity and that the ledger is the replay of its log; returns
/// the log's `(charge_id, stream)` pairs.
pub fn audited(backend: &Backend, ids: &Ids, unit: PrivacyUnit) -> BTreeMap<String, u64> {
    let mut store = backend.store();
    store.check_integrity().expect("integrity check");
    let report = audit(&mut *store, &ids.owner, unit).expect("the ledger is the replay of its log");
    report.records.iter().map(|r| (r.charge_id.clone(), r.draw.stream)).collect()
}

// ---------------------------------------------------------------------------------------
// The suite.
// ---------------------------------------------------------------------------------------

/// Charges are recorded in the store, survive reopening, match the core's in-memory
/// ledger bit for bit, and a stored budget cannot be raised by reopening.
pub fn charges_survive_reopening(backend: &Backend) {
    let ids = Ids::fresh("reopen");
    let b = budget(PrivacyUnit::TOKEN, 1.0);
    let mut s = session(backend.store(), &ids, &b, 16).unwrap();
    let (capacity, full) = in_memory_capacity(&b);
    assert_eq!(capacity, 8, "1.0 / 0.125");
    for i in 0..3 {
        release(&mut s, &format!("r{i}"), EPS).unwrap();
    }
    assert_eq!(s.ledger().unwrap().charges(), 3);
    drop(s);
    // Another connection (a restart) sees the three charges and goes on from them.
    let mut s = session(backend.store(), &ids, &b, 16).unwrap();
    assert_eq!(s.ledger().unwrap().charges(), 3);
    for i in 3..8 {
        release(&mut s, &format!("r{i}"), EPS).unwrap();
    }
    match release(&mut s, "r8", EPS) {
        Err(StoreError::Refused(Error::Infeasible { .. })) => {}
        other => panic!("the ninth release must be refused as over budget: {other:?}"),
    }
    let stored = s.ledger().unwrap();
    assert_eq!(stored, full, "the store's ledger equals the core's after the same charges");
    // Reopening with a larger total is refused: the budget only goes down.
    let bigger = budget(PrivacyUnit::TOKEN, 2.0);
    assert!(matches!(
        session(backend.store(), &ids, &bigger, 16),
        Err(StoreError::BudgetMismatch { .. })
    ));
    // Opening with the same total does not refill it.
    let mut again = session(backend.store(), &ids, &b, 16).unwrap();
    assert!(matches!(release(&mut again, "r9", EPS), Err(StoreError::Refused(_))));
    assert_eq!(audited(backend, &ids, PrivacyUnit::TOKEN).len(), 8);
}

/// A retry under the same charge id is charged once and reproduces the release bit for
/// bit; the same id with another cost or stream count is refused; a new id draws new noise.
pub fn retries_are_idempotent(backend: &Backend) {
    let ids = Ids::fresh("retry");
    let b = budget(PrivacyUnit::TOKEN, 1.0);
    let mut s = session(backend.store(), &ids, &b, 16).unwrap();
    let (stream, first) = release(&mut s, "request-1", EPS).unwrap();
    let before = s.ledger().unwrap();
    assert_eq!(before.charges(), 1);
    // The retry, from another connection (another replica took the retried request).
    let mut other = session(backend.store(), &ids, &b, 16).unwrap();
    let r = other.begin("request-1", STREAMS).unwrap();
    assert!(r.retried, "the charge id is recorded");
    assert_eq!(r.draw.stream, stream, "a retry redraws the recorded stream id");
    drop(r);
    let (stream2, again) = release(&mut other, "request-1", EPS).unwrap();
    assert_eq!((stream2, again), (stream, first), "a retry reproduces the release bit for bit");
    assert_eq!(other.ledger().unwrap(), before, "a retry is not charged again");
    // The same id with another cost: refused, nothing charged, nothing written.
    match release(&mut s, "request-1", 2.0 * EPS) {
        Err(StoreError::ChargeIdConflict { what, .. }) => assert_eq!(what, "another cost"),
        other => panic!("{other:?}"),
    }
    // The same id with another number of stream ids.
    assert!(matches!(s.begin("request-1", STREAMS + 1), Err(StoreError::ChargeIdConflict { .. })));
    assert_eq!(s.ledger().unwrap(), before);
    // A new id is a new release: fresh stream, fresh noise, charged.
    let (stream3, fresh) = release(&mut s, "request-2", EPS).unwrap();
    assert_ne!(stream3, stream);
    assert_ne!(fresh, first);
    assert_eq!(s.ledger().unwrap().charges(), 2);
    assert_eq!(audited(backend, &ids, PrivacyUnit::TOKEN).len(), 2);
}

/// Two replicas that start the same charge id at once get different fresh streams; the
/// one that commits second is refused (two noise draws under one charge would be two
/// releases charged once).
pub fn concurrent_duplicates_are_refused(backend: &Backend) {
    let ids = Ids::fresh("dup");
    let b = budget(PrivacyUnit::TOKEN, 1.0);
    let mut a = session(backend.store(), &ids, &b, 4).unwrap();
    let mut c = session(backend.store(), &ids, &b, 4).unwrap();
    let mut ra = a.begin("same", STREAMS).unwrap();
    let mut rc = c.begin("same", STREAMS).unwrap();
    assert!(!ra.retried && !rc.retried);
    assert_ne!(ra.draw.stream, rc.draw.stream, "leases of two sessions never overlap");
    let cost = Cost::Approx(PrivacyBudget::new(EPS, 0.0).unwrap());
    ra.accountant.charge(PrivacyUnit::TOKEN, &cost, NoiseMode::Exact).unwrap();
    let refused = rc.accountant.charge(PrivacyUnit::TOKEN, &cost, NoiseMode::Exact);
    assert!(matches!(refused, Err(Error::StoreConflict { .. })), "{refused:?}");
    assert!(matches!(
        rc.accountant.last_error(),
        Some(StoreError::ChargeIdConflict { what, .. }) if what.starts_with("other stream ids")
    ));
    drop((ra, rc));
    assert_eq!(a.ledger().unwrap().charges(), 1);
}

/// Over budget and unit mismatch are refused before any output: nothing charged, nothing
/// written.
pub fn refusals_charge_and_release_nothing(backend: &Backend) {
    let ids = Ids::fresh("refuse");
    // A ledger with room for one release.
    let b = budget(PrivacyUnit::TOKEN, EPS);
    let mut s = session(backend.store(), &ids, &b, 16).unwrap();
    release(&mut s, "one", EPS).unwrap();
    let full = s.ledger().unwrap();
    match release(&mut s, "two", EPS) {
        Err(StoreError::Refused(Error::Infeasible { condition, .. })) => {
            assert!(condition.contains("epsilon"), "{condition}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.ledger().unwrap(), full);
    // A ledger kept for prompts refuses a release that protects one token.
    let prompts = Ids::fresh("unit");
    let pb = budget(PrivacyUnit::Prompt, 10.0);
    let mut p = session(backend.store(), &prompts, &pb, 16).unwrap();
    match release(&mut p, "token-release", EPS) {
        Err(StoreError::Refused(Error::UnitMismatch { ledger, charge })) => {
            assert_eq!((ledger, charge), ("one prompt", "one token"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.ledger().unwrap().charges(), 0);
    assert!(audited(backend, &prompts, PrivacyUnit::Prompt).is_empty());
    // The same owner's token ledger is another ledger (guarantees about different units
    // do not add up): it is untouched by the refusals above.
    assert_eq!(audited(backend, &ids, PrivacyUnit::TOKEN).len(), 1);
}

/// Keys: a caller's key is never stored (only its check value); another key under a
/// registered key id is refused; a key kept on request is read back; the draws are the
/// core's `NoiseSource` draws.
pub fn keys_are_checked_and_stored_only_on_request(backend: &Backend) {
    let ids = Ids::fresh("keys");
    let b = budget(PrivacyUnit::TOKEN, 1.0);
    let mut s = session(backend.store(), &ids, &b, 16).unwrap();
    let (stream, _) = release(&mut s, "k1", EPS).unwrap();
    let epoch = s.source().epoch();
    // The draw is NoiseSource::for_replay(master, epoch, stream)'s.
    {
        let mut replay = NoiseSource::for_replay(ids.key(), epoch, stream);
        let expected = replay.reserve(STREAMS).unwrap();
        let r = s.begin("k1", STREAMS).unwrap();
        assert_eq!((r.draw.key, r.draw.stream), (expected.key, expected.stream));
    }
    let stored = backend.raw_count(&format!(
        "SELECT count(*) FROM dpattn_keys WHERE key_id = '{}' AND master_key IS NOT NULL",
        ids.key_id
    ));
    assert_eq!(stored, 0, "a caller's key is never stored");
    // Another master key under the same key id is refused.
    let mut wrong = ids.clone();
    wrong.key[0] ^= 1;
    assert!(matches!(
        session(backend.store(), &wrong, &b, 16),
        Err(StoreError::KeyMismatch { .. })
    ));
    // The store cannot hand out a key it does not hold.
    let r = StoreSession::open(backend.store(), &ids.owner, &b, &ids.key_id, KeyRequest::InStore);
    assert!(matches!(r, Err(StoreError::KeyMismatch { .. })), "{r:?}");
    // A key kept on request: generated once, the same for every later session.
    let kept = Ids::fresh("kept");
    let open_kept = || {
        StoreSession::open(backend.store(), &kept.owner, &b, &kept.key_id, KeyRequest::InStore)
            .unwrap()
    };
    let (k1, k2) = (open_kept(), open_kept());
    assert_eq!(k1.source().master_key(), k2.source().master_key());
    assert_eq!(k1.source().epoch(), k2.source().epoch());
    let stored = backend.raw_count(&format!(
        "SELECT count(*) FROM dpattn_keys WHERE key_id = '{}' AND master_key IS NOT NULL",
        kept.key_id
    ));
    assert_eq!(stored, 1);
    // The kept key also opens as a caller's key (its check value matches).
    let as_caller = Ids { key: *k1.source().master_key().expose_bytes(), ..kept.clone() };
    assert!(session(backend.store(), &as_caller, &b, 16).is_ok());
}

/// Leases are disjoint, the last stream id `2⁶⁴ − 1` is never leased, and an exhausted key
/// id refuses rather than wraps.
pub fn leases_never_overlap_or_wrap(backend: &Backend) {
    let ids = Ids::fresh("lease");
    let b = budget(PrivacyUnit::TOKEN, 100.0);
    let mut a = session(backend.store(), &ids, &b, 3).unwrap();
    let mut c = session(backend.store(), &ids, &b, 2).unwrap();
    let mut seen = HashSet::new();
    for i in 0..7 {
        for (name, s) in [("a", &mut a), ("c", &mut c)] {
            let (stream, _) = release(s, &format!("{name}{i}"), EPS).unwrap();
            assert!(seen.insert(stream), "stream id {stream} handed out twice");
        }
    }
    let mut store = backend.store();
    let leases = store.leases(&ids.key_id).unwrap();
    assert!(leases.len() >= 7, "small leases: many round trips ({})", leases.len());
    for w in leases.windows(2) {
        assert!(w[0].first + w[0].count <= w[1].first, "{w:?}");
    }
    store.check_integrity().unwrap();
    // Near the end of the id space: move the counter to 2⁶⁴ − 4 (as the bits of a signed
    // column) and lease what is left.
    backend.raw_sql(&format!(
        "UPDATE dpattn_keys SET next_stream = {} WHERE key_id = '{}'",
        (u64::MAX - 3) as i64,
        ids.key_id
    ));
    let last = store.lease(&ids.key_id, 3, "t").unwrap();
    assert_eq!((last.first, last.count), (u64::MAX - 3, 3), "ids 2^64-4 .. 2^64-2");
    assert!(matches!(store.lease(&ids.key_id, 1, "t"), Err(StoreError::StreamsExhausted { .. })));
    assert!(matches!(store.lease(&ids.key_id, 0, "t"), Err(StoreError::Invalid { .. })));
    // A session whose key id is used up refuses before anything is charged.
    let mut d = session(backend.store(), &ids, &b, 4).unwrap();
    let before = d.ledger().unwrap();
    assert!(matches!(release(&mut d, "late", EPS), Err(StoreError::StreamsExhausted { .. })));
    assert_eq!(d.ledger().unwrap(), before);
}

/// Threads, each with its own connection, charge one ledger until refusal: exactly the
/// in-memory capacity is accepted, the stored ledger equals the core's, no stream id twice.
pub fn threads_share_one_budget(backend: &Backend) {
    let ids = Ids::fresh("threads");
    let b = budget(PrivacyUnit::TOKEN, 3.0);
    drop(session(backend.store(), &ids, &b, 2).unwrap());
    let (capacity, expected) = in_memory_capacity(&b);
    assert_eq!(capacity, 24);
    let results: Vec<Vec<(String, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (ids, b) = (ids.clone(), b.clone());
                scope.spawn(move || {
                    let mut s = session(backend.store(), &ids, &b, 2).unwrap();
                    let mut accepted = Vec::new();
                    for i in 0.. {
                        let id = format!("t{t}-{i}");
                        match release(&mut s, &id, EPS) {
                            Ok((stream, _)) => accepted.push((id, stream)),
                            Err(StoreError::Refused(Error::Infeasible { .. })) => break,
                            Err(e) => panic!("thread {t}: {e}"),
                        }
                    }
                    accepted
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    check_fleet(backend, &ids, &expected, capacity, results.into_iter().flatten().collect());
}

/// `workers` processes charge one ledger until refusal: the same checks as for threads.
pub fn processes_share_one_budget(backend: &Backend, workers: usize) {
    let ids = Ids::fresh("procs");
    let b = budget(PrivacyUnit::TOKEN, 5.0);
    drop(session(backend.store(), &ids, &b, 2).unwrap());
    let (capacity, expected) = in_memory_capacity(&b);
    assert_eq!(capacity, 40);
    let dir = TempDir::new("procs");
    let children: Vec<(Child, PathBuf)> = (0..workers)
        .map(|w| {
            let log = dir.path(&format!("worker-{w}.log"));
            (spawn_worker(backend, "fleet", &ids, w, &log, 2), log)
        })
        .collect();
    let mut accepted = Vec::new();
    for (mut child, log) in children {
        let status = wait_with_timeout(&mut child, Duration::from_secs(120));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(status.success(), "worker failed ({status}):\n{text}");
        assert!(text.lines().any(|l| l == "refused"), "a worker stops only when refused:\n{text}");
        accepted.extend(text.lines().filter_map(|l| {
            let mut p = l.strip_prefix("released ")?.split(' ');
            Some((p.next()?.to_owned(), p.next()?.parse().ok()?))
        }));
    }
    check_fleet(backend, &ids, &expected, capacity, accepted);
}

fn check_fleet(
    backend: &Backend,
    ids: &Ids,
    expected: &Ledger,
    capacity: u64,
    accepted: Vec<(String, u64)>,
) {
    assert_eq!(accepted.len() as u64, capacity, "accepted releases = the budget's capacity");
    let mut streams = HashSet::new();
    for (id, s) in &accepted {
        assert!(streams.insert(*s), "stream id {s} of {id} was issued twice");
    }
    let log = audited(backend, ids, PrivacyUnit::TOKEN);
    let accepted: BTreeMap<String, u64> = accepted.into_iter().collect();
    assert_eq!(log, accepted, "the charge log is exactly the accepted releases");
    let mut store = backend.store();
    let stored = store.ledger(&ids.owner, PrivacyUnit::TOKEN).unwrap().unwrap();
    assert_eq!(&stored, expected, "the stored total is the sum of the accepted charges, exactly");
    let Amount::Approx { epsilon, .. } = stored.spent() else { unreachable!() };
    assert!(epsilon <= 5.0);
}

/// A process whose charge committed and that is killed (SIGKILL) before its release: the
/// charge is recorded; a retry under the same charge id is not charged again and draws
/// the recorded stream.
pub fn a_charge_survives_a_kill_before_the_release(backend: &Backend) {
    let ids = Ids::fresh("killed");
    let b = budget(PrivacyUnit::TOKEN, 1.0);
    let mut s = session(backend.store(), &ids, &b, 8).unwrap();
    let dir = TempDir::new("killed");
    let log = dir.path("worker.log");
    let mut child = spawn_worker(backend, "charge-then-wait", &ids, 0, &log, 8);
    let line = wait_for_line(&log, "charged ", Duration::from_secs(60), &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    let stream: u64 = line.trim_start_matches("charged ").parse().unwrap();
    assert_eq!(s.ledger().unwrap().charges(), 1, "the killed process's charge is recorded");
    let r = s.begin("crash-1", STREAMS).unwrap();
    assert!(r.retried);
    assert_eq!(r.draw.stream, stream);
    drop(r);
    let (again, _) = release(&mut s, "crash-1", EPS).unwrap();
    assert_eq!(again, stream);
    assert_eq!(s.ledger().unwrap().charges(), 1, "the retry is not charged again");
    assert_eq!(audited(backend, &ids, PrivacyUnit::TOKEN).len(), 1);
}

/// Workers in a charge/release loop are killed with SIGKILL at random moments, for several
/// rounds: every release a worker logged (after it returned) has its charge recorded with
/// the same stream id, no stream id serves two charge ids, and the store passes its
/// integrity check and the audit.
pub fn random_kills_never_lose_a_charge(backend: &Backend, rounds: usize, workers: usize) {
    let ids = Ids::fresh("chaos");
    // Room for far more releases than the workers make before they are killed.
    let b = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(1e6, 0.5).unwrap());
    drop(session(backend.store(), &ids, &b, 3).unwrap());
    let dir = TempDir::new("chaos");
    let mut logs = Vec::new();
    for round in 0..rounds {
        let mut children = Vec::new();
        for w in 0..workers {
            let log = dir.path(&format!("r{round}-w{w}.log"));
            children.push(spawn_worker(backend, "loop", &ids, round * 100 + w, &log, 3));
            logs.push(log);
        }
        for mut child in children {
            let mut b = [0u8; 2];
            getrandom::fill(&mut b).unwrap();
            let ms = 150 + u64::from(u16::from_le_bytes(b)) % 500;
            std::thread::sleep(Duration::from_millis(ms));
            if let Some(status) = child.try_wait().unwrap() {
                panic!("a worker exited before it was killed ({status}): see its stderr above");
            }
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
    let log = audited(backend, &ids, PrivacyUnit::TOKEN);
    let mut released = 0;
    for path in &logs {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // Only whole lines: a line cut by the kill is a release that never returned.
        for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            let Some(rest) = line.trim_end().strip_prefix("released ") else { continue };
            let mut p = rest.split(' ');
            let (id, stream): (&str, u64) = (p.next().unwrap(), p.next().unwrap().parse().unwrap());
            assert_eq!(
                log.get(id),
                Some(&stream),
                "release {id} reached the caller without its charge"
            );
            released += 1;
        }
    }
    assert!(released > 0, "the workers released nothing before being killed");
    let mut streams = HashSet::new();
    for (id, s) in &log {
        assert!(streams.insert(*s), "stream id {s} serves {id} and another charge");
    }
    eprintln!(
        "{}: {released} releases logged, {} charges recorded over {rounds} rounds of {workers} killed workers",
        backend_name(backend),
        log.len()
    );
}

fn backend_name(b: &Backend) -> &'static str {
    match b {
        Backend::Sqlite(_) => "sqlite",
        Backend::Postgres(_) => "postgres",
    }
}

/// A tampered ledger record or a deleted charge row is refused or detected, never trusted.
pub fn tampering_is_detected(shared: &Backend) {
    // Its own database: the damage must not fail other tests' integrity checks.
    let (own, _guard) = shared.isolated();
    let backend = &own;
    let ids = Ids::fresh("tamper");
    let b = budget(PrivacyUnit::TOKEN, 1.0);
    let mut s = session(backend.store(), &ids, &b, 8).unwrap();
    for i in 0..3 {
        release(&mut s, &format!("t{i}"), EPS).unwrap();
    }
    // Deleting a charge row: the ledger no longer replays from its log.
    backend.raw_sql(&format!(
        "DELETE FROM dpattn_charges WHERE owner = '{}' AND charge_id = 't1'",
        ids.owner
    ));
    let mut store = backend.store();
    assert!(matches!(
        audit(&mut *store, &ids.owner, PrivacyUnit::TOKEN),
        Err(StoreError::Corrupt { .. })
    ));
    assert!(matches!(store.check_integrity(), Err(StoreError::Corrupt { .. })));
    // A record that is not a ledger: the next charge is refused, nothing written.
    backend.raw_sql(&format!(
        "UPDATE dpattn_ledgers SET record = {} WHERE owner = '{}'",
        match backend {
            Backend::Sqlite(_) => "x'00'",
            Backend::Postgres(_) => "'\\x00'::bytea",
        },
        ids.owner
    ));
    match release(&mut s, "t3", EPS) {
        Err(StoreError::Corrupt { .. }) => {}
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// Worker processes.
// ---------------------------------------------------------------------------------------

/// Starts this test binary as a worker in `mode`, writing to `log`.
pub fn spawn_worker(
    backend: &Backend,
    mode: &str,
    ids: &Ids,
    index: usize,
    log: &Path,
    lease: u64,
) -> Child {
    let key: String = ids.key.iter().map(|x| format!("{x:02x}")).collect();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--ignored", "--exact", "worker", "--nocapture", "--test-threads=1"])
        .envs(backend.env())
        .env("DPATTN_STORE_WORKER", mode)
        .env("DPATTN_STORE_OWNER", &ids.owner)
        .env("DPATTN_STORE_KEY_ID", &ids.key_id)
        .env("DPATTN_STORE_KEY_HEX", key)
        .env("DPATTN_STORE_INDEX", index.to_string())
        .env("DPATTN_STORE_LEASE", lease.to_string())
        .env("DPATTN_STORE_LOG", log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    cmd.spawn().expect("spawn worker")
}

fn wait_with_timeout(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > limit {
            child.kill().ok();
            panic!("a worker ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for_line(log: &Path, prefix: &str, limit: Duration, child: &mut Child) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.starts_with(prefix)) {
            return l.to_owned();
        }
        if let Some(s) = child.try_wait().unwrap() {
            panic!("the worker exited ({s}) before writing {prefix:?}:\n{text}");
        }
        assert!(start.elapsed() < limit, "no {prefix:?} line within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The worker's body (`DPATTN_STORE_WORKER` set): nothing otherwise.
pub fn worker_main() {
    let Ok(mode) = std::env::var("DPATTN_STORE_WORKER") else {
        eprintln!("worker: a helper process of the fleet tests; it runs only when spawned by them");
        return;
    };
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let backend = Backend::from_env();
    let hex = env("DPATTN_STORE_KEY_HEX");
    let mut key = [0u8; 32];
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    let ids = Ids { owner: env("DPATTN_STORE_OWNER"), key_id: env("DPATTN_STORE_KEY_ID"), key };
    let index: usize = env("DPATTN_STORE_INDEX").parse().unwrap();
    let lease: u64 = env("DPATTN_STORE_LEASE").parse().unwrap();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env("DPATTN_STORE_LOG"))
        .unwrap();
    // The ledger exists (the parent opened it); its budget is read back from the store.
    let mut probe = backend.store();
    let stored = probe.ledger(&ids.owner, PrivacyUnit::TOKEN).unwrap().expect("ledger exists");
    drop(probe);
    let mut s = session(backend.store(), &ids, &stored, lease).unwrap();
    let mut line = |text: String| {
        // One write per line (O_APPEND): a kill leaves whole lines or a cut last line.
        log.write_all(text.as_bytes()).unwrap();
    };
    match mode.as_str() {
        "fleet" | "loop" => {
            for i in 0.. {
                let id = format!("w{index}-{i}");
                match release(&mut s, &id, EPS) {
                    Ok((stream, _)) => line(format!("released {id} {stream}\n")),
                    Err(StoreError::Refused(Error::Infeasible { .. })) if mode == "fleet" => {
                        line("refused\n".into());
                        return;
                    }
                    Err(e) => panic!("worker {index}: {e}"),
                }
            }
        }
        "charge-then-wait" => {
            let mut r = s.begin("crash-1", STREAMS).unwrap();
            // Charge exactly what the release charges, then stop before drawing.
            let stream = r.draw.stream;
            charge_like_a_release(&mut r.accountant);
            line(format!("charged {stream}\n"));
            // The release would follow; the parent kills the process first.
            std::thread::sleep(Duration::from_secs(600));
            unreachable!("the parent kills the worker");
        }
        m => panic!("unknown worker mode {m:?}"),
    }
}

/// Charges what one suite release charges, without drawing (the crash point between the
/// charge and the release).
fn charge_like_a_release(accountant: &mut dyn Accountant) {
    accountant.charge(PrivacyUnit::TOKEN, &release_cost(EPS), NoiseMode::Exact).unwrap();
}
