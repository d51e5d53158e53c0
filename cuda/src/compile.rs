//! Run-time compilation with NVRTC: CUBIN for an exact architecture (preferred), PTX for a
//! virtual one (the fallback the driver JIT-compiles), errors that carry NVRTC's log.
//!
//! Works on any machine where `libnvrtc.so.12` loads (e.g. from the PyPI wheel
//! `nvidia-cuda-nvrtc-cu12`): no driver and no GPU needed, which is how CI proves every
//! kernel compiles. Every call is guarded: a missing library is an [`Error`], not a panic.
//!
//! ```no_run
//! use dpattn_cuda::compile::{CodeForm, compile};
//! use dpattn_cuda::kernels::KernelSpec;
//! let spec = KernelSpec::stream_words();
//! let code = compile(&spec, 90, CodeForm::Cubin)?; // sm_90 (H100)
//! assert!(!code.image.is_empty());
//! # Ok::<(), dpattn_cuda::Error>(())
//! ```

use std::ffi::{CStr, CString, c_char, c_int};

use cudarc::nvrtc::{result, sys};

use crate::error::{Error, Result, guarded};
use crate::kernels::KernelSpec;

/// What NVRTC produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodeForm {
    /// Machine code for exactly `sm_XX` (no JIT at load; needs NVRTC to know the arch).
    Cubin,
    /// PTX for `compute_XX`, JIT-compiled by the driver at load (the driver must be at
    /// least as new as NVRTC's PTX ISA).
    Ptx,
}

/// A compiled kernel image and NVRTC's log (warnings; empty when clean).
#[derive(Debug, Clone)]
pub struct Compiled {
    /// CUBIN bytes, or PTX text (NUL-terminated) for [`CodeForm::Ptx`].
    pub image: Vec<u8>,
    /// The form of `image`.
    pub form: CodeForm,
    /// NVRTC's log.
    pub log: String,
}

/// NVRTC's version `(major, minor)`.
///
/// # Errors
/// [`Error::Unavailable`] when NVRTC cannot be loaded.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    require_nvrtc()?;
    guarded(|| {
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: both pointers are valid for writes of one c_int.
        unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .map_err(|e| nvrtc_err("nvrtcVersion", e))?;
        Ok((major, minor))
    })
}

/// The real architectures (`sm_XX` as `XX`, e.g. 90) this NVRTC can compile for.
///
/// # Errors
/// [`Error::Unavailable`] when NVRTC cannot be loaded.
pub fn supported_archs() -> Result<Vec<u32>> {
    require_nvrtc()?;
    guarded(|| {
        let mut n: c_int = 0;
        // SAFETY: `n` is valid for one write.
        unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }
            .result()
            .map_err(|e| nvrtc_err("nvrtcGetNumSupportedArchs", e))?;
        let mut archs = vec![0 as c_int; usize::try_from(n).unwrap_or(0)];
        if !archs.is_empty() {
            // SAFETY: `archs` holds exactly the `n` entries NVRTC said it will write.
            unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
                .result()
                .map_err(|e| nvrtc_err("nvrtcGetSupportedArchs", e))?;
        }
        Ok(archs.into_iter().filter_map(|a| u32::try_from(a).ok()).collect())
    })
}

/// Chooses how to build for a device of compute capability `arch` (`major·10 + minor`):
/// CUBIN for `sm_arch` when NVRTC supports it, else PTX for the newest supported
/// architecture below it (the driver JIT-compiles it), else an error.
///
/// ```
/// use dpattn_cuda::compile::{CodeForm, choose_target};
/// assert_eq!(choose_target(90, &[75, 80, 86, 89, 90]), Some((90, CodeForm::Cubin)));
/// assert_eq!(choose_target(100, &[75, 80, 90]), Some((90, CodeForm::Ptx)));
/// assert_eq!(choose_target(70, &[75, 80]), None);
/// ```
pub fn choose_target(arch: u32, supported: &[u32]) -> Option<(u32, CodeForm)> {
    if supported.contains(&arch) {
        return Some((arch, CodeForm::Cubin));
    }
    supported.iter().copied().filter(|&a| a < arch).max().map(|a| (a, CodeForm::Ptx))
}

