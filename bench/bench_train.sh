#!/usr/bin/env bash
# Whole training step (embedding, stack, head, loss, backward, gradient reduction, clipping,
# AdamW) in tokens/s: normblocks' trainer on 1 process x 1 thread, 1 process x 2 threads,
# 2 MPI ranks x 1 thread (plain data parallel and ZeRO-1), and the same model and optimizer in
# PyTorch (bench/bench_train_torch.py) on 1 and 2 threads, in the same session. Three sizes:
#   small  d=64   L=16 H=4  T=64  B=8  (targets: 2 ranks >= 1.8x 1 rank x 1 thread; >= 3x PyTorch)
#   large  d=512  L=4  H=8  T=128 B=8  (target: >= 1.3x PyTorch)
#   xl     d=1024 L=2  H=16 T=128 B=8  (no target)
# At the large and xl sizes also bf16: the trainer with --precision bf16 (GEMM operands in bf16,
# on oneDNN where it has a bf16 kernel) on 1 process x 1 and x 2 threads, and PyTorch with
# --bf16 (torch.autocast("cpu", dtype=torch.bfloat16) around forward and loss) on 1 and 2 threads.
# "comm %" is the communication not hidden behind compute: time blocked in the gradient
# reduction's final wait, the ZeRO parameter all-gather and the loss all-reduce (which also
# absorbs any imbalance between the ranks), as a share of the step.
#
#   bash bench/bench_train.sh            # all sizes, best of 2 runs per case (~8 min for small
#                                        # and large in fp32; the bf16 rows and xl add to it)
#   bash bench/bench_train.sh --quick    # small size only, one run
#   bash bench/bench_train.sh --no-torch
# Environment: NB_BENCH_BUILD (default /tmp/normblocks-bench-build), PYTHON (/usr/bin/python3),
# OPENBLAS_CORETYPE (default SkylakeX on AVX-512 CPUs, Haswell on AVX2).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${NB_BENCH_BUILD:-/tmp/normblocks-bench-build}
PY=${PYTHON:-/usr/bin/python3}
QUICK=0 TORCH=1
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    --no-torch) TORCH=0 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "bench_train.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo 2>/dev/null; then export OPENBLAS_CORETYPE=Haswell; fi
fi
if grep -qw avx512f /proc/cpuinfo 2>/dev/null && [ "$OPENBLAS_CORETYPE" != SkylakeX ] &&
   [ "$OPENBLAS_CORETYPE" != Cooperlake ] && [ "$OPENBLAS_CORETYPE" != SapphireRapids ]; then
  echo "note: this CPU has AVX-512 but OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (set in the environment):"
  echo "      OpenBLAS's SkylakeX kernels are usually faster on it; unset it or set SkylakeX"
fi
export OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DNORMBLOCKS_BUILD_TESTS=OFF > "$BUILD.cmake.log" 2>&1 &&
  cmake --build "$BUILD" -j2 --target train > "$BUILD.build.log" 2>&1 || { echo "build failed: $BUILD.build.log"; exit 1; }
cmake --build "$BUILD" -j2 --target train_mpi >> "$BUILD.build.log" 2>&1
HAVE_MPI=0
[ -x "$BUILD/train_mpi" ] && command -v mpirun > /dev/null && HAVE_MPI=1
[ $HAVE_MPI = 1 ] || echo "note: no train_mpi or mpirun (apt-get install libopenmpi-dev openmpi-bin): MPI cases skipped"
HAVE_TORCH=0
[ $TORCH = 1 ] && "$PY" -c "import torch" 2> /dev/null && HAVE_TORCH=1
[ $TORCH = 1 ] && [ $HAVE_TORCH = 0 ] && echo "note: no PyTorch at $PY (apt-get install python3-torch): PyTorch cases skipped"
RUNS=2
[ $QUICK = 1 ] && RUNS=1

# best_of N cmd...: the run with the highest tok/s; prints "tok_s comm_pct"
best_of() {
  local n=$1 best="" i out t c
  shift
  for i in $(seq 1 "$n"); do
    out=$("$@" 2>&1)
    t=$(sed -n 's/^throughput: \([0-9.]*\) tok\/s.*/\1/p; s/^torch_train[_a-z0-9]* .*tok_s=\([0-9.]*\).*/\1/p' <<< "$out" | tail -1)
    c=$(sed -n 's/.*communication not hidden: \([0-9.]*\)%.*/\1/p' <<< "$out" | tail -1)
    [ -z "$t" ] && { echo "  failed: $*" >&2; tail -3 <<< "$out" >&2; continue; }
    if [ -z "$best" ] || awk -v a="$t" -v b="${best% *}" 'BEGIN { exit !(a > b) }'; then best="$t ${c:--}"; fi
  done
  echo "${best:-nan -}"
}

echo "normblocks training step, $(nproc) cores, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, best of $RUNS"
if [ $HAVE_TORCH = 1 ]; then # which PyTorch the rows ran, and how their step is written
  tv=$("$PY" -c 'import torch; print(torch.__version__)' 2> /dev/null)
  echo "PyTorch rows: torch $tv; bench_train_torch.py writes the step as a PyTorch 2.x user" \
       "does on >= 2.1 (SDPA, rms_norm, fused AdamW), as a 1.13 user does before"
