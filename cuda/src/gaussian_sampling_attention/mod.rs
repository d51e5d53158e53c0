//! Differentially private attention by Gaussian sampling on the GPU (paper 000, Gao–Song–
//! Yang–Zhou, *Differentially Private Attention Computation*: Algorithm 1 DPAttention with
//! Algorithm 2 DPCovariance), for the factor-free sampler with clip-and-ridge.
//!
//! **What it releases.** For every problem `X = x[b, h]` (`n × d`, `n ≤` [`MAX_N`]): the
//! columns of `X` are clipped to norm `α` and the public columns `√η·I_n` are appended,
//! `X' = [X·diag(f), √η·I_n]` (`q = d + n` columns, `f_c = min(1, α/‖x_c‖)`); the release is
//! `B = (1/k)·Σᵢ gᵢgᵢᵀ` with `gᵢ = X'·zᵢ`, `zᵢ ~ N(0, I_q)`, so `B ~ Wishart_n(k, X'X'ᵀ)/k`,
//! and `P = D(B)⁻¹ f(B)` row by row (`f = exp` or `cosh`, shifted by the row maximum).
//!
//! **Guarantee** (Theorem 4.1 Part 2 via Theorem 5.9, with the errata of `docs/PAPERS.md` §0.6; see
//! `docs/PRIVACY.md` §3): each problem's `(B, P)` is `(ε, δ)`-DP when the public condition
//! `s < Δ(k)` holds. Clip-and-ridge (`[EXT]`, `docs/PAPERS.md` P0-16) puts every finite input in
//! the `(α, η)`-good domain (`X'X'ᵀ ⪰ ηI`, columns of norm `≤ α`) while preserving β-closeness, so
//! no private domain check is needed and nothing is refused for private reasons: a column holding a
//! NaN or an infinity is the zero column, as on the CPU (what that means for the guarantee:
//! `docs/PRIVACY.md` §3.1). The call composes over its `batch · heads` problems (or `heads` when
//! `batch_elements_disjoint`), and that composed `(ε, δ)` is charged to the ledger.
//!
//! **Neighbour relation: one feature column** of one problem's `X` moves by at most `β`
//! in ℓ2 (Def. 1.6). Changing a token (a row) is **not** covered; do not advertise
//! token-level privacy.
//!
//! **Same release as the CPU, element for element.** Coordinate `c` of sample `i` of
//! problem `p` is element `p·k·q + i·q + c` of the `f64` Gaussian layout of the stream
//! `(key, stream)` (`docs/RANDOMNESS.md` §3 and §5.1), computed by the same device function
//! as [`crate::fill_noise`], so the normals are bit-identical to those of the CPU's
//! `dpattn_core::gaussian_sampling_attention::gaussian_sampling_attention` with
//! `Sampler::FactorFree` and `OutOfDomain::ClipAndRidge`. The clip factors and each `gᵢ` are
//! computed with the CPU's operations in the CPU's order (`--fmad=false`), so they are
//! bit-identical too. The only difference is the order in which the `k` outer products are
//! added: the samples are split into [`SamplingPlan::chunks`] chunks that depend on `k`
//! only, each chunk is summed in sample order and the chunks are added in order. `B` thus
//! equals the CPU's up to that reassociation (`|ΔB_ij| ≤ 2k·u·√(B_ii·B_jj)`, `u = 2⁻⁵³`;
//! about `1e-12` relative in practice), and is **bit-identical** to the CPU's when `k ≤`
//! [`MIN_CHUNK_SAMPLES`] (one chunk). `P` uses a port of the CPU's `exp` (libm's), so it
//! is bit-identical whenever `B` is. No floating-point atomics: the bits depend only on
//! `(X, k, key, stream)`, never on the device, the grid or the batch, so an audit replays
//! them exactly.
//!
//! **Public checks first.** Before touching the device, the call runs the CPU's public
//! checks (`check_release_parameters`: `ε ∈ (0, 1)`, `δ ∈ (0, 0.1)`, the domain, the privacy
//! condition, `k ∈ [1, 2^53]`, `d·α² + η ≤ 2^900`, stream capacity) and validates shapes,
//! buffers, pointers and streams. Nothing about `X` is checked or waited for: a NaN or an
//! infinity zeroes its column on the device, never refuses.
//!
//! **Unsupported** (an [`Error::Unsupported`] naming the CPU function to use):
//! `Sampler::Bartlett` and `Sampler::Literal` (they factorise the private `XXᵀ` on the
//! host), `OutOfDomain::Reject` (its private domain check is a Cholesky of `XXᵀ − ηI`), and
//! `n >` [`MAX_N`]. The private diagnostics of the CPU (`PrivateReport`) are not computed;
//! use `measure_domain` on the CPU.
//!
//! Cost: `O(k·n·(d + n))` multiply-adds and `k·(d + n)` normals per problem, all in `f64`.
//!
//! ```no_run
//! use dpattn_core::accounting::privacy_unit::PrivacyUnit;
//! use dpattn_core::{Layout4, PrivacyBudget};
//! use dpattn_core::accounting::ledger::Ledger;
//! use dpattn_core::gaussian_sampling_attention::{
//!     Domain, GaussianSamplingParams, OutOfDomain, Sampler};
//! use dpattn_core::session::Session;
//! use dpattn_cuda::Device;
//! use dpattn_cuda::gaussian_sampling_attention::gaussian_sampling_attention;
//! let dev = Device::get(0)?;
//! let stream = dev.new_stream()?;
//! let (batch, heads, n, d) = (2, 4, 16, 64);
//! let x = stream.clone_htod(&vec![0.01f32; batch * heads * n * d])?;
//! let mut b = stream.alloc_zeros::<f64>(batch * heads * n * n)?;
//! let mut p = stream.alloc_zeros::<f64>(batch * heads * n * n)?;
//! let mut params = GaussianSamplingParams::new(
//!     PrivacyBudget::new(0.5, 1e-6)?, Domain::new(0.1, 0.05, 1e-6)?, 100_000);
//! params.sampler = Sampler::FactorFree;
//! params.out_of_domain = OutOfDomain::ClipAndRidge;
//! params.noise_mode = dpattn_core::NoiseMode::UnsafeFloat; // no floating-point-safe form
//! let ledger = Ledger::new_approx(PrivacyUnit::FeatureColumn, PrivacyBudget::new(8.0, 1e-4)?);
//! let mut session = Session::new(ledger)?;
//! gaussian_sampling_attention(&dev, &stream, &mut b, &mut p, &x,
//!     Layout4::contiguous([batch, heads, n, d])?, &params, &mut session)?;
//! # Ok::<(), dpattn_cuda::Error>(())
//! ```

