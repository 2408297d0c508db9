#!/usr/bin/env bash
# Data-parallel training across two "hosts" on one machine: two network namespaces joined by a
# veth pair, one rank in each, over TCP (Open MPI's rsh launcher with `ip netns exec` as its
# agent, so no ssh):
#   bash tests/test_netns.sh path/to/train path/to/train_mpi path/to/nbdiff
# Needs root, `ip netns` and veth, and Open MPI; otherwise prints "SKIP: <reason>", exits 77.
# 0. Each rank runs in its own namespace: the ranks record their /proc/self/ns/net before
#    exec'ing the trainer, and the two must be the two namespaces made here (not the same one,
#    not the machine's).
# 1. The 2-host run equals the 2-rank single-host run (shared memory), bitwise: loss curve
#    (CSV) and checkpoint. Measured bitwise equal: with 2 ranks every reduced value is the sum
#    of exactly two float32 addends, and a + b == b + a, so neither the transport (TCP instead
#    of shared memory) nor the collective's algorithm can change a bit. (With 3 or more ranks
#    the order of the sums could differ between algorithms; test_mpi.sh's tolerance would be
#    the one to use then.) Also ZeRO-1 over the two hosts (reduce-scatter, parameter
#    all-gather over TCP) == plain, bitwise, as test_mpi.sh shows on one host.
# 2. Faults mid-run (after step 12 of a long run that saves every 5 steps), each must end the
#    job within a stated time, with a message naming the failure; the last checkpoint loads,
#    equals itself under nbdiff, and resumes on one host (2 ranks, `train_mpi --resume`) for 20
#    steps, on the curve of an uninterrupted 2-rank run on one host within test_mpi.sh's
#    tolerance (a 1-process reference sums in another order and drifts past it by step ~150,
#    where a fault on a fast or busy machine can land):
#    a. the veth taken down in the second namespace: ended by mpirun's lost-daemon detection
#       (oob_tcp_keepalive 5 s idle + 3 probes x 2 s): bound 40 s. A rank's own
#       --comm-timeout cannot end this case: its MPI_Abort needs mpirun to reach the lost
#       host's daemon, which waits for TCP's retransmissions (~15 min) and, with data in
#       flight, keeps the keepalive from firing; so --comm-timeout (60 s here) must stay above
#       the keepalive detection. Measured: 12 s.
#    b. the remote rank killed (SIGKILL in the second namespace): its daemon reports it; 20 s.
#    c. the remote rank stopped (SIGSTOP: a hung peer, the network fine): rank 0's
#       --comm-timeout 5 names the collective and aborts; 25 s.
set -u

TRAIN="$(realpath "${1:?usage: test_netns.sh train train_mpi nbdiff}")"
TRAIN_MPI="$(realpath "${2:?usage: test_netns.sh train train_mpi nbdiff}")"
NBDIFF="$(realpath "${3:?usage: test_netns.sh train train_mpi nbdiff}")"

skip() { echo "SKIP: $1"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root (network namespaces need root)"
command -v ip > /dev/null || skip "no ip command (apt-get install iproute2)"
command -v mpirun > /dev/null || skip "no mpirun (apt-get install openmpi-bin)"
mpirun --version 2>/dev/null | grep -q "Open MPI" || skip "mpirun is not Open MPI's"

NS1="nbnet$$a" NS2="nbnet$$b" VETH1="nbv$$a" VETH2="nbv$$b"
IP1=10.77.0.1 IP2=10.77.0.2 NET=10.77.0.0/24
WORK="$(mktemp -d "${TMPDIR:-/tmp}/nb_netns_test.XXXXXX")"
BG=""
cleanup() {
  local ns p
  [ -n "$BG" ] && kill -9 "$BG" 2>/dev/null
  for ns in "$NS1" "$NS2"; do # processes left in a namespace outlive it: end them first
    p="$(ip netns pids "$ns" 2>/dev/null)"
    [ -n "$p" ] && kill -9 $p 2>/dev/null
  done
  ip link del "$VETH1" 2>/dev/null # only if never moved (deleting a namespace deletes its end)
  ip netns del "$NS1" 2>/dev/null
  ip netns del "$NS2" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
cd "$WORK" || exit 1

ip netns add "$NS1" 2>/dev/null || skip "ip netns add failed (no network namespaces here)"
ip netns add "$NS2" || exit 1
ip link add "$VETH1" type veth peer name "$VETH2" 2>/dev/null || skip "cannot create a veth pair"
ip link set "$VETH1" netns "$NS1" && ip link set "$VETH2" netns "$NS2" &&
  ip -n "$NS1" addr add $IP1/24 dev "$VETH1" && ip -n "$NS2" addr add $IP2/24 dev "$VETH2" &&
  ip -n "$NS1" link set lo up && ip -n "$NS2" link set lo up &&
  ip -n "$NS1" link set "$VETH1" up && ip -n "$NS2" link set "$VETH2" up || { echo "FAIL: namespace setup"; exit 1; }
NSID1="$(ip netns exec "$NS1" readlink /proc/self/ns/net)"
NSID2="$(ip netns exec "$NS2" readlink /proc/self/ns/net)"

# mpirun's rsh agent: called as `agent [ssh options] HOST COMMAND...`, runs COMMAND in HOST's
# namespace. mpirun runs in NS1, where IP1 is a local address: it starts that rank itself and
# only IP2 through the agent.
cat > agent.sh <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in
  $IP1) ns=$NS1 ;;
  $IP2) ns=$NS2 ;;
  *) echo "agent.sh: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
