//! `dpattn_session`: what every release of the C ABI draws its randomness from and charges
//! its budget to — a master key from the operating system, the next unused stream id, and
//! a shared `dpattn_ledger` handle (core `dpattn_core::session`).
//!
//! A release function takes a session instead of a key, a stream id and a ledger, so a
//! `(key, stream)` pair can never serve two releases through the C ABI. Replaying a past
//! release for an audit takes a session built by `dpattn_session_new_for_replay` from the
//! stored master key, epoch and stream id.

use dpattn_core::Error;
use dpattn_core::session::{Draw, NoiseSource, SessionState};

use crate::args::{Out, read, slice, slice_mut};
use crate::boundary::{FfiError, ffi_status};
use crate::handle::{Handle, Locked};
use crate::ledger::dpattn_ledger;
use crate::status::dpattn_status;
use crate::tensor::dpattn_key;

/// A session: a master key, its epoch, the next stream id and a ledger handle (shared with
/// the caller, who may keep querying it). Create with `dpattn_session_new`, release with
/// `dpattn_session_free`. Thread-safe: a release locks the session, then its ledger.
pub struct dpattn_session {
    _private: [u8; 0],
}

/// The value behind a `dpattn_session`: in memory (a ledger handle), or on a durable store
/// (`dpattn_session_open_sqlite`, `_postgres`; `crate::session_store`).
pub(crate) enum FfiSession {
    /// A master key and epoch in memory, charging a ledger handle.
    Memory {
        source: NoiseSource,
        /// `None` for a replay session created without a ledger (nothing is charged).
        ledger: Option<Locked<dpattn_ledger>>,
    },
    /// A session whose ledger and stream ids live in a store.
    Store {
        session: Box<dpattn_store::StoreSession>,
        /// The charge id of the next release (`dpattn_session_set_charge_id`), else a fresh
        /// one.
        next_charge_id: Option<String>,
    },
}

impl Handle for dpattn_session {
    type Inner = FfiSession;
    const NAME: &'static str = "dpattn_session";
}

/// Runs `f` with `streams` fresh stream ids of `session` and its ledger (locked for the
/// duration). The ids are consumed even when `f` fails. On a store session the ledger is
/// the store's accountant (each charge one committed transaction, under the charge id set
/// by `dpattn_session_set_charge_id` or a fresh one), and a retried charge id draws its
/// recorded stream ids again.
pub(crate) fn with_session<R>(
    session: *mut dpattn_session,
    streams: u64,
    f: impl FnOnce(
        Draw<'_>,
        Option<&mut dyn dpattn_core::accounting::cost::Accountant>,
    ) -> Result<R, FfiError>,
) -> Result<R, FfiError> {
    let handle = dpattn_session::lookup(session, "session")?;
    handle.with(|s| match s {
        FfiSession::Memory { source, ledger } => {
            let draw = source.reserve(streams)?;
            match ledger {
                Some(l) => l.with(|l| f(draw, Some(l))),
                None => f(draw, None),
            }
        }
        FfiSession::Store { session, next_charge_id } => {
            let id = next_charge_id.take().unwrap_or_else(|| session.new_charge_id());
            let mut release = session.begin(&id, streams)?;
            let out = f(release.draw, Some(&mut release.accountant));
            drop(release);
            // A refused or failed charge: report the store's own message.
            out.map_err(|e| session.take_last_error().map_or(e, FfiError::Store))
        }
    })
}

