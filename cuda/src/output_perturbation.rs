//! Output-perturbation DP cross-attention on the GPU (our extension `[EXT]`, the mechanism
//! of [`dpattn_core::output_perturbation`]) through the fused kernels of
//! [`crate::attention`].
//!
//! **Guarantee, neighbour relation** as on the CPU: public queries, a private context of
//! key/value rows clamped to the public norms `R_k`, `R_v`; neighbours differ in the key and
//! value rows of one position of one batch element (replace-one). The calibration is the
//! CPU's own, run on the host from a copy of the **public** queries.
//!
//! **The exact release** ([`NoiseMode::Exact`], the default; `docs/PRIVACY.md` §2.5): the
//! attention of the clamped rows is computed in `f64` on the GPU (the `DP_F64` variant of
//! the `f32` kernel, [`attention_f64_raw`]) into the workspace, and each output element of
//! batch element `b` is then released on batch element `b`'s grid with exact discrete
//! Gaussian noise by [`mod@crate::grid_release`] (element `((b·H + h)·S_q + i)·D + c` of the
//! draw, its exact-sampler window, as on the CPU). The grids and `σ` are the CPU's
//! ([`output_perturbation_calibrate_exact`], [`output_perturbation_grid`]) for the GPU
//! kernel's computation-error model [`GPU_F64`], so the floats written to `out` are DP as
//! shipped. Inputs must be `f32` (the `f64` kernel reads `f32` tiles); bf16/f16 inputs are
//! refused in this mode ([`Error::Unsupported`]): their tensor-core attention rounds the
//! weights to 8 or 11 bits, an error comparable to the sensitivity itself.
//!
//! **The unsafe float path** ([`NoiseMode::UnsafeFloat`]): the fused kernel adds
//! `N(0, σ_b²)` in floating point ([`output_perturbation_calibrate`]'s `σ`, bit for bit the
//! CPU's; the noise is the CPU's output draw element for element, `docs/RANDOMNESS.md` §5).
//! Not DP as shipped: the low bits of the output reveal the noise-free value.
//!
//! **Clamping on the device** (`kernels/clamp_rows.cu`): each private key and value row is
//! scaled to norm `≤ R·(1 − 2⁻²¹)` in `f64` as on the CPU, then rounded once to the input
//! type — to nearest for `f32` (covered by the margin, as on the CPU) and **toward zero**
//! for bf16/f16, whose rounding the margin does not cover: so every row the kernel reads
//! has norm `≤ R`, which is what the sensitivity bound needs. Rows holding NaN or ±∞ are
//! clamped to zero, as on the CPU. The clamped copies live in the caller's workspace
//! ([`workspace_len`], [`exact_workspace_len`]).
//!
//! **Privacy unit and randomness** as on the CPU: one token
//! ([`PRIVACY_UNIT`](dpattn_core::output_perturbation::PRIVACY_UNIT)), one stream id per
//! release ([`STREAMS`]).
//! [`output_perturbation_attention_raw`] takes a [`Session`] (fresh stream id, its ledger
//! charged); [`output_perturbation_attention_raw_keyed`] takes an explicit [`Draw`] and an
//! optional ledger, for replay, audit, and hosts that manage their own stream ids.
//!
//! **Differences from the CPU**: no key-padding mask (refused); on the float path the
//! attention runs in the input precision (bf16/f16 tensor cores). The call
//! **synchronises** `stream` once: `σ` depends on the queries, which are read back.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use dpattn_core::accounting::cost::Accountant;
use dpattn_core::attention::AttentionParams;
use dpattn_core::grid_release::GridFormat;
use dpattn_core::noisy_attention::{NoiseSpec, NoiseStream};
use dpattn_core::output_perturbation::{
    AttentionErrorModel, OutputPerturbationParams, STREAMS, output_perturbation_calibrate,
    output_perturbation_calibrate_exact, output_perturbation_grid,
};
use dpattn_core::session::{Draw, Session};
use dpattn_core::{BatchedRef, Layout4, Mask, NoiseMode};

use crate::attention::{
    AttnDtype, GpuTensor, attention_f64_raw, check_noisy_attention, noisy_attention_raw,
};
use crate::device::Device;
use crate::error::{Error, Result, driver, guarded};
use crate::float_dtype::FloatDtype;
use crate::grid_release::{GridGroup, grid_release_raw};
use crate::kernels::{KernelModule, KernelSpec};
use crate::launch::grid_for;
use crate::memory::Stream;
use crate::noise_fill::check_device_buffer;

