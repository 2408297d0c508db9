#!/usr/bin/env bash
# Soak test (not in CI: ~15-30 min on 2 cores). For each stable preset, the SiameseNorm paper's
# protocol for "largest stable learning rate": from the largest rate of a grid down, train
# STEPS steps with --check-finite on and a checkpoint every 500 steps; the first rate whose run
# ends without divergence or a non-finite value and with a validation loss at least 0.1 nats
# under the unigram baseline is the preset's stable rate (a run that collapsed to the byte
# frequencies is not stable, only stuck). A 300-step probe on the same schedule
# (--stop-after) skips rates that fail early. Then fault injection: a NaN or Inf put into a
# named layer's activation or gradient at a chosen step must be named (layer and sublayer) and
# the run must stop without overwriting the last good checkpoint.
#   bash tests/soak.sh [path/to/train]      (default: build/train)
#   PRESETS="pre hybrid" STEPS=5000 bash tests/soak.sh
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TRAIN="$(realpath "${1:-$ROOT/build/train}")"
PRESETS=${PRESETS:-"pre hybrid hybrid_star siamese mixln sandwich olmo2 deepnorm"}
STEPS=${STEPS:-3000}
LRS=${LRS:-"3e-2 1e-2 6e-3 3e-3 1e-3"}
WORK="$(mktemp -d "${TMPDIR:-/tmp}/nb_soak.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
export OPENBLAS_NUM_THREADS=1
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then export OPENBLAS_CORETYPE=SkylakeX; fi
M=(--d 64 --layers 6 --heads 4 --seq 64 --batch 8 --threads 2 --warmup 100 --log-every 500 --eval-batches 2)
FAILED=0

# verdict LOG: "ok", or why the run at this rate is not stable
verdict() {
  local rc=$1 log=$2 v u
  v=$(sed -n 's/^final:.* val_loss \([^ ]*\) (unigram.*/\1/p' "$log")
  u=$(sed -n 's/^final:.*(unigram \([^)]*\)).*/\1/p' "$log")
  if [ "$rc" != 0 ]; then echo "$(grep -m1 -o 'diverged.*\|error.*' "$log" | cut -c1-60)"
  elif awk -v v="$v" -v u="$u" 'BEGIN { exit !(v < u - 0.1) }'; then echo ok
  else echo "collapsed to the unigram baseline ($u)"; fi
}

printf "%-12s %10s %12s %12s  %s\n" preset "stable lr" "final loss" "val loss" "larger rates"
for p in $PRESETS; do
  lr="" rejected=""
  for x in $LRS; do
    run=(--preset "$p" --lr "$x" --steps "$STEPS" --check-finite)
    "$TRAIN" "${M[@]}" "${run[@]}" --stop-after 300 --quiet > probe.log 2>&1
    why=$(verdict $? probe.log)
    if [ "$why" = ok ]; then
      "$TRAIN" "${M[@]}" "${run[@]}" --save "$p.st" --save-every 500 --quiet > "$p.log" 2>&1
      why=$(verdict $? "$p.log")
      [ "$why" = ok ] && { lr=$x; break; }
      why="$why after 300 steps"
    fi
    rejected="$rejected${rejected:+; }$x: $why"
  done
  if [ -z "$lr" ]; then
    printf "%-12s %10s %12s %12s  %s\n" "$p" none - - "FAILED: no stable rate ($rejected)"
    FAILED=$((FAILED + 1)); continue
  fi
  fl=$(sed -n 's/^final:.* loss \([^ ]*\) val_loss \([^ ]*\).*/\1 \2/p' "$p.log")
  printf "%-12s %10s %12s %12s  %s\n" "$p" "$lr" "${fl% *}" "${fl#* }" "${rejected:--}"
done

echo
echo "fault injection (--check-finite, checkpoint every 100 steps, fault at step 250):"
"$TRAIN" "${M[@]}" --steps 1000 --stop-after 200 --save good.st --quiet > good.log 2>&1
for inj in nan@250:3:attn:act inf@250:5:ffn:act nan@250:2:ffn:grad inf@250:4:attn:grad; do
  "$TRAIN" "${M[@]}" --steps 1000 --check-finite --save f.st --save-every 100 --inject "$inj" > f.log 2>&1
  rc=$?
  msg=$(grep -m1 "error" f.log)
  if [ $rc = 1 ] && [ -n "$msg" ] && cmp -s f.st good.st; then
    echo "  ok  $inj: $msg; checkpoint of step 200 kept"
  else
    echo "  FAIL $inj (rc $rc): $msg"; FAILED=$((FAILED + 1))
  fi
done
echo "$FAILED failed"
[ "$FAILED" = 0 ]
