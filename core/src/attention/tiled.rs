//! The tiled online-softmax driver for one `(batch, head)` pair (FlashAttention's forward
//! loop on a CPU).
//!
//! For each block of [`BR`] query rows it keeps, per row, the running maximum `m`, the
//! running normaliser `l` and an accumulator row; for each block of [`BC`] keys it packs
//! the keys (transposed) and values, computes the score block with the microkernel, turns
//! it into unnormalised probabilities relative to the new maximum, rescales the
//! accumulator by `e^{m_old − m_new}` and adds `P · V` with the microkernel again. The
//! extra memory is the packed tiles ([`scratch_len`]), independent of the sequence
//! lengths; no `S × S` matrix exists. Noise (logits and outputs) and the row clamping of
//! the DP mechanism are hooks of this loop, driven by [`Plan`]. No privacy on its own.

use super::microkernel::{MR, NR, kernel};
use super::simd::{LANES, Real, Simd};
use crate::attention_options::{Mask, ScoreFn};
use crate::element::Element;
use crate::error::{Result, add_size, mul_size};
use crate::grid_release::GaussianGrid;
use crate::matrix_view::{MatMut, MatRef};
use crate::sampling::{ConstantTimeGaussian, FixedWordSampler, Gaussian, KeyedStream};
use crate::scratch::take_scratch;

/// Query rows per block (a multiple of [`MR`]).
pub(crate) const BR: usize = 96;
/// Keys per block (a multiple of [`NR`]).
pub(crate) const BC: usize = 64;

/// `d_v` rounded up to a whole number of microkernel columns.
fn padded(dv: usize) -> Result<usize> {
    mul_size(dv.div_ceil(NR), NR, "padded value dimension")
}

/// Scratch elements for head dimension `d` and value dimension `d_v`.
pub(crate) fn scratch_len(d: usize, dv: usize) -> Result<usize> {
    let dvp = padded(dv)?;
    let what = "attention scratch length";
    let parts = [
        mul_size(BR, d, what)?,   // packed, scaled query block
        mul_size(d, BC, what)?,   // key block, transposed
        mul_size(BC, dvp, what)?, // value block
        BR * BC,                  // scores / probabilities
        mul_size(BR, dvp, what)?, // accumulators
        2 * BR,                   // m and l
    ];
    parts.iter().try_fold(0usize, |acc, &p| add_size(acc, p, what))
}

/// A Gaussian noise draw inside attention: the stream, and `σ` per head (`heads` entries)
/// or per `(batch, head)` (`batch · heads` entries, row-major). `σ = 0` means none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NoiseDraw<'a> {
    pub(crate) stream: &'a KeyedStream,
    pub(crate) sigma: &'a [f64],
}

impl<'a> NoiseDraw<'a> {
    /// The stream and sampler of head `(b, h)`; `None` for `σ = 0` (no noise). Any other
    /// `σ` the sampler refuses is an error, never a silent noiseless release (callers
    /// check `σ` before charging, so this cannot fail after a charge).
    fn sampler(
        self,
        b: usize,
        h: usize,
        heads: usize,
    ) -> Result<Option<(&'a KeyedStream, Gaussian)>> {
        let i = if self.sigma.len() == heads { h } else { b * heads + h };
        match self.sigma[i] {
            0.0 => Ok(None),
            sigma => Ok(Some((self.stream, Gaussian::new(sigma)?))),
        }
    }
}

/// The exact release of the normalised outputs (the DP mechanism's default mode): each
/// output row is rounded to its batch element's grid and noised with exact integer noise
/// from the window of its logical element index (`grid_release`).
#[derive(Clone, Copy)]
pub(crate) struct GridDraw<'a> {
    pub(crate) stream: &'a KeyedStream,
    /// The grid of batch element `b`; `None` when the element sees no key (its output is the
    /// constant zero, released as is).
    pub(crate) grid_of: &'a (dyn Fn(usize) -> Result<Option<GaussianGrid>> + Sync),
    /// Draw the integer noise with [`ConstantTimeGaussian`] (`NoiseMode::ConstantTime`).
    pub(crate) constant_time: bool,
}

