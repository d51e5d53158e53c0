//! Uniform permutations (Fisher–Yates with Lemire's unbiased bounded integers) against their
//! exact law, with fixed seeds at the significance level `ALPHA = 1e-6` of
//! `tests/support/stats.rs`.
//!
//! **Power.** The same χ² over the 120 permutations of 5 elements, with the same 120 000
//! draws (expected count 1000 per cell), must reject two classic bugs. Non-centralities
//! `λ = N Σ (q − p)² / p`, computed exactly from the buggy laws with rational arithmetic:
//! "swap with any index" (`j` uniform on `[0, n)` at every step: `5^5` equally likely paths
//! onto 120 permutations) has `λ ≈ 5958`; modulo bias from 5-bit words (`j = w mod (i + 1)`
//! with `w` uniform on `[0, 32)`) has `λ ≈ 939`. The critical value of `χ²₁₁₉` at `1e-6` is
//! about 207, and the statistic under the bug is about `119 + λ`, so both are rejected by a
//! wide margin (the 8-bit version, `λ ≈ 11`, would not be: bias that small needs more draws).

use crate::support;

use dpattn::sampling::{
    KeyedStream, NoiseKey, PermIndex, invert_permutation, lemire_below, permute_cols, permute_rows,
    permute_slice, sample_permutation, sample_permutation_keyed,
};
use dpattn::{Error, MatMut, MatRef};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use support::stats::*;

/// Lehmer-code rank of a permutation of `[0, n)`: a bijection onto `[0, n!)`.
fn rank(p: &[u32]) -> usize {
    let n = p.len();
    let mut r = 0;
    for i in 0..n {
        let smaller_after = p[i + 1..].iter().filter(|&&x| x < p[i]).count();
        r = r * (n - i) + smaller_after;
    }
    r
}

const DRAWS_5: usize = 120_000;

/// χ² of the ranks of `DRAWS_5` permutations of 5 elements against the uniform law on 120.
fn chi_square_of_s5(mut draw: impl FnMut(&mut [u32; 5])) -> Outcome {
    let mut counts = [0u64; 120];
    let mut p = [0u32; 5];
    for _ in 0..DRAWS_5 {
        draw(&mut p);
        counts[rank(&p)] += 1;
    }
    chi_square_gof(&counts, &[1.0 / 120.0; 120])
}

#[test]
fn lehmer_rank_is_a_bijection() {
    let mut seen = [false; 120];
    let mut p = [0u32, 1, 2, 3, 4];
    // Heap's algorithm over all 120 permutations.
    fn heap(k: usize, p: &mut [u32; 5], seen: &mut [bool; 120]) {
        if k == 1 {
            let r = rank(p);
            assert!(!seen[r]);
            seen[r] = true;
            return;
        }
        for i in 0..k {
            heap(k - 1, p, seen);
            if k.is_multiple_of(2) { p.swap(i, k - 1) } else { p.swap(0, k - 1) }
        }
    }
    heap(5, &mut p, &mut seen);
    assert!(seen.iter().all(|&s| s));
}

#[test]
fn all_120_permutations_of_five_are_equally_likely() {
    let mut rng = ChaCha20Rng::from_seed([51; 32]);
    let out = chi_square_of_s5(|p| sample_permutation(&mut rng, p).unwrap());
    eprintln!("S5 chi-square: {out:?}");
    assert!(out.accepts(), "{out:?}");
    assert_eq!(out.df, 119);
}

#[test]
fn swap_with_any_index_is_rejected() {
    let mut rng = ChaCha20Rng::from_seed([51; 32]);
    let out = chi_square_of_s5(|p| {
        for (k, x) in p.iter_mut().enumerate() {
            *x = k as u32;
        }
        for i in (0..5).rev() {
            let j = lemire_below(&mut rng, 5).unwrap() as usize; // bug: should be i + 1
            p.swap(i, j);
        }
    });
    eprintln!("swap-with-any chi-square: {out:?}");
    assert!(out.rejects(), "{out:?}");
}

#[test]
fn modulo_bias_from_short_words_is_rejected() {
    let mut rng = ChaCha20Rng::from_seed([51; 32]);
    let out = chi_square_of_s5(|p| {
        for (k, x) in p.iter_mut().enumerate() {
            *x = k as u32;
        }
        for i in (1..5).rev() {
            let w = rng.next_u32() >> 27; // 5-bit word
            let j = (w % (i as u32 + 1)) as usize; // bug: modulo bias
            p.swap(i, j);
        }
    });
    eprintln!("5-bit modulo chi-square: {out:?}");
    assert!(out.rejects(), "{out:?}");
}

