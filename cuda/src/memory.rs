//! Streams and device buffers: the arguments of the typed entry points.
//!
//! * [`Stream`]: a stream of one device's primary context, owned ([`Device::new_stream`])
//!   or borrowed from the caller ([`Device::borrow_stream`]); clones share it.
//! * [`DeviceBuffer`]: `len` elements of a [`DeviceElement`] type on the device, allocated
//!   on a stream and freed (in stream order) when dropped.
//!
//! They wrap cudarc's stream and slice, which stay out of this crate's API: a cudarc
//! upgrade is not a breaking change for callers. Code that owns its memory and streams
//! (a C++ engine, PyTorch) uses the `*_raw` entry points with plain device addresses and
//! [`Device::borrow_stream`] instead.
//!
//! ```no_run
//! use dpattn_cuda::Device;
//! let dev = Device::get(0)?;
//! let stream = dev.new_stream()?;
//! let x = stream.clone_htod(&[1.0f32, 2.0, 3.0])?;
//! assert_eq!(stream.clone_dtoh(&x)?, [1.0, 2.0, 3.0]);
//! # Ok::<(), dpattn_cuda::Error>(())
//! ```
//!
//! [`Device::new_stream`]: crate::Device::new_stream
//! [`Device::borrow_stream`]: crate::Device::borrow_stream

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop, sys};

use crate::error::{Result, driver, guarded};

/// Element types of a [`DeviceBuffer`]: `u8`, `u16` (also bf16/f16 bits), `u32`, `u64`,
/// `f32` and `f64`. Sealed.
pub trait DeviceElement: Copy + fmt::Debug + Send + Sync + 'static + sealed::Sealed {}

mod sealed {
    use std::sync::Arc;

    use cudarc::driver::{CudaSlice, CudaStream, DriverError};

    /// cudarc's typed transfers of one element type; callable only inside this crate, so
    /// cudarc's traits do not become bounds callers can rely on.
    pub trait Sealed: Sized {
        fn alloc_zeros(s: &Arc<CudaStream>, len: usize) -> Result<CudaSlice<Self>, DriverError>;
        fn clone_htod(s: &Arc<CudaStream>, src: &[Self]) -> Result<CudaSlice<Self>, DriverError>;
        fn clone_dtoh(s: &Arc<CudaStream>, src: &CudaSlice<Self>)
        -> Result<Vec<Self>, DriverError>;
    }

    macro_rules! sealed {
        ($($t:ty),*) => {$(
            impl Sealed for $t {
                fn alloc_zeros(
                    s: &Arc<CudaStream>,
                    len: usize,
                ) -> Result<CudaSlice<Self>, DriverError> {
                    s.alloc_zeros::<$t>(len)
                }
                fn clone_htod(
                    s: &Arc<CudaStream>,
                    src: &[Self],
                ) -> Result<CudaSlice<Self>, DriverError> {
                    s.clone_htod(src)
                }
                fn clone_dtoh(
                    s: &Arc<CudaStream>,
                    src: &CudaSlice<Self>,
                ) -> Result<Vec<Self>, DriverError> {
                    s.clone_dtoh(src)
                }
            }
            impl super::DeviceElement for $t {}
        )*};
    }
    sealed!(u8, u16, u32, u64, f32, f64);
}

/// A CUDA stream of one device's primary context. Clones share the stream; an owned stream
/// ([`Device::new_stream`](crate::Device::new_stream)) is destroyed when the last clone
/// drops, a borrowed one ([`Device::borrow_stream`](crate::Device::borrow_stream)) never.
///
/// Transfers are queued on the stream; the ones that return host data wait for it.
#[derive(Debug, Clone)]
pub struct Stream(Arc<CudaStream>);

impl Stream {
    pub(crate) fn new(inner: Arc<CudaStream>) -> Self {
        Stream(inner)
    }

    /// The cudarc stream, for this crate's launches.
    pub(crate) fn cuda(&self) -> &Arc<CudaStream> {
        &self.0
    }

    /// The `CUstream` / `cudaStream_t` handle (NULL for the legacy default stream), for
    /// code that queues its own work on it. It stays owned by this stream: never destroy
    /// it, and do not use it after the last clone of an owned stream drops.
    pub fn as_raw(&self) -> *mut c_void {
        self.0.cu_stream().cast()
    }

    /// Waits until the work queued on the stream has completed.
    ///
    /// # Errors
    /// [`Error::Driver`](crate::Error::Driver), including an earlier asynchronous error of
    /// the work on the stream.
    pub fn synchronize(&self) -> Result<()> {
        guarded(|| self.0.synchronize().map_err(driver("synchronize the stream")))
    }