/// The computation-error model of the GPU's `f64` attention (`flash_attention_f32.cu` with
/// `DP_F64`), for [`output_perturbation_calibrate_exact`]: `u = 2^-51` (four times the `f64`
/// unit roundoff), exp error `2^-52`, key blocks of 32.
///
/// **Why it bounds the kernel** (each term of
/// [`dpattn_core::output_perturbation::attention_error_bound`], `docs/PRIVACY.md` §2.5, against the
/// kernel's operations, all IEEE `f64` with `u₀ = 2^-53`):
/// * *Logits*: the inputs are `f32` (exact in `f64`); a thread accumulates `d/4` products by
///   `fma`, two shuffled additions join four partial sums, one product applies the (`f64`)
///   scale: every term passes at most `d/4 + 3 ≤ d + 1` roundings, so the logit is within
///   `γ_{d+1}(u₀)·a ≤ γ_{d+1}(u)·a` of `scale·q·k`.
/// * *Exponent*: weight `2^t`, `t = fma(x, L, −fl(m·L))` with `L` = `log₂e` rounded: the
///   argument errs by at most `log₂e·(2a′·2u₀ + a′u₀)(1 + 2u₀)` ≤ `5a′u₀·log₂e` (`a′` the
///   computed logit bound), a factor `e^{±5a′u₀}`; each rescale `α = 2^{fl(fl(m·L) − fl(m′·L))}`
///   errs by `e^{±4a′u₀}`; the model allows `2a′u = 8a′u₀` per step. `exp2` of the CUDA math
///   library: at most 1 ulp, relative `2^-52` (`exp_error`). The cosh score's sum of two
///   exponentials adds one rounding, inside the model's final `+u`.
/// * *Blocks*: one rescale per 32-key tile (`key_block = 32`).
/// * *Normaliser*: a tile's 32 weights are summed in order, then `l ← fma(l, α, sum)`: a
///   weight passes at most `⌈n/32⌉ + 32` roundings, below the model's
///   `2⌈n/32⌉ + ⌈32/8⌉ + 4` roundings at `u = 4u₀` (`γ_k(4u₀) = γ_{4k}(u₀)`).
/// * *Accumulator*: one `fma` per key and coordinate, one product by `α` per tile, one final
///   division: at most `n + ⌈n/32⌉ + 1` roundings, the model's count. The output is stored
///   in `f64` (no further rounding).
/// * *Underflow*: gradual (no flush to zero in `f64`); each subnormal result errs by at most
///   `2^-1075` absolutely, at most `(n + ⌈n/32⌉ + 40)·2^-1074·√d` per row in all, far below
///   the model's per-row relative term (`≥ R_v·u ≥ 2^-111` for `R_v ≥ 2^-60`), which the
///   model's factor 2 of margin therefore covers.
///
/// The bound assumes the CUDA math library's `exp2` accuracy (1 ulp for `double`, CUDA C++
/// Programming Guide, mathematical functions appendix) and IEEE rounding of `+ − × ÷ fma`.
///
/// ```
/// use dpattn_core::output_perturbation::{AttentionErrorModel, attention_error_bound};
/// use dpattn_cuda::output_perturbation::GPU_F64;
/// let gpu = attention_error_bound(&GPU_F64, 64, 64, 1024, 0.5, 1.0)?;
/// let cpu = attention_error_bound(&AttentionErrorModel::CPU_F64, 64, 64, 1024, 0.5, 1.0)?;
/// assert!(gpu > cpu && gpu < 1e-10); // still negligible next to the sensitivity
/// # Ok::<(), dpattn_core::Error>(())
/// ```
pub const GPU_F64: AttentionErrorModel = AttentionErrorModel {
    unit_roundoff: 1.0 / 2_251_799_813_685_248.0, // 2^-51
    exp_error: 1.0 / 4_503_599_627_370_496.0,     // 2^-52
    key_block: 32,
};

/// Threads per block of `dp_clamp_rows` (one warp per row).
const CLAMP_THREADS: u32 = 256;

impl KernelSpec {
    /// The row clamp for one input type.
    pub fn clamp_rows(dtype: AttnDtype) -> Self {
        KernelSpec {
            module: KernelModule::ClampRows,
            defines: vec![("DP_T", dtype as i32)],
            entry: "dp_clamp_rows",
            fmad: false,
        }
    }
}

pub(crate) fn variants() -> Vec<KernelSpec> {
    AttnDtype::ALL.iter().map(|&t| KernelSpec::clamp_rows(t)).collect()
}

