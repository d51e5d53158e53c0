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
    /// Finite values only (the mechanisms' public inputs must be finite).
    fn finite() -> Self {
        Self::new(CAP, &mut Bytes::new(&[1]))
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
    let ledger_unit = unit(&mut b);
    // SAFETY: valid out-parameter.
    let st = unsafe {
        match b.u8() % 3 {
            0 => dpattn_ledger_new_approx(ledger_unit, te, td, &mut h),
            1 => dpattn_ledger_new_zcdp(ledger_unit, te, &mut h),
            _ => dpattn_ledger_new_rdp(ledger_unit, te, td, &mut h),
        }
    };
    check_status(st);
    if st != dpattn_status::Ok {
        assert!(h.is_null(), "handle written on failure");
        return;
    }
    for _ in 0..8 {
        // Mostly the ledger's own unit; sometimes another (or a malformed) one.
        let u = if b.u8().is_multiple_of(3) { unit(&mut b) } else { ledger_unit };
        let before = charges(h);
        // SAFETY: `h` is live until freed below (a freed handle is also allowed: detected).
        let st = unsafe {
            match b.u8() % 4 {
                0 => dpattn_ledger_charge_approx(h, u, b.f64(), b.f64()),
                1 => dpattn_ledger_charge_zcdp(h, u, b.f64()),
                2 => {
                    dpattn_ledger_charge_sampled_gaussian(h, u, b.f64(), b.f64(), b.u64() % 100_000)
                }
                _ => {
                    dpattn_ledger_free(h);
                    dpattn_ledger_charge_approx(h, u, 1.0, 0.0)
                }
            }
        };
        check_status(st);
        if let (Some(n0), Some(n1)) = (before, charges(h)) {
            // A refused charge changes nothing (the count stands for the whole state: the
            // unit tests compare every amount); an accepted one is counted once.
            let want = if st == dpattn_status::Ok { n0 + 1 } else { n0 };
            assert_eq!(n1, want, "charge count after {st:?}");
        }
        if st == dpattn_status::UnitMismatch {
            assert_ne!(u, ledger_unit, "the ledger refused its own unit");
        }
    }
    // SAFETY: freeing a live or already-freed handle is allowed.
    unsafe { dpattn_ledger_free(h) };
}

/// A privacy unit: mostly well-formed (`tokens` 1–4 for `DPATTN_UNIT_TOKENS`, else 0),
/// sometimes malformed (0 tokens, stray tokens, arbitrary bits). An exhausted input gives
/// one token.
fn unit(b: &mut Bytes<'_>) -> dpattn_privacy_unit {
    match b.u8() % 8 {
        7 => dpattn_privacy_unit { kind: b.u32(), tokens: b.u32() },
        n => {
            let kind = u32::from(n % 5);
            let tokens = match (kind, b.u8() % 8) {
                (DPATTN_UNIT_TOKENS, 7) | (_, 6) => u32::from(b.u8() % 3),
                (DPATTN_UNIT_TOKENS, t) => 1 + u32::from(t % 4),
                _ => 0,
            };
            dpattn_privacy_unit { kind, tokens }
        }
    }
}

/// `sane` unless the next byte says otherwise (1 in `n`): then an arbitrary f64. An
/// exhausted input keeps `sane`, so short inputs still reach the mechanisms.
fn or_f64(b: &mut Bytes<'_>, n: u8, sane: f64) -> f64 {
    if b.u8() % n == 1 { b.f64() } else { sane }
}

/// A scratch length: mostly what the `_scratch_len` query said (`need`), sometimes an
/// arbitrary one; at most `cap`.
fn scratch_len(b: &mut Bytes<'_>, need: usize, cap: usize) -> usize {
    match b.u8() % 6 {
        1 => b.size(cap),
        2 => need.saturating_sub(1),
        _ => need,
    }
    .min(cap)
}

