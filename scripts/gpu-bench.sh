#!/usr/bin/env bash
# GPU noise-fill throughput (GB/s) next to a device-to-device copy in the same run
# (cuda/benches/noise_fill.rs). Same modes as scripts/gpu-test.sh:
#   scripts/gpu-bench.sh [--bundle | --run]
# The log is also written to target/gpu-bench.log.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-common.sh
mode=${1:-all}
case $mode in all | --bundle | --run) ;; *) die "usage: scripts/gpu-bench.sh [--bundle | --run]" ;; esac

if [ "$mode" != --run ]; then
    step "building the GPU benchmark into $BUNDLE"
    command -v cargo >/dev/null || die "cargo not found: build the bundle elsewhere with --bundle, then use --run"
    bundle_exe bench noise_fill noise-fill-bench bench -p dpattn-cuda --bench noise_fill --no-run
fi
[ "$mode" = --bundle ] && exit 0

[ -x "$BUNDLE/noise-fill-bench" ] || die "$BUNDLE/noise-fill-bench missing: run with --bundle on a machine with cargo"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv
setup_nvrtc
"$BUNDLE/noise-fill-bench" --bench 2>&1 | tee target/gpu-bench.log
