#!/usr/bin/env bash
# Data-parallel training (train_mpi under mpirun) against one process (train):
#   bash tests/test_mpi.sh path/to/train path/to/train_mpi path/to/nbdiff
# 1. 2 ranks with global batch B follow 1 rank with batch B to float32 rounding: every step's
#    loss within 1e-6 + 1e-5|loss|, the final parameters within 2e-4 + 1e-4|p|. The only
#    difference is the order of the float32 gradient sums; measured over 40 steps: 1e-8
#    relative on the loss, up to 1.5e-5 absolute on a parameter (Adam turns rounding noise in
#    a near-zero, cancelled gradient into an O(1) change of its update direction, so single
#    elements can move by a fraction of lr). A dropped bucket, a rank's rows counted twice or a
#    local instead of a global loss normalisation moves whole tensors by ~lr = 3e-3 per step:
#    the check that half a batch fails the same comparison shows the tolerance can fail.
#    Small buckets (--bucket-kb 4) so the backward launches many reductions; an uneven split
#    (batch 5 on 2 ranks) too.
# 2. Bitwise repeatable at a fixed rank and thread count; 1-rank MPI == the plain build.
# 3. ZeRO-1 == plain data parallelism, bitwise (same sums, same grad-norm partials).
# 4. Resume across rank counts: 2 ranks (ZeRO) stop at 20 and 1 rank finishes, and the reverse;
#    the curve continues the uninterrupted one within the tolerance of 1.
# 5. Ctrl-C on mpirun saves a checkpoint; a rank killed with SIGKILL ends the job (no hang).
# 6. nGPT's normalization after every step: 2 ranks follow 1, ZeRO-1 == plain, bitwise; a sweep's
#    in-process runs take their presets' optimizer defaults.
# 7. Gemma's constant embedding scale and final-logit softcap: 2 ranks follow 1, ZeRO-1 == plain.
# 8. QK-Clip (--qk-clip) with gated attention: each step's max logits are the maximum over the
#    ranks (MPI_MAX), so every rank clips the same heads of its full copy: 2 ranks follow 1
#    (curve, parameters, the heads clipped per step) and ZeRO-1 == plain, bitwise.
set -u

TRAIN="$(realpath "${1:?usage: test_mpi.sh train train_mpi nbdiff}")"
TRAIN_MPI="$(realpath "${2:?usage: test_mpi.sh train train_mpi nbdiff}")"
NBDIFF="$(realpath "${3:?usage: test_mpi.sh train train_mpi nbdiff}")"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/nb_mpi_test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1

# CI runs as root: Open MPI refuses that unless told; shared-memory single copy off for
# containers that forbid process_vm_readv.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# BLAS single-threaded, as normblocks expects: a multi-threaded BLAS changes which GEMM path
# normblocks takes, and so the order of sums, between a bound rank and a free process.
export OPENBLAS_NUM_THREADS=1
# In the sanitizer build: Open MPI is built without frame pointers; full unwinding lets the
# suppressions of cmake/lsan.supp (Open MPI's unfreed MPI_Init state) see its frames.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}fast_unwind_on_malloc=0"
MPIRUN=(mpirun --oversubscribe)

PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok: $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $1"; }

LOUD=(--d 32 --layers 2 --heads 2 --seq 24 --threads 1 --log-every 10 --eval-batches 2 --warmup 5
      --lr 3e-3 --steps 40)
RUN=("${LOUD[@]}" --quiet)

# same_curve A.csv B.csv: per-step loss within 1e-6 + 1e-5 |loss|, same step numbers, as many
# steps (the CSVs' columns after the loss are not compared)
same_curve() {
  awk -F, 'NR == FNR { if (FNR > 1) { m++; s[FNR] = $1; l[FNR] = $2 } next }
      FNR > 1 { n++; if ($1 != s[FNR]) bad = 1; d = l[FNR] - $2; if (d < 0) d = -d;
                lim = 1e-6 + 1e-5 * ($2 < 0 ? -$2 : $2); if (!(d <= lim)) { bad = 1; print "  step " $1 ": " l[FNR] " vs " $2 } }
      END { exit bad || n == 0 || n != m }' "$1" "$2"
}
# same_column A.csv B.csv K: column K of every row equal
same_column() { cmp -s <(cut -d, -f"$3" "$1") <(cut -d, -f"$3" "$2"); }
same_params() { # checkpoints: parameters within 1e-5 + 1e-4 |p| (the moments are not compared)
  "$NBDIFF" "$1" "$2" --atol 2e-4 --rtol 1e-4 --prefix transformer. > pdiff.log 2>&1 &&
  "$NBDIFF" "$1" "$2" --atol 2e-4 --rtol 1e-4 --prefix lm_head. >> pdiff.log 2>&1
}

