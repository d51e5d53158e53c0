//! # dpattn-core
//!
//! The `#![no_std]` core of dpattn, a library for differentially private attention.
//!
//! This crate holds the building blocks every mechanism uses:
//!
//! * [`Error`] / [`Result`]: one error type; user input never causes a panic.
//! * Typed views: [`MatRef`] / [`MatMut`] (strided row-major matrices over `f32`, `f64`,
//!   `half::f16`, `half::bf16`; see [`Element`]) and the batched multi-head layout
//!   `[batch, heads, seq, dim]` ([`Layout4`], [`BatchedRef`], [`BatchedMut`]), with
//!   conversions to and from nalgebra ([`nalgebra_interop`]).
//! * The scratch convention ([`scratch`]): allocation-free routines come with a
//!   `*_scratch_len` function and take caller-provided scratch.
//! * Validated privacy parameters: [`Epsilon`], [`Delta`], [`Sensitivity`],
//!   [`PrivacyBudget`].
//! * Attention options ([`Scale`], [`Mask`]) and the float64 [`reference_attention()`] used as
//!   the test oracle by every kernel.
//!
//! ## Features
//!
//! | feature | default | effect |
//! | --- | --- | --- |
//! | `alloc` | yes (through `std`) | convenience wrappers that allocate; nalgebra's dynamic matrices |
//! | `std` | yes | implies `alloc`; keys and session epochs from the operating system (`NoiseKey::generate`, `Session::new`); run-time AVX2+FMA detection for the attention kernels and AVX-512F/AVX2 detection for the batched ChaCha20 block generator (`sampling::chacha20_blocks`). **Without it `Kernel::Auto` uses the AVX2 kernel only if the build enables `avx2` and `fma` (e.g. `-C target-cpu=x86-64-v3`), else the portable one (about 4× slower).** The root `dpattn` crate enables it by default |
//!
//! Without default features the crate builds for bare-metal targets such as
//! `thumbv7em-none-eabihf` (the test script proves it).
//!
//! ```
//! use dpattn_core::{Epsilon, MatRef};
//! let eps = Epsilon::new(1.0)?;
//! let x = MatRef::from_row_major(&[1.0f32, 2.0, 3.0, 4.0], 2, 2)?;
//! assert_eq!((eps.get(), x.row(1)), (1.0, &[3.0f32, 4.0][..]));
//! # Ok::<(), dpattn_core::Error>(())
//! ```
#![no_std]
// `unsafe` is denied everywhere except the AVX2 kernel backend and its dispatch
// (`attention/simd_avx2.rs`, `attention/dispatch.rs`) and the SIMD ChaCha20 block generator
// (`sampling/chacha_simd.rs`), where each block states its SAFETY.
#![deny(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

pub mod accounting;
pub mod attention;
pub mod attention_options;
pub mod batched;
pub mod calibration;
mod directed_rounding;
pub mod dp_forward;
pub mod element;
pub mod error;
pub mod gaussian_sampling_attention;
pub mod gram_attention;
pub mod grid_release;
#[cfg(feature = "alloc")]
pub mod kv_sketch;
mod linalg;
pub mod matrix_view;
#[cfg(feature = "alloc")]
pub mod moment_sketch;
pub mod nalgebra_interop;
pub mod noisy_attention;
pub mod noisy_head;
pub mod output_perturbation;
pub mod privacy_params;
pub mod reference_attention;
pub mod sampling;
pub mod scratch;
pub mod session;
#[cfg(feature = "alloc")]
pub mod softmax_tree;
#[cfg(feature = "alloc")]
pub mod softmax_tree_cross_attention;
pub mod weight_shuffle;

pub use attention_options::{Kernel, Mask, Scale, ScoreFn};
pub use batched::{BatchedMut, BatchedRef, Layout4};
pub use element::Element;
pub use error::{Error, PrivateDetail, Result};
pub use grid_release::NoiseMode;
pub use matrix_view::{MatMut, MatRef};
pub use privacy_params::{Delta, Epsilon, PrivacyBudget, Sensitivity};
pub use reference_attention::reference_attention;

/// The crate version, from `Cargo.toml`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
