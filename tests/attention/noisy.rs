//! Attention with keyed Gaussian noise (`dpattn::noisy_attention`): `noisy_attention`
//! (`f32`), `noisy_attention_heads` and `noisy_attention_f64`, against independent oracles.
//!
//! Expected values never come from the kernels. The noise-free part is the float64
//! [`reference_attention`](dpattn::reference_attention) (softmax, output noise only) or a
//! plain float64 reference written in this file that injects the logit noise itself
//! (softmax and `cosh`); every noise element is recomputed on its own with
//! `Gaussian::new(σ).sample_at::<f64>(&KeyedStream::new(key, stream), index)` at the logical
//! index of the module's contract:
//!
//! * output `(b, h, i, c)` ← element `((b · heads + h) · s_q + i) · d_v + c` of the output draw,
//! * logit `(b, h, i, j)` ← element `((b · heads + h) · s_q + i) · s_k + j` of the logit draw.
//!
//! Bitwise comparisons between kernel runs are used only where equality must be exact
//! (head ranges, repeated calls, `σ = 0`, strided layouts, rows that see no key).
//!
//! Tolerances: `f32` kernels within `1e-5 · (max|v| + |expected|)` (a few `f32` ulps of the
//! attention plus the noise rounded once to `f32`), the `f64` path within
//! `1e-12 · (max|v| + |expected|)`. Statistical tests run at the toolkit's `ALPHA` = 1e-6
//! with fixed keys, so they are deterministic. Tiles are 96 query rows × 64 keys and the
//! noise is added in chunks of 64 elements: the shapes (`s_q` = 100, `s_k` = 70 or 150,
//! `d_v` = 70) cross those boundaries.

use crate::support;

use dpattn::attention::{AttentionParams, attention, attention_f64};
use dpattn::noisy_attention::{
    NoiseSpec, NoiseStream, noisy_attention, noisy_attention_f64, noisy_attention_heads,
};
use dpattn::reference_attention::reference_attention_vec;
use dpattn::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn::{BatchedMut, BatchedRef, Error, Kernel, Mask, Scale, ScoreFn};
use support::problem::{Rng, Shape, bshd, scatter, shape};
use support::stats::{
    ALPHA, correlation_z, ks_test, lag_correlation_z, mean_z, moments, normal_cdf, var_z, z_accepts,
};

/// `f32` kernels: `|got − want| ≤ 1e-5 · (max|v| + |want|)`.
const TOL_F32: f64 = 1e-5;
/// The `f64` path: `|got − want| ≤ 1e-12 · (max|v| + |want|)`.
const TOL_F64: f64 = 1e-12;
/// Written into every output before a call, to prove what was (not) written.
const SENTINEL: f32 = -1234.5;

// ---------------------------------------------------------------------------------------
// Deterministic inputs
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// Problems, runners and the references
// ---------------------------------------------------------------------------------------

/// Densely packed `f32` operands and an optional key-padding mask.
#[derive(Debug, Clone)]
struct Problem {
    s: Shape,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    pad: Option<Vec<bool>>,
}

impl Problem {
    /// Uniform `[-1, 1)` queries, keys and values.
    fn random(s: Shape, seed: u64) -> Self {
        let mut r = Rng(seed);
        let q = r.vec_f32(s.b * s.h * s.sq * s.d, 1.0);
        let k = r.vec_f32(s.b * s.h * s.sk * s.d, 1.0);
        let v = r.vec_f32(s.b * s.h * s.sk * s.dv, 1.0);
        Problem { s, q, k, v, pad: None }
    }

    fn views(&self) -> (BatchedRef<'_, f32>, BatchedRef<'_, f32>, BatchedRef<'_, f32>) {
        (
            BatchedRef::contiguous(&self.q, self.s.q()).unwrap(),
            BatchedRef::contiguous(&self.k, self.s.k()).unwrap(),
            BatchedRef::contiguous(&self.v, self.s.v()).unwrap(),
        )
    }

    fn vmax(&self) -> f64 {
        self.v.iter().map(|x| f64::from(x.abs())).fold(0.0, f64::max)
    }

    fn params(
        &self,
        causal: bool,
        scale: f64,
        score: ScoreFn,
        kernel: Kernel,
    ) -> AttentionParams<'_> {
        AttentionParams {
            mask: Mask { causal, key_padding: self.pad.as_deref() },
            scale: Scale::Custom(scale),
            score,
            kernel,
        }
    }
}

/// The `f32` kernels this machine runs: `Portable`, and `Avx2Fma` where the CPU has it.
fn f32_kernels() -> Vec<Kernel> {
    let mut k = vec![Kernel::Portable];
    if Kernel::Avx2Fma.is_available() {
        k.push(Kernel::Avx2Fma);
    }
    k
}

