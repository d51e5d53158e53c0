//! The in-context regression data of the paper's experiments, its corruption attack, a
//! random start, and risk evaluation (`docs/PAPERS.md` §4.3 with the paper's eq. (B.1),
//! §4.6 and §4.11).
//!
//! **Guarantee.** None: synthetic data and evaluation for experiments. Everything is
//! reproducible: prompt `k` of a draw is a function of `(key, stream, k)` only
//! (`docs/RANDOMNESS.md` §5.3), so any range of prompts can be generated on its own.

use crate::check::{check_len, check_sizes};
use crate::math::scaled_norm;
use dpattn_core::error::{mul_size, nonneg_finite};
use dpattn_core::noisy_head::{Features, predict};
use dpattn_core::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn_core::{Error, Result};

/// Standard normals consumed by one prompt: `(L+1)·D` token coordinates, `D` task-vector
/// entries, `L+1` label noises.
fn stride(l: usize, d: usize) -> Result<u64> {
    let tokens = mul_size(l + 1, d, "(L+1)·D")?;
    let s = tokens
        .checked_add(d)
        .and_then(|x| x.checked_add(l + 1))
        .ok_or(Error::SizeOverflow { what: "prompt stride" })?;
    Ok(s as u64)
}

fn normalise_or_e1(x: &mut [f64]) {
    let n = scaled_norm(x);
    if n > 0.0 && n.is_finite() {
        x.iter_mut().for_each(|v| *v /= n);
    } else {
        x.fill(0.0);
        x[0] = 1.0;
    }
}

/// Writes prompts `first, …, first + n − 1` of the model of `docs/PAPERS.md` §4.3 into the flat
/// layout of [`Prompts`](dpattn_core::noisy_head::Prompts): tokens `x ~ U(S^{D−1})` (a normalised
/// Gaussian vector), a fresh task `w_k ~ N(0, I_D)` per prompt, labels `y = w_kᵀx + τ·ϵ`,
/// `ϵ ~ N(0, 1)` (`tau` is the noise std `τ`; the paper uses 0). Allocation-free.
///
/// Prompt `k` uses elements `k·S … (k+1)·S − 1` of the keyed standard-normal stream,
/// `S = (L+1)·D + D + L + 1`: token `i`'s coordinates first (the query is token `L`), then
/// `w_k`, then the `L + 1` label noises.
///
/// ```
/// use dpattn_paper::noisy_head::generate_prompts;
/// use dpattn_core::sampling::NoiseKey;
/// let key = NoiseKey::generate()?;
/// let (mut x, mut y, mut q, mut t) = ([0.0; 2 * 4 * 3], [0.0; 8], [0.0; 6], [0.0; 2]);
/// generate_prompts(2, 4, 3, 0.0, &key, 0, 10, &mut x, &mut y, &mut q, &mut t)?;
/// let norm: f64 = q[..3].iter().map(|v| v * v).sum();
/// assert!((norm - 1.0).abs() < 1e-12); // queries on the unit sphere
/// // Prompt 11 alone equals the second prompt of the draw above.
/// let (mut x1, mut y1, mut q1, mut t1) = ([0.0; 12], [0.0; 4], [0.0; 3], [0.0; 1]);
/// generate_prompts(1, 4, 3, 0.0, &key, 0, 11, &mut x1, &mut y1, &mut q1, &mut t1)?;
/// assert_eq!((&x[12..], t[1]), (&x1[..], t1[0]));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for zero sizes or `τ` negative / not finite;
/// [`Error::ShapeMismatch`] on buffer lengths; [`Error::SizeOverflow`] when prompt indices
/// overflow the stream's element range.
#[allow(clippy::too_many_arguments)]
pub fn generate_prompts(
    n: usize,
    l: usize,
    d: usize,
    tau: f64,
    key: &NoiseKey,
    stream: u64,
    first: u64,
    ctx_x: &mut [f64],
    ctx_y: &mut [f64],
    query_x: &mut [f64],
    query_y: &mut [f64],
) -> Result<()> {
    let (nl, nld) = check_sizes(n, l, d)?;
    nonneg_finite("tau", tau)?;
    check_len("ctx_x", ctx_x.len(), nld)?;
    check_len("ctx_y", ctx_y.len(), nl)?;
    check_len("query_x", query_x.len(), mul_size(n, d, "N·D")?)?;
    check_len("query_y", query_y.len(), n)?;
    let s = stride(l, d)?;
    let last = first.checked_add(n as u64).ok_or(Error::SizeOverflow { what: "prompt index" })?;
    last.checked_mul(s).ok_or(Error::SizeOverflow { what: "prompt element index" })?;
    let ks = KeyedStream::new(key, stream);
    let g = Gaussian::STANDARD;
    let (ld, d64, l64) = ((l * d) as u64, d as u64, l as u64);
    for k in 0..n {
        let base = (first + k as u64) * s;
        let x = &mut ctx_x[k * l * d..(k + 1) * l * d];
        let q = &mut query_x[k * d..(k + 1) * d];
        g.fill_keyed(&ks, base, x)?;
        g.fill_keyed(&ks, base + ld, q)?;
        x.chunks_exact_mut(d).for_each(normalise_or_e1);
        normalise_or_e1(q);
        let w_at = base + ld + d64;
        let noise_at = w_at + d64;
        // y_i = Σ_j w_j x_ij, one draw per task entry, summed in the order j = 0..D.
        let y = &mut ctx_y[k * l..(k + 1) * l];
        y.fill(0.0);
        let mut yq = 0.0;
        for j in 0..d {
            let w: f64 = g.sample_at(&ks, w_at + j as u64)?;
            for (yi, token) in y.iter_mut().zip(x.chunks_exact(d)) {
                *yi += w * token[j];
            }
            yq += w * q[j];
        }
        if tau > 0.0 {
            for (i, yi) in y.iter_mut().enumerate() {
                let e: f64 = g.sample_at(&ks, noise_at + i as u64)?;
                *yi += tau * e;
            }
            let e: f64 = g.sample_at(&ks, noise_at + l64)?;
            yq += tau * e;
        }
        query_y[k] = yq;
    }
    Ok(())
}

