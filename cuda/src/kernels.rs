//! The CUDA sources of this crate and their variants.
//!
//! Sources live as `.cu`/`.cuh` files under `src/kernels/`, embedded with `include_str!`.
//! NVRTC has no include path here (no toolkit), so a module's source is the concatenation
//! of the shared headers it needs and its body, in dependency order. A [`KernelSpec`] is
//! one compilable variant: a module, its `-D` defines and its entry point; the module cache
//! keys on it (with the device and architecture).
//!
//! ```
//! use dpattn_cuda::kernels::{KernelSpec, all_variants};
//! let spec = KernelSpec::clip_rows_gaussian(dpattn_cuda::FloatDtype::F32);
//! assert_eq!(spec.entry, "dp_clip_rows_gaussian");
//! assert!(spec.source().contains("dp_chacha20_block"));
//! assert!(all_variants().len() >= 35);
//! ```

use crate::noise_fill::{GpuSampler, OutDtype, UniformBits};

/// The prelude: types, bit casts and qualifiers shared by every kernel.
pub const PRELUDE: &str = include_str!("kernels/prelude.cuh");
/// ChaCha20 block function (docs/RANDOMNESS.md §1).
pub const CHACHA20: &str = include_str!("kernels/chacha20.cuh");
/// `ln u`, `sin/cos 2πu` on the uniform grid (port of `core/src/sampling/fast_math.rs`).
pub const FAST_MATH: &str = include_str!("kernels/fast_math.cuh");
/// Fixed-word sampler values from one ChaCha20 block.
pub const NOISE_VALUE: &str = include_str!("kernels/noise_value.cuh");
/// DP-Forward's row clipping rule.
pub const CLIP: &str = include_str!("kernels/clip.cuh");
/// Exact samplers on per-element windows (discrete Laplace and Gaussian, CKS20).
pub const EXACT_SAMPLER: &str = include_str!("kernels/exact_sampler.cuh");
/// The exact release of one value on a power-of-two grid.
pub const GRID_RELEASE: &str = include_str!("kernels/grid_release.cuh");
/// Exact grid release of a strided tensor in place.
pub const GRID_RELEASE_KERNEL: &str = include_str!("kernels/grid_release.cu");
/// Bulk keyed noise fill kernel.
pub const NOISE_FILL: &str = include_str!("kernels/noise_fill.cu");
/// Clip rows, then add Gaussian noise (unsafe float path) or release on a grid (exact).
pub const CLIP_ROWS_GAUSSIAN: &str = include_str!("kernels/clip_rows_gaussian.cu");
/// Shared pieces of the attention kernels: parameters, masks, keyed noise in registers.
pub const ATTENTION_COMMON: &str = include_str!("kernels/attention_common.cuh");
/// Tensor-core building blocks: inline PTX `ldmatrix`, `mma.sync`, `cp.async`.
pub const MMA: &str = include_str!("kernels/mma.cuh");
/// Fused flash-style noisy attention on tensor cores (bf16/f16 inputs, f32 accumulation).
pub const FLASH_ATTENTION: &str = include_str!("kernels/flash_attention.cu");
/// Fused flash-style noisy attention in f32 on the CUDA cores.
pub const FLASH_ATTENTION_F32: &str = include_str!("kernels/flash_attention_f32.cu");
/// Row clamping of private keys and values into a contiguous copy (DP cross-attention).
pub const CLAMP_ROWS: &str = include_str!("kernels/clamp_rows.cu");
/// Gaussian-sampling DP attention (paper 000), factor-free sampler.
pub const GAUSSIAN_SAMPLING: &str = include_str!("kernels/gaussian_sampling.cu");

/// A kernel module (one `.cu` body and the headers it needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelModule {
    /// `noise_fill.cu`: `dp_fill`.
    NoiseFill,
    /// `clip_rows_gaussian.cu`: `dp_clip_rows_gaussian` and `dp_clip_rows_exact`.
    ClipRowsGaussian,
    /// `grid_release.cu`: `dp_grid_release`.
    GridRelease,
    /// `flash_attention.cu`: `dp_flash_attention` (tensor cores).
    FlashAttention,
    /// `flash_attention_f32.cu`: `dp_flash_attention_f32`.
    FlashAttentionF32,
    /// `clamp_rows.cu`: `dp_clamp_rows`.
    ClampRows,
    /// `gaussian_sampling.cu`: the kernels of [`mod@crate::gaussian_sampling_attention`].
    GaussianSampling,
}

