//! DPAttention of paper 000 (`gaussian_sampling_attention`): time per release against `n`
//! and `k`, single thread, `f64` input `X` of `n × d`.
//!
//! Peers in the same run: the paper's literal sampler (`gᵢ = L·zᵢ`, cost linear in `k`),
//! which is what an implementation of the paper's text costs, and the non-private
//! normalised attention matrix of the same `X` (`attention::attention_matrix`, `Q = K = X`),
//! the floor any release of `D(A)⁻¹ f(A)` pays. The Bartlett sampler's time must not move
//! with `k`.
//!
//! Run: `cargo bench --bench gaussian_sampling_attention` (numbers in docs/BENCHMARKS.md).

use dpattn::session::Draw;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dpattn::attention::attention_matrix;
use dpattn::gaussian_sampling_attention::{
    Domain, GaussianSamplingParams, OutOfDomain, Sampler, gaussian_sampling_attention_keyed,
    gaussian_sampling_attention_scratch_len,
};
use dpattn::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn::{BatchedMut, BatchedRef, Mask, MatMut, MatRef, PrivacyBudget, Scale, ScoreFn};

/// `X` with i.i.d. `N(0, 1/d)` entries: `XXᵀ ≈ I`, well inside `λ_min ≥ 0.05` for `d ≥ 4n`.
fn data(n: usize, d: usize) -> Vec<f64> {
    let mut x = vec![0.0; n * d];
    Gaussian::new(1.0 / (d as f64).sqrt())
        .unwrap()
        .fill_keyed(&KeyedStream::new(&NoiseKey::for_replay([3; 32]), 0), 0, &mut x)
        .unwrap();
    x
}

fn release(c: &mut Criterion) {
    let mut g = c.benchmark_group("gaussian sampling attention (one release)");
    g.sample_size(10);
    for (n, d) in [(16usize, 256usize), (64, 1024), (256, 1024)] {
        let x = data(n, d);
        // A tiny β makes every k below 2^40 private; the domain is loose enough for X.
        let domain = Domain::new(10.0, 0.05, 1e-15).unwrap();
        let budget = PrivacyBudget::new(0.5, 1e-6).unwrap();
        let mut scratch = vec![
            0.0;
            gaussian_sampling_attention_scratch_len(
                n,
                d,
                Sampler::Literal,
                OutOfDomain::Reject
            )
            .unwrap()
        ];
        let (mut b, mut p) = (vec![0.0; n * n], vec![0.0; n * n]);
        let mut run = |params: &GaussianSamplingParams, scratch: &mut [f64]| {
            gaussian_sampling_attention_keyed(
                BatchedMut::contiguous(&mut b, [1, 1, n, n]).unwrap(),
                BatchedMut::contiguous(&mut p, [1, 1, n, n]).unwrap(),
                BatchedRef::contiguous(&x, [1, 1, n, d]).unwrap(),
                params,
                Draw { key: &NoiseKey::for_replay([1; 32]), stream: 0 },
                None,
                scratch,
            )
            .unwrap()
        };
        for k in [1_000u64, 100_000, 1_000_000_000] {
            let params = GaussianSamplingParams::new(budget, domain, k).unsafe_float();
            g.bench_function(BenchmarkId::new(format!("bartlett n={n} d={d}"), k), |bch| {
                bch.iter(|| black_box(run(&params, &mut scratch)))
            });
            // The literal sampler's n²k cost: only where it finishes in reasonable time.
            if (n * n) as u64 * k <= 1 << 30 {
                let lit = GaussianSamplingParams { sampler: Sampler::Literal, ..params };
                g.bench_function(BenchmarkId::new(format!("literal n={n} d={d}"), k), |bch| {
                    bch.iter(|| black_box(run(&lit, &mut scratch)))
                });
            }
        }
        let mut out = vec![0.0; n * n];
        g.bench_function(
            BenchmarkId::new("non-private attention_matrix", format!("n={n} d={d}")),
            |bch| {
                bch.iter(|| {
                    attention_matrix(
                        MatMut::from_row_major(&mut out, n, n).unwrap(),
                        MatRef::from_row_major(&x, n, d).unwrap(),
                        MatRef::from_row_major(&x, n, d).unwrap(),
                        Mask::NONE,
                        Scale::Custom(1.0),
                        ScoreFn::Exp,
                    )
                    .unwrap();
                    black_box(out[0])
                })
            },
        );
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! { name = benches; config = config(); targets = release }
criterion_main!(benches);
