#!/usr/bin/env bash
# Issue 34's figures in one run on a host without build tools (the device machine: a 16-core
# Xeon with AMX and a PyTorch 2.x), from programs bundled here:
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
#   cmake --build build -j2 --target train bench_block bench_dnnl bench_grid
#   bash ../shared/tools/bundle.sh build-device/nb build/train build/bench_block build/bench_dnnl \
#     build/bench_grid
#   tar -C build-device -cJf build-device/nb.tar.xz nb     # ~85 MB as files, far less packed
#   # then on the device (carry build-device/nb.tar.xz; one call, ~6-9 minutes at 16 cores):
#   bash bench/device.sh build-device/nb.tar.xz [THREADS]     # or the unpacked folder
#   PARTS="train torch" bash bench/device.sh ...               # some parts (two calls fit 10 min)
#   (bundle the bf16 tests too to run the part "tests": build/tests/test_backend,
#    test_block_fixtures_bf16, test_primitives, test_stack; they read tests/fixtures)
#   STEPS=6 MODELS="512 4 8" COMPILE=0 BATCHES="8 32" ...     # a shorter run
# Prints the CPU's matrix flags, the GEMM engines (bench_dnnl), the float32 GEMMs' thread grid
# before and now at THREADS (bench_grid, the team's time), the Pre-Norm block in float32
# and bf16 (the timed default, oneDNN, and the portable path: normblocks' GEMM on the AMX tiles)
# with the profile of each, the training step (d=512 L=4 and d=1024 L=2; float32 on OpenBLAS and
# on oneDNN, bf16 timed, on oneDNN and on the tiles, auto, with --profile) at 1 and THREADS threads
# and at batch 8 and 32 (strong scaling), and PyTorch's step as its version is written
# (bench_train_torch.py: the 2.x style on PyTorch >= 2.1; float32, autocast bf16, float32 with
# bf16 matmuls, torch.compile; what a forward keeps for the backward per token, --memory).
# Every row is from the same host in the same run.
set -u
B=${1:?usage: bash bench/device.sh BUNDLE(.tar.xz) [THREADS]}
if [ -f "$B" ]; then # a packed bundle: unpack it next to the build's scratch
  dir=$(mktemp -d) && tar -C "$dir" -xJf "$B" && B="$dir/$(ls "$dir" | head -1)" || exit 1