chmod +x agent.sh
printf '%s slots=1\n%s slots=1\n' $IP1 $IP2 > hosts
# each rank records its namespace, then becomes the trainer
cat > rank.sh <<EOF
#!/bin/sh
readlink /proc/self/ns/net > "$WORK/netns.\$OMPI_COMM_WORLD_RANK.\$TAG"
exec "$TRAIN_MPI" "\$@"
EOF
chmod +x rank.sh

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OPENBLAS_NUM_THREADS=1
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}fast_unwind_on_malloc=0"
# Two hosts: TCP only, and only the veth's addresses (the OOB channel of mpirun and its daemons
# too). --bind-to none: each "host" sees both cores and would bind its one rank to core 0.
# Lost-host detection of the daemons' channel in ~12 s instead of Open MPI's 300 + 9 x 20 s.
HOSTS=(ip netns exec "$NS1" mpirun --hostfile hosts -np 2 --bind-to none
       --mca plm_rsh_agent "$WORK/agent.sh" --mca btl tcp,self
       --mca btl_tcp_if_include $NET --mca oob_tcp_if_include $NET
       --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3
       -x OPENBLAS_NUM_THREADS -x LSAN_OPTIONS)
[ -n "${OPENBLAS_CORETYPE:-}" ] && HOSTS+=(-x OPENBLAS_CORETYPE)
[ -n "${OMP_NUM_THREADS:-}" ] && HOSTS+=(-x OMP_NUM_THREADS)
LOCAL=(mpirun --oversubscribe)

PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok: $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $1"; }

LOUD=(--d 32 --layers 2 --heads 2 --seq 24 --threads 1 --log-every 10 --eval-batches 2 --warmup 5
      --lr 3e-3 --steps 40)
RUN=("${LOUD[@]}" --quiet)

same_curve() { # A.csv B.csv: per-step loss within 1e-6 + 1e-5 |loss| (test_mpi.sh), same steps;
  # step and loss are the first two columns, whatever follows them
  awk -F, 'NR == FNR { if (FNR > 1) { m++; s[FNR] = $1; l[FNR] = $2 } next }
      FNR > 1 { n++; if ($1 != s[FNR]) bad = 1; d = l[FNR] - $2; if (d < 0) d = -d;
                lim = 1e-6 + 1e-5 * ($2 < 0 ? -$2 : $2); if (!(d <= lim)) { bad = 1; print "  step " $1 ": " l[FNR] " vs " $2 } }
      END { exit bad || n == 0 || n != m }' "$1" "$2"
}
same_params() { # parameters within test_mpi.sh's 2e-4 + 1e-4 |p|
  "$NBDIFF" "$1" "$2" --atol 2e-4 --rtol 1e-4 --prefix transformer. > pdiff.log 2>&1 &&
  "$NBDIFF" "$1" "$2" --atol 2e-4 --rtol 1e-4 --prefix lm_head. >> pdiff.log 2>&1
}
ck_step() { head -c 4096 "$1" 2>/dev/null | grep -ao '"step":"[0-9]*"' | grep -o '[0-9][0-9]*'; }
last_step() { grep -o '^step *[0-9]*' "$1" 2>/dev/null | tail -1 | grep -o '[0-9][0-9]*'; }

