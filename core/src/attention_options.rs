//! Options shared by every attention routine: the logit scale and the masks.

use crate::error::{Error, Result};

/// The factor applied to `Q·Kᵀ` before the score function.
///
/// ```
/// use dpattn_core::Scale;
/// assert_eq!(Scale::InvSqrtDim.value(64)?, 0.125);
/// assert_eq!(Scale::InvDim.value(64)?, 1.0 / 64.0);
/// assert_eq!(Scale::Custom(0.5).value(64)?, 0.5);
/// assert!(Scale::Custom(f64::NAN).value(64).is_err());
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Scale {
    /// `1/√d`, the usual transformer scale (default).
    #[default]
    InvSqrtDim,
    /// `1/d`, as in the DP cross-attention paper (seed 001).
    InvDim,
    /// A caller-chosen factor: finite and `> 0`.
    Custom(f64),
}

impl Scale {
    /// The factor for head dimension `dim`.
    ///
    /// Errors: [`Error::OutOfRange`] when `dim == 0` (for the `dim`-based scales) or a
    /// custom factor is not finite and positive.
    pub fn value(self, dim: usize) -> Result<f64> {
        let check_dim = || {
            if dim == 0 {
                Err(Error::OutOfRange { name: "dim", value: 0.0, allowed: ">= 1" })
            } else {
                Ok(dim as f64)
            }
        };
        match self {
            Scale::InvSqrtDim => Ok(1.0 / libm::sqrt(check_dim()?)),
            Scale::InvDim => Ok(1.0 / check_dim()?),
            Scale::Custom(s) if s.is_finite() && s > 0.0 => Ok(s),
            Scale::Custom(s) => {
                Err(Error::OutOfRange { name: "scale", value: s, allowed: "(0, inf), finite" })
            }
        }
    }
}

/// Which keys each query may attend to.
///
/// * `causal`: query `i` sees keys `j <= i + (s_k - s_q)` — the causal diagonal is aligned
///   to the **bottom-right** corner, as in FlashAttention ≥ 2.1, so the last query row
///   always sees every key (the KV-cache decode case). For `s_q == s_k` this is the usual
///   lower-triangular mask and equals PyTorch's `is_causal=True`; for `s_q != s_k` PyTorch
///   aligns top-left instead. With `s_q > s_k`, the first `s_q - s_k` query rows see no key.
/// * `key_padding`: `[batch, s_k]` row-major, `true` = the key exists. Padding keys are
///   never attended to.
///
/// A query row that sees no key at all has no softmax; its output row is defined as zero
/// (FlashAttention's convention), never NaN.
///
/// ```
/// use dpattn_core::Mask;
/// let m = Mask { causal: true, key_padding: None };
/// assert!(m.visible(0, 2, 0, 4, 4)); // query 2 sees key 0
/// assert!(!m.visible(0, 0, 3, 4, 4)); // query 0 does not see key 3
/// assert!(m.visible(0, 0, 3, 1, 4)); // one query row against 4 keys sees them all
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Mask<'a> {
    /// Causal mask, bottom-right aligned.
    pub causal: bool,
    /// Key-padding mask, `[batch, s_k]`, `true` = attend.
    pub key_padding: Option<&'a [bool]>,
}

impl Mask<'_> {
    /// No mask: every query sees every key.
    pub const NONE: Mask<'static> = Mask { causal: false, key_padding: None };

    /// Checks the key-padding length against `[batch, s_k]`.
    pub fn validate(&self, batch: usize, s_k: usize) -> Result<()> {
        if let Some(p) = self.key_padding {
            let n =
                batch.checked_mul(s_k).ok_or(Error::SizeOverflow { what: "key padding length" })?;
            if p.len() != n {
                return Err(Error::ShapeMismatch {
                    arg: "key_padding",
                    axis: "length (batch * s_k)",
                    expected: n,
                    got: p.len(),
                });
            }
        }
        Ok(())
    }

    /// Whether query row `i` of batch `b` may see key `j`, for `s_q` queries and `s_k`
    /// keys.
    ///
    /// # Panics
    /// If the key-padding mask has no entry `b * s_k + j`, i.e. when
    /// [`validate`](Self::validate) was not called or the indices are out of range (a bug
    /// in the caller).
    #[inline]
    pub fn visible(&self, b: usize, i: usize, j: usize, s_q: usize, s_k: usize) -> bool {
        if self.causal && j + s_q > i + s_k {
            // j > i + s_k - s_q, written without underflow.
            return false;
        }
        match self.key_padding {
            Some(p) => p[b * s_k + j],
            None => true,
        }
    }
}

/// The score function `f` of attention, normalised row-wise as `D(A)⁻¹ f(A)` with
/// `D(A) = diag(f(A) · 1)` (Definition 1.4 of paper 000, `shared/seeds/000_*.txt`).
///
/// ```
/// use dpattn_core::ScoreFn;
/// assert_eq!(ScoreFn::default(), ScoreFn::Exp);
/// assert!((ScoreFn::Cosh.eval(0.5) - 0.5f64.cosh()).abs() < 1e-15);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScoreFn {
    /// `f = exp`: the softmax.
    #[default]
    Exp,
    /// `f = cosh`: the symmetric variant of paper 000. Evaluated stably as
    /// `(e^{|a|−m} + e^{−|a|−m})` with `m` the row's largest `|a|` (the common factor
    /// `e^m / 2` cancels in the normalisation).
    Cosh,
}

impl ScoreFn {
    /// `f(a)` in `f64` (may overflow to `+inf` for `|a| > 709`; the kernels never
    /// evaluate it unshifted).
    pub fn eval(self, a: f64) -> f64 {
        match self {
            ScoreFn::Exp => libm::exp(a),
            ScoreFn::Cosh => libm::cosh(a),
        }
    }
}

/// Which CPU kernel runs the tiled attention.
///
/// `Auto` picks the fastest kernel the CPU supports: AVX2 + FMA on x86-64 when present
/// (detected at run time with `std`, taken from the compile-time target features without
/// it), the portable kernel otherwise. Forcing a kernel is for tests and benchmarks;
/// forcing one the CPU lacks is [`Error::Unsupported`].
///
/// ```
/// use dpattn_core::Kernel;
/// assert!(Kernel::Portable.is_available());
/// assert!(Kernel::Auto.is_available());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kernel {
    /// The fastest available kernel.
    #[default]
    Auto,
    /// Plain Rust on 8-element arrays; every target. Multiply-adds round twice.
    Portable,
    /// x86-64 AVX2 + FMA (VEX-encoded, fused multiply-add).
    Avx2Fma,
}

impl Kernel {
    /// Whether this kernel can run on this CPU (with this build).
    pub fn is_available(self) -> bool {
        match self {
            Kernel::Auto | Kernel::Portable => true,
            Kernel::Avx2Fma => avx2_available(),
        }
    }

    /// The kernel `Auto` resolves to on this CPU (never `Auto`).
    pub fn resolve(self) -> Result<Kernel> {
        match self {
            Kernel::Auto if avx2_available() => Ok(Kernel::Avx2Fma),
            Kernel::Auto => Ok(Kernel::Portable),
            Kernel::Avx2Fma if !avx2_available() => {
                Err(Error::Unsupported { what: "the AVX2+FMA kernel on this CPU/target" })
            }
            k => Ok(k),
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_available() -> bool {
    crate::attention::simd_avx2::Avx2Fma::detect().is_some()
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_available() -> bool {
    false
}
