#!/usr/bin/env bash
# Build and test normblocks: the packages it uses installed when missing (cmake/deps.sh tests:
# as root on Debian 12, else named), the normal Release configuration, then an
# AddressSanitizer/UBSan Debug configuration, then (when clang with libFuzzer is installed) the
# libFuzzer harnesses of tests/fuzz for NB_FUZZ_SECONDS each (default 30). Run from anywhere:
#   bash tests/run.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash cmake/deps.sh tests

# Debian's OpenBLAS 0.3.21 misdetects this CPU; only force SkylakeX when the
# CPU actually has AVX-512 (forcing it elsewhere would crash with SIGILL).
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=SkylakeX
fi
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"

JOBS="${JOBS:-2}"
# each phase's wall time, printed at the end (the README's figures come from this line)
TIMES=""
timed() { # timed NAME CMD...: run CMD, add NAME's seconds to TIMES
  local name="$1" t0=$SECONDS
  shift
  "$@"
  TIMES="$TIMES${TIMES:+, }$name $((SECONDS - t0)) s"
}

echo "=== normblocks: Release build + tests ==="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
timed "Release build" cmake --build build -j"${JOBS}"
timed "Release tests" ctest --test-dir build --output-on-failure -j"${JOBS}"

echo "=== normblocks: sanitizer (ASan+UBSan) build + tests ==="
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DNB_SANITIZE=ON
timed "ASan build" cmake --build build-san -j"${JOBS}"
timed "ASan tests" ctest --test-dir build-san --output-on-failure -j"${JOBS}"

echo "=== normblocks: libFuzzer harnesses (clang) ==="
# Detected here, so that a machine without clang still passes: the drivers of the same
# harnesses ran above in both builds.
fuzz_ok=0
if command -v clang >/dev/null 2>&1; then
  probe="$(mktemp -d)"
  printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) { (void)d; (void)n; return 0; }\n' > "$probe/p.c"
  if clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then fuzz_ok=1; fi
  rm -rf "$probe"
fi
if [ "$fuzz_ok" = 1 ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNB_FUZZ=ON \
    -DNB_FUZZ_SECONDS="${NB_FUZZ_SECONDS:-30}" -DNORMBLOCKS_BUILD_EXAMPLES=OFF \
    -DNORMBLOCKS_BUILD_BENCH=OFF -DNORMBLOCKS_INSTALL=OFF -DNB_USE_BLAS=OFF
  timed "fuzz build" cmake --build build-fuzz -j"${JOBS}"
  timed "fuzzing" ctest --test-dir build-fuzz --output-on-failure -j"${JOBS}"
else
  echo "clang/libFuzzer not found: fuzzing skipped"
fi
echo "=== normblocks: every test passed; $TIMES; $SECONDS s in all ==="
