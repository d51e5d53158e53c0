//! The Gaussian-sampling kernels (`cuda/src/kernels/gaussian_sampling.cu`) run whole on the
//! host by `block_emulation.cpp` (one thread per CUDA thread, a barrier per
//! `__syncthreads`) and compared with the CPU release of dpattn-core: bit for bit when
//! `k ≤ MIN_CHUNK_SAMPLES`, within the reassociation bound otherwise (the comparison and
//! its tolerances are shared with the GPU tests: `cuda/tests/support/gaussian_sampling.rs`).
//! The launch parameters come from the crate's own `SamplingPlan`, so a change to the
//! chunking or to the kernels is checked here on every machine, GPU or not.

#[path = "../../../../cuda/tests/support/gaussian_sampling.rs"]
mod support;

use dpattn_core::gaussian_sampling_attention::GaussianSamplingParams;
use dpattn_core::sampling::{KeyedStream, NoiseKey};
use dpattn_core::{Element, Layout4, ScoreFn};
use dpattn_cuda::gaussian_sampling_attention::SamplingPlan;
use dpattn_cuda_host_check::dpck_gs_release;
use support::{Release, compare, cpu_release, input, key, ledger, params};

/// Launch shape of one emulated release: the factor kernel's grid and the problems per
/// partial-sum launch (`None`: the plan's).
#[derive(Clone, Copy)]
struct Grid {
    factor_blocks: u32,
    group: Option<u64>,
}

const PLAN_GRID: Grid = Grid { factor_blocks: 3, group: None };

/// What the kernels release for `x`.
fn emulated<T: Element>(
    x: &[T],
    layout: Layout4,
    params: &GaussianSamplingParams,
    key: &NoiseKey,
    stream_id: u64,
    grid: Grid,
) -> Release {
    let [batch, heads, n, d] = layout.shape();
    let plan = SamplingPlan::new(layout.shape(), params.k).unwrap();
    let [sb, sh, sr, sc] = layout.strides();
    assert_eq!(sc, 1, "the kernels take a contiguous feature axis");
    let is_f32 = match core::mem::size_of::<T>() {
        4 => 1,
        8 => 0,
        s => panic!("no kernel for {s}-byte elements"),
    };
    let words = KeyedStream::new(key, stream_id).key_words();
    let len = batch * heads * n * n;
    let (mut b, mut p) = (vec![0.0; len], vec![0.0; len]);
    // SAFETY: x holds every (b, h, r, c) offset of `layout` (built from it); out_b and out_p
    // hold problems · n² values; the key has 8 words.
    unsafe {
        dpck_gs_release(
            is_f32,
            x.as_ptr().cast(),
            batch as u64,
            heads as u64,
            n as u64,
            d as u64,
            sb as u64,
            sh as u64,
            sr as u64,
            params.domain.alpha,
            params.domain.eta,
            words.as_ptr(),
            stream_id,
            params.k,
            plan.chunk_len,
            plan.chunks,
            grid.group.unwrap_or(plan.group),
            i32::from(params.score == ScoreFn::Cosh),
            grid.factor_blocks,
            b.as_mut_ptr(),
            p.as_mut_ptr(),
        );
    }
    Release { b, p }
}

fn check_case<T: Element + From<f32>>(
    shape: [usize; 4],
    k: u64,
    score: ScoreFn,
    interleaved: bool,
) {
    let (x, layout) = input::<T>(shape, interleaved);
    let params = params(k, score);
    let key = key(shape[2] as u8);
    let cpu = cpu_release(&x, layout, &params, &key, 5, &mut ledger());
    let emu = emulated(&x, layout, &params, &key, 5, PLAN_GRID);
    let what = format!(
        "{shape:?} k={k} {score:?} {} interleaved={interleaved}",
        std::any::type_name::<T>()
    );
    let worst = compare(&emu, &cpu, shape, k, &what);
    eprintln!("{what}: largest |ΔB|/√(BiiBjj) = {worst:e}");
}

#[test]
fn one_chunk_releases_are_bit_identical_to_the_cpu() {
    // n, d, k off every tile size (32 samples, 32 columns), d < n (the ridge allows it),
    // n at the limit, f32 and f64, exp and cosh, strided and contiguous X.
    check_case::<f64>([1, 1, 1, 1], 1, ScoreFn::Exp, false);
    check_case::<f64>([2, 3, 5, 40], 300, ScoreFn::Cosh, true);
    check_case::<f32>([1, 2, 33, 70], 512, ScoreFn::Exp, true);
    check_case::<f64>([1, 1, 64, 33], 200, ScoreFn::Cosh, false);
    check_case::<f32>([3, 1, 9, 4], 97, ScoreFn::Exp, false);
}

