"""normblocks_twin.py - a PyTorch twin of normblocks' stack and of the examples/train model.

The module computes what `nb_stack_forward` computes (normblocks.h, "blocks and stacks") with
plain torch ops, for every preset and option of `nb_stack_desc`, with the library's parameter
names and shapes (its tensor table: "blocks.3.att_proj.weight", "ln_f.weight", ...; matrices
(out, in) like nn.Linear). It loads the safetensors checkpoints of examples/train and gives the
trainer's loss on the same batch.

    from normblocks_twin import StackConfig, Stack, load_checkpoint
    cfg = StackConfig.from_name("hybrid_star", n_layers=12, d_model=768, n_heads=12,
                                n_kv_heads=4, rope=True)
    stack = Stack(cfg)                     # nn.Module; stack(E) -> final hidden state
    model, meta = load_checkpoint("run.safetensors")   # the trainer's model (wte, stack, head)

Only torch (and the standard library) are needed: the safetensors file is read by hand.

Precision. StackConfig(precision="bf16") is the library's mixed precision (nb_stack_desc
.precision = NB_PRECISION_BF16): every GEMM of the forward and the backward multiplies operands
rounded to bfloat16 (round to nearest even) and sums in the module's dtype; everything else
(norms, softmax, RoPE, activations, residual adds, bias adds and bias gradients) stays in it.
The GEMMs are the projections (Q|K|V, attention output, FFN in and out: y = bf16(x) bf16(W)^T,
the bias added after), the attention's scores bf16(Q) bf16(K)^T (scaled by 1/sqrt(d_k) after)
and context bf16(P) bf16(V); in the backward each of their gradient products rounds the incoming
gradient too: dX = bf16(dY) bf16(W), dW = bf16(dY)^T bf16(X), dP = bf16(dO) bf16(V)^T,
dV = bf16(P)^T bf16(dO), dQ = bf16(dS) bf16(K), dK = bf16(dS)^T bf16(Q) (bf16_matmul, a custom
autograd Function; the softmax backward itself uses the unrounded P). In float32 that is the
library's arithmetic up to the order of the float32 sums; in float64 it is "bf16 operands,
exact sums", the reference tests/fixtures/blocks_bf16.bin holds. NormBlocksLM's LM head is
then a bf16 GEMM too, as the trainer's (examples/train --precision bf16). The default
(precision "" = "fp32") rounds nothing.

Equations (x: a B x T x d residual stream, N: a norm with its own gain, and bias for LayerNorm)

  Norms           RMSNorm    N(x) = g * x / sqrt(mean(x^2) + eps)
                  LayerNorm  N(x) = g * (x - mean(x)) / sqrt(var(x) + eps) + b
                  DyT        N(x) = g * tanh(a x) + b, a a learnable scalar per norm
                  over the last dimension; block norms have width d; the attention "site"
                  norms have a gain only (also LayerNorm, DyT) of width d_k (one gain shared by
                  all heads, "per head") or of the whole projection row ("full", OLMo-2).
  Attention       [Q|K|V] = x W_qkv^T (+ b_qkv) (Q: H heads, K, V: H_kv heads of d_k = d/H),
                  Q, K, V normalized at their sites, then RoPE on Q and K (NeoX rotate-half),
                  P = softmax(Q K^T / sqrt(d_k) + causal mask), query head h reads KV head
                  h / (H/H_kv), C = concat_h P V (normalized at site C), out = C W_o^T (+ b_o);
                  the biases with attn_bias (GPT-2 both, Qwen2 b_qkv).
  FFN             SwiGLU: [u|z] = x W_in^T (+b_in), out = (silu(z) * u) W_out^T (+b_out)
                  GELU:   out = gelu(x W_in^T + b_in) W_out^T + b_out (tanh or erf form)
  A sublayer F (attention or FFN) inside its placement (nb_placement):
                  h  = input_norm ? c * N_in(x) : x        (c = input_scale)
                  r  = residual_from_norm ? h : x
                  f  = output_norm ? N_out(F(h)) : F(h)
                  f  = lambda * f   (branch_scale: "scalar" ReZero's resweight, one per layer
                                     shared by its sublayers; "channel" LayerScale's
                                     ls1.gamma / ls2.gamma)
                  s  = alpha * r + f                       (alpha = residual_scale)
                  x' = post_norm ? N_post(s) : s
  A block is the attention sublayer, then the FFN sublayer. A stack is
                  x_0 = embed_norm ? N_embed(E) : E;  x_{l+1} = block_l(x_l);
                  out = final_norm ? N_lnf(x_L) : x_L
  SiameseNorm (two streams x, y, both starting at x_0; c_l = sqrt(2(l+1)), or sqrt(l+1), or 1):
    hybrid-pre ("siamese"): u_a = x * c1 + N_ay(y); A = MHA(u_a); x1 = x + A/c_l; y1 = y + A;
                  n = N_f(x1); u_f = N_in(n + N_fy(y1)); F = FFN(u_f); x' = n + F/c_l;
                  y' = y1 + F      (u_f = n + N_fy(y1) with siamese_no_fusion_norm)
    post-pre ("siamese_post_pre"), each sublayer G: u = N_x(x); v = N_in(u + N_y(y));
                  z = G(v); x' = u + z/c_l; y' = y + z
    output:       N_final(N_lnf(x_L) + N_lnyf(y_L)), or x_L + N_lnyf(y_L) (paper fusion)

The presets are schedules of placements; PRESETS below is the library's table nb__presets[]
and place_code() its nb__place_code(). Which preset computes what is documented in
normblocks.h (nb_preset).
"""
import json
import math
import struct
from dataclasses import dataclass, field, replace
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["SITE_Q", "SITE_K", "SITE_V", "SITE_C", "SITES_QKV", "SITES_QKVC", "SITES_NONE",
           "ATTN_BIAS_QKV", "ATTN_BIAS_OUT",
           "Placement", "LayerSpec", "StackConfig", "PRESETS", "place_code", "resolve",
           "norm", "Norm", "Block", "Stack", "NormBlocksLM", "bf16_round", "bf16_matmul",
           "bf16_linear", "read_safetensors", "config_from_metadata", "load_checkpoint",
           "text_val_batches", "text_eval_loss", "text_train_batch", "VOCAB"]

