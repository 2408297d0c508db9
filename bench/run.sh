#!/usr/bin/env bash
# normblocks benchmarks: builds bench_* (Release, -O2 -march=native), runs every case in its own process
# (so ru_maxrss is per case), runs the PyTorch peers in the same session, and prints the
# report (tables, ratios, targets met or missed).
#
#   bash bench/run.sh                  # everything, ~10-15 min on 2 cores
#   bash bench/run.sh --quick          # smallest shapes only, fewer reps (a smoke test)
#   bash bench/run.sh --no-torch       # skip the PyTorch peers
#   bash bench/run.sh --update-readme  # also replace the table in bench/README.md
#   bash bench/run.sh --portable       # build without -march=native (x86-64 baseline kernels)
#   bash bench/run.sh --retry          # repeat a case once when other processes took > 15% of
#                                      # the CPUs during it (the report keeps the cleaner run)
#   bash bench/run.sh --append         # add to the results of an earlier run instead of
#                                      # replacing them: per case the report takes the fastest
#                                      # clean run (best of N, normblocks and PyTorch alike)
#
# Environment: NB_BENCH_BUILD (build dir, default /tmp/normblocks-bench-build),
# NB_BENCH_OUT (results dir, default $NB_BENCH_BUILD/results), OPENBLAS_CORETYPE (default:
# SkylakeX on AVX-512 CPUs, Haswell on AVX2 ones: Debian's OpenBLAS 0.3.21 otherwise falls back
# to its slow Prescott kernels on recent Xeons), PYTHON (default /usr/bin/python3).
#
# Threading: every case runs with OPENBLAS_NUM_THREADS=1 (env "A": normblocks does all the
# threading), and the 2-thread cases also with OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE
# (env "B": BLAS threads its own GEMMs); the report says which was faster per case.
# Every case reports "others": the share of the CPUs other processes took while it ran.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${NB_BENCH_BUILD:-/tmp/normblocks-bench-build}
OUT=${NB_BENCH_OUT:-$BUILD/results}
PY=${PYTHON:-/usr/bin/python3}
QUICK=0 TORCH=1 README=0 RETRY=0 NATIVE=ON APPEND=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    --no-torch) TORCH=0 ;;
    --update-readme) README=1 ;;
    --retry) RETRY=1 ;;
    --append) APPEND=1 ;;
    --portable) NATIVE=OFF ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  if [[ " $flags " == *" avx512f "* && " $flags " == *" avx512bw "* && " $flags " == *" avx512vl "* ]]; then
    OPENBLAS_CORETYPE=SkylakeX
  elif [[ " $flags " == *" avx2 "* ]]; then
    OPENBLAS_CORETYPE=Haswell
  fi
fi
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-}
if [ "$OPENBLAS_CORETYPE" != SkylakeX ] && grep -m1 '^flags' /proc/cpuinfo | grep -q ' avx512bw '; then
  echo "== NOTE: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)} on an AVX-512 CPU; SkylakeX is faster here" \
       "(OPENBLAS_CORETYPE=SkylakeX bash bench/run.sh)"
fi
unset OMP_WAIT_POLICY OMP_NUM_THREADS OPENBLAS_NUM_THREADS

echo "== building benches in $BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DNORMBLOCKS_BUILD_BENCH=ON \
  -DNORMBLOCKS_NATIVE=$NATIVE -DNORMBLOCKS_BUILD_TESTS=OFF -DNORMBLOCKS_BUILD_EXAMPLES=OFF \
  -DNORMBLOCKS_INSTALL=OFF >/dev/null || exit 1
cmake --build "$BUILD" --target bench_block bench_norm bench_attn bench_grads -j 2 >/dev/null || {
  cmake --build "$BUILD" --target bench_block bench_norm bench_attn bench_grads; exit 1; }
cmake --build "$BUILD" --target bench_dnnl -j 2 >/dev/null 2>&1 || true  # only with oneDNN

mkdir -p "$OUT"
RAW="$OUT/raw.txt"
LOG="$OUT/log.txt"
[ "$APPEND" = 1 ] || { : >"$RAW"; : >"$LOG"; }
{
  echo "MACHINE nproc=$(nproc) cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //; s/ /_/g')" \
       "coretype_env=${OPENBLAS_CORETYPE:-unset} cflags=$([ $NATIVE = ON ] && echo -O2_-march=native || echo -O2)" \
       "date=$(date -u +%Y-%m-%dT%H:%MZ)" \
       "loadavg=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" \
       "mem_gib=$(awk '/MemTotal/{printf "%.0f", $2/1048576}' /proc/meminfo)" \
       "header_md5=$(md5sum "$ROOT/normblocks.h" | cut -c1-12)" \
       "git=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)$(git -C "$ROOT" diff --quiet -- normblocks.h 2>/dev/null || echo +dirty)"
} >>"$RAW"
HAVE_TORCH=0
if [ "$TORCH" = 1 ]; then
  if "$PY" -c 'import torch' 2>/dev/null; then HAVE_TORCH=1
  else echo "== PyTorch not importable with $PY: PyTorch comparisons skipped (apt-get install python3-torch)"
       echo "TORCH_SKIPPED reason=not_importable" >>"$RAW"; fi
fi

# env A: BLAS sequential, normblocks threads; env B: BLAS threads, passive OpenMP waiting
envA() { env OPENBLAS_NUM_THREADS=1 "$@"; }
envB() { env OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE "$@"; }

