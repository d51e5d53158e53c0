//! Fused flash-style noisy attention on the GPU: the device counterpart of
//! [`dpattn_core::noisy_attention`], with Gaussian noise drawn in registers.
//!
//! **Guarantee.** *No privacy claim on its own* (as the CPU function): `σ` is the caller's
//! choice; the calibrated mechanism built on it is the GPU output-perturbation release. What it
//! guarantees is **addressable, replayable noise equal to the CPU's**: output element
//! `(b, h, i, c)` receives element `((b·heads + h)·s_q + i)·d + c` of the `f64` Gaussian draw
//! `(key, output.stream)`, logit `(b, h, i, j)` (already scaled) element
//! `((b·heads + h)·s_q + i)·s_k + j` of `(key, logits.stream)`, before the mask and the
//! score function (`docs/RANDOMNESS.md` §5). Each noise value is bit-identical to the
//! CPU's (the same ChaCha20 block and Box–Muller code, compiled with `--fmad=false`),
//! rounded once to `f32` and added in `f32`; the attention itself differs from the CPU by
//! floating-point rounding only (bf16/f16 inputs: `P` is rounded to the input type before
//! `P·V`, as in FlashAttention). Neighbour relation and paper section: none (a building
//! block; the issue's GPU form of the CPU noisy attention).
//!
//! **Kernels.** bf16 and f16 inputs run on tensor cores (inline PTX `ldmatrix` and
//! `mma.sync.m16n8k16`, `f32` accumulation, online softmax, FlashAttention-2 structure;
//! `kernels/flash_attention.cu`); `f32` inputs on the CUDA cores with explicit `fma`
//! (`kernels/flash_attention_f32.cu`). Head dimension 64 or 128, the same for queries,
//! keys and values; batched `[batch, heads, seq, dim]` with element strides; self- and
//! cross-attention (`s_q ≠ s_k`); causal (bottom-right aligned, as on the CPU) or not;
//! scale and score function (`exp`, `cosh`) as on the CPU. Needs sm_80 or newer.
//!
//! **Not supported** (errors, never a silent fallback): key-padding masks, other head
//! dimensions, `d_v ≠ d`, misaligned operands (pointers must be 16-byte aligned and the
//! batch/head/sequence strides multiples of 16 bytes). **Non-finite inputs** are not
//! scanned on the device (that would cost a pass over `K` and `V`): a NaN or ±∞ in an
//! operand makes the rows it reaches NaN.
//!
//! ```no_run
//! use dpattn_core::attention::AttentionParams;
//! use dpattn_core::noisy_attention::{NoiseSpec, NoiseStream};
//! use dpattn_core::sampling::NoiseKey;
//! use dpattn_cuda::attention::{AttnDtype, GpuTensor, noisy_attention_raw};
//! use dpattn_cuda::Device;
//! let dev = Device::get(0)?;
//! let stream = dev.new_stream()?;
//! let (b, h, s, d) = (2, 8, 1000, 64);
//! let n = b * h * s * d;
//! let q = stream.alloc_zeros::<u16>(n)?;
//! let mut out = stream.alloc_zeros::<u16>(n)?;
//! let (qp, _g1) = q.device_ptr(&stream);
//! let (op, _g2) = out.device_ptr_mut(&stream);
//! let t = |ptr| GpuTensor::contiguous(ptr, [b, h, s, d]);
//! let key = NoiseKey::generate()?;
//! let noise = NoiseSpec { key: &key, output: Some(NoiseStream { stream: 1, sigma: &[0.1] }), logits: None };
//! // SAFETY: the four tensors describe live buffers of `n` bf16 values on this device.
//! unsafe { noisy_attention_raw(&dev, &stream, AttnDtype::Bf16, t(op)?, t(qp)?, t(qp)?, t(qp)?,
//!     &AttentionParams::default(), Some(&noise))? };
//! # Ok::<(), dpattn_cuda::Error>(())
//! ```

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use dpattn_core::attention::AttentionParams;
use dpattn_core::noisy_attention::{NoiseSpec, NoiseStream};
use dpattn_core::sampling::KeyedStream;
use dpattn_core::{Error as CoreError, Layout4, ScoreFn};

