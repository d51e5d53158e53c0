//! DPCovariance (Algorithm 2 of paper 000): release `B = (1/k)·Σᵢ gᵢgᵢᵀ` with
//! `gᵢ ~ N(0, Σ)` i.i.d., by three samplers with the same output law
//! `Wishart_n(k, Σ)/k` (`docs/PAPERS.md` §0.1, §0.4).
//!
//! **Guarantee.** Exactly the law of Algorithm 2 up to floating point (the normals are
//! Box–Muller on 53-bit uniforms, the chi-squares Marsaglia–Tsang; see `sampling::Gamma`).
//! By itself this is *not* a DP release: Theorem 5.9 makes it `(ε, δ)`-DP only when `Σ` is
//! `XXᵀ` of a dataset from a domain whose sensitivity is at most `Δ(k)`; the mechanism
//! [`gaussian_sampling_attention`](super::gaussian_sampling_attention()) checks that and
//! charges the ledger. Neighbour relation: that of the caller's `X` (one feature column).
//!
//! * [`Sampler::Bartlett`] (default, P0-S3): `B = (L·T)(L·T)ᵀ/k` with `L = chol(Σ)` and
//!   the Bartlett factor `T` (`T_jj = √χ²_{k−j}`, `T_jl ~ N(0, 1)` below the diagonal,
//!   0-based `j`), so `T·Tᵀ ~ Wishart_n(k, I)`. `n(n+1)/2` random numbers and `O(n³)` work,
//!   **independent of `k`**; needs `k ≥ n`.
//! * [`Sampler::Literal`] (P0-S1, the paper's text): `gᵢ = L·zᵢ`, accumulated in `f64`;
//!   `O(n²k)`.
//! * [`Sampler::FactorFree`] (P0-S2): `gᵢ = X·zᵢ` with `zᵢ ~ N(0, I_d)`: the sampler neither
//!   factorises nor uses `A` (the mechanism still forms `A` for its domain check); `O(ndk)`,
//!   `d/n` times the cost of P0-S1. Only for data input ([`dp_covariance_from_data`]).
//!
//! **Randomness** (one keyed stream per release, `docs/RANDOMNESS.md`): problem `p` (the
//! logical head index `b·heads + h`; 0 for a single matrix) reads
//! * Bartlett: entry `T_jl` (`l ≤ j`) from the window of element `p·n² + j·n + l`
//!   (per-element windows, `docs/RANDOMNESS.md` §4): a normal is the `f64` Box–Muller cosine of the
//!   first four words, the diagonal a `ChiSquare(k − j)` read from the window;
//! * Literal: coordinate `j` of `zᵢ` is element `(p·k + i)·n + j` of the `f64`
//!   [`Gaussian`](crate::sampling::Gaussian) layout (`docs/RANDOMNESS.md` §3);
//! * FactorFree: coordinate `c` of `zᵢ` is element `(p·k + i)·q + c` of that layout, with
//!   `q = d` (plus `n` ridge coordinates when a ridge is used).

use crate::element::Element;
use crate::error::{Error, PrivateDetail, Result, mul_size};
use crate::matrix_view::{MatMut, MatRef};
use crate::sampling::ElementBits;
use crate::sampling::gamma::standard_normal;
use crate::sampling::{ChiSquare, FixedWordSampler, Gaussian, KeyedStream, MAX_WINDOW_ELEMENTS};
use crate::scratch::{check_scratch, scratch_len_sum, take_scratch};

use super::calibration::check_k_range;
use crate::linalg::{
    cholesky_in_place, finite_or_zero, lower_gram_into, lower_times_lower_in_place,
    lower_times_vector_in_place,
};

/// Samples per block of the literal and factor-free samplers (fixed, so the accumulation
/// order, and hence every bit of `B`, does not depend on the caller).
pub const SAMPLE_BLOCK: usize = 64;

