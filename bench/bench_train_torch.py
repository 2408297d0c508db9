#!/usr/bin/python3
"""PyTorch peer of the C trainer's whole training step (examples/train, preset pre).

Mirrors examples/train/model.c + optim.c with normblocks' Pre-Norm preset, float32 on CPU:
byte embedding (256 x d) -> L blocks -> final RMSNorm -> untied head (256 x d) -> mean
cross-entropy over every target (the benchmark's full mask); a block is
    y = x + MHA(RMSNorm(x)) ;  x' = y + SwiGLU(RMSNorm(y))
RMSNorm with a gain, eps 1e-5 inside the sqrt; MHA with a fused Q|K|V projection, NeoX
rotate-half RoPE (theta 10000) on q and k, causal, scale 1/sqrt(d_k), output projection;
SwiGLU W_in (2f x d, value half then gate half), a = silu(z) * u, f = 8d/3 rounded up to 64.
No biases. Init as the trainer's --init normal: N(0, 1/(2.5 d)) truncated at 3 std, gains 1.
The step is what a PyTorch 1.13 user writes for speed on CPU: nn.Linear, baddbmm + additive
causal mask + softmax (1.13 has no scaled_dot_product_attention), a composed RMSNorm (1.13 has
none), F.cross_entropy, clip_grad_norm_(1.0) every step, AdamW(lr 3e-3, betas (0.9, 0.95),
eps 1e-8, wd 0.1; no decay for the gains, foreach), zero_grad(set_to_none=True). The C
trainer's warmup/cosine lr schedule is left out (a scalar per step). Token batches are drawn
before timing; each step is timed with perf_counter over zero_grad, forward, loss, backward,
clip and optimizer step; tok/s comes from the median step.

--bf16: the forward and the loss run under torch.autocast("cpu", dtype=torch.bfloat16) (the
backward, clipping and AdamW outside it, as PyTorch recommends; parameters, gradients and the
optimizer state stay float32), the peer of the C trainer's --precision bf16. Autocast runs
nn.Linear, baddbmm and bmm in bf16 (oneDNN's bf16 matmul where the CPU has bf16 instructions),
leaves the softmax of the bf16 scores in bf16 and computes the cross-entropy in float32. Such a
run says "autocast bf16" in its header and prints torch_train_bf16 instead of torch_train.

  OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/bench_train_torch.py \
      --d 64 --layers 16 --heads 4 --seq 64 --batch 8 --threads 1 --steps 20 --warmup 3 [--bf16]
  /usr/bin/python3 bench/bench_train_torch.py --check   # the parameter counts ./build/train prints
(OPENBLAS_CORETYPE matters: Debian's OpenBLAS, which torch uses, picks slow kernels without it
on some CPUs. Its pthread pool adds threads to torch's OpenMP ones: with --threads 2 use
OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE, or =2 with PASSIVE, as bench/run.sh's envs;
spinning OpenMP threads on a shared 2-core machine can cost 3-5x.) The last line is
machine-readable:
  torch_train d=.. L=.. H=.. T=.. B=.. threads=.. tok_s=.. ms_step=.. median_of=.. params=..
        torch=VERSION style=1.13|2.x compiled=0|1
(torch_train_bf16 with --bf16, the same fields.)

--style 2.x (the default where PyTorch >= 2.1 runs it; --style 1.13 keeps the step above): the
step as a PyTorch 2.x user writes it: F.scaled_dot_product_attention(is_causal=True),
F.rms_norm where it exists (2.4+), AdamW(fused=True) where the CPU has it (else foreach), and
with --compile the model under torch.compile (the run says so, and falls back with a message
where it fails). --fp32-bf16-matmul: float32 storage with bf16 matmuls, PyTorch's
fp32_precision = "bf16" (torch.set_float32_matmul_precision("medium") before 2.9), the peer of
a float32 run whose GEMMs run on the bf16 matrix units; refused (exit 2, a "# torch" line saying
why) where a float32 Linear still multiplies in float32 after it: PyTorch 1.13, whose "medium"
is CUDA-only, and CPUs without bf16 instructions.

--memory (no training): what one forward keeps for the backward, counted by
torch.autograd.graph.saved_tensors_hooks (distinct storages, parameters left out), at batch B and
2B: the difference per token, per layer inside the blocks and for the whole model; the rest
(autocast's bf16 weight copies, the tables) does not grow with the batch. The peer of the C
trainer's "memory:" line. Last line: torch_memory[_bf16] d=.. L=.. H=.. T=.. B=..
layer_kib_per_token=.. model_kib_per_token=.. fixed_mib=.. torch=VERSION style=..
"""
import argparse
import ctypes
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, EPS = 256, 1e-5
# parameter counts printed by the C trainer ("model: pre, ... N parameters") for (d, L, H)
C_PARAMS = {(32, 2, 2): 49312, (64, 16, 4): 886848, (512, 4, 8): 13111808}


