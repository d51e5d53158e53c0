//! GPU entry points over `dpattn-cuda`: keyed noise and raw ChaCha20 words into device
//! buffers, and clip-rows-then-Gaussian in place, on device pointers and a `CUstream` owned
//! by the caller (a C++ engine, PyTorch's current stream).
//!
//! * Device memory and the stream belong to the caller: nothing is allocated, freed,
//!   synchronised or destroyed here. The work is queued on the caller's stream (NULL = the
//!   legacy default stream) and `DPATTN_STATUS_OK` means *queued*: read the results after
//!   the stream reaches it.
//! * Every host-side argument (NULL key, unknown codes, sampler parameters, lengths,
//!   shapes, pointer alignment) is checked before the device is touched, so those errors are
//!   the same on a machine without a GPU. Only then is the device opened:
//!   `DPATTN_STATUS_CUDA_UNAVAILABLE` when there is no driver, no NVRTC, no device or not
//!   the device asked for.
//! * The library links no CUDA library: the driver and NVRTC are loaded at run time
//!   (`dpattn-cuda`'s dynamic loading), so the same `libdpattn_ffi` runs on machines with
//!   and without a GPU.
//! * The calling thread's current CUDA context is left as it was: the device's primary
//!   context (the one the CUDA runtime and PyTorch use) is made current for the call and the
//!   previous one restored on return ([`Device::make_current`]).

use std::ffi::c_void;

use dpattn_core::Error as CoreError;
use dpattn_core::sampling::{Exponential, Gaussian, KeyedStream, Laplace};
use dpattn_cuda::launch::{FillPlan, RowsPlan};
use dpattn_cuda::{
    Availability, ClipRowsParams, Device, FloatDtype, GpuNoise, GpuSampler, GridGroup, OutDtype,
    Stream, UniformBits,
};

use dpattn_core::noisy_attention::NoiseSpec;
use dpattn_cuda::attention::{AttnDtype, GpuTensor, check_noisy_attention, noisy_attention_raw};

use crate::args::{Buffers, Out, read};
use crate::attention::{decode_options, dpattn_attention_options, read_tensors};
use crate::boundary::{FfiError, ffi_status, unknown};
use crate::noisy_attention::{decode_spec, dpattn_noise_spec};
use crate::status::dpattn_status;
use crate::tensor::{
    DPATTN_DTYPE_BF16, DPATTN_DTYPE_F16, DPATTN_DTYPE_F32, DPATTN_DTYPE_F64, Dtype, dpattn_dtype,
    dpattn_key, dpattn_tensor4, dpattn_tensor4_mut,
};

/// `dpattn_cuda_fill_noise` sampler: uniform variates in `(0, 1]` (`param` is ignored).
pub const DPATTN_CUDA_SAMPLER_UNIFORM: u32 = 0;
/// `dpattn_cuda_fill_noise` sampler: Gaussian `N(0, param²)` (Box–Muller); `param` is σ.
pub const DPATTN_CUDA_SAMPLER_GAUSSIAN: u32 = 1;
/// `dpattn_cuda_fill_noise` sampler: Laplace of scale `param`.
pub const DPATTN_CUDA_SAMPLER_LAPLACE: u32 = 2;
/// `dpattn_cuda_fill_noise` sampler: exponential of rate `param` (mean `1/param`).
pub const DPATTN_CUDA_SAMPLER_EXPONENTIAL: u32 = 3;

const SAMPLERS: &str = "DPATTN_CUDA_SAMPLER_UNIFORM (0), _GAUSSIAN (1), _LAPLACE (2), \
                        _EXPONENTIAL (3)";
const CLIP_DTYPES: &str = "DPATTN_DTYPE_F32 (0) or DPATTN_DTYPE_F64 (1) (the GPU clip kernel \
                           has no F16/BF16 variant)";

fn ordinal(device: i32) -> Result<usize, FfiError> {
    usize::try_from(device).map_err(|_| {
        CoreError::OutOfRange {
            name: "device",
            value: f64::from(device),
            allowed: "a CUDA device ordinal >= 0",
        }
        .into()
    })
}

fn decode_sampler(code: u32) -> Result<GpuSampler, FfiError> {
    match code {
        DPATTN_CUDA_SAMPLER_UNIFORM => Ok(GpuSampler::Uniform),
        DPATTN_CUDA_SAMPLER_GAUSSIAN => Ok(GpuSampler::Gaussian),
        DPATTN_CUDA_SAMPLER_LAPLACE => Ok(GpuSampler::Laplace),
        DPATTN_CUDA_SAMPLER_EXPONENTIAL => Ok(GpuSampler::Exponential),
        value => Err(unknown("sampler", value, SAMPLERS)),
    }
}

fn decode_bits(bits: u32) -> Result<UniformBits, FfiError> {
    match bits {
        24 => Ok(UniformBits::B24),
        53 => Ok(UniformBits::B53),
        value => Err(unknown("uniform_bits", value, "24 or 53")),
    }
}

fn decode_out_dtype(code: dpattn_dtype) -> Result<OutDtype, FfiError> {
    Ok(match Dtype::decode(code, "dtype")? {
        Dtype::F32 => OutDtype::F32,
        Dtype::F64 => OutDtype::F64,
        Dtype::F16 => OutDtype::F16,
        Dtype::Bf16 => OutDtype::Bf16,
    })
}

fn decode_clip_dtype(code: dpattn_dtype) -> Result<FloatDtype, FfiError> {
    match code {
        DPATTN_DTYPE_F32 => Ok(FloatDtype::F32),
        DPATTN_DTYPE_F64 => Ok(FloatDtype::F64),
        value => Err(unknown("dtype", value, CLIP_DTYPES)),
    }
}

/// The sampler with `param` validated by the CPU sampler's constructor; the error names
/// the C argument (`param`) and what it stands for.
fn gpu_noise(sampler: GpuSampler, param: f64) -> Result<GpuNoise, FfiError> {
    fn named(e: CoreError) -> CoreError {
        match e {
            CoreError::OutOfRange { name, value, allowed } => {
                let name = match name {
                    "sigma" => "param (Gaussian sigma)",
                    "scale" => "param (Laplace scale)",
                    "rate" => "param (exponential rate)",
                    "1 / rate" => "param (1 / exponential rate)",
                    other => other,
                };
                CoreError::OutOfRange { name, value, allowed }
            }
            e => e,
        }
    }
    Ok(match sampler {
        GpuSampler::Uniform => GpuNoise::Uniform,
        GpuSampler::Gaussian => GpuNoise::Gaussian(Gaussian::new(param).map_err(named)?),
        GpuSampler::Laplace => GpuNoise::Laplace(Laplace::new(param).map_err(named)?),
        GpuSampler::Exponential => GpuNoise::Exponential(Exponential::new(param).map_err(named)?),
    })
}

