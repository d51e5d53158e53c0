//! Label privacy by k-ary randomized response (`docs/PAPERS.md` §3.7, "Labels", the paper's
//! Theorem 4; reference values T3-J), and its prior-pruned variant over a public candidate
//! set (Ghazi et al. 2021).
//!
//! **Guarantee.** [`RandomizedResponse::randomize`] is `ε₂`-DP (pure) for each label, under
//! the relation "any two labels": the true label is kept with probability
//! `p ≤ e^{ε₂}/(e^{ε₂} + k − 1)` and otherwise replaced by one of the `k − 1` others
//! uniformly, and the ratio of any two output probabilities is at most `e^{ε₂}`.
//! Combined with a sequence release at `(ε₁, δ)`, the pair is `(ε₁ + ε₂, δ)`-LDP by basic
//! composition (Theorem 4; [`full_ldp_budget`]). Randomize once and reuse the noisy label
//! every epoch: reuse is post-processing, a fresh draw each epoch costs `ε₂` each time.
//!
//! **Exactness.** The flip is decided by a 64-bit uniform integer against a threshold `T`
//! with `T/2⁶⁴ ≥ (k−1)/(e^{ε₂} + k − 1)` (rounded up, and at least 1), so the realised
//! flip probability is never below the ideal one: the keep/other ratio is at most
//! `e^{ε₂}` exactly; the kept label is less likely than ideal by a relative error below 1e-10.
//! The replacement is drawn by Lemire's unbiased rejection method.
//!
//! **Randomness.** Label `i` reads words `2⁶⁷ + 64·(first + i) ..` of the [`KeyedStream`] (two
//! for the coin, up to 62 for the replacement; with at most 2¹⁵ classes a window runs out with
//! probability below 2⁻¹⁰⁰⁰, reported as [`Error::RandomnessExhausted`]; labels randomized
//! before the failing one stay randomized). The windows start at word 2⁶⁷, above every word a
//! fixed-word sampler can read (element indices are `u64`, at most 4 words each), so labels
//! never share randomness with hidden-state noise drawn from the same stream: a shared coin
//! would let the receiver see from the noise whether the label was flipped. A separate
//! stream id is still the clearer choice.

use rand_core::Rng as _;

use crate::accounting::ledger::Charge;
use crate::directed_rounding::{add_up, div_up, mul_up};
use crate::error::{Error, Result};
use crate::privacy_params::{Epsilon, PrivacyBudget};
use crate::sampling::KeyedStream;
use crate::sampling::below;

/// Stream words reserved per label.
const WINDOW: u64 = 64;
/// The first word of label 0's window: above every word a fixed-word sampler reads.
const LABEL_BASE: u128 = 1 << 67;
/// The largest number of classes (keeps the rejection window's failure below 2⁻¹⁰⁰⁰).
pub const MAX_CLASSES: u32 = 1 << 15;

/// k-ary randomized response at `ε₂` over labels `0..classes`.
///
/// ```
/// use dpattn_core::dp_forward::RandomizedResponse;
/// use dpattn_core::sampling::{KeyedStream, NoiseKey};
/// use dpattn_core::Epsilon;
/// // docs/PAPERS.md T3-J: ε₂ = ln 9 keeps a binary label with probability 0.9.
/// let rr = RandomizedResponse::new(Epsilon::new(9f64.ln())?, 2)?;
/// assert!((rr.keep_probability() - 0.9).abs() < 1e-15);
/// let mut labels = [0u32, 1, 1, 0];
/// rr.randomize(&mut labels, &KeyedStream::new(&NoiseKey::generate()?, 5), 0)?;
/// assert!(labels.iter().all(|&l| l < 2));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomizedResponse {
    epsilon: Epsilon,
    classes: u32,
    threshold: u64,
}

/// `T = max(1, ⌈2⁶⁴·(k−1)/(e^ε + k − 1)⌉)` with every step rounded up, capped at `2⁶⁴ − 1`.
fn flip_threshold(epsilon: f64, k: u32) -> u64 {
    let others = f64::from(k - 1);
    // q = (k−1)e^{−ε} / (1 + (k−1)e^{−ε}); e^{−ε} from libm is within 1 ulp: take 2 up.
    let e = libm::exp(-epsilon);
    let e_up = e.next_up().next_up();
    let num = mul_up(others, e_up);
    let e_down = e.next_down().next_down().max(0.0);
    // den ≤ 1 + (k−1)e^{−ε} exactly after the (1 − 2⁻⁵¹) factor absorbs two roundings.
    let den = (1.0 + others * e_down) * (1.0 - 2.0 * f64::EPSILON);
    let q = div_up(num, den);
    let scaled = mul_up(q, 18_446_744_073_709_551_616.0); // 2⁶⁴
    let t = libm::ceil(scaled);
    if t >= 18_446_744_073_709_551_615.0 { u64::MAX } else { (t as u64).max(1) }
}

