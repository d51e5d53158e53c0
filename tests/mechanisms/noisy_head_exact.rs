//! NoisyHead's exact release (`NoiseMode::Exact`, the default; `docs/PRIVACY.md` §5.5):
//! the calibration, the addressing of the integer noise, the rounding to the grid, the
//! refusals, and the accuracy against the unsafe float path at the quickstart's sizes.
//!
//! Expected values are recomputed here from the documented formulas, never read back from
//! the release: the computation error `E`, the resolution rule `D·Λ ≤ Δ/256`, the inflated
//! sensitivity `Δ′ = Δ + 2E + D·Λ` and the integer noise `s_ℤ = √((s·Δ′/(Δ·Λ))² + 16)`;
//! each step's value `Λ·(round(next/Λ) + z)` with `z` the discrete Gaussian of element
//! `t·D² + i·D + j` and `next` computed here in double-double arithmetic.

use crate::support;

use dpattn::accounting::ledger::{Amount, Ledger};
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::noisy_head::{
    Accounting, Features, Form, NoisyHeadParams, Prompts, RidgeSolver, noisy_head_keyed,
    noisy_head_scratch_len, private_features, raw_features, ridge,
};
use dpattn::sampling::{ExactSampler, FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn::session::Draw;
use dpattn::{Error, NoiseMode, PrivacyBudget};
use dpattn_paper::noisy_head::{excess_risk, generate_prompts, presets, random_start};
use support::stats::{mean_z, moments, var_z, z_accepts};

type Res<T> = Result<T, Error>;

const U: f64 = 1.0 / 9_007_199_254_740_992.0; // 2⁻⁵³

/// `n` prompts in the flat layout of `Prompts`.
struct Data {
    n: usize,
    l: usize,
    d: usize,
    x: Vec<f64>,
    y: Vec<f64>,
    q: Vec<f64>,
    t: Vec<f64>,
}

impl Data {
    fn generate(n: usize, l: usize, d: usize, key: u8, first: u64) -> Self {
        let (mut x, mut y, mut q, mut t) =
            (vec![0.0; n * l * d], vec![0.0; n * l], vec![0.0; n * d], vec![0.0; n]);
        let key = NoiseKey::for_replay([key; 32]);
        generate_prompts(n, l, d, 0.0, &key, 0, first, &mut x, &mut y, &mut q, &mut t).unwrap();
        Self { n, l, d, x, y, q, t }
    }

    fn prompts(&self) -> Prompts<'_> {
        Prompts::new(self.n, self.l, self.d, &self.x, &self.y, &self.q, &self.t).unwrap()
    }
}

fn release(p: &NoisyHeadParams, data: &Data, gamma0: &[f64], form: Form, stream: u64) -> Vec<f64> {
    let mut out = vec![0.0; p.d * p.d];
    let mut scratch = vec![0.0; noisy_head_scratch_len(p, form).unwrap()];
    let key = NoiseKey::for_replay([41; 32]);
    let draw = Draw { key: &key, stream };
    noisy_head_keyed(&mut out, gamma0, &data.prompts(), p, form, draw, None, &mut scratch).unwrap();
    out
}

fn gamma(n: f64) -> f64 {
    n * U / (1.0 - n * U)
}

/// The documented `E` (module `noisy_head::exact`, `docs/PRIVACY.md` §5.5), in plain `f64`.
fn documented_error(p: &NoisyHeadParams) -> f64 {
    let (n, d) = (p.n as f64, p.d as f64);
    let (r, g, c, eta0) = (p.proj_r, p.proj_g, p.clip_c, p.eta0);
    let b = r * g + c;
    let k = n + d * d + 2.0 * d + 8.0;
    let underflow = 2f64.powi(-1074)
        * (eta0 * d.powi(4) * (8.0 * g * (r + 1.0) + 3.0 * r + c + 3.0)
            + 2.0 * d * d
            + 4.0 * n * g * b
            + r);
    gamma(5.0) * (1.0 + 2.0 * p.lambda * eta0) * r + eta0 * g * b * gamma(k) + underflow
}

