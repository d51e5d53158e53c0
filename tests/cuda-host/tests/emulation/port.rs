//! The CUDA device code, compiled for the host, against dpattn-core: ChaCha20 blocks, every
//! fixed-word sampler in both layouts and all four output types, the 16-bit conversions,
//! and the clip-rows-then-noise rule, bit for bit. Expected values come from the CPU
//! implementation (dpattn-core, itself tested against RFC 8439 and libm) and the `half`
//! crate, never from the code under test.
#![allow(unsafe_code)]

use dpattn_core::MatMut;
use dpattn_core::dp_forward::{ClipMode, ClipRegion, clip_hidden};
use dpattn_core::sampling::{
    Exponential, FixedWordSampler, Gaussian, KeyedStream, Laplace, NoiseFloat, NoiseKey, Uniform,
};
use dpattn_cuda_host_check::*;

fn key_words(k: &NoiseKey) -> [u32; 8] {
    KeyedStream::new(k, 0).key_words()
}

/// A small xorshift for test inputs (not noise).
struct Xs(u64);
impl Xs {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn chacha20_blocks_equal_the_cpu_stream() {
    let mut r = Xs(0x1234_5678_9abc_def1);
    for _ in 0..2000 {
        let bytes: [u8; 32] = core::array::from_fn(|_| r.next() as u8);
        let key = NoiseKey::for_replay(bytes);
        let (counter, stream) = match r.next() % 3 {
            0 => (r.next(), r.next()),
            1 => (u64::MAX - (r.next() % 4), r.next() % 8),
            _ => (r.next() % 16, u64::MAX),
        };
        let mut gpu = [0u32; 16];
        // SAFETY: key has 8 words, out 16.
        unsafe { dpck_chacha20_block(key_words(&key).as_ptr(), counter, stream, gpu.as_mut_ptr()) };
        assert_eq!(
            gpu,
            KeyedStream::new(&key, stream).block(counter),
            "counter {counter} stream {stream}"
        );
    }
    // RFC 8439 §2.3.2: key 00..1f, counter 1, nonce (0x09000000, 0x4a000000, 0): block counter
    // 1 | 0x09000000 << 32, stream id 0x4a000000.
    let key = NoiseKey::for_replay(core::array::from_fn(|i| i as u8));
    let mut out = [0u32; 16];
    // SAFETY: as above.
    unsafe {
        dpck_chacha20_block(
            key_words(&key).as_ptr(),
            1 | (0x0900_0000u64 << 32),
            0x4a00_0000,
            out.as_mut_ptr(),
        )
    };
    assert_eq!(&out[..4], &[0xe4e7_f110, 0x1559_3bd1, 0x1fdd_0f50, 0xc471_20a3]);
}

#[derive(Clone, Copy, Debug)]
enum S {
    U,
    G(f64),
    L(f64),
    E(f64),
}

impl S {
    fn code_and_p(self) -> (i32, f64) {
        match self {
            S::U => (0, 0.0),
            S::G(s) => (1, s),
            S::L(b) => (2, b),
            S::E(rate) => (3, Exponential::new(rate).unwrap().mean()),
        }
    }

