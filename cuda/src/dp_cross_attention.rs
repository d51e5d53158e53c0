//! Output-perturbation DP cross-attention on the GPU (our extension `[EXT]`, the mechanism
//! of [`dpattn_core::output_perturbation`]) through the fused kernel of
//! [`crate::attention`].
//!
//! **Guarantee, neighbour relation** as on the CPU: public queries, a private context of
//! key/value rows clamped to the public norms `R_k`, `R_v`; neighbours differ in the key and
//! value rows of one position of one batch element (replace-one); adding `N(0, σ_b²)` to
//! every output element of batch element `b` makes the release `(ε, δ)`-DP. The
//! calibration is the CPU's own ([`output_perturbation_calibrate`], run on the host from a
//! copy of the **public** queries), so `σ` is the CPU's bit for bit; the noise is the CPU's
//! output draw element for element (`docs/RANDOMNESS.md` §5).
//!
//! **Clamping on the device** (`kernels/clamp_rows.cu`): each private key and value row is
//! scaled to norm `≤ R·(1 − 2⁻²¹)` in `f64` as on the CPU, then rounded once to the input
//! type — to nearest for `f32` (covered by the margin, as on the CPU) and **toward zero**
//! for bf16/f16, whose rounding the margin does not cover: so every row the kernel reads
//! has norm `≤ R`, which is what the sensitivity bound needs. Rows holding NaN or ±∞ are
//! clamped to zero, as on the CPU. The clamped copies live in the caller's workspace
//! ([`workspace_len`]).
//!
//! **Differences from the CPU**: no key-padding mask (refused); the attention runs in the
//! input precision (bf16/f16 tensor cores), which changes the output only by rounding, not
//! the privacy argument (the noise is calibrated to the exact-arithmetic sensitivity of
//! clamped rows, as on the CPU; see `docs/PRIVACY.md` §2 for the floating-point caveats).
//! The call **synchronises** `stream` once: `σ` depends on the queries, which are read back.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use dpattn_core::accounting::ledger::Ledger;
use dpattn_core::attention::AttentionParams;
use dpattn_core::noisy_attention::{NoiseSpec, NoiseStream};
use dpattn_core::output_perturbation::{OutputPerturbationParams, output_perturbation_calibrate};
use dpattn_core::sampling::NoiseKey;
use dpattn_core::{BatchedRef, Layout4, Mask};

use crate::attention::{AttnDtype, GpuTensor, check_noisy_attention, noisy_attention_raw};
use crate::device::Device;
use crate::error::{Error, Result, driver, guarded};
use crate::kernels::{KernelModule, KernelSpec};
use crate::launch::grid_for;
use crate::noise_fill::check_device_buffer;

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
/// use dpattn_cuda::dp_cross_attention::workspace_len;
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

/// Releases `out = attention(Q, clamp(K), clamp(V)) + N(0, σ_b²)` on the GPU: the CPU's
/// [`output_perturbation_attention`](dpattn_core::output_perturbation::output_perturbation_attention)
/// with the same calibration, noise elements (draw `(key, stream_id)`) and ledger charge.
/// `sigma` (`batch · heads` entries) receives the `σ` of each `(b, h)`.
///
/// Order: every argument is checked, the public queries are read back (the stream is
/// synchronised) and `σ` calibrated, the ledger is charged, then the clamp and the
/// attention are queued on `stream`; an error before the charge leaves `out` and the
/// ledger untouched.
///
/// # Safety
/// As [`noisy_attention_raw`], and `workspace` must address `workspace_bytes` writable
/// bytes on the device, not overlapping the operands.
///
/// # Errors
/// Those of [`noisy_attention_raw`] and the CPU function; [`Error::Unsupported`] for a
/// key-padding mask; [`Error::Core`] for a short or misaligned workspace.
#[allow(clippy::too_many_arguments)]
pub unsafe fn output_perturbation_attention_raw<const N: usize>(
    dev: &Device,
    stream: &Arc<CudaStream>,
    dtype: AttnDtype,
    out: GpuTensor,
    q: GpuTensor,
    k: GpuTensor,
    v: GpuTensor,
    params: &OutputPerturbationParams<'_>,
    key: &NoiseKey,
    stream_id: u64,
    ledger: Option<&mut Ledger<N>>,
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
    check_noisy_attention(dtype, &out, &q, &k, &v, &attn, None)?;
    let need = workspace_len(dtype, k.shape)?;
    check_device_buffer("workspace", workspace, workspace_bytes, 16)?;
    if workspace_bytes < need {
        return Err(dpattn_core::Error::BufferTooShort {
            arg: "workspace",
            needed: need,
            got: workspace_bytes,
        }
        .into());
    }
    let [batch, heads, _, _] = q.shape;
    let s_k = k.shape[2];
    let qhost = read_queries(dev, stream, dtype, &q)?;
    let qview = BatchedRef::new(&qhost, Layout4::new(q.shape, q.strides)?)?;
    let calibrated = output_perturbation_calibrate(qview, params, s_k, sigma)?;
    if let Some(ledger) = ledger {
        calibrated.charge(ledger)?;
    }
    let half = need as u64 / 2;
    let kc = GpuTensor::contiguous(workspace, k.shape)?;
    let vc = GpuTensor::contiguous(workspace + half, v.shape)?;
    clamp(dev, stream, dtype, &k, kc.ptr, params.key_norm)?;
    clamp(dev, stream, dtype, &v, vc.ptr, params.value_norm)?;
    let total = batch * heads;
    let noise = NoiseSpec {
        key,
        output: Some(NoiseStream { stream: stream_id, sigma: &sigma[..total] }),
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