# 1. 1 rank vs 2 ranks
"$TRAIN" "${RUN[@]}" --batch 6 --csv one.csv --save one.st > one.log 2>&1 || { fail "1-process run"; cat one.log; }
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${RUN[@]}" --batch 6 --bucket-kb 4 --csv two.csv --save two.st > two.log 2>&1
rc=$?
if [ $rc = 0 ] && same_curve one.csv two.csv && same_params one.st two.st; then
  pass "2 ranks x 3 rows follow 1 process x 6 rows (loss curve, final parameters)"
else
  fail "2 ranks vs 1 process (rc $rc)"; cat two.log pdiff.log 2>/dev/null
fi
"$TRAIN" "${RUN[@]}" --batch 3 --csv half.csv --save half.st > half.log 2>&1
if ! same_curve one.csv half.csv > /dev/null && ! same_params one.st half.st; then
  pass "the comparison fails for a run that sees half the batch (a missing reduction)"
else
  fail "the 1-vs-2-rank comparison cannot tell half a batch from the whole"
fi
"$TRAIN" "${RUN[@]}" --batch 5 --csv one5.csv --save one5.st > one5.log 2>&1
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${RUN[@]}" --batch 5 --csv two5.csv --save two5.st > two5.log 2>&1
rc=$?
if [ $rc = 0 ] && same_curve one5.csv two5.csv && same_params one5.st two5.st; then
  pass "uneven split: 2 ranks x (2, 3) rows follow 1 process x 5 rows"
else
  fail "uneven split (rc $rc)"; cat two5.log pdiff.log 2>/dev/null
fi

# 2. bitwise repeatable; one MPI rank is the plain program
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${RUN[@]}" --batch 6 --bucket-kb 4 --csv two_b.csv --save two_b.st > two_b.log 2>&1
if cmp -s two.st two_b.st && cmp -s two.csv two_b.csv; then
  pass "2 ranks: bitwise repeatable"
else
  fail "2 ranks: not bitwise repeatable"
fi
"${MPIRUN[@]}" -np 1 "$TRAIN_MPI" "${RUN[@]}" --batch 6 --csv onempi.csv --save onempi.st > onempi.log 2>&1
if cmp -s one.st onempi.st && cmp -s one.csv onempi.csv; then
  pass "1 MPI rank == the plain build, bitwise"
else
  fail "1 MPI rank differs from the plain build"; cat onempi.log
fi

# 3. ZeRO-1 == plain, bitwise
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${RUN[@]}" --batch 6 --bucket-kb 4 --zero --csv zero.csv --save zero.st > zero.log 2>&1
rc=$?
if [ $rc = 0 ] && cmp -s two.st zero.st && cmp -s two.csv zero.csv; then
  pass "ZeRO-1 == plain data parallelism, bitwise (checkpoint with gathered moments, curve)"
else
  fail "ZeRO-1 vs plain (rc $rc)"; cat zero.log; "$NBDIFF" two.st zero.st
fi

# 4. resume across rank counts
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${RUN[@]}" --batch 6 --zero --stop-after 20 --save half2.st > half2.log 2>&1
"$TRAIN" "${RUN[@]}" --batch 6 --resume half2.st --csv res1.csv --save res1.st > res1.log 2>&1
rc=$?
if [ $rc = 0 ] && same_curve <(head -1 one.csv; tail -n +22 one.csv) res1.csv && same_params one.st res1.st; then
  pass "saved by 2 ranks (ZeRO) at step 20, resumed on 1: continues the curve"
else
  fail "2 -> 1 rank resume (rc $rc)"; cat half2.log res1.log pdiff.log
fi
"$TRAIN" "${RUN[@]}" --batch 6 --stop-after 20 --save half1.st > half1.log 2>&1
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${RUN[@]}" --batch 6 --zero --resume half1.st --csv res2.csv --save res2.st > res2.log 2>&1
rc=$?
if [ $rc = 0 ] && same_curve <(head -1 one.csv; tail -n +22 one.csv) res2.csv && same_params one.st res2.st; then
  pass "saved by 1 process at step 20, resumed on 2 ranks (ZeRO): continues the curve"
