//! The tiled CPU attention (`dpattn::attention`) against independent oracles.
//!
//! Expected values come from the float64 [`reference_attention`](dpattn::reference_attention)
//! (softmax), from a plain float64 `cosh` reference written in this file, or from closed
//! forms; never from the kernels' own output (bitwise comparisons between two runs of the
//! kernels are only used for properties that must hold exactly: layouts, head ranges,
//! determinism). Tolerances are stated where they are used: `f32` paths within `1e-5 ·
//! max|v|` of the reference, the `f64` tiled path within `1e-12 · max|v|`.
//!
//! Tiles are 96 query rows × 64 keys with a 6 × 16 microkernel, so the shapes below are
//! chosen around those boundaries (1, 5, 63, 64, 65, 97, 150).

use crate::support;

use dpattn::attention::{
    AttentionParams, attention, attention_alloc, attention_f64, attention_heads, attention_matrix,
    attention_scratch_len, normalise_scores,
};
use dpattn::reference_attention::reference_attention_vec;
use dpattn::{
    BatchedMut, BatchedRef, Element, Error, Kernel, Layout4, Mask, MatMut, MatRef, PrivateDetail,
    Scale, ScoreFn,
};
use half::{bf16, f16};
use support::problem::{Rng, Shape, bshd, scatter, shape};

/// `f32` paths: `|got − want| ≤ 1e-5 · max|v|` (the module's documented accuracy: a few
/// `f32` ulps times the row's `Σ|p·v|`, with logits of order 1).
const TOL_F32: f64 = 1e-5;
/// The `f64` tiled path: `|got − want| ≤ 1e-12 · max|v|`.
const TOL_F64: f64 = 1e-12;
/// Written into every output buffer before a call, to prove which elements were written.
const SENTINEL: f64 = -1234.5;

// ---------------------------------------------------------------------------------------
// Deterministic inputs
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// Problems, runners and the references
// ---------------------------------------------------------------------------------------

/// Densely packed operands of one problem.
#[derive(Debug, Clone)]
struct Data<T> {
    s: Shape,
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
}

impl Data<f32> {
    /// Uniform `[-1, 1)` queries, keys and values.
    fn random(s: Shape, seed: u64) -> Self {
        let mut r = Rng(seed);
        let q = r.vec_f32(s.b * s.h * s.sq * s.d, 1.0);
        let k = r.vec_f32(s.b * s.h * s.sk * s.d, 1.0);
        let v = r.vec_f32(s.b * s.h * s.sk * s.dv, 1.0);
        Data { s, q, k, v }
    }
}

impl<T: Element> Data<T> {
    /// The same problem in element type `U` (rounded to nearest where `U` is narrower).
    fn convert<U: Element>(&self) -> Data<U> {
        let c = |x: &[T]| x.iter().map(|e| U::from_f64(e.to_f64())).collect::<Vec<U>>();
        Data { s: self.s, q: c(&self.q), k: c(&self.k), v: c(&self.v) }
    }

    fn views(&self) -> (BatchedRef<'_, T>, BatchedRef<'_, T>, BatchedRef<'_, T>) {
        (
            BatchedRef::contiguous(&self.q, self.s.q()).unwrap(),
            BatchedRef::contiguous(&self.k, self.s.k()).unwrap(),
            BatchedRef::contiguous(&self.v, self.s.v()).unwrap(),
        )
    }

    fn vmax(&self) -> f64 {
        self.v.iter().map(|x| x.to_f64().abs()).fold(0.0, f64::max)
    }
}

fn params<'a>(mask: Mask<'a>, scale: Scale, score: ScoreFn, kernel: Kernel) -> AttentionParams<'a> {
    AttentionParams { mask, scale, score, kernel }
}

/// The `f32` kernels this machine runs: `Portable`, and `Avx2Fma` where the CPU has it.
/// Where it does not, forcing it must be `Error::Unsupported`, never a silent fallback.
fn f32_kernels() -> Vec<Kernel> {
    if Kernel::Avx2Fma.is_available() {
        vec![Kernel::Portable, Kernel::Avx2Fma]
    } else {
        assert!(matches!(Kernel::Avx2Fma.resolve(), Err(Error::Unsupported { .. })));
        vec![Kernel::Portable]
    }
}

/// [`attention`] into a sentinel-filled contiguous output; the result and the output.
fn try_run<T: Element, O: Element>(
    data: &Data<T>,
    p: &AttentionParams<'_>,
) -> (dpattn::Result<()>, Vec<O>) {
    let s = data.s;
    let mut out = vec![O::from_f64(SENTINEL); s.out_len()];
    let mut scratch = vec![0f32; s.scratch()];
    let (q, k, v) = data.views();
    let r = attention(BatchedMut::contiguous(&mut out, s.o()).unwrap(), q, k, v, p, &mut scratch);
    (r, out)
}

fn run<T: Element, O: Element>(data: &Data<T>, p: &AttentionParams<'_>) -> Vec<O> {
    let (r, out) = try_run(data, p);
    r.unwrap_or_else(|e| panic!("attention failed on {:?} with {p:?}: {e}", data.s));
    out
}

fn run_f64<T: Element>(data: &Data<T>, p: &AttentionParams<'_>) -> Vec<f64> {
    let s = data.s;
    let mut out = vec![SENTINEL; s.out_len()];
    let mut scratch = vec![0f64; s.scratch()];
    let (q, k, v) = data.views();
    attention_f64(BatchedMut::contiguous(&mut out, s.o()).unwrap(), q, k, v, p, &mut scratch)
        .unwrap_or_else(|e| panic!("attention_f64 failed on {s:?}: {e}"));
    out
}

/// Plain float64 `cosh` attention: `o_i = Σ_j cosh(a_ij) v_j / Σ_j cosh(a_ij)` over the
/// visible keys, `a_ij = scale · q_i·k_j`; a row with no visible key is zero. Direct,
/// unshifted evaluation: the callers keep `|a| < 700` (asserted) so `cosh` cannot
/// overflow, and the only error is `f64` rounding (≈ 1e-14 relative here).
fn cosh_reference<T: Element>(data: &Data<T>, mask: Mask<'_>, scale: Scale) -> Vec<f64> {
    let s = data.s;
    let scale = scale.value(s.d).unwrap();
    let mut out = vec![0.0; s.out_len()];
    for bh in 0..s.b * s.h {
        let b = bh / s.h;
        for i in 0..s.sq {
            let qi = &data.q[(bh * s.sq + i) * s.d..][..s.d];
            let (mut num, mut den) = (vec![0.0f64; s.dv], 0.0f64);
            for j in 0..s.sk {
                if !mask.visible(b, i, j, s.sq, s.sk) {
                    continue;
                }
                let kj = &data.k[(bh * s.sk + j) * s.d..][..s.d];
                let a =
                    scale * qi.iter().zip(kj).map(|(x, y)| x.to_f64() * y.to_f64()).sum::<f64>();
                assert!(a.abs() < 700.0, "test data: logit {a} would overflow cosh");
                let w = a.cosh();
                den += w;
                for (n, x) in num.iter_mut().zip(&data.v[(bh * s.sk + j) * s.dv..][..s.dv]) {
                    *n += w * x.to_f64();
                }
            }
            if den > 0.0 {
                let o = &mut out[(bh * s.sq + i) * s.dv..][..s.dv];
                for (o, n) in o.iter_mut().zip(&num) {
                    *o = n / den;
                }
            }
        }
    }
    out
}

/// The float64 oracle for `score`: the crate's reference for `Exp`, [`cosh_reference`] for
/// `Cosh`.
fn reference<T: Element>(data: &Data<T>, mask: Mask<'_>, scale: Scale, score: ScoreFn) -> Vec<f64> {
    let s = data.s;
    match score {
        ScoreFn::Exp => {
            reference_attention_vec(&data.q, &data.k, &data.v, s.q(), s.sk, s.dv, mask, scale)
                .unwrap()
        }
        ScoreFn::Cosh => cosh_reference(data, mask, scale),
    }
}

/// `|got − want| ≤ tol · vmax` element-wise (and `got` finite).
fn assert_close<O: Element>(got: &[O], want: &[f64], tol: f64, vmax: f64, ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: length");
    let unit = if vmax > 0.0 { vmax } else { 1.0 };
    let (mut worst, mut at) = (0.0f64, 0usize);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        assert!(g.is_finite(), "{ctx}: element {i} is {g} (want {w})");
        let e = (g - w).abs() / unit;
        if e > worst {
            (worst, at) = (e, i);
        }
    }
    assert!(
        worst <= tol,
        "{ctx}: error {worst:e} · max|v| > {tol:e} at element {at}: got {}, want {}",
        got[at].to_f64(),
        want[at]
    );
}

/// Rows whose query sees no key (by [`Mask::visible`]) are exactly zero.
fn assert_blind_rows_zero<O: Element>(s: Shape, mask: Mask<'_>, out: &[O], ctx: &str) {
    for bh in 0..s.b * s.h {
        for i in 0..s.sq {
            if (0..s.sk).any(|j| mask.visible(bh / s.h, i, j, s.sq, s.sk)) {
                continue;
            }
            let row = &out[(bh * s.sq + i) * s.dv..][..s.dv];
            assert!(
                row.iter().all(|x| x.to_f64() == 0.0),
                "{ctx}: head {bh} row {i} sees no key but is {:?}",
                row.iter().map(|x| x.to_f64()).collect::<Vec<_>>()
            );
        }
    }
}

