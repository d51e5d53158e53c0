//! Small Monte-Carlo simulations of NoisyHead (`dpattn_core::noisy_head`): the simulations
//! P4-S1 … P4-S4 and the acceptance check P4-A7 of `docs/PAPERS.md` §4.11, following the
//! protocol of its independent NumPy reference runs (P4-R1 … P4-R6: `exp_lowdim`,
//! `exp_ushape`, `exp_robust`).
//!
//! Per replicate: `N` training and 500 test prompts ([`generate_prompts`], `τ = 0`); raw
//! features of both; the ridge reference `Γ*` of eq. (2.7) with the preset's `λ`
//! (Cholesky; QR in the robustness test); a random start `Γ⁰ = 0.1·N(0, 1)^{D×D}`
//! ([`random_start`]; the release projects it with `Π_R` itself); the private run
//! [`noisy_head`] with the preset's parameters; the excess risk (B.1)
//! `n_test⁻¹ Σ ⟨Γ̂ − Γ*, Z_test⟩²` on raw test features. The non-private baseline is
//! [`train_nonprivate`] on raw features from the same, unprojected `Γ⁰`. As in the
//! reference, the data and the start are shared by the ε grid (resp. the `T` grid) inside a
//! replicate; every release has its own noise stream. P4-S3's replicates (the expensive
//! `D = 20` runs) are spread over scoped threads; being keyed by index, the numbers do not
//! depend on the schedule.
//!
//! Randomness: one fixed [`NoiseKey`] per experiment; every replicate and role gets its own
//! stream id, `stream(rep, role) = rep·2¹⁶ + role` (training data, test data, random start,
//! replacement prompt, corrupted index, and one noise stream per release), so the streams
//! are independent ChaCha20 streams.
//!
//! Expected values are those of `docs/PAPERS.md`, never this library's output: the reference
//! means of T4-C … T4-F (runs P4-R1, P4-R6) and the mean-field predictor of §4.7 as printed
//! there (the library's [`mean_field_excess_risk`] is only checked against those printed
//! digits). Tolerances are those of §4.11: P4-S1/P4-S2 means within `[0.6, 1.6]×` mean-field, P4-S3
//! within `[0.7, 1.4]×`, P4-A7 ratio `ℰ(0.5)/ℰ(1)` within `[2.5, 6.5]` (theory 4).
//!
//! Run with `--nocapture` to see the tables (measured mean next to reference and
//! mean-field values) and each simulation's wall time.

use std::sync::OnceLock;
use std::time::Instant;

use dpattn_core::Error;
use dpattn_core::noisy_head::schedule::mean_field_excess_risk;
use dpattn_core::noisy_head::{
    Features, Form, NoisyHeadParams, Prompts, RidgeSolver, noisy_head_keyed,
    noisy_head_scratch_len, raw_features, ridge, train_nonprivate,
};
use dpattn_core::sampling::{KeyedStream, NoiseKey};
use dpattn_core::session;
use dpattn_paper::noisy_head::{
    corrupt_prompt, excess_risk, generate_prompts, presets, random_start,
};

type Res<T> = Result<T, Error>;

/// Held-out prompts per replicate (`docs/PAPERS.md` §4.3).
const N_TEST: usize = 500;
/// Per-entry std of the random start (the authors' code and the reference).
const C0: f64 = 0.1;

// ---------------------------------------------------------------------------------------
// Randomness bookkeeping
// ---------------------------------------------------------------------------------------

const ROLE_TRAIN: u64 = 1;
const ROLE_TEST: u64 = 2;
const ROLE_START: u64 = 3;
const ROLE_REPLACEMENT: u64 = 4;
const ROLE_INDEX: u64 = 5;
/// Release `j` of a replicate uses role `ROLE_NOISE + j`.
const ROLE_NOISE: u64 = 0x100;

fn key(tag: u8) -> NoiseKey {
    let mut bytes = [0x5a_u8; 32];
    bytes[0] = tag;
    bytes[31] = 0x04;
    NoiseKey::for_replay(bytes)
}

