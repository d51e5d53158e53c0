//! What floating-point safety costs: each DP release in the default exact mode (a public grid
//! and exact integer noise, `docs/PRIVACY.md` §8) next to the same release on the unsafe
//! float path (`NoiseMode::UnsafeFloat`, what the library shipped before), in the same run.
//! NoisyHead and the DP-SGD step time both modes in their own benches
//! (`benches/noisy_head.rs`, `benches/weight_shuffle.rs`).
//!
//! Groups:
//! * output perturbation at the quickstart's sizes (4 heads, 16 public queries per head over
//!   1024 private tokens, d = 64), with exact attention of the same shape (no privacy, the
//!   `f32` kernel) as the floor;
//! * DP-Forward on 8 × 128 × 768 `f32` hidden states (i.i.d. noise, sequence level);
//! * feature-column DP attention on paper 000's worked example (`n = 4`, `d = 4096`): the
//!   exact Gram release next to paper 000's sampler (unsafe float only: it has no exact
//!   form) at the smallest feasible `k`;
//! * paper 001 at the quickstart's size (`n = 16384`, `d = 2`): the moment sketch and the
//!   trees' release (`DPCrossAttention`, `l = 1`) in both modes.
//!
//! Run: `cargo bench --bench exact_release` (numbers in docs/BENCHMARKS.md).

use dpattn::session::Draw;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dpattn::attention::{AttentionParams, attention, attention_scratch_len};
use dpattn::dp_forward::{
    ClipMode, ClipRegion, DpForwardParams, Neighbours, NoiseFactors, NoisePosition,
    SensitivityRule, dp_forward_keyed,
};
use dpattn::gaussian_sampling_attention::{
    Calibration, Domain, GaussianSamplingParams, OutOfDomain, Sampler, feasible_k,
    gaussian_sampling_attention_keyed, gaussian_sampling_attention_scratch_len,
};
use dpattn::gram_attention::{
    GramAttentionParams, gram_attention_keyed, gram_attention_scratch_len,
};
use dpattn::output_perturbation::{
    OutputPerturbationParams, output_perturbation_attention_keyed, output_perturbation_scratch_len,
};
use dpattn::sampling::NoiseKey;
use dpattn::{BatchedMut, BatchedRef, Kernel, MatMut, NoiseMode, PrivacyBudget, Scale, ScoreFn};

fn data(len: usize, amp: f64, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f64 / 1001.0 - 1.0) as f32 * amp as f32)
        .collect()
}

fn output_perturbation(c: &mut Criterion) {
    let (heads, sq, sk, d) = (4, 16, 1024, 64);
    let q = data(heads * sq * d, 0.25, 1);
    let k = data(heads * sk * d, 0.25, 2);
    let v = data(heads * sk * d, 0.12, 3);
    let (qs, ks) = ([1, heads, sq, d], [1, heads, sk, d]);
    let mut g = c.benchmark_group("output perturbation 4x16x1024x64 (releases/s)");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));
    let mut out = vec![0f32; heads * sq * d];
    let mut scratch = vec![0f32; output_perturbation_scratch_len(d, d).unwrap()];
    let mut sigma = [0.0; 4];
    let key = NoiseKey::for_replay([1; 32]);
    for mode in [NoiseMode::Exact, NoiseMode::ConstantTime, NoiseMode::UnsafeFloat] {
        let params = OutputPerturbationParams {
            key_norm: 2.0,
            value_norm: 1.0,
            budget: PrivacyBudget::new(1.0, 1e-6).unwrap(),
            scale: Scale::InvSqrtDim,
            score: ScoreFn::Exp,
            key_padding: None,
            kernel: Kernel::Auto,
            noise_mode: mode,
        };
        g.bench_function(mode.name(), |b| {
            b.iter(|| {
                output_perturbation_attention_keyed(
                    BatchedMut::contiguous(&mut out, qs).unwrap(),
                    BatchedRef::contiguous(&q, qs).unwrap(),
                    BatchedRef::contiguous(&k, ks).unwrap(),
                    BatchedRef::contiguous(&v, ks).unwrap(),
                    &params,
                    Draw { key: &key, stream: 0 },
                    None,
                    &mut sigma,
                    &mut scratch,
                )
                .unwrap();
                black_box(&out);
            })
        });
    }
    g.bench_function("exact attention, no privacy (floor)", |b| {
        let mut s = vec![0f32; attention_scratch_len(d, d).unwrap()];
        b.iter(|| {
            attention(
                BatchedMut::contiguous(&mut out, qs).unwrap(),
                BatchedRef::contiguous(&q, qs).unwrap(),
                BatchedRef::contiguous(&k, ks).unwrap(),
                BatchedRef::contiguous(&v, ks).unwrap(),
                &AttentionParams::default(),
                &mut s,
            )
            .unwrap();
            black_box(&out);
        })
    });
    g.finish();
}

