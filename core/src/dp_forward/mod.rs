//! DP-Forward: analytic matrix Gaussian noise on hidden states in the forward pass, for
//! sequence- and token-level local DP (paper 003, Du, Yue, Chow, Wang, Huang, Sun, CCS 2023;
//! summarised, with its errata, in `docs/PAPERS.md` §3).
//!
//! **What it releases.** A user runs the first part `f` of a model on a private sequence
//! and sends `M(X) = clip_C(f(X)) + Z` to the party that runs the rest (`docs/PAPERS.md`
//! §3.1, §3.7).
//! [`dp_forward`] is that hook on a batch of `tokens × dim` hidden matrices:
//! [`clip_hidden`] bounds each sequence (Frobenius) or each row to norm `C`, then aMGM
//! noise `Z = U·N·Vᵀ` is added — i.i.d. (`σ = S·√k/A(ε, δ)`, the paper's choice, Eq. 6),
//! diagonal, or a general matrix normal with certified factors ([`NoiseFactors`]).
//!
//! **Guarantee.** Each sequence's `k = releases` releases together are `(ε, δ)`-DP under the
//! chosen [`Neighbours`] (Theorem 3 and Theorem 6 with Algorithm 1's exact calibration;
//! exact Gaussian composition over the `k` releases, `docs/PAPERS.md` §3.7; see
//! [`DpForwardParams`]). Labels sent with the sequence are protected only if randomized
//! ([`RandomizedResponse`], Theorem 4: `(ε₁ + ε₂, δ)`-LDP). The guarantee is local (the data owner
//! runs the hook) only while `f` is frozen or updated without the raw inputs; the paper's
//! experiments update `f` on the server, which needs central trust (`docs/PAPERS.md` P3-5).
//!
//! **Neighbour relation** ([`Neighbours`], [`sensitivity()`]): any two sequences with the same
//! label (SeqLDP, sensitivity `2C`), or hidden matrices that differ in `c` rows
//! (token-level, `2C√c` for row clipping, only at the row-local embedding position).
//!
//! **Where a host applies the hook** ([`NoisePosition`], `docs/PAPERS.md` §3.7; encoder
//! layers 0-based):
//!
//! | position | noise goes on | residual |
//! | --- | --- | --- |
//! | `Embedding` | `LayerNorm(tok + seg + pos)` after dropout, `n × d` | — |
//! | `Encoder { sub: Mha }` | attention output projection, before LayerNorm | host removes it |
//! | `Encoder { sub: AddNorm1 }` | `LayerNorm(h + input)` after attention | kept inside `f` |
//! | `Encoder { sub: Ffn }` | second FFN dense layer, before LayerNorm | host removes it |
//! | `Encoder { sub: AddNorm2 }` | the encoder output (Table 5's "Encoder i") | kept inside `f` |
//! | `Pooled` | the `1 × d` `[CLS]` feature after dense + tanh | — |
//!
//! The attention mask sent with a padded sequence reveals its length, which SeqLDP does not
//! cover (`docs/PAPERS.md` P3-14): send no mask (padding as tokens) or privatise the length
//! separately.
//!
//! **The paper's errors and our resolutions** (`docs/PAPERS.md` §3.8, `docs/PRIVACY.md` §6):
//! * \[FIX\] P3-1, P3-2: sensitivity `2C`, not the released code's `C` (sequence) or the paper's
//!   `C` (token level); [`SensitivityRule::ReleasedCode`] reproduces the code and charges
//!   the effective ε (nominal ε = 8 is really 19.12 at δ = 1e-5).
//! * \[FIX\] P3-3: the Q/K/V design should be one release of `X·[W^Q|W^K|W^V]` with
//!   sensitivity `2C·σ̄_max` for a certified upper bound `σ̄_max`
//!   ([`spectral_norm_upper_bound`]). The hook itself does not run that design (it clips
//!   what it perturbs); a host computing it uses the bound for its sensitivity.
//! * \[FIX\] P3-4, P3-17: Algorithm 1 is solved with branch-aware bisection and erfc tails
//!   ([`crate::calibration::amgm`]); the code's branch A returns noise hundreds of times
//!   too small.
//! * \[FIX\] P3-6: the `k` epochs are composed, not ignored.
//! * \[FIX\] P3-7: the classical Gaussian mechanism refuses ε ≥ 1
//!   ([`classical_gaussian_sigma`](crate::calibration::gaussian_mechanism::classical_gaussian_sigma);
//!   the paper's baselines are in the reproduction crate `dpattn-paper`,
//!   `dpattn_paper::dp_forward::baselines`).
//! * P3-8: the paper's central-DP "translation" via shuffling (Poisson subsampling at
//!   `q = 1/N`) is a heuristic, not a proven bound; it is not offered here.
//!
//! **Floating point.** By default ([`NoiseMode::Exact`](crate::NoiseMode::Exact)) the clipped
//! matrix is released on a public power-of-two grid with exact discrete Gaussian noise (the `exact`
//! module, [`DpForwardParams::exact_grid`]): the floats returned are DP, low-order bits included,
//! at the same charge, with noise typically 0.4% larger (the exact figures:
//! [`DpForwardParams::exact_grid`]; `docs/PRIVACY.md` §6.5).
//! [`NoiseMode::UnsafeFloat`](crate::NoiseMode::UnsafeFloat) keeps the paper's float path — noise
//! drawn in `f64` from a ChaCha20 keyed stream and added in `f64` — whose low-order bits are not
//! covered by the proof (P3-18); there the sampler's bounded support (`|z| ≤ 8.57`) is also visible
//! when `S₂/σ` is large, so such calibrations are refused ([`GAUSSIAN_SUPPORT`]; about ε > 20 at δ
//! = 1e-5).
//!
//! ```
//! use dpattn_core::dp_forward::{ClipMode, ClipRegion, DpForwardParams, Neighbours,
//!     NoisePosition, SensitivityRule};
//! use dpattn_core::{NoiseMode, PrivacyBudget};
//! // Three epochs at a total (ε, δ) = (1, 1e-5), unit sensitivity: docs/PAPERS.md T3-C gives
//! // σ = 6.461643536 per release (3.730631635 for a single release).
//! let p = DpForwardParams {
//!     budget: PrivacyBudget::new(1.0, 1e-5)?, releases: 3, clip_norm: 0.5,
//!     region: ClipRegion::Frobenius, mode: ClipMode::Clip, neighbours: Neighbours::Sequence,
//!     position: NoisePosition::Embedding, tokens: 128, dim: 768,
//!     rule: SensitivityRule::Derived, noise_mode: NoiseMode::Exact,
//! };
//! assert!((p.noise_floor()? / 6.461643536 - 1.0).abs() < 1e-9);
//! # Ok::<(), dpattn_core::Error>(())
//! ```

#[cfg(feature = "alloc")]
mod certify;
mod clip;
mod exact;
mod labels;
mod noise;
mod params;
mod release;
mod sensitivity;

#[cfg(feature = "alloc")]
pub use certify::CertifiedMatrixGaussian;
pub(crate) use clip::clip_checked;
pub use clip::{ClipMode, ClipRegion, ClipReport, clip_hidden};
pub use labels::{MAX_CLASSES, RandomizedResponse, full_ldp_budget, randomize_label_in};
pub use noise::{GAUSSIAN_SUPPORT, NoiseFactors, check_factors, dp_forward_scratch_len};
pub use params::{DpForwardParams, SensitivityRule};
pub use release::{DpForwardReport, STREAMS, dp_forward, dp_forward_keyed};
pub use sensitivity::{
    Neighbours, NoisePosition, SubLayer, check_neighbours, sensitivity, spectral_norm_upper_bound,
};