/// A device buffer of `len` elements of `size` bytes: non-NULL (unless `len` is 0, which the
/// length checks refuse), aligned to its element, byte size within `isize`. The pointer is
/// never dereferenced on the host.
fn device_buffer(
    ptr: *const c_void,
    len: usize,
    size: usize,
    name: &'static str,
) -> Result<u64, FfiError> {
    if ptr.is_null() && len > 0 {
        return Err(FfiError::Null(name));
    }
    if !(ptr as usize).is_multiple_of(size) {
        return Err(FfiError::Misaligned(name));
    }
    match len.checked_mul(size) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(ptr as usize as u64),
        _ => Err(FfiError::TooLong(name)),
    }
}

/// Opens device `ordinal`, makes its primary context current for the duration of `f`
/// (restoring the thread's previous context afterwards) and runs `f` on the caller's stream.
///
/// # Safety
/// `cu_stream` must be NULL or a live stream of the device's primary context that outlives
/// the work `f` queues on it.
unsafe fn on_device(
    ordinal: usize,
    cu_stream: *mut c_void,
    f: impl FnOnce(&Device, &Stream) -> dpattn_cuda::Result<()>,
) -> Result<(), FfiError> {
    let dev = Device::get(ordinal)?;
    let _current = dev.make_current()?;
    // SAFETY: forwarded caller contract (NULL is the legacy default stream); the wrapper
    // is not owned, so dropping it destroys nothing.
    let stream = unsafe { dev.borrow_stream(cu_stream) };
    f(&dev, &stream)?;
    Ok(())
}

/// Whether CUDA work can run here. On success writes the number of visible CUDA devices
/// (at least 1) to `*out_devices`.
///
/// The check loads the CUDA driver library and the NVRTC library (kernels are compiled at
/// run time, so NVRTC is required) and asks the driver for its devices; it never panics and
/// never aborts, whatever is missing. Each call checks again, so a library installed later
/// is found.
///
/// Returns `DPATTN_STATUS_OK`, or
/// * `DPATTN_STATUS_NULL_ARGUMENT`: `out_devices` NULL;
/// * `DPATTN_STATUS_CUDA_UNAVAILABLE`: the message says why: "CUDA driver library not found
///   (libcuda)", "NVRTC library not found (libnvrtc)", "CUDA driver found but no device is
///   visible", or the driver's error.
///
/// `*out_devices` is written only on success. Thread-safe.
///
/// ```c
/// uint32_t n = 0;
/// if (dpattn_cuda_probe(&n) != DPATTN_STATUS_OK) {
///     char why[256];
///     dpattn_last_error_message(why, sizeof why); // e.g. "CUDA unavailable: ..."
/// }
/// ```
///
/// # Safety
/// `out_devices` must be NULL or valid for writing one `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_cuda_probe(out_devices: *mut u32) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_devices, "out_devices")?;
        match dpattn_cuda::probe() {
            Availability::Available { devices } => {
                // SAFETY: checked non-NULL; writable per the caller's contract.
                unsafe { out.write(u32::try_from(devices).unwrap_or(u32::MAX)) };
                Ok(())
            }
            other => Err(dpattn_cuda::Error::Unavailable(other).into()),
        }
    })
}

/// Queues on `cu_stream` a fill of the device buffer `out[0..len]` with keyed noise:
/// `out[i]` is element `first + i` of the draw `(key, stream_id)`, the same value the CPU's
/// `dpattn_fill_*` produces for that draw and index (`docs/RANDOMNESS.md`; the kernels are
/// a line-by-line port compiled without contraction, so values are bit-identical).
///
/// * `device`: CUDA device ordinal; `out` must be memory of that device's primary context
///   (what the CUDA runtime and PyTorch allocate).
/// * `cu_stream`: a `CUstream` / `cudaStream_t` of that context, or NULL for the legacy
///   default stream. It is used, never synchronised or destroyed.
/// * `out`: device pointer to `len` elements of `dtype`: `DPATTN_DTYPE_F32` (`float`),
///   `_F64` (`double`), `_BF16` or `_F16` (16-bit values stored as `uint16_t`; the `float`
///   value rounded to nearest even). `len >= 1`.
/// * `sampler`: `DPATTN_CUDA_SAMPLER_UNIFORM` (values in `(0, 1]`; `param` ignored),
///   `_GAUSSIAN` (`param` = σ), `_LAPLACE` (`param` = scale), `_EXPONENTIAL` (`param` =
///   rate); `param` is validated as by `dpattn_fill_gaussian`, `_laplace`, `_exponential`.
/// * `uniform_bits`: 24 (one stream word per uniform: the layout of the CPU samplers with
///   `DPATTN_DTYPE_F32`) or 53 (two words: the layout of the CPU's `DPATTN_DTYPE_F64`
///   samplers and of attention noise). The output type does not depend on it.
/// * `key` is copied before the call returns; `stream_id` and `first` address the draw.
///   One (key, stream id) pair serves one draw only: reusing it repeats the noise.
///
/// A floating-point sampler (`docs/RANDOMNESS.md` §7): do not release `x + noise` computed
/// this way where an attacker sees the low bits. The first call per device and variant
/// compiles the kernel with NVRTC (synchronously, on the calling thread); later calls reuse
/// it.
///
/// Returns `DPATTN_STATUS_OK` once the work is queued (read `out` after the stream reaches
/// it), or, with nothing queued or written:
/// * `DPATTN_STATUS_NULL_ARGUMENT`: `key` NULL, or `out` NULL with `len > 0`;
/// * `DPATTN_STATUS_OUT_OF_RANGE`: `device < 0`; `dtype`, `sampler` or `uniform_bits` not
///   one of the values above; `param` not finite and `> 0` (Gaussian, Laplace,
///   exponential); `len` = 0;
/// * `DPATTN_STATUS_MISALIGNED`: `out` not aligned for `dtype`;
/// * `DPATTN_STATUS_SIZE_OVERFLOW`: `len` elements exceed `PTRDIFF_MAX` bytes, or
///   `first + len > 2^64`;
/// * `DPATTN_STATUS_CUDA_UNAVAILABLE`: no driver, no NVRTC, no device, or no device
///   `device` (the message says which) — all arguments above were valid;
/// * `DPATTN_STATUS_CUDA_ERROR`: the driver, NVRTC (the message holds its compile log) or
///   the launch failed, or an earlier asynchronous error of the context surfaced;
/// * `DPATTN_STATUS_UNSUPPORTED`: NVRTC cannot target this device's architecture.
///
/// Thread-safe: the kernel cache per device is shared and locked; the thread's current
/// CUDA context is left as it was.
///
/// ```c
/// // float *d_noise = ...;  cudaStream_t s = ...;  (device 0, 1 << 20 floats)
/// dpattn_status st = dpattn_cuda_fill_noise(0, (void *)s, d_noise, 1u << 20, DPATTN_DTYPE_F32,
///                                           DPATTN_CUDA_SAMPLER_GAUSSIAN, 2.0, 53, &key, 7, 0);
/// ```
///
/// # Safety
/// `key` must be NULL or valid for reading a `dpattn_key`. `out` must address `len`
/// writable elements of `dtype` in the device's primary context, stay valid until the
/// queued work completes and not be accessed concurrently by other streams; `cu_stream`
/// must be NULL or a live stream of that context that outlives the queued work.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_cuda_fill_noise(
    device: i32,
    cu_stream: *mut c_void,
    out: *mut c_void,
    len: usize,
    dtype: dpattn_dtype,
    sampler: u32,
    param: f64,
    uniform_bits: u32,
    key: *const dpattn_key,
    stream_id: u64,
    first: u64,
) -> dpattn_status {
    ffi_status(|| {
        let ordinal = ordinal(device)?;
        let dtype = decode_out_dtype(dtype)?;
        let sampler = decode_sampler(sampler)?;
        let bits = decode_bits(uniform_bits)?;
        // SAFETY: forwarded caller contract.
        let key = unsafe { read(key, "key") }?;
        let ptr = device_buffer(out.cast_const(), len, dtype.size(), "out")?;
        let noise = gpu_noise(sampler, param)?;
        // `len >= 1` and `first + len <= 2^64`, exactly as the launch will check them.
        FillPlan::new(len as u64, first, bits.elements_per_block(), 1)?;
        let draw = KeyedStream::new(&key.to_core(), stream_id);
        // SAFETY: forwarded caller contract (`cu_stream`); the closure's `fill_noise_raw`
        // gets `out`, which addresses `len` elements of `dtype` on this device.
        unsafe {
            on_device(ordinal, cu_stream, |dev, stream| {
                dpattn_cuda::fill_noise_raw(dev, stream, ptr, len, dtype, noise, bits, &draw, first)
            })
        }
    })
}

