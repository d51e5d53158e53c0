//! The low-order-bit distinguisher shared by every mechanism's audit.
//!
//! A [`LowBits`] collects, for the values released under one input:
//! * per binade `[2^e, 2^{e+1})` of `|v|`, how many values fall in it and how many of those
//!   have an odd last mantissa bit (in the value's own format, `f32` or `f64`);
//! * a histogram of the low 8 bits of the value's grid index `v/Λ` (exact releases) or of
//!   its mantissa (float releases, which have no grid).
//!
//! [`separation_p`] compares two of them: the smallest Bonferroni-corrected p-value of the
//! per-binade parity comparisons (two-proportion z-tests, binades with at least
//! [`MIN_PER_BINADE`] values on both sides) and of the two-sample χ² of the histograms.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;

use crate::support::stats::{chi_square_sf, normal_two_sided_p};

/// Binades with fewer values on either side are not compared.
pub const MIN_PER_BINADE: u64 = 200;
/// The significance level of every verdict.
pub const ALPHA: f64 = 1e-6;

/// Low-order statistics of the values released under one input.
#[derive(Debug, Clone)]
pub struct LowBits {
    /// Values recorded.
    pub values: u64,
    /// Binade exponent `e` → (values with `|v| ∈ [2^e, 2^{e+1})`, of which last bit odd).
    pub binades: BTreeMap<i32, (u64, u64)>,
    /// Low 8 bits of the grid index (or of the mantissa).
    pub hist: [u64; 256],
}

impl Default for LowBits {
    fn default() -> Self {
        Self { values: 0, binades: BTreeMap::new(), hist: [0; 256] }
    }
}

impl LowBits {
    pub fn new() -> Self {
        Self::default()
    }

    fn binade(&mut self, e: i32, odd: bool) {
        let slot = self.binades.entry(e).or_insert((0, 0));
        slot.0 += 1;
        slot.1 += u64::from(odd);
    }

    /// Records an `f32` value. With `grid = Some(Λ)` the value must be an exact multiple of
    /// `Λ` (asserted) and the histogram takes the low 8 bits of `v/Λ`; with `None`, of the
    /// mantissa.
    pub fn record_f32(&mut self, v: f32, grid: Option<f64>) {
        assert!(v.is_finite(), "released value {v} is not finite");
        self.values += 1;
        let bits = v.to_bits();
        if v != 0.0 && (bits >> 23) & 0xff != 0 {
            let e = ((bits >> 23) & 0xff) as i32 - 127;
            self.binade(e, bits & 1 == 1);
        }
        self.hist[low8(f64::from(v), grid, u64::from(bits & 0x7f_ffff))] += 1;
    }

    /// Records an `f64` value (as [`record_f32`](Self::record_f32)).
    pub fn record_f64(&mut self, v: f64, grid: Option<f64>) {
        assert!(v.is_finite(), "released value {v} is not finite");
        self.values += 1;
        let bits = v.to_bits();
        if v != 0.0 && (bits >> 52) & 0x7ff != 0 {
            let e = ((bits >> 52) & 0x7ff) as i32 - 1023;
            self.binade(e, bits & 1 == 1);
        }
        self.hist[low8(v, grid, bits & ((1 << 52) - 1))] += 1;
    }
}

/// The histogram bin of a value: low 8 bits of `v/Λ` (asserting it is an integer) or of
/// the mantissa.
fn low8(v: f64, grid: Option<f64>, mantissa: u64) -> usize {
    match grid {
        Some(lambda) => {
            let n = v / lambda;
            assert!(n.fract() == 0.0 && n.abs() < 9.0e15, "{v} is not a multiple of Λ = {lambda}");
            (n as i64).rem_euclid(256) as usize
        }
        None => (mantissa & 0xff) as usize,
    }
}

/// Two-sided p-value that two binomial proportions are equal (pooled z-test).
fn two_proportion_p(k1: u64, n1: u64, k2: u64, n2: u64) -> f64 {
    let (p1, p2) = (k1 as f64 / n1 as f64, k2 as f64 / n2 as f64);
    let p = (k1 + k2) as f64 / (n1 + n2) as f64;
    let var = p * (1.0 - p) * (1.0 / n1 as f64 + 1.0 / n2 as f64);
    if var == 0.0 {
        return 1.0; // both all-even or all-odd: no separation
    }
    normal_two_sided_p((p1 - p2) / var.sqrt())
}

