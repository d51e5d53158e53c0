//! The moment sketch (paper 001, extension `docs/PAPERS.md` P1-X1): the low-bit audit of its
//! Gaussian and Laplace releases, and the exact release's accuracy against the float one at the
//! quickstart's sizes.
//!
//! **Neighbours.** One token (`n = 1`, public): the key `k = 0` (so `P(k) = e_0`: the constant
//! feature alone) with the value `v = 0` under `x` and `v = (1, …, 1)` under `x′`. The sketch
//! `M = P(k)[1, v]ᵀ` then has the `d` entries `(0, c)`, `c = 1..d`, exactly `0` under `x` and
//! exactly `1` under `x′`, and every other entry equal; those `d` entries are recorded.
//! `d = 8`, `s = 1` (`ε_s = 0.5`), `R = R_w = 1`: `r = 9`, `81` entries, `Λ = 2^−9`, and
//! `ε` is chosen for a float noise scale near 0.5, where `1 + z` lands one binade above `z`
//! and round-half-to-even clears its last bit half the time (the float leak). In exact mode
//! `1/Λ = 512` is a multiple of 256, so the neighbours' grid indices differ by a multiple of
//! 256 and the low-8-bit histograms compare like with like (the DP-bounded shift itself is
//! not what the audit measures).

use dpattn::moment_sketch::{MomentSketch, MomentSketchParams, SketchGrid, SketchNoise};
use dpattn::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey, Uniform};
use dpattn::session::Draw;
use dpattn::{MatRef, NoiseMode, PrivacyBudget};

use crate::low_bits::{LowBits, assert_no_separation, assert_separation};
use crate::support::stats::{moments, z_critical};

const D: usize = 8;
/// Releases per input: `RELEASES · D ≥ 1e5` recorded values.
const RELEASES: u64 = 12_500;

fn audit_params(noise: SketchNoise, mode: NoiseMode) -> MomentSketchParams {
    let budget = match noise {
        SketchNoise::Gaussian => PrivacyBudget::new(150.0, 1e-5).unwrap(),
        SketchNoise::Laplace => PrivacyBudget::new(138.0, 0.0).unwrap(),
    };
    let mut p = MomentSketchParams::new(1.0, 1.0, budget);
    p.eps_s = 0.5; // Pr[Pois(1) > 1]/Pr[Pois(1) ≤ 1] = 0.359: degree 1
    p.noise = noise;
    p.noise_mode = mode;
    p
}

/// The recorded entries `(0, 1..=D)` of `RELEASES` releases of the one-token input with
/// value `v` (fresh stream id per release; the two inputs use different keys, so their noise
/// is independent).
fn audit(noise: SketchNoise, mode: NoiseMode, v: f64) -> LowBits {
    let p = audit_params(noise, mode);
    let keys = [0.0; D];
    let vals = [v; D];
    let (k, vm) = (
        MatRef::from_row_major(&keys, 1, D).unwrap(),
        MatRef::from_row_major(&vals, 1, D).unwrap(),
    );
    let mut bits = LowBits::new();
    let key = NoiseKey::for_replay([0x5C + v as u8; 32]);
    for id in 0..RELEASES {
        let s = MomentSketch::new_keyed(k, vm, &p, Draw { key: &key, stream: id }, None).unwrap();
        assert_eq!(s.feature_map().features(), D + 1);
        for &m in &s.sketch()[1..=D] {
            bits.record_f64(m, s.resolution());
        }
    }
    bits
}

fn audit_both_modes(noise: SketchNoise) {
    let name = format!("moment sketch ({noise:?})");
    let exact = audit_params(noise, NoiseMode::Exact).exact_grid(D, 1).unwrap();
    assert_eq!(exact.resolution(), 2f64.powi(-9));
    let (_, scale) = audit_params(noise, NoiseMode::UnsafeFloat).calibrate(D).unwrap();
    let sd = if noise == SketchNoise::Laplace { scale * 2f64.sqrt() } else { scale };
    assert!((0.3..1.0).contains(&sd), "float noise σ = {sd}: outside the leaking range");
    let (a, b) = (audit(noise, NoiseMode::Exact, 0.0), audit(noise, NoiseMode::Exact, 1.0));
    assert_no_separation(&name, &a, &b);
    let (a, b) =
        (audit(noise, NoiseMode::UnsafeFloat, 0.0), audit(noise, NoiseMode::UnsafeFloat, 1.0));
    assert_separation(&name, &a, &b);
}

#[test]
fn moment_sketch_gaussian_low_bits() {
    audit_both_modes(SketchNoise::Gaussian);
}

#[test]
fn moment_sketch_laplace_low_bits() {
    audit_both_modes(SketchNoise::Laplace);
}