impl RandomizedResponse {
    /// Randomized response at `ε₂` over `classes` labels.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for `classes ∉ [2, MAX_CLASSES]` or `ε₂ < 1e-9` (below that the
    /// threshold's rounding is not negligible against `ε₂`).
    pub fn new(epsilon: Epsilon, classes: u32) -> Result<Self> {
        if !(2..=MAX_CLASSES).contains(&classes) {
            return Err(Error::OutOfRange {
                name: "classes",
                value: f64::from(classes),
                allowed: "[2, 32768]",
            });
        }
        check_rr_epsilon(epsilon)?;
        Ok(Self { epsilon, classes, threshold: flip_threshold(epsilon.get(), classes) })
    }

    /// The ideal keep probability `e^{ε₂}/(e^{ε₂} + k − 1)` (the realised one is at most
    /// this, see the module docs).
    pub fn keep_probability(&self) -> f64 {
        keep_probability(self.epsilon.get(), self.classes)
    }

    /// The realised flip probability `T/2⁶⁴`.
    pub fn flip_probability(&self) -> f64 {
        self.threshold as f64 / 18_446_744_073_709_551_616.0
    }

    /// What a ledger is charged per randomized label: `Charge::Pure(ε₂)`.
    pub fn charge<const N: usize>(&self) -> Charge<N> {
        Charge::Pure(self.epsilon)
    }

    /// Randomizes `labels` in place; label `i` uses the stream window of logical index
    /// `first + i`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for a label `≥ classes` (nothing is changed: every label is
    /// checked first) or a window past the end of the stream;
    /// [`Error::RandomnessExhausted`] (see the module docs; labels before the failing one
    /// are then already randomized).
    pub fn randomize(&self, labels: &mut [u32], stream: &KeyedStream, first: u64) -> Result<()> {
        if let Some(&bad) = labels.iter().find(|&&l| l >= self.classes) {
            return Err(Error::OutOfRange {
                name: "label",
                value: f64::from(bad),
                allowed: "[0, classes)",
            });
        }
        check_window(first, labels.len())?;
        for (i, label) in labels.iter_mut().enumerate() {
            let index = first + i as u64;
            *label = respond(*label, self.classes, self.threshold, stream, index)?;
        }
        Ok(())
    }
}

/// Below 1e-9 the threshold's rounding is not negligible against ε.
fn check_rr_epsilon(epsilon: Epsilon) -> Result<()> {
    if epsilon.get() < 1e-9 {
        return Err(Error::OutOfRange {
            name: "epsilon",
            value: epsilon.get(),
            allowed: ">= 1e-9 for randomized response",
        });
    }
    Ok(())
}

/// `e^ε/(e^ε + k − 1)`, computed as `1/(1 + (k−1)e^{−ε})`.
fn keep_probability(epsilon: f64, classes: u32) -> f64 {
    1.0 / (1.0 + f64::from(classes - 1) * libm::exp(-epsilon))
}

/// Windows `first .. first + len` must end by word 2⁶⁸ (the stream's end).
fn check_window(first: u64, len: usize) -> Result<()> {
    match first.checked_add(len as u64) {
        Some(end) if LABEL_BASE + u128::from(end) * u128::from(WINDOW) <= 1u128 << 68 => Ok(()),
        _ => Err(Error::SizeOverflow { what: "label window: first + labels <= 2^61" }),
    }
}

/// One response over labels `0..k`: keep `label` unless the coin flips, then one of the
/// other `k − 1` labels uniformly (`r` uniform on `[0, k−1)`, skipping over `label`).
fn respond(label: u32, k: u32, threshold: u64, stream: &KeyedStream, index: u64) -> Result<u32> {
    let mut reader = WindowReader::new(stream, index)?;
    let coin = u64::from(reader.next()?) | (u64::from(reader.next()?) << 32);
    if coin >= threshold {
        return Ok(label);
    }
    let r = below(u64::from(k - 1), &mut || reader.next())? as u32;
    Ok(if r >= label { r + 1 } else { r })
}

