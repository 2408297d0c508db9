#!/usr/bin/python3
"""Generate the bf16 reference fixtures for tests/test_block_fixtures.c (built with -DNBT_BF16).

    /usr/bin/python3 tests/gen_bf16_fixtures.py tests/fixtures

Writes <outdir>/blocks_bf16.bin: twenty stacks of tests/gen_block_fixtures.py (its descriptions,
draws and checks, from its seeds), and four with gemm.bf16_outputs ("out16_*"), computed by the
PyTorch twin in float64 with gemm.precision "bf16" (examples/pytorch/normblocks_twin.py,
"Precision"): every GEMM of the forward and the backward on bf16-rounded operands (a backward
product's incoming gradient rounded too), exact sums, everything else unrounded (with
gemm.bf16_outputs also the FFN's projection h and its incoming gradient da, autocast's). That
is what a BF16 stack of the library computes up to its float32 arithmetic, so
test_block_fixtures_bf16 holds the library to it with a tolerance of float32's size
(bf16_tight_limit, derived there) instead of bf16's (bf16_loose_limit).

File format: that of blocks.bin (NBFX0001, tests/nbfixture.py; the fields of
tests/gen_block_fixtures.py), the cases named "bf16_<its case>": the scalars, preset_key, E,
dout, every parameter (and the value embeddings' rows ve), and out, din and every parameter
gradient (and the rows' gradient dve) of the bf16 computation.

Before writing, the twin's bf16 mode is checked:
  - bf16_round rounds to nearest even (ties, a carry into the exponent, through float32);
    bf16_matmul's forward and both gradients are exactly the products of the rounded operands
    and the rounded incoming gradient; bf16_linear's bias and its gradient are unrounded;
  - every case: with rounding replaced by the identity the bf16 stack is the float64 stack (to
    1e-12), so the bf16 path computes the same model; no nn.Linear module runs in bf16 (every
    projection goes through bf16_linear); rounding runs 18 L times (6 GEMMs a layer, two
    operands in the forward, the incoming gradient in the backward; 20 L with
    gemm.bf16_outputs: h and da);
  - every draw: out, din and the GEMM weights' gradients differ from the float64 references by
    more than 1e-5 of their norm (rounding took place).

Conditioning. A draw is kept only when (besides gen_block_fixtures.py's own conditions) its
bf16 results are within MARGIN_LOOSE of the loose tolerance of the float64 ones (bf16 rounding
not amplified), and no bf16 rounding decision that matters lies within float32 reach: the
twin in float32 in N_ORDERS summation orders (residual channels, FFN units and batch rows
permuted: the same function, other sums), and a float64 run in which every rounded activation
and gradient is first pushed toward its nearest rounding boundary (pushed_run), all stay below
MARGIN of the tight tolerance. Without it about 5% of draws make a float32 implementation
(the library's) flip a decision somewhere, which moves every tensor downstream by bf16
rounding, hundreds of times the tight tolerance (test_block_fixtures.c, bf16_tight_limit).
About one draw in five is kept.

The case names are printed; tests/test_block_fixtures.c hard-codes the same list (bf16_cases).
"""
import math
import os
import zlib

import torch

import gen_block_fixtures as gbf
from gen_block_fixtures import QKVC, make_cfg
from nbfixture import (DYT, GELU_TANH, HYPER_MHC_LITE, LAYER, SINK_LEARNED, SINK_OFF_BY_ONE,
                       SWIGLU, Writer, output_dir, read_nbfx, twin)

MAX_BYTES = 1_000_000
GEMM_WEIGHTS = ("att_proj.weight", "attn_out.weight", "ff_proj.weight", "ff_out.weight")
RESIDUAL_NORMS = twin._NORM_NAMES + ("embed_norm", "ln_f", "ln_y_f", "ln_final_f")
# conditioning (draw): the float32 runs (N_ORDERS summation orders) and the pushed run must
# stay below MARGIN of the tight tolerance; the push is PUSH_REL 2^-24 |x| + PUSH_ABS 2^-24 rms
N_ORDERS, PUSH_REL, PUSH_ABS, PUSH_ABS_DS, MARGIN = 8, 16, 1, 4, 0.3
MAX_DRAWS = 200
MARGIN_LOOSE = 0.7  # the bf16 reference against float64: at most this of the loose tolerance
PREFIX = "bf16_"  # the file's case names: "bf16_" + gen_block_fixtures.py's name

