//! How accurate is DP cross-attention at real head dimensions? The random-feature KV sketch
//! (`dpattn::kv_sketch`) against output perturbation and the query-blind baseline, on one
//! synthetic private document, as relative error `‖ô − o‖/‖o‖` against exact softmax
//! attention (mean over 16 public queries).
//!
//! The document: `n` positions in 16 topics; a key is its topic's direction plus noise
//! (norm `R_k`), a value its topic's value direction plus noise (norm `R_v = 1`); each public
//! query points at one topic (norm `R_q = R_k`); the logit scale is `1/√d` and
//! `s·R_q·R_k` = `--logit-range` (default 2), so a query weighs its own topic more than the
//! others and the exact output is far from the mean of all values. The mechanisms:
//!
//! * `sketch`: the KV sketch released once at `(ε, 1e-6)`, every query answered from it (its
//!   error does not depend on the number of queries); `rf only`: the same without noise;
//! * `outpert Q`: output perturbation at `(ε, 1e-6)` releasing `Q` query rows at once;
//! * `mean(V)`: the query-blind answer (any useful mechanism must beat it).
//!
//! Run `cargo run --release --example privacy_utility` for the table of docs/BENCHMARKS.md
//! (`--quick` stops at `n = 10^4`; `--n`, `--d`, `--m`, `--logit-range`, `--clip` pick one
//! setting), or `-- --figure docs/figures/dp_cross_attention.svg` for the figure: error
//! against ε at `n = 10^5`, `d = 64` (about 3 minutes on 2 cores).

use std::fmt::Write as _;

use dpattn::accounting::ledger::Ledger;
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::kv_sketch::{DEFAULT_CLIP, KvSketch, KvSketchParams};
use dpattn::output_perturbation::{
    OutputPerturbationParams, output_perturbation_attention, output_perturbation_scratch_len,
};
use dpattn::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn::session::Session;
use dpattn::{
    BatchedMut, BatchedRef, Kernel, MatMut, MatRef, NoiseMode, PrivacyBudget, Scale, ScoreFn,
};

const TOPICS: usize = 16;
const QUERIES: usize = 16;
const DELTA: f64 = 1e-6;

/// The value after `--name` on the command line, or `default`.
fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name);
    at.and_then(|i| args.get(i + 1)).map_or(default, |v| v.parse().expect("a number"))
}

/// Synthetic *data* (not noise): `len` standard normals from a fixed public stream, so every
/// run measures the same document. Every release below draws its noise from a session's
/// OS key, so the noisy columns move by a few per cent between runs.
fn gaussians(seed: u8, len: usize) -> Vec<f64> {
    let mut out = vec![0.0; len];
    let data = KeyedStream::new(&NoiseKey::for_replay([seed; 32]), 0);
    Gaussian::STANDARD.fill_keyed::<f64>(&data, 0, &mut out).unwrap();
    out
}

/// A fresh session (OS key, stream ids) whose token ledger holds exactly one release at
/// `(ε, DELTA)`: each measured release is charged, and could not be charged twice.
fn session(eps: f64) -> Session {
    let budget = PrivacyBudget::new(eps, DELTA).unwrap();
    Session::new(Ledger::new_approx(PrivacyUnit::TOKEN, budget)).unwrap()
}

fn normalise(x: &mut [f64], norm: f64) {
    let n = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    x.iter_mut().for_each(|v| *v *= norm / n);
}

fn rel(a: &[f64], b: &[f64]) -> f64 {
    let e: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt();
    e / b.iter().map(|y| y * y).sum::<f64>().sqrt()
}

/// One private document, its public queries and the exact answers.
struct Document {
    n: usize,
    d: usize,
    scale: f64,
    norm: f64,
    keys: Vec<f64>,
    vals: Vec<f64>,
    queries: Vec<f64>,
    exact: Vec<Vec<f64>>,
    baseline: f64,
}

