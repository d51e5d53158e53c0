//! GPU noise-fill throughput next to a device-to-device copy of the same bytes, in the
//! same run (`scripts/gpu-bench.sh`). Timed with CUDA events around `iters` back-to-back
//! launches on one stream. Throughput counts DRAM traffic: a fill writes its output bytes
//! once; a copy reads and writes them (2× the bytes), which is how the copy's bandwidth is
//! usually quoted. The goal of issue 8: Gaussian fill ≥ 80 % of the copy's bandwidth. The
//! exact release (`grid_release`: one exact discrete Gaussian integer per element, from its
//! own window, with the CPU's bits) is timed in place on the same `f32` buffer, next to the
//! raw keystream fill (`stream_words_u32`).
//!
//! Without a GPU this bench prints why and measures nothing.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dpattn_core::Layout4;
use dpattn_core::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};
use dpattn_core::sampling::{Gaussian, KeyedStream, Laplace, NoiseKey};
use dpattn_cuda::grid_release::{GridGroup, grid_release};
use dpattn_cuda::{Device, GpuNoise, OutDtype, Stream, UniformBits, fill_noise, fill_stream_words};

const BYTES: usize = 512 << 20;

fn timed(stream: &Stream, iters: u64, mut launch: impl FnMut()) -> Duration {
    stream
        .time(|| {
            for _ in 0..iters {
                launch();
            }
        })
        .expect("events")
}

fn bench(c: &mut Criterion) {
    let dev = match Device::get(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("noise_fill bench: no GPU, nothing measured ({e})");
            return;
        }
    };
    let s = dev.new_stream().expect("stream");
    eprintln!("device: {} (sm_{}, {} SMs)", dev.name(), dev.arch(), dev.multiprocessors());
    let draw = KeyedStream::new(&NoiseKey::for_replay([1; 32]), 1);
    let gauss = GpuNoise::Gaussian(Gaussian::new(1.0).expect("sigma"));
    let lap = GpuNoise::Laplace(Laplace::new(1.0).expect("scale"));

    let mut f32_out = s.alloc_zeros::<f32>(BYTES / 4).expect("alloc");
    let mut u16_out = s.alloc_zeros::<u16>(BYTES / 2).expect("alloc");
    let mut words = s.alloc_zeros::<u32>(BYTES / 4).expect("alloc");
    let src = s.alloc_zeros::<u8>(BYTES).expect("alloc");
    let mut dst = s.alloc_zeros::<u8>(BYTES).expect("alloc");

    // First use compiles the variant with NVRTC (once per process); report it, then warm.
    let t = std::time::Instant::now();
    fill_noise(&dev, &s, &mut f32_out, OutDtype::F32, gauss, UniformBits::B53, &draw, 0)
        .expect("fill");
    s.synchronize().expect("sync");
    eprintln!(
        "first Gaussian fill incl. NVRTC compile + load: {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );

    let mut g = c.benchmark_group("gpu_fill_512MiB");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    g.throughput(Throughput::Bytes(2 * BYTES as u64));
    g.bench_function("dtod_copy (read+write)", |b| {
        b.iter_custom(|n| timed(&s, n, || s.memcpy_dtod(&src, &mut dst).expect("copy")))
    });
    g.throughput(Throughput::Bytes(BYTES as u64));
    g.bench_function("stream_words_u32", |b| {
        b.iter_custom(|n| {
            timed(&s, n, || fill_stream_words(&dev, &s, &mut words, &draw, 0).expect("fill"))
        })
    });
    for (name, noise, bits) in [
        ("gaussian_b53_f32", gauss, UniformBits::B53),
        ("gaussian_b24_f32", gauss, UniformBits::B24),
        ("laplace_b24_f32", lap, UniformBits::B24),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                timed(&s, n, || {
                    fill_noise(&dev, &s, &mut f32_out, OutDtype::F32, noise, bits, &draw, 0)
                        .expect("fill")
                })
            })
        });
    }
    // The exact grid release in place: σ = Δ, one neighbour per 2^20 coordinates.
    let spec = GaussianGridSpec {
        l2_sensitivity: 1.0,
        dimension: 1 << 20,
        computation_error: 0.0,
        value_bound: 1.0,
        format: GridFormat::F32,
    };
    let group = GridGroup::gaussian(&GaussianGrid::calibrate(&spec, 1.0).expect("grid"));
    let n = f32_out.len();
    let layout = Layout4::contiguous([1, 1, 1, n]).expect("layout");
    g.bench_function("exact_discrete_gaussian_grid_release_f32", |b| {
        b.iter_custom(|iters| {
            timed(&s, iters, || {
                grid_release(&dev, &s, &mut f32_out, layout, &[group], n as u64, &draw, 0)
                    .expect("release")
            })
        })
    });
    g.bench_function("gaussian_b53_bf16", |b| {
        b.iter_custom(|n| {
            timed(&s, n, || {
                fill_noise(
                    &dev,
                    &s,
                    &mut u16_out,
                    OutDtype::Bf16,
                    gauss,
                    UniformBits::B53,
                    &draw,
                    0,
                )
                .expect("fill")
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