use cudarc::driver::DevicePtrMut;
use dpattn_core::NoiseMode;
use dpattn_core::accounting::cost::{Accountant, Cost};
use dpattn_core::gaussian_sampling_attention::{
    GaussianSamplingParams, OutOfDomain, PRIVACY_UNIT, STREAMS, Sampler, check_release_parameters,
};
use dpattn_core::session::{Draw, Session};
use dpattn_core::{Layout4, PrivacyBudget};

use crate::device::Device;
use crate::error::{Error, Result, driver, guarded};
use crate::float_dtype::{FloatDtype, FloatElement};
use crate::kernels::{KernelModule, KernelSpec};
use crate::memory::{DeviceBuffer, Stream};
use crate::noise_fill::in_context;

/// Largest `n` (tokens per problem) the kernels take: one CUDA block keeps the `n(n+1)/2`
/// lower-triangle sums of a problem in registers (`n ≤ 64`: at most 9 per thread).
pub const MAX_N: usize = 64;
/// Samples per chunk below which a release is one chunk (summed in the CPU's order).
pub const MIN_CHUNK_SAMPLES: u64 = 512;
/// Most chunks the samples of one problem are split into.
pub const MAX_CHUNKS: u64 = 128;
/// Most `problems × chunks` partial sums one launch holds (bounds the workspace).
pub const PARTIALS_PER_LAUNCH: u64 = 4096;
/// Threads per block of every kernel of this module (`DP_GS_THREADS`).
const THREADS: u32 = 256;
/// The status word [`gaussian_sampling_attention_raw`] leaves (every release is clean: a
/// non-finite column of `X` is zeroed, not reported).
pub const STATUS_CLEAN: u64 = u64::MAX;

/// Every kernel variant of this module (what the NVRTC compile test builds).
pub(crate) fn variants() -> Vec<KernelSpec> {
    let mut v = Vec::new();
    for dtype in [FloatDtype::F32, FloatDtype::F64] {
        v.push(spec(dtype, "dp_gs_factors"));
        v.push(spec(dtype, "dp_gs_partial"));
    }
    v.push(finish_spec());
    v
}

