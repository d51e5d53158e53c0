//! The one matrix microkernel of the tiled attention: `C[MR × NR] (+)= A[MR × kc] · B[kc × NR]`
//! with `MR = 6` rows and `NR = 16` columns (two 8-lane vectors), all row-major.
//!
//! Both products of attention use it: the scores `S = Q̃ · Kᵀ` (A = a block of scaled query
//! rows, B = the key block packed transposed) and the update `O += P · V` (A = the block of
//! probabilities, B = the packed value block). Twelve accumulators, two loads and one
//! broadcast per step fit the 16 vector registers of AVX2, the BLIS shape that
//! matrixmultiply and gemm use. Pure function of its inputs; no privacy role.

use super::simd::{LANES, Simd};

/// Rows per microkernel call.
pub(crate) const MR: usize = 6;
/// Columns per microkernel call.
pub(crate) const NR: usize = 2 * LANES;

/// `c[i·ldc + j] = (accumulate ? c[i·ldc + j] : 0) + Σ_{p<kc} a[i·lda + p] · b[p·ldb + j]`
/// for `i < MR`, `j < NR`.
///
/// Requires `a.len() ≥ (MR−1)·lda + kc`, `b.len() ≥ (kc−1)·ldb + NR` (when `kc > 0`) and
/// `c.len() ≥ (MR−1)·ldc + NR`; panics otherwise (the callers size their packed buffers
/// to fit, and the tests check every shape).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn kernel<S: Simd>(
    s: S,
    kc: usize,
    a: &[S::E],
    lda: usize,
    b: &[S::E],
    ldb: usize,
    c: &mut [S::E],
    ldc: usize,
    accumulate: bool,
) {
    let rows: [&[S::E]; MR] = core::array::from_fn(|i| &a[i * lda..i * lda + kc]);
    let mut acc = [[s.splat(<S::E as super::simd::Real>::ZERO); 2]; MR];
    if accumulate {
        for (i, r) in acc.iter_mut().enumerate() {
            let ci = &c[i * ldc..i * ldc + NR];
            *r = [s.load(&ci[..LANES]), s.load(&ci[LANES..])];
        }
    }
    if kc > 0 {
        let b = &b[..(kc - 1) * ldb + NR];
        for p in 0..kc {
            let bp = &b[p * ldb..p * ldb + NR];
            let (b0, b1) = (s.load(&bp[..LANES]), s.load(&bp[LANES..]));
            for i in 0..MR {
                let ai = s.splat(rows[i][p]);
                acc[i][0] = s.mul_add(ai, b0, acc[i][0]);
                acc[i][1] = s.mul_add(ai, b1, acc[i][1]);
            }
        }
    }
    for (i, r) in acc.iter().enumerate() {
        let ci = &mut c[i * ldc..i * ldc + NR];
        s.store(&mut ci[..LANES], r[0]);
        s.store(&mut ci[LANES..], r[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::simd::Portable;
    use super::*;
    extern crate std;
    use std::vec::Vec;

    /// Small integers: every product and sum is exact in f32, so every backend must agree
    /// with the f64 triple loop exactly.
    fn case(kc: usize, lda: usize, ldb: usize, ldc: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let a: Vec<f32> =
            (0..(MR - 1) * lda + kc.max(1)).map(|i| ((i * 7 + 3) % 11) as f32 - 5.0).collect();
        let b: Vec<f32> =
            (0..kc.saturating_sub(1) * ldb + NR).map(|i| ((i * 5 + 1) % 13) as f32 - 6.0).collect();
        let c: Vec<f32> = (0..(MR - 1) * ldc + NR).map(|i| (i % 7) as f32).collect();
        (a, b, c)
    }

    #[allow(clippy::too_many_arguments)]
    fn expected(
        kc: usize,
        a: &[f32],
        lda: usize,
        b: &[f32],
        ldb: usize,
        c: &[f32],
        ldc: usize,
        acc: bool,
    ) -> Vec<f32> {
        let mut out = c.to_vec();
        for i in 0..MR {
            for j in 0..NR {
                let mut x = if acc { f64::from(c[i * ldc + j]) } else { 0.0 };
                for p in 0..kc {
                    x += f64::from(a[i * lda + p]) * f64::from(b[p * ldb + j]);
                }
                out[i * ldc + j] = x as f32;
            }
        }
        out
    }

    pub(crate) fn check<S: Simd<E = f32>>(s: S) {
        for (kc, lda, ldb, ldc) in
            [(0, 1, 16, 16), (1, 1, 16, 16), (5, 7, 20, 19), (64, 64, 64, 64), (37, 40, 48, 16)]
        {
            for acc in [false, true] {
                let (a, b, mut c) = case(kc, lda, ldb, ldc);
                let want = expected(kc, &a, lda, &b, ldb, &c, ldc, acc);
                kernel(s, kc, &a, lda, &b, ldb, &mut c, ldc, acc);
                assert_eq!(c, want, "kc={kc} lda={lda} ldb={ldb} ldc={ldc} acc={acc}");
            }
        }
    }

    #[test]
    fn portable_kernel_is_exact_on_integers() {
        check(Portable::<f32>::new());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_kernel_is_exact_on_integers() {
        if let Some(t) = super::super::simd_avx2::tests::token_or_fail() {
            check(t);
        }
    }
}
