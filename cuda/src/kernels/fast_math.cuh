// Branch-free ln u and sin/cos 2πu on the uniform grid: the port of
// core/src/sampling/fast_math.rs (fdlibm polynomials). Same operations in the same order;
// compiled with FMA contraction off (--fmad=false), results equal the CPU's bit for bit.
// The constants are the exact bit patterns of fdlibm's decimal constants.
#pragma once

#define DP_LN2_HI 0x3fe62e42fee00000ull /* 6.93147180369123816490e-01 */
#define DP_LN2_LO 0x3dea39ef35793c76ull /* 1.90821492927058770002e-10 */
#define DP_LG1 0x3fe5555555555593ull /* 6.666666666666735130e-01 */
#define DP_LG2 0x3fd999999997fa04ull /* 3.999999999940941908e-01 */
#define DP_LG3 0x3fd2492494229359ull /* 2.857142874366239149e-01 */
#define DP_LG4 0x3fcc71c51d8e78afull /* 2.222219843214978396e-01 */
#define DP_LG5 0x3fc7466496cb03deull /* 1.818357216161805012e-01 */
#define DP_LG6 0x3fc39a09d078c69full /* 1.531383769920937332e-01 */
#define DP_LG7 0x3fc2f112df3e5244ull /* 1.479819860511658591e-01 */
#define DP_S1 0xbfc5555555555549ull /* -1.66666666666666324348e-01 */
#define DP_S2 0x3f8111111110f8a6ull /* 8.33333333332248946124e-03 */
#define DP_S3 0xbf2a01a019c161d5ull /* -1.98412698298579493134e-04 */
#define DP_S4 0x3ec71de357b1fe7dull /* 2.75573137070700676789e-06 */
#define DP_S5 0xbe5ae5e68a2b9cebull /* -2.50507602534068634195e-08 */
#define DP_S6 0x3de5d93a5acfd57cull /* 1.58969099521155010221e-10 */
#define DP_C1 0x3fa555555555554cull /* 4.16666666666666019037e-02 */
#define DP_C2 0xbf56c16c16c15177ull /* -1.38888888888741095749e-03 */
#define DP_C3 0x3efa01a019cb1590ull /* 2.48015872894767294178e-05 */
#define DP_C4 0xbe927e4f809c52adull /* -2.75573143513906633035e-07 */
#define DP_C5 0x3e21ee9ebdb4b1c4ull /* 2.08757232129817482790e-09 */
#define DP_C6 0xbda8fae9be8838d4ull /* -1.13596475577881948265e-11 */
#define DP_TAU 0x401921fb54442d18ull /* 6.283185307179586 (2π rounded) */

// ln u for a normal u in (0, 1].
DP_FN double dp_ln_unit(double u) {
    const double ln2_hi = dp_bits_f64(DP_LN2_HI), ln2_lo = dp_bits_f64(DP_LN2_LO);
    const double lg1 = dp_bits_f64(DP_LG1), lg2 = dp_bits_f64(DP_LG2), lg3 = dp_bits_f64(DP_LG3);
    const double lg4 = dp_bits_f64(DP_LG4), lg5 = dp_bits_f64(DP_LG5), lg6 = dp_bits_f64(DP_LG6);
    const double lg7 = dp_bits_f64(DP_LG7);
    u64 ui = dp_f64_bits(u);
    u32 hx = (u32)(ui >> 32) + (0x3ff00000u - 0x3fe6a09eu);
    int k = (int)(hx >> 20) - 0x3ff;
    hx = (hx & 0x000fffffu) + 0x3fe6a09eu;
    double x = dp_bits_f64(((u64)hx << 32) | (ui & 0xffffffffull));
    double f = x - 1.0;
    double hfsq = 0.5 * f * f;
    double s = f / (2.0 + f);
    double z = s * s;
    double w = z * z;
    double t1 = w * (lg2 + w * (lg4 + w * lg6));
    double t2 = z * (lg1 + w * (lg3 + w * (lg5 + w * lg7)));
    double r = t2 + t1;
    double dk = (double)k;
    return s * (hfsq + r) + dk * ln2_lo - hfsq + f + dk * ln2_hi;
}

// (sin 2πu, cos 2πu) for u = m · 2^-bits, 1 <= m <= 2^bits, 3 <= bits <= 53.
DP_FN void dp_sincos_2pi(u64 m, u32 bits, double* sin_out, double* cos_out) {
    const double s1 = dp_bits_f64(DP_S1), s2 = dp_bits_f64(DP_S2), s3 = dp_bits_f64(DP_S3);
    const double s4 = dp_bits_f64(DP_S4), s5 = dp_bits_f64(DP_S5), s6 = dp_bits_f64(DP_S6);
    const double c1 = dp_bits_f64(DP_C1), c2 = dp_bits_f64(DP_C2), c3 = dp_bits_f64(DP_C3);
    const double c4 = dp_bits_f64(DP_C4), c5 = dp_bits_f64(DP_C5), c6 = dp_bits_f64(DP_C6);
    u64 q4 = (m + (1ull << (bits - 3))) >> (bits - 2);
    i64 rem = (i64)m - (i64)(q4 << (bits - 2));
    double x = (double)rem * (dp_bits_f64(DP_TAU) * dp_bits_f64((u64)(1023 - bits) << 52));
    double z = x * x;
    double w = z * z;
    double rs = s2 + z * (s3 + z * s4) + z * w * (s5 + z * s6);
    double sn = x + z * x * (s1 + z * rs);
    double rc = z * (c1 + z * (c2 + z * c3)) + w * w * (c4 + z * (c5 + z * c6));
    double hz = 0.5 * z;
    double one_minus = 1.0 - hz;
    double cs = one_minus + (((1.0 - one_minus) - hz) + z * rc);
    double a = sn, b = cs;
    if (q4 & 1ull) { a = cs; b = -sn; }
    u64 flip = ((q4 >> 1) & 1ull) << 63;
    *sin_out = dp_bits_f64(dp_f64_bits(a) ^ flip);
    *cos_out = dp_bits_f64(dp_f64_bits(b) ^ flip);
}