/// The refusal of [`Sampler::FactorFree`] where only `Σ` is given.
const FACTOR_FREE_NEEDS_DATA: Error = Error::OutOfRange {
    name: "sampler",
    value: 2.0,
    allowed: "Bartlett or Literal for a covariance input (FactorFree needs X)",
};

/// How `B ~ Wishart_n(k, Σ)/k` is drawn (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sampler {
    /// Bartlett decomposition (`docs/PAPERS.md` P0-S3): cost independent of `k`; needs `k ≥ n`.
    #[default]
    Bartlett,
    /// The paper's literal `gᵢ = chol(Σ)·zᵢ` (`docs/PAPERS.md` P0-S1): cost linear in `k`.
    Literal,
    /// `gᵢ = X·zᵢ` (`docs/PAPERS.md` P0-S2): no factorisation; cost `O(ndk)`; data input only.
    FactorFree,
}

/// Scratch (`f64` elements) for [`dp_covariance`] with an `n × n` input and the sampler.
///
/// ```
/// use dpattn_core::gaussian_sampling_attention::{Sampler, dp_covariance_scratch_len};
/// assert_eq!(dp_covariance_scratch_len(4, Sampler::Bartlett)?, 2 * 16 + 4);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `n = 0` or [`Sampler::FactorFree`] (which needs the data;
/// see [`dp_covariance_from_data_scratch_len`]); [`Error::SizeOverflow`].
pub fn dp_covariance_scratch_len(n: usize, sampler: Sampler) -> Result<usize> {
    if n == 0 {
        return Err(Error::OutOfRange { name: "n", value: 0.0, allowed: ">= 1" });
    }
    let nn = mul_size(n, n, "n²")?;
    match sampler {
        Sampler::Bartlett => scratch_len_sum(&[nn, nn, n]),
        Sampler::Literal => scratch_len_sum(&[nn, nn, mul_size(SAMPLE_BLOCK, n, "block")?]),
        Sampler::FactorFree => Err(FACTOR_FREE_NEEDS_DATA),
    }
}

/// Algorithm 2 on a positive definite `Σ` (`n × n`, finite; only its lower triangle enters
/// the factorisation) into
/// `out` (`n × n`, exactly symmetric): the building block of the mechanism, **without** its
/// privacy check (module docs).
///
/// ```
/// use dpattn_core::{MatMut, MatRef};
/// use dpattn_core::gaussian_sampling_attention::{Sampler, dp_covariance, dp_covariance_scratch_len};
/// use dpattn_core::sampling::{KeyedStream, NoiseKey};
/// let sigma = [2.0, 0.5, 0.5, 1.0];
/// let mut b = [0.0; 4];
/// let mut scratch = vec![0.0; dp_covariance_scratch_len(2, Sampler::Bartlett)?];
/// let stream = KeyedStream::new(&NoiseKey::generate()?, 0);
/// dp_covariance(MatMut::from_row_major(&mut b, 2, 2)?, MatRef::from_row_major(&sigma, 2, 2)?,
///     1_000_000, Sampler::Bartlett, &stream, 0, &mut scratch)?;
/// // B ≈ Σ: sd of B₀₀ is √(2·2²/10⁶) ≈ 0.0028.
/// assert!((b[0] - 2.0).abs() < 0.02 && b[1] == b[2]);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`] (non-square `Σ`, wrong `out`), [`Error::PrivateNonFinite`],
/// [`Error::DomainViolation`] when `Σ` is not positive definite (a Cholesky pivot is not
/// positive, kept in the private detail; never regularised: a singular `Σ` has unbounded
/// privacy loss),
/// [`Error::OutOfRange`] (`k ∉ [1, 2^53]`, Bartlett with `k < n`, `FactorFree`),
/// [`Error::ScratchTooSmall`]; `out` is then untouched.
pub fn dp_covariance(
    out: MatMut<'_, f64>,
    sigma: MatRef<'_, f64>,
    k: u64,
    sampler: Sampler,
    stream: &KeyedStream,
    problem: u64,
    scratch: &mut [f64],
) -> Result<()> {
    let n = sigma.rows();
    let needed = dp_covariance_scratch_len(n, sampler)?;
    square("sigma", sigma.rows(), sigma.cols())?;
    out_shape(&out, n)?;
    check_k(k, n, sampler)?;
    sigma.check_finite("sigma")?;
    check_scratch(scratch.len(), needed)?;
    let (l, rest) = take_scratch(scratch, n * n)?;
    for i in 0..n {
        l[i * n..i * n + i + 1].copy_from_slice(&sigma.row(i)[..=i]);
    }
    mirror_lower(l, n);
    cholesky_in_place(l, n).map_err(|(_, pivot)| Error::DomainViolation {
        condition: "Σ positive definite (a Cholesky pivot of Σ is not positive)",
        detail: PrivateDetail::from_measured(pivot),
    })?;
    sample_from_factor(out, l, n, k, sampler, stream, problem, rest)
}

