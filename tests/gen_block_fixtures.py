#!/usr/bin/python3
"""Generate the PyTorch reference fixtures for tests/test_block_fixtures.c.

    /usr/bin/python3 tests/gen_block_fixtures.py tests/fixtures

Writes <outdir>/blocks.bin: whole stacks of blocks (the equations of normblocks.h,
THE PRESETS, with its attention and FFN), one case per preset and depth, computed in float64 with
autograd by the PyTorch twin (examples/pytorch/normblocks_twin.py, the model a port compares
against) and checked here against direct transcriptions of the papers' equations. Nothing here
knows how normblocks computes anything.

Stack semantics. Input E (B*T x d, the embedding), output out (B*T x d) = the final hidden
state (after the final norm). loss = sum(out * dout) with a random dout; loss.backward() gives
din (wrt E) and the gradient of every parameter. A block is an attention sublayer then an FFN
sublayer, each wrapped by a placement (normblocks.h, "blocks and stacks"):
    h = input_norm ? N_in(x) : x ;  r = residual_from_norm ? h : x
    f = F(h) ; f = output_norm ? N_out(f) : f ;  s = alpha*r + f ;  x' = post_norm ? N_post(s) : s
Each preset is a per-layer schedule of placements and attention norm sites (the twin's
preset table, a copy of the library's). direct_forward below writes each preset out as its
paper's equations instead (the comments name the paper or code), direct_siamese SiameseNorm's
two streams, direct_hyper the hyper-connections (DeepSeek's mHC reference functions, mHC-lite's
mixture of permutation matrices as its code builds it, and HC's Algorithm 2, in nbfixture.py),
DenseFormer's depth-weighted average as its paper's sum over the kept outputs, on its package's
period (nbfixture.dwa_average_ref), Attention Residuals' readers token by token over the paper's
block sums (direct_attn_res: nbfixture.attn_res_sources_ref, attn_res_read_ref), modded-nanogpt's
U-Net skips and x_0 re-injection by index, term by term (nbfixture.unet_input_ref), its value
embeddings as its list of tables read by index and its mix term by term
(nbfixture.value_embed_layers_ref, value_embed_mix_ref), CompleteP's
residual multiplier as its code computes it (completep_s), nGPT's Block as NVIDIA/ngpt's model.py
computes it (nbfixture.ngpt_block_ref, with the standard RoPE for the code's, its issue #10) and
its s_qk, softmax scale and s_uv in that code's form where other presets take them; every case's
forward must agree with them to 1e-12, and its gradients with their autograd to 1e-10, before it
is written.
Block norms are RMSNorm with a gain (no bias), LayerNorm with gain and bias (norm = 2), DyT
with a scalar alpha, gain and bias (norm = 3), or L2 (nGPT's justnorm, no parameters; norm = 4).

File format: NBFX0001, written by tests/nbfixture.py, read by tests/fixture.h.
Per case (names "<case>.<field>"):
    scalars  L, B, T, d, H, Hkv, f, rope, theta, eps, norm (1 RMS, 2 LayerNorm, 3 DyT),
             ffn (1 SwiGLU, 2 GELU tanh), sites (0 = preset default, else the NB_SITE_*
             mask, 0x100 = explicitly none), mixln_alpha (0 = unused/default),
             siamese_paper_scale, siamese_paper_fusion; siamese_no_fusion_norm only when 1,
             attn_bias (the NB_ATTN_BIAS_* mask, GPT-2's 3) only when not 0; value_residual,
             hyper (nb_hyper: 2 mHC, 3 HC, 4 identity, 5 mHC-lite; absent = the preset's),
             hyper_streams, hyper_static, hyper_sinkhorn only when not 0; CompleteP's depth_alpha and
             depth_base (nb_stack_desc: every branch times (L / depth_base)^-depth_alpha) only
             when not 0; nGPT's interp_init, qk_scale, softmax_scale, ffn_in_scale
             (nb_stack_desc; 0 = the preset's) only when not 0; the porting options
             attn_gate, norm_gain, norm_bias, gain_offset, embed_scale_on (the option
             embed_scale; the name embed_scale is its parameter's), branch_scale, ffn_bias
             (nb_stack_desc; PORTING_FIELDS) only when not 0 (the cases of
             gen_porting_fixtures.py, which writes blocks_porting.bin with this format);
             attn_sink (nb_attn_sink: 1 learned, 2 off-by-one) only when not 0; clip_qkv
             (OLMo's c: Q|K|V clamped to [-c, c] after b_qkv) only when not 0; softcap
             (Gemma 2's c: the scaled scores s become c tanh(s / c)) only when not 0; dwa
             (DenseFormer's depth-weighted average: 1 on), dwa_dilation (its k; 0 = 1) and
             dwa_period (its p; 0 = 1: only layers l with (l+1) mod p = 0 average) only when
             not 0; attn_res (Attention Residuals: 1 on) and attn_res_block (its
             block size S in sublayers; 0 = 1, Full AttnRes) only when not 0; unet_skips
             (modded-nanogpt's U-Net skips: 1 on) and reinject_x0 (its re-injection of x_0: 1
             on) only when not 0; value_embeds (modded-nanogpt's value embeddings: N tables)
             only when not 0
    preset_key  the preset's key (nb_preset_name) as character codes, one per value
    tensors  E (B*T, d), dout, out, din (B*T, d); with attn_res attn_res_weights ((2L+1) x
             (2L+1): nb_stack_attn_res_weights' matrix, every reader's weights averaged over the
             B*T tokens, row j the reader before sublayer j, column e + 1 the source p_e); with
             value_embeds ve (N, B*T, H_kv d_k: the tables' rows of the call, an input, as
             nb_stack_set_value_embeds binds them: row b*T + i of table t the token at (b, i))
             and dve (the same shape: their gradient, an output, the two layers sharing a table
             summed)
    params   every parameter under its library name, e.g. "<case>.blocks.0.att_proj.weight"
             (matrices (out, in), vectors 1-D), and its gradient "<case>.grad.blocks.0...."
Every preset's eps is the library default for that preset (1e-6 for olmo2, mixln and
deepnorm_mixln and lns, else 1e-5), so the test can also check the defaults.

Before writing, the twin is checked: every case against the direct transcriptions, classic
Post-Norm against the HybridNorm-code flags (under the gain mapping), Mix-LN with n_post = 0 / L
against Pre / Post, HybridNorm* and First-QKV-Pre against HybridNorm outside layer 0,
SiameseNorm's degenerate case and dE = dx_0 + dy_0. The parameters are drawn by the names and
shapes of the twin's parameter table; test_block_fixtures holds them to the library's (it
finds every parameter by name). Each case draws its data from its own seed (derived from its name); a
draw is replaced by the next one, deterministically, when its attention is near uniform, its
activations or gradients are out of range, or float32 torch autograd reaches 0.3 of the C
test's float tolerance (NBT_ATOL + NBT_RTOL |ref|) somewhere: the fixtures are conditioned
well enough for a correct float32 library to pass with margin.

The case names are printed; tests/test_block_fixtures.c hard-codes the same list.
"""
import math
import os
import re
import zlib
from dataclasses import replace

import torch
import torch.nn.functional as F

from nbfixture import (DYT, FULL, GATE_ELEMENTWISE, GELU_TANH, HYPER_HC, HYPER_IDENTITY,
                       HYPER_MHC, HYPER_MHC_LITE, L2, LAYER, PER_HEAD, RMS, SINK_LEARNED,
                       SINK_OFF_BY_ONE, SITE_C, SITE_K, SITE_Q, SITE_V, SWIGLU, Writer,
                       apply_rope, attn_res_read_ref, attn_res_sources_ref,
                       check_norm_rope_order, dwa_average_ref, expand_to_mhc_ref,
                       hc_depth_connection, hc_width_connection, justnorm, mhc_head_ref,
                       mhc_lite_perms_ref, mhc_lite_res_ref, mhc_sublayer, ngpt_block_ref,
                       ngpt_rope_official, norm_fn, output_dir,
                       rand_gain, rms_norm, rope_sin_cos, twin, twin_config, unet_input_ref,
                       value_embed_layers_ref, value_embed_mix_ref, value_embed_rows_ref)
from nbfixture import attention as mha

SEED = 20240611
# 3.35 MB: the hyper-connection cases need 270 kB (mHC's fn is (2n + n^2) x n d per sublayer,
# 768 values at n = 4, d = 8, and every parameter is stored with its gradient), mHC-lite's three
# (mhclite_*) 130 kB (its fn (2n + n!) x n d: 1024 values at n = 4), CompleteP's
# cases (cp_*) 156 kB, nGPT's five 109 kB (ngpt_L2 40 kB of them: the code's SwiGLU of 4d, 2f x d
# + d x f + 2f values per layer at d = 8, f = 32), the attention sinks' three (sink_*) 70 kB,
# clip_qkv's three (clip_*) 70 kB, the softcap's three (softcap_*) 70 kB, DenseFormer's three
# (dwa_*, L = 3 and 4) 113 kB, Attention Residuals' four (attnres_*) 141 kB, the U-Net's
# and re-injection's four (unet_*, reinject_*) 136 kB, the value embeddings' three (ve_*, with
# their rows and the rows' gradients) 114 kB, DenseFormer's period's two (dwa_p*) 81 kB, the
# bf16 matrix kernels' shapes (tiles_pre_L2: d = 32, B T = 96) 332 kB; the other cases keep
# the 1.8 MB they had
MAX_BYTES = 3_700_000

QKV = SITE_Q | SITE_K | SITE_V
QKVC = QKV | SITE_C
SITES_NONE = 0x100

# The fixtures name each case's preset by its key (nb_preset_name: the upper-case names used
# here, lower-cased), never by its enum value, so presets can be added anywhere in the enum.
def preset_key(preset):
    return preset.lower()


# float32 tolerances of the C test (tests/nbtest.h NBT_ATOL / NBT_RTOL); the float32 torch
# run must stay within F32_MARGIN of them
F32_ATOL, F32_RTOL, F32_MARGIN = 2e-5, 2e-4, 0.3
# test_block_fixtures_bf16 holds the library's BF16 stacks (every GEMM on bf16 operands) to these
# float64 references too, normwise: 6 e ||ref||, e = sqrt(2/3) 2^-8 sqrt(G L), G = 6 GEMMs per
# layer for out, 12 for din and the gradients, a parameter gradient's bound plus 6 e sqrt(n)
# times the rms of all the case's gradients (its bf16_loose_limit); the twin in precision "bf16"
# must stay within BF16_MARGIN of that on out, din and every parameter gradient (the existing
# cases reach 0.77; a draw of mhc_periln_n3_L2, whose din the library and the twin in bf16 both
# missed by 1.03, and one of reinject_periln_L3, whose value residual lambda's gradient both
# missed by 1.07, are what this rejects)
BF16_MARGIN = 0.8
# clip_qkv cases: the share of each layer's Q|K|V values clamped (enough that the zero gradient
# is seen, enough left that the projection's gradient is), and the least distance of a value
# from +-c (float32 rounding, ~1e-6 after a layer or two, must not move a value across the
# bound: the gradient jumps there)
CLIP_SHARE, CLIP_GAP = (0.1, 0.6), 1e-4
# softcap cases: the share of each layer's visible scaled scores beyond the cap, |s| > c, where
# c tanh(s / c) bends away from s (tanh(1) = 0.76): enough that the cap and its derivative
# 1 - tanh^2 are seen, enough left near the linear part that the scores' gradient is too
SOFTCAP_SHARE = (0.05, 0.6)
# mHC-lite cases: in every sublayer and token comb is at least LITE_FAR (max |comb - I|) from the
# identity, and (n >= 3) at least LITE_ASYM from its transpose somewhere (comb of pi^-1 for pi):
# the references test the permutations' mixture and its orientation, not a near-identity
LITE_FAR, LITE_ASYM = 0.3, 0.05
# DenseFormer cases: the output moves by at least DWA_FAR of its norm from the plain stack's
# with the same other weights (dwa_refusal): the averages, not the layers alone, make it
DWA_FAR = 0.2
DWA_FIELDS = ("dwa", "dwa_dilation", "dwa_period")
# Attention Residuals cases: the output moves by at least ATTN_RES_FAR of its norm from the
# output of uniform weights (the same parameters with every pseudo-query 0: the init's weights,
# attn_res_refusal), so the drawn queries, not the sources alone, make it; the queries of std
# ATTN_RES_QUERY / sqrt(d) (a logit's std ~ ATTN_RES_QUERY times the gain's rms)
ATTN_RES_FAR, ATTN_RES_QUERY = 0.2, 1.5
AR_READERS = ("attn_res", "mlp_res", "final_res")  # their tensors' module names
# U-Net skips and x_0 re-injection cases: the output moves by at least UNET_FAR of its norm
# from the plain stack's with the same other weights (unet_refusal): the skips and lambdas, not
# the layers alone, make it
UNET_FAR = 0.2
UNET_FIELDS = ("unet_skips", "reinject_x0")
# value embedding cases: the output moves by at least VE_FAR of its norm from the plain stack's
# with the same other weights (ve_refusal): the tables' rows and the lambdas, not the layers
# alone, make it
VE_FAR = 0.2


def check_header_keys(presets):
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "normblocks.h")
    if not os.path.exists(path):
        print("note: normblocks.h not found, preset keys not checked against it")
        return
    src = open(path).read()
    m = re.search(r"static const nb__preset_row nb__presets\[\] = \{(.*?)\n\};", src, re.S)
    assert m, "the preset table nb__presets not found in normblocks.h"
    keys = set(re.findall(r'\{NB_PRESET_\w+, "(\w+)"', m.group(1)))
    missing = sorted(set(preset_key(p) for p in presets) - keys)
    assert not missing, "presets not in normblocks.h: %s" % missing


# ---- the twin: the fixtures' values ----------------------------------------------------------


def twin_stack(cfg, dtype=torch.float64, **fields):
    """The twin's stack of a case (fields: StackConfig fields set on top, a group's by
    StackConfig.with_fields: gemm=dict(precision="bf16") keeps the case's other fields). Its
    parameters are left for load(); their initialization does not advance the generator's
    random stream."""
    c = twin_config(cfg, preset_key(cfg["preset"])).with_fields(**fields)
    with torch.random.fork_rng(devices=[]):
        return twin.Stack(c).to(dtype)


def load(stack, p, extra_ok=False):
    """Copy the parameters p (name -> tensor) into the stack: every one of the stack's, and
    no other unless extra_ok."""
    own = dict(stack.named_parameters())
    missing, extra = sorted(set(own) - set(p)), sorted(set(p) - set(own))
    assert not missing and (extra_ok or not extra), (missing, extra)
    with torch.no_grad():
        for k, v in own.items():
            v.copy_(p[k])


# Parameters are drawn in this order within a layer (the generator's first version drew them
# so; the same seeds still give the same fixtures), embedding norm first and final norms last.
DRAW_ORDER = ("att_proj", "attn_out", "q_norm", "k_norm", "v_norm", "c_norm", "c1",
              "attn_norm", "attn_out_norm", "attn_post_norm", "attn_y_norm", "attn_input_norm",
              "ff_norm", "ff_out_norm", "ff_post_norm", "ff_y_norm", "ff_input_norm", "ff_proj",
              "ff_out", "resweight", "ls1", "ls2", "value_residual",
              "hc_attn_fn", "hc_attn_base", "hc_attn_scale", "hc_attn",
              "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale", "hc_ffn",
              "sqk", "suv", "attn_alpha", "mlp_alpha", "attn_res_norm", "ff_res_norm",
              "attn_resweight", "ff_resweight", "sinks", "dwa", "attn_res", "mlp_res",
              "skip_weight", "lambdas", "value_embed")


def draw_params(cfg, stack=None):
    """Random values for every parameter of the case's stack (the library's tensor table, read
    from the twin), by name: projections of std ~1/sqrt(fan-in) (a little above, so that
    attention is not uniform), non-unit gains (rand_gain), biases, DyT alphas in [0.6, 1.2],
    branch scales in [0.3, 0.7] (nonzero: ReZero's init 0 would stop every gradient).
    Hyper-connections: none at their init (its zeros and identities would hide a swapped index
    or a dropped term): the fns of std 1/sqrt(fan-in) (the dynamic parts O(1) before their
    scales), bases N(0, 0.7^2), scales in [0.3, 0.7], HC's static_alpha its pre column
    0.5 + N(0, 0.3^2) and I + N(0, 0.2^2) for the rest, static_beta 1 + N(0, 0.3^2).
    nGPT's stored scales: sqk and suv such that sqrt(d) times them is in [1, 2] (sqk) and
    [1, 2.5] (suv) (its init: 1, sqrt(d)), attn_alpha / mlp_alpha such that the step |a| =
    interp_init sqrt(d) |lambda| is in [0.15, 0.6], a third of them negative (the code's abs).
    The porting options (gen_porting_fixtures.py): Derf's alpha_shift alpha in [0.6, 1.2] and
    shift N(0, 0.2^2); embed_scale in [0.6, 1.4] (E is O(1) here, not an embedding of std
    ~1/sqrt(d)); gains stored for gain_offset (1 + w) w = rand_gain - 1; SkipInit's
    attn_resweight, ff_resweight as ReZero's. Attention sinks' logits N(0, 1), of the scores'
    size: the sink takes a visible share of each head's rows. DenseFormer's a_l far from its
    init (0s, a 1 on the layer's own output): the earlier outputs' weights of size 0.3 to 0.8,
    a third of them negative, the layer's own output's 0.5 to 1. Attention Residuals'
    pseudo-queries (init 0) N(0, ATTN_RES_QUERY^2 / d) (weights far from uniform), their key
    norms' gains rand_gain (never offset). The U-Net's skip weights (init 1) in [0.55, 0.85],
    the re-injection's lambdas (init [1, 0]) lambda_0 in [0.65, 0.95], lambda_1 in [0.3, 0.5]:
    far from their init, the skip and x_0 a visible share of every mixed input. The value
    embeddings' lambdas (init [0.5, 0.5]) lambda_0 in [0.65, 0.95], lambda_1 in [0.2, 0.4]:
    away from the init, apart from each other (a swap would show)."""
    stack = stack or twin_stack(cfg)
    d, f = cfg["d"], cfg["f"]

    def order(item):
        parts = item[1][0].split(".")
        if parts[0] != "blocks":
            return ({"embed_scale": -1, "embed_norm": 0}.get(parts[0], 2), 0, 0)
        return (1, int(parts[1]), DRAW_ORDER.index(parts[2]))

    std = {"att_proj.weight": 1.2 / math.sqrt(d), "attn_out.weight": 1.0 / math.sqrt(d),
           "ff_proj.weight": 1.2 / math.sqrt(d), "ff_out.weight": 1.5 / math.sqrt(f),
           "ff_proj.bias": 0.5, "ff_out.bias": 0.5}
    p = {}
    for _, (name, t) in sorted(enumerate(stack.named_parameters()), key=order):
        tail = ".".join(name.split(".")[-2:])
        last = name.split(".")[-1]
        if last.startswith("hc_") or ".hc_" in name and ".norm." not in name:
            if last.endswith("_fn"):  # [m, n d] (mHC), [d, n+1] or [d] (HC)
                fan_in = t.shape[1] if last.startswith("hc_") else t.shape[0]
                p[name] = torch.randn(t.shape) / math.sqrt(fan_in)
            elif last.endswith("_base"):
                p[name] = 0.7 * torch.randn(t.shape)
            elif last.endswith("_scale"):
                p[name] = 0.3 + 0.4 * torch.rand(t.shape)
            elif last == "static_alpha":
                n = t.shape[0]
                p[name] = torch.cat((0.5 + 0.3 * torch.randn(n, 1),
                                     torch.eye(n) + 0.2 * torch.randn(n, n)), dim=1)
            elif last == "static_beta":
                p[name] = 1.0 + 0.3 * torch.randn(t.shape)
            else:
                raise AssertionError("no draw for %s" % name)
        elif last == "sinks":
            p[name] = torch.randn(t.shape)
        elif is_query(name):  # Attention Residuals' pseudo-query (1, d)
            p[name] = ATTN_RES_QUERY / math.sqrt(d) * torch.randn(t.shape)
        elif len(name.split(".")) >= 3 and name.split(".")[-3] in AR_READERS:
            p[name] = rand_gain(t.numel())  # its key RMSNorm's gain (d), never offset
        elif last == "skip_weight":  # U-Net: w of h_{L-1-l} (1 value)
            p[name] = 0.55 + 0.3 * torch.rand(t.shape)
        elif last == "lambdas":  # re-injection: [lambda_0 (x), lambda_1 (x_0)]
            p[name] = torch.tensor([0.65, 0.3]) + torch.tensor([0.3, 0.2]) * torch.rand(2)
        elif name.endswith(".value_embed.lambda"):  # [lambda_0 (V), lambda_1 (the table's E)]
            p[name] = torch.tensor([0.65, 0.2]) + torch.tensor([0.3, 0.2]) * torch.rand(2)
        elif name.endswith(".dwa.weight"):  # (1, count), the layer's own output last
            sign = torch.where(torch.rand(t.shape) < 1 / 3, -1.0, 1.0)
            a = sign * (0.3 + 0.5 * torch.rand(t.shape))
            a[0, -1] = 0.5 + 0.5 * torch.rand(1)
            p[name] = a
        elif last in ("sqk", "suv"):
            lo, w = (1.0, 1.0) if last == "sqk" else (1.0, 1.5)
            p[name] = (lo + w * torch.rand(t.shape)) / math.sqrt(d)
        elif last in ("attn_alpha", "mlp_alpha"):
            c = (cfg.get("interp_init") or 0.05) * math.sqrt(d)
            sign = torch.where(torch.rand(t.shape) < 1 / 3, -1.0, 1.0)
            p[name] = sign * (0.15 + 0.45 * torch.rand(t.shape)) / c
        elif tail in std:
            p[name] = std[tail] * torch.randn(t.shape)
        elif name.endswith(".alpha"):
            p[name] = 0.6 + 0.6 * torch.rand(1)
        elif name.endswith(".alpha_shift"):
            p[name] = torch.cat((0.6 + 0.6 * torch.rand(1), 0.2 * torch.randn(1)))
        elif name == "embed_scale":
            p[name] = 0.6 + 0.8 * torch.rand(1)
        elif name.endswith(".bias"):
            p[name] = 0.2 * torch.randn(t.shape)
        elif name.endswith(("resweight", ".gamma", "value_residual.lambda")):
            p[name] = 0.3 + 0.4 * torch.rand(t.shape)
        elif cfg.get("gain_offset") and name.endswith(".weight"):  # norm gains w of 1 + w
            p[name] = rand_gain(t.numel()) - 1
        else:  # gains, SiameseNorm's c1
            p[name] = rand_gain(t.numel())
    return p