impl Document {
    fn new(n: usize, d: usize, logit_range: f64) -> Self {
        let scale = 1.0 / (d as f64).sqrt();
        let norm = (logit_range / scale).sqrt(); // R_q = R_k
        let centres = |seed| {
            let mut c = gaussians(seed, TOPICS * d);
            c.chunks_mut(d).for_each(|x| normalise(x, 1.0));
            c
        };
        // Topic direction plus `mix` times a random direction of norm about 1, scaled.
        let rows = |centres: &[f64], seed, count, topic: &dyn Fn(usize) -> usize, mix, len| {
            let noise = gaussians(seed, count * d);
            let mut out = vec![0.0; count * d];
            for (j, row) in out.chunks_mut(d).enumerate() {
                let c = topic(j);
                for (l, x) in row.iter_mut().enumerate() {
                    *x = centres[c * d + l] + mix * noise[j * d + l] / (d as f64).sqrt();
                }
                normalise(row, len);
            }
            out
        };
        let (kc, vc) = (centres(1), centres(2));
        let topic = |j: usize| (j * 7 + j / 3) % TOPICS;
        let keys = rows(&kc, 3, n, &topic, 1.0, norm);
        let vals = rows(&vc, 4, n, &topic, 1.0, 1.0);
        let queries = rows(&kc, 5, 256, &|i| i % TOPICS, 0.3, norm);
        let mut doc = Self { n, d, scale, norm, keys, vals, queries, exact: vec![], baseline: 0.0 };
        doc.exact = (0..QUERIES).map(|i| doc.attention(i)).collect();
        let mean: Vec<f64> =
            (0..d).map(|c| (0..n).map(|j| doc.vals[j * d + c]).sum::<f64>() / n as f64).collect();
        doc.baseline = doc.mean_error(QUERIES, |_| mean.clone());
        doc
    }

    /// Exact softmax attention of query `i` in `f64`.
    fn attention(&self, i: usize) -> Vec<f64> {
        let (d, q) = (self.d, &self.queries[i * self.d..(i + 1) * self.d]);
        let logits: Vec<f64> = (0..self.n)
            .map(|j| {
                self.scale * q.iter().zip(&self.keys[j * d..]).map(|(a, b)| a * b).sum::<f64>()
            })
            .collect();
        let top = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = logits.iter().map(|l| (l - top).exp()).collect();
        let total: f64 = w.iter().sum();
        (0..d)
            .map(|c| (0..self.n).map(|j| w[j] * self.vals[j * d + c]).sum::<f64>() / total)
            .collect()
    }

    /// Mean relative error of `answer(i)` over the first `count` evaluated queries.
    fn mean_error(&self, count: usize, answer: impl Fn(usize) -> Vec<f64>) -> f64 {
        let count = count.min(QUERIES);
        (0..count).map(|i| rel(&answer(i), &self.exact[i])).sum::<f64>() / count as f64
    }

    fn sketch_params(&self, m: usize, eps: f64, clip: f64) -> KvSketchParams {
        let budget = PrivacyBudget::new(eps, DELTA).unwrap();
        let p = KvSketchParams::new(self.norm * 1.001, 1.001, self.scale, m, budget);
        KvSketchParams { feature_clip: clip, ..p }
    }

    fn sketch_error(&self, s: &KvSketch) -> f64 {
        let d = self.d;
        let mut out = vec![0.0; QUERIES * d];
        let q = MatRef::from_row_major(&self.queries[..QUERIES * d], QUERIES, d).unwrap();
        s.answer(q, MatMut::from_row_major(&mut out, QUERIES, d).unwrap()).unwrap();
        self.mean_error(QUERIES, |i| out[i * d..(i + 1) * d].to_vec())
    }

