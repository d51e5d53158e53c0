//! GPU Gaussian-sampling attention (paper 000): being written.
use crate::kernels::KernelSpec;
pub(crate) fn variants() -> Vec<KernelSpec> {
    Vec::new()
}
