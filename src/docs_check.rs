//! `docs/ARCHITECTURE.md` stays true to the code: every module path, source file and C
//! prefix it names exists, and every count of C functions in the docs equals the header's.
//!
//! What is checked, in the README and every document of `docs/` that names code:
//! * a code span `dpattn_core::a::{b, c}` (also `dpattn_cuda`, `dpattn_ffi`, `dpattn_store`,
//!   `dpattn_paper`) names modules: each must be a file `a/b.rs` or `a/b/mod.rs` (or, for the
//!   last segment only, an item declared in its parent module's file);
//! * a code span ending in a source extension (`.rs`, `.cu`, `.cuh`, `.h`, `.hpp`, `.cpp`,
//!   `.c`, `.sh`, `.md`, `.py`) must be a file of the repository, by its path from the root
//!   or the end of that path (`kernels/mma.cuh`);
//! * a code span `dpattn_…_` (a C prefix) must begin some function of `include/dpattn.h`;
//! * "N functions" / "N entry points" must be the header's function count;
//! * nothing points outside the repository (`shared/spec`, `../shared`, `.library/`).

extern crate std;

use std::format;
use std::path::{Path, PathBuf};
use std::string::{String, ToString};
use std::vec::Vec;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The code spans (`` `…` ``) of a Markdown text, fenced blocks skipped. A span may cross
/// a line break within its paragraph.
fn code_spans(md: &str) -> Vec<String> {
    let (mut spans, mut paragraph, mut fenced) = (Vec::new(), String::new(), false);
    let mut flush = |paragraph: &mut String| {
        let parts: Vec<&str> = paragraph.split('`').collect();
        spans.extend(parts.iter().skip(1).step_by(2).map(|s| s.replace('\n', " ")));
        paragraph.clear();
    };
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            flush(&mut paragraph);
        } else if !fenced && line.trim().is_empty() {
            flush(&mut paragraph);
        } else if !fenced {
            paragraph.push_str(line);
            paragraph.push('\n');
        }
    }
    flush(&mut paragraph);
    spans
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else { return std::vec![path.to_string()] };
    let Some(close) = path.rfind('}') else { return std::vec![path.to_string()] };
    let (prefix, inner) = (&path[..open], &path[open + 1..close]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty() && *p != "self")
        .flat_map(|p| expand(&format!("{prefix}{p}")))
        .collect()
}

fn crate_src(name: &str) -> Option<&'static str> {
    Some(match name {
        "dpattn_core" => "core/src",
        "dpattn_cuda" => "cuda/src",
        "dpattn_ffi" => "ffi/src",
        "dpattn_store" => "store/src",
        "dpattn_paper" => "paper/src",
        _ => return None,
    })
}

/// The file of module `segs` under `dir`, if it exists.
fn module_file(dir: &Path, segs: &[&str]) -> Option<PathBuf> {
    let mut base = dir.to_path_buf();
    let mut file = dir.join("lib.rs");
    for seg in segs {
        let (flat, nested) = (base.join(format!("{seg}.rs")), base.join(seg).join("mod.rs"));
        file = if flat.is_file() {
            flat
        } else if nested.is_file() {
            nested
        } else {
            return None;
        };
        base = base.join(seg);
    }
    Some(file)
}

/// Why `path` (a `crate::a::b` path) does not resolve, if it does not.
fn check_module_path(path: &str) -> Option<String> {
    let segs: Vec<&str> = path.split("::").collect();
    let src = root().join(crate_src(segs[0])?);
    if module_file(&src, &segs[1..]).is_some() {
        return None;
    }
    // The last segment may be an item of its parent module.
    let (last, parent) = segs[1..].split_last()?;
    let Some(text) = module_file(&src, parent).and_then(|f| std::fs::read_to_string(f).ok()) else {
        return Some(format!("`{path}`: no module `{}`", segs[..segs.len() - 1].join("::")));
    };
    let declared = ["fn ", "struct ", "enum ", "trait ", "const ", "type ", "static ", "mod "]
        .iter()
        .any(|kw| text.contains(&format!("{kw}{last}")));
    let reexported = [" ", "{", "::"].iter().any(|before| {
        [",", "}", ";"].iter().any(|after| text.contains(&format!("{before}{last}{after}")))
    });
    (!declared && !reexported).then(|| format!("`{path}`: no module or item `{last}`"))
}

const SOURCE_EXTENSIONS: [&str; 10] =
    [".rs", ".cu", ".cuh", ".h", ".hpp", ".cpp", ".c", ".sh", ".md", ".py"];

/// Every file of the repository (build outputs and `.git` skipped), relative to the root.
fn repo_files() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "target" || name.starts_with('.') {
                continue;
            }
            let rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            if entry.path().is_dir() {
                walk(&entry.path(), &rel, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), "", &mut out);
    out
}

