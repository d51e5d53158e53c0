//! Differentially private attention by Gaussian sampling (paper 000, Gao–Song–Yang–Zhou,
//! "Differentially Private Attention Computation"; summarised, with its errata, in
//! `docs/PAPERS.md` §0).
//!
//! **What it releases.** For `X ∈ ℝ^{n×d}` (`n` tokens, `d ≥ n` features) with Gram matrix
//! `A = XXᵀ`, the mechanism publishes `B = (1/k)·Σᵢ gᵢgᵢᵀ`, `gᵢ ~ N(0, A)` i.i.d.
//! (Algorithm 2, [`dp_covariance`]), and the attention matrix `P = D(B)⁻¹ f(B)` for
//! `f ∈ {exp, cosh}` (Algorithm 1, [`gaussian_sampling_attention()`]). The noise comes only from
//! sampling: more samples `k` means a more accurate `B` and *weaker* privacy, so privacy
//! bounds `k` from above and accuracy from below ([`feasible_k`]).
//!
//! **Guarantee** (Theorem 4.1 Part 2 / Theorem 5.9, with the errata of `docs/PAPERS.md` §0.6):
//! `(B, P)` is `(ε, δ)`-DP for `ε ∈ (0, 1)`, `δ ∈ (0, 0.1)` when (PRIV) `s < Δ(k)` holds
//! ([`check_privacy`]) and **every** possible input is `(α, η)`-good (both members of a neighbour
//! pair; `docs/PAPERS.md` P0-D10).
//!
//! **Privacy unit: one feature column of `X`, not a token.** Neighbours differ in at most
//! one column, by at most `β` in ℓ2 (Def. 1.6; `β = 2α` is replacing a column). Changing a
//! token (a row of `X`) is *not* covered (`docs/PAPERS.md` P0-13): do not advertise token-level
//! privacy. See `docs/PRIVACY.md` §3.
//!
//! **Public parameters.** `α` (column-norm bound), `η` (floor of `λ_min(XXᵀ)`), `β` and `k`
//! describe the domain and the mechanism and must be chosen **without looking at `X`**.
//! The library checks a given `X` against them ([`OutOfDomain::Reject`]: a clear
//! [`Error::DomainViolation`](crate::Error::DomainViolation), itself a non-private event
//! for the data holder only) or forces every input into the domain
//! ([`OutOfDomain::ClipAndRidge`], our extension, which also zeroes any column holding a
//! NaN or an infinity instead of refusing it; see below). It never derives the calibration from
//! `X`: a `k` computed from the measured `α̂, η̂` would differ between neighbours, so the
//! output law would depend on the data in a way no theorem covers. [`measure_domain`] and
//! [`PrivateReport`] exist to audit data, not to calibrate.
//!
//! **Non-finite private entries** (clip-and-ridge). Write `S` for "a column holding a NaN or an
//! infinity becomes the zero column", `C` for the column clip to norm `α` and `M` for the ridged
//! sampler; the release is `M(C(S(X)))`. `S` is the identity on finite inputs, so every pair of
//! finite neighbours gets exactly the guarantee above. An input with a non-finite entry is treated
//! as its finite image `S(X)`: two such inputs with the same non-finite columns that differ in one
//! finite column by `≤ β` are ordinary neighbours after `S`, and a column turning non-finite moves
//! the clipped input by at most `α` (from `C(x)` to `0`), covered when `β ≥ α` and otherwise by
//! group privacy over `⌈α/β⌉` steps along that segment (`docs/PRIVACY.md` §3.1). Nothing is refused
//! for it ([`PrivateReport::clipped_columns`] counts the column, `alpha_hat` is `+∞`);
//! [`OutOfDomain::Reject`] still refuses non-finite input with
//! [`Error::NonFinite`](crate::Error::NonFinite).
//!
//! **Accuracy.** With probability `1 − γ`, `‖P_A − P_B‖ ≤ 4(1 + ε + 2r)r` (the paper's
//! bound; [`error_bound_paper`]), but the constant uniform output already meets it
//! ([`uniform_baseline_bound`], `docs/PAPERS.md` P0-D5), and the paper's `ρ` has an unknown
//! constant ([`RhoModel::PaperNominal`]). Our rigorous, `k`-dependent bound (P0-D4)
//! `2(e^{ρ₂(k)·r} − 1)` ([`error_bound_tight`] with [`RhoModel::GaussianSpectral`]) is the
//! one that shows utility. `P_B·V` is post-processing only for a public `V`.
//!
//! **Paper errors and our fixes** (`docs/PAPERS.md` §0.6). Two `Δ` constant sets (P0-1;
//! Theorem 4.1's stricter one is the default, [`DeltaConstants`]); the `√n` in the
//! sensitivity is loose (P0-6, opt-in [`SensitivityBound::Tight`]); Lemma B.1's constant
//! and Fact A.2(6) are wrong but Theorem 5.3 holds (P0-7, P0-8); the accuracy target is
//! coupled to the privacy `ε` (P0-3, [`AccuracyCoupling`]); Lemma C.5 needs `kΔ² ≤ ε`,
//! guaranteed here by `δ < 0.1` (P0-18).
//!
//! **Cost.** The default [`Sampler::Bartlett`] draws `n(n+1)/2` numbers and does `O(n²d + n³)`
//! work whatever `k` (10⁵–10⁹ in practice); the literal sampler is `O(n²k)`. Floating point:
//! as every Gaussian mechanism in this crate, the samplers are floating-point (`docs/RANDOMNESS.md`
//! §7); the guarantee is for the exact output law, not bit-level DP.
//!
//! ```
//! use dpattn_core::PrivacyBudget;
//! use dpattn_core::gaussian_sampling_attention::{Calibration, Domain, feasible_k, rho};
//! // docs/PAPERS.md T0-A: n = 4, ε = 0.09, δ = 1e-6, γ = 0.01, β = 5e-6.
//! let domain = Domain::new((0.2f64 / 4096.0).sqrt(), 0.05, 5e-6)?;
//! let budget = PrivacyBudget::new(0.09, 1e-6)?;
//! let range = feasible_k(4, &domain, budget, 0.01, &Calibration::PAPER_LITERAL)?;
//! assert_eq!(range, 258_944..=750_460);
//! # Ok::<(), dpattn_core::Error>(())
//! ```

mod calibration;
mod covariance;
mod mechanism;

pub use calibration::{
    AccuracyCoupling, Calibration, DeltaConstants, Domain, K_LIMIT, RhoModel, SensitivityBound,
    check_privacy, delta_threshold, error_bound_paper, error_bound_tight, feasible_k, k_max, k_min,
    max_beta, min_epsilon_for_k, min_feasible_epsilon, rho, sensitivity, uniform_baseline_bound,
};
pub use covariance::{
    SAMPLE_BLOCK, Sampler, dp_covariance, dp_covariance_from_data,
    dp_covariance_from_data_scratch_len, dp_covariance_scratch_len,
};
pub use mechanism::{
    GaussianSamplingParams, OutOfDomain, PRIVACY_UNIT, PrivateReport, STREAMS,
    check_release_parameters, gaussian_sampling_attention, gaussian_sampling_attention_keyed,
    gaussian_sampling_attention_scratch_len, measure_domain,
};