/// Accepted charges of a ledger, or `None` for a handle that is not live.
fn charges(h: *const dpattn_ledger) -> Option<u64> {
    let mut n = 0u64;
    // SAFETY: valid out-parameter; `h` is any value (a stale one is detected).
    (unsafe { dpattn_ledger_charges(h, &mut n) } == dpattn_status::Ok).then_some(n)
}

/// `(epoch, next stream id)` of a session, or `None` for a handle that is not live.
fn position(s: *const dpattn_session) -> Option<(u64, u64)> {
    let (mut e, mut n) = (0u64, 0u64);
    // SAFETY: valid out-parameters; `s` is any value (a stale one is detected).
    (unsafe { dpattn_session_position(s, &mut e, &mut n) } == dpattn_status::Ok).then_some((e, n))
}

/// Sessions — created from the operating system, for replay at arbitrary positions
/// (stream ids near exhaustion included), restored from saved, corrupted or arbitrary
/// bytes, NULL or freed — saved into buffers of arbitrary length, and used by the three
/// session releases (output perturbation, paper 000, DP-Forward) with arbitrary shapes,
/// parameters and ledger units. Beyond the boundary invariants: a failed call writes no
/// output and leaves the ledger's charge count as it was; a release uses exactly one
/// stream id of its session when it succeeds and at most one when it fails; the epoch
/// never changes; a restore starts a fresh epoch.
pub fn sessions(data: &[u8]) {
    let mut b = Bytes::new(data);
    let mut ledger: *mut dpattn_ledger = std::ptr::null_mut();
    let ledger_unit = unit(&mut b);
    let budget = match b.u8() % 6 {
        1 => 0.5,
        2 => 1e-3,
        3 => b.f64(),
        _ => 50.0,
    };
    // SAFETY: valid out-parameter.
    let st = unsafe {
        match b.u8() % 3 {
            0 => dpattn_ledger_new_approx(ledger_unit, budget, 1e-3, &mut ledger),
            1 => dpattn_ledger_new_zcdp(ledger_unit, budget, &mut ledger),
            _ => dpattn_ledger_new_rdp(ledger_unit, budget, 1e-5, &mut ledger),
        }
    };
    check_status(st);
    let key = dpattn_key { bytes: std::array::from_fn(|_| b.u8()) };
    let mut session: *mut dpattn_session = std::ptr::null_mut();
    let mut restored: *mut dpattn_ledger = std::ptr::null_mut();
    // SAFETY: valid out-parameters; handles are live, NULL, or freed (detected).
    let st = unsafe {
        match b.u8() % 6 {
            0 | 1 => dpattn_session_new(ledger, &mut session),
            2 => {
                let next = match b.u8() % 4 {
                    0 => u64::MAX - u64::from(b.u8() % 4),
                    _ => b.u64(),
                };
                let l = if b.u8().is_multiple_of(2) { std::ptr::null_mut() } else { ledger };
                dpattn_session_new_for_replay(&key, b.u64(), next, l, &mut session)
            }
            3 => {
                // A saved state, possibly corrupted in one byte and cut short.
                let mut first: *mut dpattn_session = std::ptr::null_mut();
                let mut state = vec![0u8; dpattn_session_state_len()];
                let ok = dpattn_session_new(ledger, &mut first) == dpattn_status::Ok
                    && dpattn_session_save(first, state.as_mut_ptr(), state.len())
                        == dpattn_status::Ok;
                let old = position(first);
                dpattn_session_free(first);
                if ok && b.u8().is_multiple_of(2) {
                    let i = usize::from(b.u8()) % state.len();
                    state[i] ^= b.u8();
                }
                let len = state.len() - usize::from(b.u8().is_multiple_of(4));
                let st = dpattn_session_restore(state.as_ptr(), len, &mut session, &mut restored);
                if st == dpattn_status::Ok {
                    let (e0, n0) = old.expect("saved from a live session");
                    let (e1, n1) = position(session).expect("restored session is live");
                    assert_eq!(n1, n0, "restore keeps the next stream id");
                    assert_ne!(e1, e0, "restore must start a new epoch");
                }
                st
            }
            4 => {
                // Arbitrary bytes as a state.
                let bytes: Vec<u8> =
                    (0..b.size(dpattn_session_state_len() + 8).min(dpattn_session_state_len() + 8))
                        .map(|_| b.u8())
                        .collect();
                dpattn_session_restore(bytes.as_ptr(), bytes.len(), &mut session, &mut restored)
            }
            _ => dpattn_session_new(std::ptr::null_mut(), &mut session),
        }
    };
    check_status(st);
    if st != dpattn_status::Ok {
        assert!(session.is_null() && restored.is_null(), "handle written on failure");
    }
    if b.u8() % 9 == 1 {
        // SAFETY: a live session (or NULL): later calls see a freed handle.
        unsafe { dpattn_session_free(session) };
    }
    let charged = if restored.is_null() { ledger } else { restored };
    for _ in 0..3 {
        let (before_pos, before_charges) = (position(session), charges(charged));
        let (st, untouched) = match b.u8() % 3 {
            0 => release_output_perturbation(&mut b, session),
            1 => release_gaussian_sampling(&mut b, session),
            _ => release_dp_forward(&mut b, session),
        };
        check_status(st);
        if st != dpattn_status::Ok {
            assert!(untouched, "output written on failure ({st:?})");
            assert_eq!(charges(charged), before_charges, "charged on failure ({st:?})");
        }
        if let Some((e0, n0)) = before_pos {
            let (e1, n1) = position(session).expect("the session is still live");
            assert_eq!(e1, e0, "a release changed the epoch");
            let used = n1.wrapping_sub(n0);
            match st {
                dpattn_status::Ok => assert_eq!(used, 1, "a release uses one stream id"),
                _ => assert!(used <= 1, "a failed release used {used} stream ids"),
            }
        }
    }
    let mut state = vec![0xA5u8; dpattn_session_state_len() + 1];
    let len = b.size(state.len()).min(state.len());
    // SAFETY: `state` is writable for `len` bytes.
    let st = unsafe { dpattn_session_save(session, state.as_mut_ptr(), len) };
    check_status(st);
    if st != dpattn_status::Ok {
        assert!(state.iter().all(|&x| x == 0xA5), "state written on failure");
    }
    let mut k = dpattn_key { bytes: [0; 32] };
    // SAFETY: valid out-parameter.
    check_status(unsafe { dpattn_session_master_key(session, &mut k) });
    // SAFETY: live, NULL or freed handles: freeing each is allowed.
    unsafe {
        dpattn_session_free(session);
        dpattn_ledger_free(ledger);
        dpattn_ledger_free(restored);
    }
}

