//! The smallest useful firmware: one DP attention release (output perturbation, exact
//! mode, 3 query rows against 5 keys, d = 8, two heads) charged to a ledger. Its flash and
//! RAM (static, and the stack's high-water mark printed at the end) are the footprint
//! table of `docs/BENCHMARKS.md`.
#![no_std]
#![no_main]

#[path = "../support.rs"]
mod support;

use cortex_m_rt::entry;
use dpattn_core::accounting::ledger::Ledger;
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_core::output_perturbation::{
    OutputPerturbationParams, output_perturbation_attention_keyed, output_perturbation_scratch_len,
};
use dpattn_core::sampling::NoiseKey;
use dpattn_core::session::Draw;
use dpattn_core::{BatchedMut, BatchedRef, Kernel, NoiseMode, PrivacyBudget, Scale, ScoreFn};

const SQ: [usize; 4] = [1, 2, 3, 8];
const SK: [usize; 4] = [1, 2, 5, 8];

fn release() -> dpattn_core::Result<f32> {
    let (q, k, v) = ([0.25f32; 48], [0.5f32; 80], [-0.5f32; 80]);
    let mut out = [0f32; 48];
    let mut scratch = [0f32; 20480]; // output_perturbation_scratch_len(8, 8) = 20353
    let len = output_perturbation_scratch_len(8, 8)?;
    let params = OutputPerturbationParams {
        key_norm: 1.5,
        value_norm: 2.0,
        budget: PrivacyBudget::new(1.0, 1e-6)?,
        scale: Scale::InvSqrtDim,
        score: ScoreFn::Exp,
        key_padding: None,
        kernel: Kernel::Portable,
        noise_mode: NoiseMode::Exact,
    };
    let mut ledger = Ledger::new_approx(PrivacyUnit::TOKEN, PrivacyBudget::new(4.0, 1e-5)?);
    let key = NoiseKey::for_replay([7; 32]);
    let mut sigma = [0f64; 2]; // one per (batch element, head)
    output_perturbation_attention_keyed(
        BatchedMut::contiguous(&mut out, SQ)?,
        BatchedRef::contiguous(&q, SQ)?,
        BatchedRef::contiguous(&k, SK)?,
        BatchedRef::contiguous(&v, SK)?,
        &params,
        Draw { key: &key, stream: 0 },
        Some(&mut ledger),
        &mut sigma,
        &mut scratch[..len],
    )?;
    Ok(out.iter().sum())
}

#[entry]
fn main() -> ! {
    let painted = support::paint_stack();
    let mut out = support::Semihosting;
    let ok = release().is_ok();
    support::report_stack(&mut out, painted);
    support::exit(ok)
}