/// `s` as documented: the classical mechanism at `(ε/T, δ/T)` or the zCDP calibration, at
/// sensitivity `η0σ/N`.
fn documented_noise_std(p: &NoisyHeadParams) -> f64 {
    let t = f64::from(p.iters);
    let step = p.eta0 * p.sigma / p.n as f64;
    match p.accounting {
        Accounting::Paper => {
            step * (2.0 * (1.25 * t / p.budget.delta().get()).ln()).sqrt() * t
                / p.budget.epsilon().get()
        }
        Accounting::Zcdp => step * (t / (2.0 * p.zcdp_rho().unwrap().get())).sqrt(),
    }
}

fn calibration_cases() -> Vec<(&'static str, NoisyHeadParams)> {
    let low = presets::low_dim(4000, 1.0).unwrap();
    vec![
        ("low-dim N = 4000 (quickstart)", low),
        ("low-dim N = 4000, zCDP", NoisyHeadParams { accounting: Accounting::Zcdp, ..low }),
        ("high-dim N = 400", presets::high_dim(400, 1.0, 1e-5).unwrap()),
        ("early stopping N = 400", presets::early_stopping(400, 51, 0.8).unwrap()),
        ("robustness N = 5000, L = 500", presets::robustness(5000, 500, 0.5).unwrap()),
    ]
}

#[test]
fn exact_calibration_follows_the_documented_formula() {
    for (name, p) in calibration_cases() {
        assert_eq!(p.noise_mode, NoiseMode::Exact, "{name}: the presets release exactly");
        let cal = p.calibrate().unwrap();
        let grid = cal.grid().expect("exact mode has a grid");
        let s = documented_noise_std(&p);
        assert!((cal.noise_std() / s - 1.0).abs() < 1e-12, "{name}: s");
        let (delta, d) = (p.eta0 * p.sigma / p.n as f64, p.d as f64);
        let e = documented_error(&p);
        assert!(e > 0.0 && e < 1e-6 * delta, "{name}: E = {e:e} is negligible against Δ");
        // Λ: the largest power of two with D·Λ ≤ Δ/256 (the range condition does not bind).
        let lambda = 2f64.powi((delta / (256.0 * d)).log2().floor() as i32);
        assert_eq!(grid.resolution(), lambda, "{name}: Λ");
        let inflated = delta + 2.0 * e + d * lambda;
        assert!((grid.rounded_sensitivity() / inflated - 1.0).abs() < 1e-12, "{name}: Δ′");
        // The sampler holds s_ℤ as a fraction rounded up.
        let s_int = ((s / delta * inflated / lambda).powi(2) + 16.0).sqrt();
        let got = grid.integer_noise().sigma();
        assert!(
            got / s_int - 1.0 > -1e-12 && got / s_int - 1.0 < 1e-9,
            "{name}: s_ℤ {got} vs {s_int}"
        );
        let bound = p.proj_r + p.eta0 * p.proj_g * (p.proj_r * p.proj_g + p.clip_c) + e;
        assert!(bound / lambda + 12.0 * s_int < 2f64.powi(53), "{name}: range condition");
        // The exact noise is within the resolution rule's 0.4 % of the float noise.
        let ratio = grid.sigma() / s;
        assert!((1.0..=1.0 + 1.0 / 256.0 + 1e-9).contains(&ratio), "{name}: σ ratio {ratio}");
    }
}