/// A new session charging `ledger` (shared: the caller keeps its handle and may query or
/// free it; the session holds its own reference), with a master key and an epoch from the
/// operating system. Writes the handle to `*out_session` (release with
/// `dpattn_session_free`).
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_INVALID_HANDLE`
/// or `DPATTN_STATUS_UNSUPPORTED` (the operating system's generator failed).
///
/// # Safety
/// `out_session` must be NULL or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_new(
    ledger: *mut dpattn_ledger,
    out_session: *mut *mut dpattn_session,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_session, "out_session")?;
        let ledger = dpattn_ledger::lookup(ledger, "ledger")?;
        let source = NoiseSource::new()?;
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe {
            out.write(dpattn_session::into_handle(FfiSession::Memory {
                source,
                ledger: Some(ledger),
            }))
        };
        Ok(())
    })
}

/// **For replay and audit only**: a session that reissues the stream ids of a past run —
/// the master `key` at `epoch`, next stream id `next_stream` (`dpattn_session_position` of
/// the original session just before the release to replay). `ledger` may be NULL (nothing
/// is charged). Never use it for new releases: their noise would repeat the past run's.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` or
/// `DPATTN_STATUS_INVALID_HANDLE`.
///
/// # Safety
/// `key` must be NULL or point to a `dpattn_key`; `out_session` must be NULL or valid for
/// writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_new_for_replay(
    key: *const dpattn_key,
    epoch: u64,
    next_stream: u64,
    ledger: *mut dpattn_ledger,
    out_session: *mut *mut dpattn_session,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_session, "out_session")?;
        // SAFETY: forwarded caller contract.
        let master = unsafe { read(key, "key") }?.to_core();
        let ledger =
            if ledger.is_null() { None } else { Some(dpattn_ledger::lookup(ledger, "ledger")?) };
        let source = NoiseSource::for_replay(master, epoch, next_stream);
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe { out.write(dpattn_session::into_handle(FfiSession::Memory { source, ledger })) };
        Ok(())
    })
}

/// Writes the session's epoch and next stream id (public; log them beside each release so an
/// auditor holding the master key can replay it).
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` or
/// `DPATTN_STATUS_INVALID_HANDLE`.
///
/// # Safety
/// `out_epoch` and `out_next_stream` must be NULL or valid for writing a `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_position(
    session: *const dpattn_session,
    out_epoch: *mut u64,
    out_next_stream: *mut u64,
) -> dpattn_status {
    ffi_status(|| {
        let (e, n) =
            (Out::new(out_epoch, "out_epoch")?, Out::new(out_next_stream, "out_next_stream")?);
        let (epoch, next) = dpattn_session::lookup(session, "session")?.with(|s| match s {
            FfiSession::Memory { source, .. } => (source.epoch(), source.next_stream()),
            FfiSession::Store { session, .. } => {
                (session.source().epoch(), session.source().next_stream())
            }
        });
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe {
            e.write(epoch);
            n.write(next);
        }
        Ok(())
    })
}

/// Writes the session's master key to `*out_key`, **for a key store and for audit only**:
/// with it and a release's logged epoch and stream id, `dpattn_session_new_for_replay`
/// reproduces the release. The key is as sensitive as the data (anyone holding it can
/// subtract the noise of every release of the session); never log it.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` or
/// `DPATTN_STATUS_INVALID_HANDLE`.
///
/// # Safety
/// `out_key` must be NULL or valid for writing a `dpattn_key`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_master_key(
    session: *const dpattn_session,
    out_key: *mut dpattn_key,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_key, "out_key")?;
        let bytes = dpattn_session::lookup(session, "session")?.with(|s| match s {
            FfiSession::Memory { source, .. } => *source.master_key().expose_bytes(),
            FfiSession::Store { session, .. } => *session.source().master_key().expose_bytes(),
        });
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe { out.write(dpattn_key { bytes }) };
        Ok(())
    })
}

/// The bytes `dpattn_session_save` writes.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_session_state_len() -> usize {
    SessionState::<{ dpattn_core::accounting::rdp::DEFAULT_ORDER_COUNT }>::ENCODED_LEN
}

/// Writes the session's state — master key, next stream id and a snapshot of its ledger —
/// to `out[0 .. dpattn_session_state_len())`, for a service that restarts. **The state holds
/// the master key: store it like the key** (as sensitive as the data). Keep only the newest
/// state, written before each release is returned: an older one forgets later charges.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT`, `DPATTN_STATUS_INVALID_HANDLE`,
/// `DPATTN_STATUS_BUFFER_TOO_SHORT` or `DPATTN_STATUS_UNSUPPORTED` (a replay session
/// without a ledger, or a session on a store: its state is in the store).
///
/// # Safety
/// `out` must be NULL or valid for writing `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_save(
    session: *const dpattn_session,
    out: *mut u8,
    len: usize,
) -> dpattn_status {
    ffi_status(|| {
        // SAFETY: forwarded caller contract.
        let out = unsafe { slice_mut(out, len, "out") }?;
        let state = dpattn_session::lookup(session, "session")?.with(|s| match s {
            FfiSession::Memory { source, ledger } => {
                let ledger = ledger.as_ref().ok_or(Error::Unsupported {
                    what: "saving a replay session without a ledger",
                })?;
                Ok::<_, Error>(SessionState::from_parts(source, ledger.with(|l| l.clone())))
            }
            FfiSession::Store { .. } => Err(Error::Unsupported {
                what: "saving a session on a store: its ledger and stream ids are in the store (reopen it)",
            }),
        })?;
        state.encode(out)?;
        Ok(())
    })
}

