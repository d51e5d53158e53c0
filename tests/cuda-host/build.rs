//! Compiles `host_check.cpp`, which includes the CUDA device headers of `cuda/src/kernels/`
//! as plain C++17 (their prelude maps the CUDA intrinsics to portable code), with FMA
//! contraction off so the host evaluates every expression exactly as written, as the GPU
//! does under `--fmad=false`; and `block_emulation.cpp`, which runs whole kernels of
//! `gaussian_sampling.cu` with one host thread per CUDA thread.

fn main() {
    let kernels = "../../cuda/src/kernels";
    for f in [
        "prelude.cuh",
        "chacha20.cuh",
        "fast_math.cuh",
        "noise_value.cuh",
        "clip.cuh",
        "attention_common.cuh",
        "gaussian_sampling.cu",
    ] {
        println!("cargo:rerun-if-changed={kernels}/{f}");
    }
    println!("cargo:rerun-if-changed=host_check.cpp");
    println!("cargo:rerun-if-changed=block_emulation.cpp");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("host_check.cpp")
        .include(kernels)
        .flag_if_supported("-ffp-contract=off")
        .flag_if_supported("-fno-fast-math")
        .warnings(true)
        .extra_warnings(true)
        .compile("dpattn_cuda_host_check");
    // Whole kernels, one std::thread per CUDA thread (std::barrier needs C++20).
    cc::Build::new()
        .cpp(true)
        .std("c++20")
        .file("block_emulation.cpp")
        .include(kernels)
        .flag_if_supported("-ffp-contract=off")
        .flag_if_supported("-fno-fast-math")
        .flag("-pthread")
        .flag_if_supported("-Wno-unknown-pragmas") // the kernels' #pragma unroll
        .warnings(true)
        .extra_warnings(true)
        .compile("dpattn_cuda_block_emulation");
    println!("cargo:rustc-link-lib=pthread");
}
