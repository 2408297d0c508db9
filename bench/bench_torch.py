#!/usr/bin/python3
"""PyTorch peers of the normblocks benchmarks (Debian's python3-torch, CPU, float32; blocks also
under bf16 autocast).

usage:
  bench_torch.py block PRESET B T d H THREADS REPS [WARMUP]
  NBB_BF16=1 bench_torch.py block PRESET B T d H THREADS REPS [WARMUP]
  bench_torch.py norm rms|layer N d THREADS REPS [WARMUP]

The blocks are the same functions as normblocks' 1-layer stacks (final norm off, except
SiameseNorm's mandatory output fusion), written the way a PyTorch 1.13 model writes them:
nn.functional.linear for projections, matmul + masked_fill + softmax + matmul for causal
attention (full T x T; 1.13 has no fused CPU attention), composed RMSNorm (1.13 has none),
native F.layer_norm, F.silu / F.gelu(approximate="tanh").
  pre     x1 = x + Attn(RMS(x)); out = x1 + SwiGLU(RMS(x1))
  hybrid  y = x + Attn_QKVnorm(x); h = RMS(y); out = h + SwiGLU(h)   (per-head RMS on q, k, v)
  siamese SiameseNorm hybrid-pre with the 3-norm output fusion (normblocks.h, THE PRESETS)
  gpt2    pre with LayerNorm (gain+bias), GELU-tanh FFN with biases, 4d, and biases on the
          attention's projections (as normblocks' gpt2)
Each call runs one case in its own process, so ru_maxrss is the case's peak RSS (it includes
the ~300 MiB that importing torch costs; the RSS right after import is printed too).
Prints the same RESULT lines as the C benches (kind=torch_block / torch_norm); GFLOP/s and GB/s
are computed by bench/report.py from the C bench's flop and byte counts of the same case.

NBB_BF16=1 in the environment (the variable with which bench_block runs the block with precision
BF16) runs the block's timed forward under torch.autocast("cpu", dtype=torch.bfloat16), the
backward outside it (as PyTorch recommends); parameters, input and dout stay float32, so autocast
casts the weights to bf16 on every forward and runs linear / matmul in bf16 (on oneDNN's bf16
matmul where the CPU has bf16 instructions: brg:avx512_core_bf16 on AVX512-BF16 hosts, seen with
DNNL_VERBOSE=1). 1.13's CPU autocast also leaves the softmax of the bf16 scores (and the per-head
q/k/v norms of hybrid and siamese) in bf16; the residual sums come back float32 by type
promotion, so the norms of the residual stream run in float32. Its RESULT line says
kind=torch_block_bf16, the peer of bench_block's kind=block_bf16 rows. The norm case ignores
NBB_BF16.

On PyTorch >= 2.1 the block is written as its users write it now: the attention with
F.scaled_dot_product_attention(is_causal=True) and RMSNorm with F.rms_norm (2.4+); the RESULT
line's style=2.x says so (NBB_TORCH_STYLE=1.13 keeps the composed 1.13 forms).
"""
import math
import os
import resource
import sys
import time

OTHERS = -1.0


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def load_now():
    """(wall, machine busy CPU seconds, this process's CPU seconds): see bench_common.h"""
    busy = -1.0
    try:
        with open("/proc/stat") as fh:
            v = [int(a) for a in fh.readline().split()[1:9]]
        busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    t = os.times()
    return time.perf_counter(), busy, t.user + t.system


def others(a, b):
    """fraction of the machine's CPUs other processes used between a and b"""
    wall = b[0] - a[0]
    if a[1] < 0 or b[1] < 0 or wall <= 0:
        return -1.0
    return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / (wall * os.cpu_count()))


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def corename():
    """The OpenBLAS kernel set torch's BLAS runs with (same library instance as torch's)."""
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except Exception:  # noqa: BLE001 - informational only
        return "unknown"