/// Queues on `cu_stream` a copy of the raw ChaCha20 keystream words `first_word,
/// first_word + 1, …` of stream `stream_id` under `key` into the device buffer
/// `out[0..len]`: bit-identical to `dpattn_stream_words(key, stream_id, first_word, 0, out,
/// len)` on the CPU (for audits of GPU noise). `len >= 1`, `first_word + len <= 2^68`.
///
/// `device`, `cu_stream`, the asynchronous contract and the status codes are as in
/// `dpattn_cuda_fill_noise` (no dtype, sampler or parameter; `out` must be 4-byte aligned;
/// `DPATTN_STATUS_OUT_OF_RANGE` also for `first_word + len > 2^68`).
///
/// # Safety
/// As `dpattn_cuda_fill_noise`, with `out` addressing `len` `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_cuda_fill_stream_words(
    device: i32,
    cu_stream: *mut c_void,
    out: *mut u32,
    len: usize,
    key: *const dpattn_key,
    stream_id: u64,
    first_word: u64,
) -> dpattn_status {
    ffi_status(|| {
        let ordinal = ordinal(device)?;
        // SAFETY: forwarded caller contract.
        let key = unsafe { read(key, "key") }?;
        let ptr = device_buffer(out.cast_const().cast(), len, 4, "out")?;
        FillPlan::words(len as u64, u128::from(first_word), 1)?;
        let draw = KeyedStream::new(&key.to_core(), stream_id);
        // SAFETY: forwarded caller contract; `out` addresses `len` u32 on this device.
        unsafe {
            on_device(ordinal, cu_stream, |dev, stream| {
                dpattn_cuda::fill_stream_words_raw(
                    dev,
                    stream,
                    ptr,
                    len,
                    &draw,
                    u128::from(first_word),
                )
            })
        }
    })
}

/// Queues on `cu_stream` DP-Forward's token-level release in place on the device matrix
/// `x`: each of the `rows` rows of `dim` elements (row `r` starts at element `r·ld`) is
/// clipped to Euclidean norm `clip_norm`, then released **exactly**: every value becomes a
/// multiple of a public power-of-two resolution `Λ` plus discrete Gaussian integer noise
/// (the `NoiseMode::Exact` release of the issue), drawn from the window of element
/// `first + r·dim + j` of the draw `(key, stream_id)` (`docs/RANDOMNESS.md` §4), bit for
/// bit the CPU's `GaussianGrid` release of the clipped matrix (a clipped entry may differ
/// in the last place before the rounding to the grid, because the row norm is a parallel
/// sum).
///
/// Every clipped row has norm `<= clip_norm` including rounding, so the ℓ2 sensitivity of
/// the matrix under replacing `c` rows is `2·clip_norm·√c`; calibrate `sigma` on the CPU
/// (the `dpattn_dp_forward_*` functions) as for a float Gaussian. The grid is calibrated
/// from `sigma`, `clip_norm` and `dim` so that the release keeps that guarantee: its
/// effective continuous `σ` is `sigma·(1 + √dim·Λ/(2·clip_norm))`, at most 0.4% larger
/// unless `sigma/clip_norm` is so large that the format's range sets `Λ` (see
/// `ClipRowsParams::exact_grid` in `dpattn-cuda` and `docs/C_API.md`). `sigma = 0` clips
/// only (no release).
///
/// * `x`: device pointer to `len` elements of `dtype`, `DPATTN_DTYPE_F32` or `_F64` only;
///   `rows, dim >= 1`, `ld >= dim`, `(rows − 1)·ld + dim <= len`.
/// * `clip_norm` in `[1e-100, 1e100]`, `sigma` finite and `>= 0`.
/// * `counters`: device pointer to two `uint32_t`, not overlapping `x`. The call queues a
///   zeroing of both, then the kernel writes `counters[0]` = rows that held NaN or ±∞ (they
///   are sanitised to the zero row and released like any other row; with `sigma = 0` the
///   zero row is written) and `counters[1]` = rows that were rescaled. Both are
///   **asynchronous** results: read them after the stream reaches the work. Both depend on
///   private data: keep them on the data owner's side. An element whose exact sampler
///   failed (probability below `2^−1000`) is NaN.
///
/// Returns `DPATTN_STATUS_OK` once the work is queued, or, with nothing queued or written:
/// * `DPATTN_STATUS_NULL_ARGUMENT`: `key` or `counters` NULL, or `x` NULL with `len > 0`;
/// * `DPATTN_STATUS_OUT_OF_RANGE`: `device < 0`, `dtype` not F32/F64, `clip_norm` or
///   `sigma` outside its range or a `sigma`/`clip_norm` ratio no grid of the format holds,
///   elements at or beyond `2^40` (the exact samplers' window layout);
/// * `DPATTN_STATUS_SHAPE_MISMATCH`: `rows` or `dim` zero, or `ld < dim`;
/// * `DPATTN_STATUS_BUFFER_TOO_SHORT`: `(rows − 1)·ld + dim > len`;
/// * `DPATTN_STATUS_MISALIGNED`: `x` not aligned for `dtype`, `counters` not 4-byte
///   aligned;
/// * `DPATTN_STATUS_SIZE_OVERFLOW`: `len` elements exceed `PTRDIFF_MAX` bytes, the extent
///   overflows, or `first + rows·dim > 2^64`;
/// * `DPATTN_STATUS_ALIASING`: `counters` overlaps the rows of `x`;
/// * `DPATTN_STATUS_CUDA_UNAVAILABLE`, `DPATTN_STATUS_CUDA_ERROR`,
///   `DPATTN_STATUS_UNSUPPORTED`: as in `dpattn_cuda_fill_noise`.
///
/// Non-finite rows are private data: never refused, only counted in `counters[0]`.
/// Thread-safe as `dpattn_cuda_fill_noise`.
///
/// # Safety
/// `key` must be NULL or valid for reading a `dpattn_key`. `x` must address `len` elements
/// of `dtype` and `counters` two `uint32_t`, both in the device's primary context, valid
/// until the queued work completes and not accessed concurrently by other streams;
/// `cu_stream` must be NULL or a live stream of that context that outlives the queued work.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_cuda_clip_rows_add_gaussian(
    device: i32,
    cu_stream: *mut c_void,
    x: *mut c_void,
    len: usize,
    dtype: dpattn_dtype,
    rows: usize,
    dim: usize,
    ld: usize,
    clip_norm: f64,
    sigma: f64,
    key: *const dpattn_key,
    stream_id: u64,
    first: u64,
    counters: *mut u32,
) -> dpattn_status {
    ffi_status(|| {
        let ordinal = ordinal(device)?;
        let dtype = decode_clip_dtype(dtype)?;
        // SAFETY: forwarded caller contract.
        let key = unsafe { read(key, "key") }?;
        let xp = device_buffer(x.cast_const(), len, dtype.size(), "x")?;
        let cp = device_buffer(counters.cast_const().cast(), 2, 4, "counters")?;
        let params = ClipRowsParams::new(clip_norm, sigma)?;
        if dim > 0 && ld < dim {
            return Err(CoreError::ShapeMismatch {
                arg: "x",
                axis: "ld (row stride, >= dim)",
                expected: dim,
                got: ld,
            }
            .into());
        }
        RowsPlan::new(rows, dim, ld, len, first, 1)?;
        // The rows the kernel touches, `(rows − 1)·ld + dim` elements (checked above), must
        // not overlap the counters: both are device addresses of one unified address space.
        let extent = (rows - 1) * ld + dim;
        let mut bufs = Buffers::default();
        bufs.output("x", xp as usize as *mut u8, extent * dtype.size());
        bufs.output("counters", cp as usize as *mut u32, 2);
        bufs.disjoint()?;
        let draw = KeyedStream::new(&key.to_core(), stream_id);
        // The exact release (σ > 0), calibrated before the device is touched.
        let grid = if sigma > 0.0 {
            check_window_end(first, rows, dim)?;
            Some(GridGroup::gaussian(&params.exact_grid(dim, dtype)?))
        } else {
            None
        };
        // SAFETY: forwarded caller contract; `x` addresses `len` elements of `dtype` and
        // `counters` two u32 on this device.
        unsafe {
            on_device(ordinal, cu_stream, |dev, stream| match grid {
                Some(group) => dpattn_cuda::clip_rows_release_exact_raw(
                    dev, stream, xp, len, dtype, rows, dim, ld, clip_norm, group, &draw, first, cp,
                    0,
                ),
                None => dpattn_cuda::clip_rows_add_gaussian_unsafe_float_raw(
                    dev, stream, xp, len, dtype, rows, dim, ld, params, &draw, first, cp,
                ),
            })
        }
    })
}

