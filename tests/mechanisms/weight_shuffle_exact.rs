//! The exact release of the shuffled DP-SGD step (`NoiseMode::Exact`, the default;
//! `docs/PRIVACY.md` §7.4): the calibration, the addressing of the integer noise, what the
//! step hands back, the refusals, and the accuracy against the unsafe float path at the
//! quickstart's sizes.
//!
//! Expected values are recomputed here from the documented formulas: the accumulation grid
//! `Λ_g` (smallest power of two with `N·c ≤ 2⁵²·Λ_g`), the sensitivity `Δ = c + √D·Λ_g/2`,
//! the projection error `E = P·(c′·γ_{D+9} + √D·2⁻¹⁰⁷⁵)`, the resolution rule
//! `√D·Λ ≤ Δ/256`, `Δ′ = Δ + 2E + √D·Λ`, the integer noise `√((f·σ_eff·Δ′/Λ)² + 16)` of a
//! coordinate whose multiplier is `f·σ_eff`; the released sum `Λ·(round(ŝ/Λ) + z_j)` with
//! `z_j` element `j` of the noise stream; `g̃ = released/B`, `w ← w − η·g̃`.

use crate::support;

use dpattn::accounting::cost::Accountant;
use dpattn::accounting::ledger::Ledger;
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::grid_release::GaussianGrid;
use dpattn::sampling::{ExactSampler, KeyedStream, NoiseKey};
use dpattn::session::Draw;
use dpattn::weight_shuffle::{
    BatchClip, BatchClipScope, Block, LinearLayout, MlpBlock, ShufflePlan, ShuffledDpSgdParams,
    StepReport, WeightLayout, shuffled_dp_sgd_step_keyed, shuffled_dp_sgd_step_scratch_len,
};
use dpattn::{Delta, Element, Epsilon, Error, NoiseMode, Result};
use support::stats::{moments, var_z, z_accepts};

const U: f64 = 1.0 / 9_007_199_254_740_992.0; // 2⁻⁵³

fn key(seed: u8) -> NoiseKey {
    NoiseKey::for_replay([seed; 32])
}

fn gamma(n: f64) -> f64 {
    n * U / (1.0 - n * U)
}

fn bits<T: Element>(x: &[T]) -> Vec<u64> {
    x.iter().map(|e| e.to_f64().to_bits()).collect()
}

/// An MLP `d_in → hidden → d_out` with biases at offset 0 (`(out, in)` storage), and the
/// `(offset, len)` of every tensor it moves (`down`'s bias stays).
fn mlp(d_in: usize, hidden: usize, d_out: usize) -> (Block, Vec<(usize, usize)>, usize) {
    let up = LinearLayout::new(0, hidden, d_in, WeightLayout::OutIn).with_bias(hidden * d_in);
    let at = hidden * d_in + hidden;
    let down =
        LinearLayout::new(at, d_out, hidden, WeightLayout::OutIn).with_bias(at + d_out * hidden);
    let moved = vec![(0, hidden * d_in), (hidden * d_in, hidden), (at, d_out * hidden)];
    (Block::Mlp(MlpBlock { up, gate: None, down }), moved, at + d_out * hidden + d_out)
}

fn unapply_perms<T: Element>(plan: &ShufflePlan<'_>, perms: &[u32], buf: &mut [T]) {
    let mut idx = perms.to_vec();
    let p = plan.check(&mut idx).unwrap();
    let mut inv = vec![0u32; perms.len()];
    let inv = plan.invert(&p, &mut inv).unwrap();
    let mut scratch = vec![0.0; plan.apply_scratch_len()];
    plan.apply(&inv, buf, &mut scratch).unwrap();
}