# attention norm sites (NB_SITE_*)
SITE_Q, SITE_K, SITE_V, SITE_C = 1, 2, 4, 8
SITES_QKV = SITE_Q | SITE_K | SITE_V
SITES_QKVC = SITES_QKV | SITE_C
SITES_NONE = 0x100  # StackConfig.sites: explicitly none (0 = the preset's default)
ATTN_BIAS_QKV, ATTN_BIAS_OUT = 1, 2  # StackConfig.attn_bias (NB_ATTN_BIAS_*)

VOCAB = 256  # examples/train is byte-level


# ---- descriptions --------------------------------------------------------------------------


@dataclass
class Placement:
    """How one sublayer sits on the residual stream (nb_placement; equations at the top)."""
    input_norm: bool = False
    residual_from_norm: bool = False
    output_norm: bool = False
    post_norm: bool = False
    residual_scale: float = 1.0
    input_scale: float = 1.0
    branch_scale: str = ""     # "", "scalar" (ReZero) or "channel" (LayerScale)


@dataclass
class LayerSpec:
    """One layer of a schedule (nb_layer_desc): attention and FFN placements, attention norm
    sites (SITE_* mask)."""
    attn: Placement = field(default_factory=Placement)
    ffn: Placement = field(default_factory=Placement)
    sites: int = 0


@dataclass(frozen=True)
class _Preset:
    key: str
    aliases: tuple   # case-insensitive other names (nb_preset_from_name)
    first: str       # placement codes of the first n_first layers (attention, FFN)
    n_first: int     # -1: floor(mixln_alpha L), Mix-LN's Post-Norm layers
    rest: str        # codes of the other layers
    sites: int       # default attention norm sites
    width: str       # default site norm width
    eps: float       # default eps of every norm
    embed_norm: int  # 1 normalized embedding, -1 none
    streams: int     # 2 = SiameseNorm
    final_norm: int  # 1 final norm, -1 none
    norm: str = "rms"  # default norm kind


