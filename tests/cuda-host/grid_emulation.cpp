// Runs the kernel of grid_release.cu on the host, so that tests/emulation/exact.rs can compare a whole
// launch (the strided 4-D indexing, the groups, the grid-stride loop and the status words)
// with dpattn-core's GaussianGrid::release_keyed without a GPU. The kernel has no shared
// memory and no barriers, and each thread writes only its own elements, so running the
// threads of the grid one after the other is a faithful emulation of its results (the order
// of the status atomics does not matter: OR and min commute).
#include "prelude.cuh"
#include "chacha20.cuh"

namespace {

struct EmuDim3 {
    unsigned x, y, z;
};
EmuDim3 threadIdx, blockIdx, gridDim;

[[maybe_unused]] void atomicOr(u64* a, u64 v) { *a |= v; }
[[maybe_unused]] void atomicMin(u64* a, u64 v) {
    if (v < *a) *a = v;
}

}  // namespace

#include "exact_sampler.cuh"
#include "grid_release.cuh"

#define __global__
#define __launch_bounds__(n)

namespace grid_f32 {
#define DP_T 0
#define dp_grid_release dp_grid_release_f32
#include "grid_release.cu"
#undef dp_grid_release
#undef DP_T
}  // namespace grid_f32

namespace grid_f64 {
#define DP_T 1
#define dp_grid_release dp_grid_release_f64
#include "grid_release.cu"
#undef dp_grid_release
#undef DP_T
}  // namespace grid_f64

template <class T, class L>
static void emu_grid_release(void (*kernel)(T*, L, u64, u64, u64, const DpGridGroup*, DpKey, u64,
                                            u64*, const double*),
                             void* x, const u64* shape, const u64* strides, u64 total, u64 first,
                             u64 group_len, const void* groups, const u32* key_words, u64 stream,
                             unsigned blocks, u64* status, const double* src) {
    DpKey key;
    for (int i = 0; i < 8; ++i) key.w[i] = key_words[i];
    L layout;
    for (int a = 0; a < 4; ++a) {
        layout.shape[a] = shape[a];
        layout.strides[a] = strides[a];
    }
    status[0] = 0;
    status[1] = ~0ull;
    gridDim = {blocks, 1, 1};
    for (unsigned b = 0; b < blocks; ++b) {
        for (unsigned t = 0; t < DP_GRID_THREADS; ++t) {
            blockIdx = {b, 0, 0};
            threadIdx = {t, 0, 0};
            kernel((T*)x, layout, total, first, group_len, (const DpGridGroup*)groups, key, stream,
                   status, src);
        }
    }
}

extern "C" {

// dp_grid_release on a grid of `blocks` blocks: `x` holds f32 (is_f32) or f64 values;
// `groups` points to DpGridGroup entries (the `GridGroup` bytes of the Rust side); status
// receives the kernel's two words; `src` (or NULL) the noiseless f64 values.
void dpck_grid_release_kernel(int is_f32, void* x, const u64* shape, const u64* strides,
                              u64 total, u64 first, u64 group_len, const void* groups,
                              const u32* key, u64 stream, unsigned blocks, u64* status,
                              const double* src) {
    if (is_f32)
        emu_grid_release(grid_f32::dp_grid_release_f32, x, shape, strides, total, first,
                         group_len, groups, key, stream, blocks, status, src);
    else
        emu_grid_release(grid_f64::dp_grid_release_f64, x, shape, strides, total, first,
                         group_len, groups, key, stream, blocks, status, src);
}

}  // extern "C"