use crate::device::Device;
use crate::error::{Error, Result, driver, guarded};
use crate::kernels::{KernelModule, KernelSpec};
use crate::memory::Stream;
use crate::noise_fill::{check_device_buffer, in_context};

mod image;
pub use image::{LaunchImage, launch_image};

/// Threads per block of both kernels.
const THREADS: u32 = 128;

/// Input (and output) element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttnDtype {
    /// bfloat16 (tensor cores, `f32` accumulation).
    Bf16,
    /// IEEE binary16 (tensor cores, `f32` accumulation).
    F16,
    /// IEEE binary32 (CUDA cores).
    F32,
}

impl AttnDtype {
    /// Every type, in `DP_ATT` order.
    pub const ALL: [AttnDtype; 3] = [AttnDtype::Bf16, AttnDtype::F16, AttnDtype::F32];

    /// `DP_ATT` in attention_common.cuh.
    fn code(self) -> i32 {
        self as i32
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            AttnDtype::F32 => 4,
            _ => 2,
        }
    }

    /// Query rows per block.
    fn block_rows(self) -> usize {
        if self == AttnDtype::F32 { 32 } else { 64 }
    }

    /// Dynamic shared memory of the kernel for head dimension `d`: Q, K, V tiles of
    /// 64 rows (16-bit) or K, V tiles of 32 rows (`f32`).
    fn shared_bytes(self, d: usize) -> u32 {
        let bytes = if self == AttnDtype::F32 { 2 * 32 * d * 4 } else { 3 * 64 * d * 2 };
        bytes as u32
    }
}

impl KernelSpec {
    /// The fused attention kernel for an input type and head dimension (64 or 128).
    pub fn flash_attention(dtype: AttnDtype, d: usize) -> Self {
        let (module, entry) = match dtype {
            AttnDtype::F32 => (KernelModule::FlashAttentionF32, "dp_flash_attention_f32"),
            _ => (KernelModule::FlashAttention, "dp_flash_attention"),
        };
        KernelSpec {
            module,
            defines: vec![("DP_ATT", dtype.code()), ("DP_D", d as i32)],
            entry,
            // The noise's Box–Muller must round as the CPU does; the kernels use explicit
            // fmaf where they want a fused multiply-add.
            fmad: false,
        }
    }
}

impl KernelSpec {
    /// The `f64` variant of the `f32` kernel (f32 inputs, f64 arithmetic and output, no
    /// noise): the noiseless attention of the exact output-perturbation release.
    pub fn flash_attention_f64(d: usize) -> Self {
        let mut spec = Self::flash_attention(AttnDtype::F32, d);
        spec.defines.push(("DP_F64", 1));
        spec
    }
}

/// The head dimensions the kernels are built for.
pub const HEAD_DIMS: [usize; 2] = [64, 128];

pub(crate) fn variants() -> Vec<KernelSpec> {
    let mut v: Vec<KernelSpec> = AttnDtype::ALL
        .iter()
        .flat_map(|&t| HEAD_DIMS.iter().map(move |&d| KernelSpec::flash_attention(t, d)))
        .collect();
    v.extend(HEAD_DIMS.iter().map(|&d| KernelSpec::flash_attention_f64(d)));
    v
}

/// A `[batch, heads, seq, dim]` tensor in device memory: pointer, elements available at
/// it, shape and strides in elements (`strides[3]` must be 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuTensor {
    /// Device address of element `(0, 0, 0, 0)`.
    pub ptr: u64,
    /// Elements available at `ptr`.
    pub len: usize,
    /// `[batch, heads, seq, dim]`.
    pub shape: [usize; 4],
    /// Element strides per axis.
    pub strides: [usize; 4],
}

impl GpuTensor {
    /// A densely packed tensor of `shape` at `ptr`.
    ///
    /// ```
    /// let t = dpattn_cuda::attention::GpuTensor::contiguous(0x1000, [2, 3, 4, 64])?;
    /// assert_eq!((t.len, t.strides), (2 * 3 * 4 * 64, [3 * 4 * 64, 4 * 64, 64, 1]));
    /// # Ok::<(), dpattn_cuda::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Core`] when the element count overflows.
    pub fn contiguous(ptr: u64, shape: [usize; 4]) -> Result<Self> {
        let l = Layout4::contiguous(shape)?;
        Ok(GpuTensor { ptr, len: l.numel(), shape, strides: l.strides() })
    }

