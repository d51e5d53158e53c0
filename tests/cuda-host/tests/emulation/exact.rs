//! The CUDA exact samplers and grid release (`exact_sampler.cuh`, `grid_release.cuh`,
//! `grid_release.cu`, the exact variant of `clip_rows_gaussian.cu`), compiled for the host,
//! against dpattn-core bit for bit: element windows, every Bernoulli form, the discrete
//! Laplace and Gaussian at many `(key, stream, element, σ)`, the grid arithmetic, the whole
//! release kernel on strided layouts with several groups, and the clip-then-release row.
//! Expected values come from the CPU implementation (`sample_at`, `Grid`,
//! `GaussianGrid::release_keyed`, `clip_hidden`) or from `u128` arithmetic, never from the
//! code under test.
#![allow(unsafe_code)]

use dpattn_core::MatMut;
use dpattn_core::dp_forward::{ClipMode, ClipRegion, clip_hidden};
use dpattn_core::grid_release::{GaussianGrid, GaussianGridSpec, Grid, GridFormat};
use dpattn_core::sampling::{
    Bernoulli, BernoulliExp, DiscreteGaussian, DiscreteLaplace, ExactSampler, KeyedStream,
    NoiseFloat, NoiseKey,
};
use dpattn_cuda::grid_release::GridGroup;
use dpattn_cuda_host_check::*;

