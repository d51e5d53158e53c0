//! How accurate is DP cross-attention at real head dimensions? The random-feature KV sketch
//! (`dpattn::kv_sketch`) against output perturbation and the query-blind baseline, on one
//! synthetic private document, as relative error against exact softmax attention.
//!
//! The document: `n` positions in 16 topics; a key is its topic's direction plus noise
//! (norm `R_k`), a value its topic's value direction plus noise (norm `R_v = 1`); public
//! queries point at one topic each (norm `R_q = R_k`), with the logit scale `1/√d` and
//! `R_q·R_k/√d = 6`, so a query puts most of its weight on its own topic (the exact output
//! is far from the mean of all values). Columns:
//!
//! * `sketch m=…`: the KV sketch released once at `(ε, 1e-6)`, then every query answered
//!   from it (its error does not depend on the number of queries);
//! * `rf only`: the same sketch without noise (the random-feature error alone);
//! * `outpert Q=…`: output perturbation at `(ε, 1e-6)` for `Q` queries in one release;
//! * `mean(V)`: the query-blind answer (the mean value row; any useful mechanism must beat
//!   it).
//!
//! Errors are `‖ô − o‖/‖o‖`, averaged over 16 queries. Run:
//! `cargo run --release --example kv_sketch_utility [-- --quick]` (about 2 minutes; `--quick`
//! stops at `n = 10^4`). Numbers in docs/BENCHMARKS.md.

use std::time::Instant;

use dpattn::kv_sketch::{KvSketch, KvSketchParams};
use dpattn::output_perturbation::{
    OutputPerturbationParams, output_perturbation_attention_keyed, output_perturbation_scratch_len,
};
use dpattn::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn::session::Draw;
use dpattn::{
    BatchedMut, BatchedRef, Kernel, MatMut, MatRef, NoiseMode, PrivacyBudget, Scale, ScoreFn,
};

const TOPICS: usize = 16;
const QUERIES: usize = 16;
const DELTA: f64 = 1e-6;

fn gaussians(seed: u8, len: usize) -> Vec<f64> {
    let mut out = vec![0.0; len];
    let s = KeyedStream::new(&NoiseKey::for_replay([seed; 32]), 0);
    Gaussian::STANDARD.fill_keyed::<f64>(&s, 0, &mut out).unwrap();
    out
}

fn normalise(x: &mut [f64], norm: f64) {
    let n = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    x.iter_mut().for_each(|v| *v *= norm / n);
}

/// Topic `c`'s key direction plus `noise` times a random direction, scaled to `norm`.
fn rows(
    centres: &[f64],
    noise: &[f64],
    d: usize,
    topic: impl Fn(usize) -> usize,
    n: usize,
    mix: f64,
    norm: f64,
) -> Vec<f64> {
    let mut out = vec![0.0; n * d];
    for j in 0..n {
        let c = topic(j);
        let row = &mut out[j * d..(j + 1) * d];
        for l in 0..d {
            row[l] = centres[c * d + l] + mix * noise[j * d + l] / (d as f64).sqrt();
        }
        normalise(row, norm);
    }
    out
}

/// Exact softmax attention in `f64`.
fn attention(q: &[f64], k: &[f64], v: &[f64], n: usize, d: usize, scale: f64) -> Vec<f64> {
    let logits: Vec<f64> = (0..n)
        .map(|j| scale * q.iter().zip(&k[j * d..]).map(|(a, b)| a * b).sum::<f64>())
        .collect();
    let top = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = logits.iter().map(|l| (l - top).exp()).collect();
    let total: f64 = w.iter().sum();
    let mut o = vec![0.0; d];
    for j in 0..n {
        for c in 0..d {
            o[c] += w[j] * v[j * d + c] / total;
        }
    }
    o
}

fn rel(a: &[f64], b: &[f64]) -> f64 {
    let e: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt();
    e / b.iter().map(|y| y * y).sum::<f64>().sqrt()
}

