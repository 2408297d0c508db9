"""nbfixture.py - what the PyTorch fixture generators share: the fixture file format, the codes
stored in the fixtures, the way to the PyTorch twin, and direct transcriptions of the norms,
RoPE and attention.

The fixtures' values come from the twin (examples/pytorch/normblocks_twin.py, the library's
model written as an nn.Module). The transcriptions here are the generators' independent check
of it: the original codes' equations written out once more with plain float64 torch ops (OLMo's
fused projection and norms, NeoX RoPE through sin/cos tables, GQA by repeated KV heads,
DeepSeek's mHC reference functions, mHC-lite's mixture of permutation matrices and HC's
Algorithm 2, DenseFormer's depth-weighted average, Attention Residuals' readers token by token,
modded-nanogpt's U-Net skips and x_0 re-injection by index and its value embeddings' mix term
by term, NVIDIA/ngpt's Block; the gated
Qwen3, Derf's nanoGPT, DyT's LLaMA and Gemma's decoder as their codes have them), and every
generator asserts that the twin agrees with them before it writes anything. Nothing here knows
how normblocks computes anything.

Imported by tests/gen_fixtures.py, tests/gen_sublayer_fixtures.py, tests/gen_block_fixtures.py,
tests/gen_porting_fixtures.py and tests/test_twin_fixtures.py; run as scripts, they find it
through their own directory, which Python puts first on sys.path.

File format (little-endian), read by tests/fixture.h:
    magic "NBFX0001" (8 bytes); uint32 count; count records of
    uint32 name_len, name bytes (no NUL), uint32 ndim, uint32 dims[ndim], float64 data[prod(dims)]
Scalars are 1-element tensors (dims = [1]). Names are "<case>.<field>".
"""
import itertools
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "pytorch"))
import normblocks_twin as twin  # noqa: E402

MAGIC = b"NBFX0001"

# codes stored in the fixtures (and the C tests' mapping of them)
RMS, LAYER, DYT, L2, DERF = 1, 2, 3, 4, 5  # norm kind (nb_norm_type)
SWIGLU, GELU_TANH, GELU_ERF = 1, 2, 3  # FFN type
SITE_Q, SITE_K, SITE_V, SITE_C = 1, 2, 4, 8  # attention norm sites (NB_SITE_*)
SITES = (("q", SITE_Q), ("k", SITE_K), ("v", SITE_V), ("c", SITE_C))
PER_HEAD, FULL = 1, 2  # site norm width


class Writer:
    """Collects named float64 tensors and writes them as one NBFX0001 file. max_bytes: the
    file must stay below it (None: no limit)."""

    def __init__(self, max_bytes=None):
        self.records = []
        self.names = set()
        self.max_bytes = max_bytes

    def add(self, name, t):
        if not torch.is_tensor(t):
            t = torch.tensor([float(t)], dtype=torch.float64)
        t = t.detach().to(torch.float64).contiguous()
        if t.dim() == 0:
            t = t.reshape(1)
        assert 1 <= t.dim() <= 4, name
        assert len(name.encode()) < 64, name
        assert name not in self.names, name
        assert torch.isfinite(t).all(), name
        self.names.add(name)
        self.records.append((name, t))

    def size(self):
        """Bytes the file will have."""
        n = 12
        for name, t in self.records:
            n += 8 + len(name.encode()) + 4 * t.dim() + 8 * t.numel()
        return n

    def case_names(self):
        """The "<case>" parts of the names, in the order the cases were added."""
        cases = []
        for name, _ in self.records:
            c = name.split(".")[0]
            if c not in cases:
                cases.append(c)
        return cases

    def write(self, path):
        out = bytearray(MAGIC)
        out += struct.pack("<I", len(self.records))
        for name, t in self.records:
            nb = name.encode()
            out += struct.pack("<I", len(nb)) + nb
            out += struct.pack("<I", t.dim())
            out += struct.pack("<%dI" % t.dim(), *t.shape)
            vals = t.flatten().tolist()
            out += struct.pack("<%dd" % len(vals), *vals)
        assert len(out) == self.size()
        if self.max_bytes is not None:
            assert len(out) < self.max_bytes, "%s would be %d bytes" % (path, len(out))
        with open(path, "wb") as f:
            f.write(bytes(out))
        return len(out)


def read_nbfx(path):
    """name -> float64 tensor of an NBFX0001 file (the format above)."""
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:8] == MAGIC, path
    (count,), pos, out = struct.unpack_from("<I", buf, 8), 12, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<I", buf, pos)
        name = buf[pos + 4:pos + 4 + n].decode()
        pos += 4 + n
        (ndim,) = struct.unpack_from("<I", buf, pos)
        dims = struct.unpack_from("<%dI" % ndim, buf, pos + 4)
        pos += 4 + 4 * ndim
        numel = math.prod(dims)
        vals = struct.unpack_from("<%dd" % numel, buf, pos)
        pos += 8 * numel
        out[name] = torch.tensor(vals, dtype=torch.float64).reshape(dims)
    return out


NORM_KINDS = {RMS: "rms", LAYER: "layer", DYT: "dyt", L2: "l2", DERF: "derf"}
FFN_TYPES = {SWIGLU: "swiglu", GELU_TANH: "gelu_tanh", GELU_ERF: "gelu_erf"}
# gated attention's output gate (nb_attn_gate) and the branch scales (nb_branch_scale)
GATE_HEADWISE, GATE_ELEMENTWISE = 1, 2
GATES = {0: "", GATE_HEADWISE: "headwise", GATE_ELEMENTWISE: "elementwise"}
# attention sinks (nb_attn_sink)
SINK_LEARNED, SINK_OFF_BY_ONE = 1, 2
SINKS = {0: "", SINK_LEARNED: "learned", SINK_OFF_BY_ONE: "off_by_one"}
BRANCH_SCALAR, BRANCH_CHANNEL, BRANCH_INTERP, BRANCH_SUBLAYER = 1, 2, 3, 4
BRANCH_SCALES = {0: "", BRANCH_SCALAR: "scalar", BRANCH_CHANNEL: "channel",
                 BRANCH_INTERP: "interp", BRANCH_SUBLAYER: "sublayer"}
# hyper-connections (nb_hyper; 0 = the preset's)
HYPER_NONE, HYPER_MHC, HYPER_HC, HYPER_IDENTITY, HYPER_MHC_LITE = 1, 2, 3, 4, 5
HYPER_KINDS = {0: "", HYPER_NONE: "none", HYPER_MHC: "mhc", HYPER_HC: "hc",
               HYPER_IDENTITY: "identity", HYPER_MHC_LITE: "mhc_lite"}


