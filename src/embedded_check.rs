//! The Cortex-M4F run against x86-64: `scripts/embedded.sh` boots the parity firmware
//! (`tests/embedded`) on QEMU's mps2-an386 and saves what it printed; this test runs the
//! same cases (`tests/embedded/src/cases.rs`, the same file) here and compares line by
//! line: `E` lines (exact and grid outputs, integers, the ledger) bit for bit, `A` lines
//! (values computed through `exp`, `log`, `erfc`) to a relative 1e-13.
//!
//! The test command sets `DPATTN_EMBEDDED_OUT` (the saved output) and
//! `DPATTN_REQUIRE_EMBEDDED=1`; a plain `cargo test` without them skips with a loud message.

extern crate std;

#[path = "../tests/embedded/src/cases.rs"]
#[allow(dead_code, unreachable_pub)]
mod cases;

use std::string::String;
use std::vec::Vec;
use std::{eprintln, format};

/// Relative tolerance of `A` lines.
const TOLERANCE: f64 = 1e-13;

/// The result lines (`E …`, `A …`) of a run's output, other lines skipped.
fn results(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("E ") || l.starts_with("A ")).collect()
}

/// Every difference between the host's lines and the device's.
fn differences(host: &str, device: &str) -> Vec<String> {
    let (h, d) = (results(host), results(device));
    let mut out = Vec::new();
    if h.len() != d.len() {
        out.push(format!("{} results on the host, {} on the device", h.len(), d.len()));
    }
    for (a, b) in h.iter().zip(d.iter()) {
        let (ha, da): (Vec<&str>, Vec<&str>) =
            (a.split_whitespace().collect(), b.split_whitespace().collect());
        let same = match (ha.as_slice(), da.as_slice()) {
            (["A", n1, x1], ["A", n2, x2]) if n1 == n2 => {
                match (x1.parse::<f64>(), x2.parse::<f64>()) {
                    (Ok(x), Ok(y)) => (x - y).abs() <= TOLERANCE * x.abs().max(y.abs()),
                    _ => false,
                }
            }
            _ => a == b,
        };
        if !same {
            out.push(format!("host `{a}` ≠ device `{b}`"));
        }
    }
    out
}

fn host_output() -> String {
    let mut host = String::new();
    cases::run(&mut host).expect("writing to a String cannot fail");
    host
}

#[test]
fn the_cortex_m4f_run_matches_x86_64() {
    let Some(path) = std::env::var_os("DPATTN_EMBEDDED_OUT") else {
        assert!(
            std::env::var_os("DPATTN_REQUIRE_EMBEDDED").is_none(),
            "DPATTN_REQUIRE_EMBEDDED is set but DPATTN_EMBEDDED_OUT is not: run scripts/embedded.sh"
        );
        eprintln!(
            "*** SKIPPED *** no Cortex-M4F output: run scripts/embedded.sh OUT and set DPATTN_EMBEDDED_OUT=OUT/parity.out"
        );
        return;
    };
    let device = std::fs::read_to_string(&path).expect("DPATTN_EMBEDDED_OUT is readable");
    let host = host_output();
    assert!(results(&host).len() > 150, "the cases wrote only {} results", results(&host).len());
    assert!(!host.contains(" error"), "a case failed on the host:\n{host}");
    let diff = differences(&host, &device);
    assert!(diff.is_empty(), "the Cortex-M4F run differs from x86-64:\n{}", diff.join("\n"));
    let (h, d) = (results(&host), results(&device));
    let a_lines = h.iter().filter(|l| l.starts_with('A')).count();
    let a_same = h.iter().zip(&d).filter(|(x, y)| x.starts_with('A') && x == y).count();
    eprintln!("{} results agree; {a_same} of the {a_lines} `A` lines bit for bit", h.len());
}

#[test]
fn the_comparison_sees_one_changed_bit_and_one_changed_digit() {
    let host = host_output();
    // Flip the lowest bit of the first `E` value.
    let e = host.lines().position(|l| l.starts_with("E ")).unwrap();
    let mut lines: Vec<String> = host.lines().map(String::from).collect();
    let last = lines[e].pop().unwrap();
    lines[e].push(if last == '0' { '1' } else { '0' });
    assert_eq!(differences(&host, &lines.join("\n")).len(), 1);
    // Move an `A` value by 1e-12 relative.
    let a = host.lines().position(|l| l.starts_with("A ")).unwrap();
    let mut lines: Vec<String> = host.lines().map(String::from).collect();
    let parts: Vec<&str> = lines[a].split_whitespace().collect();
    let x: f64 = parts[2].parse().unwrap();
    lines[a] = format!("A {} {:e}", parts[1], x * (1.0 + 1e-12));
    assert_eq!(differences(&host, &lines.join("\n")).len(), 1);
    // A missing line.
    let fewer: Vec<&str> = host.lines().skip(1).collect();
    assert!(!differences(&host, &fewer.join("\n")).is_empty());
    assert!(differences(&host, &host).is_empty());
}
