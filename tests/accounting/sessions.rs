//! Sessions (`dpattn::session`): through the default API a `(key, stream)` pair can never
//! serve two releases — not within a session, not across a save and a restore from an older
//! save — a ledger refuses releases about another privacy unit, and refusals carry no value
//! computed from private data.
//!
//! Expected values are structural (disjoint stream ranges, unequal epochs) or come from the
//! explicitly named replay route, never from the output under test.

use dpattn::accounting::composition::Rho;
use dpattn::accounting::ledger::{Amount, Ledger};
use dpattn::accounting::privacy_unit::PrivacyUnit;
use dpattn::gaussian_sampling_attention::{
    Domain, GaussianSamplingParams, OutOfDomain, gaussian_sampling_attention,
    gaussian_sampling_attention_scratch_len,
};
use dpattn::output_perturbation::{
    OutputPerturbationParams, output_perturbation_attention, output_perturbation_attention_keyed,
    output_perturbation_scratch_len,
};
use dpattn::session::{NoiseSource, Session, SessionState, epoch_key};
use dpattn::{BatchedMut, BatchedRef, Error, Kernel, NoiseMode, PrivacyBudget, Scale, ScoreFn};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

const S_Q: usize = 2;
const S_K: usize = 64;
const D: usize = 4;
const SENTINEL: f32 = -7.0;

fn params() -> OutputPerturbationParams<'static> {
    OutputPerturbationParams {
        key_norm: 1.0,
        value_norm: 1.0,
        budget: PrivacyBudget::new(1.0, 1e-6).unwrap(),
        scale: Scale::InvSqrtDim,
        score: ScoreFn::Exp,
        key_padding: None,
        kernel: Kernel::Auto,
        noise_mode: NoiseMode::Exact,
    }
}

/// A private context: keys and values of norm below 1.
fn context(seed: u64) -> Vec<f32> {
    (0..S_K * D)
        .map(|i| (((i as u64 * 2654435761 + seed) % 1000) as f32 / 1000.0 - 0.5) * 0.4)
        .collect()
}

/// One output-perturbation release through `session`.
fn release(session: &mut Session, kv: &[f32]) -> dpattn::Result<Vec<f32>> {
    let q = vec![0.5f32; S_Q * D];
    let mut out = vec![SENTINEL; S_Q * D];
    output_perturbation_attention(
        BatchedMut::contiguous(&mut out, [1, 1, S_Q, D])?,
        BatchedRef::contiguous(&q, [1, 1, S_Q, D])?,
        BatchedRef::contiguous(kv, [1, 1, S_K, D])?,
        BatchedRef::contiguous(kv, [1, 1, S_K, D])?,
        &params(),
        session,
        &mut [0.0],
        &mut vec![0f32; output_perturbation_scratch_len(D, D)?],
    )?;
    Ok(out)
}

fn token_ledger() -> Ledger {
    Ledger::new_zcdp(PrivacyUnit::TOKEN, Rho::new(100.0).unwrap())
}

#[test]
fn a_session_never_hands_out_a_stream_id_twice() {
    let mut session = Session::new(token_ledger()).unwrap();
    let mut ranges = Vec::new();
    for i in 0..200u64 {
        let n = 1 + i % 5;
        let first = session.begin(n).unwrap().draw.stream;
        ranges.push(first..first + n);
    }
    ranges.sort_by_key(|r| r.start);
    for w in ranges.windows(2) {
        assert!(w[0].end <= w[1].start, "overlapping stream ranges {:?} and {:?}", w[0], w[1]);
    }
    // A failed release consumes its id too: the next one does not reuse it.
    let before = session.next_stream();
    let mut wrong =
        Session::new(Ledger::new_zcdp(PrivacyUnit::Prompt, Rho::new(1.0).unwrap())).unwrap();
    let w0 = wrong.next_stream();
    assert!(release(&mut wrong, &context(1)).is_err());
    assert_eq!(wrong.next_stream(), w0 + 1);
    assert_eq!(session.next_stream(), before);
    assert!(matches!(session.begin(0), Err(Error::OutOfRange { .. })));
}

