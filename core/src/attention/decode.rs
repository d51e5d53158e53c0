//! The small-query path of exact attention: heads with at most [`MAX_ROWS`] query rows (a
//! decoding step's shape, one new token against a long KV cache) skip the tiles of
//! `tiled.rs`. For each query row it streams over the keys once, in blocks of [`BK`]: the
//! block's logits as dot products, the block's softmax relative to the running maximum
//! (FlashAttention's online update), and the weighted value rows added to one accumulator
//! row. Nothing is packed and no `96 × 64` tile is touched, so a call costs what its data
//! costs: at `s_k = 16` a few hundred instructions, at long `s_k` one pass over K and V.
//!
//! Same mathematics and masks as the tiled path (bottom-right causal alignment, key
//! padding, a row that sees no key is zero), in the same compute precision; the summation
//! order differs, so the results agree to rounding, not bit for bit (both are tested
//! against the float64 reference). Used for exact softmax attention only: noise, the
//! mechanisms' clamping and grids, and the `cosh` score keep the tiled path.

use super::simd::{LANES, Real, Simd};
use super::tiled::{HeadJob, Plan, mask_row};
use crate::attention_options::ScoreFn;
use crate::element::Element;
use crate::error::Result;
use crate::scratch::take_scratch;

/// The most query rows per head this path takes.
pub(crate) const MAX_ROWS: usize = 4;
/// Keys per block (a multiple of `LANES`).
const BK: usize = 64;

/// Whether `plan` is computed here rather than by the tiles.
pub(crate) fn applies(plan: &Plan<'_>) -> bool {
    plan.s_q <= MAX_ROWS
        && plan.score == ScoreFn::Exp
        && plan.logit_noise.is_none()
        && plan.out_noise.is_none()
        && plan.out_grid.is_none()
        && plan.clamp.is_none()
}

/// `Σ_c a[c]·b[c]` over whole vectors (both zero-padded to a multiple of `LANES`).
#[inline(always)]
fn dot<S: Simd>(s: S, a: &[S::E], b: &[S::E]) -> S::E {
    let mut acc = [s.splat(S::E::ZERO); 2];
    let mut pairs = a.chunks_exact(2 * LANES).zip(b.chunks_exact(2 * LANES));
    for (x, y) in &mut pairs {
        acc[0] = s.mul_add(s.load(&x[..LANES]), s.load(&y[..LANES]), acc[0]);
        acc[1] = s.mul_add(s.load(&x[LANES..]), s.load(&y[LANES..]), acc[1]);
    }
    let tail = a.len() / (2 * LANES) * (2 * LANES);
    if tail < a.len() {
        acc[0] = s.mul_add(s.load(&a[tail..]), s.load(&b[tail..]), acc[0]);
    }
    s.reduce_sum(s.add(acc[0], acc[1]))
}

/// `row` in the compute precision, padded with zeros to `buf.len()` (a multiple of
/// `LANES`): the row itself when it needs neither conversion nor padding, else converted
/// into `buf` (whose padding stays zero).
#[inline(always)]
fn load_row<'r, T: Element, E: Real>(buf: &'r mut [E], row: &'r [T]) -> &'r [E] {
    if row.len() == buf.len()
        && let Some(same) = E::view(row)
    {
        return same;
    }
    for (o, &x) in buf.iter_mut().zip(row) {
        *o = E::of(x);
    }
    buf
}

/// Attention for one head with at most [`MAX_ROWS`] query rows ([`applies`] holds).
#[inline(always)]
pub(crate) fn head<S: Simd, T: Element, O: Element>(
    s: S,
    mut job: HeadJob<'_, '_, T, O>,
    plan: &Plan<'_>,
    scratch: &mut [S::E],
) -> Result<()> {
    let (d, dv) = (plan.d, plan.dv);
    let (dp, dvp) = (d.div_ceil(LANES) * LANES, dv.div_ceil(LANES) * LANES);
    let (q, rest) = take_scratch(scratch, dp)?;
    let (k, rest) = take_scratch(rest, dp)?;
    let (v, rest) = take_scratch(rest, dvp)?;
    let (logits, rest) = take_scratch(rest, BK)?;
    let (acc, _) = take_scratch(rest, dvp)?;
    let scale = S::E::from_f64(plan.scale);
    k[d..].fill(S::E::ZERO);
    v[dv..].fill(S::E::ZERO);
    for i in 0..job.out.rows() {
        let gi = job.row0 + i;
        q.fill(S::E::ZERO);
        for (o, &x) in q.iter_mut().zip(job.q.row(gi)) {
            *o = S::E::of(x) * scale;
        }
        acc.fill(S::E::ZERO);
        let (mut m, mut l) = (S::E::NEG_INFINITY, S::E::ZERO);
        for j0 in (0..plan.s_k).step_by(BK) {
            if plan.mask.causal && j0 + plan.s_q > gi + plan.s_k {
                break; // this and every later block is after the causal diagonal
            }
            let bc = BK.min(plan.s_k - j0);
            let cols = bc.div_ceil(LANES) * LANES;
            for (j, x) in logits[..bc].iter_mut().enumerate() {
                *x = dot(s, q, load_row(k, job.k.row(j0 + j)));
            }
            if !mask_row(logits, cols, gi, j0, bc, job.b, plan, S::E::NEG_INFINITY) {
                continue; // no visible key in this block
            }
            let mut vmax = s.splat(S::E::NEG_INFINITY);
            for c in logits[..cols].chunks_exact(LANES) {
                vmax = s.max(vmax, s.load(c));
            }
            let m_new = m.max(s.reduce_max(vmax));
            let alpha = (m - m_new).exp();
            let vm = s.splat(m_new);
            let mut vsum = s.splat(S::E::ZERO);
            for c in logits[..cols].chunks_exact_mut(LANES) {
                let p = s.exp(s.sub(s.load(c), vm));
                s.store(c, p);
                vsum = s.add(vsum, p);
            }
            l = l * alpha + s.reduce_sum(vsum);
            m = m_new;
            if alpha < S::E::ONE {
                let va = s.splat(alpha);
                for x in acc.chunks_exact_mut(LANES) {
                    s.store(x, s.mul(s.load(x), va));
                }
            }
            if dv == dvp && S::E::view(job.v.row(0)).is_some() {
                // Rows usable in place: each accumulator vector stays in a register over
                // the block's keys (one load and one multiply-add per key and vector).
                for (c, a) in acc.chunks_exact_mut(LANES).enumerate() {
                    let mut va = s.load(a);
                    for (j, &p) in logits[..bc].iter().enumerate() {
                        let row = load_row(v, job.v.row(j0 + j));
                        va = s.mul_add(s.splat(p), s.load(&row[c * LANES..]), va);
                    }
                    s.store(a, va);
                }
            } else {
                for (j, &p) in logits[..bc].iter().enumerate() {
                    if p > S::E::ZERO {
                        let row = load_row(v, job.v.row(j0 + j));
                        let vp = s.splat(p);
                        for (a, x) in acc.chunks_exact_mut(LANES).zip(row.chunks_exact(LANES)) {
                            s.store(a, s.mul_add(vp, s.load(x), s.load(a)));
                        }
                    }
                }
            }
        }
        for (o, &x) in job.out.row_mut(i).iter_mut().zip(acc.iter()) {
            let y = if l > S::E::ZERO { x.div(l) } else { S::E::ZERO };
            *o = O::from_f64(y.to_f64());
        }
    }
    Ok(())
}
