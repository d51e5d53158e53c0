//! Clip each row of a hidden-state matrix to Euclidean norm `C`, then release it, on the
//! GPU and in place: DP-Forward's token-level release (`ClipRegion::Rows`, `ClipMode::Clip`,
//! i.i.d. noise; `docs/PAPERS.md` §3.7, "Token-level designs", after the paper's App. A.2).
//!
//! **Clipping.** Neighbouring inputs differ in some rows (tokens); after clipping every row
//! has Euclidean norm `≤ C` *including rounding* (the CPU's margin rule: rows above
//! `C·(1 − μ)` are aimed at `C·(1 − 2μ)`, `μ = (dim + 16)·2⁻⁵²`, and rounded toward zero;
//! the margin covers the rounding error of the norm in any summation order), so the ℓ₂
//! sensitivity of the *computed* matrix is `2C` per changed row. The row norm is a parallel
//! sum (a different order than the CPU's), so the clip factor, and with it a clipped entry,
//! may differ from the CPU's in the last place; rows that are not clipped match exactly.
//!
//! **The exact release** ([`clip_rows_release_exact`], the default the C ABI uses): each
//! clipped value is released on the grid of a [`GaussianGrid`] with discrete Gaussian noise
//! from the window of its element (`first + r·dim + j`, `docs/RANDOMNESS.md` §4), exactly
//! [`GaussianGrid::release_keyed`] on the clipped matrix ([`mod@crate::grid_release`]). Since the
//! sensitivity bound holds for the computed values, the computation error is `E = 0`:
//! calibrate the grid with [`GaussianGridSpec`]
//! `{ l2_sensitivity: Δ, dimension: c·dim, computation_error: 0, value_bound: C, format:
//! GridFormat::of::<T>() }` for `c` changed rows (`Δ = 2C·√c`, as
//! `dpattn_core::dp_forward::sensitivity`) and the noise multiplier of the accounting —
//! which is what `DpForwardParams::exact_grid(GridFormat::of::<T>())` returns for
//! token-level DP-Forward with i.i.d. noise, so the GPU release equals the CPU hook's.
//! A **row holding NaN or ±∞** is private data too: on both paths it is sanitised to the
//! zero row (inside the ball, so the sensitivity bound still holds; as the CPU's
//! `clip_hidden`) and released like every other row, never refused and never written as
//! NaN (issue 28). How many rows were sanitised is private:
//! [`ClipRowsReport::sanitized_rows`].
//!
//! **The unsafe float path** ([`clip_rows_add_gaussian_unsafe_float`],
//! [`NoiseMode::UnsafeFloat`]): adds `σ·N` with `N` the standard normals
//! `first + r·dim + j` of the 53-bit Gaussian layout, bit-identical to the CPU's float
//! noise. Not differentially private as shipped: the low bits of `x + σN` reveal `x`
//! (Mironov 2012). `σ = 0` clips only.
//!
//! ```no_run
//! use dpattn_core::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};
//! use dpattn_core::sampling::{KeyedStream, NoiseKey};
//! use dpattn_cuda::{Device, clip_rows_release_exact};
//! let dev = Device::get(0)?;
//! let stream = dev.new_stream()?;
//! let host = vec![0.5f32; 8 * 64];
//! let mut x = stream.clone_htod(&host)?;
//! let draw = KeyedStream::new(&NoiseKey::generate()?, 9);
//! // One changed row: Δ = 2C over 64 coordinates; σ = 0.8 = 0.4·Δ.
//! let spec = GaussianGridSpec { l2_sensitivity: 2.0, dimension: 64, computation_error: 0.0,
//!     value_bound: 1.0, format: GridFormat::F32 };
//! let grid = GaussianGrid::calibrate(&spec, 0.4)?;
//! let report = clip_rows_release_exact(&dev, &stream, &mut x, 8, 64, 64, 1.0, &grid, &draw, 0)?;
//! assert_eq!(report.scaled_rows, 8); // each row has norm 4 > 1
//! assert_eq!(report.resolution, Some(grid.resolution()));
//! # Ok::<(), dpattn_cuda::Error>(())
//! ```

