//! Paper 001 in the same run: the faithful softmax trees (`SoftmaxTreeCrossAttention`, non-adaptive
//! `l = 1`, per-vector split) against the moment sketch (extension `docs/PAPERS.md` P1-X1) on the
//! same data and the same `(ε, δ)`, with exact `f64` cross-attention (`exp(⟨q, k⟩/d)`, a naive
//! loop) as the peer for query latency and the reference for the error.
//!
//! Before the timings the bench prints the accuracy table: mean absolute error of the
//! outputs (true range `[−1, 1]`) over 64 queries, against `n`, plus the memory of each
//! release. Setting: `d = 2`, `R = R_w = 1`, `ε_s = 0.01` (`s = 4`, `r = 15`), `ε = 1`,
//! `δ = δ′ = 1e-6`, `K` uniform in `[0, 1]^d`, `V` uniform in `[−1, 1]^d`.
//!
//! Both releases run in their default exact mode (`NoiseMode::Exact`, `docs/PRIVACY.md`
//! §4.5–§4.6).
//!
//! Run: `cargo bench --bench softmax_tree` (numbers in docs/BENCHMARKS.md). Under
//! `cargo test` (no `--bench` argument: criterion's test mode) only the smallest `n` runs, so
//! that the debug build of the trees stays quick.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dpattn::moment_sketch::{MomentSketch, MomentSketchParams};
use dpattn::sampling::{FixedWordSampler, KeyedStream, NoiseKey, Uniform};
use dpattn::session::Draw;
use dpattn::softmax_tree::{Copies, SoftmaxTreeParams};
use dpattn::softmax_tree_cross_attention::{
    SoftmaxTreeCrossAttention, SoftmaxTreeCrossAttentionParams, estimate_error,
};
use dpattn::{MatRef, PrivacyBudget};

const D: usize = 2;
const NS: [usize; 3] = [1_000, 10_000, 100_000];

/// `NS`, or its first size alone in criterion's test mode.
fn sizes() -> &'static [usize] {
    if std::env::args().any(|a| a == "--bench") { &NS } else { &NS[..1] }
}

fn uniform(len: usize, stream: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut u = vec![0.0; len];
    Uniform
        .fill_keyed(&KeyedStream::new(&NoiseKey::for_replay([9; 32]), stream), 0, &mut u)
        .unwrap();
    u.iter().map(|x| lo + (hi - lo) * x).collect()
}

fn tree_params() -> SoftmaxTreeCrossAttentionParams {
    let mut p = SoftmaxTreeCrossAttentionParams::new(SoftmaxTreeParams::paper(
        1.0,
        1.0,
        PrivacyBudget::new(1.0, 1e-6).unwrap(),
        1e-6,
    ));
    p.adaptive.copies = Copies::Fixed(1);
    p.adaptive.tree.memory_limit_bytes = 8 << 30;
    p
}

fn sketch_params() -> MomentSketchParams {
    MomentSketchParams::new(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6).unwrap())
}

/// Exact `softmax(q·Kᵀ/d)·V` in `f64`.
fn exact(q: &[f64], k: &[f64], v: &[f64], out: &mut [f64]) {
    let d = q.len();
    out.fill(0.0);
    let mut den = 0.0;
    for (kr, vr) in k.chunks_exact(d).zip(v.chunks_exact(d)) {
        let s: f64 = q.iter().zip(kr).map(|(a, b)| a * b).sum();
        let e = (s / d as f64).exp();
        den += e;
        for (o, x) in out.iter_mut().zip(vr) {
            *o += e * x;
        }
    }
    for o in out.iter_mut() {
        *o /= den;
    }
}

