//! Errors leak nothing by default (issue 28; `docs/PRIVACY.md` §9).
//!
//! For every place where a routine refuses private data, an input that triggers the refusal
//! with distinctive private numbers in it (an entry `123456.789`, an index `4321`, a
//! measured norm or eigenvalue, a count): `Display`, `Debug` and alternate `Debug` must
//! contain none of them, and `Error::private_detail` must return them. The expected private
//! values are computed here from the input (a norm, an eigenvalue of a diagonal Gram
//! matrix, a pivot, a count), not read back from the code. Where a mechanism can sanitise
//! instead of refusing (DP-Forward's non-finite hidden rows), it must: the release equals
//! the release of the sanitised input, and the count is only in a private accessor.

use dpattn::accounting::ledger::Ledger;
use dpattn::attention::{AttentionParams, attention_alloc};
use dpattn::dp_forward::{
    ClipMode, ClipRegion, DpForwardParams, Neighbours, NoiseFactors, NoisePosition,
    SensitivityRule, clip_hidden, dp_forward_keyed,
};
use dpattn::gaussian_sampling_attention::{
    Domain, GaussianSamplingParams, Sampler, dp_covariance, dp_covariance_scratch_len,
    gaussian_sampling_attention_keyed, gaussian_sampling_attention_scratch_len,
};
use dpattn::reference_attention::reference_attention_vec;
use dpattn::sampling::{GridLaplace, KeyedStream, NoiseKey};
use dpattn::session::Draw;
use dpattn::softmax_tree::{DpTree, SoftmaxTreeParams};
use dpattn::softmax_tree_cross_attention::{
    DomainPolicy, SoftmaxTreeCrossAttention, SoftmaxTreeCrossAttentionParams,
};
use dpattn::{
    BatchedMut, BatchedRef, Error, Mask, MatMut, MatRef, NoiseMode, PrivacyBudget, Scale,
};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The texts a service might log: `Display`, `Debug` and pretty `Debug`.
fn logged(e: &Error) -> String {
    format!("{e}\n{e:?}\n{e:#?}")
}

/// `e`'s logged forms contain none of `secrets`, and say the detail is withheld.
fn assert_withheld(e: &Error, secrets: &[&str]) {
    let text = logged(e);
    for s in secrets {
        assert!(!text.contains(s), "`{s}` leaked into the error text:\n{text}");
    }
    assert!(text.contains("withheld"), "{text}");
}

fn key() -> NoiseKey {
    NoiseKey::for_replay([28; 32])
}

// ---------------------------------------------------------------------------------------
// Paper 000 (`gaussian_sampling_attention`), Reject mode, and `dp_covariance`.

/// One Reject-mode release of the `n × d` matrix `x` (batch 1, one head).
fn paper000(x: &[f64], n: usize, d: usize, domain: Domain) -> Result<(), Error> {
    let p =
        GaussianSamplingParams::new(PrivacyBudget::new(0.5, 1e-6)?, domain, 10_000).unsafe_float();
    let (mut b, mut pr) = (vec![0.0; n * n], vec![0.0; n * n]);
    let len = gaussian_sampling_attention_scratch_len(n, d, p.sampler, p.out_of_domain)?;
    gaussian_sampling_attention_keyed(
        BatchedMut::contiguous(&mut b, [1, 1, n, n])?,
        BatchedMut::contiguous(&mut pr, [1, 1, n, n])?,
        BatchedRef::contiguous(x, [1, 1, n, d])?,
        &p,
        Draw { key: &key(), stream: 0 },
        None,
        &mut vec![0.0; len],
    )
    .map(|_| ())
}

#[test]
fn paper000_reject_keeps_the_measured_column_norm_private() -> Res {
    // X = [[123456.789, 0], [0, 1]]: column 0 has norm exactly 123456.789 > α = 2.
    let x = [123456.789, 0.0, 0.0, 1.0];
    let e = paper000(&x, 2, 2, Domain::new(2.0, 0.5, 1e-9)?).unwrap_err();
    assert!(matches!(e, Error::DomainViolation { .. }), "{e}");
    assert_withheld(&e, &["123456", "789"]);
    assert_eq!(e.private_detail().and_then(|d| d.value()), Some(123456.789));
    Ok(())
}

