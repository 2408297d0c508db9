#!/usr/bin/env python3
"""Step time of data-parallel training at 8-1024 ranks, from a measured compute rate and an
alpha-beta model of the collectives (bench/SCALING.md explains the model; no dependencies).

    python3 bench/scaling_model.py --tok-s 14270 --params 0.887e6 --seq 64
    python3 bench/scaling_model.py            # the two sizes of bench/bench_train.sh
    python3 bench/scaling_model.py --alpha-us 50 --beta-gbs 0.0125 --ranks 2   # one given link

Model, per training step on p ranks with a fixed global batch of `global_seqs` sequences of T
tokens (strong scaling: each rank computes global_seqs / p of them, at least one):
  compute    C = tokens per rank x seconds per token (1 rank x 1 thread, measured by
             bench_train.sh at `measured_seqs` sequences per step, minus the optimizer's share)
             + optimizer
             (AdamW reads p, g, m, v and writes p, m, v: 28 bytes per parameter at `mem_gbs`;
             plain data parallelism updates every parameter on every rank, ZeRO-1 1/p of them)
  allreduce  Rabenseifner (reduce-scatter + all-gather, what MPI uses for large messages):
             2 log2(p) alpha per bucket + 2 (p-1)/p * bytes / beta
  overlap    buckets reduce while the backward (2/3 of C) runs; exposed = max(0, R - 2/3 C)
             plus the last bucket, which only starts when the backward ends
  ZeRO-1     the same reduce-scatter, then an all-gather of the parameters after the update
             that nothing hides (the trainer does not overlap it with the next forward)
"""
import argparse
import math

NETS = [("25 Gb/s Ethernet, TCP", 25e9 / 8, 15e-6), ("100 Gb/s RDMA", 100e9 / 8, 3e-6)]


def adamw_seconds(params, mem_gbs):
    return 28.0 * params / (mem_gbs * 1e9)


def step(p, sec_per_token, params, tokens, beta, alpha, bucket_bytes, zero, mem_gbs):
    nbytes = 4.0 * params
    compute = tokens * sec_per_token
    opt = adamw_seconds(params, mem_gbs) / (p if zero else 1)
    if p == 1:
        return compute + opt, 0.0
    buckets = max(1, math.ceil(nbytes / bucket_bytes))
    lat = math.log2(p) * alpha * buckets
    half = (p - 1) / p * nbytes / beta        # one reduce-scatter or all-gather of everything
    last = min(nbytes, bucket_bytes) / nbytes
    if zero:
        reduce = lat + half
        tail = lat / buckets + half * last + (math.log2(p) * alpha + half)  # + parameter all-gather
    else:
        reduce = 2 * lat + 2 * half
        tail = 2 * lat / buckets + 2 * half * last
    exposed = max(0.0, reduce - 2.0 / 3.0 * compute) + tail
    return compute + opt + exposed, exposed


def table(name, tok_s, params, seq, global_seqs, bucket_kb, mem_gbs, measured_seqs, nets=NETS,
          ranks=(1, 8, 32, 128, 512, 1024)):
    # the measured step includes one AdamW update: take it out of the per-token compute
    sec_per_token = 1.0 / tok_s - adamw_seconds(params, mem_gbs) / (measured_seqs * seq)
    print(f"\n{name}: {params / 1e6:.2f} M parameters, global batch {global_seqs} x {seq} tokens, "
          f"{tok_s:.0f} tok/s on one core; efficiency = tokens/s per rank against 1 rank (past "
          f"{global_seqs} ranks each rank has one sequence: the batch grows)")
    for net, beta, alpha in nets:
        bw = f"{beta / 1e9:.2f}" if nets is NETS else f"{beta / 1e9:.4g}"
        print(f"  {net} (alpha {alpha * 1e6:.0f} us, beta {bw} GB/s)")
        print(f"  {'ranks':>6} {'seqs/rank':>9} {'plain: ms':>10} {'comm %':>7} {'eff.':>5} "
              f"{'ZeRO-1: ms':>11} {'comm %':>7} {'eff.':>5}")
        t1, _ = step(1, sec_per_token, params, global_seqs * seq, beta, alpha, bucket_kb * 1024, 0, mem_gbs)
        for p in ranks:
            per = max(1, global_seqs // p)
            row = f"  {p:>6} {per:>9}"
            for zero in (0, 1):
                t, e = step(p, sec_per_token, params, per * seq, beta, alpha, bucket_kb * 1024, zero, mem_gbs)
                row += f" {t * 1e3:>10.1f} {100 * e / t:>7.1f} {100 * t1 * per / (t * global_seqs):>4.0f}%"
            print(row)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tok-s", type=float, help="tokens/s of one rank on one core (bench_train.sh)")
    ap.add_argument("--params", type=float)
    ap.add_argument("--seq", type=int, help="tokens per sequence")
    ap.add_argument("--global-seqs", type=int, default=512, help="sequences per global batch")
    ap.add_argument("--bucket-kb", type=int, default=256)
    ap.add_argument("--mem-gbs", type=float, default=11.0, help="memory bandwidth of one core")
    ap.add_argument("--measured-seqs", type=int, default=8, help="sequences per step of the --tok-s run")
    ap.add_argument("--alpha-us", type=float, help="one link instead of the two networks: latency "
                    "per message in microseconds (with --beta-gbs)")
    ap.add_argument("--beta-gbs", type=float, help="its bandwidth in GB/s (bytes, not bits)")
    ap.add_argument("--ranks", default="1,8,32,128,512,1024", help="rank counts of the table")
    a = ap.parse_args()
    if (a.alpha_us is None) != (a.beta_gbs is None):
        ap.error("--alpha-us and --beta-gbs go together")
    nets = NETS if a.alpha_us is None else [("given link", a.beta_gbs * 1e9, a.alpha_us * 1e-6)]
    ranks = [int(r) for r in a.ranks.split(",")]
    if a.tok_s:
        table("model", a.tok_s, a.params, a.seq, a.global_seqs, a.bucket_kb, a.mem_gbs,
              a.measured_seqs, nets, ranks)
        return
    # measured on this machine by bench/bench_train.sh (1 process x 1 thread, batch 8,
    # OPENBLAS_CORETYPE=SkylakeX, 2026-11-23), see SCALING.md
    table("small (d=64, L=16, T=64)", 14270, 0.887e6, 64, a.global_seqs, a.bucket_kb, a.mem_gbs, 8,
          nets, ranks)
    table("large (d=512, L=4, T=128)", 1662, 13.1e6, 128, a.global_seqs, a.bucket_kb, a.mem_gbs, 8,
          nets, ranks)


if __name__ == "__main__":
    main()
