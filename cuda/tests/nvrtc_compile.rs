//! Every kernel variant compiles through NVRTC, with no driver and no GPU: CUBIN for the
//! data-centre architectures we target (sm_80 A100, sm_90 H100/H200) and PTX for the oldest
//! (compute_80), which any newer driver can JIT.
//!
//! Needs `libnvrtc.so.12` on the library path (the PyPI wheel `nvidia-cuda-nvrtc-cu12`):
//! `scripts/test.sh` installs it into `target/py-venv` and runs these tests with
//! `--include-ignored`, so CI fails if any kernel fails to compile. A plain `cargo test`
//! lists them as ignored, never as passed.

use dpattn_cuda::compile::{CodeForm, choose_target, compile, nvrtc_version, supported_archs};
use dpattn_cuda::kernels::{KernelModule, KernelSpec, all_variants};
use dpattn_cuda::{Error, nvrtc_present};

const WHY: &str = "libnvrtc.so.12 not loadable: run scripts/test.sh (it installs the nvidia-cuda-nvrtc-cu12 \
                   wheel into target/py-venv and puts it on LD_LIBRARY_PATH)";

fn require_nvrtc() {
    assert!(nvrtc_present(), "{WHY}");
}

#[test]
#[ignore = "needs libnvrtc.so.12; scripts/test.sh runs it"]
fn every_variant_compiles_to_cubin_for_sm80_and_sm90_and_to_ptx() {
    require_nvrtc();
    let (major, minor) = nvrtc_version().unwrap();
    let archs = supported_archs().unwrap();
    eprintln!("NVRTC {major}.{minor}, archs {archs:?}");
    assert!(archs.contains(&80) && archs.contains(&90), "NVRTC lacks sm_80/sm_90: {archs:?}");
    let variants = all_variants();
    // NVRTC compiles independent programs concurrently; one thread per core roughly divides
    // this test's time (the test command's longest single step on a 2-core machine).
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(variants.len());
    std::thread::scope(|scope| {
        for t in 0..threads {
            let variants = &variants;
            scope.spawn(move || variants.iter().skip(t).step_by(threads).for_each(check_variant));
        }
    });
    eprintln!("{} variants compiled for sm_90, sm_80 and compute_80", variants.len());
}

#[test]
#[ignore = "needs libnvrtc.so.12; scripts/test.sh runs it"]
fn sampler_kernels_are_compiled_without_fma_contraction() {
    require_nvrtc();
    // Bit-exactness with the CPU depends on --fmad=false: the PTX of a Gaussian fill must
    // hold no fused multiply-add in f64.
    let spec = KernelSpec::noise_fill(
        dpattn_cuda::GpuSampler::Gaussian,
        dpattn_cuda::UniformBits::B53,
        dpattn_cuda::OutDtype::F32,
    );
    assert!(spec.options().contains(&"--fmad=false".to_owned()));
    let ptx = compile(&spec, 90, CodeForm::Ptx).unwrap();
    let text = String::from_utf8_lossy(&ptx.image);
    assert!(!text.contains("fma.rn.f64"), "fused f64 multiply-add in a sampler kernel");
    assert!(text.contains("mul.rn.f64") || text.contains("mul.f64"));
}

#[test]
#[ignore = "needs libnvrtc.so.12; scripts/test.sh runs it"]
fn a_broken_kernel_reports_nvrtcs_log() {
    require_nvrtc();
    // Compile a deliberately broken variant: an unknown sampler code hits the kernel's own
    // #error, and the log must carry it.
    let bad =
        KernelSpec { defines: vec![("DP_UW", 1), ("DP_OUT", 0)], ..KernelSpec::stream_words() };
    match compile(&bad, 90, CodeForm::Cubin) {
        Err(Error::Compile { kernel, log, options }) => {
            assert!(kernel.contains("noise_fill"), "{kernel}");
            assert!(log.contains("DP_SAMPLER must be defined"), "log was: {log}");
            assert!(options.iter().any(|o| o == "--gpu-architecture=sm_90"));
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    assert_eq!(bad.module, KernelModule::NoiseFill);
}

#[test]
#[ignore = "needs libnvrtc.so.12; scripts/test.sh runs it"]
fn the_target_rule_uses_what_this_nvrtc_supports() {
    require_nvrtc();
    let archs = supported_archs().unwrap();
    assert_eq!(choose_target(90, &archs), Some((90, CodeForm::Cubin)));
    let newest = *archs.iter().max().unwrap();
    assert_eq!(choose_target(newest + 1, &archs), Some((newest, CodeForm::Ptx)));
}

/// One kernel variant: CUBIN for sm_90 and sm_80 and PTX for compute_80, with the checks on
/// each image (ELF magic; the PTX's target, entry and absence of contractible f64 ops; no
/// NVRTC warning).
fn check_variant(spec: &KernelSpec) {
    for (arch, form) in [(90, CodeForm::Cubin), (80, CodeForm::Cubin), (80, CodeForm::Ptx)] {
        let code = compile(spec, arch, form).unwrap_or_else(|e| panic!("{e}"));
        assert!(!code.image.is_empty(), "{}: empty image", spec.label());
        match form {
            // ELF magic.
            CodeForm::Cubin => assert_eq!(&code.image[..4], b"\x7fELF", "{}", spec.label()),
            CodeForm::Ptx => {
                let text = String::from_utf8_lossy(&code.image);
                assert!(text.contains(".target sm_80"), "{}", spec.label());
                assert!(text.contains(&format!(".entry {}", spec.entry)), "{}", spec.label());
                // Bit-exactness with the CPU needs every f64 operation rounded on its own:
                // no fused multiply-add, and no bare add/sub/mul that ptxas could fuse.
                // The f64 attention (DP_F64) fuses on purpose (explicit __fma_rn and the
                // math library's exp2, inside its error bound) and carries no noise: only
                // the bare ops are checked there.
                let fuses = spec.defines.contains(&("DP_F64", 1));
                let banned: &[&str] = if fuses {
                    &["add.f64", "sub.f64", "mul.f64"]
                } else {
                    &["fma.rn.f64", "add.f64", "sub.f64", "mul.f64"]
                };
                for line in text.lines() {
                    let op = line.trim_start();
                    assert!(
                        !banned.iter().any(|b| op.starts_with(b)),
                        "{}: contractible f64 op `{op}`",
                        spec.label()
                    );
                }
            }
        }
        assert!(
            !code.log.contains("warning"),
            "{} for {arch}: NVRTC warned:\n{}",
            spec.label(),
            code.log
        );
    }
}
