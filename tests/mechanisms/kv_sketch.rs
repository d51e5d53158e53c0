//! The random-feature DP KV sketch (`dpattn::kv_sketch`, `docs/PRIVACY.md` §13): the
//! noise-free estimate against exact softmax attention (computed here in `f64`, sharing no
//! code with the library), the sensitivity bound against every neighbour tried, one charge
//! for any number of queries, the grid, the answer rules, clamping of private rows, and
//! refusals that charge nothing.

use dpattn::accounting::composition::Rho;
use dpattn::accounting::ledger::{Amount, Ledger};
use dpattn::kv_sketch::{KvSketch, KvSketchParams, PRIVACY_UNIT};
use dpattn::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
use dpattn::session::{Draw, Session};
use dpattn::{Error, MatMut, MatRef, NoiseMode, PrivacyBudget};

fn gaussians(seed: u8, len: usize) -> Vec<f64> {
    let mut out = vec![0.0; len];
    let s = KeyedStream::new(&NoiseKey::for_replay([seed; 32]), 0);
    Gaussian::STANDARD.fill_keyed::<f64>(&s, 0, &mut out).unwrap();
    out
}

/// `n` rows of norm at most `norm` (random directions, random lengths).
fn rows(seed: u8, n: usize, d: usize, norm: f64) -> Vec<f64> {
    let mut x = gaussians(seed, n * d);
    for (j, row) in x.chunks_mut(d).enumerate() {
        let len = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        let target = norm * (0.5 + 0.5 * ((j * 37 % 101) as f64 / 101.0));
        row.iter_mut().for_each(|v| *v *= target / len);
    }
    x
}

fn attention(q: &[f64], k: &[f64], v: &[f64], d: usize, dv: usize, scale: f64) -> Vec<f64> {
    let n = k.len() / d;
    let w: Vec<f64> = (0..n)
        .map(|j| {
            (scale * q.iter().zip(&k[j * d..(j + 1) * d]).map(|(a, b)| a * b).sum::<f64>()).exp()
        })
        .collect();
    let total: f64 = w.iter().sum();
    (0..dv).map(|c| (0..n).map(|j| w[j] * v[j * dv + c]).sum::<f64>() / total).collect()
}

fn norm(x: &[f64]) -> f64 {
    x.iter().map(|v| v * v).sum::<f64>().sqrt()
}

fn params(m: usize, eps: f64) -> KvSketchParams {
    KvSketchParams::new(1.0, 1.0, 0.5, m, PrivacyBudget::new(eps, 1e-6).unwrap())
}

fn answers(s: &KvSketch, q: &[f64], d: usize, dv: usize) -> Vec<f64> {
    let rows = q.len() / d;
    let mut out = vec![0.0; rows * dv];
    s.answer(
        MatRef::from_row_major(q, rows, d).unwrap(),
        MatMut::from_row_major(&mut out, rows, dv).unwrap(),
    )
    .unwrap();
    out
}

#[test]
fn noise_free_sketch_converges_to_softmax_attention() {
    // Unclipped positive random features are unbiased for exp(s·q·k): the ratio estimate's
    // error falls like 1/√m (here ‖q̃‖, ‖k̃‖ ≤ 0.71, so the features' variance is small).
    let (n, d, dv) = (300, 8, 3);
    let (k, v, q) = (rows(1, n, d, 1.0), rows(2, n, dv, 1.0), rows(3, 8, d, 1.0));
    let err = |m: usize| {
        let p = KvSketchParams { feature_clip: f64::INFINITY, ..params(m, 1.0) };
        let s = KvSketch::non_private(
            MatRef::from_row_major(&k, n, d).unwrap(),
            MatRef::from_row_major(&v, n, dv).unwrap(),
            &p,
        )
        .unwrap();
        let got = answers(&s, &q, d, dv);
        (0..8)
            .map(|i| {
                let want = attention(&q[i * d..(i + 1) * d], &k, &v, d, dv, 0.5);
                let e: Vec<f64> =
                    got[i * dv..(i + 1) * dv].iter().zip(&want).map(|(a, b)| a - b).collect();
                norm(&e) / norm(&want)
            })
            .sum::<f64>()
            / 8.0
    };
    let (coarse, fine) = (err(16), err(16384));
    eprintln!("noise-free relative error: m = 16: {coarse:.4}, m = 16384: {fine:.4}");
    // 1/√m predicts a 32× drop; allow 8×.
    assert!(fine < coarse / 8.0 && fine < 0.02, "m = 16: {coarse}, m = 16384: {fine}");
}

