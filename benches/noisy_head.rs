//! NoisyHead of paper 004 (`noisy_head`): iterations per second of one release at the
//! paper's sizes, single thread, `f64`.
//!
//! The releases timed are the unsafe float path (`NoiseMode::UnsafeFloat`, the rows without a
//! suffix) and the exact grid release (the default, "exact").
//!
//! Peer in the same run: a naive implementation of Algorithm 1 as the paper writes it,
//! materialising every `Z̃_k` as a dense `D × D` matrix and computing `⟨Γ, Z̃_k⟩` and the
//! gradient with full `D²` loops (same noise stream, so the same output up to rounding).
//! Our streaming form uses the rank-one structure (`4ND²` flops per step), the Gram form
//! precomputes `H̃` once (`2D⁴` per step).
//!
//! Run: `cargo bench --bench noisy_head` (numbers in docs/BENCHMARKS.md).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dpattn::NoiseMode;
use dpattn::noisy_head::{
    Features, Form, NoisyHeadParams, Prompts, noisy_head_keyed, noisy_head_scratch_len,
    private_features,
};
use dpattn::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn::session::Draw;
use dpattn_paper::noisy_head::{generate_prompts, presets};

struct Data {
    x: Vec<f64>,
    y: Vec<f64>,
    q: Vec<f64>,
    t: Vec<f64>,
}

fn data(p: &NoisyHeadParams) -> Data {
    let (n, l, d) = (p.n, p.l, p.d);
    let mut dt =
        Data { x: vec![0.0; n * l * d], y: vec![0.0; n * l], q: vec![0.0; n * d], t: vec![0.0; n] };
    let key = NoiseKey::for_replay([5; 32]);
    generate_prompts(n, l, d, 0.0, &key, 0, 0, &mut dt.x, &mut dt.y, &mut dt.q, &mut dt.t).unwrap();
    dt
}

/// Algorithm 1 with dense `Z̃_k` matrices (the peer). Features are built by the library
/// (the same sanitised summaries), then expanded to `N` dense matrices.
fn naive(p: &NoisyHeadParams, prompts: &Prompts<'_>, key: &NoiseKey) -> Vec<f64> {
    let (n, d) = (p.n, p.d);
    let d2 = d * d;
    let (mut u, mut v, mut t) = (vec![0.0; n * d], vec![0.0; n * d], vec![0.0; n]);
    private_features(prompts, p.clip_c, p.proj_g, &mut u, &mut v, &mut t).unwrap();
    let f = Features::new(n, d, &u, &v, &t).unwrap();
    let mut z = vec![0.0; n * d2];
    for k in 0..n {
        let (uk, vk, _) = f.get(k);
        for i in 0..d {
            for j in 0..d {
                z[k * d2 + i * d + j] = uk[i] * vk[j];
            }
        }
    }
    let s = p.noise_std().unwrap();
    let a = 1.0 - 2.0 * p.lambda * p.eta0;
    let ks = KeyedStream::new(key, 0);
    let (mut gamma, mut grad, mut noise) = (vec![0.0; d2], vec![0.0; d2], vec![0.0; d2]);
    for step in 0..u64::from(p.iters) {
        grad.fill(0.0);
        for k in 0..n {
            let zk = &z[k * d2..(k + 1) * d2];
            let e: f64 = gamma.iter().zip(zk).map(|(g, z)| g * z).sum::<f64>() - t[k];
            for (gr, zv) in grad.iter_mut().zip(zk) {
                *gr += e * zv;
            }
        }
        Gaussian::STANDARD.fill_keyed(&ks, step * d2 as u64, &mut noise).unwrap();
        for ((g, gr), zn) in gamma.iter_mut().zip(&grad).zip(&noise) {
            *g = a * *g - p.eta0 / n as f64 * gr + s * zn;
        }
        let norm = gamma.iter().map(|g| g * g).sum::<f64>().sqrt();
        if norm > p.proj_r {
            gamma.iter_mut().for_each(|g| *g *= p.proj_r / norm);
        }
    }
    gamma
}

fn release(c: &mut Criterion) {
    let mut g = c.benchmark_group("noisy head (one release; throughput = iterations)");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(3));
    // The unsafe float path, whose output the naive peer reproduces; the exact release (the
    // default) is timed next to it.
    let float = |p: NoisyHeadParams| NoisyHeadParams { noise_mode: NoiseMode::UnsafeFloat, ..p };
    let configs = [
        ("low-dim N=4000 D=5", float(presets::low_dim(4000, 1.0).unwrap())),
        ("early-stop N=1000 D=31 T=141", float(presets::early_stopping(1000, 141, 0.8).unwrap())),
        ("robustness N=5000 L=500 D=5", float(presets::robustness(5000, 500, 0.5).unwrap())),
    ];
    let key = NoiseKey::for_replay([1; 32]);
    for (name, p) in configs {
        let dt = data(&p);
        let prompts = Prompts::new(p.n, p.l, p.d, &dt.x, &dt.y, &dt.q, &dt.t).unwrap();
        let d2 = p.d * p.d;
        g.throughput(Throughput::Elements(u64::from(p.iters)));
        let exact = NoisyHeadParams { noise_mode: NoiseMode::Exact, ..p };
        for (form, mode, p) in [
            (Form::Streaming, "", &p),
            (Form::Gram, "", &p),
            (Form::Streaming, " exact", &exact),
            (Form::Gram, " exact", &exact),
        ] {
            let mut scratch = vec![0.0; noisy_head_scratch_len(p, form).unwrap()];
            let mut out = vec![0.0; d2];
            let gamma0 = vec![0.0; d2];
            g.bench_function(BenchmarkId::new(format!("{form:?}{mode}"), name), |b| {
                b.iter(|| {
                    noisy_head_keyed(
                        &mut out,
                        &gamma0,
                        &prompts,
                        p,
                        form,
                        Draw { key: &key, stream: 0 },
                        None,
                        &mut scratch,
                    )
                    .unwrap();
                    black_box(&out);
                })
            });
        }
        // The peer computes the same release: check it before timing anything.
        let mut scratch = vec![0.0; noisy_head_scratch_len(&p, Form::Streaming).unwrap()];
        let mut ours = vec![0.0; d2];
        noisy_head_keyed(
            &mut ours,
            &vec![0.0; d2],
            &prompts,
            &p,
            Form::Streaming,
            Draw { key: &key, stream: 0 },
            None,
            &mut scratch,
        )
        .unwrap();
        let peer = naive(&p, &prompts, &key);
        let scale = ours.iter().map(|x| x.abs()).fold(1e-300, f64::max);
        let diff = ours.iter().zip(&peer).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(diff <= 1e-9 * scale, "{name}: naive peer differs by {diff:e}");
        g.bench_function(BenchmarkId::new("naive dense Z (peer)", name), |b| {
            b.iter(|| black_box(naive(&p, &prompts, &key)))
        });
    }
    g.finish();
}

criterion_group!(benches, release);
criterion_main!(benches);
