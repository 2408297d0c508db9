#!/usr/bin/python3
"""Generate the porting fixtures for tests/test_block_fixtures.c: stacks the official codes
compute, for the options that port them (gated attention, Derf, norm_gain / norm_bias,
gain_offset, embed_scale, SkipInit's per-sublayer scalars).

    /usr/bin/python3 tests/gen_porting_fixtures.py tests/fixtures

Writes <outdir>/blocks_porting.bin: the format and fields of blocks.bin (gen_block_fixtures.py,
whose draws, conditioning and writer this uses), computed by the PyTorch twin in float64 with
autograd. The independent check is the official code: each case's reference is a transcription
of the code the option ports (tests/nbfixture.py, "the codes a port starts from": the official
names, layouts and order of operations) run on the case's parameters mapped from the library's
tensor names to the official ones, and the twin must agree with it to 1e-12 (out) and 1e-10
(din and every parameter gradient, through the mapping) before anything is written:
  qwen3_gate_*      qiuzh20/gated_attention's Qwen3 decoder (Qwen3Attention with its headwise
                    or elementwise output gate, with and without q_norm/k_norm, MHA and GQA,
                    Qwen3MLP, pre-norm layers, the final norm): preset pre, attn_gate, sites
                    Q|K per head, eps 1e-6. The gate's rows: see qwen3_q_proj_rows.
  derf_nanogpt_*    zlab-princeton/Derf's Dynamic_erf in nanoGPT's Block (ln_1, ln_2, ln_f) with
                    its shared_scale on tok_emb + pos_emb: gpt2's structure with norm derf and
                    embed_scale 1. nanoGPT's MLP is nn.GELU(), the erf form: ffn GELU_ERF (the
                    gpt2 preset's tanh form is GPT-2's own). Derf's train.py sets bias = False
                    (no Linear biases; Dynamic_erf keeps its bias): attn_bias 0, ffn_bias -1;
                    the _bias case is GPTConfig's default bias = True (attn_bias 3, FFN biases).
  dyt_llama_gqa_L2  jiachenzhu/DyT's LLaMA (fms): LayerNormParameterized weight tanh(alpha x)
                    without bias, shared_scale on the embedding: preset dyt, norm_bias -1,
                    embed_scale 1; fms's RoPE rotates interleaved pairs: see dyt_llama_state.
  gemma2_*, gemma3_* Gemma's decoder layer (Gemma3RMSNorm x_hat (1 + w) everywhere; sandwich:
                    input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
                    post_feedforward_layernorm; Gemma 3's q_norm/k_norm): preset sandwich,
                    gain_offset 1, eps 1e-6 (Gemma 3: sites Q|K). Gemma 2's case has
                    query_pre_attn_scalar 6 != head_dim (softmax_scale 6^-0.5) and no logit
                    softcap (the library has none; attn_logit_softcapping None). The MLP is
                    Gemma's code with hidden_activation "silu" instead of its
                    "gelu_pytorch_tanh": the library's FFNs are SwiGLU and GELU, so the gate's
                    activation is the library's substitute; Gemma3MLP's structure, down(act(
                    gate(x)) * up(x)), is transcribed.
  skipinit_*        SkipInit's form of ReZero (De & Smith 2020, "Batch Normalization Biases
                    Residual Blocks Towards the Identity Function"; ReZero, Bachlechner et al.
                    2020), from the equations: x + a_attn MHA(x), then + a_ffn FFN(x), one
                    learnable scalar per sublayer: preset rezero with branch_scale SUBLAYER; and
                    on Pre-Norm with RMSNorm without weight (norm_gain -1): x + a N(..).
  olmo1_nonparam_L2 OLMo-1's non-parametric LayerNorm (allenai/OLMo model.py LayerNorm with
                    layer_norm_with_affine false: no weight, no bias) in its
                    OLMoSequentialBlock (gen_block_fixtures.direct_forward's Pre-Norm, whose
                    attention is OLMo's): preset pre, norm layer, norm_gain -1, norm_bias -1.
  gate_qkvc_post_L2 the gate with every site norm, C among them: C' = Nc(C) sigmoid(G) as
                    normblocks.h composes them (no official code has both; direct_forward
                    with nbfixture.attention's gate).
Shapes: d = 16, H = 4 (d_k 4), L = 2 (1 for two), B = 2, T = 5.

Before writing, self-checks: the q_proj row map is a permutation, equal to Qwen3-Next's
per-head interleave for MHA and not for GQA; fms's rotation of pair (2i, 2i+1) is the library's
rotate-half rotation after the row permutation, and not without it; each case's official
reference rejects the mistakes a port makes (the Qwen3-Next split on the GQA elementwise case,
the unpermuted q, k rows and the swapped [wg | w1] on DyT's LLaMA, the (1 + w) dropped on
Gemma's); and the twin's options against equivalent stacks: gain_offset with w is the stack
with gains 1 + w, embed_scale c is the input times c, SkipInit's two scalars equal are ReZero's
one, norm_gain / norm_bias -1 are gains 1 / biases 0, a zero gate (sigmoid 1/2) after the C norm
is W_o halved; and the twin refuses what nb_stack_init refuses.

The case names are printed; tests/test_block_fixtures.c hard-codes the same list
(porting_cases).
"""
import math
import os
from types import SimpleNamespace