fn stream(rep: usize, role: u64) -> u64 {
    ((rep as u64) << 16) + role
}

// ---------------------------------------------------------------------------------------
// Data, features and runs
// ---------------------------------------------------------------------------------------

/// `n` prompts in the flat layout of `Prompts`.
#[derive(Clone)]
struct Draw {
    n: usize,
    l: usize,
    d: usize,
    x: Vec<f64>,
    y: Vec<f64>,
    q: Vec<f64>,
    t: Vec<f64>,
}

impl Draw {
    fn generate(n: usize, l: usize, d: usize, key: &NoiseKey, stream: u64) -> Res<Self> {
        let mut draw = Self {
            n,
            l,
            d,
            x: vec![0.0; n * l * d],
            y: vec![0.0; n * l],
            q: vec![0.0; n * d],
            t: vec![0.0; n],
        };
        generate_prompts(
            n,
            l,
            d,
            0.0,
            key,
            stream,
            0,
            &mut draw.x,
            &mut draw.y,
            &mut draw.q,
            &mut draw.t,
        )?;
        Ok(draw)
    }

    fn prompts(&self) -> Res<Prompts<'_>> {
        Prompts::new(self.n, self.l, self.d, &self.x, &self.y, &self.q, &self.t)
    }

    fn raw(&self) -> Res<Raw> {
        let (n, d) = (self.n, self.d);
        let mut raw = Raw { n, d, u: vec![0.0; n * d], v: vec![0.0; n * d], t: vec![0.0; n] };
        raw_features(&self.prompts()?, &mut raw.u, &mut raw.v, &mut raw.t)?;
        Ok(raw)
    }

    /// Overwrites prompt `k` with the single prompt `one`.
    fn replace(&mut self, k: usize, one: &Draw) {
        let (l, d) = (self.l, self.d);
        self.x[k * l * d..(k + 1) * l * d].copy_from_slice(&one.x);
        self.y[k * l..(k + 1) * l].copy_from_slice(&one.y);
        self.q[k * d..(k + 1) * d].copy_from_slice(&one.q);
        self.t[k] = one.t[0];
    }
}

/// Raw (unclipped, unprojected) rank-one summaries.
struct Raw {
    n: usize,
    d: usize,
    u: Vec<f64>,
    v: Vec<f64>,
    t: Vec<f64>,
}

impl Raw {
    fn features(&self) -> Res<Features<'_>> {
        Features::new(self.n, self.d, &self.u, &self.v, &self.t)
    }
}

/// One NoisyHead release `Γ̂` (no ledger).
fn release(
    p: &NoisyHeadParams,
    prompts: &Prompts<'_>,
    gamma0: &[f64],
    form: Form,
    key: &NoiseKey,
    stream: u64,
) -> Res<Vec<f64>> {
    let mut scratch = vec![0.0; noisy_head_scratch_len(p, form)?];
    let mut out = vec![0.0; p.d * p.d];
    noisy_head_keyed(
        &mut out,
        gamma0,
        prompts,
        p,
        form,
        session::Draw { key, stream },
        None,
        &mut scratch,
    )?;
    Ok(out)
}

/// The non-private baseline: `iters` plain descent steps on raw features from `gamma0`.
fn nonprivate(p: &NoisyHeadParams, f: &Features<'_>, gamma0: &[f64], form: Form) -> Res<Vec<f64>> {
    let mut gamma = gamma0.to_vec();
    let mut scratch = vec![0.0; form.scratch_len(p.d)?];
    train_nonprivate(&mut gamma, f, p.lambda, p.eta0, p.iters, form, &mut scratch, |_, _| {})?;
    Ok(gamma)
}