/// One step; returns the report, the permutations and `g̃` (scratch[..D]).
#[allow(clippy::too_many_arguments)]
fn step<T: Element>(
    plan: &ShufflePlan<'_>,
    w: &mut [T],
    params: &ShuffledDpSgdParams,
    capacity: u64,
    gradient: impl FnMut(u64, &[T], &mut [f64]) -> Result<()>,
    key: &NoiseKey,
    first: u64,
    ledger: Option<&mut Ledger>,
) -> Result<(StepReport, Vec<u32>, Vec<f64>)> {
    let mut perms = vec![0u32; plan.permutation_len()];
    let mut scratch = vec![0.0; shuffled_dp_sgd_step_scratch_len(plan)?];
    let report = shuffled_dp_sgd_step_keyed(
        w,
        &mut [],
        plan,
        params,
        capacity,
        gradient,
        Draw { key, stream: first },
        ledger.map(|l| l as &mut dyn Accountant),
        &mut perms,
        &mut scratch,
    )?;
    let d = plan.param_len();
    Ok((report, perms, scratch[..d].to_vec()))
}

/// The documented `Λ_g`, `E`, `Λ`, `Δ′` and continuous σ of a step's grid, in plain `f64`.
fn documented(p: &ShuffledDpSgdParams, d: usize, blocks: usize, n: u64) -> [f64; 5] {
    let (c, df, nf) = (p.clip_norm, d as f64, n as f64);
    // Λ_g: the smallest power of two with N·c ≤ 2⁵²·Λ_g.
    let lambda_g = 2f64.powi((nf * c / 2f64.powi(52)).log2().ceil() as i32);
    let delta = c + df.sqrt() * lambda_g / 2.0;
    let e = match p.batch_clip {
        None => 0.0,
        Some(bc) => {
            let projections = match bc.scope {
                BatchClipScope::PerBlock => blocks as f64,
                BatchClipScope::AllMoved => 1.0,
            };
            projections * (bc.norm * gamma(df + 9.0) + df.sqrt() * 2f64.powi(-1075))
        }
    };
    let lambda = 2f64.powi((delta / (256.0 * df.sqrt())).log2().floor() as i32);
    let inflated = delta + 2.0 * e + df.sqrt() * lambda;
    [lambda_g, e, lambda, inflated, p.effective_noise_multiplier() * inflated]
}

fn check_grid(name: &str, grid: &GaussianGrid, p: &ShuffledDpSgdParams, d: usize, n: u64) {
    let [lambda_g, e, lambda, inflated, sigma_c] = documented(p, d, 1, n);
    assert!(lambda_g * 2f64.powi(52) >= n as f64 * p.clip_norm);
    assert!(e < 1e-6 * p.clip_norm, "{name}: E = {e:e}");
    assert_eq!(grid.resolution(), lambda, "{name}: Λ");
    assert!((grid.rounded_sensitivity() / inflated - 1.0).abs() < 1e-12, "{name}: Δ′");
    assert!((grid.continuous_sigma() / sigma_c - 1.0).abs() < 1e-12, "{name}: σ_c");
    // Moved and fixed coordinates: √((f·σ_c/Λ)² + 16), the sampler's fraction rounded up.
    let fixed = p.fixed_noise_multiplier.unwrap_or(p.noise_multiplier);
    for m in [p.noise_multiplier, fixed] {
        let f = m / p.effective_noise_multiplier();
        let want = ((f * sigma_c / lambda).powi(2) + 16.0).sqrt();
        let got = grid.scaled_noise(f).unwrap().sigma();
        assert!(got / want - 1.0 > -1e-12 && got / want - 1.0 < 1e-9, "{name}: {got} vs {want}");
    }
    assert!(grid.inflation() <= 1.0 / 256.0 + 1e-6, "{name}: inflation {}", grid.inflation());
}

#[test]
fn exact_grid_follows_the_documented_formula() -> Result<()> {
    let (block, _, d) = mlp(4, 16, 1);
    let blocks = [block];
    let plan = ShufflePlan::new(&blocks, d)?;
    let base = ShuffledDpSgdParams::new(0.05, 1.0, 1.0, 1.0, 40); // the quickstart's
    let mut hybrid = ShuffledDpSgdParams::new(0.01, 0.3, 1.4, 0.1, 100);
    hybrid.fixed_noise_multiplier = Some(0.8);
    let mut clipped = ShuffledDpSgdParams::new(0.5, 2.0, 0.7, 0.1, 100);
    clipped.batch_clip = Some(BatchClip { norm: 3.0, scope: BatchClipScope::PerBlock });
    let mut all = clipped;
    all.batch_clip = Some(BatchClip { norm: 3.0, scope: BatchClipScope::AllMoved });
    for (name, p, n) in [
        ("quickstart", base, 2000u64),
        ("σ₀ < σ", hybrid, 60_000),
        ("batch clip per block", clipped, 10),
        ("batch clip, all moved", all, 10),
        ("capacity 2^30", base, 1 << 30),
    ] {
        check_grid(name, &p.exact_grid(&plan, n)?, &p, d, n);
    }
    Ok(())
}