import torch

import gen_block_fixtures as gbf
from gen_block_fixtures import QKVC, add_case, make_cfg
from nbfixture import (BRANCH_SCALAR, BRANCH_SUBLAYER, DERF, DYT, GATE_ELEMENTWISE,
                       GATE_HEADWISE, GELU_ERF, LAYER, RMS, SITE_K, SITE_Q, Writer,
                       apply_rope, dyt_llama_ref, fms_adjusted_qk, gemma_model_ref,
                       nanogpt_derf_ref, output_dir, qwen3_gated_model_ref, rope_sin_cos, twin,
                       twin_config)

# 13 cases of d = 16: 0.95 MB (a layer ~2.3 k values, every parameter stored with its gradient)
MAX_BYTES = 1_000_000
QK = SITE_Q | SITE_K
BIG = dict(d=16, H=4)


class Used(dict):
    """The library's tensors of a case, recording which ones a mapping reads: every one must
    reach the official code (a tensor left out would leave its gradient unchecked)."""

    def __init__(self, p):
        super().__init__(p)
        self.read = set()

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        return self[k] if k in self else default

    def check(self):
        assert self.read == set(self), sorted(set(self) - self.read)


def shape(cfg):
    d, H, Hkv = cfg["d"], cfg["H"], cfg["Hkv"]
    return d, H, Hkv, d // H, Hkv * (d // H), cfg["f"]


def gate_width(cfg):
    return {0: 0, GATE_HEADWISE: cfg["H"], GATE_ELEMENTWISE: cfg["d"]}[cfg.get("attn_gate", 0)]


# ---- gated attention: qiuzh20/gated_attention's Qwen3 ----------------------------------------


def qwen3_q_proj_rows(H, Hkv, dk, gate):
    """The official q_proj's rows as rows of the library's [Q | G] (att_proj's first d rows,
    then its last G rows: Q head h is rows h d_k .. h d_k + d_k - 1, its gate row h (headwise)
    or rows h d_k .. (elementwise), i.e. G row = d + that). qiuzh20/gated_attention groups by
    KV head: for KV group g = 0..Hkv-1 (query heads h = g G' + j, j < G' = H / Hkv) the rows
    [q of its G' heads (G' d_k) | their gates (G' rows headwise, G' d_k elementwise)]. So
        q_proj.weight = cat(W_Q, W_G)[idx]   and   cat(W_Q, W_G) = q_proj.weight[argsort(idx)]
    (the bias alike). Qwen3-Next's q_proj interleaves per query head, [q_h | g_h] for every h:
    the same for MHA (G' = 1), not for GQA elementwise."""
    d, group = H * dk, H // Hkv
    w = dk if gate == GATE_ELEMENTWISE else 1
    idx = []
    for g in range(Hkv):
        heads = range(g * group, (g + 1) * group)
        for h in heads:
            idx += range(h * dk, (h + 1) * dk)
        for h in heads:
            idx += range(d + h * w, d + (h + 1) * w)
    return idx


def qwen3_next_q_proj_rows(H, dk):
    """Qwen3-Next's layout (Qwen3NextAttention: q_proj viewed (..., H, 2 d_k), chunked): per
    query head [q_h | g_h], elementwise only; for the self-checks."""
    d, idx = H * dk, []
    for h in range(H):
        idx += list(range(h * dk, (h + 1) * dk)) + list(range(d + h * dk, d + (h + 1) * dk))
    return idx


