//! Fuzz harnesses for the C ABI, shared by the libFuzzer targets (`fuzz/fuzz_targets/`,
//! run by `scripts/fuzz.sh`) and the regression test `ffi/tests/fuzz_regressions.rs`,
//! which replays every file under `fuzz/regressions/<target>/` on stable Rust in CI.
//!
//! Each harness decodes arbitrary bytes into the arguments of a family of entry points —
//! shapes, strides, lengths, dtype and enum codes (valid and invalid), parameter bit
//! patterns (NaN, ±Inf, subnormals, huge), aliasing between output and inputs, scratch
//! sizes — always backed by real buffers at least as long as the lengths passed, exactly
//! as a correct-but-careless C caller would. The invariants: no crash, no sanitizer
//! report, never `DPATTN_STATUS_PANIC` or `DPATTN_STATUS_INTERNAL`, a non-empty
//! last-error message whenever a call fails, and outputs untouched on failure.
#![allow(dead_code, unreachable_pub)]

use std::ffi::c_void;

use dpattn_ffi::*;

/// Reads little-endian values from the fuzz input, yielding zeros once it runs out.
pub struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self(data)
    }
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    /// A size biased towards small values, with occasional huge ones (overflow paths).
    /// Once the input is used up it yields 1, so short inputs still decode to sane calls.
    pub fn size(&mut self, small: usize) -> usize {
        if self.0.is_empty() {
            return 1.min(small);
        }
        match self.u8() % 16 {
            0 => usize::MAX - (self.u8() as usize),
            1 => 1usize << (self.u8() % 64),
            _ => self.u8() as usize % (small + 1),
        }
    }
    /// An f64 biased towards meaningful values, with special bit patterns mixed in.
    pub fn f64(&mut self) -> f64 {
        match self.u8() % 12 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => 0.0,
            4 => -0.0,
            5 => f64::from_bits(self.u64()),
            6 => f64::MIN_POSITIVE / 4.0,
            7 => 1e300,
            _ => f64::from(self.u32()) / f64::from(u32::MAX) * 16.0 - 4.0,
        }
    }
    pub fn rest(&self) -> &'a [u8] {
        self.0
    }
}

/// Asserts the boundary's invariants for one call.
pub fn check_status(st: dpattn_status) {
    assert_ne!(st, dpattn_status::Panic, "a panic reached the boundary: {}", message());
    assert_ne!(st, dpattn_status::Internal, "internal error: {}", message());
    if st != dpattn_status::Ok {
        assert!(!message().is_empty(), "status {st:?} without a message");
    }
}

