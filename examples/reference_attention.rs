//! Exact attention with the float64 reference on a `[batch, seq, heads, dim]` buffer viewed
//! as `[batch, heads, seq, dim]` (no copy), with a causal mask.
//!
//! Run: `cargo run --example reference_attention`

use dpattn::reference_attention::{reference_attention, reference_attention_scratch_len};
use dpattn::{BatchedMut, BatchedRef, Layout4, Mask, Scale};

fn main() -> Result<(), dpattn::Error> {
    let (batch, seq, heads, dim) = (1, 4, 2, 3);
    // A fused projection output in [batch, seq, heads, dim] order.
    let x: Vec<f32> =
        (0..batch * seq * heads * dim).map(|i| ((i * 7 % 11) as f32 - 5.0) / 5.0).collect();
    let bhsd = Layout4::new([batch, heads, seq, dim], [seq * heads * dim, dim, heads * dim, 1])?;
    let qkv = BatchedRef::new(&x, bhsd)?;
    let mut out = vec![0.0f64; batch * heads * seq * dim];
    let mut scratch = vec![0.0f64; reference_attention_scratch_len(seq)];
    reference_attention(
        BatchedMut::contiguous(&mut out, [batch, heads, seq, dim])?,
        qkv,
        qkv,
        qkv,
        Mask { causal: true, key_padding: None },
        Scale::InvSqrtDim,
        &mut scratch,
    )?;
    for h in 0..heads {
        println!("head {h}:");
        for s in 0..seq {
            let row = &out[(h * seq + s) * dim..(h * seq + s + 1) * dim];
            println!("  token {s}: {row:+.6?}");
        }
    }
    // Causal: token 0 attends only to itself, so its output is its own value row.
    let v0 = qkv.head(0, 0).row(0);
    assert!(out[..dim].iter().zip(v0).all(|(o, &v)| *o == f64::from(v)));
    Ok(())
}