def twin_config(s, preset):
    """The twin's StackConfig of a stack case: s holds the fields a block fixture stores (L, d,
    H, Hkv, f, sites, mixln_alpha, norm, eps, ffn, rope, theta, siamese_*; the optional
    attn_bias, value_residual, dwa, dwa_dilation, dwa_period, attn_res, attn_res_block,
    unet_skips, reinject_x0, value_embeds, hyper, hyper_streams, hyper_static,
    hyper_sinkhorn, depth_alpha, depth_base, interp_init, qk_scale, softmax_scale,
    ffn_in_scale, and the porting options attn_gate, norm_gain, norm_bias, gain_offset,
    embed_scale_on (embed_scale: the parameter's name), branch_scale, ffn_bias; attn_sink,
    clip_qkv, softcap; the fixtures' 0.1 names), preset is the library's preset key."""
    return twin.StackConfig(
        preset=preset, n_layers=int(s["L"]), d_model=int(s["d"]), n_heads=int(s["H"]),
        n_kv_heads=int(s["Hkv"]), mixln_alpha=float(s["mixln_alpha"]),
        norm=twin.NormConfig(
            type=NORM_KINDS[int(s["norm"])], eps=float(s["eps"]),
            gain=int(s.get("norm_gain", 0)), bias=int(s.get("norm_bias", 0)),
            gain_offset=int(s.get("gain_offset", 0)),
            embed_scale=int(s.get("embed_scale_on", 0))),
        attn=twin.AttnConfig(
            sites=int(s["sites"]), bias=int(s.get("attn_bias", 0)), rope=bool(s["rope"]),
            rope_theta=float(s["theta"]), qk_scale=int(s.get("qk_scale", 0)),
            softmax_scale=float(s.get("softmax_scale", 0)),
            gate=GATES[int(s.get("attn_gate", 0))], sink=SINKS[int(s.get("attn_sink", 0))],
            clip_qkv=float(s.get("clip_qkv", 0)), softcap=float(s.get("softcap", 0))),
        ffn=twin.FfnConfig(
            type=FFN_TYPES[int(s["ffn"])], d_ff=int(s["f"]), bias=int(s.get("ffn_bias", 0)),
            in_scale=int(s.get("ffn_in_scale", 0))),
        residual=twin.ResidualConfig(
            branch_scale=BRANCH_SCALES[int(s.get("branch_scale", 0))],
            interp_init=float(s.get("interp_init", 0)),
            depth_alpha=float(s.get("depth_alpha", 0)), depth_base=int(s.get("depth_base", 0)),
            value_residual=int(s.get("value_residual", 0)), dwa=int(s.get("dwa", 0)),
            dwa_dilation=int(s.get("dwa_dilation", 0)), dwa_period=int(s.get("dwa_period", 0)),
            attn_res=int(s.get("attn_res", 0)),
            attn_res_block=int(s.get("attn_res_block", 0)),
            unet_skips=int(s.get("unet_skips", 0)), reinject_x0=int(s.get("reinject_x0", 0)),
            value_embeds=int(s.get("value_embeds", 0))),
        hyper=twin.HyperConfig(
            kind=HYPER_KINDS[int(s.get("hyper", 0))], streams=int(s.get("hyper_streams", 0)),
            static_maps=int(s.get("hyper_static", 0)),
            sinkhorn=int(s.get("hyper_sinkhorn", 0))),
        siamese=twin.SiameseConfig(
            paper_scale=int(s["siamese_paper_scale"]),
            paper_fusion=int(s["siamese_paper_fusion"]),
            no_fusion_norm=int(s.get("siamese_no_fusion_norm", 0))))


def output_dir(prog):
    """The OUTDIR argument of a generator (created if missing); exits with a usage message
    without exactly one argument."""
    if len(sys.argv) != 2:
        sys.exit("usage: %s OUTDIR" % prog)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    return outdir


def rand_gain(n):
    # non-unit gains: a misplaced or swapped norm, or a norm/RoPE order mistake, is invisible
    # at gain 1
    return 1.0 + 0.3 * torch.randn(n)


# ---- norms --------------------------------------------------------------------------


def rms_norm(x, gain, eps):
    # x * rsqrt(mean(x^2) + eps), then the gain (eps inside the sqrt), OLMo / HF Llama
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * gain if gain is not None else y


def norm_fn(kind, x, gain, bias, eps, alpha=None):
    """RMSNorm (kind RMS, no bias), LayerNorm over the last dimension, DyT (DyT's
    DynamicTanh module: weight * tanh(alpha x) + bias, alpha a learnable scalar), or L2
    (nGPT's justnorm, below: no gain, no bias, no eps)."""
    if kind == L2:
        assert gain is None and bias is None and alpha is None
        return justnorm(x)
    if kind == DYT:
        y = torch.tanh(alpha * x)
        y = y * gain if gain is not None else y
        return y + bias if bias is not None else y
    if kind == RMS:
        assert bias is None
        return rms_norm(x, gain, eps)
    return F.layer_norm(x, (x.shape[-1],), weight=gain, bias=bias, eps=eps)


# ---- RoPE -------------------------------------------------------------------------