    /// The layout, with errors that name the tensor (`arg`: `q`, `k`, `v` or `out`).
    fn layout(&self, arg: &'static str) -> Result<Layout4> {
        use CoreError as E;
        let (stride, count) = match arg {
            "q" => ("q.strides[3] (the feature stride)", "q: element count"),
            "k" => ("k.strides[3] (the feature stride)", "k: element count"),
            "v" => ("v.strides[3] (the feature stride)", "v: element count"),
            _ => ("out.strides[3] (the feature stride)", "out: element count"),
        };
        Layout4::new(self.shape, self.strides).map_err(|e| {
            match e {
                E::OutOfRange { value, allowed, .. } => {
                    E::OutOfRange { name: stride, value, allowed }
                }
                E::SizeOverflow { .. } => E::SizeOverflow { what: count },
                other => other,
            }
            .into()
        })
    }

    /// Bytes from `ptr` to one past the last addressed element.
    fn span_bytes(&self, arg: &'static str, size: usize) -> Result<u64> {
        Ok((self.layout(arg)?.required_len() as u64) * size as u64)
    }
}

/// One operand as the kernel reads it (`struct DpOperand`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Operand {
    ptr: u64,
    sb: u64,
    sh: u64,
    ss: u64,
}

/// The kernel parameters, field for field `struct DpAttnParams` of attention_common.cuh.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct AttnLaunch {
    q: Operand,
    k: Operand,
    v: Operand,
    out: Operand,
    out_stream: u64,
    logit_stream: u64,
    out_sigma_ptr: u64,
    logit_sigma_ptr: u64,
    out_sigma: f64,
    logit_sigma: f64,
    scale_f64: f64,
    key: [u32; 8],
    batch: u32,
    heads: u32,
    s_q: u32,
    s_k: u32,
    scale: f32,
    causal: u32,
    score: u32,
    out_sigma_mode: u32,
    logit_sigma_mode: u32,
    pad: u32,
}

// SAFETY: `AttnLaunch` is `repr(C)` with the fields, types and order of `struct DpAttnParams`
// (8-byte fields first, then 4-byte fields, no implicit padding before `pad`); it holds device
// addresses as plain integers and no host pointers.
unsafe impl DeviceRepr for AttnLaunch {}

const SIGMA_NONE: u32 = 0;
const SIGMA_UNIFORM: u32 = 1;
const SIGMA_HEADS: u32 = 2;
const SIGMA_BATCH: u32 = 3;

/// How one draw's `σ` reaches the kernel: nothing, one value, or a device table uploaded
/// for the launch (`(mode, uniform value, table)`).
fn sigma_plan(
    s: Option<&NoiseStream<'_>>,
    batch: usize,
    heads: usize,
) -> Result<(u32, f64, Option<Vec<f64>>)> {
    let Some(s) = s else { return Ok((SIGMA_NONE, 0.0, None)) };
    let n = s.sigma.len();
    if n != heads && n != batch * heads {
        return Err(CoreError::ShapeMismatch {
            arg: "sigma",
            axis: "length (heads or batch * heads)",
            expected: heads,
            got: n,
        }
        .into());
    }
    if let Some(&bad) = s.sigma.iter().find(|x| !(x.is_finite() && **x >= 0.0)) {
        return Err(CoreError::OutOfRange { name: "sigma", value: bad, allowed: "[0, inf)" }.into());
    }
    let first = s.sigma[0];
    if s.sigma.iter().all(|&x| x == first) {
        let mode = if first == 0.0 { SIGMA_NONE } else { SIGMA_UNIFORM };
        return Ok((mode, first, None));
    }
    let mode = if n == heads { SIGMA_HEADS } else { SIGMA_BATCH };
    Ok((mode, 0.0, Some(s.sigma.to_vec())))
}

/// The σ tables a launch uploads (output draw, logit draw), for draws whose σ differs
/// between heads.
type SigmaTables = [Option<Vec<f64>>; 2];