/// A path into another project (`opacus/tests/…`): its first folder is not one of ours.
fn external(span: &str, files: &[String]) -> bool {
    span.split_once('/').is_some_and(|(top, _)| {
        !top.starts_with('.') && !files.iter().any(|f| f.starts_with(&format!("{top}/")))
    })
}

/// A file span must be a repository path, or the end of one (`kernels/mma.cuh`).
fn check_file(span: &str, files: &[String]) -> Option<String> {
    let found = files.iter().any(|f| f == span || f.ends_with(&format!("/{span}")));
    (!found).then(|| format!("`{span}`: no such file"))
}

/// The functions `include/dpattn.h` declares.
fn header_functions() -> Vec<String> {
    read("include/dpattn.h")
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_alphabetic()) && l.contains('('))
        .filter_map(|l| {
            let name = l[..l.find('(')?].rsplit([' ', '*']).next()?;
            name.starts_with("dpattn_").then(|| name.to_string())
        })
        .collect()
}

/// Every problem of one document.
fn problems(doc: &str, functions: &[String], files: &[String]) -> Vec<String> {
    let text = read(doc);
    let mut out = Vec::new();
    for span in code_spans(&text) {
        let span = span.trim();
        let word = |c: char| c.is_ascii_alphanumeric() || "_:{}, ".contains(c);
        if span.contains("::") && span.chars().all(word) {
            if crate_src(span.split("::").next().unwrap()).is_some() {
                out.extend(expand(span).iter().filter_map(|p| check_module_path(p)));
            }
        } else if SOURCE_EXTENSIONS.iter().any(|e| span.ends_with(e))
            && !span.contains(['*', ' ', '<'])
            && !external(span, files)
        {
            out.extend(check_file(span, files));
        } else if span.starts_with("dpattn_")
            && span.ends_with('_')
            && span.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !functions.iter().any(|f| f.starts_with(span))
        {
            out.push(format!("`{span}`: no function of include/dpattn.h has this prefix"));
        }
    }
    // The repository stands alone: no pointer into the workplace outside it.
    for outside in ["shared/spec", "shared/seeds", ".library/", "../shared"] {
        if text.contains(outside) {
            out.push(format!("points outside the repository (`{outside}`)"));
        }
    }
    // "271 functions", "271 entry points".
    let words: Vec<&str> = text.split_whitespace().collect();
    for pair in words.windows(2) {
        let noun = pair[1].trim_matches(|c: char| !c.is_ascii_alphabetic());
        if let Ok(n) = pair[0].trim_start_matches('(').parse::<usize>()
            && (noun == "functions" || noun == "entry")
            && n > 20
            && n != functions.len()
        {
            out.push(format!("says {n} {noun}, include/dpattn.h has {}", functions.len()));
        }
    }
    out.iter().map(|p| format!("{doc}: {p}")).collect()
}

#[test]
fn the_docs_name_only_modules_files_and_prefixes_that_exist() {
    let (functions, files) = (header_functions(), repo_files());
    assert!(functions.len() > 100, "header parse found only {} functions", functions.len());
    let all: Vec<String> = [
        "docs/ARCHITECTURE.md",
        "docs/C_API.md",
        "docs/PRIVACY.md",
        "docs/RANDOMNESS.md",
        "docs/BENCHMARKS.md",
        "docs/PAPERS.md",
        "README.md",
    ]
    .iter()
    .flat_map(|d| problems(d, &functions, &files))
    .collect();
    assert!(all.is_empty(), "the docs drifted from the code:\n{}", all.join("\n"));
}

#[test]
fn the_checks_catch_drift() {
    // The checks themselves, on names that do not exist.
    assert!(check_module_path("dpattn_core::no_such_module").is_some());
    assert!(check_module_path("dpattn_core::sampling::no_such_item").is_some());
    assert!(check_module_path("dpattn_core::no_such_module::keyed_stream").is_some());
    assert!(check_module_path("dpattn_core::sampling::keyed_stream").is_none());
    assert!(check_module_path("dpattn_core::grid_release::NoiseMode").is_none());
    let files = repo_files();
    assert!(check_file("no_such_file.rs", &files).is_some());
    assert!(check_file("kernels/mma.cuh", &files).is_none());
    assert!(check_file("shared/spec/seed-000.md", &files).is_some());
    assert!(external("opacus/tests/accountants_test.py", &files));
    assert!(!external("tests/c/session.c", &files) && !external(".library/x.md", &files));
    assert_eq!(
        expand("dpattn_core::a::{b, c::{d, e}}"),
        ["dpattn_core::a::b", "dpattn_core::a::c::d", "dpattn_core::a::c::e"]
    );
}
