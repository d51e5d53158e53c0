//! Compiles `host_check.cpp`, which includes the CUDA device headers of `cuda/src/kernels/`
//! as plain C++17 (their prelude maps the CUDA intrinsics to portable code), with FMA
//! contraction off so the host evaluates every expression exactly as written, as the GPU
//! does under `--fmad=false`; `block_emulation.cpp`, which runs whole kernels of
//! `gaussian_sampling.cu` with one host thread per CUDA thread; `grid_emulation.cpp`, which
//! runs `grid_release.cu` thread after thread; and `attention_emulation.cpp` (the fused
//! attention kernels).

fn main() {
    let kernels = "../../cuda/src/kernels";
    for f in [
        "prelude.cuh",
        "chacha20.cuh",
        "fast_math.cuh",
        "noise_value.cuh",
        "clip.cuh",
        "exact_sampler.cuh",
        "grid_release.cuh",
        "grid_release.cu",
        "attention_common.cuh",
        "gaussian_sampling.cu",
        "flash_attention.cu",
        "flash_attention_f32.cu",
    ] {
        println!("cargo:rerun-if-changed={kernels}/{f}");
    }
    println!("cargo:rerun-if-changed=host_check.cpp");
    println!("cargo:rerun-if-changed=block_emulation.cpp");
    println!("cargo:rerun-if-changed=grid_emulation.cpp");
    println!("cargo:rerun-if-changed=attention_emulation.cpp");
    println!("cargo:rerun-if-changed=warp_emulation.h");
    println!("cargo:rerun-if-changed=block_launch.h");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("host_check.cpp")
        .file("grid_emulation.cpp")
        .opt_level(2) // the exact samplers draw hundreds of thousands of values in the tests
        .include(kernels)
        .flag_if_supported("-ffp-contract=off")
        .flag_if_supported("-fno-fast-math")
        .warnings(true)
        .extra_warnings(true)
        .compile("dpattn_cuda_host_check");
    // Whole kernels, one fiber per CUDA thread (block_launch.h).
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
    // The fused attention kernels, one translation unit per variant (DP_ATT and DP_D select
    // types and tile sizes at preprocessing time): dpck_attention_<dtype>_<d>.
    // The f64 variant of the f32 kernel (DP_F64, the exact release's noiseless attention):
    // dpck_attention_f64_<d>.
    for (att, f64v, name) in [(0, 0, "bf16"), (1, 0, "f16"), (2, 0, "f32"), (2, 1, "f64")] {
        for d in [64, 128] {
            let entry = format!("dpck_attention_{name}_{d}");
            cc::Build::new()
                .cpp(true)
                .std("c++20")
                .file("attention_emulation.cpp")
                .opt_level(2)
                .include(kernels)
                .include(".")
                .define("DP_ATT", att.to_string().as_str())
                .define("DP_D", d.to_string().as_str())
                .define("DP_KERNEL_F32", if att == 2 { "1" } else { "0" })
                .define("DP_F64", f64v.to_string().as_str())
                .define("DPCK_KERNEL", format!("{entry}_kernel").as_str())
                .define("DPCK_ENTRY", entry.as_str())
                .flag_if_supported("-ffp-contract=off")
                .flag_if_supported("-fno-fast-math")
                .flag("-pthread")
                .flag_if_supported("-Wno-unknown-pragmas")
                .flag_if_supported("-Wno-unused-function") // the f32 kernel uses no mma
                .warnings(true)
                .extra_warnings(true)
                .compile(&format!("dpattn_cuda_attention_emulation_{name}_{d}"));
        }
    }
}
