//! Keyed noise from C: the addressable ChaCha20 stream (`docs/RANDOMNESS.md`), the
//! continuous fixed-word samplers, the exact integer samplers, grid-snapped ("secure")
//! Laplace and Gaussian noise, and keyed permutations.
//!
//! Every draw is identified by a `dpattn_key` and a 64-bit stream id; element `i` of an
//! output buffer receives logical element `first_index + i` of that draw, so a tensor can
//! be filled in independent chunks (threads, devices, calls) with identical bits, and an
//! auditor holding the key can re-derive any element. **One (key, stream) pair serves one
//! draw only**: reusing it repeats the noise.

use std::ffi::c_void;

use dpattn_core::sampling::{
    DiscreteGaussian, DiscreteLaplace, ExactSampler, Exponential, FixedWordSampler, Gaussian,
    GridGaussian, GridLaplace, KeyedStream, Laplace, STREAM_WORDS, TruncatedLaplace, Uniform,
    sample_permutation_keyed,
};

use crate::args::{Buffers, Out, read, slice_mut};
use crate::boundary::{FfiError, ffi_status};
use crate::status::dpattn_status;
use crate::tensor::{DPATTN_DTYPE_F32, DPATTN_DTYPE_F64, dpattn_dtype, dpattn_key};

/// The output precisions of the continuous samplers (the core's `NoiseFloat`: `f32`, `f64`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Precision {
    F32,
    F64,
}

const NOISE_DTYPES: &str = "DPATTN_DTYPE_F32 (0) or DPATTN_DTYPE_F64 (1) (the continuous samplers \
                            produce f32 or f64 only; F16/BF16 are not supported)";

impl Precision {
    fn decode(code: dpattn_dtype) -> Result<Self, FfiError> {
        match code {
            DPATTN_DTYPE_F32 => Ok(Precision::F32),
            DPATTN_DTYPE_F64 => Ok(Precision::F64),
            value => Err(FfiError::UnknownValue { arg: "dtype", value, allowed: NOISE_DTYPES }),
        }
    }
}

/// Reads the key and records it as an input of the call.
///
/// # Safety
/// A non-NULL `key` must be valid for one read of `dpattn_key`.
unsafe fn read_key(key: *const dpattn_key, bufs: &mut Buffers) -> Result<dpattn_key, FfiError> {
    // SAFETY: forwarded caller contract.
    let k = unsafe { read(key, "key") }?;
    bufs.input("key", key, 1);
    Ok(k)
}

fn non_null<T>(ptr: *const T, len: usize, name: &'static str) -> Result<(), FfiError> {
    if ptr.is_null() && len > 0 { Err(FfiError::Null(name)) } else { Ok(()) }
}

/// The shared body of the fixed-word fills.
///
/// # Safety
/// As the `dpattn_fill_*` functions: `key` readable, `out` writable for `len` elements of
/// the dtype's type and not accessed by anything else during the call.
unsafe fn fill_fixed<S: FixedWordSampler>(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    sampler: impl FnOnce() -> dpattn_core::Result<S>,
    dtype: dpattn_dtype,
    out: *mut c_void,
    len: usize,
) -> Result<(), FfiError> {
    let precision = Precision::decode(dtype)?;
    let mut bufs = Buffers::default();
    // SAFETY: forwarded caller contract.
    let k = unsafe { read_key(key, &mut bufs) }?;
    non_null(out.cast_const(), len, "out")?;
    match precision {
        Precision::F32 => bufs.output("out", out.cast::<f32>(), len),
        Precision::F64 => bufs.output("out", out.cast::<f64>(), len),
    };
    let sampler = sampler()?;
    bufs.disjoint()?;
    let s = KeyedStream::new(&k.to_core(), stream);
    // `fill_keyed` fails only on `first_index + len` overflowing, before writing anything.
    match precision {
        Precision::F32 => {
            // SAFETY: writable for `len` f32 and exclusive (caller contract, overlap checked).
            let o = unsafe { slice_mut(out.cast::<f32>(), len, "out") }?;
            sampler.fill_keyed(&s, first_index, o)?;
        }
        Precision::F64 => {
            // SAFETY: as above for f64.
            let o = unsafe { slice_mut(out.cast::<f64>(), len, "out") }?;
            sampler.fill_keyed(&s, first_index, o)?;
        }
    }
    Ok(())
}

/// Fills `out[0..len]` with Gaussian noise `N(0, sigma²)`: `out[i]` is element
/// `first_index + i` of the draw `(key, stream)`, bit for bit what the core's
/// `Gaussian::new(sigma).fill_keyed(&KeyedStream::new(key, stream), first_index, out)`
/// produces (Box–Muller; `docs/RANDOMNESS.md` §3: an `f64` pair consumes 4 stream words and
/// uses 53-bit uniforms, an `f32` pair 2 words and 24-bit uniforms, so the `f32` and `f64`
/// draws of one stream are different noise). A fill may start at any index, even or odd:
/// a sub-range call equals the same slice of a larger call.
///
/// This is a floating-point sampler (its support is bounded, `|z| < 8.57 sigma` in `f64`);
/// for a release that must resist floating-point attacks use `dpattn_grid_gaussian_add`.
///
/// `dtype`: `DPATTN_DTYPE_F32` (`out` is `float*`) or `DPATTN_DTYPE_F64` (`double*`).
///
/// Returns `DPATTN_STATUS_OK`, or
/// * `DPATTN_STATUS_NULL_ARGUMENT`: `key` NULL, or `out` NULL with `len > 0`;
/// * `DPATTN_STATUS_OUT_OF_RANGE`: `dtype` not F32/F64 (F16/BF16 are not sampler types),
///   `sigma` not finite and `> 0`, or so large that the largest draw is not finite in the
///   `dtype` (`8.57·sigma` above `DBL_MAX`; `5.77·sigma` above `FLT_MAX` for F32; the other
///   samplers likewise with their largest draw);
/// * `DPATTN_STATUS_MISALIGNED`, `DPATTN_STATUS_SIZE_OVERFLOW` (byte length of `out`
///   beyond `isize`, or `first_index + len` beyond 2^64), `DPATTN_STATUS_ALIASING` (`out`
///   overlaps `*key`).
///
/// `out` is written only on success. Thread-safe; no shared state.
///
/// ```c
/// dpattn_key key;                      // 32 secret bytes from the OS or a KMS
/// float noise[1024];
/// // elements 0..1023 of draw (key, stream 7)
/// dpattn_status st = dpattn_fill_gaussian(&key, 7, 0, 2.0, DPATTN_DTYPE_F32, noise, 1024);
/// if (st != DPATTN_STATUS_OK) { char msg[256]; dpattn_last_error_message(msg, sizeof msg); }
/// // elements 512..1023 again, e.g. on another thread: identical bits
/// dpattn_fill_gaussian(&key, 7, 512, 2.0, DPATTN_DTYPE_F32, noise + 512, 512);
/// ```
///
/// # Safety
/// `key` must be NULL or valid for reading a `dpattn_key`; `out` must be NULL or valid for
/// writing `len` elements of the `dtype`'s type, and nothing else may access it during the
/// call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_fill_gaussian(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    sigma: f64,
    dtype: dpattn_dtype,
    out: *mut c_void,
    len: usize,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe {
        fill_fixed(key, stream, first_index, || Gaussian::new(sigma), dtype, out, len)
    })
}