/// Compiles `spec` for architecture `arch` (e.g. 90) in the given form.
///
/// # Errors
/// [`Error::Unavailable`] without NVRTC; [`Error::Compile`] with NVRTC's log when the
/// source does not compile.
pub fn compile(spec: &KernelSpec, arch: u32, form: CodeForm) -> Result<Compiled> {
    require_nvrtc()?;
    let mut options = spec.options();
    options.push(match form {
        CodeForm::Cubin => format!("--gpu-architecture=sm_{arch}"),
        CodeForm::Ptx => format!("--gpu-architecture=compute_{arch}"),
    });
    let label = format!("{} for {}", spec.label(), options.last().map_or("", String::as_str));
    let source = CString::new(spec.source()).map_err(|_| Error::Unsupported {
        what: format!("{label}: kernel source contains a NUL byte"),
    })?;
    let name =
        CString::new(format!("{}.cu", spec.module.name())).expect("module names have no NUL");
    guarded(|| {
        let prog = Program(
            result::create_program(&source, Some(&name)).map_err(|e| nvrtc_err(&label, e))?,
        );
        // SAFETY: `prog` was created above and is destroyed only by `Program::drop`.
        let compiled = unsafe { result::compile_program(prog.0, &options) };
        let log = prog.log();
        if let Err(e) = compiled {
            return Err(Error::Compile {
                kernel: label,
                options,
                log: if log.trim().is_empty() { format!("{e:?}") } else { log },
            });
        }
        let image = match form {
            CodeForm::Cubin => prog.cubin().map_err(|e| nvrtc_err(&label, e))?,
            // SAFETY: `prog` is a successfully compiled program, not yet destroyed.
            CodeForm::Ptx => unsafe { result::get_ptx(prog.0) }
                .map_err(|e| nvrtc_err(&label, e))?
                .into_iter()
                .map(|c| c as u8)
                .collect(),
        };
        Ok(Compiled { image, form, log })
    })
}

/// Owns an `nvrtcProgram` and destroys it on drop (ignoring a destroy error rather than
/// panicking, unlike cudarc's safe wrapper).
struct Program(sys::nvrtcProgram);

impl Program {
    fn log(&self) -> String {
        // SAFETY: `self.0` is a live program created by `create_program`.
        match unsafe { result::get_program_log(self.0) } {
            Ok(raw) if !raw.is_empty() => {
                // SAFETY: NVRTC writes a NUL-terminated log of exactly the size it reported.
                unsafe { CStr::from_ptr(raw.as_ptr() as *const c_char) }
                    .to_string_lossy()
                    .into_owned()
            }
            _ => String::new(),
        }
    }

    fn cubin(&self) -> std::result::Result<Vec<u8>, result::NvrtcError> {
        let mut size = 0usize;
        // SAFETY: `self.0` is a compiled program; `size` is valid for one write.
        unsafe { sys::nvrtcGetCUBINSize(self.0, &mut size) }.result()?;
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` has the `size` bytes NVRTC reported for the CUBIN.
        unsafe { sys::nvrtcGetCUBIN(self.0, buf.as_mut_ptr() as *mut c_char) }.result()?;
        Ok(buf)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `self.0` was created by `create_program` and is destroyed only here.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

fn require_nvrtc() -> Result<()> {
    if crate::probe::nvrtc_present() {
        Ok(())
    } else {
        Err(Error::Unavailable(crate::Availability::NoNvrtcLibrary))
    }
}

fn nvrtc_err(during: &str, e: result::NvrtcError) -> Error {
    Error::Compile { kernel: during.to_owned(), options: Vec::new(), log: format!("{e:?}") }
}
