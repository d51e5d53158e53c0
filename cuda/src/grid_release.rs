//! Exact releases on a public power-of-two grid, on the GPU: the device form of
//! [`GaussianGrid::release_keyed`] (`dpattn_core::grid_release`, the issue's
//! [`NoiseMode::Exact`](dpattn_core::NoiseMode::Exact)).
//!
//! **Guarantee.** Logical element `i` of a strided `f32`/`f64` tensor (row-major over its
//! [`Layout4`] shape, `docs/RANDOMNESS.md` §2) becomes
//! `clamp(round(clamp(x/Λ, ±I)) + Z, ±I)·Λ`, exactly `Grid::release(x, Z)`, where the grid
//! (`Λ = 2^k`, `I`) and the discrete Gaussian `N_ℤ(0, s²)` are those of its *group*
//! `i / group_len`, and `Z` is drawn from the exact-sampler window of element `first + i`
//! (§4). The samplers are a port of the CPU's CKS20 samplers in fixed-width integers
//! (`kernels/exact_sampler.cuh`: the same words, bit order and decisions), so every `Z`, and
//! therefore every released value, is **bit-identical** to
//! [`GaussianGrid::release_keyed`] on the CPU (checked on the host by `tests/cuda-host`, and
//! on a GPU by `cuda/tests/gpu_exact.rs`). The privacy proof is the CPU's (module docs of
//! `dpattn_core::grid_release`): the output is a function of the integer `round(x/Λ) + Z`
//! alone. A group per batch element is what output perturbation needs (one `σ_b` per batch
//! element); DP-Forward uses one group.
//!
//! **Failure.** A sampler fails only when an element's window runs out or a counter would
//! overflow (probability below `2^−1000` per element); such an element is written as NaN
//! and the call returns the error naming the lowest failed element. The failure depends on
//! the randomness alone, never on `x`, and every other value is a complete release. (The
//! CPU writes NaN to the whole release in that case.)
//!
//! **Cost.** One thread per element: a ChaCha20 block, and on average a few dozen bits of
//! integer rejection sampling (more continuation blocks only in the tail). Warps wait for
//! their slowest element, so throughput follows the tail of the loop count.
//!
//! ```no_run
//! use dpattn_core::Layout4;
//! use dpattn_core::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};
//! use dpattn_core::sampling::{KeyedStream, NoiseKey};
//! use dpattn_cuda::grid_release::{GridGroup, grid_release};
//! use dpattn_cuda::Device;
//! let dev = Device::get(0)?;
//! let stream = dev.new_stream()?;
//! let spec = GaussianGridSpec { l2_sensitivity: 1.0, dimension: 64, computation_error: 0.0,
//!     value_bound: 4.0, format: GridFormat::F32 };
//! let grid = GaussianGrid::calibrate(&spec, 3.0)?;
//! let mut x = stream.clone_htod(&[0.25f32; 64])?;
//! let draw = KeyedStream::new(&NoiseKey::generate()?, 0);
//! let layout = Layout4::contiguous([1, 1, 1, 64])?;
//! grid_release(&dev, &stream, &mut x, layout, &[GridGroup::gaussian(&grid)], 64, &draw, 0)?;
//! # Ok::<(), dpattn_cuda::Error>(())
//! ```

use cudarc::driver::{DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg};
use dpattn_core::Error as CoreError;
use dpattn_core::Layout4;
use dpattn_core::grid_release::{GaussianGrid, Grid, GridFormat};
use dpattn_core::sampling::{DiscreteGaussian, KeyedStream, MAX_WINDOW_ELEMENTS};

use crate::device::Device;
use crate::error::{Result, driver, guarded};
use crate::float_dtype::{FloatDtype, FloatElement};
use crate::kernels::KernelSpec;
use crate::launch::grid_for;
use crate::memory::{DeviceBuffer, Stream};
use crate::noise_fill::{GpuKey, check_device_buffer, in_context};

/// Threads per block of `dp_grid_release` (`DP_GRID_THREADS`).
pub const GRID_THREADS: u32 = 256;