    /// A new buffer of `len` zeros, allocated and zeroed on this stream.
    ///
    /// # Errors
    /// [`Error::Driver`](crate::Error::Driver) if the allocation or the memset fails.
    pub fn alloc_zeros<T: DeviceElement>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        guarded(|| T::alloc_zeros(&self.0, len).map_err(driver("allocate a device buffer")))
            .map(DeviceBuffer)
    }

    /// A new buffer holding a copy of `src` (queued on this stream).
    ///
    /// # Errors
    /// [`Error::Driver`](crate::Error::Driver) if the allocation or the copy fails.
    pub fn clone_htod<T: DeviceElement>(&self, src: &[T]) -> Result<DeviceBuffer<T>> {
        guarded(|| T::clone_htod(&self.0, src).map_err(driver("copy to the device")))
            .map(DeviceBuffer)
    }

    /// The contents of `src`, copied back after the work queued on this stream before it.
    ///
    /// # Errors
    /// [`Error::Driver`](crate::Error::Driver) if the copy fails, including an earlier
    /// asynchronous error of the work on the stream.
    pub fn clone_dtoh<T: DeviceElement>(&self, src: &DeviceBuffer<T>) -> Result<Vec<T>> {
        guarded(|| T::clone_dtoh(&self.0, &src.0).map_err(driver("copy from the device")))
    }

    /// Queues a copy of `src` into the first `src.len()` elements of `dst`.
    ///
    /// # Errors
    /// [`Error::Core`](crate::Error::Core) (`BufferTooShort`) when `dst` is shorter than
    /// `src`; [`Error::Driver`](crate::Error::Driver) if the copy fails.
    pub fn memcpy_dtod<T: DeviceElement>(
        &self,
        src: &DeviceBuffer<T>,
        dst: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        if dst.len() < src.len() {
            return Err(dpattn_core::Error::BufferTooShort {
                arg: "dst",
                needed: src.len(),
                got: dst.len(),
            }
            .into());
        }
        guarded(|| self.0.memcpy_dtod(&src.0, &mut dst.0).map_err(driver("copy on the device")))
    }

    /// The GPU time of the work `queue` puts on this stream: CUDA events are recorded on
    /// the stream before and after `queue` runs, and this waits for the second.
    ///
    /// # Errors
    /// [`Error::Driver`](crate::Error::Driver) if an event cannot be created, recorded or
    /// waited for.
    pub fn time(&self, queue: impl FnOnce()) -> Result<Duration> {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = guarded(|| self.0.record_event(flags).map_err(driver("record an event")))?;
        queue();
        guarded(|| {
            let end = self.0.record_event(flags).map_err(driver("record an event"))?;
            let ms = start.elapsed_ms(&end).map_err(driver("time between events"))?;
            Ok(Duration::from_secs_f64(f64::from(ms) * 1e-3))
        })
    }
}

/// `len` elements of `T` on one device, allocated on a [`Stream`] and freed, in that
/// stream's order, when dropped. Accesses on other streams are ordered after the last
/// write (cudarc's event tracking).
#[derive(Debug)]
pub struct DeviceBuffer<T>(CudaSlice<T>);

impl<T> DeviceBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// The device address of the first element, for reading by work queued on `stream`
    /// (e.g. a `*_raw` entry point). `stream` first waits for the buffer's last write.
    /// Keep the guard until that work is queued: dropping it records the read, so a later
    /// write on another stream waits for it.
    pub fn device_ptr<'a>(&'a self, stream: &'a Stream) -> (u64, DevicePtrGuard<'a>) {
        let (ptr, sync) = self.0.device_ptr(&stream.0);
        (ptr, DevicePtrGuard { _sync: sync })
    }

    /// As [`device_ptr`](Self::device_ptr), for writing: `stream` first waits for the
    /// buffer's last reads and write, and dropping the guard records the write.
    pub fn device_ptr_mut<'a>(&'a mut self, stream: &'a Stream) -> (u64, DevicePtrGuard<'a>) {
        let (ptr, sync) = self.0.device_ptr_mut(&stream.0);
        (ptr, DevicePtrGuard { _sync: sync })
    }

    /// The stream the buffer was allocated on (its context is the buffer's).
    pub(crate) fn home_stream(&self) -> &CudaStream {
        self.0.stream()
    }
}

/// Returned with a [`DeviceBuffer`]'s address: records the access on the stream when
/// dropped. Drop it after the work that uses the address is queued.
#[must_use = "dropping the guard at once records the access before the work is queued"]
pub struct DevicePtrGuard<'a> {
    _sync: SyncOnDrop<'a>,
}

impl fmt::Debug for DevicePtrGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevicePtrGuard").finish_non_exhaustive()
    }
}
