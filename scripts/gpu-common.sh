# Shared by scripts/gpu-test.sh and scripts/gpu-bench.sh (sourced, not run).
#
# GPU machines here have the driver, a CUDA toolkit, compute-sanitizer and PyTorch, but no
# Rust and no network. So the binaries are built where cargo is (`--bundle`) into
# target/gpu-bundle/, which travels to the GPU machine and runs there (`--run`); on a
# machine with both cargo and a GPU, the default builds and runs in one go.

step() { printf '\n==> %s\n' "$*"; }
die() { printf '\nERROR: %s\n' "$*" >&2; exit 1; }

BUNDLE=target/gpu-bundle

# bundle_exe KIND NAME DEST CARGO-ARGS...: builds a test or bench target without running it
# and copies its executable to $BUNDLE/DEST.
bundle_exe() {
    local kind=$1 name=$2 dest=$3
    shift 3
    command -v python3 >/dev/null || die "python3 is needed to read cargo's JSON messages"
    local exe
    cargo "$@" >/dev/null || die "cargo $* failed"
    exe=$(cargo "$@" --message-format=json \
        | python3 -c '
import json, sys
kind, name = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target") or {}
    if m.get("reason") == "compiler-artifact" and t.get("name") == name and kind in t.get("kind", []) and m.get("executable"):
        print(m["executable"])
' "$kind" "$name" | tail -n 1) || die "could not read cargo's messages for $name"
    [ -n "$exe" ] && [ -x "$exe" ] || die "cargo did not produce the $kind executable $name"
    mkdir -p "$BUNDLE"
    cp "$exe" "$BUNDLE/$dest"
}

# bundle_cdylib PACKAGE FILE: builds PACKAGE's release libraries (`cargo build --release`) and
# copies the cdylib artifact named FILE (e.g. libdpattn_ffi.so) to $BUNDLE/FILE.
bundle_cdylib() {
    local pkg=$1 file=$2 lib
    command -v python3 >/dev/null || die "python3 is needed to read cargo's JSON messages"
    cargo build --release -p "$pkg" >/dev/null || die "cargo build --release -p $pkg failed"
    lib=$(cargo build --release -p "$pkg" --message-format=json \
        | python3 -c '
import json, os, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and "cdylib" in (m.get("target") or {}).get("kind", []):
        for f in m.get("filenames", []):
            if os.path.basename(f) == sys.argv[1]:
                print(f)
' "$file" | tail -n 1) || die "could not read cargo's messages for $pkg"
    [ -n "$lib" ] && [ -f "$lib" ] || die "cargo did not produce $file for $pkg"
    mkdir -p "$BUNDLE"
    cp "$lib" "$BUNDLE/$file"
}

# need_torch: fails unless python3 imports torch and torch sees a GPU.
need_torch() {
    command -v python3 >/dev/null || die "python3 not found: the PyTorch benchmark and example need python3 with torch"
    python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)' \
        || die "python3 cannot import torch, or torch sees no CUDA device (python3 -c 'import torch; print(torch.cuda.is_available())')"
}

# Puts an NVRTC on the loader path: the one already there, a CUDA toolkit's, or a pip
# wheel's (nvidia-cuda-nvrtc / -cu12 in any python3 site-packages). cudarc looks for
# libnvrtc.so first, then libnvrtc.so.12, so a versioned-only library gets a libnvrtc.so link.
setup_nvrtc() {
    local found="" d
    for d in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        if compgen -G "$d/libnvrtc.so*" >/dev/null; then found=$d; break; fi
    done
    if [ -z "$found" ] && command -v python3 >/dev/null; then
        for d in $(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null) target/py-venv/lib/python3*/site-packages; do
            for sub in nvidia/cuda_nvrtc/lib nvidia/cu13/lib nvidia/cu12/lib; do
                if compgen -G "$d/$sub/libnvrtc.so*" >/dev/null; then found=$d/$sub; break 2; fi
            done
        done
    fi
    [ -n "$found" ] || die "no libnvrtc found (CUDA toolkit lib64 or the nvidia-cuda-nvrtc wheel); kernels cannot be compiled"
    local links=target/nvrtc-link
    rm -rf "$links"
    export LD_LIBRARY_PATH="$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if [ ! -e "$found/libnvrtc.so" ] && [ ! -e "$found/libnvrtc.so.12" ]; then
        # e.g. only libnvrtc.so.13: cudarc asks for libnvrtc.so first.
        local lib
        lib=$(ls "$found"/libnvrtc.so.* | grep -v builtins | head -n 1)
        mkdir -p "$links"
        ln -s "$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")" "$links/libnvrtc.so"
        export LD_LIBRARY_PATH="$(cd "$links" && pwd):$LD_LIBRARY_PATH"
    fi
    echo "NVRTC from $found"
}