# run ENV PROGRAM ARGS...: one case in its own process; tags its RESULT line with env=;
# repeats it once when other processes used > 15% of the CPUs meanwhile or the repetitions
# spread by more than 30% of the median (a neighbour the others counter cannot see).
run() {
  local tag=$1; shift
  local try out others spread
  for try in 1 2; do
    out=$("env$tag" "$@" 2>>"$LOG")
    echo "$out" >>"$LOG"
    echo "$out" | grep -v '^RESULT' | sed 's/^/  /'
    echo "$out" | grep '^RESULT' | sed "s/\$/ env=$tag try=$try/" >>"$RAW"
    others=$(echo "$out" | grep '^RESULT' | sed -n 's/.* others=\([0-9.]*\).*/\1/p')
    spread=$(echo "$out" | grep '^RESULT' | sed -n 's/.* spread=\([0-9.]*\).*/\1/p')
    [ "$RETRY" = 1 ] && [ -n "$others" ] || break
    awk -v o="$others" -v s="${spread:-0}" 'BEGIN{exit !(o > 0.15 || s > 0.3)}' || break
    [ $try = 1 ] && echo "  (other processes took ${others} of the CPUs, spread ${spread:-?}: repeating)"
  done
}

B="$BUILD"
T0=$(date +%s)
if [ "$QUICK" = 1 ]; then
  SHAPES="4,128,256,4,5"; NORMS="2048,512"; ATTN_T="256 1024"
else
  # B,T,d,H,reps (the big shape is the slow one: fewer reps)
  SHAPES="4,128,256,4,11 8,256,512,8,5 2,1024,1024,16,3"
  NORMS="2048,512 8192,1024"; ATTN_T="256 512 1024 2048 4096"
fi

echo "== blocks: forward+backward, 1-layer stack, vs its GEMMs alone and vs PyTorch"
for s in $SHAPES; do
  IFS=, read -r b t d h reps <<<"$s"
  for p in pre hybrid siamese gpt2; do
    for cfg in "1 A" "2 A" "2 B"; do
      set -- $cfg
      run "$2" "$B/bench_block" "$p" "$b" "$t" "$d" "$h" "$1" "$reps" 1
      [ "$HAVE_TORCH" = 1 ] && run "$2" "$PY" "$ROOT/bench/bench_torch.py" block "$p" "$b" "$t" "$d" "$h" "$1" "$reps" 1
    done
  done
done

echo "== norms: forward+backward vs a STREAM copy of the same size and vs PyTorch"
for s in $NORMS; do
  IFS=, read -r n d <<<"$s"
  for k in rms layer; do
    for cfg in "1 A" "2 A" "2 B"; do
      set -- $cfg
      run "$2" "$B/bench_norm" "$k" "$n" "$d" "$1" 11 2
      [ "$HAVE_TORCH" = 1 ] && run "$2" "$PY" "$ROOT/bench/bench_torch.py" norm "$k" "$n" "$d" "$1" 11 2
    done
  done
done

echo "== attention: forward+backward and memory vs T (B=1, d=1024, H=16), PROBS vs LSE"
for t in $ATTN_T; do
  reps=5; [ "$t" -ge 2048 ] && reps=3
  for m in probs lse; do
    run A "$B/bench_attn" "$m" "$t" 1024 16 2 "$reps" 1
    if [ "$t" -le 1024 ]; then run B "$B/bench_attn" "$m" "$t" 1024 16 2 "$reps" 1; fi
  done
done
echo "== bf16: the Pre-Norm block with precision BF16 (its row names the kernels), on the portable"
echo "   path, vs PyTorch under torch.autocast(\"cpu\", dtype=torch.bfloat16), and the GEMM backends"
for s in $SHAPES; do
  IFS=, read -r b t d h reps <<<"$s"
  for nt in 1 2; do
    run A env NBB_BF16=1 "$B/bench_block" pre "$b" "$t" "$d" "$h" "$nt" "$reps" 1
    # the library's choice is oneDNN only in a build with it (then bench_dnnl is built too)
    if [ -x "$B/bench_dnnl" ]; then run A env NBB_BF16=1 NBB_BACKEND=blas "$B/bench_block" pre "$b" "$t" "$d" "$h" "$nt" "$reps" 1; fi
    [ "$HAVE_TORCH" = 1 ] && run A env NBB_BF16=1 "$PY" "$ROOT/bench/bench_torch.py" block pre "$b" "$t" "$d" "$h" "$nt" "$reps" 1
    if [ -x "$B/bench_dnnl" ]; then run A env OMP_NUM_THREADS="$nt" "$B/bench_dnnl" "$b" "$t" "$d" "$nt" "$reps"; fi
  done
done
[ -x "$B/bench_dnnl" ] || echo "  (bench_dnnl not built: apt-get install libdnnl-dev)"

echo "== parameter gradients: overwritten by the backward vs zeroed by the trainer (L=4)"
for nt in 1 2; do
  run A "$B/bench_grads" pre 4 8 256 512 8 "$nt" 7
done
echo "ELAPSED seconds=$(( $(date +%s) - T0 ))" >>"$RAW"

echo "== report ($OUT/report.md)"
"$PY" "$ROOT/bench/report.py" "$RAW" >"$OUT/report.md" || python3 "$ROOT/bench/report.py" "$RAW" >"$OUT/report.md"
cat "$OUT/report.md"
if [ "$README" = 1 ]; then
  "$PY" "$ROOT/bench/report.py" --update-readme "$ROOT/bench/README.md" "$RAW" && echo "== updated bench/README.md"
fi
