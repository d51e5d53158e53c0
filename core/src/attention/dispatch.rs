//! Runs the tiled driver over a range of heads with the selected kernel. The only place
//! the AVX2 code path is entered: through a `#[target_feature(enable = "avx2,fma")]`
//! function, so the whole inlined driver is compiled with VEX encoding.
#![allow(unsafe_code)]

use super::simd::Portable;
use super::tiled::{self, HeadJob, Plan};
use crate::attention_options::Kernel;
use crate::batched::{BatchedMut, BatchedRef};
use crate::element::Element;
use crate::error::Result;
use crate::sampling::ConstantTimeGaussian;

/// Operands of a call: `out` holds `out.batch · out.heads` heads that are the flattened
/// heads `first, first + 1, …` of `q`, `k`, `v` (flattened index `b · heads + h`; `first`
/// is 0 for a whole-batch call).
pub(crate) struct Operands<'o, 'i, T, O> {
    pub(crate) out: BatchedMut<'o, O>,
    /// `None`: `out` is the whole `[batch, heads, s_q, d_v]` output; `Some(first)`: `out`
    /// is `[1, n, s_q, d_v]` holding the flattened heads `first..first + n`.
    pub(crate) first: Option<usize>,
    pub(crate) q: BatchedRef<'i, T>,
    pub(crate) k: BatchedRef<'i, T>,
    pub(crate) v: BatchedRef<'i, T>,
}

impl<T: Element, O: Element> Operands<'_, '_, T, O> {
    fn for_each_head(
        &mut self,
        plan: &Plan<'_>,
        mut f: impl FnMut(HeadJob<'_, '_, T, O>) -> Result<()>,
    ) -> Result<()> {
        let [ob, oh, _, _] = self.out.layout().shape();
        let (mut grid, mut constant_time, mut grid_b) = (None, None, usize::MAX);
        for idx in 0..ob * oh {
            let flat = self.first.unwrap_or(0) + idx;
            let (b, h) = (flat / plan.heads, flat % plan.heads);
            if b != grid_b {
                grid = plan.out_grid.map(|g| (g.grid_of)(b)).transpose()?.flatten();
                constant_time = match (&grid, plan.out_grid) {
                    (Some(g), Some(draw)) if draw.constant_time => {
                        Some(ConstantTimeGaussian::new(g.integer_noise())?)
                    }
                    _ => None,
                };
                grid_b = b;
            }
            f(HeadJob {
                out: self.out.head_mut(idx / oh, idx % oh),
                q: self.q.head(b, h),
                k: self.k.head(b, h / plan.group),
                v: self.v.head(b, h / plan.group),
                b,
                h,
                grid,
                constant_time,
                row0: 0,
            })?;
        }
        Ok(())
    }
}

/// The `f32` head kernel a resolved `kernel` names: AVX2+FMA (the CPU checked once, here)
/// or the portable one.
#[derive(Clone, Copy)]
struct F32Kernel {
    #[cfg(target_arch = "x86_64")]
    avx2: Option<super::simd_avx2::Avx2Fma>,
}

impl F32Kernel {
    fn new(kernel: Kernel) -> Result<Self> {
        #[cfg(target_arch = "x86_64")]
        if kernel == Kernel::Avx2Fma {
            let token = super::simd_avx2::Avx2Fma::detect().ok_or(crate::Error::Unsupported {
                what: "the AVX2+FMA kernel on this CPU/target",
            })?;
            return Ok(Self { avx2: Some(token) });
        }
        let _ = kernel; // only the portable kernel exists on this target
        Ok(Self {
            #[cfg(target_arch = "x86_64")]
            avx2: None,
        })
    }

    fn head<T: Element, O: Element>(
        self,
        job: HeadJob<'_, '_, T, O>,
        plan: &Plan<'_>,
        scratch: &mut [f32],
    ) -> Result<()> {
        #[cfg(target_arch = "x86_64")]
        if let Some(token) = self.avx2 {
            // SAFETY: `token` exists, so this CPU supports AVX2 and FMA, the features
            // `head_avx2` is compiled with.
            return unsafe { head_avx2(token, job, plan, scratch) };
        }
        tiled::head(Portable::<f32>::new(), job, plan, scratch)
    }
}