fn bits<O: Element>(x: &[O]) -> Vec<u64> {
    x.iter().map(|e| e.to_f64().to_bits()).collect()
}

/// Runs every `f32` kernel and the `f64` path on `data` and checks them against the
/// reference (and the blind rows against zero). Returns the outputs (widened), for callers
/// with extra checks.
fn check_all_paths(
    data: &Data<f32>,
    mask: Mask<'_>,
    scale: Scale,
    score: ScoreFn,
    ctx: &str,
) -> Vec<Vec<f64>> {
    let want = reference(data, mask, scale, score);
    let vmax = data.vmax();
    let mut outs = Vec::new();
    for kernel in f32_kernels() {
        let got: Vec<f32> = run(data, &params(mask, scale, score, kernel));
        let c = format!("{ctx} {:?} {score:?} {kernel:?}", data.s);
        assert_close(&got, &want, TOL_F32, vmax, &c);
        assert_blind_rows_zero(data.s, mask, &got, &c);
        outs.push(got.iter().map(|&x| f64::from(x)).collect());
    }
    let got = run_f64(data, &params(mask, scale, score, Kernel::Auto));
    let c = format!("{ctx} {:?} {score:?} f64", data.s);
    assert_close(&got, &want, TOL_F64, vmax, &c);
    assert_blind_rows_zero(data.s, mask, &got, &c);
    outs.push(got);
    outs
}

// ---------------------------------------------------------------------------------------
// 1. Every kernel path against the reference, shapes around the tile boundaries
// ---------------------------------------------------------------------------------------

/// Every s_q, s_k ∈ {1, 5, 63, 64, 65, 97, 150} and d, d_v ∈ {1, 7, 16, 64, 128} appears,
/// with d ≠ d_v, s_q < s_k, s_q > s_k, and batch/heads > 1.
const SHAPES: [Shape; 14] = [
    shape(1, 1, 1, 1, 1, 1),
    shape(1, 1, 1, 150, 16, 16),
    shape(1, 1, 150, 1, 7, 7),
    shape(2, 3, 5, 5, 7, 16),
    shape(1, 2, 63, 64, 16, 7),
    shape(1, 1, 64, 63, 64, 64),
    shape(2, 1, 65, 65, 1, 64),
    shape(1, 1, 97, 150, 128, 7),
    shape(1, 1, 150, 97, 7, 128),
    shape(1, 1, 97, 65, 64, 1),
    shape(1, 1, 65, 64, 128, 128),
    shape(1, 1, 150, 150, 16, 7),
    shape(1, 1, 5, 63, 1, 7),
    shape(3, 1, 97, 97, 7, 1),
];

#[test]
fn every_path_matches_the_reference_on_tile_boundary_shapes() {
    for (n, &s) in SHAPES.iter().enumerate() {
        let data = Data::random(s, 100 + n as u64);
        check_all_paths(&data, Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp, "unmasked");
    }
}

#[test]
fn other_scales_match_the_reference() {
    let data = Data::random(shape(2, 1, 65, 97, 16, 7), 7);
    for scale in [Scale::InvDim, Scale::Custom(0.8), Scale::Custom(2.5)] {
        check_all_paths(&data, Mask::NONE, scale, ScoreFn::Exp, &format!("{scale:?}"));
    }
}

#[test]
fn forced_avx2_is_available_or_unsupported() {
    let data = Data::random(shape(1, 1, 5, 5, 7, 7), 1);
    let p = params(Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp, Kernel::Avx2Fma);
    let (r, out) = try_run::<f32, f32>(&data, &p);
    if Kernel::Avx2Fma.is_available() {
        assert_eq!(Kernel::Avx2Fma.resolve(), Ok(Kernel::Avx2Fma));
        assert_eq!(Kernel::Auto.resolve(), Ok(Kernel::Avx2Fma));
        r.unwrap();
    } else {
        assert!(matches!(Kernel::Avx2Fma.resolve(), Err(Error::Unsupported { .. })));
        assert_eq!(Kernel::Auto.resolve(), Ok(Kernel::Portable));
        assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
        assert!(out.iter().all(|&x| f64::from(x) == SENTINEL));
    }
    assert_eq!(Kernel::Portable.resolve(), Ok(Kernel::Portable));
}

#[test]
fn auto_kernel_and_attention_alloc_equal_the_resolved_kernel_bitwise() {
    let data = Data::random(shape(2, 2, 97, 65, 16, 16), 8);
    let auto = params(Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp, Kernel::Auto);
    let resolved = params(auto.mask, auto.scale, auto.score, Kernel::Auto.resolve().unwrap());
    let a: Vec<f32> = run(&data, &auto);
    let b: Vec<f32> = run(&data, &resolved);
    assert_eq!(bits(&a), bits(&b));
    let mut c = vec![0f32; data.s.out_len()];
    let (q, k, v) = data.views();
    attention_alloc(BatchedMut::contiguous(&mut c, data.s.o()).unwrap(), q, k, v, &auto).unwrap();
    assert_eq!(bits(&a), bits(&c));
}

#[test]
fn f64_path_ignores_the_kernel_field() {
    let data = Data::random(shape(1, 2, 65, 64, 7, 16), 9);
    let a = run_f64(&data, &params(Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp, Kernel::Portable));
    // Forced AVX2 is accepted by the f64 path even where the CPU lacks it.
    let b = run_f64(&data, &params(Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp, Kernel::Avx2Fma));
    assert_eq!(bits(&a), bits(&b));
}

// ---------------------------------------------------------------------------------------
// 2. Masks
// ---------------------------------------------------------------------------------------

#[test]
fn causal_and_padding_masks_match_the_reference() {
    let shapes = [
        shape(2, 1, 97, 130, 16, 7), // s_q < s_k: every row sees ≥ 34 keys
        shape(1, 2, 150, 65, 7, 16), // s_q > s_k: the first 85 rows see nothing
        shape(2, 1, 65, 65, 64, 16),
        shape(1, 1, 5, 63, 1, 1),
        shape(1, 1, 63, 5, 7, 1), // 58 blind rows
    ];
    for (n, &s) in shapes.iter().enumerate() {
        let data = Data::random(s, 200 + n as u64);
        let pad = Rng(300 + n as u64).padding(s.b, s.sk);
        let masks = [
            ("causal", Mask { causal: true, key_padding: None }),
            ("padding", Mask { causal: false, key_padding: Some(&pad) }),
            ("causal+padding", Mask { causal: true, key_padding: Some(&pad) }),
        ];
        for (name, mask) in masks {
            check_all_paths(&data, mask, Scale::InvSqrtDim, ScoreFn::Exp, name);
        }
    }
}

/// The small-query path (at most 4 query rows per head, exact softmax): key counts around
/// its 64-key blocks and the vector width, head dimensions that are and are not multiples
/// of 8 and 16, s_q > s_k (blind causal rows), every mask, and the 4/5-row boundary with
/// the tiled path.
#[test]
fn few_query_rows_match_the_reference_with_every_mask() {
    let shapes = [
        shape(1, 1, 1, 1, 1, 1),
        shape(1, 2, 1, 16, 64, 64),
        shape(2, 1, 1, 7, 17, 9),
        shape(1, 1, 2, 63, 8, 8),
        shape(1, 1, 3, 64, 16, 24),
        shape(2, 2, 4, 65, 7, 128),
        shape(1, 1, 4, 129, 128, 64),
        shape(1, 1, 5, 129, 128, 64), // the first shape the tiles take
        shape(1, 1, 1, 1000, 64, 64),
        shape(1, 1, 4, 2, 16, 16), // causal: the first two rows see nothing
    ];
    for (n, &s) in shapes.iter().enumerate() {
        let data = Data::random(s, 900 + n as u64);
        let pad = Rng(950 + n as u64).padding(s.b, s.sk);
        let masks = [
            ("none", Mask::NONE),
            ("causal", Mask { causal: true, key_padding: None }),
            ("padding", Mask { causal: false, key_padding: Some(&pad) }),
            ("causal+padding", Mask { causal: true, key_padding: Some(&pad) }),
        ];
        for (name, mask) in masks {
            check_all_paths(&data, mask, Scale::InvSqrtDim, ScoreFn::Exp, name);
            check_all_paths(&data, mask, Scale::Custom(3.0), ScoreFn::Exp, name);
        }
        // Narrow inputs and outputs go through the same path.
        let want = reference(&data, Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp);
        let h: Data<bf16> = data.convert();
        let got: Vec<f16> =
            run(&h, &params(Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp, Kernel::Auto));
        let wide = reference(&h, Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp);
        assert_close(&got, &wide, 1e-3, data.vmax(), &format!("{s:?} bf16 -> f16"));
        assert!(want.len() == got.len());
    }
}

