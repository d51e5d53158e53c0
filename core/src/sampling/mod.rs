//! Noise samplers on an addressable ChaCha20 stream.
//!
//! * [`KeyedStream`]: the ChaCha20 keystream of a [`NoiseKey`] and a stream id, word for
//!   word equal to `rand_chacha::ChaCha20Rng`, addressable by word position. The exact
//!   mapping from logical element indices to words is the contract in
//!   `docs/RANDOMNESS.md`, which the CUDA kernels reproduce.
//! * Continuous samplers ([`FixedWordSampler`]): [`Uniform`], [`Exponential`],
//!   [`Gaussian`], [`Laplace`], [`TruncatedLaplace`], each drawable from any
//!   `rand_core::CryptoRng` or element by element from a keyed stream, in `f32` or `f64`.
//! * Exact samplers ([`ExactSampler`]) on [`BitSource`]s, with no floating point in any
//!   accept/reject decision: [`Bernoulli`], [`BernoulliDyadic`], [`BernoulliExp`],
//!   [`DiscreteLaplace`], [`DiscreteGaussian`], [`PoissonSubsampling`]; grid-snapped float
//!   noise built on them ([`GridLaplace`], [`GridGaussian`]).
//! * [`ConstantTimeGaussian`]: the discrete Gaussian within total variation `2^−100`, drawn
//!   in constant time for enclaves ([`constant_time_delta`] is what it adds to a release's δ).
//! * [`Gamma`] and [`ChiSquare`] (Marsaglia–Tsang, constant cost for any shape), drawn from
//!   a keyed element's window or any `CryptoRng`.
//! * [`MatrixGaussian`] noise `MN(0, Σ, Ψ)` and uniform permutations
//!   ([`sample_permutation`]).
//!
//! Every sampler is usable without `alloc`.

pub(crate) mod bit_source;
mod chacha_simd;
mod constant_time_gaussian;
mod covariance_factor;
mod discrete_gaussian;
mod discrete_laplace;
mod exact_bernoulli;
mod exact_sampler;
mod fast_math;
mod fixed_point;
mod fixed_word;
pub(crate) mod gamma;
mod gaussian;
mod gaussian_cells;
mod grid_gaussian;
mod grid_laplace;
mod grid_noise;
mod keyed_stream;
mod laplace;
mod lazy_compare;
mod matrix_gaussian;
mod noise_float;
mod noise_key;
mod permutation;
mod poisson_subsampling;
mod truncated_discrete_laplace;
mod truncated_laplace;
mod uniform;

pub use bit_source::{BitSource, CONTINUATION_BLOCKS, ElementBits, MAX_WINDOW_ELEMENTS, RngBits};
pub use chacha_simd::{ChaChaBackend, chacha20_blocks, chacha20_blocks_with};
pub use constant_time_gaussian::{ConstantTimeGaussian, constant_time_delta};
pub use fixed_word::{FixedWordSampler, MAX_GROUP_WORDS};
pub use gamma::{ChiSquare, Gamma};
pub use gaussian::Gaussian;
pub use keyed_stream::{BLOCK_WORDS, KeyedStream, STREAM_WORDS, WordLayout, chacha20_block};
pub use laplace::Laplace;
pub use noise_float::NoiseFloat;
pub(crate) use noise_float::{check_largest, max_box_muller};
pub use noise_key::NoiseKey;
pub use truncated_discrete_laplace::TruncatedDiscreteLaplace;
pub use truncated_laplace::TruncatedLaplace;
pub use uniform::{Exponential, Uniform};

pub use discrete_gaussian::DiscreteGaussian;
pub use discrete_laplace::DiscreteLaplace;
pub use exact_bernoulli::{Bernoulli, BernoulliDyadic, BernoulliExp};
pub use exact_sampler::ExactSampler;
pub use grid_gaussian::GridGaussian;
pub use grid_laplace::GridLaplace;
pub use poisson_subsampling::PoissonSubsampling;

pub use covariance_factor::{PSD_TOL, SYMMETRY_TOL};
pub use matrix_gaussian::{MatrixGaussian, matrix_gaussian_scratch_len};
pub(crate) use permutation::below;
pub use permutation::{
    PermIndex, invert_permutation, lemire_below, permute_cols, permute_rows, permute_slice,
    sample_permutation, sample_permutation_keyed,
};