/// Bytes of device workspace [`output_perturbation_attention_raw`] needs: contiguous
/// clamped copies of `k` and `v` (`[batch, heads, s_k, d]` each), 16-byte aligned.
///
/// ```
/// use dpattn_cuda::attention::AttnDtype;
/// use dpattn_cuda::output_perturbation::workspace_len;
/// assert_eq!(workspace_len(AttnDtype::Bf16, [2, 4, 100, 64])?, 2 * 2 * 4 * 100 * 64 * 2);
/// # Ok::<(), dpattn_cuda::Error>(())
/// ```
///
/// # Errors
/// [`Error::Core`] when the size overflows.
pub fn workspace_len(dtype: AttnDtype, k_shape: [usize; 4]) -> Result<usize> {
    let n = Layout4::contiguous(k_shape)?.numel();
    n.checked_mul(2 * dtype.size())
        .ok_or(dpattn_core::Error::SizeOverflow { what: "workspace bytes" }.into())
}

/// Bytes of device workspace the exact release needs: the clamped `f32` copies of `k` and
/// `v`, the noiseless `f64` attention (`[batch, heads, s_q, d]`) and the release's two status
/// words, in that order (each part 16-byte aligned for `d ∈ {64, 128}`).
///
/// ```
/// use dpattn_cuda::output_perturbation::exact_workspace_len;
/// let (b, h, s_q, s_k, d) = (2, 4, 30, 100, 64);
/// let want = 2 * b * h * s_k * d * 4 + b * h * s_q * d * 8 + 16;
/// assert_eq!(exact_workspace_len([b, h, s_k, d], [b, h, s_q, d])?, want);
/// # Ok::<(), dpattn_cuda::Error>(())
/// ```
///
/// # Errors
/// [`Error::Core`] when the size overflows.
pub fn exact_workspace_len(k_shape: [usize; 4], q_shape: [usize; 4]) -> Result<usize> {
    let n_out = Layout4::contiguous(q_shape)?.numel();
    workspace_len(AttnDtype::F32, k_shape)?
        .checked_add(
            n_out
                .checked_mul(8)
                .ok_or(dpattn_core::Error::SizeOverflow { what: "workspace bytes" })?,
        )
        .and_then(|b| b.checked_add(16))
        .ok_or(dpattn_core::Error::SizeOverflow { what: "workspace bytes" }.into())
}

/// Releases `out = attention(Q, clamp(K), clamp(V))` plus Gaussian noise on the GPU with fresh
/// randomness from `session`, charging its ledger (kept for one token): the CPU's
/// [`output_perturbation_attention`](dpattn_core::output_perturbation::output_perturbation_attention)
/// with the same calibration, noise elements (the release's one stream id) and ledger charge, in
/// `params.noise_mode` (module docs: the exact release rounds the `f64` attention to the grid of
/// its batch element and adds exact integer noise; the unsafe float path adds `N(0, σ_b²)` in the
/// kernel). `sigma` (`batch · heads` entries) receives each `(b, h)`'s noise scale (`σ_b`, or in
/// exact mode the discrete Gaussian's `s·Λ`, 0 where no noise is needed).
///
/// Order: every argument is checked, the public queries are read back (the stream is
/// synchronised) and calibrated, the ledger is charged, then the clamp, the attention (and
/// the release) are queued on `stream`; an error before the charge leaves `out` and the
/// ledger untouched. In exact mode the release's status words (`[failure bits, lowest
/// failed element]`, [`crate::grid_release::release_status`]) are the last 16 bytes of
/// the workspace; a failed element (probability below `2^−1000`) is NaN.
///
/// # Safety
/// As [`noisy_attention_raw`], and `workspace` must address `workspace_bytes` writable
/// bytes on the device ([`workspace_len`], or [`exact_workspace_len`] in exact mode), not
/// overlapping the operands.
///
/// # Errors
/// Those of [`noisy_attention_raw`] and the CPU function; [`Error::Unsupported`] for a
/// key-padding mask, or bf16/f16 inputs in exact mode; [`Error::Core`] for a short or
/// misaligned workspace, the session's errors and the ledger's refusal.
#[allow(clippy::too_many_arguments)]
pub unsafe fn output_perturbation_attention_raw<const N: usize>(
    dev: &Device,
    stream: &Stream,
    dtype: AttnDtype,
    out: GpuTensor,
    q: GpuTensor,
    k: GpuTensor,
    v: GpuTensor,
    params: &OutputPerturbationParams<'_>,
    session: &mut Session<N>,
    sigma: &mut [f64],
    workspace: u64,
    workspace_bytes: usize,
) -> Result<()> {
    let r = session.begin(STREAMS)?;
    // SAFETY: forwarded caller contract.
    unsafe {
        output_perturbation_attention_raw_keyed(
            dev,
            stream,
            dtype,
            out,
            q,
            k,
            v,
            params,
            r.draw,
            Some(r.ledger),
            sigma,
            workspace,
            workspace_bytes,
        )
    }
}

