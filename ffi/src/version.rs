//! Library version.

use std::ffi::c_char;

static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The library version as a static NUL-terminated string, e.g. `"0.1.0"`; equal to the
/// header's `DPATTN_VERSION` when header and library match. Never NULL. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn dpattn_version() -> *const c_char {
    crate::boundary::ffi_value(c"".as_ptr(), || VERSION.as_ptr().cast())
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_matches_the_crate() {
        // SAFETY: `dpattn_version` returns a static NUL-terminated string.
        let v = unsafe { std::ffi::CStr::from_ptr(super::dpattn_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
        assert_eq!(v.to_str().unwrap(), dpattn_core::VERSION);
    }
}
