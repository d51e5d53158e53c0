//! Bulk keyed noise into device buffers: uniform, Gaussian, Laplace and exponential values
//! (f32, f64, bf16 and f16 outputs) and the raw ChaCha20 stream words.
//!
//! **Guarantee.** Element `i` of a fill starting at `first` is element `first + i` of the
//! draw `(key, stream id)` defined by `docs/RANDOMNESS.md` §2–3: the same value the CPU's
//! `FixedWordSampler::fill_keyed` produces for the same draw and index. Stream words are
//! bit-identical to the CPU by construction; sampler values are computed by a line-by-line
//! port of the CPU's expressions compiled with `--fmad=false`, so they are bit-identical
//! too (checked on the host by `tests/cuda-host`, which runs the same CUDA headers through a
//! C++ compiler, and on a GPU by `scripts/gpu-test.sh`). Which thread computes an element
//! never matters: the value depends only on the key, the stream id and the logical index.
//!
//! * [`UniformBits::B24`] is the CPU's `f32` layout (one word per uniform, `|z| < 5.77`),
//!   [`UniformBits::B53`] its `f64` layout (two words, `|z| < 8.57`; the layout attention
//!   noise uses). The output type is independent of the layout.
//! * 16-bit outputs are the `f32` value rounded to nearest even (as `half`'s `from_f32`).
//! * These are floating-point samplers (`docs/RANDOMNESS.md` §7): do not release
//!   `x + noise` computed this way where an attacker sees the low bits.
//!
//! **Exact samplers** (the discrete Laplace and Gaussian of the `NoiseMode::Exact`
//! releases) read per-element windows instead of fixed words: see
//! [`mod@crate::grid_release`].
//!
//! No paper section: the GPU side of `docs/RANDOMNESS.md`.
//!
//! ```no_run
//! use dpattn_core::sampling::{Gaussian, KeyedStream, NoiseKey};
//! use dpattn_cuda::{Device, GpuNoise, OutDtype, UniformBits, fill_noise};
//! let dev = Device::get(0)?;
//! let stream = dev.new_stream()?;
//! let mut out = stream.alloc_zeros::<f32>(1 << 20)?;
//! let draw = KeyedStream::new(&NoiseKey::generate()?, 1);
//! let noise = GpuNoise::Gaussian(Gaussian::new(2.0)?);
//! fill_noise(&dev, &stream, &mut out, OutDtype::F32, noise, UniformBits::B53, &draw, 0)?;
//! # Ok::<(), dpattn_cuda::Error>(())
//! ```

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use dpattn_core::sampling::{Exponential, Gaussian, KeyedStream, Laplace};

use crate::device::Device;
use crate::error::{Error, Result, driver, guarded};
use crate::kernels::KernelSpec;
use crate::launch::{FILL_THREADS, FillPlan};
use crate::memory::{DeviceBuffer, DeviceElement, Stream};

/// Which fixed-word sampler a kernel variant computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuSampler {
    /// `U ∈ (0, 1]`.
    Uniform,
    /// Box–Muller normals.
    Gaussian,
    /// Sign and inverse CDF.
    Laplace,
    /// Inverse CDF.
    Exponential,
}

impl GpuSampler {
    /// All samplers.
    pub const ALL: [GpuSampler; 4] =
        [GpuSampler::Uniform, GpuSampler::Gaussian, GpuSampler::Laplace, GpuSampler::Exponential];

    /// `DP_SAMPLER` in `noise_fill.cu`.
    pub(crate) fn code(self) -> i32 {
        self as i32
    }
}

/// A sampler with its parameter, validated by the CPU sampler's constructor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GpuNoise {
    /// Uniform on the grid, in `(0, 1]`.
    Uniform,
    /// `N(0, σ²)`.
    Gaussian(Gaussian),
    /// `Lap(b)`.
    Laplace(Laplace),
    /// `Exp(λ)`.
    Exponential(Exponential),
}

