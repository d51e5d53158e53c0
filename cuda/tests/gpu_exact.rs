//! GPU tests of the exact releases (`grid_release`, `clip_rows_release_exact`) against
//! dpattn-core: every released value equal to `GaussianGrid::release_keyed` on the CPU, bit
//! for bit.
//!
//! Ignored unless asked for (`scripts/gpu-test.sh` runs them with `--ignored` on a CUDA
//! machine, where a missing GPU is a failure, not a skip). Expected values come from the
//! CPU (`DiscreteGaussian::sample_at` through `release_keyed`, `clip_hidden`), never from
//! the kernels. `tests/cuda-host/tests/exact.rs` runs the same device code on the host on
//! every machine.

use std::sync::Arc;

use dpattn_core::dp_forward::{ClipMode, ClipRegion, clip_hidden};
use dpattn_core::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};
use dpattn_core::sampling::{KeyedStream, NoiseKey};
use dpattn_core::{Error as CoreError, Layout4, MatMut, NoiseMode};
use dpattn_cuda::grid_release::{GridGroup, grid_release};
use dpattn_cuda::launch::set_grid_cap_for_tests;
use dpattn_cuda::{
    ClipRowsParams, Device, DeviceBuffer, Error, FloatDtype, Stream, clip_rows_release_exact,
};

fn gpu() -> (Arc<Device>, Stream) {
    let dev = Device::get(0)
        .unwrap_or_else(|e| panic!("GPU test on a machine without a usable GPU: {e}"));
    let stream = dev.new_stream().unwrap();
    (dev, stream)
}

fn key(seed: u8) -> NoiseKey {
    NoiseKey::for_replay(core::array::from_fn(|i| seed.wrapping_mul(37).wrapping_add(i as u8)))
}

fn grid(delta: f64, d: u64, bound: f64, multiplier: f64, format: GridFormat) -> GaussianGrid {
    let spec = GaussianGridSpec {
        l2_sensitivity: delta,
        dimension: d,
        computation_error: 0.0,
        value_bound: bound,
        format,
    };
    GaussianGrid::calibrate(&spec, multiplier).unwrap()
}

/// Deterministic inputs with halfway points, NaN and ±∞ among ordinary values.
fn inputs(n: usize, lambda: f64) -> Vec<f64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| match i % 97 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => -1e300,
            3 => 2.5 * lambda,
            4 => -0.5 * lambda,
            _ => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 11) as f64 / 2f64.powi(53) - 0.5) * 10f64.powi((i % 7) as i32 - 3)
            }
        })
        .collect()
}

/// A `[B, H, S, D]` tensor stored as `[B, S, H, D]` with padded rows (`pad` elements after
/// each `D`), as the attention output of a strided caller: its layout and buffer length.
fn strided(b: usize, h: usize, s: usize, d: usize, pad: usize) -> (Layout4, usize) {
    let ss = h * (d + pad);
    let layout = Layout4::new([b, h, s, d], [s * ss, d + pad, ss, 1]).unwrap();
    (layout, b * s * ss)
}

fn offset(l: &Layout4, i: usize) -> usize {
    let [_, h, s, d] = l.shape();
    let st = l.strides();
    let (c, r) = (i % d, i / d);
    let (si, r) = (r % s, r / s);
    let (hi, bi) = (r % h, r / h);
    bi * st[0] + hi * st[1] + si * st[2] + c * st[3]
}

