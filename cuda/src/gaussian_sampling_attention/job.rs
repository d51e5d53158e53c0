//! One validated release: its buffers (checked on the host), its kernels and the queued
//! launches.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use dpattn_core::gaussian_sampling_attention::GaussianSamplingParams;
use dpattn_core::sampling::{KeyedStream, NoiseKey};
use dpattn_core::{Layout4, ScoreFn};

use super::{SamplingPlan, THREADS, finish_spec, spec};
use crate::device::Device;
use crate::error::{Error, Result, driver, guarded};
use crate::float_dtype::FloatDtype;
use crate::launch::grid_for;
use crate::noise_fill::{GpuKey, check_device_buffer, in_context};

/// Device memory of one release: `(pointer, elements)` of each buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Buffers {
    pub(super) x: (u64, usize),
    pub(super) dtype: FloatDtype,
    pub(super) out_b: (u64, usize),
    pub(super) out_p: (u64, usize),
    pub(super) workspace: (u64, usize),
    /// The raw entry point's status word (set to `STATUS_CLEAN`); `None` for the typed one.
    pub(super) status: Option<u64>,
}

/// Pointers non-null and aligned, lengths sufficient, and the written buffers disjoint
/// from each other and from `X`.
fn check_buffers(plan: &SamplingPlan, x_layout: &Layout4, b: &Buffers) -> Result<()> {
    use dpattn_core::Error as E;
    check_device_buffer("x", b.x.0, b.x.1, b.dtype.size())?;
    check_device_buffer("out_b", b.out_b.0, b.out_b.1, 8)?;
    check_device_buffer("out_p", b.out_p.0, b.out_p.1, 8)?;
    check_device_buffer("workspace", b.workspace.0, b.workspace.1, 8)?;
    if let Some(status) = b.status {
        check_device_buffer("status", status, 1, 8)?;
    }
    if b.x.1 < x_layout.required_len() {
        return Err(
            E::BufferTooShort { arg: "x", needed: x_layout.required_len(), got: b.x.1 }.into()
        );
    }
    let out = usize::try_from(plan.output_len())
        .map_err(|_| Error::from(E::SizeOverflow { what: "problems · n²" }))?;
    for (arg, (_, len)) in [("out_b", b.out_b), ("out_p", b.out_p)] {
        if len < out {
            return Err(E::BufferTooShort { arg, needed: out, got: len }.into());
        }
    }
    let needed = plan.workspace_len()?;
    if b.workspace.1 < needed {
        return Err(E::ScratchTooSmall { needed, got: b.workspace.1 }.into());
    }
    // Byte ranges (sizes checked above to fit in isize). X is read only: only the ranges
    // this call writes must not meet it or each other.
    let span = |p: u64, len: usize, size: usize| (p, p.saturating_add((len * size) as u64));
    let ranges = [
        ("out_b", span(b.out_b.0, out, 8)),
        ("out_p", span(b.out_p.0, out, 8)),
        ("workspace", span(b.workspace.0, needed, 8)),
        ("status", b.status.map_or((0, 0), |p| span(p, 1, 8))),
        ("x", span(b.x.0, x_layout.required_len(), b.dtype.size())),
    ];
    for (i, &(name, (lo, hi))) in ranges.iter().enumerate() {
        for &(_, (lo2, hi2)) in &ranges[i + 1..] {
            if lo < hi2 && lo2 < hi {
                return Err(E::OutOfRange {
                    name,
                    value: lo as f64,
                    allowed: "device memory disjoint from x, out_b, out_p, workspace and status",
                }
                .into());
            }
        }
    }
    Ok(())
}

/// The compiled kernels of one input type.
struct Kernels {
    factors: CudaFunction,
    partial: CudaFunction,
    finish: CudaFunction,
}

impl Kernels {
    fn load(dev: &Device, dtype: FloatDtype) -> Result<Self> {
        Ok(Kernels {
            factors: dev.function(&spec(dtype, "dp_gs_factors"))?,
            partial: dev.function(&spec(dtype, "dp_gs_partial"))?,
            finish: dev.function(&finish_spec())?,
        })
    }
}