# the cases: descriptions exactly as gen_block_fixtures.py makes them (its draws from its seeds;
# a case that keeps gen_block_fixtures.py's first draw is checked to hold blocks.bin's values);
# d=8, H=2, B=2, T=5, the L=3 ones with MQA (Hkv 1) or GQA groups of 2; attention sinks,
# learned with H=4, Hkv=2 and off-by-one after HybridNorm's site norms (the softmax with its
# sink in the module's dtype, P rounded only as the context's operand, as without a sink);
# clip_qkv on OLMo-2 with GQA (the clamp on the projection of bf16 operands, exact sums; its
# draw checked on the bf16 run too: gen_block_fixtures.clip_refusal); Gemma 2's attention-logit
# softcap on its sandwich layout with GQA (the cap on the scores of bf16 operands, in the
# module's dtype, as the softmax; its derivative in the scores' gradient before that is rounded
# as the GEMMs' operand; the draw's share of capped scores, gen_block_fixtures.softcap_refusal,
# from the float64 run: the cap is smooth, no decision a rounding could flip); mHC-lite on the
# sandwich layout with GQA, n = 3 (its maps and the streams' mixing unrounded: the library's
# hyper-connection products are float32 GEMMs in every precision, as the twin's are unrounded);
# DenseFormer's average on Post-Norm with the dilation 2, L = 4 (the averages unrounded: the
# library's are float32 sums of scaled rows in every precision, the twin's a tensordot in the
# module's dtype); Attention Residuals in blocks of 3 sublayers on Peri-LN with the learnable
# value residual, L = 3 (the readers unrounded: the library's are float32 in every precision,
# the twin's einsums in the module's dtype); modded-nanogpt's U-Net skips and x_0 re-injection
# on Pre-Norm with GQA, L = 4 (the mixed inputs unrounded: the library's are float32 sums of
# scaled rows in every precision, the twin's in the module's dtype); modded-nanogpt's value
# embeddings, 2 tables on Pre-Norm with GQA, L = 5 (the mix lambda_0 V + lambda_1 E unrounded,
# as the value residual's: V' is rounded as the context's operand, as V is without the option);
# DenseFormer's period 3 on Post-Norm, L = 4 (layer 2's average unrounded, as above, over outputs
# two layers passed on; the last layer passes its output on)
SMALL = dict(d=8, H=2)
CASES = [
    ("pre_L3", make_cfg("PRE", 3, Hkv=1, **SMALL)),
    ("post_L3", make_cfg("POST", 3, Hkv=2, **SMALL)),
    ("olmo2_L3", make_cfg("OLMO2", 3, Hkv=1, **SMALL)),
    ("hybrid_L3", make_cfg("HYBRID", 3, Hkv=2, **SMALL)),
    ("mixln_L3", make_cfg("MIXLN", 3, Hkv=2, mixln_alpha=0.34, **SMALL)),
    ("siamese_L3", make_cfg("SIAMESE", 3, Hkv=1, **SMALL)),
    ("gpt2_L3", make_cfg("PRE", 3, Hkv=1, norm=LAYER, ffn_type=GELU_TANH, rope=0, attn_bias=3,
                         **SMALL)),
    ("dyt_L2", make_cfg("DYT", 2, Hkv=1, norm=DYT, **SMALL)),
    ("abl_qkvc_post_L3", make_cfg("SITES_POST", 3, Hkv=1, sites=QKVC, **SMALL)),
    ("vres_learn_hybrid_L3", dict(make_cfg("HYBRID", 3, Hkv=2, **SMALL), value_residual=2)),
    ("sink_learned_pre_gqa_L2", dict(make_cfg("PRE", 2, d=8, H=4, Hkv=2),
                                     attn_sink=SINK_LEARNED)),
    ("sink_obo_hybrid_L2", dict(make_cfg("HYBRID", 2, Hkv=1, **SMALL),
                                attn_sink=SINK_OFF_BY_ONE)),
    ("clip_olmo2_gqa_L2", dict(make_cfg("OLMO2", 2, d=8, H=4, Hkv=2), clip_qkv=1.0)),
    ("softcap_sandwich_gqa_L2", dict(make_cfg("SANDWICH", 2, d=8, H=4, Hkv=2), softcap=2.0)),
    ("mhclite_sandwich_n3_L2", dict(make_cfg("SANDWICH", 2, d=8, H=4, Hkv=2),
                                    hyper=HYPER_MHC_LITE, hyper_streams=3)),
    ("dwa_post_k2_L4", dict(make_cfg("POST", 4, Hkv=2, **SMALL), dwa=1, dwa_dilation=2)),
    ("attnres_s3_periln_L3", dict(make_cfg("PERILN", 3, Hkv=2, **SMALL), attn_res=1,
                                  attn_res_block=3, value_residual=2)),
    ("unet_pre_L4", dict(make_cfg("PRE", 4, d=8, H=4, Hkv=2), unet_skips=1, reinject_x0=1)),
    ("ve_pre_L5", dict(make_cfg("PRE", 5, d=8, H=4, Hkv=2), value_embeds=2)),
    ("dwa_p3_post_L4", dict(make_cfg("POST", 4, Hkv=2, **SMALL), dwa=1, dwa_period=3)),
    # gemm.bf16_outputs (the FFN's hidden layer in bf16, autocast's): SwiGLU on Pre-Norm and on
    # Post-Norm (whose FFN converts its incoming gradient itself); GPT-2's
    # GELU MLP with its bias (h rounded after it); nGPT's s_uv on that MLP (h rounded after
    # the scale, whose gradient reads the unrounded projection)
    ("out16_pre_L3", dict(make_cfg("PRE", 3, Hkv=1, **SMALL), bf16_outputs=1)),
    ("out16_post_L3", dict(make_cfg("POST", 3, Hkv=2, **SMALL), bf16_outputs=1)),
    ("out16_gpt2_L3", dict(make_cfg("PRE", 3, Hkv=1, norm=LAYER, ffn_type=GELU_TANH, rope=0,
                                    attn_bias=3, **SMALL), bf16_outputs=1)),
    ("out16_suv_L2", dict(make_cfg("PRE", 2, f=16, ffn_type=GELU_TANH, d=8, H=2, Hkv=2),
                          ffn_in_scale=1, bf16_outputs=1)),
]


