#!/usr/bin/env bash
# Communication share of a training step on 2 "hosts" (two network namespaces on this machine,
# one rank in each, over TCP on a veth pair; as tests/test_netns.sh) with the link shaped by tc,
# against what bench/scaling_model.py's alpha-beta model predicts for the same link:
#   alpha = the added one-way delay + the measured unshaped one-way latency (TCP ping-pong / 2)
#   beta  = the shaped rate (unshaped: the measured bulk TCP bandwidth over the veth)
# for p = 2, the model's parameter count and bucket size (--bucket-kb 256, the default), and
# the compute rate measured here (1 process x 1 thread, global batch 8, as bench_train.sh).
# "comm %" is the trainer's "communication not hidden" (bench_train.sh explains it). Measured
# twice: with Open MPI's default choice for the gradient buckets' in-place MPI_Iallreduce
# (libnbc: binomial reduce then broadcast whenever p < 4 or the buffer is MPI_IN_PLACE, which
# the trainer's is), and with --mca coll_libnbc_iallreduce_algorithm 3 (Rabenseifner: the
# reduce-scatter + all-gather the model assumes).
#
#   bash bench/bench_netns.sh               # needs root, ip netns, tc, Open MPI, python3
#   NB_NETNS_LINKS="0:0 1:100" bash bench/bench_netns.sh   # DELAY_MS:RATE_MBIT (0 = unshaped)
# Shaping: `tc qdisc ... netem delay D rate R` on both ends of the veth when the kernel has
# sch_netem; else (some VM kernels) `tbf rate R` only, and the delay is 0 (the table says so).
# Environment: NB_BENCH_BUILD (default /tmp/normblocks-bench-build), OPENBLAS_CORETYPE.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${NB_BENCH_BUILD:-/tmp/normblocks-bench-build}
LINKS=${NB_NETNS_LINKS:-"0:0 0.1:1000 1:100 5:20"}
case "${1:-}" in -h|--help) sed -n '2,16p' "$0"; exit 0 ;; esac
[ "$(id -u)" = 0 ] || { echo "bench_netns.sh: needs root (network namespaces)"; exit 1; }
for c in ip tc mpirun python3; do command -v $c > /dev/null || { echo "bench_netns.sh: no $c"; exit 1; }; done
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo 2>/dev/null; then export OPENBLAS_CORETYPE=Haswell; fi
fi
export OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DNORMBLOCKS_BUILD_TESTS=OFF > "$BUILD.cmake.log" 2>&1 &&
  cmake --build "$BUILD" -j2 --target train train_mpi > "$BUILD.build.log" 2>&1 || { echo "build failed: $BUILD.build.log"; exit 1; }

NS1="nbbench$$a" NS2="nbbench$$b" VETH1="nbb$$a" VETH2="nbb$$b"
IP1=10.78.0.1 IP2=10.78.0.2 NET=10.78.0.0/24
WORK="$(mktemp -d "${TMPDIR:-/tmp}/nb_netns_bench.XXXXXX")"
cleanup() { # processes first (they outlive a namespace), then the namespaces (veth and qdiscs go with them)
  local ns p
  for ns in "$NS1" "$NS2"; do p="$(ip netns pids "$ns" 2>/dev/null)"; [ -n "$p" ] && kill -9 $p 2>/dev/null; done
  ip link del "$VETH1" 2>/dev/null
  ip netns del "$NS1" 2>/dev/null
  ip netns del "$NS2" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
cd "$WORK" || exit 1
ip netns add "$NS1" && ip netns add "$NS2" && ip link add "$VETH1" type veth peer name "$VETH2" &&
  ip link set "$VETH1" netns "$NS1" && ip link set "$VETH2" netns "$NS2" &&
  ip -n "$NS1" addr add $IP1/24 dev "$VETH1" && ip -n "$NS2" addr add $IP2/24 dev "$VETH2" &&
  ip -n "$NS1" link set lo up && ip -n "$NS2" link set lo up &&
  ip -n "$NS1" link set "$VETH1" up && ip -n "$NS2" link set "$VETH2" up || { echo "namespace setup failed"; exit 1; }
cat > agent.sh <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in $IP1) ns=$NS1 ;; $IP2) ns=$NS2 ;; *) exit 1 ;; esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
chmod +x agent.sh
printf '%s slots=1\n%s slots=1\n' $IP1 $IP2 > hosts
HOSTS=(ip netns exec "$NS1" mpirun --hostfile hosts -np 2 --bind-to none
       --mca plm_rsh_agent "$WORK/agent.sh" --mca btl tcp,self
       --mca btl_tcp_if_include $NET --mca oob_tcp_if_include $NET
       -x OPENBLAS_NUM_THREADS -x OPENBLAS_CORETYPE -x OMP_WAIT_POLICY)

# TCP ping-pong (one-way latency = RTT / 2) and bulk bandwidth between the namespaces
cat > net.py <<'EOF'
import socket, sys, time
mode, host = sys.argv[1], sys.argv[2]
if mode == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 5599)); s.listen(2)
    for _ in range(2):
        c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            d = c.recv(1 << 20)
            if not d: break
            if len(d) == 1: c.sendall(d)
        c.close()