/// The cheaper iteration form in multiply-adds: streaming `2ND²` per step, Gram a one-off
/// `ND⁴/2` plus `D⁴` per step.
fn cheaper_form(p: &NoisyHeadParams) -> Form {
    let (n, d2, t) = (p.n as f64, (p.d * p.d) as f64, f64::from(p.iters));
    let streaming = 2.0 * n * d2 * t;
    let gram = n * d2 * d2 / 2.0 + d2 * d2 * t;
    if gram < streaming { Form::Gram } else { Form::Streaming }
}

/// `f(0), …, f(count − 1)` on up to `available_parallelism` scoped threads (replicates are
/// independent and keyed by index, so the result does not depend on the schedule).
fn par_map<T: Send>(count: usize, f: impl Fn(usize) -> Res<T> + Sync) -> Res<Vec<T>> {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).min(count).max(1);
    let f = &f;
    let chunks: Vec<Vec<(usize, Res<T>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                scope.spawn(move || {
                    (w..count).step_by(threads).map(|i| (i, f(i))).collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("replicate thread panicked")).collect()
    });
    let mut slots: Vec<Option<Res<T>>> = (0..count).map(|_| None).collect();
    for (i, r) in chunks.into_iter().flatten() {
        slots[i] = Some(r);
    }
    slots.into_iter().map(|r| r.expect("every replicate ran")).collect()
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// Relative standard error of the mean.
fn rel_se(x: &[f64]) -> f64 {
    let m = mean(x);
    let var = x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (x.len() as f64 - 1.0);
    (var / x.len() as f64).sqrt() / m.abs()
}

fn within(value: f64, expected: f64, lo: f64, hi: f64) -> bool {
    value >= lo * expected && value <= hi * expected
}

fn assert_rel(name: &str, got: f64, expected: f64, tol: f64) {
    assert!(
        (got / expected - 1.0).abs() <= tol,
        "{name}: got {got:e}, reference {expected:e} (relative tolerance {tol:e})"
    );
}

// ---------------------------------------------------------------------------------------
// Low-dimensional experiment (P4-S1, P4-S2, P4-A7): `exp_lowdim`
// ---------------------------------------------------------------------------------------

/// Per-replicate excess risks of the low-dimensional experiment at one `N`.
struct LowDim {
    /// Per ε of the grid: the excess risk of every replicate.
    dp: Vec<Vec<f64>>,
    /// Non-private GD excess of every replicate.
    gd: Vec<f64>,
}

/// `b` replicates of `exp_lowdim` at one `N` for the presets `grid` (same `N`, one per ε).
fn low_dim_experiment(grid: &[NoisyHeadParams], b: usize, key: &NoiseKey) -> Res<LowDim> {
    let p0 = grid[0];
    let (n, l, d) = (p0.n, p0.l, p0.d);
    let mut out = LowDim { dp: vec![Vec::with_capacity(b); grid.len()], gd: Vec::new() };
    for rep in 0..b {
        let train = Draw::generate(n, l, d, key, stream(rep, ROLE_TRAIN))?;
        let test = Draw::generate(N_TEST, l, d, key, stream(rep, ROLE_TEST))?;
        let (raw, raw_test) = (train.raw()?, test.raw()?);
        let (f, f_test) = (raw.features()?, raw_test.features()?);
        let gamma_star = ridge(&f, p0.lambda, RidgeSolver::Cholesky)?;
        let mut gamma0 = vec![0.0; d * d];
        random_start(&mut gamma0, C0, key, stream(rep, ROLE_START))?;
        let gd = nonprivate(&p0, &f, &gamma0, Form::Gram)?;
        out.gd.push(excess_risk(&gd, &gamma_star, &f_test)?);
        let prompts = train.prompts()?;
        for (j, p) in grid.iter().enumerate() {
            let noise = stream(rep, ROLE_NOISE + j as u64);
            let g = release(p, &prompts, &gamma0, Form::Gram, key, noise)?;
            out.dp[j].push(excess_risk(&g, &gamma_star, &f_test)?);
        }
    }
    Ok(out)
}