impl GpuNoise {
    fn sampler_and_param(self) -> (GpuSampler, f64) {
        match self {
            GpuNoise::Uniform => (GpuSampler::Uniform, 0.0),
            GpuNoise::Gaussian(g) => (GpuSampler::Gaussian, g.sigma()),
            GpuNoise::Laplace(l) => (GpuSampler::Laplace, l.scale()),
            // The CPU multiplies by 1/λ computed once by the constructor: same value.
            GpuNoise::Exponential(e) => (GpuSampler::Exponential, e.mean()),
        }
    }
}

/// Bits per uniform variate, i.e. which CPU word layout the fill follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UniformBits {
    /// 24-bit uniforms, one word each: the CPU's `f32` samplers.
    B24,
    /// 53-bit uniforms, two words each: the CPU's `f64` samplers.
    B53,
}

impl UniformBits {
    /// Stream words per uniform variate.
    pub fn words(self) -> u32 {
        match self {
            UniformBits::B24 => 1,
            UniformBits::B53 => 2,
        }
    }

    /// Elements per ChaCha20 block (16 words).
    pub fn elements_per_block(self) -> u32 {
        16 / self.words()
    }
}

/// Output element type of a noise fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutDtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// bfloat16 (stored as `u16`).
    Bf16,
    /// IEEE binary16 (stored as `u16`).
    F16,
}

impl OutDtype {
    /// All output types.
    pub const ALL: [OutDtype; 4] = [OutDtype::F32, OutDtype::F64, OutDtype::Bf16, OutDtype::F16];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            OutDtype::F32 => 4,
            OutDtype::F64 => 8,
            OutDtype::Bf16 | OutDtype::F16 => 2,
        }
    }

    /// `DP_OUT` in `noise_fill.cu`.
    pub(crate) fn code(self) -> i32 {
        self as i32
    }
}

/// Host element types a typed device buffer may hold for a given [`OutDtype`]: `f32`,
/// `f64`, and `u16` for bf16/f16 bits.
pub trait NoiseElement: DeviceElement + sealed::Sealed {
    /// Whether a buffer of `Self` can receive `dtype`.
    fn holds(dtype: OutDtype) -> bool;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for u16 {}
}

impl NoiseElement for f32 {
    fn holds(d: OutDtype) -> bool {
        d == OutDtype::F32
    }
}
impl NoiseElement for f64 {
    fn holds(d: OutDtype) -> bool {
        d == OutDtype::F64
    }
}
impl NoiseElement for u16 {
    fn holds(d: OutDtype) -> bool {
        matches!(d, OutDtype::Bf16 | OutDtype::F16)
    }
}

/// The key of a draw as the kernel's `DpKey` (eight little-endian words, by value).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuKey {
    w: [u32; 8],
}

// SAFETY: `GpuKey` is `repr(C)` over `[u32; 8]`, exactly the layout of `struct DpKey { u32
// w[8]; }` in chacha20.cuh, and holds no pointers.
unsafe impl DeviceRepr for GpuKey {}

impl GpuKey {
    pub(crate) fn of(draw: &KeyedStream) -> Self {
        GpuKey { w: draw.key_words() }
    }
}

