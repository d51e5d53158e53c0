#!/usr/bin/env bash
# THE test command of dpattn (the README names it; .ci/run calls it).
#
# Installs what it needs (rustfmt, clippy, the thumbv7em-none-eabihf target) with rustup,
# and fails loudly when something cannot be installed. Runs: format check, clippy with
# warnings as errors, every test target of the workspace (including the C/C++ ABI
# programs), doc tests, rustdoc with warnings as errors, host tests of the core without
# default features, and no_std builds of dpattn-core for a bare-metal target. Runs the core
# on an emulated Cortex-M4F (scripts/embedded.sh; installs Debian's qemu-system-arm when it
# is missing) and compares its results with this machine's. Installs NVRTC (the PyPI wheel
# nvidia-cuda-nvrtc-cu12) into target/py-venv and fails if any CUDA kernel fails to compile
# through it; the GPU tests themselves need a GPU (scripts/gpu-test.sh) and are listed as
# ignored here. Starts a throwaway PostgreSQL server for the durable-budget store tests
# (scripts/test-postgres.sh; installs Debian's postgresql package when it is missing) and
# stops it on exit. Builds the Python package (python/, maturin + PyO3) into the same venv
# and runs its pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."

NO_STD_TARGET=thumbv7em-none-eabihf
step() { printf '\n==> %s\n' "$*"; }
die() { printf '\nERROR: %s\n' "$*" >&2; exit 1; }

step "checking tools"
command -v cargo >/dev/null || die "cargo not found: install Rust with rustup (https://rustup.rs)"
command -v rustup >/dev/null || die "rustup not found: needed to install components and the $NO_STD_TARGET target"
command -v cc >/dev/null || command -v gcc >/dev/null || command -v clang >/dev/null \
    || die "no C compiler (cc/gcc/clang): needed to build the C ABI tests"
command -v c++ >/dev/null || command -v g++ >/dev/null || command -v clang++ >/dev/null \
    || die "no C++ compiler (c++/g++/clang++): needed to build the C++ ABI test"
cargo --version
rustc --version

step "installing rustfmt, clippy and the $NO_STD_TARGET target (if missing)"
installed_components=$(rustup component list --installed)
for comp in rustfmt clippy; do
    if ! grep -q "^$comp" <<<"$installed_components"; then
        rustup component add "$comp" || die "rustup could not install the $comp component"
    fi
done
if ! rustup target list --installed | grep -qx "$NO_STD_TARGET"; then
    rustup target add "$NO_STD_TARGET" \
        || die "rustup could not install the $NO_STD_TARGET target; the no_std build cannot be proven without it"
fi

step "NVRTC for the CUDA kernel compile tests (nvidia-cuda-nvrtc-cu12 into target/py-venv)"
PYTHON=$(command -v python3) || die "python3 not found: needed for the venv that holds NVRTC"
target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
[ -n "$target_dir" ] || die "could not read the target directory from cargo metadata"
venv="$target_dir/py-venv"
[ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
nvrtc_dir() { { compgen -G "$venv/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" || true; } | head -n 1 | xargs -r dirname; }
[ -n "$(nvrtc_dir)" ] || "$venv/bin/pip" install --quiet "nvidia-cuda-nvrtc-cu12>=12.2,<13" \
    || die "pip could not install nvidia-cuda-nvrtc-cu12 into $venv"
NVRTC_DIR=$(nvrtc_dir)
[ -n "$NVRTC_DIR" ] || die "libnvrtc.so.12 not found in $venv after installing nvidia-cuda-nvrtc-cu12"
export LD_LIBRARY_PATH="$NVRTC_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "NVRTC: $NVRTC_DIR"

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (all targets, all features, warnings are errors)"
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo clippy -p dpattn-core --lib --no-default-features -- -D warnings

step "no_std run: dpattn-core on an emulated Cortex-M4F (QEMU mps2-an386; installs qemu-system-arm if missing)"
# Builds and boots the firmware of tests/embedded; the root crate's test embedded_check
# compares what it printed with the same computations on this machine.
scripts/embedded.sh "$target_dir/embedded"
export DPATTN_EMBEDDED_OUT="$target_dir/embedded/parity.out" DPATTN_REQUIRE_EMBEDDED=1

step "PostgreSQL for the durable-budget store tests (a throwaway server on 127.0.0.1, stopped on exit)"
# Installs Debian's postgresql package when initdb/pg_ctl are missing, initdb's into a
# temporary folder and exports DPATTN_TEST_POSTGRES and DPATTN_REQUIRE_POSTGRES=1 (the
# PostgreSQL tests fail rather than skip without a server).
# shellcheck source=scripts/test-postgres.sh
source scripts/test-postgres.sh
trap pg_test_stop EXIT
pg_test_start

step "cargo test (all targets: unit, integration, C/C++ ABI programs, examples, benches)"
cargo test --workspace --all-targets --all-features

step "every CUDA kernel variant compiles through NVRTC (CUBIN sm_80/sm_90, PTX compute_80)"
cargo test --workspace --all-features --test nvrtc_compile -- --include-ignored

step "doc tests"
cargo test --workspace --all-features --doc

step "rustdoc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --quiet

step "dpattn-core tests without default features (no alloc) on the host"
cargo test -p dpattn-core --no-default-features --lib --tests

step "no_std: dpattn-core for $NO_STD_TARGET with alloc"
# Without default features (no alloc) it is built, and run, by scripts/embedded.sh above.
cargo build -p dpattn-core --target "$NO_STD_TARGET" --no-default-features --features alloc

step "C ABI from outside cargo: valgrind host, install, Makefile/CMake/pkg-config, Python"
scripts/c-host.sh

step "Python package: format, clippy, pip install ./python (maturin + PyO3) into $venv, pytest"
# The extension has its own Cargo workspace (python/Cargo.toml) and target directory; pip
# fetches maturin from PyPI into an isolated build environment. The tests compare keyed
# draws with the C ABI's shared library from the cargo test step above.
cargo fmt --manifest-path python/Cargo.toml --check
CARGO_TARGET_DIR="$target_dir/python" cargo clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings
"$venv/bin/pip" install --quiet "numpy>=1.21" "pytest>=7" \
    || die "pip could not install numpy and pytest into $venv"
CARGO_TARGET_DIR="$target_dir/python" "$venv/bin/pip" install --quiet --force-reinstall --no-deps ./python \
    || die "pip install ./python failed (it needs PyPI for maturin, and cargo)"
cargo build --quiet -p dpattn-ffi # the shared library the keyed-draw tests compare with
DPATTN_FFI_LIB="$target_dir/debug/libdpattn_ffi.so" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    python/tests --doctest-modules --pyargs dpattn

step "all checks passed"
