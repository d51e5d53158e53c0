//! Clip each row of a hidden-state matrix to Euclidean norm `C`, then add `N(0, σ²)` noise
//! to every entry, on the GPU and in place: DP-Forward's token-level release
//! (`ClipRegion::Rows`, `ClipMode::Clip`, i.i.d. noise; seed-003 §4.2 and App. A.2).
//!
//! **Guarantee.** Neighbouring inputs differ in one row (one token); after clipping every
//! row has Euclidean norm `≤ C` *including rounding* (the CPU's margin rule: rows above
//! `C·(1 − μ)` are aimed at `C·(1 − 2μ)`, `μ = (dim + 16)·2⁻⁵²`, and rounded toward zero),
//! so the ℓ₂ sensitivity of the matrix is `2C` under replacement, and the Gaussian noise of
//! scale `σ` gives the DP-Forward guarantee for the σ calibrated on the CPU
//! (`dpattn_core::dp_forward`). Row `r` of the stacked `[rows, dim]` matrix receives the
//! standard normals `first + r·dim + j` of the draw in the 53-bit layout, exactly the
//! elements the CPU's `dp_forward` uses, times `σ`.
//!
//! **Equality with the CPU.** The noise values are bit-identical to the CPU's. The row
//! norm is a parallel sum (a different summation order than the CPU's), so the clip factor,
//! and with it a clipped entry, may differ from the CPU's in the last place; rows that are
//! not clipped match exactly.
//!
//! **Bad input.** A row holding NaN or ±∞ is overwritten with NaN (never released
//! un-noised); the other rows are processed, and the call reports
//! [`Error::NonFiniteRows`]. `σ = 0` clips only.
//!
//! ```no_run
//! use dpattn_core::sampling::{KeyedStream, NoiseKey};
//! use dpattn_cuda::{ClipRowsParams, Device, clip_rows_add_gaussian};
//! let dev = Device::get(0)?;
//! let stream = dev.new_stream()?;
//! let host = vec![0.5f32; 8 * 64];
//! let mut x = stream.clone_htod(&host).map_err(|e| dpattn_cuda::Error::Panicked(format!("{e:?}")))?;
//! let draw = KeyedStream::new(&NoiseKey::from_bytes([3; 32]), 9);
//! let params = ClipRowsParams::new(1.0, 0.8)?;
//! let report = clip_rows_add_gaussian(&dev, &stream, &mut x, 8, 64, 64, params, &draw, 0)?;
//! assert_eq!(report.scaled_rows, 8); // each row has norm 4 > 1
//! # Ok::<(), dpattn_cuda::Error>(())
//! ```

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtrMut, LaunchConfig, PushKernelArg};
use dpattn_core::sampling::KeyedStream;

use crate::device::Device;
use crate::error::{Error, Result, driver, guarded};
use crate::float_dtype::{FloatDtype, FloatElement};
use crate::kernels::KernelSpec;
use crate::launch::{CLIP_THREADS, RowsPlan};
use crate::noise_fill::{GpuKey, check_device_buffer, in_context};

/// The clip norm `C` and the noise scale `σ` of one release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipRowsParams {
    clip_norm: f64,
    sigma: f64,
}

impl ClipRowsParams {
    /// `C ∈ [1e-100, 1e100]` (the CPU's range for radii), `σ ∈ [0, ∞)` (0 clips only).
    ///
    /// # Errors
    /// [`Error::Core`] (`OutOfRange`) otherwise, NaN included.
    pub fn new(clip_norm: f64, sigma: f64) -> Result<Self> {
        use dpattn_core::Error as E;
        if !(1e-100..=1e100).contains(&clip_norm) {
            return Err(E::OutOfRange {
                name: "clip_norm",
                value: clip_norm,
                allowed: "[1e-100, 1e100]",
            }
            .into());
        }
        if !(sigma >= 0.0 && sigma.is_finite()) {
            return Err(E::OutOfRange { name: "sigma", value: sigma, allowed: "[0, inf)" }.into());
        }
        Ok(ClipRowsParams { clip_norm, sigma })
    }

    /// `C`.
    pub fn clip_norm(&self) -> f64 {
        self.clip_norm
    }

    /// `σ`.
    pub fn sigma(&self) -> f64 {
        self.sigma
    }
}

/// What the kernel reports (device-side counters read back after the launch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClipRowsReport {
    /// Rows whose entries were rescaled. Private data: keep it on the data owner's side.
    pub scaled_rows: u32,
}

