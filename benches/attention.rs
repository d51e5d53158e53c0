//! Single-core CPU attention throughput, side by side with a single-core sgemm and a naive
//! materialised attention measured in the same process.
//!
//! Problem: self-attention, one batch, one head, `S_q = S_k = S ∈ {512, 2048}`,
//! `d = d_v = D ∈ {64, 128}`, no mask, scale `1/√D`, softmax; inputs `f32` or `bf16`
//! (`half::bf16`), output `f32`. Every benchmark of a group reports criterion's
//! `Throughput::Elements(4·S²·D)`: the "elem/s" criterion prints **is FLOP/s** (one
//! multiply-add counted as 2 FLOPs, the usual `4·S_q·S_k·D` per head of `Q·Kᵀ` plus `P·V`;
//! the softmax is not counted).
//!
//! Measured in each `(S, D)` group, in this order:
//! * `sgemm QK^T + PV`: the two products attention performs, as two single-core calls of
//!   the `gemm` crate (`Parallelism::None`, its run-time AVX2/FMA dispatch): `Q·Kᵀ`
//!   (`S×D` times `D×S`, `K` read transposed from its row-major `S×D` storage) into a
//!   materialised `S×S` `f32` matrix, then that matrix times `V` (`S×S` times `S×D`).
//!   Same shapes, same `4·S²·D` FLOPs, no softmax: the rate a GEMM library reaches on
//!   exactly these products, the denominator of "fraction of sgemm".
//! * `naive`: a materialised attention written with plain loops: the `S×S` score matrix in
//!   `f32` (`i-c-j` loop order over a transposed copy of `K`, so the inner loop is a
//!   vectorisable axpy), a max-shifted row softmax with `f32::exp`, then `P·V` (`i-j-c`
//!   order). The widening of `bf16` inputs and the transpose are inside the timing.
//! * `dpattn avx2` and `dpattn portable`: `dpattn::attention::attention` with
//!   `Kernel::Avx2Fma` (what `Kernel::Auto` picks on an AVX2+FMA CPU; skipped where it is
//!   unavailable) and `Kernel::Portable`, caller-provided scratch.
//!
//! The sgemm is also called once, unconditionally, at the start of every group, so that our
//! kernels always run after another library's SIMD code in the same process (even when a
//! criterion filter skips the sgemm benchmark): the legacy-SSE / dirty-upper-state slowdown
//! described in `docs/PAPERS.md` A.1.3 (measured as in A.1.2) would show up here. A second group
//! per `(S, D)` times a square sgemm with (nearly) the same FLOP count, for reference.
//! Before timing, every variant's output is checked against the naive one. Under
//! `cargo test --benches` (criterion's test mode) only one small size runs, once.
//!
//! Run (2-core machine, one pinned core): `taskset -c 1 cargo bench --bench attention --
//! --warm-up-time 1 --measurement-time 3` (numbers in docs/BENCHMARKS.md).

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
    measurement::WallTime,
};
use dpattn::attention::{AttentionParams, attention, attention_scratch_len, attention_threaded};
use dpattn::{BatchedMut, BatchedRef, Element, Kernel};
use gemm::Parallelism;
use half::bf16;
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};

/// Sequence lengths and head dimensions measured.
const SIZES: [(usize, usize); 4] = [(512, 64), (512, 128), (2048, 64), (2048, 128)];
/// The one size of a smoke test (`cargo test --benches`, unoptimised): partial query and key
/// blocks, still every variant and the cross-check.
const TEST_SIZES: [(usize, usize); 1] = [(200, 64)];

/// Criterion's own rule: without `--bench`, or with `--test`, benchmarks run once as tests.
fn test_mode() -> bool {
    let has = |flag: &str| std::env::args().any(|a| a == flag);
    !has("--bench") || has("--test")
}

/// `S×D` row-major inputs, uniform in `[-1, 1)`.
struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl Inputs {
    fn new(s: usize, d: usize) -> Self {
        let mut r = ChaCha20Rng::from_seed([11; 32]);
        let mut draw = || -> Vec<f32> {
            (0..s * d).map(|_| (r.next_u32() >> 8) as f32 * (2.0 / 16_777_216.0) - 1.0).collect()
        };
        Inputs { q: draw(), k: draw(), v: draw() }
    }
}