/// The release parameters of one group of consecutive logical elements, as the kernels
/// read them: the grid exponent `k`, the index bound `I` and the discrete Gaussian's
/// `σ = s/q` in lowest terms (`struct DpGridGroup` in `kernels/grid_release.cuh`).
///
/// ```
/// use dpattn_core::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};
/// use dpattn_cuda::grid_release::GridGroup;
/// let spec = GaussianGridSpec { l2_sensitivity: 1.0, dimension: 1, computation_error: 0.0,
///     value_bound: 0.0, format: GridFormat::F64 };
/// let g = GaussianGrid::calibrate(&spec, 2.0)?;
/// let group = GridGroup::gaussian(&g);
/// assert_eq!(group.exponent(), g.grid().exponent());
/// assert_eq!(group.sigma_ratio(), g.integer_noise().sigma_ratio());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridGroup {
    exponent: i32,
    pad: u32,
    bound: i64,
    s: u64,
    q: u64,
}

// SAFETY: `GridGroup` is `repr(C)` with the field types and order of `struct DpGridGroup {
// int k; u32 pad; i64 bound; u64 s; u64 q; }` (32 bytes, no padding) and holds no pointers.
unsafe impl DeviceRepr for GridGroup {}

impl GridGroup {
    /// The grid `grid` with the integer noise `noise` (e.g. a
    /// [`GaussianGrid::scaled_noise`] for coordinates with more noise).
    pub fn new(grid: Grid, noise: &DiscreteGaussian) -> Self {
        let (s, q) = noise.sigma_ratio();
        GridGroup { exponent: grid.exponent(), pad: 0, bound: grid.index_bound(), s, q }
    }

    /// The grid and integer noise of a calibrated Gaussian release.
    pub fn gaussian(g: &GaussianGrid) -> Self {
        Self::new(g.grid(), g.integer_noise())
    }

    /// A group that releases nothing: its elements keep their value (rounded to the buffer's
    /// type when read from a separate source). For outputs that are a public constant, such
    /// as an output-perturbation batch element that sees no key.
    ///
    /// ```
    /// assert!(dpattn_cuda::grid_release::GridGroup::none().is_none());
    /// ```
    pub fn none() -> Self {
        GridGroup { exponent: 0, pad: 0, bound: 0, s: 0, q: 0 }
    }

    /// Whether this group releases nothing ([`GridGroup::none`]).
    pub fn is_none(&self) -> bool {
        self.s == 0
    }

    /// `k` of `Λ = 2^k`.
    pub fn exponent(&self) -> i32 {
        self.exponent
    }

    /// The index bound `I`.
    pub fn index_bound(&self) -> i64 {
        self.bound
    }

    /// `(s, q)` with `σ = s/q` of the integer noise.
    pub fn sigma_ratio(&self) -> (u64, u64) {
        (self.s, self.q)
    }

    /// The group's grid must be one of `dtype`'s format ([`GridFormat::of`]): only then is
    /// every released value exactly representable in the buffer.
    pub(crate) fn check_format(&self, dtype: FloatDtype) -> Result<()> {
        if self.is_none() {
            return Ok(());
        }
        let format = match dtype {
            FloatDtype::F32 => GridFormat::F32,
            FloatDtype::F64 => GridFormat::F64,
        };
        if self.bound != format.index_bound() || Grid::new(self.exponent, format).is_err() {
            return Err(CoreError::OutOfRange {
                name: "grid format",
                value: f64::from(self.exponent),
                allowed: "a grid calibrated for the buffer's element type (GridFormat::of::<T>())",
            }
            .into());
        }
        Ok(())
    }
}

/// Shape and element strides as the kernel reads them (`struct DpLayout4`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DevLayout {
    shape: [u64; 4],
    strides: [u64; 4],
}

// SAFETY: `repr(C)` over eight u64, exactly `struct DpLayout4 { u64 shape[4]; u64
// strides[4]; }`; no pointers.
unsafe impl DeviceRepr for DevLayout {}

/// The checked shape of a grid release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridReleasePlan {
    layout: DevLayout,
    /// Logical elements released.
    pub total: u64,
    /// Grid size (blocks of [`GRID_THREADS`]); a grid-stride loop covers the rest.
    pub grid: u32,
}

