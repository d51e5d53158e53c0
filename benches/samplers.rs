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
    BernoulliExp, ChaChaBackend, ConstantTimeGaussian, DiscreteGaussian, DiscreteLaplace,
    ExactSampler, Exponential, FixedWordSampler, Gaussian, GridGaussian, GridLaplace, KeyedStream,
    Laplace, MatrixGaussian, NoiseKey, PoissonSubsampling, TruncatedLaplace, Uniform,
    chacha20_blocks_with, sample_permutation,
};
use dpattn::{MatMut, MatRef};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp1, StandardNormal};

const N: usize = 4096;

fn rng() -> ChaCha20Rng {
    ChaCha20Rng::from_seed([7; 32])
}

fn stream() -> KeyedStream {
    KeyedStream::new(&NoiseKey::for_replay([7; 32]), 1)
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
    // The batched block generator (what exact-sampler bulk fills use), once per backend
    // this CPU has: N words = N / 16 blocks per iteration.
    let key = ks.key_words();
    let mut blocks = vec![[0u32; 16]; N / 16];
    for backend in ChaChaBackend::ALL.into_iter().filter(|b| b.is_available()) {
        let mut counter = 0u64;
        g.bench_function(format!("dpattn chacha20 {}", backend.name()), |b| {
            b.iter(|| {
                chacha20_blocks_with(backend, &key, 1, counter, black_box(&mut blocks)).unwrap();
                counter = counter.wrapping_add(blocks.len() as u64);
            })
        });
    }
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

/// An exact sampler from a `ChaCha20Rng` and from the keyed per-element windows.
fn exact<S: ExactSampler>(c: &mut Criterion, name: &str, s: &S, zero: S::Output) {
    let mut g = group(c, name);
    let mut out = vec![zero; N];
    let mut r = rng();
    g.bench_function("dpattn fill (ChaCha20Rng)", |b| {
        b.iter(|| s.fill(&mut r, black_box(&mut out)).unwrap())
    });
    let ks = stream();
    let mut first = 0u64;
    g.bench_function("dpattn fill_keyed (per-element windows)", |b| {
        b.iter(|| {
            s.fill_keyed(&ks, first, black_box(&mut out)).unwrap();
            first = (first + N as u64) % (1 << 39);
        })
    });
    g.finish();
}

fn exact_samplers(c: &mut Criterion) {
    exact(c, "discrete gaussian sigma=3.2", &DiscreteGaussian::from_f64(3.2).unwrap(), 0);
    exact(c, "discrete gaussian sigma=1000", &DiscreteGaussian::from_f64(1000.0).unwrap(), 0);
    exact(c, "discrete laplace scale=10", &DiscreteLaplace::integer(10).unwrap(), 0);
    exact(c, "bernoulli exp(-7/3)", &BernoulliExp::new(7, 3).unwrap(), false);

    // Grid-snapped noise added to data (the secure float release), and Poisson subsampling.
    let data: Vec<f64> = (0..N).map(|i| (i as f64).sin()).collect();
    let mut buf = data.clone();
    let ks = stream();
    let mut r = rng();
    let gg = GridGaussian::new(1.0, 3.0, N).unwrap();
    let gl = GridLaplace::new(1.0, 0.5, N).unwrap();
    let mut g = group(c, "grid-snapped noise on 4096 f64");
    g.bench_function("GridGaussian add_noise (ChaCha20Rng)", |b| {
        b.iter(|| {
            buf.copy_from_slice(&data);
            gg.add_noise(&mut r, black_box(&mut buf)).unwrap()
        })
    });
    g.bench_function("GridGaussian add_noise_keyed", |b| {
        b.iter(|| {
            buf.copy_from_slice(&data);
            gg.add_noise_keyed(&ks, 0, black_box(&mut buf)).unwrap()
        })
    });
    g.bench_function("GridLaplace add_noise_keyed", |b| {
        b.iter(|| {
            buf.copy_from_slice(&data);
            gl.add_noise_keyed(&ks, 0, black_box(&mut buf)).unwrap()
        })
    });
    g.finish();

    let p = PoissonSubsampling::new(0.01).unwrap();
    let mut mask = vec![false; N];
    let mut g = group(c, "poisson subsampling q=0.01 (records)");
    g.bench_function("select (ChaCha20Rng)", |b| {
        b.iter(|| p.select(&mut r, black_box(&mut mask)).unwrap())
    });
    g.bench_function("select_keyed", |b| {
        b.iter(|| p.select_keyed(&ks, 0, black_box(&mut mask)).unwrap())
    });
    g.finish();
}

fn matrix_and_permutation(c: &mut Criterion) {
    // MN(0, Σ, Ψ) with 64 × 64 dense factors (4096 outputs) against the i.i.d. fast path.
    let n: usize = 64;
    let cov: Vec<f64> = (0..n * n)
        .map(|k| if k / n == k % n { 1.0 } else { 0.5 / (1.0 + (k / n).abs_diff(k % n) as f64) })
        .collect();
    let cov = MatRef::from_row_major(&cov, n, n).unwrap();
    let dense = MatrixGaussian::new(cov, cov).unwrap();
    let iid = MatrixGaussian::iid(n, n, 1.0).unwrap();
    let mut out = vec![0f64; n * n];
    let mut scratch = vec![0f64; dense.scratch_len()];
    let ks = stream();
    let mut g = group(c, "matrix gaussian 64x64");
    g.bench_function("dense factors (keyed)", |b| {
        b.iter(|| {
            let o = MatMut::from_row_major(&mut out, n, n).unwrap();
            dense.sample_keyed_into(o, &ks, 0, &mut scratch).unwrap();
        })
    });
    g.bench_function("iid fast path (keyed)", |b| {
        b.iter(|| {
            let o = MatMut::from_row_major(&mut out, n, n).unwrap();
            iid.sample_keyed_into(o, &ks, 0, &mut []).unwrap();
        })
    });
    g.finish();

    let mut g = group(c, "permutation n=4096 (elements)");
    let mut perm = vec![0u32; N];
    let mut r = rng();
    g.bench_function("dpattn Fisher-Yates (Lemire)", |b| {
        b.iter(|| sample_permutation(&mut r, black_box(&mut perm)).unwrap())
    });
    g.finish();
}

/// The `safe noise` group (issue "safe noise as fast as unsafe noise"): the keyed
/// grid-Gaussian release of 4096 `f64` (exact discrete Gaussian on the grid, what every DP
/// release draws) next to the unsafe float fills on the same ChaCha20, and the integer
/// sampler at the grid's scale by both exact algorithms.
fn safe_noise(c: &mut Criterion) {
    let data: Vec<f64> = (0..N).map(|i| (i as f64).sin()).collect();
    let mut buf = data.clone();
    let ks = stream();
    let mut g = group(c, "safe noise");
    let grid = GridGaussian::new(1.0, 3.0, N).unwrap();
    let mut first = 0u64;
    g.bench_function("dpattn safe gaussian", |b| {
        b.iter(|| {
            buf.copy_from_slice(&data);
            grid.add_noise_keyed(&ks, 0, black_box(&mut buf)).unwrap()
        })
    });
    let mut z = vec![0i64; N];
    // The integer noise alone: σ ≥ 2^10 takes the cell algorithm, σ below it CKS20's.
    for (name, dg) in [
        (
            "discrete gaussian sigma=2^30+1/2 (cells)",
            DiscreteGaussian::new((1 << 31) + 1, 2).unwrap(),
        ),
        (
            "discrete gaussian sigma=82000.25 (cells)",
            DiscreteGaussian::from_f64(82_000.25).unwrap(),
        ),
        ("discrete gaussian sigma=1000 (CKS20)", DiscreteGaussian::new(1000, 1).unwrap()),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                dg.fill_keyed(&ks, first, black_box(&mut z)).unwrap();
                first = (first + N as u64) % (1 << 39);
            })
        });
    }
    // The constant-time sampler (enclave mode) at the grid's scale, on the same windows.
    let ct = ConstantTimeGaussian::new(&DiscreteGaussian::new((1 << 31) + 1, 2).unwrap()).unwrap();
    g.bench_function("constant-time discrete gaussian sigma=2^30+1/2", |b| {
        b.iter(|| {
            ct.fill_keyed(&ks, first, black_box(&mut z)).unwrap();
            first = (first + N as u64) % (1 << 39);
        })
    });
    let mut out = vec![0f64; N];
    let mut r = rng();
    let gs = Gaussian::new(3.0).unwrap();
    g.bench_function("unsafe Box-Muller f64 fill_keyed", |b| {
        b.iter(|| {
            gs.fill_keyed(&ks, first, black_box(&mut out)).unwrap();
            first = (first + N as u64) % (1 << 39);
        })
    });
    g.bench_function("unsafe Box-Muller f64 fill (ChaCha20Rng)", |b| {
        b.iter(|| gs.fill(&mut r, black_box(&mut out)))
    });
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

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

criterion_group! { name = continuous; config = config(); targets = keystream, gaussian, exponential_laplace }
criterion_group! { name = discrete; config = config(); targets = exact_samplers, matrix_and_permutation }
criterion_group! { name = safe; config = config(); targets = safe_noise }
criterion_main!(continuous, discrete, safe);
