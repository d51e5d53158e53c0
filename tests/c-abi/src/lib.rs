//! Runs the C and C++ programs of `tests/c/` (compiled by `build.rs` against
//! `include/dpattn.h`) against the `dpattn-ffi` library linked into this test binary.
//!
//! This crate has no API; it exists so `cargo test` proves the C ABI from outside Rust.

#[cfg(test)]
mod tests {
    // Link the library that defines the `dpattn_*` symbols the C code calls.
    use dpattn_ffi as _;

    unsafe extern "C" {
        fn dpattn_c_abi_smoke() -> i32;
        fn dpattn_cpp_abi_smoke() -> i32;
        fn dpattn_c_panic_boundary() -> i32;
    }

    #[test]
    fn c_abi_smoke() {
        // SAFETY: a C function with no arguments, compiled from tests/c/abi_smoke.c.
        let line = unsafe { dpattn_c_abi_smoke() };
        assert_eq!(line, 0, "tests/c/abi_smoke.c failed at line {line}");
    }

    #[test]
    fn c_panic_boundary() {
        // SAFETY: a C function with no arguments, compiled from tests/c/panic_boundary.c.
        let line = unsafe { dpattn_c_panic_boundary() };
        assert_eq!(line, 0, "tests/c/panic_boundary.c failed at line {line}");
    }

    #[test]
    fn cpp_abi_smoke() {
        // SAFETY: a C-linkage function with no arguments, from tests/c/abi_smoke.cpp.
        let line = unsafe { dpattn_cpp_abi_smoke() };
        assert_eq!(line, 0, "tests/c/abi_smoke.cpp failed at line {line}");
    }
}
