//! One CUDA device: its primary context, its kernel module cache, and streams (owned or
//! borrowed from the caller).
//!
//! **Context.** [`Device::get`] retains the device's *primary* context, the one PyTorch,
//! cuBLAS and most engines use, so their device pointers are valid here. Devices are kept in
//! a process-wide table: every call for ordinal `i` shares one context and one cache.
//!
//! **Module cache.** Kernels are compiled by NVRTC on first use and cached per (device,
//! architecture, [`KernelSpec`]); CUBIN for the device's exact compute capability when
//! NVRTC supports it, PTX for the newest older architecture otherwise (the driver JIT
//! compiles it). A load failure from a driver older than NVRTC's PTX names both versions.
//!
//! **Streams.** [`Device::new_stream`] makes an owned [`Stream`]; [`Device::borrow_stream`]
//! wraps a stream owned by the caller (a C++ engine, PyTorch's current stream) that is never
//! destroyed here. Every kernel entry point takes the stream to run on and orders nothing
//! else: the caller's stream orders the work.
//!
//! **Current context.** [`Device::make_current`] binds the primary context to the calling
//! thread for code that calls the driver itself (the C ABI), and puts the thread's previous
//! context back when its guard drops.
//!
//! ```no_run
//! use dpattn_cuda::Device;
//! let dev = Device::get(0)?; // errors (never panics) without a driver or GPU
//! println!("{} (sm_{})", dev.name(), dev.arch());
//! # Ok::<(), dpattn_cuda::Error>(())
//! ```

use std::collections::HashMap;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::result::ctx;
use cudarc::driver::{CudaContext, CudaFunction, sys};

use crate::compile::{self, CodeForm};
use crate::error::{Error, Result, driver, guarded};
use crate::kernels::KernelSpec;
use crate::memory::Stream;
use crate::probe::{Availability, probe};

/// A CUDA device (its primary context) with a kernel cache.
#[derive(Debug)]
pub struct Device {
    ctx: Arc<CudaContext>,
    name: String,
    arch: u32,
    sms: u32,
    cache: Mutex<HashMap<KernelSpec, CudaFunction>>,
    compilations: std::sync::atomic::AtomicUsize,
}