/// Fills `out` (a buffer on `dev`) with elements `first ..` of the draw.
///
/// # Errors
/// [`Error::Unsupported`] when `T` cannot hold `dtype`; [`Error::Core`] for an empty buffer,
/// `first + len > u64::MAX` (the CPU's rule) or a scale whose largest draw is not finite in
/// `dtype` (`OutOfRange`); [`Error::Driver`]/[`Error::Compile`] from the launch.
#[allow(clippy::too_many_arguments)]
pub fn fill_noise<T: NoiseElement>(
    dev: &Device,
    stream: &Stream,
    out: &mut DeviceBuffer<T>,
    dtype: OutDtype,
    noise: GpuNoise,
    bits: UniformBits,
    draw: &KeyedStream,
    first: u64,
) -> Result<()> {
    if !T::holds(dtype) {
        return Err(Error::Unsupported {
            what: format!("{dtype:?} output in a buffer of {}", std::any::type_name::<T>()),
        });
    }
    let len = out.len();
    in_context("out: a buffer", out.home_stream(), dev)?;
    guarded(|| {
        let (ptr, _sync) = out.device_ptr_mut(stream);
        // SAFETY: `ptr` addresses `len` elements of `T` (a live device buffer), and `T`
        // holds `dtype` (checked above), so the kernel writes exactly that buffer; `_sync`
        // records the write on `stream` when it drops after the launch.
        unsafe { fill_noise_raw(dev, stream, ptr, len, dtype, noise, bits, draw, first) }
    })
}

/// [`fill_noise`] on a raw device pointer owned by someone else (a C++ engine, PyTorch):
/// nothing is allocated, freed or synchronised; the work is queued on `stream`.
///
/// # Safety
/// `ptr` must address `len` writable elements of `dtype` in this device's primary context,
/// valid until the work queued on `stream` completes, and not accessed concurrently by other
/// streams.
///
/// # Errors
/// As [`fill_noise`]; also [`Error::Core`] for a null or misaligned pointer or a byte size
/// past `isize::MAX`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn fill_noise_raw(
    dev: &Device,
    stream: &Stream,
    ptr: u64,
    len: usize,
    dtype: OutDtype,
    noise: GpuNoise,
    bits: UniformBits,
    draw: &KeyedStream,
    first: u64,
) -> Result<()> {
    check_device_buffer("out", ptr, len, dtype.size())?;
    in_context("a stream", stream.cuda(), dev)?;
    check_largest_draw(noise, bits, dtype)?;
    let plan = FillPlan::new(len as u64, first, bits.elements_per_block(), dev.multiprocessors())?;
    let (sampler, p) = noise.sampler_and_param();
    launch_fill(
        dev,
        stream.cuda(),
        &KernelSpec::noise_fill(sampler, bits, dtype),
        ptr,
        len as u64,
        plan,
        draw,
        p,
    )
}

/// Refuses a scale whose largest draw is not finite in `dtype` (the CPU samplers' rule,
/// `FixedWordSampler::check_output`): the uniform is never below `2^-p` (`p` = 24 or 53), so
/// `|z| ≤ √(2p·ln 2)·σ` (Gaussian) and `−ln U ≤ p·ln 2` (Laplace, exponential), with a
/// `2^-40` margin for rounding.
fn check_largest_draw(noise: GpuNoise, bits: UniformBits, dtype: OutDtype) -> Result<()> {
    let p = match bits {
        UniformBits::B24 => 24.0,
        UniformBits::B53 => 53.0,
    };
    let neg_ln = p * core::f64::consts::LN_2 * (1.0 + 2f64.powi(-40));
    let (name, scale, largest) = match noise {
        GpuNoise::Uniform => return Ok(()),
        GpuNoise::Gaussian(g) => ("sigma", g.sigma(), g.sigma() * (2.0 * neg_ln).sqrt()),
        GpuNoise::Laplace(l) => ("scale", l.scale(), l.scale() * neg_ln),
        GpuNoise::Exponential(e) => ("1 / rate", e.mean(), e.mean() * neg_ln),
    };
    let max = match dtype {
        OutDtype::F32 => f64::from(f32::MAX),
        OutDtype::F64 => f64::MAX,
        OutDtype::Bf16 => 3.389_531_389_251_535_5e38,
        OutDtype::F16 => 65504.0,
    };
    if largest <= max {
        return Ok(());
    }
    Err(dpattn_core::Error::OutOfRange {
        name,
        value: scale,
        allowed: "small enough that the largest draw is finite in the output dtype",
    }
    .into())
}

