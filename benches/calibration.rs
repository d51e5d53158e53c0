//! Time per calibration call and per accountant step (single thread).
//!
//! Run: `cargo bench --bench calibration` (numbers in docs/BENCHMARKS.md).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dpattn::calibration::discrete_gaussian_mechanism::{
    discrete_gaussian_delta, discrete_gaussian_sigma,
};
use dpattn::calibration::laplace_mechanism::laplace_scale;

fn calibrators(c: &mut Criterion) {
    let mut g = c.benchmark_group("calibration call");
    g.bench_function("laplace_scale", |b| {
        b.iter(|| laplace_scale(black_box(1.0), black_box(0.7)).unwrap())
    });
    g.bench_function("discrete_gaussian_delta (eps=1, sigma=4)", |b| {
        b.iter(|| discrete_gaussian_delta(black_box(1.0), black_box(4.0), 1).unwrap())
    });
    g.bench_function("discrete_gaussian_sigma (eps=1, delta=1e-5)", |b| {
        b.iter(|| discrete_gaussian_sigma(black_box(1.0), black_box(1e-5), 1).unwrap())
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
}

criterion_group! { name = calibration; config = config(); targets = calibrators }
criterion_main!(calibration);