#[test]
fn causal_rows_before_the_bottom_right_diagonal_are_exactly_zero() {
    // s_q = 150 > s_k = 65: rows 0..85 see no key, row 85 sees key 0 only, the last row
    // sees every key (bottom-right alignment).
    let s = shape(1, 1, 150, 65, 16, 7);
    let data = Data::random(s, 11);
    let mask = Mask { causal: true, key_padding: None };
    for kernel in f32_kernels() {
        let out: Vec<f32> = run(&data, &params(mask, Scale::InvSqrtDim, ScoreFn::Exp, kernel));
        assert!(out[..85 * 7].iter().all(|&x| x == 0.0), "{kernel:?}: blind rows not zero");
        // Row 85 sees one key: its output is that key's value row (weight exactly 1).
        assert_eq!(&out[85 * 7..86 * 7], &data.v[..7], "{kernel:?}: row 85");
    }
    let out = run_f64(&data, &params(mask, Scale::InvSqrtDim, ScoreFn::Exp, Kernel::Auto));
    assert!(out[..85 * 7].iter().all(|&x| x == 0.0));
    // The last row equals unmasked attention of that row.
    let full = reference(&data, Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp);
    for kernel in f32_kernels() {
        let out: Vec<f32> = run(&data, &params(mask, Scale::InvSqrtDim, ScoreFn::Exp, kernel));
        assert_close(&out[149 * 7..], &full[149 * 7..], TOL_F32, data.vmax(), "last row");
    }
}

#[test]
fn a_fully_padded_batch_gives_zero_rows_and_leaves_the_others_correct() {
    let s = shape(3, 1, 70, 97, 16, 7);
    let data = Data::random(s, 12);
    let mut pad = Rng(13).padding(s.b, s.sk);
    pad[s.sk..2 * s.sk].fill(false); // batch 1: every key padded
    pad[2 * s.sk..].fill(true); // batch 2: no padding
    pad[2 * s.sk + 3] = false;
    for causal in [false, true] {
        let mask = Mask { causal, key_padding: Some(&pad) };
        for score in [ScoreFn::Exp, ScoreFn::Cosh] {
            let outs = check_all_paths(&data, mask, Scale::InvSqrtDim, score, "batch 1 padded");
            for out in outs {
                let batch1 = &out[s.h * s.sq * s.dv..2 * s.h * s.sq * s.dv];
                assert!(batch1.iter().all(|&x| x == 0.0), "{causal} {score:?}");
            }
        }
    }
}

