//! The float64 reference attention against closed forms derived by hand, structural
//! properties (masks, permutations, layouts, dtypes), and every input error.

use dpattn::reference_attention::{
    reference_attention, reference_attention_scratch_len, reference_attention_vec,
};
use dpattn::{BatchedMut, BatchedRef, Error, Layout4, Mask, Scale};
use half::{bf16, f16};

/// SplitMix64: deterministic test inputs (not noise; noise comes from ChaCha).
struct Inputs(u64);
impl Inputs {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next()).collect()
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "element {i}: {x} vs {y}");
    }
}

#[test]
fn single_key_returns_its_value_row() {
    let mut r = Inputs(1);
    let (q, k, v) = (r.vec(3 * 4), r.vec(4), r.vec(5));
    let out =
        reference_attention_vec(&q, &k, &v, [1, 1, 3, 4], 1, 5, Mask::NONE, Scale::InvSqrtDim)
            .unwrap();
    for row in out.chunks(5) {
        assert_eq!(row, &v[..]);
    }
}

#[test]
fn zero_query_averages_the_values() {
    let mut r = Inputs(2);
    let (k, v) = (r.vec(7 * 3), r.vec(7 * 2));
    let out =
        reference_attention_vec(&[0.0; 3], &k, &v, [1, 1, 1, 3], 7, 2, Mask::NONE, Scale::InvDim)
            .unwrap();
    let mean: Vec<f64> = (0..2).map(|c| (0..7).map(|j| v[j * 2 + c]).sum::<f64>() / 7.0).collect();
    close(&out, &mean, 1e-15);
}

#[test]
fn two_keys_match_the_sigmoid_form() {
    // out = v1 + (v2 - v1) * sigmoid(scale * (q·k2 - q·k1))
    let mut r = Inputs(3);
    for _ in 0..50 {
        let (q, k, v) = (r.vec(4), r.vec(8), r.vec(6));
        let scale = 0.5 + r.next().abs() * 3.0;
        let out = reference_attention_vec(
            &q,
            &k,
            &v,
            [1, 1, 1, 4],
            2,
            3,
            Mask::NONE,
            Scale::Custom(scale),
        )
        .unwrap();
        let dot = |j: usize| (0..4).map(|c| q[c] * k[j * 4 + c]).sum::<f64>();
        let w2 = sigmoid(scale * (dot(1) - dot(0)));
        let expect: Vec<f64> = (0..3).map(|c| v[c] + (v[3 + c] - v[c]) * w2).collect();
        close(&out, &expect, 1e-14);
    }
}

#[test]
fn large_logits_do_not_overflow() {
    // Logits 0 and 1000: exp(1000) overflows f64; the max shift must make this exact.
    let q = [1000.0f64];
    let k = [0.0f64, 1.0];
    let v = [3.0f64, -2.0];
    let out =
        reference_attention_vec(&q, &k, &v, [1, 1, 1, 1], 2, 1, Mask::NONE, Scale::Custom(1.0))
            .unwrap();
    assert_eq!(out, [-2.0]);
    let q = [-1000.0f64];
    let out =
        reference_attention_vec(&q, &k, &v, [1, 1, 1, 1], 2, 1, Mask::NONE, Scale::Custom(1.0))
            .unwrap();
    assert_eq!(out, [3.0]);
}

#[test]
fn causal_mask_self_attention() {
    let mut r = Inputs(4);
    let (q, k, v) = (r.vec(3 * 2), r.vec(3 * 2), r.vec(3));
    let causal = Mask { causal: true, key_padding: None };
    let out = reference_attention_vec(&q, &k, &v, [1, 1, 3, 2], 3, 1, causal, Scale::Custom(1.0))
        .unwrap();
    // Row 0 sees key 0 only; row 1 sees keys 0 and 1 (sigmoid form).
    assert_eq!(out[0], v[0]);
    let dot = |i: usize, j: usize| q[2 * i] * k[2 * j] + q[2 * i + 1] * k[2 * j + 1];
    let w = sigmoid(dot(1, 1) - dot(1, 0));
    assert!((out[1] - (v[0] + (v[1] - v[0]) * w)).abs() < 1e-15);
    // Row 2 sees everything: equal to unmasked attention for that row.
    let full =
        reference_attention_vec(&q, &k, &v, [1, 1, 3, 2], 3, 1, Mask::NONE, Scale::Custom(1.0))
            .unwrap();
    assert_eq!(out[2], full[2]);
}