/// Fills `out[0..len]` with uniform variates in `(0, 1]`: `out[i]` is element
/// `first_index + i` of the draw `(key, stream)`, `U = (k + 1)·2^-p` with `p = 53` (`f64`,
/// two words per element) or `p = 24` (`f32`, one word); `docs/RANDOMNESS.md` §3. Equal
/// to the core's `Uniform.fill_keyed`.
///
/// Status codes, safety and thread safety as `dpattn_fill_gaussian` (no parameter to
/// validate).
///
/// # Safety
/// As `dpattn_fill_gaussian`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_fill_uniform(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    dtype: dpattn_dtype,
    out: *mut c_void,
    len: usize,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe { fill_fixed(key, stream, first_index, || Ok(Uniform), dtype, out, len) })
}

/// Fills `out[0..len]` with Laplace noise of scale `scale` (density
/// `exp(-|z|/b)/(2b)`): `out[i]` is element `first_index + i` of the draw `(key, stream)`,
/// `±(-ln U)·b` with the sign from bit 0 of the element's first word (`docs/RANDOMNESS.md`
/// §3). Equal to the core's `Laplace::new(scale).fill_keyed`. For an ε-DP release of an
/// L1-sensitivity-Δ query use `b = dpattn_laplace_scale(Δ, ε)`; a floating-point sampler
/// (see `dpattn_grid_laplace_add` for the exact release).
///
/// Status codes as `dpattn_fill_gaussian`; `DPATTN_STATUS_OUT_OF_RANGE` also for `scale`
/// not finite and `> 0`. Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_fill_gaussian`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_fill_laplace(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    scale: f64,
    dtype: dpattn_dtype,
    out: *mut c_void,
    len: usize,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe {
        fill_fixed(key, stream, first_index, || Laplace::new(scale), dtype, out, len)
    })
}

/// Fills `out[0..len]` with exponential variates of rate `rate` (mean `1/rate`): `out[i]`
/// is element `first_index + i` of the draw `(key, stream)`, `(-ln U)·(1/rate)`
/// (`docs/RANDOMNESS.md` §3). Equal to the core's `Exponential::new(rate).fill_keyed`.
///
/// Status codes as `dpattn_fill_gaussian`; `DPATTN_STATUS_OUT_OF_RANGE` also for `rate`
/// not finite and `> 0` or `1/rate` not finite. Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_fill_gaussian`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_fill_exponential(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    rate: f64,
    dtype: dpattn_dtype,
    out: *mut c_void,
    len: usize,
) -> dpattn_status {
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe {
        fill_fixed(key, stream, first_index, || Exponential::new(rate), dtype, out, len)
    })
}

/// Fills `out[0..len]` with truncated Laplace noise `TLap(Δ, ε, δ)` (density
/// `∝ exp(-ε|z|/Δ)` on `[-B, B]`, `B = (Δ/ε)·ln(1 + (e^ε − 1)/(2δ))`): `out[i]` is element
/// `first_index + i` of the draw `(key, stream)`, two words per element for both precisions
/// (`docs/RANDOMNESS.md` §3). Equal to the core's `TruncatedLaplace::new(..).fill_keyed`.
///
/// **Privacy** (core docs, `docs/PAPERS.md` §1.3): if `f` has sensitivity `Δ` (under
/// whatever neighbour relation `Δ` was computed for), `f(X) + TLap(Δ, ε, δ)` is
/// `(ε, δ)`-DP for `0 < δ ≤ 1/2`; `δ = 0` is the ordinary `Lap(Δ/ε)`. The bound and the
/// variance come from `dpattn_truncated_laplace_bound`.
///
/// Status codes as `dpattn_fill_gaussian`; `DPATTN_STATUS_OUT_OF_RANGE` also for
/// `sensitivity` or `epsilon` not finite and `> 0`, `delta` outside `[0, 1/2]`, or a
/// non-finite `Δ/ε` or `B`. Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_fill_gaussian`.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_fill_truncated_laplace(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    sensitivity: f64,
    epsilon: f64,
    delta: f64,
    dtype: dpattn_dtype,
    out: *mut c_void,
    len: usize,
) -> dpattn_status {
    let make = || TruncatedLaplace::new(sensitivity, epsilon, delta);
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe { fill_fixed(key, stream, first_index, make, dtype, out, len) })
}

/// The shared body of the exact integer fills.
///
/// # Safety
/// `key` readable; `out` writable for `len` `int64_t` and exclusive during the call.
unsafe fn fill_exact<S: ExactSampler<Output = i64>>(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    sampler: impl FnOnce() -> dpattn_core::Result<S>,
    out: *mut i64,
    len: usize,
) -> Result<(), FfiError> {
    let mut bufs = Buffers::default();
    // SAFETY: forwarded caller contract.
    let k = unsafe { read_key(key, &mut bufs) }?;
    non_null(out.cast_const(), len, "out")?;
    bufs.output("out", out, len);
    let sampler = sampler()?;
    bufs.disjoint()?;
    let s = KeyedStream::new(&k.to_core(), stream);
    // SAFETY: writable for `len` i64 and exclusive (caller contract, overlap checked).
    let o = unsafe { slice_mut(out, len, "out") }?;
    // Index overflow and indices >= 2^40 are reported before anything is written.
    sampler.fill_keyed(&s, first_index, o)?;
    Ok(())
}

