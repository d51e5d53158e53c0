//! Compiles every C and C++ test program of `tests/c/` against `include/dpattn.h`, with
//! warnings as errors, and generates one `#[test]` per program.
//!
//! Convention: `tests/c/<name>.c` defines `int dpattn_c_<name>(void)` and
//! `tests/c/<name>.cpp` defines `extern "C" int dpattn_cpp_<name>(void)`; each returns 0
//! when every check passed, else the line number of the first failed check. Files ending
//! in `_main.c` are left out (stand-alone hosts; `scripts/c-host.sh` generates its own);
//! `*.h`/`*.hpp` are shared helpers.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn programs(dir: &Path, ext: &str) -> Vec<(String, PathBuf)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .expect("read tests/c")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .filter_map(|p| {
            let stem = p.file_stem()?.to_str()?.to_owned();
            (!stem.ends_with("_main")).then_some((stem, p))
        })
        .collect();
    out.sort();
    out
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let include = root.join("include");
    let c_dir = root.join("tests/c");
    println!("cargo:rerun-if-changed={}", c_dir.display());
    println!("cargo:rerun-if-changed={}", include.display());
    for entry in std::fs::read_dir(&c_dir).expect("read tests/c") {
        println!("cargo:rerun-if-changed={}", entry.expect("dir entry").path().display());
    }
    for entry in std::fs::read_dir(&include).expect("read include") {
        println!("cargo:rerun-if-changed={}", entry.expect("dir entry").path().display());
    }

    let c = programs(&c_dir, "c");
    let cpp = programs(&c_dir, "cpp");
    let mut build = cc::Build::new();
    build
        .include(&include)
        .include(&c_dir)
        .std("c99")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .define("DPATTN_PANIC_TEST", None);
    for (_, p) in &c {
        build.file(p);
    }
    build.compile("dpattn_c_programs");

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .include(&include)
        .include(&c_dir)
        .std("c++17")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .define("DPATTN_PANIC_TEST", None);
    for (_, p) in &cpp {
        build.file(p);
    }
    build.compile("dpattn_cpp_programs");

    // The programs run one at a time: some check the process-wide live-handle count, which
    // concurrent programs would change under them.
    let mut tests =
        String::from("static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());\n\n");
    for (lang, list) in [("c", &c), ("cpp", &cpp)] {
        for (name, path) in list {
            let sym = format!("dpattn_{lang}_{name}");
            writeln!(
                tests,
                "#[test]\nfn {lang}_{name}() {{\n    unsafe extern \"C\" {{ fn {sym}() -> i32; }}\n    \
                 let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);\n    \
                 // SAFETY: a C function with no arguments, compiled from {file}.\n    \
                 let line = unsafe {{ {sym}() }};\n    \
                 assert_eq!(line, 0, \"{file} failed at line {{line}}\");\n}}\n",
                file = path.strip_prefix(&root).unwrap_or(path).display(),
            )
            .unwrap();
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out.join("c_programs.rs"), tests).expect("write c_programs.rs");
}