#[test]
fn every_value_is_equally_likely_in_every_position_of_a_keyed_permutation_of_twenty() {
    // 20 000 keyed permutations, chained through the stream: each position's value is
    // multinomial(N, 1/20), tested by its own χ² with 19 degrees of freedom.
    const N: usize = 20;
    const DRAWS: usize = 20_000;
    let stream = KeyedStream::new(&NoiseKey::for_replay([52; 32]), 7);
    let mut counts = [[0u64; N]; N];
    let mut p = [0usize; N];
    let mut pos = 0u128;
    for _ in 0..DRAWS {
        let next = sample_permutation_keyed(&stream, pos, &mut p).unwrap();
        assert!(next >= pos + (N as u128 - 1));
        pos = next;
        for (position, &value) in p.iter().enumerate() {
            counts[position][value] += 1;
        }
    }
    // 19 bounded draws per permutation plus a handful of rejections in all.
    let words = pos - (DRAWS as u128) * 19;
    assert!(words < 10, "{words} rejections");
    let mut worst = 1.0f64;
    for row in &counts {
        let out = chi_square_gof(row, &[1.0 / N as f64; N]);
        worst = worst.min(out.p_value);
        assert!(out.accepts(), "{out:?}");
    }
    eprintln!("n = 20 positions: smallest p-value {worst:.3e}");
}

#[test]
fn bounded_integers_are_uniform_on_both_paths() {
    let mut rng = ChaCha20Rng::from_seed([53; 32]);
    // 32-bit path.
    let mut counts = [0u64; 7];
    for _ in 0..70_000 {
        counts[lemire_below(&mut rng, 7).unwrap() as usize] += 1;
    }
    let out = chi_square_gof(&counts, &[1.0 / 7.0; 7]);
    assert!(out.accepts(), "{out:?}");
    // 64-bit path: bound 3·2^33 + 3, bucketed into thirds (each third has probability
    // within 2^-33 of 1/3).
    let bound = 3 * (1u64 << 33) + 3;
    let mut thirds = [0u64; 3];
    for _ in 0..30_000 {
        let x = lemire_below(&mut rng, bound).unwrap();
        assert!(x < bound);
        thirds[(x / (bound / 3)) as usize] += 1;
    }
    let out = chi_square_gof(&thirds, &[1.0 / 3.0; 3]);
    assert!(out.accepts(), "{out:?}");
    assert!(matches!(lemire_below(&mut rng, 0), Err(Error::OutOfRange { .. })));
}

#[test]
fn apply_and_inverse_round_trip() {
    let mut rng = ChaCha20Rng::from_seed([54; 32]);
    for n in [0usize, 1, 2, 3, 17, 64] {
        let mut perm = vec![0u32; n];
        sample_permutation(&mut rng, &mut perm).unwrap();
        let mut inv = vec![0u32; n];
        invert_permutation(&perm, &mut inv).unwrap();
        let mut back = vec![0u32; n];
        invert_permutation(&inv, &mut back).unwrap();
        assert_eq!(back, perm);

        // Slices.
        let src: Vec<f64> = (0..n).map(|k| k as f64 * 1.5).collect();
        let mut shuffled = vec![0.0; n];
        permute_slice(&perm, &src, &mut shuffled).unwrap();
        for (j, &p) in perm.iter().enumerate() {
            assert_eq!(shuffled[j], src[p as usize]);
        }
        let mut restored = vec![0.0; n];
        permute_slice(&inv, &shuffled, &mut restored).unwrap();
        assert_eq!(restored, src);

        // Rows of a strided matrix (n × 3 in a buffer with row stride 5).
        let data: Vec<i64> = (0..(n * 5) as i64).collect();
        let m = MatRef::new(&data, n, 3, 5).unwrap();
        let mut buf = vec![-1i64; n * 4];
        permute_rows(&perm, m, MatMut::new(&mut buf, n, 3, 4).unwrap()).unwrap();
        let mut buf2 = vec![-1i64; n * 3];
        permute_rows(
            &inv,
            MatRef::new(&buf, n, 3, 4).unwrap(),
            MatMut::from_row_major(&mut buf2, n, 3).unwrap(),
        )
        .unwrap();
        for i in 0..n {
            assert_eq!(&buf2[i * 3..i * 3 + 3], m.row(i));
            assert_eq!(buf[i * 4 + 3], -1);
        }

        // Columns of a 2 × n matrix.
        let data: Vec<u8> = (0..2 * n).map(|k| k as u8).collect();
        let m = MatRef::from_row_major(&data, 2, n).unwrap();
        let mut c1 = vec![0u8; 2 * n];
        let mut c2 = vec![0u8; 2 * n];
        permute_cols(&perm, m, MatMut::from_row_major(&mut c1, 2, n).unwrap()).unwrap();
        for i in 0..2 {
            for j in 0..n {
                assert_eq!(c1[i * n + j], data[i * n + perm[j] as usize]);
            }
        }
        permute_cols(
            &inv,
            MatRef::from_row_major(&c1, 2, n).unwrap(),
            MatMut::from_row_major(&mut c2, 2, n).unwrap(),
        )
        .unwrap();
        assert_eq!(c2, data);
    }
}