#[test]
fn sensitivity_bounds_every_neighbour_tried() {
    // With n = 1 the non-private sketch is one position's term ĝ: two single-position
    // sketches differ by exactly what replacing that position moves the release. Candidates
    // include rows far beyond the norms (clamped), zero rows and NaN rows (zeroed).
    let (d, dv) = (6, 4);
    for clip in [f64::INFINITY, 4.0, 1.0] {
        let p = KvSketchParams { feature_clip: clip, ..params(32, 1.0) };
        let bound = p.grid(d, dv, 1).unwrap().rounded_sensitivity();
        let term = |k: &[f64], v: &[f64]| {
            KvSketch::non_private(
                MatRef::from_row_major(k, 1, d).unwrap(),
                MatRef::from_row_major(v, 1, dv).unwrap(),
                &p,
            )
            .unwrap()
            .sketch()
            .to_vec()
        };
        let (ks, vs) = (rows(7, 200, d, 3.0), rows(8, 200, dv, 3.0));
        let mut worst = 0.0f64;
        let mut candidates: Vec<(Vec<f64>, Vec<f64>)> = (0..200)
            .map(|j| (ks[j * d..(j + 1) * d].to_vec(), vs[j * dv..(j + 1) * dv].to_vec()))
            .collect();
        candidates.push((vec![0.0; d], vec![0.0; dv]));
        candidates.push((vec![f64::NAN; d], vec![1e300; dv]));
        let terms: Vec<Vec<f64>> = candidates.iter().map(|(k, v)| term(k, v)).collect();
        for a in &terms {
            for b in &terms {
                let diff: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
                worst = worst.max(norm(&diff));
            }
        }
        eprintln!("clip {clip}: largest neighbour distance {worst:.4e}, bound {bound:.4e}");
        assert!(worst <= bound, "clip {clip}: {worst} > {bound}");
        assert!(worst > 0.0);
    }
}

#[test]
fn one_release_answers_any_number_of_queries_for_one_charge() {
    let (n, d, dv) = (500, 4, 2);
    let (k, v) = (rows(11, n, d, 1.0), rows(12, n, dv, 1.0));
    let total = PrivacyBudget::new(10.0, 1e-4).unwrap();
    let mut session = Session::new(Ledger::new_approx(PRIVACY_UNIT, total)).unwrap();
    let s = KvSketch::new(
        MatRef::from_row_major(&k, n, d).unwrap(),
        MatRef::from_row_major(&v, n, dv).unwrap(),
        &params(64, 2.0),
        &mut session,
    )
    .unwrap();
    for seed in 0..10u8 {
        let q = rows(20 + seed, 100, d, 1.0);
        assert!(answers(&s, &q, d, dv).iter().all(|x| x.is_finite()));
    }
    assert_eq!(session.ledger().charges(), 1);
    assert_eq!(session.ledger().spent(), Amount::Approx { epsilon: 2.0, delta: 1e-6 });
    // A zCDP ledger is charged the discrete Gaussian's ρ.
    let mut zcdp = Session::new(Ledger::new_zcdp(PRIVACY_UNIT, Rho::new(10.0).unwrap())).unwrap();
    let s = KvSketch::new(
        MatRef::from_row_major(&k, n, d).unwrap(),
        MatRef::from_row_major(&v, n, dv).unwrap(),
        &params(64, 2.0),
        &mut zcdp,
    )
    .unwrap();
    let rho = s.grid().unwrap().rho();
    assert_eq!(zcdp.ledger().spent(), Amount::Zcdp { rho });
}