impl core::fmt::Debug for GridDraw<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GridDraw").field("stream", &self.stream).finish_non_exhaustive()
    }
}

/// Private rows are scaled to these L2 norms if longer (the DP mechanism's clamp).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowClamp {
    pub(crate) key: f64,
    pub(crate) value: f64,
}

/// Everything about a call that is the same for every head (validated by the caller).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan<'a> {
    pub(crate) s_q: usize,
    pub(crate) s_k: usize,
    pub(crate) d: usize,
    pub(crate) dv: usize,
    pub(crate) heads: usize,
    /// Query heads per key/value head (1 unless grouped-query attention).
    pub(crate) group: usize,
    pub(crate) scale: f64,
    pub(crate) score: ScoreFn,
    pub(crate) mask: Mask<'a>,
    pub(crate) logit_noise: Option<NoiseDraw<'a>>,
    pub(crate) out_noise: Option<NoiseDraw<'a>>,
    pub(crate) out_grid: Option<GridDraw<'a>>,
    pub(crate) clamp: Option<RowClamp>,
}

/// One head's operands: `out` is `s_q × d_v`, `q` `s_q × d`, `k` `s_k × d`, `v` `s_k × d_v`.
pub(crate) struct HeadJob<'o, 'i, T, O> {
    pub(crate) out: MatMut<'o, O>,
    pub(crate) q: MatRef<'i, T>,
    pub(crate) k: MatRef<'i, T>,
    pub(crate) v: MatRef<'i, T>,
    pub(crate) b: usize,
    pub(crate) h: usize,
    /// Batch element `b`'s grid when the plan has an output grid.
    pub(crate) grid: Option<GaussianGrid>,
    /// Its constant-time sampler when the draw asks for one.
    pub(crate) constant_time: Option<ConstantTimeGaussian>,
    /// The head's query row that `out`'s row 0 holds (a multiple of `BR`: the threaded
    /// driver gives each thread a block of rows; the arithmetic of a row does not depend on
    /// which block it is in).
    pub(crate) row0: usize,
}

/// The factor that clamps `row` into the L2 ball of radius `bound`, in `f64` and applied
/// before rounding to the compute precision (so `f64` rows beyond the `f32` range are
/// clamped correctly). Rows are aimed at `bound · (1 − 2^-21)`, which leaves room for the
/// rounding of every element to `f32` (relative `2^-24` each); rows already inside that
/// radius are unchanged. A row holding NaN or ±∞ gets factor 0 (it becomes the zero row).
/// The norm is computed after dividing by the largest magnitude, so it cannot overflow.
pub(crate) fn clamp_factor<T: Element>(row: &[T], bound: f64) -> f64 {
    if !row.iter().all(|x| x.is_finite()) {
        return 0.0;
    }
    let big = row.iter().fold(0.0f64, |m, x| m.max(x.to_f64().abs()));
    if big == 0.0 {
        return 1.0;
    }
    let norm =
        big * libm::sqrt(row.iter().map(|x| (x.to_f64() / big) * (x.to_f64() / big)).sum::<f64>());
    let target = bound * (1.0 - 1.0 / (1u64 << 21) as f64);
    if norm <= target { 1.0 } else { target / norm }
}