/// The `f32` kernels. `kernel` must be resolved (not `Auto`) and available.
pub(crate) fn run_f32<T: Element, O: Element>(
    kernel: Kernel,
    mut ops: Operands<'_, '_, T, O>,
    plan: &Plan<'_>,
    scratch: &mut [f32],
) -> Result<()> {
    let kernel = F32Kernel::new(kernel)?;
    ops.for_each_head(plan, |job| kernel.head(job, plan, scratch))
}

/// [`run_f32`] on up to `threads` threads: each head's query rows are split into blocks of
/// whole `BR`-row tiles, one per thread, each thread with its own `per_thread` elements of
/// `scratch`. Every row is computed by the same code on the same tiles as in [`run_f32`],
/// so the output is the same bits.
#[cfg(feature = "std")]
pub(crate) fn run_f32_threaded<T: Element, O: Element>(
    kernel: Kernel,
    mut ops: Operands<'_, '_, T, O>,
    plan: &Plan<'_>,
    scratch: &mut [f32],
    threads: usize,
    per_thread: usize,
) -> Result<()> {
    let kernel = F32Kernel::new(kernel)?;
    let run = |job: HeadJob<'_, '_, T, O>, scratch: &mut [f32]| kernel.head(job, plan, scratch);
    ops.for_each_head(plan, |job| {
        let rows = job.out.rows();
        let block = tiled::BR * rows.div_ceil(tiled::BR * threads).max(1);
        if threads == 1 || rows <= block {
            return run(job, &mut scratch[..per_thread]);
        }
        let HeadJob { out, q, k, v, b, h, grid, constant_time, .. } = job;
        std::thread::scope(|sc| {
            let (mut rest, mut free, mut row0) = (out, &mut scratch[..], 0);
            let mut workers = alloc::vec::Vec::with_capacity(threads);
            // Every block but the last on a new thread; the last on this one.
            let mut result = Ok(());
            while rest.rows() > 0 {
                let take = block.min(rest.rows());
                let (mine, tail) = rest.split_at_row(take)?;
                let (own, others) = core::mem::take(&mut free).split_at_mut(per_thread);
                let sub = HeadJob { out: mine, q, k, v, b, h, grid, constant_time, row0 };
                (rest, free, row0) = (tail, others, row0 + take);
                if rest.rows() == 0 {
                    result = run(sub, own);
                } else {
                    match std::thread::Builder::new().spawn_scoped(sc, move || run(sub, own)) {
                        Ok(w) => workers.push(w),
                        Err(_) => {
                            result = Err(crate::Error::Unsupported {
                                what: "starting a thread (the operating system refused one)",
                            });
                            break;
                        }
                    }
                }
            }
            let joined = workers.into_iter().try_for_each(|w| {
                w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            });
            result.and(joined)
        })
    })
}

/// The `f64` kernel (portable code; compiled with AVX2 and FMA enabled where the CPU has
/// them, which changes speed only: Rust never contracts `a * b + c`, so the results are the
/// same bits on every CPU). The exact DP releases and the `f64` test path run it.
pub(crate) fn run_f64<T: Element, O: Element>(
    mut ops: Operands<'_, '_, T, O>,
    plan: &Plan<'_>,
    scratch: &mut [f64],
) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    if let Some(token) = super::simd_avx2::Avx2Fma::detect() {
        return ops.for_each_head(plan, |job| {
            // SAFETY: `token` exists, so this CPU supports AVX2 and FMA, the features
            // `head_f64_avx2` is compiled with.
            unsafe { head_f64_avx2(token, job, plan, scratch) }
        });
    }
    ops.for_each_head(plan, |job| tiled::head(Portable::<f64>::new(), job, plan, scratch))
}

