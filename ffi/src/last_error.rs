//! The thread-local description of the last failure.

use std::cell::RefCell;
use std::ffi::c_char;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

// Every access uses `try_with`: during thread-local teardown (a C++ `thread_local`
// destructor calling into dpattn, say) `with` would panic, and a panic inside the panic
// handler of an `extern "C"` function aborts the host. There the message is dropped.

pub(crate) fn set_last_error(msg: &str) {
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            e.clear();
            // An interior NUL would truncate the C string; messages are ours, but be safe.
            e.extend(msg.chars().map(|c| if c == '\0' { ' ' } else { c }));
        }
    });
}

pub(crate) fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            e.clear();
        }
    });
}

#[cfg(test)]
pub(crate) fn last_error_string() -> String {
    LAST_ERROR.with(|e| e.borrow().clone())
}

/// Copies the message into `buf` (see `dpattn_last_error_message`); returns its length.
///
/// # Safety
/// `buf` must be NULL or valid for writes of `len` bytes.
unsafe fn copy_message(buf: *mut c_char, len: usize) -> usize {
    LAST_ERROR
        .try_with(|e| {
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
/// Thread-safe: each thread has its own message.
///
/// # Safety
/// `buf` must be NULL or valid for writes of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_last_error_message(buf: *mut c_char, len: usize) -> usize {
    // SAFETY: forwarded caller contract.
    crate::boundary::ffi_value(0, || unsafe { copy_message(buf, len) })
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
