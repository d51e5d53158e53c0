//! Weight shuffling of paper 002 (`weight_shuffle`), single thread, two groups:
//!
//! 1. **Applying a plan** to one GPT-2-small layer (d_model 768, 12 heads of 64, fused QKV and
//!    MLP 3072, `(in, out)` storage, biases; 7.08 M `f32` parameters): elements per second of
//!    `ShufflePlan::apply`, next to a plain `copy_from_slice` of the same buffer in the same run
//!    (the memory-bandwidth floor; an in-place gather reads and writes every element twice)
//!    and a naive peer that materialises one full index vector per tensor and gathers into a
//!    fresh allocation (the obvious implementation of the paper's index shuffle, Table VII).
//! 2. **One shuffled DP-SGD step** on a small MLP (256 → 1024 → 256, 525 k parameters, 64
//!    records, q = 0.25, the closure writes a fixed gradient), next to a naive DP-SGD step
//!    without shuffling (clip, sum, `rand_distr` ziggurat noise from a `ChaCha20Rng`,
//!    update): the cost of keyed exact selection, addressable noise and the permutation,
//!    with the unsafe `f64` noise and with the exact grid release (the default).
//!
//! Run: `cargo bench --bench weight_shuffle` (numbers in docs/BENCHMARKS.md).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dpattn::NoiseMode;
use dpattn::sampling::{KeyedStream, NoiseKey};
use dpattn::session::Draw;
use dpattn::weight_shuffle::{
    AttentionBlock, Block, LinearLayout, MlpBlock, PositionEncoding, Qkv, STREAMS, ShufflePlan,
    ShuffledDpSgdParams, ValueSharing, WeightLayout, shuffled_dp_sgd_step_keyed,
    shuffled_dp_sgd_step_scratch_len,
};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

const DM: usize = 768;
const FF: usize = 3072;

/// GPT-2-small layer: c_attn (768 × 2304) + bias, c_proj (768 × 768) + bias, c_fc
/// (768 × 3072) + bias, mlp.c_proj (3072 × 768) + bias, all `(in, out)`.
fn gpt2_layer() -> ([Block; 2], usize) {
    let lin = |at: usize, o: usize, i: usize| LinearLayout::new(at, o, i, WeightLayout::InOut);
    let mut at = 0;
    let mut next = |n: usize| {
        let a = at;
        at += n;
        a
    };
    let qkv = lin(next(DM * 3 * DM), 3 * DM, DM).with_bias(next(3 * DM));
    let proj = lin(next(DM * DM), DM, DM).with_bias(next(DM));
    let fc = lin(next(DM * FF), FF, DM).with_bias(next(FF));
    let down = lin(next(FF * DM), DM, FF).with_bias(next(DM));
    let attn = Block::Attention(AttentionBlock {
        qkv: Qkv::Fused(qkv),
        output: proj,
        heads: 12,
        kv_heads: 12,
        qk_head_dim: 64,
        v_head_dim: 64,
        positions: PositionEncoding::Additive,
        values: ValueSharing::AllHeads,
    });
    let mlp = Block::Mlp(MlpBlock { up: fc, gate: None, down });
    ([attn, mlp], next(0))
}

/// The naive peer for one `(rows × cols)` tensor whose rows move: a full index vector and a
/// gather into a fresh allocation, copied back.
fn naive_rows(buf: &mut [f32], rows: usize, cols: usize, index: &[usize]) {
    let fresh: Vec<f32> = (0..rows).flat_map(|r| buf[index[r] * cols..][..cols].to_vec()).collect();
    buf[..rows * cols].copy_from_slice(&fresh);
}

fn naive_cols(buf: &mut [f32], rows: usize, cols: usize, index: &[usize]) {
    let fresh: Vec<f32> =
        (0..rows * cols).map(|e| buf[(e / cols) * cols + index[e % cols]]).collect();
    buf[..rows * cols].copy_from_slice(&fresh);
}

