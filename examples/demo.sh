#!/usr/bin/env bash
# The main example from a fresh clone: installs what is missing (cmake/deps.sh demo: as root
# on Debian 12), builds only the trainer (Release, into build/) and runs it; arguments go to
# train (e.g. --steps 100, --preset hybrid). Run from anywhere:
#   bash examples/demo.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash cmake/deps.sh demo
mkdir -p build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > build/demo.log 2>&1 || { cat build/demo.log; exit 1; }
echo "building train (log: build/demo.log)"
cmake --build build -j"$(nproc)" --target train >> build/demo.log 2>&1 || { tail -30 build/demo.log; exit 1; }
# train chooses OpenBLAS's kernels for this CPU itself and says which; one BLAS thread, as
# normblocks threads its GEMMs itself
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
exec ./build/train "$@"