/// Attention for one head. Errors only from the noise (stream positions and `σ` validated
/// by the caller), so in practice it always succeeds.
#[inline(always)]
pub(crate) fn head<'a, S: Simd, T: Element, O: Element>(
    s: S,
    mut job: HeadJob<'_, '_, T, O>,
    plan: &Plan<'a>,
    scratch: &mut [S::E],
) -> Result<()> {
    if super::decode::applies(plan) {
        return super::decode::head(s, job, plan, scratch);
    }
    let (d, dv, dvp) = (plan.d, plan.dv, padded(plan.dv)?);
    let (qp, rest) = take_scratch(scratch, BR * d)?;
    let (ktp, rest) = take_scratch(rest, d * BC)?;
    let (vp, rest) = take_scratch(rest, BC * dvp)?;
    let (sc, rest) = take_scratch(rest, BR * BC)?;
    let (acc, rest) = take_scratch(rest, BR * dvp)?;
    let (m, rest) = take_scratch(rest, BR)?;
    let (l, _) = take_scratch(rest, BR)?;
    let scale = S::E::from_f64(plan.scale);
    let draw = |n: Option<NoiseDraw<'a>>| match n {
        Some(n) => n.sampler(job.b, job.h, plan.heads),
        None => Ok(None),
    };
    let (logit_noise, out_noise) = (draw(plan.logit_noise)?, draw(plan.out_noise)?);
    let head_index = (job.b * plan.heads + job.h) as u64;

    let end = job.row0 + job.out.rows();
    for i0 in (job.row0..end).step_by(BR) {
        let rq = BR.min(end - i0);
        let micro_rows = rq.div_ceil(MR);
        pack_queries(qp, job.q, i0, rq, micro_rows * MR, d, scale);
        m[..rq].fill(S::E::NEG_INFINITY);
        l[..rq].fill(S::E::ZERO);
        acc[..micro_rows * MR * dvp].fill(S::E::ZERO);
        let last_row = i0 + rq - 1;
        for j0 in (0..plan.s_k).step_by(BC) {
            if plan.mask.causal && j0 + plan.s_q > last_row + plan.s_k {
                break; // this and every later key block is after the causal diagonal
            }
            let bc = BC.min(plan.s_k - j0);
            let bcp = bc.div_ceil(NR) * NR;
            pack_keys(ktp, job.k, j0, bc, bcp, d, plan.clamp.map(|c| c.key));
            pack_values(vp, job.v, j0, bc, dv, dvp, plan.clamp.map(|c| c.value));
            for r in 0..micro_rows {
                for jc in (0..bcp).step_by(NR) {
                    let c = &mut sc[r * MR * BC + jc..];
                    kernel(s, d, &qp[r * MR * d..], d, &ktp[jc..], BC, c, BC, false);
                }
            }
            for i in 0..rq {
                let row = &mut sc[i * BC..i * BC + BC];
                if let Some((stream, g)) = &logit_noise {
                    let first = (head_index * plan.s_q as u64 + (i0 + i) as u64) * plan.s_k as u64
                        + j0 as u64;
                    add_noise(row, stream, g, first, bc)?;
                }
                let alpha = update_row(s, row, &mut m[i], &mut l[i], i0 + i, j0, bc, job.b, plan);
                if alpha < S::E::ONE {
                    let va = s.splat(alpha);
                    for x in acc[i * dvp..(i + 1) * dvp].chunks_exact_mut(LANES) {
                        s.store(x, s.mul(s.load(x), va));
                    }
                }
            }
            for r in 0..micro_rows {
                for jc in (0..dvp).step_by(NR) {
                    let c = &mut acc[r * MR * dvp + jc..];
                    kernel(s, bc, &sc[r * MR * BC..], BC, &vp[jc..], dvp, c, dvp, true);
                }
            }
        }
        for i in 0..rq {
            let a = &mut acc[i * dvp..i * dvp + dv];
            let li = l[i];
            for x in a.iter_mut() {
                *x = if li > S::E::ZERO { x.div(li) } else { S::E::ZERO };
            }
            let first = (head_index * plan.s_q as u64 + (i0 + i) as u64) * dv as u64;
            if let Some((stream, g)) = &out_noise {
                add_noise(a, stream, g, first, dv)?;
            }
            if let (Some(draw), Some(grid)) = (&plan.out_grid, &job.grid) {
                release_row(a, draw.stream, grid, job.constant_time.as_ref(), first)?;
            }
            for (o, &x) in job.out.row_mut(i0 + i - job.row0).iter_mut().zip(a.iter()) {
                *o = O::from_f64(x.to_f64());
            }
        }
    }
    Ok(())
}

