//! Prompts and their rank-one summaries `Z_k = u_k v_kᵀ` (eq. (2.5) and Algorithm 1 line 1
//! of the paper; `docs/PAPERS.md` §4.3, §4.4 and §4.8).
//!
//! **Guarantee.** [`private_features`] maps *every* prompt, whatever its content (NaN, ±∞,
//! 1e300-sized values), to `(u, v, t)` with `‖u vᵀ‖_F ≤ G` and `|t| ≤ C`. That is what the
//! sensitivity bound of Theorem 3.2 needs; no error ever depends on prompt content.
//! Sanitisation is deterministic: a NaN label becomes 0 before clipping, ±∞ labels clip to
//! ±C, and a prompt whose query or summary is not finite contributes `Z̃_k = 0` (its target
//! is still clipped; a NaN anywhere in a query or a context token counts as not finite).
//! `Π_G` keeps a relative margin of `(2D + 8)·2⁻⁵²` inside the ball so that rounding never
//! pushes the exact `‖Z̃_k‖_F` of the stored factors above `G`.

use crate::MatRef;
use crate::error::{Error, Result, mul_size};

/// `N` prompts in flat row-major buffers: contexts `ctx_x` (`N × L × D`), context labels
/// `ctx_y` (`N × L`), queries `query_x` (`N × D`) and query targets `query_y` (`N`).
///
/// ```
/// use dpattn_core::noisy_head::Prompts;
/// let (x, y, q, t) = ([1.0, 0.0, 0.0, 1.0], [2.0, -1.0], [0.6, 0.8], [0.5]);
/// let p = Prompts::new(1, 2, 2, &x, &y, &q, &t)?;
/// assert_eq!(p.context_x(0, 1), &[0.0, 1.0]);
/// assert!(Prompts::new(1, 2, 3, &x, &y, &q, &t).is_err()); // wrong D
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Prompts<'a> {
    n: usize,
    l: usize,
    d: usize,
    ctx_x: &'a [f64],
    ctx_y: &'a [f64],
    query_x: &'a [f64],
    query_y: &'a [f64],
}

pub(crate) fn check_len(arg: &'static str, got: usize, needed: usize) -> Result<()> {
    if got != needed {
        return Err(Error::ShapeMismatch { arg, axis: "len", expected: needed, got });
    }
    Ok(())
}

pub(crate) fn check_sizes(n: usize, l: usize, d: usize) -> Result<(usize, usize)> {
    for (name, v) in [("n", n), ("l", l), ("d", d)] {
        if v == 0 {
            return Err(Error::OutOfRange { name, value: 0.0, allowed: "[1, inf)" });
        }
    }
    let nl = mul_size(n, l, "N·L")?;
    Ok((nl, mul_size(nl, d, "N·L·D")?))
}

impl<'a> Prompts<'a> {
    /// Views the four buffers as `n` prompts of length `l` in dimension `d`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for a zero size, [`Error::SizeOverflow`] if `N·L·D`
    /// overflows, [`Error::ShapeMismatch`] if a buffer length is not exactly its shape's.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        n: usize,
        l: usize,
        d: usize,
        ctx_x: &'a [f64],
        ctx_y: &'a [f64],
        query_x: &'a [f64],
        query_y: &'a [f64],
    ) -> Result<Self> {
        let (nl, nld) = check_sizes(n, l, d)?;
        check_len("ctx_x", ctx_x.len(), nld)?;
        check_len("ctx_y", ctx_y.len(), nl)?;
        check_len("query_x", query_x.len(), mul_size(n, d, "N·D")?)?;
        check_len("query_y", query_y.len(), n)?;
        Ok(Self { n, l, d, ctx_x, ctx_y, query_x, query_y })
    }

    /// `N`.
    pub fn n(&self) -> usize {
        self.n
    }
    /// `L`.
    pub fn l(&self) -> usize {
        self.l
    }
    /// `D`.
    pub fn d(&self) -> usize {
        self.d
    }
    /// Context token `i` of prompt `k` (`D` values).
    ///
    /// # Panics
    /// If `k ≥ N` or `i ≥ L`.
    pub fn context_x(&self, k: usize, i: usize) -> &'a [f64] {
        assert!(k < self.n && i < self.l, "prompt {k}, token {i} out of range");
        let at = (k * self.l + i) * self.d;
        &self.ctx_x[at..at + self.d]
    }
    /// The `L` context labels of prompt `k`. Panics if `k ≥ N`.
    pub fn context_y(&self, k: usize) -> &'a [f64] {
        &self.ctx_y[k * self.l..(k + 1) * self.l]
    }
    /// The query token of prompt `k`. Panics if `k ≥ N`.
    pub fn query_x(&self, k: usize) -> &'a [f64] {
        &self.query_x[k * self.d..(k + 1) * self.d]
    }
    /// The query target of prompt `k`. Panics if `k ≥ N`.
    pub fn query_y(&self, k: usize) -> f64 {
        self.query_y[k]
    }
}