# 0 + 1. the two hosts against one host, bitwise; the namespaces of the ranks
"${LOCAL[@]}" -np 2 "$TRAIN_MPI" "${RUN[@]}" --batch 6 --bucket-kb 4 --csv one_host.csv --save one_host.st > one_host.log 2>&1 ||
  { fail "2 ranks on one host"; cat one_host.log; }
t0=$(date +%s.%N)
TAG=plain "${HOSTS[@]}" -x TAG "$WORK/rank.sh" "${RUN[@]}" --batch 6 --bucket-kb 4 --csv two_hosts.csv --save two_hosts.st > two_hosts.log 2>&1
rc=$?
echo "  (2-host run of 40 steps: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s)"
r0="$(cat netns.0.plain 2>/dev/null)" r1="$(cat netns.1.plain 2>/dev/null)"
if [ -n "$r0" ] && [ "$r0" = "$NSID1" ] && [ "$r1" = "$NSID2" ] && [ "$r0" != "$r1" ]; then
  pass "rank 0 ran in $NS1 ($r0), rank 1 in $NS2 ($r1)"
else
  fail "ranks not in their own namespaces: rank 0 '$r0', rank 1 '$r1' (want $NSID1, $NSID2)"
fi
if [ $rc = 0 ] && [ "$(wc -l < two_hosts.csv)" = 41 ] && cmp -s one_host.csv two_hosts.csv && cmp -s one_host.st two_hosts.st; then
  pass "2 hosts over TCP == 2 ranks on one host, bitwise (40-step loss curve, checkpoint)"
else
  fail "2 hosts vs 1 host (rc $rc)"; tail -20 two_hosts.log; "$NBDIFF" one_host.st two_hosts.st | tail -5
fi
TAG=zero "${HOSTS[@]}" -x TAG "$WORK/rank.sh" "${RUN[@]}" --batch 6 --bucket-kb 4 --zero --csv zero.csv --save zero.st > zero.log 2>&1
rc=$?
if [ $rc = 0 ] && [ "$(cat netns.1.zero 2>/dev/null)" = "$NSID2" ] && cmp -s one_host.csv zero.csv && cmp -s one_host.st zero.st; then
  pass "ZeRO-1 over 2 hosts == plain on one host, bitwise"
else
  fail "ZeRO-1 over 2 hosts (rc $rc)"; tail -20 zero.log
fi

# the reference for the resumed runs: 2 ranks on one host (the 2-host runs' sums, bitwise),
# uninterrupted, the first 600 steps of the long schedule (a fault comes after step 12, at
# 1 ms a step anywhere up to a few hundred). One process would sum in another order: its
# curve drifts from the 2-rank one with the steps, past same_curve's 1e-5 after about 150.
LONG=("${LOUD[@]}" --steps 1000000 --batch 6)
"${LOCAL[@]}" -np 2 "$TRAIN_MPI" "${LONG[@]}" --quiet --stop-after 600 --csv ref.csv > ref.log 2>&1 ||
  { fail "reference run"; cat ref.log; }

