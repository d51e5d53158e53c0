//! Opaque handles: `_new` returns one, `_free` releases it, every other call looks it up.
//!
//! A handle is not an address: it is a never-reused 64-bit id (shown to C as an opaque
//! pointer) mapped to an `Arc<Mutex<T>>` in a process-wide registry — the integer-handle
//! scheme of mozilla's `ffi-support` behind rustls-ffi's opaque-pointer surface. Hence:
//!
//! * use after free, double free, a handle of another type, or a made-up pointer is
//!   *detected* (`DPATTN_STATUS_INVALID_HANDLE`; `_free` of such a value does nothing),
//!   never undefined behaviour, because no handle is ever dereferenced;
//! * every handle may be used from any thread: each call locks that handle's mutex for its
//!   duration, so concurrent calls on one handle are serialised, and a `_free` racing a
//!   call only drops the registry's reference (the call in flight finishes first);
//! * a panic while a handle is locked poisons nothing: the lock is taken through
//!   `PoisonError::into_inner`, and entry points only mutate a handle after all checks.
//!
//! The cost is one short global lock per call to clone the `Arc`: tens of nanoseconds,
//! negligible next to any call that does numeric work.

use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::boundary::FfiError;

type Entry = Arc<dyn Any + Send + Sync>;

/// A registered handle and whether it was built without noise (`_new_exact`).
type Registered = (Entry, bool);

static REGISTRY: Mutex<Option<HashMap<u64, Registered>>> = Mutex::new(None);
/// Ids start high and step by 16 so they look like aligned pointers in a debugger and are
/// never 0 (NULL); 2^60 handles would be needed to wrap.
static NEXT_ID: AtomicU64 = AtomicU64::new(0x0D9A_0000_0000);

#[cfg(not(target_pointer_width = "64"))]
compile_error!("dpattn-ffi handles are 64-bit ids carried in pointers: 64-bit targets only");

fn registry() -> MutexGuard<'static, Option<HashMap<u64, Registered>>> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the registry stores for a handle of type `H`: the type tag is `H` itself, so two
/// handle types wrapping the same Rust type still cannot be confused.
struct Slot<H: Handle> {
    value: Mutex<H::Inner>,
    _h: PhantomData<fn() -> H>,
}

/// Ties a C-visible opaque type to the Rust value it stands for (rustls-ffi's `Castable`).
pub(crate) trait Handle: Sized + 'static {
    /// The Rust value behind the handle.
    type Inner: Send + 'static;
    /// The name used in error messages, e.g. `"dpattn_ledger"`.
    const NAME: &'static str;

    /// Registers `value` and returns its new handle.
    fn into_handle(value: Self::Inner) -> *mut Self {
        register(value, false)
    }

    /// Registers a value built *without noise* (a `_new_exact` constructor): queries that
    /// report a privacy guarantee or a noise level refuse it (see [`Locked::require_private`]),
    /// so an exact structure cannot be passed off as a DP release downstream.
    fn into_exact_handle(value: Self::Inner) -> *mut Self {
        register(value, true)
    }

    /// Looks `ptr` up; `arg` names the argument in the error message.
    fn lookup(ptr: *const Self, arg: &'static str) -> Result<Locked<Self>, FfiError> {
        if ptr.is_null() {
            return Err(FfiError::Null(arg));
        }
        let (entry, exact) = registry()
            .as_ref()
            .and_then(|m| m.get(&(ptr as usize as u64)))
            .cloned()
            .ok_or(FfiError::InvalidHandle(arg, Self::NAME))?;
        let cell =
            entry.downcast::<Slot<Self>>().map_err(|_| FfiError::InvalidHandle(arg, Self::NAME))?;
        Ok(Locked { cell, exact, _h: PhantomData })
    }

    /// Removes `ptr` from the registry. NULL, unknown and wrong-type values are ignored
    /// (a double free is a no-op). Returns whether a handle was released.
    fn free(ptr: *mut Self) -> bool {
        if ptr.is_null() {
            return false;
        }
        let mut reg = registry();
        let Some(map) = reg.as_mut() else { return false };
        let id = ptr as usize as u64;
        match map.get(&id) {
            Some((e, _)) if e.is::<Slot<Self>>() => map.remove(&id).is_some(),
            _ => false,
        }
    }
}