fn message() -> String {
    let mut buf = vec![0u8; 1024];
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { dpattn_last_error_message(buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(n.min(1023));
    String::from_utf8_lossy(&buf).into_owned()
}

/// Backing memory, 8-byte aligned so every dtype fits; `cap` is in 8-byte units so any
/// element count up to `cap` is valid for any dtype.
struct Arena {
    words: Vec<u64>,
}

impl Arena {
    fn new(cap: usize, fill: &mut Bytes<'_>) -> Self {
        // Mostly well-formed f32 pairs in [-2, 2); sometimes raw bits (NaN, Inf, huge).
        let raw = fill.u8().is_multiple_of(4);
        let words = (0..cap)
            .map(|i| {
                if raw && i.is_multiple_of(97) {
                    // NaN, Inf, huge and subnormal bit patterns in a few places.
                    [u64::MAX, 0x7F80_0000_7FF0_0000, 0x7F7F_FFFF_0000_0001, 0x0000_0001_8000_0000]
                        [usize::from(fill.u8() % 4)]
                } else {
                    let a = ((i * 2654435761) % 1000) as f32 / 250.0 - 2.0;
                    u64::from(a.to_bits()) | (u64::from((a * 0.5).to_bits()) << 32)
                }
            })
            .collect();
        Self { words }
    }
    fn ptr(&mut self) -> *mut c_void {
        self.words.as_mut_ptr().cast()
    }
}

const CAP: usize = 4096;

/// Dense row-major strides, saturating (huge shapes must reach the library, not overflow
/// here).
fn dense(shape: [usize; 4]) -> [usize; 4] {
    let m = |a: usize, b: usize| a.saturating_mul(b);
    [m(m(shape[1], shape[2]), shape[3]), m(shape[2], shape[3]), shape[3], 1]
}

/// Elements of a shape, capped at the arena size.
fn numel(shape: [usize; 4]) -> usize {
    shape.iter().fold(1usize, |a, &b| a.saturating_mul(b)).min(CAP)
}

fn shape(b: &mut Bytes<'_>) -> [usize; 4] {
    [b.size(3), b.size(4), b.size(24), b.size(40)]
}

fn strides(b: &mut Bytes<'_>, shape: [usize; 4]) -> [usize; 4] {
    if b.u8().is_multiple_of(3) {
        [b.size(2000), b.size(800), b.size(100), b.size(2)]
    } else {
        dense(shape).map(|x| x.min(CAP))
    }
}

fn dtype(b: &mut Bytes<'_>) -> dpattn_dtype {
    match b.u8() % 10 {
        0 => b.u32(),
        n => u32::from(n % 4),
    }
}

/// Exact attention with arbitrary shapes, strides, dtypes, lengths, options, scratch and
/// aliasing.
pub fn attention_shapes(data: &[u8]) {
    let mut b = Bytes::new(data);
    let mut arena = [Arena::new(CAP, &mut b), Arena::new(CAP, &mut b), Arena::new(CAP, &mut b)];
    let mut out_mem = Arena::new(CAP, &mut b);
    let in_dtype = dtype(&mut b);
    let mut tensors = [0usize; 3].map(|_| {
        let sh = shape(&mut b);
        let st = strides(&mut b, sh);
        (sh, st, b.size(CAP).min(CAP))
    });
    // Often make k/v/q shapes consistent so the kernels actually run.
    if b.u8().is_multiple_of(2) {
        let q = tensors[0].0;
        tensors[1].0 = [q[0], q[1], tensors[1].0[2], q[3]];
        tensors[2].0 = [q[0], q[1], tensors[1].0[2], tensors[2].0[3]];
        for t in &mut tensors {
            t.1 = dense(t.0);
            t.2 = numel(t.0);
        }
    }
    let ins: Vec<dpattn_tensor4> = tensors
        .iter()
        .zip(arena.iter_mut())
        .map(|(&(shape, strides, len), a)| dpattn_tensor4 {
            data: a.ptr(),
            len,
            dtype: in_dtype,
            shape,
            strides,
        })
        .collect();
    let out_shape = [ins[0].shape[0], ins[0].shape[1], ins[0].shape[2], ins[2].shape[3]];
    let out_strides =
        if b.u8().is_multiple_of(4) { strides(&mut b, out_shape) } else { dense(out_shape) };
    let alias = b.u8().is_multiple_of(8);
    let out = dpattn_tensor4_mut {
        data: if alias { ins[0].data.cast_mut() } else { out_mem.ptr() },
        len: numel(out_shape),
        dtype: dtype(&mut b),
        shape: out_shape,
        strides: out_strides,
    };
    let mut opts = std::mem::MaybeUninit::<dpattn_attention_options>::uninit();
    // SAFETY: fills every field of the options struct.
    unsafe { dpattn_attention_options_default(opts.as_mut_ptr()) };
    // SAFETY: initialised by the call above.
    let mut opts = unsafe { opts.assume_init() };
    let padding: Vec<u8> = (0..64).map(|_| b.u8() % 3 / 2 + (b.u8() == 255) as u8).collect();
    opts.causal = b.u32() % 3;
    opts.score = b.u32() % 3;
    opts.scale_kind = b.u32() % 4;
    opts.scale = b.f64();
    opts.kernel = b.u32() % 4;
    if b.u8().is_multiple_of(4) {
        opts.key_padding = padding.as_ptr();
        opts.key_padding_len = b.size(64).min(64);
    }
    let mut scratch = vec![0f32; b.size(30_000).min(30_000)];
    let before: Vec<u64> = out_mem.words.clone();
    let use_opts = !b.u8().is_multiple_of(5);
    // SAFETY: every pointer refers to live memory at least as long as the length passed.
    let st = unsafe {
        dpattn_attention(
            &out,
            &ins[0],
            &ins[1],
            &ins[2],
            if use_opts { &opts } else { std::ptr::null() },
            scratch.as_mut_ptr(),
            scratch.len(),
        )
    };
    check_status(st);
    if st != dpattn_status::Ok && !alias {
        assert!(before == out_mem.words, "output written on failure ({st:?})");
    }
    let mut n = 0usize;
    // SAFETY: valid out-parameter.
    check_status(unsafe { dpattn_attention_scratch_len(b.size(512), b.size(512), &mut n) });
}

/// Keyed noise fills with arbitrary dtype, first index, length, and parameters.
pub fn noise_buffers(data: &[u8]) {
    let mut b = Bytes::new(data);
    let mut mem = Arena::new(CAP, &mut b);
    let key = dpattn_key { bytes: std::array::from_fn(|_| b.u8()) };
    for _ in 0..4 {
        let (stream, first, sigma, dt) = (b.u64(), b.u64(), b.f64(), dtype(&mut b));
        let len = b.size(CAP).min(CAP);
        let before = mem.words.clone();
        // SAFETY: `mem` holds CAP 8-byte words, enough for `len` elements of any dtype.
        let st = unsafe { dpattn_fill_gaussian(&key, stream, first, sigma, dt, mem.ptr(), len) };
        check_status(st);
        if st != dpattn_status::Ok {
            assert!(before == mem.words, "buffer written on failure");
        }
        let (sh, st_) = (shape(&mut b), [b.size(99), b.size(99), b.size(99), b.size(2)]);
        let mut n = 0usize;
        // SAFETY: both arrays hold 4 elements; `n` is a valid out-parameter.
        check_status(unsafe { dpattn_layout4_required_len(sh.as_ptr(), st_.as_ptr(), &mut n) });
    }
}

/// Calibration, validation and ledger calls with arbitrary parameter bit patterns.
pub fn privacy_params(data: &[u8]) {
    let mut b = Bytes::new(data);
    let mut sigma = -1.0;
    let (e, d, s) = (b.f64(), b.f64(), b.f64());
    // SAFETY: valid out-parameter.
    let st = unsafe { dpattn_analytic_gaussian_sigma(e, d, s, &mut sigma) };
    check_status(st);
    if st == dpattn_status::Ok {
        assert!(sigma.is_finite() && sigma > 0.0, "sigma {sigma} for ({e}, {d}, {s})");
    } else {
        assert_eq!(sigma, -1.0, "out-parameter written on failure");
    }
    check_status(dpattn_check_privacy_params(b.f64(), b.f64()));
    let mut h: *mut dpattn_ledger = std::ptr::null_mut();
    let (te, td) = (b.f64(), b.f64());
    // SAFETY: valid out-parameter.
    let st = unsafe {
        match b.u8() % 3 {
            0 => dpattn_ledger_new_approx(te, td, &mut h),
            1 => dpattn_ledger_new_zcdp(te, &mut h),
            _ => dpattn_ledger_new_rdp(te, td, &mut h),
        }
    };
    check_status(st);
    if st != dpattn_status::Ok {
        assert!(h.is_null(), "handle written on failure");
        return;
    }
    for _ in 0..8 {
        // SAFETY: `h` is live until freed below (a freed handle is also allowed: detected).
        let st = unsafe {
            match b.u8() % 4 {
                0 => dpattn_ledger_charge_approx(h, b.f64(), b.f64()),
                1 => dpattn_ledger_charge_zcdp(h, b.f64()),
                2 => dpattn_ledger_charge_sampled_gaussian(h, b.f64(), b.f64(), b.u64() % 100_000),
                _ => {
                    dpattn_ledger_free(h);
                    dpattn_ledger_charge_approx(h, 1.0, 0.0)
                }
            }
        };
        check_status(st);
    }
    // SAFETY: freeing a live or already-freed handle is allowed.
    unsafe { dpattn_ledger_free(h) };
}