#[test]
fn causal_mask_is_bottom_right_aligned_for_cross_attention() {
    let mut r = Inputs(5);
    let causal = Mask { causal: true, key_padding: None };
    // One query against four keys (decode): sees all keys.
    let (q, k, v) = (r.vec(2), r.vec(8), r.vec(4));
    let a =
        reference_attention_vec(&q, &k, &v, [1, 1, 1, 2], 4, 1, causal, Scale::InvSqrtDim).unwrap();
    let b = reference_attention_vec(&q, &k, &v, [1, 1, 1, 2], 4, 1, Mask::NONE, Scale::InvSqrtDim)
        .unwrap();
    assert_eq!(a, b);
    // Three queries, two keys: row 0 sees nothing (zero), row 1 sees key 0, row 2 both.
    let (q, k, v) = (r.vec(6), r.vec(4), r.vec(4));
    let out =
        reference_attention_vec(&q, &k, &v, [1, 1, 3, 2], 2, 2, causal, Scale::InvSqrtDim).unwrap();
    assert_eq!(&out[0..2], &[0.0, 0.0]);
    assert_eq!(&out[2..4], &v[0..2]);
    let full =
        reference_attention_vec(&q, &k, &v, [1, 1, 3, 2], 2, 2, Mask::NONE, Scale::InvSqrtDim)
            .unwrap();
    assert_eq!(&out[4..6], &full[4..6]);
}

#[test]
fn key_padding_equals_attention_on_the_kept_keys() {
    let mut r = Inputs(6);
    let (b, h, sq, sk, d, dv) = (2, 2, 3, 5, 4, 3);
    let (q, k, v) = (r.vec(b * h * sq * d), r.vec(b * h * sk * d), r.vec(b * h * sk * dv));
    let keep = [true, false, true, true, false, false, false, false, false, false];
    let mask = Mask { causal: false, key_padding: Some(&keep) };
    let out = reference_attention_vec(&q, &k, &v, [b, h, sq, d], sk, dv, mask, Scale::InvSqrtDim)
        .unwrap();
    // Batch 0: keys {0, 2, 3}, computed separately per head.
    for head in 0..h {
        let kept = [0usize, 2, 3];
        let base_k = head * sk * d;
        let base_v = head * sk * dv;
        let ks: Vec<f64> =
            kept.iter().flat_map(|&j| k[base_k + j * d..base_k + (j + 1) * d].to_vec()).collect();
        let vs: Vec<f64> =
            kept.iter().flat_map(|&j| v[base_v + j * dv..base_v + (j + 1) * dv].to_vec()).collect();
        let qs = &q[head * sq * d..(head + 1) * sq * d];
        let sub = reference_attention_vec(
            qs,
            &ks,
            &vs,
            [1, 1, sq, d],
            3,
            dv,
            Mask::NONE,
            Scale::InvSqrtDim,
        )
        .unwrap();
        close(&out[head * sq * dv..(head + 1) * sq * dv], &sub, 1e-15);
    }
    // Batch 1: every key padded, every output row is zero.
    assert!(out[h * sq * dv..].iter().all(|&x| x == 0.0));
}

#[test]
fn permuting_keys_and_values_together_changes_nothing() {
    let mut r = Inputs(7);
    let (sk, d, dv) = (6, 3, 2);
    let (q, k, v) = (r.vec(4 * d), r.vec(sk * d), r.vec(sk * dv));
    let perm = [3usize, 0, 5, 1, 4, 2];
    let kp: Vec<f64> = perm.iter().flat_map(|&j| k[j * d..(j + 1) * d].to_vec()).collect();
    let vp: Vec<f64> = perm.iter().flat_map(|&j| v[j * dv..(j + 1) * dv].to_vec()).collect();
    let a =
        reference_attention_vec(&q, &k, &v, [1, 1, 4, d], sk, dv, Mask::NONE, Scale::InvSqrtDim)
            .unwrap();
    let b =
        reference_attention_vec(&q, &kp, &vp, [1, 1, 4, d], sk, dv, Mask::NONE, Scale::InvSqrtDim)
            .unwrap();
    close(&a, &b, 1e-14);
}