/// Everything [`noisy_attention_raw`] checks before the device is touched; returns the
/// launch parameters (without the device σ table addresses), the head dimension and the σ
/// tables to upload.
fn plan(
    dtype: AttnDtype,
    out: &GpuTensor,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    params: &AttentionParams<'_>,
    noise: Option<&NoiseSpec<'_>>,
) -> Result<(AttnLaunch, usize, SigmaTables)> {
    use CoreError as E;
    let [batch, heads, s_q, d] = q.shape;
    let s_k = k.shape[2];
    for (name, value) in [("batch", batch), ("heads", heads), ("s_q", s_q), ("s_k", s_k)] {
        if value == 0 {
            return Err(E::OutOfRange { name, value: 0.0, allowed: ">= 1" }.into());
        }
    }
    if !HEAD_DIMS.contains(&d) {
        return Err(Error::Unsupported {
            what: format!("head dimension {d} on the GPU (built for 64 and 128)"),
        });
    }
    let expect = |arg: &'static str, t: &GpuTensor, want: [usize; 4]| -> Result<()> {
        let l = t.layout(arg)?;
        for (axis, &w) in want.iter().enumerate() {
            l.expect_axis(arg, axis, w)?;
        }
        Ok(())
    };
    expect("k", k, [batch, heads, s_k, d])?;
    expect("v", v, [batch, heads, s_k, d])?;
    expect("out", out, [batch, heads, s_q, d])?;
    let size = dtype.size();
    for (arg, t) in [("q", q), ("k", k), ("v", v), ("out", out)] {
        check_device_buffer(arg, t.ptr, t.len, size)?;
        let l = t.layout(arg)?;
        if l.required_len() > t.len {
            return Err(E::BufferTooShort { arg, needed: l.required_len(), got: t.len }.into());
        }
        let per16 = 16 / size;
        if !t.ptr.is_multiple_of(16) || t.strides[..3].iter().any(|s| !s.is_multiple_of(per16)) {
            return Err(Error::Unsupported {
                what: format!(
                    "{arg}: the GPU kernels need 16-byte aligned rows (pointer and batch, head and \
                     sequence strides multiples of {per16} elements)"
                ),
            });
        }
    }
    if !out.layout("out")?.is_non_overlapping() {
        return Err(E::OutOfRange {
            name: "out strides",
            value: 0.0,
            allowed: "a layout whose elements do not overlap",
        }
        .into());
    }
    let out_span = (out.ptr, out.ptr.saturating_add(out.span_bytes("out", size)?));
    for (arg, t) in [("q", q), ("k", k), ("v", v)] {
        let span = (t.ptr, t.ptr.saturating_add(t.span_bytes(arg, size)?));
        if span.0 < out_span.1 && out_span.0 < span.1 {
            return Err(E::OutOfRange {
                name: arg,
                value: t.ptr as f64,
                allowed: "memory that does not overlap out",
            }
            .into());
        }
    }
    if params.mask.key_padding.is_some() {
        return Err(Error::Unsupported { what: "key-padding masks on the GPU".into() });
    }
    let fits_u32 = |x: usize| x < (1usize << 31);
    let grid_y = s_q.div_ceil(dtype.block_rows());
    if !fits_u32(batch * heads) || !fits_u32(s_q) || !fits_u32(s_k) || grid_y > 65_535 {
        return Err(Error::Unsupported {
            what: format!(
                "shape [{batch}, {heads}, {s_q}/{s_k}, {d}] on the GPU (batch·heads and sequence \
                 lengths below 2^31, at most 65535 query blocks)"
            ),
        });
    }
    // Noise element indices must fit in u64 with room for the last block (as on the CPU).
    let elements = |cols: usize| {
        (batch as u64)
            .checked_mul(heads as u64)
            .and_then(|x| x.checked_mul(s_q as u64))
            .and_then(|x| x.checked_mul(cols as u64))
            .and_then(|x| x.checked_add(16))
            .ok_or(E::SizeOverflow { what: "noise element index" })
    };
    elements(d)?;
    elements(s_k)?;
    let scale_f64 = params.scale.value(d)?;
    let scale = scale_f64 as f32;
    let mut launch = AttnLaunch {
        q: operand(q),
        k: operand(k),
        v: operand(v),
        out: operand(out),
        batch: batch as u32,
        heads: heads as u32,
        s_q: s_q as u32,
        s_k: s_k as u32,
        scale,
        scale_f64,
        causal: params.mask.causal as u32,
        score: match params.score {
            ScoreFn::Exp => 0,
            ScoreFn::Cosh => 1,
        },
        ..AttnLaunch::default()
    };
    let mut tables = [None, None];
    if let Some(n) = noise {
        if let (Some(o), Some(l)) = (n.output, n.logits)
            && o.stream == l.stream
        {
            return Err(E::OutOfRange {
                name: "logit noise stream id",
                value: l.stream as f64,
                allowed: "any u64 other than the output noise stream id",
            }
            .into());
        }
        launch.key = KeyedStream::new(n.key, 0).key_words();
        let (mode, value, table) = sigma_plan(n.output.as_ref(), batch, heads)?;
        tables[0] = table;
        launch.out_sigma_mode = mode;
        launch.out_sigma = value;
        launch.out_stream = n.output.map_or(0, |o| o.stream);
        let (mode, value, table) = sigma_plan(n.logits.as_ref(), batch, heads)?;
        tables[1] = table;
        launch.logit_sigma_mode = mode;
        launch.logit_sigma = value;
        launch.logit_stream = n.logits.map_or(0, |l| l.stream);
    }
    Ok((launch, d, tables))
}

