//! How a release is split into chunks of samples and groups of problems.

use super::{MAX_CHUNKS, MAX_N, MIN_CHUNK_SAMPLES, PARTIALS_PER_LAUNCH};
use crate::error::{Error, Result};

/// How one release is split: chunks of samples (a function of `k` only, so the bits of
/// `B` never depend on the device or the batch) and groups of problems per launch (which
/// only bound the workspace).
///
/// ```
/// use dpattn_cuda::gaussian_sampling_attention::SamplingPlan;
/// let plan = SamplingPlan::new([2, 3, 5, 40], 100_000)?;
/// assert_eq!((plan.chunks, plan.chunk_len), (128, 782)); // 128 · 782 ≥ 100 000
/// assert_eq!(SamplingPlan::new([1, 1, 5, 40], 300)?.chunks, 1);
/// # Ok::<(), dpattn_cuda::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplingPlan {
    /// `batch · heads`.
    pub problems: u64,
    /// Tokens per problem.
    pub n: u64,
    /// Features per problem.
    pub d: u64,
    /// Samples `k`.
    pub k: u64,
    /// Samples per chunk (the last chunk may be shorter).
    pub chunk_len: u64,
    /// Chunks per problem, `⌈k / chunk_len⌉ ≤` [`MAX_CHUNKS`].
    pub chunks: u64,
    /// Problems per launch of the partial-sum kernel.
    pub group: u64,
}

impl SamplingPlan {
    /// The plan for `X` of shape `[batch, heads, n, d]` and `k` samples.
    ///
    /// # Errors
    /// [`Error::Core`] (`OutOfRange`) for a zero size or `k = 0`; [`Error::Unsupported`]
    /// for `n >` [`MAX_N`]; [`Error::Core`] (`SizeOverflow`) when the workspace does not fit
    /// in `usize`.
    pub fn new(shape: [usize; 4], k: u64) -> Result<Self> {
        use dpattn_core::Error as E;
        let [batch, heads, n, d] = shape;
        for (name, v) in [("batch", batch), ("heads", heads), ("n", n), ("d", d)] {
            if v == 0 {
                return Err(E::OutOfRange { name, value: 0.0, allowed: ">= 1" }.into());
            }
        }
        if k == 0 {
            return Err(E::OutOfRange { name: "k", value: 0.0, allowed: "[1, 2^53]" }.into());
        }
        if n > MAX_N {
            return Err(Error::Unsupported {
                what: format!(
                    "n = {n} tokens per problem on the GPU (at most {MAX_N}); use \
                     dpattn_core::gaussian_sampling_attention::gaussian_sampling_attention on the CPU"
                ),
            });
        }
        let problems = (batch as u64)
            .checked_mul(heads as u64)
            .ok_or(E::SizeOverflow { what: "batch · heads" })?;
        let chunks = k.div_ceil(MIN_CHUNK_SAMPLES).min(MAX_CHUNKS);
        let chunk_len = k.div_ceil(chunks);
        let chunks = k.div_ceil(chunk_len);
        let group = (PARTIALS_PER_LAUNCH / chunks).max(1).min(problems);
        let plan = SamplingPlan { problems, n: n as u64, d: d as u64, k, chunk_len, chunks, group };
        plan.workspace_len()?;
        Ok(plan)
    }

    /// Lower-triangle entries of one `n × n` sum.
    pub fn triangle(&self) -> u64 {
        self.n * (self.n + 1) / 2
    }

    /// Workspace (`f64` elements): the clip factors of every problem (`problems · d`), then
    /// the partial sums of one launch (`group · chunks · n(n+1)/2`).
    ///
    /// # Errors
    /// [`Error::Core`] (`SizeOverflow`) when it does not fit in `usize`.
    pub fn workspace_len(&self) -> Result<usize> {
        let overflow = || Error::from(dpattn_core::Error::SizeOverflow { what: "workspace" });
        let factors = self.problems.checked_mul(self.d).ok_or_else(overflow)?;
        let partial = self.group * self.chunks * self.triangle();
        let total = factors.checked_add(partial).ok_or_else(overflow)?;
        usize::try_from(total).map_err(|_| overflow())
    }

