//! DP-Forward of paper 003 (`dp_forward`): rows per second of the clip-and-noise hook on a
//! batch of 8 sequences × 128 tokens × 768 (BERT-base hidden states), `f32` in place, single
//! thread.
//!
//! Peer in the same run: a naive hook written the obvious way — Frobenius norm and rescale
//! per sequence, then `rand_distr`'s `StandardNormal` (ziggurat) from a `ChaCha20Rng`,
//! `σ·N` added entry by entry. It has none of the library's guarantees (no rounding margin,
//! no keyed addressing, no checks); it shows what the addressable Box–Muller noise and the
//! checks cost.
//!
//! Run: `cargo bench --bench dp_forward` (numbers in docs/BENCHMARKS.md).

use dpattn::session::Draw;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dpattn::dp_forward::{
    ClipMode, ClipRegion, DpForwardParams, Neighbours, NoiseFactors, NoisePosition,
    SensitivityRule, dp_forward_keyed,
};
use dpattn::sampling::NoiseKey;
use dpattn::{MatMut, NoiseMode, PrivacyBudget};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

const BATCH: usize = 8;
const TOKENS: usize = 128;
const DIM: usize = 768;

fn params(region: ClipRegion) -> DpForwardParams {
    DpForwardParams {
        budget: PrivacyBudget::new(8.0, 1e-5).unwrap(),
        releases: 1,
        clip_norm: 1.0,
        region,
        mode: ClipMode::Normalize,
        neighbours: Neighbours::Sequence,
        position: NoisePosition::Embedding,
        tokens: TOKENS,
        dim: DIM,
        rule: SensitivityRule::Derived,
        noise_mode: NoiseMode::UnsafeFloat,
    }
}

fn hidden() -> Vec<f32> {
    (0..BATCH * TOKENS * DIM).map(|i| ((i * 7919 % 2003) as f32 / 1001.0) - 1.0).collect()
}

/// The peer: normalise each sequence to `C = 1`, add `σ·N` from rand_distr.
fn naive(x: &mut [f32], sigma: f64, rng: &mut ChaCha20Rng) {
    for seq in x.chunks_mut(TOKENS * DIM) {
        let norm = seq.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt();
        for v in seq.iter_mut() {
            let n: f64 = StandardNormal.sample(rng);
            *v = (f64::from(*v) / norm + sigma * n) as f32;
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("dp_forward 8x128x768 f32");
    g.throughput(Throughput::Elements((BATCH * TOKENS) as u64));
    g.measurement_time(Duration::from_secs(5));
    let x0 = hidden();
    let key = NoiseKey::for_replay([9; 32]);
    for (name, region) in [("Frobenius", ClipRegion::Frobenius), ("Rows", ClipRegion::Rows)] {
        let p = params(region);
        g.bench_function(format!("dp_forward iid, {name} normalise (rows/s)"), |b| {
            let mut x = x0.clone();
            b.iter(|| {
                x.copy_from_slice(&x0);
                dp_forward_keyed(
                    MatMut::from_row_major(&mut x, BATCH * TOKENS, DIM).unwrap(),
                    &p,
                    &NoiseFactors::Iid,
                    Draw { key: &key, stream: 0 },
                    0,
                    None,
                    &mut [],
                )
                .unwrap();
                black_box(&x);
            });
        });
    }
    let p = params(ClipRegion::Frobenius);
    let (rows, cols) = (vec![1.5; TOKENS], vec![0.9; DIM]);
    g.bench_function("dp_forward diagonal, Frobenius normalise (rows/s)", |b| {
        let mut x = x0.clone();
        let f = NoiseFactors::Diagonal { row_std: &rows, col_std: &cols };
        b.iter(|| {
            x.copy_from_slice(&x0);
            dp_forward_keyed(
                MatMut::from_row_major(&mut x, BATCH * TOKENS, DIM).unwrap(),
                &p,
                &f,
                Draw { key: &key, stream: 0 },
                0,
                None,
                &mut [],
            )
            .unwrap();
            black_box(&x);
        });
    });
    let sigma = p.noise_floor().unwrap();
    g.bench_function("naive peer: normalise + rand_distr StandardNormal (rows/s)", |b| {
        let mut x = x0.clone();
        let mut rng = ChaCha20Rng::from_seed([9; 32]);
        b.iter(|| {
            x.copy_from_slice(&x0);
            naive(&mut x, sigma, &mut rng);
            black_box(&x);
        });
    });
    g.bench_function("copy only (baseline of every row above)", |b| {
        let mut x = x0.clone();
        b.iter(|| {
            x.copy_from_slice(&x0);
            black_box(&x);
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