/// One validated release, ready to queue.
pub(super) struct Job<'a> {
    dev: &'a Device,
    stream: &'a Arc<CudaStream>,
    kernels: Kernels,
    plan: SamplingPlan,
    bufs: Buffers,
    /// `[batch, heads, row]` strides of `X` in elements (the feature stride is 1).
    strides: [u64; 3],
    heads: u64,
    params: GaussianSamplingParams,
    key: GpuKey,
    stream_id: u64,
}

impl<'a> Job<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        dev: &'a Device,
        stream: &'a Arc<CudaStream>,
        x_layout: &Layout4,
        plan: SamplingPlan,
        bufs: Buffers,
        params: &GaussianSamplingParams,
        key: &NoiseKey,
        stream_id: u64,
    ) -> Result<Self> {
        check_buffers(&plan, x_layout, &bufs)?;
        in_context("a stream", stream, dev)?;
        let kernels = Kernels::load(dev, bufs.dtype)?;
        let [sb, sh, sr, _] = x_layout.strides();
        let job = Job {
            dev,
            stream,
            kernels,
            plan,
            bufs,
            strides: [sb as u64, sh as u64, sr as u64],
            heads: x_layout.heads() as u64,
            params: *params,
            key: GpuKey::of(&KeyedStream::new(key, stream_id)),
            stream_id,
        };
        Ok(job)
    }

    /// Sets the status word, if any, to [`STATUS_CLEAN`] and queues the clip factors.
    ///
    /// # Safety
    /// The buffers of `self.bufs` are live device memory of this context, as checked.
    pub(super) unsafe fn queue_factors(&self) -> Result<()> {
        let plan = &self.plan;
        let [sb, sh, sr] = self.strides;
        let (x, ws) = (self.bufs.x.0, self.bufs.workspace.0);
        let alpha = self.params.domain.alpha;
        self.dev.bind()?;
        guarded(|| {
            if let Some(status) = self.bufs.status {
                // SAFETY: `status` addresses one u64 of this context (checked non-null and
                // aligned; caller contract); the memset is queued on the kernels' stream.
                unsafe {
                    cudarc::driver::result::memset_d8_async(
                        status,
                        0xff,
                        8,
                        self.stream.cu_stream(),
                    )
                }
                .map_err(driver("set the gaussian-sampling status"))?;
            }
            let work = plan.problems * plan.d;
            let cfg = LaunchConfig {
                grid_dim: (grid_for(work, THREADS, self.dev.multiprocessors()), 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.stream.launch_builder(&self.kernels.factors);
            b.arg(&x).arg(&plan.problems).arg(&self.heads).arg(&plan.n).arg(&plan.d);
            b.arg(&sb).arg(&sh).arg(&sr).arg(&alpha).arg(&ws);
            // SAFETY: the arguments match `dp_gs_factors(const T*, u64 problems, u64 heads,
            // u64 n, u64 d, u64 sb, u64 sh, u64 sr, double alpha, double* factors)`; every
            // (b, h, r, c) offset lies within `required_len` ≤ the elements at `x` (checked);
            // the kernel writes factors[0 .. problems·d) (the head of the workspace, checked
            // long enough).
            unsafe { b.launch(cfg) }.map_err(driver("launch dp_gs_factors"))?;
            Ok(())
        })
    }

    /// Queues the partial sums and `B`, `P` for every group of problems.
    ///
    /// # Safety
    /// As [`Job::queue_factors`], queued after it on the same stream.
    pub(super) unsafe fn queue_release(&self) -> Result<()> {
        let plan = &self.plan;
        let [sb, sh, sr] = self.strides;
        let (x, ws) = (self.bufs.x.0, self.bufs.workspace.0);
        let partial = ws + plan.problems * plan.d * 8;
        let root_ridge = self.params.domain.eta.sqrt(); // IEEE √, as the CPU's libm::sqrt
        let cosh = i32::from(self.params.score == ScoreFn::Cosh);
        let kf = plan.k as f64; // exact: k ≤ 2^53
        let (out_b, out_p) = (self.bufs.out_b.0, self.bufs.out_p.0);
        guarded(|| {
            let mut p0 = 0u64;
            while p0 < plan.problems {
                let g = plan.group.min(plan.problems - p0);
                let cfg = LaunchConfig {
                    grid_dim: (plan.chunks as u32, g as u32, 1),
                    block_dim: (THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut b = self.stream.launch_builder(&self.kernels.partial);
                b.arg(&x).arg(&self.heads).arg(&plan.n).arg(&plan.d).arg(&sb).arg(&sh).arg(&sr);
                b.arg(&ws).arg(&p0).arg(&plan.k).arg(&plan.chunk_len).arg(&root_ridge);
                b.arg(&self.key).arg(&self.stream_id).arg(&partial);
                // SAFETY: the arguments match `dp_gs_partial(const T*, u64 heads, u64 n, u64 d, u64
                // sb, u64 sh, u64 sr, const double* factors, u64 p0, u64 k, u64 chunk_len, double
                // root_ridge, DpKey, u64 stream, double*
                // partial)`; blocks (chunk < chunks, g) read X of problems p0 + g < problems and
                // write partial[0 .. g·chunks·ntri) ⊆ the workspace (checked).
                unsafe { b.launch(cfg) }.map_err(driver("launch dp_gs_partial"))?;
                let cfg = LaunchConfig {
                    grid_dim: (g as u32, 1, 1),
                    block_dim: (THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut b = self.stream.launch_builder(&self.kernels.finish);
                b.arg(&partial).arg(&p0).arg(&plan.n).arg(&plan.chunks).arg(&kf).arg(&cosh);
                b.arg(&out_b).arg(&out_p);
                // SAFETY: the arguments match `dp_gs_finish(const double* partial, u64 p0, u64 n,
                // u64 chunks, double k, int cosh, double* out_b, double*
                // out_p)`; it writes the n² entries of problems p0 .. p0 + g of out_b and out_p,
                // each `problems · n²` long (checked).
                unsafe { b.launch(cfg) }.map_err(driver("launch dp_gs_finish"))?;
                p0 += g;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gaussian_sampling_attention::tests::{layout, params};
    use crate::gaussian_sampling_attention::validate;

    fn buffers(plan: &SamplingPlan, x: &Layout4) -> Buffers {
        let out = plan.output_len() as usize;
        Buffers {
            x: (1 << 20, x.required_len()),
            dtype: FloatDtype::F32,
            out_b: (1 << 30, out),
            out_p: (2 << 30, out),
            workspace: (3 << 30, plan.workspace_len().unwrap()),
            status: Some(4 << 30),
        }
    }

    #[test]
    fn buffers_are_checked_before_any_launch() {
        let x = layout([2, 3, 4, 64]);
        let (plan, _) = validate(&params(1000), &x).unwrap();
        let ok = buffers(&plan, &x);
        check_buffers(&plan, &x, &ok).unwrap();
        let out = plan.output_len() as usize;
        let mut cases: Vec<(Buffers, &str)> = Vec::new();
        let mut b = ok;
        b.x.0 = 0;
        cases.push((b, "null x"));
        let mut b = ok;
        b.out_b.0 = 4;
        cases.push((b, "misaligned out_b"));
        let mut b = ok;
        b.status = Some((1 << 30) + 8); // inside out_b
        cases.push((b, "status inside out_b"));
        let mut b = ok;
        b.x.1 -= 1;
        cases.push((b, "short x"));
        let mut b = ok;
        b.out_p.1 = out - 1;
        cases.push((b, "short out_p"));
        let mut b = ok;
        b.workspace.1 -= 1;
        cases.push((b, "short workspace"));
        let mut b = ok;
        b.out_p.0 = (1 << 30) + 8 * (out as u64 - 1); // last element of out_b
        cases.push((b, "out_p overlapping out_b"));
        let mut b = ok;
        b.workspace.0 = (1 << 20) + 16; // inside x
        cases.push((b, "workspace inside x"));
        let mut b = ok;
        b.x.1 = usize::MAX;
        cases.push((b, "x bytes past isize::MAX"));
        for (b, what) in cases {
            assert!(matches!(check_buffers(&plan, &x, &b), Err(Error::Core(_))), "{what}");
        }
        // Adjacent buffers are fine, and x may be longer than its layout needs.
        let mut b = ok;
        b.out_p.0 = (1 << 30) + 8 * out as u64;
        b.x.1 += 100;
        check_buffers(&plan, &x, &b).unwrap();
    }
}