    /// Elements of `B` (and of `P`): `problems · n²`.
    pub fn output_len(&self) -> u64 {
        self.problems * self.n * self.n
    }
}

/// Workspace (`f64` elements) that
/// [`gaussian_sampling_attention_raw`](super::gaussian_sampling_attention_raw) needs for `X` of
/// shape `[batch, heads, n, d]` and `k` samples ([`SamplingPlan::workspace_len`]).
///
/// ```
/// use dpattn_cuda::gaussian_sampling_attention::gaussian_sampling_attention_workspace_len;
/// // factors 2·3·40, then 6 problems × 128 chunks × 15 triangle entries
/// assert_eq!(gaussian_sampling_attention_workspace_len([2, 3, 5, 40], 100_000)?, 240 + 6 * 128 * 15);
/// # Ok::<(), dpattn_cuda::Error>(())
/// ```
///
/// # Errors
/// As [`SamplingPlan::new`].
pub fn gaussian_sampling_attention_workspace_len(shape: [usize; 4], k: u64) -> Result<usize> {
    SamplingPlan::new(shape, k)?.workspace_len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_depend_on_k_only_and_cover_every_sample() {
        for k in [1u64, 2, 511, 512, 513, 1024, 3000, 65_537, 100_000, 1 << 40, 1 << 53] {
            let reference = SamplingPlan::new([1, 1, 3, 7], k).unwrap();
            for shape in [[4, 8, 64, 64], [1, 1, 1, 1], [3, 2, 17, 1000]] {
                let p = SamplingPlan::new(shape, k).unwrap();
                assert_eq!((p.chunks, p.chunk_len), (reference.chunks, reference.chunk_len));
            }
            let p = reference;
            assert!(p.chunks >= 1 && p.chunks <= MAX_CHUNKS, "k={k}");
            // Every chunk is non-empty and together they hold exactly k samples.
            assert!((p.chunks - 1) * p.chunk_len < k && p.chunks * p.chunk_len >= k, "k={k}");
            assert_eq!(p.chunks == 1, k <= MIN_CHUNK_SAMPLES, "k={k}");
        }
    }

    #[test]
    fn groups_bound_the_workspace() {
        let p = SamplingPlan::new([64, 32, 64, 128], 1_000_000).unwrap();
        assert_eq!(p.chunks, MAX_CHUNKS);
        assert_eq!(p.group, PARTIALS_PER_LAUNCH / MAX_CHUNKS);
        assert_eq!(p.workspace_len().unwrap(), 64 * 32 * 128 + 32 * 128 * 2080);
        let small = SamplingPlan::new([1, 2, 4, 8], 100).unwrap();
        assert_eq!((small.group, small.chunks, small.triangle()), (2, 1, 10));
        assert_eq!(gaussian_sampling_attention_workspace_len([1, 2, 4, 8], 100).unwrap(), 16 + 20);
        assert_eq!(small.output_len(), 32);
    }

    #[test]
    fn sizes_and_n_are_limited() {
        assert!(SamplingPlan::new([1, 1, MAX_N, 10], 5).is_ok());
        assert!(matches!(
            SamplingPlan::new([1, 1, MAX_N + 1, 10], 5),
            Err(Error::Unsupported { what }) if what.contains("gaussian_sampling_attention")
        ));
        for shape in [[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]] {
            assert!(matches!(SamplingPlan::new(shape, 5), Err(Error::Core(_))), "{shape:?}");
        }
        assert!(SamplingPlan::new([1, 1, 1, 1], 0).is_err());
        assert!(matches!(
            SamplingPlan::new([1 << 20, 1 << 20, 8, usize::MAX >> 20], 5),
            Err(Error::Core(dpattn_core::Error::SizeOverflow { .. }))
        ));
    }
}
