//! GPU tests: the kernels on a real device against dpattn-core.
//!
//! Ignored unless asked for (`scripts/gpu-test.sh` runs them with `--ignored` on a CUDA
//! machine, where a missing GPU is a failure, not a skip). Expected values come from the
//! CPU samplers and `dp_forward`'s clipping (dpattn-core), from `half` for 16-bit rounding,
//! and from the normal/Laplace distributions for the statistical tests.

use std::sync::Arc;

use dpattn_core::MatMut;
use dpattn_core::dp_forward::{ClipMode, ClipRegion, clip_hidden};
use dpattn_core::sampling::{
    Exponential, FixedWordSampler, Gaussian, KeyedStream, Laplace, NoiseFloat, NoiseKey, Uniform,
};
use dpattn_cuda::{
    ClipRowsParams, Device, DeviceBuffer, DeviceElement, Error, GpuNoise, OutDtype, Stream,
    UniformBits, clip_rows_add_gaussian_unsafe_float, fill_noise, fill_noise_raw,
    fill_stream_words,
};

fn gpu() -> (Arc<Device>, Stream) {
    let dev = Device::get(0)
        .unwrap_or_else(|e| panic!("GPU test on a machine without a usable GPU: {e}"));
    let stream = dev.new_stream().unwrap();
    (dev, stream)
}

fn zeros<T: DeviceElement>(s: &Stream, n: usize) -> DeviceBuffer<T> {
    s.alloc_zeros::<T>(n).unwrap()
}

fn host<T: DeviceElement>(s: &Stream, d: &DeviceBuffer<T>) -> Vec<T> {
    s.clone_dtoh(d).unwrap()
}