const S1_N: usize = 2000;
const S1_B: usize = 20;
const S1_EPS: [f64; 3] = [0.2, 0.5, 1.0];
/// `docs/PAPERS.md` T4-E, run P4-R6
/// (`exp_lowdim(B=20, Ns=(500, 2000), epss=(0.2, 0.5, 1.0), seed=6)`).
const S1_REF: [f64; 3] = [5.046, 0.8946, 0.1645];
/// The §4.7 mean-field predictor as printed in T4-E.
const S1_MEAN_FIELD: [f64; 3] = [4.823, 0.7717, 0.1929];

/// P4-S1's replicates, shared with the P4-A7 test (run once).
fn s1_results() -> &'static LowDim {
    static RESULTS: OnceLock<LowDim> = OnceLock::new();
    RESULTS.get_or_init(|| {
        let start = Instant::now();
        let grid: Vec<NoisyHeadParams> = S1_EPS
            .iter()
            .map(|&eps| presets::low_dim(S1_N, eps).expect("low-dim preset"))
            .collect();
        let r = low_dim_experiment(&grid, S1_B, &key(0x51)).expect("P4-S1 simulation");
        println!("P4-S1 low-dim N = {S1_N}, B = {S1_B}: excess risk per ε");
        println!("   eps    mean      (rel.se)  reference  mean-field  mean/mean-field");
        for (j, eps) in S1_EPS.iter().enumerate() {
            let m = mean(&r.dp[j]);
            println!(
                "  {eps:4.1}  {m:9.4e} ({:.3})   {:9.4e}  {:9.4e}   {:.3}",
                rel_se(&r.dp[j]),
                S1_REF[j],
                S1_MEAN_FIELD[j],
                m / S1_MEAN_FIELD[j]
            );
        }
        println!(
            "  non-private GD excess: mean {:.3e}, max {:.3e} (reference 7.15e-7)",
            mean(&r.gd),
            r.gd.iter().fold(0.0f64, |a, &b| a.max(b))
        );
        println!("  P4-S1 wall time {:.2} s", start.elapsed().as_secs_f64());
        r
    })
}

/// P4-S1: risk decreases with ε (low-dim preset, N = 2000).
#[test]
fn s1_excess_risk_decreases_with_epsilon() -> Res<()> {
    // The preset itself (docs/PAPERS.md P4-S1, T4-E).
    for (j, &eps) in S1_EPS.iter().enumerate() {
        let p = presets::low_dim(S1_N, eps)?;
        assert_eq!((p.d, p.l, p.iters), (5, 44, 41));
        assert_eq!(p.lambda, 5.0);
        assert_eq!(p.budget.delta().get(), 1e-5);
        assert_rel("η0", p.eta0, 0.07333062858421294, 1e-12);
        // The oracle is the printed number of T4-E; the library's predictor must agree.
        assert_rel("mean-field", mean_field_excess_risk(&p, C0, 0.0)?, S1_MEAN_FIELD[j], 1e-3);
    }
    let r = s1_results();
    let means: Vec<f64> = r.dp.iter().map(|x| mean(x)).collect();
    for (j, m) in means.iter().enumerate() {
        assert!(
            within(*m, S1_MEAN_FIELD[j], 0.6, 1.6),
            "P4-S1 ε = {}: mean {m:e} not within [0.6, 1.6] × mean-field {:e}",
            S1_EPS[j],
            S1_MEAN_FIELD[j]
        );
    }
    for (w, eps) in means.windows(2).zip(S1_EPS.windows(2)) {
        assert!(w[1] < w[0], "P4-S1: mean excess not decreasing from ε = {} to {}", eps[0], eps[1]);
    }
    let gd = mean(&r.gd);
    assert!(gd < 1e-5, "P4-S1: non-private GD excess {gd:e} ≥ 1e-5 (reference 7.2e-7)");
    Ok(())
}