#[test]
fn padding_a_whole_key_block_is_handled() {
    // Keys 64..128 (the second key block) all padded, and in a second mask the first block:
    // the online softmax must skip whole blocks without disturbing its running state.
    let s = shape(1, 1, 97, 150, 7, 16);
    let data = Data::random(s, 14);
    let mut second = vec![true; s.sk];
    second[64..128].fill(false);
    let mut first = vec![true; s.sk];
    first[..64].fill(false);
    for pad in [&second, &first] {
        for causal in [false, true] {
            let mask = Mask { causal, key_padding: Some(pad) };
            for score in [ScoreFn::Exp, ScoreFn::Cosh] {
                check_all_paths(&data, mask, Scale::InvSqrtDim, score, "padded block");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 3. ScoreFn::Cosh
// ---------------------------------------------------------------------------------------

#[test]
fn cosh_matches_the_f64_cosh_reference() {
    let shapes = [
        shape(2, 1, 65, 97, 16, 7),
        shape(1, 1, 150, 64, 7, 64),
        shape(1, 1, 1, 150, 64, 1),
        shape(1, 1, 97, 5, 128, 16),
    ];
    for (n, &s) in shapes.iter().enumerate() {
        let data = Data::random(s, 400 + n as u64);
        let pad = Rng(500 + n as u64).padding(s.b, s.sk);
        let masks = [
            Mask::NONE,
            Mask { causal: true, key_padding: None },
            Mask { causal: true, key_padding: Some(&pad) },
        ];
        for mask in masks {
            check_all_paths(&data, mask, Scale::InvSqrtDim, ScoreFn::Cosh, "cosh");
        }
    }
}

#[test]
fn cosh_with_exact_large_logits_stays_finite_and_accurate() {
    // Integer q, k in [-3, 3] with scale 1: every logit is an integer of magnitude ≤ 144,
    // computed exactly in f32 (fused or not), so the only f32 error is exp and the sums and
    // the 1e-5 tolerance applies unchanged. The data reaches |a| ≥ 60 (asserted).
    let s = shape(1, 1, 97, 150, 16, 16);
    let mut r = Rng(15);
    let data = Data {
        s,
        q: r.ints_f32(s.b * s.h * s.sq * s.d, 3),
        k: r.ints_f32(s.b * s.h * s.sk * s.d, 3),
        v: r.vec_f32(s.b * s.h * s.sk * s.dv, 1.0),
    };
    let max_logit = max_abs_logit(&data, 1.0);
    assert!(max_logit >= 60.0, "test data too tame: max |a| = {max_logit}");
    let pad = Rng(16).padding(s.b, s.sk);
    for mask in [Mask::NONE, Mask { causal: true, key_padding: Some(&pad) }] {
        for score in [ScoreFn::Cosh, ScoreFn::Exp] {
            check_all_paths(&data, mask, Scale::Custom(1.0), score, "integer logits");
        }
    }
}

/// `max |scale · q_i·k_j|` over all heads, in f64.
fn max_abs_logit(data: &Data<f32>, scale: f64) -> f64 {
    let s = data.s;
    let mut m = 0.0f64;
    for bh in 0..s.b * s.h {
        for i in 0..s.sq {
            for j in 0..s.sk {
                let qi = &data.q[(bh * s.sq + i) * s.d..][..s.d];
                let kj = &data.k[(bh * s.sk + j) * s.d..][..s.d];
                let a: f64 = qi.iter().zip(kj).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
                m = m.max((a * scale).abs());
            }
        }
    }
    m
}

#[test]
fn cosh_with_real_valued_logits_near_60_stays_within_the_logit_rounding_bound() {
    // Random real q scaled so that |a| reaches 60. Now the logits themselves carry f32
    // rounding: |Δa| ≤ (d + 2) · 2⁻²⁴ · max Σ_c |scale · q_c k_c| (dot-product bound plus
    // the rounding of scale·q), and a perturbation δ of the logits moves a convex
    // combination of value rows by at most (e^{2δ} − 1) · max|v| ≈ 2δ · max|v|. Tolerance:
    // 1e-5 · max|v| + 2.2 · Δa · max|v|.
    let s = shape(1, 1, 97, 150, 16, 16);
    let mut data = Data::random(s, 17);
    let base = max_abs_logit(&data, 1.0 / 4.0);
    let factor = 60.0 / base;
    data.q.iter_mut().for_each(|x| *x = (f64::from(*x) * factor) as f32);
    let max_logit = max_abs_logit(&data, 1.0 / 4.0);
    assert!((59.0..=61.0).contains(&max_logit), "{max_logit}");
    let abs_dot_max = {
        let mut m = 0.0f64;
        for i in 0..s.sq {
            for j in 0..s.sk {
                let qi = &data.q[i * s.d..][..s.d];
                let kj = &data.k[j * s.d..][..s.d];
                let a: f64 =
                    qi.iter().zip(kj).map(|(x, y)| (f64::from(*x) * f64::from(*y)).abs()).sum();
                m = m.max(a / 4.0);
            }
        }
        m
    };
    let da = (s.d + 2) as f64 * 2f64.powi(-24) * abs_dot_max;
    let tol = TOL_F32 + 2.2 * da;
    for score in [ScoreFn::Cosh, ScoreFn::Exp] {
        let want = reference(&data, Mask::NONE, Scale::InvSqrtDim, score);
        for kernel in f32_kernels() {
            let got: Vec<f32> = run(&data, &params(Mask::NONE, Scale::InvSqrtDim, score, kernel));
            assert_close(&got, &want, tol, data.vmax(), &format!("{score:?} {kernel:?}"));
        }
        let got = run_f64(&data, &params(Mask::NONE, Scale::InvSqrtDim, score, Kernel::Auto));
        assert_close(&got, &want, TOL_F64, data.vmax(), &format!("{score:?} f64"));
    }
}

#[test]
fn cosh_is_even_in_the_logits() {
    // cosh(−a) = cosh(a): negating every query leaves the output unchanged. Negation is
    // exact in every rounding step, so the kernels must agree bitwise.
    let data = Data::random(shape(1, 2, 65, 97, 16, 16), 18);
    let mut neg = data.clone();
    neg.q.iter_mut().for_each(|x| *x = -*x);
    for kernel in f32_kernels() {
        let p = params(Mask::NONE, Scale::InvSqrtDim, ScoreFn::Cosh, kernel);
        let a: Vec<f32> = run(&data, &p);
        let b: Vec<f32> = run(&neg, &p);
        assert_eq!(bits(&a), bits(&b), "{kernel:?}");
    }
}

// ---------------------------------------------------------------------------------------
// 4. Element types
// ---------------------------------------------------------------------------------------

/// Runs `data` (any input type) into f32, f64 and bf16 outputs on every kernel, against
/// the reference computed on the same (widened) inputs.
fn check_dtypes<T: Element>(data: &Data<T>, mask: Mask<'_>, score: ScoreFn) {
    let want = reference(data, mask, Scale::InvSqrtDim, score);
    let vmax = data.vmax();
    let ctx = format!("{} in, {score:?}", T::NAME);
    for kernel in f32_kernels() {
        let p = params(mask, Scale::InvSqrtDim, score, kernel);
        let o32: Vec<f32> = run(data, &p);
        assert_close(&o32, &want, TOL_F32, vmax, &format!("{ctx} f32 out {kernel:?}"));
        // f64 output of the f32 computation: the same f32 values, widened exactly.
        let o64: Vec<f64> = run(data, &p);
        assert_close(&o64, &want, TOL_F32, vmax, &format!("{ctx} f64 out {kernel:?}"));
        assert_eq!(bits(&o32), bits(&o64), "{ctx} {kernel:?}: f64 output is not the f32 one");
        // bf16 output: 8 significant bits, relative 1e-2 (2⁻⁸ ≈ 3.9e-3 rounding plus the
        // f32 error), plus the absolute f32 tolerance for values near zero.
        let ob: Vec<bf16> = run(data, &p);
        for (i, (g, w)) in ob.iter().zip(&want).enumerate() {
            let g = g.to_f64();
            assert!(
                (g - w).abs() <= 1e-2 * w.abs() + TOL_F32 * vmax,
                "{ctx} bf16 out {kernel:?}: element {i} got {g} want {w}"
            );
        }
        assert_blind_rows_zero(data.s, mask, &ob, &ctx);
    }
    let o = run_f64(data, &params(mask, Scale::InvSqrtDim, score, Kernel::Auto));
    assert_close(&o, &want, TOL_F64, vmax, &format!("{ctx} f64 path"));
}

#[test]
fn f16_bf16_and_f64_inputs_with_f32_f64_bf16_outputs() {
    let base = Data::random(shape(2, 1, 65, 70, 16, 7), 19);
    let pad = Rng(20).padding(2, 70);
    let mask = Mask { causal: true, key_padding: Some(&pad) };
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        check_dtypes(&base.convert::<f16>(), mask, score);
        check_dtypes(&base.convert::<bf16>(), mask, score);
        check_dtypes(&base, Mask::NONE, score);
    }
    // f64 inputs are rounded to f32 once by the f32 kernels: the reference on the f64 data
    // differs from the one on the rounded data by ~1e-7 · max|v|, inside the tolerance.
    let mut r = Rng(21);
    let wide = Data {
        s: base.s,
        q: (0..base.q.len()).map(|_| r.uniform()).collect::<Vec<f64>>(),
        k: (0..base.k.len()).map(|_| r.uniform()).collect(),
        v: (0..base.v.len()).map(|_| r.uniform()).collect(),
    };
    check_dtypes(&wide, mask, ScoreFn::Exp);
}

#[test]
fn bf16_output_is_the_rounded_f32_output() {
    // Round-to-nearest of the f32 result, not a truncation or a double rounding.
    let data = Data::random(shape(1, 2, 64, 65, 7, 16), 22);
    for kernel in f32_kernels() {
        let p = params(Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp, kernel);
        let o32: Vec<f32> = run(&data, &p);
        let ob: Vec<bf16> = run(&data, &p);
        let oh: Vec<f16> = run(&data, &p);
        for i in 0..o32.len() {
            assert_eq!(ob[i].to_bits(), bf16::from_f32(o32[i]).to_bits(), "{kernel:?} {i}");
            assert_eq!(oh[i].to_bits(), f16::from_f32(o32[i]).to_bits(), "{kernel:?} {i}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// 5. Strided layouts
// ---------------------------------------------------------------------------------------

/// A layout for a logical `[b, h, s, d]` shape.
type MakeLayout = fn([usize; 4]) -> Layout4;

/// Row-major with `pad` unused elements after every row.
fn padded_rows(shape: [usize; 4], pad: usize) -> Layout4 {
    let [_, h, s, d] = shape;
    let rs = d + pad;
    Layout4::new(shape, [h * s * rs, s * rs, rs, 1]).unwrap()
}

/// The logical elements of a `layout` buffer, contiguous; and whether every other element
/// still equals `fill` (bitwise).
fn gather(buf: &[f32], layout: &Layout4, fill: f32) -> (Vec<f32>, bool) {
    let [b, h, s, d] = layout.shape();
    let mut used = vec![false; buf.len()];
    let mut x = Vec::with_capacity(layout.numel());
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                for c in 0..d {
                    let o = layout.offset(bi, hi, si, c);
                    used[o] = true;
                    x.push(buf[o]);
                }
            }
        }
    }
    let untouched = buf.iter().zip(&used).all(|(v, &u)| u || v.to_bits() == fill.to_bits());
    (x, untouched)
}

#[test]
fn strided_layouts_give_bitwise_the_contiguous_result() {
    let s = shape(2, 2, 65, 70, 16, 7);
    let data = Data::random(s, 23);
    let pad = Rng(24).padding(s.b, s.sk);
    let mask = Mask { causal: true, key_padding: Some(&pad) };
    let out_fill = SENTINEL as f32;
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        for kernel in f32_kernels() {
            let p = params(mask, Scale::InvSqrtDim, score, kernel);
            let want: Vec<f32> = run(&data, &p);
            let layouts: [(&str, MakeLayout); 2] =
                [("bshd", bshd), ("padded rows", |sh| padded_rows(sh, 5))];
            for (name, layout) in layouts {
                let (lq, lk, lv, lo) = (layout(s.q()), layout(s.k()), layout(s.v()), layout(s.o()));
                // Unused input elements are NaN: reading or validating them would show.
                let (bq, bk, bv) = (
                    scatter(&data.q, &lq, f32::NAN),
                    scatter(&data.k, &lk, f32::NAN),
                    scatter(&data.v, &lv, f32::NAN),
                );
                let mut bo = vec![out_fill; lo.required_len()];
                let mut scratch = vec![0f32; s.scratch()];
                attention(
                    BatchedMut::new(&mut bo, lo).unwrap(),
                    BatchedRef::new(&bq, lq).unwrap(),
                    BatchedRef::new(&bk, lk).unwrap(),
                    BatchedRef::new(&bv, lv).unwrap(),
                    &p,
                    &mut scratch,
                )
                .unwrap();
                let (got, untouched) = gather(&bo, &lo, out_fill);
                assert_eq!(bits(&got), bits(&want), "{name} {score:?} {kernel:?}");
                assert!(untouched, "{name} {score:?} {kernel:?}: wrote outside the output view");
            }
        }
    }
}

#[test]
fn broadcast_key_value_heads_equal_repeated_heads() {
    // Grouped-query attention: one K/V head read by three query heads through a head stride
    // of 0 equals the same K/V copied into every head, bitwise.
    let s = shape(2, 3, 65, 70, 16, 7);
    let data = Data::random(s, 25);
    // `rep` has batch b's head 0 of k and v copied into every head of batch b.
    let mut rep = data.clone();
    for b in 0..s.b {
        for h in 0..s.h {
            let (kd, vd) = (s.sk * s.d, s.sk * s.dv);
            rep.k[(b * s.h + h) * kd..][..kd].copy_from_slice(&data.k[b * s.h * kd..][..kd]);
            rep.v[(b * s.h + h) * vd..][..vd].copy_from_slice(&data.v[b * s.h * vd..][..vd]);
        }
    }
    let lk = Layout4::new(s.k(), [s.h * s.sk * s.d, 0, s.d, 1]).unwrap();
    let lv = Layout4::new(s.v(), [s.h * s.sk * s.dv, 0, s.dv, 1]).unwrap();
    for kernel in f32_kernels() {
        let p = params(Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp, kernel);
        let want: Vec<f32> = run(&rep, &p);
        let mut out = vec![0f32; s.out_len()];
        let mut scratch = vec![0f32; s.scratch()];
        attention(
            BatchedMut::contiguous(&mut out, s.o()).unwrap(),
            BatchedRef::contiguous(&data.q, s.q()).unwrap(),
            BatchedRef::new(&data.k, lk).unwrap(),
            BatchedRef::new(&data.v, lv).unwrap(),
            &p,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(bits(&out), bits(&want), "{kernel:?}");
    }
}

// ---------------------------------------------------------------------------------------
// 6. Paths agree; head ranges; determinism; scratch contents
// ---------------------------------------------------------------------------------------

#[test]
fn portable_and_avx2_agree() {
    if !Kernel::Avx2Fma.is_available() {
        assert!(matches!(Kernel::Avx2Fma.resolve(), Err(Error::Unsupported { .. })));
        return;
    }
    for (n, &s) in [shape(1, 2, 97, 100, 16, 16), shape(1, 1, 150, 65, 7, 64)].iter().enumerate() {
        let data = Data::random(s, 26 + n as u64);
        let pad = Rng(27).padding(s.b, s.sk);
        for mask in [Mask::NONE, Mask { causal: true, key_padding: Some(&pad) }] {
            for score in [ScoreFn::Exp, ScoreFn::Cosh] {
                let a: Vec<f32> =
                    run(&data, &params(mask, Scale::InvSqrtDim, score, Kernel::Portable));
                let b: Vec<f32> =
                    run(&data, &params(mask, Scale::InvSqrtDim, score, Kernel::Avx2Fma));
                let a64: Vec<f64> = a.iter().map(|&x| f64::from(x)).collect();
                assert_close(&b, &a64, TOL_F32, data.vmax(), &format!("{s:?} {score:?}"));
            }
        }
    }
}

#[test]
fn head_ranges_reproduce_the_whole_call_bitwise() {
    // 2 · 3 = 6 flattened heads split unevenly, across the batch boundary.
    let s = shape(2, 3, 97, 40, 16, 7);
    let data = Data::random(s, 28);
    let pad = Rng(29).padding(s.b, s.sk);
    let mask = Mask { causal: true, key_padding: Some(&pad) };
    let per_head = s.sq * s.dv;
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        for kernel in f32_kernels() {
            let p = params(mask, Scale::InvSqrtDim, score, kernel);
            let whole: Vec<f32> = run(&data, &p);
            for splits in [&[0usize, 1, 4, 6][..], &[0, 5, 6], &[0, 2, 3, 6], &[0, 6]] {
                let mut out = vec![SENTINEL as f32; s.out_len()];
                let (q, k, v) = data.views();
                for w in splits.windows(2) {
                    let (first, n) = (w[0], w[1] - w[0]);
                    let chunk = &mut out[first * per_head..(first + n) * per_head];
                    let o = BatchedMut::contiguous(chunk, [1, n, s.sq, s.dv]).unwrap();
                    let mut scratch = vec![0f32; s.scratch()];
                    attention_heads(o, q, k, v, &p, first, &mut scratch).unwrap();
                }
                assert_eq!(bits(&out), bits(&whole), "{splits:?} {score:?} {kernel:?}");
            }
        }
    }
}

#[test]
fn repeated_calls_are_bitwise_identical_and_ignore_scratch_contents() {
    let s = shape(1, 2, 97, 70, 16, 16);
    let data = Data::random(s, 30);
    let mask = Mask { causal: true, key_padding: None };
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        for kernel in f32_kernels() {
            let p = params(mask, Scale::InvSqrtDim, score, kernel);
            let a: Vec<f32> = run(&data, &p);
            let b: Vec<f32> = run(&data, &p);
            assert_eq!(bits(&a), bits(&b), "{score:?} {kernel:?}");
            // Garbage (NaN) scratch, one element longer than needed: same result.
            let mut out = vec![0f32; s.out_len()];
            let mut scratch = vec![f32::NAN; s.scratch() + 1];
            let (q, k, v) = data.views();
            attention(BatchedMut::contiguous(&mut out, s.o()).unwrap(), q, k, v, &p, &mut scratch)
                .unwrap();
            assert_eq!(bits(&a), bits(&out), "{score:?} {kernel:?}: scratch contents leak");
        }
        let p = params(mask, Scale::InvSqrtDim, score, Kernel::Auto);
        let a = run_f64(&data, &p);
        let mut out = vec![0f64; s.out_len()];
        let mut scratch = vec![f64::NAN; s.scratch()];
        let (q, k, v) = data.views();
        attention_f64(BatchedMut::contiguous(&mut out, s.o()).unwrap(), q, k, v, &p, &mut scratch)
            .unwrap();
        assert_eq!(bits(&a), bits(&out), "{score:?} f64");
    }
}

#[test]
fn scratch_length_is_independent_of_the_sequences() {
    assert_eq!(attention_scratch_len(64, 64).unwrap(), 26_816);
    assert!(matches!(attention_scratch_len(usize::MAX, 1), Err(Error::SizeOverflow { .. })));
    // The same scratch length serves 1 or 150 keys.
    for sk in [1, 150] {
        let data = Data::random(shape(1, 1, 5, sk, 7, 16), 31);
        check_all_paths(&data, Mask::NONE, Scale::InvSqrtDim, ScoreFn::Exp, "scratch");
    }
}

// ---------------------------------------------------------------------------------------
// 7. attention_matrix and normalise_scores
// ---------------------------------------------------------------------------------------

/// Plain f64 normalisation of one logit row; `None` = masked.
fn normalised_row(a: &[Option<f64>], score: ScoreFn) -> Vec<f64> {
    let f = |x: f64| match score {
        ScoreFn::Exp => x.exp(),
        ScoreFn::Cosh => x.cosh(),
    };
    let den: f64 = a.iter().flatten().map(|&x| f(x)).sum();
    a.iter().map(|x| x.map_or(0.0, |x| if den > 0.0 { f(x) / den } else { 0.0 })).collect()
}

#[test]
fn attention_matrix_matches_the_f64_formula() {
    let (sq, sk, d) = (9, 70, 7);
    let mut r = Rng(32);
    let q = r.vec_f32(sq * d, 1.5);
    let k = r.vec_f32(sk * d, 1.5);
    let mut pad = r.padding(1, sk);
    pad[sk - 1] = true;
    let scale = Scale::Custom(0.7);
    let masks = [
        Mask::NONE,
        Mask { causal: true, key_padding: None },
        Mask { causal: true, key_padding: Some(&pad) },
    ];
    for mask in masks {
        for score in [ScoreFn::Exp, ScoreFn::Cosh] {
            let mut p = vec![SENTINEL; sq * sk];
            attention_matrix(
                MatMut::from_row_major(&mut p, sq, sk).unwrap(),
                MatRef::from_row_major(&q, sq, d).unwrap(),
                MatRef::from_row_major(&k, sk, d).unwrap(),
                mask,
                scale,
                score,
            )
            .unwrap();
            for i in 0..sq {
                let logits: Vec<Option<f64>> = (0..sk)
                    .map(|j| {
                        mask.visible(0, i, j, sq, sk).then(|| {
                            0.7 * (0..d)
                                .map(|c| f64::from(q[i * d + c]) * f64::from(k[j * d + c]))
                                .sum::<f64>()
                        })
                    })
                    .collect();
                let want = normalised_row(&logits, score);
                let row = &p[i * sk..(i + 1) * sk];
                // Relative 1e-12 (f64 rounding of logits of order 1 and a 70-term sum).
                for j in 0..sk {
                    assert!(
                        (row[j] - want[j]).abs() <= 1e-12 * want[j].abs().max(1e-300) + 1e-17,
                        "{mask:?} {score:?} ({i}, {j}): {} vs {}",
                        row[j],
                        want[j]
                    );
                    if logits[j].is_none() {
                        assert_eq!(row[j], 0.0, "masked entry ({i}, {j})");
                    }
                }
                let sum: f64 = row.iter().sum();
                assert!((sum - 1.0).abs() <= 1e-13, "row {i} sums to {sum}");
            }
        }
    }
}

#[test]
fn attention_matrix_blind_rows_symmetry_and_huge_logits() {
    // s_q = 4 > s_k = 2 with the causal mask: rows 0 and 1 see nothing and are zero.
    let q = [1.0f64, 2.0, -1.0, 0.5];
    let k = [0.3f64, -0.7];
    let mut p = [SENTINEL; 8];
    attention_matrix(
        MatMut::from_row_major(&mut p, 4, 2).unwrap(),
        MatRef::from_row_major(&q, 4, 1).unwrap(),
        MatRef::from_row_major(&k, 2, 1).unwrap(),
        Mask { causal: true, key_padding: None },
        Scale::Custom(1.0),
        ScoreFn::Exp,
    )
    .unwrap();
    assert_eq!(&p[..4], &[0.0; 4]);
    assert_eq!(&p[4..6], &[1.0, 0.0]); // row 2 sees key 0 only
    // Row 3: logits 0.15, -0.35.
    let w = 1.0 / (1.0 + (-0.5f64).exp());
    assert!((p[6] - w).abs() < 1e-15 && (p[7] - (1.0 - w)).abs() < 1e-15, "{p:?}");

    // All keys padded: every row zero.
    let none = [false, false];
    let mut z = [SENTINEL; 8];
    attention_matrix(
        MatMut::from_row_major(&mut z, 4, 2).unwrap(),
        MatRef::from_row_major(&q, 4, 1).unwrap(),
        MatRef::from_row_major(&k, 2, 1).unwrap(),
        Mask { causal: false, key_padding: Some(&none) },
        Scale::Custom(1.0),
        ScoreFn::Cosh,
    )
    .unwrap();
    assert_eq!(z, [0.0; 8]);

    // cosh even: negated queries give the same matrix, bitwise.
    let mut r = Rng(33);
    let qa = r.vec_f32(5 * 4, 2.0);
    let qn: Vec<f32> = qa.iter().map(|x| -x).collect();
    let kk = r.vec_f32(6 * 4, 2.0);
    let m = |q: &[f32]| {
        let mut p = vec![0.0; 30];
        attention_matrix(
            MatMut::from_row_major(&mut p, 5, 6).unwrap(),
            MatRef::from_row_major(q, 5, 4).unwrap(),
            MatRef::from_row_major(&kk, 6, 4).unwrap(),
            Mask::NONE,
            Scale::InvSqrtDim,
            ScoreFn::Cosh,
        )
        .unwrap();
        p
    };
    assert_eq!(bits(&m(&qa)), bits(&m(&qn)));

    // Logits 1e5, 9.9e4, −1e5: exp gives [1, 0, 0] (e^{-1000} underflows), cosh gives
    // [1/2, 0, 1/2]; nothing overflows.
    let q = [1000.0f64];
    let k = [100.0f64, 99.0, -100.0];
    for (score, want) in [(ScoreFn::Exp, [1.0, 0.0, 0.0]), (ScoreFn::Cosh, [0.5, 0.0, 0.5])] {
        let mut p = [SENTINEL; 3];
        attention_matrix(
            MatMut::from_row_major(&mut p, 1, 3).unwrap(),
            MatRef::from_row_major(&q, 1, 1).unwrap(),
            MatRef::from_row_major(&k, 3, 1).unwrap(),
            Mask::NONE,
            Scale::Custom(1.0),
            score,
        )
        .unwrap();
        assert_eq!(p, want, "{score:?}");
    }
}

#[test]
fn normalise_scores_closed_forms() {
    let e1 = (-1.0f64).exp();
    let ni = f64::NEG_INFINITY;
    // Row 0: huge logits differing by 1; row 1: all masked; row 2: ±f64::MAX.
    let mut a = [1e5, 1e5 - 1.0, ni, ni, ni, ni, f64::MAX, -f64::MAX, 0.0];
    normalise_scores(MatMut::from_row_major(&mut a, 3, 3).unwrap(), ScoreFn::Exp).unwrap();
    let want = [1.0 / (1.0 + e1), e1 / (1.0 + e1), 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0];
    for (g, w) in a.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-15, "{a:?}");
    }
    let mut c = [1e5, -1e5, 0.0, ni, ni, ni, f64::MAX, -f64::MAX, 3.0];
    normalise_scores(MatMut::from_row_major(&mut c, 3, 3).unwrap(), ScoreFn::Cosh).unwrap();
    // cosh: 1e5 and −1e5 weigh the same; cosh(0)/cosh(1e5) underflows to 0.
    assert_eq!(c, [0.5, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0]);
    // Small logits against the plain formula.
    let logits = [0.3, -1.2, 2.0, -0.1];
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        let mut x = logits;
        normalise_scores(MatMut::from_row_major(&mut x, 1, 4).unwrap(), score).unwrap();
        let want = normalised_row(&logits.map(Some), score);
        for (g, w) in x.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-15, "{score:?}: {x:?} vs {want:?}");
        }
        assert!((x.iter().sum::<f64>() - 1.0).abs() <= 1e-15);
    }
}