/// `noisy_attention` into a sentinel-filled contiguous `f32` output.
fn try_run_f32(
    p: &Problem,
    params: &AttentionParams<'_>,
    spec: &NoiseSpec<'_>,
) -> (dpattn::Result<()>, Vec<f32>) {
    let s = p.s;
    let mut out = vec![SENTINEL; s.out_len()];
    let mut scratch = vec![0f32; s.scratch()];
    let (q, k, v) = p.views();
    let o = BatchedMut::contiguous(&mut out, s.o()).unwrap();
    let r = noisy_attention(o, q, k, v, params, spec, &mut scratch);
    (r, out)
}

fn run_f32(p: &Problem, params: &AttentionParams<'_>, spec: &NoiseSpec<'_>) -> Vec<f32> {
    let (r, out) = try_run_f32(p, params, spec);
    r.unwrap_or_else(|e| panic!("noisy_attention failed on {:?}: {e}", p.s));
    out
}

/// `noisy_attention_f64` into a sentinel-filled contiguous output.
fn try_run_f64(
    p: &Problem,
    params: &AttentionParams<'_>,
    spec: &NoiseSpec<'_>,
) -> (dpattn::Result<()>, Vec<f64>) {
    let s = p.s;
    let mut out = vec![f64::from(SENTINEL); s.out_len()];
    let mut scratch = vec![0f64; s.scratch()];
    let (q, k, v) = p.views();
    let o = BatchedMut::contiguous(&mut out, s.o()).unwrap();
    let r = noisy_attention_f64(o, q, k, v, params, spec, &mut scratch);
    (r, out)
}

fn run_f64(p: &Problem, params: &AttentionParams<'_>, spec: &NoiseSpec<'_>) -> Vec<f64> {
    let (r, out) = try_run_f64(p, params, spec);
    r.unwrap_or_else(|e| panic!("noisy_attention_f64 failed on {:?}: {e}", p.s));
    out
}

/// `σ` of head `(b, h)`: per head (`heads` entries) or per `(batch, head)`.
fn sigma_of(sigma: &[f64], s: Shape, b: usize, h: usize) -> f64 {
    if sigma.len() == s.h {
        sigma[h]
    } else {
        assert_eq!(sigma.len(), s.b * s.h, "test bug: σ slice length");
        sigma[b * s.h + h]
    }
}

/// Element `index` of the `N(0, σ²)` draw of `stream`, computed on its own; 0 for `σ = 0`.
fn noise(stream: &KeyedStream, sigma: f64, index: usize) -> f64 {
    if sigma == 0.0 {
        return 0.0;
    }
    Gaussian::new(sigma).unwrap().sample_at::<f64>(stream, index as u64).unwrap()
}

/// Whether query `i` of batch `b` sees key `j` (bottom-right causal, `true` = key kept).
fn visible(p: &Problem, causal: bool, b: usize, i: usize, j: usize) -> bool {
    if causal && j + p.s.sq > i + p.s.sk {
        return false;
    }
    p.pad.as_ref().is_none_or(|m| m[b * p.s.sk + j])
}

