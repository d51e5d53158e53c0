#!/usr/bin/env bash
# Proves the C ABI from outside cargo (called by scripts/test.sh; runnable alone):
#  1. every C test program of tests/c linked into one stand-alone host against the release
#     static library, run under valgrind memcheck (errors and definite leaks fail);
#  2. scripts/install-c.sh into target/c-install (headers, .a, .so, pkg-config, CMake);
#  3. examples/ built with the Makefile (static, shared, pkg-config) and with CMake
#     (find_package(dpattn)), and run;
#  4. examples/python/dp_attention.py through ctypes on NumPy arrays.
# CMake and NumPy are installed from PyPI into a venv under target/ when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*"; }
die() { printf '\nERROR: %s\n' "$*" >&2; exit 1; }

target_dir=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
[ -n "$target_dir" ] || die "could not read the target directory from cargo metadata"
CC_BIN=$(command -v cc || command -v gcc || command -v clang) || die "no C compiler"
CXX_BIN=$(command -v c++ || command -v g++ || command -v clang++) || die "no C++ compiler"
command -v valgrind >/dev/null || die "valgrind not found (Debian: apt-get install valgrind)"
command -v pkg-config >/dev/null || die "pkg-config not found (Debian: apt-get install pkg-config)"
command -v make >/dev/null || die "make not found"
PYTHON=$(command -v python3) || die "python3 not found"

step "C test programs in one stand-alone host, under valgrind"
native_libs=$(cargo rustc --release -p dpattn-ffi --features panic-test --crate-type staticlib -- --print native-static-libs 2>&1 \
    | sed -n 's/.*native-static-libs: //p' | tail -n 1)
[ -n "$native_libs" ] || die "rustc did not report native-static-libs for dpattn-ffi"
host_dir="$target_dir/c-host"
rm -rf "$host_dir" && mkdir -p "$host_dir"
cp "$target_dir/release/libdpattn_ffi.a" "$host_dir/libdpattn_ffi_panictest.a"
{
    echo '#include <stdio.h>'
    for f in tests/c/*.c tests/c/*.cpp; do
        stem=$(basename "${f%.*}"); [[ $stem == *_main ]] && continue
        lang=c; [[ $f == *.cpp ]] && lang=cpp
        echo "int dpattn_${lang}_${stem}(void);"
    done
    echo '#include <stddef.h>'
    echo 'size_t dpattn_live_handle_count(void);'
    echo 'int main(void) { int failed = 0, line; size_t live;'
    for f in tests/c/*.c tests/c/*.cpp; do
        stem=$(basename "${f%.*}"); [[ $stem == *_main ]] && continue
        lang=c; [[ $f == *.cpp ]] && lang=cpp
        echo "  line = dpattn_${lang}_${stem}(); printf(\"%-40s %s\\n\", \"$f\", line ? \"FAILED\" : \"ok\");"
        echo "  if (line) { fprintf(stderr, \"$f failed at line %d\\n\", line); failed = 1; }"
        echo "  if ((live = dpattn_live_handle_count()) != 0) { fprintf(stderr, \"$f leaked %zu handles\\n\", live); failed = 1; }"
    done
    echo '  return failed; }'
} > "$host_dir/all_main.c"
objs=()
for f in tests/c/*.c; do
    [[ $f == *_main.c ]] && continue
    o="$host_dir/$(basename "$f").o"
    "$CC_BIN" -std=c99 -O1 -g -Wall -Wextra -Werror -DDPATTN_PANIC_TEST -Iinclude -Itests/c -c "$f" -o "$o"
    objs+=("$o")
done
for f in tests/c/*.cpp; do
    o="$host_dir/$(basename "$f").o"
    "$CXX_BIN" -std=c++17 -O1 -g -Wall -Wextra -Werror -DDPATTN_PANIC_TEST -Iinclude -Itests/c -c "$f" -o "$o"
    objs+=("$o")
done
"$CC_BIN" -std=c99 -c "$host_dir/all_main.c" -o "$host_dir/all_main.o"
# shellcheck disable=SC2086 # $native_libs is a list of linker flags
"$CXX_BIN" "$host_dir/all_main.o" "${objs[@]}" "$host_dir/libdpattn_ffi_panictest.a" $native_libs -o "$host_dir/all_programs"
valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    "$host_dir/all_programs"

step "dpattn.hpp without exceptions (-fno-exceptions -DDPATTN_HPP_NO_EXCEPTIONS)"
printf '#include "dpattn.hpp"\nint main() { return dpattn::try_analytic_gaussian_sigma(1, 1e-5, 1).ok() ? 0 : 1; }\n' \
    > "$host_dir/no_exceptions.cpp"
"$CXX_BIN" -std=c++17 -fno-exceptions -DDPATTN_HPP_NO_EXCEPTIONS -Wall -Wextra -Werror -Iinclude \
    "$host_dir/no_exceptions.cpp" "$host_dir/libdpattn_ffi_panictest.a" $native_libs -o "$host_dir/no_exceptions"
"$host_dir/no_exceptions"

step "install into target/c-install (scripts/install-c.sh)"
prefix="$target_dir/c-install"
rm -rf "$prefix"
scripts/install-c.sh "$prefix"

step "examples: Makefile (static, shared, pkg-config)"
make -s -C examples PREFIX="$prefix" OUT="$target_dir/c-examples/make" CC="$CC_BIN" CXX="$CXX_BIN" clean check

step "Python venv with cmake and numpy (target/py-venv)"
venv="$target_dir/py-venv"
[ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
"$venv/bin/python" -c "import numpy" 2>/dev/null && [ -x "$venv/bin/cmake" ] \
    || "$venv/bin/pip" install --quiet "numpy>=1.26,<3" "cmake>=3.27,<5" \
    || die "pip could not install numpy and cmake into $venv"

step "examples: CMake find_package(dpattn)"
build="$target_dir/c-examples/cmake"
rm -rf "$build"
"$venv/bin/cmake" -S examples -B "$build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" >/dev/null
"$venv/bin/cmake" --build "$build" -j 2 >/dev/null
"$venv/bin/ctest" --test-dir "$build" --output-on-failure

step "examples: Python ctypes on NumPy arrays"
DPATTN_LIB="$prefix/lib/libdpattn_ffi.so" "$venv/bin/python" examples/python/dp_attention.py