/// Rebuilds a session from `dpattn_session_save`'s bytes **in a fresh epoch** from the
/// operating system, so no `(key, stream)` pair used before — after the save or not — can be
/// reissued. Writes a new ledger handle holding the saved ledger to `*out_ledger` and a
/// session charging it to `*out_session` (free both).
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT`,
/// `DPATTN_STATUS_BUFFER_TOO_SHORT`, `DPATTN_STATUS_OUT_OF_RANGE` (bytes that are not a
/// saved state) or `DPATTN_STATUS_UNSUPPORTED` (the operating system's generator failed).
///
/// # Safety
/// `state` must be NULL or valid for reading `len` bytes; the out-pointers NULL or valid for
/// writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_restore(
    state: *const u8,
    len: usize,
    out_session: *mut *mut dpattn_session,
    out_ledger: *mut *mut dpattn_ledger,
) -> dpattn_status {
    ffi_status(|| {
        let (os, ol) = (Out::new(out_session, "out_session")?, Out::new(out_ledger, "out_ledger")?);
        // SAFETY: forwarded caller contract.
        let bytes = unsafe { slice(state, len, "state") }?;
        let (master, next, ledger) = SessionState::decode(bytes)?.into_parts();
        let source = NoiseSource::restore(master, next)?;
        let ledger_handle = dpattn_ledger::into_handle(ledger);
        let locked = dpattn_ledger::lookup(ledger_handle, "ledger")?;
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe {
            ol.write(ledger_handle);
            os.write(dpattn_session::into_handle(FfiSession::Memory {
                source,
                ledger: Some(locked),
            }));
        }
        Ok(())
    })
}

/// Releases a session (its reference to the ledger included; the ledger handle lives on
/// until freed). NULL, unknown and already-freed handles are ignored. Thread-safe.
///
/// # Safety
/// None beyond passing a value this library returned (or NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_session_free(session: *mut dpattn_session) {
    crate::boundary::ffi_value((), || {
        dpattn_session::free(session);
    });
}

/// Helpers for the release tests of other modules: replay sessions and the key their
/// releases draw with.
#[cfg(test)]
pub(crate) mod session_testing {
    use dpattn_core::sampling::NoiseKey;
    use dpattn_core::session::epoch_key;

    use super::*;

    /// A replay session of master key `[byte; 32]` at `epoch`, next stream id `stream`,
    /// charging `ledger` (NULL: nothing is charged).
    pub(crate) fn replay(
        byte: u8,
        epoch: u64,
        stream: u64,
        ledger: *mut dpattn_ledger,
    ) -> *mut dpattn_session {
        let mut s = std::ptr::null_mut();
        let key = dpattn_key { bytes: [byte; 32] };
        // SAFETY: live locals; `ledger` NULL or a handle.
        let st = unsafe { dpattn_session_new_for_replay(&key, epoch, stream, ledger, &mut s) };
        assert_eq!(st, dpattn_status::Ok, "{}", crate::last_error::last_error_string());
        s
    }

    /// The key a session of master key `[byte; 32]` draws with at `epoch`: what a keyed
    /// core release must be given to reproduce the session's release.
    pub(crate) fn drawing_key(byte: u8, epoch: u64) -> NoiseKey {
        epoch_key(&NoiseKey::for_replay([byte; 32]), epoch)
    }

    /// `(epoch, next stream id)` of a live session.
    pub(crate) fn position(s: *const dpattn_session) -> (u64, u64) {
        let (mut e, mut n) = (0, 0);
        // SAFETY: live locals.
        assert_eq!(unsafe { dpattn_session_position(s, &mut e, &mut n) }, dpattn_status::Ok);
        (e, n)
    }

    /// Frees a session.
    pub(crate) fn free(s: *mut dpattn_session) {
        // SAFETY: any value may be passed.
        unsafe { dpattn_session_free(s) };
    }
}

#[cfg(test)]
mod tests {
    use std::ptr::{null, null_mut};

    use dpattn_core::output_perturbation as op;

    use super::session_testing::{drawing_key, free, position, replay};
    use super::*;
    use crate::attention::tests::{data, t, tm};
    use crate::last_error::last_error_string;
    use crate::ledger::{
        DPATTN_UNIT_PROMPT, DPATTN_UNIT_TOKENS, dpattn_ledger_charge_approx, dpattn_ledger_charges,
        dpattn_ledger_free, dpattn_ledger_new_approx, dpattn_privacy_unit,
    };
    use crate::output_perturbation::{
        dpattn_output_perturbation_attention, dpattn_output_perturbation_params,
    };
    use crate::tensor::DPATTN_DTYPE_F32;

    const TOKEN: dpattn_privacy_unit = dpattn_privacy_unit { kind: DPATTN_UNIT_TOKENS, tokens: 1 };
    const SQ: [usize; 4] = [1, 2, 3, 4];
    const SK: [usize; 4] = [1, 2, 6, 4];

    fn fails(st: dpattn_status, code: dpattn_status, needle: &str) {
        assert_eq!(st, code, "{}", last_error_string());
        let msg = last_error_string();
        assert!(msg.contains(needle), "{msg:?} should name {needle:?}");
    }

    /// A one-token approximate-DP ledger with room for many releases.
    fn ledger() -> *mut dpattn_ledger {
        let mut l = null_mut();
        // SAFETY: valid out-pointer.
        let st = unsafe { dpattn_ledger_new_approx(TOKEN, 100.0, 1e-3, &mut l) };
        assert_eq!(st, dpattn_status::Ok);
        l
    }

    fn charges(l: *const dpattn_ledger) -> u64 {
        let mut n = 77;
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { dpattn_ledger_charges(l, &mut n) }, dpattn_status::Ok);
        n
    }

    fn new_session(l: *mut dpattn_ledger) -> *mut dpattn_session {
        let mut s = null_mut();
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { dpattn_session_new(l, &mut s) }, dpattn_status::Ok);
        s
    }

    /// One output-perturbation release (one stream id, a (1, 1e-6) charge) through the C
    /// entry point; the output's bits, or the status on failure (with the output checked
    /// untouched).
    fn release(s: *mut dpattn_session) -> Result<Vec<u32>, dpattn_status> {
        let (q, k, v) = (data(24, 1), data(48, 2), data(48, 3));
        let mut out = vec![7f32; 24];
        let mut sigma = [0f64; 2];
        let mut scratch = vec![0f32; op::output_perturbation_scratch_len(4, 4).unwrap()];
        let p = dpattn_output_perturbation_params {
            key_norm: 1.5,
            value_norm: 2.0,
            epsilon: 1.0,
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
            Ok(out.iter().map(|x| x.to_bits()).collect())
        } else {
            assert!(out.iter().all(|&x| x == 7.0), "output written on failure");
            Err(st)
        }
    }

    fn master_key(s: *const dpattn_session) -> dpattn_key {
        let mut k = dpattn_key { bytes: [0; 32] };
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { dpattn_session_master_key(s, &mut k) }, dpattn_status::Ok);
        k
    }

    fn save(s: *const dpattn_session) -> Vec<u8> {
        let mut b = vec![0u8; dpattn_session_state_len()];
        // SAFETY: `b` is writable for its length.
        let st = unsafe { dpattn_session_save(s, b.as_mut_ptr(), b.len()) };
        assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
        b
    }

    fn restore(state: &[u8]) -> (*mut dpattn_session, *mut dpattn_ledger) {
        let (mut s, mut l) = (null_mut(), null_mut());
        // SAFETY: `state` is readable for its length; valid out-pointers.
        let st = unsafe { dpattn_session_restore(state.as_ptr(), state.len(), &mut s, &mut l) };
        assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
        (s, l)
    }

    /// Every handle in `hs` was released (the per-handle form of "the live handle count is
    /// back where it started": the count itself is process-wide and other tests run in
    /// parallel; the serial C host checks the count, `tests/c/session.c`).
    fn all_freed(sessions: &[*mut dpattn_session], ledgers: &[*mut dpattn_ledger]) {
        for &s in sessions {
            assert!(dpattn_session::lookup(s, "s").is_err(), "session {s:?} is still live");
        }
        for &l in ledgers {
            assert!(dpattn_ledger::lookup(l, "l").is_err(), "ledger {l:?} is still live");
        }
    }

    #[test]
    fn a_session_hands_out_each_stream_id_once_and_charges_its_ledger() {
        let l = ledger();
        let s = new_session(l);
        let (epoch, first) = position(s);
        assert_eq!(first, 0);
        let a = release(s).unwrap();
        assert_eq!(position(s), (epoch, op::STREAMS));
        let b = release(s).unwrap();
        assert_eq!(position(s), (epoch, 2 * op::STREAMS));
        assert_ne!(a, b, "two releases of one session drew the same noise");
        // The caller's handle and the session share the ledger: both charges are visible.
        assert_eq!(charges(l), 2);
        // SAFETY: live handle.
        assert_eq!(unsafe { dpattn_ledger_charge_approx(l, TOKEN, 1.0, 0.0) }, dpattn_status::Ok);
        assert_eq!(charges(l), 3);
        // The session keeps the ledger alive after the caller frees its handle.
        // SAFETY: live handle, freed once.
        unsafe { dpattn_ledger_free(l) };
        assert!(release(s).is_ok());
        assert_eq!(position(s).1, 3 * op::STREAMS);
        // Two sessions get different master keys and epochs from the operating system.
        let l2 = ledger();
        let s2 = new_session(l2);
        assert_ne!(master_key(s).bytes, master_key(s2).bytes);
        assert_ne!(position(s2).0, epoch);
        free(s);
        free(s2);
        // SAFETY: live handle, freed once.
        unsafe { dpattn_ledger_free(l2) };
        all_freed(&[s, s2], &[l, l2]);
    }

    #[test]
    fn a_replay_session_reproduces_a_release_bit_for_bit() {
        let l = ledger();
        let s = new_session(l);
        assert!(release(s).is_ok());
        // An auditor holds the master key and the logged position of the release.
        let key = master_key(s);
        let (epoch, next) = position(s);
        let original = release(s).unwrap();
        assert_eq!(charges(l), 2);
        let mut r = null_mut();
        // SAFETY: live locals; NULL ledger.
        let st = unsafe { dpattn_session_new_for_replay(&key, epoch, next, null_mut(), &mut r) };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(position(r), (epoch, next));
        assert_eq!(release(r).unwrap(), original);
        assert_eq!(charges(l), 2, "a replay without a ledger charges nothing");
        // The same position with another epoch, or the next stream id, is other noise.
        free(r);
        let mut other = key;
        other.bytes[0] ^= 1;
        for (k, e, n) in [(key, epoch ^ 1, next), (key, epoch, next + 1), (other, epoch, next)] {
            // SAFETY: live locals.
            let st = unsafe { dpattn_session_new_for_replay(&k, e, n, null_mut(), &mut r) };
            assert_eq!(st, dpattn_status::Ok);
            assert_ne!(release(r).unwrap(), original, "({e}, {n})");
            free(r);
        }
        // A replay with a ledger is charged like the original.
        let l2 = ledger();
        // SAFETY: live locals.
        let st = unsafe { dpattn_session_new_for_replay(&key, epoch, next, l2, &mut r) };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(release(r).unwrap(), original);
        assert_eq!(charges(l2), 1);
        // What a release draws with is the epoch key of the master key, at the next ids.
        let rk = replay(9, 0xABCD, 4, null_mut());
        let seen = with_session(rk, 2, |draw, ledger| {
            assert!(ledger.is_none());
            Ok((draw.key.clone(), draw.stream))
        })
        .unwrap();
        assert_eq!(seen, (drawing_key(9, 0xABCD), 4));
        assert_ne!(seen.0, dpattn_key { bytes: [9; 32] }.to_core());
        assert_eq!(position(rk), (0xABCD, 6));
        free(rk);
        free(r);
        free(s);
        // SAFETY: live handles, freed once.
        unsafe {
            dpattn_ledger_free(l);
            dpattn_ledger_free(l2);
        }
        all_freed(&[s, r, rk], &[l, l2]);
    }

    #[test]
    fn restoring_an_older_save_draws_new_noise_on_the_same_stream_ids() {
        let l = ledger();
        let s = new_session(l);
        let key = master_key(s);
        let (epoch, _) = position(s);
        let older = save(s);
        let released = release(s).unwrap(); // stream 0 of `epoch`
        let newer = save(s);
        assert_eq!(charges(l), 1);
        // The older save knows neither the release nor its charge: restored, it hands out
        // stream id 0 again, but in a fresh epoch, so the noise differs.
        let (s1, l1) = restore(&older);
        let (e1, n1) = position(s1);
        assert_eq!(n1, 0);
        assert_ne!(e1, epoch, "a restore must start a new epoch");
        assert_eq!(master_key(s1).bytes, key.bytes);
        assert_eq!(charges(l1), 0, "an older save forgets later charges");
        let again = release(s1).unwrap();
        assert_ne!(again, released, "stream id 0 drew the same noise twice");
        // Only the epoch differs: replaying (key, epoch, 0) and (key, e1, 0) gives each.
        for (e, want) in [(epoch, &released), (e1, &again)] {
            let mut r = null_mut();
            // SAFETY: live locals.
            let st = unsafe { dpattn_session_new_for_replay(&key, e, 0, null_mut(), &mut r) };
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!(&release(r).unwrap(), want);
            free(r);
        }
        // The newest save carries the charge and the stream id; restoring the same bytes
        // twice still gives two epochs.
        let (s2, l2) = restore(&newer);
        let (s3, l3) = restore(&newer);
        assert_eq!((charges(l2), position(s2).1), (1, 1));
        assert_ne!(position(s2).0, position(s3).0);
        assert_ne!(release(s2).unwrap(), release(s3).unwrap());
        // Each restored session charges its own ledger handle, not the original.
        assert_eq!((charges(l), charges(l1), charges(l2), charges(l3)), (1, 1, 2, 2));
        // A state round-trips: saving a restored session saves the same ledger and ids.
        let resaved = save(s2);
        assert_eq!(resaved[..40], newer[..40], "magic and master key");
        for h in [s, s1, s2, s3] {
            free(h);
        }
        for h in [l, l1, l2, l3] {
            // SAFETY: live handles, freed once.
            unsafe { dpattn_ledger_free(h) };
        }
        all_freed(&[s, s1, s2, s3], &[l, l1, l2, l3]);
    }

    #[test]
    fn null_invalid_and_exhausted_sessions_are_refused_with_nothing_written() {
        let l = ledger();
        let key = dpattn_key { bytes: [3; 32] };
        let sentinel = 0x10 as *mut dpattn_session;
        let mut s = sentinel;
        // SAFETY: every pointer is NULL, a live local, or a (possibly stale) handle value.
        unsafe {
            fails(dpattn_session_new(null_mut(), &mut s), dpattn_status::NullArgument, "ledger");
            fails(dpattn_session_new(l, null_mut()), dpattn_status::NullArgument, "out_session");
            fails(
                dpattn_session_new(0x1234 as *mut dpattn_ledger, &mut s),
                dpattn_status::InvalidHandle,
                "ledger",
            );
            fails(
                dpattn_session_new_for_replay(null(), 0, 0, null_mut(), &mut s),
                dpattn_status::NullArgument,
                "key",
            );
            fails(
                dpattn_session_new_for_replay(&key, 0, 0, 0x1234 as *mut dpattn_ledger, &mut s),
                dpattn_status::InvalidHandle,
                "ledger",
            );
            assert_eq!(s, sentinel);
            // A session handle is not a ledger handle, and the reverse.
            let real = new_session(l);
            fails(
                dpattn_session_new(real.cast::<dpattn_ledger>(), &mut s),
                dpattn_status::InvalidHandle,
                "dpattn_ledger",
            );
            let (mut e, mut n) = (5u64, 6u64);
            fails(
                dpattn_session_position(l.cast::<dpattn_session>(), &mut e, &mut n),
                dpattn_status::InvalidHandle,
                "dpattn_session",
            );
            fails(
                dpattn_session_position(null(), &mut e, &mut n),
                dpattn_status::NullArgument,
                "session",
            );
            fails(
                dpattn_session_position(real, null_mut(), &mut n),
                dpattn_status::NullArgument,
                "out_epoch",
            );
            fails(
                dpattn_session_position(real, &mut e, null_mut()),
                dpattn_status::NullArgument,
                "out_next_stream",
            );
            let mut k = dpattn_key { bytes: [1; 32] };
            fails(
                dpattn_session_master_key(real, null_mut()),
                dpattn_status::NullArgument,
                "out_key",
            );
            // Saving: short or NULL buffers, a replay session without a ledger.
            let mut buf = vec![0xEEu8; dpattn_session_state_len()];
            fails(
                dpattn_session_save(real, buf.as_mut_ptr(), buf.len() - 1),
                dpattn_status::BufferTooShort,
                "session state",
            );
            fails(
                dpattn_session_save(real, null_mut(), buf.len()),
                dpattn_status::NullArgument,
                "out",
            );
            let r = replay(3, 1, 2, null_mut());
            fails(
                dpattn_session_save(r, buf.as_mut_ptr(), buf.len()),
                dpattn_status::Unsupported,
                "replay",
            );
            assert!(buf.iter().all(|&b| b == 0xEE));
            // Restoring: short, NULL or foreign bytes.
            let good = save(real);
            let (mut rs, mut rl) = (sentinel, 0x20 as *mut dpattn_ledger);
            fails(
                dpattn_session_restore(good.as_ptr(), good.len() - 1, &mut rs, &mut rl),
                dpattn_status::BufferTooShort,
                "session state",
            );
            let mut bad = good.clone();
            bad[0] ^= 0xFF;
            fails(
                dpattn_session_restore(bad.as_ptr(), bad.len(), &mut rs, &mut rl),
                dpattn_status::OutOfRange,
                "session",
            );
            fails(
                dpattn_session_restore(null(), good.len(), &mut rs, &mut rl),
                dpattn_status::NullArgument,
                "state",
            );
            fails(
                dpattn_session_restore(good.as_ptr(), good.len(), null_mut(), &mut rl),
                dpattn_status::NullArgument,
                "out_session",
            );
            fails(
                dpattn_session_restore(good.as_ptr(), good.len(), &mut rs, null_mut()),
                dpattn_status::NullArgument,
                "out_ledger",
            );
            assert_eq!((rs, rl), (sentinel, 0x20 as *mut dpattn_ledger));
            // A release on a NULL, freed or foreign session writes nothing and charges
            // nothing.
            assert_eq!(release(null_mut()), Err(dpattn_status::NullArgument));
            assert!(last_error_string().contains("session"));
            assert_eq!(release(l.cast()), Err(dpattn_status::InvalidHandle));
            free(real);
            free(real); // double free: a no-op
            free(null_mut());
            assert_eq!(release(real), Err(dpattn_status::InvalidHandle));
            fails(
                dpattn_session_position(real, &mut e, &mut n),
                dpattn_status::InvalidHandle,
                "session",
            );
            fails(dpattn_session_master_key(real, &mut k), dpattn_status::InvalidHandle, "session");
            assert_eq!((e, n, k.bytes), (5, 6, [1; 32]));
            assert_eq!(charges(l), 0);
            // A session whose stream ids are used up refuses, and does not move.
            let full = replay(3, 1, u64::MAX, l);
            assert_eq!(release(full), Err(dpattn_status::SizeOverflow));
            assert!(last_error_string().contains("new epoch"), "{}", last_error_string());
            assert_eq!(position(full), (1, u64::MAX));
            assert_eq!(charges(l), 0);
            // A charge for another unit through a session is refused before any output.
            let mut pl = null_mut();
            let prompt = dpattn_privacy_unit { kind: DPATTN_UNIT_PROMPT, tokens: 0 };
            assert_eq!(dpattn_ledger_new_approx(prompt, 100.0, 1e-3, &mut pl), dpattn_status::Ok);
            let ps = new_session(pl);
            assert_eq!(release(ps), Err(dpattn_status::UnitMismatch));
            assert_eq!(charges(pl), 0);
            for h in [r, full, ps] {
                free(h);
            }
            dpattn_ledger_free(l);
            dpattn_ledger_free(pl);
            all_freed(&[real, r, full, ps], &[l, pl]);
        }
    }
}