/// `σ = 0.9` on moved, `σ₀ = 1.7` on fixed coordinates of a 3 → 4 → 2 MLP plus 14 extra
/// (never moved) elements; `q = 1`, `N = 4`, `η = 0.5`.
fn small() -> ([Block; 1], Vec<(usize, usize)>, usize, ShuffledDpSgdParams) {
    let (block, moved, end) = mlp(3, 4, 2);
    let mut p = ShuffledDpSgdParams::new(1.0, 0.6, 0.9, 0.5, 10);
    p.fixed_noise_multiplier = Some(1.7);
    ([block], moved, end + 14, p)
}

#[test]
fn exact_step_releases_the_sum_on_the_grid_with_the_integer_noise_of_element_j() -> Result<()> {
    let (blocks, moved, d, p) = small();
    let plan = ShufflePlan::new(&blocks, d)?;
    let mut is_moved = vec![false; d];
    moved.iter().for_each(|&(o, n)| is_moved[o..o + n].iter_mut().for_each(|m| *m = true));
    let grid = p.exact_grid(&plan, 4)?;
    let lambda = grid.resolution();
    let (gm, gf) = (grid.scaled_noise(1.0)?, grid.scaled_noise(1.7 / 0.9)?);
    // Record r's gradient: multiples of 1/64 of norm < c (not clipped), so the sum ŝ is exact
    // and a multiple of Λ and of Λ_g: its index is ŝ/Λ.
    let grads: Vec<Vec<f64>> = (0..4)
        .map(|r| (0..d).map(|j| ((j * 7 + r * 3) % 5) as f64 / 64.0 - 2.0 / 64.0).collect())
        .collect();
    assert!(grads.iter().all(|g| g.iter().map(|x| x * x).sum::<f64>().sqrt() < 0.6));
    let sum: Vec<f64> = (0..d).map(|j| grads.iter().map(|g| g[j]).sum()).collect();
    let w0: Vec<f64> = (0..d).map(|j| j as f64 / 10.0 - 1.0).collect();
    let key = key(51);
    for s in 0..3u64 {
        let streams = 100 + 3 * s; // step s of a run from 100: selection, noise, permutations
        let noise = KeyedStream::new(&key, streams + 1);
        let released: Vec<f64> = (0..d)
            .map(|j| {
                let z = if is_moved[j] { &gm } else { &gf }.sample_at(&noise, j as u64).unwrap();
                (sum[j] / lambda + z as f64) * lambda
            })
            .collect();
        let b = 4.0; // q·N
        let w0_32: Vec<f32> = w0.iter().map(|&x| x as f32).collect();
        let (mut w, mut w32) = (w0.clone(), w0_32.clone());
        let table = |r: u64, _: &[f64], g: &mut [f64]| {
            g.copy_from_slice(&grads[r as usize]);
            Ok(())
        };
        let (report, perms, mut g) = step(&plan, &mut w, &p, 4, table, &key, streams, None)?;
        assert_eq!((report.noise_mode, report.resolution), (NoiseMode::Exact, Some(lambda)));
        unapply_perms(&plan, &perms, &mut w);
        unapply_perms(&plan, &perms, &mut g);
        let want_w: Vec<f64> = w0.iter().zip(&released).map(|(x, y)| x - 0.5 / b * y).collect();
        assert_eq!(bits(&w), bits(&want_w), "weights, step {s}");
        let want_g: Vec<f64> = released.iter().map(|y| y / b).collect();
        assert_eq!(bits(&g), bits(&want_g), "g̃, step {s}");
        // f32 weights: the same update, rounded once.
        let table32 = |r: u64, _: &[f32], g: &mut [f64]| {
            g.copy_from_slice(&grads[r as usize]);
            Ok(())
        };
        let (_, perms32, _) = step(&plan, &mut w32, &p, 4, table32, &key, streams, None)?;
        unapply_perms(&plan, &perms32, &mut w32);
        let want32: Vec<f32> = w0_32
            .iter()
            .zip(&released)
            .map(|(&x, y)| (f64::from(x) - 0.5 / b * y) as f32)
            .collect();
        assert_eq!(bits(&w32), bits(&want32), "f32 weights, step {s}");
    }
    Ok(())
}