def gemm(cfg, precision="bf16"):
    """The twin's gemm group of a case's run in `precision`."""
    return dict(precision=precision,
                bf16_outputs=cfg.get("bf16_outputs", 0) if precision == "bf16" else 0)


# ---- tolerances (the same formulas as tests/test_block_fixtures.c) ----------------------------


def gemm_k(cfg):
    """The largest inner dimension of a stack's GEMMs: d, the FFN's widths, B T."""
    w = 2 * cfg["f"] if cfg["ffn"] == SWIGLU else cfg["f"]
    return max(cfg["d"], w, cfg["B"] * cfg["T"])


def bf16_loose_limit(nref, n, cfg, backward, floor_rms):
    """test_block_fixtures.c bf16_loose_limit: a BF16 stack against the float64 references."""
    e = math.sqrt(2.0 / 3.0) / 256 * math.sqrt((12.0 if backward else 6.0) * cfg["L"])
    return 6 * e * (nref + math.sqrt(n) * floor_rms)


def bf16_tight_limit(nref, n, cfg, backward, floor_rms):
    """test_block_fixtures.c bf16_tight_limit: a BF16 stack against these references."""
    G = (12.0 if backward else 6.0) * cfg["L"]
    e32 = 2.0 ** -24 * math.sqrt(2.0 * gemm_k(cfg) * G)
    return 6 * e32 * (nref + math.sqrt(n) * floor_rms)


# ---- the twin in bf16 ------------------------------------------------------------------------