/// P4-A7: in the unsaturated region the excess scales as `1/ε²`: `ℰ(0.5)/ℰ(1) ≈ 4`
/// (P4-S1's replicates, not rerun).
#[test]
fn a7_excess_risk_scales_as_inverse_epsilon_squared() {
    let r = s1_results();
    let ratio = mean(&r.dp[1]) / mean(&r.dp[2]);
    let reference = S1_REF[1] / S1_REF[2];
    println!("P4-A7 N = {S1_N}: ℰ(0.5)/ℰ(1.0) = {ratio:.3} (theory 4, reference {reference:.3})");
    assert!((2.5..=6.5).contains(&ratio), "P4-A7: ℰ(0.5)/ℰ(1.0) = {ratio} not within [2.5, 6.5]");
}

/// P4-S2: risk decreases with N (ε = 1, low-dim presets N = 1000 and 4000).
#[test]
fn s2_excess_risk_decreases_with_n() -> Res<()> {
    const B: usize = 10;
    // (N, L, T, mean-field of T4-C, reference mean B = 100 of T4-C)
    let cases = [(1000, 31, 44, 0.7339, 0.7445), (4000, 63, 39, 0.05016, 0.05066)];
    let start = Instant::now();
    let mut means = Vec::new();
    println!("P4-S2 low-dim ε = 1, B = {B}: excess risk per N");
    println!(
        "      N    mean      (rel.se)  reference(B=100)  mean-field  mean/mean-field  GD excess"
    );
    for (i, &(n, l, t, mean_field, reference)) in cases.iter().enumerate() {
        let p = presets::low_dim(n, 1.0)?;
        assert_eq!((p.d, p.l, p.iters), (5, l, t));
        assert_rel("mean-field", mean_field_excess_risk(&p, C0, 0.0)?, mean_field, 1e-3);
        let r = low_dim_experiment(&[p], B, &key(0x52 + i as u8))?;
        let m = mean(&r.dp[0]);
        println!(
            "  {n:5}  {m:9.4e} ({:.3})   {reference:9.4e}        {mean_field:9.4e}   {:.3}            {:.2e}",
            rel_se(&r.dp[0]),
            m / mean_field,
            mean(&r.gd)
        );
        assert!(
            within(m, mean_field, 0.6, 1.6),
            "P4-S2 N = {n}: mean {m:e} not within [0.6, 1.6] × mean-field {mean_field:e}"
        );
        means.push(m);
    }
    let ratio = means[0] / means[1];
    println!("  ratio ℰ(1000)/ℰ(4000) = {ratio:.2} (mean-field 14.63, reference 14.70)");
    println!("  P4-S2 wall time {:.2} s", start.elapsed().as_secs_f64());
    assert!((8.0..=25.0).contains(&ratio), "P4-S2: ratio {ratio} not within [8, 25]");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Early stopping (P4-S3): `exp_ushape`
// ---------------------------------------------------------------------------------------

/// P4-S3: early stopping in the over-parameterised regime (N = 400, D = L = 20, λ = 20,
/// ε = 0.8): a U in `T` with the random start, monotone without it.
///
/// As in the reference, inside a replicate the data are shared by all `T`; here they are
/// also shared by the two starts (common random numbers; the reference used two seeds).
#[test]
fn s3_early_stopping_u_shape_needs_random_start() -> Res<()> {
    const N: usize = 400;
    const B: usize = 8;
    const TS: [u32; 3] = [1, 51, 301];
    // docs/PAPERS.md T4-E (`exp_ushape(B=8, N=400, Ts=(1,51,301), seed=41/42, c0=0.1/0.0)`).
    const REF_RANDOM: [f64; 3] = [9.6333e-4, 4.0709e-4, 3.9919e-3];
    const REF_ZERO: [f64; 3] = [1.3205e-9, 1.0755e-4, 3.8292e-3];
    const MF_RANDOM: [f64; 3] = [9.5291e-4, 4.1345e-4, 3.9375e-3];
    const MF_ZERO: [f64; 3] = [1.0452e-9, 1.1042e-4, 3.9375e-3];
    let start = Instant::now();
    let grid: Vec<NoisyHeadParams> =
        TS.iter().map(|&t| presets::early_stopping(N, t, 0.8)).collect::<Res<_>>()?;
    for (j, p) in grid.iter().enumerate() {
        assert_eq!((p.d, p.l, p.n, p.iters), (20, 20, N, TS[j]));
        assert_eq!(p.lambda, 20.0);
        assert_rel("η0", p.eta0, 2.8478920952431833e-4, 1e-12);
        assert_rel(
            "mean-field (c0 = 0.1)",
            mean_field_excess_risk(p, C0, 0.0)?,
            MF_RANDOM[j],
            1e-3,
        );
        assert_rel("mean-field (c0 = 0)", mean_field_excess_risk(p, 0.0, 0.0)?, MF_ZERO[j], 1e-3);
    }
    let p0 = grid[0];
    let (l, d) = (p0.l, p0.d);
    let key = key(0x53);
    let zero = vec![0.0; d * d];
    // Per replicate: [start][T] excess; start 0 = random, 1 = zero.
    let per_rep = par_map(B, |rep| -> Res<[[f64; 3]; 2]> {
        let train = Draw::generate(N, l, d, &key, stream(rep, ROLE_TRAIN))?;
        let test = Draw::generate(N_TEST, l, d, &key, stream(rep, ROLE_TEST))?;
        let (raw, raw_test) = (train.raw()?, test.raw()?);
        let f_test = raw_test.features()?;
        let gamma_star = ridge(&raw.features()?, p0.lambda, RidgeSolver::Cholesky)?;
        let mut random = vec![0.0; d * d];
        random_start(&mut random, C0, &key, stream(rep, ROLE_START))?;
        let prompts = train.prompts()?;
        let mut out = [[0.0; 3]; 2];
        for (s, gamma0) in [&random, &zero].into_iter().enumerate() {
            for (j, p) in grid.iter().enumerate() {
                let noise = stream(rep, ROLE_NOISE + (s * TS.len() + j) as u64);
                let g = release(p, &prompts, gamma0, cheaper_form(p), &key, noise)?;
                out[s][j] = excess_risk(&g, &gamma_star, &f_test)?;
            }
        }
        Ok(out)
    })?;
    // [start][T] → excess per replicate.
    let ex: Vec<Vec<Vec<f64>>> = (0..2)
        .map(|s| (0..TS.len()).map(|j| per_rep.iter().map(|r| r[s][j]).collect()).collect())
        .collect();
    let m: Vec<Vec<f64>> = ex.iter().map(|row| row.iter().map(|x| mean(x)).collect()).collect();
    println!("P4-S3 early stopping N = {N}, D = L = 20, ε = 0.8, B = {B}");
    println!("  start       T    mean      (rel.se)  reference(B=8)  mean-field  mean/mean-field");
    for (s, (name, reference, mf)) in
        [("0.1·N(0,1)", REF_RANDOM, MF_RANDOM), ("zero", REF_ZERO, MF_ZERO)].iter().enumerate()
    {
        for (j, t) in TS.iter().enumerate() {
            println!(
                "  {name:10}  {t:3}  {:9.4e} ({:.3})   {:9.4e}      {:9.4e}  {:.3}",
                m[s][j],
                rel_se(&ex[s][j]),
                reference[j],
                mf[j],
                m[s][j] / mf[j]
            );
        }
    }
    println!("  P4-S3 wall time {:.2} s", start.elapsed().as_secs_f64());
    let r = &m[0];
    assert!(r[1] < 0.7 * r[0], "P4-S3: ℰ(51) = {:e} not < 0.7·ℰ(1) = {:e}", r[1], 0.7 * r[0]);
    assert!(r[2] > 3.0 * r[1], "P4-S3: ℰ(301) = {:e} not > 3·ℰ(51) = {:e}", r[2], 3.0 * r[1]);
    for (j, t) in TS.iter().enumerate() {
        assert!(
            within(r[j], MF_RANDOM[j], 0.7, 1.4),
            "P4-S3 T = {t}: mean {:e} not within [0.7, 1.4] × mean-field {:e}",
            r[j],
            MF_RANDOM[j]
        );
    }
    let z = &m[1];
    assert!(
        z[0] < z[1] && z[1] < z[2],
        "P4-S3 with Γ⁰ = 0: ℰ not increasing in T: {z:?} (reference {REF_ZERO:?})"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Robustness (P4-S4): `exp_robust`
// ---------------------------------------------------------------------------------------

/// P4-S4: one prompt replaced by a grossly corrupted one (μ = 1 on every feature, α on every
/// label and the target) barely moves NoisyHead (same noise and start for both runs) but
/// moves the exact ridge estimate by a constant amount (N = 500, L = 50, ε = 0.5).
#[test]
fn s4_one_corrupted_prompt_barely_moves_noisy_head() -> Res<()> {
    const N: usize = 500;
    const L: usize = 50;
    const B: usize = 10;
    const ALPHAS: [f64; 3] = [5e2, 2.5e5, 1.25e8];
    // docs/PAPERS.md T4-F (`exp_robust(B=10, N=500, L=50, D=5, cs=(1,), ps=(1, 2, 3), seed=31)`).
    const REF_RIDGE_QR: [f64; 3] = [2.4091e-2, 2.4090e-2, 2.4090e-2];
    const REF_RIDGE_NORMAL: [f64; 3] = [2.4091e-2, 2.4090e-2, 1.2339];
    const REF_PAIRED: f64 = 6.246e-10;
    let start = Instant::now();
    let p = presets::robustness(N, L, 0.5)?;
    assert_eq!((p.n, p.l, p.d, p.iters), (N, L, 5, 6));
    assert_eq!((p.lambda, p.budget.epsilon().get(), p.budget.delta().get()), (0.01, 0.5, 1e-2));
    // P4-S4 / the quick robustness configuration of T4-A (printed to 4–5 digits).
    assert_rel("C", p.clip_c, 4.5004, 2e-5);
    assert_rel("G", p.proj_g, 1.0858, 1e-4);
    assert_rel("R", p.proj_r, 6.4046, 2e-5);
    assert_rel("σ", p.sigma, 24.8763, 4e-6);
    assert_rel("η0", p.eta0, 0.00472, 2e-3);
    assert_rel("s", p.noise_std()?, 1.0243e-2, 1e-4);
    let d = p.d;
    let key = key(0x54);
    // [α] → per replicate
    let mut ridge_qr = vec![Vec::with_capacity(B); ALPHAS.len()];
    let mut ridge_chol = vec![Vec::with_capacity(B); ALPHAS.len()];
    let mut paired = vec![Vec::with_capacity(B); ALPHAS.len()];
    let mut chol_failures = [0usize; 3];
    for rep in 0..B {
        let train = Draw::generate(N, L, d, &key, stream(rep, ROLE_TRAIN))?;
        let test = Draw::generate(N_TEST, L, d, &key, stream(rep, ROLE_TEST))?;
        let raw_test = test.raw()?;
        let f_test = raw_test.features()?;
        let raw = train.raw()?;
        let good_qr = ridge(&raw.features()?, p.lambda, RidgeSolver::Qr)?;
        let good_chol = ridge(&raw.features()?, p.lambda, RidgeSolver::Cholesky)?;
        let mut gamma0 = vec![0.0; d * d];
        random_start(&mut gamma0, C0, &key, stream(rep, ROLE_START))?;
        let noise = stream(rep, ROLE_NOISE);
        let good = release(&p, &train.prompts()?, &gamma0, Form::Gram, &key, noise)?;
        // The replacement prompt (fresh) and the index it replaces, uniform in 0..N.
        let fresh = Draw::generate(1, L, d, &key, stream(rep, ROLE_REPLACEMENT))?;
        let index_word = KeyedStream::new(&key, stream(rep, ROLE_INDEX)).word(0)?;
        let index = ((u64::from(index_word) * N as u64) >> 32) as usize;
        for (a, &alpha) in ALPHAS.iter().enumerate() {
            let mut one = fresh.clone();
            corrupt_prompt(&mut one.x, &mut one.y, &mut one.q, &mut one.t[0], 1.0, alpha, true)?;
            let mut bad = train.clone();
            bad.replace(index, &one);
            let raw_bad = bad.raw()?;
            let f_bad = raw_bad.features()?;
            let bad_qr = ridge(&f_bad, p.lambda, RidgeSolver::Qr)?;
            ridge_qr[a].push(excess_risk(&good_qr, &bad_qr, &f_test)?);
            match ridge(&f_bad, p.lambda, RidgeSolver::Cholesky) {
                Ok(bad_chol) => ridge_chol[a].push(excess_risk(&good_chol, &bad_chol, &f_test)?),
                Err(_) => chol_failures[a] += 1,
            }
            // Same release key and stream, same start: only the data differ.
            let g_bad = release(&p, &bad.prompts()?, &gamma0, Form::Gram, &key, noise)?;
            paired[a].push(excess_risk(&good, &g_bad, &f_test)?);
        }
    }
    let qr: Vec<f64> = ridge_qr.iter().map(|x| mean(x)).collect();
    let nh: Vec<f64> = paired.iter().map(|x| mean(x)).collect();
    println!("P4-S4 robustness N = {N}, L = {L}, D = 5, ε = 0.5, δ = 1e-2, T = 6, B = {B}");
    println!(
        "     alpha     ridge QR   (ref)        ridge Cholesky (ref LU)     NoisyHead paired (ref)      ratio NH/QR"
    );
    for (a, alpha) in ALPHAS.iter().enumerate() {
        let chol = if ridge_chol[a].is_empty() {
            "   (failed)".to_string()
        } else {
            format!("{:11.4e}", mean(&ridge_chol[a]))
        };
        println!(
            "  {alpha:9.3e}  {:9.4e} ({:9.4e})  {chol} ({:9.4e})  {:9.3e} ({REF_PAIRED:9.3e})  {:.2e}",
            qr[a],
            REF_RIDGE_QR[a],
            REF_RIDGE_NORMAL[a],
            nh[a],
            nh[a] / qr[a]
        );
        if chol_failures[a] > 0 {
            println!(
                "    Cholesky reported not positive definite in {} replicates",
                chol_failures[a]
            );
        }
    }
    println!("  P4-S4 wall time {:.2} s", start.elapsed().as_secs_f64());
    let (lo, hi) = qr.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    assert!(lo > 1e-2, "P4-S4: exact ridge gap {lo:e} not > 1e-2 (reference 2.409e-2)");
    assert!(
        hi / lo - 1.0 < 0.01,
        "P4-S4: exact (QR) ridge gap not constant in α within 1 %: {qr:?}"
    );
    // On the benign α the normal equations are well conditioned: Cholesky agrees with QR
    // (reference: LU = QR to 4 digits at α = 5e2 and 2.5e5). At α = 1.25e8 it is only
    // reported, not asserted (docs/PAPERS.md P4-21: the normal equations are unreliable there).
    for a in 0..2 {
        assert!(ridge_chol[a].len() == B, "P4-S4 α = {:e}: Cholesky failed", ALPHAS[a]);
        let chol = mean(&ridge_chol[a]);
        assert!(
            (chol / qr[a] - 1.0).abs() < 1e-3,
            "P4-S4 α = {:e}: Cholesky gap {chol:e} differs from QR gap {:e}",
            ALPHAS[a],
            qr[a]
        );
    }
    for (a, alpha) in ALPHAS.iter().enumerate() {
        assert!(nh[a] < 1e-7, "P4-S4 α = {alpha:e}: paired NoisyHead gap {:e} ≥ 1e-7", nh[a]);
        assert!(
            nh[a] / qr[a] < 1e-4,
            "P4-S4 α = {alpha:e}: NoisyHead / ridge gap {:e} ≥ 1e-4",
            nh[a] / qr[a]
        );
    }
    Ok(())
}
