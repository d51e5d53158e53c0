//! NoisyHead (paper 004) at `T = 1`: the release is `Γ¹ = Π_R(next + noise)`, and with
//! `Γ⁰ = 0` the noiseless step is exact (Sterbenz), so the float release's low bits carry
//! it (the audit's ε lower bounds of 7–10).
//!
//! Neighbours: one prompt (`N = 1`, `L = 1`, `D = 8`) whose summary is `Z = e₁vᵀ` with
//! `v = (½, …, ½)` and target `t = C = 2048` (`x′`), or the same prompt with a zero query
//! (`Z̃ = 0`, `x`). With `η0/N = 2⁻¹⁰` the noiseless first row is exactly `1.0` under `x′`
//! and `0` under `x`; the other rows are `0` under both. The noise std is `s ≈ 0.5` (zCDP
//! accounting at a large ε: the audit is about low bits, not about the budget); `R = 16`
//! keeps `Π_R` inactive, so every exact value is on the grid.

use dpattn::noisy_head::{
    Accounting, Form, NoisyHeadParams, Prompts, noisy_head_keyed, noisy_head_scratch_len,
};
use dpattn::sampling::NoiseKey;
use dpattn::session::Draw;
use dpattn::{NoiseMode, PrivacyBudget};

use crate::low_bits::{LowBits, assert_no_separation, assert_separation, separation_p};

const D: usize = 8;
/// Releases per input: 64 values each, 1.02e5 values.
const RELEASES: u64 = 1600;

fn params(mode: NoiseMode) -> NoisyHeadParams {
    let mut p = NoisyHeadParams {
        d: D,
        l: 1,
        n: 1,
        lambda: 0.0,
        eta0: 2f64.powi(-10),
        iters: 1,
        clip_c: 2048.0,
        proj_g: 1.5,
        proj_r: 16.0,
        sigma: 0.0,
        budget: PrivacyBudget::new(130.0, 1e-5).unwrap(),
        accounting: Accounting::Zcdp,
        noise_mode: mode,
    };
    p.sigma = p.sigma_min();
    p
}

fn audit(mode: NoiseMode) -> (LowBits, LowBits) {
    let p = params(mode);
    let s = p.noise_std().unwrap();
    assert!((0.4..0.6).contains(&s), "noise std {s}");
    let grid = p.calibrate().unwrap().grid().map(|g| g.resolution());
    let (x, y, t) = ([0.5; D], [1.0], [2048.0]);
    let mut e1 = [0.0; D];
    e1[0] = 1.0;
    let key = NoiseKey::for_replay([61; 32]);
    let mut scratch = vec![0.0; noisy_head_scratch_len(&p, Form::Streaming).unwrap()];
    let mut sides = [LowBits::new(), LowBits::new()];
    // A fresh stream per release, and independent noise for the two inputs.
    for (side, (query, first)) in sides.iter_mut().zip([([0.0; D], 0), (e1, RELEASES)]) {
        let prompts = Prompts::new(1, 1, D, &x, &y, &query, &t).unwrap();
        for release in first..first + RELEASES {
            let mut out = [0.0; D * D];
            noisy_head_keyed(
                &mut out,
                &[0.0; D * D],
                &prompts,
                &p,
                Form::Streaming,
                Draw { key: &key, stream: release },
                None,
                &mut scratch,
            )
            .unwrap();
            out.iter().for_each(|&v| side.record_f64(v, grid));
        }
    }
    let [a, b] = sides;
    (a, b)
}

#[test]
fn noisy_head_exact_release_has_no_low_bit_leak() {
    let (a, b) = audit(NoiseMode::Exact);
    println!("NoisyHead, exact: {:?}", separation_p(&a, &b));
    assert_no_separation("NoisyHead", &a, &b);
}

#[test]
fn noisy_head_unsafe_float_release_leaks_the_noiseless_step() {
    let (a, b) = audit(NoiseMode::UnsafeFloat);
    println!("NoisyHead, unsafe float: {:?}", separation_p(&a, &b));
    assert_separation("NoisyHead", &a, &b);
}