/// Two-sample χ² p-value of two histograms (bins empty on both sides are dropped).
fn histogram_p(a: &[u64; 256], b: &[u64; 256]) -> f64 {
    let (na, nb) = (a.iter().sum::<u64>() as f64, b.iter().sum::<u64>() as f64);
    let (ka, kb) = ((nb / na).sqrt(), (na / nb).sqrt());
    let mut stat = 0.0;
    let mut bins = 0;
    for (&x, &y) in a.iter().zip(b) {
        if x + y == 0 {
            continue;
        }
        bins += 1;
        let d = ka * x as f64 - kb * y as f64;
        stat += d * d / (x + y) as f64;
    }
    if bins < 2 { 1.0 } else { chi_square_sf(stat, f64::from(bins - 1)) }
}

/// The two verdict statistics of a comparison.
#[derive(Debug, Clone, Copy)]
pub struct Separation {
    /// Smallest Bonferroni-corrected p-value of the per-binade parity comparisons.
    pub parity_p: f64,
    /// The binade it was found in.
    pub parity_binade: Option<i32>,
    /// Number of binades compared.
    pub binades: usize,
    /// Two-sample χ² p-value of the low-8-bit histograms.
    pub histogram_p: f64,
}

impl Separation {
    /// The smaller of the two p-values.
    pub fn p(&self) -> f64 {
        self.parity_p.min(self.histogram_p)
    }
}

/// Compares the low-order bits of two inputs' releases.
pub fn separation_p(a: &LowBits, b: &LowBits) -> Separation {
    let mut tests = Vec::new();
    for (e, &(na, ka)) in &a.binades {
        if let Some(&(nb, kb)) = b.binades.get(e)
            && na >= MIN_PER_BINADE
            && nb >= MIN_PER_BINADE
        {
            tests.push((*e, two_proportion_p(ka, na, kb, nb)));
        }
    }
    let m = tests.len().max(1) as f64;
    let (parity_binade, parity_p) = tests
        .iter()
        .map(|&(e, p)| (Some(e), (p * m).min(1.0)))
        .fold((None, 1.0), |best, t| if t.1 < best.1 { t } else { best });
    Separation {
        parity_p,
        parity_binade,
        binades: tests.len(),
        histogram_p: histogram_p(&a.hist, &b.hist),
    }
}

/// Asserts that the exact release does not separate the inputs.
pub fn assert_no_separation(name: &str, a: &LowBits, b: &LowBits) {
    assert!(a.values >= 100_000 && b.values >= 100_000, "{name}: too few values");
    let s = separation_p(a, b);
    assert!(
        s.parity_p > ALPHA && s.histogram_p > ALPHA,
        "{name} (exact mode) separates neighbours by their low bits: {s:?}"
    );
}

/// Asserts that the unsafe float release separates the inputs (the audit has power).
pub fn assert_separation(name: &str, a: &LowBits, b: &LowBits) {
    assert!(a.values >= 100_000 && b.values >= 100_000, "{name}: too few values");
    let s = separation_p(a, b);
    assert!(
        s.p() < ALPHA,
        "{name} (unsafe float mode): the audit found no leak, so it has no power: {s:?}"
    );
}

#[test]
fn the_distinguisher_sees_a_planted_leak_and_ignores_a_fair_shift() {
    // Input a: f32 values k·2^-24 in [0.5, 1) with uniform parity. Input b: the same values
    // with the last bit cleared (what round-half-to-even does to 1 + z): a leak.
    let (mut a, mut b, mut c) = (LowBits::new(), LowBits::new(), LowBits::new());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = (1u32 << 23) + (x as u32 & ((1 << 23) - 1));
        let v = k as f32 * 2f32.powi(-24);
        a.record_f32(v, None);
        b.record_f32(f32::from_bits(v.to_bits() & !1), None);
        // A fair shift by 2 grid steps of Λ = 2^-24: same low-bit law.
        c.record_f32(v + 2.0 * 2f32.powi(-24), None);
    }
    assert!(separation_p(&a, &b).p() < ALPHA);
    assert!(separation_p(&a, &c).p() > ALPHA);
}