#[test]
fn non_permutations_are_errors() {
    let mut inv = [0u32; 4];
    assert!(matches!(
        invert_permutation(&[0u32, 1, 1, 3], &mut inv),
        Err(Error::OutOfRange { value, .. }) if value == 2.0
    ));
    assert!(matches!(
        invert_permutation(&[0u32, 1, 4, 3], &mut inv),
        Err(Error::OutOfRange { value, .. }) if value == 4.0
    ));
    assert!(matches!(
        invert_permutation(&[0u32, 1, 2], &mut inv),
        Err(Error::ShapeMismatch { arg: "inv", .. })
    ));
    let mut dst = [0.0; 2];
    assert!(permute_slice(&[0usize, 2], &[1.0, 2.0], &mut dst).is_err());
    assert_eq!(dst, [0.0; 2]);
}

#[test]
fn keyed_permutations_are_reproducible_and_match_the_rng_draw() {
    let key = [55u8; 32];
    let stream = KeyedStream::new(&NoiseKey::for_replay(key), 3);
    let draw = |pos: u128| {
        let mut p = [0u64; 50];
        let next = sample_permutation_keyed(&stream, pos, &mut p).unwrap();
        (p, next)
    };
    let (a, next_a) = draw(1000);
    assert_eq!(draw(1000), (a, next_a));
    let (b, next_b) = draw(next_a);
    assert_ne!(a, b);
    assert!(next_b > next_a);

    // Chained keyed draws equal consecutive draws from one ChaCha20Rng at the same position.
    let mut rng = ChaCha20Rng::from_seed(key);
    rng.set_stream(3);
    rng.set_word_pos(1000);
    let mut p = [0u64; 50];
    sample_permutation(&mut rng, &mut p).unwrap();
    assert_eq!(p, a);
    assert_eq!(rng.get_word_pos(), next_a);
    sample_permutation(&mut rng, &mut p).unwrap();
    assert_eq!(p, b);

    // The index type does not change the draw.
    fn as_u64<I: PermIndex>(p: &[I]) -> Vec<u64> {
        p.iter().map(|&x| x.to_index() as u64).collect()
    }
    let mut p16 = [0u16; 50];
    let mut p32 = [0u32; 50];
    let mut pz = [0usize; 50];
    assert_eq!(sample_permutation_keyed(&stream, 1000, &mut p16).unwrap(), next_a);
    assert_eq!(sample_permutation_keyed(&stream, 1000, &mut p32).unwrap(), next_a);
    assert_eq!(sample_permutation_keyed(&stream, 1000, &mut pz).unwrap(), next_a);
    assert_eq!(as_u64(&p16), a);
    assert_eq!(as_u64(&p32), a);
    assert_eq!(as_u64(&pz), a);

    // n = 0 and n = 1 draw nothing.
    let mut empty: [u32; 0] = [];
    assert_eq!(sample_permutation_keyed(&stream, 9, &mut empty).unwrap(), 9);
    let mut one = [5u32];
    assert_eq!(sample_permutation_keyed(&stream, 9, &mut one).unwrap(), 9);
    assert_eq!(one, [0]);
}

#[test]
fn lengths_beyond_the_index_type_are_errors() {
    let mut big = vec![0u16; (1 << 16) + 1];
    let mut rng = ChaCha20Rng::from_seed([0; 32]);
    assert!(matches!(
        sample_permutation(&mut rng, &mut big),
        Err(Error::OutOfRange { name: "permutation length n", .. })
    ));
    let stream = KeyedStream::new(&NoiseKey::for_replay([0; 32]), 0);
    assert!(sample_permutation_keyed(&stream, 0, &mut big).is_err());
    // 2^16 elements fit (indices 0..=65535).
    sample_permutation(&mut rng, &mut big[..1 << 16]).unwrap();
    let mut seen = vec![false; 1 << 16];
    for &x in &big[..1 << 16] {
        assert!(!seen[x as usize]);
        seen[x as usize] = true;
    }
}
