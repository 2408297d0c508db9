#!/usr/bin/env bash
# The Debian 12 packages normblocks uses, installed when missing (as root with apt-get), else
# named. usage: bash cmake/deps.sh demo|tests
#   demo:  what the main example needs (a C compiler, CMake, OpenBLAS, cJSON) and oneDNN (bf16)
#   tests: everything the test suite exercises: also OpenMPI (2-rank training), clang with its
#          OpenMP and libFuzzer runtimes (fuzzing, the clang fast-math build), iproute2
#          (training across network namespaces). Debian's python3-torch (the PyTorch twin's
#          checks, ~1 GB) is left to you: without it those tests are skipped, and say so.
# Every package but the demo's first five is optional: CMake and the tests skip, and say, what
# is absent.
set -euo pipefail

need=(build-essential cmake libopenblas-dev libcjson-dev pkg-config)
opt=(libdnnl-dev)
case "${1:-}" in
  demo) ;;
  tests) opt+=(libopenmpi-dev openmpi-bin clang libclang-rt-14-dev libomp-dev iproute2) ;;
  *) echo "usage: bash cmake/deps.sh demo|tests" >&2; exit 2 ;;
esac

if ! command -v dpkg-query > /dev/null 2>&1; then
  echo "packages: not a Debian system; the build needs a C compiler, CMake, a CBLAS (OpenBLAS) and cJSON"
  exit 0
fi
missing=()
for p in "${need[@]}" "${opt[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} = 0 ]; then
  echo "packages: all present (${need[*]} ${opt[*]})"
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null 2>&1; then
  echo "packages: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  exit 0
fi
echo "packages: missing ${missing[*]}; as root: apt-get install ${missing[*]}"
for p in "${need[@]}"; do
  for m in "${missing[@]}"; do
    if [ "$p" = "$m" ]; then echo "packages: $p is required" >&2; exit 1; fi
  done
done
