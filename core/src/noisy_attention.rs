//! Attention with Gaussian noise drawn inside the kernel: on the outputs (per-head `σ`) and,
//! optionally, on the logits before the score function. The CPU reference that the GPU
//! kernels reproduce.
//!
//! **Guarantee.** *No privacy claim on its own*: `σ` is the caller's choice, and this
//! module does not bound any sensitivity (the calibrated mechanism built on it is
//! [`crate::output_perturbation`]). What it guarantees is **addressable, replayable noise**:
//!
//! * output noise: element `(b, h, i, c)` of `out` receives element
//!   `((b · heads + h) · s_q + i) · d_v + c` of the `f64` Gaussian draw
//!   `(key, output.stream)` — `Gaussian(σ_{b,h})` of `docs/RANDOMNESS.md` §3 — rounded
//!   once to the compute precision and added after normalisation. Every output element
//!   gets its noise, including rows that see no key;
//! * logit noise: logit `(b, h, i, j)` (already multiplied by the scale) receives element
//!   `((b · heads + h) · s_q + i) · s_k + j` of the draw `(key, logits.stream)`, before the
//!   mask and the score function; masked logits stay masked and their noise is unused.
//!
//! The indices are logical (row-major over the logical shapes), never memory offsets or
//! thread ids, so any implementation (the GPU kernel, an auditor with the key) reproduces
//! the noise exactly; the outputs then agree up to floating-point rounding of the
//! attention itself. Neighbour relation and paper section: none (a building block). The
//! two draws must use different stream ids (one `(key, stream)` pair serves one draw).

use crate::attention::dispatch::Operands;
use crate::attention::tiled::NoiseDraw;
use crate::attention::{AttentionParams, Extras, execute_f32, execute_f64};
use crate::batched::{BatchedMut, BatchedRef};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::sampling::{KeyedStream, NoiseKey};

/// One noise draw: its stream id and `σ` per head (`heads` entries) or per
/// `(batch, head)` (`batch · heads` entries, row-major). `σ = 0` adds nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseStream<'a> {
    /// The draw's stream id under the spec's key.
    pub stream: u64,
    /// Standard deviations, each finite and `≥ 0`.
    pub sigma: &'a [f64],
}

/// Where the noise of a noisy attention call comes from.
#[derive(Debug, Clone, Copy)]
pub struct NoiseSpec<'a> {
    /// The 256-bit key of the noise stream.
    pub key: &'a NoiseKey,
    /// Noise on the attention outputs.
    pub output: Option<NoiseStream<'a>>,
    /// Noise on the scaled logits, before masking and the score function.
    pub logits: Option<NoiseStream<'a>>,
}

/// Attention with keyed Gaussian noise on the outputs and/or logits (see the module
/// documentation for exactly which noise element goes where). Shapes, scratch and errors
/// are those of [`attention`](crate::attention::attention()).
///
/// ```
/// use dpattn_core::attention::{AttentionParams, attention_scratch_len};
/// use dpattn_core::noisy_attention::{NoiseSpec, NoiseStream, noisy_attention};
/// use dpattn_core::sampling::{FixedWordSampler, Gaussian, KeyedStream, NoiseKey};
/// use dpattn_core::{BatchedMut, BatchedRef};
/// let x = [0.25f32; 2 * 4];
/// let view = BatchedRef::contiguous(&x, [1, 2, 2, 2])?; // 2 heads, 2 rows, d = 2
/// let key = NoiseKey::generate()?;
/// let sigma = [0.5, 0.0]; // head 1 stays exact
/// let spec = NoiseSpec { key: &key, output: Some(NoiseStream { stream: 3, sigma: &sigma }), logits: None };
/// let mut out = [0f32; 8];
/// let mut scratch = vec![0f32; attention_scratch_len(2, 2)?];
/// noisy_attention(BatchedMut::contiguous(&mut out, [1, 2, 2, 2])?, view, view, view,
///     &AttentionParams::default(), &spec, &mut scratch)?;
/// // Equal values: exact attention is 0.25; output element 1 carries noise element 1.
/// let z = Gaussian::new(0.5)?.sample_at::<f64>(&KeyedStream::new(&key, 3), 1)?;
/// assert!((out[1] - (0.25 + z) as f32).abs() < 1e-6);
/// assert_eq!(out[4], 0.25);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`attention`](crate::attention::attention()); [`Error::ShapeMismatch`] for a
/// `σ` slice that has neither `heads` nor `batch · heads` entries; [`Error::OutOfRange`]
/// for a negative or non-finite `σ`, or for equal output and logit stream ids.
pub fn noisy_attention<T: Element, O: Element>(
    out: BatchedMut<'_, O>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &AttentionParams<'_>,
    noise: &NoiseSpec<'_>,
    scratch: &mut [f32],
) -> Result<()> {
    with_noise(noise, |extras| {
        execute_f32(Operands { out, first: None, q, k, v }, params, extras, scratch)
    })
}