/// The two products of attention with the `gemm` crate on one core: `c = Q·Kᵀ` (`S×S`),
/// then `out = c·V` (`S×D`). All matrices row-major.
fn sgemm_pair(q: &[f32], k: &[f32], v: &[f32], c: &mut [f32], out: &mut [f32], s: usize, d: usize) {
    assert!(q.len() == s * d && k.len() == s * d && v.len() == s * d);
    assert!(c.len() == s * s && out.len() == s * d);
    let (si, di) = (s as isize, d as isize);
    // SAFETY: every pointer covers the matrix it describes: `c` is `s×s` with row stride
    // `s`; `q` is `s×d` with row stride `d`; the right operand `Kᵀ` (`d×s`) has element
    // `(r, j)` at `k[j·d + r]` (column stride `d`, row stride 1), inside `k` (`s·d`).
    // `read_dst` is false, so the uninitialised-value question does not arise; no
    // operand aliases the destination.
    unsafe {
        gemm::gemm(
            s,
            s,
            d,
            c.as_mut_ptr(),
            1,
            si,
            false,
            q.as_ptr(),
            1,
            di,
            k.as_ptr(),
            di,
            1,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
    // SAFETY: `out` is `s×d` (row stride `d`), `c` is `s×s` (row stride `s`), `v` is `s×d`
    // (row stride `d`); the slices' lengths were asserted above and nothing aliases `out`.
    unsafe {
        gemm::gemm(
            s,
            d,
            s,
            out.as_mut_ptr(),
            1,
            di,
            false,
            c.as_ptr(),
            1,
            si,
            v.as_ptr(),
            1,
            di,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// Square `n×n` sgemm, one core.
fn sgemm_square(a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    assert!(a.len() == n * n && b.len() == n * n && c.len() == n * n);
    let ni = n as isize;
    // SAFETY: all three are `n×n` row-major (row stride `n`, column stride 1), lengths
    // asserted; `c` aliases neither input.
    unsafe {
        gemm::gemm(
            n,
            n,
            n,
            c.as_mut_ptr(),
            1,
            ni,
            false,
            a.as_ptr(),
            1,
            ni,
            b.as_ptr(),
            1,
            ni,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// Buffers of the naive materialised attention.
struct Naive {
    q: Vec<f32>,
    kt: Vec<f32>,
    v: Vec<f32>,
    p: Vec<f32>,
}

impl Naive {
    fn new(s: usize, d: usize) -> Self {
        Naive {
            q: vec![0.0; s * d],
            kt: vec![0.0; s * d],
            v: vec![0.0; s * d],
            p: vec![0.0; s * s],
        }
    }

    /// `out = softmax(Q·Kᵀ/√d)·V` with the full `S×S` matrix in `f32` and plain loops.
    fn run<T: Element>(&mut self, q: &[T], k: &[T], v: &[T], out: &mut [f32], s: usize, d: usize) {
        let scale = 1.0 / (d as f32).sqrt();
        for (dst, x) in self.q.iter_mut().zip(q) {
            *dst = x.to_f32() * scale;
        }
        for (dst, x) in self.v.iter_mut().zip(v) {
            *dst = x.to_f32();
        }
        for j in 0..s {
            for c in 0..d {
                self.kt[c * s + j] = k[j * d + c].to_f32();
            }
        }
        for i in 0..s {
            let row = &mut self.p[i * s..(i + 1) * s];
            row.fill(0.0);
            for c in 0..d {
                let a = self.q[i * d + c];
                for (p, &kt) in row.iter_mut().zip(&self.kt[c * s..(c + 1) * s]) {
                    *p += a * kt;
                }
            }
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let mut sum = 0.0f32;
            for p in row.iter_mut() {
                *p = (*p - max).exp();
                sum += *p;
            }
            let inv = 1.0 / sum;
            let o = &mut out[i * d..(i + 1) * d];
            o.fill(0.0);
            for (j, &p) in row.iter().enumerate() {
                let w = p * inv;
                for (o, &v) in o.iter_mut().zip(&self.v[j * d..(j + 1) * d]) {
                    *o += w * v;
                }
            }
        }
    }
}

/// Our attention, one batch and one head: [`attention`], or [`attention_threaded`] on
/// `threads > 1` threads (`scratch` then holds one part per thread).
fn ours<T: Element>(
    kernel: Kernel,
    threads: usize,
    [q, k, v]: [&[T]; 3],
    out: &mut [f32],
    scratch: &mut [f32],
    s: usize,
    d: usize,
) {
    let shape = [1, 1, s, d];
    let params = AttentionParams { kernel, ..Default::default() };
    let out = BatchedMut::contiguous(out, shape).unwrap();
    let [q, k, v] = [q, k, v].map(|x| BatchedRef::contiguous(x, shape).unwrap());
    match threads {
        1 => attention(out, q, k, v, &params, scratch),
        t => attention_threaded(out, q, k, v, &params, t, scratch),
    }
    .unwrap();
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn group<'a>(c: &'a mut Criterion, name: String, flops: u64) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(flops));
    // One call takes milliseconds to a second: one call per sample, 10 samples minimum.
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g
}

fn attention_vs_sgemm(c: &mut Criterion) {
    let kernels: Vec<(&str, Kernel)> = [("avx2", Kernel::Avx2Fma), ("portable", Kernel::Portable)]
        .into_iter()
        .filter(|(name, k)| {
            let ok = k.is_available();
            if !ok {
                eprintln!(
                    "note: Kernel::Avx2Fma is not available on this CPU; `dpattn {name}` skipped"
                );
            }
            ok
        })
        .collect();
    let sizes: &[(usize, usize)] = if test_mode() { &TEST_SIZES } else { &SIZES };
    for &(s, d) in sizes {
        let x = Inputs::new(s, d);
        let xb: [Vec<bf16>; 3] =
            [&x.q, &x.k, &x.v].map(|v| v.iter().map(|&f| bf16::from_f32(f)).collect());
        let mut cmat = vec![0.0f32; s * s];
        let mut out = vec![0.0f32; s * d];
        let mut expected = vec![0.0f32; s * d];
        let mut expected_bf16 = vec![0.0f32; s * d];
        let mut naive = Naive::new(s, d);
        let mut scratch = vec![0.0f32; attention_scratch_len(d, d).unwrap()];

        // Another library's SIMD code runs first, whatever a filter selects below.
        sgemm_pair(&x.q, &x.k, &x.v, &mut cmat, &mut out, s, d);
        naive.run(&x.q, &x.k, &x.v, &mut expected, s, d);
        naive.run(&xb[0], &xb[1], &xb[2], &mut expected_bf16, s, d);
        for &(name, kernel) in &kernels {
            ours(kernel, 1, [&x.q, &x.k, &x.v], &mut out, &mut scratch, s, d);
            let err = max_abs_diff(&out, &expected);
            assert!(err < 1e-4, "dpattn {name} f32 differs from naive by {err}");
            ours(kernel, 1, [&xb[0], &xb[1], &xb[2]], &mut out, &mut scratch, s, d);
            let err = max_abs_diff(&out, &expected_bf16);
            assert!(err < 1e-4, "dpattn {name} bf16 differs from naive by {err}");
        }

        let flops = 4 * (s * s * d) as u64;
        let mut g = group(c, format!("attention S={s} D={d} (elem/s = FLOP/s)"), flops);
        g.bench_function("sgemm QK^T + PV (gemm, f32)", |b| {
            b.iter(|| sgemm_pair(&x.q, &x.k, &x.v, &mut cmat, black_box(&mut out), s, d))
        });
        g.bench_function("naive f32", |b| {
            b.iter(|| naive.run(&x.q, &x.k, &x.v, black_box(&mut out), s, d))
        });
        g.bench_function("naive bf16", |b| {
            b.iter(|| naive.run(&xb[0], &xb[1], &xb[2], black_box(&mut out), s, d))
        });
        for &(name, kernel) in &kernels {
            g.bench_function(format!("dpattn {name} f32"), |b| {
                b.iter(|| {
                    ours(kernel, 1, [&x.q, &x.k, &x.v], black_box(&mut out), &mut scratch, s, d)
                })
            });
            g.bench_function(format!("dpattn {name} bf16"), |b| {
                b.iter(|| {
                    ours(
                        kernel,
                        1,
                        [&xb[0], &xb[1], &xb[2]],
                        black_box(&mut out),
                        &mut scratch,
                        s,
                        d,
                    )
                })
            });
        }
        // The same kernel on 2 threads (query rows split per thread; bit for bit the above).
        if let Some(&(name, kernel)) = kernels.first() {
            let mut scratch2 = vec![0.0f32; 2 * attention_scratch_len(d, d).unwrap()];
            g.bench_function(format!("dpattn {name} f32 2 threads"), |b| {
                b.iter(|| {
                    ours(kernel, 2, [&x.q, &x.k, &x.v], black_box(&mut out), &mut scratch2, s, d)
                })
            });
        }
        g.finish();
        drop(cmat);

        // The square product with the nearest FLOP count: 2n³ ≈ 4·S²·D.
        let n = (2.0 * (s * s * d) as f64).cbrt().round() as usize;
        let a = Inputs::new(n, n);
        let mut csq = vec![0.0f32; n * n];
        let mut g =
            group(c, format!("sgemm square n={n} (~S={s} D={d} FLOPs)"), 2 * (n * n * n) as u64);
        g.bench_function("sgemm square (gemm, f32)", |b| {
            b.iter(|| sgemm_square(&a.q, &a.k, black_box(&mut csq), n))
        });
        g.finish();
    }
}

/// Decoding: one query row against a KV cache of `s_k` rows, `d = d_v = D`, `f32`, the
/// small-query path. Throughput is the bytes of K and V (`2·s_k·D·4`). The peer in the same
/// group reads the same bytes: a sum over K and V with eight independent accumulators
/// (vectorised), the rate a single pass over the cache can reach on this core.
fn decode(c: &mut Criterion) {
    let sizes: &[(usize, usize)] = if test_mode() {
        &[(16, 64), (100, 64)]
    } else {
        &[(16, 64), (16, 128), (4096, 64), (4096, 128), (32768, 128)]
    };
    for &(sk, d) in sizes {
        let kv = Inputs::new(sk, d);
        let q = kv.q[..d].to_vec();
        let bytes = (2 * sk * d * 4) as u64;
        let mut g = c.benchmark_group(format!("decode 1x{sk}x{d}"));
        g.throughput(Throughput::Bytes(bytes));
        let mut out = vec![0f32; d];
        let mut scratch = vec![0f32; attention_scratch_len(d, d).unwrap()];
        let params = AttentionParams::default();
        let mut call = |out: &mut [f32]| {
            attention(
                BatchedMut::contiguous(out, [1, 1, 1, d]).unwrap(),
                BatchedRef::contiguous(&q, [1, 1, 1, d]).unwrap(),
                BatchedRef::contiguous(&kv.k, [1, 1, sk, d]).unwrap(),
                BatchedRef::contiguous(&kv.v, [1, 1, sk, d]).unwrap(),
                &params,
                &mut scratch,
            )
            .unwrap()
        };
        // Checked against the float64 reference before timing.
        call(&mut out);
        let want = dpattn::reference_attention::reference_attention_vec(
            &q,
            &kv.k,
            &kv.v,
            [1, 1, 1, d],
            sk,
            d,
            dpattn::Mask::NONE,
            dpattn::Scale::InvSqrtDim,
        )
        .unwrap();
        let err = out.iter().zip(&want).fold(0.0f64, |m, (&a, &b)| m.max((f64::from(a) - b).abs()));
        assert!(err < 1e-5, "decode {sk}x{d}: error {err}");
        g.bench_function("read K and V (sum, 8 accumulators) - peer", |b| {
            b.iter(|| {
                let mut acc = [0f32; 8];
                for x in [&kv.k, &kv.v] {
                    for c in black_box(x).chunks_exact(8) {
                        for j in 0..8 {
                            acc[j] += c[j];
                        }
                    }
                }
                black_box(acc)
            })
        });
        g.bench_function("dpattn decode f32", |b| b.iter(|| call(black_box(&mut out))));
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = attention_vs_sgemm, decode
}
criterion_main!(benches);
