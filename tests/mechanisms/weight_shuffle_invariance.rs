//! Weight shuffling (`dpattn::weight_shuffle`, paper 002): the permutations a
//! [`ShufflePlan`] draws and applies leave transformer blocks' functions unchanged, can be
//! undone, permute gradients and optimizer state consistently, are uniform, and are
//! validated: `docs/PAPERS.md` §2.3, P2-15 and the check P2-AC9.
//!
//! The oracle is a transformer forward pass written here, in `f64`, straight from the flat
//! buffer and the layout descriptors (Q/K/V with biases, optional RoPE, per-head attention
//! through the library's exact `reference_attention`, GQA by repeating K/V heads, output
//! projection, residual + LayerNorm, GELU-tanh or SwiGLU MLP). Expected values never come
//! from the plan: the index form of `docs/PAPERS.md` §2.3 (gather `dst[j] = src[π(j)]`) is
//! re-implemented in [`expected_sources`].
//!
//! Tolerances:
//! * invariance: `max |out(P(W)) − out(W)| ≤ 1e-12 · max(1, max |out(W)|)` (only the order
//!   of floating-point sums changes);
//! * negative controls (RoPE features moved, Appendix B-A independent draws): the output
//!   must change by more than `1e-3`;
//! * un-shuffling and optimizer state: bit-exact;
//! * gradients: central differences with `h = 1e-6`, `|∇L(P(W)) − P(∇L(W))| ≤ 1e-6`;
//! * sampling: Pearson χ² over the 24 cells of `S_4` (10⁶ draws) and the 36 cells of
//!   `S_3 × S_3`, at `α = 1e-6` of `tests/support/stats.rs`, with a reference critical
//!   value checked against the Wilson–Hilferty approximation.
//!
//! Coverage, orbits and input validation are checked against hand counts (ViT-B/16:
//! `4·dm² + 3·dm + 2·dm·dff + dff = 7,083,264` of a layer's 7,087,872 parameters move).
//!
//! All inputs come from fixed seeds, so every test is deterministic; the file runs in about
//! 2 s in a debug build. Two tests pin fixes of review findings:
//! [`check_leaves_indices_with_bit_31_unchanged`] (a rejected slot comes back unchanged) and
//! [`signalling_nans_come_back_quiet_with_their_payload`] (the documented f64 round trip).

use crate::support;

use std::ops::Range;

use dpattn::sampling::{KeyedStream, NoiseKey};
use dpattn::weight_shuffle::{
    AttentionBlock, Block, Coverage, LinearLayout, MlpBlock, Permutations, PositionEncoding, Qkv,
    ShufflePlan, ValueSharing, WeightLayout,
};
use dpattn::{BatchedMut, BatchedRef, Element, Error, Mask, Scale, reference_attention};
use half::{bf16, f16};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng};
use support::problem::Rng;
use support::stats::{ALPHA, chi_square_gof, chi_square_sf, normal_sf};

/// The key of every keyed permutation draw in this file.
const KEY: NoiseKey = NoiseKey::for_replay([0x5a; 32]);

/// Relative tolerance of the invariance checks.
const INVARIANCE_TOL: f64 = 1e-12;

/// Smallest output change the negative controls must produce.
const BROKEN_MIN: f64 = 1e-3;

// ---------------------------------------------------------------------------------------
// Model descriptors in a flat buffer

/// RoPE pairing of the features of a query/key head.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rope {
    /// Pairs `(p, p + d/2)` (GPT-NeoX / LLaMA in HF).
    HalfSplit,
    /// Pairs `(2p, 2p + 1)` (GPT-J, original RoFormer).
    Interleaved,
}

/// The feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ffn {
    /// `down(gelu_tanh(up(x)))`.
    Gelu,
    /// `down(silu(gate(x)) ⊙ up(x))`.
    SwiGlu,
}

/// One transformer layer's shapes and storage conventions.
#[derive(Debug, Clone, Copy)]
struct LayerCfg {
    heads: usize,
    kv_heads: usize,
    dk: usize,
    dv: usize,
    d_ff: usize,
    layout: WeightLayout,
    fused: bool,
    bias: bool,
    rope: Option<Rope>,
    values: ValueSharing,
    ffn: Ffn,
    layer_norm: bool,
}

/// BERT/ViT: separate `nn.Linear` (out, in) projections with biases, post-LayerNorm.
const BERT: LayerCfg = LayerCfg {
    heads: 4,
    kv_heads: 4,
    dk: 8,
    dv: 8,
    d_ff: 24,
    layout: WeightLayout::OutIn,
    fused: false,
    bias: true,
    rope: None,
    values: ValueSharing::AllHeads,
    ffn: Ffn::Gelu,
    layer_norm: true,
};

/// GPT-2: fused `c_attn`, every weight a `Conv1D` (in, out).
const GPT2: LayerCfg = LayerCfg { layout: WeightLayout::InOut, fused: true, ..BERT };

/// LLaMA-like: no biases, RoPE, GQA, SwiGLU.
const LLAMA: LayerCfg = LayerCfg {
    heads: 8,
    kv_heads: 2,
    dk: 4,
    dv: 4,
    bias: false,
    rope: Some(Rope::HalfSplit),
    values: ValueSharing::PerKvHead,
    ffn: Ffn::SwiGlu,
    layer_norm: false,
    ..BERT
};

/// One layer placed in the buffer.
#[derive(Debug, Clone, Copy)]
struct Layer {
    cfg: LayerCfg,
    attn: AttentionBlock,
    mlp: MlpBlock,
    /// Offsets of the two LayerNorms (after attention, after the MLP); each holds `γ` then
    /// `β`, `2·d_model` elements. Never moved.
    ln: Option<[usize; 2]>,
}

/// A stack of layers over one flat buffer, with a few never-moved elements before and
/// after them (standing in for embeddings and a classifier head).
#[derive(Debug, Clone)]
struct Model {
    d_model: usize,
    seq: usize,
    causal: bool,
    layers: Vec<Layer>,
    blocks: Vec<Block>,
    len: usize,
}

/// Bump allocator of buffer offsets.
struct Alloc(usize);

impl Alloc {
    fn take(&mut self, n: usize) -> usize {
        let at = self.0;
        self.0 += n;
        at
    }

    fn linear(&mut self, out: usize, inp: usize, layout: WeightLayout, bias: bool) -> LinearLayout {
        let l = LinearLayout::new(self.take(out * inp), out, inp, layout);
        if bias { l.with_bias(self.take(out)) } else { l }
    }
}

impl Model {
    fn new(d_model: usize, seq: usize, causal: bool, cfgs: &[LayerCfg]) -> Self {
        let mut a = Alloc(0);
        a.take(7); // "embeddings"
        let mut layers = Vec::new();
        for &c in cfgs {
            let (dm, lay, bias) = (d_model, c.layout, c.bias);
            let ln1 = c.layer_norm.then(|| a.take(2 * dm));
            let qkv = if c.fused {
                let out = c.heads * c.dk + c.kv_heads * c.dk + c.kv_heads * c.dv;
                Qkv::Fused(a.linear(out, dm, lay, bias))
            } else {
                Qkv::Separate {
                    q: a.linear(c.heads * c.dk, dm, lay, bias),
                    k: a.linear(c.kv_heads * c.dk, dm, lay, bias),
                    v: a.linear(c.kv_heads * c.dv, dm, lay, bias),
                }
            };
            let output = a.linear(dm, c.heads * c.dv, lay, bias);
            let positions = if c.rope.is_some() {
                PositionEncoding::Rotary
            } else {
                PositionEncoding::Additive
            };
            let attn = AttentionBlock {
                qkv,
                output,
                heads: c.heads,
                kv_heads: c.kv_heads,
                qk_head_dim: c.dk,
                v_head_dim: c.dv,
                positions,
                values: c.values,
            };
            let ln2 = c.layer_norm.then(|| a.take(2 * dm));
            let up = a.linear(c.d_ff, dm, lay, bias);
            let gate = (c.ffn == Ffn::SwiGlu).then(|| a.linear(c.d_ff, dm, lay, bias));
            let down = a.linear(dm, c.d_ff, lay, bias);
            let mlp = MlpBlock { up, gate, down };
            layers.push(Layer { cfg: c, attn, mlp, ln: ln1.zip(ln2).map(|(x, y)| [x, y]) });
        }
        a.take(5); // "classifier head"
        let blocks =
            layers.iter().flat_map(|l| [Block::Attention(l.attn), Block::Mlp(l.mlp)]).collect();
        Self { d_model, seq, causal, layers, blocks, len: a.0 }
    }