impl GridReleasePlan {
    /// Validates a release of the tensor `layout` in a buffer of `len` elements, with
    /// `groups` groups of `group_len` elements, at elements `first ..` of the draw.
    ///
    /// ```
    /// use dpattn_core::Layout4;
    /// use dpattn_cuda::grid_release::GridReleasePlan;
    /// let l = Layout4::new([2, 3, 4, 8], [128, 32, 8, 1])?; // [B, H, S, D] in [B, H, S, D]
    /// let p = GridReleasePlan::new(l, 256, 2, 96, 0, 132)?;
    /// assert_eq!((p.total, p.grid), (192, 1));
    /// assert!(GridReleasePlan::new(l, 256, 1, 96, 0, 132).is_err()); // too few groups
    /// assert!(GridReleasePlan::new(l, 256, 2, 96, (1 << 40) - 100, 132).is_err());
    /// # Ok::<(), dpattn_cuda::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Core`](crate::Error::Core): `ShapeMismatch` for an empty tensor or a group count
    /// other than `⌈elements / group_len⌉` (`group_len ≥ 1`); `OutOfRange` for overlapping strides
    /// (the release writes in place) or an element index at or beyond `2^40` (the window layout's
    /// end); `BufferTooShort` when the strided extent exceeds `len`; `SizeOverflow` when
    /// `first + elements` overflows.
    pub fn new(
        layout: Layout4,
        len: usize,
        groups: usize,
        group_len: u64,
        first: u64,
        sms: u32,
    ) -> Result<Self> {
        let total = layout.numel() as u64;
        if total == 0 {
            return Err(CoreError::ShapeMismatch {
                arg: "x",
                axis: "elements",
                expected: 1,
                got: 0,
            }
            .into());
        }
        if !layout.is_non_overlapping() {
            return Err(CoreError::OutOfRange {
                name: "x strides",
                value: layout.strides()[0] as f64,
                allowed: "non-overlapping strides (the release writes in place)",
            }
            .into());
        }
        if layout.required_len() > len {
            return Err(CoreError::BufferTooShort {
                arg: "x",
                needed: layout.required_len(),
                got: len,
            }
            .into());
        }
        if group_len == 0 {
            return Err(
                CoreError::OutOfRange { name: "group_len", value: 0.0, allowed: ">= 1" }.into()
            );
        }
        let need = total.div_ceil(group_len);
        if groups as u64 != need {
            return Err(CoreError::ShapeMismatch {
                arg: "groups",
                axis: "count (elements / group_len, rounded up)",
                expected: need as usize,
                got: groups,
            }
            .into());
        }
        check_window_range(first, total)?;
        let to64 = |a: [usize; 4]| a.map(|v| v as u64);
        Ok(GridReleasePlan {
            layout: DevLayout { shape: to64(layout.shape()), strides: to64(layout.strides()) },
            total,
            grid: grid_for(total, GRID_THREADS, sms),
        })
    }
}

/// Elements `first .. first + n` must lie in the window layout (`< 2^40`), with the CPU's
/// errors (`release_keyed`): `SizeOverflow` when the end overflows, `OutOfRange` beyond.
pub(crate) fn check_window_range(first: u64, n: u64) -> Result<()> {
    let end =
        first.checked_add(n).ok_or(CoreError::SizeOverflow { what: "first element + length" })?;
    if end > MAX_WINDOW_ELEMENTS {
        return Err(CoreError::OutOfRange {
            name: "element",
            value: (end - 1) as f64,
            allowed: "[0, 2^40)",
        }
        .into());
    }
    Ok(())
}

/// The two status words of a release (`[failure bits, lowest failed element]`) as a
/// result: `Ok` when no element failed, else the CPU's error for the lowest one
/// (`RandomnessExhausted`, or `SizeOverflow` for a counter or sample overflow).
///
/// ```
/// use dpattn_cuda::grid_release::release_status;
/// assert!(release_status([0, u64::MAX]).is_ok());
/// assert!(release_status([1, 17]).is_err());
/// ```
///
/// # Errors
/// As described.
pub fn release_status(status: [u64; 2]) -> Result<()> {
    match status[0] {
        0 => Ok(()),
        bits if bits & 1 != 0 => Err(CoreError::RandomnessExhausted { element: status[1] }.into()),
        _ => Err(CoreError::SizeOverflow {
            what: "discrete Gaussian sample or iteration count (exceeds 64 bits)",
        }
        .into()),
    }
}