fn accuracy_table() {
    let queries = uniform(64 * D, 100, 0.0, 1.0);
    eprintln!(
        "\nsoftmax trees vs moment sketch, d = {D}, eps = 1, delta = delta' = 1e-6 (mean |error| over 64 queries, outputs in [-1, 1])"
    );
    eprintln!(
        "{:>8} | {:>11} {:>11} {:>10} {:>9} | {:>11} {:>10} {:>9}",
        "n", "tree err", "tree est.", "tree MiB", "build s", "sketch err", "sketch KiB", "build s"
    );
    for &n in sizes() {
        let k = uniform(n * D, 1, 0.0, 1.0);
        let v = uniform(n * D, 2, -1.0, 1.0);
        let (km, vm) =
            (MatRef::from_row_major(&k, n, D).unwrap(), MatRef::from_row_major(&v, n, D).unwrap());
        let key = NoiseKey::for_replay([1; 32]);
        let stream = Draw { key: &key, stream: 0 };
        let t0 = Instant::now();
        let tree =
            SoftmaxTreeCrossAttention::new_keyed(km, vm, &tree_params(), stream, None).unwrap();
        let tree_s = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let sketch = MomentSketch::new_keyed(km, vm, &sketch_params(), stream, None).unwrap();
        let sketch_s = t0.elapsed().as_secs_f64();
        let (mut te, mut se) = (0.0, 0.0);
        let (mut o, mut ot, mut os) = ([0.0; D], [0.0; D], [0.0; D]);
        for q in queries.chunks_exact(D) {
            exact(q, &k, &v, &mut o);
            tree.query(q, &mut ot).unwrap();
            sketch.query(q, &mut os).unwrap();
            for c in 0..D {
                te += (ot[c] - o[c]).abs();
                se += (os[c] - o[c]).abs();
            }
        }
        let m = (queries.len()) as f64;
        let est = estimate_error(n, D, &tree_params()).unwrap().additive;
        let tree_mib = dpattn::softmax_tree_cross_attention::estimate_cross_attention_bytes(
            n,
            D,
            &tree_params(),
        )
        .unwrap() as f64
            / (1 << 20) as f64;
        let sketch_kib = (sketch.sketch().len() * 8) as f64 / 1024.0;
        eprintln!(
            "{n:>8} | {:>11.3e} {:>11.3e} {tree_mib:>10.1} {tree_s:>9.3} | {:>11.3e} {sketch_kib:>10.2} {sketch_s:>9.4}",
            te / m,
            est,
            se / m
        );
    }
    eprintln!();
}

fn bench(c: &mut Criterion) {
    accuracy_table();
    let mut g = c.benchmark_group("paper 001 build (one release)");
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    for &n in sizes() {
        let k = uniform(n * D, 1, 0.0, 1.0);
        let v = uniform(n * D, 2, -1.0, 1.0);
        let (km, vm) =
            (MatRef::from_row_major(&k, n, D).unwrap(), MatRef::from_row_major(&v, n, D).unwrap());
        let key = NoiseKey::for_replay([1; 32]);
        let stream = Draw { key: &key, stream: 0 };
        g.bench_function(BenchmarkId::new("softmax trees (l = 1)", n), |b| {
            b.iter(|| {
                SoftmaxTreeCrossAttention::new_keyed(km, vm, &tree_params(), stream, None).unwrap()
            })
        });
        g.bench_function(BenchmarkId::new("moment sketch", n), |b| {
            b.iter(|| MomentSketch::new_keyed(km, vm, &sketch_params(), stream, None).unwrap())
        });
    }
    g.finish();

    let mut g = c.benchmark_group("paper 001 query (one token)");
    for &n in sizes() {
        let k = uniform(n * D, 1, 0.0, 1.0);
        let v = uniform(n * D, 2, -1.0, 1.0);
        let (km, vm) =
            (MatRef::from_row_major(&k, n, D).unwrap(), MatRef::from_row_major(&v, n, D).unwrap());
        let key = NoiseKey::for_replay([1; 32]);
        let stream = Draw { key: &key, stream: 0 };
        let tree =
            SoftmaxTreeCrossAttention::new_keyed(km, vm, &tree_params(), stream, None).unwrap();
        let sketch = MomentSketch::new_keyed(km, vm, &sketch_params(), stream, None).unwrap();
        let q = [0.4, 0.7];
        let mut out = [0.0; D];
        let mut ts = vec![0.0; tree.query_scratch_len()];
        let mut ss = vec![0.0; sketch.query_scratch_len()];
        g.bench_function(BenchmarkId::new("softmax trees", n), |b| {
            b.iter(|| tree.query_into(black_box(&q), &mut out, &mut ts).unwrap())
        });
        g.bench_function(BenchmarkId::new("moment sketch", n), |b| {
            b.iter(|| sketch.query_into(black_box(&q), &mut out, &mut ss).unwrap())
        });
        g.bench_function(BenchmarkId::new("exact attention (non-private)", n), |b| {
            b.iter(|| exact(black_box(&q), &k, &v, &mut out))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