/// `(D + 1, L + 1)` of an embedding `E`, which needs at least one feature and one context
/// token besides the label row and the query column.
pub(crate) fn embedding_shape(e: &MatRef<'_, f64>) -> Result<(usize, usize)> {
    let (rows, cols) = (e.rows(), e.cols());
    if rows < 2 || cols < 2 {
        return Err(Error::ShapeMismatch {
            arg: "e",
            axis: "rows and cols",
            expected: 2,
            got: rows.min(cols),
        });
    }
    Ok((rows, cols))
}

/// Copies one prompt from the paper's embedding `E ∈ ℝ^{(D+1)×(L+1)}` (eq. 2.1; column
/// `i < L` is `(x_i; y_i)`, the last column is `(x_q; 0)`, any strides) into the flat
/// layout of [`Prompts`]: `ctx_x` (`L·D`), `ctx_y` (`L`), `query_x` (`D`). The query target
/// is not part of `E`.
///
/// # Errors
/// [`Error::ShapeMismatch`] when `E` is smaller than `2 × 2` or a buffer's length is not
/// the one `E`'s shape implies.
pub fn prompt_from_embedding(
    e: MatRef<'_, f64>,
    ctx_x: &mut [f64],
    ctx_y: &mut [f64],
    query_x: &mut [f64],
) -> Result<()> {
    let (rows, cols) = embedding_shape(&e)?;
    let (d, l) = (rows - 1, cols - 1);
    check_len("ctx_x", ctx_x.len(), d * l)?;
    check_len("ctx_y", ctx_y.len(), l)?;
    check_len("query_x", query_x.len(), d)?;
    for i in 0..l {
        for j in 0..d {
            ctx_x[i * d + j] = e.row(j)[i];
        }
        ctx_y[i] = e.row(d)[i];
    }
    for (j, q) in query_x.iter_mut().enumerate() {
        *q = e.row(j)[l];
    }
    Ok(())
}

/// Rank-one summaries of `N` prompts: `Z_k = u_k v_kᵀ` and the targets `t_k`
/// (`u`, `v`: `N × D` row-major; `t`: `N`).
#[derive(Debug, Clone, Copy)]
pub struct Features<'a> {
    pub(crate) n: usize,
    pub(crate) d: usize,
    pub(crate) u: &'a [f64],
    pub(crate) v: &'a [f64],
    pub(crate) t: &'a [f64],
}

impl<'a> Features<'a> {
    /// Views `u`, `v` (`n·d` each) and `t` (`n`) as features.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for zero sizes, [`Error::ShapeMismatch`] on lengths.
    pub fn new(n: usize, d: usize, u: &'a [f64], v: &'a [f64], t: &'a [f64]) -> Result<Self> {
        let nd = check_sizes(n, 1, d)?.1;
        check_len("u", u.len(), nd)?;
        check_len("v", v.len(), nd)?;
        check_len("t", t.len(), n)?;
        Ok(Self { n, d, u, v, t })
    }
    /// `N`.
    pub fn n(&self) -> usize {
        self.n
    }
    /// `D`.
    pub fn d(&self) -> usize {
        self.d
    }
    /// `(u_k, v_k, t_k)`. Panics if `k ≥ N`.
    pub fn get(&self, k: usize) -> (&'a [f64], &'a [f64], f64) {
        let r = k * self.d..(k + 1) * self.d;
        (&self.u[r.clone()], &self.v[r], self.t[k])
    }
}

/// Euclidean norm with scaling: finite whenever every entry is finite and the norm is
/// representable (no overflow for 1e300-sized entries, no underflow to 0 for tiny ones);
/// NaN if any entry is NaN, +∞ if any is infinite. The computed value is within a relative
/// `(len + 2)·2⁻⁵³` of the exact norm.
pub(crate) fn scaled_norm(x: &[f64]) -> f64 {
    let (m, root) = norm_parts(x);
    if m == 0.0 || !m.is_finite() { m } else { m * root }
}