#[test]
fn normalise_scores_rejects_nan_and_positive_infinity_untouched() {
    for bad in [f64::NAN, f64::INFINITY] {
        for score in [ScoreFn::Exp, ScoreFn::Cosh] {
            let orig = [0.5, 1.0, -2.0, 3.0, 0.25, bad, 1.0, 2.0];
            let mut a = orig;
            // Row 0 is valid, so a routine that normalised row by row would already have
            // written it.
            let r = normalise_scores(MatMut::from_row_major(&mut a, 2, 4).unwrap(), score);
            let e = r.unwrap_err();
            assert!(matches!(e, Error::PrivateNonFinite { arg: "scores", .. }), "{e}");
            assert_eq!(e.private_detail().and_then(|d| d.index()), Some(5), "{bad} {score:?}");
            assert_eq!(bits(&a), bits(&orig), "{bad} {score:?}: matrix modified");
        }
    }
}

#[test]
fn attention_matrix_errors_leave_the_output_untouched() {
    let q = [1.0f32, 2.0, 3.0, 4.0];
    let k = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
    let call = |q: &[f32],
                qr: usize,
                k: &[f32],
                kr: usize,
                d: usize,
                mask: Mask<'_>,
                scale: Scale,
                (or, oc): (usize, usize)| {
        let mut p = vec![SENTINEL; or * oc];
        let r = attention_matrix(
            MatMut::from_row_major(&mut p, or, oc).unwrap(),
            MatRef::from_row_major(q, qr, d).unwrap(),
            MatRef::from_row_major(k, kr, k.len() / kr.max(1)).unwrap(),
            mask,
            scale,
            ScoreFn::Exp,
        );
        if r.is_err() {
            assert!(p.iter().all(|&x| x == SENTINEL), "{r:?}: output written");
        }
        r
    };
    let one = Scale::Custom(1.0);
    assert!(call(&q, 2, &k, 3, 2, Mask::NONE, one, (2, 3)).is_ok());
    assert_eq!(
        call(&q, 2, &k, 2, 2, Mask::NONE, one, (2, 3)),
        Err(Error::ShapeMismatch { arg: "k", axis: "dim", expected: 2, got: 3 })
    );
    assert!(matches!(
        call(&q, 2, &k, 3, 2, Mask::NONE, one, (3, 3)),
        Err(Error::ShapeMismatch { arg: "out", .. })
    ));
    assert!(matches!(
        call(&q, 2, &k, 3, 2, Mask::NONE, one, (2, 2)),
        Err(Error::ShapeMismatch { arg: "out", .. })
    ));
    let pad = [true; 2];
    assert!(matches!(
        call(&q, 2, &k, 3, 2, Mask { causal: false, key_padding: Some(&pad) }, one, (2, 3)),
        Err(Error::ShapeMismatch { arg: "key_padding", expected: 3, got: 2, .. })
    ));
    assert!(matches!(
        call(&q, 2, &k, 3, 2, Mask::NONE, Scale::Custom(0.0), (2, 3)),
        Err(Error::OutOfRange { name: "scale", .. })
    ));
    assert_eq!(
        call(&[], 0, &k, 3, 2, Mask::NONE, one, (0, 3)),
        Err(Error::OutOfRange { name: "s_q", value: 0.0, allowed: ">= 1" })
    );
    let qn = [1.0f32, f32::NAN, 3.0, 4.0];
    assert_eq!(
        call(&qn, 2, &k, 3, 2, Mask::NONE, one, (2, 3)),
        Err(Error::PrivateNonFinite { arg: "q", detail: PrivateDetail::from_index(1) })
    );
    let kn = [1.0f32, 0.0, 0.0, 1.0, f32::INFINITY, 1.0];
    assert_eq!(
        call(&q, 2, &kn, 3, 2, Mask::NONE, one, (2, 3)),
        Err(Error::PrivateNonFinite { arg: "k", detail: PrivateDetail::from_index(4) })
    );
    // Logits beyond f64 range: refused, not turned into NaN.
    let mut p = [SENTINEL; 1];
    let big = [1e160f64];
    let r = attention_matrix(
        MatMut::from_row_major(&mut p, 1, 1).unwrap(),
        MatRef::from_row_major(&big, 1, 1).unwrap(),
        MatRef::from_row_major(&big, 1, 1).unwrap(),
        Mask::NONE,
        Scale::Custom(1.0),
        ScoreFn::Exp,
    );
    let e = r.unwrap_err();
    assert!(matches!(e, Error::DomainViolation { .. }), "{e:?}");
    // The measured logit bound (1e320 overflows to +inf) is private: only in the detail.
    assert_eq!(e.private_detail().and_then(|d| d.value()), Some(f64::INFINITY));
    assert_eq!(p, [SENTINEL]);
}