/// One `dpattn_output_perturbation_attention` on small arbitrary shapes; whether `out` was
/// left untouched.
fn release_output_perturbation(
    b: &mut Bytes<'_>,
    session: *mut dpattn_session,
) -> (dpattn_status, bool) {
    let (batch, heads, s_q, s_k, d) =
        (b.size(2).min(2), b.size(2).min(2), b.size(4).min(4), b.size(6).min(6), b.size(8).min(8));
    let mut arena = Arena::new(CAP, b);
    let mut q_mem = if b.u8() % 4 == 1 { Arena::new(CAP, b) } else { Arena::finite() };
    let mut out_mem = Arena::new(CAP, b);
    let qs = [batch, heads, s_q, d];
    let ks = [batch, heads, s_k, d];
    let dt = if b.u8() % 5 == 1 { dtype(b) } else { DPATTN_DTYPE_F32 };
    let tensor = |shape: [usize; 4], data: *const c_void| dpattn_tensor4 {
        data,
        len: numel(shape),
        dtype: dt,
        shape,
        strides: dense(shape),
    };
    let q = tensor(qs, q_mem.ptr());
    let k = tensor(ks, arena.ptr());
    let out = dpattn_tensor4_mut {
        data: out_mem.ptr(),
        len: numel(qs),
        dtype: dt,
        shape: qs,
        strides: dense(qs),
    };
    let mut p = std::mem::MaybeUninit::<dpattn_output_perturbation_params>::uninit();
    // SAFETY: fills every field.
    unsafe { dpattn_output_perturbation_params_default(p.as_mut_ptr()) };
    // SAFETY: initialised above.
    let mut p = unsafe { p.assume_init() };
    p.key_norm = or_f64(b, 4, 1.0);
    p.value_norm = or_f64(b, 4, 2.0);
    p.epsilon = or_f64(b, 4, 1.0);
    p.delta = or_f64(b, 4, 1e-6);
    p.score = u32::from(b.u8() % 5 / 2);
    let mut sigma = vec![-1f64; b.size(8).min(8)];
    let mut need = 0usize;
    // SAFETY: valid out-parameter.
    unsafe { dpattn_output_perturbation_scratch_len(d, d, &mut need) };
    let mut scratch = vec![0f32; scratch_len(b, need, 1 << 15)];
    let before = out_mem.words.clone();
    // SAFETY: every pointer refers to live memory at least as long as the length passed.
    let st = unsafe {
        dpattn_output_perturbation_attention(
            &out,
            &q,
            &k,
            &k,
            &p,
            session,
            sigma.as_mut_ptr(),
            sigma.len(),
            scratch.as_mut_ptr(),
            scratch.len(),
        )
    };
    (st, before == out_mem.words)
}