    fn plan(&self) -> ShufflePlan<'_> {
        ShufflePlan::new(&self.blocks, self.len).unwrap()
    }

    /// Weights uniform on `[-0.6, 0.6)`; LayerNorm gains near 1.
    fn weights(&self, rng: &mut Rng) -> Vec<f64> {
        let mut w: Vec<f64> = (0..self.len).map(|_| 0.6 * rng.uniform()).collect();
        for l in &self.layers {
            for at in l.ln.into_iter().flatten() {
                w[at..at + self.d_model].iter_mut().for_each(|g| *g += 1.0);
            }
        }
        w
    }

    fn input(&self, rng: &mut Rng) -> Vec<f64> {
        (0..self.seq * self.d_model).map(|_| rng.uniform()).collect()
    }

    fn forward(&self, w: &[f64], x: &[f64]) -> Vec<f64> {
        self.layers.iter().fold(x.to_vec(), |h, l| self.layer_forward(l, w, &h))
    }

    fn layer_forward(&self, l: &Layer, w: &[f64], x: &[f64]) -> Vec<f64> {
        let (n, c) = (self.seq, l.cfg);
        let (q, k, v) = match l.attn.qkv {
            Qkv::Separate { q, k, v } => {
                (linear(w, &q, x, n), linear(w, &k, x, n), linear(w, &v, x, n))
            }
            Qkv::Fused(f) => {
                let y = linear(w, &f, x, n);
                let (qw, kw, vw) = (c.heads * c.dk, c.kv_heads * c.dk, c.kv_heads * c.dv);
                let cols = |from: usize, width: usize| -> Vec<f64> {
                    y.chunks_exact(qw + kw + vw)
                        .flat_map(|r| r[from..from + width].to_vec())
                        .collect()
                };
                (cols(0, qw), cols(qw, kw), cols(qw + kw, vw))
            }
        };
        let heads = self.attention(&c, &q, &k, &v);
        let mut h = linear(w, &l.attn.output, &heads, n);
        h.iter_mut().zip(x).for_each(|(a, b)| *a += b);
        if let Some([ln1, _]) = l.ln {
            layer_norm(&mut h, self.d_model, w, ln1);
        }
        let up = linear(w, &l.mlp.up, &h, n);
        let act: Vec<f64> = match l.mlp.gate {
            None => up.iter().map(|&u| gelu_tanh(u)).collect(),
            Some(g) => linear(w, &g, &h, n).iter().zip(&up).map(|(&g, &u)| silu(g) * u).collect(),
        };
        let mut out = linear(w, &l.mlp.down, &act, n);
        out.iter_mut().zip(&h).for_each(|(a, b)| *a += b);
        if let Some([_, ln2]) = l.ln {
            layer_norm(&mut out, self.d_model, w, ln2);
        }
        out
    }

    /// Multi-head attention of the projected `q [n, heads·dk]`, `k [n, kv·dk]`,
    /// `v [n, kv·dv]`: heads concatenated, `[n, heads·dv]`.
    fn attention(&self, c: &LayerCfg, q: &[f64], k: &[f64], v: &[f64]) -> Vec<f64> {
        let (n, h, kv, dk, dv) = (self.seq, c.heads, c.kv_heads, c.dk, c.dv);
        let group = h / kv;
        let (mut qh, mut kh, mut vh) =
            (vec![0.0; h * n * dk], vec![0.0; h * n * dk], vec![0.0; h * n * dv]);
        for head in 0..h {
            let g = head / group; // repeat_kv: contiguous groups of query heads
            for s in 0..n {
                let at = head * n + s;
                let qrow = &mut qh[at * dk..][..dk];
                qrow.copy_from_slice(&q[s * h * dk + head * dk..][..dk]);
                let krow = &mut kh[at * dk..][..dk];
                krow.copy_from_slice(&k[s * kv * dk + g * dk..][..dk]);
                if let Some(r) = c.rope {
                    rope(qrow, s, r);
                    rope(krow, s, r);
                }
                vh[at * dv..][..dv].copy_from_slice(&v[s * kv * dv + g * dv..][..dv]);
            }
        }
        let mut o = vec![0.0; h * n * dv];
        let mut scratch = vec![0.0; reference_attention::reference_attention_scratch_len(n)];
        reference_attention(
            BatchedMut::contiguous(&mut o, [1, h, n, dv]).unwrap(),
            BatchedRef::contiguous(&qh, [1, h, n, dk]).unwrap(),
            BatchedRef::contiguous(&kh, [1, h, n, dk]).unwrap(),
            BatchedRef::contiguous(&vh, [1, h, n, dv]).unwrap(),
            Mask { causal: self.causal, key_padding: None },
            Scale::InvSqrtDim,
            &mut scratch,
        )
        .unwrap();
        let mut out = vec![0.0; n * h * dv];
        for head in 0..h {
            for s in 0..n {
                out[s * h * dv + head * dv..][..dv]
                    .copy_from_slice(&o[(head * n + s) * dv..][..dv]);
            }
        }
        out
    }
}

/// `y = x·Wᵀ + b` for `rows` rows of `x`, reading `W` in its storage order.
fn linear(w: &[f64], l: &LinearLayout, x: &[f64], rows: usize) -> Vec<f64> {
    let (no, ni) = (l.out_features, l.in_features);
    assert_eq!(x.len(), rows * ni);
    let mut y = vec![0.0; rows * no];
    for (xr, yr) in x.chunks_exact(ni).zip(y.chunks_exact_mut(no)) {
        for (o, yo) in yr.iter_mut().enumerate() {
            let mut acc = l.bias.map_or(0.0, |b| w[b + o]);
            for (i, &xi) in xr.iter().enumerate() {
                let at = match l.layout {
                    WeightLayout::OutIn => o * ni + i,
                    WeightLayout::InOut => i * no + o,
                };
                acc += xi * w[l.weight + at];
            }
            *yo = acc;
        }
    }
    y
}

/// LayerNorm over each `dm`-wide row, `γ = w[at..at + dm]`, `β = w[at + dm..at + 2dm]`.
fn layer_norm(x: &mut [f64], dm: usize, w: &[f64], at: usize) {
    for row in x.chunks_exact_mut(dm) {
        let mean = row.iter().sum::<f64>() / dm as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / dm as f64;
        let inv = 1.0 / (var + 1e-5).sqrt();
        for (j, v) in row.iter_mut().enumerate() {
            *v = (*v - mean) * inv * w[at + j] + w[at + dm + j];
        }
    }
}

fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// Rotates the feature pairs of one query/key head at position `s` (base 10 000).
fn rope(x: &mut [f64], s: usize, kind: Rope) {
    let d = x.len();
    let half = d / 2;
    for p in 0..half {
        let theta = s as f64 * 10_000f64.powf(-((2 * p) as f64) / d as f64);
        let (a, b) = match kind {
            Rope::HalfSplit => (p, p + half),
            Rope::Interleaved => (2 * p, 2 * p + 1),
        };
        let (cos, sin) = (theta.cos(), theta.sin());
        let (xa, xb) = (x[a], x[b]);
        x[a] = xa * cos - xb * sin;
        x[b] = xa * sin + xb * cos;
    }
}

