//! DP-Forward (paper 003, `dpattn::dp_forward`): the low-order bits of the released hidden
//! states.
//!
//! Worst case: a pooled `1 × 2` feature under SeqLDP (any two sequences are neighbours),
//! `x = (1/4, 1/4)` against `x′ = (0, 0)`. Both lie inside the clip ball (`C = 1/2`, norm
//! `0.354`), so `ClipMode::Clip` leaves them bit for bit and the noise-free outputs are the
//! exact powers of two `1/4` and exactly `0`: under `x′` the float release is the noise
//! itself, under `x` it is `1/4 + z` rounded, whose last bit round-half-to-even biases in
//! the binades the sum lands in (Mironov 2012). `ε = 8`, `δ = 1e-5`, `S = 2C = 1`: the noise
//! floor is `0.600` (`docs/PAPERS.md` T3-A), so the values spread over several binades around 1/4.
//!
//! Each call releases a batch of 1000 copies of the input — 1000 separate releases (the
//! sequences of a batch are separate inputs, each on its own noise elements) — with a fresh
//! stream id per call; 50 calls give 1e5 values per input. In exact mode every value must be
//! a multiple of the reported `Λ` and the neighbours must not separate; on the float path
//! with `f64` hidden states they must.
//!
//! `f32` hidden states on the float path are not separated by this audit: the noise is drawn
//! and added in `f64` and the sum rounded once to 24 bits, so the last `f32` bit of `1/4 + z`
//! is as fair as that of `z` (a trace of the sum's `f64` grid needs a cancellation by about
//! `2^30`, far too rare to observe in 1e5 values). That is not a proof of privacy — the float
//! path stays unproved — so the `f32` audit checks the exact mode only; the distinguisher's
//! power is shown by the `f64` audits and the harness's planted-leak test.

use dpattn::dp_forward::{
    ClipMode, ClipRegion, DpForwardParams, Neighbours, NoiseFactors, NoisePosition,
    SensitivityRule, dp_forward_keyed,
};
use dpattn::sampling::{NoiseFloat, NoiseKey};
use dpattn::session::Draw;
use dpattn::{MatMut, NoiseMode, PrivacyBudget};

use crate::low_bits::{LowBits, assert_no_separation, assert_separation};

/// Coordinates per release.
const DIM: usize = 2;
/// Releases (sequences) per call.
const BATCH: usize = 1000;
/// Calls per input: `CALLS·BATCH·DIM = 1e5` values.
const CALLS: u64 = 50;
/// The worst-case coordinate: `1/4` under `x`, `0` under `x′`.
const SIGNAL: f64 = 0.25;

fn params(noise_mode: NoiseMode) -> DpForwardParams {
    DpForwardParams {
        budget: PrivacyBudget::new(8.0, 1e-5).unwrap(),
        releases: 1,
        clip_norm: 0.5,
        region: ClipRegion::Frobenius,
        mode: ClipMode::Clip,
        neighbours: Neighbours::Sequence,
        position: NoisePosition::Pooled,
        tokens: 1,
        dim: DIM,
        rule: SensitivityRule::Derived,
        noise_mode,
    }
}

/// The low-bit statistics of `x` (`signal = SIGNAL`) and `x′` (`signal = 0`), in that order.
fn audit<T: NoiseFloat>(
    mode: NoiseMode,
    factors: &NoiseFactors<'_>,
    record: fn(&mut LowBits, T, Option<f64>),
) -> [LowBits; 2] {
    let p = params(mode);
    let key = NoiseKey::for_replay([0xd7; 32]);
    let mut out = [LowBits::new(), LowBits::new()];
    for (input, signal) in [SIGNAL, 0.0].into_iter().enumerate() {
        for call in 0..CALLS {
            let mut x = vec![T::from_f64(signal); BATCH * DIM];
            let report = dp_forward_keyed(
                MatMut::from_row_major(&mut x, BATCH, DIM).unwrap(),
                &p,
                factors,
                Draw { key: &key, stream: ((input as u64) << 32) | call },
                0,
                None,
                &mut [],
            )
            .unwrap();
            assert_eq!(report.scaled, 0, "the inputs lie inside the ball");
            assert_eq!(report.noise_mode, mode);
            for &v in &x {
                record(&mut out[input], v, report.resolution);
            }
        }
    }
    out
}

/// Exact mode does not separate `x` from `x′`; the `f64` float path does.
fn check_f64(name: &str, factors: &NoiseFactors<'_>) {
    let [a, b] = audit::<f64>(NoiseMode::Exact, factors, LowBits::record_f64);
    assert_no_separation(name, &a, &b);
    let [a, b] = audit::<f64>(NoiseMode::UnsafeFloat, factors, LowBits::record_f64);
    assert_separation(name, &a, &b);
}

#[test]
fn dp_forward_iid_f64() {
    check_f64("dp_forward i.i.d. f64", &NoiseFactors::Iid);
}

#[test]
fn dp_forward_diagonal_f64() {
    let floor = params(NoiseMode::Exact).noise_floor().unwrap();
    let (rows, cols) = ([floor], [1.0, 1.25]);
    check_f64(
        "dp_forward diagonal f64",
        &NoiseFactors::Diagonal { row_std: &rows, col_std: &cols },
    );
}

#[test]
fn dp_forward_iid_f32() {
    let [a, b] = audit::<f32>(NoiseMode::Exact, &NoiseFactors::Iid, LowBits::record_f32);
    assert_no_separation("dp_forward i.i.d. f32", &a, &b);
}
