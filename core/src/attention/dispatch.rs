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
        for idx in 0..ob * oh {
            let flat = self.first.unwrap_or(0) + idx;
            let (b, h) = (flat / plan.heads, flat % plan.heads);
            f(HeadJob {
                out: self.out.head_mut(idx / oh, idx % oh),
                q: self.q.head(b, h),
                k: self.k.head(b, h),
                v: self.v.head(b, h),
                b,
                h,
            })?;
        }
        Ok(())
    }
}

/// The `f32` kernels. `kernel` must be resolved (not `Auto`) and available.
pub(crate) fn run_f32<T: Element, O: Element>(
    kernel: Kernel,
    mut ops: Operands<'_, '_, T, O>,
    plan: &Plan<'_>,
    scratch: &mut [f32],
) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    if kernel == Kernel::Avx2Fma {
        let token = super::simd_avx2::Avx2Fma::detect()
            .ok_or(crate::Error::Unsupported { what: "the AVX2+FMA kernel on this CPU/target" })?;
        return ops.for_each_head(plan, |job| {
            // SAFETY: `token` exists, so this CPU supports AVX2 and FMA, the features
            // `head_avx2` is compiled with.
            unsafe { head_avx2(token, job, plan, scratch) }
        });
    }
    let _ = kernel; // only the portable kernel exists on this target
    ops.for_each_head(plan, |job| tiled::head(Portable::<f32>::new(), job, plan, scratch))
}

/// The `f64` test path (portable kernel).
pub(crate) fn run_f64<T: Element>(
    mut ops: Operands<'_, '_, T, f64>,
    plan: &Plan<'_>,
    scratch: &mut [f64],
) -> Result<()> {
    ops.for_each_head(plan, |job| tiled::head(Portable::<f64>::new(), job, plan, scratch))
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
