// Tensor-core building blocks as inline PTX (NVRTC has no <mma.h> without a toolkit; see
// docs/PAPERS.md A.1.1). sm_80 and newer. Fragment layouts are those of the
// PTX ISA, "Matrix fragments for mma.m16n8k16" (16-bit A/B, f32 C/D), with
// g = lane / 4 and t = lane % 4:
//   A (16×16, row-major), 4 registers of two 16-bit values (low half = lower column):
//     a0: (g, 2t..2t+1)  a1: (g+8, 2t..)  a2: (g, 8+2t..)  a3: (g+8, 8+2t..)
//   B (16×8, "col"), 2 registers:  b0: (k = 2t..2t+1, n = g)  b1: (k = 8+2t.., n = g)
//   C/D (16×8 f32), 4 floats:  c0, c1: (g, 2t), (g, 2t+1)   c2, c3: (g+8, 2t), (g+8, 2t+1)
// ldmatrix .x4: lanes 8m..8m+7 give the row addresses of 8×8 matrix m; register m of
// every lane then holds (row g, columns 2t, 2t+1) of matrix m, or with .trans (rows 2t,
// 2t+1, column g).
#pragma once

DP_FN u32 dp_smem_u32(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

DP_FN void dp_ldmatrix_x4(u32 r[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

DP_FN void dp_ldmatrix_x4_trans(u32 r[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a · b on one 16×8×16 tile, f32 accumulation; the input type is the variant's.
DP_FN void dp_mma16816(float c[4], const u32 a[4], u32 b0, u32 b1) {
#if DP_ATT == DP_ATT_F16
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Two f32 values as one register of two 16-bit values of the variant's type, rounded to
// nearest even; `lo` goes to the low half (the lower column of a fragment).
DP_FN u32 dp_pack2(float lo, float hi) {
    u32 r;
#if DP_ATT == DP_ATT_F16
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

// 16-byte asynchronous copy global -> shared; `bytes` = 16 copies, 0 zero-fills (rows past
// the end of a sequence). `src` must stay a valid address even when nothing is read.
DP_FN void dp_cp_async16(u32 dst, const void* src, u32 bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
}

DP_FN void dp_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

DP_FN void dp_cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// 2^x (PTX ex2.approx, relative error about 2^-22; 2^-inf = 0).
DP_FN float dp_exp2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
