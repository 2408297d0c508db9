#!/usr/bin/env bash
# Build and test normblocks: the normal Release configuration, then an
# AddressSanitizer/UBSan Debug configuration. Run from anywhere:
#   bash tests/run.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Debian's OpenBLAS 0.3.21 misdetects this CPU; only force SkylakeX when the
# CPU actually has AVX-512 (forcing it elsewhere would crash with SIGILL).
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=SkylakeX
fi
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"

JOBS="${JOBS:-2}"

echo "=== normblocks: Release build + tests ==="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"${JOBS}"
ctest --test-dir build --output-on-failure

echo "=== normblocks: sanitizer (ASan+UBSan) build + tests ==="
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DNB_SANITIZE=ON
cmake --build build-san -j"${JOBS}"
ctest --test-dir build-san --output-on-failure