fi
printf "%-6s %-28s %12s %8s\n" size case "tok/s" "comm %"
# name:d:L:H:T:B:steps:bf16 (bf16=1: the bf16 rows too)
SIZES=("small:64:16:4:64:8:150:0" "large:512:4:8:128:8:12:1" "xl:1024:2:16:128:8:8:1")
[ $QUICK = 1 ] && SIZES=("small:64:16:4:64:8:150:0")
declare -A R
for s in "${SIZES[@]}"; do
  IFS=: read -r name d L H T B steps bf16 <<< "$s"
  M=(--d "$d" --layers "$L" --heads "$H" --seq "$T" --batch "$B" --steps "$steps" --warmup 5
     --log-every 100000 --eval-batches 1 --eval-problems 1 --quiet) # the final 500-problem
     # exact-match evaluation decodes greedily: seconds per run at d=512 that time nothing
  row() { R[$name,$1]=${2% *}; printf "%-6s %-28s %12s %8s\n" "$name" "$1" "${2% *}" "${2#* }"; }
  row "1 process x 1 thread" "$(best_of $RUNS "$BUILD/train" "${M[@]}" --threads 1)"
  row "1 process x 2 threads" "$(best_of $RUNS "$BUILD/train" "${M[@]}" --threads 2)"
  if [ $HAVE_MPI = 1 ]; then
    row "2 ranks x 1 thread" "$(best_of $RUNS mpirun -np 2 "$BUILD/train_mpi" "${M[@]}" --threads 1)"
    row "2 ranks x 1 thread ZeRO" "$(best_of $RUNS mpirun -np 2 "$BUILD/train_mpi" "${M[@]}" --threads 1 --zero)"
  fi
  if [ $HAVE_TORCH = 1 ]; then
    tsteps=$((steps / 5 > 4 ? steps / 5 : 4))
    for th in 1 2; do
      row "PyTorch x $th thread(s)" "$(best_of $RUNS "$PY" "$ROOT/bench/bench_train_torch.py" --d "$d" --layers "$L" \
        --heads "$H" --seq "$T" --batch "$B" --threads $th --steps $tsteps --warmup 3)"
    done
  fi
  [ "$bf16" = 1 ] || continue
  row "1 process x 1 thread bf16" "$(best_of $RUNS "$BUILD/train" "${M[@]}" --threads 1 --precision bf16)"
  row "1 process x 2 threads bf16" "$(best_of $RUNS "$BUILD/train" "${M[@]}" --threads 2 --precision bf16)"
  if [ $HAVE_TORCH = 1 ]; then
    for th in 1 2; do
      row "PyTorch bf16 x $th thread(s)" "$(best_of $RUNS "$PY" "$ROOT/bench/bench_train_torch.py" --d "$d" \
        --layers "$L" --heads "$H" --seq "$T" --batch "$B" --threads $th --steps $tsteps --warmup 3 --bf16)"
    done
  fi
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }'; }
echo
for s in "${SIZES[@]}"; do
  name=${s%%:*}
  one=${R[$name,1 process x 1 thread]:-0}
  two_t=${R[$name,1 process x 2 threads]:-0}
  two_r=${R[$name,2 ranks x 1 thread]:-0}
  two_z=${R[$name,2 ranks x 1 thread ZeRO]:-0}
  best2=$(printf "%s\n%s\n%s\n" "$two_t" "$two_r" "$two_z" | sort -g | tail -1)
  echo "$name: 2 ranks / 1x1 = $(ratio "$two_r" "$one") (ZeRO $(ratio "$two_z" "$one"); 1 process x 2 threads $(ratio "$two_t" "$one")); target >= 1.8"
  if [ $HAVE_TORCH = 1 ]; then
    case $name in small) target="; target >= 3" ;; large) target="; target >= 1.3" ;; *) target="" ;; esac
    echo "$name: normblocks / PyTorch: 1 thread $(ratio "$one" "${R[$name,PyTorch x 1 thread(s)]:-0}"), 2 cores $(ratio "$best2" "${R[$name,PyTorch x 2 thread(s)]:-0}") (best normblocks 2-core case vs PyTorch 2 threads)$target"
  fi
  [ "${s##*:}" = 1 ] || continue
  b1=${R[$name,1 process x 1 thread bf16]:-0} b2=${R[$name,1 process x 2 threads bf16]:-0}
  echo "$name: normblocks bf16 / fp32: 1 thread $(ratio "$b1" "$one"), 2 threads $(ratio "$b2" "$two_t")"
  if [ $HAVE_TORCH = 1 ]; then
    tb1=${R[$name,PyTorch bf16 x 1 thread(s)]:-0} tb2=${R[$name,PyTorch bf16 x 2 thread(s)]:-0}
    echo "$name: PyTorch autocast bf16 / fp32: 1 thread $(ratio "$tb1" "${R[$name,PyTorch x 1 thread(s)]:-0}"), 2 threads $(ratio "$tb2" "${R[$name,PyTorch x 2 thread(s)]:-0}")"
    echo "$name: normblocks bf16 / PyTorch autocast bf16: 1 thread $(ratio "$b1" "$tb1"), 2 threads $(ratio "$b2" "$tb2")"
  fi
done