/// Releases the tensor `layout` of `x` in place on the grids of `groups` (group `g` covers
/// logical elements `g·group_len ..`), element `i` drawing from the window of element
/// `first + i` of `draw` (module docs); waits for the stream to read the status.
///
/// # Errors
/// The plan's errors ([`GridReleasePlan::new`]) and a group whose grid is not of `T`'s
/// format, before any launch; a sampler failure after it (module docs); driver and compile
/// errors.
#[allow(clippy::too_many_arguments)]
pub fn grid_release<T: FloatElement>(
    dev: &Device,
    stream: &Stream,
    x: &mut DeviceBuffer<T>,
    layout: Layout4,
    groups: &[GridGroup],
    group_len: u64,
    draw: &KeyedStream,
    first: u64,
) -> Result<()> {
    let len = x.len();
    in_context("x: a buffer", x.home_stream(), dev)?;
    let cs = stream.cuda();
    guarded(|| {
        let mut status = cs.alloc_zeros::<u64>(2).map_err(driver("allocate status"))?;
        {
            let (xp, _sx) = x.device_ptr_mut(stream);
            let (sp, _ss) = status.device_ptr_mut(cs);
            // SAFETY: `xp` addresses the `len` elements of a live device buffer of `T`, `sp`
            // the two u64 of `status`; both guards stay alive past the launch.
            unsafe {
                grid_release_raw(
                    dev,
                    stream,
                    xp,
                    len,
                    T::DTYPE,
                    layout,
                    groups,
                    group_len,
                    draw,
                    first,
                    sp,
                    0,
                )
            }?;
        }
        let s = cs.clone_dtoh(&status).map_err(driver("read release status"))?;
        release_status([s[0], s[1]])
    })
}