/// One `dpattn_gaussian_sampling_attention` on a small problem; whether `out_b` and `out_p`
/// were left untouched.
fn release_gaussian_sampling(
    b: &mut Bytes<'_>,
    session: *mut dpattn_session,
) -> (dpattn_status, bool) {
    let (n, d) = (b.size(4).min(8), b.size(12).min(32));
    let x_mem = if b.u8() % 4 == 1 { Arena::new(CAP, b) } else { Arena::finite() };
    let mut outs = [Arena::new(CAP, b), Arena::new(CAP, b)];
    let xs = [1, 1, n, d];
    let os = [1, 1, n, n];
    let x = dpattn_tensor4 {
        data: x_mem.words.as_ptr().cast(),
        len: numel(xs),
        dtype: dtype(b),
        shape: xs,
        strides: dense(xs),
    };
    let [ob, op] = &mut outs;
    let out_b = dpattn_tensor4_mut {
        data: ob.ptr(),
        len: numel(os),
        dtype: DPATTN_DTYPE_F64,
        shape: os,
        strides: dense(os),
    };
    let out_p = dpattn_tensor4_mut {
        data: op.ptr(),
        len: numel(os),
        dtype: DPATTN_DTYPE_F64,
        shape: os,
        strides: dense(os),
    };
    let mut p = std::mem::MaybeUninit::<dpattn_gaussian_sampling_params>::uninit();
    // SAFETY: fills every field.
    unsafe { dpattn_gaussian_sampling_params_default(p.as_mut_ptr()) };
    // SAFETY: initialised above.
    let mut p = unsafe { p.assume_init() };
    p.epsilon = or_f64(b, 4, 0.5);
    p.delta = or_f64(b, 4, 1e-6);
    p.domain.alpha = or_f64(b, 3, 2.5);
    p.domain.eta = or_f64(b, 3, 1e-3);
    p.domain.beta = or_f64(b, 3, 1e-6);
    p.sampler = u32::from(b.u8() % 7 / 2);
    p.out_of_domain = u32::from(b.u8() % 5 / 2);
    p.batch_elements_disjoint = u32::from(b.u8() % 5 / 2);
    // Large k only for the Bartlett sampler, whose cost does not grow with k.
    p.k = match b.u8() % 8 {
        1 => 0,
        2 => DPATTN_GAUSSIAN_SAMPLING_K_LIMIT + 1,
        3 if p.sampler == DPATTN_GAUSSIAN_SAMPLING_SAMPLER_BARTLETT => {
            DPATTN_GAUSSIAN_SAMPLING_K_LIMIT
        }
        _ => 100 + 10 * u64::from(b.u8()),
    };
    p.noise_mode = match b.u8() % 5 {
        1 => b.u32() % 3,
        _ => DPATTN_NOISE_MODE_UNSAFE_FLOAT,
    };
    let mut need = 0usize;
    // SAFETY: valid out-parameter.
    unsafe {
        dpattn_gaussian_sampling_attention_scratch_len(n, d, p.sampler, p.out_of_domain, &mut need)
    };
    let mut scratch = vec![0f64; scratch_len(b, need, 1 << 15)];
    let mut rep =
        dpattn_gaussian_sampling_report { alpha_hat: -1.0, r_hat: -1.0, clipped_columns: 7 };
    let before = [outs[0].words.clone(), outs[1].words.clone()];
    // SAFETY: every pointer refers to live memory at least as long as the length passed.
    let st = unsafe {
        dpattn_gaussian_sampling_attention(
            &out_b,
            &out_p,
            &x,
            &p,
            session,
            scratch.as_mut_ptr(),
            scratch.len(),
            &mut rep,
        )
    };
    let untouched =
        before[0] == outs[0].words && before[1] == outs[1].words && rep.clipped_columns == 7;
    (st, untouched)
}