/// The elements of a key or value row in the compute precision: as they are, or, with a
/// clamp bound, multiplied by the row's [`clamp_factor`] in `f64` and rounded once (exactly
/// 0 for a non-finite row, whose factor is 0).
fn packed_row<T: Element, E: Real>(row: &[T], clamp: Option<f64>) -> impl Iterator<Item = E> + '_ {
    let factor = clamp.map(|b| clamp_factor(row, b));
    row.iter().map(move |&x| match factor {
        None => E::of(x),
        Some(0.0) => E::ZERO,
        Some(f) => E::from_f64(x.to_f64() * f),
    })
}

/// `qp[i·d + c] = scale · q[i0 + i][c]` for `i < rq`; rows `rq..rows` are zero.
fn pack_queries<T: Element, E: Real>(
    qp: &mut [E],
    q: MatRef<'_, T>,
    i0: usize,
    rq: usize,
    rows: usize,
    d: usize,
    scale: E,
) {
    for (i, dst) in qp[..rows * d].chunks_exact_mut(d).enumerate() {
        if i < rq {
            for (o, &x) in dst.iter_mut().zip(q.row(i0 + i)) {
                *o = E::of(x) * scale;
            }
        } else {
            dst.fill(E::ZERO);
        }
    }
}

/// `ktp[c·BC + j] = f_j · k[j0 + j][c]` (transposed, `f_j` the clamp factor), columns
/// `bc..bcp` zero.
fn pack_keys<T: Element, E: Real>(
    ktp: &mut [E],
    k: MatRef<'_, T>,
    j0: usize,
    bc: usize,
    bcp: usize,
    d: usize,
    clamp: Option<f64>,
) {
    for j in 0..bcp {
        if j < bc {
            for (c, x) in packed_row(k.row(j0 + j), clamp).enumerate() {
                ktp[c * BC + j] = x;
            }
        } else {
            for c in 0..d {
                ktp[c * BC + j] = E::ZERO;
            }
        }
    }
}

/// `vp[j·dvp + c] = f_j · v[j0 + j][c]`, columns `dv..dvp` zero.
fn pack_values<T: Element, E: Real>(
    vp: &mut [E],
    v: MatRef<'_, T>,
    j0: usize,
    bc: usize,
    dv: usize,
    dvp: usize,
    clamp: Option<f64>,
) {
    for (j, dst) in vp[..bc * dvp].chunks_exact_mut(dvp).enumerate() {
        for (o, x) in dst[..dv].iter_mut().zip(packed_row(v.row(j0 + j), clamp)) {
            *o = x;
        }
        dst[dv..].fill(E::ZERO);
    }
}

/// Adds elements `first..first + n` of the draw to `row[..n]`. The noise is the `f64`
/// Gaussian of `docs/RANDOMNESS.md` (53-bit uniforms, 4 words per pair, so `|z| < 8.6`)
/// rounded once to the compute precision: the CPU and GPU kernels add the same values.
fn add_noise<E: Real>(
    row: &mut [E],
    stream: &KeyedStream,
    g: &Gaussian,
    first: u64,
    n: usize,
) -> Result<()> {
    let mut buf = [0f64; BC];
    for c0 in (0..n).step_by(BC) {
        let len = BC.min(n - c0);
        g.fill_keyed::<f64>(stream, first + c0 as u64, &mut buf[..len])?;
        for (x, &z) in row[c0..c0 + len].iter_mut().zip(&buf[..len]) {
            *x = *x + E::from_f64(z);
        }
    }
    Ok(())
}