def run(cfg, p, E, dout, dtype=torch.float64, ve=None, **fields):
    """The twin's output, input gradient and parameter gradients of loss = sum(out * dout),
    with the attention probabilities, the states after every layer (both streams) and the
    value embeddings' rows' gradient (None without ve: the rows, (N, B*T, H_kv d_k))."""
    B, T, d = cfg["B"], cfg["T"], cfg["d"]
    stack = twin_stack(cfg, dtype, **fields)
    load(stack, p)
    Ed = E.detach().to(dtype).reshape(B, T, d).requires_grad_(True)
    ved = None if ve is None else ve.detach().to(dtype).clone().requires_grad_(True)
    probs, hidden = [], []
    out = stack(Ed, hidden=hidden, probs=probs, value_embeds=ved)
    (out * dout.to(dtype).reshape(B, T, d)).sum().backward()
    grads = {k: v.grad for k, v in stack.named_parameters()}
    for k, g in grads.items():
        assert g is not None, "parameter %s does not influence the output" % k
    states = [t.detach() for h in hidden[1:] for t in (h if isinstance(h, tuple) else (h,))]
    return (out.detach().reshape(B * T, d), Ed.grad.reshape(B * T, d), grads, probs, states,
            None if ve is None else ved.grad)


# ---- direct transcriptions of the papers' equations (the independent check of the twin) -------


# The value residual's V_0 of the direct forward in progress (direct_forward and
# direct_siamese reset it): layer 0 stores it, later layers read it.
_V0 = {}
# "list", while softcap_refusal runs the direct forward: where attention appends each layer's
# scaled scores before the softcap
_LOGITS = {}
# "tables", while direct() runs a stack with value embeddings: the tables' rows of the call as
# the code's per-token values (nbfixture.value_embed_rows_ref), (B, T, H_kv, d_k) each
_VE = {}


def attention(cfg, p, pre, x, sites, width, probs):
    """MHA_#(x) (nbfixture.attention, as tests/gen_sublayer_fixtures.py), causal,
    with the weights of the stack's parameters p under the prefix pre; appends the attention
    probabilities to probs. With value_residual (ResFormer, arXiv 2410.17897, and its code's
    0.5 * V_1 + 0.5 * V_n): layer 0's normalized V is V_0, every later layer attends over
    lambda_1 V + lambda_2 V_0 (0.5 each, or the layer's value_residual.lambda)."""
    kind, eps = cfg["norm"], cfg["eps"]
    vmix = None
    if cfg.get("value_residual"):
        l = int(pre.split(".")[1])

        def vmix(v):
            if l == 0:
                _V0["v"] = v
                return v
            lam = p[pre + "value_residual.lambda"] if cfg["value_residual"] == 2 else (0.5, 0.5)
            return lam[0] * v + lam[1] * _V0["v"]
    if cfg.get("value_embeds"):  # modded-nanogpt: the code's list of tables, by index
        l = int(pre.split(".")[1])

        def vmix(v):
            ve = value_embed_layers_ref(_VE["tables"], cfg["L"])[l]
            return value_embed_mix_ref(v, p[pre + "value_embed.lambda"], ve)

    def snorm(site, t):
        # site norms: gain only, also for LayerNorm (nb_norm_type: "gain only at attention sites");
        # L2 has none
        return norm_fn(kind, t, None if kind == L2 else p[pre + site + "_norm.weight"], None, eps)

    qk, scale, _ = ngpt_options(cfg)
    logits = _LOGITS.get("list")  # softcap_refusal's: the scaled scores before the cap
    sink = cfg.get("attn_sink", 0)  # the learned logits, or the off-by-one softmax's z = 0
    sinks = (p[pre + "sinks"] if sink == SINK_LEARNED else
             torch.zeros(cfg["H"]) if sink == SINK_OFF_BY_ONE else None)
    out, pr = mha(x, p[pre + "att_proj.weight"], p[pre + "attn_out.weight"], cfg["B"], cfg["T"],
                  cfg["d"], cfg["H"], cfg["Hkv"], sites, width, snorm, cfg["rope"], cfg["theta"],
                  True, p.get(pre + "att_proj.bias"), p.get(pre + "attn_out.bias"), vmix,
                  p[pre + "sqk"] if qk else None, scale, cfg.get("attn_gate", 0), sinks,
                  cfg.get("clip_qkv", 0), cfg.get("softcap", 0), logits)
    probs.append(pr.detach())
    return out


def ngpt_options(cfg):
    """(qk_scale on, softmax scale or None for 1/sqrt(d_k), ffn_in_scale on) of a case of a
    preset other than nGPT (whose Block ngpt_block_ref computes): the fields 0 or absent are
    off (nb_stack_desc: 0 = the preset's, off for every preset but ngpt)."""
    assert cfg["preset"] != "NGPT"
    return (cfg.get("qk_scale", 0) > 0, cfg.get("softmax_scale") or None,
            cfg.get("ffn_in_scale", 0) > 0)


def ffn(cfg, p, pre, x):
    """SwiGLU (first half value u, second half gate z) or GPT-2's GELU-tanh MLP with biases.
    With ffn_in_scale the projection (with its bias) times nGPT's s_uv as its model.py applies
    it: suv * ((suv_init_value / suv_init_scaling) * n_embd ** 0.5), both 1."""
    h = F.linear(x, p[pre + "ff_proj.weight"], p.get(pre + "ff_proj.bias"))
    if ngpt_options(cfg)[2]:
        h = (p[pre + "suv"] * ((1.0 / 1.0) * (cfg["d"] ** 0.5))) * h
    if cfg["ffn"] == SWIGLU:
        u, z = h.chunk(2, dim=-1)
        a = F.silu(z) * u
    else:
        a = F.gelu(h, approximate="tanh" if cfg["ffn"] == GELU_TANH else "none")
    return F.linear(a, p[pre + "ff_out.weight"], p.get(pre + "ff_out.bias"))


def bnorm(cfg, p, name, x):
    if cfg["norm"] == L2:  # nGPT's justnorm: no parameters
        return norm_fn(L2, x, None, None, cfg["eps"])
    # norm_gain -1: no weight (OLMo-1's non-parametric LayerNorm, a weightless RMSNorm);
    # norm_bias -1: no bias; by the case's fields, so that a missing tensor is an error
    assert not cfg.get("gain_offset") and cfg["norm"] in (RMS, LAYER, DYT)
    gain = None if cfg.get("norm_gain", 0) < 0 else p[name + ".weight"]
    bias = None if cfg["norm"] == RMS or cfg.get("norm_bias", 0) < 0 else p[name + ".bias"]
    return norm_fn(cfg["norm"], x, gain, bias, cfg["eps"], p.get(name + ".alpha"))


def has_final_norm(cfg):
    # every preset ends with ln_f (the official codes do) except the no-normalization baseline,
    # ReZero (its code has none) and nGPT (its last block's h is unit: the code has no final norm)
    return cfg["preset"] not in ("NONE", "REZERO", "NGPT")


def mixln_n_post(alpha, L):
    # n_post = floor(alpha L) in double, with a 1e-9 guard; alpha 0 = 0.25;
    # -1 = alpha 0 itself (no Post-Norm layer)
    if alpha == -1:
        return 0
    return int(math.floor((alpha if alpha > 0 else 0.25) * L + 1e-9))


def siamese_c(cfg, l):
    # the code's sqrt(2(l+1)), the paper's sqrt(l+1), or the paper's ablation c_l = 1; l 0-based
    return [math.sqrt(2.0 * (l + 1)), math.sqrt(l + 1.0), 1.0][cfg["siamese_paper_scale"]]


def rn(cfg, p, name, x):
    return rms_norm(x, p[name], cfg["eps"])


def direct_siamese(cfg, p, E, ystream=None):
    """SiameseNorm's two streams written out (hybrid-pre and post-pre); x_0 = y_0 = E."""
    _V0.clear()
    x, y = E, E
    for l in range(cfg["L"]):
        pre = "blocks.%d." % l
        c = siamese_c(cfg, l)
        if cfg["preset"] == "SIAMESE":
            u_a = x * p[pre + "c1"] + rn(cfg, p, pre + "attn_y_norm.weight", y)
            A = attention(cfg, p, pre, u_a, QKV, PER_HEAD, [])
            x1 = x + A / c
            y1 = y + A
            n = rn(cfg, p, pre + "ff_norm.weight", x1)
            u_f = n + rn(cfg, p, pre + "ff_y_norm.weight", y1)
            if not cfg.get("siamese_no_fusion_norm"):  # the paper's ablation drops this norm
                u_f = rn(cfg, p, pre + "ff_input_norm.weight", u_f)
            Fo = ffn(cfg, p, pre, u_f)
            y = y1 + Fo
            x = n + Fo / c
        else:
            for sub, nx, ny, nin in (("attn", "attn_norm", "attn_y_norm", "attn_input_norm"),
                                     ("ffn", "ff_norm", "ff_y_norm", "ff_input_norm")):
                u = rn(cfg, p, pre + nx + ".weight", x)
                v = rn(cfg, p, pre + nin + ".weight", u + rn(cfg, p, pre + ny + ".weight", y))
                z = (attention(cfg, p, pre, v, QKV, PER_HEAD, []) if sub == "attn"
                     else ffn(cfg, p, pre, v))
                x = u + z / c
                y = y + z
    if ystream is not None:
        ystream.append(y)
    if cfg["siamese_paper_fusion"]:
        return x + rn(cfg, p, "ln_y_f.weight", y)
    return rn(cfg, p, "ln_final_f.weight",
              rn(cfg, p, "ln_f.weight", x) + rn(cfg, p, "ln_y_f.weight", y))

def hyper_of(cfg):
    """(kind, n, sinkhorn iterations, static) of a case's hyper-connections: kind 0 without."""
    kind = cfg.get("hyper") or {"MHC": HYPER_MHC, "HC": HYPER_HC,
                                "IHC": HYPER_IDENTITY}.get(cfg["preset"], 0)
    kind = 0 if kind == 1 else kind
    return (kind, cfg.get("hyper_streams") or 4, cfg.get("hyper_sinkhorn") or 20,
            cfg.get("hyper_static", 0))


def completep_s(cfg):
    """CompleteP's residual multiplier as its code computes it (EleutherAI/nanoGPT-mup, branch
    completep, model.py Block.__init__: s = 1 / depth_multiplier**depth_alpha_exp when
    depth_alpha_enabled, else 1; Block.forward: x = x + s * attn(ln_1(x)), x = x + s *
    mlp(ln_2(x)), s on the branch's output), with depth_multiplier = n_layer / mup_base_depth
    (its completep_examples run.sh): the case's depth_alpha (0 = disabled) and depth_base
    (0 = 1)."""
    if not cfg.get("depth_alpha"):
        return 1.0
    depth_multiplier = cfg["L"] / (cfg.get("depth_base") or 1)
    return 1 / depth_multiplier ** cfg["depth_alpha"]


def direct_hyper(cfg, p, E):
    """A stack with hyper-connections: each sublayer's branch (the preset's sublayer without
    its residual) between the official codes' maps (nbfixture: mHC by DeepSeek's reference
    functions, mHC-lite by its code's permutation mixture, HC by the paper's Algorithm 2); the
    streams start as n copies of x_0 (mHC: expand_to_mhc; HC: Algorithm 1's replication) and
    end in mhc_head's weighted sum (mHC, the identity form, mHC-lite) or HC's sum of the
    streams, then the final norm."""
    _V0.clear()
    kind, n, iters, static = hyper_of(cfg)
    pr, B, T, d = cfg["preset"], cfg["B"], cfg["T"], cfg["d"]
    N = lambda name, t: bnorm(cfg, p, name, t)  # noqa: E731
    sites = 0 if cfg["sites"] == 0x100 else cfg["sites"]
    s_cp = completep_s(cfg)  # CompleteP: the branch B(u) is s F(..)

    def branch(l, s):
        pre = "blocks.%d." % l
        nin, nout = ("attn_norm", "attn_out_norm") if s == "attn" else ("ff_norm", "ff_out_norm")

        def Fn(t):  # (B*T, d) rows
            return (attention(cfg, p, pre, t, sites, PER_HEAD, []) if s == "attn"
                    else ffn(cfg, p, pre, t))

        def f(u):  # u: (B, T, d)
            u = u.reshape(B * T, d)
            if pr in ("PRE", "DYT", "MHC", "HC", "IHC"):  # x + F(N(x)) without the x
                y = Fn(N(pre + nin, u))
            elif pr in ("SANDWICH", "PERILN"):  # x + N(F(N(x)))
                y = N(pre + nout, Fn(N(pre + nin, u)))
            elif pr == "NONE":
                y = Fn(u)
            else:
                raise ValueError(pr)
            return (s_cp * y).reshape(B, T, d)
        return f

    X = N("embed_norm", E) if cfg["embed_norm"] else E
    X = expand_to_mhc_ref(X.reshape(B, T, d), n)  # (B, T, n, d)
    for l in range(cfg["L"]):
        for s in ("attn", "ffn"):
            pre = "blocks.%d.hc_%s" % (l, s)
            if kind == HYPER_HC:
                q = pre + "."
                dyn = None if static else (
                    lambda t, q=q: N(q + "norm", t), p[q + "dynamic_alpha_fn"],
                    p[q + "dynamic_alpha_scale"], p[q + "dynamic_beta_fn"],
                    p[q + "dynamic_beta_scale"])
                mix_h, beta = hc_width_connection(X, p[q + "static_alpha"], p[q + "static_beta"],
                                                  dyn)
                h_o = branch(l, s)(mix_h[..., 0, :])
                X = hc_depth_connection(mix_h, h_o, beta.expand(B, T, n))
            else:
                X = mhc_sublayer(X, p.get(pre + "_fn"), p.get(pre + "_scale"), p[pre + "_base"],
                                 branch(l, s), iters, static, lite=kind == HYPER_MHC_LITE)
    if kind == HYPER_HC:
        h = X.sum(-2)  # Algorithm 1: the streams summed
    else:
        h = mhc_head_ref(X, p.get("hc_head_fn"), p.get("hc_head_scale"), p["hc_head_base"])
    h = h.reshape(B * T, d)
    return N("ln_f", h) if has_final_norm(cfg) else h