#[test]
fn paper000_reject_keeps_the_measured_min_eigenvalue_private() -> Res {
    // X = diag(11.11, 20): X Xᵀ = diag(123.4321, 400), λ_min = 11.11² < η = 200.
    let x = [11.11, 0.0, 0.0, 20.0];
    let e = paper000(&x, 2, 2, Domain::new(25.0, 200.0, 1e-9)?).unwrap_err();
    assert!(matches!(e, Error::DomainViolation { condition: "λ_min(X Xᵀ) ≥ η", .. }), "{e}");
    assert_withheld(&e, &["123.43", "1234"]);
    let lambda = e.private_detail().and_then(|d| d.value()).unwrap();
    assert!((lambda / (11.11f64 * 11.11) - 1.0).abs() < 1e-14, "{lambda}");
    Ok(())
}

#[test]
fn paper000_reject_keeps_the_index_of_a_non_finite_entry_private() -> Res {
    // n = 2, d = 2200: logical index 4321 is row 1, column 2121.
    let (n, d) = (2, 2200);
    let mut x = vec![0.01; n * d];
    x[4321] = f64::NAN;
    let e = paper000(&x, n, d, Domain::new(1.0, 1e-3, 1e-9)?).unwrap_err();
    assert!(matches!(e, Error::PrivateNonFinite { arg: "x", .. }), "{e}");
    assert_withheld(&e, &["4321"]);
    assert_eq!(e.private_detail().and_then(|d| d.index()), Some(4321));
    Ok(())
}