// ---------------------------------------------------------------------------------------
// 8. Bad input: exact errors, output untouched
// ---------------------------------------------------------------------------------------

/// Operands of an error case, with their own shapes (possibly inconsistent).
struct Case<T> {
    q: (Vec<T>, [usize; 4]),
    k: (Vec<T>, [usize; 4]),
    v: (Vec<T>, [usize; 4]),
    out: [usize; 4],
    scratch: usize,
}

impl<T: Element> Case<T> {
    fn new(q: [usize; 4], k: [usize; 4], v: [usize; 4], out: [usize; 4]) -> Self {
        let mut r = Rng(34);
        let mut mk = |s: [usize; 4]| {
            let n = s.iter().product();
            ((0..n).map(|_| T::from_f64(r.uniform())).collect::<Vec<T>>(), s)
        };
        let scratch = attention_scratch_len(q[3].max(1), v[3].max(1)).unwrap();
        Case { q: mk(q), k: mk(k), v: mk(v), out, scratch }
    }

    fn good(s: Shape) -> Self {
        Self::new(s.q(), s.k(), s.v(), s.o())
    }

    fn views(&self) -> (BatchedRef<'_, T>, BatchedRef<'_, T>, BatchedRef<'_, T>) {
        (
            BatchedRef::contiguous(&self.q.0, self.q.1).unwrap(),
            BatchedRef::contiguous(&self.k.0, self.k.1).unwrap(),
            BatchedRef::contiguous(&self.v.0, self.v.1).unwrap(),
        )
    }

    /// Runs `attention` (f32 output) or, with `first`, `attention_heads`; it must fail
    /// with the output untouched. Returns the error.
    fn fails_f32(&self, p: &AttentionParams<'_>, first: Option<usize>) -> Error {
        let mut out = vec![SENTINEL as f32; self.out.iter().product()];
        let mut scratch = vec![0f32; self.scratch];
        let (q, k, v) = self.views();
        let o = BatchedMut::contiguous(&mut out, self.out).unwrap();
        let e = match first {
            None => attention(o, q, k, v, p, &mut scratch),
            Some(f) => attention_heads(o, q, k, v, p, f, &mut scratch),
        }
        .expect_err("the call must fail");
        assert!(out.iter().all(|&x| f64::from(x) == SENTINEL), "{e:?}: f32 output written");
        e
    }

    /// [`fails_f32`](Self::fails_f32), and (without `first`) `attention_f64`, which must
    /// fail with the same error and its output untouched.
    fn fails(&self, p: &AttentionParams<'_>, first: Option<usize>) -> Error {
        let e = self.fails_f32(p, first);
        if first.is_none() {
            let mut out = vec![SENTINEL; self.out.iter().product()];
            let mut scratch = vec![0f64; self.scratch];
            let (q, k, v) = self.views();
            let o = BatchedMut::contiguous(&mut out, self.out).unwrap();
            let e64 = attention_f64(o, q, k, v, p, &mut scratch).expect_err("f64 must fail");
            assert!(out.iter().all(|&x| x == SENTINEL), "{e64:?}: f64 output written");
            // NaN-carrying errors (a NaN scale) are not equal to themselves: compare text.
            assert_eq!(e.to_string(), e64.to_string(), "f32 and f64 paths disagree");
        }
        e
    }
}

fn default_params() -> AttentionParams<'static> {
    AttentionParams::default()
}