#[test]
fn strided_and_broadcast_layouts_match_contiguous() {
    let mut r = Inputs(8);
    let (b, h, sq, sk, d) = (2, 3, 4, 5, 4);
    // q stored as [batch, seq, heads, dim]; k, v as one head broadcast to all heads.
    let q_bshd = r.vec(b * sq * h * d);
    let k_one = r.vec(b * sk * d);
    let v_one = r.vec(b * sk * d);
    let q_layout = Layout4::new([b, h, sq, d], [sq * h * d, d, h * d, 1]).unwrap();
    let kv_layout = Layout4::new([b, h, sk, d], [sk * d, 0, d, 1]).unwrap();
    let mut out = vec![0.0; b * h * sq * d];
    let mut scratch = vec![0.0; reference_attention_scratch_len(sk)];
    reference_attention(
        BatchedMut::contiguous(&mut out, [b, h, sq, d]).unwrap(),
        BatchedRef::new(&q_bshd, q_layout).unwrap(),
        BatchedRef::new(&k_one, kv_layout).unwrap(),
        BatchedRef::new(&v_one, kv_layout).unwrap(),
        Mask::NONE,
        Scale::InvSqrtDim,
        &mut scratch,
    )
    .unwrap();
    // The same computation on explicit contiguous copies.
    let mut qc = vec![0.0; b * h * sq * d];
    let mut kc = vec![0.0; b * h * sk * d];
    let mut vc = vec![0.0; b * h * sk * d];
    for bi in 0..b {
        for hi in 0..h {
            for s in 0..sq {
                for c in 0..d {
                    qc[((bi * h + hi) * sq + s) * d + c] = q_bshd[q_layout.offset(bi, hi, s, c)];
                }
            }
            for s in 0..sk {
                for c in 0..d {
                    kc[((bi * h + hi) * sk + s) * d + c] = k_one[kv_layout.offset(bi, hi, s, c)];
                    vc[((bi * h + hi) * sk + s) * d + c] = v_one[kv_layout.offset(bi, hi, s, c)];
                }
            }
        }
    }
    let expect =
        reference_attention_vec(&qc, &kc, &vc, [b, h, sq, d], sk, d, Mask::NONE, Scale::InvSqrtDim)
            .unwrap();
    assert_eq!(out, expect);
}

#[test]
fn half_precision_inputs_widen_exactly() {
    // Values that are exact in f16 and bf16 (multiples of 1/8 in [-2, 2]).
    let mut r = Inputs(9);
    let grid = |x: f64| (x * 16.0).round() / 8.0;
    let (q, k, v): (Vec<f64>, Vec<f64>, Vec<f64>) = (
        r.vec(12).into_iter().map(grid).collect(),
        r.vec(16).into_iter().map(grid).collect(),
        r.vec(16).into_iter().map(grid).collect(),
    );
    let shape = [1, 1, 3, 4];
    let want =
        reference_attention_vec(&q, &k, &v, shape, 4, 4, Mask::NONE, Scale::InvSqrtDim).unwrap();
    // The same problem with every input converted to element type T (exactly, on this grid).
    fn run_as<T: dpattn::Element>(
        conv: impl Fn(f64) -> T,
        q: &[f64],
        k: &[f64],
        v: &[f64],
    ) -> Vec<f64> {
        let c = |x: &[f64]| x.iter().map(|&a| conv(a)).collect::<Vec<T>>();
        reference_attention_vec(
            &c(q),
            &c(k),
            &c(v),
            [1, 1, 3, 4],
            4,
            4,
            Mask::NONE,
            Scale::InvSqrtDim,
        )
        .unwrap()
    }
    assert_eq!(run_as(|a| a as f32, &q, &k, &v), want);
    assert_eq!(run_as(f16::from_f64, &q, &k, &v), want);
    assert_eq!(run_as(bf16::from_f64, &q, &k, &v), want);
}

