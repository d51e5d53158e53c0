//! NoisyHead: differentially private pretraining of a linear attention head for in-context
//! linear regression (paper 004, Bonnerjee–Yeon–Asch–Nandy–Ghosal, "How Private is Your
//! Attention? Bridging Privacy with In-Context Learning"; summarised, with its errata, in
//! `docs/PAPERS.md` §4).
//!
//! **What it releases.** A linear attention head whose off-diagonal blocks are zero predicts
//! `ŷ = ⟨Γ, Z⟩ = uᵀΓv` from a prompt's rank-one summary `Z = u vᵀ`, `u` the query token,
//! `v = L⁻¹Σᵢ yᵢxᵢ` (`docs/PAPERS.md` §4.3). NoisyHead (Algorithm 1, [`noisy_head()`]) clips labels
//! to `±C`, projects each `Z_k` on the Frobenius ball of radius `G`, and runs `T` steps of
//! projected gradient descent on a ridge objective with Gaussian noise `N(0, s²)` on every
//! entry of every iterate, releasing `Γ̂ = Γ^T`.
//!
//! **Guarantee** (Theorem 3.2, `docs/PAPERS.md` §4.4): `(ε, δ)`-DP when `σ ≥ 2G(C + RG)`, with
//! `s = η0·T·σ·√(2 ln(1.25T/δ))/(εN)`: each step is a classical Gaussian mechanism at
//! `(ε/T, δ/T)` and basic composition adds them up. The classical mechanism is proven only
//! for `ε/T < 1`; the paper does not say so, the library enforces it
//! ([`NoisyHeadParams::validate`]). `Γ⁰`, `C, G, R, λ, η0, T` and `σ` must not depend on the
//! private prompts; `T` is fixed before the run ([`schedule`]). The guarantee holds in the
//! floats returned under the default [`NoiseMode::Exact`](crate::NoiseMode::Exact): each
//! step's iterate is released on a public grid with exact discrete Gaussian noise
//! ([`Calibration`], `docs/PRIVACY.md` §5.5).
//!
//! **Neighbour relation and unit: one whole prompt**, replaced (all `L + 1` tokens, the
//! labels and the query target); `N` is public (Def. 3.1, `docs/PAPERS.md` P4-30): [`PRIVACY_UNIT`]
//! is [`PrivacyUnit::Prompt`](crate::accounting::privacy_unit::PrivacyUnit::Prompt). Test
//! prompts are not protected. See `docs/PRIVACY.md` §5.
//!
//! **Randomness and accounting.** [`noisy_head()`] takes a
//! [`Session`](crate::session::Session): one release uses [`STREAMS`] `= 1` fresh stream id
//! and is charged to the session's ledger ([`NoisyHeadParams::cost`]: `(ε, δ)` under
//! [`Accounting::Paper`], a Gaussian `ρ` under [`Accounting::Zcdp`]).
//! [`noisy_head_keyed`] takes an explicit key and stream id and an optional ledger, for
//! replay and audit.
//!
//! **Paper errors and our fixes** (`docs/PAPERS.md` §4.9). The head computes
//! `⟨w22(W11^{KQ})ᵀ, Z⟩`, so the exported `W11^{KQ}` is `Γᵀ` ([`export_attention`], P4-1);
//! the descent minimises ridge with `2λ`, not `λ` (P4-3; [`ridge`] takes the λ you want);
//! the printed `T` rule is negative (P4-7; [`schedule::t_low_dim_code`]); `G` has two
//! printed forms and `Π_G` is active far more often than the proof claims (P4-9,
//! [`GForm`]); the robustness figure's rising ridge curve is a floating-point artefact
//! (P4-21, [`RidgeSolver::Qr`]); the early-stopping U needs a random start (P4-22); basic
//! composition is loose (P4-26, opt-in [`Accounting::Zcdp`]).
//!
//! **Cost.** Per step `4ND²` flops in [`Form::Streaming`] or `2D⁴` in [`Form::Gram`] after
//! a one-off `ND⁴`; memory `N(2D+1) + O(D²)` (`+ D⁴` for Gram), all caller scratch.
//!
//! The paper's experiment configurations, data generator, attack and risk measures are
//! reproduction tools, in the crate `dpattn-paper` (`dpattn_paper::noisy_head`); an engine
//! does not need them.
//!
//! ```
//! use dpattn_core::noisy_head::schedule::{mean_field_excess_risk, t_low_dim_code};
//! use dpattn_core::noisy_head::{Accounting, GForm, NoisyHeadParams, Radii};
//! use dpattn_core::{NoiseMode, PrivacyBudget};
//! // The paper's low-dimensional experiment at N = 4000, ε = 1 (docs/PAPERS.md §4.6): D = 5,
//! // L = ⌊√N⌋ = 63, λ = 5, δ = 1e-5, Theorem 4.1's radii, η0 = 0.95·(2/3)·λ/(λ + G²)², the
//! // authors' rule for T, σ = σ_min (`dpattn_paper::noisy_head::presets::low_dim(4000, 1.0)`).
//! let (n, l, d, lambda) = (4000, 63, 5, 5.0);
//! let radii = Radii::theorem41(n, l, d, lambda, 0.0, 1.0, GForm::Proof, 1.0)?;
//! let den = lambda + radii.g * radii.g;
//! let eta0 = 0.95 * (2.0 / 3.0) * lambda / (den * den);
//! let mut p = NoisyHeadParams {
//!     d, l, n, lambda, eta0, iters: t_low_dim_code(n, eta0, lambda)?,
//!     clip_c: radii.c, proj_g: radii.g, proj_r: radii.r, sigma: 0.0,
//!     budget: PrivacyBudget::new(1.0, 1e-5)?,
//!     accounting: Accounting::Paper, noise_mode: NoiseMode::Exact,
//! };
//! p.sigma = p.sigma_min(); // the smallest σ of Theorem 3.2
//! p.validate()?;
//! // docs/PAPERS.md T4-C: the mean-field prediction of the excess risk here is 0.05016.
//! let risk = mean_field_excess_risk(&p, 0.1, 0.0)?;
//! assert!((risk / 0.05016 - 1.0).abs() < 2e-3);
//! # Ok::<(), dpattn_core::Error>(())
//! ```

mod exact;
mod features;
mod linear_head;
mod params;
mod release;
#[cfg(feature = "alloc")]
mod ridge;
pub mod schedule;
mod train;

pub use features::{Features, Prompts, private_features, prompt_from_embedding, raw_features};
pub use linear_head::{export_attention, linear_attention_head, linear_attention_head_scratch_len};
pub use params::{Accounting, Calibration, Diagnostics, GForm, NoisyHeadParams, Radii};
pub use release::{PRIVACY_UNIT, STREAMS, noisy_head, noisy_head_keyed, noisy_head_scratch_len};
#[cfg(feature = "alloc")]
pub use ridge::{RidgeSolver, ridge};
pub use train::{Form, gradient_step, gram_build, predict, train_nonprivate};