/// Runs the GPU release of `logical` (logical order) stored in `layout`, and the CPU's
/// release of the same values group by group; compares every value bit for bit and
/// checks that nothing outside the tensor was written.
fn check_release(
    dev: &Device,
    s: &Stream,
    layout: Layout4,
    len: usize,
    grids: &[GaussianGrid],
    format: GridFormat,
    first: u64,
) {
    let total = layout.numel();
    let group_len = total.div_ceil(grids.len());
    let logical = inputs(total, grids[0].resolution());
    let draw = KeyedStream::new(&key(3), 17);
    let groups: Vec<GridGroup> = grids.iter().map(GridGroup::gaussian).collect();
    let f32_buffer = format == GridFormat::F32;
    // The CPU: each group's values (as the buffer holds them) released in logical order.
    let mut want: Vec<f64> =
        logical.iter().map(|&v| if f32_buffer { f64::from(v as f32) } else { v }).collect();
    for (g, chunk) in want.chunks_mut(group_len).enumerate() {
        grids[g].release_keyed(&draw, first + (g * group_len) as u64, chunk).unwrap();
    }
    let got: Vec<f64> = if f32_buffer {
        let mut buf = vec![f32::NAN; len];
        for (i, &v) in logical.iter().enumerate() {
            buf[offset(&layout, i)] = v as f32;
        }
        let mut d: DeviceBuffer<f32> = s.clone_htod(&buf).unwrap();
        grid_release(dev, s, &mut d, layout, &groups, group_len as u64, &draw, first).unwrap();
        let out = s.clone_dtoh(&d).unwrap();
        let written = out.iter().filter(|v| !v.is_nan()).count();
        assert_eq!(written, total, "values outside the tensor were written");
        (0..total).map(|i| f64::from(out[offset(&layout, i)])).collect()
    } else {
        let mut buf = vec![f64::NAN; len];
        for (i, &v) in logical.iter().enumerate() {
            buf[offset(&layout, i)] = v;
        }
        let mut d: DeviceBuffer<f64> = s.clone_htod(&buf).unwrap();
        grid_release(dev, s, &mut d, layout, &groups, group_len as u64, &draw, first).unwrap();
        let out = s.clone_dtoh(&d).unwrap();
        let written = out.iter().filter(|v| !v.is_nan()).count();
        assert_eq!(written, total, "values outside the tensor were written");
        (0..total).map(|i| out[offset(&layout, i)]).collect()
    };
    let bad = got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits());
    assert_eq!(bad, None, "first difference at logical element {bad:?}");
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn grid_release_is_bit_identical_to_the_cpu_on_strided_tensors_with_groups() {
    let (dev, s) = gpu();
    for format in [GridFormat::F32, GridFormat::F64] {
        // One group per batch element (output perturbation), different σ and Λ each.
        let (layout, len) = strided(3, 4, 37, 64, 8);
        let per_batch = (4 * 37 * 64) as u64;
        let grids: Vec<GaussianGrid> = [(1.0, 0.5), (0.25, 2.0), (3.0, 1.0)]
            .iter()
            .map(|&(delta, m)| grid(delta, per_batch, 2.0, m, format))
            .collect();
        check_release(&dev, &s, layout, len, &grids, format, 5);
        // One group, contiguous, ending at the last element the window layout allows.
        let layout = Layout4::contiguous([1, 1, 1, 100_003]).unwrap();
        let g = [grid(1e-3, 1, 1e3, 1.0, format)];
        check_release(&dev, &s, layout, 100_003, &g, format, (1 << 40) - 100_003);
    }
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn grid_stride_loops_release_the_same_values() {
    // Two blocks of 256 threads: each thread releases many elements (small enough for
    // memcheck and racecheck).
    let (dev, s) = gpu();
    set_grid_cap_for_tests(2);
    let (layout, len) = strided(2, 3, 50, 16, 4);
    let grids = [grid(2.0, 2400, 1.0, 0.7, GridFormat::F32)];
    check_release(&dev, &s, layout, len, &grids, GridFormat::F32, 11);
    set_grid_cap_for_tests(0);
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn bad_releases_fail_before_any_launch() {
    let (dev, s) = gpu();
    let draw = KeyedStream::new(&key(4), 0);
    let layout = Layout4::contiguous([1, 1, 2, 8]).unwrap();
    let f64_grid = GridGroup::gaussian(&grid(1.0, 16, 1.0, 1.0, GridFormat::F64));
    let f32_grid = GridGroup::gaussian(&grid(1.0, 16, 1.0, 1.0, GridFormat::F32));
    let x0 = vec![0.5f32; 16];
    let mut x = s.clone_htod(&x0).unwrap();
    let cases: [(&[GridGroup], u64, u64); 4] = [
        (&[f64_grid], 16, 0),             // an f64 grid for an f32 buffer
        (&[f32_grid], 8, 0),              // two groups needed
        (&[f32_grid], 16, (1 << 40) - 8), // past the window layout
        (&[f32_grid], 16, u64::MAX - 3),  // first + n overflows
    ];
    for (groups, group_len, first) in cases {
        let e = grid_release(&dev, &s, &mut x, layout, groups, group_len, &draw, first);
        assert!(matches!(e, Err(Error::Core(_))), "{e:?}");
    }
    assert_eq!(s.clone_dtoh(&x).unwrap(), x0, "nothing may be written on error");
}

/// The CPU's release of one row of `T` values: the zero row if it holds NaN or ±∞, then
/// `clip_hidden` (rows, clip), then `release_keyed`.
fn cpu_row_f64(row: &[f64], c: f64, g: &GaussianGrid, draw: &KeyedStream, e: u64) -> Vec<f64> {
    let mut v = if row.iter().all(|x| x.is_finite()) { row.to_vec() } else { vec![0.0; row.len()] };
    let n = v.len();
    clip_hidden(
        MatMut::from_row_major(&mut v, 1, n).unwrap(),
        1,
        ClipRegion::Rows,
        ClipMode::Clip,
        c,
    )
    .unwrap();
    g.release_keyed(draw, e, &mut v).unwrap();
    v
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn clip_then_exact_release_matches_the_cpu() {
    let (dev, s) = gpu();
    let (rows, dim, ld) = (37usize, 129usize, 131usize);
    let c = 1.5;
    let draw = KeyedStream::new(&key(7), 21);
    let first = 1000u64;
    let g = grid(2.0 * c, dim as u64, c, 0.6, GridFormat::F64);
    // Row r has scale 10^(r mod 9 − 4); rows 5 and 11 hold a NaN and an ∞.
    let mut dense = inputs(rows * dim, 1.0);
    for (i, v) in dense.iter_mut().enumerate() {
        *v = if v.is_finite() { v.clamp(-0.5, 0.5) } else { 0.1 };
        *v *= 10f64.powi((i / dim % 9) as i32 - 4);
    }
    dense[5 * dim + 3] = f64::NAN;
    dense[11 * dim + 100] = f64::INFINITY;
    let mut buf = vec![f64::NAN; (rows - 1) * ld + dim];
    for r in 0..rows {
        buf[r * ld..r * ld + dim].copy_from_slice(&dense[r * dim..(r + 1) * dim]);
    }
    let mut d = s.clone_htod(&buf).unwrap();
    let rep =
        clip_rows_release_exact(&dev, &s, &mut d, rows, dim, ld, c, &g, &draw, first).unwrap();
    assert_eq!(rep.sanitized_rows, 2);
    assert_eq!(rep.noise_mode, NoiseMode::Exact);
    assert_eq!(rep.resolution, Some(g.resolution()));
    let got = s.clone_dtoh(&d).unwrap();
    let lambda = g.resolution();
    let mut scaled = 0;
    for r in 0..rows {
        let row = &dense[r * dim..(r + 1) * dim];
        let want = cpu_row_f64(row, c, &g, &draw, first + (r * dim) as u64);
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        scaled += usize::from(norm.is_finite() && norm > c);
        for j in 0..dim {
            let (a, b) = (got[r * ld + j], want[j]);
            assert!(a.is_finite(), "({r},{j}) released a non-finite value");
            if !(norm.is_finite() && norm > 0.9 * c) {
                // Not clipped (or sanitised): the same grid index and noise as the CPU.
                assert_eq!(a.to_bits(), b.to_bits(), "unclipped ({r},{j}): {a:e} vs {b:e}");
            } else {
                // A clipped entry may differ from the CPU's in its last place (parallel
                // norm), which can move its grid index by one.
                assert!((a - b).abs() <= lambda, "clipped ({r},{j}): {a:e} vs {b:e}");
            }
        }
        // The padding between rows is untouched.
        assert!(r + 1 == rows || got[r * ld + dim..(r + 1) * ld].iter().all(|v| v.is_nan()));
    }
    assert_eq!(rep.scaled_rows as usize, scaled);
}

#[test]
#[ignore = "needs a CUDA GPU and libnvrtc; scripts/gpu-test.sh runs it"]
fn clip_exact_f32_rows_are_on_the_grid_and_checked_before_launch() {
    let (dev, s) = gpu();
    set_grid_cap_for_tests(2); // many rows per block: the shared reduction buffers reused
    let (rows, dim) = (40usize, 300usize);
    let c = 1.0;
    let params = ClipRowsParams::new(c, 0.8).unwrap();
    let g = params.exact_grid(dim, FloatDtype::F32).unwrap();
    let draw = KeyedStream::new(&key(9), 3);
    let x: Vec<f32> = inputs(rows * dim, 1.0)
        .iter()
        .map(|&v| if v.is_finite() { v as f32 * 0.01 } else { 0.0 })
        .collect();
    let mut d = s.clone_htod(&x).unwrap();
    let rep = clip_rows_release_exact(&dev, &s, &mut d, rows, dim, dim, c, &g, &draw, 0).unwrap();
    let got = s.clone_dtoh(&d).unwrap();
    for r in 0..rows {
        let row: Vec<f64> = x[r * dim..(r + 1) * dim].iter().map(|&v| f64::from(v)).collect();
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm < 0.9 * c {
            // Unclipped rows: exactly the CPU's release of the f32 values.
            let mut want = row.clone();
            g.release_keyed(&draw, (r * dim) as u64, &mut want).unwrap();
            for j in 0..dim {
                assert_eq!(f64::from(got[r * dim + j]).to_bits(), want[j].to_bits(), "({r},{j})");
            }
        }
    }
    assert!(got.iter().all(|&v| (f64::from(v) / g.resolution()).fract() == 0.0));
    assert_eq!(rep.noise_mode, NoiseMode::Exact);
    set_grid_cap_for_tests(0);
    // Bad arguments: an f64 grid for f32 rows, elements past 2^40, a bad clip norm.
    let g64 = params.exact_grid(dim, FloatDtype::F64).unwrap();
    let before = s.clone_dtoh(&d).unwrap();
    for (grid, first, cn) in [(&g64, 0u64, c), (&g, (1 << 40) - 100, c), (&g, 0, f64::NAN)] {
        let e = clip_rows_release_exact(&dev, &s, &mut d, rows, dim, dim, cn, grid, &draw, first);
        assert!(
            matches!(e, Err(Error::Core(CoreError::OutOfRange { .. }))),
            "first {first}: {e:?}"
        );
    }
    assert_eq!(s.clone_dtoh(&d).unwrap(), before, "nothing may be written on error");
}
