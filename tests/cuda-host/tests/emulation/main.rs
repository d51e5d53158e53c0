//! The CUDA kernels run on the host (no GPU): their device headers compiled as C++ and
//! whole kernels emulated thread by thread (`build.rs`), compared with dpattn-core bit for
//! bit or with the float64 reference. One test binary; one module per kernel family.

mod attention;
mod exact;
mod exact_attention;
mod gaussian_sampling;
mod port;