/// The norm as `max|xᵢ| · √(Σ (xᵢ/max)²)` without forming the product (which may
/// overflow while both parts are finite): `(NaN, _)` if an entry is NaN, `(∞, _)` if one
/// is infinite, `(0, 0)` for the zero vector.
pub(crate) fn norm_parts(x: &[f64]) -> (f64, f64) {
    let mut m = 0.0f64;
    for v in x {
        let a = v.abs();
        if a.is_nan() {
            return (f64::NAN, f64::NAN);
        }
        if a > m {
            m = a;
        }
    }
    if m == 0.0 || m.is_infinite() {
        return (m, 0.0);
    }
    let s: f64 = x.iter().map(|v| (v / m) * (v / m)).sum();
    (m, libm::sqrt(s))
}

/// `min(max(y, −C), C)` with NaN ↦ 0.
pub(crate) fn clip_label(y: f64, c: f64) -> f64 {
    if y.is_nan() { 0.0 } else { y.clamp(-c, c) }
}

/// Relative margin kept inside a projection ball for a vector of `len` entries: the
/// computed norm errs by at most `(len + 2)·2⁻⁵³` relative and the rescaling by `2⁻⁵³` per
/// entry, so a vector scaled to `radius · margin(len)` by its computed norm has exact norm
/// `≤ radius` (and one left alone because its computed norm is `≤ radius · margin(len)`
/// too).
pub(crate) fn margin(len: usize) -> f64 {
    1.0 - (len as f64 + 8.0) * f64::EPSILON
}

/// Writes `u = x_q`, `v = L⁻¹ Σᵢ yᵢ xᵢ` for one prompt, with labels clipped to `±C` when
/// `clip` is `Some(C)`; returns `(‖u‖, ‖v‖)` (scaled norms).
fn summarise(
    p: &Prompts<'_>,
    k: usize,
    clip: Option<f64>,
    u: &mut [f64],
    v: &mut [f64],
) -> (f64, f64) {
    u.copy_from_slice(p.query_x(k));
    v.fill(0.0);
    for (i, &y) in p.context_y(k).iter().enumerate() {
        let y = match clip {
            Some(c) => clip_label(y, c),
            None => y,
        };
        for (vj, xj) in v.iter_mut().zip(p.context_x(k, i)) {
            *vj += y * xj;
        }
    }
    let inv_l = 1.0 / p.l() as f64;
    v.iter_mut().for_each(|x| *x *= inv_l);
    (scaled_norm(u), scaled_norm(v))
}

fn check_out(p: &Prompts<'_>, u: &[f64], v: &[f64], t: &[f64]) -> Result<()> {
    let nd = p.n * p.d;
    check_len("u", u.len(), nd)?;
    check_len("v", v.len(), nd)?;
    check_len("t", t.len(), p.n)
}

/// The private summaries of Algorithm 1: `u_k = x_{k,L+1}`,
/// `v_k = L⁻¹ Σᵢ clip_C(y_{k,i}) x_{k,i}`, `t_k = clip_C(y_{k,L+1})`, and when
/// `‖u_k‖‖v_k‖ > G` the factors are replaced by `u_k/‖u_k‖` and `G·v_k/‖v_k‖` (so
/// `u_k v_kᵀ = Π_G(Z_k)` in every case; the paper's `ρ_k`-scaling of `v_k` is the same
/// matrix), with the sanitisation and margin of the module doc. `u`, `v` are `N·D`, `t`
/// is `N`.
///
/// ```
/// use dpattn_core::noisy_head::{Prompts, private_features};
/// // One prompt, D = 2, L = 1: x = (1, 0), y = 10, query (0, 1), target −7.
/// let p = Prompts::new(1, 1, 2, &[1.0, 0.0], &[10.0], &[0.0, 1.0], &[-7.0])?;
/// let (mut u, mut v, mut t) = ([0.0; 2], [0.0; 2], [0.0; 1]);
/// private_features(&p, 3.0, 2.0, &mut u, &mut v, &mut t)?;
/// // y clipped to 3 → v = (3, 0), ‖Z‖ = 3 > G = 2 → v scaled to norm 2 (minus a tiny margin).
/// assert_eq!((u, t), ([0.0, 1.0], [-3.0]));
/// assert!((v[0] - 2.0).abs() < 1e-14 && v[0] <= 2.0 && v[1] == 0.0);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for `C` or `G` outside `[1e-100, 1e100]`;
/// [`Error::ShapeMismatch`] for output lengths. Never because of prompt content.
pub fn private_features(
    p: &Prompts<'_>,
    clip_c: f64,
    proj_g: f64,
    u: &mut [f64],
    v: &mut [f64],
    t: &mut [f64],
) -> Result<()> {
    summaries(p, clip_c, proj_g, false, u, v, t)
}