#[test]
fn exact_step_is_the_grid_release_with_the_integer_noise_of_element_t_d2_plus_i_d_plus_j() {
    // Every query is 0, so Z̃ = 0 and each step is Γ ← Π_R(grid(fl(aΓ))): the noise alone.
    let (n, l, d) = (2, 3, 4);
    let mut data = Data::generate(n, l, d, 31, 0);
    data.q.fill(0.0);
    let key = NoiseKey::for_replay([41; 32]);
    for iters in [1u32, 3] {
        let p = NoisyHeadParams {
            d,
            l,
            n,
            lambda: 0.3,
            eta0: 0.5,
            iters,
            clip_c: 1.0,
            proj_g: 1e-3,
            proj_r: 10.0,
            sigma: 0.01,
            budget: PrivacyBudget::new(0.5, 1e-5).unwrap(),
            accounting: Accounting::Paper,
            noise_mode: NoiseMode::Exact,
        };
        let cal = p.calibrate().unwrap();
        let grid = cal.grid().unwrap();
        let lambda = grid.resolution();
        let a = 1.0 - 2.0 * p.lambda * p.eta0;
        for stream in [0u64, 9, u64::MAX] {
            let ks = KeyedStream::new(&key, stream);
            let mut want = [0.0f64; 16];
            for t in 0..u64::from(iters) {
                for (e, w) in want.iter_mut().enumerate() {
                    let z = grid.integer_noise().sample_at(&ks, t * 16 + e as u64).unwrap();
                    *w = ((a * *w / lambda).round() + z as f64) * lambda;
                }
            }
            for form in [Form::Streaming, Form::Gram] {
                let out = release(&p, &data, &[0.0; 16], form, stream);
                assert_eq!(out, want, "T = {iters}, stream {stream}, {form:?}");
                for &v in &out {
                    let k = v / lambda;
                    assert!(k.fract() == 0.0 && k.abs() < 2f64.powi(53), "{v} is not on the grid");
                }
            }
        }
    }
}

// Double-double arithmetic (error-free transformations), for the test's own `next`.
type Dd = (f64, f64);

fn dd(a: f64) -> Dd {
    (a, 0.0)
}

fn dd_add(a: Dd, b: Dd) -> Dd {
    let s = a.0 + b.0;
    let bb = s - a.0;
    let e = (a.0 - (s - bb)) + (b.0 - bb) + a.1 + b.1;
    let h = s + e;
    (h, e - (h - s))
}

fn dd_mul(a: Dd, b: Dd) -> Dd {
    let p = a.0 * b.0;
    let e = a.0.mul_add(b.0, -p) + a.0 * b.1 + a.1 * b.0;
    let h = p + e;
    (h, e - (h - p))
}

fn dd_neg(a: Dd) -> Dd {
    (-a.0, -a.1)
}

/// `next = (1 − 2λη0)Γ − (η0/N)Σ_k(⟨Γ, Z_k⟩ − t_k)Z_k` in double-double, from the
/// (unbalanced) private features, which are the exact release's up to a few ulps.
fn next_dd(p: &NoisyHeadParams, data: &Data, gamma0: &[f64]) -> Vec<f64> {
    let (n, d) = (p.n, p.d);
    let (mut u, mut v, mut t) = (vec![0.0; n * d], vec![0.0; n * d], vec![0.0; n]);
    private_features(&data.prompts(), p.clip_c, p.proj_g, &mut u, &mut v, &mut t).unwrap();
    let mut g = vec![dd(0.0); d * d];
    for k in 0..n {
        let (uk, vk) = (&u[k * d..(k + 1) * d], &v[k * d..(k + 1) * d]);
        let mut e = dd(-t[k]);
        for i in 0..d {
            for j in 0..d {
                e = dd_add(e, dd_mul(dd_mul(dd(uk[i]), dd(gamma0[i * d + j])), dd(vk[j])));
            }
        }
        for i in 0..d {
            for j in 0..d {
                g[i * d + j] = dd_add(g[i * d + j], dd_mul(dd_mul(e, dd(uk[i])), dd(vk[j])));
            }
        }
    }
    let a = dd_add(dd(1.0), dd_neg(dd_mul(dd(2.0 * p.lambda), dd(p.eta0))));
    let c = (p.eta0 / n as f64, (p.eta0 - (p.eta0 / n as f64) * n as f64) / n as f64);
    (0..d * d)
        .map(|e| {
            let x = dd_add(dd_mul(a, dd(gamma0[e])), dd_neg(dd_mul(c, g[e])));
            x.0 + x.1
        })
        .collect()
}

