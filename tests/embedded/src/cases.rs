//! The computations of the parity run, shared word for word by the firmware (on an emulated
//! Cortex-M4F) and by the host check (`src/embedded_check.rs` of the root crate, on x86-64):
//! exact attention (the float64 reference and the portable `f32` kernel), a DP release with
//! the floating-point-safe noise charged to a ledger, a grid release and exact discrete
//! Gaussian draws (both samplers of the discrete Gaussian), and the Gaussian calibrations.
//!
//! Each result is one line, `<kind> <name> <value>`: kind `E` values are integers or the
//! bit patterns of floats and must match **bit for bit** (the exact and grid outputs, the
//! ledger); kind `A` values are decimal floats that must agree to a relative 1e-13 (values
//! computed through `exp`, `log`, `erfc`: both targets use the same pure-Rust `libm`, but
//! the Cortex-M4F computes `f64` in software and `f32` in its FPU, so a difference there
//! would be a platform difference we want to see, within a stated tolerance). Everything
//! is allocation-free: no heap on the firmware.

use core::fmt::{self, Write};

use dpattn_core::accounting::ledger::{Amount, Ledger};
use dpattn_core::accounting::privacy_unit::PrivacyUnit;
use dpattn_core::attention::{AttentionParams, attention, attention_scratch_len};
use dpattn_core::calibration::gaussian_mechanism::{
    analytic_gaussian_sigma, classical_gaussian_sigma,
};
use dpattn_core::grid_release::{GaussianGrid, GaussianGridSpec, GridFormat};
use dpattn_core::output_perturbation::{
    OutputPerturbationParams, output_perturbation_attention_keyed, output_perturbation_scratch_len,
};
use dpattn_core::reference_attention::{reference_attention, reference_attention_scratch_len};
use dpattn_core::sampling::{DiscreteGaussian, ExactSampler, KeyedStream, NoiseKey};
use dpattn_core::session::Draw;
use dpattn_core::{
    BatchedMut, BatchedRef, Kernel, Mask, NoiseMode, PrivacyBudget, Result, Scale, ScoreFn,
};

/// Query rows, key rows, head dimension (one batch element, two heads).
pub const SHAPE_Q: [usize; 4] = [1, 2, 3, 8];
/// Key and value shape.
pub const SHAPE_K: [usize; 4] = [1, 2, 5, 8];
const NQ: usize = 2 * 3 * 8;
const NK: usize = 2 * 5 * 8;

/// Deterministic inputs: a fixed integer recurrence mapped to `[-1, 1)` (exact in `f32`).
fn fill(out: &mut [f32], seed: u32) {
    let mut s = seed;
    for x in out {
        s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        *x = ((s >> 16) as i32 - 32768) as f32 / 32768.0;
    }
}

/// The fixed inputs `q`, `k`, `v` (`SHAPE_Q`, `SHAPE_K`, `SHAPE_K`).
pub(crate) fn inputs() -> ([f32; NQ], [f32; NK], [f32; NK]) {
    let (mut q, mut k, mut v) = ([0f32; NQ], [0f32; NK], [0f32; NK]);
    fill(&mut q, 1);
    fill(&mut k, 2);
    fill(&mut v, 3);
    (q, k, v)
}

/// Runs every case, writing one line per result to `w`. An error of the library is
/// written as a line `E <name> error: <message>` (so that a platform that errs where the
/// other does not shows as a mismatch) and the run goes on.
pub fn run(w: &mut dyn Write) -> fmt::Result {
    let (q, k, v) = inputs();
    report(w, "reference_attention", reference(&q, &k, &v))?;
    report(w, "portable_attention", portable(&q, &k, &v))?;
    report(w, "output_perturbation", release(&q, &k, &v))?;
    report(w, "grid_release", grid())?;
    report(w, "discrete_gaussian", discrete())?;
    report(w, "calibration", calibration())?;
    Ok(())
}

/// A case's lines, or one error line.
pub(crate) type Lines = Result<([(char, f64); 64], usize)>;

fn report(w: &mut dyn Write, name: &str, lines: Lines) -> fmt::Result {
    let (values, n) = match lines {
        Ok(lines) => lines,
        Err(e) => return writeln!(w, "E {name} error: {e}"),
    };
    for (i, &(kind, x)) in values[..n].iter().enumerate() {
        match kind {
            'E' => writeln!(w, "E {name}[{i}] {:016x}", x.to_bits())?,
            _ => writeln!(w, "A {name}[{i}] {x:e}")?,
        }
    }
    Ok(())
}

/// Collects up to 64 `(kind, value)` pairs.
struct Out {
    values: [(char, f64); 64],
    n: usize,
}

impl Out {
    fn new() -> Self {
        Out { values: [('E', 0.0); 64], n: 0 }
    }
    /// Panics past 64 values (a case that grows must grow the array, not lose values).
    fn push(&mut self, kind: char, x: f64) {
        self.values[self.n] = (kind, x);
        self.n += 1;
    }
    fn done(self) -> Lines {
        Ok((self.values, self.n))
    }
}