/// [`output_perturbation_attention_raw`] with an explicit key and stream id (its one stream
/// is `draw.stream`) and an optional ledger: **for replay, audit, and hosts that manage
/// their own stream ids** — a `(key, stream)` pair must never serve two releases.
///
/// # Safety
/// As [`output_perturbation_attention_raw`].
///
/// # Errors
/// As [`output_perturbation_attention_raw`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn output_perturbation_attention_raw_keyed(
    dev: &Device,
    stream: &Stream,
    dtype: AttnDtype,
    out: GpuTensor,
    q: GpuTensor,
    k: GpuTensor,
    v: GpuTensor,
    params: &OutputPerturbationParams<'_>,
    draw: Draw<'_>,
    ledger: Option<&mut dyn Accountant>,
    sigma: &mut [f64],
    workspace: u64,
    workspace_bytes: usize,
) -> Result<()> {
    if params.key_padding.is_some() {
        return Err(Error::Unsupported { what: "key-padding masks on the GPU".into() });
    }
    let attn = AttentionParams {
        mask: Mask { causal: false, key_padding: None },
        scale: params.scale,
        score: params.score,
        ..AttentionParams::default()
    };
    if params.noise_mode == NoiseMode::ConstantTime {
        return Err(Error::Unsupported {
            what: "NoiseMode::ConstantTime on the GPU (the constant-time sampler is CPU-only)"
                .into(),
        });
    }
    let exact = params.noise_mode == NoiseMode::Exact;
    if exact && dtype != AttnDtype::F32 {
        return Err(Error::Unsupported {
            what: format!(
                "the exact output-perturbation release of {dtype:?} inputs on the GPU (its \
                 noiseless attention runs in f64 from f32 inputs: convert them, or name \
                 NoiseMode::UnsafeFloat)"
            ),
        });
    }
    check_noisy_attention(dtype, &out, &q, &k, &v, &attn, None)?;
    let need =
        if exact { exact_workspace_len(k.shape, q.shape)? } else { workspace_len(dtype, k.shape)? };
    check_device_buffer("workspace", workspace, workspace_bytes, 16)?;
    if workspace_bytes < need {
        return Err(dpattn_core::Error::BufferTooShort {
            arg: "workspace",
            needed: need,
            got: workspace_bytes,
        }
        .into());
    }
    let [batch, heads, s_q, d] = q.shape;
    let s_k = k.shape[2];
    let qhost = read_queries(dev, stream.cuda(), dtype, &q)?;
    let qview = BatchedRef::new(&qhost, Layout4::new(q.shape, q.strides)?)?;
    let (calibrated, groups) = if exact {
        let f = GridFormat::F32;
        let c = output_perturbation_calibrate_exact(qview, params, s_k, d, &GPU_F64, f, sigma)?;
        let groups = (0..batch)
            .map(|b| {
                let g = output_perturbation_grid(qview, params, s_k, d, &GPU_F64, f, b)?;
                Ok(g.map_or_else(GridGroup::none, |g| GridGroup::gaussian(&g)))
            })
            .collect::<Result<Vec<_>>>()?;
        (c, groups)
    } else {
        (output_perturbation_calibrate(qview, params, s_k, sigma)?, Vec::new())
    };
    if let Some(ledger) = ledger {
        calibrated.charge(ledger)?;
    }
    let half = workspace_len(dtype, k.shape)? as u64 / 2;
    let kc = GpuTensor::contiguous(workspace, k.shape)?;
    let vc = GpuTensor::contiguous(workspace + half, v.shape)?;
    clamp(dev, stream.cuda(), dtype, &k, kc.ptr, params.key_norm)?;
    clamp(dev, stream.cuda(), dtype, &v, vc.ptr, params.value_norm)?;
    if exact {
        let noiseless = GpuTensor::contiguous(workspace + 2 * half, q.shape)?;
        let status = workspace + need as u64 - 16;
        // SAFETY: forwarded caller contract; kc and vc are the clamped f32 copies and
        // `noiseless` the f64 region of the workspace (exact_workspace_len), which overlaps
        // no operand.
        unsafe { attention_f64_raw(dev, stream, noiseless, q, kc, vc, &attn) }?;
        let layout = Layout4::new(out.shape, out.strides)?;
        let keyed = draw.keyed(0);
        let group_len = (heads * s_q * d) as u64;
        // SAFETY: `out` addresses `out.len` f32 on this device (caller contract, checked
        // shapes), `status` the workspace's last 16 bytes and `noiseless` one f64 per
        // logical output element, disjoint from `out`.
        return unsafe {
            grid_release_raw(
                dev,
                stream,
                out.ptr,
                out.len,
                FloatDtype::F32,
                layout,
                &groups,
                group_len,
                &keyed,
                0,
                status,
                noiseless.ptr,
            )
        };
    }
    let total = batch * heads;
    let noise = NoiseSpec {
        key: draw.key,
        output: Some(NoiseStream { stream: draw.stream, sigma: &sigma[..total] }),
        logits: None,
    };
    // SAFETY: forwarded caller contract; kc and vc are the clamped copies in the workspace.
    unsafe { noisy_attention_raw(dev, stream, dtype, out, q, kc, vc, &attn, Some(&noise)) }
}