def qwen3_state(cfg, p, rows=None):
    """The official state dict of a qwen3 case from the library's tensors p: per layer
    self_attn.q_proj (the Q and G rows, qwen3_q_proj_rows), k_proj, v_proj (att_proj's K, V
    rows), o_proj = attn_out, q_norm / k_norm, input_layernorm = attn_norm,
    post_attention_layernorm = ff_norm, mlp.up_proj / gate_proj = ff_proj's [u | z] halves,
    down_proj = ff_out; model.norm = ln_f. rows: another q_proj row map (self-checks)."""
    d, H, Hkv, dk, kv, f = shape(cfg)
    idx = rows or qwen3_q_proj_rows(H, Hkv, dk, cfg.get("attn_gate", 0))
    sd = {}
    for l in range(cfg["L"]):
        b, o = "blocks.%d." % l, "model.layers.%d." % l
        for kind in ("weight", "bias"):
            if b + "att_proj." + kind not in p:
                continue
            W = p[b + "att_proj." + kind]
            sd[o + "self_attn.q_proj." + kind] = torch.cat((W[:d], W[d + 2 * kv:]))[idx]
            sd[o + "self_attn.k_proj." + kind] = W[d:d + kv]
            sd[o + "self_attn.v_proj." + kind] = W[d + kv:d + 2 * kv]
            sd[o + "self_attn.o_proj." + kind] = p[b + "attn_out." + kind]
        if cfg["sites"] & QK:
            sd[o + "self_attn.q_norm.weight"] = p[b + "q_norm.weight"]
            sd[o + "self_attn.k_norm.weight"] = p[b + "k_norm.weight"]
        sd[o + "input_layernorm.weight"] = p[b + "attn_norm.weight"]
        sd[o + "post_attention_layernorm.weight"] = p[b + "ff_norm.weight"]
        hf_mlp_state(sd, o, p, b, f)
    sd["model.norm.weight"] = p["ln_f.weight"]
    return sd


def hf_mlp_state(sd, o, p, b, f):
    # Llama-style MLPs: ff_proj rows [u | z] are [up_proj | gate_proj], ff_out is down_proj
    W = p[b + "ff_proj.weight"]
    sd[o + "mlp.up_proj.weight"], sd[o + "mlp.gate_proj.weight"] = W[:f], W[f:]
    sd[o + "mlp.down_proj.weight"] = p[b + "ff_out.weight"]


def qwen3_config(cfg):
    d, H, Hkv, dk, _, _ = shape(cfg)
    gate = cfg.get("attn_gate", 0)
    return SimpleNamespace(num_hidden_layers=cfg["L"], hidden_size=d, num_attention_heads=H,
                           num_key_value_heads=Hkv, head_dim=dk, rms_norm_eps=cfg["eps"],
                           rope_theta=cfg["theta"], use_qk_norm=bool(cfg["sites"] & QK),
                           headwise_attn_output_gate=gate == GATE_HEADWISE,
                           elementwise_attn_output_gate=gate == GATE_ELEMENTWISE,
                           qkv_bias=bool(cfg["attn_bias"]), hidden_act="silu")


def qwen3_ref(cfg, p, E, rows=None):
    B, T, d = cfg["B"], cfg["T"], cfg["d"]
    pu = Used(p)
    out, _ = qwen3_gated_model_ref(qwen3_state(cfg, pu, rows), E.reshape(B, T, d),
                                   qwen3_config(cfg))
    pu.check()
    return out.reshape(B * T, d)


# ---- Gemma 2 / 3 --------------------------------------------------------------------------