/// Fills `out` with words `first_word ..` of the ChaCha20 stream of `draw` (word `w` is
/// word `w mod 16` of block `⌊w/16⌋`), bit-identical to `KeyedStream::word`.
///
/// # Errors
/// [`Error::Core`] for an empty buffer or words past `2^68`; launch errors.
pub fn fill_stream_words(
    dev: &Device,
    stream: &Stream,
    out: &mut DeviceBuffer<u32>,
    draw: &KeyedStream,
    first_word: u128,
) -> Result<()> {
    let len = out.len();
    in_context("out: a buffer", out.home_stream(), dev)?;
    guarded(|| {
        let (ptr, _sync) = out.device_ptr_mut(stream);
        // SAFETY: `ptr` addresses the `len` u32 of a live device buffer on this device.
        unsafe { fill_stream_words_raw(dev, stream, ptr, len, draw, first_word) }
    })
}

/// [`fill_stream_words`] on a caller-owned device pointer.
///
/// # Safety
/// As [`fill_noise_raw`], for `len` `u32` words.
///
/// # Errors
/// As [`fill_stream_words`], plus null/misaligned pointers.
pub unsafe fn fill_stream_words_raw(
    dev: &Device,
    stream: &Stream,
    ptr: u64,
    len: usize,
    draw: &KeyedStream,
    first_word: u128,
) -> Result<()> {
    check_device_buffer("out", ptr, len, 4)?;
    in_context("a stream", stream.cuda(), dev)?;
    let plan = FillPlan::words(len as u64, first_word, dev.multiprocessors())?;
    launch_fill(dev, stream.cuda(), &KernelSpec::stream_words(), ptr, len as u64, plan, draw, 0.0)
}