    fn cpu<T: NoiseFloat + Default + Clone>(
        self,
        draw: &KeyedStream,
        first: u64,
        n: usize,
    ) -> Vec<T> {
        let mut v = vec![T::default(); n];
        match self {
            S::U => Uniform.fill_keyed(draw, first, &mut v),
            S::G(s) => Gaussian::new(s).unwrap().fill_keyed(draw, first, &mut v),
            S::L(b) => Laplace::new(b).unwrap().fill_keyed(draw, first, &mut v),
            S::E(r) => Exponential::new(r).unwrap().fill_keyed(draw, first, &mut v),
        }
        .unwrap();
        v
    }
}

fn host_fill<T: Default + Clone>(
    s: S,
    uw: i32,
    out: i32,
    key: &NoiseKey,
    stream: u64,
    first: u64,
    n: usize,
) -> Vec<T> {
    let (code, p) = s.code_and_p();
    let mut v = vec![T::default(); n];
    // SAFETY: `v` holds n elements of the type out_kind names (checked by the callers).
    unsafe {
        dpck_fill(
            code,
            uw,
            out,
            p,
            key_words(key).as_ptr(),
            stream,
            first,
            n as u64,
            v.as_mut_ptr().cast(),
        )
    };
    v
}

#[test]
fn every_sampler_layout_and_output_type_equals_the_cpu() {
    let key = NoiseKey::for_replay(core::array::from_fn(|i| (i * 7 + 3) as u8));
    let samplers = [S::U, S::G(1.7), S::L(0.3), S::E(2.5)];
    for (si, s) in samplers.into_iter().enumerate() {
        for first in [0u64, 1, 7, 13, (1 << 40) + 3, u64::MAX - 1100] {
            let n = 1031;
            let stream = 11 + si as u64;
            let draw = KeyedStream::new(&key, stream);
            let c32: Vec<f32> = s.cpu(&draw, first, n);
            let c64: Vec<f64> = s.cpu(&draw, first, n);
            let ctx = format!("{s:?} first {first}");
            // 24-bit layout (the CPU's f32 sampler).
            let g: Vec<f32> = host_fill(s, 1, 0, &key, stream, first, n);
            assert!(g.iter().zip(&c32).all(|(a, b)| a.to_bits() == b.to_bits()), "f32/B24 {ctx}");
            let g: Vec<f64> = host_fill(s, 1, 1, &key, stream, first, n);
            assert!(
                g.iter().zip(&c32).all(|(a, b)| a.to_bits() == f64::from(*b).to_bits()),
                "f64/B24 {ctx}"
            );
            let g: Vec<u16> = host_fill(s, 1, 2, &key, stream, first, n);
            assert!(
                g.iter().zip(&c32).all(|(a, b)| *a == half::bf16::from_f32(*b).to_bits()),
                "bf16/B24 {ctx}"
            );
            let g: Vec<u16> = host_fill(s, 1, 3, &key, stream, first, n);
            assert!(
                g.iter().zip(&c32).all(|(a, b)| *a == half::f16::from_f32(*b).to_bits()),
                "f16/B24 {ctx}"
            );
            // 53-bit layout (the CPU's f64 sampler).
            let g: Vec<f64> = host_fill(s, 2, 1, &key, stream, first, n);
            assert!(g.iter().zip(&c64).all(|(a, b)| a.to_bits() == b.to_bits()), "f64/B53 {ctx}");
            let g: Vec<f32> = host_fill(s, 2, 0, &key, stream, first, n);
            assert!(
                g.iter().zip(&c64).all(|(a, b)| a.to_bits() == (*b as f32).to_bits()),
                "f32/B53 {ctx}"
            );
            let g: Vec<u16> = host_fill(s, 2, 2, &key, stream, first, n);
            assert!(
                g.iter().zip(&c64).all(|(a, b)| *a == half::bf16::from_f32(*b as f32).to_bits()),
                "bf16/B53 {ctx}"
            );
            let g: Vec<u16> = host_fill(s, 2, 3, &key, stream, first, n);
            assert!(
                g.iter().zip(&c64).all(|(a, b)| *a == half::f16::from_f32(*b as f32).to_bits()),
                "f16/B53 {ctx}"
            );
        }
    }
}

#[test]
fn a_long_gaussian_draw_is_bit_identical_in_both_layouts() {
    // 2^18 normals per layout: every binade of the uniform grid down to ~2^-18 and all four
    // quadrants of the sine/cosine reduction many times over.
    let key = NoiseKey::for_replay([0xa5; 32]);
    let draw = KeyedStream::new(&key, 99);
    let n = 1 << 18;
    let c: Vec<f64> = S::G(1.0).cpu(&draw, 5, n);
    let g: Vec<f64> = host_fill(S::G(1.0), 2, 1, &key, 99, 5, n);
    let bad = g.iter().zip(&c).position(|(a, b)| a.to_bits() != b.to_bits());
    assert_eq!(bad, None, "first mismatch at {bad:?}");
    let c: Vec<f32> = S::G(1.0).cpu(&draw, 5, n);
    let g: Vec<f32> = host_fill(S::G(1.0), 1, 0, &key, 99, 5, n);
    assert!(g.iter().zip(&c).all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn half_precision_conversions_round_to_nearest_even_like_half() {
    let mut r = Xs(42);
    let check = |x: f32| {
        // SAFETY: plain value functions.
        let (b, h) = unsafe { (dpck_f32_to_bf16(x), dpck_f32_to_f16(x)) };
        let (eb, eh) = (half::bf16::from_f32(x).to_bits(), half::f16::from_f32(x).to_bits());
        if x.is_nan() {
            assert!(half::bf16::from_bits(b).is_nan() && half::f16::from_bits(h).is_nan(), "{x:e}");
        } else {
            assert_eq!(b, eb, "bf16({x:e})");
            assert_eq!(h, eh, "f16({x:e}) bits {:#x}", x.to_bits());
        }
    };
    for _ in 0..1_000_000 {
        check(f32::from_bits(r.next() as u32));
    }
    // Every f32 in the binary16 subnormal and overflow boundary ranges, and halfway cases.
    for bits in (0x3300_0000u32..0x3900_0000).step_by(97) {
        check(f32::from_bits(bits));
        check(-f32::from_bits(bits));
    }
    for bits in 0x4770_0000u32..0x4780_1000 {
        check(f32::from_bits(bits));
    }
    for x in [
        0.0f32,
        -0.0,
        65504.0,
        65519.99,
        65520.0,
        1.0 + f32::EPSILON,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ] {
        check(x);
    }
}

#[test]
fn round_toward_zero_equals_the_cpus() {
    let mut r = Xs(7);
    for _ in 0..200_000 {
        let x = f64::from_bits(r.next());
        if !x.is_finite() {
            continue;
        }
        // SAFETY: plain value function.
        let g = unsafe { dpck_f64_to_f32_rz(x) };
        assert_eq!(g.to_bits(), f32::from_f64_toward_zero(x).to_bits(), "{x:e}");
    }
}

/// The CPU release for one row: clip_hidden (Rows, Clip), then x ← from_f64(x + σ·n) with n
/// the standard normals first .. of the draw (what dp_forward's i.i.d. noise does).
fn cpu_clip_row<T: NoiseFloat + Default + Clone>(
    x: &mut [T],
    c: f64,
    sigma: f64,
    draw: &KeyedStream,
    first: u64,
) -> usize {
    let dim = x.len();
    let rep = clip_hidden(
        MatMut::from_row_major(x, 1, dim).unwrap(),
        1,
        ClipRegion::Rows,
        ClipMode::Clip,
        c,
    )
    .unwrap();
    if sigma > 0.0 {
        let mut n = vec![0f64; dim];
        Gaussian::STANDARD.fill_keyed(draw, first, &mut n).unwrap();
        for (v, z) in x.iter_mut().zip(&n) {
            *v = T::from_f64(v.to_f64() + sigma * z);
        }
    }
    rep.scaled
}

#[test]
fn clip_rows_then_noise_equals_the_cpu_release() {
    let key = NoiseKey::for_replay([0x3c; 32]);
    let kw = key_words(&key);
    let draw = KeyedStream::new(&key, 5);
    let mut r = Xs(99);
    for (case, scale) in [1e-3, 0.05, 1.0, 30.0, 1e200, 1e-200, 0.0].into_iter().enumerate() {
        for dim in [1usize, 7, 64, 129] {
            for sigma in [0.0, 0.7] {
                let first = (case * 1000 + dim) as u64;
                let x64: Vec<f64> = (0..dim)
                    .map(|_| ((r.next() >> 11) as f64 / 2f64.powi(53) - 0.5) * scale)
                    .collect();
                let mut cpu = x64.clone();
                let scaled = cpu_clip_row(&mut cpu, 1.5, sigma, &draw, first);
                let mut host = x64.clone();
                // SAFETY: host holds dim f64; the f32 pointer is unused for is_f32 = 0.
                let rc = unsafe {
                    dpck_clip_row(
                        0,
                        std::ptr::null_mut(),
                        host.as_mut_ptr(),
                        dim as u64,
                        1.5,
                        sigma,
                        kw.as_ptr(),
                        5,
                        first,
                    )
                };
                assert_eq!(rc as usize, scaled, "f64 scale {scale} dim {dim}");
                assert!(
                    host.iter().zip(&cpu).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "f64 scale {scale} dim {dim} σ {sigma}"
                );
                if scale > 1e30 || (scale < 1e-30 && scale > 0.0) {
                    continue; // outside f32's range
                }
                let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
                let mut cpu = x32.clone();
                let scaled = cpu_clip_row(&mut cpu, 1.5, sigma, &draw, first);
                let mut host = x32.clone();
                // SAFETY: host holds dim f32; the f64 pointer is unused for is_f32 = 1.
                let rc = unsafe {
                    dpck_clip_row(
                        1,
                        host.as_mut_ptr(),
                        std::ptr::null_mut(),
                        dim as u64,
                        1.5,
                        sigma,
                        kw.as_ptr(),
                        5,
                        first,
                    )
                };
                assert_eq!(rc as usize, scaled, "f32 scale {scale} dim {dim}");
                assert!(
                    host.iter().zip(&cpu).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "f32 scale {scale} dim {dim} σ {sigma}"
                );
            }
        }
    }
    // A row with NaN or ±∞ is released as the zero row, as the CPU does (issue 28): the
    // bits of the CPU's release of that row (which sanitises it) and of the zero row.
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let mut row = [1.0f64, bad, 2.0];
        let mut cpu = row;
        cpu_clip_row(&mut cpu, 1.0, 1.0, &draw, 40);
        let mut zero = [0.0f64; 3];
        cpu_clip_row(&mut zero, 1.0, 1.0, &draw, 40);
        // SAFETY: row holds 3 f64.
        let rc = unsafe {
            dpck_clip_row(
                0,
                std::ptr::null_mut(),
                row.as_mut_ptr(),
                3,
                1.0,
                1.0,
                kw.as_ptr(),
                5,
                40,
            )
        };
        assert_eq!(rc, 2, "{bad}");
        assert_eq!(row.map(f64::to_bits), cpu.map(f64::to_bits), "{bad}");
        assert_eq!(row.map(f64::to_bits), zero.map(f64::to_bits), "{bad}");
        let mut row32 = [1.0f32, bad as f32, 2.0];
        let mut cpu32 = [0.0f32; 3];
        cpu_clip_row(&mut cpu32, 1.0, 1.0, &draw, 40);
        // SAFETY: row32 holds 3 f32.
        let rc = unsafe {
            dpck_clip_row(
                1,
                row32.as_mut_ptr(),
                std::ptr::null_mut(),
                3,
                1.0,
                1.0,
                kw.as_ptr(),
                5,
                40,
            )
        };
        assert_eq!(rc, 2, "f32 {bad}");
        assert_eq!(row32.map(f32::to_bits), cpu32.map(f32::to_bits), "f32 {bad}");
    }
}

/// The CPU's noise element `e` of `Gaussian(σ)` in the f64 layout, rounded once to f32: what
/// the fused attention kernels add (docs/RANDOMNESS.md §5).
fn attention_noise(draw: &KeyedStream, sigma: f64, e: u64) -> f32 {
    Gaussian::new(sigma).unwrap().sample_at::<f64>(draw, e).unwrap() as f32
}

#[test]
fn attention_logit_and_output_noise_equal_the_cpu() {
    let key = NoiseKey::for_replay([0x5a; 32]);
    let kw = key_words(&key);
    let draw = KeyedStream::new(&key, 77);
    let mut r = Xs(99);
    // Every parity and position in a block (odd e straddles two Box–Muller pairs, e ≡ 7
    // mod 8 two ChaCha blocks), near 0 and near the end of the index space.
    let mut starts: Vec<u64> = (0..64).collect();
    starts.extend((0..2000).map(|_| r.next() >> 1));
    starts.extend((0..16).map(|i| u64::MAX - 40 - i));
    for &e in &starts {
        let sigma = 0.25 + (e % 7) as f64;
        let mut two = [0f32; 2];
        // SAFETY: `kw` holds 8 words and `two` 2 floats.
        unsafe { dpck_noise2(kw.as_ptr(), 77, e, sigma, two.as_mut_ptr()) };
        for (t, g) in two.iter().enumerate() {
            let want = attention_noise(&draw, sigma, e + t as u64);
            assert_eq!(g.to_bits(), want.to_bits(), "logit noise element {}", e + t as u64);
        }
        let e8 = e & !7;
        let mut eight = [0f32; 8];
        // SAFETY: `kw` holds 8 words and `eight` 8 floats.
        unsafe { dpck_noise8(kw.as_ptr(), 77, e8, sigma, eight.as_mut_ptr()) };
        for (t, g) in eight.iter().enumerate() {
            let want = attention_noise(&draw, sigma, e8 + t as u64);
            assert_eq!(g.to_bits(), want.to_bits(), "output noise element {}", e8 + t as u64);
        }
    }
}

#[test]
fn attention_params_layout_is_what_the_rust_launch_struct_assumes() {
    let mut l = [0u64; 6];
    // SAFETY: `l` holds the 6 values written.
    unsafe { dpck_attn_params_layout(l.as_mut_ptr()) };
    // The offsets asserted for `AttnLaunch` in cuda/src/attention.rs.
    assert_eq!(l, [256, 128, 184, 216, 232, 252]);
}

#[test]
fn attention_epilogue_stages_noises_and_stores_every_row() {
    let key = NoiseKey::for_replay([0x11; 32]);
    let kw = key_words(&key);
    let draw = KeyedStream::new(&key, 5);
    let (heads, s_q) = (3u32, 100u32);
    for (d, rows, row0, b, h, sigma) in [
        (64usize, 64i32, 64u32, 1u32, 2u32, 0.7),
        (128, 64, 0, 0, 1, 0.0),
        (128, 32, 96, 2, 0, 1.5),
    ] {
        let x: Vec<f32> = (0..rows as usize * d).map(|i| (i % 97) as f32 * 0.01 - 0.3).collect();
        let ld = d as u64 + 8;
        let mut out = vec![f32::NAN; s_q as usize * ld as usize];
        // SAFETY: `x` holds rows·d floats, `out` s_q rows of stride ld, `kw` 8 words.
        let st = unsafe {
            dpck_store_rows(
                d as i32,
                x.as_ptr(),
                rows,
                row0,
                b,
                h,
                heads,
                s_q,
                out.as_mut_ptr(),
                ld,
                kw.as_ptr(),
                5,
                sigma,
            )
        };
        assert_eq!(st, 0);
        for i in 0..s_q as usize {
            let in_block = i >= row0 as usize && i < row0 as usize + rows as usize;
            for c in 0..d {
                let got = out[i * ld as usize + c];
                if !in_block {
                    assert!(got.is_nan(), "row {i} outside the block was written");
                    continue;
                }
                let mut want = x[(i - row0 as usize) * d + c];
                if sigma != 0.0 {
                    let e = ((b as u64 * heads as u64 + h as u64) * s_q as u64 + i as u64)
                        * d as u64
                        + c as u64;
                    want += attention_noise(&draw, sigma, e);
                }
                assert_eq!(got.to_bits(), want.to_bits(), "d={d} row {i} col {c}");
            }
            for c in d..ld as usize {
                assert!(out[i * ld as usize + c].is_nan(), "padding of row {i} was written");
            }
        }
    }
}
