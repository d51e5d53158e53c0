//! The smallest useful firmware: one DP attention release (`cases::release`: output
//! perturbation in exact mode, two heads, 3 query rows against 5 keys, `d = 8`, charged to
//! an `(ε, δ)` ledger) and nothing else. Its flash and RAM (static, and the stack's
//! high-water mark printed at the end) are the footprint table of `docs/BENCHMARKS.md`.
#![no_std]
#![no_main]

#[path = "../cases.rs"]
#[allow(dead_code)]
mod cases;
#[path = "../support.rs"]
mod support;

use cortex_m_rt::entry;

#[entry]
fn main() -> ! {
    let painted = support::paint_stack();
    let mut out = support::Semihosting;
    let (q, k, v) = cases::inputs();
    let ok = cases::release(&q, &k, &v).is_ok();
    support::report_stack(&mut out, painted);
    support::exit(ok)
}