/// The value after `--name` on the command line, or `default`.
fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().unwrap())
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let logit_range = arg("--logit-range", 6.0);
    let clip = arg("--clip", dpattn::kv_sketch::DEFAULT_CLIP);
    let only_d = arg("--d", 0.0) as usize;
    let only_n = [arg("--n", 0.0) as usize];
    let ns: &[usize] = if only_n[0] != 0 {
        &only_n
    } else if quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000, 1_000_000]
    };
    let epsilons = [1.0, 4.0, 8.0];
    println!(
        "relative error against exact attention, mean over {QUERIES} queries, delta = {DELTA}"
    );
    println!(
        "{:>9} {:>4} {:>6} {:>4} {:>10} {:>10} {:>12} {:>12} {:>13} {:>9}",
        "n",
        "d",
        "m",
        "eps",
        "sketch",
        "rf only",
        "outpert Q=1",
        "outpert Q=16",
        "outpert Q=256",
        "mean(V)"
    );
    println!("logit range s*R_q*R_k = {logit_range}, feature clip {clip}");
    for &d in &[64usize, 128] {
        if only_d != 0 && d != only_d {
            continue;
        }
        let scale = 1.0 / (d as f64).sqrt();
        let r = (logit_range / scale).sqrt(); // R_q = R_k, s·R_q·R_k = LOGIT_RANGE
        let key_centres = {
            let mut c = gaussians(1, TOPICS * d);
            c.chunks_mut(d).for_each(|x| normalise(x, 1.0));
            c
        };
        let val_centres = {
            let mut c = gaussians(2, TOPICS * d);
            c.chunks_mut(d).for_each(|x| normalise(x, 1.0));
            c
        };
        for &n in ns {
            let topic = |j: usize| (j * 7 + j / 3) % TOPICS;
            let keys = rows(&key_centres, &gaussians(3, n * d), d, topic, n, 1.0, r);
            let vals = rows(&val_centres, &gaussians(4, n * d), d, topic, n, 1.0, 1.0);
            let queries =
                rows(&key_centres, &gaussians(5, 256 * d), d, |i| i % TOPICS, 256, 0.3, r);
            let exact: Vec<Vec<f64>> = (0..QUERIES)
                .map(|i| attention(&queries[i * d..(i + 1) * d], &keys, &vals, n, d, scale))
                .collect();
            let mean_v: Vec<f64> =
                (0..d).map(|c| (0..n).map(|j| vals[j * d + c]).sum::<f64>() / n as f64).collect();
            let baseline = exact.iter().map(|o| rel(&mean_v, o)).sum::<f64>() / QUERIES as f64;
            // Output perturbation, once per ε and Q (f32 inputs, as engines hold them).
            let op = |eps: f64, q_rows: usize| -> f64 {
                let q32: Vec<f32> = queries[..q_rows * d].iter().map(|&x| x as f32).collect();
                let k32: Vec<f32> = keys.iter().map(|&x| x as f32).collect();
                let v32: Vec<f32> = vals.iter().map(|&x| x as f32).collect();
                let params = OutputPerturbationParams {
                    key_norm: r * 1.001,
                    value_norm: 1.001,
                    budget: PrivacyBudget::new(eps, DELTA).unwrap(),
                    scale: Scale::Custom(scale),
                    score: ScoreFn::Exp,
                    key_padding: None,
                    kernel: Kernel::Auto,
                    noise_mode: NoiseMode::Exact,
                };
                let mut out = vec![0f32; q_rows * d];
                let mut scratch = vec![0f32; output_perturbation_scratch_len(d, d).unwrap()];
                let key = NoiseKey::for_replay([9; 32]);
                output_perturbation_attention_keyed(
                    BatchedMut::contiguous(&mut out, [1, 1, q_rows, d]).unwrap(),
                    BatchedRef::contiguous(&q32, [1, 1, q_rows, d]).unwrap(),
                    BatchedRef::contiguous(&k32, [1, 1, n, d]).unwrap(),
                    BatchedRef::contiguous(&v32, [1, 1, n, d]).unwrap(),
                    &params,
                    Draw { key: &key, stream: 0 },
                    None,
                    &mut [0.0],
                    &mut scratch,
                )
                .unwrap();
                (0..QUERIES.min(q_rows))
                    .map(|i| {
                        let o: Vec<f64> =
                            out[i * d..(i + 1) * d].iter().map(|&x| f64::from(x)).collect();
                        rel(&o, &exact[i])
                    })
                    .sum::<f64>()
                    / QUERIES.min(q_rows) as f64
            };
            let only_m = [arg("--m", 0.0) as usize];
            let ms: &[usize] = if only_m[0] != 0 {
                &only_m
            } else if n >= 1_000_000 {
                &[64]
            } else {
                &[64, 256, 1024]
            };
            for &m in ms {
                let t = Instant::now();
                let budget = PrivacyBudget::new(1.0, DELTA).unwrap();
                let base = KvSketchParams {
                    feature_clip: clip,
                    ..KvSketchParams::new(r * 1.001, 1.001, scale, m, budget)
                };
                let (km, vm) = (
                    MatRef::from_row_major(&keys, n, d).unwrap(),
                    MatRef::from_row_major(&vals, n, d).unwrap(),
                );
                let clean = KvSketch::non_private(km, vm, &base).unwrap();
                let answer_err = |s: &KvSketch| -> f64 {
                    let mut out = vec![0.0; QUERIES * d];
                    s.answer(
                        MatRef::from_row_major(&queries[..QUERIES * d], QUERIES, d).unwrap(),
                        MatMut::from_row_major(&mut out, QUERIES, d).unwrap(),
                    )
                    .unwrap();
                    (0..QUERIES).map(|i| rel(&out[i * d..(i + 1) * d], &exact[i])).sum::<f64>()
                        / QUERIES as f64
                };
                let rf = answer_err(&clean);
                for &eps in &epsilons {
                    let params =
                        KvSketchParams { budget: PrivacyBudget::new(eps, DELTA).unwrap(), ..base };
                    let key = NoiseKey::for_replay([8; 32]);
                    let s =
                        KvSketch::new_keyed(km, vm, &params, Draw { key: &key, stream: 0 }, None)
                            .unwrap();
                    let (o1, o16, o256) = if m == ms[0] {
                        (
                            format!("{:.3}", op(eps, 1)),
                            format!("{:.3}", op(eps, 16)),
                            format!("{:.3}", op(eps, 256)),
                        )
                    } else {
                        ("".into(), "".into(), "".into())
                    };
                    println!(
                        "{n:>9} {d:>4} {m:>6} {eps:>4} {:>10.4} {rf:>10.4} {o1:>12} {o16:>12} {o256:>13} {baseline:>9.3}",
                        answer_err(&s)
                    );
                }
                eprintln!("  (n = {n}, d = {d}, m = {m}: {:.1} s)", t.elapsed().as_secs_f64());
            }
        }
    }
}