def direct_attn_res(cfg, p, E, weights=None):
    """A stack with Attention Residuals (arXiv 2603.15031): no residual sums; each sublayer's
    branch (the preset's sublayer without its residual: its norms, branch scale and CompleteP's
    s) takes its input from its reader (sublayer 0: x_0, the stack's input after the embedding
    norm), which attends over x_0 and the block sums of the outputs so far
    (nbfixture.attn_res_sources_ref: each block summed from its outputs, token by token in
    attn_res_read_ref); the reader j = 2L before the final norm. weights: an optional
    (2L+1) x (2L+1) tensor that receives nb_stack_attn_res_weights' matrix (each reader's
    weights averaged over the tokens; row j the reader before sublayer j, column 0 x_0, column
    e + 1 the sum through sublayer e: a block's last sublayer, or j - 1 for the partial sum)."""
    _V0.clear()
    pr, L, S = cfg["preset"], cfg["L"], cfg.get("attn_res_block") or 1
    N = lambda name, t: bnorm(cfg, p, name, t)  # noqa: E731
    sites = 0 if cfg["sites"] == SITES_NONE else cfg["sites"]
    s_cp = completep_s(cfg)  # CompleteP: s on the branch's output

    def branch(l, s, u):  # the sublayer's branch of u (B*T, d), as direct_forward's presets
        pre = "blocks.%d." % l
        nin, nout, ls = (("attn_norm", "attn_out_norm", "ls1.gamma") if s == "attn" else
                         ("ff_norm", "ff_out_norm", "ls2.gamma"))

        def Fn(t):
            return (attention(cfg, p, pre, t, sites, PER_HEAD, []) if s == "attn"
                    else ffn(cfg, p, pre, t))
        if pr in ("PRE", "DYT"):  # x + F(N(x)) without the x
            y = Fn(N(pre + nin, u))
        elif pr in ("SANDWICH", "PERILN"):  # x + N(F(N(x)))
            y = N(pre + nout, Fn(N(pre + nin, u)))
        elif pr == "LAYERSCALE":  # x + diag(lambda) F(N(x))
            y = p[pre + ls] * Fn(N(pre + nin, u))
        elif pr == "NONE":
            y = Fn(u)
        elif pr == "REZERO":  # x + a F(x)
            y = p[pre + "resweight"] * Fn(u)
        else:
            raise ValueError(pr)
        return s_cp * y

    def read(j, prefix, x0, outputs):
        h, a = attn_res_read_ref(attn_res_sources_ref(x0, outputs, j, S),
                                 p[prefix + ".proj.weight"], p[prefix + ".norm.weight"],
                                 cfg["eps"])
        if weights is not None:  # the blocks' last sublayers nS + S - 1, then j - 1
            cols = [0] + [n * S + S for n in range((j - 1) // S)] + [j]
            for m, col in enumerate(cols):
                weights[j, col] = a[:, m].mean()
        return h

    x0 = N("embed_norm", E) if cfg["embed_norm"] else E
    outputs = []
    if weights is not None:
        weights.zero_()
        weights[0, 0] = 1.0
    for j in range(2 * L):
        l, s = j // 2, ("attn", "ffn")[j % 2]
        u = x0 if j == 0 else read(j, "blocks.%d.%s" % (l, ("attn_res", "mlp_res")[j % 2]),
                                   x0, outputs)
        outputs.append(branch(l, s, u))
    h = read(2 * L, "final_res", x0, outputs)
    return N("ln_f", h) if has_final_norm(cfg) else h


def direct_forward(cfg, p, E):
    """Each preset written out as its paper's equations, layer by layer."""
    _V0.clear()
    probs = []
    L, pr = cfg["L"], cfg["preset"]
    N = lambda name, t: bnorm(cfg, p, name, t)  # noqa: E731

    def MHA(l, t, sites, width=PER_HEAD):
        return attention(cfg, p, "blocks.%d." % l, t, sites, width, probs)

    def FFN(l, t):
        return ffn(cfg, p, "blocks.%d." % l, t)

    def b(l, n):
        return "blocks.%d.%s" % (l, n)

    def S(default):
        # the case's sites: explicit mask, 0x100 = none, 0 = the preset's default
        return 0 if cfg["sites"] == SITES_NONE else (cfg["sites"] or default)

    # DenseFormer: every block's output kept, X_0 first; the next input their weighted sum
    outputs = [] if cfg.get("dwa") else None
    # modded-nanogpt's U-Net and re-injection: x_0 and every block's output, read by index
    states = [] if any(cfg.get(k) for k in UNET_FIELDS) else None

    sites = S(0)
    # CompleteP (nanoGPT-mup completep's Block: x + s * F(N(x))): s on each branch's output, after
    # its output norm and branch scale; written out for the presets of the cp_* cases
    s = completep_s(cfg)
    assert s == 1 or pr in ("PRE", "DYT", "SANDWICH", "PERILN", "REZERO", "LAYERSCALE"), pr
    X = N("embed_norm", E) if cfg["embed_norm"] else E
    if outputs is not None:
        outputs.append(X)
    if states is not None:
        states.append(X)
    for l in range(L):
        if states is not None:  # the input layer l runs on (nbfixture.unet_input_ref)
            X = unet_input_ref(states, l, L, p[b(l, "skip_weight")] if cfg.get("unet_skips")
                               and l >= L // 2 else None,
                               p[b(l, "lambdas")] if cfg.get("reinject_x0") else None)
        if pr == "NGPT":
            # nGPT: NVIDIA/ngpt model.py's Block (nbfixture.ngpt_block_ref) with its Linears
            # under the library's names (NB_NAMES_NGPT): query, key, value = the Q, K, V rows
            # of att_proj, att_c_proj = attn_out, c_fc = ff_proj ([u | v] rows), mlp_c_proj =
            # ff_out; its alpha_init_value = the case's interp_init (0 = 0.05)
            assert cfg["norm"] == L2 and cfg["sites"] == 0 and cfg["H"] == cfg["Hkv"] and \
                not any(cfg.get(k) for k in ("qk_scale", "softmax_scale", "ffn_in_scale"))
            B, T, d = cfg["B"], cfg["T"], cfg["d"]
            W = p[b(l, "att_proj.weight")]
            h, pr_l = ngpt_block_ref(
                X.reshape(B, T, d), W[:d], W[d:2 * d], W[2 * d:], p[b(l, "attn_out.weight")],
                p[b(l, "ff_proj.weight")], p[b(l, "ff_out.weight")], p[b(l, "sqk")],
                p[b(l, "suv")], p[b(l, "attn_alpha")], p[b(l, "mlp_alpha")], cfg["H"],
                cfg["rope"], cfg["theta"], cfg.get("interp_init") or 0.05)
            probs.append(pr_l.detach())
            X = h.reshape(B * T, d)
        elif pr in ("PRE", "DYT") or (pr == "MIXLN" and l >= mixln_n_post(cfg["mixln_alpha"], L)):
            # 4.1; DyT ("Transformers without Normalization", 2025) replaces each norm by
            # DyT(x) = weight * tanh(alpha x) + bias in the same Pre-Norm places (N does it)
            Y = X + s * MHA(l, N(b(l, "attn_norm"), X), sites)
            X = Y + s * FFN(l, N(b(l, "ff_norm"), Y))
        elif pr in ("POST", "MIXLN"):  # 4.2.1 classic
            Y = N(b(l, "attn_post_norm"), X + MHA(l, X, sites))
            X = N(b(l, "ff_post_norm"), Y + FFN(l, Y))
        elif pr in ("DEEPNORM", "DEEPNORM_MIXLN"):  # 4.9
            al = (2.0 * L) ** 0.25 if pr == "DEEPNORM" else 2.8284271247461903
            Y = N(b(l, "attn_post_norm"), al * X + MHA(l, X, sites))
            X = N(b(l, "ff_post_norm"), al * Y + FFN(l, Y))
        elif pr == "POST_FLAGS":  # 4.0 with flags {0: A=0}, else A=AR=F=FR=1
            if l == 0:
                Y = X + MHA(l, X, sites)
            else:
                a = N(b(l, "attn_norm"), X)
                Y = a + MHA(l, a, sites)
            n = N(b(l, "ff_norm"), Y)
            X = n + FFN(l, n)
        elif pr in ("SANDWICH", "PERILN"):
            # 4.3; Peri-LN (2025): y = x + Norm(F(Norm(x))) per sublayer, with the embedding
            # normalized (X above) and a final norm
            Y = X + s * N(b(l, "attn_out_norm"), MHA(l, N(b(l, "attn_norm"), X), sites))
            X = Y + s * N(b(l, "ff_out_norm"), FFN(l, N(b(l, "ff_norm"), Y)))
        elif pr == "OLMO2":  # 4.4
            Y = X + N(b(l, "attn_out_norm"), MHA(l, X, S(SITE_Q | SITE_K), FULL))
            X = Y + N(b(l, "ff_out_norm"), FFN(l, Y))
        elif (pr in ("HYBRID", "EMBEDNORM", "SITES_POST") or
              (pr in ("HYBRID_STAR", "FIRST_QKV_PRE") and l > 0)):  # 4.5
            Y = X + MHA(l, X, S(QKV))
            n = N(b(l, "ff_norm"), Y)
            X = n + FFN(l, n)
        elif pr == "HYBRID_STAR":  # 4.6 layer 0
            Y = X + MHA(l, N(b(l, "attn_norm"), X), S(QKV))
            X = Y + FFN(l, N(b(l, "ff_norm"), Y))
        elif pr in ("FIRST_QKV_PRE", "SITES_PRE"):  # 4.7 QKV-Pre / #-Pre
            Y = X + MHA(l, X, S(QKV))
            X = Y + FFN(l, N(b(l, "ff_norm"), Y))
        elif pr in ("PRE_SITES_POST", "PRE_POST"):  # Pre-#-Post (Eq. 45-46, 49-50)
            Y = X + MHA(l, N(b(l, "attn_norm"), X), S(QKV) if pr == "PRE_SITES_POST" else sites)
            n = N(b(l, "ff_norm"), Y)
            X = n + FFN(l, n)
        elif pr == "PRE_SITES_PRE":  # Eq. 47-48
            Y = X + MHA(l, N(b(l, "attn_norm"), X), S(QKV))
            X = Y + FFN(l, N(b(l, "ff_norm"), Y))
        elif pr == "NONE":  # the no-normalization baseline
            Y = X + MHA(l, X, sites)
            X = Y + FFN(l, Y)
        elif pr == "REZERO":  # "ReZero is All You Need" (2020): x + resweight F(x), no norms
            a = p[b(l, "resweight")]
            Y = X + s * (a * MHA(l, X, sites))
            X = Y + s * (a * FFN(l, Y))
        elif pr == "LAYERSCALE":  # CaiT (2021): x + diag(lambda) F(N(x)) per sublayer
            Y = X + s * (p[b(l, "ls1.gamma")] * MHA(l, N(b(l, "attn_norm"), X), sites))
            X = Y + s * (p[b(l, "ls2.gamma")] * FFN(l, N(b(l, "ff_norm"), Y)))
        elif pr == "LNS":
            # "The Curse of Depth in LLMs" (2025), Eq. of LayerNorm Scaling: h = LN(x) / sqrt(l)
            # for layer l = 1..L, on both sublayers' norms; its code: 1 / math.sqrt(layer_index
            # + 1) with a 0-based layer_index
            depth = l + 1
            Y = X + MHA(l, N(b(l, "attn_norm"), X) / math.sqrt(depth), sites)
            X = Y + FFN(l, N(b(l, "ff_norm"), Y) / math.sqrt(depth))
        elif pr == "POST_PRE":  # Eq. 51-52
            a = N(b(l, "attn_norm"), X)
            Y = a + MHA(l, a, sites)
            X = Y + FFN(l, N(b(l, "ff_norm"), Y))
        else:
            raise ValueError(pr)
        if outputs is not None:  # DenseFormer (arXiv 2402.02622): the average after block l
            outputs.append(X)  # (on the period's blocks; the others' own output, no weights)
            X = dwa_average_ref(outputs, p.get(b(l, "dwa.weight")), l,
                                cfg.get("dwa_dilation") or 1, cfg.get("dwa_period") or 1)
        if states is not None:
            states.append(X)
    return N("ln_f", X) if has_final_norm(cfg) else X


# ---- cases -------------------------------------------------------------------------------


def make_cfg(preset, L, d, H, Hkv, f=None, ffn_type=SWIGLU, norm=RMS, rope=1, theta=10000.0,
             sites=0, mixln_alpha=0.0, paper_scale=0, paper_fusion=0, attn_bias=0, B=2, T=5):
    if f is None:
        f = 3 * d // 2 if ffn_type == SWIGLU else 4 * d
    # the library defaults: 1e-6 for the OLMo-2 and the Mix-LN code presets (MX's rms_norm_eps,
    # also for its DeepNorm), else 1e-5
    eps = 1e-6 if preset in ("OLMO2", "MIXLN", "DEEPNORM_MIXLN", "LNS") else 1e-5
    return dict(preset=preset, L=L, B=B, T=T, d=d, H=H, Hkv=Hkv, f=f, ffn=ffn_type, norm=norm,
                rope=rope, theta=theta, eps=eps, sites=sites, mixln_alpha=mixln_alpha,
                siamese_paper_scale=paper_scale, siamese_paper_fusion=paper_fusion,
                attn_bias=attn_bias,
                embed_norm=1 if preset in ("EMBEDNORM", "PERILN") else 0)


class _Projected(twin.Trace):
    """The twin's trace of each layer's projection as computed ("blocks.<l>.attn.qkv", traced
    before clip_qkv's clamp), float64."""

    def __call__(self, name, t):
        if name.endswith(".attn.qkv"):
            self.fwd.append(t.detach().clone())


def clip_refusal(cfg, p, E, **fields):
    """Why a clip_qkv case's draw is refused (None when kept): in every layer of the twin's
    forward (fields: StackConfig fields, e.g. bf16 GEMMs) a share CLIP_SHARE of the Q|K|V
    values clamped, none within CLIP_GAP of +-c."""
    c, d, dk = cfg["clip_qkv"], cfg["d"], cfg["d"] // cfg["H"]
    stack = twin_stack(cfg, **fields)
    load(stack, p)
    tr = _Projected()
    with torch.no_grad():
        stack(E.reshape(cfg["B"], cfg["T"], d), trace=tr)
    for l, qkv in enumerate(tr.fwd):
        a = qkv[:, :d + 2 * cfg["Hkv"] * dk].abs()  # not the gate's logits
        share, gap = (a > c).double().mean().item(), (a - c).abs().min().item()
        if not CLIP_SHARE[0] <= share <= CLIP_SHARE[1]:
            return "clip_qkv clamps %.2f of layer %d's Q|K|V" % (share, l)
        if not gap > CLIP_GAP:
            return "a Q|K|V value of layer %d %.2g from clip_qkv" % (l, gap)
    assert len(tr.fwd) == cfg["L"], len(tr.fwd)
    return None


def direct(cfg, p, E, ve=None):
    """The direct transcription of a case's stack (draw's independent forward); ve: the value
    embeddings' rows of a case with value_embeds ((N, B*T, H_kv d_k), the library's layout)."""
    assert (ve is None) == (not cfg.get("value_embeds")), cfg
    if ve is not None:
        B, T, Hkv, dk = cfg["B"], cfg["T"], cfg["Hkv"], cfg["d"] // cfg["H"]
        assert len(ve) == cfg["value_embeds"]
        _VE["tables"] = [value_embed_rows_ref(rows, B, T, Hkv, dk) for rows in ve]
    try:
        if cfg["preset"] in ("SIAMESE", "SIAMESE_POST_PRE"):
            return direct_siamese(cfg, p, E)
        if cfg.get("attn_res"):
            return direct_attn_res(cfg, p, E)
        return direct_hyper(cfg, p, E) if hyper_of(cfg)[0] else direct_forward(cfg, p, E)
    finally:
        _VE.clear()


def scaled_logits(cfg, p, E):
    """Each layer's scaled scores before the softcap, (B, H, T, T) with masked entries 0, of
    the direct transcription (which draw holds the twin to)."""
    _LOGITS["list"] = logits = []
    try:
        with torch.no_grad():
            direct(cfg, {k: v.detach() for k, v in p.items()}, E)
    finally:
        del _LOGITS["list"]
    assert len(logits) == cfg["L"], len(logits)
    return logits


def softcap_refusal(cfg, p, E):
    """Why a softcap case's draw is refused (None when kept): in every layer a share
    SOFTCAP_SHARE of the visible scaled scores beyond the cap, |s| > c."""
    c, T = cfg["softcap"], cfg["T"]
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    for l, s in enumerate(scaled_logits(cfg, p, E)):
        share = (s.abs() > c)[..., visible].double().mean().item()
        if not SOFTCAP_SHARE[0] <= share <= SOFTCAP_SHARE[1]:
            return "the softcap bends %.2f of layer %d's scaled scores" % (share, l)
    return None


class _Maps(twin.Trace):
    """The twin's trace of each sublayer's hyper-connection maps ("blocks.<l>.<s>.hc_maps":
    [pre | post | comb (j n + k)] per token), float64."""

    def __call__(self, name, t):
        if name.endswith(".hc_maps"):
            self.fwd.append((name, t.detach().clone()))


def lite_refusal(cfg, p, E):
    """Why an mHC-lite case's draw is refused (None when kept): in some sublayer or token comb
    within LITE_FAR of the identity, or (n >= 3) nowhere LITE_ASYM from its transpose."""
    n = hyper_of(cfg)[1]
    stack = twin_stack(cfg)
    load(stack, p)
    tr = _Maps()
    with torch.no_grad():
        stack(E.reshape(cfg["B"], cfg["T"], cfg["d"]), trace=tr)
    assert len(tr.fwd) == 2 * cfg["L"], len(tr.fwd)
    for name, maps in tr.fwd:
        comb = maps[:, 2 * n:].reshape(-1, n, n)
        far = (comb - torch.eye(n)).abs().amax(dim=(-2, -1)).min().item()
        if not far > LITE_FAR:
            return "comb %.2f from the identity in %s" % (far, name)
        asym = (comb - comb.transpose(-2, -1)).abs().max().item()
        if n >= 3 and not asym > LITE_ASYM:
            return "comb %.2g from its transpose in %s" % (asym, name)
    return None


def moved_from(cfg, p, other_cfg, other_p, E, ve=None):
    """||out - out'|| / ||out'||: how far the twin's output of (cfg, p) (with the value
    embeddings' rows ve, if given) is from that of (other_cfg, other_p) on E."""
    outs = []
    for c, q, rows in ((cfg, p, ve), (other_cfg, other_p, None)):
        stack = twin_stack(c)
        load(stack, q)
        with torch.no_grad():
            outs.append(stack(E.reshape(cfg["B"], cfg["T"], cfg["d"]), value_embeds=rows))
    return ((outs[0] - outs[1]).norm() / outs[1].norm()).item()


def dwa_refusal(cfg, p, E):
    """Why a DenseFormer case's draw is refused (None when kept): its output within DWA_FAR of
    its norm from the plain stack's (the same parameters without dwa.weight)."""
    plain = {k: v for k, v in cfg.items() if k not in DWA_FIELDS}
    without = {k: v for k, v in p.items() if not k.endswith(".dwa.weight")}
    moved = moved_from(cfg, p, plain, without, E)
    if not moved > DWA_FAR:
        return "the averages move the output by %.2g of the plain stack's" % moved
    return None


def unet_refusal(cfg, p, E):
    """Why a U-Net or re-injection case's draw is refused (None when kept): its output within
    UNET_FAR of its norm from the plain stack's (the same parameters without skip_weight and
    lambdas)."""
    plain = {k: v for k, v in cfg.items() if k not in UNET_FIELDS}
    without = {k: v for k, v in p.items() if not k.endswith((".skip_weight", ".lambdas"))}
    assert len(p) - len(without) == (cfg["L"] // 2 if cfg.get("unet_skips") else 0) + \
        (cfg["L"] if cfg.get("reinject_x0") else 0), sorted(p)
    moved = moved_from(cfg, p, plain, without, E)
    if not moved > UNET_FAR:
        return "the skips and lambdas move the output by %.2g of the plain stack's" % moved
    return None


def ve_refusal(cfg, p, E, ve):
    """Why a value embedding case's draw is refused (None when kept): its output within VE_FAR
    of its norm from the plain stack's (the same parameters without value_embed.lambda, no
    rows)."""
    plain = {k: v for k, v in cfg.items() if k != "value_embeds"}
    without = {k: v for k, v in p.items() if not k.endswith(".value_embed.lambda")}
    assert len(p) - len(without) == cfg["L"], sorted(p)
    moved = moved_from(cfg, p, plain, without, E, ve)
    if not moved > VE_FAR:
        return "the rows and lambdas move the output by %.2g of the plain stack's" % moved
    return None


def attn_res_weights(cfg, p, E, dtype=torch.float64, **fields):
    """The twin's nb_stack_attn_res_weights matrix ((2L+1) x (2L+1), float64) of a forward of
    E (fields: StackConfig fields on top, as twin_stack's)."""
    stack = twin_stack(cfg, dtype, **fields)
    load(stack, {k: v.to(dtype) for k, v in p.items()})
    got = []
    with torch.no_grad():
        stack(E.to(dtype).reshape(cfg["B"], cfg["T"], cfg["d"]), depth_weights=got)
    return twin.attn_res_weights(stack.config, got)


def is_query(name):
    """Whether a parameter is an Attention Residuals pseudo-query (<reader>.proj.weight)."""
    parts = name.split(".")
    return len(parts) >= 3 and parts[-3] in AR_READERS and parts[-2:] == ["proj", "weight"]


def attn_res_refusal(cfg, p, E):
    """Why an Attention Residuals case's draw is refused (None when kept): its output within
    ATTN_RES_FAR of its norm from the output with uniform weights (every pseudo-query 0, the
    other parameters the draw's)."""
    uniform = {k: torch.zeros_like(v) if is_query(k) else v for k, v in p.items()}
    assert sum(not torch.equal(uniform[k], p[k]) for k in p) == 2 * cfg["L"], sorted(p)
    moved = moved_from(cfg, p, cfg, uniform, E)
    if not moved > ATTN_RES_FAR:
        return "the drawn queries move the output by %.2g of the uniform weights'" % moved
    return None


def f32_margin(ref, got):
    """max over elements of |got - ref| / (atol + rtol |ref|), for the float32 tolerance."""
    lim = F32_ATOL + F32_RTOL * ref.abs()
    return ((got.to(torch.float64) - ref).abs() / lim).max().item()


def draw(name, cfg, seed, reference=None):
    """Random parameters, E and dout for a case, and the reference results. Returns None
    (with the reason) when the draw is badly conditioned for a float32 comparison.
    reference(cfg, p, E): the independent forward the twin must agree with (default: the
    direct transcriptions here; gen_porting_fixtures.py passes the official codes')."""
    torch.manual_seed(seed)
    d, BT = cfg["d"], cfg["B"] * cfg["T"]
    p = draw_params(cfg)
    E = torch.randn(BT, d)
    # dout of std 0.5: weight gradients are sums over all B*T tokens and would otherwise reach
    # O(50), where float32 rounding alone approaches the test's absolute tolerance
    dout = 0.5 * torch.randn(BT, d)
    # the value embeddings' rows of the call (N tables of B*T x H_kv d_k, as the trainer gathers
    # them from its N(0, 1) tables), drawn last: the other cases' draws stay as they were
    ve = None
    if cfg.get("value_embeds"):
        ve = torch.randn(cfg["value_embeds"], BT, cfg["Hkv"] * (d // cfg["H"]))
    out, din, grads, probs, hidden, dve = run(cfg, p, E, dout, ve=ve)

    # the twin agrees with the direct transcription, forward and backward (a bug in one of them
    # if not; a detached path would leave the forward equal)
    pd = {k: v.detach().clone().requires_grad_(True) for k, v in p.items()}
    Ed = E.detach().clone().requires_grad_(True)
    ved = None if ve is None else ve.detach().clone().requires_grad_(True)
    if reference is not None:
        assert ve is None, name
        dref = reference(cfg, pd, Ed)
    else:
        dref = direct(cfg, pd, Ed, ved)
    (dref * dout).sum().backward()
    assert torch.allclose(dref, out, rtol=0, atol=1e-12), name
    pairs = [("din", din, Ed.grad)] + [(k, grads[k], pd[k].grad) for k in grads]
    if ve is not None:
        pairs.append(("dve", dve, ved.grad))
    for k, got, want in pairs:
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-10), (name, k)

    # attention is not (nearly) uniform beyond the first token, in every layer
    for l, pr in enumerate(probs):
        if not pr[:, :, 1:, :].max() > 0.5:
            return None, "near-uniform attention in layer %d" % l
        if cfg.get("attn_sink"):  # the sink takes a visible share of every head's rows
            sunk = (1 - pr.sum(-1)).mean(dim=(0, 2)).min().item()
            if not sunk > 0.02:
                return None, "a sink takes %.3g of a head's rows in layer %d" % (sunk, l)
    why = cfg.get("clip_qkv") and clip_refusal(cfg, p, E)
    if why:
        return None, why
    why = cfg.get("softcap") and softcap_refusal(cfg, p, E)
    if why:
        return None, why
    why = hyper_of(cfg)[0] == HYPER_MHC_LITE and lite_refusal(cfg, p, E)
    if why:
        return None, why
    why = cfg.get("dwa") and dwa_refusal(cfg, p, E)
    if why:
        return None, why
    why = cfg.get("attn_res") and attn_res_refusal(cfg, p, E)
    if why:
        return None, why
    why = any(cfg.get(k) for k in UNET_FIELDS) and unet_refusal(cfg, p, E)
    if why:
        return None, why
    why = cfg.get("value_embeds") and ve_refusal(cfg, p, E, ve)
    if why:
        return None, why
    # activations stay O(1), gradients moderate
    for t in hidden + [out, din] + ([dve] if ve is not None else []):
        r = t.pow(2).mean().sqrt().item()
        if not 0.05 < r < 30:
            return None, "activation rms %g" % r
    gmax = max(g.abs().max().item() for g in grads.values())
    if gmax > 200:
        return None, "gradient %g" % gmax

    # float32 autograd stays within the C test's float tolerances, with margin
    out32, din32, grads32, _, _, dve32 = run(cfg, p, E, dout, torch.float32, ve=ve)
    margins = [(f32_margin(out, out32), "out"), (f32_margin(din, din32), "din")] + \
        [(f32_margin(grads[k], grads32[k]), "grad." + k) for k in grads]
    if ve is not None:  # the rows' gradient: test_block_fixtures holds it as din
        margins.append((f32_margin(dve, dve32), "dve"))
    if cfg.get("attn_res"):  # the depth weights (test_block_fixtures checks them too), which
        # the twin's forward gives as the direct transcription's
        W = attn_res_weights(cfg, p, E)
        ref = torch.zeros_like(W)
        with torch.no_grad():
            direct_attn_res(cfg, p, E, ref)
        assert torch.allclose(W, ref, rtol=0, atol=1e-12), name
        assert torch.allclose(W.sum(1), torch.ones(len(W)), rtol=0, atol=1e-12), name
        margins.append((f32_margin(W, attn_res_weights(cfg, p, E, torch.float32)),
                        "attn_res_weights"))
    m, worst = max(margins)
    if m >= F32_MARGIN and not os.environ.get("NB_GEN_NO_F32_CHECK"):
        return None, "float32 reaches %.2f of the tolerance at %s" % (m, worst)

    # and the twin in bf16 within BF16_MARGIN of test_block_fixtures_bf16's bound
    out16, din16, grads16, _, _, dve16 = run(cfg, p, E, dout, ve=ve,
                                             gemm=dict(precision="bf16"))
    floor_rms = torch.cat([g.reshape(-1) for g in grads.values()]).pow(2).mean().sqrt().item()
    for what, ref, got, G in ([("out", out, out16, 6), ("din", din, din16, 12)] +
                              ([("dve", dve, dve16, 12)] if ve is not None else []) +
                              [("grad." + k, grads[k], grads16[k], 12) for k in grads]):
        e = math.sqrt(2.0 / 3.0) / 256 * math.sqrt(G * cfg["L"])
        floor = math.sqrt(ref.numel()) * floor_rms if what.startswith("grad.") else 0.0
        r = ((got - ref).norm() / (6 * e * (ref.norm() + floor))).item()
        if r >= BF16_MARGIN:
            return None, "bf16 reaches %.2f of the bf16 test's bound at %s" % (r, what)
    return (p, E, dout, out, din, grads, m, worst, None if ve is None else (ve, dve)), None


# the optional scalars of the porting options (absent = 0: nb_stack_desc's defaults)
# (embed_scale_on: the option; "<case>.embed_scale" is its parameter)
PORTING_FIELDS = ("attn_gate", "norm_gain", "norm_bias", "gain_offset", "embed_scale_on",
                  "branch_scale", "ffn_bias")


def add_case(w, name, cfg, report, reference=None):
    dk = cfg["d"] // cfg["H"]
    assert cfg["d"] % cfg["H"] == 0 and cfg["H"] % cfg["Hkv"] == 0 and dk % 2 == 0
    # per-case seed (adding a case does not change the others); a badly conditioned draw is
    # replaced by the next seed, deterministically
    base = SEED + zlib.crc32(name.encode()) % 100000
    for attempt in range(20):
        res, why = draw(name, cfg, base + 100003 * attempt, reference)
        if res:
            break
        print("  %s: draw %d rejected: %s" % (name, attempt, why))
    assert res, "%s: no well-conditioned draw" % name
    p, E, dout, out, din, grads, m, worst, ves = res
    d = cfg["d"]

    size0 = w.size()
    for field in ("L", "B", "T", "d", "H", "Hkv", "f", "rope", "theta", "eps", "norm", "ffn",
                  "mixln_alpha", "siamese_paper_scale", "siamese_paper_fusion", "sites"):
        w.add(name + "." + field, cfg[field])
    if cfg.get("siamese_no_fusion_norm"):  # optional scalars: absent = 0
        w.add(name + ".siamese_no_fusion_norm", 1)
    if cfg["attn_bias"]:
        w.add(name + ".attn_bias", cfg["attn_bias"])
    if cfg.get("value_residual"):  # optional: absent = 0 (off)
        w.add(name + ".value_residual", cfg["value_residual"])
    for field in ("hyper", "hyper_streams", "hyper_static", "hyper_sinkhorn"):
        if cfg.get(field):  # optional: absent = 0 (the preset's, 4 streams, dynamic, 20)
            w.add(name + "." + field, cfg[field])
    for field in ("depth_alpha", "depth_base"):
        if cfg.get(field):  # optional: absent = 0 (CompleteP off; L_base 1)
            w.add(name + "." + field, cfg[field])
    for field in ("interp_init", "qk_scale", "softmax_scale", "ffn_in_scale"):
        if cfg.get(field):  # optional: absent = 0 (the preset's: nGPT's for ngpt, else off)
            w.add(name + "." + field, cfg[field])
    for field in PORTING_FIELDS:
        if cfg.get(field):
            w.add(name + "." + field, cfg[field])
    if cfg.get("attn_sink"):  # optional: absent = 0 (no sink)
        w.add(name + ".attn_sink", cfg["attn_sink"])
    if cfg.get("clip_qkv"):  # optional: absent = 0 (off)
        w.add(name + ".clip_qkv", cfg["clip_qkv"])
    if cfg.get("softcap"):  # optional: absent = 0 (off)
        w.add(name + ".softcap", cfg["softcap"])
    for field in DWA_FIELDS:
        if cfg.get(field):  # optional: absent = 0 (off; the dilation 1; the period 1)
            w.add(name + "." + field, cfg[field])
    for field in ("attn_res", "attn_res_block"):
        if cfg.get(field):  # optional: absent = 0 (off; the block size 1)
            w.add(name + "." + field, cfg[field])
    for field in UNET_FIELDS:
        if cfg.get(field):  # optional: absent = 0 (off)
            w.add(name + "." + field, cfg[field])
    if cfg.get("value_embeds"):  # optional: absent = 0 (off)
        w.add(name + ".value_embeds", cfg["value_embeds"])
    w.add(name + ".preset_key", torch.tensor([float(ord(c)) for c in preset_key(cfg["preset"])]))
    w.add(name + ".E", E)
    w.add(name + ".dout", dout)
    w.add(name + ".out", out)
    w.add(name + ".din", din)
    if ves is not None:  # the tables' rows (an input) and their gradient (an output)
        w.add(name + ".ve", ves[0])
        w.add(name + ".dve", ves[1])
    if cfg.get("attn_res"):
        w.add(name + ".attn_res_weights", attn_res_weights(cfg, p, E))
    for k in p:
        w.add(name + "." + k, p[k])
        w.add(name + ".grad." + k, grads[k])
    report.append((name, cfg["preset"], cfg["L"], d, cfg["H"], cfg["Hkv"], len(p),
                   w.size() - size0, m, worst, attempt))


# ---- self-checks of the reference -----------------------------------------------------------


def self_checks():
    torch.manual_seed(1)
    E = torch.randn(10, 16)

    def fwd(cfg, p, x=E, final=True, hidden=None, **fields):
        # the twin's output for the (10, 16) input x (B = 2, T = 5); final=False: no final
        # norm; p may hold more parameters than the stack uses
        if not final:
            fields["norm"] = dict(fields.get("norm", {}), final=-1)
        stack = twin_stack(cfg, **fields)
        load(stack, p, extra_ok=True)
        return stack(x.reshape(2, 5, 16), hidden=hidden).reshape(10, 16)

    def names(cfg):
        return sorted(n for n, _ in twin_stack(cfg).named_parameters())

    # classic Post-LN (no final norm) == HN flags {0: A=0; else all 1} + ln_f,
    # with flags ff_norm^l = classic N_1^l, attn_norm^(l+1) = classic N_2^l, ln_f = N_2^(L-1)
    for L in (1, 3):
        post = make_cfg("POST", L, 16, 4, 2)
        pp = draw_params(post)
        flags = make_cfg("POST_FLAGS", L, 16, 4, 2)
        pf = {}
        for k, v in pp.items():
            m = re.match(r"blocks\.(\d+)\.(attn_post_norm|ff_post_norm)\.weight$", k)
            if not m:
                if k != "ln_f.weight":
                    pf[k] = v
                continue
            l = int(m.group(1))
            if m.group(2) == "attn_post_norm":
                pf["blocks.%d.ff_norm.weight" % l] = v
            elif l + 1 < L:
                pf["blocks.%d.attn_norm.weight" % (l + 1)] = v
            else:
                pf["ln_f.weight"] = v
        assert sorted(pf) == names(flags), sorted(pf)
        assert torch.allclose(fwd(post, pp, final=False), fwd(flags, pf), rtol=0, atol=1e-12)
        # and the post preset's double final norm is ln_f on top of the classic output
        assert torch.allclose(fwd(post, pp), bnorm(post, pp, "ln_f", fwd(post, pp, final=False)))

    # Mix-LN: n_post = 0 is Pre-Norm, n_post = L is Post-Norm (same names, same parameters)
    for alpha, other in ((0.25, "PRE"), (1.0, "POST")):
        mix = make_cfg("MIXLN", 3, 16, 4, 4, mixln_alpha=alpha)
        ref = make_cfg(other, 3, 16, 4, 4)
        ref["eps"] = mix["eps"]
        p = draw_params(mix)
        assert sorted(p) == names(ref)
        assert torch.allclose(fwd(mix, p), fwd(ref, p), rtol=0, atol=1e-12)
    assert [mixln_n_post(a, L) for a, L in ((0.34, 3), (0.67, 3), (0.25, 12), (0.25, 24),
                                           (0.25, 32), (0, 4))] == [1, 2, 3, 6, 8, 1]

    # HybridNorm* and First-QKV-Pre are HybridNorm in layers >= 1: their layers 1.. hold
    # exactly a HybridNorm stack's parameters and, fed with their layer-0 output, give their
    # output; their layer 0 differs from HybridNorm's
    hyb2 = make_cfg("HYBRID", 2, 16, 4, 2)
    hyb1 = make_cfg("HYBRID", 1, 16, 4, 2)
    for star in ("HYBRID_STAR", "FIRST_QKV_PRE"):
        sc = make_cfg(star, 3, 16, 4, 2)
        ps = draw_params(sc)
        hs = []
        out = fwd(sc, ps, hidden=hs)
        x1 = hs[1].reshape(10, 16)  # hs[0] is x_0 = E
        p2 = {}
        for k, v in ps.items():
            m = re.match(r"blocks\.(\d+)\.(.*)$", k)
            if not m:
                p2[k] = v
            elif int(m.group(1)) >= 1:
                p2["blocks.%d.%s" % (int(m.group(1)) - 1, m.group(2))] = v
        assert sorted(p2) == names(hyb2), star
        assert torch.allclose(out, fwd(hyb2, p2, x=x1), rtol=0, atol=1e-12), star
        assert not torch.allclose(x1, fwd(hyb1, ps, final=False), atol=1e-3), star
    # first_qkv_pre differs from HybridNorm's layer 0 only in the FFN residual: with FR set,
    # First-QKV-Pre's layer 0 is HybridNorm's
    fq = make_cfg("FIRST_QKV_PRE", 1, 16, 4, 2)
    pq = draw_params(fq)
    layers = twin.resolve(twin_config(fq, preset_key("FIRST_QKV_PRE"))).layers
    layers[0].ffn = twin.Placement(input_norm=True, residual_from_norm=True)
    h1 = make_cfg("HYBRID", 1, 16, 4, 2)
    assert torch.allclose(fwd(fq, pq, preset="default", layers=layers), fwd(h1, pq), rtol=0,
                          atol=1e-12)

    # SiameseNorm degenerate case: gamma = 0 and N_f gain = 0 make the Y stream a
    # Pre-Norm network of its own: u_a = N_ay(y), u_f = N_in(N_fy(y1))
    sc = make_cfg("SIAMESE", 3, 16, 4, 2)
    ps = draw_params(sc)
    for l in range(3):
        ps["blocks.%d.c1" % l] = torch.zeros(16)
        ps["blocks.%d.ff_norm.weight" % l] = torch.zeros(16)
    hs = []
    fwd(sc, ps, hidden=hs)
    y = E
    for l in range(3):
        pre = "blocks.%d." % l
        y1 = y + attention(sc, ps, pre, rn(sc, ps, pre + "attn_y_norm.weight", y), QKV,
                           PER_HEAD, [])
        y = y1 + ffn(sc, ps, pre, rn(sc, ps, pre + "ff_input_norm.weight",
                                     rn(sc, ps, pre + "ff_y_norm.weight", y1)))
    assert torch.allclose(hs[-1][1].reshape(10, 16), y, rtol=0, atol=1e-12)
    # depth constants: code sqrt(2(l+1)), paper sqrt(l+1) (D1)
    assert [siamese_c(dict(siamese_paper_scale=0), l) for l in range(3)] == \
        [math.sqrt(2), 2.0, math.sqrt(6)]
    assert [siamese_c(dict(siamese_paper_scale=1), l) for l in range(3)] == \
        [1.0, math.sqrt(2), math.sqrt(3)]
    # dE = dx_0 + dy_0: E enters both streams (autograd sums the two paths)
    sc = make_cfg("SIAMESE_POST_PRE", 2, 16, 4, 2)
    ps = draw_params(sc)
    Ex = E.clone().requires_grad_(True)
    Ey = E.clone().requires_grad_(True)
    Eb = E.clone().requires_grad_(True)
    dout = torch.randn(10, 16)

    def two_stream(x, y):
        # the post-pre layers with separate stream inputs (x_0 = Ex, y_0 = Ey)
        for l in range(2):
            pre, c = "blocks.%d." % l, siamese_c(sc, l)
            for sub, nx, ny, nin in (("attn", "attn_norm", "attn_y_norm", "attn_input_norm"),
                                     ("ffn", "ff_norm", "ff_y_norm", "ff_input_norm")):
                u = rn(sc, ps, pre + nx + ".weight", x)
                v = rn(sc, ps, pre + nin + ".weight", u + rn(sc, ps, pre + ny + ".weight", y))
                z = (attention(sc, ps, pre, v, QKV, PER_HEAD, []) if sub == "attn"
                     else ffn(sc, ps, pre, v))
                x, y = u + z / c, y + z
        return rn(sc, ps, "ln_final_f.weight",
                  rn(sc, ps, "ln_f.weight", x) + rn(sc, ps, "ln_y_f.weight", y))
    (two_stream(Ex, Ey) * dout).sum().backward()
    ob = fwd(sc, ps, x=Eb)
    (ob * dout).sum().backward()
    assert torch.allclose(two_stream(E, E), ob, rtol=0, atol=1e-12)
    assert torch.allclose(Eb.grad, Ex.grad + Ey.grad, rtol=0, atol=1e-12)
    assert Ex.grad.abs().max() > 1e-3 and Ey.grad.abs().max() > 1e-3

    # hyper-connections at the library's init are Pre-Norm (the papers' claim): HC's one-hot
    # pre column and identity comb keep the n streams equal, so their sum is n x_L (and the
    # direct transcription agrees at the twin's init values: static_alpha [e_k | I],
    # static_beta 1, zero fns)
    pre, hc = make_cfg("PRE", 3, 16, 4, 2), make_cfg("HC", 3, 16, 4, 2)
    pp = draw_params(pre)
    with torch.no_grad():
        init = {k: v.clone() for k, v in twin_stack(hc).named_parameters()}
    init.update(pp)
    ref = fwd(pre, pp, final=False)
    assert torch.allclose(fwd(hc, init, final=False), 4 * ref, rtol=0, atol=1e-12)
    assert torch.allclose(direct_hyper(hc, init, E), fwd(hc, init), rtol=0, atol=1e-12)
    # and mHC's Sinkhorn ends on a column normalization: the weights into each output stream
    # k sum to 1 up to its eps, while the rows converge (20 iterations)
    C = torch.randn(7, 4, 4)
    M = twin.sinkhorn(C, 20)
    assert (M.sum(-2) - 1).abs().max() < 1e-5 and (M.sum(-1) - 1).abs().max() < 1e-3

    # CompleteP's m on a bias-free branch is its output projection scaled by m: Pre-Norm with
    # depth_alpha 1 (m = 1/3 in every sublayer) is Pre-Norm with attn_out and ff_out times 1/3;
    # a custom schedule's branch_mult per sublayer overrides the depth rule where it is not 0
    pre3 = make_cfg("PRE", 3, 16, 4, 2)
    pp = draw_params(pre3)

    def scaled(ms):  # ms: (attention m, FFN m) per layer
        q = dict(pp)
        for l, pair in enumerate(ms):
            for k, m in zip(("attn_out.weight", "ff_out.weight"), pair):
                q["blocks.%d.%s" % (l, k)] = m * pp["blocks.%d.%s" % (l, k)]
        return q
    assert torch.allclose(fwd(pre3, pp, residual=dict(depth_alpha=1.0)),
                          fwd(pre3, scaled([(1 / 3, 1 / 3)] * 3)), rtol=0, atol=1e-12)
    assert not torch.allclose(fwd(pre3, pp, residual=dict(depth_alpha=1.0)), fwd(pre3, pp),
                              atol=1e-3)
    layers = twin.resolve(twin_config(pre3, "pre")).layers
    ms = [(0.5, 0), (0, 0), (0, 2.0)]  # 0: the rule's (3 / 2)^-0.5
    for ld, (ma, mf) in zip(layers, ms):
        ld.attn.branch_mult, ld.ffn.branch_mult = ma, mf
    rule = 1.5 ** -0.5
    assert torch.allclose(fwd(pre3, pp, preset="default", layers=layers,
                              residual=dict(depth_alpha=0.5, depth_base=2)),
                          fwd(pre3, scaled([(m or rule for m in pair) for pair in ms])),
                          rtol=0, atol=1e-12)
    # and the twin refuses what nb_stack_init refuses
    for bad in (dict(residual=dict(depth_alpha=2.5)),
                dict(residual=dict(depth_alpha=float("nan"))), dict(residual=dict(depth_base=-1)),
                dict(residual=dict(depth_alpha=-0.5)),
                dict(preset="siamese", residual=dict(depth_alpha=1.0)),
                dict(preset="siamese_post_pre", residual=dict(depth_alpha=0.5))):
        try:
            twin.resolve(twin_config(pre3, "pre").with_fields(**bad))
        except ValueError:
            continue
        raise AssertionError("the twin accepts %s" % bad)
    for m in (-1.0, float("nan"), float("inf")):
        layers = twin.resolve(twin_config(pre3, "pre")).layers
        layers[1].ffn.branch_mult = m
        try:
            twin.resolve(replace(twin_config(pre3, "pre"), preset="default", layers=layers))
        except ValueError:
            continue
        raise AssertionError("the twin accepts branch_mult %g" % m)
    # the range's end
    twin.resolve(twin_config(pre3, "pre").with_fields(residual=dict(depth_alpha=2.0)))

    # RoPE after the Q/K norms matters only with non-unit gains: a gain-free RMSNorm
    # commutes with RoPE, the fixtures' random gains do not
    t = torch.randn(1, 2, 5, 4)
    sin, cos = rope_sin_cos(5, 4, 10000.0)
    check_norm_rope_order(t, sin, cos, rand_gain(4))

    ngpt_self_checks(E, fwd)
    sink_self_checks(E, fwd)
    clip_self_checks(E, fwd)
    softcap_self_checks(E, fwd)
    mhc_lite_self_checks(E, fwd)
    dwa_self_checks(E, fwd)
    dwa_period_self_checks(E, fwd)
    attn_res_self_checks(E, fwd)
    unet_self_checks(E, fwd)
    value_embeds_self_checks(E)
    print("self-checks passed")


def ngpt_self_checks(E, fwd):
    """nGPT: the twin's preset resolves as nb_stack_init documents it, its scales start at the
    code's stored values, its parts are the preset's when put together by hand, the options at
    their neutral values change nothing, and the twin refuses what nb_stack_init refuses. And the
    deviation of ngpt_block_ref: the code's rotary function is not a rotation (issue #10), the
    standard RoPE is, so L2 per head commutes with it (RoPE then justnorm, as the code orders
    them, is the library's justnorm then RoPE)."""
    ng = make_cfg("NGPT", 2, 16, 4, 4, f=0, norm=L2)
    c = twin.resolve(twin_config(ng, "ngpt"))
    assert (c.norm.type, c.ffn.d_ff, c.attn.qk_scale, c.ffn.in_scale, c.attn.softmax_scale,
            c.residual.interp_init, c.norm.final, c.norm.embed, c.attn.sites) == \
        ("l2", 64, 1, 1, 2.0, 0.05, -1, -1, SITE_Q | SITE_K), c
    # the scales as the code stores them at init (init_scaling: base_scale = 1/sqrt(d), suv 1)
    stack = twin_stack(dict(ng, f=64))
    for name, t in stack.named_parameters():
        last = name.split(".")[-1]
        if last in ("sqk", "attn_alpha", "mlp_alpha", "suv"):
            assert torch.equal(t.detach(), torch.full_like(t, 1.0 if last == "suv" else
                                                           1.0 / 16 ** 0.5)), name
    assert sorted(n.split(".", 2)[2] for n, _ in stack.named_parameters() if ".0." in n) == \
        sorted(["att_proj.weight", "attn_out.weight", "sqk", "ff_proj.weight", "ff_out.weight",
                "suv", "attn_alpha", "mlp_alpha"])
    # the preset is its parts: a custom schedule of residual_norm, output_norm, post_norm and
    # interp placements with L2 norms, sites Q, K, s_qk, the softmax scale sqrt(d_k), s_uv
    pn = draw_params(dict(ng, f=64))
    g = twin.Placement(residual_norm=True, output_norm=True, post_norm=True, branch_scale="interp")
    layers = [twin.LayerSpec(replace(g), replace(g), SITE_Q | SITE_K) for _ in range(2)]
    ref = fwd(dict(ng, f=64), pn)
    parts = fwd(make_cfg("PRE", 2, 16, 4, 4, f=64, norm=L2), pn, preset="default",
                layers=layers, attn=dict(qk_scale=1, softmax_scale=2.0), ffn=dict(in_scale=1),
                norm=dict(final=-1), residual=dict(interp_init=0.05))
    assert torch.allclose(ref, parts, rtol=0, atol=1e-12)
    # the step is interp_init sqrt(d) |lambda|: interp_init 0.2 with lambda is 0.05 with 4 lambda
    p4 = {k: 4 * v if k.endswith("_alpha") else v for k, v in pn.items()}
    assert torch.allclose(fwd(dict(ng, f=64), pn, residual=dict(interp_init=0.2)),
                          fwd(dict(ng, f=64), p4), rtol=0, atol=1e-12)
    # s_qk and s_uv stored at 1/sqrt(d) are 1 (sqrt(d) times them), and the default softmax scale
    # given explicitly is the default: Pre-Norm with them is Pre-Norm
    pre = make_cfg("PRE", 2, 16, 4, 4)
    pp = draw_params(pre)
    one = dict(pp, **{"blocks.%d.%s" % (l, n): torch.full((w,), 0.25) for l in range(2)
                      for n, w in (("sqk", 16), ("suv", 48))})
    assert torch.allclose(fwd(pre, one, attn=dict(qk_scale=1, softmax_scale=0.5),
                              ffn=dict(in_scale=1)), fwd(pre, pp), rtol=0, atol=1e-12)
    assert not torch.allclose(fwd(pre, one, attn=dict(softmax_scale=0.35)), fwd(pre, pp),
                              atol=1e-3)
    # the twin refuses what nb_stack_init refuses
    base = twin_config(ng, "ngpt")
    bad_layers = [twin.LayerSpec(twin.Placement(input_norm=True, residual_from_norm=True,
                                                residual_norm=True), twin.Placement())] * 2
    for bad in (dict(residual=dict(interp_init=1.5)), dict(residual=dict(interp_init=-0.1)),
                dict(residual=dict(interp_init=float("nan"))), dict(attn=dict(qk_scale=2)),
                dict(ffn=dict(in_scale=-2)), dict(attn=dict(softmax_scale=-1.0)),
                dict(attn=dict(softmax_scale=float("inf"))), dict(n_kv_heads=2),
                dict(residual=dict(depth_alpha=1.0)), dict(hyper=dict(kind="mhc")),
                dict(norm=dict(type="l3")),
                dict(preset="pre", attn=dict(qk_scale=1), n_kv_heads=2),
                dict(preset="default", layers=bad_layers),
                dict(preset="default", layers=[twin.LayerSpec(twin.Placement(
                    branch_scale="rezero"), twin.Placement())] * 2),
                dict(preset="default", layers=[twin.LayerSpec(replace(
                    g, residual_scale=2.0), replace(g))] * 2)):
        try:
            twin.resolve(base.with_fields(**bad))
        except ValueError:
            continue
        raise AssertionError("the twin accepts %s" % bad)
    twin.resolve(base.with_fields(residual=dict(interp_init=1.0)))  # the range's end
    # the code's rotary function changes the norm of a head's q (no rotation); the standard
    # RoPE keeps it, so L2 per head before or after it is the same
    q = torch.randn(2, 2, 5, 4)
    q_off, _ = ngpt_rope_official(q, q)
    assert not torch.allclose(q_off.norm(dim=-1), q.norm(dim=-1), atol=1e-3)
    sin, cos = rope_sin_cos(5, 4, 10000.0)
    assert torch.allclose(apply_rope(q, sin, cos).norm(dim=-1), q.norm(dim=-1), rtol=0,
                          atol=1e-12)
    assert torch.allclose(justnorm(apply_rope(q, sin, cos)), apply_rope(justnorm(q), sin, cos),
                          rtol=0, atol=1e-12)


def sink_self_checks(E, fwd):
    """Attention sinks in the twin: a learned sink of logit 0 is the off-by-one softmax, one far
    below every score is no sink, and a sink changes the output; "sinks" sits after sqk and before
    ff_proj in the library's order (nb__walk_layer); the twin refuses an unknown attn.sink, and a
    Hugging Face export of a stack with sinks, naming attn_sink; the trainer's metadata
    (attn_sink: none, learned, off-by-one) reads back as its attn.sink."""
    pre = make_cfg("PRE", 2, 16, 4, 2)
    p = draw_params(pre)
    learned = dict(pre, attn_sink=SINK_LEARNED)
    zero = dict(p, **{"blocks.%d.sinks" % l: torch.zeros(4) for l in range(2)})
    far = dict(p, **{"blocks.%d.sinks" % l: torch.full((4,), -1e4) for l in range(2)})
    assert torch.allclose(fwd(learned, zero), fwd(pre, p, attn=dict(sink="off_by_one")), rtol=0,
                          atol=1e-12)
    assert torch.allclose(fwd(learned, far), fwd(pre, p), rtol=0, atol=1e-12)
    assert not torch.allclose(fwd(learned, zero), fwd(pre, p), atol=1e-3)
    ng = make_cfg("PRE", 1, 16, 4, 4, sites=QKVC)
    names = [n for n, _ in twin_stack(ng, attn=dict(qk_scale=1, sink="learned"),
                                      ffn=dict(in_scale=1)).library_parameters()]
    assert names[:9] == ["blocks.0." + n for n in (
        "att_proj.weight", "attn_out.weight", "q_norm.weight", "k_norm.weight", "v_norm.weight",
        "c_norm.weight", "sqk", "sinks", "ff_proj.weight")], names
    base = twin_config(pre, "pre")
    try:
        twin.resolve(base.with_fields(attn=dict(sink="sigmoid")))
        raise AssertionError("the twin accepts attn.sink 'sigmoid'")
    except ValueError as e:
        assert "attn.sink" in str(e), e
    for sink in ("learned", "off_by_one"):
        stack = twin.Stack(base.with_fields(attn=dict(sink=sink)))
        export_refused(stack, "attn_sink", "a stack with attn.sink %s is exported" % sink)
    meta = dict(vocab_size="256", n_layers="2", d_model="16", n_heads="4", n_kv_heads="2",
                d_ff="24", rope="1", preset="pre", ffn="swiglu", norm="rms")
    for value, sink in ((None, ""), ("none", ""), ("learned", "learned"),
                        ("off-by-one", "off_by_one")):
        m = dict(meta, **({} if value is None else {"attn_sink": value}))
        assert twin.config_from_metadata(m).attn.sink == sink, value
    try:
        twin.config_from_metadata(dict(meta, attn_sink="sigmoid"))
        raise AssertionError("config_from_metadata accepts attn_sink 'sigmoid'")
    except ValueError as e:
        assert "attn_sink" in str(e), e


def clip_self_checks(E, fwd):
    """clip_qkv in the twin: a c above every projected value is no clamp, one below some
    changes the output; with the gate, a c between the largest Q|K|V value and the largest gate
    logit is no clamp either (the gate's columns are not clamped: Q|K|V's rows of att_proj
    scaled down to put them there); the twin refuses a negative,
    infinite or NaN c, and a Hugging Face export of a stack with clip_qkv, naming them; the
    trainer's metadata (clip_qkv, %.9g) reads back as attn.clip_qkv, absent as 0."""
    pre = make_cfg("PRE", 2, 16, 4, 2)
    p = draw_params(pre)
    assert torch.allclose(fwd(pre, p, attn=dict(clip_qkv=1e6)), fwd(pre, p), rtol=0, atol=0)
    assert not torch.allclose(fwd(pre, p, attn=dict(clip_qkv=0.5)), fwd(pre, p), atol=1e-3)
    gated = dict(pre, attn_gate=GATE_ELEMENTWISE)
    pg = draw_params(gated)
    n = 16 + 2 * 2 * 4  # d + 2 H_kv d_k: the gate's 16 logits after
    for l in range(2):
        pg["blocks.%d.att_proj.weight" % l][:n] *= 0.05
    tr = _Projected()
    stack = twin_stack(gated)
    load(stack, pg)
    with torch.no_grad():
        stack(E.reshape(2, 5, 16), trace=tr)
    top = max(t[:, :n].abs().max().item() for t in tr.fwd)
    gate_top = max(t[:, n:].abs().max().item() for t in tr.fwd)
    assert gate_top > 2 * top, (gate_top, top)
    c = 0.5 * (top + gate_top)
    assert torch.allclose(fwd(gated, pg, attn=dict(clip_qkv=c)), fwd(gated, pg), rtol=0, atol=0)
    attn_value_checks(pre, "clip_qkv", "clip_qkv", 0.5, "olmo2",
                      (("0.5", 0.5), ("%.9g" % 0.1, 0.1)))


def traced_backward(cfg, params, E):
    """The twin's stack of cfg with params on E (2 x 5 x 16), its output's sum backpropagated:
    the trace's (name, value) pairs, the hidden states and the input's gradient. twin_stack
    leaves the random stream where it was, so the draws around a call keep their order."""
    stack = twin_stack(cfg)
    load(stack, params)
    tr = twin.Trace()
    x = E.reshape(2, 5, 16).clone().requires_grad_(True)
    hd = []
    stack(x, trace=tr, hidden=hd).sum().backward()
    return tr.items(), hd, x.grad


def grad_x_in_is_x0(cfg, E):
    """Layer 0's grad_x_in is x_0's whole gradient (the library adds h_0's): without an
    embedding norm that of the stack's input."""
    items, _, xgrad = traced_backward(cfg, draw_params(cfg), E)
    g0 = dict(items)["blocks.0.grad_x_in"].double()
    assert torch.allclose(g0, xgrad.reshape(10, 16).float().double(), rtol=1e-6, atol=1e-6)


def export_refused(stack, word, message):
    """Both Hugging Face exports of the twin (hf_family, to_hf) refuse the stack, naming word
    (message: what the assertion says when one does not)."""
    for fn in (lambda: twin.hf_family(stack.config), lambda: twin.to_hf(stack, "hf-llama")):
        try:
            fn()
            raise AssertionError(message)
        except ValueError as e:
            assert word in str(e), e


def attn_value_checks(cfg, field, key, on, preset, reads):
    """An attention option of one value, 0 = off, checked as the library checks it: the twin
    refuses a negative, infinite or NaN value naming attn.<field>, and a Hugging Face export of
    a stack with it (on) naming key; the trainer's metadata (key, %.9g) reads back as
    attn.<field> on its preset (reads: (string, value) pairs), absent as 0."""
    base = twin_config(cfg, "pre")
    for bad in (-1.0, float("inf"), float("nan")):
        try:
            twin.resolve(base.with_fields(attn={field: bad}))
            raise AssertionError("the twin accepts attn.%s %g" % (field, bad))
        except ValueError as e:
            assert "attn." + field in str(e), e
    stack = twin.Stack(base.with_fields(attn={field: on}))
    export_refused(stack, key, "a stack with attn.%s is exported" % field)
    meta = dict(vocab_size="256", n_layers="2", d_model="16", n_heads="4", n_kv_heads="2",
                d_ff="24", rope="1", preset=preset, ffn="swiglu", norm="rms")
    for text, value in ((None, 0.0),) + reads:
        m = dict(meta, **({} if text is None else {key: text}))
        assert getattr(twin.config_from_metadata(m).attn, field) == value, text


def softcap_self_checks(E, fwd):
    """softcap in the twin: c tanh(s / c) = s - s^3 / (3 c^2) + O(s^5 / c^4), so for c far
    above every scaled score (S the largest |s|) the output moves from the uncapped one as
    1 / c^2 (c = 30 S, 60 S: a quarter), and for a huge c only by the rounding of c tanh(s / c)
    (s / c, tanh and the product: 4 half-ulps of s at most) times the stack's response to its
    scores, measured at c = 30 S (its move over its largest score change S^3 / (3 c^2); 10x for
    another pattern of changes): the same function within rounding, not bitwise; a c below S
    changes the output; the twin refuses a negative, infinite or NaN c, and a Hugging Face
    export of a stack with the softcap, naming them; the trainer's metadata (attn_softcap,
    %.9g) reads back as attn.softcap, absent as 0."""
    pre = make_cfg("PRE", 2, 16, 4, 2)
    p = draw_params(pre)
    S = max(s.abs().max().item() for s in scaled_logits(pre, p, E))
    plain = fwd(pre, p)

    def moved(c):
        return (fwd(pre, p, attn=dict(softcap=c)) - plain).abs().max().item()
    c1 = 30 * S
    m1, m2 = moved(c1), moved(2 * c1)
    assert 0.2 < m2 / m1 < 0.3, (m1, m2)  # the cubic term's 1/4
    response = m1 / (S ** 3 / (3 * c1 ** 2))
    for c in (1e5 * S, 1e10 * S):
        tol = 10 * response * (S ** 3 / (3 * c ** 2) + 4 * 2.0 ** -53 * S)
        assert moved(c) <= tol, (c, moved(c), tol)
    assert not torch.allclose(fwd(pre, p, attn=dict(softcap=0.5 * S)), plain, atol=1e-3)
    attn_value_checks(pre, "softcap", "attn_softcap", 50.0, "sandwich",
                      (("50", 50.0), ("%.9g" % 0.3, 0.3)))


def mhc_lite_self_checks(E, fwd):
    """mHC-lite in the twin: its permutations are itertools' (lexicographic, the identity
    first) and its comb the reference's mixture of permutation matrices (built there another
    way), every row and column summing to 1, not symmetric for n >= 3 (a transposed comb,
    pi^-1 for pi, differs); one permutation's logit far above the others moves stream j to
    stream pi(j); its parameters as the library's table (fn and base 2n + n! wide, 3 scales) and
    init (comb's logits 0 for the identity, -8 for the others; pre and post as mHC's); the stack
    whose identity logit is far above the others is the identity form (IHC) with the same pre
    and post; the twin refuses hyper.streams above 5 and hyper.sinkhorn for it, and a Hugging
    Face export, naming them; the trainer's metadata (hyper: mhc-lite) reads back as mhc_lite."""
    for n in range(1, 6):
        P = twin.permutations(n)
        ref = mhc_lite_perms_ref(n)
        assert P.shape == (math.factorial(n), n) and P[0].tolist() == list(range(n))
        assert sorted(map(tuple, P.tolist())) == list(map(tuple, P.tolist())), n
        assert torch.equal(ref.argmax(-1), P), n
        C = 1.5 * torch.randn(3, 2, math.factorial(n))
        M = twin.birkhoff(C, n)
        assert torch.allclose(M, mhc_lite_res_ref(C, n), rtol=0, atol=1e-14), n
        assert (M.sum(-1) - 1).abs().max() < 1e-14 and (M.sum(-2) - 1).abs().max() < 1e-14
        if n >= 3:
            assert (M - M.transpose(-2, -1)).abs().max() > 0.05, n
        for r in range(math.factorial(n)):  # one permutation: stream j to stream pi_r(j)
            C1 = torch.full((math.factorial(n),), -1e3)
            C1[r] = 0.0
            X = torch.randn(n, 5)
            moved = torch.einsum("jk,jd->kd", twin.birkhoff(C1, n), X)
            assert torch.equal(moved[P[r]], X), (n, r)
    pre = make_cfg("PRE", 2, 16, 4, 2)
    for n, static in ((4, 0), (3, 1)):
        lite = dict(pre, hyper=HYPER_MHC_LITE, hyper_streams=n, hyper_static=static)
        m = 2 * n + math.factorial(n)
        with torch.no_grad():
            init = dict(twin_stack(lite).named_parameters())
        for l in range(2):
            for s in ("attn", "ffn"):
                q = "blocks.%d.hc_%s_" % (l, s)
                want = torch.cat((torch.zeros(2 * n + 1), torch.full((m - 2 * n - 1,), -8.0)))
                assert torch.equal(init[q + "base"], want), q
                assert static or (init[q + "fn"].shape == (m, 16 * n) and
                                  torch.equal(init[q + "scale"], torch.full((3,), 0.01))), q
                assert not static or q + "fn" not in init and q + "scale" not in init, q
        a0 = 1 / (1 + (math.factorial(n) - 1) * math.exp(-8.0))
        assert a0 > 0.99 or n < 4, a0  # comb ~ 0.99 I at init
        # the identity's logit far above the others: the identity form with the same pre, post
        p = draw_params(lite)
        for k in list(p):
            if k.endswith("_base") and not k.startswith("hc_head"):
                p[k] = torch.cat((p[k][:2 * n + 1], torch.full((m - 2 * n - 1,), -1e3)))
        ihc = dict(lite, hyper=HYPER_IDENTITY)
        q = {k: (v[:2 * n] if k.endswith(("_fn", "_base")) and not k.startswith("hc_head")
                 else v[:2] if k.endswith("_scale") and not k.startswith("hc_head") else v)
             for k, v in p.items()}
        assert torch.allclose(fwd(lite, p), fwd(ihc, q), rtol=0, atol=1e-12), n
        assert torch.allclose(direct_hyper(lite, p, E), fwd(lite, p), rtol=0, atol=1e-12), n
    base = twin_config(dict(pre, hyper=HYPER_MHC_LITE), "pre")
    assert twin.resolve(base.with_fields(hyper=dict(streams=5))).hyper.streams == 5
    for bad, word in ((dict(streams=6), "hyper.streams"), (dict(sinkhorn=5), "hyper.sinkhorn")):
        try:
            twin.resolve(base.with_fields(hyper=bad))
            raise AssertionError("the twin accepts mHC-lite with %s" % bad)
        except ValueError as e:
            assert word in str(e), e
    stack = twin.Stack(base)
    export_refused(stack, "hyper", "a stack with mHC-lite is exported")
    meta = dict(vocab_size="256", n_layers="2", d_model="16", n_heads="4", n_kv_heads="2",
                d_ff="24", rope="1", preset="pre", ffn="swiglu", norm="rms")
    for value, kind in (("mhc-lite", "mhc_lite"), ("ihc", "identity"), ("mhc", "mhc")):
        c = twin.resolve(twin.config_from_metadata(dict(meta, hyper=value, hyper_streams="3")))
        assert (c.hyper.kind, c.hyper.streams) == (kind, 3), value


def metadata_reads(n_layers, fields, reads, refusals):
    """The twin reads the trainer's metadata keys of a residual option: each (extra keys,
    the residual fields' values) of reads resolves so, each (extra keys, word) of refusals is
    refused naming word."""
    meta = dict(vocab_size="256", n_layers=str(n_layers), d_model="16", n_heads="4",
                n_kv_heads="2", d_ff="24", rope="1", preset="pre", ffn="swiglu", norm="rms")
    for extra, want in reads:
        r = twin.resolve(twin.config_from_metadata(dict(meta, **extra))).residual
        assert tuple(getattr(r, f) for f in fields) == want, extra
    for extra, word in refusals:
        try:
            twin.resolve(twin.config_from_metadata(dict(meta, **extra)))
            raise AssertionError("the twin reads %s" % extra)
        except ValueError as e:
            assert word in str(e), (extra, e)


def dwa_self_checks(E, fwd):
    """DenseFormer's average in the twin: its tensors as the library's table
    (blocks.<l>.dwa.weight of (1, count), count the outputs j <= l + 1 with j = l + 1 mod k,
    last in the layer) and init (0s, the layer's own output's 1), with which the stack is the
    plain one exactly (output and hidden states; the embedding norm and the learnable value
    residual on); the last layer's weight one-hot on its first output reads x_0 (k = 1, 3 of
    L = 3: the stack is ln_f of the normalized embedding) or layer 0's output (k = 2); the twin
    agrees with the paper's sum (dwa_average_ref) at k = 3 and k = L with drawn weights; the
    trace has the plain stack's names, layer 0's grad_x_in x_0's whole gradient; the twin
    refuses dwa other than 0 and 1, a dilation outside [0, L] or without dwa, dwa with
    SiameseNorm or hyper-connections, and a Hugging Face export, naming them; the trainer's
    metadata (dwa "on", dwa_dilation) reads back, absent as 0, another dwa value, a dilation
    without dwa or beyond n_layers refused."""
    plain = dict(make_cfg("PERILN", 3, 16, 4, 2), value_residual=2)
    p = draw_params(plain)
    for k in (1, 2, 3):
        dwa = dict(plain, dwa=1, dwa_dilation=k)
        stack = twin_stack(dwa)
        table = [n for n, _ in stack.library_parameters()]
        init = dict(stack.named_parameters())
        pd = dict(p)
        for l in range(3):
            name = "blocks.%d.dwa.weight" % l
            count = len([j for j in range(l + 2) if j % k == (l + 1) % k])
            want = torch.zeros(1, count)
            want[0, -1] = 1.0
            assert torch.equal(init[name], want), (k, name)
            nxt = "ln_f.weight" if l == 2 else "blocks.%d.att_proj.weight" % (l + 1)
            assert table[table.index(name) + 1] == nxt, (k, table)
            pd[name] = init[name].detach()
        assert sorted(pd) == sorted(init), k
        hd, hp = [], []
        assert torch.equal(fwd(dwa, pd, hidden=hd), fwd(plain, p, hidden=hp)), k
        assert all(torch.equal(a, b) for a, b in zip(hd, hp)) and len(hd) == 4, k
        # the last layer's average on its first output alone
        one = dict(pd)
        one["blocks.2.dwa.weight"] = torch.zeros_like(pd["blocks.2.dwa.weight"])
        one["blocks.2.dwa.weight"][0, 0] = 1.0
        hs = []
        out = fwd(dwa, one, hidden=hs)
        if k in (1, 2):  # h_0 = x_0 = N_embed(E); h_1 = layer 0's output = x_1 (init weights)
            read = bnorm(plain, p, "embed_norm", E) if k == 1 else hs[1].reshape(10, 16)
            assert torch.allclose(out, bnorm(plain, p, "ln_f", read), rtol=0, atol=1e-12), k
    # the paper's sum against the twin with drawn weights: k = 3 of L = 4, k = L = 3
    for L, k in ((4, 3), (3, 3)):
        dwa = dict(make_cfg("PRE", L, 16, 4, 2), dwa=1, dwa_dilation=k)
        q = draw_params(dwa)
        assert torch.allclose(fwd(dwa, q), direct_forward(dwa, q, E), rtol=0, atol=1e-12), L
    # the trace: the plain stack's names in the plain stack's order
    names = [[n for n, _ in traced_backward(c, q, E)[0]]
             for c, q in ((plain, p), (dict(plain, dwa=1, dwa_dilation=2), pd))]
    assert names[0] == names[1] and "blocks.0.grad_x_in" in names[0], names
    grad_x_in_is_x0(dict(make_cfg("PRE", 3, 16, 4, 2), dwa=1), E)
    # refusals as nb_stack_init's, naming the fields
    base = twin_config(make_cfg("PRE", 3, 16, 4, 2), "pre")
    assert twin.resolve(base.with_fields(residual=dict(dwa=1, dwa_dilation=3))).residual \
        .dwa_dilation == 3
    assert twin.resolve(base.with_fields(residual=dict(dwa=1))).residual.dwa_dilation == 1
    for bad, words in (
            (dict(residual=dict(dwa=2)), ("residual.dwa",)),
            (dict(residual=dict(dwa=-1)), ("residual.dwa",)),
            (dict(residual=dict(dwa=1, dwa_dilation=4)), ("residual.dwa_dilation", "n_layers")),
            (dict(residual=dict(dwa=1, dwa_dilation=-1)), ("residual.dwa_dilation",)),
            (dict(residual=dict(dwa_dilation=2)), ("residual.dwa_dilation", "needs residual.dwa")),
            (dict(preset="siamese", residual=dict(dwa=1)), ("residual.dwa", "SiameseNorm")),
            (dict(preset="siamese_post_pre", residual=dict(dwa=1)), ("residual.dwa",
                                                                     "SiameseNorm")),
            (dict(preset="mhc", residual=dict(dwa=1)), ("residual.dwa", "hyper-connections")),
            (dict(hyper=dict(kind="hc"), residual=dict(dwa=1)), ("residual.dwa",
                                                                 "hyper-connections"))):
        try:
            twin.resolve(base.with_fields(**bad))
            raise AssertionError("the twin accepts %s" % bad)
        except ValueError as e:
            assert all(w in str(e) for w in words), (bad, e)
    stack = twin.Stack(base.with_fields(residual=dict(dwa=1)))
    export_refused(stack, "dwa", "a stack with DenseFormer's average is exported")
    metadata_reads(3, ("dwa", "dwa_dilation"),
                   (({}, (0, 0)), (dict(dwa="on"), (1, 1)),
                    (dict(dwa="on", dwa_dilation="2"), (1, 2))),
                   ((dict(dwa="off"), "dwa"), (dict(dwa_dilation="2"), "needs residual.dwa"),
                    (dict(dwa="on", dwa_dilation="4"), "residual.dwa_dilation")))


def dwa_period_self_checks(E, fwd):
    """DenseFormer's period (the DWAModules package's period) in the twin: dwa.weight only on
    the layers l with (l+1) mod p = 0, of (1, (l+1)//k + 1), last in the layer, at its init, the
    other layers without any, as the library's table (p = 0 the table of p = 1, p = L the last
    layer's alone); at init every period is the plain stack exactly (output and hidden states;
    the embedding norm and the learnable value residual on); with drawn weights the layers
    before the first averaging one are the plain stack's (its hidden states equal), a layer off
    the period passes its output on (hidden x_{l+1} = block_l(x_l), a one-layer stack on x_l),
    and an average reads the outputs of the layers off the period (layer 3's weight one-hot on
    h_1 at p = 2: the output is ln_f(x_1)); the twin agrees with the package's forward written
    as the paper's sum (dwa_average_ref with the period) at six (L, k, p); the trace has the
    plain stack's names, layer 0's grad_x_in x_0's whole gradient; the twin refuses a period
    outside [0, L] or without dwa, and the export, naming them; the trainer's metadata
    (dwa_period) reads back, absent as 0 (1 with dwa), without dwa or beyond n_layers refused."""
    plain = dict(make_cfg("PERILN", 4, 16, 4, 2), value_residual=2)
    p = draw_params(plain)
    hp = []
    ref = fwd(plain, p, hidden=hp)
    for k in (1, 2):
        for period in (0, 1, 2, 3, 4):
            dwa = dict(plain, dwa=1, dwa_dilation=k, dwa_period=period)
            stack = twin_stack(dwa)
            assert stack.config.residual.dwa_period == (period or 1), period
            table = [n for n, _ in stack.library_parameters()]
            init = dict(stack.named_parameters())
            here = [l for l in range(4) if (l + 1) % (period or 1) == 0]
            assert [n for n in table if ".dwa." in n] == \
                ["blocks.%d.dwa.weight" % l for l in here], (k, period, table)
            pd = dict(p)
            for l in here:
                name = "blocks.%d.dwa.weight" % l
                want = torch.zeros(1, (l + 1) // k + 1)
                want[0, -1] = 1.0
                assert torch.equal(init[name], want), (k, period, name)
                nxt = "ln_f.weight" if l == 3 else "blocks.%d.att_proj.weight" % (l + 1)
                assert table[table.index(name) + 1] == nxt, (k, period, table)
                pd[name] = init[name].detach()
            assert sorted(pd) == sorted(init), (k, period)
            hd = []
            assert torch.equal(fwd(dwa, pd, hidden=hd), ref), (k, period)
            assert len(hd) == 5 and all(torch.equal(a, b) for a, b in zip(hd, hp)), (k, period)
            if period in (0, 1):  # the period 1: the stack without the field
                q = draw_params(dict(plain, dwa=1, dwa_dilation=k))
                assert torch.equal(fwd(dwa, q), fwd(dict(plain, dwa=1, dwa_dilation=k), q)), k
    # drawn weights: the layers before the first average are the plain stack's; on Pre-Norm
    # (no value residual: each layer alone is a one-layer stack) each layer off the period
    # passes x_{l+1} = block_l(x_l) on, also after an average
    for period in (2, 3, 4):
        dwa = dict(plain, dwa=1, dwa_period=period)
        q = dict(p, **{k_: v for k_, v in draw_params(dwa).items() if ".dwa." in k_})
        hd = []
        fwd(dwa, q, hidden=hd)
        assert all(torch.equal(hd[j], hp[j]) for j in range(period)), period
        assert not torch.allclose(hd[period], hp[period]), period
        pre = dict(make_cfg("PRE", 4, 16, 4, 2), dwa=1, dwa_period=period)
        q = draw_params(pre)
        hd = []
        fwd(pre, q, hidden=hd)
        one = make_cfg("PRE", 1, 16, 4, 2)
        for l in [l for l in range(4) if (l + 1) % period]:
            blk = {k_.replace("blocks.%d." % l, "blocks.0."): v for k_, v in q.items()
                   if k_.startswith("blocks.%d." % l)}
            got = fwd(one, blk, x=hd[l].reshape(10, 16), final=False)
            assert torch.allclose(got, hd[l + 1].reshape(10, 16), rtol=0, atol=1e-12), \
                (period, l)
    # an average reads the passing layers' outputs: p = 2, layer 3's weight one-hot on h_1
    dwa = dict(plain, dwa=1, dwa_period=2)
    q = dict(p)
    q["blocks.1.dwa.weight"] = torch.tensor([[0.3, -0.6, 0.9]])
    q["blocks.3.dwa.weight"] = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0]])
    hd = []
    out = fwd(dwa, q, hidden=hd)
    assert torch.allclose(out, bnorm(plain, p, "ln_f", hd[1].reshape(10, 16)), rtol=0,
                          atol=1e-12)
    assert torch.equal(hd[1], hp[1]) and not torch.allclose(hd[2], hp[2])
    # the package's forward (dwa_average_ref with the period) against the twin, drawn weights
    for L, k, period, pr in ((4, 1, 2, "PRE"), (4, 2, 2, "PRE"), (4, 1, 3, "POST"),
                             (5, 2, 3, "PERILN"), (4, 3, 4, "SANDWICH"), (3, 1, 3, "PRE")):
        dwa = dict(make_cfg(pr, L, 16, 4, 2), dwa=1, dwa_dilation=k, dwa_period=period)
        q = draw_params(dwa)
        assert sum(".dwa." in n for n in q) == L // period, (L, period, sorted(q))
        assert torch.allclose(fwd(dwa, q), direct_forward(dwa, q, E), rtol=0, atol=1e-12), \
            (L, k, period)
    # the trace: the plain stack's names in the plain stack's order; layer 0's grad_x_in is
    # x_0's whole gradient (without an embedding norm the input's)
    names = [[n for n, _ in traced_backward(
        c, dict(p, **{k_: v for k_, v in draw_params(c).items() if ".dwa." in k_}), E)[0]]
        for c in (plain, dict(plain, dwa=1, dwa_period=3))]
    assert names[0] == names[1] and "blocks.0.grad_x_in" in names[0], names
    grad_x_in_is_x0(dict(make_cfg("PRE", 4, 16, 4, 2), dwa=1, dwa_period=2), E)
    # refusals as nb_stack_init's, naming the field
    base = twin_config(make_cfg("PRE", 3, 16, 4, 2), "pre")
    assert twin.resolve(base.with_fields(residual=dict(dwa=1, dwa_period=3))).residual \
        .dwa_period == 3
    assert twin.resolve(base).residual.dwa_period == 0  # 0 stays 0 without dwa
    for bad in (dict(dwa=1, dwa_period=4), dict(dwa=1, dwa_period=-1), dict(dwa_period=2),
                dict(dwa_period=-1)):
        try:
            twin.resolve(base.with_fields(residual=bad))
            raise AssertionError("the twin accepts %s" % bad)
        except ValueError as e:
            assert all(w in str(e) for w in ("residual.dwa_period", "n_layers",
                                             "needs residual.dwa")), (bad, e)
    stack = twin.Stack(base.with_fields(residual=dict(dwa=1, dwa_period=3)))
    export_refused(stack, "dwa", "a stack with DenseFormer's period is exported")
    metadata_reads(3, DWA_FIELDS,
                   (({}, (0, 0, 0)), (dict(dwa="on"), (1, 1, 1)),
                    (dict(dwa="on", dwa_period="3"), (1, 1, 3)),
                    (dict(dwa="on", dwa_dilation="2", dwa_period="2"), (1, 2, 2))),
                   ((dict(dwa_period="2"), "needs residual.dwa"),
                    (dict(dwa="on", dwa_period="4"), "residual.dwa_period"),
                    (dict(dwa="on", dwa_period="-1"), "residual.dwa_period")))


def attn_res_self_checks(E, fwd):
    """Attention Residuals in the twin: its tensors as the library's table (the readers last in
    the layer, attn_res.proj, attn_res.norm (l >= 1) then mlp_res.*; final_res.* before ln_f)
    and init (queries 0, gains 1), with which the stack is the plain Pre-Norm stack up to eps
    for every block size S (each h_j the plain residual state over its source count, which the
    hidden states show: x_0, h_2l = x_l / (2 + (2l-1)//S), h_2L = x_L / (2 + (2L-1)//S)); the
    twin agrees with the paper's block sums read token by token (direct_attn_res), output and
    depth weights, with drawn parameters on six presets and block sizes 1 to 2L (a block ending
    on an attention and on an FFN sublayer, S = 2L); the trace has the library's names in its
    order, x_out the branch f_j, attn_res_p p_j = f_j (+ p_{j-1} inside a block), attn_res_h
    the hidden h_j, the layer's x p_2l+1, grad_x_in the whole gradient of p_2l-1 (Pre-Norm:
    the previous FFN's grad_out; layer 0: x_0's, the input's); the twin refuses what
    nb_stack_init refuses (attn_res other than 0 and 1, a block size outside [0, 2L] or without
    attn_res, SiameseNorm, hyper-connections, DenseFormer, and placements with a post norm, a
    residual from the norm, a residual norm, interp or a residual scale; norm.gain_offset with
    no block or site gain: the keys' gains are never offset), naming them, and a Hugging Face
    export, naming attn_res; the trainer's metadata (attn_res "on",
    attn_res_block) reads back, absent as 0, another attn_res value, a block size without
    attn_res or beyond 2 n_layers refused."""
    L = 3
    plain = dict(make_cfg("PRE", L, 16, 4, 2), eps=1e-30)  # RMSNorm scale-invariant to 1e-15
    p = draw_params(plain)
    hp = []
    ref = fwd(plain, p, hidden=hp)
    for S in (1, 2, 3, 2 * L):
        ar = dict(plain, attn_res=1, attn_res_block=S)
        stack = twin_stack(ar)
        table = [n for n, _ in stack.library_parameters()]
        init = dict(stack.named_parameters())
        pa = dict(p)
        for l in range(L):
            mine = [n for n in table if n.startswith("blocks.%d." % l)]
            tail = ["blocks.%d.%s.%s.weight" % (l, r, t) for r in
                    ((("attn_res",) if l else ()) + ("mlp_res",)) for t in ("proj", "norm")]
            assert mine[-len(tail):] == tail and len(set(mine) - set(p)) == len(tail), (S, mine)
        assert table[-3:] == ["final_res.proj.weight", "final_res.norm.weight", "ln_f.weight"]
        for n in set(table) - set(p):
            want = (torch.zeros(1, 16) if n.endswith("proj.weight") else torch.ones(16))
            assert torch.equal(init[n], want), (S, n)
            pa[n] = init[n].detach()
        hd = []
        assert torch.allclose(fwd(ar, pa, hidden=hd), ref, rtol=0, atol=1e-12), S
        counts = [1] + [2 + (2 * l - 1) // S for l in range(1, L + 1)]
        assert len(hd) == L + 1 == len(hp), (len(hd), len(hp))
        for l in range(L + 1):
            assert torch.allclose(hd[l] * counts[l], hp[l], rtol=0, atol=1e-12), (S, l)
    # the paper's block sums, token by token, with drawn parameters: output and weights
    for pr, L_, S, extra in (("PRE", 3, 5, {}), ("SANDWICH", 2, 1, {}), ("NONE", 2, 2, {}),
                             ("REZERO", 3, 3, {}), ("DYT", 3, 6, dict(norm=DYT)),
                             ("LAYERSCALE", 2, 3, {})):
        ar = dict(make_cfg(pr, L_, 16, 4, 2, **extra), attn_res=1, attn_res_block=S)
        q = draw_params(ar)
        q.update((k, 1.5 * v) for k, v in q.items() if is_query(k))  # far from uniform
        W = torch.zeros(2 * L_ + 1, 2 * L_ + 1)
        with torch.no_grad():
            want = direct_attn_res(ar, q, E, W)
        assert torch.allclose(fwd(ar, q), want, rtol=0, atol=1e-12), (pr, S)
        got = attn_res_weights(ar, q, E)  # make_cfg's B = 2, T = 5: fwd's E
        assert torch.allclose(got, W, rtol=0, atol=1e-12), (pr, S, got, W)
        assert (W - 1 / (W > 0).sum(1, keepdim=True) * (W > 0)).abs().max() > 0.1, (pr, S)
    # the trace: the library's names and values
    S = 2
    ar = dict(make_cfg("PRE", L, 16, 4, 2), attn_res=1, attn_res_block=S)
    items, hd, xgrad = traced_backward(ar, draw_params(ar), E)
    names = [n for n, _ in items]
    t = dict(items)
    fwd_names = [n for n in names if "attn_res" in n or n.endswith((".x", ".x_out"))]
    want = []
    for l in range(L):
        for sub in ("attn", "ffn"):
            want += ([] if l == 0 and sub == "attn" else ["blocks.%d.%s.attn_res_h" % (l, sub)])
            want += ["blocks.%d.%s.x_out" % (l, sub), "blocks.%d.%s.attn_res_p" % (l, sub)]
        want.append("blocks.%d.x" % l)
    assert fwd_names == want, fwd_names
    for l in range(L):  # attn_res_h before the sublayer's own names, attn_res_p after x_out
        for sub in ("attn", "ffn"):
            own = [n for n in names[:names.index("out")]
                   if n.startswith("blocks.%d.%s." % (l, sub))]
            assert own[-1].endswith(".attn_res_p"), names
            assert own[0].endswith(".attn_res_h" if l or sub == "ffn" else ".h"), names
    close = dict(rtol=1e-6, atol=1e-6)  # the trace's float32 copies
    prev = None
    for j in range(2 * L):
        pre = "blocks.%d.%s." % (j // 2, ("attn", "ffn")[j % 2])
        f, pj = t[pre + "x_out"].double(), t[pre + "attn_res_p"].double()
        assert torch.allclose(pj, f if j % S == 0 else prev + f, **close), j
        if j % 2 == 0 and j:
            assert torch.allclose(t[pre + "attn_res_h"].double(),
                                  hd[j // 2].reshape(10, 16).float().double(), **close), j
        prev = pj
        if j % 2:
            assert torch.equal(t["blocks.%d.x" % (j // 2)], t[pre + "attn_res_p"]), j
    assert names[-1] == "grad_in" and "blocks.0.grad_x_in" in names
    assert torch.allclose(t["blocks.0.grad_x_in"].double(),
                          xgrad.reshape(10, 16).float().double(), **close)
    for l in range(1, L):  # p_2l-1 = (p_2l-2 +) f_2l-1: f's gradient is p's, all of it
        assert torch.allclose(t["blocks.%d.grad_x_in" % l], t["blocks.%d.ffn.grad_out" % (l - 1)],
                              rtol=1e-6, atol=1e-6), l
    # refusals as nb_stack_init's, naming the fields
    base = twin_config(make_cfg("PRE", 3, 16, 4, 2), "pre")
    r = twin.resolve(base.with_fields(residual=dict(attn_res=1))).residual
    assert (r.attn_res, r.attn_res_block) == (1, 1), r
    r = twin.resolve(base.with_fields(residual=dict(attn_res=1, attn_res_block=6))).residual
    assert (r.attn_res, r.attn_res_block) == (1, 6), r
    for preset in ("sandwich", "olmo2", "dyt", "periln", "rezero", "layerscale", "none", "lns",
                   "sites_pre", "pre_sites_pre"):
        twin.resolve(base.with_fields(preset=preset, residual=dict(attn_res=1)))
    on = dict(attn_res=1)
    pre = twin.resolve(base).layers
    custom = []
    for field, value, what in (("post_norm", True, "post norm"),
                               ("residual_from_norm", True, "residual from the norm"),
                               ("residual_norm", True, "residual norm"),
                               ("branch_scale", "interp", "interp branch scale"),
                               ("residual_scale", 2.0, "residual_scale other than 1")):
        layers = [replace(ld, attn=replace(ld.attn), ffn=replace(ld.ffn)) for ld in pre]
        setattr(layers[1].ffn, field, value)
        custom.append((dict(preset="default", layers=layers, residual=on),
                       ("layer 1 FFN", "residual.attn_res", what)))
    bads = [(dict(residual=dict(attn_res=2)), ("residual.attn_res",)),
            (dict(residual=dict(attn_res=-1)), ("residual.attn_res",)),
            (dict(residual=dict(attn_res=1, attn_res_block=7)),
             ("residual.attn_res_block", "2 n_layers")),
            (dict(residual=dict(attn_res=1, attn_res_block=-1)), ("residual.attn_res_block",)),
            (dict(residual=dict(attn_res_block=2)),
             ("residual.attn_res_block", "needs residual.attn_res")),
            (dict(preset="siamese", residual=on), ("residual.attn_res", "SiameseNorm")),
            (dict(preset="siamese_post_pre", residual=on), ("residual.attn_res", "SiameseNorm")),
            (dict(preset="mhc", residual=on), ("residual.attn_res", "hyper-connections")),
            (dict(hyper=dict(kind="mhc_lite"), residual=on),
             ("residual.attn_res", "hyper-connections")),
            (dict(residual=dict(attn_res=1, dwa=1)), ("residual.attn_res", "residual.dwa")),
            (dict(preset="post", residual=on), ("layer 0 attention", "post norm")),
            (dict(preset="deepnorm", residual=on), ("residual.attn_res", "post norm")),
            (dict(preset="hybrid", residual=on), ("layer 0 FFN", "residual from the norm")),
            (dict(preset="ngpt", n_kv_heads=4, residual=on), ("residual.attn_res", "post norm"))]
    for bad, words in bads + custom:
        try:
            twin.resolve(base.with_fields(**bad))
            raise AssertionError("the twin accepts %s" % bad)
        except ValueError as e:
            assert all(w in str(e) for w in words), (bad, e)
    try:  # the keys' gains are not norm gains: never offset (nb_stack_init refuses it too)
        twin.Stack(base.with_fields(norm=dict(gain=-1, gain_offset=1), residual=on))
        raise AssertionError("the twin offsets the gains of Attention Residuals' keys")
    except ValueError as e:
        assert "norm.gain_offset" in str(e), e
    stack = twin.Stack(base.with_fields(residual=on))
    for f in (lambda: twin.hf_family(stack.config), lambda: twin.to_hf(stack, "hf-llama")):
        try:
            f()
            raise AssertionError("a stack with Attention Residuals is exported")
        except ValueError as e:
            assert "attn_res" in str(e), e
    metadata_reads(3, ("attn_res", "attn_res_block"),
                   (({}, (0, 0)), (dict(attn_res="on"), (1, 1)),
                    (dict(attn_res="on", attn_res_block="4"), (1, 4))),
                   ((dict(attn_res="off"), "attn_res"),
                    (dict(attn_res_block="2"), "needs residual.attn_res"),
                    (dict(attn_res="on", attn_res_block="7"), "residual.attn_res_block")))


def unet_self_checks(E, fwd):
    """modded-nanogpt's U-Net skips and x_0 re-injection in the twin: its tensors as the
    library's table (blocks.<l>.skip_weight (1) for l >= L/2, then blocks.<l>.lambdas (2), last
    in the layer, after the value residual's lambda) and init (1; [1, 0]); at the init the
    re-injection alone is the plain stack exactly (output and hidden states; the embedding norm
    and the learnable value residual on), the skips are not; with drawn weights the twin is a
    stack composed by hand from plain one-layer stacks (layer l on lambda_0 (x_l +
    w h_{L-1-l}) + lambda_1 x_0) and agrees with the code written out by index
    (direct_forward: nbfixture.unet_input_ref) on ten presets and depths, each option alone and
    both; the trace has the plain stack's names with blocks.<l>.x_mixed (the mixed input)
    before each mixed layer's own, grad_x_in of layer 0 x_0's whole gradient and, Pre-Norm's
    FFN output being its layer's output h_j, ffn.grad_out of layer j = grad_x_in of layer
    j + 1, plus w grad_x_in of layer L-1-j for an encoder layer (j < L/2: the skip's share);
    the twin refuses what nb_stack_init refuses (values other than 0 and 1, the skips with an
    odd n_layers, SiameseNorm, hyper-connections, DenseFormer, Attention Residuals), naming
    them, and a Hugging Face export, naming unet_skips (reinject_x0 alone: reinject_x0); the
    trainer's metadata (unet_skips "on", reinject_x0 "on") reads back, absent as 0, another
    value refused."""
    # the table and the init
    for pr, L, skips, re_, extra in (("PRE", 4, 1, 0, {}), ("PERILN", 3, 0, 1,
                                                           dict(value_residual=2)),
                                     ("SANDWICH", 2, 1, 1, dict(value_residual=2))):
        cfg = dict(make_cfg(pr, L, 16, 4, 2), unet_skips=skips, reinject_x0=re_, **extra)
        stack = twin_stack(cfg)
        table = [n for n, _ in stack.library_parameters()]
        init = dict(stack.named_parameters())
        for l in range(L):
            mine = [n for n in table if n.startswith("blocks.%d." % l)]
            tail = ((["blocks.%d.skip_weight" % l] if skips and l >= L // 2 else []) +
                    (["blocks.%d.lambdas" % l] if re_ else []))
            before = mine[:len(mine) - len(tail)]
            assert mine[len(before):] == tail and not set(tail) & set(before), (pr, mine)
            if extra and l > 0:  # after the value residual's lambda
                assert before[-1] == "blocks.%d.value_residual.lambda" % l, (pr, mine)
            for n in tail:
                want = (torch.ones(1) if n.endswith("skip_weight") else torch.tensor([1.0, 0.0]))
                assert torch.equal(init[n].detach(), want), (pr, n)
        assert table[-1] == "ln_f.weight", table
    # at the init: the re-injection alone is the plain stack exactly, the skips are not
    plain = dict(make_cfg("PERILN", 4, 16, 4, 2), value_residual=2)
    p = draw_params(plain)
    hp = []
    ref = fwd(plain, p, hidden=hp)
    for skips, re_ in ((0, 1), (1, 0), (1, 1)):
        cfg = dict(plain, unet_skips=skips, reinject_x0=re_)
        q = dict(p)
        q.update((n, t.detach()) for n, t in twin_stack(cfg).named_parameters() if n not in p)
        assert len(q) - len(p) == 2 * skips + 4 * re_, sorted(q)
        hd = []
        out = fwd(cfg, q, hidden=hd)
        if not skips:
            assert torch.equal(out, ref) and len(hd) == 5, re_
            assert all(torch.equal(a, b) for a, b in zip(hd, hp)), re_
        else:
            assert not torch.allclose(out, ref, atol=1e-2), (skips, re_)
    # with drawn weights: a stack composed from plain one-layer stacks (the twin's layers)
    for pr, L, skips, re_ in (("PRE", 4, 1, 1), ("POST", 6, 1, 0), ("PRE", 3, 0, 1)):
        cfg = dict(make_cfg(pr, L, 16, 4, 2), unet_skips=skips, reinject_x0=re_)
        q = draw_params(cfg)
        one = make_cfg(pr, 1, 16, 4, 2)
        xs = [E]  # x_0: no embedding norm in these presets
        for l in range(L):
            u = xs[l]
            if skips and l >= L // 2:  # h_{L-1-l} = x_{L-l}
                u = u + q["blocks.%d.skip_weight" % l][0] * xs[L - l]
            if re_:
                lam = q["blocks.%d.lambdas" % l]
                u = lam[0] * u + lam[1] * xs[0]
            ql = {"blocks.0." + k.split(".", 2)[2]: v for k, v in q.items()
                  if k.startswith("blocks.%d." % l)}
            xs.append(fwd(one, ql, x=u, final=False))
        want = bnorm(cfg, q, "ln_f", xs[L])
        got = fwd(cfg, q)
        assert torch.allclose(got, want, rtol=0, atol=1e-12), (pr, L, skips, re_)
        assert not torch.allclose(got, fwd(dict(make_cfg(pr, L, 16, 4, 2)), q), atol=1e-2)
    # the code written out by index against the twin: placements, depths, either or both
    for pr, L, skips, re_, extra in (
            ("PRE", 4, 1, 1, {}), ("PRE", 6, 1, 0, {}), ("POST", 4, 1, 1, {}),
            ("SANDWICH", 2, 1, 1, {}), ("PERILN", 3, 0, 1, dict(value_residual=2)),
            ("HYBRID", 4, 1, 1, {}), ("MIXLN", 4, 1, 1, dict(mixln_alpha=0.5)),
            ("DEEPNORM", 2, 0, 1, {}), ("LAYERSCALE", 4, 1, 0, {}),
            ("NGPT", 2, 1, 1, dict(f=64, norm=L2))):
        H = 4
        base = make_cfg(pr, L, 16, H, H if pr == "NGPT" else 2, **extra) if pr != "PERILN" \
            else dict(make_cfg(pr, L, 16, H, 2), **extra)
        cfg = dict(base, unet_skips=skips, reinject_x0=re_)
        q = draw_params(cfg)
        with torch.no_grad():
            want = direct_forward(cfg, q, E)
        assert torch.allclose(fwd(cfg, q), want, rtol=0, atol=1e-12), (pr, L, skips, re_)
    # the trace: the library's names and values
    L = 4
    plain = make_cfg("PRE", L, 16, 4, 2)
    for skips, re_ in ((1, 1), (1, 0), (0, 1)):
        cfg = dict(plain, unet_skips=skips, reinject_x0=re_)
        q = draw_params(cfg)
        (mixed_items, hd, xgrad), (plain_items, _, _) = [
            traced_backward(c, qq, E) for c, qq in
            ((cfg, q), (plain, {k: v for k, v in q.items()
                                if not k.endswith((".skip_weight", ".lambdas"))}))]
        names = [n for n, _ in mixed_items]
        mixed = [l for l in range(L) if re_ or l >= L // 2]
        assert [n for n in names if not n.endswith(".x_mixed")] == \
            [n for n, _ in plain_items], names
        assert [n for n in names if n.endswith(".x_mixed")] == \
            ["blocks.%d.x_mixed" % l for l in mixed], names
        t = dict(mixed_items)
        close = dict(rtol=1e-6, atol=1e-6)  # the trace's float32 copies
        for l in mixed:  # before the layer's own names, after the previous layer's x
            i = names.index("blocks.%d.x_mixed" % l)
            assert names[i - 1] == ("x0" if l == 0 else "blocks.%d.x" % (l - 1)), names
            assert names[i + 1] == "blocks.%d.attn.h" % l, names
            u = hd[l].reshape(10, 16)
            if skips and l >= L // 2:
                u = u + q["blocks.%d.skip_weight" % l][0] * hd[L - l].reshape(10, 16)
            if re_:
                lam = q["blocks.%d.lambdas" % l]
                u = lam[0] * u + lam[1] * hd[0].reshape(10, 16)
            assert torch.allclose(t["blocks.%d.x_mixed" % l].double(), u.float().double(),
                                  **close), (skips, re_, l)
        assert torch.allclose(t["blocks.0.grad_x_in"].double(),
                              xgrad.reshape(10, 16).float().double(), **close), (skips, re_)
        for j in range(L - 1):  # h_j = x_{j+1}: its gradient the FFN output's
            want = t["blocks.%d.grad_x_in" % (j + 1)].double()
            if skips and j < L // 2:
                want = want + (q["blocks.%d.skip_weight" % (L - 1 - j)][0] *
                               t["blocks.%d.grad_x_in" % (L - 1 - j)].double())
            assert torch.allclose(t["blocks.%d.ffn.grad_out" % j].double(), want, **close), \
                (skips, re_, j)
    # refusals as nb_stack_init's, naming the fields
    base = twin_config(make_cfg("PRE", 4, 16, 4, 2), "pre")
    for preset in ("post", "sandwich", "periln", "hybrid", "hybrid_star", "mixln", "deepnorm",
                   "olmo2", "dyt", "lns", "none", "rezero", "layerscale", "ngpt"):
        fields = dict(n_kv_heads=4) if preset == "ngpt" else {}
        r = twin.resolve(base.with_fields(preset=preset, residual=dict(
            unet_skips=1, reinject_x0=1), **fields)).residual
        assert (r.unet_skips, r.reinject_x0) == (1, 1), preset
    both, skips_on, re_on = (dict(unet_skips=1, reinject_x0=1), dict(unet_skips=1),
                             dict(reinject_x0=1))
    bads = [(dict(residual=dict(unet_skips=2)), ("residual.unet_skips", "0 or 1")),
            (dict(residual=dict(unet_skips=-1)), ("residual.unet_skips", "0 or 1")),
            (dict(residual=dict(reinject_x0=2)), ("residual.reinject_x0", "0 or 1")),
            (dict(n_layers=3, residual=skips_on), ("residual.unet_skips", "n_layers (3)",
                                                   "even")),
            (dict(n_layers=5, preset="siamese", residual=both), ("n_layers (5)", "even")),
            (dict(preset="siamese", residual=skips_on), ("residual.unet_skips", "SiameseNorm")),
            (dict(preset="siamese_post_pre", residual=re_on),
             ("residual.reinject_x0", "SiameseNorm")),
            (dict(preset="mhc", residual=both), ("residual.unet_skips", "hyper-connections")),
            (dict(hyper=dict(kind="hc"), residual=re_on),
             ("residual.reinject_x0", "hyper-connections")),
            (dict(residual=dict(dwa=1, reinject_x0=1)), ("residual.reinject_x0",
                                                         "residual.dwa")),
            (dict(residual=dict(attn_res=1, unet_skips=1)),
             ("residual.unet_skips", "residual.attn_res"))]
    for bad, words in bads:
        try:
            twin.resolve(base.with_fields(**bad))
            raise AssertionError("the twin accepts %s" % bad)
        except ValueError as e:
            assert all(w in str(e) for w in words), (bad, e)
    for fields, word in ((both, "unet_skips"), (skips_on, "unet_skips"),
                         (re_on, "reinject_x0")):
        stack = twin.Stack(base.with_fields(residual=fields))
        for f in (lambda: twin.hf_family(stack.config), lambda: twin.to_hf(stack, "hf-llama")):
            try:
                f()
                raise AssertionError("a stack with %s is exported" % fields)
            except ValueError as e:
                assert word + ": no Hugging Face decoder" in str(e), (fields, e)
    metadata_reads(4, ("unet_skips", "reinject_x0"),
                   (({}, (0, 0)), (dict(unet_skips="on"), (1, 0)), (dict(reinject_x0="on"), (0, 1)),
                    (dict(unet_skips="on", reinject_x0="on"), (1, 1))),
                   ((dict(unet_skips="off"), "unet_skips"), (dict(reinject_x0="1"), "reinject_x0"),
                    (dict(unet_skips="on", n_layers="3"), "must be even")))


def value_embeds_self_checks(E):
    """modded-nanogpt's value embeddings in the twin: its tensors as the library's table
    (blocks.<l>.value_embed.lambda, 2 values, in every layer, where the learnable value
    residual's lambda sits: after the branch scales, before the hyper-connections, DenseFormer's
    weights, Attention Residuals' readers and the U-Net's scalars) and init ([0.5, 0.5]); with
    lambdas (1, 0) the stack is the plain one exactly (output, hidden states, gradients; the
    rows' gradient 0), with (c_l, 0) the plain one with layer l's V rows of att_proj times c_l;
    with drawn lambdas and rows the twin agrees with the code's list of tables read by index and
    its mix term by term (direct: nbfixture.value_embed_layers_ref, value_embed_mix_ref, the
    rows placed token by token) on twelve presets and depths (L = 2N, the code's L - 2N layers
    without a table, V site norms per head, OLMo-2's full-width sites, sinks, SiameseNorm, mHC,
    Attention Residuals, the U-Net, the embedding norm, DyT), output, input, parameter and rows'
    gradients; the trace has the plain stack's names with blocks.<l>.attn.qkv_vres (every layer)
    after qkv_normed or qkv, its V columns lambda_0 V + lambda_1 E_t; the twin refuses what
    nb_stack_init refuses (N < 0, 2N > n_layers, with the value residual), a forward without the
    rows or with rows the stack has no tables for, and a Hugging Face export, naming
    value_embeds; the trainer's metadata (value_embeds "N") reads back, absent as 0; the trainer's
    model gathers its tables transformer.value_embeds.<t>.weight at each token, its checkpoint
    order (after the embedding, before the stack) loads and compare.py's check_order holds it."""
    B, T, d = 2, 5, 16
    x = E.reshape(B, T, d)

    def rows(cfg):
        return torch.randn(cfg["value_embeds"], B * T, cfg["Hkv"] * (d // cfg["H"]))

    def layer_names(table, l):
        return [n for n in table if n.startswith("blocks.%d." % l)]

    # the table and the init
    after = (".hc_", ".dwa.", ".attn_res.", ".mlp_res.", ".skip_weight", ".lambdas")
    for pr, L, n, extra in (("PRE", 5, 2, {}), ("LAYERSCALE", 4, 2, dict(dwa=1)),
                            ("MHC", 2, 1, {}), ("SANDWICH", 4, 2, dict(unet_skips=1,
                                                                      reinject_x0=1)),
                            ("PRE", 3, 1, dict(attn_res=1)), ("SIAMESE", 2, 1, {}),
                            ("REZERO", 2, 1, {})):
        plain = dict(make_cfg(pr, L, d, 4, 2), **extra)
        cfg = dict(plain, value_embeds=n)
        stack = twin_stack(cfg)
        table = [k for k, _ in stack.library_parameters()]
        ves = ["blocks.%d.value_embed.lambda" % l for l in range(L)]
        assert [k for k in table if k.endswith(".value_embed.lambda")] == ves, (pr, table)
        assert [k for k in table if k not in ves] == \
            [k for k, _ in twin_stack(plain).library_parameters()], pr
        vres = [k.replace(".value_residual.", ".value_embed.") for k, _ in
                twin_stack(dict(plain, value_residual=2)).library_parameters()]
        for l in range(L):
            mine = layer_names(table, l)
            if l > 0:  # the learnable value residual's place (layer 0 has none there)
                assert mine == layer_names(vres, l), (pr, l, mine)
            i = mine.index(ves[l])
            assert all(any(a in k for a in after) for k in mine[i + 1:]), (pr, mine)
            assert not any(any(a in k for a in after) for k in mine[:i]), (pr, mine)
        init = dict(stack.named_parameters())
        for k in ves:
            assert torch.equal(init[k].detach(), torch.tensor([0.5, 0.5])), (pr, k)
    # lambdas (1, 0): the plain stack exactly, the rows' gradient 0; (c_l, 0): V scaled
    dout = torch.randn(B, T, d)
    for pr, L, n, Hkv, extra in (("PRE", 5, 2, 2, {}), ("HYBRID", 2, 1, 4, {}),
                                 ("POST", 4, 2, 1, dict(attn_sink=SINK_LEARNED))):
        plain = dict(make_cfg(pr, L, d, 4, Hkv), **extra)
        cfg = dict(plain, value_embeds=n)
        p = draw_params(plain)
        q = dict(p, **{"blocks.%d.value_embed.lambda" % l: torch.tensor([1.0, 0.0])
                       for l in range(L)})
        ve = rows(cfg)
        res = []
        for c, pp, v in ((plain, p, None), (cfg, q, ve)):
            stack = twin_stack(c)
            load(stack, pp)
            xx = x.clone().requires_grad_(True)
            vv = None if v is None else v.clone().requires_grad_(True)
            hd = []
            out = stack(xx, hidden=hd, value_embeds=vv)
            (out * dout).sum().backward()
            res.append((out, hd, xx.grad, dict(stack.named_parameters()), vv))
        (o0, h0, g0, p0, _), (o1, h1, g1, p1, vv) = res
        assert torch.equal(o0, o1) and torch.equal(g0, g1), pr
        assert all(torch.equal(a, b) for a, b in zip(h0, h1)) and len(h0) == len(h1) == L + 1
        assert all(torch.equal(p0[k].grad, p1[k].grad) for k in p0), pr
        assert torch.equal(vv.grad, torch.zeros_like(vv)), pr
        if pr == "PRE":  # no V norm: lambda_0 V = x (lambda_0 W_v)^T, V's rows of att_proj
            c_l = [0.6 + 0.1 * l for l in range(L)]
            q = dict(p, **{"blocks.%d.value_embed.lambda" % l: torch.tensor([c_l[l], 0.0])
                           for l in range(L)})
            scaled = dict(p)
            for l in range(L):
                W = p["blocks.%d.att_proj.weight" % l].clone()
                W[d + Hkv * 4:] *= c_l[l]  # [Q | K | V] rows, V last
                scaled["blocks.%d.att_proj.weight" % l] = W
            s1, s2 = twin_stack(cfg), twin_stack(plain)
            load(s1, q)
            load(s2, scaled)
            with torch.no_grad():
                assert torch.allclose(s1(x, value_embeds=ve), s2(x), rtol=0, atol=1e-12)
    # the code written out (its list by index, the mix term by term) against the twin
    for pr, L, n, Hkv, extra in (
            ("PRE", 5, 2, 2, {}), ("PRE", 4, 2, 1, {}), ("PRE", 8, 3, 2, {}),
            ("HYBRID", 2, 1, 4, {}), ("POST", 4, 2, 1, dict(attn_sink=SINK_LEARNED)),
            ("OLMO2", 3, 1, 2, {}), ("SIAMESE", 2, 1, 2, {}), ("MHC", 2, 1, 2, {}),
            ("PRE", 3, 1, 2, dict(attn_res=1, attn_res_block=2)),
            ("SANDWICH", 4, 2, 2, dict(unet_skips=1, reinject_x0=1)),
            ("PERILN", 3, 1, 1, {}), ("DYT", 2, 1, 2, dict(norm=DYT))):
        cfg = dict(make_cfg(pr, L, d, 4, Hkv, **{k: v for k, v in extra.items()
                                                 if k == "norm"}),
                   value_embeds=n, **{k: v for k, v in extra.items() if k != "norm"})
        q = draw_params(cfg)
        ve = rows(cfg)
        got = run(cfg, q, E, dout.reshape(B * T, d), ve=ve)
        pd = {k: v.detach().clone().requires_grad_(True) for k, v in q.items()}
        Ed = E.clone().requires_grad_(True)
        ved = ve.clone().requires_grad_(True)
        want = direct(cfg, pd, Ed, ved)
        (want * dout.reshape(B * T, d)).sum().backward()
        assert torch.allclose(got[0], want, rtol=0, atol=1e-12), (pr, L, n)
        for k, a, b in [("din", got[1], Ed.grad), ("dve", got[5], ved.grad)] + \
                [(k, got[2][k], pd[k].grad) for k in q]:
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-10), (pr, L, n, k)
        assert got[5].abs().amax(dim=(1, 2)).min() > 1e-3, (pr, L, n)  # every table's rows
        # a layer without a table: its lambda_1 gets no gradient
        for l in range(L):
            g = got[2]["blocks.%d.value_embed.lambda" % l]
            assert (g[1] == 0) == (n <= l < L - n), (pr, L, n, l, g)
    # the trace: the library's names and values
    for pr, Hkv, after_name in (("HYBRID", 2, "qkv_normed"), ("PRE", 1, "qkv")):
        L, n = 3, 1
        plain = make_cfg(pr, L, d, 4, Hkv)
        cfg = dict(plain, value_embeds=n)
        q = draw_params(cfg)
        ve = rows(cfg)
        items = []
        for c, qq, v in ((cfg, q, ve), (plain, {k: t for k, t in q.items()
                                                if not k.endswith(".value_embed.lambda")},
                                        None)):
            stack = twin_stack(c)
            load(stack, qq)
            tr = twin.Trace()
            stack(x, trace=tr, value_embeds=v).sum().backward()
            items.append(tr.items())
        names, t = [k for k, _ in items[0]], dict(items[0])
        want = []
        for k, _ in items[1]:
            want.append(k)
            if k.endswith(".attn." + after_name):
                want.append(k[:-len(after_name)] + "qkv_vres")
        assert names == want, names
        W = Hkv * 4
        for l in range(L):
            pre = t["blocks.%d.attn.%s" % (l, after_name)].double()
            mix = t["blocks.%d.attn.qkv_vres" % l].double()
            lam = q["blocks.%d.value_embed.lambda" % l]
            tab = value_embed_layers_ref(list(range(n)), L)[l]
            v = lam[0] * pre[:, d + W:d + 2 * W]
            if tab is not None:
                v = v + lam[1] * ve[tab]
            assert torch.allclose(mix[:, :d + W], pre[:, :d + W], rtol=0, atol=0), (pr, l)
            assert torch.allclose(mix[:, d + W:], v, rtol=1e-6, atol=1e-6), (pr, l)
    # refusals as nb_stack_init's, naming the field; the forward's and the export's
    base = twin_config(make_cfg("PRE", 4, d, 4, 2), "pre")
    for preset, extra in (("post", {}), ("sandwich", {}), ("hybrid", {}), ("mixln", {}),
                          ("siamese", {}), ("siamese_post_pre", {}), ("mhc", {}), ("hc", {}),
                          ("ngpt", dict(n_kv_heads=4)), ("rezero", {}), ("olmo2", {}),
                          ("pre", dict(residual=dict(dwa=1))),
                          ("pre", dict(residual=dict(attn_res=1))),
                          ("pre", dict(residual=dict(unet_skips=1, reinject_x0=1)))):
        for n in (0, 1, 2):
            fields = dict(extra, residual=dict(extra.get("residual", {}), value_embeds=n))
            r = twin.resolve(base.with_fields(preset=preset, **fields)).residual
            assert r.value_embeds == n, (preset, n)
    bads = [(dict(residual=dict(value_embeds=3)), ("residual.value_embeds (3)", "[0, n_layers / 2]",
                                                   "4 layers")),
            (dict(n_layers=1, residual=dict(value_embeds=1)), ("residual.value_embeds (1)",)),
            (dict(residual=dict(value_embeds=-1)), ("residual.value_embeds (-1)",)),
            (dict(residual=dict(value_embeds=1, value_residual=1)),
             ("residual.value_embeds", "residual.value_residual")),
            (dict(residual=dict(value_embeds=2, value_residual=2)),
             ("residual.value_embeds", "residual.value_residual"))]
    for bad, words in bads:
        try:
            twin.resolve(base.with_fields(**bad))
            raise AssertionError("the twin accepts %s" % bad)
        except ValueError as e:
            assert all(w in str(e) for w in words), (bad, e)
    stack = twin.Stack(base.with_fields(residual=dict(value_embeds=2)))
    plain_stack = twin.Stack(base)
    for f, word in ((lambda: stack(x), "nb_stack_set_value_embeds"),
                    (lambda: stack(x, value_embeds=torch.zeros(1, B, T, 8)), "1 tables' rows"),
                    (lambda: plain_stack(x, value_embeds=torch.zeros(2, B, T, 8)),
                     "without residual.value_embeds")):
        try:
            f()
            raise AssertionError("the forward accepts it (%s)" % word)
        except ValueError as e:
            assert word in str(e), e
    stack(x, value_embeds=torch.zeros(2, B * T, 8))  # (N, B*T, W) and lists are rows too
    stack(x, value_embeds=[torch.zeros(B, T, 8), torch.zeros(B * T, 8)])
    for f in (lambda: twin.hf_family(stack.config), lambda: twin.to_hf(stack, "hf-llama")):
        try:
            f()
            raise AssertionError("a stack with value embeddings is exported")
        except ValueError as e:
            assert "value_embeds: no Hugging Face decoder" in str(e), e
    metadata_reads(5, ("value_embeds",), (({}, (0,)), (dict(value_embeds="1"), (1,)),
                                          (dict(value_embeds="2"), (2,))),
                   ((dict(value_embeds="3"), "residual.value_embeds (3)"),
                    (dict(value_embeds="on"), "value_embeds"),
                    (dict(value_embeds="1", value_residual="learn"), "residual.value_residual")))
    # the trainer's model: its tables gathered at each token, its checkpoint's order
    meta = dict(vocab_size="256", n_layers="4", d_model="16", n_heads="4", n_kv_heads="2",
                d_ff="24", rope="1", preset="pre", ffn="swiglu", norm="rms", value_embeds="2",
                embed_scale="1")
    with torch.random.fork_rng(devices=[]):
        model = twin.NormBlocksLM(twin.config_from_metadata(meta), embed_scale="learn").double()
        with torch.no_grad():
            for k, v in model.named_parameters():
                if k.endswith("value_embed.lambda"):
                    v.copy_(torch.tensor([0.7, 0.3]) + 0.2 * torch.rand(2))
        tok = torch.randint(0, 256, (2, 6))
    tables = [model.transformer.value_embeds[t].weight for t in range(2)]
    assert [tuple(w.shape) for w in tables] == [(256, 8)] * 2
    loss, count = model.loss(tok)
    inp = tok[:, :-1]
    by_hand = [torch.stack([tables[t][int(inp.reshape(-1)[r])] for r in range(inp.numel())])
               for t in range(2)]  # row r = b T + i: table t at the token of (b, i)
    h = model.transformer(model.transformer.embed(inp), value_embeds=by_hand)
    z = (h @ model.lm_head.weight.t()).reshape(-1, 256)
    want = F.cross_entropy(z, tok[:, 1:].reshape(-1))
    assert count == 10 and torch.allclose(loss, want, rtol=0, atol=1e-12), (loss, want)
    loss.backward()
    assert all(w.grad is not None and w.grad[inp.reshape(-1)].abs().max() > 0 for w in tables)
    used = torch.zeros(256, dtype=torch.bool)
    used[inp.reshape(-1)] = True
    assert all(torch.equal(w.grad[~used], torch.zeros_like(w.grad[~used])) for w in tables)
    import compare  # examples/pytorch, on the path through nbfixture
    import contextlib
    import io
    import tempfile
    stack_names = [k for k, _ in model.transformer.library_parameters()
                   if not k.startswith(("wte.", "embed_scale", "value_embeds."))]
    params = dict(model.named_parameters())
    order = (["transformer.wte.weight", "transformer.embed_scale",
              "transformer.value_embeds.0.weight", "transformer.value_embeds.1.weight"] +
             ["transformer." + k for k in stack_names] + ["lm_head.weight"])
    assert sorted(order) == sorted(params), sorted(set(order) ^ set(params))
    with tempfile.TemporaryDirectory() as tmp:
        for items, ok in ((order, True), (order[:2] + order[4:-1] + order[2:4] + order[-1:],
                                          False)):
            path = os.path.join(tmp, "ve.safetensors")
            twin.write_safetensors(path, [(k, params[k]) for k in items], meta)
            back, _ = twin.load_checkpoint(path)
            with contextlib.redirect_stdout(io.StringIO()):
                assert compare.check_order(path, back) == ok, items
            assert abs(back.double().loss(tok)[0].item() - loss.item()) < 1e-5


def main():
    outdir = output_dir("gen_block_fixtures.py")
    torch.set_default_dtype(torch.float64)
    self_checks()
    w = Writer(MAX_BYTES)
    report = []
    # Shapes, B=2, T=5 (the hyper-connection cases: T=3): the presets' L=1 cases d=16, H=4 (Hkv 4 or 2), f=24 SwiGLU /
    # 64 GELU; every other case d=8, H=2 (d_k 4, Hkv 2 or 1 = MQA, i.e. a GQA group of 2),
    # f=12 / 32, so that the file stays under 1.7 MB (MAX_BYTES).
    big = dict(d=16, H=4)
    small = dict(d=8, H=2)
    cases = []
    presets = [("pre", "PRE", {}), ("post", "POST", {}), ("post_flags", "POST_FLAGS", {}),
               ("sandwich", "SANDWICH", {}), ("olmo2", "OLMO2", {}),
               ("deepnorm", "DEEPNORM", {}), ("deepnorm_mixln", "DEEPNORM_MIXLN", {}),
               ("hybrid", "HYBRID", {}), ("hybrid_star", "HYBRID_STAR", {}),
               ("first_qkv_pre", "FIRST_QKV_PRE", {}), ("embednorm", "EMBEDNORM", {}),
               ("mixln", "MIXLN", {}), ("siamese", "SIAMESE", {}),
               ("siamese_post_pre", "SIAMESE_POST_PRE", {}),
               ("gpt2", "PRE", dict(norm=LAYER, ffn_type=GELU_TANH, rope=0, attn_bias=3))]
    mha_l1 = ("PRE", "HYBRID", "SIAMESE", "POST_FLAGS")  # the other L=1 cases are GQA
    for i, (n, pr, kw) in enumerate(presets):
        kw3 = dict(kw)
        if pr == "MIXLN":
            # L=1: the default alpha 0.25 gives n_post = 0 (a Pre-Norm layer, eps 1e-6);
            # L=3: alpha 0.34 gives n_post = 1
            kw3["mixln_alpha"] = 0.34
        cases.append((n + "_L1", make_cfg(pr, 1, Hkv=(4 if pr in mha_l1 else 2), **big, **kw)))
        cases.append((n + "_L3", make_cfg(pr, 3, Hkv=(1 if i % 2 == 0 else 2), **small, **kw3)))
    # Mix-LN with 2 Post-Norm layers of 3, and with only Post-Norm layers (n_post = L = 1)
    cases.append(("mixln_a067_L3", make_cfg("MIXLN", 3, Hkv=1, mixln_alpha=0.67, **small)))
    cases.append(("mixln_a1_L1", make_cfg("MIXLN", 1, Hkv=2, mixln_alpha=1.0, **small)))
    # and alpha = 0 (mixln_alpha -1): Pre-Norm layers only, the Mix-LN code's eps
    cases.append(("mixln_a0_L2", make_cfg("MIXLN", 2, Hkv=1, mixln_alpha=-1.0, **small)))
    # no normalization at all, the baseline
    cases.append(("none_L2", make_cfg("NONE", 2, Hkv=2, **small)))
    # LayerNorm Scaling (at L=1 it is Pre-Norm): scales 1, 1/sqrt(2), 1/sqrt(3)
    cases.append(("lns_L3", make_cfg("LNS", 3, Hkv=2, **small)))
    # DyT (Pre-Norm, every norm weight * tanh(alpha x) + bias) and Peri-LN (sandwich blocks,
    # normalized embedding, final norm)
    cases.append(("dyt_L2", make_cfg("DYT", 2, Hkv=1, norm=DYT, **small)))
    cases.append(("periln_L2", make_cfg("PERILN", 2, Hkv=2, **small)))
    # learnable branch scales: ReZero (one scalar per layer, no norms) and LayerScale
    cases.append(("rezero_L2", make_cfg("REZERO", 2, Hkv=1, **small)))
    cases.append(("layerscale_L2", make_cfg("LAYERSCALE", 2, Hkv=2, **small)))
    # SiameseNorm paper options
    cases.append(("siamese_pscale_L2", make_cfg("SIAMESE", 2, Hkv=2, paper_scale=1, **small)))
    cases.append(("siamese_pfusion_L2", make_cfg("SIAMESE", 2, Hkv=1, paper_fusion=1, **small)))
    cases.append(("siamese_c1_L2", make_cfg("SIAMESE", 2, Hkv=2, paper_scale=2, **small)))
    cases.append(("siamese_nofuse_L2", dict(make_cfg("SIAMESE", 2, Hkv=1, **small),
                                            siamese_no_fusion_norm=1)))
    cases.append(("siamese_pp_paper_L2", make_cfg("SIAMESE_POST_PRE", 2, Hkv=2, paper_scale=1,
                                                  paper_fusion=1, **small)))
    # ResFormer's value residual (an option of any preset): fixed 0.5/0.5 on Pre-Norm with MQA,
    # learnable lambdas on HybridNorm (V after its site norm) with GQA, and on SiameseNorm
    cases.append(("vres_fixed_pre_L3", dict(make_cfg("PRE", 3, Hkv=1, **small),
                                            value_residual=1)))
    cases.append(("vres_learn_hybrid_L3", dict(make_cfg("HYBRID", 3, Hkv=2, **small),
                                               value_residual=2)))
    cases.append(("vres_learn_siamese_L2", dict(make_cfg("SIAMESE", 2, Hkv=1, **small),
                                                value_residual=2)))
    # HybridNorm Table-4 ablations: all six site sets at L=1, the six patterns at L=3
    # (QKV at L=1 is in hybrid_L1 = QKV-Post and first_qkv_pre_L1 = QKV-Pre)
    abl1 = [("abl_qkvc_pre_L1", "SITES_PRE", QKVC),
            ("abl_pre_qkc_post_L1", "PRE_SITES_POST", SITE_Q | SITE_K | SITE_C),
            ("abl_pre_qk_pre_L1", "PRE_SITES_PRE", SITE_Q | SITE_K),
            ("abl_kv_post_L1", "SITES_POST", SITE_K | SITE_V),
            ("abl_kc_post_L1", "SITES_POST", SITE_K | SITE_C),
            ("abl_none_post_L1", "SITES_POST", SITES_NONE)]
    for i, (n, pr, s) in enumerate(abl1):
        cases.append((n, make_cfg(pr, 1, Hkv=(2 if i % 2 == 0 else 1), sites=s, **small)))
    abl3 = [("abl_qkvc_post_L3", "SITES_POST", QKVC),
            ("abl_kv_pre_L3", "SITES_PRE", SITE_K | SITE_V),
            ("abl_pre_qk_post_L3", "PRE_SITES_POST", SITE_Q | SITE_K),
            ("abl_pre_kc_pre_L3", "PRE_SITES_PRE", SITE_K | SITE_C),
            ("abl_pre_post_L3", "PRE_POST", 0), ("abl_post_pre_L3", "POST_PRE", 0)]
    for i, (n, pr, s) in enumerate(abl3):
        cases.append((n, make_cfg(pr, 3, Hkv=(1 if i % 2 == 0 else 2), sites=s, **small)))
    # hyper-connections (B=2, T=3): mHC (n = 4, the preset's default), static with n = 3; HC
    # dynamic with LayerNorm (its per-stream norm with a bias), static; the identity form; mHC
    # on Peri-LN (output norms, the embedding norm, 5 Sinkhorn iterations); HC on DyT (the
    # per-stream norm a DyT), n = 2; mHC with learnable value residual lambdas and GQA (H = 4,
    # Hkv = 2)
    hyper = dict(T=3, **small)
    cases.append(("mhc_L2", make_cfg("MHC", 2, Hkv=2, **hyper)))
    cases.append(("mhc_static_n3_L2", dict(make_cfg("MHC", 2, Hkv=1, **hyper), hyper_static=1,
                                           hyper_streams=3)))
    cases.append(("hc_layer_L2", make_cfg("HC", 2, Hkv=2, norm=LAYER, **hyper)))
    cases.append(("hc_static_n3_L2", dict(make_cfg("HC", 2, Hkv=1, **hyper), hyper_static=1,
                                          hyper_streams=3)))
    cases.append(("ihc_L2", make_cfg("IHC", 2, Hkv=2, **hyper)))
    cases.append(("mhc_periln_n3_L2", dict(make_cfg("PERILN", 2, Hkv=1, **hyper),
                                           hyper=HYPER_MHC, hyper_streams=3, hyper_sinkhorn=5)))
    cases.append(("hc_dyt_n2_L2", dict(make_cfg("DYT", 2, Hkv=2, norm=DYT, **hyper),
                                       hyper=HYPER_HC, hyper_streams=2)))
    cases.append(("mhc_vres_gqa_L3", dict(make_cfg("PRE", 3, d=8, H=4, Hkv=2, T=3),
                                          hyper=HYPER_MHC, hyper_streams=2, value_residual=2)))
    # CompleteP's residual multiplier m = (L / depth_base)^-depth_alpha on every branch:
    # Pre-Norm with alpha 1 (m = 1/3); sandwich with alpha 0.5 and L_base 2 (m = 1.5^-0.5, after
    # the output norm; L / L_base not an integer); on the branch scales, ReZero's scalar and
    # LayerScale's vectors (m = 1/2, times the scale); mHC's branch B(u) (n = 3, m = 1/2)
    cases.append(("cp_pre_L3", dict(make_cfg("PRE", 3, Hkv=2, **small), depth_alpha=1.0)))
    cases.append(("cp_sandwich_a05_b2_L3", dict(make_cfg("SANDWICH", 3, Hkv=1, **small),
                                                depth_alpha=0.5, depth_base=2)))
    cases.append(("cp_rezero_L2", dict(make_cfg("REZERO", 2, Hkv=2, **small), depth_alpha=1.0)))
    cases.append(("cp_layerscale_L2", dict(make_cfg("LAYERSCALE", 2, Hkv=1, **small),
                                           depth_alpha=1.0)))
    cases.append(("cp_mhc_n3_L2", dict(make_cfg("MHC", 2, Hkv=2, **hyper), hyper_streams=3,
                                       depth_alpha=1.0)))
    # nGPT, checked against NVIDIA/ngpt model.py's Block (nbfixture.ngpt_block_ref, with the
    # standard RoPE for the code's, its issue #10): the preset as its code has it (SwiGLU of 4d,
    # interp_init 0.05, RoPE) at L = 2; without RoPE, with interp_init 0.2 and another FFN width
    # at L = 1; its parts as options of other presets: Pre-Norm with s_qk, a softmax scale of
    # 0.35 (not 1/sqrt(d_k) = 0.5) and s_uv on GPT-2's GELU MLP (f columns, its bias scaled
    # too); Post-Norm with every norm L2 (its post norms, Q, K, V sites per head without gains,
    # the final L2) and MQA
    ng = dict(d=8, H=2, Hkv=2)
    cases.append(("ngpt_L2", make_cfg("NGPT", 2, f=32, norm=L2, T=4, **ng)))
    cases.append(("ngpt_norope_i02_L1", dict(make_cfg("NGPT", 1, f=16, norm=L2, rope=0, **ng),
                                             interp_init=0.2)))
    cases.append(("pre_gelu_qk_suv_L1", dict(make_cfg("PRE", 1, f=16, ffn_type=GELU_TANH, **ng),
                                             qk_scale=1, softmax_scale=0.35, ffn_in_scale=1)))
    cases.append(("post_l2_qkv_L2", make_cfg("POST", 2, Hkv=1, norm=L2, sites=QKV, **small)))
    # EmbedNorm with every norm L2: the embedding's and the final L2 norm on unnormalized
    # states (a Post-Norm stack's final L2 acts on unit rows, where it changes nothing)
    cases.append(("embednorm_l2_L2", make_cfg("EMBEDNORM", 2, Hkv=1, norm=L2, **small)))
    # attention sinks (gpt-oss's learned logit per query head; the off-by-one softmax), checked
    # against torchtitan's form (nbfixture.attention): learned on Pre-Norm with GQA (H = 4,
    # Hkv = 2: one sink per query head), off-by-one on HybridNorm (after its QKV site norms)
    # with MQA, learned on SiameseNorm's two streams
    cases.append(("sink_learned_pre_gqa_L2", dict(make_cfg("PRE", 2, d=8, H=4, Hkv=2),
                                                  attn_sink=SINK_LEARNED)))
    cases.append(("sink_obo_hybrid_L2", dict(make_cfg("HYBRID", 2, Hkv=1, **small),
                                             attn_sink=SINK_OFF_BY_ONE)))
    cases.append(("sink_learned_siamese_L2", dict(make_cfg("SIAMESE", 2, Hkv=2, **small),
                                                  attn_sink=SINK_LEARNED)))
    # OLMo's clip_qkv (Q|K|V clamped after b_qkv, before the site norms), checked against
    # OLMo's clamp of the projection (nbfixture.attention): on OLMo-2 (clamped, then its
    # full-width Q, K norms, then RoPE) with GQA; on Pre-Norm with learned sinks and MQA; on
    # Pre-Norm with the elementwise gate, whose G columns are not clamped, with both biases
    cases.append(("clip_olmo2_gqa_L2", dict(make_cfg("OLMO2", 2, d=8, H=4, Hkv=2),
                                            clip_qkv=1.0)))
    cases.append(("clip_sink_pre_L2", dict(make_cfg("PRE", 2, Hkv=1, **small), clip_qkv=0.8,
                                           attn_sink=SINK_LEARNED)))
    cases.append(("clip_gate_pre_L2", dict(make_cfg("PRE", 2, Hkv=2, attn_bias=3, **small),
                                           clip_qkv=0.8, attn_gate=GATE_ELEMENTWISE)))
    # Gemma 2's attention-logit softcap (the scaled scores s become c tanh(s / c), before the
    # mask and a sink's column), checked against Gemma 2's eager attention (nbfixture.attention),
    # c near the 75th percentile of the draws' |s| (SOFTCAP_SHARE of each layer's beyond it): on
    # Gemma's sandwich layout with GQA (H = 4, Hkv = 2); on HybridNorm's QKV site norms and RoPE
    # with learned sinks (z_h uncapped) and MQA; on Pre-Norm with both biases and a softmax scale
    # of 0.7 (not 1/sqrt(d_k): the cap after the scale)
    cases.append(("softcap_sandwich_gqa_L2", dict(make_cfg("SANDWICH", 2, d=8, H=4, Hkv=2),
                                                  softcap=2.0)))
    cases.append(("softcap_sink_hybrid_L2", dict(make_cfg("HYBRID", 2, Hkv=1, **small),
                                                 softcap=1.2, attn_sink=SINK_LEARNED)))
    cases.append(("softcap_pre_scale_L2", dict(make_cfg("PRE", 2, Hkv=2, attn_bias=3, **small),
                                               softcap=2.0, softmax_scale=0.7)))
    # mHC-lite (hyper 5; comb the softmax-weighted mixture of the n! permutation matrices,
    # checked against its code's construction, nbfixture.mhc_lite_res_ref; every draw's comb
    # far from the identity and from its transpose, lite_refusal): on Pre-Norm with n = 4 (24
    # comb logits, wider than n^2); static maps with n = 3 on the mHC preset (the kind given
    # over the preset's); on Gemma's sandwich layout with GQA (H = 4, Hkv = 2), n = 3
    cases.append(("mhclite_pre_n4_L2", dict(make_cfg("PRE", 2, Hkv=2, **hyper),
                                            hyper=HYPER_MHC_LITE)))
    cases.append(("mhclite_static_n3_L2", dict(make_cfg("MHC", 2, Hkv=1, **hyper),
                                               hyper=HYPER_MHC_LITE, hyper_static=1,
                                               hyper_streams=3)))
    cases.append(("mhclite_sandwich_n3_L2", dict(make_cfg("SANDWICH", 2, d=8, H=4, Hkv=2),
                                                 hyper=HYPER_MHC_LITE, hyper_streams=3)))
    # DenseFormer's depth-weighted average (dwa; checked against the paper's sum over the kept
    # outputs, nbfixture.dwa_average_ref; every draw's weights far from the init and its output
    # far from the plain stack's, dwa_refusal): on Pre-Norm with GQA (H = 4, Hkv = 2), every
    # output averaged (k = 1); on Post-Norm with the dilation 2 (layer 0's average a scale of
    # h_1 alone, layer 3's of x_0, h_2, h_4); on Peri-LN (the normalized embedding is h_0) with
    # the learnable value residual and MQA
    cases.append(("dwa_pre_L4", dict(make_cfg("PRE", 4, d=8, H=4, Hkv=2), dwa=1)))
    cases.append(("dwa_post_k2_L4", dict(make_cfg("POST", 4, Hkv=2, **small), dwa=1,
                                         dwa_dilation=2)))
    cases.append(("dwa_periln_L3", dict(make_cfg("PERILN", 3, Hkv=1, **small), dwa=1,
                                        value_residual=2)))
    # Attention Residuals (attn_res; checked against the paper's block sums read token by token,
    # nbfixture.attn_res_sources_ref and attn_res_read_ref; every draw's output far from the
    # uniform weights', attn_res_refusal): Full AttnRes (attn_res_block absent: 0 = 1) on
    # Pre-Norm with GQA (H = 4, Hkv = 2); blocks of 2 sublayers (a layer, the official code's
    # granularity) on Pre-Norm with MQA at L = 4; blocks of 3 on Peri-LN (boundaries before
    # FFNs too; x_0 the normalized embedding) with the learnable value residual; one block of
    # 2L (x_0 and the running sum, the paper's N = 1) on LayerScale with CompleteP's m = 1/2
    # (both on each branch)
    cases.append(("attnres_full_pre_L3", dict(make_cfg("PRE", 3, d=8, H=4, Hkv=2), attn_res=1)))
    cases.append(("attnres_s2_pre_L4", dict(make_cfg("PRE", 4, Hkv=1, **small), attn_res=1,
                                            attn_res_block=2)))
    cases.append(("attnres_s3_periln_L3", dict(make_cfg("PERILN", 3, Hkv=2, **small), attn_res=1,
                                               attn_res_block=3, value_residual=2)))
    cases.append(("attnres_s4_layerscale_L2", dict(make_cfg("LAYERSCALE", 2, Hkv=1, **small),
                                                   attn_res=1, attn_res_block=4,
                                                   depth_alpha=1.0)))
    # modded-nanogpt's U-Net skips and x_0 re-injection (unet_skips, reinject_x0; checked
    # against its GPT.forward written out by index, term by term, nbfixture.unet_input_ref;
    # drawn skip weights and lambdas far from their init, every draw's output far from the plain
    # stack's, unet_refusal): both on Pre-Norm with GQA (H = 4, Hkv = 2) at L = 4 (layers 2, 3
    # read h_1, h_0); the skips alone on Post-Norm (the skips read post-normed outputs); the
    # re-injection alone on Peri-LN at L = 3 (x_0 the normalized embedding) with the learnable
    # value residual and MQA; both on Gemma's sandwich layout at L = 2 (layer 1 reads h_0)
    cases.append(("unet_pre_L4", dict(make_cfg("PRE", 4, d=8, H=4, Hkv=2), unet_skips=1,
                                      reinject_x0=1)))
    cases.append(("unet_post_L4", dict(make_cfg("POST", 4, Hkv=2, **small), unet_skips=1)))
    cases.append(("reinject_periln_L3", dict(make_cfg("PERILN", 3, Hkv=1, **small),
                                             reinject_x0=1, value_residual=2)))
    cases.append(("unet_sandwich_L2", dict(make_cfg("SANDWICH", 2, Hkv=1, **small), unet_skips=1,
                                           reinject_x0=1)))
    # modded-nanogpt's value embeddings (value_embeds N; checked against its GPT.forward's list
    # of tables read by index and CausalSelfAttention's mix term by term,
    # nbfixture.value_embed_layers_ref and value_embed_mix_ref; the rows drawn N(0, 1) as the
    # trainer's tables, the lambdas away from their init 0.5, every draw's output far from the
    # plain stack's, ve_refusal): 2 tables on Pre-Norm at L = 5 with GQA (H = 4, Hkv = 2;
    # layers 0, 1 and 3, 4 mix tables 0, 1, layer 2 only lambda_0 V); 1 table on HybridNorm at
    # L = 2 (the V site norm before the mix; layer 0 and 1 share the table); 2 tables on
    # Post-Norm at L = 4 (every layer mixes) with learned sinks and MQA
    cases.append(("ve_pre_L5", dict(make_cfg("PRE", 5, d=8, H=4, Hkv=2), value_embeds=2)))
    cases.append(("ve_hybrid_L2", dict(make_cfg("HYBRID", 2, Hkv=2, **small), value_embeds=1)))
    cases.append(("ve_post_L4", dict(make_cfg("POST", 4, Hkv=1, **small), value_embeds=2,
                                     attn_sink=SINK_LEARNED)))
    # DenseFormer's period (dwa_period p, the DWAModules package's period; checked against its
    # forward written as the paper's sum on the period's layers, the other layers' outputs
    # passed on, nbfixture.dwa_average_ref; every draw's output far from the plain stack's,
    # dwa_refusal): k = p = 2 on Pre-Norm with GQA (H = 4, Hkv = 2; layers 1 and 3 average
    # x_0, h_2 and x_0, h_2, h_4, layers 0 and 2 pass their outputs on); p = 3 on
    # Post-Norm at L = 4 (layer 2 averages x_0 and h_1 .. h_3, two of them passed on, and the
    # last layer passes its output to the final norm)
    cases.append(("dwa_p2_pre_L4", dict(make_cfg("PRE", 4, d=8, H=4, Hkv=2), dwa=1,
                                        dwa_dilation=2, dwa_period=2)))
    cases.append(("dwa_p3_post_L4", dict(make_cfg("POST", 4, Hkv=2, **small), dwa=1,
                                         dwa_period=3)))
    # the shapes of the bf16 matrix kernels (AMX's 32 x 32 blocks of C, K in steps of 32), so
    # that test_block_fixtures_bf16 runs them on every CPU that has them: head_dim 32, T = 48
    # (a query tile of 32 rows and an edge of 16, the keys padded to 64), B T = 96 (the
    # weights' gradients' K), d = f = 32
    cases.append(("tiles_pre_L2", make_cfg("PRE", 2, d=32, H=1, Hkv=1, f=32, B=2, T=48)))

    check_header_keys(cfg["preset"] for _, cfg in cases)
    for name, cfg in cases:
        add_case(w, name, cfg, report)

    for name, pr, L, d, H, Hkv, npar, nbytes, m, worst, k in report:
        print("  %-20s %-16s L=%d d=%-2d H=%d Hkv=%d %2d params %6d bytes  f32 %.2f (%s)%s" %
              (name, pr, L, d, H, Hkv, npar, nbytes, m, worst, "" if k == 0 else
               " [draw %d]" % k))
    path = os.path.join(outdir, "blocks.bin")
    n = w.write(path)
    print("wrote %s: %d cases, %d tensors, %d bytes" % (path, len(report), len(w.records), n))


if __name__ == "__main__":
    main()