#[test]
fn the_release_is_on_the_grid_and_replays_bit_for_bit() {
    let (n, d, dv) = (50, 4, 3);
    let (k, v) = (rows(13, n, d, 1.0), rows(14, n, dv, 1.0));
    let key = NoiseKey::for_replay([3; 32]);
    let release = |stream| {
        KvSketch::new_keyed(
            MatRef::from_row_major(&k, n, d).unwrap(),
            MatRef::from_row_major(&v, n, dv).unwrap(),
            &params(16, 1.0),
            Draw { key: &key, stream },
            None,
        )
        .unwrap()
    };
    let (a, b, c) = (release(0), release(0), release(1));
    assert_eq!(a.sketch(), b.sketch());
    assert_ne!(a.sketch(), c.sketch());
    let lambda = a.grid().unwrap().resolution();
    assert!(a.sketch().iter().all(|x| (x / lambda).fract() == 0.0));
}

#[test]
fn answers_stay_in_the_value_ball_under_any_noise() {
    // ε = 0.01 on 5 positions: the noise dwarfs the sums; the denominator clamp keeps every
    // answer finite and the output clamp keeps it in the ball of radius R_v.
    let (n, d, dv) = (5, 4, 3);
    let (k, v) = (rows(15, n, d, 1.0), rows(16, n, dv, 1.0));
    let key = NoiseKey::for_replay([4; 32]);
    for stream in 0..20 {
        let s = KvSketch::new_keyed(
            MatRef::from_row_major(&k, n, d).unwrap(),
            MatRef::from_row_major(&v, n, dv).unwrap(),
            &params(8, 0.01),
            Draw { key: &key, stream },
            None,
        )
        .unwrap();
        let out = answers(&s, &rows(17, 50, d, 3.0), d, dv);
        assert!(out.chunks(dv).all(|o| o.iter().all(|x| x.is_finite()) && norm(o) <= 1.0));
    }
}

#[test]
fn private_rows_are_clamped_not_refused() {
    // A NaN key row counts as the zero row (the release is bit for bit the one with a zero
    // row), and an overlong value row as its clamp to R_v = 1 (the noise-free sums equal
    // those with the row (0.6, 0.8), up to the clamp's 2^-21 aim below R_v).
    let (n, d, dv) = (20, 4, 2);
    let (mut k, mut v) = (rows(18, n, d, 1.0), rows(19, n, dv, 1.0));
    let (mut k2, mut v2) = (k.clone(), v.clone());
    k[3 * d] = f64::NAN;
    k2[3 * d..4 * d].fill(0.0);
    let key = NoiseKey::for_replay([5; 32]);
    let release = |k: &[f64], v: &[f64]| {
        KvSketch::new_keyed(
            MatRef::from_row_major(k, n, d).unwrap(),
            MatRef::from_row_major(v, n, dv).unwrap(),
            &params(16, 1.0),
            Draw { key: &key, stream: 0 },
            None,
        )
        .unwrap()
        .sketch()
        .to_vec()
    };
    assert_eq!(release(&k, &v), release(&k2, &v));
    v[5 * dv..6 * dv].copy_from_slice(&[3e6, 4e6]);
    v2[5 * dv..6 * dv].copy_from_slice(&[0.6, 0.8]);
    let clean = |v: &[f64]| {
        KvSketch::non_private(
            MatRef::from_row_major(&k2, n, d).unwrap(),
            MatRef::from_row_major(v, n, dv).unwrap(),
            &params(16, 1.0),
        )
        .unwrap()
        .sketch()
        .to_vec()
    };
    let (a, b) = (clean(&v), clean(&v2));
    assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-5 * y.abs().max(1.0)));
    assert_ne!(a, clean(&rows(19, n, dv, 1.0))); // the row did count
}

