//! The launch of the fused attention kernel as data: what [`noisy_attention_raw`] queues,
//! computed without a device (variant, grid, block, shared memory, the σ tables it uploads
//! and the bytes of the kernel's parameter block). The launch itself uses it, and so does
//! the host emulation of the kernels (`tests/cuda-host`), which runs the same parameter
//! block through the kernel source on the CPU.

use dpattn_core::attention::AttentionParams;

use super::{AttnDtype, AttnLaunch, GpuTensor, NoiseSpec, Operand, THREADS, plan};
use crate::error::Result;
use crate::kernels::KernelSpec;

/// One launch of the fused attention kernel, planned on the host.
///
/// ```
/// use dpattn_core::attention::AttentionParams;
/// use dpattn_cuda::attention::{AttnDtype, GpuTensor, launch_image};
/// let t = |ptr| GpuTensor::contiguous(ptr, [2, 4, 100, 64]);
/// let (q, k, v, o) = (t(0x10_0000)?, t(0x20_0000)?, t(0x30_0000)?, t(0x40_0000)?);
/// let image = launch_image(AttnDtype::Bf16, &o, &q, &k, &v, &AttentionParams::default(), None)?;
/// assert_eq!((image.grid, image.threads), ((8, 2, 1), 128)); // 2·4 heads, ⌈100 / 64⌉ blocks
/// assert_eq!(image.params_bytes([0, 0]).len(), 256);
/// # Ok::<(), dpattn_cuda::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct LaunchImage {
    /// The kernel variant.
    pub spec: KernelSpec,
    /// Grid: `(batch · heads, query blocks, 1)`.
    pub grid: (u32, u32, u32),
    /// Threads per block.
    pub threads: u32,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
    /// The σ tables the launch uploads (output draw, logit draw), present for a draw whose
    /// σ differs between heads.
    pub sigma_tables: [Option<Vec<f64>>; 2],
    pub(super) launch: AttnLaunch,
}

/// Plans the launch [`noisy_attention_raw`](super::noisy_attention_raw) would queue for
/// these arguments, with every check it makes before touching a device.
///
/// # Errors
/// As [`check_noisy_attention`](super::check_noisy_attention).
pub fn launch_image(
    dtype: AttnDtype,
    out: &GpuTensor,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    params: &AttentionParams<'_>,
    noise: Option<&NoiseSpec<'_>>,
) -> Result<LaunchImage> {
    let (launch, d, sigma_tables) = plan(dtype, out, q, k, v, params, noise)?;
    Ok(LaunchImage {
        spec: KernelSpec::flash_attention(dtype, d),
        grid: (
            (q.shape[0] * q.shape[1]) as u32, // < 2^31: checked by plan
            q.shape[2].div_ceil(dtype.block_rows()) as u32,
            1,
        ),
        threads: THREADS,
        shared_bytes: dtype.shared_bytes(d),
        sigma_tables,
        launch,
    })
}

impl LaunchImage {
    /// The kernel's parameter block (`struct DpAttnParams`, 256 bytes, little-endian as the
    /// GPU reads it), with the σ tables of [`LaunchImage::sigma_tables`] at `sigma_ptrs`
    /// (their device addresses; ignored for a draw without a table).
    pub fn params_bytes(&self, sigma_ptrs: [u64; 2]) -> Vec<u8> {
        let l = self.with_sigma_ptrs(sigma_ptrs);
        let mut b = Vec::with_capacity(256);
        for op in [l.q, l.k, l.v, l.out] {
            let Operand { ptr, sb, sh, ss } = op;
            for x in [ptr, sb, sh, ss] {
                b.extend_from_slice(&x.to_le_bytes());
            }
        }
        for x in [l.out_stream, l.logit_stream, l.out_sigma_ptr, l.logit_sigma_ptr] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        for x in [l.out_sigma, l.logit_sigma, l.scale_f64] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        for x in l.key.into_iter().chain([l.batch, l.heads, l.s_q, l.s_k]) {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b.extend_from_slice(&l.scale.to_le_bytes());
        for x in [l.causal, l.score, l.out_sigma_mode, l.logit_sigma_mode, l.pad] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b
    }

    /// The launch struct with the σ table addresses filled in.
    pub(super) fn with_sigma_ptrs(&self, sigma_ptrs: [u64; 2]) -> AttnLaunch {
        let mut l = self.launch;
        if self.sigma_tables[0].is_some() {
            l.out_sigma_ptr = sigma_ptrs[0];
        }
        if self.sigma_tables[1].is_some() {
            l.logit_sigma_ptr = sigma_ptrs[1];
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_bytes_follow_the_struct_layout() {
        let t = |ptr| GpuTensor::contiguous(ptr, [1, 2, 70, 128]).unwrap();
        let (q, k, v, o) = (t(0x1000_0000), t(0x2000_0000), t(0x3000_0000), t(0x4000_0000));
        let image = launch_image(AttnDtype::F16, &o, &q, &k, &v, &AttentionParams::default(), None)
            .unwrap();
        let b = image.params_bytes([0, 0]);
        assert_eq!(b.len(), core::mem::size_of::<AttnLaunch>());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        // q, k, v, out pointers and q's strides; the f64 scale at 176, batch at 216, the f32
        // scale at 232 (the offsets tests/cuda-host checks against the C++ struct).
        assert_eq!([u64_at(0), u64_at(32), u64_at(64), u64_at(96)], [q.ptr, k.ptr, v.ptr, o.ptr]);
        assert_eq!([u64_at(8), u64_at(16), u64_at(24)], [2 * 70 * 128, 70 * 128, 128]);
        assert_eq!(f64::from_bits(u64_at(176)), 1.0 / 128f64.sqrt());
        assert_eq!([u32_at(216), u32_at(220), u32_at(224), u32_at(228)], [1, 2, 70, 70]);
        assert_eq!(f32::from_le_bytes(b[232..236].try_into().unwrap()), 1.0 / (128f32).sqrt());
        assert_eq!((image.grid, image.shared_bytes), ((2, 2, 1), 3 * 64 * 128 * 2));
    }
}