    /// The KV sketch's error with `m` features at `ε` (`None`: without noise).
    fn kv_sketch(&self, m: usize, eps: Option<f64>, clip: f64) -> f64 {
        let (n, d) = (self.n, self.d);
        let k = MatRef::from_row_major(&self.keys, n, d).unwrap();
        let v = MatRef::from_row_major(&self.vals, n, d).unwrap();
        let p = self.sketch_params(m, eps.unwrap_or(1.0), clip);
        let s = match eps {
            Some(eps) => KvSketch::new(k, v, &p, &mut session(eps)),
            None => KvSketch::non_private(k, v, &p),
        };
        self.sketch_error(&s.unwrap())
    }

    /// Output perturbation's error at `ε` releasing `q_rows` query rows at once.
    fn outpert(&self, eps: f64, q_rows: usize) -> f64 {
        let (n, d) = (self.n, self.d);
        let f32s = |x: &[f64]| x.iter().map(|&v| v as f32).collect::<Vec<f32>>();
        let (q, k, v) = (f32s(&self.queries[..q_rows * d]), f32s(&self.keys), f32s(&self.vals));
        let params = OutputPerturbationParams {
            key_norm: self.norm * 1.001,
            value_norm: 1.001,
            budget: PrivacyBudget::new(eps, DELTA).unwrap(),
            scale: Scale::Custom(self.scale),
            score: ScoreFn::Exp,
            key_padding: None,
            kernel: Kernel::Auto,
            noise_mode: NoiseMode::Exact,
        };
        let mut out = vec![0f32; q_rows * d];
        let mut scratch = vec![0f32; output_perturbation_scratch_len(d, d).unwrap()];
        output_perturbation_attention(
            BatchedMut::contiguous(&mut out, [1, 1, q_rows, d]).unwrap(),
            BatchedRef::contiguous(&q, [1, 1, q_rows, d]).unwrap(),
            BatchedRef::contiguous(&k, [1, 1, n, d]).unwrap(),
            BatchedRef::contiguous(&v, [1, 1, n, d]).unwrap(),
            &params,
            &mut session(eps),
            &mut [0.0],
            &mut scratch,
        )
        .unwrap();
        self.mean_error(q_rows, |i| out[i * d..(i + 1) * d].iter().map(|&x| f64::from(x)).collect())
    }
}