else
  fail "1 -> 2 rank resume (rc $rc)"; cat res2.log pdiff.log
fi

# 5a. Ctrl-C on mpirun: every rank stops after the same step and rank 0 saves
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${LOUD[@]}" --batch 6 --steps 1000000 --log-every 1 --save int.st > int.log 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "^step" int.log 2>/dev/null && break; sleep 0.1; done
kill -INT "$pid" 2>/dev/null
wait "$pid"
istep="$(head -c 4096 int.st 2>/dev/null | grep -ao '"step":"[0-9]*"' | grep -o '[0-9][0-9]*')"
if [ -n "$istep" ] && "$TRAIN" "${RUN[@]}" --batch 6 --steps 1000000 --stop-after $((istep + 1)) --resume int.st > int2.log 2>&1; then
  pass "Ctrl-C on mpirun saves a checkpoint (step $istep) that resumes"
else
  fail "Ctrl-C on mpirun"; grep -v "^step" int.log; cat int2.log 2>/dev/null
fi

# 5b. a rank that dies ends the job with a message, never a hang
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${LOUD[@]}" --batch 6 --steps 1000000 --log-every 1 > dead.log 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "^step" dead.log 2>/dev/null && break; sleep 0.1; done
victim="$(pgrep -P "$pid" | tail -1)"
[ -n "$victim" ] && kill -9 "$victim"
for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  kill -9 "$pid"; fail "a killed rank hung the job for 30 s"
else
  wait "$pid"; rc=$?
  if [ $rc != 0 ] && grep -qi "signal 9\|killed\|exited" dead.log; then
    pass "a killed rank ends the job (mpirun exit $rc, with a message)"
  else
    fail "killed rank (rc $rc)"; tail -5 dead.log
  fi
fi

# 5c. configuration errors are reported once, by rank 0, and every rank exits
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${RUN[@]}" --batch 6 --preset nosuchnorm > bad.log 2>&1
rc=$?
if [ $rc != 0 ] && [ "$(grep -c "unknown preset" bad.log)" = 1 ]; then
  pass "a bad flag under mpirun: one message, the job exits"
else
  fail "bad flag under mpirun (rc $rc)"; cat bad.log
fi
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${RUN[@]}" --batch 1 > bad.log 2>&1
if [ $? != 0 ] && grep -q "smaller than the 2 ranks" bad.log; then
  pass "--batch smaller than the rank count is refused"
else
  fail "--batch < ranks"; cat bad.log
fi

# 6. nGPT (--preset ngpt): every rank normalizes the same gathered parameters after each step
#    (its matrices, embedding and head rows): 2 ranks follow 1 process (curve, parameters, the
#    logit scale sz) and ZeRO-1 == plain, bitwise; a sweep in this job (train_mpi runs its runs
#    in turn, in-process) gives each run its preset's optimizer defaults, as train's child
#    processes do (nGPT's first step at the full lr, Pre-Norm's at lr / 50 of its warmup)
NG=("${RUN[@]}" --preset ngpt --lr 1e-2 --batch 6)
"$TRAIN" "${NG[@]}" --csv ng1.csv --save ng1.st > ng1.log 2>&1 || { fail "nGPT: 1-process run"; cat ng1.log; }
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${NG[@]}" --bucket-kb 4 --csv ng2.csv --save ng2.st > ng2.log 2>&1
rc=$?
if [ $rc = 0 ] && same_curve ng1.csv ng2.csv && same_params ng1.st ng2.st &&
   "$NBDIFF" ng1.st ng2.st --atol 2e-4 --rtol 1e-4 --prefix sz >> pdiff.log 2>&1; then
  pass "nGPT: 2 ranks x 3 rows follow 1 process x 6 rows (loss curve, final parameters and sz)"
else
  fail "nGPT: 2 ranks vs 1 process (rc $rc)"; cat ng2.log pdiff.log 2>/dev/null
fi
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${NG[@]}" --bucket-kb 4 --zero --csv ngz.csv --save ngz.st > ngz.log 2>&1
rc=$?
if [ $rc = 0 ] && cmp -s ng2.st ngz.st && cmp -s ng2.csv ngz.csv; then
  pass "nGPT: ZeRO-1 == plain data parallelism, bitwise"