#[test]
fn dp_covariance_keeps_the_failing_pivot_private() -> Res {
    // Σ = diag(1, −4321.5): the second Cholesky pivot is exactly −4321.5.
    let sigma = [1.0, 0.0, 0.0, -4321.5];
    let mut out = [0.0; 4];
    let mut scratch = vec![0.0; dp_covariance_scratch_len(2, Sampler::Bartlett)?];
    let e = dp_covariance(
        MatMut::from_row_major(&mut out, 2, 2)?,
        MatRef::from_row_major(&sigma, 2, 2)?,
        100,
        Sampler::Bartlett,
        &KeyedStream::new(&key(), 0),
        0,
        &mut scratch,
    )
    .unwrap_err();
    assert!(matches!(e, Error::DomainViolation { .. }), "{e}");
    assert_withheld(&e, &["4321"]);
    assert_eq!(e.private_detail().and_then(|d| d.value()), Some(-4321.5));
    assert_eq!(out, [0.0; 4], "nothing written on error");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Paper 001's cross-attention in Reject mode: the count of out-of-domain private entries.

#[test]
fn cross_attention_reject_keeps_the_count_of_out_of_domain_entries_private() -> Res {
    let tree = SoftmaxTreeParams::paper(1.0, 1.0, PrivacyBudget::new(1.0, 1e-6)?, 1e-6);
    let mut p = SoftmaxTreeCrossAttentionParams::new(tree);
    p.domain_policy = DomainPolicy::Reject;
    // 64 keys of dimension 1, 37 of them outside [0, R] (negative); values in range.
    let n = 64;
    let keys: Vec<f64> = (0..n).map(|i| if i < 37 { -0.5 } else { 0.5 }).collect();
    let values = vec![0.25; n];
    let r = SoftmaxTreeCrossAttention::new_keyed(
        MatRef::from_row_major(&keys, n, 1)?,
        MatRef::from_row_major(&values, n, 1)?,
        &p,
        Draw { key: &key(), stream: 1 },
        None,
    );
    let e = r.expect_err("refused");
    assert!(matches!(e, Error::DomainViolation { .. }), "{e}");
    assert_withheld(&e, &["37"]);
    assert_eq!(e.private_detail().and_then(|d| d.count()), Some(37));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Grid noise (`sampling::grid_noise`): the index and the value of a private entry.

#[test]
fn grid_noise_keeps_the_index_and_value_of_a_data_entry_private() -> Res {
    // r = 2^-2: |x| / r must stay below 2^53, so 1.2345678e300 is far too large.
    let lap = GridLaplace::with_resolution(1.0, 1.0, 5000, -2)?;
    let mut rng = ChaCha20Rng::from_seed([3; 32]);
    let mut data = vec![0.5; 5000];
    data[4321] = 1.2345678e300;
    let e = lap.add_noise(&mut rng, &mut data).unwrap_err();
    assert!(matches!(e, Error::DomainViolation { .. }), "{e}");
    assert_withheld(&e, &["4321", "12345678", "e300"]);
    let d = e.private_detail().unwrap();
    assert_eq!((d.index(), d.value()), (Some(4321), Some(1.2345678e300)));
    assert_eq!(data[4321], 1.2345678e300, "data untouched on error");

    data[4321] = f64::NEG_INFINITY;
    let e = lap.add_noise_keyed(&KeyedStream::new(&key(), 2), 0, &mut data).unwrap_err();
    assert!(matches!(e, Error::PrivateNonFinite { arg: "data", .. }), "{e}");
    assert_withheld(&e, &["4321"]);
    assert_eq!(e.private_detail().and_then(|d| d.index()), Some(4321));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Attention kernels: the position of a NaN and the statistics of the range check.

#[test]
fn reference_attention_keeps_the_index_of_a_non_finite_key_private() {
    // q: 1 × 4; k, v: 1081 × 4 (4324 entries); k's logical index 4321 is NaN.
    let (s_k, d) = (1081, 4);
    let q = [0.5; 4];
    let mut k = vec![0.25; s_k * d];
    k[4321] = f64::NAN;
    let v = vec![1.0; s_k * d];
    let e = reference_attention_vec(&q, &k, &v, [1, 1, 1, d], s_k, d, Mask::NONE, Scale::InvDim)
        .unwrap_err();
    assert!(matches!(e, Error::PrivateNonFinite { arg: "k", .. }), "{e}");
    assert_withheld(&e, &["4321"]);
    assert_eq!(e.private_detail().and_then(|d| d.index()), Some(4321));
}

#[test]
fn attention_range_check_keeps_the_measured_row_norm_private() {
    // f32 attention with one key row of norm 1.2345678e38 (above f32::MAX / 4 ≈ 8.5e37).
    let (s_k, d) = (3, 2);
    let q = [0.5f32; 2];
    let mut k = vec![0.25f32; s_k * d];
    k[2] = 1.2345678e38;
    let v = vec![1.0f32; s_k * d];
    let mut out = [7.0f32; 2];
    let e = attention_alloc(
        BatchedMut::contiguous(&mut out, [1, 1, 1, d]).unwrap(),
        BatchedRef::contiguous(&q, [1, 1, 1, d]).unwrap(),
        BatchedRef::contiguous(&k, [1, 1, s_k, d]).unwrap(),
        BatchedRef::contiguous(&v, [1, 1, s_k, d]).unwrap(),
        &AttentionParams::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::DomainViolation { .. }), "{e}");
    assert_withheld(&e, &["12345", "e38"]);
    // The row norm √(0.25² + (1.2345678e38 as f32)²), the f32 entry dominating.
    let norm = f64::from(1.2345678e38f32);
    let measured = e.private_detail().and_then(|d| d.value()).unwrap();
    assert!((measured / norm - 1.0).abs() < 1e-15, "{measured} vs {norm}");
    assert_eq!(out, [7.0; 2], "out untouched on error");
}

#[test]
fn non_private_audit_tree_keeps_the_index_of_a_non_finite_value_private() {
    let mut values = vec![0.5; 4400];
    values[4321] = f64::INFINITY;
    let e = DpTree::non_private_exact(&values).expect_err("refused");
    assert!(matches!(e, Error::PrivateNonFinite { arg: "values", .. }), "{e}");
    assert_withheld(&e, &["4321"]);
    assert_eq!(e.private_detail().and_then(|d| d.index()), Some(4321));
}

#[test]
fn public_input_errors_keep_their_values() {
    // A public parameter's value is public: it stays in the message.
    let e = PrivacyBudget::new(-123456.789, 1e-5).unwrap_err();
    assert!(e.to_string().contains("123456.789"), "{e}");
    assert_eq!(e.private_detail(), None);
}

// ---------------------------------------------------------------------------------------
// DP-Forward: non-finite private rows are sanitised to the zero row, never refused.

fn dp_forward_params(region: ClipRegion) -> DpForwardParams {
    DpForwardParams {
        budget: PrivacyBudget::new(4.0, 1e-5).unwrap(),
        releases: 1,
        clip_norm: 1.0,
        region,
        mode: ClipMode::Clip,
        neighbours: match region {
            ClipRegion::Frobenius => Neighbours::Sequence,
            ClipRegion::Rows => Neighbours::Tokens(1),
        },
        position: NoisePosition::Embedding,
        tokens: 2,
        dim: 3,
        rule: SensitivityRule::Derived,
        noise_mode: NoiseMode::Exact,
    }
}

/// Releases `x` (4 × 3: two sequences of two tokens) with a fresh ledger; returns the
/// output, the private sanitised-row count and the ledger's charge count.
fn release_hidden(x: &[f64], p: &DpForwardParams) -> (Vec<f64>, usize, u64) {
    let mut out = x.to_vec();
    let unit = p.privacy_unit().unwrap();
    let mut ledger = Ledger::new_approx(unit, PrivacyBudget::new(8.0, 1e-4).unwrap());
    let report = dp_forward_keyed(
        MatMut::from_row_major(&mut out, 4, 3).unwrap(),
        p,
        &NoiseFactors::Iid,
        Draw { key: &key(), stream: 5 },
        0,
        Some(&mut ledger),
        &mut [],
    )
    .expect("non-finite private rows are sanitised, not refused");
    (out, report.private_sanitized_rows(), ledger.charges())
}

#[test]
fn dp_forward_releases_a_non_finite_row_as_the_zero_row() {
    let base = [0.3, -0.2, 0.9, 1.5, 0.1, -0.4, 0.2, 0.2, 0.2, -2.0, 3.0, 0.5];
    for region in [ClipRegion::Frobenius, ClipRegion::Rows] {
        let p = dp_forward_params(region);
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            // Row 1 (sequence 0) holds a non-finite entry; the same input with row 1 zeroed
            // must give the bit-identical release (same key, stream and elements).
            let mut x = base;
            x[4] = bad;
            let mut zeroed = base;
            zeroed[3..6].fill(0.0);
            let (got, sanitized, charges) = release_hidden(&x, &p);
            let (want, none, want_charges) = release_hidden(&zeroed, &p);
            assert!(got.iter().all(|v| v.is_finite()), "{region:?} {bad}: {got:?}");
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{region:?} {bad}");
            assert_eq!((sanitized, none), (1, 0), "{region:?} {bad}");
            assert_eq!((charges, want_charges), (1, 1), "charged like any release");
        }
    }
}

#[test]
fn clip_hidden_sanitises_non_finite_rows_into_the_ball() {
    // Two sequences of two f32 rows; two rows hold NaN / −∞. Every other row is clipped
    // as usual, the bad rows become zero, and each block (Frobenius) has norm ≤ C.
    let mut x = [3.0f32, 4.0, f32::NAN, 1.0, 0.3, 0.4, 0.0, f32::NEG_INFINITY];
    let r = clip_hidden(
        MatMut::from_row_major(&mut x, 4, 2).unwrap(),
        2,
        ClipRegion::Frobenius,
        ClipMode::Clip,
        1.0,
    )
    .unwrap();
    assert_eq!(&x[2..4], &[0.0, 0.0]);
    assert_eq!(&x[6..8], &[0.0, 0.0]);
    assert_eq!(&x[4..6], &[0.3, 0.4], "a block inside the ball is untouched");
    let norm0 = f64::from(x[0]).hypot(f64::from(x[1]));
    assert!(norm0 <= 1.0 && norm0 > 0.999, "{norm0}");
    assert!((f64::from(x[0]) / f64::from(x[1]) - 0.75).abs() < 1e-6);
    assert_eq!(r.private_sanitized_rows(), 2);
    assert_eq!(r.scaled, 1);
}
