//! The parity firmware: runs the shared cases (`cases.rs`) on the emulated Cortex-M4F,
//! prints one line per result through semihosting, then `footprint` lines (the stack's
//! high-water mark), and exits with status 0 (or 1 after a panic).
#![no_std]
#![no_main]

mod cases;
mod support;

use cortex_m_rt::entry;

#[entry]
fn main() -> ! {
    let painted = support::paint_stack();
    let mut out = support::Semihosting;
    let ok = cases::run(&mut out).is_ok();
    support::report_stack(&mut out, painted);
    support::exit(ok)
}