else
  fail "nGPT: ZeRO-1 vs plain (rc $rc)"; cat ngz.log; "$NBDIFF" ng2.st ngz.st
fi
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" --d 32 --layers 2 --heads 2 --seq 24 --batch 6 --threads 1 --eval-batches 2 \
  --eval-problems 16 --lr 3e-3 --steps 2 --compare pre,ngpt --out ngsweep > ngsweep.log 2>&1
if [ $? = 0 ] && grep -q "^pre,0.003,1337,1,[^,]*,[^,]*,6e-05," ngsweep/curves.csv &&
   grep -q "^ngpt,0.003,1337,1,[^,]*,[^,]*,0.003," ngsweep/curves.csv; then
  pass "a sweep in one job (--compare pre,ngpt): each run with its preset's optimizer defaults"
else
  fail "in-process sweep: the presets' defaults"; cat ngsweep.log ngsweep/curves.csv
fi

# 7. Gemma's model around the stack (--embed-scale sqrt-d, --logit-softcap): the constant scale
#    and the softcap's backward are per row, before the reduction: 2 ranks follow 1 process and
#    ZeRO-1 == plain, bitwise
GM=("${RUN[@]}" --batch 6 --embed-scale sqrt-d --logit-softcap 2.5)
"$TRAIN" "${GM[@]}" --csv gm1.csv --save gm1.st > gm1.log 2>&1 || { fail "Gemma options: 1-process run"; cat gm1.log; }
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${GM[@]}" --bucket-kb 4 --csv gm2.csv --save gm2.st > gm2.log 2>&1
rc=$?
if [ $rc = 0 ] && same_curve gm1.csv gm2.csv && same_params gm1.st gm2.st; then
  pass "embed scale sqrt(d), logit softcap: 2 ranks x 3 rows follow 1 process x 6 rows"
else
  fail "embed scale sqrt(d), logit softcap: 2 ranks vs 1 process (rc $rc)"; cat gm2.log pdiff.log 2>/dev/null
fi
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${GM[@]}" --bucket-kb 4 --zero --csv gmz.csv --save gmz.st > gmz.log 2>&1
rc=$?
if [ $rc = 0 ] && cmp -s gm2.st gmz.st && cmp -s gm2.csv gmz.csv; then
  pass "embed scale sqrt(d), logit softcap: ZeRO-1 == plain data parallelism, bitwise"
else
  fail "embed scale sqrt(d), logit softcap: ZeRO-1 vs plain (rc $rc)"; cat gmz.log; "$NBDIFF" gm2.st gmz.st
fi

# 8. QK-Clip: the maxima over the ranks; the clip on every rank's gathered parameters (ZeRO too)
QC=("${RUN[@]}" --batch 6 --qk-clip 1 --attn-gate elementwise)
"$TRAIN" "${QC[@]}" --csv qc1.csv --save qc1.st > qc1.log 2>&1 || { fail "QK-Clip: 1-process run"; cat qc1.log; }
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${QC[@]}" --bucket-kb 4 --csv qc2.csv --save qc2.st > qc2.log 2>&1
rc=$?
clips="$(awk -F, 'NR > 1 { n += $6 } END { print n + 0 }' qc1.csv)"
if [ $rc = 0 ] && [ "$clips" -gt 0 ] && same_curve qc1.csv qc2.csv && same_column qc1.csv qc2.csv 6 &&
   same_params qc1.st qc2.st; then
  pass "QK-Clip: 2 ranks x 3 rows follow 1 process x 6 rows (curve, parameters, the same $clips head clips)"
else
  fail "QK-Clip: 2 ranks vs 1 process (rc $rc, $clips clips)"; cat qc2.log pdiff.log 2>/dev/null; paste -d, qc1.csv qc2.csv | head -20
fi
"${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${QC[@]}" --bucket-kb 4 --zero --csv qcz.csv --save qcz.st > qcz.log 2>&1
rc=$?
if [ $rc = 0 ] && cmp -s qc2.st qcz.st && cmp -s qc2.csv qcz.csv; then
  pass "QK-Clip: ZeRO-1 == plain data parallelism, bitwise (every rank clips its gathered copy alike)"
else
  fail "QK-Clip: ZeRO-1 vs plain (rc $rc)"; cat qcz.log; "$NBDIFF" qc2.st qcz.st
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
