//! What the C ABI costs per call: the same small operations called directly through the
//! Rust API and through the `extern "C"` entry points of `dpattn-ffi` (the exact code a C,
//! C++ or Python host runs: NULL/alignment/overlap checks, dtype dispatch, layout
//! validation, `catch_unwind`, last-error bookkeeping, handle lookup), in the same run.
//!
//! * `attention 1x1x16x64`: exact attention, `S = 16`, `D = 64`, f32, caller scratch.
//! * `attention 1x1x1x64`: a single query row against 16 keys (a decode step's shape).
//! * `gaussian fill 64`: 64 keyed N(0, 1) draws into an f32 buffer.
//! * `ledger charge`: one (ε, δ) charge on an approximate-DP ledger (the C side includes
//!   the registry lookup and the per-handle lock).
//!
//! Criterion reports time per call; the difference between the two lines of a group is the
//! ABI overhead. Run: `taskset -c 1 cargo bench --bench ffi_overhead -- --warm-up-time 1
//! --measurement-time 3` (numbers in docs/BENCHMARKS.md).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dpattn::accounting::ledger::{Charge, Ledger};
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::attention::{AttentionParams, attention, attention_scratch_len};
use dpattn::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn::{BatchedMut, BatchedRef, PrivacyBudget};
use dpattn_ffi::*;

fn t4(data: &[f32], shape: [usize; 4]) -> dpattn_tensor4 {
    let strides = [shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1];
    dpattn_tensor4 {
        data: data.as_ptr().cast(),
        len: data.len(),
        dtype: DPATTN_DTYPE_F32,
        shape,
        strides,
    }
}

fn t4_mut(data: &mut [f32], shape: [usize; 4]) -> dpattn_tensor4_mut {
    let strides = [shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1];
    dpattn_tensor4_mut {
        data: data.as_mut_ptr().cast(),
        len: data.len(),
        dtype: DPATTN_DTYPE_F32,
        shape,
        strides,
    }
}

fn bench_attention(c: &mut Criterion, s_q: usize) {
    let (s_k, d) = (16, 64);
    let q: Vec<f32> = (0..s_q * d).map(|i| ((i * 37) % 17) as f32 / 17.0 - 0.5).collect();
    let kv: Vec<f32> = (0..s_k * d).map(|i| ((i * 29) % 13) as f32 / 13.0 - 0.5).collect();
    let mut out = vec![0f32; s_q * d];
    let mut scratch = vec![0f32; attention_scratch_len(d, d).unwrap()];
    let params = AttentionParams::default();
    let mut g = c.benchmark_group(format!("attention 1x1x{s_q}x64 (16 keys)"));
    g.bench_function("rust", |b| {
        b.iter(|| {
            attention(
                BatchedMut::contiguous(&mut out, [1, 1, s_q, d]).unwrap(),
                BatchedRef::contiguous(black_box(&q), [1, 1, s_q, d]).unwrap(),
                BatchedRef::contiguous(&kv, [1, 1, s_k, d]).unwrap(),
                BatchedRef::contiguous(&kv, [1, 1, s_k, d]).unwrap(),
                &params,
                &mut scratch,
            )
            .unwrap()
        })
    });
    let expected = out.clone();
    g.bench_function("c abi", |b| {
        b.iter(|| {
            let (tq, tk) = (t4(black_box(&q), [1, 1, s_q, d]), t4(&kv, [1, 1, s_k, d]));
            let to = t4_mut(&mut out, [1, 1, s_q, d]);
            // SAFETY: every tensor points at a live Vec of the stated length; the output
            // does not overlap the inputs; NULL options means the defaults.
            let st = unsafe {
                dpattn_attention(
                    &to,
                    &tq,
                    &tk,
                    &tk,
                    std::ptr::null(),
                    scratch.as_mut_ptr(),
                    scratch.len(),
                )
            };
            assert_eq!(st, dpattn_status::Ok);
        })
    });
    g.finish();
    assert_eq!(out, expected, "the C ABI computes the same bits as the Rust API");
}

fn bench_fill(c: &mut Criterion) {
    let key = NoiseKey::for_replay([7; 32]);
    let stream = KeyedStream::new(&key, 3);
    let mut buf = [0f32; 64];
    let mut g = c.benchmark_group("gaussian fill 64");
    g.bench_function("rust", |b| {
        b.iter(|| Gaussian::new(1.0).unwrap().fill_keyed(&stream, black_box(0), &mut buf).unwrap())
    });
    let ckey = dpattn_key { bytes: [7; 32] };
    g.bench_function("c abi", |b| {
        b.iter(|| {
            // SAFETY: `ckey` and `buf` are live; `buf` holds 64 f32.
            let st = unsafe {
                dpattn_fill_gaussian(
                    &ckey,
                    3,
                    black_box(0),
                    1.0,
                    DPATTN_DTYPE_F32,
                    buf.as_mut_ptr().cast(),
                    64,
                )
            };
            assert_eq!(st, dpattn_status::Ok);
        })
    });
    g.finish();
}

fn bench_ledger(c: &mut Criterion) {
    let mut g = c.benchmark_group("ledger charge");
    let huge = PrivacyBudget::new(1e300, 0.5).unwrap();
    let step = PrivacyBudget::new(1e-9, 0.0).unwrap();
    let mut ledger: Ledger = Ledger::new_approx(PrivacyUnit::TOKEN, huge);
    g.bench_function("rust", |b| {
        b.iter(|| ledger.try_charge(PrivacyUnit::TOKEN, Charge::Approx(black_box(step))).unwrap())
    });
    let mut h: *mut dpattn_ledger = std::ptr::null_mut();
    let unit = dpattn_privacy_unit { kind: DPATTN_UNIT_TOKENS, tokens: 1 };
    // SAFETY: `h` is a valid out-parameter.
    assert_eq!(unsafe { dpattn_ledger_new_approx(unit, 1e300, 0.5, &mut h) }, dpattn_status::Ok);
    g.bench_function("c abi", |b| {
        b.iter(|| {
            // SAFETY: `h` is a live handle created above.
            let st = unsafe { dpattn_ledger_charge_approx(h, unit, black_box(1e-9), 0.0) };
            assert_eq!(st, dpattn_status::Ok);
        })
    });
    // SAFETY: frees the handle created above, once.
    unsafe { dpattn_ledger_free(h) };
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_attention(c, 16);
    bench_attention(c, 1);
    bench_fill(c);
    bench_ledger(c);
}

criterion_group!(ffi_overhead, benches);
criterion_main!(ffi_overhead);