/// Copies the public queries to the host as `f32` (their strided extent), waiting for the
/// stream.
fn read_queries(
    dev: &Device,
    stream: &Arc<CudaStream>,
    dtype: AttnDtype,
    q: &GpuTensor,
) -> Result<Vec<f32>> {
    let len = Layout4::new(q.shape, q.strides)?.required_len();
    let mut bytes = vec![0u8; len * dtype.size()];
    dev.bind()?;
    guarded(|| {
        // SAFETY: `q.ptr` addresses at least `len` elements (checked by the caller) on this
        // device; the copy is queued on `stream` after any work writing `q` and completes
        // before `synchronize` returns, while `bytes` is alive.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut bytes, q.ptr, stream.cu_stream()) }
            .map_err(driver("read queries"))?;
        stream.synchronize().map_err(driver("wait for the queries"))
    })?;
    Ok(match dtype {
        AttnDtype::F32 => {
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
        AttnDtype::Bf16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        AttnDtype::F16 => {
            bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
        }
    })
}

/// Queues the clamp of `src` into the contiguous copy at `dst`.
fn clamp(
    dev: &Device,
    stream: &Arc<CudaStream>,
    dtype: AttnDtype,
    src: &GpuTensor,
    dst: u64,
    bound: f64,
) -> Result<()> {
    let spec = KernelSpec::clamp_rows(dtype);
    let f = dev.function(&spec)?;
    let [b, h, s, d] = src.shape;
    let rows = (b * h * s) as u64;
    let (sb, sh, ss) = (src.strides[0] as u64, src.strides[1] as u64, src.strides[2] as u64);
    let (heads, seq, dim) = (h as u32, s as u32, d as u32);
    // One warp per row, 8 rows per 256-thread block; the shared cap (and the tests' grid cap)
    // make the warps stride over the rest.
    let blocks = grid_for(rows, CLAMP_THREADS / 32, dev.multiprocessors());
    dev.bind()?;
    guarded(|| {
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (CLAMP_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = stream.launch_builder(&f);
        l.arg(&src.ptr).arg(&sb).arg(&sh).arg(&ss).arg(&dst).arg(&heads).arg(&seq).arg(&dim);
        l.arg(&rows).arg(&bound);
        // SAFETY: the arguments match `dp_clamp_rows(u64 src, u64 sb, u64 sh, u64 ss, u64 dst,
        // u32 heads, u32 seq, u32 dim, u64 rows, double bound)`; the caller checked that `src`
        // covers its strided extent and that `dst` has rows·dim elements of the dtype in
        // the workspace; warps stride over rows below `rows` only.
        unsafe { l.launch(cfg) }.map_err(driver("launch dp_clamp_rows"))?;
        Ok(())
    })?;
    dev.check()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_and_variants() {
        assert_eq!(workspace_len(AttnDtype::F32, [1, 1, 3, 64]).unwrap(), 2 * 3 * 64 * 4);
        assert!(workspace_len(AttnDtype::F32, [usize::MAX, 2, 1, 1]).is_err());
        assert_eq!(variants().len(), 3);
    }
}