def main():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print("# bench_torch: PyTorch not available (%s): skipped" % e)
        print("RESULT kind=torch_skipped reason=no_torch")
        return 0
    rss_import = rss_mib()
    kind = sys.argv[1]
    core = corename()
    if "prescott" in core.lower():
        sys.stderr.write("!! WARNING: torch's OpenBLAS runs Prescott kernels; set OPENBLAS_CORETYPE\n")
    torch.manual_seed(0)
    torch.set_grad_enabled(True)

    def timeit(step, reps, warm):
        global OTHERS
        l0 = load_now()
        for _ in range(warm):
            step()
        t = []
        for _ in range(reps):
            t0 = time.perf_counter()
            step()
            t.append(time.perf_counter() - t0)
        m = median(t)
        OTHERS = others(l0, load_now())
        return m, (max(t) - min(t)) / m

    env = "OPENBLAS_NUM_THREADS=%s OMP_WAIT_POLICY=%s" % (
        os.environ.get("OPENBLAS_NUM_THREADS", "(unset)"), os.environ.get("OMP_WAIT_POLICY", "(unset)"))

    if kind == "norm":
        norm, N, d, nt, reps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
        warm = int(sys.argv[7]) if len(sys.argv) > 7 else 2
        torch.set_num_threads(nt)
        x = torch.randn(N, d, requires_grad=True)
        g = (1 + 0.1 * torch.randn(d)).requires_grad_()
        b = torch.zeros(d, requires_grad=True)
        dy = torch.randn(N, d)

        def step():
            x.grad = g.grad = b.grad = None
            if norm == "layer":
                y = F.layer_norm(x, (d,), g, b, 1e-5)
            else:
                y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g
            y.backward(dy)

        t, spread = timeit(step, reps, warm)
        print("# torch %s N=%d d=%d threads=%d %s core=%s: %.3f ms (spread %.0f%%)"
              % (norm, N, d, nt, env, core, 1e3 * t, 100 * spread))
        print("RESULT kind=torch_norm norm=%s N=%d d=%d threads=%d reps=%d ms=%.4f rss_mib=%.1f "
              "rss_import_mib=%.1f spread=%.3f others=%.3f core=%s torch=%s"
              % (norm, N, d, nt, reps, 1e3 * t, rss_mib(), rss_import, spread, OTHERS, core,
                 torch.__version__))
        return 0

    if kind != "block":
        sys.stderr.write(__doc__)
        return 2
    preset = sys.argv[2]
    B, T, d, H, nt, reps = (int(a) for a in sys.argv[3:9])
    warm = int(sys.argv[9]) if len(sys.argv) > 9 else 1
    torch.set_num_threads(nt)
    dk = d // H
    gpt2 = preset == "gpt2"
    f = 4 * d if gpt2 else (8 * d // 3 + 63) // 64 * 64
    std = 0.02

    def P(*shape, init="w"):
        if init == "one":
            return torch.ones(*shape, requires_grad=True)
        if init == "zero":
            return torch.zeros(*shape, requires_grad=True)
        return (std * torch.randn(*shape)).requires_grad_()

    params = []

    def reg(*ps):
        params.extend(ps)
        return ps

    eps = 1e-5
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scale = 1.0 / math.sqrt(dk)

    # PyTorch >= 2.1 runs the block as its users write it now (NBB_TORCH_STYLE=1.13 keeps
    # the composed forms): F.scaled_dot_product_attention, and F.rms_norm where it exists (2.4+)
    major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    style = os.environ.get("NBB_TORCH_STYLE") or ("2.x" if (major, minor) >= (2, 1) else "1.13")
    fused_rms = style == "2.x" and hasattr(F, "rms_norm")

    def rms(x, g):
        if fused_rms:
            return F.rms_norm(x, (x.shape[-1],), g, eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    def make_norm():
        if gpt2:
            g, b = reg(P(d, init="one"), P(d, init="zero"))
            return lambda x: F.layer_norm(x, (d,), g, b, eps)
        (g,) = reg(P(d, init="one"))
        return lambda x: rms(x, g)

    def make_attn(sites):
        wqkv, wo = reg(P(3 * d, d), P(d, d))
        bqkv, bo = reg(P(3 * d, init="zero"), P(d, init="zero")) if gpt2 else (None, None)
        if sites:
            gq, gk, gv = reg(P(dk, init="one"), P(dk, init="one"), P(dk, init="one"))

        def attn(x):
            q, k, v = F.linear(x, wqkv, bqkv).split(d, dim=-1)
            q, k, v = (t.view(B, T, H, dk) for t in (q, k, v))
            if sites:  # per-head RMSNorm, one gain of d_k shared by the heads
                q, k, v = rms(q, gq), rms(k, gk), rms(v, gv)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            if style == "2.x":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return F.linear(y.transpose(1, 2).reshape(B, T, d), wo, bo)
            att = (q @ k.transpose(-2, -1)) * scale
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, d)
            return F.linear(y, wo, bo)
        return attn

    def make_ffn():
        if gpt2:
            w1, b1, w2, b2 = reg(P(f, d), P(f, init="zero"), P(d, f), P(d, init="zero"))
            return lambda x: F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)
        w1, w2 = reg(P(2 * f, d), P(d, f))

        def ffn(x):
            u, z = F.linear(x, w1).split(f, dim=-1)
            return F.linear(F.silu(z) * u, w2)
        return ffn

    if preset in ("pre", "gpt2"):
        n1, attn, n2, ffn = make_norm(), make_attn(False), make_norm(), make_ffn()

        def block(x):
            x1 = x + attn(n1(x))
            return x1 + ffn(n2(x1))
    elif preset == "hybrid":
        attn, n2, ffn = make_attn(True), make_norm(), make_ffn()

        def block(x):
            h = n2(x + attn(x))
            return h + ffn(h)
    elif preset == "siamese":
        attn, ffn = make_attn(True), make_ffn()
        n_ay, n_f, n_fy, n_in = make_norm(), make_norm(), make_norm(), make_norm()
        n_lnf, n_lnyf, n_final = make_norm(), make_norm(), make_norm()
        (gamma,) = reg(P(d, init="one"))
        ic = 1.0 / math.sqrt(2.0)  # c_0 = sqrt(2 (l + 1))

        def block(x):
            y = x
            a = attn(x * gamma + n_ay(y))
            x1, y1 = x + a * ic, y + a
            n = n_f(x1)
            fo = ffn(n_in(n + n_fy(y1)))
            xo, yo = n + fo * ic, y1 + fo
            return n_final(n_lnf(xo) + n_lnyf(yo))
    else:
        sys.stderr.write("bench_torch: unknown preset %s\n" % preset)
        return 2

    x = torch.randn(B, T, d, requires_grad=True)
    dout = torch.randn(B, T, d)
    bf16 = "NBB_BF16" in os.environ  # set at all, as bench_block reads it (getenv != NULL)

    def step():
        x.grad = None
        for p in params:
            p.grad = None
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = block(x)
            out.float().backward(dout)  # .float(): a no-op when the residual sum is float32
        else:
            block(x).backward(dout)

    t, spread = timeit(step, reps, warm)
    print("# torch block %s (B,T,d,H)=(%d,%d,%d,%d) threads=%d%s %s core=%s: %.2f ms (spread %.0f%%) "
          "peak RSS %.0f MiB (%.0f after import)"
          % (preset, B, T, d, H, nt, " autocast bf16" if bf16 else "", env, core, 1e3 * t,
             100 * spread, rss_mib(), rss_import))
    print("RESULT kind=torch_block%s preset=%s B=%d T=%d d=%d H=%d threads=%d reps=%d ms=%.3f "
          "rss_mib=%.1f rss_import_mib=%.1f spread=%.3f others=%.3f core=%s torch=%s style=%s"
          % ("_bf16" if bf16 else "", preset, B, T, d, H, nt, reps, 1e3 * t, rss_mib(), rss_import,
             spread, OTHERS, core, torch.__version__, style))
    return 0


if __name__ == "__main__":
    sys.exit(main())
