#!/usr/bin/env bash
# GPU benchmarks, two parts:
# 1. noise-fill throughput (GB/s) next to a device-to-device copy in the same run
#    (cuda/benches/noise_fill.rs); log in target/gpu-bench.log;
# 2. fused noisy attention (dpattn_cuda_noisy_attention through the C ABI, called from
#    PyTorch with ctypes) against torch's scaled_dot_product_attention
#    (scripts/bench_attention_sdpa.py); log in target/gpu-bench-attention.log, JSON in
#    $OUT/ or target/bench_attention_sdpa.json. Needs python3 with torch.
# Same modes as scripts/gpu-test.sh:
#   scripts/gpu-bench.sh [--bundle | --run]
# --bundle builds the bench executable and libdpattn_ffi.so into target/gpu-bundle/ (cargo, no
# GPU); --run runs them (GPU, no Rust). Extra arguments for the attention benchmark can be
# given in $ATTENTION_BENCH_ARGS (e.g. "--quick").
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
mode=${1:-all}
case $mode in all | --bundle | --run) ;; *) die "usage: scripts/gpu-bench.sh [--bundle | --run]" ;; esac

if [ "$mode" != --run ]; then
    step "building the GPU benchmark into $BUNDLE"
    command -v cargo >/dev/null || die "cargo not found: build the bundle elsewhere with --bundle, then use --run"
    bundle_exe bench noise_fill noise-fill-bench bench -p dpattn-cuda --bench noise_fill --no-run
    step "building the C ABI library (cargo build --release -p dpattn-ffi) into $BUNDLE"
    bundle_cdylib dpattn-ffi libdpattn_ffi.so
    ls -l "$BUNDLE"
fi
[ "$mode" = --bundle ] && exit 0

[ -x "$BUNDLE/noise-fill-bench" ] || die "$BUNDLE/noise-fill-bench missing: run with --bundle on a machine with cargo"
[ -f "$BUNDLE/libdpattn_ffi.so" ] || die "$BUNDLE/libdpattn_ffi.so missing: run with --bundle on a machine with cargo"
# Checked before the first benchmark, so a missing torch does not surface after minutes.
need_torch
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv
setup_nvrtc
step "noise fill (criterion)"
"$BUNDLE/noise-fill-bench" --bench 2>&1 | tee target/gpu-bench.log
step "fused noisy attention vs torch SDPA"
# shellcheck disable=SC2086 # ATTENTION_BENCH_ARGS is a list of arguments
python3 scripts/bench_attention_sdpa.py --lib "$BUNDLE/libdpattn_ffi.so" ${ATTENTION_BENCH_ARGS:-} 2>&1 \
    | tee target/gpu-bench-attention.log