/// Elements `first .. first + rows·dim` must lie below `2^40` (the window layout of the
/// exact samplers); `RowsPlan` has checked that `rows·dim` and `first + rows·dim` fit.
fn check_window_end(first: u64, rows: usize, dim: usize) -> Result<(), FfiError> {
    let end = first + (rows as u64) * (dim as u64);
    if end > dpattn_core::sampling::MAX_WINDOW_ELEMENTS {
        return Err(CoreError::OutOfRange {
            name: "first + rows·dim",
            value: end as f64,
            allowed: "<= 2^40 (the exact samplers' element windows)",
        }
        .into());
    }
    Ok(())
}

/// A C tensor whose `data` is a device address.
fn gpu_tensor(
    data: *const c_void,
    len: usize,
    dtype: dpattn_dtype,
    shape: [usize; 4],
    strides: [usize; 4],
    name: &'static str,
) -> Result<(GpuTensor, AttnDtype), FfiError> {
    let t = match dtype {
        DPATTN_DTYPE_BF16 => AttnDtype::Bf16,
        DPATTN_DTYPE_F16 => AttnDtype::F16,
        DPATTN_DTYPE_F32 => AttnDtype::F32,
        other => {
            return Err(CoreError::OutOfRange {
                name,
                value: f64::from(other),
                allowed: "DPATTN_DTYPE_BF16, _F16 or _F32 (the GPU attention kernels)",
            }
            .into());
        }
    };
    let ptr = device_buffer(data, len, t.size(), name)?;
    Ok((GpuTensor { ptr, len, shape, strides }, t))
}

