// Exact grid release of a strided 4-D tensor (grid_release.cuh): logical element i
// (row-major over `shape`, docs/RANDOMNESS.md §2) at offset Σ index_a·strides[a] becomes
// Grid::release(x, Z) with the grid and discrete Gaussian of group i / group_len and Z from
// the window of element first + i (§4). x is the element itself (in place), or src[i] when
// `src` is not NULL (the noiseless values in f64, contiguous in logical order). A group
// with s = 0 releases nothing: the element keeps x. One thread per element, grid-stride;
// which thread computes an element never matters.
//
// Variant macro DP_T: 0 f32, 1 f64 (the element type, read and written in place).
// status (two u64, zeroed and set to [0, 2^64 − 1] by the host): [0] the OR of the failure
// bits, [1] the lowest failed element (NaN written there).

#if DP_T == 0
typedef float dp_t;
// Exact for a released value (on the f32 grid); a group without release writes x rounded.
DP_FN dp_t dp_out(double v) { return dp_f64_to_f32_rn(v); }
#else
typedef double dp_t;
DP_FN dp_t dp_out(double v) { return v; }
#endif

#define DP_GRID_THREADS 256

// Shape and element strides of the tensor (mirrored by `GridLayout` in grid_release.rs).
struct DpLayout4 {
    u64 shape[4];
    u64 strides[4];
};

extern "C" __global__ void __launch_bounds__(DP_GRID_THREADS)
dp_grid_release(dp_t* __restrict__ x, DpLayout4 layout, u64 total, u64 first, u64 group_len,
                const DpGridGroup* __restrict__ groups, DpKey key, u64 stream,
                u64* __restrict__ status, const double* __restrict__ src) {
    const u64 step = (u64)gridDim.x * DP_GRID_THREADS;
    for (u64 i = (u64)blockIdx.x * DP_GRID_THREADS + threadIdx.x; i < total; i += step) {
        u64 rest = i, offset = 0;
        for (int a = 3; a >= 0; --a) {
            offset += (rest % layout.shape[a]) * layout.strides[a];
            rest /= layout.shape[a];
        }
        const DpGridGroup g = groups[i / group_len];
        double v = src ? src[i] : (double)x[offset];
        if (g.s != 0) {
            const int st = dp_grid_release_value(v, &g, &key, stream, first + i, &v);
            if (st < 0) dp_release_failed(status, first + i, st);
        }
        x[offset] = dp_out(v);
    }
}