/// The independent float64 reference of a noisy call: logits
/// `a_ij = scale · q_i·k_j + σ_l · z_l[((b·H + h)·s_q + i)·s_k + j]` over the visible keys,
/// weights `f(a_ij) / Σ_j f(a_ij)` (`exp` with the row maximum subtracted, `cosh` directly:
/// the callers keep `|a| < 50`), times `V`, plus `σ_o · z_o[((b·H + h)·s_q + i)·d_v + c]`.
/// A row that sees no key is zero before the output noise.
fn expected(
    p: &Problem,
    causal: bool,
    scale: f64,
    score: ScoreFn,
    spec: &NoiseSpec<'_>,
) -> Vec<f64> {
    let s = p.s;
    let logit_draw = spec.logits.map(|n| (KeyedStream::new(spec.key, n.stream), n.sigma));
    let out_draw = spec.output.map(|n| (KeyedStream::new(spec.key, n.stream), n.sigma));
    let mut out = vec![0.0; s.out_len()];
    let mut logits = vec![f64::NEG_INFINITY; s.sk];
    for b in 0..s.b {
        for h in 0..s.h {
            let bh = b * s.h + h;
            for i in 0..s.sq {
                let row = bh * s.sq + i;
                let qi = &p.q[row * s.d..][..s.d];
                let mut any = false;
                for (j, a) in logits.iter_mut().enumerate() {
                    *a = f64::NEG_INFINITY;
                    if !visible(p, causal, b, i, j) {
                        continue;
                    }
                    any = true;
                    let kj = &p.k[(bh * s.sk + j) * s.d..][..s.d];
                    let dot: f64 =
                        qi.iter().zip(kj).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
                    *a = scale * dot;
                    if let Some((stream, sigma)) = &logit_draw {
                        *a += noise(stream, sigma_of(sigma, s, b, h), row * s.sk + j);
                    }
                }
                let o = &mut out[row * s.dv..][..s.dv];
                if any {
                    let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let (mut num, mut den) = (vec![0.0f64; s.dv], 0.0f64);
                    for (j, &a) in logits.iter().enumerate() {
                        if a == f64::NEG_INFINITY {
                            continue; // masked
                        }
                        assert!(a.abs() < 50.0, "test data: logit {a}");
                        let w = match score {
                            ScoreFn::Exp => (a - m).exp(),
                            ScoreFn::Cosh => a.cosh(),
                        };
                        den += w;
                        for (n, &x) in num.iter_mut().zip(&p.v[(bh * s.sk + j) * s.dv..][..s.dv]) {
                            *n += w * f64::from(x);
                        }
                    }
                    for (o, n) in o.iter_mut().zip(&num) {
                        *o = n / den;
                    }
                }
                if let Some((stream, sigma)) = &out_draw {
                    let sg = sigma_of(sigma, s, b, h);
                    for (c, o) in o.iter_mut().enumerate() {
                        *o += noise(stream, sg, row * s.dv + c);
                    }
                }
            }
        }
    }
    out
}

/// `|got − want| ≤ tol · (vmax + |want|)` element-wise (and `got` finite).
fn assert_close<O: Copy + Into<f64>>(got: &[O], want: &[f64], tol: f64, vmax: f64, ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g: f64 = g.into();
        assert!(g.is_finite(), "{ctx}: element {i} is {g} (want {w})");
        let bound = tol * (vmax + w.abs());
        assert!((g - w).abs() <= bound, "{ctx}: element {i}: got {g}, want {w} (bound {bound:e})");
    }
}

/// Output noise only, per-head or per-(batch, head) `σ`.
fn output_spec<'a>(key: &'a NoiseKey, stream: u64, sigma: &'a [f64]) -> NoiseSpec<'a> {
    NoiseSpec { key, output: Some(NoiseStream { stream, sigma }), logits: None }
}

// ---------------------------------------------------------------------------------------
// 1. Output-noise placement
// ---------------------------------------------------------------------------------------

#[test]
fn output_noise_is_the_reference_plus_the_addressed_draw() {
    let key = NoiseKey::for_replay([11; 32]);
    // The first shape crosses both tile boundaries; the second has d_v = 70 > 64, so one
    // row's noise spans two fill chunks.
    for (s, seed) in [(shape(2, 3, 100, 70, 5, 7), 1), (shape(2, 3, 5, 3, 3, 70), 2)] {
        let p = Problem::random(s, seed);
        let scale = 1.0 / (s.d as f64).sqrt();
        let reference = reference_attention_vec(
            &p.q,
            &p.k,
            &p.v,
            s.q(),
            s.sk,
            s.dv,
            Mask::NONE,
            Scale::InvSqrtDim,
        )
        .unwrap();
        // Per-head σ (head 1 exact) and per-(batch, head) σ (three exact heads).
        let per_head = [0.5, 0.0, 1.5];
        let per_bh = [0.3, 0.0, 2.0, 0.0, 0.7, 0.0];
        for sigma in [&per_head[..], &per_bh[..]] {
            let spec = output_spec(&key, 5, sigma);
            let stream = KeyedStream::new(&key, 5);
            let want: Vec<f64> = reference
                .iter()
                .enumerate()
                .map(|(idx, r)| {
                    let (b, h) = s.head_of(idx);
                    r + noise(&stream, sigma_of(sigma, s, b, h), idx)
                })
                .collect();
            // The oracle of this test is independent of the reference in `expected`, which
            // must agree with it (cross-check of the two references).
            assert_close(
                &expected(&p, false, scale, ScoreFn::Exp, &spec),
                &want,
                1e-13,
                1.0,
                "refs",
            );
            let ctx = format!("{s:?}, σ = {sigma:?}");
            for kernel in f32_kernels() {
                let params = p.params(false, scale, ScoreFn::Exp, kernel);
                let got = run_f32(&p, &params, &spec);
                assert_close(&got, &want, TOL_F32, p.vmax(), &format!("f32 {kernel:?} {ctx}"));
                // σ = 0 heads are bitwise the noise-free kernel output.
                let mut exact = vec![SENTINEL; s.out_len()];
                let (q, k, v) = p.views();
                let o = BatchedMut::contiguous(&mut exact, s.o()).unwrap();
                attention(o, q, k, v, &params, &mut vec![0f32; s.scratch()]).unwrap();
                for (idx, (g, e)) in got.iter().zip(&exact).enumerate() {
                    let (b, h) = s.head_of(idx);
                    if sigma_of(sigma, s, b, h) == 0.0 {
                        assert_eq!(g.to_bits(), e.to_bits(), "σ = 0 head, element {idx}, {ctx}");
                    }
                }
            }
            let params = p.params(false, scale, ScoreFn::Exp, Kernel::Auto);
            let got = run_f64(&p, &params, &spec);
            assert_close(&got, &want, TOL_F64, p.vmax(), &format!("f64 {ctx}"));
            let mut exact = vec![0f64; s.out_len()];
            let (q, k, v) = p.views();
            let o = BatchedMut::contiguous(&mut exact, s.o()).unwrap();
            attention_f64(o, q, k, v, &params, &mut vec![0f64; s.scratch()]).unwrap();
            for (idx, (g, e)) in got.iter().zip(&exact).enumerate() {
                let (b, h) = s.head_of(idx);
                if sigma_of(sigma, s, b, h) == 0.0 {
                    assert_eq!(g.to_bits(), e.to_bits(), "f64 σ = 0 head, element {idx}, {ctx}");
                }
            }
        }
    }
}

