//! The vector operations the attention kernels are written in, and the portable backend.
//!
//! A kernel is generic over [`Simd`]: an 8-lane vector of [`Real`] (`f32` or `f64`) with
//! load/store, arithmetic, a fused or unfused multiply-add, lane-wise `exp` and horizontal
//! reductions. Two backends implement it:
//!
//! * [`Portable`] (this file): `[E; 8]` arrays and scalar arithmetic, for every target
//!   (`thumbv7em-none-eabihf` included) and for `f64`. `mul_add` is `a * b + c` with two
//!   roundings (a software `fma` would be slow on targets without the instruction).
//! * `Avx2Fma` (`simd_avx2.rs`, `x86_64` only): `__m256` with VEX-encoded AVX2 and FMA
//!   instructions, compiled inside `#[target_feature(enable = "avx2,fma")]` entry points.
//!
//! Both backends compute the same `f32` exponential ([`exp_f32`]), so they differ only by
//! the rounding of fused versus unfused multiply-adds (tests compare them).

use core::ops::{Add, Mul, Sub};

use crate::element::Element;

/// Lanes per vector, for both backends and both precisions.
pub(crate) const LANES: usize = 8;

/// The scalar type a kernel computes in: `f32` (the fast path) or `f64` (the test path).
pub(crate) trait Real:
    Copy + Default + PartialOrd + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    const NEG_INFINITY: Self;
    /// An input element in this precision (`f32`: widened or rounded once; `f64`: exact).
    fn of<T: Element>(x: T) -> Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    /// `e^x`; `0` for `x = -inf` and far below the smallest normal.
    fn exp(self) -> Self;
    fn max(self, other: Self) -> Self;
    fn div(self, other: Self) -> Self;
    /// `row` itself when its elements are already this type (no conversion needed).
    #[inline(always)]
    fn view<T: Element>(row: &[T]) -> Option<&[Self]> {
        let _ = row;
        None
    }
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
    #[inline(always)]
    fn of<T: Element>(x: T) -> Self {
        x.to_f32()
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn exp(self) -> Self {
        exp_f32(self)
    }
    #[inline(always)]
    fn max(self, other: Self) -> Self {
        if other > self { other } else { self }
    }
    #[inline(always)]
    fn div(self, other: Self) -> Self {
        self / other
    }
    #[inline(always)]
    fn view<T: Element>(row: &[T]) -> Option<&[Self]> {
        T::as_f32_slice(row)
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
    #[inline(always)]
    fn of<T: Element>(x: T) -> Self {
        x.to_f64()
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn exp(self) -> Self {
        libm::exp(self)
    }
    #[inline(always)]
    fn max(self, other: Self) -> Self {
        if other > self { other } else { self }
    }
    #[inline(always)]
    fn div(self, other: Self) -> Self {
        self / other
    }
}

/// An 8-lane vector backend. Implementors are zero-sized tokens; holding one proves the
/// instructions it uses are available (the AVX2 token is only built after detection).
pub(crate) trait Simd: Copy {
    type E: Real;
    type V: Copy;
    fn splat(self, x: Self::E) -> Self::V;
    /// Lanes `s[0..8]`. Panics if `s.len() < 8` (kernels slice exactly).
    fn load(self, s: &[Self::E]) -> Self::V;
    /// Writes lanes to `s[0..8]`. Panics if `s.len() < 8`.
    fn store(self, s: &mut [Self::E], v: Self::V);
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c` (fused on `Avx2Fma`, two roundings on `Portable`).
    fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    /// Lane-wise `e^x` (`0` for `-inf`).
    fn exp(self, x: Self::V) -> Self::V;
    fn reduce_sum(self, v: Self::V) -> Self::E;
    fn reduce_max(self, v: Self::V) -> Self::E;
}

/// The portable backend: plain arrays, any target, `f32` or `f64`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Portable<E>(core::marker::PhantomData<E>);

impl<E> Portable<E> {
    pub(crate) const fn new() -> Self {
        Self(core::marker::PhantomData)
    }
}

#[inline(always)]
fn zip<E: Copy>(a: [E; LANES], b: [E; LANES], f: impl Fn(E, E) -> E) -> [E; LANES] {
    core::array::from_fn(|i| f(a[i], b[i]))
}

impl<E: Real> Simd for Portable<E> {
    type E = E;
    type V = [E; LANES];
    #[inline(always)]
    fn splat(self, x: E) -> Self::V {
        [x; LANES]
    }
    #[inline(always)]
    fn load(self, s: &[E]) -> Self::V {
        let s = &s[..LANES];
        core::array::from_fn(|i| s[i])
    }
    #[inline(always)]
    fn store(self, s: &mut [E], v: Self::V) {
        s[..LANES].copy_from_slice(&v);
    }
    #[inline(always)]
    fn add(self, a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x + y)
    }
    #[inline(always)]
    fn sub(self, a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x - y)
    }
    #[inline(always)]
    fn mul(self, a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x * y)
    }
    #[inline(always)]
    fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        core::array::from_fn(|i| a[i] * b[i] + c[i])
    }
    #[inline(always)]
    fn max(self, a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, Real::max)
    }
    #[inline(always)]
    fn exp(self, x: Self::V) -> Self::V {
        x.map(Real::exp)
    }
    #[inline(always)]
    fn reduce_sum(self, v: Self::V) -> E {
        // Pairwise, the same tree as the AVX2 reduction.
        let a: [E; 4] = core::array::from_fn(|i| v[i] + v[i + 4]);
        (a[0] + a[2]) + (a[1] + a[3])
    }
    #[inline(always)]
    fn reduce_max(self, v: Self::V) -> E {
        v.iter().fold(E::NEG_INFINITY, |m, &x| m.max(x))
    }
}

/// `log2(e)`.
pub(crate) const LOG2E: f32 = core::f32::consts::LOG2_E;
/// `ln 2` split Cody–Waite style: `LN2_HI` has 9 significant bits, so `n · LN2_HI` is exact
/// for `|n| ≤ 2^15`.
pub(crate) const LN2_HI: f32 = 0.693_359_4;
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
/// Inputs are clamped to `[EXP_LO, EXP_HI]`; below `EXP_LO` the result is exactly 0.
pub(crate) const EXP_HI: f32 = 88.0;
pub(crate) const EXP_LO: f32 = -88.0;
/// Cephes `expf` polynomial for `(e^r − 1 − r) / r²` over `|r| ≤ ln2 / 2`, highest degree
/// first (Cephes writes the last one as `5.0000001201e-1`, which is `0.5` in `f32`).
pub(crate) const EXP_POLY: [f32; 6] =
    [1.987_569_2e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5];
/// `1.5 · 2^23`: adding and subtracting it rounds an `f32` of magnitude `< 2^22` to the
/// nearest integer (ties to even) without a rounding instruction.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// Branch-free `e^x` in `f32` (Cephes `expf`: Cody–Waite reduction `x = n ln2 + r`, a
/// degree-7 polynomial, and `2^n` built from exponent bits). Relative error below `3e-7`
/// (about 2.5 ulp) for `x ∈ [-87, 88]`; exactly `0` for `x < -88` and for `-inf`. The
/// AVX2 backend evaluates the same steps, lane by lane.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    let below = x.is_nan() || x < EXP_LO; // NaN never reaches the kernels
    let x = if below {
        EXP_LO
    } else if x > EXP_HI {
        EXP_HI
    } else {
        x
    };
    let n = (x * LOG2E + ROUND_MAGIC) - ROUND_MAGIC;
    let r = x - n * LN2_HI;
    let r = r - n * LN2_LO;
    let mut p = EXP_POLY[0];
    for &c in &EXP_POLY[1..] {
        p = p * r + c;
    }
    let y = (p * (r * r) + r) + 1.0;
    // n ∈ [-127, 127]: the biased exponent n + 127 ∈ [0, 254]; 0 gives the value 0.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if below { 0.0 } else { y * scale }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_f32_is_within_three_ulp_of_f64() {
        // Dense sweep of the range the kernels use (scores minus their row maximum are ≤ 0)
        // plus the positive side.
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            let want = libm::exp(f64::from(x));
            let got = f64::from(exp_f32(x));
            worst = worst.max(((got - want) / want).abs());
            x += 0.000_37;
        }
        assert!(worst < 3.0e-7, "worst relative error {worst:e}");
    }

    #[test]
    fn exp_f32_edges() {
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-1.0e30), 0.0);
        assert_eq!(exp_f32(-88.5), 0.0);
        assert!(exp_f32(88.0).is_finite());
        assert!((exp_f32(1.0) - core::f32::consts::E).abs() <= f32::EPSILON * 3.0);
    }

    #[test]
    fn portable_reductions() {
        let p = Portable::<f32>::new();
        let v = p.load(&[1.0, -2.0, 3.0, 8.0, 0.5, -7.0, 2.0, 1.0]);
        assert_eq!(p.reduce_sum(v), 6.5);
        assert_eq!(p.reduce_max(v), 8.0);
        assert_eq!(p.mul_add(v, p.splat(2.0), p.splat(1.0))[1], -3.0);
    }
}