def run(cfg, p, E, dout, dtype=torch.float64, precision="bf16", ve=None):
    """out, din and the parameter gradients (name -> tensor) of loss = sum(out * dout); with
    the value embeddings' rows ve their gradient too ("dve")."""
    B, T, d = cfg["B"], cfg["T"], cfg["d"]
    stack = gbf.twin_stack(cfg, dtype, gemm=gemm(cfg, precision))
    gbf.load(stack, {k: v.to(dtype) for k, v in p.items()})
    Ed = E.detach().to(dtype).reshape(B, T, d).requires_grad_(True)
    ved = None if ve is None else ve.detach().to(dtype).clone().requires_grad_(True)
    out = stack(Ed, value_embeds=ved)
    (out * dout.to(dtype).reshape(B, T, d)).sum().backward()
    res = {"out": out.detach().reshape(B * T, d).double(),
           "din": Ed.grad.reshape(B * T, d).double()}
    if ve is not None:
        res["dve"] = ved.grad.double()
    for k, v in stack.named_parameters():
        assert v.grad is not None, k
        res["grad." + k] = v.grad.double()
    return res


def ratios(cfg, got, ref, limit):
    """(ratio, name) per tensor: the normwise error of got against ref over limit(...)."""
    grads = torch.cat([ref[k].reshape(-1) for k in ref if k.startswith("grad.")])
    floor_rms = grads.pow(2).mean().sqrt().item()
    out = []
    for k in ref:
        e, r = got[k] - ref[k], ref[k]
        is_param = k.startswith("grad.")
        lim = limit(r.norm().item(), r.numel(), cfg, k != "out", floor_rms if is_param else 0.0)
        out.append(((e.norm().item() / lim), k))
    return out