fn max_abs(x: &[f64]) -> f64 {
    x.iter().fold(0.0, |m, v| m.max(v.abs()))
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

/// Permutations of `plan` drawn from keyed stream `stream`.
fn draw<'p>(plan: &ShufflePlan<'_>, stream: u64, idx: &'p mut Vec<u32>) -> Permutations<'p> {
    idx.clear();
    idx.resize(plan.permutation_len(), 0);
    plan.sample_keyed(&KeyedStream::new(&KEY, stream), idx).unwrap()
}

/// `w` permuted by `perms`.
fn permuted<T: Element>(plan: &ShufflePlan<'_>, perms: &Permutations<'_>, w: &[T]) -> Vec<T> {
    let mut out = w.to_vec();
    plan.apply(perms, &mut out, &mut vec![0.0; plan.apply_scratch_len()]).unwrap();
    out
}

// ---------------------------------------------------------------------------------------
// 1. Invariance of the forward pass

/// For three independent draws: the permuted weights differ from the original ones (in
/// more than a few coordinates) and compute the same function within
/// `INVARIANCE_TOL · max(1, max |out|)`.
fn assert_invariant(name: &str, model: &Model, seed: u64) {
    let mut rng = Rng(seed);
    let (w, x) = (model.weights(&mut rng), model.input(&mut rng));
    let base = model.forward(&w, &x);
    let tol = INVARIANCE_TOL * max_abs(&base).max(1.0);
    let plan = model.plan();
    let mut idx = Vec::new();
    for stream in 0..3 {
        let perms = draw(&plan, 1000 * seed + stream, &mut idx);
        let wp = permuted(&plan, &perms, &w);
        let moved = w.iter().zip(&wp).filter(|(a, b)| a != b).count();
        assert!(moved * 4 > plan.coverage().moved, "{name}: only {moved} coordinates moved");
        let err = max_diff(&model.forward(&wp, &x), &base);
        assert!(err <= tol, "{name} (draw {stream}): output changed by {err:e} > {tol:e}");
    }
}

#[test]
fn bert_separate_qkv_all_heads() {
    assert_invariant("BERT AllHeads", &Model::new(16, 5, false, &[BERT]), 1);
}

#[test]
fn bert_separate_qkv_per_kv_head_values() {
    let cfg = LayerCfg { values: ValueSharing::PerKvHead, ..BERT };
    assert_invariant("BERT PerKvHead", &Model::new(16, 5, false, &[cfg]), 2);
}

#[test]
fn gpt2_fused_conv1d_causal() {
    // Two layers in one buffer: one plan of four blocks.
    assert_invariant("GPT-2", &Model::new(16, 6, true, &[GPT2, GPT2]), 3);
    let per_kv = LayerCfg { values: ValueSharing::PerKvHead, ..GPT2 };
    assert_invariant("GPT-2 PerKvHead", &Model::new(16, 6, true, &[per_kv]), 4);
}

#[test]
fn grouped_and_multi_query_attention() {
    let gqa = LayerCfg { heads: 8, kv_heads: 2, dk: 4, dv: 4, ..BERT };
    for (i, values) in [ValueSharing::PerKvHead, ValueSharing::AllHeads].into_iter().enumerate() {
        let seed = 10 + 4 * i as u64;
        let cfg = LayerCfg { values, ..gqa };
        assert_invariant("GQA", &Model::new(12, 5, true, &[cfg]), seed);
        let mqa = LayerCfg { kv_heads: 1, ..cfg };
        assert_invariant("MQA", &Model::new(12, 5, false, &[mqa]), seed + 1);
        let fused = LayerCfg { layout: WeightLayout::InOut, fused: true, ..cfg };
        assert_invariant("GQA fused", &Model::new(12, 5, true, &[fused]), seed + 2);
        let fused_out_in = LayerCfg { layout: WeightLayout::OutIn, fused: true, ..cfg };
        assert_invariant("GQA fused OutIn", &Model::new(12, 5, false, &[fused_out_in]), seed + 3);
    }
}

#[test]
fn rotary_positions_keep_query_key_features() {
    for (i, rope) in [Rope::HalfSplit, Rope::Interleaved].into_iter().enumerate() {
        let seed = 20 + 3 * i as u64;
        let bert = LayerCfg { rope: Some(rope), ..BERT };
        assert_invariant("RoPE BERT", &Model::new(16, 6, true, &[bert]), seed);
        let gpt2 = LayerCfg { rope: Some(rope), kv_heads: 2, ..GPT2 };
        assert_invariant("RoPE fused GQA", &Model::new(16, 6, true, &[gpt2]), seed + 1);
        let llama = LayerCfg { rope: Some(rope), ..LLAMA };
        assert_invariant("LLaMA-like", &Model::new(12, 6, true, &[llama, llama]), seed + 2);
    }
}

/// NEGATIVE: the same RoPE models, shuffled by the plan that also moves query/key head
/// features (`PositionEncoding::Additive`): the output changes. Without RoPE (same
/// weights, same plan) it does not, so RoPE is what breaks it.
#[test]
fn rotary_breaks_under_query_key_feature_permutations() {
    for (i, cfg) in [
        LayerCfg { rope: Some(Rope::HalfSplit), ..BERT },
        LayerCfg { rope: Some(Rope::Interleaved), ..GPT2 },
        LLAMA,
    ]
    .into_iter()
    .enumerate()
    {
        let rope_model = Model::new(16, 6, false, &[cfg]);
        let plain_model = Model::new(16, 6, false, &[LayerCfg { rope: None, ..cfg }]);
        let additive: Vec<Block> = rope_model
            .blocks
            .iter()
            .map(|b| match *b {
                Block::Attention(a) => {
                    Block::Attention(AttentionBlock { positions: PositionEncoding::Additive, ..a })
                }
                mlp => mlp,
            })
            .collect();
        assert_eq!(additive, plain_model.blocks, "same buffer layout with and without RoPE");
        let plan = ShufflePlan::new(&additive, rope_model.len).unwrap();
        let mut rng = Rng(30 + i as u64);
        let (w, x) = (rope_model.weights(&mut rng), rope_model.input(&mut rng));
        let mut idx = Vec::new();
        let wp = permuted(&plan, &draw(&plan, 30 + i as u64, &mut idx), &w);

        let base = rope_model.forward(&w, &x);
        let change = max_diff(&rope_model.forward(&wp, &x), &base);
        assert!(change > BROKEN_MIN, "case {i}: RoPE output moved only {change:e}");

        let plain = plain_model.forward(&w, &x);
        let tol = INVARIANCE_TOL * max_abs(&plain).max(1.0);
        let err = max_diff(&plain_model.forward(&wp, &x), &plain);
        assert!(err <= tol, "case {i}: without RoPE the output moved {err:e}");
    }
}

#[test]
fn different_query_key_and_value_head_dims() {
    let cfg = LayerCfg { dk: 6, dv: 10, ..BERT };
    assert_invariant("dk 6, dv 10", &Model::new(16, 5, false, &[cfg]), 40);
    let per_kv = LayerCfg { values: ValueSharing::PerKvHead, kv_heads: 2, ..cfg };
    assert_invariant("dk 6, dv 10 GQA", &Model::new(16, 5, true, &[per_kv]), 41);
    let fused = LayerCfg { dk: 6, dv: 10, kv_heads: 2, ..GPT2 };
    assert_invariant("dk 6, dv 10 fused", &Model::new(16, 5, true, &[fused]), 42);
}

#[test]
fn gated_mlp_swiglu() {
    let cfg = LayerCfg { ffn: Ffn::SwiGlu, ..BERT };
    assert_invariant("SwiGLU OutIn", &Model::new(16, 5, false, &[cfg]), 50);
    let conv = LayerCfg { ffn: Ffn::SwiGlu, ..GPT2 };
    assert_invariant("SwiGLU InOut", &Model::new(16, 5, true, &[conv]), 51);
}

#[test]
fn heterogeneous_stack() {
    let layers = [
        BERT,
        LayerCfg { values: ValueSharing::PerKvHead, kv_heads: 2, dk: 6, dv: 10, ..GPT2 },
        LLAMA,
    ];
    assert_invariant("stack", &Model::new(16, 5, true, &layers), 60);
}

/// NEGATIVE (`docs/PAPERS.md` P2-15): Appendix B-A's `rearrange` draws a fresh `randperm` per
/// matrix. Rows of `up` (and its bias) from one draw and columns of `down` from an
/// independent draw change the output; taking both from one draw does not. The same for
/// query rows and key rows of attention heads.
#[test]
fn independent_draws_per_matrix_break_invariance() {
    let model = Model::new(16, 5, false, &[BERT]);
    let mut rng = Rng(70);
    let (w, x) = (model.weights(&mut rng), model.input(&mut rng));
    let base = model.forward(&w, &x);
    let tol = INVARIANCE_TOL * max_abs(&base).max(1.0);
    let layer = model.layers[0];
    let ranges = |l: &LinearLayout, with_bias: bool| {
        let weight = l.weight..l.weight + l.out_features * l.in_features;
        let bias = l.bias.filter(|_| with_bias).map(|b| b..b + l.out_features);
        core::iter::once(weight).chain(bias).collect::<Vec<_>>()
    };
    // `w`, with `from_a` ranges taken from a and `from_b` ranges from b.
    let mix = |a: &[f64], b: &[f64], from_a: &[Range<usize>], from_b: &[Range<usize>]| {
        let mut m = w.clone();
        for r in from_a {
            m[r.clone()].copy_from_slice(&a[r.clone()]);
        }
        for r in from_b {
            m[r.clone()].copy_from_slice(&b[r.clone()]);
        }
        m
    };

    let mlp_blocks = [Block::Mlp(layer.mlp)];
    let plan = ShufflePlan::new(&mlp_blocks, model.len).unwrap();
    let (mut ia, mut ib) = (Vec::new(), Vec::new());
    let wa = permuted(&plan, &draw(&plan, 71, &mut ia), &w);
    let wb = permuted(&plan, &draw(&plan, 72, &mut ib), &w);
    assert_ne!(ia, ib);
    let (up, down) = (ranges(&layer.mlp.up, true), ranges(&layer.mlp.down, false));
    let coupled = model.forward(&mix(&wa, &wb, &[up.clone(), down.clone()].concat(), &[]), &x);
    assert!(max_diff(&coupled, &base) <= tol);
    let broken = model.forward(&mix(&wa, &wb, &up, &down), &x);
    let change = max_diff(&broken, &base);
    assert!(change > BROKEN_MIN, "independent MLP draws moved the output only {change:e}");

    let attn_blocks = [Block::Attention(layer.attn)];
    let plan = ShufflePlan::new(&attn_blocks, model.len).unwrap();
    let wa = permuted(&plan, &draw(&plan, 73, &mut ia), &w);
    let wb = permuted(&plan, &draw(&plan, 74, &mut ib), &w);
    let Qkv::Separate { q, k, v } = layer.attn.qkv else { unreachable!() };
    let (q, k) = (ranges(&q, true), ranges(&k, true));
    let vo = [ranges(&v, true), ranges(&layer.attn.output, false)].concat();
    let coupled =
        model.forward(&mix(&wa, &wb, &[q.clone(), k.clone(), vo.clone()].concat(), &[]), &x);
    assert!(max_diff(&coupled, &base) <= tol);
    let broken = model.forward(&mix(&wa, &wb, &[q, vo].concat(), &k), &x);
    let change = max_diff(&broken, &base);
    assert!(change > BROKEN_MIN, "independent Q/K draws moved the output only {change:e}");
}

// ---------------------------------------------------------------------------------------
// 2. Index form, un-shuffling and optimizer state

/// The source of every buffer element under `perms` (`dst[j] = src[sources[j]]`), from the
/// index form of `docs/PAPERS.md` §2.3 (with its biases and its GQA constraints) and the
/// permutation order documented in `weight_shuffle::plan`.
fn expected_sources(model: &Model, perms: &[u32]) -> Vec<usize> {
    let mut src: Vec<usize> = (0..model.len).collect();
    // Moves the output units (rows of OutIn, columns of InOut, and the bias) by `f`.
    let out_units = |src: &mut [usize], l: &LinearLayout, f: &dyn Fn(usize) -> usize| {
        let (no, ni) = (l.out_features, l.in_features);
        for o in 0..no {
            for i in 0..ni {
                let at = |o| match l.layout {
                    WeightLayout::OutIn => l.weight + o * ni + i,
                    WeightLayout::InOut => l.weight + i * no + o,
                };
                src[at(o)] = at(f(o));
            }
            if let Some(b) = l.bias {
                src[b + o] = b + f(o);
            }
        }
    };
    // Moves the input features (columns of OutIn, rows of InOut) by `f`; the bias stays.
    let in_features = |src: &mut [usize], l: &LinearLayout, f: &dyn Fn(usize) -> usize| {
        let (no, ni) = (l.out_features, l.in_features);
        for o in 0..no {
            for i in 0..ni {
                let at = |i| match l.layout {
                    WeightLayout::OutIn => l.weight + o * ni + i,
                    WeightLayout::InOut => l.weight + i * no + o,
                };
                src[at(i)] = at(f(i));
            }
        }
    };
    let mut rest = perms;
    let mut take = |n: usize| {
        let (head, tail) = rest.split_at(n);
        rest = tail;
        head.iter().map(|&p| p as usize).collect::<Vec<_>>()
    };
    for l in &model.layers {
        let c = l.cfg;
        let (h, kv, dk, dv) = (c.heads, c.kv_heads, c.dk, c.dv);
        let group = h / kv;
        let qk: Vec<Vec<usize>> = match l.attn.positions {
            PositionEncoding::Additive => (0..kv).map(|_| take(dk)).collect(),
            PositionEncoding::Rotary => (0..kv).map(|_| (0..dk).collect()).collect(),
        };
        let vp: Vec<Vec<usize>> = match c.values {
            ValueSharing::AllHeads => vec![take(dv); kv],
            ValueSharing::PerKvHead => (0..kv).map(|_| take(dv)).collect(),
        };
        // π1 of the key/value head a query head reads; π2 of a key/value head.
        let q_map = |u: usize| (u / dk) * dk + qk[u / dk / group][u % dk];
        let k_map = |u: usize| (u / dk) * dk + qk[u / dk][u % dk];
        let v_map = |u: usize| (u / dv) * dv + vp[u / dv][u % dv];
        let o_map = |u: usize| (u / dv) * dv + vp[u / dv / group][u % dv];
        match l.attn.qkv {
            Qkv::Separate { q, k, v } => {
                out_units(&mut src, &q, &q_map);
                out_units(&mut src, &k, &k_map);
                out_units(&mut src, &v, &v_map);
            }
            Qkv::Fused(f) => {
                let (qw, kw) = (h * dk, kv * dk);
                let fused = |u: usize| match u {
                    u if u < qw => q_map(u),
                    u if u < qw + kw => qw + k_map(u - qw),
                    u => qw + kw + v_map(u - qw - kw),
                };
                out_units(&mut src, &f, &fused);
            }
        }
        in_features(&mut src, &l.attn.output, &o_map);
        let pi = take(c.d_ff);
        let hidden = |u: usize| pi[u];
        out_units(&mut src, &l.mlp.up, &hidden);
        if let Some(g) = l.mlp.gate {
            out_units(&mut src, &g, &hidden);
        }
        in_features(&mut src, &l.mlp.down, &hidden);
    }
    assert!(rest.is_empty(), "the plan's permutations were not all used");
    src
}

/// Every stack used by the index, round-trip and gradient tests below.
fn stacks() -> Vec<Model> {
    vec![
        Model::new(16, 5, false, &[BERT, GPT2]),
        Model::new(
            12,
            5,
            true,
            &[
                LayerCfg {
                    heads: 6,
                    kv_heads: 3,
                    dk: 6,
                    dv: 10,
                    values: ValueSharing::PerKvHead,
                    ..GPT2
                },
                LayerCfg { rope: Some(Rope::Interleaved), kv_heads: 1, ..BERT },
                LLAMA,
                LayerCfg { fused: true, kv_heads: 2, ..LLAMA },
            ],
        ),
    ]
}

/// `apply` on `i as f64` (an optimizer-state buffer) moves exactly the coordinates the
/// documented index form says, and moves the weights the same way; fixed points stay.
#[test]
fn apply_is_the_documented_index_form_and_moves_optimizer_state_like_weights() {
    for (m, model) in stacks().iter().enumerate() {
        let plan = model.plan();
        let mut rng = Rng(80 + m as u64);
        let w = model.weights(&mut rng);
        let mut idx = Vec::new();
        for stream in 0..2 {
            let perms = draw(&plan, 80 + stream, &mut idx);
            let positions: Vec<f64> = (0..model.len).map(|i| i as f64).collect();
            let moved = permuted(&plan, &perms, &positions);
            let expected = expected_sources(model, perms.as_slice());
            let got: Vec<usize> = moved.iter().map(|&p| p as usize).collect();
            assert_eq!(got, expected, "model {m}: sources differ from the documented index form");
            // A bijection, not the identity.
            let mut sorted = got.clone();
            sorted.sort_unstable();
            assert!(sorted.iter().enumerate().all(|(i, &s)| i == s));
            assert!(got.iter().enumerate().filter(|&(i, &s)| i != s).count() > model.len / 2);
            // The weights follow the same map (the random weights are all distinct).
            let wp = permuted(&plan, &perms, &w);
            assert!(wp.iter().zip(&got).all(|(a, &s)| a.to_bits() == w[s].to_bits()));
            // Fixed points: the "embeddings", the LayerNorms, output/down biases, the head.
            let mut fixed: Vec<usize> = (0..7).chain(model.len - 5..model.len).collect();
            for l in &model.layers {
                for at in l.ln.into_iter().flatten() {
                    fixed.extend(at..at + 2 * model.d_model);
                }
                for b in [l.attn.output.bias, l.mlp.down.bias].into_iter().flatten() {
                    fixed.extend(b..b + model.d_model);
                }
            }
            assert!(fixed.iter().all(|&i| got[i] == i), "model {m}: a fixed point moved");
        }
    }
}

/// Applies `perms`, then its inverse, to `buf`: the first moves bits, the second restores
/// every bit; the identity changes nothing.
fn assert_round_trip<T: Element>(
    name: &str,
    plan: &ShufflePlan<'_>,
    buf: &[T],
    bits: impl Fn(T) -> u64,
) {
    let same = |a: &[T], b: &[T]| a.iter().zip(b).all(|(&x, &y)| bits(x) == bits(y));
    let mut scratch = vec![0.0; plan.apply_scratch_len()];
    let (mut idx, mut inv_idx, mut id_idx) =
        (Vec::new(), vec![0; plan.permutation_len()], vec![0; plan.permutation_len()]);
    for stream in 0..3 {
        let perms = draw(plan, 90 + stream, &mut idx);
        let inverse = plan.invert(&perms, &mut inv_idx).unwrap();
        let mut b = buf.to_vec();
        plan.apply(&perms, &mut b, &mut scratch).unwrap();
        assert!(!same(&b, buf), "{name}: apply changed nothing");
        plan.apply(&inverse, &mut b, &mut scratch).unwrap();
        assert!(same(&b, buf), "{name}: apply(invert(p)) after apply(p) is not the identity");
        // And in the other order.
        plan.apply(&inverse, &mut b, &mut scratch).unwrap();
        plan.apply(&perms, &mut b, &mut scratch).unwrap();
        assert!(same(&b, buf), "{name}: apply(p) after apply(invert(p)) is not the identity");
    }
    let identity = plan.identity(&mut id_idx).unwrap();
    let mut b = buf.to_vec();
    plan.apply(&identity, &mut b, &mut scratch).unwrap();
    assert!(same(&b, buf), "{name}: the identity changed the buffer");
}

/// Random values of a type plus its special values (±0, ±∞, subnormals, extremes).
fn values<T: Copy>(n: usize, rng: &mut Rng, from: impl Fn(f64) -> T, special: &[T]) -> Vec<T> {
    (0..n)
        .map(
            |i| {
                if i % 7 == 3 { special[(i / 7) % special.len()] } else { from(8.0 * rng.normal()) }
            },
        )
        .collect()
}

#[test]
fn unshuffling_restores_every_element_type_bit_exactly() {
    for (m, model) in stacks().iter().enumerate() {
        let plan = model.plan();
        let n = model.len;
        let mut rng = Rng(90 + m as u64);
        let f64s = values(
            n,
            &mut rng,
            |x| x,
            &[0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, 5e-324, -f64::MIN_POSITIVE, f64::MAX],
        );
        assert_round_trip("f64", &plan, &f64s, f64::to_bits);
        let f32s = values(
            n,
            &mut rng,
            |x| x as f32,
            &[-0.0, f32::INFINITY, 1e-45, f32::MIN, f32::MIN_POSITIVE],
        );
        assert_round_trip("f32", &plan, &f32s, |x| u64::from(x.to_bits()));
        let f16s = values(
            n,
            &mut rng,
            f16::from_f64,
            &[f16::NEG_ZERO, f16::INFINITY, f16::from_bits(1), f16::MAX, f16::MIN_POSITIVE],
        );
        assert_round_trip("f16", &plan, &f16s, |x| u64::from(x.to_bits()));
        let bf16s = values(
            n,
            &mut rng,
            bf16::from_f64,
            &[bf16::NEG_ZERO, bf16::NEG_INFINITY, bf16::from_bits(1), bf16::MAX],
        );
        assert_round_trip("bf16", &plan, &bf16s, |x| u64::from(x.to_bits()));
    }
}

/// `apply` on a buffer holding NaNs with payloads: a permutation must move the bits. With
/// `perms = [1, 2, 0]` on a 3-unit MLP (`up` 3×1 at 0, `down` 1×3 at 3), element `j` of
/// each tensor receives element `perms[j]`.
fn assert_nan_bits_move<T: Element>(name: &str, vals: [T; 3], bits: impl Fn(T) -> u64) {
    let blocks = [mlp_blocks(3, 0)];
    let plan = ShufflePlan::new(&blocks, 6).unwrap();
    let mut idx = [1u32, 2, 0];
    let perms = plan.check(&mut idx).unwrap();
    let mut buf = [vals[0], vals[1], vals[2], vals[2], vals[0], vals[1]];
    let before = buf;
    plan.apply(&perms, &mut buf, &mut [0.0; 3]).unwrap();
    for t in 0..2 {
        for j in 0..3 {
            let (got, want) = (bits(buf[3 * t + j]), bits(before[3 * t + [1, 2, 0][j]]));
            assert_eq!(got, want, "{name}: tensor {t} position {j}: {got:#x} instead of {want:#x}");
        }
    }
}

#[test]
fn quiet_nan_payloads_move_bit_exactly() {
    let f64q = [f64::from_bits(0x7ff8_0000_0000_1234), f64::from_bits(0xfff8_dead_0000_0001), 1.5];
    assert_nan_bits_move("f64", f64q, f64::to_bits);
    let f32q = [f32::from_bits(0x7fc0_1234), f32::from_bits(0xffc0_0001), 1.5];
    assert_nan_bits_move("f32", f32q, |x| u64::from(x.to_bits()));
    let f16q = [f16::from_bits(0x7e55), f16::from_bits(0xfe01), f16::ONE];
    assert_nan_bits_move("f16", f16q, |x| u64::from(x.to_bits()));
    let bf16q = [bf16::from_bits(0x7fc5), bf16::from_bits(0xffc1), bf16::ONE];
    assert_nan_bits_move("bf16", bf16q, |x| u64::from(x.to_bits()));
}

/// `apply` passes values through `f64` and documents that a signalling NaN comes back quiet:
/// the narrow-to-f64 conversion sets the quiet bit and keeps the rest of the payload (f32
/// `0x7f800001` → `0x7fc00001`, f16 `0x7c01` → `0x7e01`, bf16 `0x7f81` → `0x7fc1`); f64
/// buffers move bit-exactly. No trained weight or optimizer moment is a signalling NaN.
#[test]
fn signalling_nans_come_back_quiet_with_their_payload() {
    let f64s = [f64::from_bits(0x7ff0_0000_0000_0001), 2.0, 3.0];
    assert_nan_bits_move("f64", f64s, f64::to_bits);
    let quiet =
        |bits: u64, quiet_bit: u64| move |x: u64| if x == bits { bits | quiet_bit } else { x };
    let q32 = quiet(0x7f80_0001, 0x0040_0000);
    assert_nan_bits_move("f32", [f32::from_bits(0x7f80_0001), 2.0, 3.0], |x| {
        q32(u64::from(x.to_bits()))
    });
    let q16 = quiet(0x7c01, 0x0200);
    assert_nan_bits_move("f16", [f16::from_bits(0x7c01), f16::ONE, f16::ONE], |x| {
        q16(u64::from(x.to_bits()))
    });
    let qb16 = quiet(0x7f81, 0x0040);
    assert_nan_bits_move("bf16", [bf16::from_bits(0x7f81), bf16::ONE, bf16::ONE], |x| {
        qb16(u64::from(x.to_bits()))
    });
}

// ---------------------------------------------------------------------------------------
// 3. Gradient equivariance (docs/PAPERS.md P2-AC9)

/// `Σ (out − target)²`.
fn loss(model: &Model, w: &[f64], x: &[f64], target: &[f64]) -> f64 {
    model.forward(w, x).iter().zip(target).map(|(o, t)| (o - t) * (o - t)).sum()
}

/// Central differences, `h = 1e-6`.
fn numeric_gradient(model: &Model, w: &[f64], x: &[f64], target: &[f64]) -> Vec<f64> {
    const H: f64 = 1e-6;
    let mut w = w.to_vec();
    let mut g = vec![0.0; w.len()];
    for (i, gi) in g.iter_mut().enumerate() {
        let w0 = w[i];
        w[i] = w0 + H;
        let up = loss(model, &w, x, target);
        w[i] = w0 - H;
        let down = loss(model, &w, x, target);
        w[i] = w0;
        *gi = (up - down) / (2.0 * H);
    }
    g
}

#[test]
fn gradients_are_permuted_like_the_weights() {
    // d_model 6, 2 heads of 3, MLP hidden 5: 244 to 275 parameters per model.
    let tiny = LayerCfg { heads: 2, kv_heads: 2, dk: 3, dv: 3, d_ff: 5, ..BERT };
    let models = [
        Model::new(6, 3, false, &[LayerCfg { values: ValueSharing::PerKvHead, ..tiny }]),
        Model::new(6, 3, true, &[LayerCfg { layout: WeightLayout::InOut, fused: true, ..tiny }]),
        Model::new(
            6,
            3,
            true,
            &[LayerCfg { kv_heads: 1, ffn: Ffn::SwiGlu, layer_norm: false, ..tiny }],
        ),
    ];
    for (m, model) in models.iter().enumerate() {
        assert!(model.len < 300, "{}", model.len);
        let plan = model.plan();
        let mut rng = Rng(100 + m as u64);
        let (w, x) = (model.weights(&mut rng), model.input(&mut rng));
        let target: Vec<f64> = (0..x.len()).map(|_| rng.uniform()).collect();
        let mut idx = Vec::new();
        let perms = draw(&plan, 100 + m as u64, &mut idx);
        let g = numeric_gradient(model, &w, &x, &target);
        let g_of_permuted = numeric_gradient(model, &permuted(&plan, &perms, &w), &x, &target);
        let permuted_g = permuted(&plan, &perms, &g);
        assert!(max_abs(&g) > 1e-2, "model {m}: vanishing gradient");
        assert!(max_diff(&permuted_g, &g) > 1e-3, "model {m}: P(grad) = grad, vacuous check");
        let err = max_diff(&g_of_permuted, &permuted_g);
        assert!(err <= 1e-6, "model {m}: |grad(P(W)) - P(grad(W))| = {err:e}");
    }
}

// ---------------------------------------------------------------------------------------
// 4. Sampling (docs/PAPERS.md §2.3, "Sampling"; P2-AC9)

/// Lehmer-code rank of a permutation of `[0, n)`: a bijection onto `[0, n!)`.
fn rank(p: &[u32]) -> usize {
    let n = p.len();
    let mut r = 0;
    for i in 0..n {
        let smaller_after = p[i + 1..].iter().filter(|&&x| x < p[i]).count();
        r = r * (n - i) + smaller_after;
    }
    r
}

/// A plan whose only permutation is of `hidden` units.
fn mlp_blocks(hidden: usize, at: usize) -> Block {
    Block::Mlp(MlpBlock {
        up: LinearLayout::new(at, hidden, 1, WeightLayout::OutIn),
        gate: None,
        down: LinearLayout::new(at + hidden, 1, hidden, WeightLayout::OutIn),
    })
}

/// Upper `1e-6` quantile of χ²₂₃: 70.5496, by bisection on the regularized upper
/// incomplete gamma function (computed offline; `chi_square_sf` and Wilson–Hilferty
/// cross-check it below). The often-quoted 64.0 is the `1e-5` quantile (63.97).
const CHI2_23_AT_1E6: f64 = 70.5496;

/// Upper `1e-6` quantile of the standard normal (`normal_sf` checks it below).
const Z_1E6: f64 = 4.753_424;

/// Pearson's X² against the uniform law on `counts.len()` cells.
fn pearson_uniform(counts: &[u64]) -> f64 {
    let n: u64 = counts.iter().sum();
    let e = n as f64 / counts.len() as f64;
    counts.iter().map(|&o| (o as f64 - e) * (o as f64 - e) / e).sum()
}

#[test]
fn chi_square_critical_value_reference() {
    assert!((normal_sf(Z_1E6) / 1e-6 - 1.0).abs() < 1e-5);
    assert!((chi_square_sf(CHI2_23_AT_1E6, 23.0) / ALPHA - 1.0).abs() < 1e-3);
    // Wilson–Hilferty: k (1 − 2/(9k) + z √(2/(9k)))³ ≈ 71.22, 1% above the exact value.
    let k = 23.0f64;
    let a = 2.0 / (9.0 * k);
    let wh = k * (1.0 - a + Z_1E6 * a.sqrt()).powi(3);
    assert!((wh / CHI2_23_AT_1E6 - 1.0).abs() < 0.015, "Wilson–Hilferty gives {wh}");
}

/// 10⁶ draws of `S_4` from one ChaCha20 generator, and 10⁶ keyed draws on distinct
/// stream ids (about 2 s together in a debug build): χ² over 24 cells at `α = 1e-6`.
#[test]
fn sampling_is_uniform_over_s4() {
    let blocks = [mlp_blocks(4, 0)];
    let plan = ShufflePlan::new(&blocks, 8).unwrap();
    assert_eq!(plan.permutation_len(), 4);
    let mut idx = [0u32; 4];

    let mut counts = [0u64; 24];
    let mut rng = ChaCha20Rng::from_seed([0x24; 32]);
    for _ in 0..1_000_000 {
        counts[rank(plan.sample(&mut rng, &mut idx).unwrap().as_slice())] += 1;
    }
    let x2 = pearson_uniform(&counts);
    assert!(x2 < CHI2_23_AT_1E6, "RNG draws: X² = {x2} over S_4");
    let outcome = chi_square_gof(&counts, &[1.0 / 24.0; 24]);
    assert!(outcome.accepts() && outcome.df == 23, "{outcome:?}");

    let mut counts = [0u64; 24];
    for stream in 0..1_000_000u64 {
        let s = KeyedStream::new(&KEY, stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        counts[rank(plan.sample_keyed(&s, &mut idx).unwrap().as_slice())] += 1;
    }
    let x2 = pearson_uniform(&counts);
    assert!(x2 < CHI2_23_AT_1E6, "keyed draws: X² = {x2} over S_4");

    // Power: the same statistic rejects the classic "swap with any index" shuffle
    // (4⁴ = 256 equally likely paths onto 24 permutations) with 2·10⁵ draws.
    let mut counts = [0u64; 24];
    for _ in 0..200_000 {
        let mut p = [0u32, 1, 2, 3];
        for i in 0..4 {
            p.swap(i, (rng.next_u32() % 4) as usize);
        }
        counts[rank(&p)] += 1;
    }
    let x2 = pearson_uniform(&counts);
    assert!(x2 > 10.0 * CHI2_23_AT_1E6, "the biased shuffle gave X² = {x2}");
}

/// Two MLP blocks: the factors are independent and uniform (χ² over the 36 cells of
/// `S_3 × S_3`, 3.6·10⁵ draws, critical value from the support toolkit).
#[test]
fn factors_are_independent() {
    let blocks = [mlp_blocks(3, 0), mlp_blocks(3, 6)];
    let plan = ShufflePlan::new(&blocks, 12).unwrap();
    let mut idx = [0u32; 6];
    let mut counts = [0u64; 36];
    let mut rng = ChaCha20Rng::from_seed([0x36; 32]);
    for _ in 0..360_000 {
        let p = plan.sample(&mut rng, &mut idx).unwrap();
        let p = p.as_slice();
        counts[rank(&p[..3]) * 6 + rank(&p[3..])] += 1;
    }
    let outcome = chi_square_gof(&counts, &[1.0 / 36.0; 36]);
    assert!(outcome.accepts() && outcome.df == 35, "{outcome:?}");
}

/// A keyed draw equals the RNG draw on a `ChaCha20Rng` of the same key and stream at word
/// 0, for a multi-block plan (the keyed draw chains word positions across slots); keyed
/// draws replay.
#[test]
fn keyed_draw_equals_the_generator_at_word_zero() {
    for model in stacks() {
        let plan = model.plan();
        let (mut a, mut b) =
            (vec![0u32; plan.permutation_len()], vec![0u32; plan.permutation_len()]);
        for stream in [0u64, 1, 7, 1 << 40, u64::MAX] {
            let s = KeyedStream::new(&KEY, stream);
            let keyed = plan.sample_keyed(&s, &mut a).unwrap().as_slice().to_vec();
            assert_eq!(plan.sample_keyed(&s, &mut b).unwrap().as_slice(), &keyed[..]);
            let mut rng = ChaCha20Rng::from_seed(*KEY.expose_bytes());
            rng.set_stream(stream);
            rng.set_word_pos(0);
            assert_eq!(
                plan.sample(&mut rng, &mut b).unwrap().as_slice(),
                &keyed[..],
                "stream {stream}"
            );
            let other = KeyedStream::new(&KEY, stream ^ 1);
            assert_ne!(plan.sample_keyed(&other, &mut b).unwrap().as_slice(), &keyed[..]);
        }
    }
}

// ---------------------------------------------------------------------------------------
// 5. Coverage and orbits (docs/PAPERS.md §2.3, P2-5, P2-17)

/// One ViT-B/16 encoder layer (pre-LN): LN1, Q/K/V/O with biases, LN2, MLP with biases.
fn vit_layer(a: &mut Alloc) -> [Block; 2] {
    let (dm, dff, heads, d) = (768, 3072, 12, 64);
    let lin = |a: &mut Alloc, o, i| a.linear(o, i, WeightLayout::OutIn, true);
    a.take(2 * dm);
    let (q, k, v) = (lin(a, dm, dm), lin(a, dm, dm), lin(a, dm, dm));
    let output = lin(a, dm, dm);
    a.take(2 * dm);
    let (up, down) = (lin(a, dff, dm), lin(a, dm, dff));
    [
        Block::Attention(AttentionBlock {
            qkv: Qkv::Separate { q, k, v },
            output,
            heads,
            kv_heads: heads,
            qk_head_dim: d,
            v_head_dim: d,
            positions: PositionEncoding::Additive,
            values: ValueSharing::AllHeads,
        }),
        Block::Mlp(MlpBlock { up, gate: None, down }),
    ]
}

#[test]
fn vit_b16_coverage() {
    let (dm, dff) = (768usize, 3072usize);
    // 4·dm² + 3·dm + 2·dm·dff + dff (docs/PAPERS.md §2.3); the layer has 7,087,872 parameters.
    let moved = 4 * dm * dm + 3 * dm + 2 * dm * dff + dff;
    assert_eq!(moved, 7_083_264);
    let mut a = Alloc(0);
    let layer = vit_layer(&mut a);
    assert_eq!(a.0, 7_087_872);
    let plan = ShufflePlan::new(&layer, a.0).unwrap();
    assert_eq!(plan.coverage(), Coverage { moved, total: 7_087_872 });
    assert!((plan.coverage().fraction() - 0.99935).abs() < 1e-5);
    assert_eq!(plan.min_orbit(), 1); // LayerNorms and the O/down biases are fixed points
    assert_eq!(plan.permutation_len(), 12 * 64 + 64 + 3072);

    // Twelve layers: 84,999,168 moved ("85.0M", docs/PAPERS.md §2.3).
    let mut a = Alloc(0);
    let blocks: Vec<Block> = (0..12).flat_map(|_| vit_layer(&mut a)).collect();
    let plan = ShufflePlan::new(&blocks, a.0).unwrap();
    assert_eq!(plan.coverage().moved, 84_999_168);
    assert_eq!(plan.coverage().total, 12 * 7_087_872);
}

#[test]
fn min_orbit_and_coverage_of_small_plans() {
    // A plain MLP whose buffer holds only its permuted tensors: every orbit is `hidden`.
    let (d, h) = (3, 5);
    for up_bias in [false, true] {
        let mut a = Alloc(0);
        let up = a.linear(h, d, WeightLayout::OutIn, up_bias);
        let down = a.linear(d, h, WeightLayout::InOut, false);
        let blocks = [Block::Mlp(MlpBlock { up, gate: None, down })];
        let plan = ShufflePlan::new(&blocks, a.0).unwrap();
        assert_eq!(plan.coverage(), Coverage { moved: a.0, total: a.0 });
        assert_eq!(plan.min_orbit(), h);
        // One extra element (a down bias, say) is a fixed point.
        assert_eq!(ShufflePlan::new(&blocks, a.0 + 1).unwrap().min_orbit(), 1);
    }

    // Attention without an output bias, dk 6 / dv 10: the smallest orbit is dk.
    let cfg = LayerCfg { dk: 6, dv: 10, kv_heads: 2, bias: false, ..BERT };
    let model = Model::new(16, 1, false, &[cfg]);
    let attn = [model.blocks[0]];
    let Qkv::Separate { q, .. } = model.layers[0].attn.qkv else { unreachable!() };
    let (start, end) = (q.weight, model.layers[0].attn.output.weight + 16 * 40);
    let shifted = |b: &Block| match *b {
        Block::Attention(mut a) => {
            let shift = |l: &mut LinearLayout| l.weight -= start;
            if let Qkv::Separate { q, k, v } = &mut a.qkv {
                [q, k, v].into_iter().for_each(shift);
            }
            shift(&mut a.output);
            Block::Attention(a)
        }
        mlp => mlp,
    };
    let tight = [shifted(&attn[0])];
    let plan = ShufflePlan::new(&tight, end - start).unwrap();
    assert_eq!(plan.coverage().moved, end - start);
    assert_eq!(plan.min_orbit(), 6);

    // qk_head_dim 1: query/key "permutations" are trivial, so Q/K are not covered.
    let one = Model::new(16, 1, false, &[LayerCfg { dk: 1, ..BERT }]);
    let c = one.layers[0].cfg;
    let plan = ShufflePlan::new(&one.blocks[..1], one.len).unwrap();
    let v_and_o = (c.kv_heads * c.dv) * 16 + c.kv_heads * c.dv + 16 * c.heads * c.dv;
    assert_eq!(plan.coverage().moved, v_and_o);
    assert_eq!(plan.min_orbit(), 1);
}

/// Under RoPE the plan covers V (weight and bias) and the output projection's weight only;
/// under additive positions Q and K too. Separate and fused, MHA and GQA.
#[test]
fn rotary_coverage_excludes_query_and_key() {
    let dm = 16;
    for base in [
        BERT,
        GPT2,
        LayerCfg { kv_heads: 2, ..BERT },
        LayerCfg { kv_heads: 2, dk: 6, dv: 10, ..GPT2 },
    ] {
        let (h, kv, dk, dv) = (base.heads, base.kv_heads, base.dk, base.dv);
        let v_and_o = kv * dv * dm + kv * dv + dm * h * dv;
        let q_and_k = (h + kv) * dk * dm + (h + kv) * dk;
        for (rope, moved) in [(None, v_and_o + q_and_k), (Some(Rope::HalfSplit), v_and_o)] {
            let model = Model::new(dm, 1, false, &[LayerCfg { rope, ..base }]);
            let plan = ShufflePlan::new(&model.blocks[..1], model.len).unwrap();
            assert_eq!(plan.coverage().moved, moved, "{base:?} rope {rope:?}");
            let perm_len = if rope.is_some() { 0 } else { kv * dk };
            let v_perms = match base.values {
                ValueSharing::AllHeads => dv,
                ValueSharing::PerKvHead => kv * dv,
            };
            assert_eq!(plan.permutation_len(), perm_len + v_perms);
        }
    }
}

// ---------------------------------------------------------------------------------------
// 6. Bad input

fn lin(at: usize, out: usize, inp: usize) -> LinearLayout {
    LinearLayout::new(at, out, inp, WeightLayout::OutIn)
}

/// An attention block at 0 with `d_model = 8`, heads 4, kv_heads 2, dk 2, dv 3, separate
/// Q/K/V and biases: 388 elements.
fn small_attention() -> AttentionBlock {
    AttentionBlock {
        qkv: Qkv::Separate {
            q: lin(0, 8, 8).with_bias(64),
            k: lin(72, 4, 8).with_bias(104),
            v: lin(108, 6, 8).with_bias(156),
        },
        output: lin(162, 8, 12).with_bias(258),
        heads: 4,
        kv_heads: 2,
        qk_head_dim: 2,
        v_head_dim: 3,
        positions: PositionEncoding::Additive,
        values: ValueSharing::PerKvHead,
    }
}

const SMALL_LEN: usize = 266;

/// An MLP `8 → 5 → 8` starting at `at`, with an up bias: 85 elements.
fn small_mlp(at: usize) -> MlpBlock {
    MlpBlock { up: lin(at, 5, 8).with_bias(at + 40), gate: None, down: lin(at + 45, 8, 5) }
}

fn plan_err(blocks: &[Block], len: usize) -> Error {
    ShufflePlan::new(blocks, len).expect_err("the plan was accepted")
}

#[test]
fn plan_construction_rejects_bad_descriptors() {
    let a = small_attention();
    let m = small_mlp(SMALL_LEN);
    let len = SMALL_LEN + 85;
    assert!(ShufflePlan::new(&[Block::Attention(a), Block::Mlp(m)], len).is_ok());
    let att = |a: AttentionBlock| [Block::Attention(a)];
    let mlp = |m: MlpBlock| [Block::Mlp(m)];
    let sep = |q, k, v| Qkv::Separate { q, k, v };
    let Qkv::Separate { q, k, v } = a.qkv else { unreachable!() };

    // Descriptors past the end of the buffer.
    for (blocks, len) in [
        (vec![Block::Attention(a)], SMALL_LEN - 1),
        (mlp(m).to_vec(), len - 1),
        (mlp(MlpBlock { up: m.up.with_bias(len - 4), ..m }).to_vec(), len), // bias past the end
        (att(AttentionBlock { output: a.output.with_bias(len), ..a }).to_vec(), len),
    ] {
        assert!(matches!(plan_err(&blocks, len), Error::BufferTooShort { .. }), "{blocks:?}");
    }

    // Inconsistent shapes.
    let gate_out = MlpBlock { gate: Some(lin(len, 4, 8)), ..m };
    let gate_in = MlpBlock { gate: Some(lin(len, 5, 7)), ..m };
    for blocks in [
        att(AttentionBlock { qkv: sep(lin(0, 6, 8), k, v), ..a }), // q out ≠ heads·dk
        att(AttentionBlock { qkv: sep(q, lin(72, 2, 8), v), ..a }), // k out ≠ kv·dk
        att(AttentionBlock { qkv: sep(q, k, lin(108, 3, 8)), ..a }), // v out ≠ kv·dv
        att(AttentionBlock { qkv: sep(q, lin(72, 4, 7), v), ..a }), // k in ≠ q in
        att(AttentionBlock { qkv: sep(q, k, lin(108, 6, 9)), ..a }), // v in ≠ q in
        att(AttentionBlock { output: lin(162, 8, 8), ..a }),       // output in ≠ heads·dv
        att(AttentionBlock { v_head_dim: 2, ..a }),                // v out and output in
        att(AttentionBlock { qkv: Qkv::Fused(lin(0, 8 + 4 + 4, 8)), ..a }), // fused ≠ 8 + 4 + 6
        mlp(MlpBlock { down: lin(m.down.weight, 8, 4), ..m }),     // down in ≠ hidden
        mlp(gate_out),                                             // gate out ≠ hidden
        mlp(gate_in),                                              // gate in ≠ up in
    ] {
        let e = ShufflePlan::new(&blocks, len + 40).expect_err("accepted");
        assert!(matches!(e, Error::ShapeMismatch { .. }), "{blocks:?}: {e:?}");
    }

    // Zero or oversized extents, kv_heads not dividing heads, empty plans.
    for blocks in [
        att(AttentionBlock { kv_heads: 3, ..a }),
        att(AttentionBlock { heads: 0, ..a }),
        att(AttentionBlock { kv_heads: 0, ..a }),
        att(AttentionBlock { qk_head_dim: 0, ..a }),
        att(AttentionBlock { v_head_dim: 0, ..a }),
        att(AttentionBlock { heads: 1 << 31, kv_heads: 1, ..a }),
        mlp(MlpBlock { up: lin(0, 0, 8), down: lin(0, 8, 0), gate: None }),
        mlp(MlpBlock { up: lin(0, 5, 0), ..m }),
        mlp(MlpBlock { up: lin(0, 1 << 31, 1), down: lin(0, 1, 1 << 31), gate: None }),
    ] {
        assert!(matches!(plan_err(&blocks, len), Error::OutOfRange { .. }), "{blocks:?}");
    }
    assert!(matches!(plan_err(&[], len), Error::OutOfRange { .. }));
    assert!(matches!(plan_err(&mlp(m), 0), Error::OutOfRange { .. }));

    // Overlapping moved tensors (tied weights): two blocks sharing a tensor, and
    // overlaps inside one block.
    let shares_up = MlpBlock { down: lin(len + 5, 8, 5), ..m };
    for (blocks, l) in [
        (vec![Block::Mlp(m), Block::Mlp(shares_up)], len + 50),
        (
            vec![
                Block::Attention(a),
                Block::Mlp(MlpBlock { up: lin(108, 6, 8), down: lin(300, 8, 6), gate: None }),
            ],
            400,
        ),
        (vec![Block::Mlp(MlpBlock { down: lin(m.up.weight + 39, 8, 5), ..m })], len),
        (vec![Block::Mlp(MlpBlock { gate: Some(m.up), ..m })], len),
        (att(AttentionBlock { qkv: sep(q, lin(60, 4, 8), v), ..a }).to_vec(), len), // K inside Q
        (att(AttentionBlock { output: lin(100, 8, 12), ..a }).to_vec(), len),
    ] {
        let e = plan_err(&blocks, l);
        assert!(matches!(e, Error::OutOfRange { .. }), "{blocks:?}: {e:?}");
    }

    // Offsets whose ends overflow usize.
    for blocks in [
        mlp(MlpBlock { up: lin(usize::MAX - 10, 5, 8), ..m }),
        mlp(MlpBlock { up: m.up.with_bias(usize::MAX - 2), ..m }),
        att(AttentionBlock { output: lin(usize::MAX, 8, 12), ..a }),
    ] {
        assert!(matches!(plan_err(&blocks, len), Error::SizeOverflow { .. }), "{blocks:?}");
    }
}

#[test]
fn permutation_and_buffer_errors_leave_everything_unchanged() {
    let blocks = [Block::Attention(small_attention()), Block::Mlp(small_mlp(SMALL_LEN))];
    let len = SMALL_LEN + 85;
    let plan = ShufflePlan::new(&blocks, len).unwrap();
    // PerKvHead: 2 key/value heads × (dk 2 + dv 3), then 5 hidden units.
    let n = plan.permutation_len();
    assert_eq!(n, 2 * 2 + 2 * 3 + 5);
    let s = KeyedStream::new(&KEY, 5);

    // Wrong permutation lengths, for every entry point that takes one.
    for bad in [n - 1, n + 1, 0] {
        let mut out = vec![7u32; bad];
        let shape =
            |r: Result<Permutations<'_>, Error>| matches!(r, Err(Error::ShapeMismatch { .. }));
        assert!(shape(plan.sample_keyed(&s, &mut out)));
        assert!(shape(plan.sample(&mut ChaCha20Rng::from_seed([1; 32]), &mut out)));
        assert!(shape(plan.check(&mut out)));
        assert!(shape(plan.identity(&mut out)));
        let mut good = vec![0u32; n];
        let p = plan.sample_keyed(&s, &mut good).unwrap();
        assert!(shape(plan.invert(&p, &mut out)));
        assert!(out.iter().all(|&x| x == 7), "an output was written on error");
    }

    // Caller permutations that are not bijections, slot by slot: rejected, unchanged.
    let mut good = vec![0u32; n];
    let valid = plan.sample_keyed(&s, &mut good).unwrap().as_slice().to_vec();
    assert!(plan.check(&mut valid.clone()).is_ok());
    let slots = [0..2, 2..4, 4..7, 7..10, 10..15];
    for (i, slot) in slots.iter().enumerate() {
        let len = slot.len() as u32;
        for corrupt in [
            |p: &mut [u32], _: u32| p[1] = p[0],    // repeated index
            |p: &mut [u32], n: u32| p[0] = n,       // index = slot length
            |p: &mut [u32], _: u32| p[1] = 1 << 20, // far out of range
        ] {
            let mut bad = valid.clone();
            corrupt(&mut bad[slot.clone()], len);
            let before = bad.clone();
            let e = plan.check(&mut bad).map(|_| ()).expect_err("accepted");
            assert!(matches!(e, Error::OutOfRange { .. }), "slot {i}: {e:?}");
            assert_eq!(bad, before, "slot {i}: check modified the permutations");
        }
    }

    // Permutations of a plan with another shape but the same length (an MLP of 15 hidden
    // units): refused by apply and invert; a plan of the same shape accepts them.
    let other_blocks = [mlp_blocks(15, 0)];
    let other = ShufflePlan::new(&other_blocks, 30).unwrap();
    assert_eq!(other.permutation_len(), n);
    let mut foreign_idx = vec![0u32; n];
    let foreign = other.sample_keyed(&s, &mut foreign_idx).unwrap();
    let mut rng = Rng(7);
    let w: Vec<f64> = (0..len).map(|_| rng.uniform()).collect();
    let mut buf = w.clone();
    let mut scratch = vec![0.0; plan.apply_scratch_len()];
    let e = plan.apply(&foreign, &mut buf, &mut scratch).expect_err("accepted");
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
    assert!(matches!(plan.invert(&foreign, &mut vec![0; n]), Err(Error::ShapeMismatch { .. })));
    let twin_blocks = [Block::Attention(small_attention()), Block::Mlp(small_mlp(1000))];
    let twin = ShufflePlan::new(&twin_blocks, 2000).unwrap();
    let mut twin_idx = vec![0u32; n];
    let twin_perms = twin.sample_keyed(&s, &mut twin_idx).unwrap();
    assert!(plan.apply(&twin_perms, &mut buf, &mut scratch).is_ok());
    buf.copy_from_slice(&w);

    // Buffers of the wrong length; scratch one short.
    let perms = plan.sample_keyed(&s, &mut good).unwrap();
    for l in [len - 1, len + 1] {
        let mut b: Vec<f64> = (0..l).map(|i| i as f64).collect();
        let before = b.clone();
        let e = plan.apply(&perms, &mut b, &mut scratch).expect_err("accepted");
        assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
        assert_eq!(b, before);
    }
    let short = plan.apply_scratch_len() - 1;
    let e = plan.apply(&perms, &mut buf, &mut scratch[..short]).expect_err("accepted");
    assert!(matches!(e, Error::ScratchTooSmall { .. }), "{e:?}");
    let mut b16: Vec<f16> = w.iter().map(|&x| f16::from_f64(x)).collect();
    let before16 = b16.clone();
    assert!(plan.apply(&perms, &mut b16, &mut scratch[..short]).is_err());
    assert_eq!(b16, before16);
    assert_eq!(buf, w, "a failed apply wrote the buffer");
}

/// `check` promises "On error `perms` is unchanged". It validates in place by marking bit 31,
/// so entries that already have bit 31 set (out-of-range indices such as `u32::MAX`) must be
/// rejected before any marking: review found `[0x8000_0001, 0, 2]` coming back as the valid
/// `[1, 0, 2]`.
#[test]
fn check_leaves_indices_with_bit_31_unchanged() {
    let blocks = [mlp_blocks(3, 0)];
    let plan = ShufflePlan::new(&blocks, 6).unwrap();
    for bad in [[u32::MAX, 0, 1], [0x8000_0001, 0, 2], [1 << 31, 1, 2], [0, 1, 0x8000_0002]] {
        let mut p = bad;
        let e = plan.check(&mut p).map(|_| ()).expect_err("accepted");
        assert!(matches!(e, Error::OutOfRange { .. }), "{bad:x?}: {e:?}");
        assert_eq!(p, bad, "check modified rejected permutations {bad:x?} into {p:x?}");
    }
}

/// Review finding: a tensor that never moves (here the down projection's bias) overlapping a
/// moved one would be permuted with it; every described tensor must be disjoint.
#[test]
fn fixed_tensors_may_not_overlap_moved_ones() {
    let mlp = |down_bias| {
        [Block::Mlp(MlpBlock {
            up: LinearLayout::new(0, 3, 2, WeightLayout::OutIn),
            gate: None,
            down: LinearLayout::new(6, 2, 3, WeightLayout::OutIn).with_bias(down_bias),
        })]
    };
    assert!(ShufflePlan::new(&mlp(12), 14).is_ok());
    for overlapping in [0, 5, 11] {
        let e = ShufflePlan::new(&mlp(overlapping), 14).map(|_| ()).expect_err("accepted");
        assert!(matches!(e, Error::OutOfRange { name: "tensor offset", .. }), "{e:?}");
    }
}