/// Checks for a run that starts from a factor: `k` range and sampler support.
pub(crate) fn check_k(k: u64, n: usize, sampler: Sampler) -> Result<()> {
    check_k_range(k)?;
    if sampler == Sampler::Bartlett && k < n as u64 {
        return Err(Error::OutOfRange {
            name: "k (the Bartlett sampler needs k >= n)",
            value: k as f64,
            allowed: "[n, 2^53]",
        });
    }
    Ok(())
}

fn square(arg: &'static str, rows: usize, cols: usize) -> Result<()> {
    if rows == 0 {
        return Err(Error::OutOfRange { name: "n", value: 0.0, allowed: ">= 1" });
    }
    if rows != cols {
        return Err(Error::ShapeMismatch {
            arg,
            axis: "cols (must equal rows)",
            expected: rows,
            got: cols,
        });
    }
    Ok(())
}

pub(crate) fn out_shape(out: &MatMut<'_, f64>, n: usize) -> Result<()> {
    if out.rows() != n {
        return Err(Error::ShapeMismatch {
            arg: "out",
            axis: "rows (n)",
            expected: n,
            got: out.rows(),
        });
    }
    if out.cols() != n {
        return Err(Error::ShapeMismatch {
            arg: "out",
            axis: "cols (n)",
            expected: n,
            got: out.cols(),
        });
    }
    Ok(())
}

fn mirror_lower(a: &mut [f64], n: usize) {
    for i in 0..n {
        for j in 0..i {
            a[j * n + i] = a[i * n + j];
        }
    }
}

/// `B = (1/k)·Σ (L zᵢ)(L zᵢ)ᵀ` for the lower Cholesky factor `l` (`n × n`), by `sampler`
/// (Bartlett or Literal), into `out`. `scratch` holds at least the scratch length minus `n²`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sample_from_factor(
    out: MatMut<'_, f64>,
    l: &[f64],
    n: usize,
    k: u64,
    sampler: Sampler,
    stream: &KeyedStream,
    problem: u64,
    scratch: &mut [f64],
) -> Result<()> {
    match sampler {
        Sampler::Bartlett => {
            let (t, rest) = take_scratch(scratch, n * n)?;
            bartlett_factor(t, n, k, stream, problem)?;
            lower_times_lower_in_place(l, t, n, &mut rest[..n]);
            lower_gram_into(t, n, k as f64, out);
            Ok(())
        }
        Sampler::Literal => {
            let (acc, z) = take_scratch(scratch, n * n)?;
            acc.fill(0.0);
            let base = element_base(problem, k, n)?;
            let mut i = 0u64;
            while i < k {
                let cnt = (k - i).min(SAMPLE_BLOCK as u64) as usize;
                let z = &mut z[..cnt * n];
                Gaussian::STANDARD.fill_keyed(stream, base + i * n as u64, z)?;
                for g in z.chunks_exact_mut(n) {
                    lower_times_vector_in_place(l, g, n);
                    add_outer_lower(acc, g, n);
                }
                i += cnt as u64;
            }
            write_symmetric(out, acc, n, k as f64);
            Ok(())
        }
        Sampler::FactorFree => Err(FACTOR_FREE_NEEDS_DATA),
    }
}