fn key(seed: u8) -> NoiseKey {
    NoiseKey::for_replay(core::array::from_fn(|i| seed.wrapping_mul(31).wrapping_add(i as u8)))
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn stream_words_are_bit_identical_to_the_cpu() {
    let (dev, s) = gpu();
    let k = key(1);
    for (stream_id, first_word, n) in [
        (0u64, 0u128, 1usize << 20),
        (7, 13, 100_003),
        (u64::MAX, (1u128 << 68) - 4096, 4096),
        (3, 1 << 40, 17),
    ] {
        let draw = KeyedStream::new(&k, stream_id);
        let mut out = zeros::<u32>(&s, n);
        fill_stream_words(&dev, &s, &mut out, &draw, first_word).unwrap();
        let got = host(&s, &out);
        for (i, g) in got.iter().enumerate() {
            let w = first_word + i as u128;
            let block = draw.block((w / 16) as u64);
            assert_eq!(*g, block[(w % 16) as usize], "word {w} of stream {stream_id}");
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum S {
    U,
    G(f64),
    L(f64),
    E(f64),
}

impl S {
    fn gpu(self) -> GpuNoise {
        match self {
            S::U => GpuNoise::Uniform,
            S::G(s) => GpuNoise::Gaussian(Gaussian::new(s).unwrap()),
            S::L(b) => GpuNoise::Laplace(Laplace::new(b).unwrap()),
            S::E(r) => GpuNoise::Exponential(Exponential::new(r).unwrap()),
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

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn every_sampler_layout_and_dtype_is_bit_identical_to_the_cpu() {
    let (dev, s) = gpu();
    let k = key(2);
    for (si, smp) in [S::U, S::G(1.7), S::L(0.3), S::E(2.5)].into_iter().enumerate() {
        for first in [0u64, 5, 12345, u64::MAX - 70_000] {
            let n = 65_537;
            let draw = KeyedStream::new(&k, 40 + si as u64);
            let ctx = format!("{smp:?} first {first}");
            let c32: Vec<f32> = smp.cpu(&draw, first, n);
            let c64: Vec<f64> = smp.cpu(&draw, first, n);
            for bits in [UniformBits::B24, UniformBits::B53] {
                // The CPU value this layout gives, before the output rounding.
                let reference: Vec<f64> = match bits {
                    UniformBits::B24 => c32.iter().map(|&v| f64::from(v)).collect(),
                    UniformBits::B53 => c64.clone(),
                };
                let as_f32: Vec<f32> = reference.iter().map(|&v| v as f32).collect();

                let mut o = zeros::<f32>(&s, n);
                fill_noise(&dev, &s, &mut o, OutDtype::F32, smp.gpu(), bits, &draw, first).unwrap();
                let g = host(&s, &o);
                let bad = g.iter().zip(&as_f32).position(|(a, b)| a.to_bits() != b.to_bits());
                assert_eq!(bad, None, "f32 {bits:?} {ctx}");

                let mut o = zeros::<f64>(&s, n);
                fill_noise(&dev, &s, &mut o, OutDtype::F64, smp.gpu(), bits, &draw, first).unwrap();
                let g = host(&s, &o);
                let bad = g.iter().zip(&reference).position(|(a, b)| a.to_bits() != b.to_bits());
                assert_eq!(bad, None, "f64 {bits:?} {ctx}");

                for (dt, conv) in [
                    (
                        OutDtype::Bf16,
                        (|x: f32| half::bf16::from_f32(x).to_bits()) as fn(f32) -> u16,
                    ),
                    (OutDtype::F16, |x: f32| half::f16::from_f32(x).to_bits()),
                ] {
                    let mut o = zeros::<u16>(&s, n);
                    fill_noise(&dev, &s, &mut o, dt, smp.gpu(), bits, &draw, first).unwrap();
                    let g = host(&s, &o);
                    let bad = g.iter().zip(&as_f32).position(|(a, b)| *a != conv(*b));
                    assert_eq!(bad, None, "{dt:?} {bits:?} {ctx}");
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn chunked_fills_equal_one_fill_whatever_the_split() {
    let (dev, s) = gpu();
    let draw = KeyedStream::new(&key(3), 1);
    let noise = GpuNoise::Gaussian(Gaussian::new(1.0).unwrap());
    let n = 300_001;
    let mut whole = zeros::<f32>(&s, n);
    fill_noise(&dev, &s, &mut whole, OutDtype::F32, noise, UniformBits::B53, &draw, 0).unwrap();
    let whole = host(&s, &whole);
    let mut parts = Vec::new();
    let mut at = 0usize;
    for len in [1usize, 2, 7, 4096, 65_535, 100_000].into_iter().cycle() {
        if at >= n {
            break;
        }
        let len = len.min(n - at);
        let mut o = zeros::<f32>(&s, len);
        fill_noise(&dev, &s, &mut o, OutDtype::F32, noise, UniformBits::B53, &draw, at as u64)
            .unwrap();
        parts.extend(host(&s, &o));
        at += len;
    }
    assert!(parts.iter().zip(&whole).all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// `z` for the sample mean and variance against the true moments; `m4` is `E[X⁴]`.
fn moment_z(x: &[f64], var: f64, m4: f64) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let second = x.iter().map(|v| v * v).sum::<f64>() / n;
    ((mean / (var / n).sqrt()), (second - var) / ((m4 - var * var) / n).sqrt())
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn gaussian_and_laplace_output_have_the_right_distribution() {
    // Fixed seeds; each z-test at two-sided α = 1e-6 (|z| < 4.89); with n = 2^24 a Gaussian
    // variance off by 0.3 % gives z ≈ 8.7 (caught with power ≈ 1; 0.2 % with power ≈ 0.8).
    // KS on 2^20 values against the DKW critical value √(ln(2/α)/2m) at α = 1e-6.
    let (dev, s) = gpu();
    let n = 1 << 24;
    let zcrit = 4.89;
    let sigma = 2.0;
    let mut o = zeros::<f32>(&s, n);
    let draw = KeyedStream::new(&key(4), 77);
    fill_noise(&dev, &s, &mut o, OutDtype::F32, S::G(sigma).gpu(), UniformBits::B53, &draw, 0)
        .unwrap();
    let x: Vec<f64> = host(&s, &o).into_iter().map(f64::from).collect();
    let var = sigma * sigma;
    let (zm, zv) = moment_z(&x, var, 3.0 * var * var);
    assert!(zm.abs() < zcrit && zv.abs() < zcrit, "Gaussian z mean {zm}, z var {zv}");
    let m = 1 << 20;
    let mut sub: Vec<f64> = x[..m].iter().map(|v| v / sigma).collect();
    sub.sort_by(f64::total_cmp);
    let d = sub
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let f = 0.5 * libm::erfc(-v / std::f64::consts::SQRT_2);
            (f - i as f64 / m as f64).abs().max(((i + 1) as f64 / m as f64 - f).abs())
        })
        .fold(0.0, f64::max);
    let dcrit = ((2.0f64 / 1e-6).ln() / (2.0 * m as f64)).sqrt();
    assert!(d < dcrit, "Gaussian KS D = {d}, critical {dcrit}");

    let b = 0.5;
    let draw = KeyedStream::new(&key(5), 78);
    fill_noise(&dev, &s, &mut o, OutDtype::F32, S::L(b).gpu(), UniformBits::B24, &draw, 0).unwrap();
    let x: Vec<f64> = host(&s, &o).into_iter().map(f64::from).collect();
    let var = 2.0 * b * b;
    let (zm, zv) = moment_z(&x, var, 24.0 * b.powi(4));
    assert!(zm.abs() < zcrit && zv.abs() < zcrit, "Laplace z mean {zm}, z var {zv}");
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn external_memory_and_a_foreign_stream_are_used_not_owned() {
    // The engine's side calls the driver directly (through cudarc, this crate's own
    // dependency; dpattn-cuda's API has no raw allocation).
    use cudarc::driver::result;
    let (dev, _) = gpu();
    let _current = dev.make_current().unwrap();
    let n = 10_000usize;
    // A stream and a buffer made with the raw driver API, as a C++ engine would.
    let raw_stream = result::stream::create(result::stream::StreamKind::NonBlocking).unwrap();
    // SAFETY: plain allocation of n f32 on the current (primary) context.
    let ptr = unsafe { result::malloc_sync(n * 4) }.unwrap();
    {
        // SAFETY: `raw_stream` is a live stream of this context, kept alive below.
        let borrowed = unsafe { dev.borrow_stream(raw_stream.cast()) };
        let draw = KeyedStream::new(&key(6), 9);
        let noise = S::L(1.0).gpu();
        // SAFETY: `ptr` holds n f32 on this device, used by nothing else until we sync.
        unsafe {
            fill_noise_raw(
                &dev,
                &borrowed,
                ptr,
                n,
                OutDtype::F32,
                noise,
                UniformBits::B24,
                &draw,
                100,
            )
        }
        .unwrap();
        // The wrapper drops here; the stream must survive it.
    }
    // SAFETY: the stream is still ours and alive.
    unsafe { result::stream::synchronize(raw_stream) }.unwrap();
    let mut got = vec![0f32; n];
    // SAFETY: `ptr` holds n f32; the work on it has completed.
    unsafe { result::memcpy_dtoh_sync(&mut got, ptr) }.unwrap();
    let want: Vec<f32> = S::L(1.0).cpu(&KeyedStream::new(&key(6), 9), 100, n);
    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
    // Still usable after the wrapper dropped: queue more work, then free it ourselves.
    // SAFETY: as above.
    unsafe { result::memset_d8_async(ptr, 0, n * 4, raw_stream) }.unwrap();
    // SAFETY: our stream and allocation, each released exactly once.
    unsafe {
        result::stream::synchronize(raw_stream).unwrap();
        result::free_sync(ptr).unwrap();
        result::stream::destroy(raw_stream).unwrap();
    }
}

/// CPU release of the rows: clip each row (Rows, Clip), then add σ·N(first + r·dim + j).
fn cpu_release<T: NoiseFloat>(
    x: &mut [T],
    rows: usize,
    dim: usize,
    c: f64,
    sigma: f64,
    draw: &KeyedStream,
    first: u64,
) -> usize {
    let rep = clip_hidden(
        MatMut::from_row_major(x, rows, dim).unwrap(),
        1,
        ClipRegion::Rows,
        ClipMode::Clip,
        c,
    )
    .unwrap();
    if sigma > 0.0 {
        let mut z = vec![0f64; rows * dim];
        Gaussian::STANDARD.fill_keyed(draw, first, &mut z).unwrap();
        for (v, n) in x.iter_mut().zip(&z) {
            *v = T::from_f64(v.to_f64() + sigma * n);
        }
    }
    rep.scaled
}

fn rows_input(rows: usize, dim: usize) -> Vec<f64> {
    // Row r has scale 10^(r mod 9 − 4): some rows inside the ball, most far outside.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..rows * dim)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / 2f64.powi(53) - 0.5;
            u * 10f64.powi((i / dim % 9) as i32 - 4)
        })
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn clip_rows_then_noise_matches_the_cpu_release() {
    let (dev, s) = gpu();
    let (rows, dim, ld) = (37usize, 129usize, 131usize);
    let c = 1.5;
    let draw = KeyedStream::new(&key(7), 21);
    for sigma in [0.0, 0.5] {
        let dense = rows_input(rows, dim);
        // f64
        let mut cpu = dense.clone();
        let scaled = cpu_release(&mut cpu, rows, dim, c, sigma, &draw, 1000);
        let mut strided = vec![f64::NAN; (rows - 1) * ld + dim];
        for r in 0..rows {
            strided[r * ld..r * ld + dim].copy_from_slice(&dense[r * dim..(r + 1) * dim]);
        }
        let mut d = s.clone_htod(&strided).unwrap();
        let params = ClipRowsParams::new(c, sigma).unwrap();
        let rep = clip_rows_add_gaussian_unsafe_float(
            &dev, &s, &mut d, rows, dim, ld, params, &draw, 1000,
        )
        .unwrap();
        assert_eq!(rep.scaled_rows as usize, scaled);
        let g = host(&s, &d);
        for r in 0..rows {
            let orig = dense[r * dim..(r + 1) * dim].iter().map(|v| v * v).sum::<f64>().sqrt();
            for j in 0..dim {
                let (a, b) = (g[r * ld + j], cpu[r * dim + j]);
                if orig < 0.9 * c {
                    // Not clipped: nothing but the (bit-identical) noise touched it.
                    assert_eq!(a.to_bits(), b.to_bits(), "f64 σ {sigma} unclipped ({r},{j})");
                }
                assert!(
                    (a - b).abs() <= 1e-13 * (c + b.abs()),
                    "f64 σ {sigma} ({r},{j}): {a:e} vs {b:e}"
                );
            }
            // The padding between rows is untouched.
            assert!(r + 1 == rows || g[r * ld + dim..(r + 1) * ld].iter().all(|v| v.is_nan()));
            if sigma == 0.0 {
                let norm = g[r * ld..r * ld + dim].iter().map(|v| v * v).sum::<f64>().sqrt();
                assert!(norm <= c || norm == orig, "row {r}: norm {norm} > C");
            }
        }
        // f32, dense
        let x32: Vec<f32> = dense.iter().map(|&v| v as f32).collect();
        let mut cpu = x32.clone();
        let scaled = cpu_release(&mut cpu, rows, dim, c, sigma, &draw, 5);
        let mut d = s.clone_htod(&x32).unwrap();
        let rep =
            clip_rows_add_gaussian_unsafe_float(&dev, &s, &mut d, rows, dim, dim, params, &draw, 5)
                .unwrap();
        assert_eq!(rep.scaled_rows as usize, scaled);
        let g = host(&s, &d);
        for (i, (a, b)) in g.iter().zip(&cpu).enumerate() {
            // A clipped entry may differ in its last place (parallel vs sequential norm).
            let tol = 2.0 * f32::EPSILON * (c as f32 + b.abs());
            assert!((a - b).abs() <= tol, "f32 σ {sigma} [{i}]: {a:e} vs {b:e}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn non_finite_rows_are_released_as_the_zero_row() {
    // Private data is sanitised, never refused (issue 28): rows 1 and 3 hold ±∞ / NaN and
    // are released as the zero row plus noise, as the CPU's clip (which zeroes them) does.
    let (dev, s) = gpu();
    let (rows, dim) = (4usize, 300usize);
    let mut x = rows_input(rows, dim);
    x[dim + 17] = f64::INFINITY; // row 1
    x[3 * dim + 299] = f64::NAN; // row 3
    let mut d = s.clone_htod(&x).unwrap();
    let draw = KeyedStream::new(&key(8), 2);
    let params = ClipRowsParams::new(1.0, 0.3).unwrap();
    let rep =
        clip_rows_add_gaussian_unsafe_float(&dev, &s, &mut d, rows, dim, dim, params, &draw, 0)
            .unwrap();
    assert_eq!(rep.sanitized_rows, 2);
    let g = host(&s, &d);
    // Row r draws elements r·dim ..; the CPU's release zeroes rows 1 and 3 first.
    for r in 0..rows {
        let mut cpu = x[r * dim..(r + 1) * dim].to_vec();
        cpu_release(&mut cpu, 1, dim, 1.0, 0.3, &draw, (r * dim) as u64);
        let got = &g[r * dim..(r + 1) * dim];
        assert!(
            got.iter().zip(&cpu).all(|(a, b)| (a - b).abs() <= 1e-13 * (1.0 + b.abs())),
            "row {r}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn bad_arguments_fail_before_any_launch_and_kernels_are_cached() {
    let (dev, s) = gpu();
    let draw = KeyedStream::new(&key(9), 0);
    let mut o = zeros::<f32>(&s, 16);
    let g = S::G(1.0).gpu();
    assert!(matches!(
        fill_noise(&dev, &s, &mut o, OutDtype::F16, g, UniformBits::B53, &draw, 0),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        fill_noise(&dev, &s, &mut o, OutDtype::F32, g, UniformBits::B53, &draw, u64::MAX - 3),
        Err(Error::Core(_))
    ));
    // SAFETY: the pointer is rejected before any use.
    let e =
        unsafe { fill_noise_raw(&dev, &s, 2, 16, OutDtype::F32, g, UniformBits::B53, &draw, 0) };
    assert!(matches!(e, Err(Error::Core(_))));
    let mut x = zeros::<f64>(&s, 10);
    let p = ClipRowsParams::new(1.0, 1.0).unwrap();
    assert!(matches!(
        clip_rows_add_gaussian_unsafe_float(&dev, &s, &mut x, 3, 4, 4, p, &draw, 0),
        Err(Error::Core(_))
    ));
    // A variant no other test uses: compiled once, then served from the cache.
    let lap = S::L(2.0).gpu();
    let mut h = zeros::<u16>(&s, 16);
    let before = dev.compilations();
    fill_noise(&dev, &s, &mut h, OutDtype::F16, lap, UniformBits::B24, &draw, 0).unwrap();
    assert_eq!(dev.compilations(), before + 1);
    fill_noise(&dev, &s, &mut h, OutDtype::F16, lap, UniformBits::B24, &draw, 16).unwrap();
    assert_eq!(dev.compilations(), before + 1);
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn grid_stride_loops_and_many_rows_per_block_match_the_cpu() {
    // Two blocks per grid: the fill's stage buffer and the clip's reduction buffers are
    // reused many times per block (small enough for memcheck and racecheck).
    let (dev, s) = gpu();
    dpattn_cuda::launch::set_grid_cap_for_tests(2);
    let draw = KeyedStream::new(&key(10), 4);
    let n = 100_003;
    let want: Vec<f64> = S::G(1.0).cpu(&draw, 9, n);
    let mut o = zeros::<f32>(&s, n);
    fill_noise(&dev, &s, &mut o, OutDtype::F32, S::G(1.0).gpu(), UniformBits::B53, &draw, 9)
        .unwrap();
    assert!(host(&s, &o).iter().zip(&want).all(|(a, b)| a.to_bits() == (*b as f32).to_bits()));
    let want: Vec<f32> = S::U.cpu(&draw, 3, n);
    let mut o = zeros::<u16>(&s, n);
    fill_noise(&dev, &s, &mut o, OutDtype::Bf16, S::U.gpu(), UniformBits::B24, &draw, 3).unwrap();
    assert!(host(&s, &o).iter().zip(&want).all(|(a, b)| *a == half::bf16::from_f32(*b).to_bits()));

    // 9 rows of 4100 (each thread's noise loop runs twice), scales 1e-200 .. 1e200 (the
    // second, scaled reduction), a NaN row in the middle, 4–5 rows per block.
    let (rows, dim) = (9usize, 4100usize);
    let scales = [1e-200, 1e-3, 1.0, 1e200, f64::NAN, 0.01, 50.0, 0.0, 1e150];
    let base = rows_input(rows, dim);
    let x: Vec<f64> = (0..rows * dim)
        .map(|i| base[i] / 10f64.powi((i / dim % 9) as i32 - 4) * scales[i / dim])
        .collect();
    let mut d = s.clone_htod(&x).unwrap();
    let params = ClipRowsParams::new(2.0, 0.25).unwrap();
    let rep =
        clip_rows_add_gaussian_unsafe_float(&dev, &s, &mut d, rows, dim, dim, params, &draw, 77)
            .unwrap();
    assert_eq!(rep.sanitized_rows, 1); // row 4 (NaN scale), released as the zero row
    let g = host(&s, &d);
    for r in 0..rows {
        let got = &g[r * dim..(r + 1) * dim];
        let mut cpu = x[r * dim..(r + 1) * dim].to_vec();
        cpu_release(&mut cpu, 1, dim, 2.0, 0.25, &draw, 77 + (r * dim) as u64);
        assert!(
            got.iter().zip(&cpu).all(|(a, b)| (a - b).abs() <= 1e-13 * (2.0 + b.abs())),
            "row {r}"
        );
    }
    dpattn_cuda::launch::set_grid_cap_for_tests(0);
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn the_end_of_the_index_space_is_noised_and_a_full_grid_pass_repeats() {
    let (dev, s) = gpu();
    // The last elements a draw allows (the CPU's rule: first + rows·dim <= u64::MAX).
    let (rows, dim) = (3usize, 5usize);
    let first = u64::MAX - (rows * dim) as u64;
    let draw = KeyedStream::new(&key(11), 6);
    let x = vec![10.0f64; rows * dim];
    let mut cpu = x.clone();
    cpu_release(&mut cpu, rows, dim, 1.0, 0.5, &draw, first);
    let mut d = s.clone_htod(&x).unwrap();
    let params = ClipRowsParams::new(1.0, 0.5).unwrap();
    let rep =
        clip_rows_add_gaussian_unsafe_float(&dev, &s, &mut d, rows, dim, dim, params, &draw, first)
            .unwrap();
    assert_eq!(rep.scaled_rows, 3);
    let g = host(&s, &d);
    assert!(
        g.iter().zip(&cpu).all(|(a, b)| (a - b).abs() <= 1e-13 * (1.0 + b.abs())),
        "{g:?} vs {cpu:?}"
    );
    // 2^23 normals in the 53-bit layout: 2^20 ChaCha blocks, several passes of the largest grid.
    let n = 1 << 23;
    let want: Vec<f64> = S::G(3.0).cpu(&draw, 1, n);
    let mut o = zeros::<f32>(&s, n);
    fill_noise(&dev, &s, &mut o, OutDtype::F32, S::G(3.0).gpu(), UniformBits::B53, &draw, 1)
        .unwrap();
    let bad =
        host(&s, &o).iter().zip(&want).position(|(a, b)| a.to_bits() != (*b as f32).to_bits());
    assert_eq!(bad, None);
}