def cpu_now():
    """(wall s, busy CPU s of the whole machine, this process's CPU s), to see other load"""
    with open("/proc/stat") as fh:
        v = [int(a) for a in fh.readline().split()[1:9]]
    t = os.times()
    busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")
    return time.perf_counter(), busy, t.user + t.system


def openblas_core():
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "unknown"


def rms_norm(x, g):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * g


def modern_torch():
    """PyTorch >= 2.1: the version the 2.x style needs (scaled_dot_product_attention)"""
    major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    return (major, minor) >= (2, 1)


def rms_norm_2x(x, g):
    if hasattr(F, "rms_norm"):  # 2.4+
        return F.rms_norm(x, (x.shape[-1],), g, EPS)
    return rms_norm(x, g)


def rotate_half(x):  # NeoX: pairs (i, i + dk/2)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, d, H, style):
        super().__init__()
        self.style = style
        self.H, self.f = H, (8 * d // 3 + 63) // 64 * 64
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.qkv = nn.Linear(d, 3 * d, bias=False)      # rows q, then k, then v
        self.attn_out = nn.Linear(d, d, bias=False)
        self.ff_norm = nn.Parameter(torch.ones(d))
        self.ff_in = nn.Linear(d, 2 * self.f, bias=False)  # value u, then gate z
        self.ff_out = nn.Linear(self.f, d, bias=False)

    def attention(self, x, cos, sin, mask):
        B, T, d = x.shape
        H, dk = self.H, d // self.H
        q, k, v = self.qkv(x).view(B, T, 3, H, dk).unbind(2)   # (B, T, H, dk) each
        q = q * cos + rotate_half(q) * sin                      # cos, sin: (T, 1, dk)
        k = k * cos + rotate_half(k) * sin
        if self.style == "2.x":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))     # (B, H, T, dk)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.attn_out(y.transpose(1, 2).reshape(B, T, d))
        q, k, v = (t.transpose(1, 2).reshape(B * H, T, dk) for t in (q, k, v))
        att = torch.baddbmm(mask, q, k.transpose(1, 2), alpha=1.0 / math.sqrt(dk)).softmax(-1)
        y = torch.bmm(att, v).view(B, H, T, dk).transpose(1, 2).reshape(B, T, d)
        return self.attn_out(y)

    def forward(self, x, cos, sin, mask):
        norm = rms_norm_2x if self.style == "2.x" else rms_norm
        y = x + self.attention(norm(x, self.attn_norm), cos, sin, mask)
        u, z = self.ff_in(norm(y, self.ff_norm)).split(self.f, dim=-1)
        return y + self.ff_out(F.silu(z) * u)


class Model(nn.Module):
    def __init__(self, d, L, H, T, theta=10000.0, style="1.13"):
        super().__init__()
        self.style = style
        self.wte = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(Block(d, H, style) for _ in range(L))
        self.ln_f = nn.Parameter(torch.ones(d))
        self.head = nn.Linear(d, VOCAB, bias=False)
        std = 1 / math.sqrt(2.5 * d)  # the trainer's --init normal, embedding and head included
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.trunc_normal_(p, std=std, a=-3 * std, b=3 * std)
        dk = d // H
        inv = 1.0 / theta ** (torch.arange(0, dk, 2, dtype=torch.float64) / dk)
        ang = torch.outer(torch.arange(T, dtype=torch.float64), inv).repeat(1, 2)[:, None, :]
        self.register_buffer("cos", ang.cos().float())
        self.register_buffer("sin", ang.sin().float())
        self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1))

    def forward(self, tok, tgt):
        x = self.wte(tok)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin, self.mask)
        logits = self.head((rms_norm_2x if self.style == "2.x" else rms_norm)(x, self.ln_f))
        return F.cross_entropy(logits.view(-1, VOCAB), tgt.reshape(-1))


def make_optimizer(model, style):
    """AdamW; in the 2.x style fused where this PyTorch has a fused CPU AdamW (2.4+): returns
    the optimizer and "fused" or "foreach" """
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    if style == "2.x":
        try:
            return torch.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                                     fused=True), "fused"
        except (RuntimeError, TypeError, ValueError):
            pass
    return torch.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                             foreach=True), "foreach"


def forward(model, tok, tgt, bf16):
    if bf16:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(tok, tgt)
    return model(tok, tgt)


