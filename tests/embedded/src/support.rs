//! What both firmwares need: semihosting output and exit status, a panic handler that
//! reports and fails, and the stack-painting measurement of the stack's high-water mark.

use core::fmt::{self, Write};

use cortex_m_semihosting::{debug, hio};

/// Semihosting's standard output as a `fmt::Write` (QEMU prints it on its stdout).
pub struct Semihosting;

impl Write for Semihosting {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut out = hio::hstdout().map_err(|_| fmt::Error)?;
        out.write_all(s.as_bytes()).map_err(|_| fmt::Error)
    }
}

/// Ends the emulation with status 0 (`ok`) or 1.
pub fn exit(ok: bool) -> ! {
    debug::exit(if ok { debug::EXIT_SUCCESS } else { debug::EXIT_FAILURE });
    #[allow(clippy::empty_loop)]
    loop {}
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let _ = writeln!(Semihosting, "panic: {info}");
    exit(false)
}

unsafe extern "C" {
    /// The first byte after `.data` and `.bss` (cortex-m-rt's linker script): the lowest
    /// address the stack may grow to.
    static mut __sheap: u32;
    /// The initial stack pointer, the top of RAM.
    static _stack_start: u32;
}

/// The pattern written over the free stack before the workload runs.
const PAINT: u32 = 0xA5A5_A5A5;
/// Where RAM begins (memory.x).
const RAM_ORIGIN: usize = 0x2000_0000;

/// Paints the free stack, from the end of the static data up to just below the current
/// stack pointer; returns the lowest painted address.
pub fn paint_stack() -> usize {
    let bottom = core::ptr::addr_of_mut!(__sheap) as usize;
    let sp = cortex_m::register::msp::read() as usize;
    let mut p = bottom;
    while p + 256 < sp {
        // SAFETY: [bottom, sp − 256) is RAM that no object occupies: above every static
        // (`__sheap`) and below the live stack frames, with a margin for this function's
        // own frame; the firmware has no heap.
        unsafe { (p as *mut u32).write_volatile(PAINT) };
        p += 4;
    }
    bottom
}

/// Prints the stack's high-water mark since [`paint_stack`] (the first word above `bottom`
/// that lost the paint) and the static RAM (`.data` + `.bss`).
pub fn report_stack(w: &mut dyn Write, bottom: usize) {
    let top = core::ptr::addr_of!(_stack_start) as usize;
    let mut p = bottom;
    // SAFETY: reads of RAM words between the end of the statics and the stack's top.
    while p < top && unsafe { (p as *const u32).read_volatile() } == PAINT {
        p += 4;
    }
    let _ = writeln!(w, "footprint stack_peak_bytes {}", top - p);
    let _ = writeln!(w, "footprint static_ram_bytes {}", bottom - RAM_ORIGIN);
}
