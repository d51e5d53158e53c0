#!/usr/bin/env bash
# Runs dpattn-core on an emulated Cortex-M4F (called by scripts/test.sh; runnable alone):
#  1. checks format and clippy of the firmware crate (tests/embedded, its own workspace);
#  2. builds its two firmwares for thumbv7em-none-eabihf (release, opt-level "s", LTO);
#  3. boots each on QEMU's mps2-an386 (Arm AN386: Cortex-M4 with FPU) with semihosting and
#     fails on a non-zero exit status, a panic, a hang (timeout) or missing output;
#  4. writes OUT/parity.out (the shared cases' results on the device, compared with x86-64
#     by the root crate's test `embedded_check`, which reads DPATTN_EMBEDDED_OUT) and
#     OUT/footprint.txt (flash, static RAM and peak stack of the one-release firmware).
# Installs Debian's qemu-system-arm when it is missing (as root, or through sudo).
# Usage: scripts/embedded.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
die() { printf '\nERROR: %s\n' "$*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: scripts/embedded.sh OUT"
mkdir -p "$1"
out=$(cd "$1" && pwd)
target=thumbv7em-none-eabihf

if ! command -v qemu-system-arm >/dev/null; then
    sudo=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || die "qemu-system-arm is missing and this user cannot install it: apt-get install qemu-system-arm (as root)"
        sudo=(sudo)
    fi
    command -v apt-get >/dev/null || die "qemu-system-arm not found and no apt-get to install it: install QEMU 6.0 or newer (machine mps2-an386)"
    echo "installing qemu-system-arm (apt-get install qemu-system-arm)"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends qemu-system-arm >/dev/null \
        || { "${sudo[@]}" apt-get update >/dev/null \
             && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends qemu-system-arm >/dev/null; } \
        || die "apt-get could not install qemu-system-arm"
fi
qemu-system-arm -machine help | grep -q '^mps2-an386' || die "this QEMU has no mps2-an386 machine (QEMU 6.0 or newer has it)"
command -v readelf >/dev/null || die "readelf not found (Debian: apt-get install binutils)"

# Cargo reads tests/embedded/.cargo/config.toml (target, linker script, runner) only when it
# runs from that folder.
(
    cd tests/embedded
    cargo fmt --check
    cargo clippy --target-dir "$out/target" --release --locked --bins -- -D warnings
    cargo build --target-dir "$out/target" --release --locked --bins
)
fw_dir=$out/target/$target/release

boot() { # ELF, output file
    local status=0
    timeout 300 qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -nographic -monitor none \
        -semihosting-config enable=on,target=native -kernel "$1" > "$2" || status=$?
    [ "$status" = 0 ] || { cat "$2" >&2; die "$(basename "$1") on mps2-an386 exited with status $status (124: timeout)"; }
    ! grep -q '^panic' "$2" || { cat "$2" >&2; die "$(basename "$1") panicked on mps2-an386"; }
}

boot "$fw_dir/dpattn-embedded-firmware" "$out/parity.out"
grep -q '^E output_perturbation\[0\]' "$out/parity.out" || die "the parity firmware printed no results"
echo "parity run on mps2-an386: $(grep -c '^[EA] ' "$out/parity.out") results in $out/parity.out"

boot "$fw_dir/footprint" "$out/footprint.out"
# Flash: what is loaded (vector table, code, read-only data, the initial image of .data);
# static RAM: .data + .bss + .uninit.
# readelf -SW: "[Nr] Name Type Address Off Size …", where "[ 1]" splits into two fields.
section() { readelf -SW "$1" | awk -v s="$2" '$2 == s { print $6 } $3 == s { print $7 }' | head -n 1; }
sum() { local t=0 v; for s in "${@:2}"; do v=$(section "$1" "$s"); t=$((t + 16#${v:-0})); done; echo "$t"; }
elf=$fw_dir/footprint
{
    echo "flash_bytes $(sum "$elf" .vector_table .text .rodata .data)"
    echo "static_ram_bytes $(sum "$elf" .data .bss .uninit)"
    sed -n 's/^footprint stack_peak_bytes /stack_peak_bytes /p' "$out/footprint.out"
} > "$out/footprint.txt"
echo "footprint of one DP release (mps2-an386, opt-level s, LTO):"
cat "$out/footprint.txt"