/// Checks, before anything is drawn, that `problems` problems fit in the stream: the
/// Bartlett windows `problems·n² ≤ 2^40`, the literal and factor-free element indices
/// `problems·k·q < 2^64` (`q = n` for the literal sampler, the sample dimension otherwise).
pub(crate) fn check_stream_capacity(
    sampler: Sampler,
    problems: u64,
    n: usize,
    q: usize,
    k: u64,
) -> Result<()> {
    let fits = match sampler {
        Sampler::Bartlett => (n as u64)
            .checked_mul(n as u64)
            .and_then(|nn| problems.checked_mul(nn))
            .is_some_and(|e| e <= MAX_WINDOW_ELEMENTS),
        Sampler::Literal => element_base(problems - 1, k, n).is_ok(),
        Sampler::FactorFree => element_base(problems - 1, k, q).is_ok(),
    };
    if fits {
        Ok(())
    } else {
        Err(Error::SizeOverflow {
            what: "noise elements of the release (problems · k · dim, or problems · n² ≥ 2^40 Bartlett windows)",
        })
    }
}

/// First element index `p·k·q` of problem `p`'s normals (`q` per sample), checked so that
/// every index of the problem fits in `u64`.
fn element_base(problem: u64, k: u64, q: usize) -> Result<u64> {
    let per_problem = k.checked_mul(q as u64);
    per_problem
        .and_then(|m| problem.checked_add(1)?.checked_mul(m).map(|_| problem * m))
        .ok_or(Error::SizeOverflow { what: "noise element index (problem · k · dim)" })
}

/// The Bartlett factor `T` of problem `p` into `t` (lower-triangular, `n × n`).
fn bartlett_factor(
    t: &mut [f64],
    n: usize,
    k: u64,
    stream: &KeyedStream,
    problem: u64,
) -> Result<()> {
    let nn = (n * n) as u64;
    let last = problem.checked_add(1).and_then(|p| p.checked_mul(nn));
    if last.is_none_or(|e| e > MAX_WINDOW_ELEMENTS) {
        return Err(Error::OutOfRange {
            name: "problem · n² (Bartlett window elements)",
            value: problem as f64 * nn as f64,
            allowed: "below 2^40",
        });
    }
    for j in 0..n {
        for l in 0..n {
            let e = problem * nn + (j * n + l) as u64;
            t[j * n + l] = if l < j {
                standard_normal(&mut ElementBits::new(stream, e)?)?
            } else if l == j {
                libm::sqrt(ChiSquare::new((k - j as u64) as f64)?.sample_at(stream, e)?)
            } else {
                0.0
            };
        }
    }
    Ok(())
}

fn add_outer_lower(acc: &mut [f64], g: &[f64], n: usize) {
    for i in 0..n {
        let gi = g[i];
        for (a, gj) in acc[i * n..i * n + i + 1].iter_mut().zip(g) {
            *a += gi * gj;
        }
    }
}

fn write_symmetric(mut out: MatMut<'_, f64>, acc: &[f64], n: usize, k: f64) {
    for i in 0..n {
        for j in 0..=i {
            let v = acc[i * n + j] / k;
            out.row_mut(i)[j] = v;
            out.row_mut(j)[i] = v;
        }
    }
}

/// Scratch (`f64` elements) for [`dp_covariance_from_data`] with an `n × d` input.
///
/// # Errors
/// [`Error::OutOfRange`] for a zero size; [`Error::SizeOverflow`].
pub fn dp_covariance_from_data_scratch_len(n: usize, d: usize) -> Result<usize> {
    factor_free_scratch_len(n, d, false)
}