#[test]
fn bad_parameters_are_errors_and_charge_nothing() {
    let (n, d, dv) = (10, 4, 2);
    let (k, v) = (rows(21, n, d, 1.0), rows(22, n, dv, 1.0));
    let mut session =
        Session::new(Ledger::new_approx(PRIVACY_UNIT, PrivacyBudget::new(10.0, 1e-4).unwrap()))
            .unwrap();
    let km = MatRef::from_row_major(&k, n, d).unwrap();
    let bad = [
        KvSketchParams { features: 0, ..params(8, 1.0) },
        KvSketchParams { key_norm: -1.0, ..params(8, 1.0) },
        KvSketchParams { scale: f64::NAN, ..params(8, 1.0) },
        KvSketchParams { feature_clip: -1.0, ..params(8, 1.0) },
        KvSketchParams { budget: PrivacyBudget::new(1.0, 0.0).unwrap(), ..params(8, 1.0) },
        KvSketchParams { noise_mode: NoiseMode::UnsafeFloat, ..params(8, 1.0) },
    ];
    for p in bad {
        let r = KvSketch::new(km, MatRef::from_row_major(&v, n, dv).unwrap(), &p, &mut session);
        assert!(matches!(r, Err(Error::OutOfRange { .. } | Error::Unsupported { .. })), "{p:?}");
    }
    let short = MatRef::from_row_major(&v[..(n - 1) * dv], n - 1, dv).unwrap();
    assert!(matches!(
        KvSketch::new(km, short, &params(8, 1.0), &mut session),
        Err(Error::ShapeMismatch { .. })
    ));
    assert_eq!(session.ledger().charges(), 0);
    // A query of the wrong width is refused; a non-finite (public) query too.
    let s = KvSketch::non_private(km, MatRef::from_row_major(&v, n, dv).unwrap(), &params(8, 1.0))
        .unwrap();
    let mut out = [0.0; 2];
    let q = [0.0; 3];
    assert!(
        s.answer(
            MatRef::from_row_major(&q, 1, 3).unwrap(),
            MatMut::from_row_major(&mut out, 1, 2).unwrap()
        )
        .is_err()
    );
    let q = [0.0, f64::INFINITY, 0.0, 0.0];
    assert!(matches!(
        s.answer(
            MatRef::from_row_major(&q, 1, 4).unwrap(),
            MatMut::from_row_major(&mut out, 1, 2).unwrap()
        ),
        Err(Error::NonFinite { index: 1, .. })
    ));
    // A finite query so long that its features overflow: a clear error, `out` untouched.
    let q = [1e300, 0.0, 0.0, 0.0];
    let mut out = [7.0; 2];
    let e = s.answer(
        MatRef::from_row_major(&q, 1, 4).unwrap(),
        MatMut::from_row_major(&mut out, 1, 2).unwrap(),
    );
    assert!(matches!(e, Err(Error::OutOfRange { .. })), "{e:?}");
    assert_eq!(out, [7.0; 2]);
    assert!(s.cost().is_none() && s.grid().is_none());
}

#[test]
fn constant_time_mode_charges_epsilon_delta_only() {
    let (n, d, dv) = (30, 4, 2);
    let (k, v) = (rows(23, n, d, 1.0), rows(24, n, dv, 1.0));
    let p = KvSketchParams { noise_mode: NoiseMode::ConstantTime, ..params(8, 1.0) };
    let mut approx =
        Session::new(Ledger::new_approx(PRIVACY_UNIT, PrivacyBudget::new(10.0, 1e-4).unwrap()))
            .unwrap();
    let km = MatRef::from_row_major(&k, n, d).unwrap();
    let vm = MatRef::from_row_major(&v, n, dv).unwrap();
    let s = KvSketch::new(km, vm, &p, &mut approx).unwrap();
    assert_eq!(approx.ledger().spent(), Amount::Approx { epsilon: 1.0, delta: 1e-6 });
    let lambda = s.grid().unwrap().resolution();
    assert!(s.sketch().iter().all(|x| (x / lambda).fract() == 0.0));
    let mut zcdp = Session::new(Ledger::new_zcdp(PRIVACY_UNIT, Rho::new(10.0).unwrap())).unwrap();
    assert!(KvSketch::new(km, vm, &p, &mut zcdp).is_err());
    assert_eq!(zcdp.ledger().charges(), 0);
}