def gemma_state(cfg, p):
    """Gemma's names: self_attn.{q,k,v,o}_proj (att_proj's Q | K | V rows, attn_out), Gemma 3's
    self_attn.q_norm / k_norm (sites Q|K), the sandwich's input_layernorm = attn_norm,
    post_attention_layernorm = attn_out_norm, pre_feedforward_layernorm = ff_norm,
    post_feedforward_layernorm = ff_out_norm, the MLP as Llama's, model.norm = ln_f; every
    norm weight is Gemma's stored w (gain_offset: the library's is too)."""
    d, H, Hkv, dk, kv, f = shape(cfg)
    sd = {}
    for l in range(cfg["L"]):
        b, o = "blocks.%d." % l, "model.layers.%d." % l
        W = p[b + "att_proj.weight"]
        sd[o + "self_attn.q_proj.weight"] = W[:d]
        sd[o + "self_attn.k_proj.weight"] = W[d:d + kv]
        sd[o + "self_attn.v_proj.weight"] = W[d + kv:]
        sd[o + "self_attn.o_proj.weight"] = p[b + "attn_out.weight"]
        if cfg["sites"] & QK:
            sd[o + "self_attn.q_norm.weight"] = p[b + "q_norm.weight"]
            sd[o + "self_attn.k_norm.weight"] = p[b + "k_norm.weight"]
        for lib, hf in (("attn_norm", "input_layernorm"),
                        ("attn_out_norm", "post_attention_layernorm"),
                        ("ff_norm", "pre_feedforward_layernorm"),
                        ("ff_out_norm", "post_feedforward_layernorm")):
            sd[o + hf + ".weight"] = p[b + lib + ".weight"]
        hf_mlp_state(sd, o, p, b, f)
    sd["model.norm.weight"] = p["ln_f.weight"]
    return sd


def gemma_config(cfg):
    d, H, Hkv, dk, _, _ = shape(cfg)
    s = cfg.get("softmax_scale") or 1 / math.sqrt(dk)
    return SimpleNamespace(num_hidden_layers=cfg["L"], hidden_size=d, num_attention_heads=H,
                           num_key_value_heads=Hkv, head_dim=dk, rms_norm_eps=cfg["eps"],
                           rope_theta=cfg["theta"], use_qk_norm=bool(cfg["sites"] & QK),
                           query_pre_attn_scalar=1 / (s * s), attn_logit_softcapping=None,
                           hidden_activation="silu")


def gemma_ref(cfg, p, E, state=gemma_state):
    B, T, d = cfg["B"], cfg["T"], cfg["d"]
    pu = Used(p)
    out, _ = gemma_model_ref(state(cfg, pu), E.reshape(B, T, d), gemma_config(cfg))
    pu.check()
    return out.reshape(B * T, d)


# ---- Derf in nanoGPT ------------------------------------------------------------------------


def nanogpt_state(cfg, p):
    """nanoGPT's names: transformer.h.<l>.ln_1 = attn_norm (Dynamic_erf's alpha, shift =
    alpha_shift[0], [1]; weight, bias), attn.c_attn = att_proj (its [q | k | v] rows, MHA),
    attn.c_proj = attn_out, ln_2 = ff_norm, mlp.c_fc = ff_proj, mlp.c_proj = ff_out (biases
    with them), transformer.ln_f = ln_f, shared_scale = embed_scale."""
    sd = {"shared_scale": p["embed_scale"]}

    def derf(lib, off):
        a = p[lib + ".alpha_shift"]
        sd[off + ".alpha"], sd[off + ".shift"] = a[0], a[1]
        sd[off + ".weight"], sd[off + ".bias"] = p[lib + ".weight"], p[lib + ".bias"]
    for l in range(cfg["L"]):
        b, o = "blocks.%d." % l, "transformer.h.%d." % l
        derf(b + "attn_norm", o + "ln_1")
        derf(b + "ff_norm", o + "ln_2")
        for lib, off in (("att_proj", "attn.c_attn"), ("attn_out", "attn.c_proj"),
                         ("ff_proj", "mlp.c_fc"), ("ff_out", "mlp.c_proj")):
            for kind in ("weight", "bias"):
                if b + lib + "." + kind in p:
                    sd[o + off + "." + kind] = p[b + lib + "." + kind]
    derf("ln_f", "transformer.ln_f")
    return sd


def derf_ref(cfg, p, E):
    B, T, d = cfg["B"], cfg["T"], cfg["d"]
    pu = Used(p)
    out, _ = nanogpt_derf_ref(nanogpt_state(cfg, pu), E.reshape(B, T, d), cfg["L"], cfg["H"])
    pu.check()
    return out.reshape(B * T, d)


# ---- DyT's LLaMA (fms) ----------------------------------------------------------------------