#[test]
fn output_noise_follows_the_logical_index_not_the_memory_offset() {
    let s = shape(2, 3, 100, 70, 5, 7);
    let p = Problem::random(s, 3);
    let key = NoiseKey::for_replay([12; 32]);
    let sigma = [0.25, 1.0, 0.0, 2.0, 0.5, 0.125];
    let spec = output_spec(&key, 9, &sigma);
    let stream = KeyedStream::new(&key, 9);
    let reference =
        reference_attention_vec(&p.q, &p.k, &p.v, s.q(), s.sk, s.dv, Mask::NONE, Scale::InvSqrtDim)
            .unwrap();
    let want: Vec<f64> = reference
        .iter()
        .enumerate()
        .map(|(idx, r)| {
            let (b, h) = s.head_of(idx);
            r + noise(&stream, sigma_of(&sigma, s, b, h), idx)
        })
        .collect();
    let scale = 1.0 / (s.d as f64).sqrt();
    // Queries and the output stored heads-inner ([b, s, h, d] in memory).
    let (ql, ol) = (bshd(s.q()), bshd(s.o()));
    let qbuf = scatter(&p.q, &ql, f32::NAN);
    let (_, k, v) = p.views();
    let q = BatchedRef::new(&qbuf, ql).unwrap();
    for kernel in f32_kernels() {
        let params = p.params(false, scale, ScoreFn::Exp, kernel);
        let contiguous = run_f32(&p, &params, &spec);
        let mut buf = vec![SENTINEL; ol.required_len()];
        let o = BatchedMut::new(&mut buf, ol).unwrap();
        noisy_attention(o, q, k, v, &params, &spec, &mut vec![0f32; s.scratch()]).unwrap();
        // Gather by logical index; the memory order differs from the logical order.
        let mut got = vec![0f32; s.out_len()];
        for b in 0..s.b {
            for h in 0..s.h {
                for i in 0..s.sq {
                    for c in 0..s.dv {
                        got[ol.logical_index(b, h, i, c) as usize] = buf[ol.offset(b, h, i, c)];
                    }
                }
            }
        }
        assert_close(&got, &want, TOL_F32, p.vmax(), &format!("strided f32 {kernel:?}"));
        // Same noise element at the same logical position: bitwise the contiguous call.
        for (idx, (g, c)) in got.iter().zip(&contiguous).enumerate() {
            assert_eq!(g.to_bits(), c.to_bits(), "{kernel:?} element {idx}");
        }
    }
    let params = p.params(false, scale, ScoreFn::Exp, Kernel::Auto);
    let mut buf = vec![f64::NAN; ol.required_len()];
    let o = BatchedMut::new(&mut buf, ol).unwrap();
    noisy_attention_f64(o, q, k, v, &params, &spec, &mut vec![0f64; s.scratch()]).unwrap();
    let mut got = vec![0f64; s.out_len()];
    for b in 0..s.b {
        for h in 0..s.h {
            for i in 0..s.sq {
                for c in 0..s.dv {
                    got[ol.logical_index(b, h, i, c) as usize] = buf[ol.offset(b, h, i, c)];
                }
            }
        }
    }
    assert_close(&got, &want, TOL_F64, p.vmax(), "strided f64");
}

