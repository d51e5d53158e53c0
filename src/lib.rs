//! # dpattn
//!
//! Differentially private attention. This crate re-exports [`dpattn-core`](dpattn_core)
//! (the `no_std` CPU core: views, errors, privacy parameters, reference attention, and the
//! mechanisms as they land) and, with the `cuda` feature, `dpattn-cuda` as [`cuda`].
//!
//! ```
//! use dpattn::{Mask, Scale, reference_attention::reference_attention_vec};
//! // Two keys; the query matches the second one strongly.
//! let q = [0.0f64, 8.0];
//! let k = [1.0f64, 0.0, 0.0, 1.0];
//! let v = [-1.0f64, 1.0];
//! let out = reference_attention_vec(&q, &k, &v, [1, 1, 1, 2], 2, 1, Mask::NONE, Scale::Custom(1.0))?;
//! // softmax([0, 8]) · [-1, 1] = tanh(4)
//! assert!((out[0] - 4f64.tanh()).abs() < 1e-15);
//! # Ok::<(), dpattn::Error>(())
//! ```
#![no_std]

pub use dpattn_core::*;

/// The GPU crate (feature `cuda`): NVRTC-compiled kernels; builds without a CUDA toolkit.
#[cfg(feature = "cuda")]
pub use dpattn_cuda as cuda;

/// The README's Rust examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod docs_check;

#[cfg(test)]
mod embedded_check;
