// One variant of the fused attention kernels (DP_ATT, DP_D and DP_KERNEL_F32 set by
// build.rs) run on the host by warp_emulation.h: the kernel source of
// cuda/src/kernels/flash_attention.cu (or _f32.cu), unchanged, with the PTX building blocks
// of mma.cuh replaced by their ISA semantics. tests/emulation/attention.rs compares the result with
// the CPU's float64 noisy attention.
#include "prelude.cuh"
#include "chacha20.cuh"
#include "fast_math.cuh"
#include "noise_value.cuh"
#include "attention_common.cuh"
#include "warp_emulation.h"

using std::fabs;

#define __global__
#define __launch_bounds__(n)
#define __shared__
#if DP_KERNEL_F32
#define dp_flash_attention_f32 DPCK_KERNEL
#include "flash_attention_f32.cu"
#else
#define dp_flash_attention DPCK_KERNEL
#include "flash_attention.cu"
#endif

// Runs the kernel on the parameter block `params` (the bytes of `struct DpAttnParams`,
// from dpattn_cuda::attention::LaunchImage::params_bytes) over a (gx, gy) grid. Every
// pointer in it is a host address.
extern "C" void DPCK_ENTRY(const void* params, u32 gx, u32 gy) {
    const std::lock_guard<std::mutex> one_at_a_time(emu_mutex);
    DpAttnParams p;
    std::memcpy(&p, params, sizeof p);
    emu_launch<EMU_THREADS>(gx, gy, [&] { DPCK_KERNEL(p); });
}