/// Fills `out[0..len]` with exact discrete Laplace noise of scale `t/s`
/// (`P(x) = tanh(s/2t)·e^{-|x|·s/t}` on the integers, CKS20 Algorithm 2): `out[i]` is
/// element `first_index + i` of the draw `(key, stream)`, drawn from that element's own
/// window of the stream (`docs/RANDOMNESS.md` §4), so any sub-range equals the slice of a
/// larger fill. Equal to the core's `DiscreteLaplace::new(t, s).fill_keyed`.
///
/// **Privacy** (core docs): if an integer-valued `f` has L1 sensitivity `Δ`,
/// `f(X) + DLap(Δ/ε)` is ε-DP. Integer arithmetic only; run time depends on the noise
/// (timing leaks its magnitude). `dpattn_discrete_laplace_ratio` turns a `double` scale
/// into `(t, s)` (rounded up).
///
/// Returns `DPATTN_STATUS_OK`, or
/// * `DPATTN_STATUS_NULL_ARGUMENT`: `key` NULL, or `out` NULL with `len > 0`;
/// * `DPATTN_STATUS_OUT_OF_RANGE`: `scale_num` or `scale_den` zero, `t/s > 2^56`, or an
///   element index `first_index + i >= 2^40`;
/// * `DPATTN_STATUS_SIZE_OVERFLOW`: `first_index + len` beyond 2^64, or (probability below
///   e^-128) a sample beyond `int64_t`;
/// * `DPATTN_STATUS_RANDOMNESS_EXHAUSTED`: an element used up its window (probability far
///   below 2^-1000);
/// * `DPATTN_STATUS_MISALIGNED`, `DPATTN_STATUS_ALIASING` (`out` overlaps `*key`).
///
/// `out` is untouched on every error except the two sampler failures of negligible
/// probability (a sample beyond `int64_t`, an exhausted window), after which its contents
/// are unspecified. Thread-safe; no shared state.
///
/// # Safety
/// `key` must be NULL or valid for reading a `dpattn_key`; `out` must be NULL or valid for
/// writing `len` `int64_t`, accessed by nothing else during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_fill_discrete_laplace(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    scale_num: u64,
    scale_den: u64,
    out: *mut i64,
    len: usize,
) -> dpattn_status {
    let make = || DiscreteLaplace::new(scale_num, scale_den);
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe { fill_exact(key, stream, first_index, make, out, len) })
}

/// Fills `out[0..len]` with exact discrete Gaussian noise `N_ℤ(0, σ²)`, `σ = s/q`
/// (`P(x) ∝ e^{-x²/2σ²}` on the integers, CKS20 Algorithm 3): `out[i]` is element
/// `first_index + i` of the draw `(key, stream)`, from that element's own window
/// (`docs/RANDOMNESS.md` §4). Equal to the core's `DiscreteGaussian::new(s, q).fill_keyed`.
///
/// **Privacy** (core docs): if an integer-valued `f` has L2 sensitivity `Δ`,
/// `f(X) + N_ℤ(0, σ²)` per coordinate is `Δ²/(2σ²)`-zCDP (CKS20 Thm 4); its variance is
/// below `σ²`. Supported range: reduced `s·q·(⌊s/q⌋+1) < 2^63` and `q²·(⌊s/q⌋+1) < 2^64`
/// (σ up to about 3.04e9). `dpattn_discrete_gaussian_ratio` turns a `double` σ into
/// `(s, q)` (rounded up).
///
/// Status codes and the partial-write caveat as `dpattn_fill_discrete_laplace`
/// (`DPATTN_STATUS_OUT_OF_RANGE` for `(sigma_num, sigma_den)` outside the range).
/// Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_fill_discrete_laplace`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_fill_discrete_gaussian(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    sigma_num: u64,
    sigma_den: u64,
    out: *mut i64,
    len: usize,
) -> dpattn_status {
    let make = || DiscreteGaussian::new(sigma_num, sigma_den);
    // SAFETY: forwarded caller contract.
    ffi_status(|| unsafe { fill_exact(key, stream, first_index, make, out, len) })
}

/// The exact scale `t/s` the discrete Laplace sampler uses for the `double` `scale`: the
/// dyadic rational the double is, or (below about 2^-11) rounded *up* to a multiple of
/// 2^-63 (`DiscreteLaplace::from_f64`). Writes `*out_num = t`, `*out_den = s`.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` (an out-pointer NULL) or
/// `DPATTN_STATUS_OUT_OF_RANGE` (`scale` outside `(0, 2^56]` or NaN). Thread-safe; no
/// shared state.
///
/// # Safety
/// `out_num` and `out_den` must be NULL or valid for writing a `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_discrete_laplace_ratio(
    scale: f64,
    out_num: *mut u64,
    out_den: *mut u64,
) -> dpattn_status {
    ffi_status(|| {
        let (num, den) = (Out::new(out_num, "out_num")?, Out::new(out_den, "out_den")?);
        let (t, s) = DiscreteLaplace::from_f64(scale)?.scale();
        // SAFETY: writable per the caller contract.
        unsafe {
            num.write(t);
            den.write(s);
        }
        Ok(())
    })
}

/// The exact `σ = s/q` the discrete Gaussian sampler uses for the `double` `sigma`,
/// rounded *up* (`DiscreteGaussian::from_f64`: `q` the largest power of two the range
/// allows, `s = ⌈σq⌉`, reduced; relative rounding below 2^-30 for `σ ≥ 1/2`). Writes
/// `*out_num = s`, `*out_den = q`.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` or `DPATTN_STATUS_OUT_OF_RANGE`
/// (`sigma` not finite and `> 0`, or above 3037000499). Thread-safe; no shared state.
///
/// # Safety
/// `out_num` and `out_den` must be NULL or valid for writing a `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_discrete_gaussian_ratio(
    sigma: f64,
    out_num: *mut u64,
    out_den: *mut u64,
) -> dpattn_status {
    ffi_status(|| {
        let (num, den) = (Out::new(out_num, "out_num")?, Out::new(out_den, "out_den")?);
        let (s, q) = DiscreteGaussian::from_f64(sigma)?.sigma_ratio();
        // SAFETY: writable per the caller contract.
        unsafe {
            num.write(s);
            den.write(q);
        }
        Ok(())
    })
}

/// `resolution_exponent` value asking the grid mechanisms for their default resolution
/// (Laplace: the smallest `2^k ≥ (Δ₁/ε)/2^40`; Gaussian: the smallest `2^k` with
/// `σ/2^k ≤ 2^30`).
pub const DPATTN_GRID_DEFAULT_RESOLUTION: i32 = i32::MAX;

/// What a grid mechanism does with its parameters (`dpattn_grid_laplace_describe`,
/// `dpattn_grid_gaussian_describe`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct dpattn_grid_info {
    /// `k` of the resolution `r = 2^k`.
    pub resolution_exponent: i32,
    /// The resolution `r = 2^k`: outputs are multiples of it.
    pub resolution: f64,
    /// The sensitivity of the rounded data, rounded up: `Δ₁ + d·r` (Laplace) or
    /// `Δ₂ + √d·r` (Gaussian).
    pub rounded_sensitivity: f64,
    /// Numerator of the integer noise's exact scale: `t` of the discrete Laplace scale
    /// `t/s`, or `s` of the discrete Gaussian `σ/r = s/q`.
    pub integer_scale_num: u64,
    /// Denominator of the integer noise's exact scale (`s`, or `q`).
    pub integer_scale_den: u64,
    /// The effective noise scale on the data's scale: `r·t/s` (Laplace scale) or `r·s/q`
    /// (Gaussian σ, at least the requested σ), rounded to nearest.
    pub noise_scale: f64,
    /// Laplace: the ε of the pure ε-DP guarantee (as given). Gaussian: NaN.
    pub epsilon: f64,
    /// Gaussian: an upper bound on the ρ of the ρ-zCDP guarantee,
    /// `(Δ₂ + √d·r)²/(2σ²)` rounded up. Laplace: NaN.
    pub rho: f64,
}