else:
    c = socket.create_connection((host, 5599)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(200): c.sendall(b"x"); c.recv(1)
    n = 2000; t = time.time()
    for _ in range(n): c.sendall(b"x"); c.recv(1)
    print("%.1f" % ((time.time() - t) / n / 2 * 1e6), end=" ")
    c.close()
    c = socket.create_connection((host, 5599)); buf = b"\0" * (1 << 20); n = 512; t = time.time()
    for _ in range(n): c.sendall(buf)
    c.shutdown(socket.SHUT_WR); c.recv(1)
    print("%.3f" % (n * len(buf) / (time.time() - t) / 1e9))
EOF
ip netns exec "$NS2" python3 net.py serve $IP2 &
sleep 0.5
read -r LAT_US BW_GBS <<< "$(ip netns exec "$NS1" python3 net.py client $IP2)"
wait

NETEM=1
ip netns exec "$NS1" tc qdisc add dev "$VETH1" root netem delay 1ms 2>/dev/null || NETEM=0
ip netns exec "$NS1" tc qdisc del dev "$VETH1" root 2>/dev/null
shape() { # DELAY_MS RATE_MBIT on both ends (0 0: none)
  local dev ns
  for ns in "$NS1:$VETH1" "$NS2:$VETH2"; do
    dev=${ns#*:} ns=${ns%%:*}
    ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null
    [ "$2" = 0 ] && continue
    if [ $NETEM = 1 ]; then
      ip netns exec "$ns" tc qdisc add dev "$dev" root netem delay "$1"ms rate "$2"mbit limit 100000
    else # the burst must hold one GSO segment (64 KiB); the queue 100 ms of the rate
      ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$2"mbit \
        burst $(( $2 * 1000000 / 8 / 1000 > 65536 ? $2 * 1000000 / 8 / 1000 : 65536 )) latency 100ms
    fi || { echo "tc failed"; exit 1; }
  done
}

# the model of bench_train.sh's small size; global batch 8 (4 rows per rank)
M=(--d 64 --layers 16 --heads 4 --seq 64 --batch 8 --warmup 5 --log-every 100000 --eval-batches 1 --threads 1)
# best_of N cmd...: "ms_per_step comm_pct" of the fastest of N runs
best_of() {
  local n=$1 best="" i out ms c
  shift
  for i in $(seq 1 "$n"); do
    out=$("$@" 2>&1)
    ms=$(sed -n 's/^throughput: .*(\([0-9.]*\) ms\/step).*/\1/p' <<< "$out")
    c=$(sed -n 's/.*communication not hidden: \([0-9.]*\)%.*/\1/p' <<< "$out")
    [ -z "$ms" ] && { echo "  failed: $*" >&2; tail -3 <<< "$out" >&2; continue; }
    if [ -z "$best" ] || awk -v a="$ms" -v b="${best% *}" 'BEGIN { exit !(a < b) }'; then best="$ms ${c:-0}"; fi
  done
  echo "${best:-nan nan}"
}
one=$("$BUILD/train" "${M[@]}" --steps 100 2>&1)
TOK_S=$(sed -n 's/^throughput: \([0-9.]*\) tok\/s.*/\1/p' <<< "$one")
PARAMS=$(sed -n 's/^model: .*, \([0-9]*\) parameters.*/\1/p' <<< "$one")
[ -n "$TOK_S" ] && [ -n "$PARAMS" ] || { echo "1-process run failed"; echo "$one" | tail -5; exit 1; }

echo "normblocks 2 hosts (network namespaces, TCP over veth), $(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "model d=64 L=16 H=4 T=64, global batch 8 (4 rows per rank), $PARAMS parameters, 256 KiB buckets; 1 process x 1 thread: $TOK_S tok/s"
echo "unshaped veth: one-way latency $LAT_US us (TCP ping-pong / 2), bulk TCP $BW_GBS GB/s; shaping: $([ $NETEM = 1 ] && echo "netem delay + rate" || echo "tbf rate only (no sch_netem in this kernel: delays not applied)")"
printf "%-22s %5s %8s %9s | %-17s | %-17s | %-17s\n" "" "" "" "" "measured, default" "measured, Raben." "model (Raben.)"
printf "%-22s %5s %8s %9s | %8s %8s | %8s %8s | %8s %8s\n" "link (delay, rate)" steps "alpha us" "beta GB/s" "ms/step" "comm %" "ms/step" "comm %" "ms/step" "comm %"
for l in $LINKS; do
  d=${l%%:*} r=${l#*:}
  [ $NETEM = 1 ] || d=0
  alpha=$(awk -v d="$d" -v l="$LAT_US" 'BEGIN { printf "%.1f", d * 1000 + l }')
  beta=$([ "$r" = 0 ] && echo "$BW_GBS" || awk -v r="$r" 'BEGIN { printf "%.5f", r / 8000 }')
  pred=$(python3 "$ROOT/bench/scaling_model.py" --tok-s "$TOK_S" --params "$PARAMS" --seq 64 --global-seqs 8 \
           --measured-seqs 8 --ranks 2 --alpha-us "$alpha" --beta-gbs "$beta" | awk '$1 == 2 { print $3, $4 }')
  # about 8 s a run at the predicted step time
  steps=$(awk -v t="${pred% *}" 'BEGIN { s = int(8000 / t); print (s < 6 ? 6 : (s > 150 ? 150 : s)) }')
  shape "$d" "$r"
  meas=$(best_of 2 "${HOSTS[@]}" "$BUILD/train_mpi" "${M[@]}" --steps "$steps")
  rab=$(best_of 2 "${HOSTS[@]}" --mca coll_libnbc_iallreduce_algorithm 3 "$BUILD/train_mpi" "${M[@]}" --steps "$steps")
  name=$([ "$r" = 0 ] && echo "unshaped" || echo "${d} ms, ${r} Mbit/s")
  printf "%-22s %5s %8s %9s | %8s %8s | %8s %8s | %8s %8s\n" "$name" "$steps" "$alpha" "$beta" "${meas% *}" "${meas#* }" \
    "${rab% *}" "${rab#* }" "${pred% *}" "${pred#* }"
done
shape 0 0
