#!/usr/bin/env bash
# Builds the dpattn C library in release mode and installs it under PREFIX:
#   PREFIX/include/dpattn.h, dpattn.hpp
#   PREFIX/lib/libdpattn_ffi.a, libdpattn_ffi.so
#   PREFIX/lib/pkgconfig/dpattn.pc
#   PREFIX/lib/cmake/dpattn/dpattnConfig.cmake, dpattnConfigVersion.cmake
# Usage: scripts/install-c.sh PREFIX
set -euo pipefail
cd "$(dirname "$0")/.."
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: scripts/install-c.sh PREFIX"
mkdir -p "$1"
prefix=$(cd "$1" && pwd)

target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
[ -n "$target_dir" ] || die "could not read the target directory from cargo metadata"
# One release compile emits both libraries, and rustc prints the system libraries the static
# one needs on this platform.
native_libs=$(cargo rustc --release -p dpattn-ffi --crate-type staticlib,cdylib -- --print native-static-libs 2>&1 \
    | sed -n 's/.*native-static-libs: //p' | tail -n 1)
[ -n "$native_libs" ] || die "rustc did not report native-static-libs for dpattn-ffi"

case "$(uname -s)" in
    Darwin) shared_suffix=.dylib ;;
    *) shared_suffix=.so ;;
esac
version=$(sed -n 's/^#define DPATTN_VERSION "\(.*\)"$/\1/p' include/dpattn.h)
[ -n "$version" ] || die "DPATTN_VERSION not found in include/dpattn.h"
major=${version%%.*}; rest=${version#*.}; minor=${rest%%.*}

mkdir -p "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/lib/cmake/dpattn"
cp include/dpattn.h include/dpattn.hpp "$prefix/include/"
cp "$target_dir/release/libdpattn_ffi.a" "$target_dir/release/libdpattn_ffi$shared_suffix" "$prefix/lib/"
# -lfoo flags as CMake library names: "gcc_s;util;rt;..."
native_cmake=$(printf '%s\n' $native_libs | sed -n 's/^-l//p' | paste -sd';' -)
subst() {
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" -e "s|@VERSION_MAJOR@|$major|g" \
        -e "s|@VERSION_MINOR@|$minor|g" -e "s|@NATIVE_LIBS@|$native_libs|g" \
        -e "s|@NATIVE_LIBS_CMAKE@|$native_cmake|g" -e "s|@SHARED_SUFFIX@|$shared_suffix|g" "$1"
}
subst packaging/dpattn.pc.in > "$prefix/lib/pkgconfig/dpattn.pc"
subst packaging/dpattnConfig.cmake.in > "$prefix/lib/cmake/dpattn/dpattnConfig.cmake"
subst packaging/dpattnConfigVersion.cmake.in > "$prefix/lib/cmake/dpattn/dpattnConfigVersion.cmake"
echo "installed dpattn $version into $prefix"
