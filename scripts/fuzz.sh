#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a bounded time (default 60 s each), then copies
# any crash/timeout/leak artifact into fuzz/regressions/<target>/ so that the stable test
# `cargo test -p dpattn-ffi --test fuzz_regressions` replays it from then on.
#   scripts/fuzz.sh [seconds-per-target] [target...]
# Needs a nightly toolchain and cargo-fuzz (installed from crates.io when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }
secs=${1:-60}; shift || true
rustup toolchain list | grep -q '^nightly' \
    || rustup toolchain install nightly --profile minimal \
    || die "cargo fuzz needs a nightly toolchain and rustup could not install one"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked \
    || die "could not install cargo-fuzz from crates.io"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
found=0
for t in "${targets[@]}"; do
    corpus="fuzz/corpus/$t"
    mkdir -p "$corpus" "fuzz/regressions/$t"
    cp -n fuzz/regressions/"$t"/* "$corpus"/ 2>/dev/null || true
    printf '\n==> fuzzing %s for %s s\n' "$t" "$secs"
    if ! (cd fuzz && cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -max_len=8192 -rss_limit_mb=4096 -timeout=10); then
        found=1
    fi
    for a in fuzz/artifacts/"$t"/*; do
        [ -e "$a" ] || continue
        cp "$a" "fuzz/regressions/$t/" && echo "finding kept as fuzz/regressions/$t/$(basename "$a")"
        found=1
    done
done
[ $found -eq 0 ] || die "fuzzing found problems: see fuzz/regressions/ (now replayed by cargo test)"
echo "fuzzing: no findings"
