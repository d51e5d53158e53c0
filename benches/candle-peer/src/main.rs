//! Single-core CPU attention: dpattn-core's tiled kernel against candle's CPU attention, in
//! one process, on the problems of `benches/attention.rs` (self-attention, one batch, one
//! head, `S ∈ {512, 2048}`, `D ∈ {64, 128}`, no mask, scale `1/√D`, `f32` and `bf16`
//! inputs).
//!
//! Peers (candle-core / candle-nn 0.11.1 from crates.io):
//! * `candle flash_attn`: `candle_nn::attention::flash_attn` with `AttnMask::None`, its fused
//!   CPU path (online softmax, one query row at a time, rows spread over rayon threads;
//!   B = 1 goes to `cpu_flash::standard`). Output `f32` / `bf16` as the input.
//! * `candle unfused`: `(Q·scale).matmul(Kᵀ)` → `softmax_last_dim` → `.matmul(V)`, the
//!   gemm-backed path that materialises the `S×S` matrix (for `bf16` candle widens to `f32`
//!   for each product and narrows the result back).
//!
//! Single core: run with `RAYON_NUM_THREADS=1 taskset -c 1` (candle's gemm calls and its
//! flash rows both follow `RAYON_NUM_THREADS`). Each entry is the median of at least 5 timed
//! calls after one warm-up call, taking at least `MIN_SECONDS` (argument 1, default 2) in
//! all. FLOPs are `4·S²·D`.
//!
//! Run: `cd benches/candle-peer && RAYON_NUM_THREADS=1 taskset -c 1 cargo run --release`.

use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use candle_nn::attention::{AttnMask, flash_attn};
use dpattn_core::attention::{AttentionParams, attention, attention_scratch_len};
use dpattn_core::{BatchedMut, BatchedRef, Kernel};
use half::bf16;

const SIZES: [(usize, usize); 4] = [(512, 64), (512, 128), (2048, 64), (2048, 128)];

/// Median seconds per call of `f`.
fn time(min: Duration, mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    let mut samples = Vec::new();
    while samples.len() < 5 || start.elapsed() < min {
        let t = Instant::now();
        f();
        samples.push(t.elapsed().as_secs_f64());
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Deterministic values in `[-1, 1)` (a 64-bit LCG; the data only has to be fixed).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (x >> 40) as f32 * (2.0 / 16_777_216.0) - 1.0
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let min = Duration::from_secs_f64(std::env::args().nth(1).map_or(Ok(2.0), |a| a.parse())?);
    let dev = Device::Cpu;
    println!(
        "RAYON_NUM_THREADS={}, candle threads={}, dpattn kernel={:?}",
        std::env::var("RAYON_NUM_THREADS").unwrap_or_default(),
        candle_core::utils::get_num_threads(),
        Kernel::Auto.resolve()?
    );
    println!(
        "| S | D | dtype | variant | ms/call | GFLOP/s | max abs. difference to dpattn Auto |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (s, d) in SIZES {
        let flops = 4.0 * (s * s * d) as f64;
        let scale = 1.0 / (d as f32).sqrt();
        let x: [Vec<f32>; 3] = [data(s * d, 1), data(s * d, 2), data(s * d, 3)];
        for dtype in [DType::F32, DType::BF16] {
            let name = if dtype == DType::F32 { "f32" } else { "bf16" };
            // Candle tensors (B, S, H, D) = (1, S, 1, D): the same memory as (1, 1, S, D).
            let t: Vec<Tensor> = x
                .iter()
                .map(|v| Tensor::from_slice(v, (1, s, 1, d), &dev)?.to_dtype(dtype))
                .collect::<candle_core::Result<_>>()?;
            let xb: [Vec<bf16>; 3] =
                x.clone().map(|v| v.iter().map(|&f| bf16::from_f32(f)).collect());

            // Ours (`Kernel::Auto`, the fastest kernel) first: the reference for the differences.
            let mut out = vec![0f32; s * d];
            let mut scratch = vec![0f32; attention_scratch_len(d, d)?];
            let mut run_ours = |kernel: Kernel, out: &mut [f32]| {
                let shape = [1, 1, s, d];
                let params = AttentionParams { kernel, ..Default::default() };
                let o = BatchedMut::contiguous(out, shape).unwrap();
                if dtype == DType::F32 {
                    let [q, k, v] = x.each_ref().map(|v| BatchedRef::contiguous(v, shape).unwrap());
                    attention(o, q, k, v, &params, &mut scratch).unwrap();
                } else {
                    let [q, k, v] =
                        xb.each_ref().map(|v| BatchedRef::contiguous(v, shape).unwrap());
                    attention(o, q, k, v, &params, &mut scratch).unwrap();
                }
            };
            run_ours(Kernel::Auto, &mut out);
            let reference = out.clone();
            let diff = |y: &Tensor| -> candle_core::Result<f32> {
                let y: Vec<f32> = y.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
                Ok(y.iter().zip(&reference).fold(0f32, |m, (a, b)| m.max((a - b).abs())))
            };

            let row = |variant: &str, secs: f64, err: f32| {
                println!(
                    "| {s} | {d} | {name} | {variant} | {:.2} | {:.1} | {err:.1e} |",
                    secs * 1e3,
                    flops / secs / 1e9
                );
            };

            // candle fused CPU flash attention.
            let flash = || -> candle_core::Result<Tensor> {
                if dtype == DType::F32 {
                    flash_attn::<f32>(&t[0], &t[1], &t[2], scale, AttnMask::None, None, None)
                } else {
                    flash_attn::<bf16>(&t[0], &t[1], &t[2], scale, AttnMask::None, None, None)
                }
            };
            match flash() {
                Ok(y) => {
                    let err = diff(&y)?;
                    row("candle flash_attn (fused CPU)", time(min, || drop(flash().unwrap())), err);
                }
                Err(e) => println!("| {s} | {d} | {name} | candle flash_attn | error: {e} | | |"),
            }

            // candle unfused matmul -> softmax_last_dim -> matmul.
            let [q4, k4, v4] = [0, 1, 2].map(|i| t[i].reshape((1, 1, s, d)).unwrap());
            let unfused = || -> candle_core::Result<Tensor> {
                let a = (&q4 * f64::from(scale))?.matmul(&k4.t()?)?;
                candle_nn::ops::softmax_last_dim(&a)?.matmul(&v4)
            };
            match unfused() {
                Ok(y) => {
                    let err = diff(&y)?;
                    row(
                        "candle unfused (matmul, softmax_last_dim, matmul)",
                        time(min, || drop(unfused().unwrap())),
                        err,
                    );
                }
                Err(e) => println!("| {s} | {d} | {name} | candle unfused | error: {e} | | |"),
            }

            // Ours, after candle's gemm and SIMD code ran in this process.
            let mut kernels = vec![Kernel::Auto.resolve()?];
            if kernels[0] != Kernel::Portable {
                kernels.push(Kernel::Portable);
            }
            for kernel in kernels {
                let secs = time(min, || run_ours(kernel, &mut out));
                let err = out.iter().zip(&reference).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                row(&format!("dpattn {kernel:?}"), secs, err);
            }
        }
    }
    Ok(())
}