#[test]
fn rows_that_see_no_key_get_exactly_their_noise() {
    // Causal with s_q = 100 > s_k = 70: rows 0..30 of every head see no key. Batch 1 is
    // fully padded: all its rows see no key. Such rows are exactly the noise element
    // (rounded once to f32 in the f32 kernels).
    let s = shape(2, 2, 100, 70, 4, 5);
    let mut p = Problem::random(s, 4);
    let mut pad = vec![true; s.b * s.sk];
    pad[s.sk..].fill(false);
    pad[3] = false;
    p.pad = Some(pad);
    let key = NoiseKey::for_replay([13; 32]);
    let sigma = [0.75, 1.25];
    let spec = output_spec(&key, 1, &sigma);
    let stream = KeyedStream::new(&key, 1);
    let scale = 0.5;
    let blind = |idx: usize| {
        let (b, _) = s.head_of(idx);
        let i = (idx / s.dv) % s.sq;
        b == 1 || i + s.sk < s.sq
    };
    let want = expected(&p, true, scale, ScoreFn::Exp, &spec);
    let mut blind_rows = 0;
    for kernel in f32_kernels() {
        for score in [ScoreFn::Exp, ScoreFn::Cosh] {
            let got = run_f32(&p, &p.params(true, scale, score, kernel), &spec);
            for (idx, g) in got.iter().enumerate() {
                if blind(idx) {
                    let (b, h) = s.head_of(idx);
                    let z = noise(&stream, sigma_of(&sigma, s, b, h), idx);
                    assert_ne!(z, 0.0);
                    assert_eq!(*g, z as f32, "{kernel:?} {score:?} element {idx}");
                    blind_rows += 1;
                }
            }
            if score == ScoreFn::Exp {
                assert_close(&got, &want, TOL_F32, p.vmax(), &format!("{kernel:?}"));
            }
        }
    }
    assert!(blind_rows > 0);
    for score in [ScoreFn::Exp, ScoreFn::Cosh] {
        let got = run_f64(&p, &p.params(true, scale, score, Kernel::Auto), &spec);
        for (idx, g) in got.iter().enumerate() {
            if blind(idx) {
                let (b, h) = s.head_of(idx);
                assert_eq!(*g, noise(&stream, sigma_of(&sigma, s, b, h), idx), "f64 {idx}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. Logit-noise placement
// ---------------------------------------------------------------------------------------

#[test]
fn logit_noise_matches_the_independent_reference() {
    let key = NoiseKey::for_replay([21; 32]);
    let mut case = 0usize;
    for (s, seed) in [(shape(2, 2, 100, 70, 5, 7), 31), (shape(1, 3, 37, 150, 4, 3), 32)] {
        for (causal, padded) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut p = Problem::random(s, seed);
            if padded {
                p.pad = Some(Rng(seed + 100).padding(s.b, s.sk));
            }
            let scale = 1.0 / (s.d as f64).sqrt();
            for score in [ScoreFn::Exp, ScoreFn::Cosh] {
                case += 1;
                // Logit σ per (batch, head) with a zero, or per head; output noise on in
                // every other case.
                let logit_sigma: Vec<f64> =
                    if s.b * s.h == 4 { vec![0.8, 0.0, 1.5, 0.3] } else { vec![1.0, 0.5, 0.0] };
                let out_sigma = vec![0.4; s.h];
                let spec = NoiseSpec {
                    key: &key,
                    output: case
                        .is_multiple_of(2)
                        .then_some(NoiseStream { stream: 7, sigma: &out_sigma }),
                    logits: Some(NoiseStream { stream: 8, sigma: &logit_sigma }),
                };
                let want = expected(&p, causal, scale, score, &spec);
                let ctx = format!("{s:?} causal {causal} padded {padded} {score:?} case {case}");
                for kernel in f32_kernels() {
                    let got = run_f32(&p, &p.params(causal, scale, score, kernel), &spec);
                    assert_close(&got, &want, TOL_F32, p.vmax(), &format!("f32 {kernel:?} {ctx}"));
                }
                let got = run_f64(&p, &p.params(causal, scale, score, Kernel::Auto), &spec);
                assert_close(&got, &want, TOL_F64, p.vmax(), &format!("f64 {ctx}"));
            }
        }
    }
}

#[test]
fn logit_noise_really_moves_the_output() {
    // Guard against a vacuous pass: with the logit noise left out, the reference must be
    // far from the noisy kernel's output.
    let s = shape(1, 2, 10, 9, 3, 2);
    let p = Problem::random(s, 41);
    let key = NoiseKey::for_replay([22; 32]);
    let sigma = [1.0, 1.0];
    let spec = NoiseSpec {
        key: &key,
        output: None,
        logits: Some(NoiseStream { stream: 2, sigma: &sigma }),
    };
    let plain = NoiseSpec { key: &key, output: None, logits: None };
    let got = run_f64(&p, &p.params(false, 0.5, ScoreFn::Exp, Kernel::Auto), &spec);
    let clean = expected(&p, false, 0.5, ScoreFn::Exp, &plain);
    let moved = got.iter().zip(&clean).filter(|(g, c)| (*g - *c).abs() > 1e-3).count();
    assert!(moved > got.len() * 3 / 4, "only {moved} of {} outputs moved", got.len());
}

// ---------------------------------------------------------------------------------------
// 3. Splitting, determinism, different keys and streams
// ---------------------------------------------------------------------------------------

#[test]
fn head_ranges_reproduce_the_whole_call_bitwise_and_noise_depends_on_key_and_stream() {
    let s = shape(2, 3, 100, 70, 5, 7);
    let mut p = Problem::random(s, 51);
    p.pad = Some(Rng(52).padding(s.b, s.sk));
    let key = NoiseKey::for_replay([31; 32]);
    let other_key = NoiseKey::for_replay([32; 32]);
    let so = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6];
    let sl = [1.0, 0.5, 0.25, 0.75, 1.25, 0.6];
    let spec = |key, o: u64, l: u64| NoiseSpec {
        key,
        output: Some(NoiseStream { stream: o, sigma: &so }),
        logits: Some(NoiseStream { stream: l, sigma: &sl }),
    };
    for kernel in f32_kernels() {
        let params = p.params(true, 0.4, ScoreFn::Exp, kernel);
        let whole = run_f32(&p, &params, &spec(&key, 1, 2));
        // The same call again: bitwise identical.
        let again = run_f32(&p, &params, &spec(&key, 1, 2));
        assert_eq!(
            whole.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            again.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "{kernel:?}: repeated call"
        );
        // Uneven head ranges [0, 1), [1, 4), [4, 6) (the middle one crosses a batch).
        let (q, k, v) = p.views();
        let mut parts = Vec::new();
        for (first, n) in [(0, 1), (1, 3), (4, 2)] {
            let mut out = vec![SENTINEL; n * s.sq * s.dv];
            let o = BatchedMut::contiguous(&mut out, [1, n, s.sq, s.dv]).unwrap();
            noisy_attention_heads(
                o,
                q,
                k,
                v,
                &params,
                &spec(&key, 1, 2),
                first,
                &mut vec![0f32; s.scratch()],
            )
            .unwrap();
            parts.extend(out);
        }
        assert_eq!(parts.len(), whole.len());
        for (i, (a, b)) in parts.iter().zip(&whole).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{kernel:?}: head ranges, element {i}");
        }
        // Another key, output stream or logit stream changes (almost) every element. The
        // logit noise cannot move a row that sees fewer than two keys (causal rows 0..=30,
        // padded keys), so only rows that see at least two keys count for it.
        let two_keys: Vec<bool> = (0..s.out_len())
            .map(|idx| {
                let (b, _) = s.head_of(idx);
                let i = (idx / s.dv) % s.sq;
                (0..s.sk).filter(|&j| visible(&p, true, b, i, j)).count() >= 2
            })
            .collect();
        let rows = two_keys.iter().filter(|&&t| t).count();
        assert!(rows > whole.len() / 2);
        for (name, other, only_two_keys) in [
            ("key", run_f32(&p, &params, &spec(&other_key, 1, 2)), false),
            ("output stream", run_f32(&p, &params, &spec(&key, 3, 2)), false),
            ("logit stream", run_f32(&p, &params, &spec(&key, 1, 4)), true),
            ("swapped streams", run_f32(&p, &params, &spec(&key, 2, 1)), false),
        ] {
            let counted = |i: &usize| !only_two_keys || two_keys[*i];
            let n = (0..whole.len()).filter(counted).count();
            let same = (0..whole.len()).filter(counted).filter(|&i| whole[i] == other[i]).count();
            assert!(same * 100 < n, "{kernel:?} {name}: {same} of {n} elements equal");
        }
    }
}

// ---------------------------------------------------------------------------------------
// 4. Statistics of the injected noise
// ---------------------------------------------------------------------------------------

#[test]
fn output_noise_is_n_0_sigma_squared() {
    // V constant: every (visible) row's exact attention output is that constant, so
    // `out − c` is the injected noise (plus f32 rounding of ~1e-7, negligible against σ).
    // 1 × 4 × 100 × 256 = 102 400 values, σ = 2. Tests at ALPHA = 1e-6: mean z-test,
    // variance z-test (μ4 = 3σ⁴), KS against N(0, σ²), and no correlation between heads or
    // between neighbouring elements and rows (each element has its own noise).
    let s = shape(1, 4, 100, 3, 2, 256);
    let mut p = Problem::random(s, 61);
    let c = 0.75f32;
    p.v.fill(c);
    let key = NoiseKey::for_replay([41; 32]);
    let sigma_v = 2.0;
    let sigma = [sigma_v; 4];
    let spec = output_spec(&key, 0, &sigma);
    let got = run_f32(&p, &p.params(false, 0.7, ScoreFn::Exp, Kernel::Auto), &spec);
    let z: Vec<f64> = got.iter().map(|&x| f64::from(x) - f64::from(c)).collect();
    assert!(z.len() >= 100_000);
    let m = moments(&z);
    let var = sigma_v * sigma_v;
    let zm = mean_z(&m, 0.0, var);
    let zv = var_z(&m, var, 3.0 * var * var);
    assert!(z_accepts(zm), "mean {} (z = {zm})", m.mean);
    assert!(z_accepts(zv), "variance {} (z = {zv})", m.var);
    let ks = ks_test(&z, |x| normal_cdf(x / sigma_v));
    assert!(ks.p_value >= ALPHA, "KS against N(0, 4): {ks:?}");
    let head = s.sq * s.dv;
    for h in 1..s.h {
        let r = correlation_z(&z[..head], &z[h * head..(h + 1) * head]);
        assert!(z_accepts(r), "heads 0 and {h} correlated: z = {r}");
    }
    for lag in [1, s.dv] {
        let r = lag_correlation_z(&z, lag);
        assert!(z_accepts(r), "lag {lag} correlation z = {r}");
    }
}

#[test]
fn logit_noise_difference_of_two_equal_logits_is_n_0_two_sigma_squared() {
    // Two keys with equal logits (identical key rows) and value rows e1, e2: the output is
    // (w1, w2) with ln(w1 / w2) = z1 − z2 exactly, z_j the logit noise, so
    // ln(o1 / o2) ~ N(0, 2σ_l²). 1 × 4 × 25 000 rows = 100 000 values, σ_l = 0.7 (f32
    // error in ln(o1/o2) ~ 1e-6, negligible). Mean z-test, variance z-test, KS, ALPHA = 1e-6.
    let s = shape(1, 4, 25_000, 2, 3, 2);
    let mut p = Problem::random(s, 71);
    for bh in 0..s.b * s.h {
        let (k0, k1) = p.k[bh * 2 * s.d..][..2 * s.d].split_at_mut(s.d);
        k1.copy_from_slice(k0);
        p.v[bh * 4..][..4].copy_from_slice(&[1.0, 0.0, 0.0, 1.0]);
    }
    let key = NoiseKey::for_replay([42; 32]);
    let sl = 0.7;
    let sigma = [sl; 4];
    let spec = NoiseSpec {
        key: &key,
        output: None,
        logits: Some(NoiseStream { stream: 3, sigma: &sigma }),
    };
    let got = run_f32(&p, &p.params(false, 0.5, ScoreFn::Exp, Kernel::Auto), &spec);
    let x: Vec<f64> =
        got.chunks_exact(2).map(|o| (f64::from(o[0]) / f64::from(o[1])).ln()).collect();
    assert_eq!(x.len(), 100_000);
    // Spot check of the exact relation on the first rows: ln(o1/o2) = z1 − z2.
    let stream = KeyedStream::new(&key, 3);
    for (i, xi) in x.iter().enumerate().take(50) {
        let dz = noise(&stream, sl, 2 * i) - noise(&stream, sl, 2 * i + 1);
        assert!((xi - dz).abs() < 1e-5 * (1.0 + dz.abs()), "row {i}: {xi} vs {dz}");
    }
    let var = 2.0 * sl * sl;
    let m = moments(&x);
    let zm = mean_z(&m, 0.0, var);
    let zv = var_z(&m, var, 3.0 * var * var);
    assert!(z_accepts(zm), "mean {} (z = {zm})", m.mean);
    assert!(z_accepts(zv), "variance {} vs {var} (z = {zv})", m.var);
    let ks = ks_test(&x, |t| normal_cdf(t / var.sqrt()));
    assert!(ks.p_value >= ALPHA, "KS against N(0, 2σ²): {ks:?}");
}

// ---------------------------------------------------------------------------------------
// 5. Bad input
// ---------------------------------------------------------------------------------------

#[test]
fn bad_noise_specs_are_refused_and_leave_the_output_untouched() {
    let s = shape(2, 3, 7, 5, 4, 3);
    let p = Problem::random(s, 81);
    let key = NoiseKey::for_replay([51; 32]);
    let ok = [0.5; 3];
    let params = p.params(false, 0.5, ScoreFn::Exp, Kernel::Auto);
    let untouched_f32 = |out: &[f32], ctx: &str| {
        assert!(out.iter().all(|&x| x.to_bits() == SENTINEL.to_bits()), "{ctx}: output written");
    };
    let untouched_f64 = |out: &[f64], ctx: &str| {
        assert!(out.iter().all(|&x| x == f64::from(SENTINEL)), "{ctx}: output written");
    };

    // Equal output and logit stream ids.
    let spec = NoiseSpec {
        key: &key,
        output: Some(NoiseStream { stream: 4, sigma: &ok }),
        logits: Some(NoiseStream { stream: 4, sigma: &ok }),
    };
    let (r, out) = try_run_f32(&p, &params, &spec);
    assert!(matches!(r, Err(Error::OutOfRange { name: "logit noise stream id", .. })), "{r:?}");
    untouched_f32(&out, "equal streams");
    let (r, out) = try_run_f64(&p, &params, &spec);
    assert!(matches!(r, Err(Error::OutOfRange { name: "logit noise stream id", .. })), "{r:?}");
    untouched_f64(&out, "equal streams f64");

    // σ slices of the wrong length: neither heads (3) nor batch · heads (6) entries.
    for len in [0, 1, 2, 4, 5, 7] {
        let bad = vec![0.5; len];
        for (which, spec) in one_sided_specs(&key, &bad) {
            let (r, out) = try_run_f32(&p, &params, &spec);
            assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{which} len {len}: {r:?}");
            untouched_f32(&out, &format!("{which} len {len}"));
            let (r, out) = try_run_f64(&p, &params, &spec);
            assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "f64 {which} len {len}: {r:?}");
            untouched_f64(&out, &format!("f64 {which} len {len}"));
        }
    }

    // Negative, NaN and infinite σ (in the per-head and the per-(batch, head) forms).
    for bad_value in [-0.5, -1e-300, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        for mut bad in [vec![0.5; 3], vec![0.5; 6]] {
            bad[1] = bad_value;
            for (which, spec) in one_sided_specs(&key, &bad) {
                let ctx = format!("{which} σ = {bad:?}");
                let (r, out) = try_run_f32(&p, &params, &spec);
                assert!(matches!(r, Err(Error::OutOfRange { .. })), "{ctx}: {r:?}");
                untouched_f32(&out, &ctx);
                let (r, out) = try_run_f64(&p, &params, &spec);
                assert!(matches!(r, Err(Error::OutOfRange { .. })), "f64 {ctx}: {r:?}");
                untouched_f64(&out, &ctx);
            }
        }
    }

    // Huge but finite σ: the range check refuses noise that could overflow the compute
    // precision (|z| < 9σ must stay below a quarter of its largest finite value): 1e300
    // (and 1e37) for the f32 kernels; 1e307 for the f64 path, whose limit is f64::MAX.
    for (huge, f64_too) in [(1e37, false), (1e300, false), (1e307, true)] {
        let bad = [0.5, huge, 0.5];
        for (which, spec) in one_sided_specs(&key, &bad) {
            let ctx = format!("{which} σ = {huge:e}");
            let (r, out) = try_run_f32(&p, &params, &spec);
            assert!(matches!(r, Err(Error::OutOfRange { .. })), "{ctx}: {r:?}");
            untouched_f32(&out, &ctx);
            if f64_too {
                let (r, out) = try_run_f64(&p, &params, &spec);
                assert!(matches!(r, Err(Error::OutOfRange { .. })), "f64 {ctx}: {r:?}");
                untouched_f64(&out, &ctx);
            }
        }
    }

    // Sanity: the same problem with valid specs succeeds.
    let spec = NoiseSpec {
        key: &key,
        output: Some(NoiseStream { stream: 4, sigma: &ok }),
        logits: Some(NoiseStream { stream: 5, sigma: &ok }),
    };
    assert!(try_run_f32(&p, &params, &spec).0.is_ok());
    assert!(try_run_f64(&p, &params, &spec).0.is_ok());
}

/// The two one-draw specs of `sigma` on stream 1: output noise only, and logit noise only.
fn one_sided_specs<'a>(key: &'a NoiseKey, sigma: &'a [f64]) -> [(&'static str, NoiseSpec<'a>); 2] {
    let draw = Some(NoiseStream { stream: 1, sigma });
    [
        ("output", NoiseSpec { key, output: draw, logits: None }),
        ("logits", NoiseSpec { key, output: None, logits: draw }),
    ]
}