/// [`grid_release`] on caller-owned device memory, asynchronous on `stream`: the status
/// words `[failure bits, lowest failed element]` are written to the two `u64` at `status`
/// (set to `[0, 2^64 − 1]` first, on the stream); read them after the stream completes and
/// pass them to [`release_status`]. With `src` not 0, the values released are read from
/// `src` (`f64`, contiguous in logical order: element `i` at `src[i]`) and written to the
/// tensor `x`; with `src = 0` the tensor is released in place. The groups are copied to the
/// device for this launch (stream-ordered; the only allocation); nothing is synchronised.
///
/// # Safety
/// `x` must address `len` elements of `dtype`, `status` two `u64` and `src` (if not 0) one
/// `f64` per logical element, in this device's primary context, valid until the queued work
/// completes, `x` and `status` not used concurrently by other streams and `src` not
/// overlapping `x`.
///
/// # Errors
/// As [`grid_release`] for what is checked before the launch (null or misaligned pointers
/// included); sampler failures are reported only through `status`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn grid_release_raw(
    dev: &Device,
    stream: &Stream,
    x: u64,
    len: usize,
    dtype: FloatDtype,
    layout: Layout4,
    groups: &[GridGroup],
    group_len: u64,
    draw: &KeyedStream,
    first: u64,
    status: u64,
    src: u64,
) -> Result<()> {
    check_device_buffer("x", x, len, dtype.size())?;
    check_device_buffer("status", status, 2, 8)?;
    in_context("a stream", stream.cuda(), dev)?;
    let stream = stream.cuda();
    let plan =
        GridReleasePlan::new(layout, len, groups.len(), group_len, first, dev.multiprocessors())?;
    if src != 0 {
        check_device_buffer("src", src, layout.numel(), 8)?;
    }
    for g in groups {
        g.check_format(dtype)?;
    }
    let f = dev.function(&KernelSpec::grid_release(dtype))?;
    let key = GpuKey::of(draw);
    let stream_id = draw.stream_id();
    dev.bind()?;
    guarded(|| {
        // SAFETY: `status` addresses two u64 on this device (caller contract); both memsets
        // are queued on the kernel's stream, so they complete first.
        unsafe {
            cudarc::driver::result::memset_d8_async(status, 0, 8, stream.cu_stream())
                .map_err(driver("reset release status"))?;
            cudarc::driver::result::memset_d8_async(status + 8, 0xff, 8, stream.cu_stream())
                .map_err(driver("reset release status"))?;
        }
        let table = stream.clone_htod(groups).map_err(driver("upload grid groups"))?;
        let (tp, _tg) = table.device_ptr(stream);
        let cfg = LaunchConfig {
            grid_dim: (plan.grid, 1, 1),
            block_dim: (GRID_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&f);
        b.arg(&x).arg(&plan.layout).arg(&plan.total).arg(&first).arg(&group_len).arg(&tp);
        b.arg(&key).arg(&stream_id).arg(&status).arg(&src);
        // SAFETY: the arguments match `dp_grid_release(T*, DpLayout4, u64 total, u64 first,
        // u64 group_len, const DpGridGroup*, DpKey, u64 stream, u64* status, const double*
        // src)`; the plan checked that the non-overlapping strided extent lies inside the
        // `len` elements at `x` and that `⌈total / group_len⌉` groups were uploaded to `tp`,
        // alive until the table is dropped after the launch (stream-ordered free). The
        // kernel touches only those elements, the table, `status[0..2]` and (if not null)
        // `src[0..total]` (caller contract).
        unsafe { b.launch(cfg) }.map_err(driver("launch dp_grid_release"))?;
        Ok(())
    })?;
    dev.check()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use dpattn_core::grid_release::GaussianGridSpec;

    fn grid(format: GridFormat) -> GaussianGrid {
        let spec = GaussianGridSpec {
            l2_sensitivity: 1.0,
            dimension: 8,
            computation_error: 0.0,
            value_bound: 2.0,
            format,
        };
        GaussianGrid::calibrate(&spec, 1.5).unwrap()
    }

    #[test]
    fn groups_carry_the_cpu_parameters_and_match_their_format() {
        assert_eq!(std::mem::size_of::<GridGroup>(), 32);
        assert_eq!(std::mem::size_of::<DevLayout>(), 64);
        let g = grid(GridFormat::F32);
        let group = GridGroup::gaussian(&g);
        assert_eq!(group.index_bound(), (1 << 24) - 1);
        assert_eq!(group.sigma_ratio(), g.integer_noise().sigma_ratio());
        assert!(group.check_format(FloatDtype::F32).is_ok());
        assert!(group.check_format(FloatDtype::F64).is_err());
        let g = grid(GridFormat::F64);
        assert!(GridGroup::gaussian(&g).check_format(FloatDtype::F64).is_ok());
        assert!(GridGroup::gaussian(&g).check_format(FloatDtype::F32).is_err());
    }

    #[test]
    fn plans_check_shape_groups_buffer_and_window_range() {
        let l = Layout4::new([2, 1, 3, 4], [12, 12, 4, 1]).unwrap();
        let p = GridReleasePlan::new(l, 24, 3, 8, 5, 10).unwrap();
        assert_eq!(p.total, 24);
        assert_eq!(p.layout.shape, [2, 1, 3, 4]);
        assert_eq!(p.layout.strides, [12, 12, 4, 1]);
        let e = |r: Result<GridReleasePlan>| match r {
            Err(Error::Core(e)) => e,
            other => panic!("{other:?}"),
        };
        assert!(matches!(
            e(GridReleasePlan::new(l, 23, 3, 8, 0, 1)),
            CoreError::BufferTooShort { needed: 24, got: 23, .. }
        ));
        assert!(matches!(
            e(GridReleasePlan::new(l, 24, 2, 8, 0, 1)),
            CoreError::ShapeMismatch { .. }
        ));
        assert!(matches!(
            e(GridReleasePlan::new(l, 24, 4, 8, 0, 1)),
            CoreError::ShapeMismatch { .. }
        ));
        assert!(matches!(e(GridReleasePlan::new(l, 24, 1, 0, 0, 1)), CoreError::OutOfRange { .. }));
        let empty = Layout4::contiguous([0, 1, 1, 1]).unwrap();
        assert!(matches!(
            e(GridReleasePlan::new(empty, 0, 0, 1, 0, 1)),
            CoreError::ShapeMismatch { .. }
        ));
        let overlapping = Layout4::new([1, 2, 3, 4], [24, 2, 4, 1]).unwrap();
        assert!(matches!(
            e(GridReleasePlan::new(overlapping, 100, 1, 24, 0, 1)),
            CoreError::OutOfRange { name: "x strides", .. }
        ));
        // The window layout ends at 2^40, as on the CPU; first + n overflowing is its own error.
        assert!(GridReleasePlan::new(l, 24, 1, 24, (1 << 40) - 24, 1).is_ok());
        assert!(matches!(
            e(GridReleasePlan::new(l, 24, 1, 24, (1 << 40) - 23, 1)),
            CoreError::OutOfRange { name: "element", .. }
        ));
        assert!(matches!(
            e(GridReleasePlan::new(l, 24, 1, 24, u64::MAX - 3, 1)),
            CoreError::SizeOverflow { .. }
        ));
    }

    #[test]
    fn status_words_become_the_cpu_errors() {
        assert_eq!(release_status([0, u64::MAX]), Ok(()));
        assert_eq!(
            release_status([1, 42]),
            Err(Error::Core(CoreError::RandomnessExhausted { element: 42 }))
        );
        assert_eq!(
            release_status([3, 42]),
            Err(Error::Core(CoreError::RandomnessExhausted { element: 42 }))
        );
        assert!(matches!(release_status([2, 7]), Err(Error::Core(CoreError::SizeOverflow { .. }))));
    }
}