#[test]
fn scale_variants() {
    let mut r = Inputs(10);
    let (q, k, v) = (r.vec(2 * 4), r.vec(3 * 4), r.vec(3 * 2));
    let run = |s| reference_attention_vec(&q, &k, &v, [1, 1, 2, 4], 3, 2, Mask::NONE, s).unwrap();
    assert_eq!(run(Scale::InvSqrtDim), run(Scale::Custom(0.5)));
    assert_eq!(run(Scale::InvDim), run(Scale::Custom(0.25)));
    assert_ne!(run(Scale::InvDim), run(Scale::InvSqrtDim));
}

/// A valid call (q: [1,1,2,4], k: [1,1,3,4], v: [1,1,3,2]) that each error case below
/// breaks in exactly one way.
struct Call {
    k: [f64; 12],
    k_shape: [usize; 4],
    v_shape: [usize; 4],
    pad: Option<[bool; 4]>,
    scale: Scale,
    scratch_len: usize,
}

impl Call {
    fn valid() -> Self {
        Call {
            k: [0.25; 12],
            k_shape: [1, 1, 3, 4],
            v_shape: [1, 1, 3, 2],
            pad: None,
            scale: Scale::InvSqrtDim,
            scratch_len: 3,
        }
    }

    fn run(&self, out: &mut [f64]) -> Result<(), Error> {
        let (q, v) = ([0.5f64; 8], [1.0f64; 6]);
        let mut scratch = vec![0.0; self.scratch_len];
        let mask = Mask { causal: false, key_padding: self.pad.as_ref().map(|p| &p[..]) };
        reference_attention(
            BatchedMut::contiguous(out, [1, 1, 2, self.v_shape[3]]).unwrap(),
            BatchedRef::contiguous(&q, [1, 1, 2, 4]).unwrap(),
            BatchedRef::contiguous(&self.k, self.k_shape).unwrap(),
            BatchedRef::contiguous(&v, self.v_shape).unwrap(),
            mask,
            self.scale,
            &mut scratch,
        )
    }
}

#[test]
fn bad_inputs_are_errors_and_leave_the_output_untouched() {
    let mut out = [7.0f64; 4];
    assert_eq!(Call::valid().run(&mut out), Ok(()));
    out = [7.0; 4];
    // k with a different feature dimension.
    let c = Call { k_shape: [1, 1, 4, 3], ..Call::valid() };
    assert_eq!(
        c.run(&mut out),
        Err(Error::ShapeMismatch { arg: "k", axis: "dim", expected: 4, got: 3 })
    );
    // v with a different key count.
    let c = Call { v_shape: [1, 1, 2, 3], ..Call::valid() };
    assert_eq!(
        c.run(&mut [7.0; 6]),
        Err(Error::ShapeMismatch { arg: "v", axis: "seq", expected: 3, got: 2 })
    );
    // NaN in k (logical index 5).
    let mut c = Call::valid();
    c.k[5] = f64::NAN;
    let e = c.run(&mut out).unwrap_err();
    assert!(matches!(e, Error::PrivateNonFinite { arg: "k", .. }), "{e}");
    assert_eq!(e.private_detail().and_then(|d| d.index()), Some(5));
    // Short scratch.
    let c = Call { scratch_len: 2, ..Call::valid() };
    assert_eq!(c.run(&mut out), Err(Error::ScratchTooSmall { needed: 3, got: 2 }));
    // Bad scale and wrong padding length.
    let c = Call { scale: Scale::Custom(-1.0), ..Call::valid() };
    assert!(matches!(c.run(&mut out), Err(Error::OutOfRange { name: "scale", .. })));
    let c = Call { pad: Some([true; 4]), ..Call::valid() };
    assert!(matches!(
        c.run(&mut out),
        Err(Error::ShapeMismatch { arg: "key_padding", expected: 3, got: 4, .. })
    ));
    assert_eq!(out, [7.0; 4], "the output must not be written on error");
    // Zero-size keys.
    let (q, k, v, shape) = ([0.5f64; 8], [0.25f64; 12], [1.0f64; 6], [1, 1, 2, 4]);
    assert!(matches!(
        reference_attention_vec(&q, &[], &[], shape, 0, 2, Mask::NONE, Scale::InvSqrtDim),
        Err(Error::OutOfRange { name: "s_k", .. })
    ));
    // Wrong buffer length for a contiguous shape.
    assert!(matches!(
        reference_attention_vec(&q[..7], &k, &v, shape, 3, 2, Mask::NONE, Scale::InvSqrtDim),
        Err(Error::ShapeMismatch { arg: "data", .. })
    ));
}