fn bench_apply(c: &mut Criterion) {
    let (blocks, len) = gpt2_layer();
    let plan = ShufflePlan::new(&blocks, len).unwrap();
    let mut g = c.benchmark_group("weight_shuffle apply, GPT-2 layer f32");
    g.throughput(Throughput::Elements(len as u64));
    g.measurement_time(Duration::from_secs(5));
    let mut idx = vec![0u32; plan.permutation_len()];
    let perms =
        plan.sample_keyed(&KeyedStream::new(&NoiseKey::for_replay([1; 32]), 0), &mut idx).unwrap();
    let mut w: Vec<f32> = (0..len).map(|i| i as f32).collect();
    let mut scratch = vec![0.0; plan.apply_scratch_len()];
    g.bench_function("ShufflePlan::apply (elements/s)", |b| {
        b.iter(|| plan.apply(&perms, black_box(&mut w), &mut scratch).unwrap());
    });
    // Naive: the same moves with materialised indices (column gathers for (in, out) output
    // axes, row gathers for input axes), each into a fresh Vec.
    let p = perms.as_slice().to_vec();
    let (qk, v) = p.split_at(12 * 64);
    let head_index = |perm: &[u32], heads: usize| -> Vec<usize> {
        (0..heads * 64)
            .map(|j| (j / 64) * 64 + perm[(j / 64) * 64 % perm.len() + j % 64] as usize)
            .collect()
    };
    let mut qkv_index = head_index(qk, 12);
    qkv_index.extend(head_index(qk, 12).iter().map(|j| j + DM));
    qkv_index.extend(head_index(&v[..64], 12).iter().map(|j| j + 2 * DM));
    let o_index = head_index(&v[..64], 12);
    let h_index: Vec<usize> = p[12 * 64 + 64..].iter().map(|&x| x as usize).collect();
    g.bench_function("naive peer: index vectors + gather into fresh Vecs (elements/s)", |b| {
        b.iter(|| {
            let w = black_box(&mut w[..]);
            let mut at = 0;
            naive_cols(&mut w[at..], DM, 3 * DM, &qkv_index);
            at += DM * 3 * DM;
            naive_rows(&mut w[at..], 3 * DM, 1, &qkv_index);
            at += 3 * DM;
            naive_rows(&mut w[at..], DM, DM, &o_index);
            at += DM * DM + DM;
            naive_cols(&mut w[at..], DM, FF, &h_index);
            at += DM * FF;
            naive_rows(&mut w[at..], FF, 1, &h_index);
            at += FF;
            naive_rows(&mut w[at..], FF, DM, &h_index);
        });
    });
    let src = w.clone();
    g.bench_function("copy_from_slice of the buffer (bandwidth floor)", |b| {
        b.iter(|| black_box(&mut w).copy_from_slice(&src));
    });
    g.finish();
}

const D_IN: usize = 256;
const HIDDEN: usize = 1024;
const RECORDS: u64 = 64;
const Q: f64 = 0.25;

fn bench_step(c: &mut Criterion) {
    let blocks = [Block::Mlp(MlpBlock {
        up: LinearLayout::new(0, HIDDEN, D_IN, WeightLayout::OutIn).with_bias(HIDDEN * D_IN),
        gate: None,
        down: LinearLayout::new(HIDDEN * D_IN + HIDDEN, D_IN, HIDDEN, WeightLayout::OutIn),
    })];
    let len = 2 * HIDDEN * D_IN + HIDDEN;
    let plan = ShufflePlan::new(&blocks, len).unwrap();
    let exact = ShuffledDpSgdParams::new(Q, 1.0, 1.0, 0.05, 1000);
    let float = ShuffledDpSgdParams { noise_mode: NoiseMode::UnsafeFloat, ..exact };
    let grad: Vec<f64> = (0..len).map(|i| ((i * 7919 % 2003) as f64 / 1001.0) - 1.0).collect();
    let mut g =
        c.benchmark_group("shuffled DP-SGD step, MLP 256-1024-256 f32, 64 records, q = 0.25");
    g.throughput(Throughput::Elements(len as u64));
    g.measurement_time(Duration::from_secs(5));
    let mut w = vec![0.01f32; len];
    let mut perms = vec![0u32; plan.permutation_len()];
    let mut scratch = vec![0.0; shuffled_dp_sgd_step_scratch_len(&plan).unwrap()];
    let key = NoiseKey::for_replay([2; 32]);
    let mut step = 0u64;
    for (name, params) in [
        ("shuffled_dp_sgd_step, unsafe float (parameters/s)", float),
        ("shuffled_dp_sgd_step, exact (parameters/s)", exact),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                step += 1;
                shuffled_dp_sgd_step_keyed(
                    &mut w,
                    &mut [],
                    &plan,
                    &params,
                    RECORDS,
                    |_, _, out: &mut [f64]| {
                        out.copy_from_slice(&grad);
                        Ok(())
                    },
                    Draw { key: &key, stream: STREAMS * step },
                    None,
                    &mut perms,
                    &mut scratch,
                )
                .unwrap();
            });
        });
    }
    g.bench_function(
        "naive peer: DP-SGD without shuffling, rand_distr noise (parameters/s)",
        |b| {
            let mut rng = ChaCha20Rng::from_seed([2; 32]);
            let mut sum = vec![0.0f64; len];
            let mut ex = vec![0.0f64; len];
            b.iter(|| {
                sum.fill(0.0);
                for _ in 0..RECORDS {
                    if rand_core::Rng::next_u32(&mut rng) > (Q * 4294967296.0) as u32 {
                        continue;
                    }
                    ex.copy_from_slice(&grad);
                    let norm = ex.iter().map(|x| x * x).sum::<f64>().sqrt();
                    let s = (1.0 / norm).min(1.0);
                    sum.iter_mut().zip(&ex).for_each(|(a, g)| *a += s * g);
                }
                let scale = 0.05 / (Q * RECORDS as f64);
                for (wj, sj) in w.iter_mut().zip(&sum) {
                    let z: f64 = StandardNormal.sample(&mut rng);
                    *wj = (f64::from(*wj) - scale * (sj + z)) as f32;
                }
                black_box(&w);
            });
        },
    );
    g.finish();
}

criterion_group!(benches, bench_apply, bench_step);
criterion_main!(benches);