/// The float64 reference attention (through `exp`), 48 outputs.
fn reference(q: &[f32], k: &[f32], v: &[f32]) -> Lines {
    let mut out = [0f64; NQ];
    let mut scratch = [0f64; 16];
    let scratch = &mut scratch[..reference_attention_scratch_len(SHAPE_K[2])];
    reference_attention(
        BatchedMut::contiguous(&mut out, SHAPE_Q)?,
        BatchedRef::contiguous(q, SHAPE_Q)?,
        BatchedRef::contiguous(k, SHAPE_K)?,
        BatchedRef::contiguous(v, SHAPE_K)?,
        Mask::NONE,
        Scale::InvSqrtDim,
        scratch,
    )?;
    let mut o = Out::new();
    out.iter().for_each(|&x| o.push('A', x));
    o.done()
}

/// The portable `f32` kernel (the same summation order on every target), causal.
fn portable(q: &[f32], k: &[f32], v: &[f32]) -> Lines {
    let mut out = [0f32; NQ];
    let mut scratch = [0f32; 10240]; // attention_scratch_len(8, 8) = 10176
    let len = attention_scratch_len(8, 8)?;
    let params = AttentionParams {
        mask: Mask { causal: true, key_padding: None },
        scale: Scale::InvSqrtDim,
        score: ScoreFn::Exp,
        kernel: Kernel::Portable,
    };
    attention(
        BatchedMut::contiguous(&mut out, SHAPE_Q)?,
        BatchedRef::contiguous(q, SHAPE_Q)?,
        BatchedRef::contiguous(k, SHAPE_K)?,
        BatchedRef::contiguous(v, SHAPE_K)?,
        &params,
        &mut scratch[..len],
    )?;
    let mut o = Out::new();
    out.iter().for_each(|&x| o.push('A', f64::from(x)));
    o.done()
}

/// Output-perturbation DP cross-attention in its default exact mode (public grid, exact
/// discrete Gaussian noise), under a fixed replay key, charged to an `(ε, δ)` ledger: the
/// released `f32` values, each head's `σ` and the ledger's remaining budget.
pub(crate) fn release(q: &[f32], k: &[f32], v: &[f32]) -> Lines {
    let mut out = [0f32; NQ];
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
        BatchedMut::contiguous(&mut out, SHAPE_Q)?,
        BatchedRef::contiguous(q, SHAPE_Q)?,
        BatchedRef::contiguous(k, SHAPE_K)?,
        BatchedRef::contiguous(v, SHAPE_K)?,
        &params,
        Draw { key: &key, stream: 3 },
        Some(&mut ledger),
        &mut sigma,
        &mut scratch[..len],
    )?;
    let mut o = Out::new();
    out.iter().for_each(|&x| o.push('E', f64::from(x)));
    sigma.iter().for_each(|&s| o.push('E', s));
    if let Amount::Approx { epsilon, delta } = ledger.remaining() {
        o.push('E', epsilon);
        o.push('E', delta);
    }
    o.done()
}

/// A Gaussian grid release of 8 fixed values (grid and σ from the calibration).
fn grid() -> Lines {
    let spec = GaussianGridSpec {
        l2_sensitivity: 1.0,
        dimension: 8,
        computation_error: 0.0,
        value_bound: 4.0,
        format: GridFormat::F32,
    };
    let g = GaussianGrid::calibrate(&spec, 3.0)?;
    let mut values = [0.5, -1.25, 3.0, 0.0, 2.75, -4.0, 1e-3, -0.3];
    let key = NoiseKey::for_replay([9; 32]);
    g.release_keyed(&KeyedStream::new(&key, 11), 100, &mut values)?;
    let mut o = Out::new();
    o.push('E', f64::from(g.grid().exponent()));
    o.push('E', g.sigma());
    values.iter().for_each(|&x| o.push('E', x));
    o.done()
}

/// Exact discrete Gaussian draws: `σ = 3.5` (Karney/CKS20 rejection) and `σ = 5000`
/// (the cell algorithm), elements 0..8 of one keyed stream.
fn discrete() -> Lines {
    let key = NoiseKey::for_replay([5; 32]);
    let stream = KeyedStream::new(&key, 2);
    let mut o = Out::new();
    for sigma in [3.5, 5000.0] {
        let dg = DiscreteGaussian::from_f64(sigma)?;
        for i in 0..8 {
            o.push('E', dg.sample_at(&stream, i)? as f64);
        }
    }
    o.done()
}

/// The classical and analytic Gaussian calibrations at three `(ε, δ)`.
fn calibration() -> Lines {
    let mut o = Out::new();
    for (eps, delta) in [(1.0, 1e-5), (0.1, 1e-6), (8.0, 1e-9)] {
        o.push('A', analytic_gaussian_sigma(eps, delta, 1.0)?);
        o.push('A', classical_gaussian_sigma(eps.min(0.99), delta, 1.0)?);
    }
    o.done()
}