#[test]
fn exact_step_on_real_prompts_rounds_the_computed_iterate_to_the_grid() {
    // One step (T = 1) from a random start, no projection: the released index minus the
    // element's integer noise is round(next/Λ), next computed here independently.
    let p = NoisyHeadParams {
        iters: 1,
        budget: PrivacyBudget::new(0.9, 1e-5).unwrap(),
        ..presets::low_dim(1000, 1.0).unwrap()
    };
    let data = Data::generate(p.n, p.l, p.d, 42, 0);
    let mut gamma0 = vec![0.0; p.d * p.d];
    random_start(&mut gamma0, 0.1, &NoiseKey::for_replay([43; 32]), 0).unwrap();
    let next = next_dd(&p, &data, &gamma0);
    let cal = p.calibrate().unwrap();
    let grid = cal.grid().unwrap();
    let lambda = grid.resolution();
    let ks = KeyedStream::new(&NoiseKey::for_replay([41; 32]), 5);
    for form in [Form::Streaming, Form::Gram] {
        let out = release(&p, &data, &gamma0, form, 5);
        assert!(out.iter().map(|x| x * x).sum::<f64>().sqrt() < 0.5 * p.proj_r, "Π_R acted");
        for (e, (&y, &x)) in out.iter().zip(&next).enumerate() {
            let z = grid.integer_noise().sample_at(&ks, e as u64).unwrap();
            let k = y / lambda;
            assert_eq!(k.fract(), 0.0);
            assert_eq!(k - z as f64, (x / lambda).round(), "{form:?}, entry {e}");
        }
    }
    // The test can fail: the float release is not on the grid.
    let float = NoisyHeadParams { noise_mode: NoiseMode::UnsafeFloat, ..p };
    let out = release(&float, &data, &gamma0, Form::Gram, 5);
    assert!(out.iter().any(|&y| (y / lambda).fract() != 0.0));
}

#[test]
fn an_unbalanced_prompt_keeps_the_exact_release_finite() {
    // Prompt 0: query 1e308·e1 and context tokens 1e-308·e1, so ‖u‖‖v‖ ≈ 1 is not
    // projected, but (⟨Γ, Z⟩ − t)·u₁ overflows with unbalanced factors. The exact mode
    // balances them (û = u/‖u‖, ṽ = ‖u‖v) and is unaffected; its release stays finite and
    // on the grid in both forms, and both forms agree.
    let p = presets::low_dim(1000, 1.0).unwrap();
    let mut data = Data::generate(p.n, p.l, p.d, 44, 0);
    let d = p.d;
    data.q[..d].fill(0.0);
    data.q[0] = 1e308;
    for i in 0..p.l {
        data.x[i * d..(i + 1) * d].fill(0.0);
        data.x[i * d] = 1e-308;
        data.y[i] = 1.0;
    }
    data.t[0] = 100.0;
    let lambda = p.calibrate().unwrap().grid().unwrap().resolution();
    let a = release(&p, &data, &[0.0; 25], Form::Streaming, 0);
    let b = release(&p, &data, &[0.0; 25], Form::Gram, 0);
    assert!(a.iter().all(|x| x.is_finite() && (x / lambda).fract() == 0.0), "{a:?}");
    assert_eq!(a, b);
}