#[test]
fn two_releases_of_one_input_through_a_session_get_independent_noise() {
    let mut session = Session::new(token_ledger()).unwrap();
    let kv = context(3);
    let a = release(&mut session, &kv).unwrap();
    let b = release(&mut session, &kv).unwrap();
    // σ ≈ 0.05 per element: equal outputs would mean equal noise.
    assert_ne!(a, b);
    assert_eq!(session.ledger().charges(), 2);
}

#[test]
fn restoring_an_older_save_cannot_reissue_a_key_and_stream_pair() {
    let mut session = Session::new(token_ledger()).unwrap();
    // Spend a little, then save: this is the state a crashed service would come back with.
    release(&mut session, &context(5)).unwrap();
    let mut bytes = vec![0u8; <SessionState>::ENCODED_LEN];
    session.save().encode(&mut bytes).unwrap();
    let (epoch, stream) = (session.epoch(), session.next_stream());

    // A release after the save, on stream id `stream`.
    let kv = context(7);
    let after_save = release(&mut session, &kv).unwrap();

    // Restore from the *older* save: the stream counter repeats, the epoch does not.
    let mut restored = Session::restore(SessionState::decode(&bytes).unwrap()).unwrap();
    assert_eq!(restored.next_stream(), stream);
    assert_ne!(restored.epoch(), epoch);
    assert_ne!(
        epoch_key(restored.master_key(), restored.epoch()),
        epoch_key(session.master_key(), epoch)
    );
    assert_eq!(restored.ledger().charges(), 1, "an older save forgets later charges (documented)");
    let again = release(&mut restored, &kv).unwrap();
    assert_ne!(again, after_save, "the same (key, stream) pair was reissued");

    // The only way back to that noise is the explicitly named replay route, for audit.
    let source = NoiseSource::for_replay(session.master_key().clone(), epoch, stream);
    let mut audit = Session::with_source(source, token_ledger());
    assert_eq!(release(&mut audit, &kv).unwrap(), after_save);
}

#[test]
fn restores_from_one_save_get_distinct_epochs() {
    let session = Session::new(token_ledger()).unwrap();
    let epochs: Vec<u64> =
        (0..16).map(|_| Session::restore(session.save()).unwrap().epoch()).collect();
    for (i, a) in epochs.iter().enumerate() {
        assert!(epochs[i + 1..].iter().all(|b| b != a), "two restores shared an epoch");
    }
    // `restore_with_rng` (no_std) draws the epoch from the caller's generator.
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let r1 = Session::restore_with_rng(session.save(), &mut rng);
    let r2 = Session::restore_with_rng(session.save(), &mut rng);
    assert_ne!(r1.epoch(), r2.epoch());
}

#[test]
fn a_release_for_another_privacy_unit_is_refused_and_changes_nothing() {
    let kv = context(9);
    for unit in [PrivacyUnit::Prompt, PrivacyUnit::Sequence, PrivacyUnit::tokens(4).unwrap()] {
        let mut session = Session::new(Ledger::new_zcdp(unit, Rho::new(100.0).unwrap())).unwrap();
        let q = vec![0.5f32; S_Q * D];
        let mut out = vec![SENTINEL; S_Q * D];
        let r = output_perturbation_attention(
            BatchedMut::contiguous(&mut out, [1, 1, S_Q, D]).unwrap(),
            BatchedRef::contiguous(&q, [1, 1, S_Q, D]).unwrap(),
            BatchedRef::contiguous(&kv, [1, 1, S_K, D]).unwrap(),
            BatchedRef::contiguous(&kv, [1, 1, S_K, D]).unwrap(),
            &params(),
            &mut session,
            &mut [0.0],
            &mut vec![0f32; output_perturbation_scratch_len(D, D).unwrap()],
        );
        assert!(matches!(r, Err(Error::UnitMismatch { .. })), "{unit:?}: {r:?}");
        assert!(out.iter().all(|v| v.to_bits() == SENTINEL.to_bits()));
        assert_eq!(session.ledger().charges(), 0);
        assert_eq!(session.ledger().spent(), Amount::Zcdp { rho: 0.0 });
    }
    // A guarantee for single tokens is one for a ledger of single tokens.
    let mut session = Session::new(token_ledger()).unwrap();
    release(&mut session, &kv).unwrap();
    assert_eq!(session.ledger().charges(), 1);
}