fn dp_forward_modes(c: &mut Criterion) {
    let (batch, tokens, dim) = (8, 128, 768);
    let x0 = data(batch * tokens * dim, 1.0, 4);
    let mut g = c.benchmark_group("dp_forward 8x128x768 f32 iid (rows/s)");
    g.throughput(Throughput::Elements((batch * tokens) as u64));
    g.measurement_time(Duration::from_secs(3));
    let key = NoiseKey::for_replay([2; 32]);
    for mode in [NoiseMode::Exact, NoiseMode::UnsafeFloat] {
        let p = DpForwardParams {
            budget: PrivacyBudget::new(8.0, 1e-5).unwrap(),
            releases: 1,
            clip_norm: 1.0,
            region: ClipRegion::Frobenius,
            mode: ClipMode::Normalize,
            neighbours: Neighbours::Sequence,
            position: NoisePosition::Embedding,
            tokens,
            dim,
            rule: SensitivityRule::Derived,
            noise_mode: mode,
        };
        let mut x = x0.clone();
        g.bench_function(mode.name(), |b| {
            b.iter(|| {
                x.copy_from_slice(&x0);
                dp_forward_keyed(
                    MatMut::from_row_major(&mut x, batch * tokens, dim).unwrap(),
                    &p,
                    &NoiseFactors::Iid,
                    Draw { key: &key, stream: 0 },
                    0,
                    None,
                    &mut [],
                )
                .unwrap();
                black_box(&x);
            })
        });
    }
    g.finish();
}

fn feature_column(c: &mut Criterion) {
    let (n, d) = (4usize, 4096usize);
    let x: Vec<f64> = (0..n * d)
        .map(|i| {
            let sign = if ((i / d) & (i % d)).count_ones().is_multiple_of(2) { 1.0 } else { -1.0 };
            sign * (0.05f64 / 4096.0).sqrt()
        })
        .collect();
    let domain =
        Domain::new((0.2f64 / 4096.0).sqrt() * (1.0 + 1e-12), 0.05 * (1.0 - 1e-9), 5e-6).unwrap();
    let budget = PrivacyBudget::new(0.09, 1e-6).unwrap();
    let k = *feasible_k(n, &domain, budget, 0.01, &Calibration::PAPER_LITERAL).unwrap().start();
    let mut g = c.benchmark_group("feature-column DP attention n=4 d=4096 (releases/s)");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));
    let key = NoiseKey::for_replay([3; 32]);
    let (mut b, mut p) = (vec![0.0; n * n], vec![0.0; n * n]);
    let gram = GramAttentionParams::new(budget, domain.alpha, domain.beta);
    let mut scratch = vec![0.0; gram_attention_scratch_len(d)];
    g.bench_function("Gram release (exact)", |bch| {
        bch.iter(|| {
            gram_attention_keyed(
                BatchedMut::contiguous(&mut b, [1, 1, n, n]).unwrap(),
                BatchedMut::contiguous(&mut p, [1, 1, n, n]).unwrap(),
                BatchedRef::contiguous(&x, [1, 1, n, d]).unwrap(),
                &gram,
                Draw { key: &key, stream: 0 },
                None,
                &mut scratch,
            )
            .unwrap();
            black_box(&p);
        })
    });
    let paper = GaussianSamplingParams::new(budget, domain, k).unsafe_float();
    let mut scratch =
        vec![
            0.0;
            gaussian_sampling_attention_scratch_len(n, d, Sampler::Bartlett, OutOfDomain::Reject)
                .unwrap()
        ];
    g.bench_function(format!("paper 000 Bartlett, k = {k} (unsafe-float)"), |bch| {
        bch.iter(|| {
            gaussian_sampling_attention_keyed(
                BatchedMut::contiguous(&mut b, [1, 1, n, n]).unwrap(),
                BatchedMut::contiguous(&mut p, [1, 1, n, n]).unwrap(),
                BatchedRef::contiguous(&x, [1, 1, n, d]).unwrap(),
                &paper,
                Draw { key: &key, stream: 0 },
                None,
                &mut scratch,
            )
            .unwrap();
            black_box(&p);
        })
    });
    g.finish();
}

