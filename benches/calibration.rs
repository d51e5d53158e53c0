//! Time per calibration call and per accountant step (single thread).
//!
//! Run: `cargo bench --bench calibration` (numbers in docs/BENCHMARKS.md).

use dpattn::accounting::privacy_unit::PrivacyUnit;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dpattn::accounting::composition::{advanced_composition_step_epsilon, zcdp_to_epsilon};
use dpattn::accounting::ledger::{Charge, Ledger};
use dpattn::accounting::rdp::{
    DEFAULT_ORDERS, RdpCurve, SampledGaussianRdp, calibrate_sampled_gaussian, epsilon_after_steps,
};
use dpattn::calibration::amgm::amgm_sigma;
use dpattn::calibration::discrete_gaussian_mechanism::{
    discrete_gaussian_delta, discrete_gaussian_sigma,
};
use dpattn::calibration::gaussian_mechanism::{analytic_gaussian_epsilon, analytic_gaussian_sigma};
use dpattn::calibration::laplace_mechanism::laplace_scale;
use dpattn::calibration::normal::{normal_quantile, normal_sf};
use dpattn::{Delta, Epsilon, PrivacyBudget};

fn calibrators(c: &mut Criterion) {
    let mut g = c.benchmark_group("calibration call");
    g.bench_function("normal_sf(3.7)", |b| b.iter(|| normal_sf(black_box(3.7))));
    g.bench_function("normal_quantile(1e-7)", |b| {
        b.iter(|| normal_quantile(black_box(1e-7)).unwrap())
    });
    g.bench_function("laplace_scale", |b| {
        b.iter(|| laplace_scale(black_box(1.0), black_box(0.7)).unwrap())
    });
    g.bench_function("analytic_gaussian_sigma(1, 1e-5, 1)", |b| {
        b.iter(|| analytic_gaussian_sigma(black_box(1.0), black_box(1e-5), 1.0).unwrap())
    });
    g.bench_function("analytic_gaussian_epsilon(3.73, 1e-5, 1)", |b| {
        b.iter(|| analytic_gaussian_epsilon(black_box(3.73), black_box(1e-5), 1.0).unwrap())
    });
    g.bench_function("amgm_sigma(1, 1e-5, 2)", |b| {
        b.iter(|| amgm_sigma(black_box(1.0), black_box(1e-5), 2.0).unwrap())
    });
    g.bench_function("discrete_gaussian_delta(1, 4, 1)", |b| {
        b.iter(|| discrete_gaussian_delta(black_box(1.0), black_box(4.0), 1).unwrap())
    });
    g.bench_function("discrete_gaussian_sigma(1, 1e-5, 1)", |b| {
        b.iter(|| discrete_gaussian_sigma(black_box(1.0), black_box(1e-5), 1).unwrap())
    });
    let (total, slack) = (Epsilon::new(1.0).unwrap(), Delta::new(1e-6).unwrap());
    g.bench_function("advanced_composition_step_epsilon(k=100)", |b| {
        b.iter(|| advanced_composition_step_epsilon(black_box(total), 100, slack).unwrap())
    });
    g.finish();
}

fn accountants(c: &mut Criterion) {
    let mut g = c.benchmark_group("accountant step");
    let m = SampledGaussianRdp::new(0.01, 1.1).unwrap();
    g.bench_function("sampled Gaussian RDP, one order (alpha=4.5)", |b| {
        b.iter(|| dpattn::accounting::rdp::RdpMechanism::rdp(&m, black_box(4.5)).unwrap())
    });
    g.bench_function("sampled Gaussian: compose onto a 156-order curve", |b| {
        b.iter(|| {
            let mut curve = RdpCurve::default();
            curve.compose(&m, black_box(1)).unwrap();
            curve
        })
    });
    let mut curve = RdpCurve::default();
    curve.compose(&m, 10_000).unwrap();
    g.bench_function("RDP curve -> (eps, delta=1e-5)", |b| {
        b.iter(|| curve.epsilon(black_box(1e-5)).unwrap())
    });
    g.bench_function("epsilon_after_steps (q=0.01, z=1.1, T=1e4, 156 orders)", |b| {
        b.iter(|| epsilon_after_steps(&m, black_box(10_000), &DEFAULT_ORDERS, 1e-5).unwrap())
    });
    let rho = dpattn::accounting::composition::Rho::new(0.05).unwrap();
    g.bench_function("zCDP -> (eps, delta) (CKS20 Cor 13)", |b| {
        b.iter(|| zcdp_to_epsilon(black_box(rho), Delta::new(1e-5).unwrap()).unwrap())
    });
    let budget = PrivacyBudget::new(1e6, 0.5).unwrap();
    let step = PrivacyBudget::new(1e-3, 1e-9).unwrap();
    g.bench_function("ledger try_charge (approximate DP)", |b| {
        let mut ledger: Ledger = Ledger::new_approx(PrivacyUnit::TOKEN, budget);
        b.iter(|| ledger.try_charge(PrivacyUnit::TOKEN, Charge::Approx(black_box(step))).unwrap())
    });
    g.finish();

    let mut g = c.benchmark_group("calibration search");
    g.sample_size(10);
    g.bench_function("calibrate_sampled_gaussian (q=0.01, T=1e4, eps=1, delta=1e-5)", |b| {
        b.iter(|| {
            calibrate_sampled_gaussian(0.01, 10_000, black_box(1.0), 1e-5, &DEFAULT_ORDERS).unwrap()
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
}

criterion_group! { name = calibration; config = config(); targets = calibrators, accountants }
criterion_main!(calibration);