fn spec(dtype: FloatDtype, entry: &'static str) -> KernelSpec {
    KernelSpec {
        module: KernelModule::GaussianSampling,
        defines: vec![("DP_GS_T", dtype.code())],
        entry,
        fmad: false,
    }
}

/// `dp_gs_finish` reads no `X`: one variant (compiled with the `f64` define).
fn finish_spec() -> KernelSpec {
    spec(FloatDtype::F64, "dp_gs_finish")
}

mod job;
mod plan;

use job::{Buffers, Job};
pub use plan::{SamplingPlan, gaussian_sampling_attention_workspace_len};

/// The sampler and mode the GPU implements, or an [`Error::Unsupported`] naming the CPU
/// function to use instead.
fn check_mode(params: &GaussianSamplingParams) -> Result<()> {
    const CPU: &str = "dpattn_core::gaussian_sampling_attention::gaussian_sampling_attention";
    if params.sampler != Sampler::FactorFree {
        return Err(Error::Unsupported {
            what: format!(
                "Gaussian-sampling attention with {:?}: the GPU implements Sampler::FactorFree \
                 only (the others factorise the private X Xᵀ); use {CPU} on the CPU",
                params.sampler
            ),
        });
    }
    if params.out_of_domain != OutOfDomain::ClipAndRidge {
        return Err(Error::Unsupported {
            what: format!(
                "Gaussian-sampling attention with OutOfDomain::{:?}: the GPU implements \
                 ClipAndRidge only (Reject needs the private domain check, a Cholesky of \
                 X Xᵀ − ηI); use {CPU} on the CPU",
                params.out_of_domain
            ),
        });
    }
    Ok(())
}

/// Every host-side check (none reads data): mode, the CPU's public checks, the plan.
fn validate(params: &GaussianSamplingParams, x: &Layout4) -> Result<(SamplingPlan, PrivacyBudget)> {
    check_mode(params)?;
    let total = check_release_parameters(params, x.shape())?;
    let plan = SamplingPlan::new(x.shape(), params.k)?;
    Ok((plan, total))
}

fn charge(ledger: Option<&mut dyn Accountant>, total: PrivacyBudget) -> Result<()> {
    if let Some(ledger) = ledger {
        // Paper 000 runs only in the unsafe float mode (check_release_parameters).
        ledger.charge(PRIVACY_UNIT, &Cost::Approx(total), NoiseMode::UnsafeFloat)?;
    }
    Ok(())
}

/// DPAttention on the GPU: `B` and `P` of every problem `x[b, h]` (`n × d`, `n ≤`
/// [`MAX_N`]) into `out_b[b, h]` and `out_p[b, h]` (`f64`, `[batch, heads, n, n]`,
/// contiguous), by the factor-free sampler with clip-and-ridge; see the
/// [module documentation](self) for the guarantee, the neighbour relation and the equality
/// with the CPU release.
///
/// `x_layout` describes `x` (`[batch, heads, n, d]`, any strides with a contiguous feature
/// axis; broadcast strides allowed). Order of work: the mode, the CPU's public checks, the
/// shapes and buffers (no device work before they pass); then the ledger is charged (once,
/// the composed `(ε, δ)`), and the release is queued on `stream` (this function does not
/// wait for it). Nothing depends on the data: a column of `X` holding a NaN or an infinity
/// is zeroed, as on the CPU. Allocates its workspace (freed, stream-ordered, when the call
/// returns).
///
/// # Errors
/// [`Error::Unsupported`] (sampler or mode other than `FactorFree` with `ClipAndRidge`,
/// `n > MAX_N`, a buffer of another device); [`Error::Core`] with the CPU's error for a
/// public parameter (`OutOfRange`, `Infeasible`, `SizeOverflow`, …), a shape or buffer
/// (`BufferTooShort`), or a ledger that cannot take the charge; [`Error::Driver`],
/// [`Error::Compile`].
#[allow(clippy::too_many_arguments)]
pub fn gaussian_sampling_attention<T: FloatElement, const N: usize>(
    dev: &Device,
    stream: &Stream,
    out_b: &mut DeviceBuffer<f64>,
    out_p: &mut DeviceBuffer<f64>,
    x: &DeviceBuffer<T>,
    x_layout: Layout4,
    params: &GaussianSamplingParams,
    session: &mut Session<N>,
) -> Result<()> {
    let r = session.begin(STREAMS)?;
    gaussian_sampling_attention_keyed(
        dev,
        stream,
        out_b,
        out_p,
        x,
        x_layout,
        params,
        r.draw,
        Some(r.ledger),
    )
}