/// Clips the `rows × dim` matrix in `x` (row stride `ld` elements) row by row to norm `C`
/// and adds `σ·N` with `N` the draw's elements `first + r·dim + j`; waits for the stream to
/// read the kernel's counters.
///
/// # Errors
/// Shape, buffer and index-range errors before any launch ([`Error::Core`]);
/// [`Error::NonFiniteRows`] after it (those rows are NaN); driver and compile errors.
#[allow(clippy::too_many_arguments)]
pub fn clip_rows_add_gaussian<T: FloatElement>(
    dev: &Device,
    stream: &Arc<CudaStream>,
    x: &mut impl DevicePtrMut<T>,
    rows: usize,
    dim: usize,
    ld: usize,
    params: ClipRowsParams,
    draw: &KeyedStream,
    first: u64,
) -> Result<ClipRowsReport> {
    let len = x.len();
    crate::noise_fill::in_context("x: a buffer", x.stream(), dev)?;
    guarded(|| {
        let mut status = stream.alloc_zeros::<u32>(2).map_err(driver("allocate status"))?;
        {
            let (xp, _sx) = x.device_ptr_mut(stream);
            let (sp, _ss) = status.device_ptr_mut(stream);
            // SAFETY: `xp` addresses the `len` elements of a live cudarc buffer of `T`, `sp`
            // the two u32 of `status`; both guards stay alive past the launch.
            unsafe {
                clip_rows_add_gaussian_raw(
                    dev,
                    stream,
                    xp,
                    len,
                    T::DTYPE,
                    rows,
                    dim,
                    ld,
                    params,
                    draw,
                    first,
                    sp,
                )
            }?;
        }
        let s = stream.clone_dtoh(&status).map_err(driver("read clip status"))?;
        if s[0] > 0 {
            return Err(Error::NonFiniteRows { arg: "x", rows: s[0] });
        }
        Ok(ClipRowsReport { scaled_rows: s[1] })
    })
}

/// [`clip_rows_add_gaussian`] on caller-owned device memory, asynchronous on `stream`: the
/// counters `[non-finite rows, rescaled rows]` are written to the two `u32` at `status`
/// (zeroed first, on the stream); read them after the stream completes. Nothing is
/// allocated, freed or synchronised.
///
/// # Safety
/// `x` must address `len` elements of `dtype` and `status` two `u32`, in this device's
/// primary context, valid until the queued work completes and not used concurrently by
/// other streams.
///
/// # Errors
/// As [`clip_rows_add_gaussian`] for what is checked before the launch (null or
/// misaligned pointers included); non-finite rows are reported only through `status`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn clip_rows_add_gaussian_raw(
    dev: &Device,
    stream: &Arc<CudaStream>,
    x: u64,
    len: usize,
    dtype: FloatDtype,
    rows: usize,
    dim: usize,
    ld: usize,
    params: ClipRowsParams,
    draw: &KeyedStream,
    first: u64,
    status: u64,
) -> Result<()> {
    check_device_buffer("x", x, len, dtype.size())?;
    check_device_buffer("status", status, 2, 4)?;
    in_context("a stream", stream, dev)?;
    let plan = RowsPlan::new(rows, dim, ld, len, first, dev.multiprocessors())?;
    let spec = KernelSpec::clip_rows_gaussian(dtype);
    let f = dev.function(&spec)?;
    let key = GpuKey::of(draw);
    let stream_id = draw.stream_id();
    let (c, sigma) = (params.clip_norm, params.sigma);
    dev.bind()?;
    guarded(|| {
        // SAFETY: `status` addresses two u32 on this device (caller contract); the memset
        // is queued on the same stream as the kernel, so it completes first.
        unsafe { cudarc::driver::result::memset_d8_async(status, 0, 8, stream.cu_stream()) }
            .map_err(driver("zero clip status"))?;
        let cfg = LaunchConfig {
            grid_dim: (plan.grid, 1, 1),
            block_dim: (CLIP_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&f);
        b.arg(&x).arg(&plan.rows).arg(&plan.dim).arg(&plan.ld).arg(&c).arg(&sigma);
        b.arg(&key).arg(&stream_id).arg(&first).arg(&status);
        // SAFETY: the arguments match `dp_clip_rows_gaussian(T*, u64 rows, u64 dim, u64 ld,
        // double c, double sigma, DpKey, u64 stream, u64 first, u32* status)`; the plan
        // checked that rows·ld-strided rows of `dim` elements lie inside the `len`
        // elements at `x`; the kernel touches only those rows and `status[0..2]`.
        unsafe { b.launch(cfg) }.map_err(driver("launch dp_clip_rows_gaussian"))?;
        Ok(())
    })?;
    dev.check()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_validated() {
        assert!(ClipRowsParams::new(1.0, 0.0).is_ok());
        assert!(ClipRowsParams::new(0.0, 1.0).is_err());
        assert!(ClipRowsParams::new(f64::NAN, 1.0).is_err());
        assert!(ClipRowsParams::new(1.0, -1.0).is_err());
        assert!(ClipRowsParams::new(1.0, f64::INFINITY).is_err());
        assert!(ClipRowsParams::new(1.0, f64::NAN).is_err());
        let p = ClipRowsParams::new(2.0, 0.5).unwrap();
        assert_eq!((p.clip_norm(), p.sigma()), (2.0, 0.5));
    }
}
