//! `attention_threaded`: bit for bit `attention` for every thread count, shape, mask and
//! kernel tried (rows split into whole 96-row tiles per thread), and its argument errors.

use dpattn::attention::{AttentionParams, attention, attention_scratch_len, attention_threaded};
use dpattn::{BatchedMut, BatchedRef, Error, Kernel, Mask, Scale, ScoreFn};
use half::bf16;

/// A deterministic problem: `[b, h, s_q, d]` queries, `[b, h, s_k, d]` keys and values.
fn problem(b: usize, h: usize, sq: usize, sk: usize, d: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let make = |n: usize, seed: usize| -> Vec<f32> {
        (0..n).map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 - 1.0).collect()
    };
    (make(b * h * sq * d, 1), make(b * h * sk * d, 2), make(b * h * sk * d, 3))
}

fn run<T: dpattn::Element>(
    q: &[T],
    k: &[T],
    v: &[T],
    shape: [usize; 5],
    p: &AttentionParams<'_>,
    threads: Option<usize>,
) -> Vec<f32> {
    let [b, h, sq, sk, d] = shape;
    let mut out = vec![f32::NAN; b * h * sq * d];
    let o = BatchedMut::contiguous(&mut out, [b, h, sq, d]).unwrap();
    let q = BatchedRef::contiguous(q, [b, h, sq, d]).unwrap();
    let k = BatchedRef::contiguous(k, [b, h, sk, d]).unwrap();
    let v = BatchedRef::contiguous(v, [b, h, sk, d]).unwrap();
    let len = attention_scratch_len(d, d).unwrap();
    match threads {
        None => attention(o, q, k, v, p, &mut vec![0f32; len]).unwrap(),
        Some(t) => attention_threaded(o, q, k, v, p, t, &mut vec![0f32; t * len]).unwrap(),
    }
    out
}

#[test]
fn threaded_attention_is_bit_for_bit_the_single_threaded_one() {
    let kernels: Vec<Kernel> =
        [Kernel::Portable, Kernel::Avx2Fma].into_iter().filter(|k| k.is_available()).collect();
    // One long head (the tiles split across threads), rows not a multiple of 96, a causal
    // mask with s_q ≠ s_k, several heads and batches, short heads (run on one thread).
    for shape in [[1, 1, 500, 500, 64], [1, 1, 193, 300, 32], [2, 3, 97, 50, 16], [1, 2, 40, 70, 8]]
    {
        let (q, k, v) = problem(shape[0], shape[1], shape[2], shape[3], shape[4]);
        for &kernel in &kernels {
            for causal in [false, true] {
                let p = AttentionParams {
                    mask: Mask { causal, key_padding: None },
                    scale: Scale::InvSqrtDim,
                    score: ScoreFn::Exp,
                    kernel,
                };
                let want = run(&q, &k, &v, shape, &p, None);
                assert!(want.iter().all(|x| x.is_finite()));
                for threads in [1, 2, 3, 7] {
                    let got = run(&q, &k, &v, shape, &p, Some(threads));
                    let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{shape:?}, {kernel:?}, causal {causal}, {threads} threads");
                }
            }
        }
    }
    // bf16 inputs and the cosh score.
    let shape = [1, 1, 300, 200, 64];
    let (q, k, v) = problem(1, 1, 300, 200, 64);
    let b16 = |x: &[f32]| x.iter().map(|&e| bf16::from_f32(e)).collect::<Vec<bf16>>();
    let (q, k, v) = (b16(&q), b16(&k), b16(&v));
    let p = AttentionParams { score: ScoreFn::Cosh, ..AttentionParams::default() };
    assert_eq!(run(&q, &k, &v, shape, &p, None), run(&q, &k, &v, shape, &p, Some(2)));
}

#[test]
fn threaded_attention_refuses_bad_arguments_before_writing() {
    let (s, d) = (200, 8);
    let (q, k, v) = problem(1, 1, s, s, d);
    let mut out = vec![7f32; s * d];
    let len = attention_scratch_len(d, d).unwrap();
    let p = AttentionParams::default();
    let (qv, kv, vv) = (
        BatchedRef::contiguous(&q, [1, 1, s, d]).unwrap(),
        BatchedRef::contiguous(&k, [1, 1, s, d]).unwrap(),
        BatchedRef::contiguous(&v, [1, 1, s, d]).unwrap(),
    );
    let o = BatchedMut::contiguous(&mut out, [1, 1, s, d]).unwrap();
    let e = attention_threaded(o, qv, kv, vv, &p, 0, &mut vec![0f32; len]).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { name: "threads", .. }));
    let o = BatchedMut::contiguous(&mut out, [1, 1, s, d]).unwrap();
    let e = attention_threaded(o, qv, kv, vv, &p, 3, &mut vec![0f32; 3 * len - 1]).unwrap_err();
    assert_eq!(e, Error::ScratchTooSmall { needed: 3 * len, got: 3 * len - 1 });
    assert!(out.iter().all(|&x| x == 7.0));
}