#[test]
fn overflowing_logits_are_an_error_not_nan() {
    // Finite inputs whose products overflow f64: a +inf logit, all-(-inf) logits, and one of each.
    let v = [3.0f64, -2.0];
    for (q, k) in
        [([1e200f64], [1e200f64, 0.0]), ([-1e200], [1e200, 1e200]), ([1e200], [1e200, -1e200])]
    {
        let mut out = [9.0f64];
        let mut scratch = [0.0f64; 2];
        let r = reference_attention(
            BatchedMut::contiguous(&mut out, [1, 1, 1, 1]).unwrap(),
            BatchedRef::contiguous(&q, [1, 1, 1, 1]).unwrap(),
            BatchedRef::contiguous(&k, [1, 1, 2, 1]).unwrap(),
            BatchedRef::contiguous(&v, [1, 1, 2, 1]).unwrap(),
            Mask::NONE,
            Scale::Custom(1.0),
            &mut scratch,
        );
        assert!(
            matches!(r, Err(Error::PrivateNonFinite { arg: "logits", .. })),
            "{q:?} {k:?}: {r:?}"
        );
        assert_eq!(out, [9.0], "output untouched on error");
    }
    // A masked key may overflow: it is never used.
    let keep = [true, false];
    let mask = Mask { causal: false, key_padding: Some(&keep) };
    let out = reference_attention_vec(
        &[1e200],
        &[1.0, 1e200],
        &v,
        [1, 1, 1, 1],
        2,
        1,
        mask,
        Scale::Custom(1.0),
    )
    .unwrap();
    assert_eq!(out, [3.0]);
}

#[test]
fn extreme_values_stay_within_the_value_range() {
    // Convex combination of values near f64::MAX must not overflow in accumulation.
    let v = [f64::MAX, f64::MAX * 0.5, f64::MAX];
    let out = reference_attention_vec(
        &[0.0],
        &[1.0, 2.0, 3.0],
        &v,
        [1, 1, 1, 1],
        3,
        1,
        Mask::NONE,
        Scale::Custom(1.0),
    )
    .unwrap();
    let expect = f64::MAX * (2.5 / 3.0);
    assert!(out[0].is_finite() && ((out[0] - expect) / expect).abs() < 1e-15);
}

#[test]
fn causal_and_key_padding_combine() {
    // 3 queries, 3 keys, key 1 padded: row 0 -> {0}, row 1 -> {0}, row 2 -> {0, 2}.
    let mut r = Inputs(11);
    let (q, k, v) = (r.vec(3 * 2), r.vec(3 * 2), r.vec(3));
    let keep = [true, false, true];
    let mask = Mask { causal: true, key_padding: Some(&keep) };
    let out =
        reference_attention_vec(&q, &k, &v, [1, 1, 3, 2], 3, 1, mask, Scale::Custom(1.0)).unwrap();
    assert_eq!(&out[..2], &[v[0], v[0]]);
    let dot = |i: usize, j: usize| q[2 * i] * k[2 * j] + q[2 * i + 1] * k[2 * j + 1];
    let w = sigmoid(dot(2, 2) - dot(2, 0));
    assert!((out[2] - (v[0] + (v[2] - v[0]) * w)).abs() < 1e-15);
}