use cudarc::driver::{DevicePtrMut, LaunchConfig, PushKernelArg};
use dpattn_core::NoiseMode;
use dpattn_core::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};
use dpattn_core::sampling::KeyedStream;

use crate::device::Device;
use crate::error::{Result, driver, guarded};
use crate::float_dtype::{FloatDtype, FloatElement};
use crate::grid_release::{GridGroup, check_window_range, release_status};
use crate::kernels::KernelSpec;
use crate::launch::{CLIP_THREADS, RowsPlan};
use crate::memory::{DeviceBuffer, Stream};
use crate::noise_fill::{GpuKey, check_device_buffer, in_context};

/// The clip norm `C` and the noise scale `σ` of one release on the unsafe float path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipRowsParams {
    clip_norm: f64,
    sigma: f64,
}

impl ClipRowsParams {
    /// `C ∈ [1e-100, 1e100]` (the CPU's range for radii), `σ ∈ [0, ∞)` (0 clips only).
    ///
    /// # Errors
    /// [`Error::Core`](crate::Error::Core) (`OutOfRange`) otherwise, NaN included.
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

    /// The exact release that keeps the guarantee of the float Gaussian `σ` for rows of
    /// `dim` elements of `dtype` (what the C entry `dpattn_cuda_clip_rows_add_gaussian`
    /// runs): [`GaussianGrid::calibrate`] with `Δ = 2C`, `d = dim`, `E = 0`, `M = C` and the
    /// noise multiplier `σ/(2C)`, so `σ_c = σ·(1 + √dim·Λ/(2C))`.
    ///
    /// **Why this covers every neighbour relation.** Say neighbours' clipped matrices differ
    /// in `c ≥ 1` rows and `σ` was calibrated for a sensitivity `Δ_t ≥ 2C·√c` (every row
    /// lies in the ball of radius `C`) with noise multiplier `m_t = σ/Δ_t`. The rounded
    /// integer data then has sensitivity `(Δ_t + √(c·dim)·Λ)/Λ`, and
    /// `σ_c = σ + σ·√dim·Λ/(2C) ≥ σ + σ·√(c·dim)·Λ/Δ_t = m_t·(Δ_t + √(c·dim)·Λ)`: the
    /// discrete release's noise multiplier on its true sensitivity is at least `m_t`, so it
    /// has the caller's `(ε, δ)`, zCDP or RDP guarantee (module docs of
    /// `dpattn_core::grid_release`).
    ///
    /// ```
    /// use dpattn_cuda::{ClipRowsParams, FloatDtype};
    /// let p = ClipRowsParams::new(1.0, 0.8)?;
    /// let g = p.exact_grid(64, FloatDtype::F32)?;
    /// assert!(g.continuous_sigma() >= 0.8 && g.continuous_sigma() <= 0.8 * (1.0 + 1.0 / 256.0));
    /// assert!(ClipRowsParams::new(1.0, 0.0)?.exact_grid(64, FloatDtype::F32).is_err());
    /// # Ok::<(), dpattn_cuda::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Core`](crate::Error::Core) (`OutOfRange`) for `σ = 0` (nothing to release)
    /// or `dim = 0`, or a release no grid of the format holds.
    pub fn exact_grid(&self, dim: usize, dtype: FloatDtype) -> Result<GaussianGrid> {
        let delta = 2.0 * self.clip_norm; // exact: a power-of-two multiple
        let spec = GaussianGridSpec {
            l2_sensitivity: delta,
            dimension: dim as u64,
            computation_error: 0.0,
            value_bound: self.clip_norm,
            format: match dtype {
                FloatDtype::F32 => GridFormat::F32,
                FloatDtype::F64 => GridFormat::F64,
            },
        };
        Ok(GaussianGrid::calibrate(&spec, self.sigma / delta)?)
    }
}

