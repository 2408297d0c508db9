#!/usr/bin/env python3
"""Turn bench/run.sh's raw RESULT lines into the markdown report (tables, ratios, targets).

usage: report.py RAW                       -> markdown on stdout
       report.py --update-readme README RAW -> replace the text between the RESULTS markers

Standard library only (runs without PyTorch). A case measured twice (run.sh repeats a case
when other processes took > 15% of the CPUs) keeps the run with the smaller "others" figure.
"""
import sys

BEGIN, END = "<!-- BEGIN RESULTS -->", "<!-- END RESULTS -->"
NAMES = {"pre": "Pre-Norm", "hybrid": "HybridNorm", "siamese": "SiameseNorm", "gpt2": "GPT-2"}


def parse(path):
    res, meta = [], {}
    with open(path) as fh:
        for line in fh:
            w = line.split()
            if not w:
                continue
            kv = dict(a.split("=", 1) for a in w[1:] if "=" in a)
            if w[0] == "RESULT":
                res.append(kv)
            elif w[0] in ("MACHINE", "ELAPSED", "TORCH_SKIPPED"):
                meta.setdefault(w[0] + "s", []).append(kv)
                meta.setdefault(w[0], kv)  # the first run's (run.sh --append adds more)
    return res, meta


def best(res, kind, **match):
    """of the results of `kind` whose fields equal `match` (None if absent), the fastest of
    those other processes left alone (others <= 0.15), else the least contaminated. Several
    runs of a case (a retry, or run.sh --append) thus count as best-of-N, for normblocks and
    PyTorch alike: on a shared host a slow run says more about the neighbours than the code.
    A tuple in `match` accepts any of its values (None: the field absent)."""
    def ok(r, k, v):
        if isinstance(v, tuple):
            return r.get(k) in tuple(None if x is None else str(x) for x in v)
        return r.get(k) == str(v)
    c = [r for r in res if r.get("kind") == kind and all(ok(r, k, v) for k, v in match.items())]
    if not c:
        return None

    def rank(r):
        o = float(r.get("others", 0))
        clean = 0 <= o <= 0.15
        return (not clean, float(r.get("ms", 0)) if clean else o)
    return min(c, key=rank)


def f(x, nd=1):
    return "-" if x is None else ("%.*f" % (nd, x))


def ms(r):
    return None if r is None else float(r["ms"])


def yn(ok):
    return "**met**" if ok else "**MISSED**"


