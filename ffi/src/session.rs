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

/// The value behind a `dpattn_session`.
pub(crate) struct FfiSession {
    source: NoiseSource,
    /// `None` for a replay session created without a ledger (nothing is charged).
    ledger: Option<Locked<dpattn_ledger>>,
}

impl Handle for dpattn_session {
    type Inner = FfiSession;
    const NAME: &'static str = "dpattn_session";
}

/// Runs `f` with `streams` fresh stream ids of `session` and its ledger (locked for the
/// duration). The ids are consumed even when `f` fails.
pub(crate) fn with_session<R>(
    session: *mut dpattn_session,
    streams: u64,
    f: impl FnOnce(
        Draw<'_>,
        Option<&mut dyn dpattn_core::accounting::cost::Accountant>,
    ) -> Result<R, FfiError>,
) -> Result<R, FfiError> {
    let handle = dpattn_session::lookup(session, "session")?;
    handle.with(|s| {
        let draw = s.source.reserve(streams)?;
        match &s.ledger {
            Some(l) => l.with(|l| f(draw, Some(l))),
            None => f(draw, None),
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
            out.write(dpattn_session::into_handle(FfiSession { source, ledger: Some(ledger) }))
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
        unsafe { out.write(dpattn_session::into_handle(FfiSession { source, ledger })) };
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
        let (epoch, next) = dpattn_session::lookup(session, "session")?
            .with(|s| (s.source.epoch(), s.source.next_stream()));
        // SAFETY: non-NULL (checked), writable per the caller contract.
        unsafe {
            e.write(epoch);
            n.write(next);
        }
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
/// without a ledger).
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
        let state = dpattn_session::lookup(session, "session")?.with(|s| {
            let ledger = s
                .ledger
                .as_ref()
                .ok_or(Error::Unsupported { what: "saving a replay session without a ledger" })?;
            Ok::<_, Error>(SessionState::from_parts(&s.source, ledger.with(|l| l.clone())))
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
            os.write(dpattn_session::into_handle(FfiSession { source, ledger: Some(locked) }));
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
