//! Sampler throughput, single thread, side by side with `rand_distr` on the same generator.
//!
//! Every benchmark fills a slice of `N` values per iteration and reports elements per second.
//! The peers (`rand_distr`'s `StandardNormal`, `Exp1`, and the Laplace construction
//! `±Exp1`) are driven by the same `ChaCha20Rng`, so the comparison isolates the sampler.
//! Run: `cargo bench --bench samplers` (numbers in docs/BENCHMARKS.md).

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main, measurement::WallTime,
};
use dpattn::sampling::{
    Exponential, FixedWordSampler, Gaussian, KeyedStream, Laplace, NoiseKey, TruncatedLaplace,
    Uniform,
};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp1, StandardNormal};

const N: usize = 4096;

fn rng() -> ChaCha20Rng {
    ChaCha20Rng::from_seed([7; 32])
}

fn stream() -> KeyedStream {
    KeyedStream::new(&NoiseKey::from_bytes([7; 32]), 1)
}

fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(N as u64));
    g
}

/// Our sampler three ways: sequential from a `ChaCha20Rng`, keyed bulk fill, and element by
/// element (`sample_at`, what one GPU thread does).
fn ours<S: FixedWordSampler, T: dpattn::sampling::NoiseFloat + Default>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    s: &S,
) {
    let mut out = vec![T::default(); N];
    let mut r = rng();
    g.bench_function("dpattn fill (ChaCha20Rng)", |b| {
        b.iter(|| s.fill(&mut r, black_box(&mut out)))
    });
    let ks = stream();
    let mut first = 0u64;
    g.bench_function("dpattn fill_keyed", |b| {
        b.iter(|| {
            s.fill_keyed(&ks, first, black_box(&mut out)).unwrap();
            first += N as u64;
        })
    });
    g.bench_function("dpattn sample_at (per element)", |b| {
        b.iter(|| {
            for (i, o) in out.iter_mut().enumerate() {
                *o = s.sample_at(&ks, i as u64).unwrap();
            }
            black_box(&out);
        })
    });
}

fn keystream(c: &mut Criterion) {
    let mut g = group(c, "chacha20 keystream (u32 words)");
    let mut out = vec![0u32; N];
    let mut r = rng();
    g.bench_function("ChaCha20Rng next_u32", |b| {
        b.iter(|| {
            for o in out.iter_mut() {
                *o = r.next_u32();
            }
            black_box(&out);
        })
    });
    let ks = stream();
    g.bench_function("dpattn chacha20_block (scalar)", |b| {
        b.iter(|| {
            for (k, chunk) in out.chunks_mut(16).enumerate() {
                chunk.copy_from_slice(&ks.block(k as u64));
            }
            black_box(&out);
        })
    });
    g.finish();
}

fn gaussian(c: &mut Criterion) {
    let gs = Gaussian::STANDARD;
    let mut g = group(c, "gaussian f64");
    ours::<_, f64>(&mut g, &gs);
    let mut out = vec![0f64; N];
    let mut r = rng();
    g.bench_function("rand_distr StandardNormal (ziggurat)", |b| {
        b.iter(|| {
            for o in out.iter_mut() {
                *o = StandardNormal.sample(&mut r);
            }
            black_box(&out);
        })
    });
    g.finish();

    let mut g = group(c, "gaussian f32");
    ours::<_, f32>(&mut g, &gs);
    let mut out = vec![0f32; N];
    g.bench_function("rand_distr StandardNormal (ziggurat)", |b| {
        b.iter(|| {
            for o in out.iter_mut() {
                *o = StandardNormal.sample(&mut r);
            }
            black_box(&out);
        })
    });
    g.finish();
}

fn exponential_laplace(c: &mut Criterion) {
    let mut r = rng();
    let mut out = vec![0f64; N];

    let mut g = group(c, "exponential f64");
    ours::<_, f64>(&mut g, &Exponential::new(1.0).unwrap());
    g.bench_function("rand_distr Exp1 (ziggurat)", |b| {
        b.iter(|| {
            for o in out.iter_mut() {
                *o = Exp1.sample(&mut r);
            }
            black_box(&out);
        })
    });
    g.finish();

    let mut g = group(c, "laplace f64");
    ours::<_, f64>(&mut g, &Laplace::new(1.0).unwrap());
    g.bench_function("rand_distr ±Exp1 (sign from next_u32)", |b| {
        b.iter(|| {
            for o in out.iter_mut() {
                let e: f64 = Exp1.sample(&mut r);
                *o = if r.next_u32() & 1 == 1 { -e } else { e };
            }
            black_box(&out);
        })
    });
    g.finish();

    let mut g = group(c, "truncated laplace f64");
    ours::<_, f64>(&mut g, &TruncatedLaplace::new(1.0, 1.0, 1e-5).unwrap());
    g.finish();

    let mut g = group(c, "uniform f64");
    ours::<_, f64>(&mut g, &Uniform);
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

criterion_group! { name = continuous; config = config(); targets = keystream, gaussian, exponential_laplace }
criterion_main!(continuous);