/// [`noisy_attention`] for the flattened heads `first_head ..` only, written to `out` of
/// shape `[1, n, s_q, d_v]` (as [`attention_heads`](crate::attention::attention_heads));
/// the noise is addressed by the global `(b, h)`, so splitting changes nothing.
///
/// ```
/// use dpattn_core::attention::{AttentionParams, attention_scratch_len};
/// use dpattn_core::noisy_attention::{NoiseSpec, NoiseStream, noisy_attention, noisy_attention_heads};
/// use dpattn_core::sampling::NoiseKey;
/// use dpattn_core::{BatchedMut, BatchedRef};
/// let x: Vec<f32> = (0..3 * 4 * 2).map(|i| (i % 5) as f32 * 0.1).collect();
/// let view = BatchedRef::contiguous(&x, [1, 3, 4, 2])?;
/// let key = NoiseKey::generate()?;
/// let (so, sl) = ([0.1, 0.2, 0.3], [0.2; 3]); // σ per head
/// let spec = NoiseSpec { key: &key, output: Some(NoiseStream { stream: 0, sigma: &so }),
///     logits: Some(NoiseStream { stream: 1, sigma: &sl }) };
/// let p = AttentionParams::default();
/// let mut scratch = vec![0f32; attention_scratch_len(2, 2)?];
/// let mut all = vec![0f32; x.len()];
/// noisy_attention(BatchedMut::contiguous(&mut all, [1, 3, 4, 2])?, view, view, view, &p, &spec, &mut scratch)?;
/// let mut last = vec![0f32; 8];
/// noisy_attention_heads(BatchedMut::contiguous(&mut last, [1, 1, 4, 2])?, view, view, view, &p, &spec, 2, &mut scratch)?;
/// assert_eq!(&all[16..], &last[..]);
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// Those of [`noisy_attention`] and [`attention_heads`](crate::attention::attention_heads).
#[allow(clippy::too_many_arguments)]
pub fn noisy_attention_heads<T: Element, O: Element>(
    out: BatchedMut<'_, O>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &AttentionParams<'_>,
    noise: &NoiseSpec<'_>,
    first_head: usize,
    scratch: &mut [f32],
) -> Result<()> {
    with_noise(noise, |extras| {
        execute_f32(Operands { out, first: Some(first_head), q, k, v }, params, extras, scratch)
    })
}

/// [`noisy_attention`] computed in `f64` (portable kernel, `f64` scratch of
/// [`attention_scratch_len`](crate::attention::attention_scratch_len) elements) with the
/// same noise elements, unrounded: the oracle for the `f32` and GPU kernels.
///
/// ```
/// use dpattn_core::attention::{AttentionParams, attention_scratch_len};
/// use dpattn_core::noisy_attention::{NoiseSpec, NoiseStream, noisy_attention, noisy_attention_f64};
/// use dpattn_core::sampling::NoiseKey;
/// use dpattn_core::{BatchedMut, BatchedRef};
/// let x: Vec<f32> = (0..16).map(|i| (i % 7) as f32 * 0.2 - 0.5).collect();
/// let view = BatchedRef::contiguous(&x, [1, 1, 8, 2])?;
/// let key = NoiseKey::generate()?;
/// let spec = NoiseSpec { key: &key, output: Some(NoiseStream { stream: 4, sigma: &[0.3] }),
///     logits: Some(NoiseStream { stream: 5, sigma: &[1.0] }) };
/// let p = AttentionParams::default();
/// let (mut o32, mut o64) = (vec![0f32; 16], vec![0f64; 16]);
/// noisy_attention(BatchedMut::contiguous(&mut o32, [1, 1, 8, 2])?, view, view, view, &p, &spec,
///     &mut vec![0f32; attention_scratch_len(2, 2)?])?;
/// noisy_attention_f64(BatchedMut::contiguous(&mut o64, [1, 1, 8, 2])?, view, view, view, &p, &spec,
///     &mut vec![0f64; attention_scratch_len(2, 2)?])?;
/// assert!(o32.iter().zip(&o64).all(|(a, b)| (f64::from(*a) - b).abs() < 1e-5));
/// # Ok::<(), dpattn_core::Error>(())
/// ```
///
/// # Errors
/// As [`noisy_attention`].
pub fn noisy_attention_f64<T: Element>(
    out: BatchedMut<'_, f64>,
    q: BatchedRef<'_, T>,
    k: BatchedRef<'_, T>,
    v: BatchedRef<'_, T>,
    params: &AttentionParams<'_>,
    noise: &NoiseSpec<'_>,
    scratch: &mut [f64],
) -> Result<()> {
    with_noise(noise, |extras| {
        execute_f64(Operands { out, first: None, q, k, v }, params, extras, scratch)
    })
}

/// Builds the keyed streams of `noise` (refusing equal stream ids) and runs `run` with the
/// kernel hooks that add them.
fn with_noise(noise: &NoiseSpec<'_>, run: impl FnOnce(Extras<'_>) -> Result<()>) -> Result<()> {
    if let (Some(o), Some(l)) = (noise.output, noise.logits)
        && o.stream == l.stream
    {
        return Err(Error::OutOfRange {
            name: "logit noise stream id",
            value: l.stream as f64,
            allowed: "any u64 other than the output noise stream id",
        });
    }
    let output = noise.output.map(|n| (KeyedStream::new(noise.key, n.stream), n.sigma));
    let logits = noise.logits.map(|n| (KeyedStream::new(noise.key, n.stream), n.sigma));
    run(Extras {
        logit_noise: draw(&logits),
        out_noise: draw(&output),
        out_grid: None,
        clamp: None,
    })
}

fn draw<'a>(d: &'a Option<(KeyedStream, &'a [f64])>) -> Option<NoiseDraw<'a>> {
    d.as_ref().map(|(stream, sigma)| NoiseDraw { stream, sigma })
}
