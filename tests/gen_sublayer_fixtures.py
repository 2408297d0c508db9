#!/usr/bin/python3
"""Generate the PyTorch reference fixtures for tests/test_sublayer_fixtures.c.

    /usr/bin/python3 tests/gen_sublayer_fixtures.py tests/fixtures

Writes <outdir>/attention.bin and <outdir>/ffn.bin. The references are written the way the
original PyTorch code (OLMo / the HybridNorm fork, SPEC.md sections 2 and 3) computes the
sublayers, with plain torch ops and autograd in float64; nothing here knows how normblocks
computes anything. For every case loss = sum(out * dout) with a random dout, then
loss.backward() gives dx and the gradient of every parameter.

File format (little-endian), read by tests/fixture.h:
    magic "NBFX0001" (8 bytes); uint32 count; count records of
    uint32 name_len, name bytes (no NUL), uint32 ndim, uint32 dims[ndim], float64 data[prod(dims)]
Scalars are 1-element tensors (dims = [1]). Names are "<case>.<field>".

attention.bin, per case:
    scalars  B, T, d, H, Hkv, sites (Q=1 K=2 V=4 C=8), width (1 per head, 2 full),
             norm (1 RMS, 2 LayerNorm), no_gain (1 = site norms without gain), rope (0/1),
             theta, causal (0/1), eps
    inputs   x (B*T, d), w_qkv (d + 2*Hkv*dk, d), w_o (d, d), q_gain/k_gain/v_gain/c_gain
             (present for normalized sites unless no_gain), dout (B*T, d)
    results  out, dx, dw_qkv, dw_o, dq_gain/dk_gain/dv_gain/dc_gain
ffn.bin, per case:
    scalars  B, T, d, f, type (1 SwiGLU, 2 GELU tanh, 3 GELU erf), bias (1/0)
    inputs   x (B*T, d), w_in (2f or f, d), b_in, w_out (d, f), b_out, dout (B*T, d)
    results  out, dx, dw_in, db_in, dw_out, db_out   (biases and their gradients only if bias)

The case names are printed; tests/test_sublayer_fixtures.c hard-codes the same lists and fails
when a case is missing from a file or a file holds a case it does not know.
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

SEED = 20240602
MAGIC = b"NBFX0001"
MAX_BYTES = 400 * 1024

SITE_Q, SITE_K, SITE_V, SITE_C = 1, 2, 4, 8
PER_HEAD, FULL = 1, 2
RMS, LAYER = 1, 2
SWIGLU, GELU_TANH, GELU_ERF = 1, 2, 3


class Writer:
    def __init__(self):
        self.records = []
        self.names = set()

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
        assert len(out) < MAX_BYTES, "%s would be %d bytes" % (path, len(out))
        with open(path, "wb") as f:
            f.write(bytes(out))
        return len(out)


def rand_gain(n):
    # non-unit gains: a norm/RoPE order mistake is invisible at gain 1
    return 1.0 + 0.3 * torch.randn(n)


# ---- attention (SPEC 2.1-2.3; OLMo / HybridNorm fork structure) ------------------------------


class Norm:
    """RMSNorm or LayerNorm over the last dimension, optional gain, no bias (OLMo style)."""

    def __init__(self, kind, gain, eps):
        self.kind, self.gain, self.eps = kind, gain, eps

    def __call__(self, x):
        if self.kind == RMS:
            # x * rsqrt(mean(x^2) + eps), then the gain (eps inside the sqrt)
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
            return y * self.gain if self.gain is not None else y
        return F.layer_norm(x, (x.shape[-1],), weight=self.gain, bias=None, eps=self.eps)


def rotate_half(x):
    # NeoX: pairs (i, i + dk/2), not interleaved
    B, nh, T, hs = x.size()
    x = x.view(B, nh, T, 2, hs // 2)
    x1, x2 = x.unbind(dim=-2)
    return torch.cat((-x2, x1), dim=-1)


def rope_sin_cos(T, dk, theta):
    # theta^(-2i/dk), i in [0, dk/2), positions 0..T-1, all float64
    inv_freq = 1.0 / (theta ** (torch.arange(0, dk, 2, dtype=torch.float64) / dk))
    seq = torch.arange(T, dtype=torch.float64)
    freqs = torch.einsum("i , j -> i j", seq, inv_freq)
    positions = torch.cat((freqs, freqs), dim=-1)  # (T, dk)
    return positions.sin()[None, None, :, :], positions.cos()[None, None, :, :]


def apply_rope(t, sin, cos):
    # t: (B, heads, T, dk)
    return t * cos + rotate_half(t) * sin


def attn_forward(cfg, x, w_qkv, w_o, gains):
    B, T, d, H, Hkv = cfg["B"], cfg["T"], cfg["d"], cfg["H"], cfg["Hkv"]
    dk = d // H
    sites, width, kind, eps = cfg["sites"], cfg["width"], cfg["norm"], cfg["eps"]

    def norm(site):
        return Norm(kind, gains.get(site), eps)

    qkv = x @ w_qkv.T  # (B*T, d + 2*Hkv*dk), nn.Linear without bias
    q, k, v = qkv.view(B, T, -1).split((d, Hkv * dk, Hkv * dk), dim=-1)

    if width == FULL:
        # OLMo-2: norm over the flattened projection row, before the head split
        if sites & SITE_Q:
            q = norm("q")(q)
        if sites & SITE_K:
            k = norm("k")(k)
        if sites & SITE_V:
            v = norm("v")(v)

    q = q.reshape(B, T, H, dk)
    k = k.reshape(B, T, Hkv, dk)
    v = v.reshape(B, T, Hkv, dk)

    if width == PER_HEAD:
        # HybridNorm fork: per-head norms over dk, one gain shared by all heads
        if sites & SITE_Q:
            q = norm("q")(q)
        if sites & SITE_K:
            k = norm("k")(k)
        if sites & SITE_V:
            v = norm("v")(v)

    q = q.transpose(1, 2)  # (B, H, T, dk)
    k = k.transpose(1, 2)  # (B, Hkv, T, dk)
    v = v.transpose(1, 2)

    if cfg["rope"]:
        # after the Q/K norms; V is never rotated
        sin, cos = rope_sin_cos(T, dk, cfg["theta"])
        q = apply_rope(q, sin, cos)
        k = apply_rope(k, sin, cos)

    g = H // Hkv
    if g > 1:
        # query head i uses KV head i // g
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)

    s = q @ k.transpose(-2, -1) / math.sqrt(dk)
    if cfg["causal"]:
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = p @ v  # (B, H, T, dk)
    o = o.transpose(1, 2)  # (B, T, H, dk)

    if sites & SITE_C:
        if width == PER_HEAD:
            o = norm("c")(o)  # per head, before the concatenation
        else:
            o = norm("c")(o.reshape(B, T, d))
    c = o.reshape(B * T, d)
    return c @ w_o.T, p


def site_width(cfg, site):
    d, H, Hkv = cfg["d"], cfg["H"], cfg["Hkv"]
    dk = d // H
    if cfg["width"] == PER_HEAD:
        return dk
    return d if site in ("q", "c") else Hkv * dk


def attn_case(w, name, B, T, d, H, Hkv, sites, width=PER_HEAD, norm=RMS, rope=1,
              theta=10000.0, causal=1, eps=1e-5, no_gain=0):
    cfg = dict(B=B, T=T, d=d, H=H, Hkv=Hkv, sites=sites, width=width, norm=norm, rope=rope,
               theta=theta, causal=causal, eps=eps)
    dk = d // H
    assert d % H == 0 and H % Hkv == 0 and dk % 2 == 0
    x = torch.randn(B * T, d).requires_grad_(True)
    w_qkv = (0.3 * torch.randn(d + 2 * Hkv * dk, d)).requires_grad_(True)
    w_o = (0.3 * torch.randn(d, d)).requires_grad_(True)
    gains = {}
    for site, bit in (("q", SITE_Q), ("k", SITE_K), ("v", SITE_V), ("c", SITE_C)):
        if sites & bit and not no_gain:
            gains[site] = rand_gain(site_width(cfg, site)).requires_grad_(True)
    out, p = attn_forward(cfg, x, w_qkv, w_o, gains)
    dout = torch.randn(B * T, d)
    (out * dout).sum().backward()

    # attention must not be (nearly) uniform, or the score path is barely tested
    pv = p.detach()
    vis = pv[pv > 0]
    assert vis.max() > 0.5, name

    for field, val in (("B", B), ("T", T), ("d", d), ("H", H), ("Hkv", Hkv), ("sites", sites),
                       ("width", width), ("norm", norm), ("no_gain", no_gain), ("rope", rope),
                       ("theta", theta), ("causal", causal), ("eps", eps)):
        w.add(name + "." + field, val)
    w.add(name + ".x", x)
    w.add(name + ".w_qkv", w_qkv)
    w.add(name + ".w_o", w_o)
    for site in ("q", "k", "v", "c"):
        if site in gains:
            w.add(name + "." + site + "_gain", gains[site])
    w.add(name + ".dout", dout)
    w.add(name + ".out", out)
    w.add(name + ".dx", x.grad)
    w.add(name + ".dw_qkv", w_qkv.grad)
    w.add(name + ".dw_o", w_o.grad)
    for site in ("q", "k", "v", "c"):
        if site in gains:
            w.add(name + ".d" + site + "_gain", gains[site].grad)


# ---- FFN (SPEC 3) ----------------------------------------------------------------------------


def gelu_tanh_explicit(h):
    # GPT-2: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))))


def ffn_case(w, name, B, T, d, f, typ, bias):
    x = torch.randn(B * T, d).requires_grad_(True)
    rows_in = 2 * f if typ == SWIGLU else f
    w_in = (0.3 * torch.randn(rows_in, d)).requires_grad_(True)
    w_out = (0.3 * torch.randn(d, f)).requires_grad_(True)
    b_in = (0.5 * torch.randn(rows_in)).requires_grad_(True) if bias else None
    b_out = (0.5 * torch.randn(d)).requires_grad_(True) if bias else None

    h = F.linear(x, w_in, b_in)  # x W_in^T (+ b_in)
    if typ == SWIGLU:
        # OLMo SwiGLU: x, gate = h.chunk(2, -1); silu(gate) * x  (first half value, second gate)
        u, z = h.chunk(2, dim=-1)
        a = F.silu(z) * u
    elif typ == GELU_TANH:
        a = F.gelu(h, approximate="tanh")
        assert torch.allclose(a, gelu_tanh_explicit(h), rtol=0, atol=1e-14)
    else:
        a = F.gelu(h)  # exact erf form
        assert torch.allclose(a, 0.5 * h * (1 + torch.erf(h / math.sqrt(2))), rtol=0, atol=1e-14)
    out = F.linear(a, w_out, b_out)
    dout = torch.randn(B * T, d)
    (out * dout).sum().backward()

    for field, val in (("B", B), ("T", T), ("d", d), ("f", f), ("type", typ),
                       ("bias", 1 if bias else 0)):
        w.add(name + "." + field, val)
    w.add(name + ".x", x)
    w.add(name + ".w_in", w_in)
    if bias:
        w.add(name + ".b_in", b_in)
    w.add(name + ".w_out", w_out)
    if bias:
        w.add(name + ".b_out", b_out)
    w.add(name + ".dout", dout)
    w.add(name + ".out", out)
    w.add(name + ".dx", x.grad)
    w.add(name + ".dw_in", w_in.grad)
    if bias:
        w.add(name + ".db_in", b_in.grad)
    w.add(name + ".dw_out", w_out.grad)
    if bias:
        w.add(name + ".db_out", b_out.grad)


def self_checks():
    """Sanity of the reference pieces themselves (SPEC 2.3 and 9)."""
    # RoPE: explicit pair formula of SPEC 2.3
    dk, T, theta = 6, 5, 10000.0
    t = torch.randn(1, 2, T, dk)
    sin, cos = rope_sin_cos(T, dk, theta)
    r = apply_rope(t, sin, cos)
    h = dk // 2
    for p in range(T):
        for i in range(h):
            phi = p * theta ** (-2.0 * i / dk)
            a, b = t[..., p, i], t[..., p, i + h]
            assert torch.allclose(r[..., p, i], a * math.cos(phi) - b * math.sin(phi))
            assert torch.allclose(r[..., p, i + h], b * math.cos(phi) + a * math.sin(phi))
    # gain-free RMSNorm commutes with RoPE, a non-unit gain does not
    n1 = Norm(RMS, None, 1e-5)
    assert torch.allclose(n1(apply_rope(t, sin, cos)), apply_rope(n1(t), sin, cos))
    ng = Norm(RMS, rand_gain(dk), 1e-5)
    assert not torch.allclose(ng(apply_rope(t, sin, cos)), apply_rope(ng(t), sin, cos))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_sublayer_fixtures.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(SEED)
    torch.set_default_dtype(torch.float64)
    self_checks()

    Q, K, V, C = SITE_Q, SITE_K, SITE_V, SITE_C
    w = Writer()
    # the seven HybridNorm variants, per head, spread over MHA / GQA / MQA and RoPE on/off
    attn_case(w, "attn_none_mha_rope", 2, 5, 16, 4, 4, 0)
    attn_case(w, "attn_qkvc_gqa_rope", 2, 7, 16, 4, 2, Q | K | V | C)
    attn_case(w, "attn_qkv_mha_norope", 1, 7, 24, 4, 4, Q | K | V, rope=0)
    attn_case(w, "attn_qkc_mqa_rope", 2, 5, 24, 4, 1, Q | K | C)
    attn_case(w, "attn_qk_gqa_rope", 1, 7, 16, 4, 2, Q | K)
    attn_case(w, "attn_kv_mha_rope", 2, 5, 16, 4, 4, K | V)
    attn_case(w, "attn_kc_gqa_norope", 2, 7, 16, 4, 2, K | C, rope=0)
    # full width (OLMo-2 style: flattened projection rows, before the head split)
    attn_case(w, "attn_qkv_full_gqa_rope", 2, 7, 24, 4, 2, Q | K | V, width=FULL)
    attn_case(w, "attn_qk_full_rope", 2, 5, 16, 4, 4, Q | K, width=FULL, eps=1e-6)
    attn_case(w, "attn_qkvc_full_mqa_rope", 1, 7, 16, 4, 1, Q | K | V | C, width=FULL)
    # LayerNorm at the sites (gain only)
    attn_case(w, "attn_qkvc_ln_gqa_rope", 2, 7, 16, 4, 2, Q | K | V | C, norm=LAYER)
    # no causal mask
    attn_case(w, "attn_qkv_noncausal_gqa", 2, 5, 16, 4, 2, Q | K | V, causal=0)
    # HybridNorm dense theta; dk = 6 so the slow frequencies differ visibly from 10000
    attn_case(w, "attn_qkv_theta500k", 1, 7, 24, 4, 2, Q | K | V, theta=500000.0)
    # site norms without gain
    attn_case(w, "attn_qkvc_nogain_gqa", 1, 7, 16, 4, 2, Q | K | V | C, no_gain=1)
    attn_names = sorted({r[0].split(".")[0] for r in w.records},
                        key=[r[0].split(".")[0] for r in w.records].index)
    path = os.path.join(outdir, "attention.bin")
    n = w.write(path)
    print("wrote %s: %d tensors, %d bytes" % (path, len(w.records), n))
    for c in attn_names:
        print("  " + c)

    w = Writer()
    ffn_case(w, "ffn_swiglu", 2, 5, 16, 24, SWIGLU, False)
    ffn_case(w, "ffn_swiglu_bias", 1, 7, 16, 24, SWIGLU, True)
    ffn_case(w, "ffn_gelu_tanh_bias", 2, 5, 16, 32, GELU_TANH, True)
    ffn_case(w, "ffn_gelu_erf_bias", 2, 7, 16, 32, GELU_ERF, True)
    ffn_case(w, "ffn_gelu_tanh_nobias", 1, 7, 16, 32, GELU_TANH, False)
    ffn_names = sorted({r[0].split(".")[0] for r in w.records},
                       key=[r[0].split(".")[0] for r in w.records].index)
    path = os.path.join(outdir, "ffn.bin")
    n = w.write(path)
    print("wrote %s: %d tensors, %d bytes" % (path, len(w.records), n))
    for c in ffn_names:
        print("  " + c)


if __name__ == "__main__":
    main()