/// Checks every argument of [`noisy_attention_raw`] that can be checked without the
/// device (shapes, head dimension, alignment, buffer lengths, overlap, mask, scale, noise),
/// so a caller (the C ABI) reports argument errors the same way on machines without a GPU.
///
/// ```
/// use dpattn_core::attention::AttentionParams;
/// use dpattn_cuda::attention::{AttnDtype, GpuTensor, check_noisy_attention};
/// let t = |ptr| GpuTensor::contiguous(ptr, [1, 2, 100, 96]);
/// let (q, o) = (t(0x10000)?, t(0x80000)?);
/// let e = check_noisy_attention(AttnDtype::Bf16, &o, &q, &q, &q, &AttentionParams::default(), None);
/// assert!(e.unwrap_err().to_string().contains("head dimension 96"));
/// # Ok::<(), dpattn_cuda::Error>(())
/// ```
///
/// # Errors
/// As [`noisy_attention_raw`], except for device, launch and compile errors.
pub fn check_noisy_attention(
    dtype: AttnDtype,
    out: &GpuTensor,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    params: &AttentionParams<'_>,
    noise: Option<&NoiseSpec<'_>>,
) -> Result<()> {
    plan(dtype, out, q, k, v, params, noise).map(|_| ())
}

fn operand(t: &GpuTensor) -> Operand {
    Operand {
        ptr: t.ptr,
        sb: t.strides[0] as u64,
        sh: t.strides[1] as u64,
        ss: t.strides[2] as u64,
    }
}

/// Noisy attention on caller-owned device memory, queued on `stream` (asynchronous):
/// `out = D⁻¹ f(scale·Q·Kᵀ + logit noise) V + output noise` for every `(b, h)`, noise as in
/// the [module documentation](self). `noise = None` (or `σ = 0` everywhere) is plain
/// attention. A `σ` that differs between heads is uploaded for the launch (a stream-ordered
/// allocation freed after it); otherwise nothing is allocated, freed or synchronised.
///
/// # Safety
/// Each tensor must describe device memory of this device's primary context holding `len`
/// elements of `dtype` (inputs readable, `out` writable), valid until the queued work
/// completes, with `out` not accessed concurrently by other streams.
///
/// # Errors
/// [`Error::Core`] for shapes, zero sizes, null or misaligned pointers, short buffers,
/// overlapping `out`, a bad `σ` or scale, equal stream ids, or noise indices past `u64`;
/// [`Error::Unsupported`] for what the module lists; launch and compile errors.
#[allow(clippy::too_many_arguments)]
pub unsafe fn noisy_attention_raw(
    dev: &Device,
    stream: &Stream,
    dtype: AttnDtype,
    out: GpuTensor,
    q: GpuTensor,
    k: GpuTensor,
    v: GpuTensor,
    params: &AttentionParams<'_>,
    noise: Option<&NoiseSpec<'_>>,
) -> Result<()> {
    let image = launch_image(dtype, &out, &q, &k, &v, params, noise)?;
    // SAFETY: forwarded caller contract; the image was planned from these tensors.
    unsafe { launch(dev, stream.cuda(), &image) }
}