fn grid_laplace(l1: f64, eps: f64, dim: usize, k: i32) -> dpattn_core::Result<GridLaplace> {
    if k == DPATTN_GRID_DEFAULT_RESOLUTION {
        GridLaplace::new(l1, eps, dim)
    } else {
        GridLaplace::with_resolution(l1, eps, dim, k)
    }
}

fn grid_gaussian(l2: f64, sigma: f64, dim: usize, k: i32) -> dpattn_core::Result<GridGaussian> {
    if k == DPATTN_GRID_DEFAULT_RESOLUTION {
        GridGaussian::new(l2, sigma, dim)
    } else {
        GridGaussian::with_resolution(l2, sigma, dim, k)
    }
}

/// The shared body of the grid mechanisms.
///
/// # Safety
/// `key` readable; `data` readable and writable for `len` doubles, exclusive.
unsafe fn grid_add(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    data: *mut f64,
    len: usize,
    add: impl FnOnce(&KeyedStream, u64, &mut [f64]) -> dpattn_core::Result<()>,
) -> Result<(), FfiError> {
    let mut bufs = Buffers::default();
    // SAFETY: forwarded caller contract.
    let k = unsafe { read_key(key, &mut bufs) }?;
    non_null(data.cast_const(), len, "data")?;
    bufs.output("data", data, len);
    bufs.disjoint()?;
    let s = KeyedStream::new(&k.to_core(), stream);
    // SAFETY: readable/writable for `len` f64 and exclusive (caller contract, overlap checked).
    let d = unsafe { slice_mut(data, len, "data") }?;
    add(&s, first_index, d)?;
    Ok(())
}

/// Adds exact grid-snapped Laplace noise to `data[0..len]` in place ("secure" floating-point
/// Laplace, Google's "Secure Noise Generation" / OpenDP pattern): coordinate `first_index + i`
/// of a `dimension`-coordinate query becomes `(round(x/r) + Z)·r` with `r = 2^k` (see
/// `DPATTN_GRID_DEFAULT_RESOLUTION`) and `Z` exact discrete Laplace noise of scale
/// `(Δ₁ + d·r)/(r·ε)` drawn from element `first_index + i`'s window of `(key, stream)`.
/// Equal to the core's `GridLaplace::{new, with_resolution}(..).add_noise_keyed`.
///
/// **Privacy** (core docs): neighbouring inputs differ by at most `l1_sensitivity` in L1
/// norm over the `dimension` coordinates; the release of all coordinates is ε-DP (the
/// rounding is paid for by inflating the sensitivity to `Δ₁ + d·r`). `dpattn_grid_laplace_describe`
/// reports `r` and the exact integer scale.
///
/// Returns `DPATTN_STATUS_OK`, or
/// * `DPATTN_STATUS_NULL_ARGUMENT`: `key` NULL, or `data` NULL with `len > 0`;
/// * `DPATTN_STATUS_OUT_OF_RANGE`: `l1_sensitivity`/`epsilon` not finite and `> 0`,
///   `dimension` 0 or above 2^53, `k` outside `[-1023, 960]`, an integer scale above 2^56,
///   or an element index `>= 2^40`;
/// * `DPATTN_STATUS_DOMAIN_VIOLATION`: a data value with `|x| >= 2^53·r` (data-dependent);
/// * `DPATTN_STATUS_NON_FINITE`: NaN or infinity in `data` (data-dependent);
/// * `DPATTN_STATUS_SHAPE_MISMATCH`: `first_index + len > dimension`;
/// * `DPATTN_STATUS_SIZE_OVERFLOW`, `DPATTN_STATUS_RANDOMNESS_EXHAUSTED`,
///   `DPATTN_STATUS_MISALIGNED`, `DPATTN_STATUS_ALIASING` (`data` overlaps `*key`).
///
/// The data-dependent refusals are a usability check on private data, not part of the
/// mechanism: show them only to the data holder, and clamp data to a public bound first.
/// Their message withholds the offending position and value
/// (`dpattn_last_error_private_detail` has them).
/// Parameter and data errors leave `data` untouched; if the sampler fails mid-way (window
/// exhausted or an integer overflow, probability below 2^-60) every element of `data` is
/// set to NaN, so no un-noised value can be released by mistake. Thread-safe; no shared
/// state.
///
/// # Safety
/// `key` must be NULL or valid for reading a `dpattn_key`; `data` must be NULL or valid for
/// reading and writing `len` doubles, accessed by nothing else during the call.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_grid_laplace_add(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    l1_sensitivity: f64,
    epsilon: f64,
    dimension: usize,
    resolution_exponent: i32,
    data: *mut f64,
    len: usize,
) -> dpattn_status {
    ffi_status(|| {
        let m = grid_laplace(l1_sensitivity, epsilon, dimension, resolution_exponent);
        // SAFETY: forwarded caller contract.
        unsafe {
            grid_add(key, stream, first_index, data, len, |s, f, d| m?.add_noise_keyed(s, f, d))
        }
    })
}

/// Adds exact grid-snapped Gaussian noise to `data[0..len]` in place: coordinate
/// `first_index + i` becomes `(round(x/r) + Z)·r` with `Z ~ N_ℤ(0, (σ/r)²)` exact (σ/r
/// rounded up by a relative `< 2^-30`) drawn from element `first_index + i`'s window of
/// `(key, stream)`. Equal to the core's `GridGaussian::{new, with_resolution}(..)
/// .add_noise_keyed`.
///
/// **Privacy** (core docs): neighbouring inputs differ by at most `l2_sensitivity` in L2
/// norm; the release is ρ-zCDP with `ρ = (Δ₂ + √d·r)²/(2σ²)` (CKS20 Thm 4), reported
/// (rounded up) by `dpattn_grid_gaussian_describe`.
///
/// Status codes, data-dependent refusals and the NaN poisoning on a sampler failure as
/// `dpattn_grid_laplace_add` (`DPATTN_STATUS_OUT_OF_RANGE` for `l2_sensitivity`/`sigma` not
/// finite and `> 0`, or `σ/r` beyond the discrete Gaussian's range, about 3.04e9).
/// Thread-safe; no shared state.
///
/// # Safety
/// As `dpattn_grid_laplace_add`.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_grid_gaussian_add(
    key: *const dpattn_key,
    stream: u64,
    first_index: u64,
    l2_sensitivity: f64,
    sigma: f64,
    dimension: usize,
    resolution_exponent: i32,
    data: *mut f64,
    len: usize,
) -> dpattn_status {
    ffi_status(|| {
        let m = grid_gaussian(l2_sensitivity, sigma, dimension, resolution_exponent);
        // SAFETY: forwarded caller contract.
        unsafe {
            grid_add(key, stream, first_index, data, len, |s, f, d| m?.add_noise_keyed(s, f, d))
        }
    })
}