#[test]
fn the_keyed_route_is_for_replay_and_reproduces_a_release() {
    let mut session = Session::new(token_ledger()).unwrap();
    let kv = context(13);
    let (epoch, stream) = (session.epoch(), session.next_stream());
    let released = release(&mut session, &kv).unwrap();
    let key = epoch_key(session.master_key(), epoch);
    let q = vec![0.5f32; S_Q * D];
    let mut out = vec![SENTINEL; S_Q * D];
    output_perturbation_attention_keyed(
        BatchedMut::contiguous(&mut out, [1, 1, S_Q, D]).unwrap(),
        BatchedRef::contiguous(&q, [1, 1, S_Q, D]).unwrap(),
        BatchedRef::contiguous(&kv, [1, 1, S_K, D]).unwrap(),
        BatchedRef::contiguous(&kv, [1, 1, S_K, D]).unwrap(),
        &params(),
        dpattn::session::Draw { key: &key, stream },
        None,
        &mut [0.0],
        &mut vec![0f32; output_perturbation_scratch_len(D, D).unwrap()],
    )
    .unwrap();
    assert_eq!(out, released);
}

#[test]
fn a_refusal_carries_no_value_computed_from_private_data() {
    // Paper 000's Reject mode refuses data outside the declared domain. The column norm it
    // measured (about 7.123) must not reach the message a service would log.
    let (n, d) = (3, 18);
    // X (n × d): row i is 0.099 on columns 6i..6i+6 and 0 elsewhere, so every column has
    // norm ≤ α = 0.1 and XXᵀ = 0.0588·I ⪰ η·I: inside the declared domain — but for entry
    // (0, 0), which puts column 0 at norm ≈ 7.12 > α.
    let mut x: Vec<f64> =
        (0..n * d).map(|i| if (i % d) / 6 == i / d { 0.099 } else { 0.0 }).collect();
    x[0] = 7.123_456_789;
    let mut params = GaussianSamplingParams::new(
        PrivacyBudget::new(0.5, 1e-6).unwrap(),
        Domain::new(0.1, 0.05, 1e-6).unwrap(),
        100_000,
    )
    .unsafe_float();
    params.out_of_domain = OutOfDomain::Reject;
    let mut session = Session::new(Ledger::new_approx(
        PrivacyUnit::FeatureColumn,
        PrivacyBudget::new(10.0, 1e-3).unwrap(),
    ))
    .unwrap();
    let (mut b, mut p) = (vec![0.0; n * n], vec![0.0; n * n]);
    let e = gaussian_sampling_attention(
        BatchedMut::contiguous(&mut b, [1, 1, n, n]).unwrap(),
        BatchedMut::contiguous(&mut p, [1, 1, n, n]).unwrap(),
        BatchedRef::contiguous(&x, [1, 1, n, d]).unwrap(),
        &params,
        &mut session,
        &mut vec![
            0.0;
            gaussian_sampling_attention_scratch_len(
                n,
                d,
                params.sampler,
                params.out_of_domain
            )
            .unwrap()
        ],
    )
    .unwrap_err();
    let shown = format!("{e}");
    let debugged = format!("{e:?}");
    for text in [&shown, &debugged] {
        for leak in ["7.1", "7.0", "7.2", "50."] {
            assert!(!text.contains(leak), "{leak:?} in {text:?}");
        }
    }
    assert_eq!(session.ledger().charges(), 0);
}