fi
NT=${2:-$(nproc)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
# the bundle's run script makes OpenMP wait passively; this host is dedicated, so the programs
# choose (on idle CPUs the runtime's spin-then-sleep default, as PyTorch runs) unless WAIT=PASSIVE
# or ACTIVE is given
nbrun() {
  local p=$1; shift
  env ${WAIT:+OMP_WAIT_POLICY=$WAIT} "$B/lib/$(ls "$B/lib" | grep -m1 '^ld-linux')" --library-path "$B/lib" "$B/bin/$p" "$@"
}
PARTS=" ${PARTS:-tests gemm grid block train torch} "
STEPS=${STEPS:-12}
MODELS=${MODELS:-512 4 8,1024 2 16}
BATCHES=${BATCHES:-8 32}
COMPILE=${COMPILE:-1} # 0: no torch.compile row (its compilation takes a minute or more)
part() { case "$PARTS" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
export OPENBLAS_NUM_THREADS=1
unset OMP_WAIT_POLICY
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi

echo "=== host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) CPUs; matrix flags:" \
     "$(grep -o -w -E 'amx_bf16|amx_tile|amx_int8|avx512_bf16|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "=== kernel $(uname -r); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset};" \
     "$("$PY" -c 'import torch; c = getattr(torch.backends, "cpu", None); print("torch", torch.__version__, "cpu capability", c.get_cpu_capability() if c else "?")' 2>&1 | tail -1)"

# the bf16 paths' tests on this host (a matrix kernel the build host lacks runs here)
part tests && for t in test_backend test_block_fixtures_bf16 test_primitives test_stack; do
  [ -x "$B/bin/$t" ] || { echo "--- $t: not bundled"; continue; }
  s=$(date +%s.%N)
  nbrun "$t" "$ROOT/tests/fixtures" >/tmp/nb_$t.log 2>&1
  rc=$?
  echo "--- $t rc=$rc ($(awk "BEGIN{print $(date +%s.%N) - $s}") s): $(tail -1 /tmp/nb_$t.log)"
  grep -E 'resolves to|skip|FAIL' /tmp/nb_$t.log | head -8
done

part gemm && echo "=== GEMM engines: the block's 12 linear GEMMs (bench_dnnl B T d THREADS REPS)"
part gemm && for t in 1 "$NT"; do OMP_NUM_THREADS=$t nbrun bench_dnnl 8 256 512 "$t" 3 | grep -E '^(gemm|all|RESULT)'; done

part grid && echo "=== float32 GEMMs on THREADS threads: the split before, the grid now (bench_grid, ms)"
part grid && for m in "8 128 512" "8 128 1024" "32 128 512"; do
  OMP_NUM_THREADS=$NT nbrun bench_grid $m "$NT" 5 team | grep -v '^# bench_grid'
done

part block && echo "=== Pre-Norm block (8,256,512,8): float32, bf16 timed default (float32 outputs, then the FFN's hidden layer in bf16), bf16 on oneDNN, bf16 portable (the tiles on AMX), bf16 portable on the emulation"
part block && for t in 1 "$NT"; do
  for cfg in "NBB_X=0" "NBB_BF16=1 NBB_BF16_WEIGHTS=1" "NBB_BF16=1 NBB_BF16_WEIGHTS=1 NBB_BF16_OUT=1" \
             "NBB_BF16=1 NBB_BF16_WEIGHTS=1 NBB_BACKEND=dnnl" "NBB_BF16=1 NBB_BF16_WEIGHTS=1 NBB_BACKEND=blas" \
             "NBB_BF16=1 NBB_BF16_WEIGHTS=1 NBB_BACKEND=blas NBB_GEMM=0"; do
    (export $cfg; nbrun bench_block pre 8 256 512 8 "$t" 5 2>&1 |
      grep -E 'NBB_GEMM|kernels|normblocks|GEMMs alone|non-GEMM|where the time|failed' | sed 's/: d_ff=.*//')
  done
done

part train && echo "=== training step (train --profile): tok/s and where the time goes"
part train && echo "$MODELS" | tr ',' '\n' | while read -r m; do
  set -- $m
  for b in $BATCHES; do
    for t in 1 "$NT"; do
      for p in fp32 "fp32 --backend dnnl" bf16 "bf16 --backend dnnl" "bf16 --backend blas" \
               "bf16 --bf16-outputs bf16" auto; do
        [ "$b" = 32 ] && [ "$p" != fp32 ] && [ "$p" != bf16 ] && continue
        steps=$STEPS; [ "$b" = 32 ] && steps=$(( (STEPS + 1) / 2 ))
        echo "--- d=$1 L=$2 H=$3 B=$b threads=$t --precision $p"
        nbrun train --d "$1" --layers "$2" --heads "$3" --seq 128 --batch "$b" --steps $steps \
          --warmup 3 --log-every 100000 --eval-batches 1 --eval-problems 1 --threads "$t" --precision $p \
          --profile 2>&1 | grep -E '^(kernels|precision auto|memory|throughput|profile|train: error)|^  [A-Za-z(]'
      done
    done
  done
done

part torch && echo "=== PyTorch, the same model and step (bench_train_torch.py)"
part torch && echo "$MODELS" | tr ',' '\n' | while read -r m; do
  set -- $m
  for t in 1 "$NT"; do
    for extra in "" "--bf16" "--fp32-bf16-matmul" "--bf16 --compile"; do
      case "$COMPILE$extra" in 0*--compile) continue ;; esac
      "$PY" "$ROOT/bench/bench_train_torch.py" --d "$1" --layers "$2" --heads "$3" --seq 128 \
        --batch 8 --threads "$t" --steps "$STEPS" --warmup 3 $extra 2>&1 | grep -E '^(# torch|torch_train)' |
        tail -2
    done
  done
  for extra in "" "--bf16"; do # what a forward keeps for the backward (the trainer's memory line)
    "$PY" "$ROOT/bench/bench_train_torch.py" --memory --d "$1" --layers "$2" --heads "$3" \
      --seq 128 --batch 8 $extra 2>&1 | tail -1
  done
done