/// The noiseless attention of `f32` inputs computed in `f64` and written to the `f64`
/// tensor `out` (the kernel's `DP_F64` variant): what the exact output-perturbation release
/// ([`crate::output_perturbation`]) rounds to its grid. Its computation error is bounded by
/// [`GPU_F64`](crate::output_perturbation::GPU_F64). Queued on `stream`, nothing allocated.
///
/// # Safety
/// As [`noisy_attention_raw`], with `q`, `k`, `v` holding `f32` and `out` holding `len`
/// `f64` elements.
///
/// # Errors
/// As [`noisy_attention_raw`] for `f32` inputs, and `out` overlapping an input (its `f64`
/// extent) or not 8-byte aligned.
pub unsafe fn attention_f64_raw(
    dev: &Device,
    stream: &Stream,
    out: GpuTensor,
    q: GpuTensor,
    k: GpuTensor,
    v: GpuTensor,
    params: &AttentionParams<'_>,
) -> Result<()> {
    // The f32 plan checks shapes, strides, lengths and the inputs; the f64 output's own
    // extent and alignment are checked here.
    let mut image = launch_image(AttnDtype::F32, &out, &q, &k, &v, params, None)?;
    check_device_buffer("out", out.ptr, out.len, 8)?;
    let out_span = (out.ptr, out.ptr.saturating_add(out.span_bytes("out", 8)?));
    for (arg, t) in [("q", &q), ("k", &k), ("v", &v)] {
        let span = (t.ptr, t.ptr.saturating_add(t.span_bytes(arg, 4)?));
        if span.0 < out_span.1 && out_span.0 < span.1 {
            return Err(CoreError::OutOfRange {
                name: arg,
                value: t.ptr as f64,
                allowed: "memory that does not overlap out",
            }
            .into());
        }
    }
    image.spec = KernelSpec::flash_attention_f64(q.shape[3]);
    // SAFETY: forwarded caller contract; the image was planned from these tensors.
    unsafe { launch(dev, stream.cuda(), &image) }
}