fn paper001(c: &mut Criterion) {
    use dpattn::moment_sketch::{MomentSketch, MomentSketchParams};
    use dpattn::sampling::{FixedWordSampler, KeyedStream, Uniform};
    use dpattn::softmax_tree::{Copies, SoftmaxTreeParams};
    use dpattn::softmax_tree_cross_attention::{
        SoftmaxTreeCrossAttention, SoftmaxTreeCrossAttentionParams,
    };
    // The quickstart's setting: n = 16384 tokens, d = 2, K ∈ [0, 1]^d, V ∈ [−1, 1]^d.
    let (n, d) = (16_384usize, 2usize);
    let draw = |stream: u64, lo: f64, hi: f64| {
        let mut u = vec![0.0; n * d];
        Uniform
            .fill_keyed(&KeyedStream::new(&NoiseKey::for_replay([11; 32]), stream), 0, &mut u)
            .unwrap();
        u.iter().map(|x| lo + (hi - lo) * x).collect::<Vec<f64>>()
    };
    let (k, v) = (draw(1, 0.0, 1.0), draw(2, -1.0, 1.0));
    let (km, vm) = (
        dpattn::MatRef::from_row_major(&k, n, d).unwrap(),
        dpattn::MatRef::from_row_major(&v, n, d).unwrap(),
    );
    let key = NoiseKey::for_replay([4; 32]);
    let stream = dpattn::session::Draw { key: &key, stream: 0 };
    let mut g = c.benchmark_group("paper 001 n=16384 d=2 (releases/s)");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));
    g.sample_size(10);
    for mode in [NoiseMode::Exact, NoiseMode::UnsafeFloat] {
        let mut p = MomentSketchParams::new(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6).unwrap());
        p.noise_mode = mode;
        g.bench_function(format!("moment sketch, {}", mode.name()), |b| {
            b.iter(|| black_box(MomentSketch::new_keyed(km, vm, &p, stream, None).unwrap()))
        });
    }
    for mode in [NoiseMode::Exact, NoiseMode::UnsafeFloat] {
        let mut tree =
            SoftmaxTreeParams::paper(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6).unwrap(), 1e-6);
        tree.noise_mode = mode;
        let mut p = SoftmaxTreeCrossAttentionParams::new(tree);
        p.adaptive.copies = Copies::Fixed(1);
        g.bench_function(format!("DPCrossAttention trees (l = 1), {}", mode.name()), |b| {
            b.iter(|| {
                black_box(SoftmaxTreeCrossAttention::new_keyed(km, vm, &p, stream, None).unwrap())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, output_perturbation, dp_forward_modes, feature_column, paper001);
criterion_main!(benches);