/// [`gaussian_sampling_attention`] with an explicit key and stream id and an optional
/// ledger: **for replay, audit, and hosts that manage their own stream ids** — a
/// `(key, stream)` pair must never serve two releases. With the same `draw` it releases
/// what the CPU's `gaussian_sampling_attention_keyed` releases.
///
/// # Errors
/// As [`gaussian_sampling_attention`].
#[allow(clippy::too_many_arguments)]
pub fn gaussian_sampling_attention_keyed<T: FloatElement>(
    dev: &Device,
    stream: &Stream,
    out_b: &mut DeviceBuffer<f64>,
    out_p: &mut DeviceBuffer<f64>,
    x: &DeviceBuffer<T>,
    x_layout: Layout4,
    params: &GaussianSamplingParams,
    draw: Draw<'_>,
    ledger: Option<&mut dyn Accountant>,
) -> Result<()> {
    let (plan, total) = validate(params, &x_layout)?;
    in_context("x: a buffer", x.home_stream(), dev)?;
    in_context("out_b: a buffer", out_b.home_stream(), dev)?;
    in_context("out_p: a buffer", out_p.home_stream(), dev)?;
    in_context("a stream", stream.cuda(), dev)?;
    let ws_len = plan.workspace_len()?;
    let (x_len, b_len, p_len) = (x.len(), out_b.len(), out_p.len());
    let cs = stream.cuda();
    guarded(|| {
        let mut ws = cs.alloc_zeros::<f64>(ws_len).map_err(driver("allocate workspace"))?;
        let (xp, _gx) = x.device_ptr(stream);
        let (bp, _gb) = out_b.device_ptr_mut(stream);
        let (pp, _gp) = out_p.device_ptr_mut(stream);
        let (wp, _gw) = ws.device_ptr_mut(cs);
        let bufs = Buffers {
            x: (xp, x_len),
            dtype: T::DTYPE,
            out_b: (bp, b_len),
            out_p: (pp, p_len),
            workspace: (wp, ws_len),
            status: None,
        };
        let job = Job::new(dev, cs, &x_layout, plan, bufs, params, draw.key, draw.stream)?;
        charge(ledger, total)?;
        // SAFETY: every pointer comes from a live device buffer of this device (checked by
        // `in_context`), alive and guarded until the queued work is recorded; the release
        // is queued after the clip factors on the same stream.
        unsafe {
            job.queue_factors()?;
            job.queue_release()
        }
    })?;
    dev.check()
}