/// Describes the grid Laplace mechanism of these parameters (same validation as
/// `dpattn_grid_laplace_add`); `epsilon` is set, `rho` is NaN.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` (`out_info`) or
/// `DPATTN_STATUS_OUT_OF_RANGE`. Thread-safe; no shared state.
///
/// # Safety
/// `out_info` must be NULL or valid for writing a `dpattn_grid_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_grid_laplace_describe(
    l1_sensitivity: f64,
    epsilon: f64,
    dimension: usize,
    resolution_exponent: i32,
    out_info: *mut dpattn_grid_info,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_info, "out_info")?;
        let m = grid_laplace(l1_sensitivity, epsilon, dimension, resolution_exponent)?;
        let (t, s) = m.integer_noise().scale();
        let info = dpattn_grid_info {
            resolution_exponent: m.resolution_exponent(),
            resolution: m.resolution(),
            rounded_sensitivity: m.rounded_sensitivity(),
            integer_scale_num: t,
            integer_scale_den: s,
            noise_scale: m.scale(),
            epsilon,
            rho: f64::NAN,
        };
        // SAFETY: writable per the caller contract.
        unsafe { out.write(info) };
        Ok(())
    })
}

/// Describes the grid Gaussian mechanism of these parameters (same validation as
/// `dpattn_grid_gaussian_add`); `rho` is set, `epsilon` is NaN.
///
/// Returns `DPATTN_STATUS_OK`, `DPATTN_STATUS_NULL_ARGUMENT` (`out_info`) or
/// `DPATTN_STATUS_OUT_OF_RANGE`. Thread-safe; no shared state.
///
/// # Safety
/// `out_info` must be NULL or valid for writing a `dpattn_grid_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_grid_gaussian_describe(
    l2_sensitivity: f64,
    sigma: f64,
    dimension: usize,
    resolution_exponent: i32,
    out_info: *mut dpattn_grid_info,
) -> dpattn_status {
    ffi_status(|| {
        let out = Out::new(out_info, "out_info")?;
        let m = grid_gaussian(l2_sensitivity, sigma, dimension, resolution_exponent)?;
        let (s, q) = m.integer_noise().sigma_ratio();
        let info = dpattn_grid_info {
            resolution_exponent: m.resolution_exponent(),
            resolution: m.resolution(),
            rounded_sensitivity: m.rounded_sensitivity(),
            integer_scale_num: s,
            integer_scale_den: q,
            noise_scale: m.sigma(),
            epsilon: f64::NAN,
            rho: m.rho(),
        };
        // SAFETY: writable per the caller contract.
        unsafe { out.write(info) };
        Ok(())
    })
}

fn word_pos(lo: u64, hi: u64) -> u128 {
    (u128::from(hi) << 64) | u128::from(lo)
}

/// Copies the raw ChaCha20 keystream words `w, w + 1, …, w + len − 1` of stream `stream`
/// under `key` into `out`, where `w = first_word_hi·2^64 + first_word_lo`. Word `w` is word
/// `w mod 16` of the ChaCha20 block with 64-bit counter `⌊w/16⌋` and 64-bit stream id
/// `stream` (Bernstein's layout, `docs/RANDOMNESS.md` §1: state words 12–13 the counter,
/// 14–15 the stream id, low word first); a stream has 2^68 words. For audit replay: every
/// sampler's output is a documented function of these words.
///
/// RFC 8439's 32-bit counter `c` and nonce `(n0, n1, n2)` map to block counter
/// `c | n0 << 32` and stream id `n1 | n2 << 32`.
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`key`, or `out` with
/// `len > 0`), `DPATTN_STATUS_OUT_OF_RANGE` (`w + len > 2^68`), `DPATTN_STATUS_MISALIGNED`,
/// `DPATTN_STATUS_SIZE_OVERFLOW`, `DPATTN_STATUS_ALIASING`. `out` is written only on
/// success. Thread-safe; no shared state.
///
/// # Safety
/// `key` must be NULL or valid for reading a `dpattn_key`; `out` must be NULL or valid for
/// writing `len` `uint32_t`, accessed by nothing else during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_stream_words(
    key: *const dpattn_key,
    stream: u64,
    first_word_lo: u64,
    first_word_hi: u64,
    out: *mut u32,
    len: usize,
) -> dpattn_status {
    ffi_status(|| {
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let k = unsafe { read_key(key, &mut bufs) }?;
        non_null(out.cast_const(), len, "out")?;
        bufs.output("out", out, len);
        let pos = word_pos(first_word_lo, first_word_hi);
        if pos.checked_add(len as u128).is_none_or(|end| end > STREAM_WORDS) {
            return Err(FfiError::Core(dpattn_core::Error::OutOfRange {
                name: "first_word + len (word positions of a stream)",
                value: pos as f64 + len as f64,
                allowed: "[0, 2^68]",
            }));
        }
        bufs.disjoint()?;
        let s = KeyedStream::new(&k.to_core(), stream);
        // SAFETY: writable for `len` u32 and exclusive (caller contract, overlap checked).
        let o = unsafe { slice_mut(out, len, "out") }?;
        let mut p = pos;
        let mut rest = &mut o[..];
        while !rest.is_empty() {
            let block = s.block((p >> 4) as u64);
            let start = (p & 15) as usize;
            let take = (16 - start).min(rest.len());
            let (head, tail) = rest.split_at_mut(take);
            head.copy_from_slice(&block[start..start + take]);
            rest = tail;
            p += take as u128;
        }
        Ok(())
    })
}