/// The paper's attack (its eq. (5.1), as its code runs it: `docs/PAPERS.md` P4-19): adds `mu` to
/// every coordinate of the `L` context tokens and of the query of one prompt, and `alpha` to its
/// `L` labels and, when `perturb_target`, to its query target. Buffers as in
/// [`generate_prompts`] for a single prompt.
///
/// # Errors
/// [`Error::NonFinite`] for non-finite `mu`, `alpha`.
pub fn corrupt_prompt(
    ctx_x: &mut [f64],
    ctx_y: &mut [f64],
    query_x: &mut [f64],
    query_y: &mut f64,
    mu: f64,
    alpha: f64,
    perturb_target: bool,
) -> Result<()> {
    if !mu.is_finite() {
        return Err(Error::NonFinite { arg: "mu", index: 0 });
    }
    if !alpha.is_finite() {
        return Err(Error::NonFinite { arg: "alpha", index: 0 });
    }
    ctx_x.iter_mut().chain(query_x.iter_mut()).for_each(|x| *x += mu);
    ctx_y.iter_mut().for_each(|y| *y += alpha);
    if perturb_target {
        *query_y += alpha;
    }
    Ok(())
}

/// Element index where [`random_start`] begins reading its stream: `2⁶²`, far past any
/// noise a release reads (`T·D² < 2⁶²`), so even a start drawn from the release's own
/// `(key, stream)` is independent of the release's noise.
pub const RANDOM_START_FIRST_ELEMENT: u64 = 1 << 62;

/// A public random start `Γ⁰` with i.i.d. `N(0, c0²)` entries (the paper's code uses
/// `c0 = 0.1`): entry `i` is element `2⁶² + i` of the keyed stream
/// ([`RANDOM_START_FIRST_ELEMENT`]). The release projects it with `Π_R`.
///
/// # Errors
/// [`Error::OutOfRange`] for `c0` negative or not finite.
pub fn random_start(out: &mut [f64], c0: f64, key: &NoiseKey, stream: u64) -> Result<()> {
    nonneg_finite("c0", c0)?;
    Gaussian::STANDARD.fill_keyed(
        &KeyedStream::new(key, stream),
        RANDOM_START_FIRST_ELEMENT,
        out,
    )?;
    out.iter_mut().for_each(|x| *x *= c0);
    Ok(())
}

fn check_gamma(arg: &'static str, gamma: &[f64], d: usize) -> Result<()> {
    check_len(arg, gamma.len(), mul_size(d, d, "D²")?)
}

/// The excess risk of eq. (B.1): `n_test⁻¹ Σ_k ⟨Γ̂ − Γ*, Z_k⟩²` over test features (raw,
/// from [`raw_features`](dpattn_core::noisy_head::raw_features)).
///
/// # Errors
/// [`Error::ShapeMismatch`] when a `Γ` is not `D²` long.
pub fn excess_risk(gamma_hat: &[f64], gamma_star: &[f64], test: &Features<'_>) -> Result<f64> {
    check_gamma("gamma_hat", gamma_hat, test.d())?;
    check_gamma("gamma_star", gamma_star, test.d())?;
    let sum: f64 = (0..test.n())
        .map(|k| {
            let (u, v, _) = test.get(k);
            let e = predict(gamma_hat, u, v) - predict(gamma_star, u, v);
            e * e
        })
        .sum();
    Ok(sum / test.n() as f64)
}

/// The test mean squared error `n_test⁻¹ Σ_k (⟨Γ, Z_k⟩ − y_k)²` against the true targets
/// (the test features' `t`).
///
/// # Errors
/// [`Error::ShapeMismatch`] when `gamma` is not `D²` long.
pub fn test_mse(gamma: &[f64], test: &Features<'_>) -> Result<f64> {
    check_gamma("gamma", gamma, test.d())?;
    let sum: f64 = (0..test.n())
        .map(|k| {
            let (u, v, t) = test.get(k);
            let e = predict(gamma, u, v) - t;
            e * e
        })
        .sum();
    Ok(sum / test.n() as f64)
}
