//! Compiles the C and C++ programs of `tests/c/` against `include/dpattn.h`, with warnings
//! as errors, into a static library linked into this crate's test binary.

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let include = root.join("include");
    let c_dir = root.join("tests/c");
    for f in ["check.h", "abi_smoke.c", "panic_boundary.c", "abi_smoke.cpp"] {
        println!("cargo:rerun-if-changed={}", c_dir.join(f).display());
    }
    println!("cargo:rerun-if-changed={}", include.join("dpattn.h").display());

    cc::Build::new()
        .file(c_dir.join("abi_smoke.c"))
        .file(c_dir.join("panic_boundary.c"))
        .include(&include)
        .std("c99")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("dpattn_c_abi_smoke");

    cc::Build::new()
        .cpp(true)
        .file(c_dir.join("abi_smoke.cpp"))
        .include(&include)
        .std("c++17")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("dpattn_cpp_abi_smoke");
}