impl KernelModule {
    /// The module's name, used in logs and errors.
    pub fn name(self) -> &'static str {
        match self {
            KernelModule::NoiseFill => "noise_fill",
            KernelModule::ClipRowsGaussian => "clip_rows_gaussian",
            KernelModule::GridRelease => "grid_release",
            KernelModule::FlashAttention => "flash_attention",
            KernelModule::FlashAttentionF32 => "flash_attention_f32",
            KernelModule::ClampRows => "clamp_rows",
            KernelModule::GaussianSampling => "gaussian_sampling",
        }
    }

    /// The complete source handed to NVRTC.
    pub fn source(self) -> String {
        let parts: &[&str] = match self {
            KernelModule::NoiseFill => &[PRELUDE, CHACHA20, FAST_MATH, NOISE_VALUE, NOISE_FILL],
            KernelModule::ClipRowsGaussian => &[
                PRELUDE,
                CHACHA20,
                FAST_MATH,
                NOISE_VALUE,
                CLIP,
                EXACT_SAMPLER,
                GRID_RELEASE,
                CLIP_ROWS_GAUSSIAN,
            ],
            KernelModule::GridRelease => {
                &[PRELUDE, CHACHA20, EXACT_SAMPLER, GRID_RELEASE, GRID_RELEASE_KERNEL]
            }
            KernelModule::FlashAttention => {
                &[PRELUDE, CHACHA20, FAST_MATH, NOISE_VALUE, ATTENTION_COMMON, MMA, FLASH_ATTENTION]
            }
            KernelModule::FlashAttentionF32 => &[
                PRELUDE,
                CHACHA20,
                FAST_MATH,
                NOISE_VALUE,
                ATTENTION_COMMON,
                MMA,
                FLASH_ATTENTION_F32,
            ],
            KernelModule::ClampRows => &[PRELUDE, CLAMP_ROWS],
            KernelModule::GaussianSampling => {
                &[PRELUDE, CHACHA20, FAST_MATH, NOISE_VALUE, GAUSSIAN_SAMPLING]
            }
        };
        // `#pragma once` is meaningless in one translation unit; NVRTC warns about it.
        parts.iter().map(|p| p.replace("#pragma once", "")).collect::<Vec<_>>().join("\n")
    }
}

/// One compilable variant: module, defines, entry point, and whether FMA contraction is
/// allowed (it is not for the samplers, whose bit-exactness with the CPU depends on it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelSpec {
    /// The module.
    pub module: KernelModule,
    /// `-D NAME=VALUE` defines selecting the variant.
    pub defines: Vec<(&'static str, i32)>,
    /// The `extern "C"` entry point.
    pub entry: &'static str,
    /// `--fmad=true` when `true`.
    pub fmad: bool,
}

impl KernelSpec {
    /// The noise fill for a sampler, uniform layout and output type.
    pub fn noise_fill(sampler: GpuSampler, bits: UniformBits, out: OutDtype) -> Self {
        KernelSpec {
            module: KernelModule::NoiseFill,
            defines: vec![
                ("DP_SAMPLER", sampler.code()),
                ("DP_UW", bits.words() as i32),
                ("DP_OUT", out.code()),
            ],
            entry: "dp_fill",
            fmad: false,
        }
    }

    /// The raw stream-word fill (`u32` output).
    pub fn stream_words() -> Self {
        KernelSpec {
            module: KernelModule::NoiseFill,
            defines: vec![("DP_SAMPLER", 4), ("DP_UW", 1), ("DP_OUT", 4)],
            entry: "dp_fill",
            fmad: false,
        }
    }

    /// Clip rows then add Gaussian noise (the unsafe float path), for `f32` or `f64` rows.
    pub fn clip_rows_gaussian(dtype: crate::FloatDtype) -> Self {
        KernelSpec {
            module: KernelModule::ClipRowsGaussian,
            defines: vec![("DP_T", dtype.code()), ("DP_EXACT", 0)],
            entry: "dp_clip_rows_gaussian",
            fmad: false,
        }
    }

    /// Clip rows then release them on a grid with exact integer noise, for `f32` or `f64`.
    pub fn clip_rows_exact(dtype: crate::FloatDtype) -> Self {
        KernelSpec {
            module: KernelModule::ClipRowsGaussian,
            defines: vec![("DP_T", dtype.code()), ("DP_EXACT", 1)],
            entry: "dp_clip_rows_exact",
            fmad: false,
        }
    }

    /// The exact grid release of a strided `f32` or `f64` tensor.
    pub fn grid_release(dtype: crate::FloatDtype) -> Self {
        KernelSpec {
            module: KernelModule::GridRelease,
            defines: vec![("DP_T", dtype.code())],
            entry: "dp_grid_release",
            fmad: false,
        }
    }

    /// The source NVRTC compiles.
    pub fn source(&self) -> String {
        self.module.source()
    }

    /// A readable name: `noise_fill[DP_SAMPLER=1,DP_UW=2,DP_OUT=0]`.
    pub fn label(&self) -> String {
        let d: Vec<String> = self.defines.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}[{}]", self.module.name(), d.join(","))
    }

    /// NVRTC options other than the architecture.
    pub fn options(&self) -> Vec<String> {
        let mut o =
            vec!["-std=c++17".to_owned(), format!("--fmad={}", self.fmad), "-lineinfo".to_owned()];
        o.extend(self.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
        o
    }
}

/// Every variant this crate can launch (what the CPU-only compile test builds).
pub fn all_variants() -> Vec<KernelSpec> {
    let mut v = vec![KernelSpec::stream_words()];
    for s in GpuSampler::ALL {
        for b in [UniformBits::B24, UniformBits::B53] {
            for o in OutDtype::ALL {
                v.push(KernelSpec::noise_fill(s, b, o));
            }
        }
    }
    for t in [crate::FloatDtype::F32, crate::FloatDtype::F64] {
        v.push(KernelSpec::clip_rows_gaussian(t));
        v.push(KernelSpec::clip_rows_exact(t));
        v.push(KernelSpec::grid_release(t));
    }
    v.extend(crate::attention::variants());
    v.extend(crate::output_perturbation::variants());
    v.extend(crate::gaussian_sampling_attention::variants());
    v
}