#[test]
fn zero_extents_are_out_of_range() {
    let cases: [(&str, Shape); 6] = [
        ("batch", shape(0, 2, 3, 4, 5, 6)),
        ("heads", shape(2, 0, 3, 4, 5, 6)),
        ("s_q", shape(2, 2, 0, 4, 5, 6)),
        ("d", shape(2, 2, 3, 4, 0, 6)),
        ("s_k", shape(2, 2, 3, 0, 5, 6)),
        ("d_v", shape(2, 2, 3, 4, 5, 0)),
    ];
    for (name, s) in cases {
        let e = Case::<f32>::good(s).fails(&default_params(), None);
        assert_eq!(e, Error::OutOfRange { name, value: 0.0, allowed: ">= 1" }, "{name}");
    }
}

#[test]
fn mismatched_shapes_are_shape_mismatch() {
    let s = shape(2, 3, 5, 7, 4, 6);
    let cases: [(Case<f32>, Error); 7] = [
        (
            Case::new(s.q(), [1, 3, 7, 4], s.v(), s.o()),
            Error::ShapeMismatch { arg: "k", axis: "batch", expected: 2, got: 1 },
        ),
        (
            Case::new(s.q(), s.k(), [2, 2, 7, 6], s.o()),
            Error::ShapeMismatch { arg: "v", axis: "heads", expected: 3, got: 2 },
        ),
        (
            Case::new(s.q(), [2, 3, 7, 5], s.v(), s.o()),
            Error::ShapeMismatch { arg: "k", axis: "dim", expected: 4, got: 5 },
        ),
        (
            Case::new(s.q(), s.k(), [2, 3, 8, 6], s.o()),
            Error::ShapeMismatch { arg: "v", axis: "seq", expected: 7, got: 8 },
        ),
        (
            Case::new(s.q(), s.k(), s.v(), [2, 3, 5, 7]),
            Error::ShapeMismatch { arg: "out", axis: "dim", expected: 6, got: 7 },
        ),
        (
            Case::new(s.q(), s.k(), s.v(), [2, 3, 4, 6]),
            Error::ShapeMismatch { arg: "out", axis: "seq", expected: 5, got: 4 },
        ),
        (
            // `attention` needs the whole [batch, heads, s_q, d_v] output.
            Case::new(s.q(), s.k(), s.v(), [2, 2, 5, 6]),
            Error::ShapeMismatch { arg: "out", axis: "heads", expected: 3, got: 2 },
        ),
    ];
    for (case, want) in cases {
        assert_eq!(case.fails(&default_params(), None), want);
    }
}

#[test]
fn attention_with_a_partial_output_is_a_shape_mismatch() {
    // Regression: `attention` once accepted `out = [1, n, s_q, d_v]` as if it were the head
    // range 0..n of `attention_heads`, computing only n of the batch · heads heads. Its
    // output must be the whole `[batch, heads, s_q, d_v]`; anything else is ShapeMismatch.
    let s = shape(2, 3, 5, 7, 4, 6);
    let case = Case::<f32>::new(s.q(), s.k(), s.v(), [1, 2, 5, 6]);
    let q = BatchedRef::contiguous(&case.q.0, case.q.1).unwrap();
    let k = BatchedRef::contiguous(&case.k.0, case.k.1).unwrap();
    let v = BatchedRef::contiguous(&case.v.0, case.v.1).unwrap();
    let mut out = vec![SENTINEL as f32; 2 * 5 * 6];
    let mut scratch = vec![0f32; case.scratch];
    let r = attention(
        BatchedMut::contiguous(&mut out, [1, 2, 5, 6]).unwrap(),
        q,
        k,
        v,
        &default_params(),
        &mut scratch,
    );
    assert!(matches!(r, Err(Error::ShapeMismatch { arg: "out", .. })), "got {r:?}");
    assert!(out.iter().all(|&x| f64::from(x) == SENTINEL));
}

#[test]
fn non_finite_inputs_name_the_argument_and_keep_the_logical_index_private() {
    let private =
        |arg, index| Error::PrivateNonFinite { arg, detail: PrivateDetail::from_index(index) };
    let s = shape(2, 2, 5, 7, 3, 4);
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for (arg, at) in [("q", 37usize), ("k", 0), ("v", 111)] {
            let mut case = Case::<f32>::good(s);
            match arg {
                "q" => case.q.0[at] = bad,
                "k" => case.k.0[at] = bad,
                _ => case.v.0[at] = bad,
            }
            let e = case.fails(&default_params(), None);
            assert_eq!(e, private(arg, at), "{bad} in {arg}");
        }
    }
    // f16 and bf16 infinities and NaNs are caught too.
    let mut c16 = Case::<f16>::good(s);
    c16.k.0[20] = f16::INFINITY;
    assert_eq!(c16.fails(&default_params(), None), private("k", 20));
    let mut cb = Case::<bf16>::good(s);
    cb.v.0[3] = bf16::NAN;
    assert_eq!(cb.fails(&default_params(), None), private("v", 3));
    // attention_alloc validates the same way, before allocating or writing.
    let mut case = Case::<f32>::good(s);
    case.v.0[50] = f32::NAN;
    let (q, k, v) = case.views();
    let mut out = vec![SENTINEL as f32; s.out_len()];
    let r = attention_alloc(
        BatchedMut::contiguous(&mut out, s.o()).unwrap(),
        q,
        k,
        v,
        &default_params(),
    );
    assert_eq!(r, Err(private("v", 50)));
    assert!(out.iter().all(|&x| f64::from(x) == SENTINEL));
}

#[test]
fn short_scratch_and_bad_mask_and_bad_scale() {
    let s = shape(2, 2, 5, 7, 3, 4);
    let mut case = Case::<f32>::good(s);
    let needed = case.scratch;
    case.scratch -= 1;
    assert_eq!(
        case.fails(&default_params(), None),
        Error::ScratchTooSmall { needed, got: needed - 1 }
    );
    let case = Case::<f32>::good(s);
    for len in [0, 7, 15] {
        let pad = vec![true; len];
        let p = AttentionParams {
            mask: Mask { causal: true, key_padding: Some(&pad) },
            ..Default::default()
        };
        assert_eq!(
            case.fails(&p, None),
            Error::ShapeMismatch {
                arg: "key_padding",
                axis: "length (batch * s_k)",
                expected: 14,
                got: len
            }
        );
    }
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, -0.0] {
        let p = AttentionParams { scale: Scale::Custom(bad), ..Default::default() };
        let e = case.fails(&p, None);
        assert!(matches!(e, Error::OutOfRange { name: "scale", .. }), "{bad}: {e:?}");
    }
}

#[test]
fn head_ranges_past_the_end_are_shape_mismatch() {
    let s = shape(2, 3, 5, 7, 4, 6);
    for (first, n) in [(5usize, 2usize), (6, 1), (0, 7), (usize::MAX, 1)] {
        let case = Case::<f32>::new(s.q(), s.k(), s.v(), [1, n, 5, 6]);
        let e = case.fails(&default_params(), Some(first));
        assert!(matches!(e, Error::ShapeMismatch { arg: "out", .. }), "{first}+{n}: {e:?}");
    }
    // A range that fits works, and a wrong out batch is refused.
    let case = Case::<f32>::new(s.q(), s.k(), s.v(), [2, 1, 5, 6]);
    let e = case.fails(&default_params(), Some(1));
    assert!(matches!(e, Error::ShapeMismatch { arg: "out", .. }), "{e:?}");
}

#[test]
fn inputs_that_would_overflow_f32_are_refused_untouched() {
    // The range check (documented: refuse when scale·max‖q‖·max‖k‖ or 2·s_k·max|v| is near
    // the largest f32) is for the f32 paths; the f64 path accepts these inputs.
    let s = shape(1, 2, 5, 7, 4, 6);
    // q = k = 1e20: logits ≈ 1e40 > f32::MAX.
    let mut huge = Case::<f32>::good(s);
    huge.q.0.fill(1e20);
    huge.k.0.fill(1e20);
    // Modest inputs but a scale of 1e38.
    let modest = Case::<f32>::good(s);
    let big_scale = AttentionParams { scale: Scale::Custom(1e38), ..Default::default() };
    // Values so large that 2 · s_k · max|v| overflows.
    let mut big_v = Case::<f32>::good(s);
    big_v.v.0[10] = 3e37;
    for kernel in f32_kernels() {
        for score in [ScoreFn::Exp, ScoreFn::Cosh] {
            let mask = Mask { causal: true, key_padding: None };
            let p = params(mask, Scale::InvDim, score, kernel);
            for case in [&huge, &big_v] {
                let e = case.fails_f32(&p, None);
                assert!(matches!(e, Error::DomainViolation { .. }), "{kernel:?} {score:?}: {e:?}");
                let heads = Case { out: [1, 1, 5, 6], ..clone_case(case) };
                let e = heads.fails_f32(&p, Some(1));
                assert!(matches!(e, Error::DomainViolation { .. }), "{kernel:?} {score:?}: {e:?}");
            }
            let p = AttentionParams { kernel, score, ..big_scale };
            assert!(matches!(modest.fails_f32(&p, None), Error::DomainViolation { .. }));
        }
    }
    // The f64 path: q = k = 1e20 are far inside f64 range; every key is the same, so the
    // output is the mean of the value rows (1e-12 relative).
    let mut out = vec![0f64; s.out_len()];
    let mut scratch = vec![0f64; huge.scratch];
    let (q, k, v) = huge.views();
    attention_f64(
        BatchedMut::contiguous(&mut out, s.o()).unwrap(),
        q,
        k,
        v,
        &default_params(),
        &mut scratch,
    )
    .unwrap();
    for h in 0..2 {
        for c in 0..6 {
            let mean = (0..7).map(|j| f64::from(huge.v.0[(h * 7 + j) * 6 + c])).sum::<f64>() / 7.0;
            for i in 0..5 {
                assert!((out[(h * 5 + i) * 6 + c] - mean).abs() <= 1e-12, "f64 path");
            }
        }
    }
}