fn table(logit_range: f64, clip: f64) {
    let quick = std::env::args().any(|a| a == "--quick");
    let pick = |name, all: &[usize]| match arg(name, 0.0) as usize {
        0 => all.to_vec(),
        one => vec![one],
    };
    let ns =
        pick("--n", if quick { &[1_000, 10_000] } else { &[1_000, 10_000, 100_000, 1_000_000] });
    println!("logit range s*R_q*R_k = {logit_range}, feature clip {clip}, delta = {DELTA}");
    println!(
        "{:>9} {:>4} {:>6} {:>4} {:>8} {:>8} {:>12} {:>12} {:>13} {:>8}",
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
    for d in pick("--d", &[64, 128]) {
        for &n in &ns {
            let doc = Document::new(n, d, logit_range);
            let ms = pick("--m", if n >= 1_000_000 { &[64] } else { &[64, 256, 1024] });
            for (mi, &m) in ms.iter().enumerate() {
                let rf = doc.kv_sketch(m, None, clip);
                for eps in [1.0, 4.0, 8.0] {
                    let sketch = doc.kv_sketch(m, Some(eps), clip);
                    let op = if mi == 0 {
                        [1, 16, 256].map(|q| format!("{:.3}", doc.outpert(eps, q)))
                    } else {
                        [(); 3].map(|()| String::new())
                    };
                    println!(
                        "{n:>9} {d:>4} {m:>6} {eps:>4} {sketch:>8.4} {rf:>8.4} {:>12} {:>12} {:>13} {:>8.3}",
                        op[0], op[1], op[2], doc.baseline
                    );
                }
            }
        }
    }
}

/// Error against ε at `n = 10^5`, `d = 64`, as an SVG line chart (log–log) written to `path`.
fn figure(path: &str, logit_range: f64, clip: f64) {
    let doc = Document::new(100_000, 64, logit_range);
    let eps = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0];
    let mut series: Vec<(String, &str, Vec<f64>)> = Vec::new();
    for (m, colour) in [(256, "#1f77b4"), (1024, "#08306b")] {
        let e = eps.iter().map(|&e| doc.kv_sketch(m, Some(e), clip)).collect();
        series.push((format!("KV sketch, m = {m}, any number of queries"), colour, e));
    }
    for (q, colour) in [(1, "#d62728"), (16, "#ff7f0e"), (256, "#e7ba52")] {
        let e = eps.iter().map(|&e| doc.outpert(e, q)).collect();
        series.push((
            format!("output perturbation, {q} quer{}", if q == 1 { "y" } else { "ies" }),
            colour,
            e,
        ));
    }
    series.push((
        "mean of the values (query-blind)".into(),
        "#7f7f7f",
        vec![doc.baseline; eps.len()],
    ));
    let (w, h, left, top, right, bottom) = (720.0, 440.0, 70.0, 40.0, 300.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let x = |e: f64| left + pw * (e / 0.5).log2() / 5.0;
    let (ylo, yhi) = (0.01f64.log10(), 10f64.log10());
    let y = |v: f64| top + ph * (1.0 - (v.clamp(0.01, 10.0).log10() - ylo) / (yhi - ylo));
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(svg, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = write!(
        svg,
        r#"<text x="{left}" y="22" font-size="14">DP cross-attention, n = 100 000 private tokens, d = 64, logit range {logit_range}, δ = 1e-6</text>"#
    );
    for v in [0.01, 0.1, 1.0, 10.0] {
        let yy = y(v);
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{yy}" x2="{}" y2="{yy}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{v}</text>"##,
            left + pw,
            left - 6.0,
            yy + 4.0
        );
    }
    for &e in &eps {
        let xx = x(e);
        let _ = write!(
            svg,
            r##"<line x1="{xx}" y1="{top}" x2="{xx}" y2="{}" stroke="#eee"/><text x="{xx}" y="{}" text-anchor="middle">{e}</text>"##,
            top + ph,
            top + ph + 16.0
        );
    }
    let _ = write!(
        svg,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
    );
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">ε (log scale)</text>"#,
        left + pw / 2.0,
        h - 12.0
    );
    let _ = write!(
        svg,
        r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">relative error vs exact attention (log)</text>"#,
        top + ph / 2.0
    );
    for (k, (label, colour, errs)) in series.iter().enumerate() {
        let pts: Vec<String> =
            eps.iter().zip(errs).map(|(&e, &v)| format!("{:.1},{:.1}", x(e), y(v))).collect();
        let _ = write!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            pts.join(" ")
        );
        for p in &pts {
            let (px, py) = p.split_once(',').unwrap();
            let _ = write!(svg, r#"<circle cx="{px}" cy="{py}" r="3" fill="{colour}"/>"#);
        }
        let ly = top + 14.0 + 20.0 * k as f64;
        let _ = write!(
            svg,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="3"/><text x="{}" y="{}">{label}</text>"#,
            left + pw + 12.0,
            left + pw + 32.0,
            left + pw + 38.0,
            ly + 4.0
        );
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).expect("writing the figure");
    for (label, _, errs) in &series {
        println!(
            "{label}: {}",
            errs.iter().map(|e| format!("{e:.3}")).collect::<Vec<_>>().join(" ")
        );
    }
    println!("wrote {path}");
}

fn main() {
    let logit_range = arg("--logit-range", 2.0);
    let clip = arg("--clip", DEFAULT_CLIP);
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--figure").and_then(|i| args.get(i + 1)) {
        Some(path) => figure(path, logit_range, clip),
        None => table(logit_range, clip),
    }
}
