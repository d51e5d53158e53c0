//! Grouped-query and multi-query attention: key/value heads shared by `heads / kv_heads`
//! consecutive query heads. The result must be bit for bit that of the same call on the
//! expanded problem (every key/value head repeated for its group, as `repeat_interleave`
//! builds it), which the other attention tests check against the float64 reference; the
//! same holds for logit/output noise and for output perturbation, whose release on the
//! expanded problem is the one PRIVACY §2 analyses (one token changes its row in every
//! head of either form).

use dpattn::attention::{AttentionParams, attention, attention_scratch_len, attention_threaded};
use dpattn::noisy_attention::{NoiseSpec, NoiseStream, noisy_attention};
use dpattn::output_perturbation::{
    OutputPerturbationParams, output_perturbation_attention_keyed, output_perturbation_scratch_len,
};
use dpattn::sampling::NoiseKey;
use dpattn::session::Draw;
use dpattn::{
    BatchedMut, BatchedRef, Error, Kernel, Mask, NoiseMode, PrivacyBudget, Scale, ScoreFn,
};

const KEY: NoiseKey = NoiseKey::for_replay([0x47; 32]);

fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 - 1.0).collect()
}

/// `[b, kv, s, d]` → `[b, kv·group, s, d]`, each head repeated `group` times in a row.
fn expand(x: &[f32], [b, kv, s, d]: [usize; 4], group: usize) -> Vec<f32> {
    let head = s * d;
    let mut out = Vec::with_capacity(x.len() * group);
    for bi in 0..b {
        for h in 0..kv {
            let start = (bi * kv + h) * head;
            for _ in 0..group {
                out.extend_from_slice(&x[start..start + head]);
            }
        }
    }
    out
}

struct Problem {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    qs: [usize; 4],
    kvs: [usize; 4],
    group: usize,
}

impl Problem {
    fn new(b: usize, heads: usize, kv: usize, sq: usize, sk: usize, d: usize) -> Self {
        let (qs, kvs) = ([b, heads, sq, d], [b, kv, sk, d]);
        Self {
            q: data(b * heads * sq * d, 1),
            k: data(b * kv * sk * d, 2),
            v: data(b * kv * sk * d, 3),
            qs,
            kvs,
            group: heads / kv,
        }
    }

    /// `f(q, k, v, out)` on the grouped problem and on the expanded one.
    fn both(
        &self,
        f: impl Fn(BatchedRef<'_, f32>, BatchedRef<'_, f32>, BatchedRef<'_, f32>, BatchedMut<'_, f32>),
    ) -> (Vec<f32>, Vec<f32>) {
        let [b, h, sq, d] = self.qs;
        let full = [b, h, self.kvs[2], d];
        let (ke, ve) =
            (expand(&self.k, self.kvs, self.group), expand(&self.v, self.kvs, self.group));
        let mut grouped = vec![f32::NAN; b * h * sq * d];
        let mut expanded = vec![f32::NAN; b * h * sq * d];
        let q = BatchedRef::contiguous(&self.q, self.qs).unwrap();
        f(
            q,
            BatchedRef::contiguous(&self.k, self.kvs).unwrap(),
            BatchedRef::contiguous(&self.v, self.kvs).unwrap(),
            BatchedMut::contiguous(&mut grouped, self.qs).unwrap(),
        );
        f(
            q,
            BatchedRef::contiguous(&ke, full).unwrap(),
            BatchedRef::contiguous(&ve, full).unwrap(),
            BatchedMut::contiguous(&mut expanded, self.qs).unwrap(),
        );
        (grouped, expanded)
    }
}

fn same_bits(a: &[f32], b: &[f32], ctx: &str) {
    assert_eq!(a.len(), b.len(), "{ctx}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "{ctx}: element {i}: {x} vs {y}");
    }
}

#[test]
fn grouped_query_attention_is_the_expanded_problem_bit_for_bit() {
    let kernels: Vec<Kernel> =
        [Kernel::Portable, Kernel::Avx2Fma].into_iter().filter(|k| k.resolve().is_ok()).collect();
    // (batch, query heads, kv heads, s_q, s_k, d): MQA (kv = 1), GQA groups of 2 and 4, and
    // the ordinary case (kv = heads), with more than one 96-row tile of queries.
    for (b, h, kv, sq, sk, d) in
        [(2, 4, 1, 5, 7, 8), (1, 8, 2, 130, 33, 16), (2, 8, 4, 3, 100, 4), (1, 3, 3, 4, 4, 2)]
    {
        let p = Problem::new(b, h, kv, sq, sk, d);
        let padding: Vec<bool> = (0..b * sk).map(|i| i % 5 != 1).collect();
        for kernel in &kernels {
            for (causal, padded) in [(false, false), (true, false), (false, true)] {
                let params = AttentionParams {
                    mask: Mask { causal, key_padding: padded.then_some(&padding[..]) },
                    scale: Scale::InvSqrtDim,
                    score: ScoreFn::Exp,
                    kernel: *kernel,
                };
                let len = attention_scratch_len(d, d).unwrap();
                let (g, e) = p.both(|q, k, v, o| {
                    attention(o, q, k, v, &params, &mut vec![0f32; len]).unwrap()
                });
                let ctx = format!(
                    "{b}x{h}/{kv} sq {sq} sk {sk} d {d} {kernel:?} causal {causal} padded {padded}"
                );
                assert!(g.iter().all(|x| x.is_finite()), "{ctx}");
                same_bits(&g, &e, &ctx);
                let (t, _) = p.both(|q, k, v, o| {
                    attention_threaded(o, q, k, v, &params, 2, &mut vec![0f32; 2 * len]).unwrap()
                });
                same_bits(&t, &e, &format!("{ctx}, 2 threads"));
            }
        }
    }
}