fn clone_case<T: Clone>(c: &Case<T>) -> Case<T> {
    Case { q: c.q.clone(), k: c.k.clone(), v: c.v.clone(), out: c.out, scratch: c.scratch }
}

#[test]
fn large_but_safe_inputs_are_accepted_and_accurate() {
    // The range check must not refuse ordinary large inputs: q = k = 1e3 (logits 1e6·scale)
    // and v up to 1e30 are fine. Every key equal, so the output is the mean of v exactly.
    let s = shape(1, 1, 3, 4, 2, 1);
    let q = vec![1e3f32; 6];
    let k = vec![1e3f32; 8];
    let v = vec![1e30f32, 3e30, -2e30, 6e30];
    let data = Data { s, q, k, v };
    let want = vec![2e30; 3];
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        for kernel in f32_kernels() {
            let got: Vec<f32> = run(&data, &params(Mask::NONE, Scale::InvSqrtDim, score, kernel));
            assert_close(&got, &want, TOL_F32, 6e30, &format!("{score:?} {kernel:?}"));
        }
    }
}

/// The documented contract for inputs the f32 computation cannot represent: refused
/// (`Err`, output untouched) or computed correctly (within 1e-5 · max|v| of the f64
/// reference). Silently wrong output violates it.
fn refused_or_correct<T: Element>(data: &Data<T>, scale: f64, ctx: &str) {
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        let want = reference(data, Mask::NONE, Scale::Custom(scale), score);
        for kernel in f32_kernels() {
            let p = params(Mask::NONE, Scale::Custom(scale), score, kernel);
            let (r, out) = try_run::<T, f32>(data, &p);
            let c = format!("{ctx} {score:?} {kernel:?}: {r:?}");
            match r {
                Ok(()) => assert_close(&out, &want, TOL_F32, data.vmax(), &c),
                Err(_) => assert!(out.iter().all(|&x| f64::from(x) == SENTINEL), "{c}"),
            }
        }
    }
}

#[test]
fn scaled_queries_that_overflow_f32_are_refused_or_correct() {
    // Regression: the range check once bounded scale · max‖q‖ · max‖k‖ but not
    // scale · max‖q‖ on its own, while the kernels form scale · q in f32 first. With f32 inputs
    // q = [3e38], k = [1e-39, -1e-39], v = [2.5, 7.0], Scale::Custom(10.0), the logits are
    // ±3 (bound 3, accepted), but 10 · 3e38 = +inf in f32, every score is ±inf or NaN and
    // the call returned Ok(()) with out = [0.0] (Exp and Cosh, Portable and Avx2Fma).
    // Expected: 2.5 + 4.5 · σ(−6) ≈ 2.5111 (Exp), 4.75 (Cosh), or an OutOfRange error.
    let s = shape(1, 1, 1, 2, 1, 1);
    let data = Data { s, q: vec![3e38f32], k: vec![1e-39f32, -1e-39], v: vec![2.5f32, 7.0] };
    refused_or_correct(&data, 10.0, "scale · q overflows f32");
}

#[test]
fn f64_inputs_beyond_f32_range_are_refused_or_correct() {
    // Regression: f64 inputs are rounded to f32 by the f32 kernels, but finiteness and the
    // range were checked in f64 only. q = [1e39] (finite in f64, +inf in f32) with k = [0.0]
    // passed (logit bound 1e39 · 0 = 0) and the logit became inf · 0 = NaN: the call returned
    // Ok(()) with out = [0.0] instead of v = [2.5] (one key, logit 0). Same with q = [0],
    // k = [1e39]. Expected: an error (NonFinite/OutOfRange) with out untouched, or v.
    let s = shape(1, 1, 1, 1, 1, 1);
    let a = Data { s, q: vec![1e39f64], k: vec![0.0f64], v: vec![2.5f64] };
    refused_or_correct(&a, 1.0, "f64 q = 1e39");
    let b = Data { s, q: vec![0.0f64], k: vec![1e39f64], v: vec![2.5f64] };
    refused_or_correct(&b, 1.0, "f64 k = 1e39");
}

// ---------------------------------------------------------------------------------------
// 9. Softmax properties independent of the reference
// ---------------------------------------------------------------------------------------

#[test]
fn equal_keys_give_the_mean_of_the_visible_values() {
    // Every key row identical ⇒ every visible logit identical ⇒ uniform weights: the
    // output row is the mean of the visible value rows (computed here in f64). Tolerance
    // 1e-5 · max|v| (f32 sums of ≤ 150 terms).
    let s = shape(2, 1, 97, 130, 16, 7);
    let mut r = Rng(35);
    let q = r.vec_f32(s.b * s.h * s.sq * s.d, 1.0);
    let krow = r.vec_f32(s.d, 1.0);
    let k: Vec<f32> = krow.iter().copied().cycle().take(s.b * s.h * s.sk * s.d).collect();
    let v = r.vec_f32(s.b * s.h * s.sk * s.dv, 1.0);
    let data = Data { s, q, k, v };
    let pad = r.padding(s.b, s.sk);
    for mask in [Mask::NONE, Mask { causal: true, key_padding: Some(&pad) }] {
        let mut want = vec![0.0; s.out_len()];
        for bh in 0..s.b * s.h {
            for i in 0..s.sq {
                let vis: Vec<usize> =
                    (0..s.sk).filter(|&j| mask.visible(bh / s.h, i, j, s.sq, s.sk)).collect();
                for c in 0..s.dv {
                    let sum: f64 =
                        vis.iter().map(|&j| f64::from(data.v[(bh * s.sk + j) * s.dv + c])).sum();
                    want[(bh * s.sq + i) * s.dv + c] =
                        if vis.is_empty() { 0.0 } else { sum / vis.len() as f64 };
                }
            }
        }
        for score in [ScoreFn::Exp, ScoreFn::Cosh] {
            for kernel in f32_kernels() {
                let got: Vec<f32> = run(&data, &params(mask, Scale::InvSqrtDim, score, kernel));
                assert_close(&got, &want, TOL_F32, data.vmax(), &format!("{score:?} {kernel:?}"));
            }
            let got = run_f64(&data, &params(mask, Scale::InvSqrtDim, score, Kernel::Auto));
            assert_close(&got, &want, TOL_F64, data.vmax(), &format!("{score:?} f64"));
        }
    }
}

#[test]
fn a_dominant_logit_selects_its_value_row() {
    // Keys are ±e_0 / 0 rows: key `hot` = 50·e_0, the others have first component in
    // [-5, 5] (cosh: |a| ≤ 5), q = e_0, scale 1. The hot logit exceeds every other |a| by
    // ≥ 45 > 40, so every other weight is ≤ e^{-45} ≈ 3e-20 and the output equals v_hot
    // within 150 · 3e-20 · 2 max|v| ≪ 1e-5 · max|v|. The hot key sits in the first, middle
    // and last key block (the online softmax must rescale or ignore the rest).
    let s = shape(1, 1, 3, 150, 8, 16);
    let mut r = Rng(36);
    let v = r.vec_f32(s.sk * s.dv, 1.0);
    let mut q = vec![0f32; s.sq * s.d];
    for i in 0..s.sq {
        q[i * s.d] = 1.0;
    }
    for hot in [0usize, 70, 149] {
        let mut k = vec![0f32; s.sk * s.d];
        for j in 0..s.sk {
            k[j * s.d] = (r.uniform() * 5.0) as f32;
            k[j * s.d + 3] = r.uniform() as f32; // orthogonal to q
        }
        k[hot * s.d] = 50.0;
        let data = Data { s, q: q.clone(), k, v: v.clone() };
        let want: Vec<f64> = (0..s.sq)
            .flat_map(|_| v[hot * s.dv..(hot + 1) * s.dv].iter().map(|&x| x.into()))
            .collect();
        for score in [ScoreFn::Exp, ScoreFn::Cosh] {
            for kernel in f32_kernels() {
                let p = params(Mask::NONE, Scale::Custom(1.0), score, kernel);
                let got: Vec<f32> = run(&data, &p);
                assert_close(&got, &want, TOL_F32, data.vmax(), &format!("hot {hot} {score:?}"));
            }
            let got = run_f64(&data, &params(Mask::NONE, Scale::Custom(1.0), score, Kernel::Auto));
            assert_close(&got, &want, 1e-15, data.vmax(), &format!("hot {hot} {score:?} f64"));
        }
        // cosh: a hot logit of −50 dominates just as well; softmax then ignores that key.
        let mut neg = data.clone();
        neg.k[hot * s.d] = -50.0;
        for kernel in f32_kernels() {
            let got: Vec<f32> =
                run(&neg, &params(Mask::NONE, Scale::Custom(1.0), ScoreFn::Cosh, kernel));
            assert_close(&got, &want, TOL_F32, data.vmax(), &format!("hot −50 {hot} cosh"));
        }
    }
}