fn register<H: Handle>(value: H::Inner, exact: bool) -> *mut H {
    let id = NEXT_ID.fetch_add(16, Ordering::Relaxed);
    let entry: Entry = Arc::new(Slot::<H> { value: Mutex::new(value), _h: PhantomData });
    registry().get_or_insert_with(HashMap::new).insert(id, (entry, exact));
    id as usize as *mut H
}

/// A looked-up handle; [`Locked::with`] locks it for the duration of a closure.
pub(crate) struct Locked<H: Handle> {
    cell: Arc<Slot<H>>,
    exact: bool,
    _h: PhantomData<fn() -> H>,
}

impl<H: Handle> Locked<H> {
    /// Refuses handles registered with [`Handle::into_exact_handle`]: for entry points that
    /// report a privacy guarantee or a noise level.
    pub(crate) fn require_private(&self) -> Result<&Self, FfiError> {
        if self.exact {
            Err(FfiError::Core(dpattn_core::Error::Unsupported {
                what: "a privacy or noise report on a structure built by a `_new_exact` constructor (no noise was added; it is not differentially private)",
            }))
        } else {
            Ok(self)
        }
    }

    /// Runs `f` with exclusive access to the value.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut H::Inner) -> R) -> R {
        let mut guard = self.cell.value.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }
}

/// The number of live handles of every type in this process: created by a `_new` call and
/// not yet freed. A host can compare it before and after a unit of work to find leaked
/// handles (the C test host requires 0 at exit). Returns 0 if it panics (it cannot).
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_live_handle_count() -> usize {
    crate::boundary::ffi_value(0, || registry().as_ref().map_or(0, HashMap::len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(unreachable_pub)]
    pub struct counter_t {
        _private: [u8; 0],
    }
    impl Handle for counter_t {
        type Inner = u32;
        const NAME: &'static str = "counter_t";
    }
    #[allow(unreachable_pub)]
    pub struct other_t {
        _private: [u8; 0],
    }
    impl Handle for other_t {
        type Inner = u32;
        const NAME: &'static str = "other_t";
    }

    #[test]
    fn use_after_free_double_free_and_wrong_type_are_detected() {
        let h = counter_t::into_handle(5);
        counter_t::lookup(h, "h").unwrap().with(|v| *v += 1);
        assert_eq!(counter_t::lookup(h, "h").unwrap().with(|v| *v), 6);
        // The same id viewed as another handle type is rejected, and not freed.
        let wrong = h.cast::<other_t>();
        assert!(matches!(other_t::lookup(wrong, "h"), Err(FfiError::InvalidHandle("h", _))));
        assert!(!other_t::free(wrong));
        assert!(counter_t::free(h));
        assert!(matches!(counter_t::lookup(h, "h"), Err(FfiError::InvalidHandle("h", _))));
        assert!(!counter_t::free(h), "double free is a no-op");
        assert!(!counter_t::free(std::ptr::null_mut()));
        assert!(matches!(
            counter_t::lookup(0x1234 as *const counter_t, "h"),
            Err(FfiError::InvalidHandle(..))
        ));
        assert!(matches!(counter_t::lookup(std::ptr::null(), "h"), Err(FfiError::Null("h"))));
    }

    #[test]
    fn a_call_in_flight_survives_a_concurrent_free() {
        let h = counter_t::into_handle(1);
        let locked = counter_t::lookup(h, "h").unwrap();
        assert!(counter_t::free(h));
        assert_eq!(locked.with(|v| *v), 1, "the looked-up value is still alive");
    }
}