/// One `dpattn_dp_forward` on a small batch; whether `x` was left untouched.
fn release_dp_forward(b: &mut Bytes<'_>, session: *mut dpattn_session) -> (dpattn_status, bool) {
    let mut mem = if b.u8() % 4 == 1 { Arena::new(CAP, b) } else { Arena::finite() };
    let (tokens, dim) = (b.size(4).clamp(1, 4), b.size(8).clamp(1, 8));
    let rows = tokens * (1 + usize::from(b.u8() % 3)) + usize::from(b.u8() % 7 == 1);
    let stride = dim + usize::from(b.u8() % 3);
    let dt = if b.u8().is_multiple_of(2) { DPATTN_DTYPE_F32 } else { DPATTN_DTYPE_F64 };
    let len = (rows.saturating_mul(stride)).min(CAP);
    let mut p = std::mem::MaybeUninit::<dpattn_dp_forward_params>::uninit();
    // SAFETY: fills every field.
    unsafe { dpattn_dp_forward_params_default(p.as_mut_ptr()) };
    // SAFETY: initialised above.
    let mut p = unsafe { p.assume_init() };
    p.tokens = tokens;
    p.dim = dim;
    p.epsilon = or_f64(b, 4, 4.0);
    p.delta = or_f64(b, 4, 1e-5);
    p.releases = 1 + u32::from(b.u8() % 5 / 3);
    p.neighbours = u32::from(b.u8() % 5 / 2);
    p.neighbour_rows = b.size(4).min(4);
    p.clip_norm = or_f64(b, 4, 1.0);
    let iid = dpattn_dp_forward_factors {
        kind: if b.u8() % 8 == 1 { b.u32() } else { DPATTN_DP_FORWARD_FACTORS_IID },
        row_std: std::ptr::null(),
        row_std_len: 0,
        col_std: std::ptr::null(),
        col_std_len: 0,
    };
    let mut need = 0usize;
    // SAFETY: valid out-parameters.
    unsafe { dpattn_dp_forward_scratch_len(&iid, tokens, dim, &mut need) };
    let mut scratch = vec![0f64; scratch_len(b, need, 256)];
    let mut rep =
        dpattn_dp_forward_clip_report { scaled: 7, max_norm: 7.0, private_sanitized_rows: 7 };
    let before = mem.words.clone();
    // SAFETY: `mem` holds CAP words, at least `len` elements of either dtype.
    let st = unsafe {
        dpattn_dp_forward(
            mem.ptr(),
            len,
            dt,
            rows,
            dim,
            stride,
            &p,
            &iid,
            session,
            scratch.as_mut_ptr(),
            scratch.len(),
            &mut rep,
        )
    };
    (st, before == mem.words && rep.scaled == 7)
}