pub(crate) fn factor_free_scratch_len(n: usize, d: usize, ridge: bool) -> Result<usize> {
    if n == 0 || d == 0 {
        return Err(Error::OutOfRange { name: "n, d", value: 0.0, allowed: ">= 1" });
    }
    let q = if ridge { d.checked_add(n).ok_or(Error::SizeOverflow { what: "d + n" })? } else { d };
    scratch_len_sum(&[
        mul_size(n, n, "n²")?,
        d,
        mul_size(SAMPLE_BLOCK, q, "block")?,
        mul_size(SAMPLE_BLOCK, n, "block")?,
    ])
}

/// Algorithm 2 on `Σ = XXᵀ` by the factor-free route `gᵢ = X·zᵢ` (`docs/PAPERS.md` P0-S2; no
/// factorisation, `A` never formed), `X` being `n × d`: the same law as [`dp_covariance`]
/// on `XXᵀ`, without a privacy check.
///
/// # Errors
/// [`Error::ShapeMismatch`], [`Error::PrivateNonFinite`], [`Error::OutOfRange`] (`k`, zero sizes),
/// [`Error::ScratchTooSmall`], [`Error::SizeOverflow`] (noise element indices past `2^64`);
/// `out` is then untouched.
pub fn dp_covariance_from_data<T: Element>(
    out: MatMut<'_, f64>,
    x: MatRef<'_, T>,
    k: u64,
    stream: &KeyedStream,
    problem: u64,
    scratch: &mut [f64],
) -> Result<()> {
    let (n, d) = (x.rows(), x.cols());
    let needed = dp_covariance_from_data_scratch_len(n, d)?;
    out_shape(&out, n)?;
    check_k(k, n, Sampler::FactorFree)?;
    x.check_finite("x")?;
    check_scratch(scratch.len(), needed)?;
    let (w, rest) = take_scratch(scratch, d)?;
    w.fill(1.0);
    factor_free(out, x, w, 0.0, k, stream, problem, rest)
}

/// The factor-free sampler on `X' = [X·diag(w), √ridge·I]` (the ridge columns only when
/// `ridge > 0`; a NaN or infinite entry reads as 0, so a column the clip factors zero,
/// `w_c = 0`, is the zero column). `scratch` holds `SAMPLE_BLOCK·(q + n) + n²` elements after `w`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn factor_free<T: Element>(
    out: MatMut<'_, f64>,
    x: MatRef<'_, T>,
    col_scale: &[f64],
    ridge: f64,
    k: u64,
    stream: &KeyedStream,
    problem: u64,
    scratch: &mut [f64],
) -> Result<()> {
    let (n, d) = (x.rows(), x.cols());
    let q = if ridge > 0.0 { d + n } else { d };
    let base = element_base(problem, k, q)?;
    let (acc, rest) = take_scratch(scratch, n * n)?;
    let (z, rest) = take_scratch(rest, SAMPLE_BLOCK * q)?;
    let g = &mut rest[..SAMPLE_BLOCK * n];
    acc.fill(0.0);
    let root_ridge = libm::sqrt(ridge);
    let mut i = 0u64;
    while i < k {
        let cnt = (k - i).min(SAMPLE_BLOCK as u64) as usize;
        Gaussian::STANDARD.fill_keyed(stream, base + i * q as u64, &mut z[..cnt * q])?;
        for (s, gs) in g.chunks_exact_mut(n).take(cnt).enumerate() {
            let zs = &z[s * q..(s + 1) * q];
            for (r, gr) in gs.iter_mut().enumerate() {
                let dot: f64 = x
                    .row(r)
                    .iter()
                    .zip(col_scale)
                    .zip(zs)
                    .map(|((v, w), z)| finite_or_zero(*v) * w * z)
                    .sum();
                *gr = if q > d { dot + root_ridge * zs[d + r] } else { dot };
            }
            add_outer_lower(acc, gs, n);
        }
        i += cnt as u64;
    }
    write_symmetric(out, acc, n, k as f64);
    Ok(())
}