/// What a release did (device-side counters read back after the launch) and how.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipRowsReport {
    /// Rows whose entries were rescaled. Private data: keep it on the data owner's side.
    pub scaled_rows: u32,
    /// Rows that held NaN or ±∞ and were released as the zero row. Private data: keep it
    /// on the data owner's side.
    pub sanitized_rows: u32,
    /// Which noise ran.
    pub noise_mode: NoiseMode,
    /// `Λ`, the grid of the exact release (`None` on the unsafe float path).
    pub resolution: Option<f64>,
}

/// Clips the `rows × dim` matrix in `x` (row stride `ld` elements) row by row to norm `C`
/// and adds `σ·N` with `N` the draw's elements `first + r·dim + j`, **in floating point**:
/// the unsafe path ([`NoiseMode::UnsafeFloat`], module docs); waits for the stream to read
/// the kernel's counters.
///
/// # Errors
/// Shape, buffer and index-range errors before any launch
/// ([`Error::Core`](crate::Error::Core)); driver and compile errors. Rows holding NaN or ±∞
/// are not an error: they are released as the zero row (counted in
/// [`ClipRowsReport::sanitized_rows`]).
#[allow(clippy::too_many_arguments)]
pub fn clip_rows_add_gaussian_unsafe_float<T: FloatElement>(
    dev: &Device,
    stream: &Stream,
    x: &mut DeviceBuffer<T>,
    rows: usize,
    dim: usize,
    ld: usize,
    params: ClipRowsParams,
    draw: &KeyedStream,
    first: u64,
) -> Result<ClipRowsReport> {
    let len = x.len();
    crate::noise_fill::in_context("x: a buffer", x.home_stream(), dev)?;
    let cs = stream.cuda();
    guarded(|| {
        let mut status = cs.alloc_zeros::<u32>(2).map_err(driver("allocate status"))?;
        {
            let (xp, _sx) = x.device_ptr_mut(stream);
            let (sp, _ss) = status.device_ptr_mut(cs);
            // SAFETY: `xp` addresses the `len` elements of a live device buffer of `T`, `sp`
            // the two u32 of `status`; both guards stay alive past the launch.
            unsafe {
                clip_rows_add_gaussian_unsafe_float_raw(
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
        let s = cs.clone_dtoh(&status).map_err(driver("read clip status"))?;
        Ok(ClipRowsReport {
            scaled_rows: s[1],
            sanitized_rows: s[0],
            noise_mode: NoiseMode::UnsafeFloat,
            resolution: None,
        })
    })
}

/// [`clip_rows_add_gaussian_unsafe_float`] on caller-owned device memory, asynchronous on `stream`:
/// the counters `[sanitised rows, rescaled rows]` are written to the two `u32` at `status` (zeroed
/// first, on the stream); read them after the stream completes (both are private data). Nothing is
/// allocated, freed or synchronised.
///
/// # Safety
/// `x` must address `len` elements of `dtype` and `status` two `u32`, in this device's
/// primary context, valid until the queued work completes and not used concurrently by
/// other streams.
///
/// # Errors
/// As [`clip_rows_add_gaussian_unsafe_float`] for what is checked before the launch (null
/// or misaligned pointers included).
#[allow(clippy::too_many_arguments)]
pub unsafe fn clip_rows_add_gaussian_unsafe_float_raw(
    dev: &Device,
    stream: &Stream,
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
    in_context("a stream", stream.cuda(), dev)?;
    let stream = stream.cuda();
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

/// Clips the `rows × dim` matrix in `x` (row stride `ld` elements) row by row to norm
/// `clip_norm` and releases it on `grid` with exact integer noise, value `(r, j)` drawing
/// from the window of element `first + r·dim + j` (module docs: how to calibrate `grid`;
/// rows holding NaN or ±∞ are released as the zero row); waits for the stream to read the
/// kernel's counters.
///
/// # Errors
/// Before any launch ([`Error::Core`](crate::Error::Core)): `clip_norm ∉ [1e-100, 1e100]`, a
/// grid not calibrated for `T`'s format, shape and buffer errors, an element index at or beyond
/// `2^40`; after it, a sampler failure (probability below `2^−1000` per element; that
/// element is NaN, see [`mod@crate::grid_release`]); driver and compile errors.
#[allow(clippy::too_many_arguments)]
pub fn clip_rows_release_exact<T: FloatElement>(
    dev: &Device,
    stream: &Stream,
    x: &mut DeviceBuffer<T>,
    rows: usize,
    dim: usize,
    ld: usize,
    clip_norm: f64,
    grid: &GaussianGrid,
    draw: &KeyedStream,
    first: u64,
) -> Result<ClipRowsReport> {
    let len = x.len();
    crate::noise_fill::in_context("x: a buffer", x.home_stream(), dev)?;
    let group = GridGroup::gaussian(grid);
    let cs = stream.cuda();
    guarded(|| {
        let mut counters = cs.alloc_zeros::<u32>(2).map_err(driver("allocate counters"))?;
        let mut fail = cs.alloc_zeros::<u64>(2).map_err(driver("allocate status"))?;
        {
            let (xp, _sx) = x.device_ptr_mut(stream);
            let (cp, _sc) = counters.device_ptr_mut(cs);
            let (fp, _sf) = fail.device_ptr_mut(cs);
            // SAFETY: `xp` addresses the `len` elements of a live device buffer of `T`, `cp`
            // the two u32 of `counters`, `fp` the two u64 of `fail`; the guards stay alive
            // past the launch.
            unsafe {
                clip_rows_release_exact_raw(
                    dev,
                    stream,
                    xp,
                    len,
                    T::DTYPE,
                    rows,
                    dim,
                    ld,
                    clip_norm,
                    group,
                    draw,
                    first,
                    cp,
                    fp,
                )
            }?;
        }
        let f = cs.clone_dtoh(&fail).map_err(driver("read release status"))?;
        let c = cs.clone_dtoh(&counters).map_err(driver("read clip counters"))?;
        release_status([f[0], f[1]])?;
        Ok(ClipRowsReport {
            scaled_rows: c[1],
            sanitized_rows: c[0],
            noise_mode: NoiseMode::Exact,
            resolution: Some(grid.resolution()),
        })
    })
}

/// [`clip_rows_release_exact`] on caller-owned device memory, asynchronous on `stream`, with
/// the grid and integer noise as a [`GridGroup`]. The kernel writes the counters
/// `[sanitised rows, rescaled rows]` to the two `u32` at `counters` (zeroed first, on the
/// stream) and, unless `fail` is 0, the release status `[failure bits, lowest failed
/// element]` to the two `u64` at `fail` (set to `[0, 2^64 − 1]` first; see
/// [`release_status`]); read them after the stream completes. A failed element (probability
/// below `2^−1000`) is NaN whether or not `fail` is given. Nothing is allocated, freed or
/// synchronised.
///
/// # Safety
/// `x` must address `len` elements of `dtype`, `counters` two `u32` and `fail` (if not 0)
/// two `u64`, in this device's primary context, valid until the queued work completes and
/// not used concurrently by other streams.
///
/// # Errors
/// As [`clip_rows_release_exact`] for what is checked before the launch (null or
/// misaligned pointers included); sampler failures are reported only through `fail`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn clip_rows_release_exact_raw(
    dev: &Device,
    stream: &Stream,
    x: u64,
    len: usize,
    dtype: FloatDtype,
    rows: usize,
    dim: usize,
    ld: usize,
    clip_norm: f64,
    group: GridGroup,
    draw: &KeyedStream,
    first: u64,
    counters: u64,
    fail: u64,
) -> Result<()> {
    check_device_buffer("x", x, len, dtype.size())?;
    check_device_buffer("counters", counters, 2, 4)?;
    if fail != 0 {
        check_device_buffer("fail", fail, 2, 8)?;
    }
    in_context("a stream", stream.cuda(), dev)?;
    let stream = stream.cuda();
    let c = ClipRowsParams::new(clip_norm, 0.0)?.clip_norm;
    let plan = RowsPlan::new(rows, dim, ld, len, first, dev.multiprocessors())?;
    check_window_range(first, plan.rows * plan.dim)?;
    group.check_format(dtype)?;
    let f = dev.function(&KernelSpec::clip_rows_exact(dtype))?;
    let key = GpuKey::of(draw);
    let stream_id = draw.stream_id();
    dev.bind()?;
    guarded(|| {
        // SAFETY: `counters` addresses two u32 and `fail` (if not 0) two u64 on this device
        // (caller contract); the memsets are queued on the kernel's stream, so they complete
        // first.
        unsafe {
            let s = stream.cu_stream();
            cudarc::driver::result::memset_d8_async(counters, 0, 8, s)
                .map_err(driver("zero clip counters"))?;
            if fail != 0 {
                cudarc::driver::result::memset_d8_async(fail, 0, 8, s)
                    .map_err(driver("reset release status"))?;
                cudarc::driver::result::memset_d8_async(fail + 8, 0xff, 8, s)
                    .map_err(driver("reset release status"))?;
            }
        }
        let cfg = LaunchConfig {
            grid_dim: (plan.grid, 1, 1),
            block_dim: (CLIP_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&f);
        b.arg(&x).arg(&plan.rows).arg(&plan.dim).arg(&plan.ld).arg(&c).arg(&group);
        b.arg(&key).arg(&stream_id).arg(&first).arg(&counters).arg(&fail);
        // SAFETY: the arguments match `dp_clip_rows_exact(T*, u64 rows, u64 dim, u64 ld,
        // double c, DpGridGroup, DpKey, u64 stream, u64 first, u32* status, u64* fail)`; the
        // plan checked that rows·ld-strided rows of `dim` elements lie inside the `len`
        // elements at `x`; the kernel touches only those rows, `counters[0..2]` and, when
        // not null, `fail[0..2]`.
        unsafe { b.launch(cfg) }.map_err(driver("launch dp_clip_rows_exact"))?;
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

    #[test]
    fn the_exact_grid_keeps_the_float_guarantee_for_any_number_of_rows() {
        for (c, sigma, dim) in
            [(1.0, 0.8, 64usize), (0.5, 0.1, 768), (3.0, 50.0, 1), (1e-3, 2e-3, 300)]
        {
            for dtype in [FloatDtype::F32, FloatDtype::F64] {
                let g = ClipRowsParams::new(c, sigma).unwrap().exact_grid(dim, dtype).unwrap();
                let lambda = g.resolution();
                assert!(GridGroup::gaussian(&g).check_format(dtype).is_ok());
                // c rows changed, σ calibrated for Δ_t = 2C·√c: the noise on the rounded data
                // (sensitivity Δ_t + √(c·dim)·Λ) has at least the multiplier σ/Δ_t.
                for rows in 1..=8u32 {
                    let delta_t = 2.0 * c * f64::from(rows).sqrt();
                    let rounded = delta_t + (f64::from(rows) * dim as f64).sqrt() * lambda;
                    let need = sigma / delta_t * rounded;
                    assert!(g.continuous_sigma() >= need * (1.0 - 1e-14), "{c} {sigma} {dim}");
                }
                // And no more noise than the accuracy rule allows, while it decides Λ.
                if g.inflation() <= 1.0 / 256.0 {
                    assert!(g.continuous_sigma() <= sigma * (1.0 + 1.0 / 256.0) * (1.0 + 1e-14));
                }
                assert!(g.sigma() >= g.continuous_sigma());
            }
        }
    }
}
