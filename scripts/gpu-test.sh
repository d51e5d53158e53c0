#!/usr/bin/env bash
# GPU tests of dpattn-cuda: GPU noise bit-identical to the CPU (stream words, every sampler,
# layout and dtype), chunked fills, Gaussian/Laplace statistics, caller-owned memory on a
# foreign stream, clip-rows-then-noise against the CPU release, bad input; the exact
# releases (discrete Gaussian on the grid, strided tensors with groups, clip then release)
# bit-identical to the CPU's GaussianGrid::release_keyed; the C ABI's GPU
# branches; Gaussian-sampling attention (paper 000) against the CPU release; fused noisy
# attention called from PyTorch (examples/pytorch_interop.py and
# scripts/bench_attention_sdpa.py --quick: needs python3 with torch); then the Rust GPU
# tests under compute-sanitizer memcheck and racecheck.
#
#   scripts/gpu-test.sh            build (needs cargo) and run (needs a GPU)
#   scripts/gpu-test.sh --bundle   only build target/gpu-bundle/ (cargo, no GPU needed)
#   scripts/gpu-test.sh --run      only run target/gpu-bundle/ (GPU, no Rust needed)
#
# On a machine without a GPU the run fails: these tests never report a skip as a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
mode=${1:-all}
case $mode in all | --bundle | --run) ;; *) die "usage: scripts/gpu-test.sh [--bundle | --run]" ;; esac

if [ "$mode" != --run ]; then
    step "building the GPU test binary into $BUNDLE"
    command -v cargo >/dev/null || die "cargo not found: build the bundle elsewhere with --bundle, then use --run"
    bundle_exe test gpu gpu-tests test --release -p dpattn-cuda --test gpu --no-run
    bundle_exe test gpu_attention gpu-attention-tests test --release -p dpattn-cuda --test gpu_attention --no-run
    bundle_exe test gpu_gaussian_sampling gpu-gaussian-sampling-tests test --release -p dpattn-cuda --test gpu_gaussian_sampling --no-run
    bundle_exe test gpu_exact gpu-exact-tests test --release -p dpattn-cuda --test gpu_exact --no-run
    # The C ABI's unit tests take their GPU branches (bit-identity with the CPU through the
    # C entry points, the caller's stream, the counters) when a device is present.
    bundle_exe rlib dpattn_ffi ffi-tests test --release -p dpattn-ffi --lib --no-run
    # The shared library, for the PyTorch smoke tests below (ctypes on torch tensors).
    bundle_cdylib dpattn-ffi libdpattn_ffi.so
    ls -l "$BUNDLE"
fi
[ "$mode" = --bundle ] && exit 0

[ -x "$BUNDLE/gpu-tests" ] && [ -x "$BUNDLE/gpu-attention-tests" ] && [ -x "$BUNDLE/gpu-gaussian-sampling-tests" ] && [ -x "$BUNDLE/gpu-exact-tests" ] && [ -x "$BUNDLE/ffi-tests" ] && [ -f "$BUNDLE/libdpattn_ffi.so" ] || die "$BUNDLE/gpu-tests, gpu-attention-tests, gpu-gaussian-sampling-tests, gpu-exact-tests, ffi-tests or libdpattn_ffi.so missing: run scripts/gpu-test.sh --bundle on a machine with cargo"
need_torch
step "device"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "nvidia-smi not found"
setup_nvrtc

step "GPU tests"
"$BUNDLE/gpu-tests" --ignored --test-threads=1
step "fused attention GPU tests (against the f64 CPU oracle)"
"$BUNDLE/gpu-attention-tests" --ignored --test-threads=1
step "Gaussian-sampling attention GPU tests (paper 000, against the CPU release)"
"$BUNDLE/gpu-gaussian-sampling-tests" --ignored --test-threads=1
step "exact release GPU tests (discrete Gaussian on the grid, against the CPU release)"
"$BUNDLE/gpu-exact-tests" --ignored --test-threads=1
step "C ABI unit tests (GPU branches)"
"$BUNDLE/ffi-tests" cuda --test-threads=1
step "PyTorch interop: examples/pytorch_interop.py, then scripts/bench_attention_sdpa.py --quick"
DPATTN_LIB="$BUNDLE/libdpattn_ffi.so" python3 examples/pytorch_interop.py
python3 scripts/bench_attention_sdpa.py --quick --lib "$BUNDLE/libdpattn_ffi.so" --json target/gpu-test-attention-quick.json

command -v compute-sanitizer >/dev/null || die "compute-sanitizer not found (CUDA toolkit): memcheck/racecheck are part of this check"
# The statistics and full-grid tests only repeat the fill kernel on 2^23–2^24 elements; they
# are left out of the sanitizer runs, which slow kernels down by orders of magnitude (the
# grid-capped test covers the same loops on small inputs).
for tool in memcheck racecheck; do
    step "compute-sanitizer --tool $tool"
    compute-sanitizer --tool "$tool" --error-exitcode 1 \
        "$BUNDLE/gpu-tests" --ignored --test-threads=1 --skip gaussian_and_laplace_output_have_the_right_distribution --skip the_end_of_the_index_space
    compute-sanitizer --tool "$tool" --error-exitcode 1 \
        "$BUNDLE/gpu-attention-tests" --ignored --test-threads=1 cosh_score output_perturbation output_noise_is
    compute-sanitizer --tool "$tool" --error-exitcode 1 \
        "$BUNDLE/gpu-gaussian-sampling-tests" --ignored --test-threads=1 --skip large_k_release_matches_the_cpu
    compute-sanitizer --tool "$tool" --error-exitcode 1 \
        "$BUNDLE/gpu-exact-tests" --ignored --test-threads=1 grid_stride_loops clip_exact_f32 bad_releases
done
step "all GPU checks passed"