#[test]
fn exact_mode_refusals_are_public_and_leave_output_and_ledger_untouched() {
    let base = NoisyHeadParams {
        d: 3,
        l: 5,
        n: 20,
        lambda: 0.1,
        eta0: 0.2,
        iters: 4,
        clip_c: 2.0,
        proj_g: 0.8,
        proj_r: 3.0,
        sigma: 10.0,
        budget: PrivacyBudget::new(1.0, 1e-5).unwrap(),
        accounting: Accounting::Paper,
        noise_mode: NoiseMode::Exact,
    };
    let data = Data::generate(base.n, base.l, base.d, 45, 0);
    let mut ledger =
        Ledger::new_approx(PrivacyUnit::Prompt, PrivacyBudget::new(10.0, 1e-3).unwrap());
    let attempt = |p: &NoisyHeadParams, ledger: &mut Ledger| -> Res<()> {
        let mut out = vec![7.25; 9];
        let mut scratch = vec![-3.5; noisy_head_scratch_len(p, Form::Gram).unwrap()];
        let key = NoiseKey::for_replay([46; 32]);
        let before = ledger.clone();
        let r = noisy_head_keyed(
            &mut out,
            &[0.0; 9],
            &data.prompts(),
            p,
            Form::Gram,
            Draw { key: &key, stream: 0 },
            Some(&mut *ledger),
            &mut scratch,
        );
        if r.is_err() {
            assert!(out.iter().all(|&x| x == 7.25), "an error wrote to out");
            assert_eq!(*ledger, before, "an error charged the ledger");
            assert!(scratch.iter().all(|&x| x == -3.5), "an error touched the scratch");
        }
        r
    };
    // T·D² above 2^40 (noise elements); the unsafe float path has no such limit.
    // (zCDP keeps the noise multiplier, hence the integer noise, within the sampler's range.)
    let long =
        NoisyHeadParams { d: 1 << 10, iters: (1 << 20) + 1, accounting: Accounting::Zcdp, ..base };
    assert!(matches!(long.validate(), Err(Error::OutOfRange { .. })), "{:?}", long.validate());
    NoisyHeadParams { noise_mode: NoiseMode::UnsafeFloat, ..long }.validate().unwrap();
    let at_limit = NoisyHeadParams { iters: 1 << 20, ..long };
    at_limit.validate().unwrap();
    // Radii whose products could leave the f64 range, and N beyond the γ_n bound.
    let wide = NoisyHeadParams { proj_r: 1e100, proj_g: 1e100, clip_c: 1e100, ..base };
    let wide = NoisyHeadParams { sigma: wide.sigma_min(), eta0: 1e-201, ..wide };
    assert!(matches!(attempt(&wide, &mut ledger), Err(Error::OutOfRange { .. })));
    NoisyHeadParams { noise_mode: NoiseMode::UnsafeFloat, ..wide }.validate().unwrap();
    let many = NoisyHeadParams { n: 1 << 52, l: 1, ..base };
    assert!(matches!(many.validate(), Err(Error::OutOfRange { .. })), "{:?}", many.validate());
    assert_eq!(ledger.charges(), 0);

    // Success: charged once, in exact mode (no unsafe-float charge); the float path's
    // charge is counted as unsafe.
    attempt(&base, &mut ledger).unwrap();
    attempt(&NoisyHeadParams { noise_mode: NoiseMode::UnsafeFloat, ..base }, &mut ledger).unwrap();
    assert_eq!((ledger.charges(), ledger.unsafe_float_charges()), (2, 1));
    assert_eq!(ledger.spent(), Amount::Approx { epsilon: 2.0, delta: 2e-5 });
}

