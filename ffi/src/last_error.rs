//! The thread-local description of the last failure, and, kept apart, the private values
//! behind a refusal of private data (`docs/PRIVACY.md` §9).

use std::cell::RefCell;
use std::ffi::c_char;
use std::thread::LocalKey;

type Slot = LocalKey<RefCell<String>>;

thread_local! {
    /// The message: never holds a value computed from private data.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    /// The private detail of the last refusal of private data, for the data holder.
    static LAST_PRIVATE_DETAIL: RefCell<String> = const { RefCell::new(String::new()) };
}

// Every access uses `try_with`: during thread-local teardown (a C++ `thread_local`
// destructor calling into dpattn, say) `with` would panic, and a panic inside the panic
// handler of an `extern "C"` function aborts the host. There the message is dropped.

fn set(slot: &'static Slot, msg: &str) {
    let _ = slot.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            e.clear();
            // An interior NUL would truncate the C string; messages are ours, but be safe.
            e.extend(msg.chars().map(|c| if c == '\0' { ' ' } else { c }));
        }
    });
}

/// Records the message of a failure (and forgets any earlier private detail).
pub(crate) fn set_last_error(msg: &str) {
    set(&LAST_ERROR, msg);
    set(&LAST_PRIVATE_DETAIL, "");
}

/// Records the private detail of the failure just recorded by [`set_last_error`].
pub(crate) fn set_last_private_detail(detail: &str) {
    set(&LAST_PRIVATE_DETAIL, detail);
}

pub(crate) fn clear_last_error() {
    set_last_error("");
}

#[cfg(test)]
pub(crate) fn last_error_string() -> String {
    LAST_ERROR.with(|e| e.borrow().clone())
}

#[cfg(test)]
pub(crate) fn last_private_detail_string() -> String {
    LAST_PRIVATE_DETAIL.with(|e| e.borrow().clone())
}