#[test]
fn exact_mode_has_no_bounded_support_refusal_and_is_not_an_unsafe_charge() -> Result<()> {
    let (blocks, _, d, _) = small();
    let plan = ShufflePlan::new(&blocks, d)?;
    let new_ledger = || {
        Ledger::new_rdp(PrivacyUnit::Record, Epsilon::new(1e6).unwrap(), Delta::new(1e-5).unwrap())
    };
    let zero = |_: u64, _: &[f64], g: &mut [f64]| {
        g.fill(0.0);
        Ok(())
    };
    // σ = 0.27 at the paper's q and T: the float path's Box–Muller support would be visible
    // (refused), the exact release has no bounded support and is accepted and charged.
    let exact = ShuffledDpSgdParams::new(0.01, 1.0, 0.27, 0.1, 1000);
    let float = ShuffledDpSgdParams { noise_mode: NoiseMode::UnsafeFloat, ..exact };
    let mut ledger = new_ledger()?;
    let streams = 0;
    let r =
        step(&plan, &mut vec![0.0f64; d], &float, 100, zero, &key(52), streams, Some(&mut ledger));
    assert!(matches!(r, Err(Error::Infeasible { .. })), "{r:?}");
    step(&plan, &mut vec![0.0f64; d], &exact, 100, zero, &key(52), streams, Some(&mut ledger))?;
    assert_eq!((ledger.charges(), ledger.unsafe_float_charges()), (1, 0));
    let float_ok = ShuffledDpSgdParams { noise_multiplier: 1.0, ..float };
    let streams = 3; // the next step's first id
    step(&plan, &mut vec![0.0f64; d], &float_ok, 100, zero, &key(52), streams, Some(&mut ledger))?;
    assert_eq!((ledger.charges(), ledger.unsafe_float_charges()), (2, 1));
    Ok(())
}

#[test]
fn exact_mode_refuses_a_noise_no_grid_holds_before_any_gradient() -> Result<()> {
    // σ·√D > 2³¹: the integer noise s ≥ σ_c/Λ ≥ σ·√D exceeds the sampler's range at every
    // grid. Refused before any work; the float path runs.
    let (blocks, _, d, _) = small();
    let plan = ShufflePlan::new(&blocks, d)?;
    let p = ShuffledDpSgdParams::new(1.0, 1.0, 1e9, 0.1, 10);
    assert!(matches!(p.exact_grid(&plan, 8), Err(Error::OutOfRange { .. })));
    let mut ledger = Ledger::new_rdp(PrivacyUnit::Record, Epsilon::new(10.0)?, Delta::new(1e-5)?)?;
    let (w0, mut w) = (vec![0.5f64; d], vec![0.5f64; d]);
    let mut calls = 0;
    let count = |_: u64, _: &[f64], g: &mut [f64]| {
        calls += 1;
        g.fill(0.0);
        Ok(())
    };
    let r = step(&plan, &mut w, &p, 8, count, &key(53), 0, Some(&mut ledger));
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
    assert_eq!((calls, ledger.charges(), bits(&w)), (0, 0, bits(&w0)));
    let float = ShuffledDpSgdParams { noise_mode: NoiseMode::UnsafeFloat, ..p };
    let zero = |_: u64, _: &[f64], g: &mut [f64]| {
        g.fill(0.0);
        Ok(())
    };
    step(&plan, &mut w, &float, 8, zero, &key(53), 0, None)?;
    // A model of 2^40 coordinates has no exact noise elements.
    let big = ShufflePlan::new(&blocks, 1 << 40)?;
    assert!(matches!(p.exact_grid(&big, 8), Err(Error::OutOfRange { .. })));
    Ok(())
}