/// [`private_features`] with *balanced* factors, for the exact release: a summary left
/// unprojected is stored as `û = u/‖u‖`, `ṽ = ‖u‖·v` (the same matrix up to rounding), so
/// that `|û_i| ≤ 2` and `|ṽ_j| ≤ 2G` for every prompt, and every product of the step is
/// bounded by public constants (the unbalanced factors of [`private_features`] can be
/// `1e300` and `1e-300`, whose products overflow or underflow). The exact norm still obeys
/// `‖û ṽᵀ‖_F ≤ G`: with `ν_u, ν_v` the computed norms (relative error `≤ (D + 2)u`,
/// `u = 2⁻⁵³`), the branch is taken when `ν_v ≤ fl(fl(G·m)/ν_u)`, and
/// `‖û‖‖ṽ‖ ≤ G·m·(1 + u)⁴/(1 − (D + 2)u)² + O(√D·2⁻¹⁰⁷⁵) < G` since the margin
/// `m = 1 − (4D + 16)u` leaves more than `(2D + 7)u·G ≥ 10⁻¹¹⁶`.
pub(crate) fn balanced_private_features(
    p: &Prompts<'_>,
    clip_c: f64,
    proj_g: f64,
    u: &mut [f64],
    v: &mut [f64],
    t: &mut [f64],
) -> Result<()> {
    summaries(p, clip_c, proj_g, true, u, v, t)
}

fn summaries(
    p: &Prompts<'_>,
    clip_c: f64,
    proj_g: f64,
    balance: bool,
    u: &mut [f64],
    v: &mut [f64],
    t: &mut [f64],
) -> Result<()> {
    crate::error::check_radius("clip_c", clip_c)?;
    crate::error::check_radius("proj_g", proj_g)?;
    check_out(p, u, v, t)?;
    let d = p.d;
    // Both factors are measured with 2D entries' worth of rounding in the product.
    let m = margin(2 * d);
    for k in 0..p.n {
        let (uk, vk) = (&mut u[k * d..(k + 1) * d], &mut v[k * d..(k + 1) * d]);
        let (nu, nv) = summarise(p, k, Some(clip_c), uk, vk);
        t[k] = clip_label(p.query_y(k), clip_c);
        let finite = nu.is_finite() && nv.is_finite();
        if !finite || nu == 0.0 || nv == 0.0 {
            // Not finite: sanitised to Z̃_k = 0. A zero factor: Z_k = 0 already.
            uk.fill(0.0);
            vk.fill(0.0);
            continue;
        }
        // ‖u‖·‖v‖ > G·m, evaluated without forming the (possibly overflowing) product.
        if nv > proj_g * m / nu {
            // Π_G with both factors well scaled: û = u/‖u‖, ṽ = (v/‖v‖)·G·m, so
            // û ṽᵀ = Π_G(Z) up to the margin and no intermediate is subnormal.
            let gm = proj_g * m;
            uk.iter_mut().for_each(|x| *x /= nu);
            vk.iter_mut().for_each(|x| *x = *x / nv * gm);
        } else if balance {
            uk.iter_mut().for_each(|x| *x /= nu);
            vk.iter_mut().for_each(|x| *x *= nu);
        }
    }
    Ok(())
}

/// The raw (non-private) summaries: `u_k = x_{k,L+1}`, `v_k = L⁻¹ Σᵢ y_{k,i} x_{k,i}`,
/// `t_k = y_{k,L+1}`, with no clipping, projection or sanitisation. For the ridge baseline,
/// the non-private descent and test prompts.
///
/// # Errors
/// [`Error::ShapeMismatch`] for output lengths.
pub fn raw_features(p: &Prompts<'_>, u: &mut [f64], v: &mut [f64], t: &mut [f64]) -> Result<()> {
    check_out(p, u, v, t)?;
    let d = p.d;
    for k in 0..p.n {
        summarise(p, k, None, &mut u[k * d..(k + 1) * d], &mut v[k * d..(k + 1) * d]);
        t[k] = p.query_y(k);
    }
    Ok(())
}