_QK = SITE_Q | SITE_K
_PH, _FULL = "per_head", "full"
# normblocks.h nb__presets[], in enum order
PRESETS = [
    _Preset("default", (), "", 0, "pp", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("pre", ("Pre-Norm", "PreNorm"), "", 0, "pp", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("post", ("Post-Norm", "PostNorm"), "", 0, "PP", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("post_flags", (), "nr", 1, "rr", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("sandwich", ("Sandwich",), "", 0, "ss", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("olmo2", ("OLMo-2",), "", 0, "oo", _QK, _FULL, 1e-6, -1, 1, 1),
    _Preset("deepnorm", ("DeepNorm",), "", 0, "dd", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("deepnorm_mixln", (), "", 0, "mm", 0, _PH, 1e-6, -1, 1, 1),
    _Preset("hybrid", ("HybridNorm",), "", 0, "nr", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("hybrid_star", ("HybridNorm*", "hybrid*"), "pp", 1, "nr", SITES_QKV, _PH, 1e-5, -1,
            1, 1),
    _Preset("first_qkv_pre", ("First-QKV-Pre",), "np", 1, "nr", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("embednorm", ("EmbedNorm",), "", 0, "nr", SITES_QKV, _PH, 1e-5, 1, 1, 1),
    _Preset("sites_post", (), "", 0, "nr", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("sites_pre", (), "", 0, "np", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("pre_sites_post", (), "", 0, "pr", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("pre_sites_pre", (), "", 0, "pp", SITES_QKV, _PH, 1e-5, -1, 1, 1),
    _Preset("pre_post", ("Pre-Post",), "", 0, "pr", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("post_pre", ("Post-Pre",), "", 0, "rp", 0, _PH, 1e-5, -1, 1, 1),
    _Preset("mixln", ("Mix-LN",), "PP", -1, "pp", 0, _PH, 1e-6, -1, 1, 1),
    _Preset("siamese", ("SiameseNorm",), "", 0, "--", SITES_QKV, _PH, 1e-5, -1, 2, 1),
    _Preset("siamese_post_pre", (), "", 0, "--", SITES_QKV, _PH, 1e-5, -1, 2, 1),
    _Preset("lns", ("LayerNorm-Scaling", "LNS"), "", 0, "ll", 0, _PH, 1e-6, -1, 1, 1),
    _Preset("none", ("NoNorm", "no_norm"), "", 0, "nn", 0, _PH, 1e-5, -1, 1, -1),
    _Preset("dyt", ("DyT", "Dynamic-Tanh"), "", 0, "pp", 0, _PH, 1e-5, -1, 1, 1, "dyt"),
    _Preset("periln", ("Peri-LN", "PeriLN"), "", 0, "ss", 0, _PH, 1e-5, 1, 1, 1),
    _Preset("rezero", ("ReZero",), "", 0, "zz", 0, _PH, 1e-5, -1, 1, -1),
    _Preset("layerscale", ("LayerScale", "CaiT"), "", 0, "cc", 0, _PH, 1e-5, -1, 1, 1),
]
_PRESET = {p.key: p for p in PRESETS}


def place_code(code, l, n_layers):
    """The placement of a preset-table code in layer l (0-based) of n_layers (nb__place_code):
         n  x + F(x)                 p  x + F(N(x))              r  h + F(h), h = N(x)
         P  N(x + F(x))              s  x + N_out(F(N_in(x)))    o  x + N_out(F(x))
         d  N(a x + F(x)), a = (2L)^(1/4)                        m  the same with a = sqrt(8)
         l  x + F(N(x) / sqrt(l + 1))  (LayerNorm Scaling)
         z  x + a F(x)  (ReZero)      c  x + diag(lambda) F(N(x))  (LayerScale)"""
    p = Placement()
    if code == "p":
        p.input_norm = True
    elif code == "r":
        p.input_norm = p.residual_from_norm = True
    elif code == "P":
        p.post_norm = True
    elif code == "s":
        p.input_norm = p.output_norm = True
    elif code == "o":
        p.output_norm = True
    elif code == "d":
        p.post_norm, p.residual_scale = True, (2.0 * n_layers) ** 0.25
    elif code == "m":
        p.post_norm, p.residual_scale = True, 2.8284271247461903
    elif code == "l":
        p.input_norm, p.input_scale = True, 1.0 / math.sqrt(l + 1.0)
    elif code == "z":
        p.branch_scale = "scalar"
    elif code == "c":
        p.input_norm, p.branch_scale = True, "channel"
    return p


_SITE_NAMES = {"QKVC": SITES_QKVC, "QKV": SITES_QKV, "QKC": SITE_Q | SITE_K | SITE_C,
               "QK": SITE_Q | SITE_K, "KV": SITE_K | SITE_V, "KC": SITE_K | SITE_C}


def _preset_from_name(name):
    """nb_preset_from_name: (key, fields it sets) for a preset key, alias, "gpt2", or a
    HybridNorm ablation name ("QKV-Post", "Pre-QK-Pre", "KC-Post", ...)."""
    low = name.lower()
    for p in PRESETS[1:]:
        if low == p.key or low in (a.lower() for a in p.aliases):
            return p.key, {}
    if low == "gpt2":
        return "pre", dict(norm="layer", ffn="gelu_tanh", attn_bias=ATTN_BIAS_QKV | ATTN_BIAS_OUT)
    pre = len(low) > 4 and low.startswith("pre-")
    body = low[4:] if pre else low
    if "-" in body:
        sites, _, kind = body.partition("-")
        mask = _SITE_NAMES.get(sites.upper(), 0)
        if mask and kind in ("post", "pre"):
            key = ("pre_" if pre else "") + "sites_" + kind
            return key, dict(sites=mask)
    raise ValueError("unknown preset %r (try pre, post, hybrid, hybrid_star, mixln, siamese, "
                     "sandwich, olmo2, deepnorm, QKV-Post, ...)" % name)


@dataclass
class StackConfig:
    """The description of a stack: the fields of nb_stack_desc, 0 / "" meaning the preset's
    default as in C. preset is a key of PRESETS ("default" with a custom `layers` schedule);
    use StackConfig.from_name for the names nb_preset_from_name accepts."""
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int = 0          # 0 = n_heads
    d_ff: int = 0                # 0 = 4d (GELU), 8d/3 rounded up to 64 (SwiGLU)
    preset: str = "pre"
    sites: int = 0               # 0 = preset default, SITES_NONE = none, else a SITE_* mask
    layers: Optional[List[LayerSpec]] = None  # custom schedule (preset "default")
    mixln_alpha: float = 0.0     # (0, 1]; 0 = 0.25; -1 = no Post-Norm layer
    norm: str = ""               # "" = preset's (rms; dyt for dyt), "rms", "layer" or "dyt"
                                 # (block LayerNorms and DyTs carry a bias)
    eps: float = 0.0             # 0 = the preset's (1e-6 olmo2, mixln, deepnorm_mixln, lns)
    site_width: str = ""         # "" = preset's; "per_head" or "full"
    ffn: str = "swiglu"          # "swiglu", "gelu_tanh" or "gelu_erf"
    ffn_bias: int = 0            # 0 = type default (GELU: on, SwiGLU: off), 1 on, -1 off
    attn_bias: int = 0           # ATTN_BIAS_* mask: att_proj.bias, attn_out.bias; 0 = none
    rope: bool = False
    rope_theta: float = 0.0      # 0 = 10000
    non_causal: bool = False
    final_norm: int = 0          # 0 = preset default, 1 on, -1 off
    embed_norm: int = 0          # 0 = preset default, 1 on, -1 off
    siamese_paper_scale: int = 0     # c_l: 0 sqrt(2(l+1)), 1 sqrt(l+1), 2 1
    siamese_paper_fusion: int = 0    # 1: output x_L + N(y_L)
    siamese_no_fusion_norm: int = 0  # 1: u_f = n + N_fy(y1) (siamese only)
    precision: str = ""          # "" = "fp32"; "bf16": every GEMM on bf16-rounded operands
                                 # (NB_PRECISION_BF16; see "Precision" at the top)

    @classmethod
    def from_name(cls, name, **fields):
        """A description from a preset name as nb_preset_from_name reads it (keys, aliases,
        "gpt2", "QKV-Post", "Pre-QK-Pre", ...), then `fields` set on top."""
        key, named = _preset_from_name(name)
        named.update(fields)
        return cls(preset=key, **named)


def resolve(cfg):
    """Every default of cfg resolved and the per-layer schedule filled in, as nb_stack_init
    does: returns a new StackConfig (layers: n_layers LayerSpecs, sites the stack mask) and
    raises ValueError where nb_stack_init refuses the description."""
    c = replace(cfg)
    L, d, H = c.n_layers, c.d_model, c.n_heads
    if L <= 0 or d <= 0 or H <= 0:
        raise ValueError("n_layers, d_model and n_heads must be > 0")
    if c.layers is not None and c.preset not in ("default",):
        raise ValueError("give either a preset (%s) or a custom layer schedule" % c.preset)
    if c.layers is None and c.preset == "default":
        c.preset = "pre"
    if c.preset not in _PRESET:
        raise ValueError("unknown preset %r" % c.preset)
    row = _PRESET[c.preset]
    sites = row.sites if c.sites == 0 else c.sites & SITES_QKVC
    if c.mixln_alpha == 0:
        c.mixln_alpha = 0.25
    if c.mixln_alpha != -1 and not 0 < c.mixln_alpha <= 1:
        raise ValueError("mixln_alpha must be in (0, 1], or -1")
    n_post = 0 if c.mixln_alpha < 0 else int(math.floor(c.mixln_alpha * L + 1e-9))
    c.norm = c.norm or row.norm
    if c.norm not in ("rms", "layer", "dyt"):
        raise ValueError("norm: rms, layer or dyt")
    if c.eps == 0:
        c.eps = row.eps
    c.site_width = c.site_width or row.width
    if c.final_norm == 0:
        c.final_norm = row.final_norm
    if c.embed_norm == 0:
        c.embed_norm = row.embed_norm
    if row.streams == 2 and c.final_norm < 0:
        raise ValueError("SiameseNorm needs its output fusion (final_norm cannot be -1)")
    if c.siamese_no_fusion_norm and c.preset != "siamese":
        raise ValueError("siamese_no_fusion_norm is for the siamese preset")
    c.precision = c.precision or "fp32"
    if c.precision not in ("fp32", "bf16"):
        raise ValueError("precision: fp32 or bf16")
    if c.ffn not in ("swiglu", "gelu_tanh", "gelu_erf"):
        raise ValueError("ffn: swiglu, gelu_tanh or gelu_erf")
    if c.d_ff == 0:
        c.d_ff = (8 * d // 3 + 63) // 64 * 64 if c.ffn == "swiglu" else 4 * d
    if c.attn_bias & ~(ATTN_BIAS_QKV | ATTN_BIAS_OUT):
        raise ValueError("attn_bias: a mask of ATTN_BIAS_QKV and ATTN_BIAS_OUT")
    if c.ffn_bias == 0:
        c.ffn_bias = -1 if c.ffn == "swiglu" else 1
    c.n_kv_heads = c.n_kv_heads or H
    if d % H or H % c.n_kv_heads:
        raise ValueError("d_model %% n_heads and n_heads %% n_kv_heads must be 0")
    if c.rope_theta == 0:
        c.rope_theta = 10000.0
    if c.rope and (d // H) % 2:
        raise ValueError("RoPE needs an even head dimension")
    if c.layers is not None:
        if len(c.layers) != L:
            raise ValueError("layers has %d entries, n_layers is %d" % (len(c.layers), L))
        layers = []
        for l, ld in enumerate(c.layers):
            ld = LayerSpec(replace(ld.attn), replace(ld.ffn), ld.sites)
            for p in (ld.attn, ld.ffn):
                if p.residual_from_norm and not p.input_norm:
                    raise ValueError("layer %d: residual_from_norm needs input_norm" % l)
                p.residual_scale = p.residual_scale or 1.0
                p.input_scale = p.input_scale or 1.0
                if p.input_scale != 1 and not p.input_norm:
                    raise ValueError("layer %d: input_scale needs input_norm" % l)
            layers.append(ld)
    else:
        n_first = n_post if row.n_first < 0 else row.n_first
        layers = []
        for l in range(L):
            codes = row.first if l < n_first else row.rest
            layers.append(LayerSpec(place_code(codes[0], l, L), place_code(codes[1], l, L),
                                    sites))
    c.layers = layers
    c.sites = sites
    return c


def _streams(c):
    return _PRESET[c.preset].streams


# ---- modules ---------------------------------------------------------------------------------


class Norm(nn.Module):
    """RMSNorm, LayerNorm or DyT over the last dimension, with a gain (`weight`) and, for block
    LayerNorms and DyTs, a `bias`. The attention site norms are Norm(..., bias=False).
    DyT ("Transformers without Normalization", 2025): weight * tanh(alpha x) + bias with a
    learnable scalar `alpha` (registered first, as DyT's DynamicTanh module and the library's
    buffer order have it; its initial value comes from the library or the checkpoint)."""

    def __init__(self, width, kind, eps, bias):
        super().__init__()
        self.kind, self.eps = kind, eps
        if kind == "dyt":
            self.alpha = nn.Parameter(torch.ones(1))
        self.weight = nn.Parameter(torch.ones(width))
        if bias:
            self.bias = nn.Parameter(torch.zeros(width))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        return norm(self.kind, x, self.weight, self.bias, self.eps, getattr(self, "alpha", None))


def norm(kind, x, weight=None, bias=None, eps=1e-5, alpha=None):
    """The Norm module's function: "rms", "layer" or "dyt" over the last dimension of x, with an
    optional gain and bias (alpha: DyT's scalar)."""
    if kind == "dyt":
        y = torch.tanh(alpha * x)
    elif kind == "rms":
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    else:
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    y = y * weight if weight is not None else y
    return y + bias if bias is not None else y


def bf16_round(x):
    """x rounded to bfloat16 (to nearest even) and back to x's dtype. PyTorch converts float64
    through float32 (two roundings), which is the library's: it rounds float32 values."""
    return x.to(torch.bfloat16).to(x.dtype)


class _BF16MatMul(torch.autograd.Function):
    """a @ b on bf16-rounded operands, summed in their dtype; the backward's two products round
    their operands too, the incoming gradient included (the library's BF16 GEMMs)."""

    @staticmethod
    def forward(ctx, a, b, grad_scale):
        ra, rb = bf16_round(a), bf16_round(b)
        ctx.save_for_backward(ra, rb)
        ctx.grad_scale = grad_scale
        return ra @ rb

    @staticmethod
    def backward(ctx, g):
        ra, rb = ctx.saved_tensors
        s = ctx.grad_scale
        rg = bf16_round(g if s == 1 else g * s)
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = (rg @ rb.transpose(-2, -1)).sum_to_size(ra.shape)
            ga = ga if s == 1 else ga * (1.0 / s)
        if ctx.needs_input_grad[1]:
            gb = (ra.transpose(-2, -1) @ rg).sum_to_size(rb.shape)
            gb = gb if s == 1 else gb * (1.0 / s)
        return ga, gb, None


def bf16_matmul(a, b, grad_scale=1.0):
    """a @ b (matrices, or batches of them of the same shape) with every GEMM of the forward
    and backward on bf16-rounded operands: forward bf16(a) bf16(b), backward
    grad_a = bf16(g) bf16(b)^T, grad_b = bf16(a)^T bf16(g). grad_scale s: the backward rounds
    s g instead and scales the products by 1/s (a mean loss over s terms passes s: the rounded
    gradient is then that of the sum, as the trainer's LM head has it). Not twice
    differentiable."""
    return _BF16MatMul.apply(a, b, grad_scale)


def bf16_linear(x, weight, bias=None, grad_scale=1.0):
    """F.linear(x, weight, bias) as a BF16 stack's projection: bf16(x) bf16(weight)^T over the
    rows of x (one GEMM, as the library's: its weight gradient sums over all of them), the bias
    added (and its gradient summed) unrounded. grad_scale: see bf16_matmul."""
    y = bf16_matmul(x.reshape(-1, x.shape[-1]), weight.t(), grad_scale)
    y = y.reshape(*x.shape[:-1], weight.shape[0])
    return y + bias if bias is not None else y


class _LayerScale(nn.Module):
    """timm's LayerScale: a learnable per-channel `gamma` (named ls1.gamma / ls2.gamma)."""

    def __init__(self, d):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d))


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rope(x, theta):
    """NeoX rotate-half RoPE on (B, heads, T, d_k): pair (i, i + d_k/2) of position t rotates by
    t * theta^(-2i/d_k) (angles in float64, as normblocks)."""
    T, dk = x.shape[-2], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, dk, 2, dtype=torch.float64) / dk)  # as HF Llama
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return x * ang.cos().to(x.dtype) + _rotate_half(x) * ang.sin().to(x.dtype)


# the block norms of a layer, in the library's parameter order (nb__norm_names)
_NORM_NAMES = ("attn_norm", "attn_out_norm", "attn_post_norm", "ff_norm", "ff_out_norm",
               "ff_post_norm", "attn_y_norm", "attn_input_norm", "ff_y_norm", "ff_input_norm")


class Block(nn.Module):
    """Layer l of a resolved stack: an attention sublayer then an FFN sublayer, each in its
    placement (one stream), or SiameseNorm's two-stream layer. Parameters are registered in
    the library's order: att_proj, attn_out, q/k/v/c_norm, ff_proj, ff_out, the block norms
    (_NORM_NAMES order), c1."""

    def __init__(self, c, l):
        super().__init__()
        self.c, self.l, self.spec = c, l, c.layers[l]
        self.tracer = None  # set by Stack.forward while tracing
        self.probs = None   # a list: attention() appends its probabilities (B, H, T, T)
        self.bf16 = c.precision == "bf16"  # every GEMM on bf16 operands (_linear, _matmul)
        d, H, Hkv = c.d_model, c.n_heads, c.n_kv_heads
        dk = d // H
        self.dims = (d, H, Hkv, dk)
        self.att_proj = nn.Linear(d, d + 2 * Hkv * dk, bias=bool(c.attn_bias & ATTN_BIAS_QKV))
        self.attn_out = nn.Linear(d, d, bias=bool(c.attn_bias & ATTN_BIAS_OUT))
        for name, bit in (("q", SITE_Q), ("k", SITE_K), ("v", SITE_V), ("c", SITE_C)):
            if self.spec.sites & bit:
                full = (H if name in "qc" else Hkv) * dk
                self.add_module(name + "_norm", Norm(full if c.site_width == _FULL else dk,
                                                     c.norm, c.eps, bias=False))
        in_width = 2 * c.d_ff if c.ffn == "swiglu" else c.d_ff
        self.ff_proj = nn.Linear(d, in_width, bias=c.ffn_bias > 0)
        self.ff_out = nn.Linear(c.d_ff, d, bias=c.ffn_bias > 0)
        for name in _NORM_NAMES:
            if self._has_norm(name):
                self.add_module(name, Norm(d, c.norm, c.eps, bias=c.norm != "rms"))
        self.siamese = _streams(c) == 2
        self.post_pre = c.preset == "siamese_post_pre"
        if self.siamese and not self.post_pre:
            self.c1 = nn.Parameter(torch.ones(d))
        # branch scales, after the norms as in the library's buffer (ReZero init 0)
        scales = (self.spec.attn.branch_scale, self.spec.ffn.branch_scale)
        if "scalar" in scales:
            self.resweight = nn.Parameter(torch.zeros(1))
        for which, name in ((0, "ls1"), (1, "ls2")):
            if scales[which] == "channel":
                self.add_module(name, _LayerScale(d))
        if self.siamese:  # c_l of layer l
            self.depth_c = [math.sqrt(2.0 * (l + 1)), math.sqrt(l + 1.0), 1.0][
                c.siamese_paper_scale]

    def _has_norm(self, name):
        c, s = self.c, self.spec
        if _streams(c) == 1:
            pl = s.attn if name.startswith("attn") else s.ffn
            kind = name.split("_", 1)[1]  # norm, out_norm, post_norm
            return {"norm": pl.input_norm, "out_norm": pl.output_norm,
                    "post_norm": pl.post_norm}.get(kind, False)
        if name in ("attn_y_norm", "ff_norm", "ff_y_norm"):
            return True
        if name == "ff_input_norm":
            return not c.siamese_no_fusion_norm
        return c.preset == "siamese_post_pre" and name in ("attn_norm", "attn_input_norm")

    # -- the two sublayer functions F --

    def _linear(self, layer, x):
        """A projection (nn.Linear layer): bf16_linear in precision bf16."""
        return bf16_linear(x, layer.weight, layer.bias) if self.bf16 else layer(x)

    def _matmul(self, a, b):
        """The attention's products: bf16_matmul in precision bf16."""
        return bf16_matmul(a, b) if self.bf16 else a @ b

    def _t(self, sub, name, t):
        """The trace (Stack.trace): "blocks.<l>.<sub>.<name>", rows B*T, as nb_ctx.trace."""
        if self.tracer is not None:
            self.tracer("blocks.%d.%s.%s" % (self.l, sub, name), t.reshape(-1, t.shape[-1]))

    def _g(self, sub, f):
        """The trace of the backward: the gradient of the sublayer function's output f as
        "blocks.<l>.<sub>.grad_out" (nb_ctx.trace)."""
        if self.tracer is None:
            return f
        return self.tracer.grad("blocks.%d.%s.grad_out" % (self.l, sub), f, self.l,
                                0 if sub == "ffn" else 1)

    def _t_qkv(self, name, q, k, v, heads_first):
        """Trace [Q|K|V] rows as the library lays them out (B*T, d + 2 H_kv d_k)."""
        if self.tracer is None:
            return
        B, T = q.shape[0], q.shape[2] if heads_first else q.shape[1]
        parts = [(t.transpose(1, 2) if heads_first else t).reshape(B, T, -1) for t in (q, k, v)]
        self._t("attn", name, torch.cat(parts, dim=-1))

    def attention(self, x):
        """MHA with the layer's site norms (see the module docstring)."""
        d, H, Hkv, dk = self.dims
        B, T, _ = x.shape
        sites, full = self.spec.sites, self.c.site_width == _FULL
        qkv = self._linear(self.att_proj, x)
        self._t("attn", "qkv", qkv)
        q, k, v = qkv.split((d, Hkv * dk, Hkv * dk), dim=-1)
        if full:  # OLMo-2: over the whole projection row, before the head split
            q, k, v = self._site_norms(q, k, v)
        q, k, v = (t.reshape(B, T, n, dk) for t, n in ((q, H), (k, Hkv), (v, Hkv)))
        if not full:  # per head: over each d_k vector, one gain for all heads
            q, k, v = self._site_norms(q, k, v)
        if sites & SITES_QKV:
            self._t_qkv("qkv_normed", q, k, v, False)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, heads, T, d_k)
        if self.c.rope:
            q, k = rope(q, self.c.rope_theta), rope(k, self.c.rope_theta)
            self._t_qkv("qkv_rope", q, k, v, True)
        if H != Hkv:  # query head h reads KV head h // (H / H_kv)
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
        s = self._matmul(q, k.transpose(-2, -1)) / math.sqrt(dk)
        if not self.c.non_causal:
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            s = s.masked_fill(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        if self.probs is not None:
            self.probs.append(p.detach())
        o = self._matmul(p, v).transpose(1, 2)  # (B, T, H, d_k)
        self._t("attn", "context", o.reshape(B, T, d))
        if sites & SITE_C:
            o = self.c_norm(o.reshape(B, T, d) if full else o)
            self._t("attn", "c_normed", o.reshape(B, T, d))
        out = self._linear(self.attn_out, o.reshape(B, T, d))
        self._t("attn", "out", out)
        return out

    def _site_norms(self, q, k, v):
        s = self.spec.sites
        return (self.q_norm(q) if s & SITE_Q else q, self.k_norm(k) if s & SITE_K else k,
                self.v_norm(v) if s & SITE_V else v)

    def ffn(self, x):
        """SwiGLU (first half value u, second half gate z) or GELU MLP."""
        h = self._linear(self.ff_proj, x)
        if self.c.ffn == "swiglu":
            u, z = h.chunk(2, dim=-1)
            a = F.silu(z) * u
        else:
            a = F.gelu(h, approximate="tanh" if self.c.ffn == "gelu_tanh" else "none")
        self._t("ffn", "proj", h)
        self._t("ffn", "act", a)
        out = self._linear(self.ff_out, a)
        self._t("ffn", "out", out)
        return out

    # -- placements --

    def sublayer(self, which, x):
        """x' of the placement equations for sublayer `which` ("attn" or "ff")."""
        pl = self.spec.attn if which == "attn" else self.spec.ffn
        fn = self.attention if which == "attn" else self.ffn
        sub = "attn" if which == "attn" else "ffn"
        h = x
        if pl.input_norm:
            h = getattr(self, which + "_norm")(x)
            if pl.input_scale != 1:
                h = pl.input_scale * h
            self._t(sub, "h", h)
        r = h if pl.residual_from_norm else x
        f = self._g(sub, fn(h))
        if pl.output_norm:
            f = getattr(self, which + "_out_norm")(f)
            self._t(sub, "out_normed", f)
        if pl.branch_scale == "scalar":
            f = self.resweight * f
        elif pl.branch_scale == "channel":
            f = getattr(self, "ls1" if which == "attn" else "ls2").gamma * f
        s = pl.residual_scale * r + f if pl.residual_scale != 1 else r + f
        if pl.post_norm:
            self._t(sub, "sum", s)
            s = getattr(self, which + "_post_norm")(s)
        self._t(sub, "x_out", s)
        return s

    def forward(self, x, y=None):
        """(x, y) -> (x', y'); y is None except for SiameseNorm."""
        if not self.siamese:
            return self.sublayer("ff", self.sublayer("attn", x)), None
        c = self.depth_c
        if not self.post_pre:  # hybrid-pre
            A = self._g("attn", self.attention(x * self.c1 + self.attn_y_norm(y)))
            x1, y1 = x + A / c, y + A
            n = self.ff_norm(x1)
            u = n + self.ff_y_norm(y1)
            if not self.c.siamese_no_fusion_norm:
                u = self.ff_input_norm(u)
            Fo = self._g("ffn", self.ffn(u))
            return n + Fo / c, y1 + Fo
        for which, fn in (("attn", self.attention), ("ff", self.ffn)):  # post-pre
            u = getattr(self, which + "_norm")(x)
            v = getattr(self, which + "_input_norm")(u + getattr(self, which + "_y_norm")(y))
            z = self._g("attn" if which == "attn" else "ffn", fn(v))
            x, y = u + z / c, y + z
        return x, y


class Stack(nn.Module):
    """The whole body between embedding and LM head (nb_stack_forward): E (B, T, d) -> the
    final hidden state (B, T, d). named_parameters() gives the library's tensor table: the
    same names and shapes; library_parameters() also its order (the flat buffer's)."""

    def __init__(self, cfg):
        super().__init__()
        c = resolve(cfg)
        self.config = c
        d, kind, bias = c.d_model, c.norm, c.norm != "rms"
        siamese = _streams(c) == 2
        if c.embed_norm > 0:
            self.embed_norm = Norm(d, kind, c.eps, bias)
        self.blocks = nn.ModuleList(Block(c, l) for l in range(c.n_layers))
        if c.final_norm > 0 and not (siamese and c.siamese_paper_fusion):
            self.ln_f = Norm(d, kind, c.eps, bias)
        if siamese:
            self.ln_y_f = Norm(d, kind, c.eps, bias)
            if not c.siamese_paper_fusion:
                self.ln_final_f = Norm(d, kind, c.eps, bias)

    def library_parameters(self):
        """(name, parameter) in the order of the library's tensor table and flat parameter
        buffer. named_parameters() has the same order except for a block's own parameters
        (SiameseNorm's c1, ReZero's resweight), which PyTorch lists first in its block (a
        module's own parameters come before its children's) and the library after the norms:
        c1, then the branch scales of attention and FFN (ls1, resweight, ls2)."""
        tail = {"c1": 1, "ls1": 2, "resweight": 2.5, "ls2": 3}

        def key(item):  # (position of the component, layer, rank in the layer's tail)
            parts = item[1][0].split(".")
            if parts[0] == "blocks":
                return (1, int(parts[1]), tail.get(parts[2], 0), item[0])
            return (0 if parts[0] == "embed_norm" else 2, 0, 0, item[0])
        named = sorted(enumerate(self.named_parameters()), key=key)
        return [np for _, np in named]

    @torch.no_grad()
    def load_flat(self, flat):
        """Copy the library's flat parameter buffer (n_params values, any 1-D tensor or
        sequence) into the parameters, tensor by tensor in the library's order."""
        flat = torch.as_tensor(flat).reshape(-1)
        off = 0
        for _, p in self.library_parameters():
            p.copy_(flat[off:off + p.numel()].reshape(p.shape))
            off += p.numel()
        if off != flat.numel():
            raise ValueError("the buffer has %d values, the stack %d" % (flat.numel(), off))

    def forward(self, E, hidden=None, trace=None, probs=None):
        """E: (B, T, d). hidden: an optional list that receives x_0 .. x_L (and, for
        SiameseNorm, (x_l, y_l) pairs), the states nb_stack_hidden reads. trace: an optional
        Trace that records the library's TRACE NAMES (nb_ctx.trace) of this forward and, once
        the loss is backpropagated, of the backward. probs: an optional list that receives
        each layer's attention probabilities (B, H, T, T)."""
        x = self.embed_norm(E) if hasattr(self, "embed_norm") else E
        y = x if _streams(self.config) == 2 else None
        if trace is not None:
            trace.grad("grad_in", E, -1, 0)
            trace("x0", x)
        for blk in self.blocks:
            blk.tracer, blk.probs = trace, probs
            if hidden is not None:
                hidden.append(x if y is None else (x, y))
            if trace is not None:  # the gradient of each stream's layer input (own nodes)
                x = trace.grad("blocks.%d.grad_x_in" % blk.l, x.view_as(x), blk.l, 2)
                if y is not None:
                    y = trace.grad("blocks.%d.grad_y_in" % blk.l, y.view_as(y), blk.l, 3)
            x, y = blk(x, y)
            blk.tracer = blk.probs = None
            if trace is not None:
                trace("blocks.%d.x" % blk.l, x)
                if y is not None:
                    trace("blocks.%d.y" % blk.l, y)
        if hidden is not None:
            hidden.append(x if y is None else (x, y))
        if y is None:
            out = self.ln_f(x) if hasattr(self, "ln_f") else x
        elif self.config.siamese_paper_fusion:
            out = x + self.ln_y_f(y)
        else:
            out = self.ln_final_f(self.ln_f(x) + self.ln_y_f(y))
        if trace is not None:
            trace("out", out)
        return out


class Trace:
    """The library's trace (nb_ctx.trace, TRACE NAMES in normblocks.h) from the twin: called
    with (name, tensor) during the forward; grad() hooks the gradients of the backward, which
    items() then lists in the library's order (layers L-1 down to 0; in a layer ffn.grad_out,
    attn.grad_out, grad_x_in, grad_y_in; grad_in last).
    items(): (name, float32 (rows, cols) tensor) in the library's order."""

    def __init__(self):
        self.fwd, self.bwd = [], {}

    def __call__(self, name, t):
        self.fwd.append((name, t.detach().reshape(-1, t.shape[-1]).float().clone()))

    def grad(self, name, t, layer, rank):
        """Record the gradient of t under name; layer -1 for the stack's input, rank the order
        within a layer (0 ffn.grad_out, 1 attn.grad_out, 2 grad_x_in, 3 grad_y_in)."""
        if t.requires_grad:
            key = (-layer if layer >= 0 else 1, rank)
            t.register_hook(lambda g: self.bwd.__setitem__(
                key, (name, g.detach().reshape(-1, g.shape[-1]).float().clone())))
        return t

    def items(self):
        return self.fwd + [self.bwd[k] for k in sorted(self.bwd)]


class _Transformer(Stack):
    """examples/train's "transformer": the byte embedding wte (times a learnable embed_scale,
    init sqrt(d), with train --embed-scale on: DyT's LLaMA code) and the stack."""

    def __init__(self, cfg, vocab, embed_scale=False):
        super().__init__(cfg)
        self.wte = nn.Embedding(vocab, cfg.d_model)
        if embed_scale:
            self.embed_scale = nn.Parameter(torch.full((1,), math.sqrt(cfg.d_model)))

    def embed(self, tok):
        e = self.wte(tok)
        return e * self.embed_scale if hasattr(self, "embed_scale") else e


class NormBlocksLM(nn.Module):
    """examples/train's model (model.c): tokens -> transformer.wte -> stack -> lm_head (untied,
    no bias) -> logits; loss = mean cross-entropy over the masked targets. Parameter names are
    the checkpoint's: transformer.wte.weight, transformer.<stack names>, lm_head.weight."""

    def __init__(self, cfg, vocab=VOCAB, embed_scale=False):
        super().__init__()
        self.transformer = _Transformer(cfg, vocab, embed_scale)
        self.lm_head = nn.Linear(cfg.d_model, vocab, bias=False)

    def forward(self, tok, trace=None):
        """tok: (B, T) integer bytes -> logits (B, T, vocab). trace: see Stack.forward. In
        precision bf16 the head is a bf16 GEMM (bf16_linear), as the trainer's."""
        return self._logits(tok, trace, 1.0)

    def _logits(self, tok, trace, grad_scale):
        h = self.transformer(self.transformer.embed(tok), trace=trace)
        if self.transformer.config.precision == "bf16":
            return bf16_linear(h, self.lm_head.weight, grad_scale=grad_scale)
        return self.lm_head(h)

    def loss(self, tok, mask=None, trace=None):
        """The trainer's loss of a batch: tok (B, T+1), inputs tok[:, :-1], targets tok[:, 1:];
        mask (B, T) bool selects the counted targets (None: all). The mean over them, with
        the log-sum-exp in float64 as model.c computes it. Returns (loss, count). In precision
        bf16 the head's backward rounds the gradient of the sum (softmax - onehot) and scales
        by 1/count after, as model.c."""
        tgt = tok[:, 1:]
        if mask is None:
            mask = torch.ones_like(tgt, dtype=torch.bool)
        n = int(mask.sum())
        if self.transformer.config.precision == "bf16":
            logits = self._logits(tok[:, :-1], trace, max(n, 1))
        else:
            logits = self(tok[:, :-1], trace=trace)
        z = logits[mask].double()
        nll = torch.logsumexp(z, dim=-1) - z.gather(1, tgt[mask][:, None])[:, 0]
        return (nll.sum() / n if n else nll.sum()), n


# ---- checkpoints of examples/train ------------------------------------------------------------


_ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
              "BF16": torch.bfloat16}


def write_safetensors(path, items, metadata=None, dtype="F32"):
    """Write (name, tensor) items as a safetensors file in the order given (the order nbdiff
    compares in), every tensor as dtype: F32 (what the trainer writes), F64, F16 or BF16."""
    header, off, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name, t in items:
        t = t.detach().to(_ST_DTYPES[dtype]).contiguous()
        if dtype == "BF16":  # numpy has no bfloat16: the same bytes as int16
            t = t.view(torch.int16)
        b = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """(tensors, metadata) of a safetensors file: name -> float32 tensor (from F32, F16 or BF16;
    F64 stays float64), and the __metadata__ strings."""
    with open(path, "rb") as f:
        buf = f.read()
    (hlen,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + hlen].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = memoryview(buf)[8 + hlen:]
    out = {}
    for name, e in header.items():
        if e["dtype"] not in _ST_DTYPES:
            raise ValueError("%s: tensor %s is %s, not F32, F64, F16 or BF16" %
                             (path, name, e["dtype"]))
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=_ST_DTYPES[e["dtype"]])
        t = t if e["dtype"] == "F64" else t.float()
        out[name] = t.reshape(e["shape"]) if e["shape"] else t
    return out, meta


# examples/train --schedule layer kinds (cli.c layer_kind)
def _layer_kind(k):
    pre, fn = Placement(input_norm=True), Placement(input_norm=True, residual_from_norm=True)
    kinds = {"pre": (pre, pre, 0), "post": (Placement(post_norm=True),) * 2 + (0,),
             "sandwich": (Placement(input_norm=True, output_norm=True),) * 2 + (0,),
             "normafter": (Placement(output_norm=True),) * 2 + (0,),
             "hybrid": (Placement(), fn, SITES_QKV), "qkvpre": (Placement(), pre, SITES_QKV),
             "prepost": (pre, fn, 0), "postpre": (fn, pre, 0)}
    if k not in kinds:
        raise ValueError("unknown schedule layer kind %r" % k)
    a, f, s = kinds[k]
    return LayerSpec(replace(a), replace(f), s)


def config_from_metadata(meta):
    """The StackConfig of a trainer checkpoint's __metadata__, as the trainer's make_desc
    builds it (preset name or custom schedule, then d, heads, d_ff, rope, --ffn, --norm)."""
    if int(meta.get("vocab_size", VOCAB)) != VOCAB:
        raise ValueError("vocab_size %s, expected %d" % (meta.get("vocab_size"), VOCAB))
    dims = dict(n_layers=int(meta["n_layers"]), d_model=int(meta["d_model"]),
                n_heads=int(meta["n_heads"]), n_kv_heads=int(meta["n_kv_heads"]),
                d_ff=int(meta["d_ff"]), rope=bool(int(meta["rope"])))
    if meta["preset"] == "custom":
        cfg = StackConfig(preset="default",
                          layers=[_layer_kind(k) for k in meta["schedule"].split(",")], **dims)
    else:
        cfg = StackConfig.from_name(meta["preset"], **dims)
    if meta["ffn"] == "gelu":
        cfg.ffn = "gelu_tanh"
    if meta["norm"] in ("layer", "dyt"):
        cfg.norm = meta["norm"]
    cfg.attn_bias = int(meta.get("attn_bias", "0"))  # checkpoints before the key had none
    return cfg


def load_checkpoint(path):
    """(model, metadata): a NormBlocksLM (float32, eval mode) with the parameters of a
    checkpoint written by examples/train (its Adam moments are ignored)."""
    tensors, meta = read_safetensors(path)
    model = NormBlocksLM(config_from_metadata(meta), embed_scale=meta.get("embed_scale") == "1")
    state = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    model.load_state_dict(state, strict=True)
    return model.eval(), meta


def text_val_batches(data, n_batches, B, T, val_frac=0.1):
    """The trainer's validation batches of a --data corpus (data.c val_batch): n_batches
    tensors (B, T+1) of bytes, fixed windows spread over the held-out tail."""
    n = len(data)
    min_val = max(int(val_frac * n), T + 2)
    n_train = n - min_val
    span = n - n_train - T - 1
    rows = n_batches * B
    out = []
    for k in range(n_batches):
        offs = [n_train + (span * (k * B + b) // (rows - 1) if rows > 1 else 0) for b in range(B)]
        out.append(torch.tensor([list(data[o:o + T + 1]) for o in offs], dtype=torch.long))
    return out


_M64 = (1 << 64) - 1


def _mix64(s):
    """splitmix64 (util.c mix64): (new state, output)."""
    s = (s + 0x9E3779B97F4A7C15) & _M64
    z = ((s ^ (s >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return s, z ^ (z >> 31)


def _hash3(a, b, c):
    """util.c hash3."""
    s = ((a * 0x9E3779B97F4A7C15) & _M64) ^ (((b + 0x632BE59BD9B4E019) * 0xD1B54A32D192ED03)
                                             & _M64) ^ \
        (((c + 0x8CB92BA72F3D8DD7) * 0xA24BAED4963EE407) & _M64)
    s, _ = _mix64(s & _M64)
    return _mix64(s)[1]


def text_train_batch(data, seed, step, B, T, val_frac=0.1):
    """The trainer's training batch of 0-based `step` on a --data corpus (data.c
    train_batch): (B, T+1) bytes, row b a window at a seeded offset of the training split."""
    n = len(data)
    n_train = n - max(int(val_frac * n), T + 2)
    rows = []
    for b in range(B):
        _, r = _mix64(_hash3(seed, step + 1, b + 1))
        off = r % (n_train - T)
        rows.append(list(data[off:off + T + 1]))
    return torch.tensor(rows, dtype=torch.long)


@torch.no_grad()
def text_eval_loss(model, meta, data, val_frac=0.1):
    """What `train --load CK --eval --data FILE` prints as val_loss: the mean loss over the
    checkpoint's eval_batches validation batches of batch x seq bytes."""
    tot, cnt = 0.0, 0
    for tok in text_val_batches(data, int(meta["eval_batches"]), int(meta["batch"]),
                                int(meta["seq"]), val_frac):
        loss, n = model.loss(tok)
        tot += float(loss) * n
        cnt += n
    return tot / cnt
