// Runs the kernels of gaussian_sampling.cu on the host, one fiber per CUDA thread with a
// barrier for __syncthreads (block_launch.h), so that tests/emulation/gaussian_sampling.rs
// can compare the whole release (clip factors, chunked partial sums, B and P) with
// dpattn-core without a GPU.
//
// What this emulates faithfully: the kernels' arithmetic (the same source, FMA contraction
// off as under --fmad=false), their indexing, their shared memory (one copy per launch,
// reused block after block as a GPU reuses it), every barrier (a thread that skipped or
// added one deadlocks here too, and the emulator reports it; a read without a barrier after
// another thread's write sees it or not, depending on the fibers' shuffled order),
// grid-stride loops (the factor kernel gets a small grid on purpose) and the launch sequence
// of `Job::queue_factors`/`queue_release`. What it does not: warp scheduling and the memory
// model of a real GPU; compute-sanitizer's racecheck on a device (scripts/gpu-test.sh)
// covers those.
//
// Both input types are compiled into this one file: each inclusion of the kernel source
// sits in its own namespace and its extern "C" entry points are renamed.
#include "prelude.cuh"
#include "chacha20.cuh"
#include "fast_math.cuh"
#include "noise_value.cuh"

#include "block_launch.h"

#include <cmath>
#include <vector>

namespace {

using std::fabs;
using std::fmax;

}  // namespace

#define __global__
#define __launch_bounds__(n)
#define __shared__ static

namespace gs_f32 {
#define DP_GS_T 0
#define dp_gs_factors dp_gs_factors_f32
#define dp_gs_partial dp_gs_partial_f32
#define dp_gs_finish dp_gs_finish_f32
#include "gaussian_sampling.cu"
#undef dp_gs_factors
#undef dp_gs_partial
#undef dp_gs_finish
#undef DP_GS_T
}  // namespace gs_f32

namespace gs_f64 {
#define DP_GS_T 1
#define dp_gs_factors dp_gs_factors_f64
#define dp_gs_partial dp_gs_partial_f64
#define dp_gs_finish dp_gs_finish_f64
#include "gaussian_sampling.cu"
#undef dp_gs_factors
#undef dp_gs_partial
#undef dp_gs_finish
#undef DP_GS_T
}  // namespace gs_f64

namespace {

template <class T, class Factors, class Partial, class Finish>
void emu_release(const T* x, u64 batch, u64 heads, u64 n, u64 d, u64 sb, u64 sh, u64 sr,
                 double alpha, double eta, const u32* key_words, u64 stream, u64 k, u64 chunk_len,
                 u64 chunks, u64 group, int cosh_score, unsigned factor_blocks, double* out_b,
                 double* out_p, Factors factors_kernel, Partial partial_kernel,
                 Finish finish_kernel) {
    const u64 problems = batch * heads, ntri = n * (n + 1) / 2;
    DpKey key;
    for (int i = 0; i < 8; ++i) key.w[i] = key_words[i];
    // The workspace as Job lays it out: factors, then the partial sums. Poisoned with NaN:
    // an entry a kernel reads before writing shows up in B.
    std::vector<double> workspace(problems * d + group * chunks * ntri, std::nan(""));
    double* factors = workspace.data();
    double* partial = factors + problems * d;
    emu_launch<DP_GS_THREADS>(factor_blocks, 1, [&] {
        factors_kernel(x, problems, heads, n, d, sb, sh, sr, alpha, factors);
    });
    const double root_ridge = std::sqrt(eta);
    for (u64 p0 = 0; p0 < problems; p0 += group) {
        const u64 g = group < problems - p0 ? group : problems - p0;
        emu_launch<DP_GS_THREADS>((unsigned)chunks, (unsigned)g, [&] {
            partial_kernel(x, heads, n, d, sb, sh, sr, factors, p0, k, chunk_len, root_ridge, key,
                           stream, partial);
        });
        emu_launch<DP_GS_THREADS>((unsigned)g, 1, [&] {
            finish_kernel(partial, p0, n, chunks, (double)k, cosh_score, out_b, out_p);
        });
    }
}

}  // namespace

extern "C" {

// The release of `Job::queue_factors` + `Job::queue_release` for X of `batch · heads`
// problems (`is_f32`: X is f32, else f64), with the plan's chunk_len, chunks and group and
// `factor_blocks` blocks for the clip-factor kernel. Writes B and P (`problems · n²` each).
void dpck_gs_release(int is_f32, const void* x, u64 batch, u64 heads, u64 n, u64 d, u64 sb,
                     u64 sh, u64 sr, double alpha, double eta, const u32* key, u64 stream, u64 k,
                     u64 chunk_len, u64 chunks, u64 group, int cosh_score, u32 factor_blocks,
                     double* out_b, double* out_p) {
    const std::lock_guard<std::mutex> one_at_a_time(emu_mutex);
    if (is_f32) {
        emu_release((const float*)x, batch, heads, n, d, sb, sh, sr, alpha, eta, key, stream, k,
                    chunk_len, chunks, group, cosh_score, factor_blocks, out_b, out_p,
                    gs_f32::dp_gs_factors_f32, gs_f32::dp_gs_partial_f32,
                    gs_f32::dp_gs_finish_f32);
    } else {
        emu_release((const double*)x, batch, heads, n, d, sb, sh, sr, alpha, eta, key, stream, k,
                    chunk_len, chunks, group, cosh_score, factor_blocks, out_b, out_p,
                    gs_f64::dp_gs_factors_f64, gs_f64::dp_gs_partial_f64,
                    gs_f64::dp_gs_finish_f64);
    }
}

}  // extern "C"