/// The longest `f64` slice inside an `f32` scratch (its 8-byte aligned middle part): the exact
/// DP release computes in `f64` on the `f32` scratch callers already size.
pub(crate) fn f64_scratch(scratch: &mut [f32]) -> &mut [f64] {
    // SAFETY: every 8-byte pattern is a valid `f64`, and `align_to_mut` returns only the
    // correctly aligned middle part of the slice, within its bounds.
    let (_, mid, _) = unsafe { scratch.align_to_mut::<f64>() };
    mid
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn head_f64_avx2<T: Element, O: Element>(
    _token: super::simd_avx2::Avx2Fma,
    job: HeadJob<'_, '_, T, O>,
    plan: &Plan<'_>,
    scratch: &mut [f64],
) -> Result<()> {
    tiled::head(Portable::<f64>::new(), job, plan, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn head_avx2<T: Element, O: Element>(
    token: super::simd_avx2::Avx2Fma,
    job: HeadJob<'_, '_, T, O>,
    plan: &Plan<'_>,
    scratch: &mut [f32],
) -> Result<()> {
    tiled::head(token, job, plan, scratch)
}

/// `(max_r Σ_c x_rc², max |x|)` over the rows of an `f32` matrix on the fastest vectors this
/// CPU has (AVX2+FMA when `avx2` holds the token, else the portable backend), or `None` when
/// some row's `f32` sum is not finite (a NaN or infinity in it, or squares beyond `f32`):
/// the caller then takes the exact `f64` pass.
pub(crate) fn matrix_stats_f32(
    #[cfg(target_arch = "x86_64")] avx2: Option<super::simd_avx2::Avx2Fma>,
    x: crate::matrix_view::MatRef<'_, f32>,
) -> Option<(f64, f64)> {
    #[cfg(target_arch = "x86_64")]
    if let Some(token) = avx2 {
        // SAFETY: `token` exists, so this CPU supports AVX2 and FMA, the features
        // `matrix_stats_avx2` is compiled with.
        return unsafe { matrix_stats_avx2(token, x) };
    }
    matrix_stats_simd(Portable::<f32>::new(), x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn matrix_stats_avx2(
    token: super::simd_avx2::Avx2Fma,
    x: crate::matrix_view::MatRef<'_, f32>,
) -> Option<(f64, f64)> {
    matrix_stats_simd(token, x)
}

/// [`matrix_stats_f32`] on backend `s`: per row, two vectors of sums of squares and of
/// `max(x, −x)`, the tail in `f64`. A NaN or infinity makes its row's sum NaN or infinite,
/// so it is never missed (the maxima alone could drop a NaN).
#[inline(always)]
fn matrix_stats_simd<S: super::simd::Simd<E = f32>>(
    s: S,
    x: crate::matrix_view::MatRef<'_, f32>,
) -> Option<(f64, f64)> {
    use super::simd::LANES;
    let zero = s.splat(0.0);
    let (mut norm_sq, mut ab) = (0.0f64, [zero; 2]);
    let mut tail_ab = 0.0f32;
    for r in 0..x.rows() {
        let row = x.row(r);
        let mut sq = [zero; 2];
        let mut chunks = row.chunks_exact(2 * LANES);
        for c in &mut chunks {
            let (a, b) = (s.load(&c[..LANES]), s.load(&c[LANES..]));
            sq = [s.mul_add(a, a, sq[0]), s.mul_add(b, b, sq[1])];
            ab = [s.max(ab[0], s.max(a, s.sub(zero, a))), s.max(ab[1], s.max(b, s.sub(zero, b)))];
        }
        let mut tail_sq = 0.0f64;
        for &v in chunks.remainder() {
            tail_sq += f64::from(v) * f64::from(v);
            tail_ab = tail_ab.max(v.abs());
        }
        let sum = f64::from(s.reduce_sum(s.add(sq[0], sq[1]))) + tail_sq;
        if !sum.is_finite() {
            return None;
        }
        norm_sq = norm_sq.max(sum);
    }
    Some((norm_sq, f64::from(s.reduce_max(s.max(ab[0], ab[1])).max(tail_ab))))
}