def report(res, meta):
    out = []
    m = meta.get("MACHINE", {})
    core = next((r.get("core") for r in res if r.get("core")), "?")
    runs = meta.get("MACHINEs", [m])
    out.append("Machine: %s x `%s`, %s GiB RAM; OpenBLAS core `%s` (OPENBLAS_CORETYPE=%s); %s; "
               "load average at start %s; %s took %s s."
               % (m.get("nproc", "?"), m.get("cpu", "?").replace("_", " "), m.get("mem_gib", "?"),
                  core, m.get("coretype_env", "?"), ", ".join(r.get("date", "?") for r in runs),
                  m.get("loadavg", "?"),
                  "the run" if len(runs) < 2 else "%d runs (per case the fastest clean one)" % len(runs),
                  " + ".join(e.get("seconds", "?") for e in meta.get("ELAPSEDs", [{}]))))
    out.append("normblocks.h: git %s, md5 %s; compiled with `%s`."
               % (m.get("git", "?"), m.get("header_md5", "?"), m.get("cflags", "?").replace("_", " ")))
    torch_v = next((r.get("torch") for r in res if r.get("torch")), None)
    out.append("PyTorch: %s." % (torch_v or "not run"))
    if "Prescott" in core:
        out.append("\n**WARNING: OpenBLAS ran its Prescott (SSE3) kernels: figures are 5-6x too slow.**")
    out.append("")
    out.append("Env A = `OPENBLAS_NUM_THREADS=1` (normblocks threads everything); env B = "
               "`OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE`. \"others\" = share of the 2 CPUs "
               "other processes used during the case (contamination; > 0.15 means noisy).")
    out.append("")

    # ---- blocks
    shapes = []
    for r in res:
        if r.get("kind") == "block":
            s = (int(r["B"]), int(r["T"]), int(r["d"]), int(r["H"]))
            if s not in shapes:
                shapes.append(s)
    presets = [p for p in ("pre", "hybrid", "siamese", "gpt2")
               if any(r.get("kind") == "block" and r.get("preset") == p for r in res)]
    out.append("### Blocks: forward+backward of a 1-layer stack (env A)")
    out.append("")
    out.append("| block | (B,T,d,H) | thr | ms | fwd / bwd ms | GFLOP/s | GB/s | GEMMs alone ms | "
               "non-GEMM | PyTorch ms | vs PyTorch | RSS MiB (torch) | others |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    over_rows, speed_rows = [], []
    for s in shapes:
        for p in presets:
            for nt in (1, 2):
                key = dict(preset=p, B=s[0], T=s[1], d=s[2], H=s[3], threads=nt)
                r = best(res, "block", env="A", **key)
                if r is None:
                    continue
                tA = best(res, "torch_block", env="A", **key)
                tB = best(res, "torch_block", env="B", **key) if nt > 1 else None
                tt = [x for x in (tA, tB) if x is not None]
                tbest = min(tt, key=ms) if tt else None
                t, g = float(r["ms"]), float(r["gemm_ms"])
                over = (t - g) / t
                sp = ms(tbest) / t if tbest else None
                over_rows.append((p, s, nt, over, t - g))
                speed_rows.append((p, s, nt, sp, ms(tbest) / g if tbest else None))
                out.append("| %s | %s | %d | %.2f | %.1f / %.1f | %.1f | %.2f | %.2f | %.0f%% | %s%s | %s | %.0f (%s) | %s |"
                           % (NAMES.get(p, p), ",".join(map(str, s)), nt, t, float(r["fwd_ms"]),
                              float(r["bwd_ms"]), float(r["gflop"]) / t * 1e3,
                              float(r["gbytes"]) / t * 1e3, g, 100 * over, f(ms(tbest), 2),
                              "" if not tbest or nt == 1 else " (%s)" % tbest["env"],
                              (f(sp, 2) + "x") if sp else "-", float(r["rss_mib"]),
                              f(float(tbest["rss_mib"]), 0) if tbest else "-",
                              r.get("others", "?")))
    out.append("")
    out.append("GFLOP/s: forward = 2*M*N*K per GEMM with causal attention counted per computed "
               "64-row tile, backward = 2x forward; the same count for normblocks and PyTorch "
               "(PyTorch computes the full T x T scores). GB/s: nominal traffic = 4 B x (params "
               "read twice + grads read and written + cache written and read). \"vs PyTorch\" = "
               "PyTorch ms / normblocks ms with PyTorch in its faster env. SiameseNorm keeps its "
               "3-norm output fusion (it cannot be switched off).")
    out.append("")

    # ---- threading
    out.append("### Threading: env A vs env B at 2 threads (ms)")
    out.append("")
    out.append("| case | normblocks A | normblocks B | faster | PyTorch A | PyTorch B | faster |")
    out.append("|---|---|---|---|---|---|---|")
    thr_rows = []

    def faster(a, b):
        if a is None or b is None:
            return "-"
        w = "A" if a <= b else "B"
        return "%s (%.2fx)" % (w, max(a, b) / min(a, b))
    for s in shapes:
        for p in presets:
            key = dict(preset=p, B=s[0], T=s[1], d=s[2], H=s[3], threads=2)
            a, b = ms(best(res, "block", env="A", **key)), ms(best(res, "block", env="B", **key))
            ta, tb = ms(best(res, "torch_block", env="A", **key)), ms(best(res, "torch_block", env="B", **key))
            if a is None:
                continue
            thr_rows.append((a, b))
            out.append("| %s %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES.get(p, p), ",".join(map(str, s)), f(a, 2), f(b, 2), faster(a, b), f(ta, 2),
                f(tb, 2), faster(ta, tb)))
    norm_sizes = []
    for r in res:
        if r.get("kind") == "norm" and (r["N"], r["d"]) not in norm_sizes:
            norm_sizes.append((r["N"], r["d"]))
    for (N, d) in norm_sizes:
        for k in ("rms", "layer"):
            key = dict(norm=k, N=N, d=d, threads=2)
            a, b = ms(best(res, "norm", env="A", **key)), ms(best(res, "norm", env="B", **key))
            ta, tb = ms(best(res, "torch_norm", env="A", **key)), ms(best(res, "torch_norm", env="B", **key))
            if a is None:
                continue
            out.append("| %s %sx%s | %s | %s | %s | %s | %s | %s |" % (
                "RMSNorm" if k == "rms" else "LayerNorm", N, d, f(a, 3), f(b, 3), faster(a, b),
                f(ta, 3), f(tb, 3), faster(ta, tb)))
    for r in res:
        if r.get("kind") == "attn" and r.get("env") == "B" and r.get("skipped") == "0":
            a = ms(best(res, "attn", env="A", mode=r["mode"], T=r["T"], threads=r["threads"]))
            b = ms(best(res, "attn", env="B", mode=r["mode"], T=r["T"], threads=r["threads"]))
            if r is not best(res, "attn", env="B", mode=r["mode"], T=r["T"], threads=r["threads"]):
                continue
            out.append("| attention %s T=%s | %s | %s | %s | - | - | - |" % (
                r["mode"].upper(), r["T"], f(a, 1), f(b, 1), faster(a, b)))
    out.append("")

    # ---- norms
    out.append("### Norms: forward+backward (gain; LayerNorm also bias) vs a STREAM copy of the same size")
    out.append("")
    out.append("| norm | N x d | thr | env | ms | fwd / bwd ms | GB/s | copy GB/s | of copy | same traffic GB/s | of same traffic | PyTorch ms | vs PyTorch | others |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    norm_rows = []
    for (N, d) in norm_sizes:
        for k in ("rms", "layer"):
            for nt, env in ((1, "A"), (2, "A"), (2, "B")):
                key = dict(norm=k, N=N, d=d, threads=nt)
                r = best(res, "norm", env=env, **key)
                if r is None:
                    continue
                tr = best(res, "torch_norm", env=env, **key)
                t = float(r["ms"])
                bw = float(r["gbytes"]) / t * 1e3
                cbw = float(r["copy_gbytes"]) / float(r["copy_ms"]) * 1e3
                sbw = float(r["gbytes"]) / float(r["stream_ms"]) * 1e3 if "stream_ms" in r else None
                if env == "A":
                    norm_rows.append((k, N, d, nt, bw / cbw, bw / sbw if sbw else None))
                out.append("| %s | %sx%s | %d | %s | %.3f | %.3f / %.3f | %.1f | %.1f | %.0f%% | %s | %s | %s | %s | %s |" % (
                    "RMSNorm" if k == "rms" else "LayerNorm", N, d, nt, env, t, float(r["fwd_ms"]),
                    float(r["bwd_ms"]), bw, cbw, 100 * bw / cbw, f(sbw, 1),
                    ("%.0f%%" % (100 * bw / sbw)) if sbw else "-", f(ms(tr), 3),
                    (f(ms(tr) / t, 1) + "x") if tr else "-", r.get("others", "?")))
    out.append("")
    out.append("Bytes: forward 2*N*d*4, backward 3*N*d*4 (the minimum); copy 2*N*d*4 per call on "
               "the norm's own x and y, same threads; same traffic = the norm's own bytes streamed over "
               "its four arrays (y = x, then dx = x + dy), i.e. the same working set, which the copy "
               "of two arrays does not have (it can stay in the shared L3 while the norm's four "
               "arrays do not). PyTorch: composed RMSNorm "
               "(x * rsqrt(mean(x^2) + eps) * g), native F.layer_norm.")
    out.append("")

    # ---- attention
    out.append("### Attention sublayer: forward+backward vs T (B=1, d=1024, H=16, causal, 2 threads, env A)")
    out.append("")
    out.append("| T | mode | ms | fwd / bwd ms | GFLOP/s | cache+scratch MiB | peak RSS MiB | LSE / PROBS | others |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    Ts = sorted({int(r["T"]) for r in res if r.get("kind") == "attn"})
    ratio1024, lse4096 = None, None
    for T in Ts:
        rp = best(res, "attn", env="A", mode="probs", T=T)
        rl = best(res, "attn", env="A", mode="lse", T=T)
        ratio = None
        if rp and rl and rp.get("skipped") == "0" and rl.get("skipped") == "0":
            ratio = float(rl["ms"]) / float(rp["ms"])
        if T == 1024:
            ratio1024 = ratio
        if T == 4096 and rl and rl.get("skipped") == "0":
            lse4096 = rl
        for mode, r in (("PROBS", rp), ("LSE", rl)):
            if r is None:
                continue
            if r.get("skipped") == "1":
                out.append("| %d | %s | skipped: > 8 GiB of probabilities | | | | | | |" % (T, mode))
                continue
            t = float(r["ms"])
            out.append("| %d | %s | %.1f | %.1f / %.1f | %.1f | %.0f | %.0f | %s | %s |" % (
                T, mode, t, float(r["fwd_ms"]), float(r["bwd_ms"]), float(r["gflop"]) / t * 1e3,
                float(r["plan_mib"]), float(r["rss_mib"]),
                (f(ratio, 2) + "x") if (ratio and mode == "LSE") else "", r.get("others", "?")))
    out.append("")

    # ---- bf16 (run.sh: pre at every block shape, 1 and 2 threads, env A)
    bf_cases = []
    for r in res:
        if r.get("kind") in ("block_bf16", "torch_block_bf16"):
            c = (r["preset"], (int(r["B"]), int(r["T"]), int(r["d"]), int(r["H"])), int(r["threads"]))
            if c not in bf_cases:
                bf_cases.append(c)
    if bf_cases:
        out.append("### bf16: block forward+backward with precision BF16 vs float32 and vs PyTorch autocast (env A)")
        out.append("")
        out.append("| block | (B,T,d,H) | thr | float32 ms | bf16 oneDNN ms | bf16 portable ms | bf16 / float32 | "
                   "PyTorch float32 ms | PyTorch autocast bf16 ms | vs PyTorch bf16 | others (max) |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for p, s, nt in sorted(bf_cases, key=lambda c: (c[1], ("pre", "hybrid", "siamese", "gpt2", c[0]).index(c[0]), c[2])):
            key = dict(preset=p, B=s[0], T=s[1], d=s[2], H=s[3], threads=nt, env="A")
            f32 = best(res, "block", **key)
            dn = best(res, "block_bf16", backend="dnnl", **key)
            po = best(res, "block_bf16", backend=("blas", None), **key)  # no field: before oneDNN
            t32, tbf = best(res, "torch_block", **key), best(res, "torch_block_bf16", **key)
            nb = min((x for x in (dn, po) if x is not None), key=ms, default=None)
            rows = [x for x in (f32, dn, po, t32, tbf) if x is not None]
            oth = max((float(x.get("others", 0)) for x in rows), default=None)
            out.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES.get(p, p), ",".join(map(str, s)), nt, f(ms(f32), 2), f(ms(dn), 2), f(ms(po), 2),
                (f(ms(f32) / ms(nb), 2) + "x") if f32 and nb else "-", f(ms(t32), 2), f(ms(tbf), 2),
                (f(ms(tbf) / ms(nb), 2) + "x") if tbf and nb else "-", f(oth, 3)))
        out.append("")
        out.append("bf16 = `NBB_BF16=1 bench_block` (precision BF16: GEMM operands in bf16, sums, norms, "
                   "softmax and weights float32): oneDNN = the library's choice in a build with oneDNN on a "
                   "CPU with a bf16 kernel (`backend=dnnl`), portable = `NBB_BACKEND=blas` (the portable "
                   "path on OpenBLAS; also the choice of a build without oneDNN). \"bf16 / float32\" = float32 ms / the faster bf16 ms (> 1: bf16 is "
                   "faster). PyTorch autocast bf16 = `NBB_BF16=1 bench_torch.py block`: the forward under "
                   "`torch.autocast(\"cpu\", dtype=torch.bfloat16)`, the backward outside it, float32 "
                   "parameters (linear and matmul in bf16 on oneDNN, softmax in bf16). \"vs PyTorch bf16\" "
                   "= PyTorch autocast ms / the faster normblocks bf16 ms.")
        out.append("")

    # ---- targets
    out.append("### Targets")
    out.append("")
    big = [(p, s, nt, o, extra) for (p, s, nt, o, extra) in over_rows if s in ((8, 256, 512, 8), (2, 1024, 1024, 16))]
    if big:
        bad = [x for x in big if x[3] > 0.15]
        out.append("- Block non-GEMM overhead <= 15%% at (8,256,512,8) and (2,1024,1024,16): %s (%d of %d cases over: %s)"
                   % (yn(not bad), len(bad), len(big),
                      ", ".join("%s %s %dT %.1f%%" % (NAMES.get(p, p), ",".join(map(str, s)), nt, 100 * o)
                                for p, s, nt, o, _ in bad) or "none"))
    small = [x for x in speed_rows if x[1] == (4, 128, 256, 4) and x[3] is not None]
    if small:
        bad = [x for x in small if x[3] < 2]
        out.append("- >= 2x faster than PyTorch at (4,128,256,4), 1 and 2 threads: %s (%s; in brackets "
                   "the GEMM bound = PyTorch ms / GEMMs-alone ms, the ratio with zero non-GEMM time)"
                   % (yn(not bad), ", ".join("%s %dT %.2fx [%.2fx]" % (NAMES.get(p, p), nt, sp, ceil)
                                             for p, s, nt, sp, ceil in small)))
    allsp = [x for x in speed_rows if x[3] is not None]
    if allsp:
        bad = [x for x in allsp if x[3] < 1]
        out.append("- Never slower than PyTorch (any shape, 1 and 2 threads): %s (%s)"
                   % (yn(not bad), ", ".join("%s %s %dT %.2fx" % (NAMES.get(p, p), ",".join(map(str, s)), nt, sp)
                                              for p, s, nt, sp, _ in bad) or "slowest ratio %.2fx" % min(x[3] for x in allsp)))
    if norm_rows:
        bad = [x for x in norm_rows if x[4] < 0.7]
        out.append("- Norm forward+backward >= 70%% of the copy bandwidth (copy of x to y): %s (%s)"
                   % (yn(not bad), ", ".join("%s %sx%s %dT %.0f%%" % (k, N, d, nt, 100 * q) for k, N, d, nt, q, _ in norm_rows)))
        same = [x for x in norm_rows if x[5] is not None]
        if same:
            bad = [x for x in same if x[5] < 0.7]
            out.append("- Norm forward+backward >= 70%% of the same traffic streamed over the same four arrays: %s (%s)"
                       % (yn(not bad), ", ".join("%s %sx%s %dT %.0f%%" % (k, N, d, nt, 100 * q) for k, N, d, nt, _, q in same)))
    if Ts:
        out.append("- LSE attention within 1.5x of PROBS at T=1024: %s (%s)"
                   % (yn(ratio1024 is not None and ratio1024 <= 1.5), (f(ratio1024, 2) + "x") if ratio1024 else "not measured"))
        out.append("- LSE attention runs T=4096: %s%s"
                   % ("not measured (no T=4096 case in this run)" if 4096 not in Ts else yn(lse4096 is not None), " (%.0f ms, %.0f MiB peak RSS)" % (float(lse4096["ms"]), float(lse4096["rss_mib"])) if lse4096 else ""))
    if thr_rows:
        wa = sum(1 for a, b in thr_rows if b is None or a <= b)
        out.append("- Threading (blocks, 2 threads): env A faster in %d of %d cases." % (wa, len(thr_rows)))
    # A 2-thread case barely faster than its 1-thread case means the host took a core while it
    # ran (invisibly to `others`, which cannot see steal on every host): its ratios are suspect.
    scale = []
    for (p, s, nt, _, _) in over_rows:
        key = dict(preset=p, B=s[0], T=s[1], d=s[2], H=s[3])
        t1, t2 = (ms(best(res, "block", env="A", threads=n, **key)) for n in (1, 2))
        if nt == 2 and t1 and t2:
            scale.append((p, s, t1 / t2))
    if scale:
        slow = [x for x in scale if x[2] < 1.3]
        out.append("- Check: 2-thread speedup over 1 thread (blocks, env A) %.2f-%.2fx; below 1.3x "
                   "(a core probably taken by the host, rerun these): %s"
                   % (min(x[2] for x in scale), max(x[2] for x in scale),
                      ", ".join("%s %s %.2fx" % (NAMES.get(p, p), ",".join(map(str, s)), q) for p, s, q in slow) or "none"))
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) >= 4 and argv[1] == "--update-readme":
        readme, raw = argv[2], argv[3]
        res, meta = parse(raw)
        text = open(readme).read()
        i, j = text.find(BEGIN), text.find(END)
        if i < 0 or j < i:
            sys.stderr.write("report.py: %s has no %s ... %s markers\n" % (readme, BEGIN, END))
            return 1
        text = text[:i + len(BEGIN)] + "\n" + report(res, meta) + text[j:]
        open(readme, "w").write(text)
        return 0
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    res, meta = parse(argv[1])
    sys.stdout.write(report(res, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