def rotate_half(x):
    # NeoX: pairs (i, i + dk/2), not interleaved
    B, nh, T, hs = x.size()
    x = x.view(B, nh, T, 2, hs // 2)
    x1, x2 = x.unbind(dim=-2)
    return torch.cat((-x2, x1), dim=-1)


def rope_sin_cos(T, dk, theta, dtype=torch.float64):
    # theta^(-2i/dk), i in [0, dk/2), positions 0..T-1, computed in float64; (1, 1, T, dk)
    inv_freq = 1.0 / (theta ** (torch.arange(0, dk, 2, dtype=torch.float64) / dk))
    seq = torch.arange(T, dtype=torch.float64)
    freqs = torch.einsum("i , j -> i j", seq, inv_freq)
    positions = torch.cat((freqs, freqs), dim=-1)  # (T, dk)
    return positions.sin()[None, None].to(dtype), positions.cos()[None, None].to(dtype)


def apply_rope(t, sin, cos):
    # t: (B, heads, T, dk)
    return t * cos + rotate_half(t) * sin


def check_norm_rope_order(t, sin, cos, gain):
    """RoPE after the Q/K norms matters only with non-unit gains: a gain-free RMSNorm
    commutes with RoPE, a random gain does not."""
    assert torch.allclose(rms_norm(apply_rope(t, sin, cos), None, 1e-5),
                          apply_rope(rms_norm(t, None, 1e-5), sin, cos))
    assert not torch.allclose(rms_norm(apply_rope(t, sin, cos), gain, 1e-5),
                              apply_rope(rms_norm(t, gain, 1e-5), sin, cos))


# ---- attention (OLMo / HybridNorm fork structure) ---------------------------------------


def site_width(d, H, Hkv, width, site):
    """Length of the gain of a site norm: d_k per head, else the flattened projection row."""
    dk = d // H
    if width == PER_HEAD:
        return dk
    return d if site in ("q", "c") else Hkv * dk


def attention(x, w_qkv, w_o, B, T, d, H, Hkv, sites, width, snorm, rope, theta, causal,
              b_qkv=None, b_o=None, vmix=None, sqk=None, softmax_scale=None, gate=0, sinks=None,
              clip_qkv=0, softcap=0, logits=None):
    """MHA_#(x): fused Q|K|V projection (nn.Linear, bias b_qkv optional), GQA, site norms
    snorm(site, t) per head with one d_k gain (or full width, OLMo-2, before the head split),
    RoPE after the norms (V is never rotated), scale 1/sqrt(d_k), C norm before W_o (bias b_o
    optional). vmix: an optional function of the normalized V (B, T, Hkv, dk) giving the V
    attention reads (the value residual). sqk: nGPT's stored s_qk (H d_k values), Q and K
    multiplied after RoPE as its model.py multiplies them (ngpt_block_ref); softmax_scale: the
    scores' scale instead of 1/sqrt(d_k) (nGPT: sqrt(d_k)). gate: the output gate of gated
    attention as normblocks.h documents its composition with the C norm (GATE_HEADWISE: H
    logits per token, GATE_ELEMENTWISE: d; the projection's last columns), C' = Nc(C)
    sigmoid(G) before W_o. No official code has both a C norm and the gate; the official gate
    (qiuzh20/gated_attention) is qwen3_gated_attention_ref below. sinks: attention sinks' logits
    z_h (H; zeros for the off-by-one softmax), in torchtitan's gpt-oss form (its Attention.forward:
    the attention output without sink times sigmoid(lse - z_h), lse the row's log-sum-exp of
    the scaled, masked scores): the same function as gpt-oss's concatenated column (the twin's),
    written the other way. clip_qkv: OLMo's (olmo/model.py, OLMoSequentialBlock.forward:
    qkv = self.att_proj(h); qkv.clamp_(min=-clip_qkv, max=clip_qkv); then the split): Q, K and
    V clamped as projected, with their bias, before the site norms; the gate's logits (no
    projection of OLMo's) are not. softcap: Gemma 2's attn_logit_softcapping as transformers'
    Gemma2 eager_attention_forward applies it (attn_weights = q k^T * scaling; then / softcap,
    tanh, * softcap; then the causal mask added): after the scale, before the mask; with sinks
    the log-sum-exp is over the capped scores, z_h itself uncapped (gpt-oss's sink column after
    Gemma's cap). logits: a list the scaled scores before the cap are appended to (B, H, T, T,
    detached; masked entries 0).
    x (B*T, d). Returns the output (B*T, d) and the attention probabilities (B, H, T, T), with
    sinks the probabilities of the keys (rows summing to 1 - the sink's mass)."""
    dk = d // H
    G = {0: 0, GATE_HEADWISE: H, GATE_ELEMENTWISE: d}[gate]

    def norm_qkv(q, k, v):
        if sites & SITE_Q:
            q = snorm("q", q)
        if sites & SITE_K:
            k = snorm("k", k)
        if sites & SITE_V:
            v = snorm("v", v)
        return q, k, v

    qkv = x @ w_qkv.T  # (B*T, d + 2*Hkv*dk)
    if b_qkv is not None:
        qkv = qkv + b_qkv
    q, k, v, glog = qkv.view(B, T, -1).split((d, Hkv * dk, Hkv * dk, G), dim=-1)
    if clip_qkv:
        q, k, v = (t.clamp(min=-clip_qkv, max=clip_qkv) for t in (q, k, v))
    if width == FULL:
        # OLMo-2: norm over the flattened projection row, before the head split
        q, k, v = norm_qkv(q, k, v)
    q = q.reshape(B, T, H, dk)
    k = k.reshape(B, T, Hkv, dk)
    v = v.reshape(B, T, Hkv, dk)
    if width == PER_HEAD:
        # HybridNorm fork: per-head norms over dk, one gain shared by all heads
        q, k, v = norm_qkv(q, k, v)
    if vmix is not None:
        v = vmix(v)
    q = q.transpose(1, 2)  # (B, H, T, dk)
    k = k.transpose(1, 2)  # (B, Hkv, T, dk)
    v = v.transpose(1, 2)
    if rope:
        sin, cos = rope_sin_cos(T, dk, theta, x.dtype)
        q = apply_rope(q, sin, cos)
        k = apply_rope(k, sin, cos)
    if sqk is not None:
        # nGPT (model.py Block.forward): sqk * (sqk_init_value / sqk_init_scaling) with
        # sqk_init_value 1 and sqk_init_scaling = base_scale = 1/sqrt(n_embd) (train.py), viewed
        # (1, 1, n_head, head_dim) on (B, T, H, dk): here (1, H, 1, dk) on (B, H, T, dk)
        assert Hkv == H
        s_qk = (sqk * (1.0 / (1.0 / d ** 0.5))).view(1, H, 1, dk)
        q = s_qk * q
        k = s_qk * k
    g = H // Hkv
    if g > 1:
        # query head i uses KV head i // g
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
    if softmax_scale is None:
        s = q @ k.transpose(-2, -1) / math.sqrt(dk)
    else:
        s = q @ k.transpose(-2, -1) * softmax_scale
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1) if causal else None
    if logits is not None:
        logits.append(s.detach().masked_fill(mask, 0) if causal else s.detach().clone())
    if softcap:  # Gemma2's eager_attention_forward
        s = s / softcap
        s = torch.tanh(s)
        s = s * softcap
    if causal:
        s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = p @ v  # (B, H, T, dk)
    if sinks is not None:  # torchtitan: output * sigmoid(lse - sinks.view(1, -1, 1))
        lse = torch.logsumexp(s, dim=-1)
        sink_scale = torch.sigmoid(lse - sinks.view(1, -1, 1)).unsqueeze(-1)
        o, p = o * sink_scale, p * sink_scale
    o = o.transpose(1, 2)  # (B, T, H, dk)
    if sites & SITE_C:
        # per head, before the concatenation (or over the whole row at full width)
        o = snorm("c", o if width == PER_HEAD else o.reshape(B, T, d))
    if G:  # after the C norm: one gate per head (over its d_k values) or per element
        o = o.reshape(B, T, H, dk) * torch.sigmoid(glog).reshape(B, T, H, G // H)
    out = o.reshape(B * T, d) @ w_o.T
    return (out + b_o if b_o is not None else out), p


# ---- hyper-connections ----------------------------------------------------------------------
#
# mHC: DeepSeek's reference functions, deepseek-ai/TileKernels tile_kernels/torch/mhc.py
# (commit 36d9e45), transcribed with their names and argument order, float64 throughout (the
# reference's .bfloat16() casts of the outputs dropped), and wired as
# tile_kernels/modeling/mhc/functional.py's mhc_pre / mhc_post / mhc_head wire them: norm_fn,
# split_mixes, sinkhorn, apply_mix; the sublayer; post. DeepSeek-V4's values: post_mult_value
# 2, pre_eps = sinkhorn_eps = norm_eps = 1e-6, no norm weight. The identity form (mHC paper,
# Table 1: H_res = I) drops the res part of the mixes. mHC-lite (arXiv 2601.05732, its code
# FFTYYY/mhc-lite hyper_conn/mhc_lite.py): DeepSeek's pre and post maps, and for the res part the
# code's convex combination of permutation matrices, perms = eye[index] over the n! permutations,
# alpha_residual = einsum(softmax(res_coeff), perms, "r, r i j -> i j"), applied as its mix_h,
# out_t = sum_s alpha[s][t] res_s (mhc_post_ref's einsum). HC: the paper's Algorithm 2 (arXiv
# 2409.19606, Appendix J), width_connection / depth_connection.


def expand_to_mhc_ref(hidden, mhc_mult):
    return hidden.unsqueeze(-2).expand(*hidden.shape[:-1], mhc_mult, hidden.shape[-1]).contiguous()


def sinkhorn_normalize_ref(x, repeat=10, eps=1e-6):
    x = x.softmax(-1) + eps
    x = x / (x.sum(-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        x = x / (x.sum(-1, keepdim=True) + eps)
        x = x / (x.sum(-2, keepdim=True) + eps)
    return x


def mhc_head_compute_mix_ref(input_mix, mhc_scale, mhc_base, mhc_pre_eps):
    mhc_head_layer_mix = input_mix * mhc_scale + mhc_base
    return torch.sigmoid(mhc_head_layer_mix) + mhc_pre_eps


def mhc_pre_split_mixes_ref(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value,
                            mhc_pre_eps):
    # input_mixes (a, b, m); mhc_scale [3] (the identity form: [2], no comb_res_mix: None)
    a, b = input_mixes.shape[:2]
    parts = [mhc_scale[0].expand(mhc_mult), mhc_scale[1].expand(mhc_mult)]
    if mhc_scale.shape[0] == 3:
        parts.append(mhc_scale[2].expand(mhc_mult * mhc_mult))
    mhc_scale = torch.cat(parts)
    input_mixes = input_mixes * mhc_scale + mhc_base

    pre_layer_mix = input_mixes[:, :, :mhc_mult].sigmoid().unsqueeze(-1) + mhc_pre_eps
    post_layer_mix = (input_mixes[:, :, mhc_mult:2 * mhc_mult].sigmoid() *
                      mhc_post_mult_value).unsqueeze(-1)
    comb_res_mix = None
    if input_mixes.shape[-1] > 2 * mhc_mult:
        comb_res_mix = input_mixes[:, :, 2 * mhc_mult:].view(a, b, mhc_mult, mhc_mult)
    return pre_layer_mix, post_layer_mix, comb_res_mix


def mhc_lite_perms_ref(n):
    """mHC-lite's permutation matrices (n!, n, n) as its code builds them, the rows of the
    identity indexed by each permutation (perms[r][i][j] = [j = pi_r(i)]); the permutations
    enumerated here without itertools.permutations: the n-tuples of distinct values of 0..n-1,
    sorted (lexicographic order, the identity first, as the code's enumeration)."""
    index = sorted(t for t in itertools.product(range(n), repeat=n) if len(set(t)) == n)
    assert len(index) == math.factorial(n) and index[0] == tuple(range(n))
    return torch.eye(n, dtype=torch.float64)[torch.tensor(index)]


def mhc_lite_res_ref(res_coeff, n):
    """mHC-lite's H_res per token: res_coeff (a, b, n!) -> alpha_residual (a, b, n, n),
    einsum(softmax(res_coeff), perms, "r, r i j -> i j")."""
    perms = mhc_lite_perms_ref(n).to(res_coeff.dtype)
    return torch.einsum("abr,rij->abij", res_coeff.softmax(-1), perms)


def mhc_pre_apply_mix_ref(x, mix):
    return (x * mix).sum(-2)


def mhc_post_ref(x, residual, post_layer_mix, comb_res_mix):
    # comb_res_mix None: the identity form, residual + post x
    if comb_res_mix is None:
        return x.unsqueeze(-2) * post_layer_mix + residual
    term2 = torch.einsum("abmn,abmc->abnc", comb_res_mix, residual)
    return x.unsqueeze(-2) * post_layer_mix + term2


def mhc_pre_norm_fn_ref(residual, mhc_fn, mhc_norm_weight, mhc_norm_eps):
    if mhc_norm_weight is not None:
        mhc_fn = mhc_fn * mhc_norm_weight
    residual = residual.flatten(2, 3)
    mhc_mult = mhc_fn.shape[0]
    rms_group_size = mhc_fn.shape[-1]
    mixes = torch.einsum("mbk,nbk->mbn", residual.reshape(-1, 1, rms_group_size),
                         mhc_fn.view(mhc_mult, 1, rms_group_size))
    sqrsum = residual.reshape(-1, 1, rms_group_size).square().sum(-1)
    mixes = (mixes * (sqrsum.unsqueeze(-1) / rms_group_size + mhc_norm_eps).rsqrt()).sum(-2)
    return mixes.view(*residual.shape[:2], -1)


def mhc_sublayer(residual, fn, scale, base, branch, sinkhorn_repeat, static=False, lite=False):
    """One sublayer with mHC (functional.py mhc_pre, the branch, mhc_post), V4's constants;
    residual (a, b, n, d), fn None and scale None in the static form (mixes 0: the maps from
    base alone). branch: u (a, b, d) -> y (a, b, d). lite: mHC-lite, the mixes' res part its
    n! permutation logits (scaled by scale[2], plus base) and H_res mhc_lite_res_ref's."""
    n = residual.shape[-2]
    if static:
        mixes = torch.zeros(*residual.shape[:2], base.shape[0], dtype=residual.dtype)
        scale = torch.ones(3 if base.shape[0] > 2 * n else 2, dtype=residual.dtype)
    else:
        mixes = mhc_pre_norm_fn_ref(residual, fn, None, 1e-6)
    if lite:  # DeepSeek's split of the pre and post parts; the res part mHC-lite's
        pre_mix, post_mix, _ = mhc_pre_split_mixes_ref(mixes[..., :2 * n], scale[:2],
                                                       base[:2 * n], n, 2.0, 1e-6)
        comb_mix = mhc_lite_res_ref(mixes[..., 2 * n:] * scale[2] + base[2 * n:], n)
    else:
        pre_mix, post_mix, comb_mix = mhc_pre_split_mixes_ref(mixes, scale, base, n, 2.0, 1e-6)
    if comb_mix is not None and not lite:
        comb_mix = sinkhorn_normalize_ref(comb_mix, repeat=sinkhorn_repeat, eps=1e-6)
    layer_input = mhc_pre_apply_mix_ref(residual, pre_mix)
    return mhc_post_ref(branch(layer_input), residual, post_mix, comb_mix)


def mhc_head_ref(residual, fn, scale, base):
    """functional.py mhc_head (fn None: the static form, sigmoid(base) + 1e-6)."""
    n = residual.shape[-2]
    if fn is None:
        mix = torch.sigmoid(base).expand(*residual.shape[:2], n) + 1e-6
    else:
        fn = F.pad(fn, (0, 0, 0, n * (2 + n) - fn.shape[0]))
        mixes = mhc_pre_norm_fn_ref(residual, fn, None, 1e-6)[..., :n]
        mix = mhc_head_compute_mix_ref(mixes, scale.reshape(1), base, 1e-6)
    return mhc_pre_apply_mix_ref(residual, mix.unsqueeze(-1))


def hc_width_connection(h, static_alpha, static_beta, dynamic=None):
    """HC, Algorithm 2's width_connection: h (B, L, N, D); dynamic = (layer_norm,
    dynamic_alpha_fn, dynamic_alpha_scale, dynamic_beta_fn, dynamic_beta_scale) or None
    (static). Returns mix_h (B, L, N+1, D) and beta (B, L, N)."""
    if dynamic is not None:
        layer_norm, dynamic_alpha_fn, dynamic_alpha_scale, dynamic_beta_fn, \
            dynamic_beta_scale = dynamic
        norm_h = layer_norm(h)
        wc_weight = norm_h @ dynamic_alpha_fn
        wc_weight = torch.tanh(wc_weight)  # Algorithm 2: F.tanh
        dynamic_alpha = wc_weight * dynamic_alpha_scale
        alpha = dynamic_alpha + static_alpha[None, None, ...]
        dc_weight = norm_h @ dynamic_beta_fn
        dc_weight = torch.tanh(dc_weight)
        dynamic_beta = dc_weight * dynamic_beta_scale
        beta = dynamic_beta + static_beta[None, None, ...]
    else:
        alpha = static_alpha[None, None, ...]
        beta = static_beta[None, None, ...]
    mix_h = alpha.transpose(-1, -2) @ h
    return mix_h, beta


def hc_depth_connection(mix_h, h_o, beta):
    """HC, Algorithm 2's depth_connection: h_o (B, L, D) the branch's output."""
    h = torch.einsum("blh,bln->blnh", h_o, beta) + mix_h[..., 1:, :]
    return h


# ---- DenseFormer ----------------------------------------------------------------------------
#
# The depth-weighted average (arXiv 2402.02622, Eq. 1 with the dilation of its Sec. 3.3; its code
# epfml/DenseFormer, denseformer/denseformer.py, DWAModules): after block i (0-based) the next
# input is sum_m alphas[i].weight[0, m] X_{(i+1) % k + m k} over the block outputs X_1 .. X_{i+1}
# and the embedding X_0, those with the index's residue (i + 1) mod k, oldest first. With the
# package's period p only the blocks i with (i + 1) % p == 0 have alphas[i] (the others' entry is
# None) and average; after the others the next input is the block's output X_{i+1} itself (still
# kept among the outputs the later averages read).


def dwa_average_ref(outputs, weight, i, dilation, period=1):
    """Block i's next input: outputs = [X_0, X_1, .., X_{i+1}] (the stack's input, then every
    block's output so far), weight the block's (1, count) alphas (None where the period leaves
    the block without them), dilation k, period p. Off the period ((i + 1) % p != 0) the block's
    output X_{i+1}, with weight None; else the depth-weighted average written as the paper's
    sum, term by term over the indices j <= i + 1 with j = i + 1 (mod k) in increasing order;
    weight's columns one per such j, in that order."""
    assert len(outputs) == i + 2
    if (i + 1) % period:
        assert weight is None, (i, period)
        return outputs[i + 1]
    picked = [j for j in range(i + 2) if (i + 1 - j) % dilation == 0]
    assert weight.shape == (1, len(picked)), (weight.shape, picked)
    acc = None
    for m, j in enumerate(picked):
        term = weight[0, m] * outputs[j]
        acc = term if acc is None else acc + term
    return acc


# ---- Attention Residuals --------------------------------------------------------------------
#
# arXiv 2603.15031 (Moonshot), read with its official pseudocode (MoonshotAI/Attention-Residuals'
# README: block_attn_res and the layer's forward) as the paper writes it: the sublayers' outputs
# f_0 .. f_{2L-1} (attention of layer l is sublayer 2l, its FFN 2l+1; no residual sums) fall in
# blocks of S consecutive sublayers from sublayer 0, b_n the sum of block n's outputs; the input
# of sublayer i >= 1 (and the final norm's, i = 2L) attends over the embedding x_0, the blocks
# completed before sublayer i-1 and the partial sum of sublayer i-1's block through f_{i-1}
# (Full AttnRes: S = 1, every output its own source), with the weights a softmax over those
# sources of the sublayer's pseudo-query w dotted with each source's RMSNorm (gain g) key.


def attn_res_sources_ref(x0, outputs, i, S):
    """The sources of sublayer i's input (i >= 1; i = 2L: the final norm's) from x_0 and the
    outputs f_0 .. f_{i-1}: x_0, then block n = 0 .. (i-1)//S as the sum of its outputs f_{nS}
    .. f_{min(nS + S, i) - 1} (the last one the partial sum through f_{i-1}), each block summed
    term by term from the outputs (no running sums)."""
    assert i >= 1 and len(outputs) == i, (i, len(outputs))
    src = [x0]
    for n in range((i - 1) // S + 1):
        acc = None
        for f in outputs[n * S:min(n * S + S, i)]:
            acc = f if acc is None else acc + f
        src.append(acc)
    return src


def attn_res_read_ref(sources, w, g, eps):
    """One reader: its output h (rows, d) and weights a (rows, count) from its sources (each
    (rows, d)), row by row: the keys k_m = g * v_m / sqrt(mean(v_m^2) + eps), the logits
    z_m = sum_i w_i k_m[i], a_m = exp(z_m - max z) / sum_n exp(z_n - max z), and
    h = sum_m a_m v_m, every sum written out over its terms; w the pseudo-query (1, d), g the
    key norm's gain (d)."""
    rows, d = sources[0].shape
    w = w.reshape(-1)
    hs, As = [], []
    for r in range(rows):
        z = []
        for v in sources:
            ms = None
            for i in range(d):
                ms = v[r, i] * v[r, i] if ms is None else ms + v[r, i] * v[r, i]
            k = g * v[r] / torch.sqrt(ms / d + eps)
            zm = None
            for i in range(d):
                zm = w[i] * k[i] if zm is None else zm + w[i] * k[i]
            z.append(zm)
        top = max(float(t) for t in z)
        e = [torch.exp(t - top) for t in z]
        total = None
        for t in e:
            total = t if total is None else total + t
        a = [t / total for t in e]
        h = None
        for m, v in enumerate(sources):
            h = a[m] * v[r] if h is None else h + a[m] * v[r]
        hs.append(h)
        As.append(torch.stack(a))
    return torch.stack(hs), torch.stack(As)


# ---- modded-nanogpt's U-Net skips and x_0 re-injection ----------------------------------------
#
# KellerJordan/modded-nanogpt's train_gpt.py (mid-2025), GPT.forward: x = x0 = norm(embed(idx));
# with n = num_layers // 2 (num_layers even, asserted) block i >= n first takes
# x = x + skip_weights[i - n] * skip_connections.pop(), the outputs of blocks 0 .. n-1 pushed in
# order, so popped in reverse: block i reads block n - 1 - (i - n) = L - 1 - i's output; then
# Block.forward: x = lambdas[0] * x + lambdas[1] * x0 before its sublayers. Written out here by
# index, without the list.


def unet_input_ref(states, l, L, skip_weight, lambdas):
    """The input layer l runs on, from states = [x_0, h_0, .., h_{l-1}] (the stack's input
    after its embedding norm, then every layer's output so far; h_j = states[j + 1]): x_l =
    states[l], the encoder output it pairs with h_{L-1-l} (l + j = L - 1) times skip_weight (the
    layer's w, 1 value; None: no skip), then lambdas = [lambda_0, lambda_1] (None: no
    re-injection). Expanded term by term: lambda_0 x_l + lambda_0 w h_{L-1-l} + lambda_1 x_0."""
    assert len(states) == l + 1, (len(states), l)
    terms = [(1.0, states[l])]
    if skip_weight is not None:
        j = L - 1 - l
        assert L % 2 == 0 and l >= L // 2 and 0 <= j < L // 2, (l, L)
        terms.append((skip_weight[0], states[j + 1]))
    if lambdas is not None:
        terms = [(lambdas[0] * c, t) for c, t in terms] + [(lambdas[1], states[0])]
    acc = None
    for c, t in terms:
        acc = c * t if acc is None else acc + c * t
    return acc


# ---- modded-nanogpt's value embeddings --------------------------------------------------------
#
# KellerJordan/modded-nanogpt's train_gpt.py (mid-2025, commit 345b2fb9), GPT.forward:
# ve = [value_embed(input_seq) for value_embed in self.value_embeds]; then
# ve = [ve[0], ve[1], ve[2]] + [None] * (len(self.blocks) - 6) + [ve[0], ve[1], ve[2]], block i
# getting ve[i]; CausalSelfAttention.forward: if ve is not None: v = lambdas[0] * v +
# lambdas[1] * ve.view_as(v), else v = lambdas[0] * v (lambdas its sa_lambdas, [0.5, 0.5] at
# init), before attention. Its 3 tables are N here (2N <= L). Its V has no norm; the library's
# V site norm comes first (the values attention reads, where ResFormer's mix is). Written out
# here by index, the rows placed token by token, the mix term by term.


def value_embed_layers_ref(tables, L):
    """Layer l's table (or None) as the code's list: tables + [None] * (L - 2N) + tables, read
    at index l (tables: N per-token value tensors)."""
    n = len(tables)
    assert 0 < n and 2 * n <= L, (n, L)
    ve = list(tables) + [None] * (L - 2 * n) + list(tables)
    assert len(ve) == L
    return ve


def value_embed_rows_ref(rows, B, T, Hkv, dk):
    """The caller's rows of one table (B*T, H_kv d_k; row r = b T + i the token at position
    (b, i), nb_stack_set_value_embeds' layout) as the code's ve.view_as(v) (B, T, H_kv, d_k),
    placed token by token."""
    assert rows.shape == (B * T, Hkv * dk), rows.shape
    return torch.stack([torch.stack([rows[b * T + i].reshape(Hkv, dk) for i in range(T)])
                        for b in range(B)])


def value_embed_mix_ref(v, lambdas, ve):
    """CausalSelfAttention's mix, term by term: lambdas[0] v + lambdas[1] ve, or lambdas[0] v
    alone where the layer has no table (ve None)."""
    terms = [(lambdas[0], v)] + ([(lambdas[1], ve)] if ve is not None else [])
    acc = None
    for c, t in terms:
        acc = c * t if acc is None else acc + c * t
    return acc


# ---- nGPT ----------------------------------------------------------------------------------
#
# NVIDIA/ngpt model.py (branch main, commit ed19eb2), class Block with use_nGPT = 1, transcribed
# from that code with its names, in float64 (the code's bfloat16 Linears and flash_attn_func's
# bfloat16 inputs dropped; flash_attn_func(q, k, v, softmax_scale, causal=True) written out as
# its definition, a causal softmax(softmax_scale q k^T) v per head). base_scale = 1/sqrt(n_embd)
# as train.py sets it for nGPT; bias = False (GPTConfig's default), dropout 0. What follows the
# code: justnorm without eps; q, k, v from three bias-free Linears, viewed (B, T, n_head,
# head_dim); q and k per head s_qk * justnorm(.) with s_qk = sqk * (sqk_init_value /
# sqk_init_scaling), one value per head and head dim; softmax_scale = +sqrt(head_dim); the
# interpolation h = justnorm(A + |lr| (B - A)) with A = justnorm(h), B = justnorm(h_att), lr =
# attn_alpha * (attn_alpha_init_value / attn_alpha_init_scaling); the MLP uv = (suv *
# ((suv_init_value / suv_init_scaling) sqrt(n_embd))) * c_fc(h), u, v = chunk(uv, 2), u *
# silu(v) (c_fc maps n_embd to 2 * 4 n_embd in the code: the hidden width here is read from the
# weights, so that a fixture may use another), then mlp_c_proj and the same interpolation.
# What deviates: the RoPE. The code's apply_rotary_position_embeddings is not a rotation
# (NVIDIA/ngpt issue #10, open: out[2i] = -q[2i+1] cos_i, out[2i+1] = q[2i] sin_i, no sum, the
# sin/cos halves of an interleaved table), so this uses the standard RoPE the library has
# instead (NeoX rotate-half, theta^(-2i/d_k), rope_sin_cos / apply_rope above) at the code's
# place: on q and k of each head before the per-head justnorm. alpha_init_value is the code's
# attn_alpha_init_value = mlp_alpha_init_value (0.05 there; the library's interp_init).
# Nothing here is taken from the twin or the library.


def ngpt_rope_official(q, k):
    """The code's rotary function (model.py get_sinusoidal_embeddings and
    apply_rotary_position_embeddings, in float64) on q, k (B, n_head, T, head_dim): kept only to
    show, in gen_block_fixtures' self-checks, why ngpt_block_ref replaces it (issue #10)."""
    T, dim = q.shape[-2], q.shape[-1]
    position = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2).double() * (-math.log(10000.0) / dim))
    sinusoidal_pos = torch.zeros((T, dim), dtype=torch.float64)
    sinusoidal_pos[:, 0::2] = torch.sin(position * div_term)
    sinusoidal_pos[:, 1::2] = torch.cos(position * div_term)
    sin, cos = sinusoidal_pos.chunk(2, dim=-1)
    q_rot = torch.stack((-q[..., 1::2], q[..., ::2]), dim=-1)
    k_rot = torch.stack((-k[..., 1::2], k[..., ::2]), dim=-1)
    q_rot = torch.reshape(q_rot, q.shape[:-1] + (q.shape[-1]//2, 2)) * \
        torch.stack((cos, sin), dim=-1)
    k_rot = torch.reshape(k_rot, k.shape[:-1] + (k.shape[-1]//2, 2)) * \
        torch.stack((cos, sin), dim=-1)
    q_rot = torch.reshape(q_rot, q.shape)
    k_rot = torch.reshape(k_rot, k.shape)
    return q_rot, k_rot


def justnorm(x):
    # model.py Block.justnorm: F.normalize (eps 1e-12) is commented out there
    #return F.normalize(x, p=2, dim=-1)
    res = x / x.norm(p=2, dim=-1, keepdim=True)
    return res


def ngpt_block_ref(h, query, key, value, att_c_proj, c_fc, mlp_c_proj, sqk, suv, attn_alpha,
                   mlp_alpha, n_head, rope, theta=10000.0, alpha_init_value=0.05):
    """One nGPT Block (model.py Block.forward, use_nGPT = 1) on h (B, T, n_embd); the weights
    as the code's nn.Linear weights (out, in) and its parameter vectors as stored. rope: the
    standard RoPE (see above) or none. Returns the block's h and the attention probabilities
    (B, n_head, T, T)."""
    B, T, C = h.size()
    n_embd = C
    base_scale = 1.0 / n_embd ** 0.5  # train.py: base_scale = 1.0 / n_embd ** 0.5 for nGPT
    attn_alpha_init_value = alpha_init_value
    attn_alpha_init_scaling = base_scale
    mlp_alpha_init_value = alpha_init_value
    mlp_alpha_init_scaling = base_scale
    sqk_init_value = 1.0
    sqk_init_scaling = base_scale
    suv_init_value = 1.0
    suv_init_scaling = 1.0

    hin = h
    q = F.linear(hin, query)
    k = F.linear(hin, key)
    v = F.linear(hin, value)

    q = q.view(B, T, n_head, n_embd // n_head)
    k = k.view(B, T, n_head, n_embd // n_head)
    v = v.view(B, T, n_head, n_embd // n_head)

    if rope:  # the deviation: standard RoPE where the code calls its rotary function
        sin, cos = rope_sin_cos(T, n_embd // n_head, theta, h.dtype)
        q, k = apply_rope(q.transpose(1, 2), sin, cos), apply_rope(k.transpose(1, 2), sin, cos)
        q = q.transpose(2, 1)
        k = k.transpose(2, 1)

    sqk = (sqk * (sqk_init_value / sqk_init_scaling)).view(1, 1, n_head, n_embd // n_head)
    q = sqk * justnorm(q)
    k = sqk * justnorm(k)

    sqrt_head_dim = (n_embd / n_head) ** 0.5
    softmax_scale = sqrt_head_dim
    # flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=softmax_scale, causal=True) on
    # (B, T, n_head, head_dim): causal softmax(softmax_scale q k^T) v per head
    scores = torch.einsum("bthd,bshd->bhts", q, k) * softmax_scale
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    p = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    y = torch.einsum("bhts,bshd->bthd", p, v)
    y = y.contiguous().view(B, T, n_embd)

    h_att = F.linear(y, att_c_proj)

    lr = attn_alpha * (attn_alpha_init_value / attn_alpha_init_scaling)
    lr = torch.abs(lr)

    A_norm = justnorm(h)  # normally, normalization is not needed
    B_norm = justnorm(h_att)

    #res = (1.0 - lr) * A_norm + lr * B_norm
    res = A_norm + lr * (B_norm - A_norm)
    h = justnorm(res)

    hin = h
    uv = F.linear(hin, c_fc)
    suv = (suv * ((suv_init_value / suv_init_scaling) * (n_embd ** 0.5)))
    uv = suv * uv
    u, v = torch.chunk(uv, 2, dim=-1)
    x_mlp = u * F.silu(v)
    h_mlp = F.linear(x_mlp, mlp_c_proj)

    lr = mlp_alpha * (mlp_alpha_init_value / mlp_alpha_init_scaling)
    lr = torch.abs(lr)

    A_norm = justnorm(h)  # normally, normalization is not needed
    B_norm = justnorm(h_mlp)

    #res = (1.0 - lr) * A_norm + lr * B_norm
    res = A_norm + lr * (B_norm - A_norm)
    h = justnorm(res)

    return h, p


# ---- the codes a port starts from ------------------------------------------------------------
#
# Transcribed from the official codes, with their names and layouts, in float64: their float32
# upcasts and dtype casts dropped, dropout 0, no KV cache, every layer full causal attention.
# Each function takes the official state-dict names (a dict sd) and a config holding the
# official config fields it reads. Used by tests/gen_porting_fixtures.py, which maps the
# library's tensors onto these names; nothing here knows the library's layout.
#   qiuzh20/gated_attention modeling_qwen3.py (commit 49645df): Qwen3RMSNorm, the default
#     rotary embedding, Qwen3MLP, Qwen3Attention.forward (eager) with its headwise and
#     elementwise output gates, Qwen3DecoderLayer, Qwen3Model's final norm.
#   zlab-princeton/Derf "language model/model_derf.patch" (commit 8dd9ea3) on karpathy/nanoGPT
#     model.py (commit 3adf61e): Dynamic_erf, CausalSelfAttention (its manual path, the math
#     of its flash path), MLP (nn.GELU(): the erf form), Block, GPT.forward's shared_scale and
#     ln_f.
#   jiachenzhu/DyT other_tasks/LLaMA/fms_fsdp/models/llama.py (commit aab5dde) and the
#     foundation-model-stack modules it builds (fms commit b063262, Feb 2025):
#     LayerNormParameterized (no bias), MultiHeadAttention (fused QKV, SDPA with its default
#     scale), RotaryEmbedding (rotates interleaved pairs (2i, 2i+1)), GatedLinearUnit (fused
#     [wg | w1]), LLaMABlock, LLaMA._helper's shared_scale and dec_norm.
#   huggingface/transformers models/gemma3/modeling_gemma3.py (Gemma 2's decoder layer is the
#     same without q_norm and k_norm): Gemma3RMSNorm (x_hat (1 + weight)), Gemma3MLP,
#     Gemma3Attention.forward with eager_attention_forward (scaling query_pre_attn_scalar^-0.5),
#     Gemma3DecoderLayer (input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
#     post_feedforward_layernorm), Gemma3TextModel's final norm.


def _lin(sd, name, x):
    # nn.Linear under its state-dict name (bias when the dict has one)
    return F.linear(x, sd[name + ".weight"], sd.get(name + ".bias"))


def _hf_causal_mask(T, dtype):
    # transformers' additive causal mask: the dtype's minimum above the diagonal
    return torch.triu(torch.full((T, T), torch.finfo(dtype).min, dtype=dtype), 1)[None, None]


def hf_rope_cos_sin(T, dim, base, dtype):
    """The default rotary embedding (ROPE_INIT_FUNCTIONS["default"] and the model's
    RotaryEmbedding.forward): inv_freq = 1 / base^(arange(0, dim, 2) / dim), emb = [f | f]."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[None], emb.sin().to(dtype)[None]  # (1, T, dim)


def hf_rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (hf_rotate_half(q) * sin), (k * cos) + (hf_rotate_half(k) * sin)


def hf_repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep,
                                                           slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def hf_mlp(sd, pre, x, hidden_act):
    """Qwen3MLP / Gemma3MLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)); hidden_act "silu"
    or "gelu_pytorch_tanh" (ACT2FN's)."""
    act_fn = {"silu": F.silu, "gelu_pytorch_tanh": lambda t: F.gelu(t, approximate="tanh")}
    return _lin(sd, pre + "down_proj",
                act_fn[hidden_act](_lin(sd, pre + "gate_proj", x)) * _lin(sd, pre + "up_proj", x))


def qwen3_rms_norm(hidden_states, weight, variance_epsilon):
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + variance_epsilon)
    return weight * hidden_states


def qwen3_gated_attention_ref(sd, pre, hidden_states, config):
    """Qwen3Attention.forward (eager) of qiuzh20/gated_attention. q_proj's rows per KV group:
    [the group's G query heads (G head_dim rows) | their gates (G rows headwise, G head_dim
    elementwise)], G = num_key_value_groups. Returns (attn_output, attn_weights)."""
    bsz, q_len, _ = hidden_states.size()
    head_dim, groups = config.head_dim, config.num_attention_heads // config.num_key_value_heads
    query_states = _lin(sd, pre + "q_proj", hidden_states)
    key_states = _lin(sd, pre + "k_proj", hidden_states)
    value_states = _lin(sd, pre + "v_proj", hidden_states)
    if config.headwise_attn_output_gate:
        query_states = query_states.view(bsz, q_len, config.num_key_value_heads, -1)
        query_states, gate_score = torch.split(query_states, [head_dim * groups, groups], dim=-1)
        gate_score = gate_score.reshape(bsz, q_len, -1, 1)
        query_states = query_states.reshape(bsz, q_len, -1, head_dim).transpose(1, 2)
    elif config.elementwise_attn_output_gate:
        query_states = query_states.view(bsz, q_len, config.num_key_value_heads, -1)
        query_states, gate_score = torch.split(query_states, [head_dim * groups,
                                                              head_dim * groups], dim=-1)
        gate_score = gate_score.reshape(bsz, q_len, -1, head_dim)
        query_states = query_states.reshape(bsz, q_len, -1, head_dim).transpose(1, 2)
    else:
        query_states = query_states.view(bsz, q_len, -1, head_dim).transpose(1, 2)
    key_states = key_states.view(bsz, q_len, -1, head_dim).transpose(1, 2)
    value_states = value_states.view(bsz, q_len, -1, head_dim).transpose(1, 2)
    if config.use_qk_norm:
        query_states = qwen3_rms_norm(query_states, sd[pre + "q_norm.weight"],
                                      config.rms_norm_eps)
        key_states = qwen3_rms_norm(key_states, sd[pre + "k_norm.weight"], config.rms_norm_eps)
    cos, sin = hf_rope_cos_sin(q_len, head_dim, config.rope_theta, hidden_states.dtype)
    query_states, key_states = hf_apply_rotary_pos_emb(query_states, key_states, cos, sin)
    key_states = hf_repeat_kv(key_states, groups)
    value_states = hf_repeat_kv(value_states, groups)
    attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(head_dim)
    attn_weights = attn_weights + _hf_causal_mask(q_len, attn_weights.dtype)
    attn_weights = F.softmax(attn_weights, dim=-1)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    if config.headwise_attn_output_gate or config.elementwise_attn_output_gate:
        attn_output = attn_output * torch.sigmoid(gate_score)
    attn_output = attn_output.reshape(bsz, q_len, -1)
    return _lin(sd, pre + "o_proj", attn_output), attn_weights


def qwen3_gated_model_ref(sd, inputs_embeds, config):
    """Qwen3Model.forward from inputs_embeds: Qwen3DecoderLayer (pre-norm: input_layernorm,
    self_attn, residual; post_attention_layernorm, mlp, residual) per layer, then norm.
    Returns (last_hidden_state, [attn_weights per layer])."""
    hidden_states, probs, eps = inputs_embeds, [], config.rms_norm_eps
    for i in range(config.num_hidden_layers):
        pre = "model.layers.%d." % i
        residual = hidden_states
        hidden_states = qwen3_rms_norm(hidden_states, sd[pre + "input_layernorm.weight"], eps)
        hidden_states, w = qwen3_gated_attention_ref(sd, pre + "self_attn.", hidden_states,
                                                     config)
        probs.append(w)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = qwen3_rms_norm(hidden_states, sd[pre + "post_attention_layernorm.weight"],
                                       eps)
        hidden_states = hf_mlp(sd, pre + "mlp.", hidden_states, config.hidden_act)
        hidden_states = residual + hidden_states
    return qwen3_rms_norm(hidden_states, sd["model.norm.weight"], eps), probs


def gemma_rms_norm(x, weight, eps):
    """Gemma3RMSNorm (Gemma2RMSNorm, GemmaRMSNorm): the weight stored as w, x_hat (1 + w)."""
    output = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return output * (1.0 + weight)


def gemma_attention_ref(sd, pre, hidden_states, config):
    """Gemma3Attention.forward with eager_attention_forward (Gemma 2's: the same without
    q_norm, k_norm, config.use_qk_norm False here). attn_logit_softcapping must be None (Gemma
    3's value; Gemma 2 configs set 50): the library's attn.softcap is checked against
    attention's transcription of Gemma 2's eager attention instead (gen_block_fixtures'
    softcap_* cases)."""
    assert config.attn_logit_softcapping is None
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, config.head_dim)
    groups = config.num_attention_heads // config.num_key_value_heads
    query_states = _lin(sd, pre + "q_proj", hidden_states).view(hidden_shape).transpose(1, 2)
    key_states = _lin(sd, pre + "k_proj", hidden_states).view(hidden_shape).transpose(1, 2)
    value_states = _lin(sd, pre + "v_proj", hidden_states).view(hidden_shape).transpose(1, 2)
    if config.use_qk_norm:
        query_states = gemma_rms_norm(query_states, sd[pre + "q_norm.weight"],
                                      config.rms_norm_eps)
        key_states = gemma_rms_norm(key_states, sd[pre + "k_norm.weight"], config.rms_norm_eps)
    cos, sin = hf_rope_cos_sin(input_shape[1], config.head_dim, config.rope_theta,
                               hidden_states.dtype)
    query_states, key_states = hf_apply_rotary_pos_emb(query_states, key_states, cos, sin)
    scaling = config.query_pre_attn_scalar ** -0.5
    key_states = hf_repeat_kv(key_states, groups)
    value_states = hf_repeat_kv(value_states, groups)
    attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * scaling
    attn_weights = attn_weights + _hf_causal_mask(input_shape[1], attn_weights.dtype)
    attn_weights = F.softmax(attn_weights, dim=-1)
    attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    return _lin(sd, pre + "o_proj", attn_output), attn_weights


def gemma_model_ref(sd, inputs_embeds, config):
    """Gemma3TextModel.forward from inputs_embeds (after its embed_scale: the stack's input),
    Gemma3DecoderLayer's sandwich per layer, then norm. Returns (hidden, [attn_weights])."""
    hidden_states, probs, eps = inputs_embeds, [], config.rms_norm_eps
    for i in range(config.num_hidden_layers):
        pre = "model.layers.%d." % i
        residual = hidden_states
        hidden_states = gemma_rms_norm(hidden_states, sd[pre + "input_layernorm.weight"], eps)
        hidden_states, w = gemma_attention_ref(sd, pre + "self_attn.", hidden_states, config)
        probs.append(w)
        hidden_states = gemma_rms_norm(hidden_states, sd[pre + "post_attention_layernorm.weight"],
                                       eps)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = gemma_rms_norm(hidden_states,
                                       sd[pre + "pre_feedforward_layernorm.weight"], eps)
        hidden_states = hf_mlp(sd, pre + "mlp.", hidden_states, config.hidden_activation)
        hidden_states = gemma_rms_norm(hidden_states,
                                       sd[pre + "post_feedforward_layernorm.weight"], eps)
        hidden_states = residual + hidden_states
    return gemma_rms_norm(hidden_states, sd["model.norm.weight"], eps), probs


def dynamic_erf(x, alpha, shift, weight, bias):
    """Derf's Dynamic_erf.forward: weight * erf(alpha x + shift) (+ bias)."""
    if bias is not None:
        return weight * torch.erf(alpha * x + shift) + bias
    return weight * torch.erf(alpha * x + shift)


def _derf(sd, pre, x):
    return dynamic_erf(x, sd[pre + ".alpha"], sd[pre + ".shift"], sd[pre + ".weight"],
                       sd[pre + ".bias"])


def nanogpt_attention_ref(sd, pre, x, n_head):
    """nanoGPT's CausalSelfAttention.forward (its manual path): c_attn -> q, k, v, causal
    softmax(q k^T / sqrt(hs)) v, c_proj. Returns (y, att)."""
    B, T, C = x.size()
    q, k, v = _lin(sd, pre + "c_attn", x).split(C, dim=2)
    k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
    q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
    v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    bias = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    att = att.masked_fill(bias == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = att @ v
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    return _lin(sd, pre + "c_proj", y), att


def nanogpt_derf_ref(sd, tok_pos_emb, n_layer, n_head):
    """GPT.forward of nanoGPT with model_derf.patch (norm_type 'derf') from tok_emb + pos_emb:
    x = (tok_emb + pos_emb) * shared_scale; per Block x + attn(ln_1(x)), x + mlp(ln_2(x)) with
    ln_1, ln_2 Dynamic_erf and the MLP c_fc, GELU (nn.GELU(): erf), c_proj; then ln_f (a
    Dynamic_erf). Linear biases when sd has them (GPTConfig.bias; Derf's train.py sets False).
    Returns (x, [att per layer])."""
    x, probs = tok_pos_emb * sd["shared_scale"], []
    for i in range(n_layer):
        pre = "transformer.h.%d." % i
        y, att = nanogpt_attention_ref(sd, pre + "attn.", _derf(sd, pre + "ln_1", x), n_head)
        probs.append(att)
        x = x + y
        h = F.gelu(_lin(sd, pre + "mlp.c_fc", _derf(sd, pre + "ln_2", x)))
        x = x + _lin(sd, pre + "mlp.c_proj", h)
    return _derf(sd, "transformer.ln_f", x), probs


def layer_norm_parameterized(x, alpha, weight):
    """DyT's LLaMA LayerNormParameterized.forward: weight * tanh(alpha x), no bias."""
    return weight * torch.tanh(alpha * x)


def fms_rotary_freqs(T, dim, ratio):
    """fms RotaryEmbedding.compute_freqs_cis: per position and pair i the rotation
    [[cos, -sin], [sin, cos]] of angle t ratio^(-2i/dim), (T, dim/2, 2, 2)."""
    freqs = 1.0 / (ratio ** (torch.arange(0, dim, 2, dtype=torch.float64)[: (dim // 2)] / dim))
    t = torch.arange(T, dtype=freqs.dtype)
    freqs = torch.outer(t, freqs)
    return torch.stack([torch.cos(freqs), -torch.sin(freqs), torch.sin(freqs),
                        torch.cos(freqs)], dim=2).view(*freqs.size(), 2, 2)


def fms_adjusted_qk(q, k, ratio):
    """fms RotaryEmbedding.adjusted_qk on q, k (B, S, H, Eh) at positions 0..S-1: each pair
    (2i, 2i+1) of a head times its rotation (interleaved, not rotate-half)."""
    freqs = fms_rotary_freqs(q.size(1), q.size(-1), ratio).to(q.dtype)[None]  # 1 L D/2 2 2
    q_ = q.view(*q.size()[:-1], -1, 2)  # B L H D/2 2
    k_ = k.view(*k.size()[:-1], -1, 2)
    q_out = freqs[:, -q.size(1):, None, :, :, :].mul(q_.unsqueeze(-2)).sum(5).flatten(3)
    k_out = freqs[:, -k.size(1):, None, :, :, :].mul(k_.unsqueeze(-2)).sum(5).flatten(3)
    return q_out.view_as(q), k_out.view_as(k)


def fms_attention_ref(sd, pre, q, nheads, kvheads, ratio):
    """fms MultiHeadAttention.forward (fused QKV, self-attention, is_causal_mask, no bias):
    in_proj.qkv_fused splits [nheads Eh | kvheads Eh | kvheads Eh], RoPE (fms_adjusted_qk),
    KV heads expanded, scaled_dot_product_attention (scale 1/sqrt(Eh)) written out, dense."""
    batch_size, q_len, emb_dim = q.size()
    emb_kq = emb_v = emb_dim // nheads
    q_out, k_out, v_out = F.linear(q, sd[pre + "in_proj.qkv_fused.weight"]).split(
        [nheads * emb_kq, kvheads * emb_kq, kvheads * emb_v], dim=-1)
    queries = q_out.view(batch_size, q_len, nheads, emb_kq)
    keys = k_out.view(batch_size, q_len, kvheads, emb_kq)
    values = v_out.view(batch_size, q_len, kvheads, emb_v)
    queries, keys = fms_adjusted_qk(queries, keys, ratio)
    queries, keys, values = queries.transpose(2, 1), keys.transpose(2, 1), values.transpose(2, 1)
    expansion = nheads // kvheads
    keys_e = keys.unsqueeze(2).expand(-1, -1, expansion, -1, -1).flatten(1, 2)
    values_e = values.unsqueeze(2).expand(-1, -1, expansion, -1, -1).flatten(1, 2)
    # F.scaled_dot_product_attention(queries, keys_e, values_e, is_causal=True)
    att = queries @ keys_e.transpose(-2, -1) / math.sqrt(emb_kq)
    att = att.masked_fill(torch.ones(q_len, q_len, dtype=torch.bool).triu(1), float("-inf"))
    att = torch.softmax(att, dim=-1)
    attn = (att @ values_e).transpose(2, 1).contiguous().view(batch_size, q_len, nheads * emb_v)
    return F.linear(attn, sd[pre + "dense.weight"]), att


def fms_gated_linear_unit(sd, pre, x):
    """fms GatedLinearUnit.forward (fused, activation "swish" = silu, no bias): wg1_fused rows
    [wg | w1], out = a(wg) * w1, then w2."""
    hidden_dim = sd[pre + "w2.weight"].shape[1]
    out_fused = F.linear(x, sd[pre + "wg1_fused.weight"])
    wg, w1 = torch.split(out_fused, [hidden_dim, hidden_dim], dim=2)
    return F.linear(F.silu(wg) * w1, sd[pre + "w2.weight"])


def dyt_llama_ref(sd, emb, nlayers, nheads, kvheads, rope_theta):
    """DyT's LLaMA._helper from the token embedding (self.shared(x_in)): x = emb * shared_scale;
    per LLaMABlock x + attn(ln(x)), x + ff_sub_layer(ff_ln(x)) with ln, ff_ln
    LayerNormParameterized; then dec_norm. Returns (dec_out, [attention weights per layer])."""
    x_in, probs = emb * sd["shared_scale"], []
    for i in range(nlayers):
        pre = "layers.%d." % i
        x = layer_norm_parameterized(x_in, sd[pre + "ln.alpha"], sd[pre + "ln.weight"])
        x, att = fms_attention_ref(sd, pre + "attn.", x, nheads, kvheads, rope_theta)
        probs.append(att)
        x = x + x_in
        residual = x
        x = layer_norm_parameterized(x, sd[pre + "ff_ln.alpha"], sd[pre + "ff_ln.weight"])
        x_in = fms_gated_linear_unit(sd, pre + "ff_sub_layer.", x) + residual
    return layer_norm_parameterized(x_in, sd["dec_norm.alpha"], sd["dec_norm.weight"]), probs