def saved_bytes(model, B, T, bf16):
    """Bytes autograd keeps from one forward for the backward (distinct storages, parameters not
    counted): (inside the blocks, in all), plus the dtypes seen inside the blocks."""
    params = {p.data_ptr() for p in model.parameters()}
    seen, where, dtypes = {}, ["outside"], set()

    def pack(t):
        try:
            st = t.untyped_storage()  # 2.x
            n = st.nbytes()
        except AttributeError:        # 1.13
            st = t.storage()
            n = st.size() * t.element_size()
        if st.data_ptr() not in params and st.data_ptr() not in seen:
            seen[st.data_ptr()] = (n, where[0])
            if where[0] == "blocks":
                dtypes.add(str(t.dtype).replace("torch.", ""))
        return t

    hooks = [model.blocks[0].register_forward_pre_hook(lambda m, i: where.__setitem__(0, "blocks")),
             model.blocks[-1].register_forward_hook(lambda m, i, o: where.__setitem__(0, "head"))]
    torch.manual_seed(0)
    data = torch.randint(0, VOCAB, (B, T + 1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward(model, data[:, :-1], data[:, 1:], bf16)
    for h in hooks:
        h.remove()
    del loss
    return (sum(n for n, w in seen.values() if w == "blocks"), sum(n for n, _ in seen.values()),
            dtypes)


def memory(a):
    """--memory: what one forward keeps for the backward, per token, at two batch sizes (B and
    2B): the difference is the activations (per token per layer inside the blocks, and per token
    for the whole model: embedding, final norm, head and loss too), the rest is what does not
    grow with the batch (autocast's bf16 copies of the weights, RoPE tables, the mask)."""
    torch.manual_seed(1337)
    model = Model(a.d, a.layers, a.heads, a.seq, style=a.style)
    B, T, L = a.batch, a.seq, a.layers
    b1, w1, dt = saved_bytes(model, B, T, a.bf16)
    b2, w2, _ = saved_bytes(model, 2 * B, T, a.bf16)
    per_tok_layer = (b2 - b1) / (B * T) / L
    per_tok = (w2 - w1) / (B * T)
    print("# torch %s, style %s%s: saved for the backward, per token: %.1f KiB per layer inside "
          "the blocks (%s), %.1f KiB for the whole model; not growing with the batch: %.2f MiB "
          "(autocast's weight copies, tables)"
          % (torch.__version__, a.style, ", autocast bf16" if a.bf16 else ", float32",
             per_tok_layer / 1024, "/".join(sorted(dt)), per_tok / 1024,
             (w1 - per_tok * B * T) / 2**20))
    print("torch_memory%s d=%d L=%d H=%d T=%d B=%d layer_kib_per_token=%.2f model_kib_per_token=%.2f "
          "fixed_mib=%.2f torch=%s style=%s"
          % ("_bf16" if a.bf16 else "", a.d, L, a.heads, T, B, per_tok_layer / 1024, per_tok / 1024,
             (w1 - per_tok * B * T) / 2**20, torch.__version__.split("+")[0], a.style))
    return 0


def check():
    """Parameter counts equal the C trainer's; the initial loss is near ln(256)."""
    for (d, L, H), want in C_PARAMS.items():
        torch.manual_seed(0)
        m = Model(d, L, H, 32)
        n = sum(p.numel() for p in m.parameters())
        tok = torch.randint(0, VOCAB, (4, 33))
        with torch.no_grad():
            loss = m(tok[:, :-1], tok[:, 1:]).item()       # the trainer's normal init
            m.head.weight.mul_(0.01)
            small = m(tok[:, :-1], tok[:, 1:]).item()      # small head: ~uniform predictions
        print("check d=%d L=%d H=%d: %d parameters (C trainer %d), initial loss %.4f, "
              "small-head %.4f (ln 256 = %.4f)" % (d, L, H, n, want, loss, small, math.log(VOCAB)))
        assert n == want, (n, want)
        assert abs(loss - math.log(VOCAB)) < 0.5 and abs(small - math.log(VOCAB)) < 0.01
    print("check ok")


def bf16_matmul_in_effect():
    """Whether float32 Linear layers now multiply in bf16: x = 1 + 2^-10 is exact in float32
    and rounds to 1 in bf16 (8 significant bits), so x times the identity tells them apart.
    PyTorch 1.13's "medium" is CUDA-only, and later versions need a CPU with bf16 instructions."""
    x = torch.full((128, 128), 1 + 2.0 ** -10)
    with torch.no_grad():
        y = torch.nn.functional.linear(x, torch.eye(128))
    return bool(y[0, 0].item() != 1 + 2.0 ** -10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in (("d", 64), ("layers", 16), ("heads", 4), ("seq", 64), ("batch", 8),
                 ("threads", 1), ("steps", 20), ("warmup", 3)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--memory", action="store_true",
                    help="print what a forward keeps for the backward, per token (no training)")
    ap.add_argument("--bf16", action="store_true",
                    help='forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)')
    ap.add_argument("--style", choices=("auto", "1.13", "2.x"), default="auto",
                    help="how the step is written [auto: 2.x on PyTorch >= 2.1]")
    ap.add_argument("--compile", action="store_true", help="2.x style: torch.compile the model")
    ap.add_argument("--fp32-bf16-matmul", action="store_true",
                    help='float32 storage, bf16 matmuls (fp32_precision = "bf16")')
    a = ap.parse_args()
    if a.style == "auto":
        a.style = "2.x" if modern_torch() else "1.13"
    if a.style == "2.x" and not modern_torch():
        ap.error("--style 2.x needs PyTorch >= 2.1 (this is %s)" % torch.__version__)
    if a.compile and a.style != "2.x":
        ap.error("--compile is part of the 2.x style")
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.set_num_threads(a.threads)
    if a.check:
        return check()
    if a.memory:
        return memory(a)
    torch.manual_seed(1337)
    B, T = a.batch, a.seq
    model = Model(a.d, a.layers, a.heads, T, style=a.style)
    opt, opt_kind = make_optimizer(model, a.style)
    n_params = sum(p.numel() for p in model.parameters())
    if a.fp32_bf16_matmul:
        try:
            torch.backends.mkldnn.matmul.fp32_precision = "bf16"  # 2.9+
        except AttributeError:
            torch.set_float32_matmul_precision("medium")
        if not bf16_matmul_in_effect():
            print("# torch %s: --fp32-bf16-matmul has no effect here (a float32 Linear still "
                  "multiplies in float32: this PyTorch or this CPU has no bf16 path for it); no row"
                  % torch.__version__)
            return 2
    step_model, compiled = model, 0
    if a.compile:
        try:
            step_model, compiled = torch.compile(model), 1
        except Exception as e:  # noqa: BLE001 (any failure: run eagerly, say so)
            print("# torch.compile failed (%s): eager" % e)
    data = torch.randint(0, VOCAB, (a.warmup + a.steps, B, T + 1))
    times, losses = [], []
    c0 = cpu_now()
    for i in range(a.warmup + a.steps):
        tok, tgt = data[i, :, :-1], data[i, :, 1:]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        try:
            loss = forward(step_model, tok, tgt, a.bf16)
        except Exception as e:  # noqa: BLE001 (torch.compile fails at the first call: eager)
            if not compiled:
                raise
            print("# torch.compile failed at the first step (%s): eager" % str(e)[:200])
            step_model, compiled = model, 0
            loss = forward(step_model, tok, tgt, a.bf16)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if i >= a.warmup:
            times.append(dt)
    c1 = cpu_now()
    others = max(0.0, (c1[1] - c0[1]) - (c1[2] - c0[2])) / ((c1[0] - c0[0]) * os.cpu_count())
    med = statistics.median(times)
    print("# torch %s, %d threads%s, style %s (AdamW %s%s%s), OpenBLAS %s, "
          "OPENBLAS_NUM_THREADS=%s OMP_WAIT_POLICY=%s"
          % (torch.__version__, torch.get_num_threads(), ", autocast bf16" if a.bf16 else "",
             a.style, opt_kind, ", torch.compile" if compiled else "",
             ", fp32 matmuls in bf16" if a.fp32_bf16_matmul else "", openblas_core(),
             os.environ.get("OPENBLAS_NUM_THREADS", "(unset)"),
             os.environ.get("OMP_WAIT_POLICY", "(unset)")))
    print("# %d parameters; loss %.4f -> %.4f; step ms median %.3f min %.3f max %.3f; other "
          "processes used %.0f%% of the CPUs" % (n_params, losses[0], losses[-1], 1e3 * med,
                                                  1e3 * min(times), 1e3 * max(times), 100 * others))
    print("torch_train%s d=%d L=%d H=%d T=%d B=%d threads=%d tok_s=%.1f ms_step=%.3f median_of=%d "
          "params=%d torch=%s style=%s compiled=%d"
          % ("_bf16" if a.bf16 else "_fp32bf16mm" if a.fp32_bf16_matmul else "", a.d, a.layers,
             a.heads, T, B, a.threads, B * T / med, 1e3 * med, len(times), n_params,
             torch.__version__.split("+")[0], a.style, compiled))
    return 0


if __name__ == "__main__":
    sys.exit(main())
