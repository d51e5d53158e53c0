//! # dpattn-cuda
//!
//! CUDA kernels for dpattn, compiled at run time by NVRTC (through cudarc with dynamic
//! loading), so this crate builds and its CPU tests run on machines with no CUDA toolkit,
//! no driver and no GPU; every kernel is compiled through NVRTC in CI.
//!
//! Layers, bottom up (cudarc/CubeCL style):
//! * [`probe`](mod@probe): whether the driver, NVRTC and a device are there, without panicking.
//! * [`kernels`]: the `.cu` sources (embedded) and their variants; [`compile`]: NVRTC to
//!   CUBIN or PTX with the compile log in errors; [`launch`]: launch-configuration math.
//! * [`Device`]: the device's primary context, a module cache per (device, architecture,
//!   variant), owned and borrowed streams; [`memory`]: [`Stream`] and [`DeviceBuffer`],
//!   this crate's own wrappers of cudarc's stream and slice (cudarc is not part of the
//!   API).
//! * Kernels: [`noise_fill`] (keyed ChaCha20 noise equal to the CPU's), [`mod@grid_release`]
//!   (exact releases on a power-of-two grid with discrete Gaussian noise, equal to the
//!   CPU's), [`clip_rows`] (clip rows to norm `C`, then the exact release or the unsafe
//!   float noise), [`attention`] (fused flash-style noisy attention, tensor cores for
//!   bf16/f16), [`output_perturbation`] (output-perturbation DP cross-attention through the
//!   fused kernel) and [`mod@gaussian_sampling_attention`] (paper 000's DPAttention with the
//!   factor-free sampler and clip-and-ridge, equal to the CPU's release).
//!
//! Every entry point has a raw-pointer form (`*_raw`) that runs on device memory and a
//! stream owned by the caller (a C++ engine, PyTorch) and frees or destroys nothing.
//!
//! ```
//! match dpattn_cuda::Device::get(0) {
//!     Ok(dev) => println!("GPU: {} sm_{}", dev.name(), dev.arch()),
//!     Err(e) => println!("no GPU here: {e}"), // never a panic
//! }
//! ```

pub mod attention;
pub mod clip_rows;
pub mod compile;
pub mod device;
pub mod error;
pub mod float_dtype;
pub mod gaussian_sampling_attention;
pub mod grid_release;
pub mod kernels;
pub mod launch;
pub mod memory;
pub mod noise_fill;
pub mod output_perturbation;
pub mod probe;

pub use clip_rows::{
    ClipRowsParams, ClipRowsReport, clip_rows_add_gaussian_unsafe_float,
    clip_rows_add_gaussian_unsafe_float_raw, clip_rows_release_exact, clip_rows_release_exact_raw,
};
pub use device::{CurrentContext, Device};
pub use error::{Error, Result};
pub use float_dtype::{FloatDtype, FloatElement};
pub use gaussian_sampling_attention::{
    SamplingPlan, gaussian_sampling_attention, gaussian_sampling_attention_keyed,
    gaussian_sampling_attention_raw, gaussian_sampling_attention_workspace_len,
};
pub use grid_release::{GridGroup, grid_release, grid_release_raw};
pub use memory::{DeviceBuffer, DeviceElement, DevicePtrGuard, Stream};
pub use noise_fill::{
    GpuNoise, GpuSampler, NoiseElement, OutDtype, UniformBits, fill_noise, fill_noise_raw,
    fill_stream_words, fill_stream_words_raw,
};
pub use probe::{Availability, available, nvrtc_present, probe};