/// Sequential words of one label's window; running out is an error.
struct WindowReader {
    rng: rand_chacha::ChaCha20Rng,
    used: u64,
    index: u64,
}

impl WindowReader {
    fn new(stream: &KeyedStream, index: u64) -> Result<Self> {
        let pos = LABEL_BASE + u128::from(index) * u128::from(WINDOW);
        Ok(Self { rng: stream.reader_at(pos)?, used: 0, index })
    }

    fn next(&mut self) -> Result<u32> {
        if self.used == WINDOW {
            return Err(Error::RandomnessExhausted { element: self.index });
        }
        self.used += 1;
        Ok(self.rng.next_u32())
    }
}

/// Randomized response restricted to a public candidate set (RR with a prior, Ghazi et
/// al. 2021; `docs/PAPERS.md` §3.7): if `label` is a candidate, `|candidates|`-ary randomized
/// response over the candidates; otherwise a uniform candidate. `ε₂`-DP for the label when
/// the candidates do not depend on it (e.g. the top labels of a public prior). The output
/// is always a candidate. Label `index` uses the same stream window as
/// [`RandomizedResponse::randomize`].
///
/// ```
/// use dpattn_core::dp_forward::randomize_label_in;
/// use dpattn_core::sampling::{KeyedStream, NoiseKey};
/// use dpattn_core::Epsilon;
/// let s = KeyedStream::new(&NoiseKey::generate()?, 0);
/// let out = randomize_label_in(7, &[3, 7, 9], Epsilon::new(2.0)?, &s, 0)?;
/// assert!([3, 7, 9].contains(&out));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] for an empty set, more than [`MAX_CLASSES`] candidates, repeated
/// candidates, or `ε₂ < 1e-9`; [`Error::RandomnessExhausted`].
pub fn randomize_label_in(
    label: u32,
    candidates: &[u32],
    epsilon: Epsilon,
    stream: &KeyedStream,
    index: u64,
) -> Result<u32> {
    let k = candidates.len();
    if k == 0 || k > MAX_CLASSES as usize {
        return Err(Error::OutOfRange {
            name: "candidates",
            value: k as f64,
            allowed: "1 to 32768 distinct labels",
        });
    }
    check_rr_epsilon(epsilon)?;
    for (i, c) in candidates.iter().enumerate() {
        if candidates[..i].contains(c) {
            return Err(Error::OutOfRange {
                name: "candidates",
                value: f64::from(*c),
                allowed: "distinct labels",
            });
        }
    }
    check_window(index, 1)?;
    let k = k as u32;
    match candidates.iter().position(|&c| c == label) {
        Some(pos) if k > 1 => {
            let t = flip_threshold(epsilon.get(), k);
            let out = respond(pos as u32, k, t, stream, index)?;
            Ok(candidates[out as usize])
        }
        Some(_) => Ok(label),
        None => {
            let mut reader = WindowReader::new(stream, index)?;
            let r = below(u64::from(k), &mut || reader.next())?;
            Ok(candidates[r as usize])
        }
    }
}

/// Theorem 4: a sequence release at `(ε₁, δ)` and a label randomized at `ε₂` give
/// `(ε₁ + ε₂, δ)`-LDP (basic composition), ε rounded up.
///
/// ```
/// use dpattn_core::dp_forward::full_ldp_budget;
/// use dpattn_core::{Epsilon, PrivacyBudget};
/// let b = full_ldp_budget(PrivacyBudget::new(8.0, 1e-5)?, Epsilon::new(2.0)?)?;
/// assert_eq!((b.epsilon().get(), b.delta().get()), (10.0, 1e-5));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfRange`] if the sum overflows.
pub fn full_ldp_budget(sequence: PrivacyBudget, label: Epsilon) -> Result<PrivacyBudget> {
    PrivacyBudget::new(add_up(sequence.epsilon().get(), label.get()), sequence.delta().get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_never_below_ideal() {
        for k in [2u32, 3, 10, 1000] {
            for eps in [1e-9, 1e-3, 0.5, 1.0, 2.2, 10.0, 40.0, 50.0, 800.0] {
                let t = flip_threshold(eps, k) as f64 / 2f64.powi(64);
                let o = f64::from(k - 1) * (-eps).exp();
                let ideal = o / (1.0 + o);
                assert!(t >= ideal * (1.0 - 1e-15) && t > 0.0, "k {k} eps {eps}");
                assert!(t <= ideal * (1.0 + 1e-14) + 2f64.powi(-63), "k {k} eps {eps}");
            }
        }
    }
}