def check_bf16_ops():
    """bf16_round, bf16_matmul and bf16_linear against their definitions."""
    one = 1.0
    vals = torch.tensor([one + 2 ** -8, one + 3 * 2 ** -8, one + 2 ** -8 + 2 ** -20,
                         -(one + 2 ** -8), 2 - 2 ** -9, 3.0, 0.0, one + 2 ** -8 + 2 ** -30])
    want = torch.tensor([one, one + 2 ** -6, one + 2 ** -7, -one, 2.0, 3.0, 0.0, one])
    # ties to even, up above the tie, a carry into the exponent; and the last: above the tie
    # in float64 but a tie once rounded to float32 (PyTorch converts through float32, as the
    # library rounds float32 values)
    got = twin.bf16_round(vals.double())
    assert torch.equal(got, want.double()), got
    assert torch.equal(twin.bf16_round(vals.float()), want.float())

    torch.manual_seed(3)
    R = twin.bf16_round
    for shape_a, shape_b in (((6, 5), (5, 7)), ((2, 3, 4, 5), (2, 3, 5, 4))):
        a = torch.randn(shape_a, requires_grad=True)
        b = torch.randn(shape_b, requires_grad=True)
        g = torch.randn(shape_a[:-1] + shape_b[-1:])
        y = twin.bf16_matmul(a, b)
        assert torch.equal(y, R(a.detach()) @ R(b.detach()))
        y.backward(g)
        assert torch.equal(a.grad, R(g) @ R(b.detach()).transpose(-2, -1))
        assert torch.equal(b.grad, R(a.detach()).transpose(-2, -1) @ R(g))
        # and these are not the gradients of plain autograd through the rounded forward
        assert not torch.equal(a.grad, g @ R(b.detach()).transpose(-2, -1))
    x = torch.randn(2, 3, 5, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    bias = torch.randn(4, requires_grad=True)
    g = torch.randn(2, 3, 4)
    y = twin.bf16_linear(x, w, bias)
    assert torch.equal(y, (R(x.detach()).reshape(6, 5) @ R(w.detach()).t()).reshape(2, 3, 4) +
                       bias.detach())
    y.backward(g)
    g2 = R(g.reshape(6, 4))
    assert torch.equal(x.grad, (g2 @ R(w.detach())).reshape(2, 3, 5))
    assert torch.equal(w.grad, g2.t() @ R(x.detach()).reshape(6, 5))
    assert torch.allclose(bias.grad, g.reshape(6, 4).sum(0), rtol=0, atol=1e-14)
    # grad_scale s: the backward rounds s g and scales by 1/s (the trainer's LM head)
    a = torch.randn(6, 5, requires_grad=True)
    b = torch.randn(5, 7)
    g = torch.randn(6, 7) / 3
    twin.bf16_matmul(a, b, 3.0).backward(g)
    assert torch.equal(a.grad, (R(g * 3.0) @ R(b).t()) * (1.0 / 3.0))


def check_structure(name, cfg, p, E, dout, ve=None):
    """The bf16 path is the float64 model when rounding is the identity; the projections never
    run as nn.Linear in bf16; the rounding runs 18 L times; permuted_run computes the same."""
    ref = run(cfg, p, E, dout, precision="fp32", ve=ve)
    real = twin.bf16_round
    calls = [0]

    def identity(x):
        calls[0] += 1
        return x
    twin.bf16_round = identity
    try:
        same = run(cfg, p, E, dout, ve=ve)
    finally:
        twin.bf16_round = real
    for k in ref:
        assert torch.allclose(same[k], ref[k], rtol=0, atol=1e-12), (name, k)
    # and with gemm.bf16_outputs twice more a layer: h in the forward, da in the backward
    assert calls[0] == (20 if cfg.get("bf16_outputs") else 18) * cfg["L"], (name, calls[0])
    stack = gbf.twin_stack(cfg, gemm=gemm(cfg))
    fired = []
    for mname, mod in stack.named_modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_pre_hook(lambda m, i, mname=mname: fired.append(mname))
    gbf.load(stack, p)
    stack(E.reshape(cfg["B"], cfg["T"], cfg["d"]), value_embeds=ve)
    assert not fired, (name, fired)
    # the conditioning's permuted stacks compute the same function
    bf = run(cfg, p, E, dout, ve=ve)
    perm = permuted_run(cfg, p, E, dout, torch.float64, torch.Generator().manual_seed(1), ve)
    for k in bf:
        assert torch.allclose(perm[k], bf[k], rtol=0, atol=1e-12 * bf[k].abs().max()), (name, k)


# ---- conditioning: no bf16 rounding decision within reach of float32 ---------------------------


def perm_tensor(name, t, pd, pf, swiglu):
    """Parameter `name` of a stack whose residual channels are permuted by pd and FFN hidden
    units by pf: the same function of the permuted input (the same math, other float32
    summation orders). Site norms (per head, or the projection's own columns), DyT alphas and
    ReZero scalars are not on the residual stream. The mHC family's fns [m, n d] read the n
    streams side by side: each stream's d columns permuted alike. Attention Residuals' readers
    (pseudo-query (1, d), key gain (d)) act on the residual channels."""
    if name.split(".")[-1].startswith("hc_") and name.endswith("_fn"):
        m, nd = t.shape
        return t.reshape(m, nd // len(pd), len(pd))[:, :, pd].reshape(m, nd)
    if len(name.split(".")) >= 3 and name.split(".")[-3] in gbf.AR_READERS:
        return t[:, pd] if gbf.is_query(name) else t[pd]
    if "." not in name:  # the mHC head's base and scale
        return t
    mod, leaf = name.split(".")[-2:]
    pw = torch.cat((pf, pf + len(pf))) if swiglu else pf  # SwiGLU rows [u | z]
    if mod == "att_proj":
        return t[:, pd] if leaf == "weight" else t
    if mod == "attn_out":
        return t[pd]
    if mod == "ff_proj":
        return t[pw][:, pd] if leaf == "weight" else t[pw]
    if leaf == "suv":  # nGPT's s_uv: a scale per column of ff_proj
        return t[pw]
    if mod == "ff_out":
        return t[pd][:, pf] if leaf == "weight" else t[pd]
    if mod in RESIDUAL_NORMS and leaf in ("weight", "bias"):
        return t[pd]
    if leaf == "c1" or (mod in ("ls1", "ls2") and leaf == "gamma"):
        return t[pd]
    return t


def permuted_run(cfg, p, E, dout, dtype, gen, ve=None):
    """run() on a copy with permuted residual channels, FFN units and batch rows (drawn from
    gen), the results mapped back (the value embeddings' rows ve, (N, B*T, H_kv d_k), by their
    batch rows: their width is V's, which the residual channels do not touch)."""
    d, B, T, f = cfg["d"], cfg["B"], cfg["T"], cfg["f"]
    swiglu = cfg["ffn"] == SWIGLU
    pd, pf, pb = (torch.randperm(n, generator=gen) for n in (d, f, B))
    ipd, ipf, ipb = (torch.argsort(q) for q in (pd, pf, pb))

    def acts(x, cols, rows):
        return x.reshape(B, T, d)[rows][:, :, cols].reshape(B * T, d)
    def rows(x, order):
        return x.reshape(len(x), B, T, -1)[:, order].reshape(x.shape)
    res = run(cfg, {k: perm_tensor(k, v, pd, pf, swiglu) for k, v in p.items()},
              acts(E, pd, pb), acts(dout, pd, pb), dtype,
              ve=None if ve is None else rows(ve, pb))
    back = {"out": acts(res["out"], ipd, ipb), "din": acts(res["din"], ipd, ipb)}
    if ve is not None:
        back["dve"] = rows(res["dve"], ipb)
    for k, v in res.items():
        if k.startswith("grad."):
            back[k] = perm_tensor(k[5:], v, ipd, ipf, swiglu)
    return back


def is_tie(x):
    """x exactly halfway between two neighbouring bf16 numbers (8 significant bits)."""
    t = torch.frexp(x)[0] * 512.0
    return (t == torch.round(t)) & (torch.remainder(t, 2) == 1)


def is_probs(x):
    """x is attention probabilities: (B, H, T, T), non-negative rows that sum to 1 (with a sink
    to 1 - the sink's mass)."""
    return (x.dim() == 4 and x.shape[-1] == x.shape[-2] and bool((x >= 0).all()) and
            bool((x.sum(-1) <= 1 + 1e-9).all()))


def is_dscores(x):
    """x is the gradient of the attention scores dS = P (dP - rowsum(P dP)): (B, H, T, T) of
    both signs (its rows sum to 0; with a sink to p_sink rowsum(P dP)). The only other rounded
    (B, H, T, T) operand is P, non-negative: main keeps T != d_k, so Q and K are not square."""
    return x.dim() == 4 and x.shape[-1] == x.shape[-2] and bool((x < 0).any())


def pushed_run(cfg, p, E, dout, ve=None):
    """The float64 bf16 run with every rounded value that is not a parameter pushed toward its
    nearest rounding boundary by PUSH_REL 2^-24 |x| + PUSH_ABS 2^-24 rms(x) (rms over the
    operand) before it is rounded: every rounding decision a float32 computation deviating by
    less than that could flip is flipped at once. The relative part is the float32 rounding
    of a chain of operations; the absolute part that of values with cancellation (a sum of
    terms larger than itself, a tanh near 0 computed through exp, a norm's x - mean): their
    float32 error scales with their operand's size, not theirs. Attention probabilities get
    the relative part only (a small probability is exp of its score, relatively exact). Exact
    ties are not pushed: they are sums of a few bf16 products (the context P V, say), exact in
    float32 too."""
    real = twin.bf16_round
    stack_ptrs = set()

    def pushed(x):
        r = real(x)
        if x.data_ptr() in stack_ptrs:  # a weight: the same float32 value in the library
            return r
        a = PUSH_REL * x.abs()
        if not is_probs(x):
            a = a + (PUSH_ABS_DS if is_dscores(x) else PUSH_ABS) * x.pow(2).mean().sqrt()
        a = 2.0 ** -24 * a
        up, dn = real(x + a), real(x - a)
        return torch.where(is_tie(x), r, torch.where(up != r, up, torch.where(dn != r, dn, r)))
    B, T, d = cfg["B"], cfg["T"], cfg["d"]
    stack = gbf.twin_stack(cfg, gemm=gemm(cfg))
    gbf.load(stack, p)
    stack_ptrs.update(v.data_ptr() for v in stack.parameters())
    twin.bf16_round = pushed
    try:
        Ed = E.detach().reshape(B, T, d).requires_grad_(True)
        ved = None if ve is None else ve.detach().clone().requires_grad_(True)
        out = stack(Ed, value_embeds=ved)
        (out * dout.reshape(B, T, d)).sum().backward()
    finally:
        twin.bf16_round = real
    res = {"out": out.detach().reshape(B * T, d), "din": Ed.grad.reshape(B * T, d)}
    if ve is not None:
        res["dve"] = ved.grad
    res.update(("grad." + k, v.grad) for k, v in stack.named_parameters())
    return res


def conditioning(cfg, p, E, dout, bf, seed, ve=None):
    """(ratio, what): the largest error / tight tolerance over the float32 runs (torch's order
    and N_ORDERS - 1 permuted ones) and the pushed run, against the bf16 reference bf."""
    gen = torch.Generator().manual_seed(seed)
    runs = [("float32", run(cfg, p, E, dout, torch.float32, ve=ve))]
    runs += [("float32 order %d" % i, permuted_run(cfg, p, E, dout, torch.float32, gen, ve))
             for i in range(1, N_ORDERS)]
    runs.append(("pushed", pushed_run(cfg, p, E, dout, ve)))
    worst = (0.0, "")
    for label, res in runs:
        r, k = max(ratios(cfg, res, bf, bf16_tight_limit))
        worst = max(worst, (r, "%s: %s" % (label, k)))
    return worst


def draw(name, cfg, seed):
    """gen_block_fixtures.draw (its checks and its float32 conditioning), then the bf16
    results, their checks and their conditioning. Returns (result, None, True), or (None, why,
    whether gen_block_fixtures.py keeps the draw)."""
    res, why = gbf.draw(name, cfg, seed)
    if not res:
        return None, why, False
    p, E, dout, out, din, grads = res[:6]
    ve, dve = res[8] if res[8] is not None else (None, None)  # the value embeddings' rows
    # clip_qkv: no Q|K|V value of the bf16 run within float32 reach of the bound either
    why = cfg.get("clip_qkv") and gbf.clip_refusal(cfg, p, E, gemm=gemm(cfg))
    if why:
        # main() counts rejections by the words after " of "
        return None, "the bf16 run of clip_qkv's checks (%s)" % why, True
    f64 = dict(out=out, din=din, **{"grad." + k: v for k, v in grads.items()})
    if ve is not None:
        f64["dve"] = dve
    bf = run(cfg, p, E, dout, ve=ve)
    r, k = max(ratios(cfg, bf, f64, bf16_loose_limit))
    if r >= MARGIN_LOOSE:  # bf16 rounding amplified: an ill-conditioned draw
        return None, "bf16 at %.2f of the loose tolerance (%s)" % (r, k), True
    for k in [k for k in f64 if k in ("out", "din", "dve") or k.endswith(GEMM_WEIGHTS)]:
        rel = ((bf[k] - f64[k]).norm() / f64[k].norm()).item()
        assert rel > 1e-5, "%s: %s: bf16 only %.2g from float64" % (name, k, rel)
    m, worst = conditioning(cfg, p, E, dout, bf, seed, ve)
    if m >= MARGIN:
        return None, "%.2f of the tight tolerance (%s)" % (m, worst), True
    return (p, E, dout, bf, m, worst, ve), None, True


def main():
    outdir = output_dir("gen_bf16_fixtures.py")
    torch.set_default_dtype(torch.float64)
    gbf.check_header_keys(cfg["preset"] for _, cfg in CASES)
    check_bf16_ops()
    blocks = os.path.join(outdir, "blocks.bin")
    prior = read_nbfx(blocks) if os.path.exists(blocks) else None
    w = Writer(MAX_BYTES)
    report = []
    for name, cfg in CASES:
        assert cfg["T"] != cfg["d"] // cfg["H"], name  # is_dscores tells dS from Q and K
        base = gbf.SEED + zlib.crc32(name.encode()) % 100000  # gen_block_fixtures' seeds
        first, rejected = None, {}
        for attempt in range(MAX_DRAWS):
            res, why, kept = draw(name, cfg, base + 100003 * attempt)
            if first is None and kept:
                first = attempt  # the draw blocks.bin holds
            if res:
                break
            kind = why.split(" of ")[1].split(" (")[0] if kept else "gen_block_fixtures.py"
            rejected[kind] = rejected.get(kind, 0) + 1
        assert res, "%s: no well-conditioned draw in %d" % (name, MAX_DRAWS)
        p, E, dout, bf, m, worst, ve = res
        check_structure(name, cfg, p, E, dout, ve)
        if prior is not None and first == attempt and name + ".E" in prior:  # blocks.bin's draw
            # holds the same values
            assert torch.equal(prior[name + ".E"].reshape(E.shape), E), name
            assert torch.equal(prior[name + ".dout"].reshape(dout.shape), dout), name
            if ve is not None:
                assert torch.equal(prior[name + ".ve"].reshape(ve.shape), ve), name
            for k, v in p.items():
                assert torch.equal(prior[name + "." + k].reshape(v.shape), v), (name, k)
        cs = PREFIX + name
        size0 = w.size()
        for field in ("L", "B", "T", "d", "H", "Hkv", "f", "rope", "theta", "eps", "norm", "ffn",
                      "mixln_alpha", "siamese_paper_scale", "siamese_paper_fusion", "sites"):
            w.add(cs + "." + field, cfg[field])
        if cfg["attn_bias"]:
            w.add(cs + ".attn_bias", cfg["attn_bias"])
        if cfg.get("value_residual"):
            w.add(cs + ".value_residual", cfg["value_residual"])
        for field in ("hyper", "hyper_streams", "hyper_static", "hyper_sinkhorn"):
            if cfg.get(field):
                w.add(cs + "." + field, cfg[field])
        if cfg.get("attn_sink"):
            w.add(cs + ".attn_sink", cfg["attn_sink"])
        if cfg.get("clip_qkv"):
            w.add(cs + ".clip_qkv", cfg["clip_qkv"])
        if cfg.get("softcap"):
            w.add(cs + ".softcap", cfg["softcap"])
        for field in gbf.DWA_FIELDS + ("attn_res", "attn_res_block") + gbf.UNET_FIELDS + \
                ("value_embeds", "ffn_in_scale", "bf16_outputs"):
            if cfg.get(field):
                w.add(cs + "." + field, cfg[field])
        w.add(cs + ".preset_key",
              torch.tensor([float(ord(c)) for c in gbf.preset_key(cfg["preset"])]))
        w.add(cs + ".E", E)
        w.add(cs + ".dout", dout)
        w.add(cs + ".out", bf["out"])
        w.add(cs + ".din", bf["din"])
        if ve is not None:  # the tables' rows (an input) and their bf16 gradient
            w.add(cs + ".ve", ve)
            w.add(cs + ".dve", bf["dve"])
        for k in p:
            w.add(cs + "." + k, p[k])
            w.add(cs + ".grad." + k, bf["grad." + k])
        report.append((cs, cfg, len(p), w.size() - size0, m, worst, attempt, rejected))
    for cs, cfg, npar, nbytes, m, worst, k, rejected in report:
        print("  %-22s %-10s L=%d Hkv=%d %2d params %6d bytes  draw %2d, conditioning %.3f (%s)"
              % (cs, cfg["preset"], cfg["L"], cfg["Hkv"], npar, nbytes, k, m, worst))
        if rejected:
            print("  %22s draws rejected: %s" % ("", ", ".join(
                "%d beyond %s" % (n, why) if why.endswith("tolerance") else "%d by %s" % (n, why)
                for why, n in sorted(rejected.items()))))
    path = os.path.join(outdir, "blocks_bf16.bin")
    n = w.write(path)
    print("wrote %s: %d cases, %d tensors, %d bytes" % (path, len(report), len(w.records), n))


if __name__ == "__main__":
    main()