/// Queues one planned launch of a fused attention kernel.
///
/// # Safety
/// The tensors the image was planned from satisfy [`noisy_attention_raw`]'s contract.
unsafe fn launch(dev: &Device, stream: &Arc<CudaStream>, image: &LaunchImage) -> Result<()> {
    in_context("a stream", stream, dev)?;
    if dev.arch() < 80 {
        return Err(Error::Unsupported {
            what: format!("fused attention on sm_{} (needs sm_80 or newer)", dev.arch()),
        });
    }
    let f = dev.function(&image.spec)?;
    dev.bind()?;
    guarded(|| {
        // σ tables that differ between heads travel for this launch only; dropping them
        // after the launch frees them in stream order.
        let mut uploaded = Vec::new();
        let mut sigma_ptrs = [0u64; 2];
        for (table, ptr) in image.sigma_tables.iter().zip(&mut sigma_ptrs) {
            if let Some(t) = table {
                let buf = stream.clone_htod(t).map_err(driver("upload sigma"))?;
                *ptr = {
                    use cudarc::driver::DevicePtr;
                    let (p, _g) = buf.device_ptr(stream);
                    p
                };
                uploaded.push(buf);
            }
        }
        let launch = image.with_sigma_ptrs(sigma_ptrs);
        let cfg = LaunchConfig {
            grid_dim: image.grid,
            block_dim: (image.threads, 1, 1),
            shared_mem_bytes: image.shared_bytes,
        };
        let mut b = stream.launch_builder(&f);
        b.arg(&launch);
        // SAFETY: the single argument is `DpAttnParams` by value (layout mirrored by
        // `AttnLaunch`). `plan` checked every operand: shapes agree, `len` covers the
        // strided extent, pointers and row strides are 16-byte aligned (cp.async and the
        // 16-byte stores), `out` does not overlap the inputs (for the f64 variant its f64
        // extent, checked by `attention_f64_raw`); the kernel reads q, k, v
        // rows below s_q / s_k only, writes out rows below s_q only, and reads the σ
        // tables (heads or batch·heads doubles) uploaded just above. The grid is
        // (batch·heads, ⌈s_q / rows per block⌉) with both extents in range.
        unsafe { b.launch(cfg) }.map_err(driver(format!("launch {}", image.spec.label())))?;
        drop(uploaded);
        Ok(())
    })?;
    dev.check()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpattn_core::sampling::NoiseKey;
    use dpattn_core::{Mask, Scale};

    fn t(ptr: u64, shape: [usize; 4]) -> GpuTensor {
        GpuTensor::contiguous(ptr, shape).unwrap()
    }

    fn plan_of(
        dtype: AttnDtype,
        qs: [usize; 4],
        s_k: usize,
        params: &AttentionParams<'_>,
        noise: Option<&NoiseSpec<'_>>,
    ) -> Result<(AttnLaunch, usize, SigmaTables)> {
        let [b, h, s, d] = qs;
        let n = |s: usize| (b * h * s * d * dtype.size()) as u64;
        let q = t(0x1_0000_0000, qs);
        let k = t(q.ptr + n(s), [b, h, s_k, d]);
        let v = t(k.ptr + n(s_k), [b, h, s_k, d]);
        let out = t(v.ptr + n(s_k), qs);
        plan(dtype, &out, &q, &k, &v, params, noise)
    }

    #[test]
    fn launch_struct_matches_the_cuda_layout() {
        // 4 operands of 32 bytes, 4 u64, 3 f64, the key, then 10 four-byte fields: the
        // offsets C gives `struct DpAttnParams` (no padding anywhere).
        assert_eq!(size_of::<AttnLaunch>(), 4 * 32 + 4 * 8 + 3 * 8 + 32 + 10 * 4);
        assert_eq!(std::mem::offset_of!(AttnLaunch, out_stream), 128);
        assert_eq!(std::mem::offset_of!(AttnLaunch, scale_f64), 176);
        assert_eq!(std::mem::offset_of!(AttnLaunch, key), 184);
        assert_eq!(std::mem::offset_of!(AttnLaunch, batch), 216);
        assert_eq!(std::mem::offset_of!(AttnLaunch, scale), 232);
        assert_eq!(std::mem::offset_of!(AttnLaunch, pad), 252);
    }

    #[test]
    fn valid_shapes_plan_the_launch() {
        let p = AttentionParams::default();
        let (l, d, _) = plan_of(AttnDtype::Bf16, [2, 3, 100, 128], 77, &p, None).unwrap();
        assert_eq!((d, l.batch, l.heads, l.s_q, l.s_k), (128, 2, 3, 100, 77));
        assert_eq!(l.scale, (1.0 / 128f64.sqrt()) as f32);
        assert_eq!((l.out_sigma_mode, l.logit_sigma_mode), (SIGMA_NONE, SIGMA_NONE));
        let causal = AttentionParams {
            mask: Mask { causal: true, key_padding: None },
            scale: Scale::Custom(0.5),
            score: ScoreFn::Cosh,
            ..AttentionParams::default()
        };
        let (l, _, _) = plan_of(AttnDtype::F32, [1, 1, 5, 64], 9, &causal, None).unwrap();
        assert_eq!((l.causal, l.score, l.scale), (1, 1, 0.5));
    }

    #[test]
    fn unsupported_shapes_and_layouts_are_refused() {
        let p = AttentionParams::default();
        for d in [32, 96, 256] {
            let e = plan_of(AttnDtype::F16, [1, 1, 8, d], 8, &p, None).unwrap_err();
            assert!(e.to_string().contains("head dimension"), "{e}");
        }
        assert!(plan_of(AttnDtype::F16, [0, 1, 8, 64], 8, &p, None).is_err());
        assert!(plan_of(AttnDtype::F16, [1, 1, 8, 64], 0, &p, None).is_err());
        let pad = [true; 8];
        let masked = AttentionParams {
            mask: Mask { causal: false, key_padding: Some(&pad) },
            ..AttentionParams::default()
        };
        let e = plan_of(AttnDtype::Bf16, [1, 1, 8, 64], 8, &masked, None).unwrap_err();
        assert!(e.to_string().contains("key-padding"), "{e}");
        // Misaligned row stride (a sequence stride of 68 bf16 = 136 bytes).
        let q = GpuTensor {
            ptr: 0x1000,
            len: 8 * 68,
            shape: [1, 1, 8, 64],
            strides: [544, 544, 68, 1],
        };
        let o = t(0x10_0000, [1, 1, 8, 64]);
        let e = plan(AttnDtype::Bf16, &o, &q, &q, &q, &p, None).unwrap_err();
        assert!(e.to_string().contains("16-byte"), "{e}");
        // out overlapping an input, and a short buffer.
        let a = t(0x1000, [1, 1, 8, 64]);
        assert!(plan(AttnDtype::Bf16, &a, &a, &a, &a, &p, None).is_err());
        let short = GpuTensor { len: 8 * 64 - 1, ..a };
        assert!(plan(AttnDtype::Bf16, &o, &short, &a, &a, &p, None).is_err());
        // Mismatched key and value shapes.
        let k = t(0x20_0000, [1, 1, 9, 64]);
        assert!(plan(AttnDtype::Bf16, &o, &a, &k, &a, &p, None).is_err());
    }

    #[test]
    fn noise_sigma_is_validated_and_planned() {
        let key = NoiseKey::for_replay([5; 32]);
        let p = AttentionParams::default();
        let spec = |o: &'static [f64], l: Option<&'static [f64]>, ls: u64| NoiseSpec {
            key: &key,
            output: Some(NoiseStream { stream: 1, sigma: o }),
            logits: l.map(|sigma| NoiseStream { stream: ls, sigma }),
        };
        let shape = [2, 3, 8, 64];
        let (l, _, tables) =
            plan_of(AttnDtype::Bf16, shape, 8, &p, Some(&spec(&[0.5; 3], None, 2))).unwrap();
        assert_eq!((l.out_sigma_mode, l.out_sigma, l.out_stream), (SIGMA_UNIFORM, 0.5, 1));
        assert_eq!(tables, [None, None], "a uniform σ needs no table");
        assert_eq!(l.key, KeyedStream::new(&key, 0).key_words());
        let (l, _, tables) = plan_of(
            AttnDtype::Bf16,
            shape,
            8,
            &p,
            Some(&spec(&[0.0; 6], Some(&[0.1, 0.2, 0.3]), 4)),
        )
        .unwrap();
        assert_eq!(
            (l.out_sigma_mode, l.logit_sigma_mode, l.logit_stream),
            (SIGMA_NONE, SIGMA_HEADS, 4)
        );
        assert_eq!(tables, [None, Some(vec![0.1, 0.2, 0.3])]);
        for bad in [&[0.5, 0.5][..], &[-1.0, 0.0, 0.0], &[f64::NAN, 0.0, 0.0]] {
            let s = NoiseSpec {
                key: &key,
                output: Some(NoiseStream { stream: 1, sigma: bad }),
                logits: None,
            };
            assert!(plan_of(AttnDtype::Bf16, shape, 8, &p, Some(&s)).is_err());
        }
        let same = spec(&[0.5; 3], Some(&[0.5; 3]), 1);
        let e = plan_of(AttnDtype::Bf16, shape, 8, &p, Some(&same)).unwrap_err();
        assert!(e.to_string().contains("stream"), "{e}");
        let (m, _, t) = sigma_plan(Some(&NoiseStream { stream: 0, sigma: &[1.0; 5] }), 2, 3)
            .map(|x| (x.0, x.1, x.2))
            .unwrap_or((9, 0.0, None));
        assert_eq!((m, t), (9, None), "5 entries fit neither heads nor batch·heads");
        let (m, _, t) = sigma_plan(
            Some(&NoiseStream { stream: 0, sigma: &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0] }),
            2,
            3,
        )
        .unwrap();
        assert_eq!((m, t.map(|v| v.len())), (SIGMA_BATCH, Some(6)));
    }

    #[test]
    fn every_dtype_and_head_dim_is_a_variant() {
        let v = variants();
        assert_eq!(v.len(), 8); // three dtypes and the f64 variant, two head dimensions each
        assert!(v.iter().all(|s| !s.fmad));
        assert_eq!(KernelSpec::flash_attention(AttnDtype::F32, 64).entry, "dp_flash_attention_f32");
        let f64v = KernelSpec::flash_attention_f64(128);
        assert_eq!(
            (f64v.entry, f64v.module),
            ("dp_flash_attention_f32", KernelModule::FlashAttentionF32)
        );
        assert!(f64v.defines.contains(&("DP_F64", 1)) && f64v.defines.contains(&("DP_D", 128)));
        assert_eq!(AttnDtype::Bf16.shared_bytes(128), 48 * 1024);
        assert_eq!(AttnDtype::F32.shared_bytes(128), 32 * 1024);
    }
}