/// Fused flash-style attention with keyed Gaussian noise on the GPU, on device tensors and
/// the caller's stream: `out = D⁻¹ f(scale·Q·Kᵀ + logit noise)·V + output noise`, the GPU
/// form of `dpattn_noisy_attention`.
///
/// The four tensors' `data` are **device** addresses in the device's primary context (for
/// PyTorch, `tensor.data_ptr()`), all of one dtype: `DPATTN_DTYPE_BF16` or `_F16` (tensor
/// cores, `float` accumulation) or `_F32` (CUDA cores); `out` has that dtype too. Shapes
/// `q [B, H, S_q, D]`, `k` and `v` `[B, H, S_k, D]`, `out [B, H, S_q, D]` with element
/// strides (PyTorch's `[B, S, H, D]` memory is `[B, H, S, D]` with strides
/// `{S·H·D, D, H·D, 1}`, no copy needed), `D` 64 or 128, `strides[3] = 1`, every pointer
/// 16-byte aligned and the other strides multiples of 16 bytes. `options` as for the CPU
/// (NULL = defaults; `kernel` is ignored; `key_padding` must be NULL here); causal is
/// bottom-right aligned. `noise` (NULL = none) as for `dpattn_noisy_attention`: output
/// element `(b, h, i, c)` receives element `((b·H + h)·S_q + i)·D + c` of the `f64`
/// Gaussian draw `(key, output.stream)` and logit `(b, h, i, j)` element
/// `((b·H + h)·S_q + i)·S_k + j` of `(key, logits.stream)`, bit-identical to the CPU's
/// noise values, so the result equals `dpattn_noisy_attention` up to the rounding of the
/// attention itself. **No privacy claim on its own**: `σ` is the caller's choice.
///
/// Asynchronous: `DPATTN_STATUS_OK` means queued on `cu_stream` (NULL = the legacy default
/// stream). Nothing is allocated except, when `σ` differs between heads, a stream-ordered
/// copy of the `σ` array for the launch. NaN or ±∞ in an input is not detected: the rows
/// it reaches come out NaN.
///
/// ```c
/// dpattn_tensor4 q = {d_q, B * H * S * 128, DPATTN_DTYPE_BF16, {B, H, S, 128},
///                     {S * H * 128, 128, H * 128, 1}};   // PyTorch [B, S, H, D] memory
/// // ... k, v likewise, out as a dpattn_tensor4_mut ...
/// double sigma[H];                      // one σ per head (or B * H, one per batch and head)
/// for (size_t h = 0; h < H; h++) sigma[h] = 0.1;
/// dpattn_noise_spec noise = {0};
/// memcpy(noise.key.bytes, secret_key, 32);
/// noise.output_enabled = 1;
/// noise.output = (dpattn_noise_stream){.stream = release_id, .sigma = sigma, .sigma_len = H};
/// dpattn_status st = dpattn_cuda_noisy_attention(0, stream, &out, &q, &k, &v, NULL, &noise);
/// ```
///
/// Returns `DPATTN_STATUS_OK` once queued, or, with nothing queued or written:
/// * `DPATTN_STATUS_NULL_ARGUMENT`: a NULL tensor, a NULL `data` with `len > 0`, an enabled
///   `sigma` NULL;
/// * `DPATTN_STATUS_OUT_OF_RANGE`: `device < 0`, an unknown dtype or option value, zero
///   sizes, a bad `σ`, scale or flag, equal output and logit stream ids, `out` overlapping
///   an input;
/// * `DPATTN_STATUS_SHAPE_MISMATCH`, `DPATTN_STATUS_BUFFER_TOO_SHORT`,
///   `DPATTN_STATUS_MISALIGNED`, `DPATTN_STATUS_SIZE_OVERFLOW`: as the names say;
/// * `DPATTN_STATUS_UNSUPPORTED`: `D` not 64 or 128, mixed dtypes, a key-padding mask,
///   rows not 16-byte aligned, a device older than sm_80;
/// * `DPATTN_STATUS_CUDA_UNAVAILABLE`, `DPATTN_STATUS_CUDA_ERROR`: as in
///   `dpattn_cuda_fill_noise` (the message carries NVRTC's log).
///
/// # Safety
/// Each tensor pointer must be NULL or readable for one struct whose `data` addresses `len`
/// elements of its dtype on the device (inputs readable, `out` writable), valid until the
/// queued work completes, `out` not accessed concurrently by other streams; `options` and
/// `noise` NULL or readable as for `dpattn_noisy_attention`; `cu_stream` NULL or a live
/// stream of the device's primary context that outlives the queued work.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_cuda_noisy_attention(
    device: i32,
    cu_stream: *mut c_void,
    out: *const dpattn_tensor4_mut,
    q: *const dpattn_tensor4,
    k: *const dpattn_tensor4,
    v: *const dpattn_tensor4,
    options: *const dpattn_attention_options,
    noise: *const dpattn_noise_spec,
) -> dpattn_status {
    ffi_status(|| {
        let ordinal = ordinal(device)?;
        // SAFETY: forwarded caller contract.
        let t = unsafe { read_tensors(out, q, k, v) }?;
        let (o, dt) = gpu_tensor(
            t.out.data.cast_const(),
            t.out.len,
            t.out.dtype,
            t.out.shape,
            t.out.strides,
            "out",
        )?;
        let mut inputs = Vec::with_capacity(3);
        for (x, name) in [(&t.q, "q"), (&t.k, "k"), (&t.v, "v")] {
            let (g, d) = gpu_tensor(x.data, x.len, x.dtype, x.shape, x.strides, name)?;
            if d != dt {
                return Err(FfiError::Cuda(dpattn_cuda::Error::Unsupported {
                    what: format!("{name}: a dtype other than out's (all four must agree)"),
                }));
            }
            inputs.push(g);
        }
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let params = unsafe { decode_options(options, &mut bufs) }?;
        let decoded = if noise.is_null() {
            None
        } else {
            // SAFETY: forwarded caller contract.
            Some(unsafe { decode_spec(noise, &mut bufs) }?)
        };
        let spec = decoded.as_ref().map(|(key, output, logits)| NoiseSpec {
            key,
            output: *output,
            logits: *logits,
        });
        let (qg, kg, vg) = (inputs[0], inputs[1], inputs[2]);
        check_noisy_attention(dt, &o, &qg, &kg, &vg, &params, spec.as_ref())?;
        // SAFETY: forwarded caller contract; the tensors were checked above.
        unsafe {
            on_device(ordinal, cu_stream, |dev, stream| {
                noisy_attention_raw(dev, stream, dt, o, qg, kg, vg, &params, spec.as_ref())
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::last_error::last_error_string;
    use crate::tensor::{DPATTN_DTYPE_BF16, DPATTN_DTYPE_F16};
    use std::ptr::{null, null_mut};

    const KEY: dpattn_key = dpattn_key { bytes: [7; 32] };
    const SENTINEL: u64 = 0xABAB_ABAB_ABAB_ABAB;

    fn fails(status: dpattn_status, code: dpattn_status, needle: &str) {
        assert_eq!(status, code, "{}", last_error_string());
        let msg = last_error_string();
        assert!(msg.contains(needle), "{msg:?} should name {needle:?}");
    }

    /// The status and message of a call whose arguments are all valid, when no device
    /// work can run: the probe's reason.
    fn unavailable(status: dpattn_status, why: &Availability) {
        fails(status, dpattn_status::CudaUnavailable, "CUDA unavailable");
        assert!(last_error_string().contains(&why.to_string()), "{}", last_error_string());
    }

    /// A host buffer standing in for device memory in calls that must fail before the
    /// device is touched (never dereferenced by them); checked untouched afterwards.
    struct Fake([u64; 8]);

    impl Fake {
        fn new() -> Self {
            Fake([SENTINEL; 8])
        }
        fn ptr(&mut self) -> *mut c_void {
            self.0.as_mut_ptr().cast()
        }
        fn untouched(&self) -> bool {
            self.0.iter().all(|&w| w == SENTINEL)
        }
    }

    fn fill(out: *mut c_void, len: usize, dtype: u32, sampler: u32, param: f64) -> dpattn_status {
        // SAFETY: argument-error cases: nothing is dereferenced but the valid `KEY`.
        unsafe {
            dpattn_cuda_fill_noise(0, null_mut(), out, len, dtype, sampler, param, 53, &KEY, 1, 0)
        }
    }

    #[test]
    fn probe_reports_devices_or_why_not() {
        // SAFETY: NULL is refused before any write.
        fails(unsafe { dpattn_cuda_probe(null_mut()) }, dpattn_status::NullArgument, "out_devices");
        let mut n = 12345u32;
        // SAFETY: `n` is writable.
        let st = unsafe { dpattn_cuda_probe(&mut n) };
        match dpattn_cuda::probe() {
            Availability::Available { devices } => {
                assert_eq!(st, dpattn_status::Ok);
                assert_eq!(n as usize, devices);
                assert!(n >= 1);
                assert_eq!(last_error_string(), "");
            }
            why => {
                unavailable(st, &why);
                assert_eq!(n, 12345, "out_devices is written only on success");
            }
        }
    }

    #[test]
    fn fill_noise_argument_errors_come_before_the_device() {
        let mut b = Fake::new();
        let p = b.ptr();
        let g = DPATTN_CUDA_SAMPLER_GAUSSIAN;
        let f32c = DPATTN_DTYPE_F32;
        let oor = dpattn_status::OutOfRange;
        // SAFETY: (all calls below) every case fails before the device or `p` is touched.
        unsafe {
            let st = dpattn_cuda_fill_noise(-1, null_mut(), p, 4, f32c, g, 1.0, 53, &KEY, 1, 0);
            fails(st, oor, "device");
            let st = dpattn_cuda_fill_noise(0, null_mut(), p, 4, f32c, g, 1.0, 53, null(), 1, 0);
            fails(st, dpattn_status::NullArgument, "key");
            let st = dpattn_cuda_fill_noise(0, null_mut(), p, 4, f32c, g, 1.0, 32, &KEY, 1, 0);
            fails(st, oor, "uniform_bits");
            let st = dpattn_cuda_fill_noise(0, null_mut(), p, 4, f32c, g, 1.0, 0, &KEY, 1, 0);
            fails(st, oor, "uniform_bits");
            let st = dpattn_cuda_fill_noise(
                0,
                null_mut(),
                p,
                4,
                f32c,
                g,
                1.0,
                24,
                &KEY,
                1,
                u64::MAX - 2,
            );
            fails(st, dpattn_status::SizeOverflow, "first");
        }
        fails(fill(p, 4, 4, g, 1.0), oor, "dtype");
        fails(fill(p, 4, u32::MAX, g, 1.0), oor, "dtype");
        fails(fill(p, 4, f32c, 4, 1.0), oor, "sampler");
        fails(fill(null_mut(), 4, f32c, g, 1.0), dpattn_status::NullArgument, "out");
        fails(fill(null_mut(), 0, f32c, g, 1.0), oor, "len");
        fails(fill(p, 0, f32c, g, 1.0), oor, "len");
        let odd = p.cast::<u8>().wrapping_add(2).cast::<c_void>();
        fails(fill(odd, 1, f32c, g, 1.0), dpattn_status::Misaligned, "out");
        let odd1 = p.cast::<u8>().wrapping_add(1).cast::<c_void>();
        fails(fill(odd1, 1, DPATTN_DTYPE_BF16, g, 1.0), dpattn_status::Misaligned, "out");
        fails(fill(odd1, 1, DPATTN_DTYPE_F16, g, 1.0), dpattn_status::Misaligned, "out");
        let four = p.cast::<u8>().wrapping_add(4).cast::<c_void>();
        fails(fill(four, 1, DPATTN_DTYPE_F64, g, 1.0), dpattn_status::Misaligned, "out");
        fails(fill(p, usize::MAX / 4, f32c, g, 1.0), dpattn_status::SizeOverflow, "out");
        for (s, bad, name) in [
            (DPATTN_CUDA_SAMPLER_GAUSSIAN, 0.0, "sigma"),
            (DPATTN_CUDA_SAMPLER_GAUSSIAN, f64::NAN, "sigma"),
            (DPATTN_CUDA_SAMPLER_LAPLACE, -1.0, "scale"),
            (DPATTN_CUDA_SAMPLER_LAPLACE, f64::INFINITY, "scale"),
            (DPATTN_CUDA_SAMPLER_EXPONENTIAL, 0.0, "rate"),
            (DPATTN_CUDA_SAMPLER_EXPONENTIAL, 1e-320, "1 / exponential rate"),
        ] {
            fails(fill(p, 4, f32c, s, bad), oor, "param");
            assert!(last_error_string().contains(name), "{}", last_error_string());
        }
        assert!(b.untouched());
    }

    #[test]
    fn stream_words_argument_errors_come_before_the_device() {
        let mut b = Fake::new();
        let p = b.ptr().cast::<u32>();
        let oor = dpattn_status::OutOfRange;
        // SAFETY: (all calls below) every case fails before the device or `p` is touched.
        unsafe {
            let st = dpattn_cuda_fill_stream_words(-3, null_mut(), p, 4, &KEY, 1, 0);
            fails(st, oor, "device");
            let st = dpattn_cuda_fill_stream_words(0, null_mut(), p, 4, null(), 1, 0);
            fails(st, dpattn_status::NullArgument, "key");
            let st = dpattn_cuda_fill_stream_words(0, null_mut(), null_mut(), 4, &KEY, 1, 0);
            fails(st, dpattn_status::NullArgument, "out");
            let st = dpattn_cuda_fill_stream_words(0, null_mut(), p, 0, &KEY, 1, 0);
            fails(st, oor, "len");
            let odd = p.cast::<u8>().wrapping_add(1).cast::<u32>();
            let st = dpattn_cuda_fill_stream_words(0, null_mut(), odd, 1, &KEY, 1, 0);
            fails(st, dpattn_status::Misaligned, "out");
            let st = dpattn_cuda_fill_stream_words(0, null_mut(), p, usize::MAX / 2, &KEY, 1, 0);
            fails(st, dpattn_status::SizeOverflow, "out");
        }
        assert!(b.untouched());
    }

    #[allow(clippy::too_many_arguments)]
    fn clip(
        x: *mut c_void,
        len: usize,
        dtype: u32,
        rows: usize,
        dim: usize,
        ld: usize,
        c: f64,
        sigma: f64,
        counters: *mut u32,
    ) -> dpattn_status {
        // SAFETY: argument-error cases: nothing is dereferenced but the valid `KEY`.
        unsafe {
            dpattn_cuda_clip_rows_add_gaussian(
                0,
                null_mut(),
                x,
                len,
                dtype,
                rows,
                dim,
                ld,
                c,
                sigma,
                &KEY,
                1,
                0,
                counters,
            )
        }
    }

    #[test]
    fn clip_rows_argument_errors_come_before_the_device() {
        let mut b = Fake::new();
        let mut s = Fake::new();
        let x = b.ptr();
        let cn = s.ptr().cast::<u32>();
        let (f32c, f64c) = (DPATTN_DTYPE_F32, DPATTN_DTYPE_F64);
        let oor = dpattn_status::OutOfRange;
        // SAFETY: (all calls below) every case fails before the device or a buffer is touched.
        unsafe {
            let st = dpattn_cuda_clip_rows_add_gaussian(
                -1,
                null_mut(),
                x,
                16,
                f32c,
                4,
                4,
                4,
                1.0,
                1.0,
                &KEY,
                1,
                0,
                cn,
            );
            fails(st, oor, "device");
            let st = dpattn_cuda_clip_rows_add_gaussian(
                0,
                null_mut(),
                x,
                16,
                f32c,
                4,
                4,
                4,
                1.0,
                1.0,
                null(),
                1,
                0,
                cn,
            );
            fails(st, dpattn_status::NullArgument, "key");
            let st = dpattn_cuda_clip_rows_add_gaussian(
                0,
                null_mut(),
                x,
                16,
                f32c,
                4,
                4,
                4,
                1.0,
                1.0,
                &KEY,
                1,
                u64::MAX - 10,
                cn,
            );
            fails(st, dpattn_status::SizeOverflow, "first");
        }
        for bad in [DPATTN_DTYPE_F16, DPATTN_DTYPE_BF16, 9] {
            fails(clip(x, 16, bad, 4, 4, 4, 1.0, 1.0, cn), oor, "dtype");
        }
        fails(clip(null_mut(), 16, f32c, 4, 4, 4, 1.0, 1.0, cn), dpattn_status::NullArgument, "x");
        fails(
            clip(x, 16, f32c, 4, 4, 4, 1.0, 1.0, null_mut()),
            dpattn_status::NullArgument,
            "counters",
        );
        let odd = x.cast::<u8>().wrapping_add(4).cast::<c_void>();
        fails(clip(odd, 8, f64c, 2, 4, 4, 1.0, 1.0, cn), dpattn_status::Misaligned, "x");
        let odd_c = cn.cast::<u8>().wrapping_add(2).cast::<u32>();
        fails(clip(x, 16, f32c, 4, 4, 4, 1.0, 1.0, odd_c), dpattn_status::Misaligned, "counters");
        fails(
            clip(x, usize::MAX / 4, f32c, 4, 4, 4, 1.0, 1.0, cn),
            dpattn_status::SizeOverflow,
            "x",
        );
        for (c, sigma, name) in [
            (0.0, 1.0, "clip_norm"),
            (f64::NAN, 1.0, "clip_norm"),
            (1e101, 1.0, "clip_norm"),
            (1.0, -1.0, "sigma"),
            (1.0, f64::NAN, "sigma"),
            (1.0, f64::INFINITY, "sigma"),
        ] {
            fails(clip(x, 16, f32c, 4, 4, 4, c, sigma, cn), oor, name);
        }
        let shape = dpattn_status::ShapeMismatch;
        fails(clip(x, 16, f32c, 0, 4, 4, 1.0, 1.0, cn), shape, "rows");
        fails(clip(x, 16, f32c, 4, 0, 4, 1.0, 1.0, cn), shape, "dim");
        fails(clip(x, 16, f32c, 4, 4, 3, 1.0, 1.0, cn), shape, "ld");
        fails(clip(x, 15, f32c, 4, 4, 4, 1.0, 1.0, cn), dpattn_status::BufferTooShort, "x");
        fails(clip(x, 16, f32c, 3, 4, 7, 1.0, 1.0, cn), dpattn_status::BufferTooShort, "x");
        fails(clip(null_mut(), 0, f32c, 1, 1, 1, 1.0, 1.0, cn), dpattn_status::BufferTooShort, "x");
        fails(
            clip(x, 16, f32c, usize::MAX / 2, 4, 4, 1.0, 1.0, cn),
            dpattn_status::SizeOverflow,
            "x",
        );
        // The exact release reads per-element windows, which end at element 2^40; σ = 0
        // releases nothing and has no such limit.
        let st = {
            // SAFETY: fails before the device or a buffer is touched.
            unsafe {
                dpattn_cuda_clip_rows_add_gaussian(
                    0,
                    null_mut(),
                    x,
                    16,
                    f32c,
                    4,
                    4,
                    4,
                    1.0,
                    1.0,
                    &KEY,
                    1,
                    (1 << 40) - 15,
                    cn,
                )
            }
        };
        fails(st, oor, "first + rows·dim");
        // The counters may not lie inside the rows the kernel touches (but may sit in a gap
        // between rows' ends and the buffer's end).
        let inside = x.cast::<u32>().wrapping_add(6);
        fails(clip(x, 16, f32c, 4, 4, 4, 1.0, 1.0, inside), dpattn_status::Aliasing, "counters");
        assert!(b.untouched() && s.untouched());
    }

    #[test]
    fn valid_calls_without_a_gpu_say_why() {
        let why = dpattn_cuda::probe();
        if why.is_available() {
            return; // covered by `valid_calls_on_a_gpu_equal_the_cpu`
        }
        let mut b = Fake::new();
        let mut s = Fake::new();
        let (x, cn) = (b.ptr(), s.ptr().cast::<u32>());
        for sampler in 0..4 {
            for dtype in [DPATTN_DTYPE_F32, DPATTN_DTYPE_F64, DPATTN_DTYPE_F16, DPATTN_DTYPE_BF16] {
                unavailable(fill(x, 4, dtype, sampler, 1.5), &why);
            }
        }
        // The uniform sampler ignores `param`, even NaN.
        unavailable(fill(x, 4, DPATTN_DTYPE_F32, DPATTN_CUDA_SAMPLER_UNIFORM, f64::NAN), &why);
        // SAFETY: valid arguments; without a GPU nothing is dereferenced but `KEY`.
        unsafe {
            unavailable(dpattn_cuda_fill_stream_words(0, null_mut(), cn, 4, &KEY, 1, 3), &why);
            unavailable(dpattn_cuda_fill_stream_words(7, null_mut(), cn, 4, &KEY, 1, 3), &why);
        }
        unavailable(clip(x, 16, DPATTN_DTYPE_F32, 4, 4, 4, 1.0, 0.5, cn), &why);
        unavailable(clip(x, 8, DPATTN_DTYPE_F64, 2, 3, 4, 1.0, 0.0, cn), &why);
        assert!(b.untouched() && s.untouched());
    }

    #[test]
    fn valid_calls_on_a_gpu_equal_the_cpu() {
        if let Availability::Available { devices } = dpattn_cuda::probe() {
            gpu::fill_noise_equals_the_cpu();
            gpu::stream_words_equal_the_cpu();
            gpu::clip_rows_equals_the_safe_api();
            // A device past the last one: unavailable, naming the ordinal.
            let ord = i32::try_from(devices).unwrap();
            let mut b = Fake::new();
            // SAFETY: fails at `Device::get`, before `b` is touched.
            let st = unsafe {
                dpattn_cuda_fill_noise(
                    ord,
                    null_mut(),
                    b.ptr(),
                    4,
                    DPATTN_DTYPE_F32,
                    DPATTN_CUDA_SAMPLER_UNIFORM,
                    0.0,
                    24,
                    &KEY,
                    1,
                    0,
                )
            };
            fails(st, dpattn_status::CudaUnavailable, &format!("no CUDA device {ord}"));
            assert!(b.untouched());
        }
    }

    /// Checks that need a GPU; run only when the probe finds one.
    mod gpu {
        use super::*;
        use dpattn_core::sampling::{FixedWordSampler, NoiseKey, Uniform};
        use std::sync::Arc;

        fn dev() -> (Arc<Device>, Stream) {
            let dev = Device::get(0).expect("device 0");
            let stream = dev.new_stream().expect("stream");
            (dev, stream)
        }

        fn draw(s: u64) -> KeyedStream {
            KeyedStream::new(&NoiseKey::for_replay(KEY.bytes), s)
        }

        pub(super) fn fill_noise_equals_the_cpu() {
            let (dev, stream) = dev();
            let n = 1037usize;
            let first = 13u64;
            let cases: [(u32, f64, GpuNoiseCpu); 4] = [
                (DPATTN_CUDA_SAMPLER_UNIFORM, f64::NAN, GpuNoiseCpu::Uniform),
                (DPATTN_CUDA_SAMPLER_GAUSSIAN, 2.0, GpuNoiseCpu::Gaussian(2.0)),
                (DPATTN_CUDA_SAMPLER_LAPLACE, 0.5, GpuNoiseCpu::Laplace(0.5)),
                (DPATTN_CUDA_SAMPLER_EXPONENTIAL, 4.0, GpuNoiseCpu::Exponential(4.0)),
            ];
            for (sampler, param, cpu) in cases {
                // f32 output, 24-bit layout = the CPU's f32 sampler.
                let mut d32 = stream.alloc_zeros::<f32>(n).expect("alloc");
                {
                    let (p, _g) = d32.device_ptr_mut(&stream);
                    // SAFETY: `p` addresses `n` f32 of a live buffer on device 0; `stream`
                    // is a live stream of its primary context.
                    let st = unsafe {
                        dpattn_cuda_fill_noise(
                            0,
                            stream.as_raw(),
                            p as usize as *mut c_void,
                            n,
                            DPATTN_DTYPE_F32,
                            sampler,
                            param,
                            24,
                            &KEY,
                            5,
                            first,
                        )
                    };
                    assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
                }
                let got = stream.clone_dtoh(&d32).expect("copy back");
                let mut want = vec![0f32; n];
                cpu.fill(&draw(5), first, &mut want);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "sampler {sampler} f32"
                );
                // f64 output, 53-bit layout = the CPU's f64 sampler; on the legacy default
                // stream (NULL).
                let mut d64 = stream.alloc_zeros::<f64>(n).expect("alloc");
                stream.synchronize().expect("sync");
                {
                    let (p, _g) = d64.device_ptr_mut(&stream);
                    // SAFETY: as above for `n` f64; NULL is the legacy default stream.
                    let st = unsafe {
                        dpattn_cuda_fill_noise(
                            0,
                            null_mut(),
                            p as usize as *mut c_void,
                            n,
                            DPATTN_DTYPE_F64,
                            sampler,
                            param,
                            53,
                            &KEY,
                            6,
                            first,
                        )
                    };
                    assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
                }
                // Waits for the legacy default stream.
                dev.synchronize().expect("sync");
                let got = stream.clone_dtoh(&d64).expect("copy back");
                let mut want = vec![0f64; n];
                cpu.fill(&draw(6), first, &mut want);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "sampler {sampler} f64"
                );
            }
        }

        /// The CPU sampler of each GPU sampler.
        enum GpuNoiseCpu {
            Uniform,
            Gaussian(f64),
            Laplace(f64),
            Exponential(f64),
        }

        impl GpuNoiseCpu {
            fn fill<T: dpattn_core::sampling::NoiseFloat>(
                &self,
                s: &KeyedStream,
                first: u64,
                out: &mut [T],
            ) {
                match *self {
                    GpuNoiseCpu::Uniform => Uniform.fill_keyed(s, first, out),
                    GpuNoiseCpu::Gaussian(p) => Gaussian::new(p).unwrap().fill_keyed(s, first, out),
                    GpuNoiseCpu::Laplace(p) => Laplace::new(p).unwrap().fill_keyed(s, first, out),
                    GpuNoiseCpu::Exponential(p) => {
                        Exponential::new(p).unwrap().fill_keyed(s, first, out)
                    }
                }
                .unwrap();
            }
        }

        pub(super) fn stream_words_equal_the_cpu() {
            let (_dev, stream) = dev();
            let n = 301usize;
            let mut d = stream.alloc_zeros::<u32>(n).expect("alloc");
            {
                let (p, _g) = d.device_ptr_mut(&stream);
                // SAFETY: `p` addresses `n` u32 on device 0; `stream` is live.
                let st = unsafe {
                    dpattn_cuda_fill_stream_words(
                        0,
                        stream.as_raw(),
                        p as usize as *mut u32,
                        n,
                        &KEY,
                        9,
                        29,
                    )
                };
                assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
            }
            let got = stream.clone_dtoh(&d).expect("copy back");
            let mut want = vec![0u32; n];
            // SAFETY: `want` is writable for `n` words.
            let st =
                unsafe { crate::noise::dpattn_stream_words(&KEY, 9, 29, 0, want.as_mut_ptr(), n) };
            assert_eq!(st, dpattn_status::Ok);
            assert_eq!(got, want);
        }

        pub(super) fn clip_rows_equals_the_safe_api() {
            let (dev, stream) = dev();
            let (rows, dim, ld) = (6usize, 40usize, 48usize);
            let len = (rows - 1) * ld + dim;
            let host: Vec<f32> = (0..len).map(|i| ((i % 17) as f32 - 8.0) * 0.25).collect();
            let mut with_nan = host.clone();
            with_nan[2 * ld + 3] = f32::NAN;
            // A row holding NaN is released as the zero row: the reference gets zeros there.
            let mut zeroed = host.clone();
            zeroed[2 * ld..2 * ld + dim].fill(0.0);
            let params = ClipRowsParams::new(1.0, 0.75).unwrap();
            let grid = params.exact_grid(dim, FloatDtype::F32).unwrap();
            assert!(grid.continuous_sigma() >= 0.75);
            for (input, reference, nonfinite) in [(&host, &host, 0u32), (&with_nan, &zeroed, 1)] {
                // Reference: the crate's safe API (same kernel, same launch plan).
                let mut r = stream.clone_htod(reference).expect("upload");
                let report = dpattn_cuda::clip_rows_release_exact(
                    &dev,
                    &stream,
                    &mut r,
                    rows,
                    dim,
                    ld,
                    1.0,
                    &grid,
                    &draw(4),
                    100,
                )
                .expect("reference release");
                let want = stream.clone_dtoh(&r).expect("copy back");
                let mut x = stream.clone_htod(input).expect("upload");
                let mut counters = stream.clone_htod(&[77u32, 77]).expect("upload");
                {
                    let (xp, _gx) = x.device_ptr_mut(&stream);
                    let (cp, _gc) = counters.device_ptr_mut(&stream);
                    // SAFETY: `xp` addresses `len` f32 and `cp` two u32 on device 0.
                    let st = unsafe {
                        dpattn_cuda_clip_rows_add_gaussian(
                            0,
                            stream.as_raw(),
                            xp as usize as *mut c_void,
                            len,
                            DPATTN_DTYPE_F32,
                            rows,
                            dim,
                            ld,
                            1.0,
                            0.75,
                            &KEY,
                            4,
                            100,
                            cp as usize as *mut u32,
                        )
                    };
                    assert_eq!(st, dpattn_status::Ok, "{}", last_error_string());
                }
                let got = stream.clone_dtoh(&x).expect("copy back");
                let c = stream.clone_dtoh(&counters).expect("copy back");
                assert_eq!(c, [nonfinite, report.scaled_rows]);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
                for r in 0..rows {
                    let row = &got[r * ld..r * ld + dim];
                    let lambda = grid.resolution();
                    assert!(row.iter().all(|&v| (f64::from(v) / lambda).fract() == 0.0));
                }
            }
        }
    }
}