/// Writes a uniformly random permutation of `0 .. len` into `out` (Fisher–Yates with
/// Lemire's unbiased bounded integers), reading the words of `(key, stream)` sequentially
/// from word position `w = first_word_hi·2^64 + first_word_lo`; the word position after the
/// last word used (where an independent next draw may start) goes to
/// `*out_next_word_lo`/`*out_next_word_hi`. Equal to the core's `sample_permutation_keyed`
/// (and to `sample_permutation` on a `ChaCha20Rng` set to the same stream and word).
///
/// Returns `DPATTN_STATUS_OK`, or `DPATTN_STATUS_NULL_ARGUMENT` (`key`, an out-pointer, or
/// `out` with `len > 0`), `DPATTN_STATUS_OUT_OF_RANGE` (`w >= 2^68`, or the draw would need
/// a word at position 2^68 or beyond), `DPATTN_STATUS_MISALIGNED`,
/// `DPATTN_STATUS_SIZE_OVERFLOW`, `DPATTN_STATUS_ALIASING`. The out-params are written only
/// on success, and `out` too except when the stream ends mid-draw (only possible when `w`
/// is within a few words per element of 2^68); `out` is then unspecified. Thread-safe; no
/// shared state.
///
/// # Safety
/// `key` must be NULL or valid for reading a `dpattn_key`; `out` NULL or valid for writing
/// `len` `uint64_t` and accessed by nothing else during the call; the out-pointers NULL or
/// valid for writing a `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dpattn_sample_permutation(
    key: *const dpattn_key,
    stream: u64,
    first_word_lo: u64,
    first_word_hi: u64,
    out: *mut u64,
    len: usize,
    out_next_word_lo: *mut u64,
    out_next_word_hi: *mut u64,
) -> dpattn_status {
    ffi_status(|| {
        let next_lo = Out::new(out_next_word_lo, "out_next_word_lo")?;
        let next_hi = Out::new(out_next_word_hi, "out_next_word_hi")?;
        let mut bufs = Buffers::default();
        // SAFETY: forwarded caller contract.
        let k = unsafe { read_key(key, &mut bufs) }?;
        non_null(out.cast_const(), len, "out")?;
        bufs.output("out", out, len);
        bufs.output("out_next_word_lo", out_next_word_lo, 1);
        bufs.output("out_next_word_hi", out_next_word_hi, 1);
        let pos = word_pos(first_word_lo, first_word_hi);
        if pos >= STREAM_WORDS {
            return Err(FfiError::Core(dpattn_core::Error::OutOfRange {
                name: "first_word",
                value: pos as f64,
                allowed: "[0, 2^68)",
            }));
        }
        bufs.disjoint()?;
        let s = KeyedStream::new(&k.to_core(), stream);
        // SAFETY: writable for `len` u64 and exclusive (caller contract, overlap checked).
        let o = unsafe { slice_mut(out, len, "out") }?;
        let next = sample_permutation_keyed::<u64>(&s, pos, o)?;
        // SAFETY: writable per the caller contract.
        unsafe {
            next_lo.write(next as u64);
            next_hi.write((next >> 64) as u64);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::last_error::last_error_string;
    use crate::tensor::{DPATTN_DTYPE_BF16, DPATTN_DTYPE_F16};
    use dpattn_core::sampling::NoiseKey;
    use std::ptr::{null, null_mut};

    const KEY: dpattn_key = dpattn_key { bytes: [7; 32] };

    fn stream(s: u64) -> KeyedStream {
        KeyedStream::new(&NoiseKey::for_replay(KEY.bytes), s)
    }

    fn fails(status: dpattn_status, code: dpattn_status, needle: &str) {
        assert_eq!(status, code);
        let msg = last_error_string();
        assert!(msg.contains(needle), "{msg:?} should name {needle:?}");
    }

    type FillFn = unsafe extern "C" fn(
        *const dpattn_key,
        u64,
        u64,
        f64,
        dpattn_dtype,
        *mut c_void,
        usize,
    ) -> dpattn_status;

    fn check_fixed<S: FixedWordSampler>(f: FillFn, p: f64, s: S) {
        let mut a = [0f64; 37];
        let mut b = [0f64; 37];
        // SAFETY: valid key and a writable buffer of 37 doubles.
        let st = unsafe { f(&KEY, 3, 11, p, DPATTN_DTYPE_F64, a.as_mut_ptr().cast(), 37) };
        assert_eq!(st, dpattn_status::Ok);
        s.fill_keyed(&stream(3), 11, &mut b).unwrap();
        assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits));
        let mut c = [0f32; 37];
        let mut d = [0f32; 37];
        // SAFETY: as above, 37 floats.
        let st = unsafe { f(&KEY, 3, 11, p, DPATTN_DTYPE_F32, c.as_mut_ptr().cast(), 37) };
        assert_eq!(st, dpattn_status::Ok);
        s.fill_keyed(&stream(3), 11, &mut d).unwrap();
        assert_eq!(c.map(f32::to_bits), d.map(f32::to_bits));
    }

    unsafe extern "C" fn uniform(
        k: *const dpattn_key,
        s: u64,
        f: u64,
        _p: f64,
        d: dpattn_dtype,
        o: *mut c_void,
        n: usize,
    ) -> dpattn_status {
        // SAFETY: forwarded.
        unsafe { dpattn_fill_uniform(k, s, f, d, o, n) }
    }

    unsafe extern "C" fn tlap(
        k: *const dpattn_key,
        s: u64,
        f: u64,
        p: f64,
        d: dpattn_dtype,
        o: *mut c_void,
        n: usize,
    ) -> dpattn_status {
        // SAFETY: forwarded.
        unsafe { dpattn_fill_truncated_laplace(k, s, f, 1.0, p, 0.01, d, o, n) }
    }

    #[test]
    fn continuous_fills_equal_the_core() {
        check_fixed(dpattn_fill_gaussian, 2.5, Gaussian::new(2.5).unwrap());
        check_fixed(dpattn_fill_laplace, 0.5, Laplace::new(0.5).unwrap());
        check_fixed(dpattn_fill_exponential, 3.0, Exponential::new(3.0).unwrap());
        check_fixed(uniform, 0.0, Uniform);
        check_fixed(tlap, 0.7, TruncatedLaplace::new(1.0, 0.7, 0.01).unwrap());
    }

    #[test]
    fn fill_errors_name_the_argument_and_leave_out_untouched() {
        let mut o = [9f64; 4];
        let p = o.as_mut_ptr().cast::<c_void>();
        let f64t = DPATTN_DTYPE_F64;
        // SAFETY: every pointer below is NULL, valid, or a deliberately bad one that is
        // are rejected before any access.
        unsafe {
            fails(
                dpattn_fill_gaussian(null(), 0, 0, 1.0, f64t, p, 4),
                dpattn_status::NullArgument,
                "key",
            );
            fails(
                dpattn_fill_gaussian(&KEY, 0, 0, 1.0, f64t, null_mut(), 4),
                dpattn_status::NullArgument,
                "out",
            );
            assert_eq!(
                dpattn_fill_gaussian(&KEY, 0, 0, 1.0, f64t, null_mut(), 0),
                dpattn_status::Ok
            );
            for dt in [DPATTN_DTYPE_F16, DPATTN_DTYPE_BF16, 9] {
                fails(
                    dpattn_fill_gaussian(&KEY, 0, 0, 1.0, dt, p, 4),
                    dpattn_status::OutOfRange,
                    "DPATTN_DTYPE_F32",
                );
            }
            for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
                fails(
                    dpattn_fill_gaussian(&KEY, 0, 0, bad, f64t, p, 4),
                    dpattn_status::OutOfRange,
                    "sigma",
                );
            }
            fails(
                dpattn_fill_laplace(&KEY, 0, 0, -1.0, f64t, p, 4),
                dpattn_status::OutOfRange,
                "scale",
            );
            fails(
                dpattn_fill_exponential(&KEY, 0, 0, 0.0, f64t, p, 4),
                dpattn_status::OutOfRange,
                "rate",
            );
            fails(
                dpattn_fill_truncated_laplace(&KEY, 0, 0, 1.0, 1.0, 0.6, f64t, p, 4),
                dpattn_status::OutOfRange,
                "delta",
            );
            fails(
                dpattn_fill_gaussian(&KEY, 0, u64::MAX - 2, 1.0, f64t, p, 4),
                dpattn_status::SizeOverflow,
                "first element",
            );
            fails(
                dpattn_fill_gaussian(&KEY, 0, 0, 1.0, f64t, p.cast::<u8>().add(1).cast(), 2),
                dpattn_status::Misaligned,
                "out",
            );
            fails(
                dpattn_fill_gaussian(&KEY, 0, 0, 1.0, f64t, p, usize::MAX / 4),
                dpattn_status::SizeOverflow,
                "out",
            );
            // The key inside the output buffer.
            let mut arena = [0f64; 8];
            let key_in = arena.as_mut_ptr().cast::<dpattn_key>();
            key_in.write_unaligned(KEY);
            fails(
                dpattn_fill_gaussian(key_in, 0, 0, 1.0, f64t, arena.as_mut_ptr().cast(), 8),
                dpattn_status::Aliasing,
                "key",
            );
        }
        assert_eq!(o, [9.0; 4]);
    }

    #[test]
    fn exact_fills_equal_the_core() {
        let (mut a, mut b) = ([0i64; 40], [0i64; 40]);
        // SAFETY: valid key, writable buffer of 40.
        let st = unsafe { dpattn_fill_discrete_laplace(&KEY, 5, 100, 7, 2, a.as_mut_ptr(), 40) };
        assert_eq!(st, dpattn_status::Ok);
        DiscreteLaplace::new(7, 2).unwrap().fill_keyed(&stream(5), 100, &mut b).unwrap();
        assert_eq!(a, b);
        // SAFETY: as above.
        let st = unsafe { dpattn_fill_discrete_gaussian(&KEY, 5, 100, 21, 2, a.as_mut_ptr(), 40) };
        assert_eq!(st, dpattn_status::Ok);
        DiscreteGaussian::new(21, 2).unwrap().fill_keyed(&stream(5), 100, &mut b).unwrap();
        assert_eq!(a, b);
        let mut o = [5i64; 3];
        // SAFETY: bad arguments are rejected before any write.
        unsafe {
            fails(
                dpattn_fill_discrete_laplace(&KEY, 0, 0, 0, 1, o.as_mut_ptr(), 3),
                dpattn_status::OutOfRange,
                "scale numerator",
            );
            fails(
                dpattn_fill_discrete_laplace(null(), 0, 0, 1, 1, o.as_mut_ptr(), 3),
                dpattn_status::NullArgument,
                "key",
            );
            fails(
                dpattn_fill_discrete_gaussian(&KEY, 0, 0, 1, 0, o.as_mut_ptr(), 3),
                dpattn_status::OutOfRange,
                "sigma",
            );
            fails(
                dpattn_fill_discrete_gaussian(&KEY, 0, (1 << 40) - 2, 1, 1, o.as_mut_ptr(), 3),
                dpattn_status::OutOfRange,
                "element",
            );
            fails(
                dpattn_fill_discrete_gaussian(&KEY, 0, 0, 1, 1, null_mut(), 3),
                dpattn_status::NullArgument,
                "out",
            );
        }
        assert_eq!(o, [5; 3]);
    }

    #[test]
    fn ratios_equal_the_core() {
        let (mut n, mut d) = (0u64, 0u64);
        // SAFETY: valid out-pointers.
        unsafe {
            assert_eq!(dpattn_discrete_laplace_ratio(2.5, &mut n, &mut d), dpattn_status::Ok);
            assert_eq!((n, d), (5, 2));
            assert_eq!(dpattn_discrete_gaussian_ratio(0.8, &mut n, &mut d), dpattn_status::Ok);
            assert_eq!((n, d), DiscreteGaussian::from_f64(0.8).unwrap().sigma_ratio());
            fails(
                dpattn_discrete_gaussian_ratio(-1.0, &mut n, &mut d),
                dpattn_status::OutOfRange,
                "sigma",
            );
            fails(
                dpattn_discrete_laplace_ratio(1.0, null_mut(), &mut d),
                dpattn_status::NullArgument,
                "out_num",
            );
            fails(
                dpattn_discrete_laplace_ratio(1.0, &mut n, null_mut()),
                dpattn_status::NullArgument,
                "out_den",
            );
        }
        assert_eq!((n, d), DiscreteGaussian::from_f64(0.8).unwrap().sigma_ratio());
    }

    #[test]
    fn grid_mechanisms_equal_the_core() {
        let x = [0.25, -3.5, 1e3, 0.0, 7.125];
        let mut a = x;
        let mut b = x;
        let d = DPATTN_GRID_DEFAULT_RESOLUTION;
        // SAFETY: valid key and data.
        let st = unsafe { dpattn_grid_laplace_add(&KEY, 2, 3, 1.0, 0.5, 8, d, a.as_mut_ptr(), 5) };
        assert_eq!(st, dpattn_status::Ok);
        GridLaplace::new(1.0, 0.5, 8).unwrap().add_noise_keyed(&stream(2), 3, &mut b).unwrap();
        assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits));
        let (mut a, mut b) = (x, x);
        // SAFETY: as above.
        let st =
            unsafe { dpattn_grid_gaussian_add(&KEY, 2, 0, 1.0, 4.0, 5, -20, a.as_mut_ptr(), 5) };
        assert_eq!(st, dpattn_status::Ok);
        let g = GridGaussian::with_resolution(1.0, 4.0, 5, -20).unwrap();
        g.add_noise_keyed(&stream(2), 0, &mut b).unwrap();
        assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits));

        let mut info = dpattn_grid_info {
            resolution_exponent: 0,
            resolution: 0.0,
            rounded_sensitivity: 0.0,
            integer_scale_num: 0,
            integer_scale_den: 0,
            noise_scale: 0.0,
            epsilon: 0.0,
            rho: 0.0,
        };
        // SAFETY: valid out-pointer.
        let st = unsafe { dpattn_grid_gaussian_describe(1.0, 4.0, 5, -20, &mut info) };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(info.resolution_exponent, -20);
        assert_eq!(
            (info.integer_scale_num, info.integer_scale_den),
            g.integer_noise().sigma_ratio()
        );
        assert_eq!(
            (info.rho, info.noise_scale, info.rounded_sensitivity),
            (g.rho(), g.sigma(), g.rounded_sensitivity())
        );
        assert!(info.epsilon.is_nan());
        let l = GridLaplace::new(1.0, 0.5, 8).unwrap();
        // SAFETY: valid out-pointer.
        let st = unsafe { dpattn_grid_laplace_describe(1.0, 0.5, 8, d, &mut info) };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(
            (info.resolution, info.noise_scale, info.epsilon),
            (l.resolution(), l.scale(), 0.5)
        );
        assert_eq!((info.integer_scale_num, info.integer_scale_den), l.integer_noise().scale());
        assert!(info.rho.is_nan());

        let mut y = [1.0, f64::NAN];
        // SAFETY: bad arguments are rejected before data is written.
        unsafe {
            fails(
                dpattn_grid_laplace_add(&KEY, 0, 0, 1.0, 1.0, 2, d, y.as_mut_ptr(), 2),
                dpattn_status::NonFinite,
                "data",
            );
            fails(
                dpattn_grid_laplace_add(&KEY, 0, 1, 1.0, 1.0, 2, d, y.as_mut_ptr(), 2),
                dpattn_status::ShapeMismatch,
                "data",
            );
            fails(
                dpattn_grid_laplace_add(&KEY, 0, 0, 1.0, 0.0, 2, d, y.as_mut_ptr(), 2),
                dpattn_status::OutOfRange,
                "epsilon",
            );
            fails(
                dpattn_grid_gaussian_add(&KEY, 0, 0, 1.0, 1.0, 2, 5000, y.as_mut_ptr(), 2),
                dpattn_status::OutOfRange,
                "resolution exponent",
            );
            fails(
                dpattn_grid_gaussian_add(&KEY, 0, 0, 1.0, 1.0, 2, d, null_mut(), 2),
                dpattn_status::NullArgument,
                "data",
            );
            fails(
                dpattn_grid_gaussian_describe(1.0, 1.0, 0, d, &mut info),
                dpattn_status::OutOfRange,
                "dimension",
            );
            fails(
                dpattn_grid_laplace_describe(1.0, 1.0, 1, d, null_mut()),
                dpattn_status::NullArgument,
                "out_info",
            );
        }
        assert_eq!(y[0], 1.0);
        assert!(y[1].is_nan());
    }

    #[test]
    fn stream_words_equal_the_keyed_stream() {
        let s = stream(9);
        let mut w = [0u32; 50];
        // SAFETY: valid key and buffer.
        let st = unsafe { dpattn_stream_words(&KEY, 9, 13, 0, w.as_mut_ptr(), 50) };
        assert_eq!(st, dpattn_status::Ok);
        for (i, &x) in w.iter().enumerate() {
            assert_eq!(x, s.word(13 + i as u128).unwrap());
        }
        // The last words of the stream, addressed through the high half.
        let last = STREAM_WORDS - 3;
        let mut t = [0u32; 3];
        // SAFETY: as above.
        let st = unsafe {
            dpattn_stream_words(&KEY, 9, last as u64, (last >> 64) as u64, t.as_mut_ptr(), 3)
        };
        assert_eq!(st, dpattn_status::Ok);
        assert_eq!(t[2], s.word(STREAM_WORDS - 1).unwrap());
        let mut u = [1u32; 4];
        // SAFETY: rejected before writing.
        unsafe {
            fails(
                dpattn_stream_words(&KEY, 9, last as u64, (last >> 64) as u64, u.as_mut_ptr(), 4),
                dpattn_status::OutOfRange,
                "first_word",
            );
            fails(
                dpattn_stream_words(&KEY, 9, 0, u64::MAX, u.as_mut_ptr(), 4),
                dpattn_status::OutOfRange,
                "first_word",
            );
            fails(
                dpattn_stream_words(null(), 9, 0, 0, u.as_mut_ptr(), 4),
                dpattn_status::NullArgument,
                "key",
            );
        }
        assert_eq!(u, [1; 4]);
    }

    #[test]
    fn permutations_equal_the_core() {
        let mut p = [0u64; 20];
        let mut q = [0u64; 20];
        let (mut lo, mut hi) = (0u64, 0u64);
        // SAFETY: valid pointers.
        let st = unsafe {
            dpattn_sample_permutation(&KEY, 4, 1000, 0, p.as_mut_ptr(), 20, &mut lo, &mut hi)
        };
        assert_eq!(st, dpattn_status::Ok);
        let next = sample_permutation_keyed::<u64>(&stream(4), 1000, &mut q).unwrap();
        assert_eq!(p, q);
        assert_eq!((lo, hi), (next as u64, 0));
        let mut r = [7u64; 2];
        // SAFETY: rejected before writing.
        unsafe {
            fails(
                dpattn_sample_permutation(&KEY, 4, 0, 1 << 4, r.as_mut_ptr(), 2, &mut lo, &mut hi),
                dpattn_status::OutOfRange,
                "first_word",
            );
            fails(
                dpattn_sample_permutation(&KEY, 4, 0, 0, r.as_mut_ptr(), 2, null_mut(), &mut hi),
                dpattn_status::NullArgument,
                "out_next_word_lo",
            );
            fails(
                dpattn_sample_permutation(&KEY, 4, 0, 0, r.as_mut_ptr(), 2, &mut lo, null_mut()),
                dpattn_status::NullArgument,
                "out_next_word_hi",
            );
            fails(
                dpattn_sample_permutation(&KEY, 4, 0, 0, null_mut(), 2, &mut lo, &mut hi),
                dpattn_status::NullArgument,
                "out",
            );
            fails(
                dpattn_sample_permutation(
                    &KEY,
                    4,
                    0,
                    0,
                    r.as_mut_ptr(),
                    2,
                    r.as_mut_ptr(),
                    &mut hi,
                ),
                dpattn_status::Aliasing,
                "out",
            );
        }
        assert_eq!(r, [7; 2]);
        assert_eq!((lo, hi), (next as u64, 0));
    }
}