#[test]
fn chunked_releases_match_the_cpu_within_the_reassociation_bound() {
    check_case::<f64>([1, 2, 9, 4], 3000, ScoreFn::Exp, true);
    check_case::<f32>([1, 1, 17, 45], 20_000, ScoreFn::Cosh, false);
    check_case::<f64>([1, 1, 64, 65], 513, ScoreFn::Exp, false);
}

#[test]
fn bits_depend_on_neither_the_grid_nor_the_launch_grouping() {
    // The same release with one factor block (every thread loops) and with one problem per
    // partial-sum launch (five launches, the last one short) against the plan's grid.
    let shape = [5, 1, 6, 37];
    let (x, layout) = input::<f64>(shape, false);
    let params = params(1500, ScoreFn::Exp);
    let key = key(2);
    let reference = emulated(&x, layout, &params, &key, 9, PLAN_GRID);
    for grid in [
        Grid { factor_blocks: 1, group: None },
        Grid { factor_blocks: 64, group: Some(1) },
        Grid { factor_blocks: 2, group: Some(2) },
    ] {
        let again = emulated(&x, layout, &params, &key, 9, grid);
        let same = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(u, v)| u.to_bits() == v.to_bits());
        assert!(same(&again.b, &reference.b) && same(&again.p, &reference.p));
    }
    // And they do depend on the stream id (a different draw).
    let other = emulated(&x, layout, &params, &key, 10, PLAN_GRID);
    assert_ne!(other.b, reference.b);
}

#[test]
fn extreme_magnitudes_take_the_scaled_norm_path_like_the_cpu() {
    // Columns whose squared norm overflows (1e200) or underflows (1e-300), and a zero
    // column: the clip factors come from the scaled norm, as on the CPU.
    let shape = [1, 2, 3, 5];
    let (mut x, layout) = input::<f64>(shape, false);
    x[0] = 1e200;
    x[5] = -3e199;
    x[1] = 1e-300;
    x[6] = 0.0;
    x[11] = -1e-300;
    for r in 0..3 {
        x[15 + r * 5 + 2] = 0.0;
    }
    let params = params(40, ScoreFn::Exp);
    let key = key(3);
    let cpu = cpu_release(&x, layout, &params, &key, 1, &mut ledger());
    let emu = emulated(&x, layout, &params, &key, 1, PLAN_GRID);
    compare(&emu, &cpu, shape, 40, "extreme magnitudes");
}

#[test]
fn a_non_finite_column_is_zeroed_like_the_cpu() {
    // Issue 28: a NaN or ∞ in X made the kernels write NaN everywhere (and the typed entry
    // point refuse), a data-dependent refusal; clip-and-ridge now zeroes the column. The
    // emulated release equals the CPU's on the same X bit for bit (k ≤ 512: one chunk),
    // and the CPU's equals its release on X with those columns set to zero.
    let shape = [2, 1, 6, 40];
    let [_, _, n, d] = shape;
    let (clean, layout) = input::<f32>(shape, false);
    let params = params(100, ScoreFn::Exp);
    let key = key(1);
    // One NaN; an infinity and a NaN in two columns of problem 1; a whole column of ∞.
    let whole: Vec<(usize, f32)> = (0..n).map(|r| (r * d + 7, f32::INFINITY)).collect();
    for bad in [vec![(300, f32::NAN)], vec![(401, f32::NAN), (399, f32::NEG_INFINITY)], whole] {
        let (mut x, mut zeroed) = (clean.clone(), clean.clone());
        for &(i, v) in &bad {
            x[i] = v;
            let (problem, c) = (i / (n * d), i % d);
            for r in 0..n {
                zeroed[problem * n * d + r * d + c] = 0.0;
            }
        }
        let what = format!("non-finite at {:?}", bad.iter().map(|b| b.0).collect::<Vec<_>>());
        let emu = emulated(&x, layout, &params, &key, 1, PLAN_GRID);
        let cpu = cpu_release(&x, layout, &params, &key, 1, &mut ledger());
        compare(&emu, &cpu, shape, 100, &what);
        let cpu0 = cpu_release(&zeroed, layout, &params, &key, 1, &mut ledger());
        assert!(cpu.b == cpu0.b && cpu.p == cpu0.p, "{what}");
    }
}