/// The quickstart's shuffled DP-SGD (`examples/quickstart.rs`: MLP 4 → 16 → 1, N = 2000,
/// q = 0.05, c = 1, σ = 1): the exact release's noise scale is within 1% of the float
/// release's (exactly, from the calibration), and the per-step error of the released sum,
/// `B·g̃ − Σ clip(gᵢ)` over 400 steps (38 800 coordinates) in each mode, has the predicted
/// variance (±4% at the test's level) in both modes.
#[test]
fn exact_mode_error_is_within_one_percent_of_the_float_mode_at_the_quickstart_sizes() -> Result<()>
{
    const IN: usize = 4;
    const H: usize = 16;
    const N: u64 = 2000;
    let (block, _, len) = mlp(IN, H, 1);
    let blocks = [block];
    let plan = ShufflePlan::new(&blocks, len)?;
    let exact = ShuffledDpSgdParams::new(0.05, 1.0, 1.0, 0.0, 40);
    let float = ShuffledDpSgdParams { noise_mode: NoiseMode::UnsafeFloat, ..exact };
    let grid = exact.exact_grid(&plan, N)?;
    // 1. Scales: the integer noise (std s_ℤΛ) plus the rounding (≤ Λ/2, variance ≤ Λ²/12)
    //    against σ·c.
    let var_exact = grid.sigma().powi(2) + grid.resolution().powi(2) / 12.0;
    let ratio = var_exact.sqrt() / (exact.noise_multiplier * exact.clip_norm);
    assert!((1.0..1.01).contains(&ratio), "noise scale ratio {ratio}");

    // 2. The error of the released sum, step by step, at the quickstart's gradients.
    let x = |r: u64| -> [f64; IN] {
        core::array::from_fn(|i| {
            (((r * 2654435761 + i as u64 * 40503) % 2001) as f64 / 1000.0) - 1.0
        })
    };
    let w0: Vec<f32> = (0..len).map(|i| ((i * 37 % 19) as f32 / 19.0 - 0.5) * 0.6).collect();
    let errors = |p: &ShuffledDpSgdParams| -> Result<Vec<f64>> {
        let mut errs = Vec::new();
        let mut w = w0.clone();
        for s in 0..400 {
            let mut own = vec![0.0f64; len];
            let grad = |r: u64, w: &[f32], g: &mut [f64]| {
                let xr = x(r);
                let h: [f64; H] = core::array::from_fn(|j| {
                    let z = (0..IN).map(|i| f64::from(w[j * IN + i]) * xr[i]).sum::<f64>();
                    (z + f64::from(w[H * IN + j])).tanh()
                });
                let out = (0..H).map(|j| f64::from(w[H * IN + H + j]) * h[j]).sum::<f64>();
                let e = out + f64::from(w[len - 1]) - xr.iter().sum::<f64>() / 4.0;
                for j in 0..H {
                    let dz = e * f64::from(w[H * IN + H + j]) * (1.0 - h[j] * h[j]);
                    (0..IN).for_each(|i| g[j * IN + i] = dz * xr[i]);
                    g[H * IN + j] = dz;
                    g[H * IN + H + j] = e * h[j];
                }
                g[len - 1] = e;
                let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
                let scale = (1.0 / norm).min(1.0);
                own.iter_mut().zip(g.iter()).for_each(|(o, v)| *o += scale * v);
                Ok(())
            };
            let streams = 3 * s;
            let (_, perms, mut g) = step(&plan, &mut w, p, N, grad, &key(54), streams, None)?;
            unapply_perms(&plan, &perms, &mut g);
            errs.extend(g.iter().zip(&own).map(|(gj, oj)| gj * 0.05 * N as f64 - oj));
        }
        Ok(errs)
    };
    for (what, p, var) in [("exact", &exact, var_exact), ("float", &float, 1.0)] {
        let m = moments(&errors(p)?);
        let vz = var_z(&m, var, 3.0 * var * var);
        println!("quickstart DP-SGD, {what}: error variance {:.5} (predicted {var:.5})", m.var);
        assert!(z_accepts(vz), "{what}: variance z = {vz}");
    }
    Ok(())
}