/// The quickstart's paper-001 problem (`examples/quickstart.rs`): `n = 16384` tokens, `d = 2`,
/// keys uniform in `[0, 1]²`, values `1.2u − 0.2`, 16 public queries, `ε = 1`, `δ = 1e-6`,
/// `R = R_w = 1`; the error is `‖Õ − O‖_F/‖O‖_F` against exact `softmax(qKᵀ/d)V`.
///
/// * The noise scales, exactly: the exact release's per-entry noise (the discrete
///   Gaussian's `s·Λ`) is within 1% above the float release's `σ`.
/// * The error, statistically: the noise-free sketch is computed once per mode (as
///   `MomentSketch::new` computes it) and released 20000 times with the mechanism's own
///   noise (`GaussianGrid::release_keyed`, `Gaussian::fill_keyed`; the first release of each
///   mode is checked bit for bit against `MomentSketch::new` and its answers against
///   `MomentSketch::query`); the mean errors' ratio is within `[1 − z·SE, 1.01 + z·SE]`
///   (`z` at ALPHA). The noise-free error (kernel and rounding) is below 1e-5, the total
///   about 3e-3: the error is the noise's.
#[test]
fn exact_moment_sketch_is_as_accurate_as_the_float_one_at_the_quickstart_sizes() {
    let (n, d, nq) = (16_384usize, 2usize, 16usize);
    let draw = |stream: u64, len: usize| {
        let mut u = vec![0.0; len];
        let st = KeyedStream::new(&NoiseKey::for_replay([11; 32]), stream);
        Uniform.fill_keyed(&st, 0, &mut u).unwrap();
        u
    };
    let k = draw(0, n * d);
    let v: Vec<f64> = draw(1, n * d).iter().map(|x| 1.2 * x - 0.2).collect();
    let qs = draw(2, nq * d);
    let mut exact = vec![0.0; nq * d];
    for (q, o) in qs.chunks_exact(d).zip(exact.chunks_exact_mut(d)) {
        let mut den = 0.0;
        for (kr, vr) in k.chunks_exact(d).zip(v.chunks_exact(d)) {
            let e = (q.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>() / d as f64).exp();
            den += e;
            o.iter_mut().zip(vr).for_each(|(x, y)| *x += e * y);
        }
        o.iter_mut().for_each(|x| *x /= den);
    }
    let norm: f64 = exact.iter().map(|b| b * b).sum::<f64>().sqrt();
    let rel = |got: &[f64]| {
        got.iter().zip(&exact).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt() / norm
    };
    let (km, vm) =
        (MatRef::from_row_major(&k, n, d).unwrap(), MatRef::from_row_major(&v, n, d).unwrap());
    let budget = PrivacyBudget::new(1.0, 1e-6).unwrap();

    let mut p = MomentSketchParams::new(1.0, 1.0, budget);
    let SketchGrid::Gaussian(grid) = p.exact_grid(d, n).unwrap() else { panic!("Gaussian") };
    let (_, sigma) = p.calibrate(d).unwrap();
    let ratio = grid.sigma() / sigma;
    assert!((1.0..1.01).contains(&ratio), "exact/float noise scale {ratio}");

    let map = *MomentSketch::non_private_exact(km, vm, &p).unwrap().feature_map();
    let (r, cols) = (map.features(), d + 1);
    let feats: Vec<Vec<f64>> = qs
        .chunks_exact(d)
        .map(|q| {
            let mut u = vec![0.0; r];
            map.eval_into(q, &mut u).unwrap();
            u
        })
        .collect();
    let hi = n as f64 * dpattn::softmax_tree::taylor_exp(map.z_max(1.0), map.degree());
    // The query of `MomentSketch::query_into` (post-processing, with the P1-X8 clamps).
    let answer = |m: &[f64], out: &mut [f64]| {
        for (u, o) in feats.iter().zip(out.chunks_exact_mut(d)) {
            let proj = |c: usize| -> f64 {
                u.iter().enumerate().map(|(i, &ui)| ui * m[i * cols + c]).sum()
            };
            let den = proj(0);
            let den = if den.is_nan() { n as f64 } else { den.clamp(n as f64, hi) };
            for (c, x) in o.iter_mut().enumerate() {
                *x = (proj(c + 1) / den).clamp(-1.0, 1.0);
            }
        }
    };

    const REPS: u64 = 20_000;
    let mut stats = Vec::new();
    for mode in [NoiseMode::Exact, NoiseMode::UnsafeFloat] {
        p.noise_mode = mode;
        let clean = MomentSketch::non_private_exact(km, vm, &p).unwrap();
        let clean = clean.sketch();
        let mut out = vec![0.0; nq * d];
        answer(clean, &mut out);
        assert!(rel(&out) < 1e-5, "noise-free error {}", rel(&out));
        let mut errs = Vec::with_capacity(REPS as usize);
        let mut m = vec![0.0; clean.len()];
        let key = NoiseKey::for_replay([12; 32]);
        for id in 0..REPS {
            let st = KeyedStream::new(&key, id);
            match mode {
                NoiseMode::Exact => {
                    m.copy_from_slice(clean);
                    grid.release_keyed(&st, 0, &mut m).unwrap();
                }
                NoiseMode::UnsafeFloat => {
                    Gaussian::new(sigma).unwrap().fill_keyed(&st, 0, &mut m).unwrap();
                    m.iter_mut().zip(clean).for_each(|(z, c)| *z += c);
                }
                NoiseMode::ConstantTime => unreachable!("not a mode of this test"),
            }
            answer(&m, &mut out);
            if id == 0 {
                let dr = Draw { key: &key, stream: id };
                let s = MomentSketch::new_keyed(km, vm, &p, dr, None).unwrap();
                assert_eq!(s.sketch(), &m[..], "{mode:?}: the emulated release");
                let mut want = vec![0.0; nq * d];
                for (q, o) in qs.chunks_exact(d).zip(want.chunks_exact_mut(d)) {
                    s.query(q, o).unwrap();
                }
                assert_eq!(want, out, "{mode:?}: the emulated answers");
            }
            errs.push(rel(&out));
        }
        stats.push(moments(&errs));
    }
    let (x, f) = (&stats[0], &stats[1]);
    let ratio = x.mean / f.mean;
    let se = ratio * (x.var / (x.mean * x.mean) + f.var / (f.mean * f.mean)).sqrt()
        / (REPS as f64).sqrt();
    let z = z_critical();
    assert!(
        ratio > 1.0 - z * se && ratio < 1.01 + z * se,
        "mean relative error exact {} vs float {}: ratio {ratio} (SE {se})",
        x.mean,
        f.mean
    );
}
