//! The AVX2 + FMA backend of [`Simd`]: eight `f32` lanes in a `__m256`, x86-64 only.
//!
//! The token [`Avx2Fma`] can only be obtained from [`Avx2Fma::detect`], which checks the
//! CPU at run time under `std` (`is_x86_feature_detected!`) and the compile-time target
//! features without `std`. Every method is `#[inline(always)]` and is only ever inlined
//! into functions compiled with `#[target_feature(enable = "avx2,fma")]` (see
//! `tiled.rs`), so the instructions are VEX-encoded there and never mixed with
//! legacy-SSE code in a hot loop (the pitfall of `docs/PAPERS.md` A.1.3).
#![allow(unsafe_code)]

use core::arch::x86_64::*;

use super::simd::{EXP_HI, EXP_LO, EXP_POLY, LANES, LN2_HI, LN2_LO, LOG2E, Simd};

/// Proof that the running CPU executes AVX2 and FMA instructions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx2Fma(());

impl Avx2Fma {
    /// The token, if this CPU has AVX2 and FMA.
    #[inline]
    pub(crate) fn detect() -> Option<Self> {
        // Unit tests link `std` whatever the features, so they detect at run time too.
        #[cfg(any(feature = "std", test))]
        let ok = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        #[cfg(not(any(feature = "std", test)))]
        let ok = cfg!(all(target_feature = "avx2", target_feature = "fma"));
        ok.then_some(Avx2Fma(()))
    }
}

// Every `unsafe` block below calls AVX/AVX2/FMA intrinsics. SAFETY (shared argument): an
// `Avx2Fma` value exists only if `detect` found both features on this CPU, so the
// instructions are available; pointer arguments come from slices whose length was checked
// to be at least `LANES` just before.
impl Simd for Avx2Fma {
    type E = f32;
    type V = __m256;
    #[inline(always)]
    fn splat(self, x: f32) -> __m256 {
        // SAFETY: see the impl comment (AVX available).
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    fn load(self, s: &[f32]) -> __m256 {
        let s = &s[..LANES];
        // SAFETY: `s` has exactly 8 readable f32; unaligned load; AVX available.
        unsafe { _mm256_loadu_ps(s.as_ptr()) }
    }
    #[inline(always)]
    fn store(self, s: &mut [f32], v: __m256) {
        let s = &mut s[..LANES];
        // SAFETY: `s` has exactly 8 writable f32; unaligned store; AVX available.
        unsafe { _mm256_storeu_ps(s.as_mut_ptr(), v) }
    }
    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl comment (AVX available).
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl comment (AVX available).
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl comment (AVX available).
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    fn mul_add(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: see the impl comment (FMA available).
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn max(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl comment (AVX available).
        unsafe { _mm256_max_ps(a, b) }
    }
    #[inline(always)]
    fn exp(self, x: __m256) -> __m256 {
        // The steps of `simd::exp_f32`, lane-wise; the reduction uses FMA.
        // SAFETY: see the impl comment (AVX, AVX2 and FMA available).
        unsafe {
            let below = _mm256_cmp_ps::<_CMP_NGE_UQ>(x, _mm256_set1_ps(EXP_LO));
            let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
            let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
            );
            let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
            let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
            let mut p = _mm256_set1_ps(EXP_POLY[0]);
            for &c in &EXP_POLY[1..] {
                p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
            }
            let y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
            let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
                _mm256_cvtps_epi32(n),
                _mm256_set1_epi32(127),
            ));
            let v = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
            _mm256_andnot_ps(below, v)
        }
    }
    #[inline(always)]
    fn reduce_sum(self, v: __m256) -> f32 {
        // SAFETY: see the impl comment (AVX available).
        unsafe {
            // (v[i] + v[i+4]) for i < 4, then (a0 + a2) + (a1 + a3): the portable tree.
            let a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let b = _mm_add_ps(a, _mm_movehl_ps(a, a));
            _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps::<0b01>(b, b)))
        }
    }
    #[inline(always)]
    fn reduce_max(self, v: __m256) -> f32 {
        // SAFETY: see the impl comment (AVX available).
        unsafe {
            let a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let b = _mm_max_ps(a, _mm_movehl_ps(a, a));
            _mm_cvtss_f32(_mm_max_ss(b, _mm_shuffle_ps::<0b01>(b, b)))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::simd::{Portable, exp_f32};
    use super::*;
    extern crate std;

    /// The AVX2 token on this machine. Development and CI machines have AVX2 and FMA, so a
    /// missing feature fails the test instead of silently skipping it; set
    /// `DPATTN_NO_AVX2_OK=1` to run the suite on an older x86-64 CPU.
    pub(crate) fn token_or_fail() -> Option<Avx2Fma> {
        let t = Avx2Fma::detect();
        if t.is_none() {
            assert!(
                std::env::var_os("DPATTN_NO_AVX2_OK").is_some(),
                "this CPU lacks AVX2/FMA; set DPATTN_NO_AVX2_OK=1 to accept"
            );
        }
        t
    }

    #[test]
    fn matches_the_portable_backend() {
        let Some(s) = token_or_fail() else { return };
        let p = Portable::<f32>::new();
        let xs = [-88.5f32, -87.0, -20.25, -1.0, -1e-3, 0.0, 0.7, 88.0];
        let mut got = [0f32; 8];
        s.store(&mut got, s.exp(s.load(&xs)));
        for (g, &x) in got.iter().zip(&xs) {
            let want = exp_f32(x);
            assert!((g - want).abs() <= want * 2.5e-7, "exp({x}): {g} vs {want}");
        }
        let v = [3.0f32, -1.0, 0.25, 9.0, -4.0, 2.0, 1.5, 0.125];
        assert_eq!(s.reduce_sum(s.load(&v)), p.reduce_sum(p.load(&v)));
        assert_eq!(s.reduce_max(s.load(&v)), 9.0);
        s.store(&mut got, s.exp(s.splat(f32::NEG_INFINITY)));
        assert_eq!(got, [0.0; 8]);
    }
}
