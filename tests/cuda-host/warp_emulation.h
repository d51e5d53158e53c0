// A CUDA block on the host for the fused attention kernels: one fiber per CUDA thread
// (block_launch.h), a barrier per block (__syncthreads) and per warp (the warp-collective
// instructions), and host versions of the PTX building blocks of cuda/src/kernels/mma.cuh
// with the semantics of the PTX ISA:
//
// * ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lanes 8m .. 8m+7 give the row
//   addresses of 8×8 matrix m; register m of lane l holds (row l/4, columns 2(l%4) and
//   2(l%4)+1) of matrix m, or with .trans (rows 2(l%4), 2(l%4)+1 of column l/4); the lower
//   column (row) goes to the low 16 bits.
// * mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: D = A·B + C with g = l/4, t = l%4:
//   A register r of lane l holds A(g + 8(r&1), 2t + 8(r>>1) + {0,1}); B register r holds
//   B(2t + 8r + {0,1}, g); C/D element e holds (g + 8(e>>1), 2t + (e&1)). Products of two
//   16-bit values are exact in f32; they are summed in f32 in k order, then added to C
//   (the hardware's order is unspecified: the tests allow for it).
// * cp.async with a source size of 16 copies, 0 zero-fills; copies complete at once (so
//   commit/wait are no-ops: a missing wait is caught by racecheck on a GPU, not here).
// * shfl.sync (xor and indexed; xor also for f64) through a per-warp exchange with two warp
//   barriers.
//
// Expects DP_ATT defined and prelude.cuh, attention_common.cuh included first. Each
// translation unit gets its own copy of the state (anonymous namespace); one launch runs
// at a time (the caller holds a lock).
#pragma once

#include "block_launch.h"

#include <cmath>
#include <cstring>

// The block's dynamic shared memory, at global scope with internal linkage so that the
// kernels' `extern __shared__ unsigned char dp_smem[]` names it.
alignas(128) static unsigned char dp_smem[3 * 64 * 128 * 2];  // the largest of the kernels

namespace {

constexpr int EMU_THREADS = 128;
constexpr int EMU_WARPS = EMU_THREADS / 32;
static_assert(EMU_WARPS == 4, "one barrier per warp below");

struct EmuWarp {
    u32 addr[32];
    u32 a[32][4];
    u32 b[32][2];
    float f[32];
    double d[32];
};
EmuWarp emu_warps[EMU_WARPS];
// Every lane of a warp takes part in every collective, so each barrier's phases complete
// within a launch and the barriers serve launch after launch.
EmuBarrier emu_warp_barriers[EMU_WARPS] = {EmuBarrier(32), EmuBarrier(32), EmuBarrier(32),
                                          EmuBarrier(32)};

EmuWarp& emu_warp() { return emu_warps[threadIdx.x / 32]; }
int emu_lane() { return (int)(threadIdx.x % 32); }
void emu_warp_sync() { emu_warp_barriers[threadIdx.x / 32].arrive_and_wait(); }

[[maybe_unused]] float __shfl_xor_sync(unsigned, float v, int mask) {
    EmuWarp& w = emu_warp();
    w.f[emu_lane()] = v;
    emu_warp_sync();
    float r = w.f[emu_lane() ^ mask];
    emu_warp_sync();
    return r;
}

[[maybe_unused]] double __shfl_xor_sync(unsigned, double v, int mask) {
    EmuWarp& w = emu_warp();
    w.d[emu_lane()] = v;
    emu_warp_sync();
    double r = w.d[emu_lane() ^ mask];
    emu_warp_sync();
    return r;
}

[[maybe_unused]] float __shfl_sync(unsigned, float v, int src) {
    EmuWarp& w = emu_warp();
    w.f[emu_lane()] = v;
    emu_warp_sync();
    float r = w.f[src & 31];
    emu_warp_sync();
    return r;
}

float __fmaf_rn(float a, float b, float c) { return std::fmaf(a, b, c); }
[[maybe_unused]] double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }

u32 dp_smem_u32(const void* p) { return (u32)((const unsigned char*)p - dp_smem); }

u16 emu_lds16(u32 addr) {
    u16 v;
    std::memcpy(&v, dp_smem + addr, 2);
    return v;
}

void dp_ldmatrix_x4(u32 r[4], u32 addr) {
    EmuWarp& w = emu_warp();
    const int lane = emu_lane(), g = lane / 4, t = lane % 4;
    w.addr[lane] = addr;
    emu_warp_sync();
    for (int m = 0; m < 4; ++m) {
        const u32 row = w.addr[8 * m + g];
        r[m] = (u32)emu_lds16(row + 4 * t) | ((u32)emu_lds16(row + 4 * t + 2) << 16);
    }
    emu_warp_sync();
}

void dp_ldmatrix_x4_trans(u32 r[4], u32 addr) {
    EmuWarp& w = emu_warp();
    const int lane = emu_lane(), g = lane / 4, t = lane % 4;
    w.addr[lane] = addr;
    emu_warp_sync();
    for (int m = 0; m < 4; ++m) {
        const u32 lo = emu_lds16(w.addr[8 * m + 2 * t] + 2 * g);
        const u32 hi = emu_lds16(w.addr[8 * m + 2 * t + 1] + 2 * g);
        r[m] = lo | (hi << 16);
    }
    emu_warp_sync();
}

// A 16-bit value of the variant's type, widened exactly.
float emu_widen(u32 bits) {
#if DP_ATT == DP_ATT_F16
    const u32 sign = (bits & 0x8000u) << 16, exp = (bits >> 10) & 0x1fu, man = bits & 0x3ffu;
    if (exp == 0) return (sign ? -1.0f : 1.0f) * std::ldexp((float)man, -24);
    if (exp == 0x1f) return dp_bits_f32(sign | 0x7f800000u | (man << 13));
    return dp_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
#else
    return dp_bits_f32(bits << 16);
#endif
}

float emu_half_of(u32 reg, int k) { return emu_widen(k & 1 ? reg >> 16 : reg & 0xffffu); }

void dp_mma16816(float c[4], const u32 a[4], u32 b0, u32 b1) {
    EmuWarp& w = emu_warp();
    const int lane = emu_lane(), g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r) w.a[lane][r] = a[r];
    w.b[lane][0] = b0;
    w.b[lane][1] = b1;
    emu_warp_sync();
    for (int e = 0; e < 4; ++e) {
        const int i = g + 8 * (e >> 1), j = 2 * t + (e & 1);
        float acc = 0.0f;
        for (int k = 0; k < 16; ++k) {
            const int ka = (k % 8) / 2;
            const float av = emu_half_of(w.a[(i % 8) * 4 + ka][(i >= 8) + 2 * (k >= 8)], k);
            const float bv = emu_half_of(w.b[j * 4 + ka][k >= 8], k);
            acc += av * bv;
        }
        c[e] = c[e] + acc;
    }
    emu_warp_sync();
}

u32 dp_pack2(float lo, float hi) {
#if DP_ATT == DP_ATT_F16
    return (u32)dp_f32_to_f16_bits(lo) | ((u32)dp_f32_to_f16_bits(hi) << 16);
#else
    return (u32)dp_f32_to_bf16_bits(lo) | ((u32)dp_f32_to_bf16_bits(hi) << 16);
#endif
}

void dp_cp_async16(u32 dst, const void* src, u32 bytes) {
    if (bytes == 16) {
        std::memcpy(dp_smem + dst, src, 16);
    } else {
        std::memset(dp_smem + dst, 0, 16);
    }
}
void dp_cp_async_commit() {}
void dp_cp_async_wait_all() {}

float dp_exp2(float x) { return std::exp2(x); }

}  // namespace