def fms_rope_rows(dk):
    """fms rotates the interleaved pairs (2i, 2i + 1) of a head, the library (NeoX, HF Llama)
    the pairs (i, i + d_k/2): fms's row 2i of a head is the library's row i, its row 2i + 1 the
    library's row i + d_k/2 (the permutation transformers' Llama conversion undoes). Returns the
    map within a head: fms row r = library row idx[r]."""
    return [i // 2 + (dk // 2) * (i % 2) for i in range(dk)]


def dyt_llama_state(cfg, p, permute=True, swap=False):
    """DyT's LLaMA names: layers.<l>.ln = attn_norm (alpha, weight; no bias), ff_ln = ff_norm,
    attn.in_proj.qkv_fused = att_proj's [Q | K | V] with the Q and K rows of every head in fms's
    interleaved order (fms_rope_rows; V as is), attn.dense = attn_out,
    ff_sub_layer.wg1_fused = [wg | w1] = ff_proj's [z | u] (the library's halves swapped),
    ff_sub_layer.w2 = ff_out, dec_norm = ln_f, shared_scale = embed_scale. permute=False,
    swap=True: the mistakes the self-checks show it rejects."""
    d, H, Hkv, dk, kv, f = shape(cfg)
    head = fms_rope_rows(dk) if permute else list(range(dk))
    rows = [h * dk + r for h in range(H + Hkv) for r in head] + list(range(d + kv, d + 2 * kv))
    sd = {"shared_scale": p["embed_scale"]}
    for l in range(cfg["L"]):
        b, o = "blocks.%d." % l, "layers.%d." % l
        for lib, off in (("attn_norm", "ln"), ("ff_norm", "ff_ln")):
            sd[o + off + ".alpha"] = p[b + lib + ".alpha"]
            sd[o + off + ".weight"] = p[b + lib + ".weight"]
        sd[o + "attn.in_proj.qkv_fused.weight"] = p[b + "att_proj.weight"][rows]
        sd[o + "attn.dense.weight"] = p[b + "attn_out.weight"]
        W = p[b + "ff_proj.weight"]
        sd[o + "ff_sub_layer.wg1_fused.weight"] = W if swap else torch.cat((W[f:], W[:f]))
        sd[o + "ff_sub_layer.w2.weight"] = p[b + "ff_out.weight"]
    sd["dec_norm.alpha"], sd["dec_norm.weight"] = p["ln_f.alpha"], p["ln_f.weight"]
    return sd


def dyt_llama_ref_of(cfg, p, E, **mistakes):
    B, T, d = cfg["B"], cfg["T"], cfg["d"]
    pu = Used(p)
    out, _ = dyt_llama_ref(dyt_llama_state(cfg, pu, **mistakes), E.reshape(B, T, d), cfg["L"],
                           cfg["H"], cfg["Hkv"], cfg["theta"])
    pu.check()
    return out.reshape(B * T, d)


# ---- SkipInit / ReZero per sublayer ---------------------------------------------------------


def skipinit_ref(cfg, p, E):
    """x_{l+1} = x_l + a f(x_l) with a learnable scalar a per residual branch (SkipInit; ReZero's
    x + a F(x)): x + a_attn MHA(x), then + a_ffn FFN(x) (preset rezero: no norms, no final
    norm); on Pre-Norm (preset pre) x + a_attn MHA(N(x)), + a_ffn FFN(N(x)) and ln_f. MHA and
    FFN are gen_block_fixtures' (OLMo's attention, SwiGLU)."""
    pu = Used(p)
    X, pre = E, cfg["preset"] == "PRE"
    for l in range(cfg["L"]):
        b = "blocks.%d." % l
        h = gbf.bnorm(cfg, pu, b + "attn_norm", X) if pre else X
        X = X + pu[b + "attn_resweight"] * gbf.attention(cfg, pu, b, h, 0, gbf.PER_HEAD, [])
        h = gbf.bnorm(cfg, pu, b + "ff_norm", X) if pre else X
        X = X + pu[b + "ff_resweight"] * gbf.ffn(cfg, pu, b, h)
    out = gbf.bnorm(cfg, pu, "ln_f", X) if gbf.has_final_norm(cfg) else X
    pu.check()
    return out


def direct_ref(cfg, p, E):
    # gen_block_fixtures' transcription of the preset (OLMo's block; the gate as documented)
    pu = Used(p)
    out = gbf.direct_forward(cfg, pu, E)
    pu.check()
    return out


# ---- cases ----------------------------------------------------------------------------------


def cases():
    """(name, cfg, reference): the descriptions (gen_block_fixtures.make_cfg and the porting
    fields) and the official forward each is checked against."""
    def qwen3(name, L, Hkv, gate, qk, bias=0):
        cfg = dict(make_cfg("PRE", L, Hkv=Hkv, sites=QK if qk else 0, attn_bias=bias, **BIG),
                   eps=1e-6, attn_gate=gate)
        return name, cfg, qwen3_ref

    def derf(name, L, bias):
        cfg = dict(make_cfg("PRE", L, Hkv=4, norm=DERF, ffn_type=GELU_ERF, rope=0,
                            attn_bias=3 if bias else 0, **BIG), embed_scale_on=1)
        if not bias:
            cfg["ffn_bias"] = -1
        return name, cfg, derf_ref

    def gemma(name, Hkv, qk, softmax_scale=0.0):
        cfg = dict(make_cfg("SANDWICH", 2, Hkv=Hkv, sites=QK if qk else 0, **BIG), eps=1e-6,
                   gain_offset=1)
        if softmax_scale:
            cfg["softmax_scale"] = softmax_scale
        return name, cfg, gemma_ref

    return [
        qwen3("qwen3_gate_head_qk_gqa_L2", 2, 2, GATE_HEADWISE, True),
        qwen3("qwen3_gate_elem_qk_gqa_L2", 2, 2, GATE_ELEMENTWISE, True),
        qwen3("qwen3_gate_head_mha_bias_L2", 2, 4, GATE_HEADWISE, False, bias=3),
        qwen3("qwen3_gate_elem_mha_L1", 1, 4, GATE_ELEMENTWISE, False),
        ("gate_qkvc_post_L2", dict(make_cfg("SITES_POST", 2, Hkv=2, sites=QKVC, **BIG),
                                   attn_gate=GATE_HEADWISE), direct_ref),
        derf("derf_nanogpt_L2", 2, False),
        derf("derf_nanogpt_bias_L1", 1, True),
        ("dyt_llama_gqa_L2", dict(make_cfg("DYT", 2, Hkv=2, norm=DYT, **BIG), norm_bias=-1,
                                  embed_scale_on=1), dyt_llama_ref_of),
        gemma("gemma2_sandwich_gqa_L2", 2, False, softmax_scale=6 ** -0.5),
        gemma("gemma3_sandwich_qk_mqa_L2", 1, True),
        ("skipinit_rezero_L2", dict(make_cfg("REZERO", 2, Hkv=2, **BIG),
                                    branch_scale=BRANCH_SUBLAYER), skipinit_ref),
        ("skipinit_pre_rms_nogain_L2", dict(make_cfg("PRE", 2, Hkv=1, **BIG), norm_gain=-1,
                                            branch_scale=BRANCH_SUBLAYER), skipinit_ref),
        ("olmo1_nonparam_L2", dict(make_cfg("PRE", 2, Hkv=4, norm=LAYER, **BIG), norm_gain=-1,
                                   norm_bias=-1), direct_ref),
    ]


# ---- self-checks ----------------------------------------------------------------------------


def fwd(cfg, p, E, **fields):
    """The twin's output on E (B*T, d) with the parameters p (more than the stack's allowed)."""
    stack = gbf.twin_stack(cfg, **fields)
    gbf.load(stack, p, extra_ok=True)
    return stack(E.reshape(cfg["B"], cfg["T"], cfg["d"])).reshape(-1, cfg["d"])


def differs(a, b):
    return not torch.allclose(a, b, rtol=0, atol=1e-6)


def check_rows():
    """The q_proj map is a permutation; Qwen3-Next's per-head layout is the same for MHA, not
    for GQA; fms's interleaved rotation is the library's after fms_rope_rows, not before."""
    for H, Hkv in ((4, 4), (4, 2), (4, 1)):
        for gate, G in ((GATE_HEADWISE, H), (GATE_ELEMENTWISE, 4 * H)):
            idx = qwen3_q_proj_rows(H, Hkv, 4, gate)
            assert sorted(idx) == list(range(4 * H + G)), (H, Hkv, gate)
        same = qwen3_q_proj_rows(H, Hkv, 4, GATE_ELEMENTWISE) == qwen3_next_q_proj_rows(H, 4)
        assert same == (H == Hkv), (H, Hkv)
    q, k = torch.randn(2, 5, 3, 8), torch.randn(2, 5, 1, 8)
    idx = fms_rope_rows(8)
    fq, fk = fms_adjusted_qk(q[..., idx], k[..., idx], 10000.0)
    sin, cos = rope_sin_cos(5, 8, 10000.0)
    lib = apply_rope(q.transpose(1, 2), sin, cos).transpose(1, 2)
    assert torch.allclose(fq, lib[..., idx], rtol=0, atol=1e-12)
    assert differs(fms_adjusted_qk(q, k, 10000.0)[0], lib)


def check_references():
    """Each case's official reference agrees with the twin on a draw, and rejects the mistakes a
    port makes: the Qwen3-Next split on GQA elementwise gates, DyT's LLaMA without the RoPE row
    permutation or with fms's [wg | w1] taken as the library's [u | z], Gemma's weights taken as
    gains (the 1 + w dropped: the state dict holding 1 + w is the reference's other stack)."""
    torch.manual_seed(7)
    by = {name: (cfg, ref) for name, cfg, ref in cases()}
    for name, (cfg, ref) in by.items():
        p = gbf.draw_params(cfg)
        E = torch.randn(cfg["B"] * cfg["T"], cfg["d"])
        assert torch.allclose(ref(cfg, p, E), fwd(cfg, p, E), rtol=0, atol=1e-12), name
    cfg, _ = by["qwen3_gate_elem_qk_gqa_L2"]
    p, E = gbf.draw_params(cfg), torch.randn(10, 16)
    assert differs(qwen3_ref(cfg, p, E, rows=qwen3_next_q_proj_rows(4, 4)), fwd(cfg, p, E))
    cfg, _ = by["dyt_llama_gqa_L2"]
    p, E = gbf.draw_params(cfg), torch.randn(10, 16)
    assert differs(dyt_llama_ref_of(cfg, p, E, permute=False), fwd(cfg, p, E))
    assert differs(dyt_llama_ref_of(cfg, p, E, swap=True), fwd(cfg, p, E))
    cfg, _ = by["gemma3_sandwich_qk_mqa_L2"]
    p, E = gbf.draw_params(cfg), torch.randn(10, 16)

    def gains_as_is(c, q):  # a port that reads Gemma's w as the gain: 1 + (w - 1) = w
        sd = gemma_state(c, q)
        return {k: v - 1 if "norm" in k else v for k, v in sd.items()}
    assert differs(gemma_ref(cfg, p, E, state=gains_as_is), fwd(cfg, p, E))


def check_twin_options():
    """The twin's porting options against stacks that compute the same."""
    torch.manual_seed(8)
    E = torch.randn(10, 16)
    # gain_offset: w in every gain (block and site norms) is the stack with gains 1 + w
    g3 = dict(make_cfg("SANDWICH", 2, Hkv=1, sites=QK, **BIG), eps=1e-6, gain_offset=1)
    p = gbf.draw_params(g3)
    one = {k: 1 + v if k.endswith(("norm.weight", "ln_f.weight")) else v
           for k, v in p.items()}
    assert torch.allclose(fwd(g3, p, E), fwd(g3, one, E, norm=dict(gain_offset=0)), rtol=0,
                          atol=1e-12)
    # embed_scale c: the input times c (before the embedding norm: Peri-LN has one)
    per = dict(make_cfg("PERILN", 2, Hkv=2, **BIG), embed_scale_on=1)
    p = gbf.draw_params(per)
    assert torch.allclose(fwd(per, p, E),
                          fwd(per, p, p["embed_scale"] * E, norm=dict(embed_scale=0)),
                          rtol=0, atol=1e-12)
    # SkipInit's scalars, equal, are ReZero's one per layer (also on a Pre-Norm preset)
    for pr in ("REZERO", "PRE"):
        sk = dict(make_cfg(pr, 2, Hkv=2, **BIG), branch_scale=BRANCH_SUBLAYER)
        p = gbf.draw_params(sk)
        for l in range(2):
            p["blocks.%d.ff_resweight" % l] = p["blocks.%d.attn_resweight" % l]
            p["blocks.%d.resweight" % l] = p["blocks.%d.attn_resweight" % l]
        assert torch.allclose(fwd(sk, p, E), fwd(sk, p, E, residual=dict(branch_scale="scalar")),
                              rtol=0, atol=1e-12), pr
    # norm.gain / norm.bias -1: gains 1, biases 0 (every block norm, the final one too)
    for norm in (LAYER, DYT, DERF, RMS):
        c = dict(make_cfg("PRE", 2, Hkv=2, norm=norm, **BIG))
        p = gbf.draw_params(c)
        q = {k: torch.ones_like(v) if k.endswith("norm.weight") or k == "ln_f.weight" else
             torch.zeros_like(v) if k.endswith("norm.bias") or k == "ln_f.bias" else v
             for k, v in p.items()}
        off = dict(gain=-1) if norm == RMS else dict(gain=-1, bias=-1)
        assert torch.allclose(fwd(c, q, E), fwd(c, p, E, norm=off), rtol=0, atol=1e-12), norm
    # a zero gate (sigmoid 1/2, after the C norm) is W_o halved, on every site norm
    for gate in (GATE_HEADWISE, GATE_ELEMENTWISE):
        c = dict(make_cfg("SITES_POST", 2, Hkv=2, sites=QKVC, **BIG), attn_gate=gate)
        p = gbf.draw_params(c)
        q = dict(p)
        for l in range(2):
            b = "blocks.%d." % l
            q[b + "att_proj.weight"] = p[b + "att_proj.weight"].clone()
            q[b + "att_proj.weight"][32:] = 0  # the G rows after Q | K | V (16 + 2 * 8)
            p[b + "att_proj.weight"] = p[b + "att_proj.weight"][:32]
            p[b + "attn_out.weight"] = 0.5 * p[b + "attn_out.weight"]
        assert torch.allclose(fwd(c, q, E), fwd(c, p, E, attn=dict(gate="")), rtol=0,
                              atol=1e-12)


def check_refusals():
    """The twin refuses what nb_stack_init refuses (nb__stack_norms, the gain_offset check), and
    the Hugging Face export the options no such class computes."""
    base = twin_config(make_cfg("PRE", 2, Hkv=2, **BIG), "pre")
    bad = [dict(norm=dict(bias=-1)), dict(norm=dict(type="l2", gain=-1)),
           dict(norm=dict(gain=1)), dict(norm=dict(bias=-2)), dict(norm=dict(gain_offset=2)),
           dict(norm=dict(embed_scale=2)), dict(residual=dict(branch_scale="bogus")),
           dict(attn=dict(gate="rowwise")),
           dict(preset="siamese", residual=dict(branch_scale="sublayer")),
           dict(preset="default", residual=dict(branch_scale="scalar"),
                layers=[twin.LayerSpec(twin.Placement(input_norm=True),
                                       twin.Placement(input_norm=True))] * 2),
           dict(preset="none", norm=dict(gain_offset=1)),
           dict(preset="ngpt", n_kv_heads=4, norm=dict(type="l2", gain_offset=1))]
    for fields in bad:
        try:
            twin.Stack(base.with_fields(**fields))
        except ValueError:
            continue
        raise AssertionError("the twin accepts %s" % fields)
    twin.Stack(base.with_fields(norm=dict(type="layer", bias=-1, gain=-1)))  # OLMo-1's
    # and no Hugging Face class is said to compute a gated stack or one with Gemma's offset
    assert twin.hf_family(base) == "llama"
    for fields in (dict(attn=dict(gate="headwise")), dict(norm=dict(gain_offset=1))):
        try:
            twin.hf_family(base.with_fields(**fields))
        except ValueError:
            continue
        raise AssertionError("hf_family accepts %s" % fields)


def main():
    outdir = output_dir("gen_porting_fixtures.py")
    torch.set_default_dtype(torch.float64)
    check_rows()
    check_references()
    check_twin_options()
    check_refusals()
    print("self-checks passed")
    w = Writer(MAX_BYTES)
    report = []
    all_cases = cases()
    gbf.check_header_keys(cfg["preset"] for _, cfg, _ in all_cases)
    for name, cfg, ref in all_cases:
        add_case(w, name, cfg, report, reference=ref)
    for name, pr, L, d, H, Hkv, npar, nbytes, m, worst, k in report:
        print("  %-28s %-10s L=%d d=%-2d H=%d Hkv=%d %2d params %6d bytes  f32 %.2f (%s)%s" %
              (name, pr, L, d, H, Hkv, npar, nbytes, m, worst, "" if k == 0 else
               " [draw %d]" % k))
    path = os.path.join(outdir, "blocks_porting.bin")
    n = w.write(path)
    print("wrote %s: %d cases, %d tensors, %d bytes" % (path, len(report), len(w.records), n))


if __name__ == "__main__":
    main()