/// Copies the string in `slot` into `buf` (see `dpattn_last_error_message`); returns its
/// length.
///
/// # Safety
/// `buf` must be NULL or valid for writes of `len` bytes.
unsafe fn copy_message(slot: &'static Slot, buf: *mut c_char, len: usize) -> usize {
    slot.try_with(|e| {
        let Ok(msg) = e.try_borrow() else { return 0 };
        if !buf.is_null() && len > 0 {
            let mut n = msg.len().min(len - 1);
            while !msg.is_char_boundary(n) {
                n -= 1;
            }
            // SAFETY: the caller guarantees `buf` is valid for `len` bytes; we write
            // `n + 1 <= len` bytes, and `msg` (a Rust string) cannot overlap it.
            unsafe {
                std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        msg.len()
    })
    .unwrap_or(0)
}

/// Copies the description of the last failed call on this thread into `buf` as a
/// NUL-terminated UTF-8 string, and returns the description's full length in bytes (not
/// counting the NUL), like `snprintf`: the message was truncated when the return value is
/// `>= len`. Truncation never splits a UTF-8 character. With `buf == NULL` or `len == 0`
/// nothing is written (use this to query the length). Returns 0 when the last *fallible*
/// call on this thread succeeded: every function returning `dpattn_status` clears the
/// message on entry (infallible functions leave it alone unless they catch a panic).
///
/// The message never carries a value computed from private data (no measured statistic,
/// no index into private data, no count of private entries), so it may be logged; for a
/// refusal of private data those values are in `dpattn_last_error_private_detail`.
///
/// Thread-safe: each thread has its own message.
///
/// # Safety
/// `buf` must be NULL or valid for writes of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_last_error_message(buf: *mut c_char, len: usize) -> usize {
    // SAFETY: forwarded caller contract.
    crate::boundary::ffi_value(0, || unsafe { copy_message(&LAST_ERROR, buf, len) })
}

/// **For the data holder only — never log it.** Copies the private detail of the last
/// failed call on this thread into `buf`, with the semantics of
/// `dpattn_last_error_message` (NUL-terminated, full length returned, `buf == NULL` or
/// `len == 0` to query the length). The detail is what the message withholds when a call
/// refuses private data (`DPATTN_STATUS_NON_FINITE` on private data,
/// `DPATTN_STATUS_DOMAIN_VIOLATION`): the position of a non-finite entry (`"entry 4321"`),
/// a data entry and its value (`"entry 7 (value 1e300)"`), a statistic measured on the
/// data (`"measured 2.5"`) or a count of offending entries (`"37 entries"`). Positions are
/// logical, row-major over the argument's shape. Returns 0 (an empty string) when the last
/// fallible call succeeded or failed on public input.
///
/// These values are computed from private data and no privacy guarantee covers them.
///
/// Thread-safe: each thread has its own detail.
///
/// # Safety
/// `buf` must be NULL or valid for writes of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_last_error_private_detail(buf: *mut c_char, len: usize) -> usize {
    // SAFETY: forwarded caller contract.
    crate::boundary::ffi_value(0, || unsafe { copy_message(&LAST_PRIVATE_DETAIL, buf, len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(len: usize) -> (usize, Vec<u8>) {
        let mut buf = vec![0x55u8; len];
        // SAFETY: `buf` has `len` writable bytes.
        let n = unsafe { dpattn_last_error_message(buf.as_mut_ptr().cast(), len) };
        (n, buf)
    }

    #[test]
    fn snprintf_semantics() {
        set_last_error("héllo"); // 6 bytes: h, é (2), l, l, o
        assert_eq!(read(0).0, 6);
        // SAFETY: NULL with len 0 is the documented length query.
        let n = unsafe { dpattn_last_error_message(std::ptr::null_mut(), 0) };
        assert_eq!(n, 6);
        // SAFETY: NULL is allowed with any length; nothing is written.
        let n = unsafe { dpattn_last_error_message(std::ptr::null_mut(), 99) };
        assert_eq!(n, 6);
        let (n, buf) = read(7);
        assert_eq!((n, &buf[..7]), (6, &b"h\xc3\xa9llo\0"[..]));
        // Room for 2 bytes: "h" then half of "é" -> only "h" is copied.
        let (n, buf) = read(3);
        assert_eq!((n, &buf[..3]), (6, &b"h\0\x55"[..]));
        let (_, buf) = read(1);
        assert_eq!(buf[0], 0);
    }

    fn read_detail() -> String {
        let mut buf = vec![0u8; 128];
        // SAFETY: `buf` has 128 writable bytes.
        let n = unsafe { dpattn_last_error_private_detail(buf.as_mut_ptr().cast(), buf.len()) };
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    /// A refusal of private data through the C ABI: the message names the argument and the
    /// condition but none of the private numbers; the private detail has them.
    #[test]
    fn private_values_stay_out_of_the_message_and_in_the_private_detail() {
        use crate::noise::dpattn_grid_laplace_add;
        use crate::status::dpattn_status;
        use crate::tensor::dpattn_key;
        let key = dpattn_key { bytes: [7; 32] };
        let mut data = vec![0.5; 5000];
        data[4321] = 1.2345678e300; // |x| / 2^-2 is far above 2^53
        let call = |data: &mut [f64]| {
            // SAFETY: `key` is a valid key and `data` holds `data.len()` doubles.
            unsafe {
                dpattn_grid_laplace_add(&key, 0, 0, 1.0, 1.0, 5000, -2, data.as_mut_ptr(), 5000)
            }
        };
        assert_eq!(call(&mut data), dpattn_status::DomainViolation);
        let msg = last_error_string();
        for secret in ["4321", "12345678", "e300"] {
            assert!(!msg.contains(secret), "{secret} leaked: {msg}");
        }
        assert!(msg.contains("withheld"), "{msg}");
        assert_eq!(read_detail(), "entry 4321 (value 1.2345678e300)");

        data[4321] = f64::NAN;
        assert_eq!(call(&mut data), dpattn_status::NonFinite);
        assert!(!last_error_string().contains("4321"), "{}", last_error_string());
        assert_eq!(read_detail(), "entry 4321");
        assert_eq!(last_private_detail_string(), "entry 4321");

        // A public error clears the detail; so does a success.
        data[4321] = 0.5;
        // SAFETY: as above.
        let st = unsafe {
            dpattn_grid_laplace_add(&key, 0, 0, 1.0, -1.0, 5000, -2, data.as_mut_ptr(), 5000)
        };
        assert_eq!(st, dpattn_status::OutOfRange);
        assert_eq!(read_detail(), "");
        data[4321] = f64::NAN;
        assert_eq!(call(&mut data), dpattn_status::NonFinite);
        data[4321] = 0.5;
        assert_eq!(call(&mut data), dpattn_status::Ok);
        assert_eq!((last_error_string(), read_detail()), (String::new(), String::new()));
    }

    #[test]
    fn messages_are_per_thread() {
        set_last_error("main thread");
        let other = std::thread::spawn(|| {
            let (n, _) = read(0);
            set_last_error("other");
            n
        })
        .join()
        .unwrap();
        assert_eq!(other, 0);
        assert_eq!(last_error_string(), "main thread");
    }
}