/// [`gaussian_sampling_attention`] on caller-owned device memory, asynchronous on `stream`:
/// nothing is allocated, freed or synchronised.
///
/// * `x`: `x_len` elements of `x_dtype`, described by `x_layout`;
/// * `out_b`, `out_p`: at least `batch · heads · n²` `f64` each (written contiguously);
/// * `workspace`: at least [`gaussian_sampling_attention_workspace_len`] `f64`;
/// * `status`: one `u64`, set to [`STATUS_CLEAN`] on the stream. Nothing in `X` can fail
///   the release any more (a column holding a NaN or an infinity is zeroed), so it always
///   ends clean; it stays in the signature for callers of the earlier contract, which
///   reported a non-finite entry there.
///
/// The ledger is charged after every host-side check and before anything is queued.
///
/// # Safety
/// Every pointer must address the stated number of elements in this device's primary
/// context, valid until the queued work completes, and the written buffers must not be
/// used concurrently by other streams.
///
/// # Errors
/// As [`gaussian_sampling_attention`] for what is checked on the host; also
/// [`Error::Core`] for a null or misaligned pointer, a short buffer or workspace
/// (`ScratchTooSmall`), or written buffers that overlap each other or `x`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gaussian_sampling_attention_raw(
    dev: &Device,
    stream: &Stream,
    out_b: u64,
    out_b_len: usize,
    out_p: u64,
    out_p_len: usize,
    x: u64,
    x_len: usize,
    x_dtype: FloatDtype,
    x_layout: Layout4,
    params: &GaussianSamplingParams,
    draw: Draw<'_>,
    ledger: Option<&mut dyn Accountant>,
    workspace: u64,
    workspace_len: usize,
    status: u64,
) -> Result<()> {
    let bufs = Buffers {
        x: (x, x_len),
        dtype: x_dtype,
        out_b: (out_b, out_b_len),
        out_p: (out_p, out_p_len),
        workspace: (workspace, workspace_len),
        status: Some(status),
    };
    let (plan, total) = validate(params, &x_layout)?;
    let job = Job::new(dev, stream.cuda(), &x_layout, plan, bufs, params, draw.key, draw.stream)?;
    charge(ledger, total)?;
    // SAFETY: the caller guarantees the pointers (contract above); `Job::new` checked them
    // non-null, aligned, long enough and disjoint.
    unsafe {
        job.queue_factors()?;
        job.queue_release()?;
    }
    dev.check()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use dpattn_core::gaussian_sampling_attention::Domain;

    pub(crate) fn params(k: u64) -> GaussianSamplingParams {
        let mut p = GaussianSamplingParams::new(
            PrivacyBudget::new(0.5, 1e-6).unwrap(),
            Domain::new(0.1, 0.05, 1e-6).unwrap(),
            k,
        );
        p.sampler = Sampler::FactorFree;
        p.out_of_domain = OutOfDomain::ClipAndRidge;
        p.unsafe_float() // paper 000 has no floating-point-safe form
    }

    pub(crate) fn layout(shape: [usize; 4]) -> Layout4 {
        Layout4::contiguous(shape).unwrap()
    }

    #[test]
    fn other_samplers_and_modes_name_the_cpu_function() {
        for sampler in [Sampler::Bartlett, Sampler::Literal] {
            let mut p = params(1000);
            p.sampler = sampler;
            let e = validate(&p, &layout([1, 1, 4, 64])).unwrap_err();
            assert!(
                matches!(&e, Error::Unsupported { what } if what.contains("dpattn_core::gaussian_sampling_attention::gaussian_sampling_attention")),
                "{e}"
            );
        }
        let mut p = params(1000);
        p.out_of_domain = OutOfDomain::Reject;
        assert!(matches!(validate(&p, &layout([1, 1, 4, 64])), Err(Error::Unsupported { .. })));
    }

    #[test]
    fn public_checks_are_the_cpus() {
        let x = layout([2, 3, 4, 64]);
        let (plan, total) = validate(&params(1000), &x).unwrap();
        assert_eq!(total, check_release_parameters(&params(1000), x.shape()).unwrap());
        assert_eq!(plan.problems, 6);
        // A k the privacy condition forbids, ε out of range, a bad domain, k = 0: each is
        // the error the CPU's checks give.
        let mut bad = vec![params(1 << 50), params(0)];
        let mut p = params(1000);
        p.budget = PrivacyBudget::new(1.5, 1e-6).unwrap();
        bad.push(p);
        let mut p = params(1000);
        p.domain.eta = -1.0;
        bad.push(p);
        let mut p = params(1000);
        p.domain.alpha = 1e300; // d·α² + η beyond 2^900
        bad.push(p);
        for p in bad {
            let cpu = check_release_parameters(&p, x.shape()).unwrap_err();
            assert_eq!(validate(&p, &x).unwrap_err(), Error::Core(cpu));
        }
        // d < n is fine in clip-and-ridge mode.
        assert!(validate(&params(1000), &layout([1, 1, 8, 4])).is_ok());
    }

    #[test]
    fn every_variant_is_a_gaussian_sampling_kernel_without_fma() {
        let v = variants();
        assert_eq!(v.len(), 5);
        let source = KernelModule::GaussianSampling.source();
        for s in &v {
            assert_eq!(s.module, KernelModule::GaussianSampling);
            assert!(!s.fmad, "{}", s.label());
            assert!(source.contains(&format!("{}(", s.entry)), "{}", s.entry);
        }
        assert!(source.contains("dp_gauss8") && source.contains("dp_chacha20_block"));
        let entries: std::collections::BTreeSet<_> = v.iter().map(|s| s.entry).collect();
        assert_eq!(entries.len(), 3);
    }
}