/// The quickstart's NoisyHead (`examples/quickstart.rs`: low-dim preset, N = 4000, D = 5,
/// L = 63, T = 39, Gram form, Γ⁰ = 0): its error is the excess risk over 500 test prompts
/// against ridge. The exact release's noise scale is within 1% of the float release's
/// (exactly, from the calibration), the noise laws at that calibration have the documented
/// variances (2·10⁵ draws each: ±1.5% at the test's level), and end to end the two modes'
/// mean excess risks over 24 releases each agree within their statistical resolution
/// (standard error ≈ 8%, so this part catches gross errors only).
#[test]
fn exact_mode_error_is_within_one_percent_of_the_float_mode_at_the_quickstart_sizes() {
    let p = presets::low_dim(4000, 1.0).unwrap();
    let float = NoisyHeadParams { noise_mode: NoiseMode::UnsafeFloat, ..p };
    // 1. Scales, exactly: the excess risk's noise part scales as the noise variance, plus
    //    the rounding (≤ Λ/2 per entry and step, variance ≤ Λ²/12).
    let cal = p.calibrate().unwrap();
    let grid = cal.grid().unwrap();
    let s = documented_noise_std(&p);
    let var_ratio = (grid.sigma().powi(2) + grid.resolution().powi(2) / 12.0) / (s * s);
    assert!((1.0..1.01).contains(&var_ratio), "noise variance ratio {var_ratio}");

    // 2. The noise laws at this calibration: 2·10⁵ draws of each, variance z-tests against
    //    s_ℤ²Λ² (the discrete Gaussian's variance is s_ℤ² up to e^{−2π²s_ℤ²}) and s².
    let ks = KeyedStream::new(&NoiseKey::for_replay([47; 32]), 0);
    let mut z = vec![0i64; 200_000];
    grid.integer_noise().fill_keyed(&ks, 0, &mut z).unwrap();
    let exact: Vec<f64> = z.iter().map(|&k| k as f64 * grid.resolution()).collect();
    let mut normals = vec![0.0f64; 200_000];
    Gaussian::STANDARD.fill_keyed(&ks, 0, &mut normals).unwrap();
    let floats: Vec<f64> = normals.iter().map(|x| x * s).collect();
    for (what, xs, sd) in [("exact", &exact, grid.sigma()), ("float", &floats, s)] {
        let m = moments(xs);
        let (mz, vz) = (mean_z(&m, 0.0, sd * sd), var_z(&m, sd * sd, 3.0 * sd.powi(4)));
        assert!(z_accepts(mz) && z_accepts(vz), "{what}: mean z {mz}, variance z {vz}");
    }

    // 3. End to end at the quickstart sizes.
    let train = Data::generate(p.n, p.l, p.d, 13, 0);
    let test = Data::generate(500, p.l, p.d, 13, p.n as u64);
    let raw = |data: &Data| {
        let (n, d) = (data.n, data.d);
        let (mut u, mut v, mut t) = (vec![0.0; n * d], vec![0.0; n * d], vec![0.0; n]);
        raw_features(&data.prompts(), &mut u, &mut v, &mut t).unwrap();
        (u, v, t)
    };
    let (tu, tv, tt) = raw(&train);
    let gamma_star =
        ridge(&Features::new(p.n, p.d, &tu, &tv, &tt).unwrap(), p.lambda, RidgeSolver::Cholesky)
            .unwrap();
    let (su, sv, st) = raw(&test);
    let test_f = Features::new(500, p.d, &su, &sv, &st).unwrap();
    const REPS: u64 = 24;
    let risks = |q: &NoisyHeadParams, first: u64| -> Vec<f64> {
        (0..REPS)
            .map(|r| {
                let g = release(q, &train, &[0.0; 25], Form::Gram, first + r);
                excess_risk(&g, &gamma_star, &test_f).unwrap()
            })
            .collect()
    };
    let (e, f) = (risks(&p, 0), risks(&float, 100));
    let (me, mf) = (moments(&e), moments(&f));
    let se = ((me.var + mf.var) / REPS as f64).sqrt();
    let z = (me.mean - var_ratio * mf.mean) / se;
    println!(
        "quickstart NoisyHead excess risk: exact {:.4} ± {:.4}, float {:.4} ± {:.4} (z = {z:.2})",
        me.mean,
        (me.var / REPS as f64).sqrt(),
        mf.mean,
        (mf.var / REPS as f64).sqrt()
    );
    assert!(z_accepts(z), "exact vs float excess risk: z = {z}");
    assert!(se < 0.1 * mf.mean, "the end-to-end comparison has no resolution: se {se}");
}