/// A small xorshift for test inputs (not noise).
struct Xs(u64);
impl Xs {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform-ish in `[0, n)`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn key(seed: u64) -> NoiseKey {
    let mut r = Xs(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    NoiseKey::for_replay(core::array::from_fn(|_| r.next() as u8))
}

fn words(k: &NoiseKey) -> [u32; 8] {
    KeyedStream::new(k, 0).key_words()
}

/// Elements to test: small, random below 2^40 and the last ones of the window layout.
fn elements(r: &mut Xs, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| match i % 4 {
            0 => i as u64,
            1 => r.below(1 << 40),
            2 => (1 << 40) - 1 - r.below(64),
            _ => r.below(1 << 20),
        })
        .collect()
}

#[test]
fn windows_read_the_primary_block_then_continuation_blocks_then_run_out() {
    let k = key(1);
    let w = words(&k);
    for (stream, e) in [(0u64, 0u64), (7, 12_345), (u64::MAX, (1 << 40) - 1)] {
        let s = KeyedStream::new(&k, stream);
        let mut out = [0u32; 48];
        let mut n = 0u64;
        // SAFETY: `w` has 8 words, `out` 48.
        let st =
            unsafe { dpck_window_words(w.as_ptr(), stream, e, 0, 48, out.as_mut_ptr(), &mut n) };
        assert_eq!((st, n), (0, 48));
        let mut want = s.block(e).to_vec();
        want.extend(s.block((1 << 40) | e));
        want.extend(s.block((2 << 40) | e));
        assert_eq!(out.to_vec(), want, "stream {stream} element {e}");
        // The last continuation block is (2^24 − 1)·2^40 + e; after it, the window is done.
        let last = (1u64 << 24) - 1;
        // SAFETY: as above.
        let st = unsafe {
            dpck_window_words(w.as_ptr(), stream, e, last - 1, 20, out.as_mut_ptr(), &mut n)
        };
        assert_eq!((st, n), (-1, 16), "the window must end after 2^24 − 1 continuation blocks");
        assert_eq!(out[..16], s.block((last << 40) | e));
    }
}

#[test]
fn digits_and_long_division_are_exact() {
    let mut r = Xs(0x5eed);
    for i in 0..200_000u64 {
        let den = match i % 5 {
            0 => 2 + r.below(1 << 32),
            1 => (1 << 32) + r.below(1 << 20), // the long-division side of 2^32
            2 => 2 + (r.next() >> r.below(64)).max(1),
            3 => u64::MAX - r.below(1000),
            _ => (1 + 2 * r.below(8)) << (32 + r.below(28)), // expansions that end early
        };
        let num = if i % 5 == 4 {
            // A multiple of a large power of two: num/den ends within the 32 digits.
            let z = 20 + r.below(40) as u32;
            ((1 + r.below(((den - 1) >> z.min(63)).max(1))) << z).min(den - 1).max(1)
        } else {
            1 + (r.next() >> r.below(64)) % (den - 1)
        };
        let (mut d, mut rem, mut len) = (0, 0, 0);
        // SAFETY: plain outputs.
        unsafe { dpck_digits(num, den, &mut d, &mut rem, &mut len) };
        let x = u128::from(num) << 32;
        assert_eq!(u128::from(d), x / u128::from(den), "{num}/{den}");
        assert_eq!(u128::from(rem), x % u128::from(den), "{num}/{den}");
        let want_len = if rem == 0 { 32 - d.trailing_zeros() } else { 32 };
        assert_eq!(len, want_len);
        // dp_divmod128 on a random 128-bit value.
        let (lo, hi) = (r.next(), r.next() >> r.below(64));
        let dv = (r.next() >> r.below(64)).max(1);
        let (mut ql, mut qh, mut rm) = (0, 0, 0);
        // SAFETY: plain outputs.
        unsafe { dpck_divmod128(lo, hi, dv, &mut ql, &mut qh, &mut rm) };
        let a = (u128::from(hi) << 64) | u128::from(lo);
        assert_eq!((u128::from(qh) << 64) | u128::from(ql), a / u128::from(dv));
        assert_eq!(u128::from(rm), a % u128::from(dv));
        // dp_divmod128_128 and dp_mul128_64 (the cell algorithm's 128-bit steps).
        let d = ((u128::from(r.next() >> r.below(64)) << 64) | u128::from(r.next())).max(1);
        let (mut q, mut rm) = ([0u64; 2], [0u64; 2]);
        let (aw, dw) = ([lo, hi], [d as u64, (d >> 64) as u64]);
        // SAFETY: two-word inputs and outputs.
        unsafe { dpck_divmod128_128(aw.as_ptr(), dw.as_ptr(), q.as_mut_ptr(), rm.as_mut_ptr()) };
        let w = |x: [u64; 2]| (u128::from(x[1]) << 64) | u128::from(x[0]);
        assert_eq!((w(q), w(rm)), (a / d, a % d), "{a} / {d}");
        let m = r.next() >> r.below(64);
        let mut p = [0u64; 2];
        // SAFETY: two-word input and output.
        let fits = unsafe { dpck_mul128_64(aw.as_ptr(), m, p.as_mut_ptr()) };
        match a.checked_mul(u128::from(m)) {
            Some(want) => assert_eq!((fits, w(p)), (1, want), "{a} · {m}"),
            None => assert_eq!(fits, 0, "{a} · {m}"),
        }
    }
}

#[test]
fn bernoulli_ratios_equal_the_cpu() {
    let mut r = Xs(3);
    let k = key(3);
    let w = words(&k);
    let dens =
        [2u64, 3, 7, 64, 65, 1000, (1 << 31) + 11, 1 << 32, (1 << 32) + 1, 3 << 40, u64::MAX];
    let mut trues = 0;
    for i in 0..60_000u64 {
        let den = dens[(i % dens.len() as u64) as usize];
        let num = match i % 5 {
            0 => 0,
            1 => den,
            _ => 1 + (r.next() >> r.below(64)) % (den - 1),
        };
        let stream = r.below(4);
        let e = if i % 7 == 0 { (1 << 40) - 1 - r.below(8) } else { r.below(1 << 40) };
        let want = Bernoulli::new(num, den).unwrap().sample_at(&KeyedStream::new(&k, stream), e);
        // SAFETY: `w` has 8 words.
        let got = unsafe { dpck_bernoulli(w.as_ptr(), stream, e, num, den) };
        assert_eq!(got, i32::from(want.unwrap()), "{num}/{den} at {e}");
        trues += got;
    }
    assert!(trues > 10_000 && trues < 50_000, "{trues}");
}

#[test]
fn bernoulli_exp_equals_the_cpu_in_every_width() {
    let mut r = Xs(4);
    let k = key(4);
    let w = words(&k);
    let s = KeyedStream::new(&k, 9);
    let mut outcomes = [0u32; 2];
    for i in 0..30_000u64 {
        // γ = num/den: small, u64-sized, den beyond 2^64 (the one-digit u128 comparison),
        // and huge whole parts (stopped by the first failed Bernoulli(1/e)).
        let (num, den): (u128, u128) = match i % 5 {
            0 => (u128::from(r.below(50)), u128::from(1 + r.below(20))),
            1 => (u128::from(r.next()), u128::from(r.next().max(1))),
            2 => {
                let den = (u128::from(r.next()) << 64 | u128::from(r.next())).max(1 << 64);
                ((u128::from(r.next()) << r.below(64)) % den, den)
            }
            3 => (u128::MAX - u128::from(r.below(5)), u128::from(1 + r.below(3))),
            _ => {
                let den = (u128::from(r.next()) << 64) | u128::from(r.next() | 1);
                (den - u128::from(r.below(1000)) - 1, den)
            }
        };
        let e = r.below(1 << 40);
        let want = BernoulliExp::new(num, den).unwrap().sample_at(&s, e).unwrap();
        let split = |v: u128| [v as u64, (v >> 64) as u64];
        let (whole, frac, d) = (split(num / den), split(num % den), split(den));
        // SAFETY: each pointer is to two u64; `w` has 8 words.
        let got = unsafe {
            dpck_bernoulli_exp(w.as_ptr(), 9, e, whole.as_ptr(), frac.as_ptr(), d.as_ptr())
        };
        assert_eq!(got, i32::from(want), "exp(−{num}/{den}) at {e}");
        outcomes[got as usize] += 1;
    }
    assert!(outcomes.iter().all(|&n| n > 3000), "{outcomes:?}");
}

#[test]
fn discrete_laplace_equals_the_cpu() {
    let mut r = Xs(5);
    // Scales t/s: integers, dyadic and non-dyadic denominators, tiny and huge t (L = 64).
    let scales = [
        (1u64, 1u64),
        (3, 1),
        (3, 2),
        (5, 7),
        (7, 3),
        (1, 1000),
        (1000, 3),
        (123_456_789, 1 << 20),
        (u64::MAX, 1 << 8),
        (u64::MAX, 3 << 8),
        (1 << 56, 1),
        (10_000_000_000_019, 999_999_937),
    ];
    let mut seen = 0;
    for (i, &(t, s)) in scales.iter().enumerate() {
        let lap = DiscreteLaplace::new(t, s).unwrap();
        let k = key(50 + i as u64);
        let w = words(&k);
        for (j, e) in elements(&mut r, 1500).into_iter().enumerate() {
            let stream = j as u64 % 3;
            let want = lap.sample_at(&KeyedStream::new(&k, stream), e).unwrap();
            let mut got = 0i64;
            // SAFETY: `w` has 8 words; `got` is one i64.
            let st = unsafe { dpck_discrete_laplace(w.as_ptr(), stream, e, t, s, &mut got) };
            assert_eq!((st, got), (0, want), "DLap({t}/{s}) element {e} stream {stream}");
            seen += i32::from(got != 0);
        }
    }
    assert!(seen > 5000, "{seen}");
}

/// σ's for the discrete Gaussian: `from_f64` values (q a power of two), non-power-of-two
/// denominators, the smallest and largest parameters of the sampler's range, and both
/// sides of the cell algorithm's threshold `σ = 2^10`.
fn gaussians() -> Vec<DiscreteGaussian> {
    let mut v: Vec<DiscreteGaussian> = [1e-3, 0.1, 0.5, 0.8, 1.0, 3.0, 10.5, 12_345.678, 1e6, 3e9]
        .iter()
        .map(|&s| DiscreteGaussian::from_f64(s).unwrap())
        .collect();
    // The cell algorithm (σ ≥ 2^10): 12 345.678, 1e6 and 3e9 above, and these.
    for s in [1e9 + 0.5, 6e8, 1234.567, 82_000.25] {
        v.push(DiscreteGaussian::from_f64(s).unwrap());
    }
    for (s, q) in [
        (7u64, 3u64),
        (4, 5),
        (1, 3),
        (100, 7),
        (1, 1 << 31),
        (3_037_000_499, 1),
        (1024, 1),
        (2049, 2),
        (1023, 1),
        (64 * 47_453_132, 1),
    ] {
        v.push(DiscreteGaussian::new(s, q).unwrap());
    }
    v
}

#[test]
fn discrete_gaussian_equals_the_cpu() {
    let mut r = Xs(6);
    let mut tail = 0; // samples beyond 4σ: the acceptance's 128-bit side in the larger σ's
    for (i, g) in gaussians().into_iter().enumerate() {
        let (s, q) = g.sigma_ratio();
        let k = key(100 + i as u64);
        let w = words(&k);
        let mut sq = 0.0;
        let es = elements(&mut r, 3000);
        for (j, &e) in es.iter().enumerate() {
            let stream = (j as u64 * 0x9e37) % 5;
            let want = g.sample_at(&KeyedStream::new(&k, stream), e).unwrap();
            let mut got = 0i64;
            // SAFETY: `w` has 8 words; `got` is one i64.
            let st = unsafe { dpck_discrete_gaussian(w.as_ptr(), stream, e, s, q, &mut got) };
            assert_eq!((st, got), (0, want), "N_Z(0, ({s}/{q})²) element {e} stream {stream}");
            sq += (got as f64) * (got as f64);
            tail += i32::from((got as f64).abs() > 4.0 * g.sigma());
        }
        // The draws are the distribution's (a coarse check that the comparison is not
        // vacuous, e.g. all zeros on both sides).
        let var = sq / es.len() as f64;
        if g.sigma() >= 0.5 {
            assert!((var / g.variance() - 1.0).abs() < 0.15, "σ = {s}/{q}: var {var}");
        }
    }
    assert!(tail > 0);
}

fn spec(delta: f64, d: u64, bound: f64, format: GridFormat) -> GaussianGridSpec {
    GaussianGridSpec {
        l2_sensitivity: delta,
        dimension: d,
        computation_error: 0.0,
        value_bound: bound,
        format,
    }
}

/// Inputs that probe every step of `Grid::release`: halfway points, NaN, ±∞, ±0,
/// subnormals, values past the index bound, ordinary values.
fn grid_inputs(r: &mut Xs, lambda: f64, n: usize) -> Vec<f64> {
    let special = [
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        -f64::MAX,
        f64::MIN_POSITIVE,
        -5e-324,
        0.5 * lambda,
        -0.5 * lambda,
        2.5 * lambda,
        -7.5 * lambda,
        0.5 * lambda * (1.0 - f64::EPSILON),
        1e30,
        -1e300,
    ];
    let mut v = special.to_vec();
    while v.len() < n {
        let m = (r.next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
        v.push(m * 10f64.powi(r.below(12) as i32 - 6));
    }
    v
}

#[test]
fn grid_steps_equal_the_cpu_grid() {
    let mut r = Xs(7);
    for (format, ks) in
        [(GridFormat::F32, [-149, -20, 0, 103]), (GridFormat::F64, [-1022, -40, 3, 970])]
    {
        for k in ks {
            let g = Grid::new(k, format).unwrap();
            let bound = g.index_bound();
            for x in grid_inputs(&mut r, g.resolution(), 400) {
                // SAFETY: plain values.
                let i = unsafe { dpck_grid_index(x, k, bound) };
                assert_eq!(i, g.index(x), "index({x:e}) k {k}");
            }
            for m in [0, 1, -1, 12345, bound, -bound, bound + 1, i64::MAX, i64::MIN] {
                // SAFETY: plain values.
                let v = unsafe { dpck_grid_value(m, k, bound) };
                assert_eq!(v.to_bits(), g.value(m).to_bits(), "value({m}) k {k}");
            }
        }
    }
    for (a, b) in [(5, i64::MAX), (-5, i64::MIN), (i64::MAX, 1), (i64::MIN, -1), (3, -4), (0, 0)] {
        // SAFETY: plain values.
        assert_eq!(unsafe { dpck_sat_add(a, b) }, a.saturating_add(b));
    }
}

#[test]
fn grid_release_values_equal_the_cpu_release() {
    let mut r = Xs(8);
    let k = key(8);
    let w = words(&k);
    let s = KeyedStream::new(&k, 3);
    for (format, delta, d, bound, m) in [
        (GridFormat::F32, 1.0, 64, 4.0, 3.0),
        (GridFormat::F32, 1e-3, 1, 1e3, 1.0), // representability decides Λ
        (GridFormat::F64, 0.5, 4096, 0.0, 0.7),
        (GridFormat::F64, 1e6, 3, 1e9, 40.0),
    ] {
        let gg = GaussianGrid::calibrate(&spec(delta, d, bound, format), m).unwrap();
        let group = GridGroup::gaussian(&gg);
        let (gs, gq) = group.sigma_ratio();
        for (i, x) in grid_inputs(&mut r, gg.resolution(), 600).into_iter().enumerate() {
            let e = if i % 3 == 0 { (1 << 40) - 1 - i as u64 } else { r.below(1 << 40) };
            let z = gg.integer_noise().sample_at(&s, e).unwrap();
            let want = gg.grid().release(x, z);
            let mut got = 0.0;
            // SAFETY: `w` has 8 words; `got` is one f64.
            let st = unsafe {
                dpck_grid_release_value(
                    x,
                    group.exponent(),
                    group.index_bound(),
                    gs,
                    gq,
                    w.as_ptr(),
                    3,
                    e,
                    &mut got,
                )
            };
            assert_eq!(st, 0);
            assert_eq!(got.to_bits(), want.to_bits(), "release({x:e}) at {e}: {got:e} vs {want:e}");
            if format == GridFormat::F32 {
                assert_eq!(f64::from(got as f32), got, "not exact in f32");
            }
        }
    }
}

/// Runs the emulated `dp_grid_release` kernel on `x` (f32 or f64 values in a buffer of
/// `T`), returning the status words.
#[allow(clippy::too_many_arguments)]
fn kernel<T>(
    x: &mut [T],
    is_f32: bool,
    shape: [u64; 4],
    strides: [u64; 4],
    first: u64,
    group_len: u64,
    groups: &[GridGroup],
    k: &NoiseKey,
    stream: u64,
    blocks: u32,
) -> [u64; 2] {
    let total = shape.iter().product();
    let mut status = [7u64; 2];
    // SAFETY: `x` covers the strided extent of `shape`/`strides` (the callers build it so),
    // `groups` holds ⌈total / group_len⌉ GridGroups (the layout of DpGridGroup), `status`
    // two u64, the key 8 words.
    unsafe {
        dpck_grid_release_kernel(
            i32::from(is_f32),
            x.as_mut_ptr().cast(),
            shape.as_ptr(),
            strides.as_ptr(),
            total,
            first,
            group_len,
            groups.as_ptr().cast(),
            words(k).as_ptr(),
            stream,
            blocks,
            status.as_mut_ptr(),
            core::ptr::null(),
        )
    };
    status
}

#[test]
fn the_release_kernel_equals_release_keyed_on_strided_layouts_with_groups() {
    let mut r = Xs(9);
    let k = key(9);
    // [B, H, S, D] = [3, 2, 7, 16] viewed in a [B, S, H, D] buffer with padded rows:
    // logical element ((b·H + h)·S + i)·D + c lives at b·sb + h·sh + i·ss + c. 672
    // elements: on one block of 256 threads the grid-stride loop runs three times.
    let (heads, seq, d) = (2usize, 7usize, 16usize);
    let shape = [3u64, heads as u64, seq as u64, d as u64];
    let (sh, ss) = (20u64, 40u64);
    let sb = seq as u64 * ss;
    let strides = [sb, sh, ss, 1];
    let len = (3 * sb) as usize;
    let total = shape.iter().product::<u64>() as usize;
    let per_batch = heads * seq * d;
    for format in [GridFormat::F32, GridFormat::F64] {
        // One grid per batch element (output perturbation's σ_b), different σ and Λ.
        let grids: Vec<GaussianGrid> = [(1.0, 0.5), (0.25, 2.0), (3.0, 1.0)]
            .iter()
            .map(|&(delta, m)| {
                GaussianGrid::calibrate(&spec(delta, per_batch as u64, 2.0, format), m).unwrap()
            })
            .collect();
        let groups: Vec<GridGroup> = grids.iter().map(GridGroup::gaussian).collect();
        let first = (1 << 40) - total as u64 - 3;
        let logical = grid_inputs(&mut r, 0.01, total);
        // The CPU: each batch element's values released in logical order.
        let mut want = logical.clone();
        for (b, g) in grids.iter().enumerate() {
            let chunk = &mut want[b * per_batch..(b + 1) * per_batch];
            let chunk_first = first + (b * per_batch) as u64;
            if format == GridFormat::F32 {
                // An f32 buffer holds the f32 values; the CPU releases those.
                for v in chunk.iter_mut() {
                    *v = f64::from(*v as f32);
                }
            }
            g.release_keyed(&KeyedStream::new(&k, 4), chunk_first, chunk).unwrap();
        }
        let offset = |i: usize| {
            let (c, i2) = (i % d, i / d);
            let (s, i3) = (i2 % seq, i2 / seq);
            let (h, b) = (i3 % heads, i3 / heads);
            b * sb as usize + h * sh as usize + s * ss as usize + c
        };
        for blocks in [1u32, 3] {
            if format == GridFormat::F32 {
                let mut buf = vec![f32::NAN; len];
                for (i, &v) in logical.iter().enumerate() {
                    buf[offset(i)] = v as f32;
                }
                let st = kernel(
                    &mut buf,
                    true,
                    shape,
                    strides,
                    first,
                    per_batch as u64,
                    &groups,
                    &k,
                    4,
                    blocks,
                );
                assert_eq!(st, [0, u64::MAX]);
                for i in 0..total {
                    let got = f64::from(buf[offset(i)]);
                    assert_eq!(got.to_bits(), want[i].to_bits(), "f32 element {i}");
                }
                let touched: usize =
                    (0..total).map(offset).collect::<std::collections::BTreeSet<_>>().len();
                assert_eq!(buf.iter().filter(|v| !v.is_nan()).count(), touched, "padding written");
            } else {
                let mut buf = vec![f64::NAN; len];
                for (i, &v) in logical.iter().enumerate() {
                    buf[offset(i)] = v;
                }
                let st = kernel(
                    &mut buf,
                    false,
                    shape,
                    strides,
                    first,
                    per_batch as u64,
                    &groups,
                    &k,
                    4,
                    blocks,
                );
                assert_eq!(st, [0, u64::MAX]);
                for i in 0..total {
                    let (got, w) = (buf[offset(i)], want[i]);
                    assert_eq!(got.to_bits(), w.to_bits(), "f64 element {i}: {got:e} vs {w:e}");
                }
                assert_eq!(buf.iter().filter(|v| !v.is_nan()).count(), total, "padding written");
            }
        }
    }
}

/// `clip_hidden` (rows, clip) then `release_keyed`: the CPU's release of one row of `T`
/// values; a row holding NaN or ±∞ is the zero row.
fn cpu_row<T: NoiseFloat>(
    row: &[T],
    c: f64,
    g: &GaussianGrid,
    s: &KeyedStream,
    e: u64,
) -> Vec<f64> {
    let n = row.len();
    let mut v: Vec<T> = if row.iter().all(|x| x.to_f64().is_finite()) {
        row.to_vec()
    } else {
        vec![T::from_f64(0.0); n]
    };
    let m = MatMut::from_row_major(&mut v, 1, n).unwrap();
    clip_hidden(m, 1, ClipRegion::Rows, ClipMode::Clip, c).unwrap();
    let mut out: Vec<f64> = v.iter().map(|x| x.to_f64()).collect();
    g.release_keyed(s, e, &mut out).unwrap();
    out
}

#[test]
fn clip_then_exact_release_equals_the_cpu_row_by_row() {
    let mut r = Xs(10);
    let k = key(10);
    let w = words(&k);
    let s = KeyedStream::new(&k, 6);
    // Rows of 129 at every scale (the scaled second norm pass, sanitised rows), and rows of
    // two whose clipped entries lie in [1, 2) on a grid of Λ = 2^-23 for f32 (Δ tiny, so
    // the format's range sets Λ): one grid step is one f32 ulp there, so the clip's
    // rounding toward zero is visible in the release.
    let scales = [1e-200, 1e-3, 0.05, 1.0, 40.0, 1e150, f64::NAN, f64::INFINITY, 0.0];
    for (dim, c, delta, rows) in [(129usize, 1.5, 3.0, scales.len()), (2, 1.9, 1e-6, 400)] {
        for format in [GridFormat::F32, GridFormat::F64] {
            let g = GaussianGrid::calibrate(&spec(delta, dim as u64, c, format), 0.6).unwrap();
            if dim == 2 && format == GridFormat::F32 {
                assert_eq!(g.resolution(), 2f64.powi(-23));
            }
            let group = GridGroup::gaussian(&g);
            let (gs, gq) = group.sigma_ratio();
            for ri in 0..rows {
                let scale = if dim == 2 { 1.0 } else { scales[ri] };
                let mut row: Vec<f64> = (0..dim)
                    .map(|_| ((r.next() >> 11) as f64 / 2f64.powi(53) - 0.5) * 3.0)
                    .collect();
                if dim == 2 {
                    // Norm 2.5 > 1.9 at an angle in [0.56, 1.0] rad: both clipped entries in
                    // [1, 2).
                    let t = 0.56 + (r.next() >> 11) as f64 / 2f64.powi(53) * 0.44;
                    row = vec![2.5 * t.cos(), 2.5 * t.sin()];
                }
                if scale.is_finite() {
                    row.iter_mut().for_each(|v| *v *= scale);
                } else {
                    row[ri * 7 % dim] = scale; // one bad entry: the whole row is sanitised
                }
                let e = 1000 + (ri * dim) as u64;
                let is_f32 = format == GridFormat::F32;
                let mut x32: Vec<f32> = row.iter().map(|&v| v as f32).collect();
                let mut x64 = row.clone();
                let want =
                    if is_f32 { cpu_row(&x32, c, &g, &s, e) } else { cpu_row(&x64, c, &g, &s, e) };
                // What the row holds in its element type: f32 turns 1e150 into ∞, 1e-200 into 0.
                let held: Vec<f64> =
                    if is_f32 { x32.iter().map(|&v| f64::from(v)).collect() } else { row.clone() };
                // SAFETY: both rows hold `dim` values; `w` has 8 words.
                let st = unsafe {
                    dpck_clip_row_exact(
                        i32::from(is_f32),
                        x32.as_mut_ptr(),
                        x64.as_mut_ptr(),
                        dim as u64,
                        c,
                        group.exponent(),
                        group.index_bound(),
                        gs,
                        gq,
                        w.as_ptr(),
                        6,
                        e,
                    )
                };
                let norm = held.iter().map(|v| v * v).sum::<f64>().sqrt();
                let expect_st = if !norm.is_finite() { 2 } else { i32::from(norm > c * 0.999) };
                assert_eq!(st, expect_st, "row {ri} ({format:?})");
                for j in 0..dim {
                    let got = if is_f32 { f64::from(x32[j]) } else { x64[j] };
                    assert_eq!(got.to_bits(), want[j].to_bits(), "row {ri} col {j} ({format:?})");
                    assert!(got.is_finite(), "a released value must never be NaN");
                }
            }
        }
    }
}