fn table() -> &'static Mutex<HashMap<usize, Arc<Device>>> {
    static T: OnceLock<Mutex<HashMap<usize, Arc<Device>>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Device {
    /// The device `ordinal`, opened once per process (later calls share it).
    ///
    /// # Errors
    /// [`Error::Unavailable`] when [`probe`] finds no driver, no NVRTC or no device;
    /// [`Error::NoSuchDevice`] for an ordinal past the last device; [`Error::Driver`] when
    /// the driver refuses; [`Error::Panicked`] if cudarc panics.
    pub fn get(ordinal: usize) -> Result<Arc<Device>> {
        let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = t.get(&ordinal) {
            return Ok(d.clone());
        }
        let devices = match probe() {
            Availability::Available { devices } => devices,
            other => return Err(Error::Unavailable(other)),
        };
        if ordinal >= devices {
            return Err(Error::NoSuchDevice { ordinal, devices });
        }
        let dev = guarded(|| {
            let ctx =
                CudaContext::new(ordinal).map_err(driver(format!("open device {ordinal}")))?;
            let (major, minor) = ctx.compute_capability().map_err(driver("compute capability"))?;
            let sms = ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_err(driver("multiprocessor count"))?;
            let name = ctx.name().map_err(driver("device name"))?;
            Ok(Device {
                ctx,
                name,
                arch: (major * 10 + minor) as u32,
                sms: sms.max(1) as u32,
                cache: Mutex::new(HashMap::new()),
                compilations: std::sync::atomic::AtomicUsize::new(0),
            })
        })?;
        let dev = Arc::new(dev);
        t.insert(ordinal, dev.clone());
        Ok(dev)
    }

    /// The device's name, e.g. "NVIDIA H100 80GB HBM3".
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability as `major·10 + minor` (90 for an H100).
    pub fn arch(&self) -> u32 {
        self.arch
    }

    /// Number of streaming multiprocessors.
    pub fn multiprocessors(&self) -> u32 {
        self.sms
    }

    /// How many kernel variants are compiled and loaded in this device's cache.
    pub fn cached_kernels(&self) -> usize {
        self.cache.lock().map_or_else(|p| p.into_inner().len(), |c| c.len())
    }

    /// How many NVRTC compilations this device has run (each variant once, when cached).
    pub fn compilations(&self) -> usize {
        self.compilations.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The cudarc context (the device's primary context).
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A new stream owned by the returned handle (destroyed when the last clone drops).
    ///
    /// # Errors
    /// [`Error::Driver`] if the driver cannot create it.
    pub fn new_stream(&self) -> Result<Stream> {
        guarded(|| self.ctx.new_stream().map_err(driver("create stream"))).map(Stream::new)
    }

    /// Wraps a stream the caller owns (a `CUstream`/`cudaStream_t`, NULL for the legacy
    /// default stream). Dropping the wrapper does not destroy the stream.
    ///
    /// # Safety
    /// `raw` must be a valid stream of this device's primary context (or NULL) and stay
    /// alive while the wrapper, or work queued through it, is in use.
    pub unsafe fn borrow_stream(&self, raw: *mut c_void) -> Stream {
        // SAFETY: forwarded to the caller (a live stream of this context); cudarc marks the
        // wrapper as not owned, so drop never destroys it.
        Stream::new(unsafe { self.ctx.wrap_borrowed_stream(raw.cast::<sys::CUstream_st>()) })
    }

    /// Waits until all work queued in this device's primary context has completed, on
    /// every stream (the legacy default stream included). Leaves the primary context
    /// current on the calling thread.
    ///
    /// # Errors
    /// [`Error::Driver`], including an earlier asynchronous error of the context.
    pub fn synchronize(&self) -> Result<()> {
        guarded(|| self.ctx.synchronize().map_err(driver("synchronize the device")))
    }

    /// Makes this device's primary context current on the calling thread until the
    /// returned guard drops, which makes the thread's previous current context (or none)
    /// current again. For code that calls the CUDA driver or runtime itself on this
    /// device; this crate's entry points bind the context they need on their own.
    ///
    /// # Errors
    /// [`Error::Driver`] if the driver cannot read the current context or bind this one
    /// (after a failed bind, the previous context is already back when this returns).
    pub fn make_current(&self) -> Result<CurrentContext<'_>> {
        let previous = guarded(|| ctx::get_current().map_err(driver("read the current context")))?;
        let guard = CurrentContext { previous, _device: PhantomData };
        guarded(|| {
            self.ctx.bind_to_thread().map_err(driver("make the device's primary context current"))
        })?;
        Ok(guard)
    }

    /// The compiled function of `spec`, from the cache or compiled and loaded now.
    pub(crate) fn function(&self, spec: &KernelSpec) -> Result<CudaFunction> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = cache.get(spec) {
            return Ok(f.clone());
        }
        let archs = compile::supported_archs()?;
        let (arch, form) = compile::choose_target(self.arch, &archs).ok_or_else(|| {
            Error::Unsupported { what: format!("sm_{}: NVRTC supports only {archs:?}", self.arch) }
        })?;
        let code = compile::compile(spec, arch, form)?;
        self.compilations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let f = guarded(|| {
            let ptx = match form {
                CodeForm::Cubin => cudarc::nvrtc::Ptx::from_binary(code.image),
                CodeForm::Ptx => cudarc::nvrtc::Ptx::from_src(
                    String::from_utf8_lossy(code.image.strip_suffix(&[0]).unwrap_or(&code.image))
                        .into_owned(),
                ),
            };
            let module = self.ctx.load_module(ptx).map_err(|e| self.load_error(spec, e))?;
            module
                .load_function(spec.entry)
                .map_err(driver(format!("load function {}", spec.entry)))
        })?;
        cache.insert(spec.clone(), f.clone());
        Ok(f)
    }

    fn load_error(&self, spec: &KernelSpec, e: cudarc::driver::DriverError) -> Error {
        use sys::cudaError_enum as E;
        if e.0 == E::CUDA_ERROR_UNSUPPORTED_PTX_VERSION {
            let mut v: std::ffi::c_int = 0;
            // SAFETY: `v` is valid for one write; the driver library is loaded (probe passed).
            let _ = unsafe { sys::cuDriverGetVersion(&mut v) };
            if let Ok(nvrtc) = compile::nvrtc_version() {
                return Error::DriverTooOld { nvrtc, driver: v, error: format!("{e:?}") };
            }
        }
        driver(format!("load module {}", spec.label()))(e)
    }

    /// Makes this device's primary context current on the calling thread (driver calls
    /// outside cudarc's safe layer need it; cudarc's own calls bind it themselves).
    pub(crate) fn bind(&self) -> Result<()> {
        guarded(|| self.ctx.bind_to_thread().map_err(driver("make the context current")))
    }

    /// Raises any error the driver recorded asynchronously (e.g. a failed free in a `Drop`).
    pub(crate) fn check(&self) -> Result<()> {
        guarded(|| self.ctx.check_err().map_err(driver("deferred driver error")))
    }
}

/// A device's primary context made current on this thread by [`Device::make_current`];
/// dropping it makes the thread's previous current context (or none) current again. Tied
/// to the thread that made it (neither `Send` nor `Sync`).
#[must_use = "dropping the guard at once restores the previous context"]
#[derive(Debug)]
pub struct CurrentContext<'a> {
    /// The context that was current before, `None` for none.
    previous: Option<sys::CUcontext>,
    /// Borrows the device; the raw pointer makes the guard `!Send` and `!Sync`.
    _device: PhantomData<(&'a Device, *const ())>,
}

impl Drop for CurrentContext<'_> {
    fn drop(&mut self) {
        let previous = self.previous.unwrap_or(std::ptr::null_mut());
        // SAFETY: `previous` was current on this thread when the guard was made (or NULL,
        // which unbinds), and the guard cannot leave the thread; dpattn never destroys a
        // context, so it is as valid as it was then.
        let _ = unsafe { ctx::set_current(previous) };
    }
}