#[test]
fn two_query_heads_share_one_key_value_head() {
    // Worked by hand: logits 0 and ln 3 give weights 1/4, 3/4 (head 0: 17.5); the second
    // query head's logits are 0 and 0 (its query is 0): weights 1/2, 1/2 (15).
    let (q, k, v) = ([1.0f32, 0.0], [0.0f32, 3f32.ln()], [10.0f32, 20.0]);
    let mut out = [0.0f32; 2];
    let params = AttentionParams { scale: Scale::Custom(1.0), ..Default::default() };
    attention(
        BatchedMut::contiguous(&mut out, [1, 2, 1, 1]).unwrap(),
        BatchedRef::contiguous(&q, [1, 2, 1, 1]).unwrap(),
        BatchedRef::contiguous(&k, [1, 1, 2, 1]).unwrap(),
        BatchedRef::contiguous(&v, [1, 1, 2, 1]).unwrap(),
        &params,
        &mut vec![0f32; attention_scratch_len(1, 1).unwrap()],
    )
    .unwrap();
    assert!((out[0] - 17.5).abs() < 1e-5 && (out[1] - 15.0).abs() < 1e-5, "{out:?}");
}

#[test]
fn noisy_attention_and_output_perturbation_are_the_expanded_release() {
    let p = Problem::new(2, 6, 2, 4, 50, 8);
    let out_sigma = [0.25f64, 0.5, 0.75, 1.0, 1.25, 1.5];
    let logit_sigma = [0.1f64; 6];
    let spec = NoiseSpec {
        key: &KEY,
        output: Some(NoiseStream { stream: 3, sigma: &out_sigma }),
        logits: Some(NoiseStream { stream: 4, sigma: &logit_sigma }),
    };
    let len = attention_scratch_len(8, 8).unwrap();
    let (g, e) = p.both(|q, k, v, o| {
        noisy_attention(o, q, k, v, &AttentionParams::default(), &spec, &mut vec![0f32; len])
            .unwrap()
    });
    same_bits(&g, &e, "noisy attention");

    for mode in [NoiseMode::Exact, NoiseMode::UnsafeFloat] {
        let params = OutputPerturbationParams {
            key_norm: 1.5,
            value_norm: 1.0,
            budget: PrivacyBudget::new(1.0, 1e-6).unwrap(),
            scale: Scale::InvSqrtDim,
            score: ScoreFn::Exp,
            key_padding: None,
            kernel: Kernel::Auto,
            noise_mode: mode,
        };
        let len = output_perturbation_scratch_len(8, 8).unwrap();
        let sigmas = std::cell::RefCell::new(Vec::new());
        let (g, e) = p.both(|q, k, v, o| {
            let mut sigma = [0f64; 12]; // batch · query heads
            output_perturbation_attention_keyed(
                o,
                q,
                k,
                v,
                &params,
                Draw { key: &KEY, stream: 9 },
                None,
                &mut sigma,
                &mut vec![0f32; len],
            )
            .unwrap();
            sigmas.borrow_mut().push(sigma);
        });
        same_bits(&g, &e, &format!("output perturbation {mode:?}"));
        let s = sigmas.borrow();
        assert_eq!(s[0], s[1], "the calibration does not depend on how K and V are stored");
    }
}

#[test]
fn key_value_heads_must_divide_the_query_heads() {
    let (q, kv) = (vec![0.5f32; 6 * 2 * 4], vec![0.5f32; 4 * 3 * 4]);
    let len = attention_scratch_len(4, 4).unwrap();
    let mut out = vec![0f32; q.len()];
    let call = |kshape: [usize; 4], vshape: [usize; 4], out: &mut [f32]| {
        attention(
            BatchedMut::contiguous(out, [1, 6, 2, 4]).unwrap(),
            BatchedRef::contiguous(&q, [1, 6, 2, 4]).unwrap(),
            BatchedRef::contiguous(&kv, kshape).unwrap(),
            BatchedRef::contiguous(&kv, vshape).unwrap(),
            &AttentionParams::default(),
            &mut vec![0f32; len],
        )
    };
    // 4 key/value heads do not divide 6 query heads.
    match call([1, 4, 3, 4], [1, 4, 3, 4], &mut out) {
        Err(Error::ShapeMismatch { arg: "k", expected: 6, got: 4, .. }) => {}
        other => panic!("{other:?}"),
    }
    // k and v must have the same number of heads.
    match call([1, 2, 6, 4], [1, 3, 4, 4], &mut out) {
        Err(Error::ShapeMismatch { arg: "v", .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(out.iter().all(|&x| x == 0.0), "out is untouched on error");
    // 3 heads of 4 keys, 2 heads of 6 keys: both divide 6.
    call([1, 3, 4, 4], [1, 3, 4, 4], &mut out).unwrap();
    call([1, 2, 6, 4], [1, 2, 6, 4], &mut out).unwrap();
}