#[allow(clippy::too_many_arguments)]
fn launch_fill(
    dev: &Device,
    stream: &Arc<CudaStream>,
    spec: &KernelSpec,
    ptr: u64,
    n: u64,
    plan: FillPlan,
    draw: &KeyedStream,
    p: f64,
) -> Result<()> {
    let f = dev.function(spec)?;
    let key = GpuKey::of(draw);
    let stream_id = draw.stream_id();
    guarded(|| {
        let cfg = LaunchConfig {
            grid_dim: (plan.grid, 1, 1),
            block_dim: (FILL_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&f);
        b.arg(&ptr)
            .arg(&n)
            .arg(&plan.first_block)
            .arg(&plan.skip)
            .arg(&key)
            .arg(&stream_id)
            .arg(&p);
        // SAFETY: the arguments match `dp_fill(out_t*, u64 n, u64 first_block, u32 skip,
        // DpKey, u64 stream, double p)` in type and order; `ptr` addresses `n` elements of
        // the variant's output type (checked by the caller); the kernel writes only
        // out[0..n) and reads nothing else from global memory.
        unsafe { b.launch(cfg) }.map_err(driver(format!("launch {}", spec.label())))?;
        Ok(())
    })?;
    dev.check()
}

/// A device buffer argument: non-null, aligned to its element, byte size ≤ `isize::MAX`.
pub(crate) fn check_device_buffer(
    arg: &'static str,
    ptr: u64,
    len: usize,
    size: usize,
) -> Result<()> {
    use dpattn_core::Error as E;
    if ptr == 0 {
        return Err(
            E::OutOfRange { name: arg, value: 0.0, allowed: "a non-null device pointer" }.into()
        );
    }
    if !ptr.is_multiple_of(size as u64) {
        return Err(E::OutOfRange {
            name: arg,
            value: ptr as f64,
            allowed: "a pointer aligned to its element size",
        }
        .into());
    }
    if len.checked_mul(size).is_none_or(|b| b > isize::MAX as usize) {
        return Err(E::SizeOverflow { what: "device buffer bytes" }.into());
    }
    Ok(())
}

/// `owner` (a buffer's stream, or the stream to run on) must belong to this device's
/// context: a pointer of another device would make the kernel fault and poison the shared
/// primary context.
pub(crate) fn in_context(what: &str, owner: &CudaStream, dev: &Device) -> Result<()> {
    if std::sync::Arc::ptr_eq(owner.context(), dev.context()) {
        Ok(())
    } else {
        Err(Error::Unsupported { what: format!("{what} of another device or context") })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpattn_core::sampling::NoiseKey;

    #[test]
    fn key_words_are_little_endian() {
        let mut bytes = [0u8; 32];
        bytes[0] = 1;
        bytes[7] = 0x80;
        let k = GpuKey::of(&KeyedStream::new(&NoiseKey::for_replay(bytes), 0));
        assert_eq!(k.w[0], 1);
        assert_eq!(k.w[1], 0x8000_0000);
        assert_eq!(std::mem::size_of::<GpuKey>(), 32);
    }

    #[test]
    fn parameters_come_from_the_cpu_samplers() {
        let (s, p) = GpuNoise::Exponential(Exponential::new(4.0).unwrap()).sampler_and_param();
        assert_eq!((s, p), (GpuSampler::Exponential, 0.25));
        let (s, p) = GpuNoise::Gaussian(Gaussian::new(1.5).unwrap()).sampler_and_param();
        assert_eq!((s, p), (GpuSampler::Gaussian, 1.5));
        assert_eq!(UniformBits::B53.elements_per_block(), 8);
        assert_eq!(UniformBits::B24.elements_per_block(), 16);
    }

    #[test]
    fn a_scale_whose_largest_draw_overflows_the_output_dtype_is_refused() {
        // Issue 28. Largest draws: √(2p ln 2)·σ (8.5717 at p = 53, 5.7684 at p = 24) and
        // p·ln 2 (36.737, 16.636) times the scale; f16's largest finite value is 65504.
        use GpuNoise as N;
        use OutDtype as D;
        use UniformBits as B;
        let g = |s: f64| N::Gaussian(Gaussian::new(s).unwrap());
        let lap = |s: f64| N::Laplace(dpattn_core::sampling::Laplace::new(s).unwrap());
        let (lo, hi) = (1.0 - 1e-3, 1.0 + 1e-3);
        for (noise_lo, noise_hi, bits, dtype) in [
            (g(65504.0 / 5.7684 * lo), g(65504.0 / 5.7684 * hi), B::B24, D::F16),
            (g(65504.0 / 8.5717 * lo), g(65504.0 / 8.5717 * hi), B::B53, D::F16),
            (g(3.4028e38 / 8.5717 * lo), g(3.4028e38 / 8.5717 * hi), B::B53, D::F32),
            (lap(3.4028e38 / 16.636 * lo), lap(3.4028e38 / 16.636 * hi), B::B24, D::F32),
        ] {
            assert!(check_largest_draw(noise_lo, bits, dtype).is_ok(), "{noise_lo:?} {dtype:?}");
            assert!(check_largest_draw(noise_hi, bits, dtype).is_err(), "{noise_hi:?} {dtype:?}");
            assert!(check_largest_draw(noise_hi, bits, D::F64).is_ok());
        }
        assert!(check_largest_draw(N::Uniform, B::B24, D::F16).is_ok());
    }

    #[test]
    fn device_buffers_are_checked_before_any_launch() {
        assert!(check_device_buffer("out", 0, 4, 4).is_err());
        assert!(check_device_buffer("out", 2, 4, 4).is_err());
        assert!(check_device_buffer("out", 4096, usize::MAX / 2, 4).is_err());
        assert!(check_device_buffer("out", 4096, 4, 4).is_ok());
        assert!(
            u16::holds(OutDtype::Bf16) && u16::holds(OutDtype::F16) && !u16::holds(OutDtype::F32)
        );
        assert!(
            f32::holds(OutDtype::F32) && !f32::holds(OutDtype::F64) && f64::holds(OutDtype::F64)
        );
    }
}