/// Releases `row` on `grid` as elements `first, first + 1, …` of `stream` (the row is rounded
/// to `f64` exactly when the compute precision is `f64`, the exact mode's), with the integer
/// noise drawn by `constant_time` when given.
fn release_row<E: Real>(
    row: &mut [E],
    stream: &KeyedStream,
    grid: &GaussianGrid,
    constant_time: Option<&ConstantTimeGaussian>,
    first: u64,
) -> Result<()> {
    let mut buf = [0f64; BC];
    for (c, chunk) in row.chunks_mut(BC).enumerate() {
        let buf = &mut buf[..chunk.len()];
        for (b, x) in buf.iter_mut().zip(chunk.iter()) {
            *b = x.to_f64();
        }
        let at = first + (c * BC) as u64;
        match constant_time {
            Some(ct) => grid.release_keyed_constant_time(ct, stream, at, buf)?,
            None => grid.release_keyed(stream, at, buf)?,
        }
        for (x, &b) in chunk.iter_mut().zip(buf.iter()) {
            *x = E::from_f64(b);
        }
    }
    Ok(())
}

/// Sets `row[j] = fill` for every column `j < cols` that row `gi` may not see (including
/// the padding columns `j ≥ bc`); returns whether any column is visible.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mask_row<E: Real>(
    row: &mut [E],
    cols: usize,
    gi: usize,
    j0: usize,
    bc: usize,
    b: usize,
    plan: &Plan<'_>,
    fill: E,
) -> bool {
    row[bc..cols].fill(fill);
    let mut end = bc;
    if plan.mask.causal {
        // Visible keys j satisfy j + s_q ≤ gi + s_k.
        end = (gi + plan.s_k).saturating_sub(plan.s_q).saturating_add(1).saturating_sub(j0).min(bc);
        if gi + plan.s_k < plan.s_q {
            end = 0;
        }
        row[end..bc].fill(fill);
    }
    let mut any = end > 0;
    if let Some(p) = plan.mask.key_padding {
        let keep = &p[b * plan.s_k + j0..b * plan.s_k + j0 + end];
        any = false;
        for (x, &k) in row[..end].iter_mut().zip(keep) {
            if k {
                any = true;
            } else {
                *x = fill;
            }
        }
    }
    any
}

/// The online-softmax update of one score row (keys `j0..j0 + bc`) of query row `gi`:
/// turns `row` into unnormalised probabilities relative to the new running maximum,
/// updates `m` and `l`, and returns the factor the accumulator row must be scaled by.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn update_row<S: Simd>(
    s: S,
    row: &mut [S::E],
    m: &mut S::E,
    l: &mut S::E,
    gi: usize,
    j0: usize,
    bc: usize,
    b: usize,
    plan: &Plan<'_>,
) -> S::E {
    let cols = bc.div_ceil(LANES) * LANES;
    let exp = plan.score == ScoreFn::Exp;
    let neutral = if exp { S::E::NEG_INFINITY } else { S::E::ZERO };
    if !mask_row(row, cols, gi, j0, bc, b, plan, neutral) {
        row[..cols].fill(S::E::ZERO);
        return S::E::ONE;
    }
    let zero = s.splat(S::E::ZERO);
    let mut vmax = s.splat(S::E::NEG_INFINITY);
    for c in row[..cols].chunks_exact(LANES) {
        let x = s.load(c);
        vmax = s.max(vmax, if exp { x } else { s.max(x, s.sub(zero, x)) });
    }
    let m_new = m.max(s.reduce_max(vmax));
    let alpha = (*m - m_new).exp();
    let vm = s.splat(m_new);
    let mut vsum = zero;
    for c in row[..cols].chunks_exact_mut(LANES) {
        let x = s.load(c);
        let p = if exp {
            s.exp(s.sub(x, vm))
        } else {
            let a = s.max(x, s.sub(zero, x));
            s.add(s.exp(s.sub(a, vm)), s.exp(s.sub(s.sub(zero, a), vm)))
        };
        s.store(c, p);
        vsum = s.add(vsum, p);
    }
    if !exp {
        // Masked columns were neutral (0) for the maximum; they must weigh nothing.
        mask_row(row, cols, gi, j0, bc, b, plan, S::E::ZERO);
        vsum = zero;
        for c in row[..cols].chunks_exact(LANES) {
            vsum = s.add(vsum, s.load(c));
        }
    }
    *l = *l * alpha + s.reduce_sum(vsum);
    *m = m_new;
    alpha
}