# fault NAME BOUND_S MESSAGE_REGEX COMM_TIMEOUT ACTION...: a long 2-host run saving every 5
# steps; after step 12 (while it trains), ACTION; then the job must end within BOUND_S seconds
# with MESSAGE_REGEX in its output, and its last checkpoint must resume on one host.
fault() {
  local name=$1 bound=$2 msg=$3 tmo=$4 at end elapsed ok=1 ck s i rpid
  shift 4
  TAG=$name "${HOSTS[@]}" -x TAG "$WORK/rank.sh" "${LONG[@]}" --log-every 1 --save "$name.st" --save-every 5 \
    --comm-timeout "$tmo" > "$name.log" 2>&1 &
  BG=$!
  for i in $(seq 1 600); do s="$(last_step "$name.log")"; [ "${s:-0}" -ge 12 ] && break; kill -0 $BG 2>/dev/null || break; sleep 0.1; done
  rpid=""
  for i in $(seq 1 50); do # the remote rank: the process of $TRAIN_MPI in NS2 (by its executable:
    # the trainer may re-exec itself through /proc/self/exe, which renames it "exe")
    for p in $(ip netns pids "$NS2"); do [ "$(readlink /proc/$p/exe 2>/dev/null)" = "$TRAIN_MPI" ] && rpid=$p; done
    [ -n "$rpid" ] && break; sleep 0.1
  done
  at="$(last_step "$name.log")"
  if [ "${at:-0}" -lt 12 ] || ! kill -0 $BG 2>/dev/null || [ -z "$rpid" ] || [ "$(cat "netns.1.$name" 2>/dev/null)" != "$NSID2" ]; then
    fail "$name: the 2-host run was not training (step ${at:-none}, remote rank ${rpid:-none})"; tail -5 "$name.log"
    kill -9 $BG 2>/dev/null; wait $BG 2>/dev/null; BG=""
    return
  fi
  RPID=$rpid "$@" || { fail "$name: could not inject the fault"; ok=0; }
  t0=$(date +%s.%N)
  while kill -0 $BG 2>/dev/null; do
    elapsed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%d", b - a }')
    [ "$elapsed" -ge "$bound" ] && break
    sleep 0.1
  done
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$t0" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  if kill -0 $BG 2>/dev/null; then
    fail "$name: the job still runs $elapsed s after the fault (bound $bound s)"; ok=0
    kill -9 $BG 2>/dev/null
  fi
  wait $BG 2>/dev/null; rc=$?; BG=""
  s="$(last_step "$name.log")"
  # training stopped at the fault: a few steps after it at most (packets in flight; the run
  # would otherwise have gone on by hundreds of steps a second), and the job ended with the
  # message
  if [ $ok = 1 ] && [ $rc != 0 ] && grep -Eq "$msg" "$name.log" && [ "${s:-0}" -ge "$at" ] && [ "$s" -le $((at + 50)) ]; then
    pass "$name at step $at (last step logged $s): the job ended in $elapsed s (bound $bound s), mpirun exit $rc: $(grep -Eo "$msg" "$name.log" | head -1)"
  elif [ $ok = 1 ]; then
    fail "$name: rc $rc, last step $s (fault at $at), message /$msg/ $(grep -Eq "$msg" "$name.log" && echo found || echo missing), ended after $elapsed s"
    grep -v '^step' "$name.log" | tail -15
  fi
  ck="$(ck_step "$name.st")"
  if [ -n "$ck" ] && [ "$ck" -ge 10 ] && [ $((ck % 5)) = 0 ] && [ "$ck" -le "$s" ] && [ "$ck" -le 580 ] &&
     "$NBDIFF" "$name.st" "$name.st" > "$name.nbdiff" 2>&1 &&
     "${LOCAL[@]}" -np 2 "$TRAIN_MPI" "${LONG[@]}" --quiet --resume "$name.st" --stop-after $((ck + 20)) \
       --csv "$name.res.csv" > "$name.res.log" 2>&1 &&
     [ "$(wc -l < "$name.res.csv")" = 21 ] &&
     same_curve <(head -1 ref.csv; sed -n "$((ck + 2)),$((ck + 21))p" ref.csv) "$name.res.csv"; then
    pass "$name: the last checkpoint (step $ck) is intact and resumes on one host (2 ranks) for 20 steps, on the uninterrupted curve"
  else
    fail "$name: checkpoint (step ${ck:-none})"; cat "$name.nbdiff" "$name.res.log" 2>/dev/null | tail -5
  fi
  # nothing of the job may be left in either namespace (the cleanup would hide it)
  for i in $(seq 1 100); do [ -z "$(ip netns pids "$NS1")$(ip netns pids "$NS2")" ] && break; sleep 0.1; done
  if [ -n "$(ip netns pids "$NS1")$(ip netns pids "$NS2")" ]; then
    fail "$name: processes left 10 s after the job ended: $(for p in $(ip netns pids "$NS1") $(ip netns pids "$NS2"); do cat /proc/$p/comm; done | tr '\n' ' ')"
    for p in $(ip netns pids "$NS1") $(ip netns pids "$NS2"); do kill -9 "$p"; done
  fi
}
link_down() {
  ip -n "$NS2" link set "$VETH2" down && ip -n "$NS2" link show "$VETH2" | grep -q "state DOWN"
}

fault link_down 40 "lost communication with a remote daemon" 60 link_down
ip -n "$NS2" link set "$VETH2" up
fault remote_killed 20 "exited on signal 9|Killed" 60 sh -c 'kill -9 $RPID'
fault remote_hung 25 "rank 0: error: MPI_I[a-z_]* \([a-z ]*\) has not completed in 5 s" 5 sh -c 'kill -STOP $RPID'

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ] && [ "$PASSED" = 9 ]
