// ChaCha20 block function, Bernstein layout: the port of `chacha20_block` in
// core/src/sampling/keyed_stream.rs (docs/RANDOMNESS.md §1). Words 0-3 the constant,
// 4-11 the key, 12-13 the 64-bit block counter (low word first), 14-15 the 64-bit stream id.
#pragma once

#define DP_QR(a, b, c, d)                  \
    a += b; d ^= a; d = dp_rotl(d, 16);    \
    c += d; b ^= c; b = dp_rotl(b, 12);    \
    a += b; d ^= a; d = dp_rotl(d, 8);     \
    c += d; b ^= c; b = dp_rotl(b, 7);

// The 256-bit key as eight little-endian words, passed by value to kernels.
struct DpKey {
    u32 w[8];
};

DP_FN void dp_chacha20_block(const DpKey& key, u64 counter, u64 stream, u32 out[16]) {
    u32 x0 = 0x61707865u, x1 = 0x3320646eu, x2 = 0x79622d32u, x3 = 0x6b206574u;
    u32 x4 = key.w[0], x5 = key.w[1], x6 = key.w[2], x7 = key.w[3];
    u32 x8 = key.w[4], x9 = key.w[5], x10 = key.w[6], x11 = key.w[7];
    u32 x12 = (u32)counter, x13 = (u32)(counter >> 32);
    u32 x14 = (u32)stream, x15 = (u32)(stream >> 32);
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#pragma unroll
#endif
    for (int i = 0; i < 10; ++i) {
        DP_QR(x0, x4, x8, x12) DP_QR(x1, x5, x9, x13) DP_QR(x2, x6, x10, x14) DP_QR(x3, x7, x11, x15)
        DP_QR(x0, x5, x10, x15) DP_QR(x1, x6, x11, x12) DP_QR(x2, x7, x8, x13) DP_QR(x3, x4, x9, x14)
    }
    out[0] = x0 + 0x61707865u; out[1] = x1 + 0x3320646eu;
    out[2] = x2 + 0x79622d32u; out[3] = x3 + 0x6b206574u;
    out[4] = x4 + key.w[0]; out[5] = x5 + key.w[1]; out[6] = x6 + key.w[2]; out[7] = x7 + key.w[3];
    out[8] = x8 + key.w[4]; out[9] = x9 + key.w[5]; out[10] = x10 + key.w[6]; out[11] = x11 + key.w[7];
    out[12] = x12 + (u32)counter; out[13] = x13 + (u32)(counter >> 32);
    out[14] = x14 + (u32)stream; out[15] = x15 + (u32)(stream >> 32);
}
