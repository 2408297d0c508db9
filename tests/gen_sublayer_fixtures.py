#!/usr/bin/python3
"""Generate the PyTorch reference fixtures for tests/test_sublayer_fixtures.c.

    /usr/bin/python3 tests/gen_sublayer_fixtures.py tests/fixtures

Writes <outdir>/attention.bin and <outdir>/ffn.bin. The references are the sublayers of the
PyTorch twin (examples/pytorch/normblocks_twin.py: Block.attention and Block.ffn), in float64
with autograd, checked against direct transcriptions of how the original PyTorch code (OLMo /
the HybridNorm fork) computes them (nbfixture.attention, ffn_direct below): the output and every
gradient must agree to 1e-12 before a case is written. Nothing here knows how normblocks computes
anything. For every case loss = sum(out * dout) with a random dout, then loss.backward() gives
dx and the gradient of every parameter.

File format: NBFX0001, written by tests/nbfixture.py, read by tests/fixture.h. Scalars are
1-element tensors (dims = [1]). Names are "<case>.<field>".

attention.bin, per case:
    scalars  B, T, d, H, Hkv, sites (Q=1 K=2 V=4 C=8), width (1 per head, 2 full),
             norm (1 RMS, 2 LayerNorm), no_gain (1 = site norms without gain), rope (0/1),
             theta, causal (0/1), eps; bias (NB_ATTN_BIAS_* mask) only when not 0; sink
             (nb_attn_sink: 1 learned, 2 off-by-one) only when not 0; clip_qkv (OLMo's c:
             Q|K|V clamped to [-c, c] after b_qkv) only when not 0; softcap (Gemma 2's c: the
             scaled scores s become c tanh(s / c)) only when not 0
    inputs   x (B*T, d), w_qkv (d + 2*Hkv*dk, d), w_o (d, d), q_gain/k_gain/v_gain/c_gain
             (present for normalized sites unless no_gain), b_qkv, b_o (with bias), sinks (H,
             learned sinks), dout
    results  out, dx, dw_qkv, dw_o, dq_gain/dk_gain/dv_gain/dc_gain, db_qkv, db_o, dsinks;
             sink_mass (H, with a sink: each head's mean sink probability over the B*T rows,
             nb_attn_sink_mass)
ffn.bin, per case:
    scalars  B, T, d, f, type (1 SwiGLU, 2 GELU tanh, 3 GELU erf), bias (1/0)
    inputs   x (B*T, d), w_in (2f or f, d), b_in, w_out (d, f), b_out, dout (B*T, d)
    results  out, dx, dw_in, db_in, dw_out, db_out   (biases and their gradients only if bias)

The case names are printed; tests/test_sublayer_fixtures.c hard-codes the same lists and fails
when a case is missing from a file or a file holds a case it does not know.
"""
import math
import os

import torch
import torch.nn.functional as F

from nbfixture import (FFN_TYPES, FULL, GELU_ERF, GELU_TANH, LAYER, NORM_KINDS, PER_HEAD, RMS,
                       SINK_LEARNED, SINK_OFF_BY_ONE, SINKS, SITE_C, SITE_K, SITE_Q, SITE_V,
                       SITES, SWIGLU, Writer, apply_rope,
                       attention, check_norm_rope_order, norm_fn, output_dir, rand_gain,
                       rope_sin_cos, site_width, twin)

SEED = 20240602
# attention.bin: 390 kB, 61 kB more for the sink cases (attn_sink_*), the clip_qkv cases'
# (attn_clip_*) and the softcap cases' (attn_softcap_*)
MAX_BYTES = 580 * 1024
# clip_qkv cases: the share of Q|K|V values clamped (enough that the zero gradient is seen,
# enough left that the projection's gradient is), and the least distance of a value from +-c
# (float32 rounding of the projection, ~1e-6 here, must not move a value across the bound:
# the gradient jumps there)
CLIP_SHARE, CLIP_GAP = (0.1, 0.6), 1e-4
# softcap cases: the share of the visible scaled scores beyond the cap, |s| > c, where
# c tanh(s / c) bends away from s: enough that the cap and its derivative are seen, enough
# left near the linear part that the scores' gradient is too
SOFTCAP_SHARE = (0.05, 0.6)


# ---- the twin's sublayers ----------------------------------------------------------------


def twin_block(d, H, Hkv, **fields):
    """Layer 0 of a one-layer twin stack (StackConfig fields on top of the "pre" preset, whose
    attention has no site norms unless attn.sites says so); its parameters are left for the
    caller to fill, and their initialization does not advance the generator's random stream."""
    cfg = twin.resolve(twin.StackConfig(n_layers=1, d_model=d, n_heads=H, n_kv_heads=Hkv,
                                        **fields))
    with torch.random.fork_rng(devices=[]):
        return twin.Block(cfg, 0)


def set_params(module, values):
    """Copy values (attribute path -> tensor) into the module's parameters."""
    with torch.no_grad():
        for path, v in values.items():
            module.get_parameter(path).copy_(v)


def backward_both(outs, dout, leaves):
    """loss = sum(out * dout) of every output; returns the gradients of each leaf list."""
    for out in outs:
        (out * dout).sum().backward()
    return [[t.grad for t in ls] for ls in leaves]


def check_same(name, twin_vals, direct_vals):
    # the twin and the direct transcription: the same float64 ops up to their order
    for a, b in zip(twin_vals, direct_vals):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12), name


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def attn_forward(cfg, x, w_qkv, w_o, gains, b_qkv=None, b_o=None, sinks=None, clip=0.0,
                 softcap=0.0, logits=None):
    """The direct transcription (nbfixture.attention); the site norms have no bias (OLMo).
    logits: a list the scaled scores before the softcap are appended to."""
    kind, eps = cfg["norm"], cfg["eps"]

    def snorm(site, t):
        return norm_fn(kind, t, gains.get(site), None, eps)

    return attention(x, w_qkv, w_o, cfg["B"], cfg["T"], cfg["d"], cfg["H"], cfg["Hkv"],
                     cfg["sites"], cfg["width"], snorm, cfg["rope"], cfg["theta"], cfg["causal"],
                     b_qkv, b_o, sinks=sinks, clip_qkv=clip, softcap=softcap, logits=logits)


def attn_case(w, name, B, T, d, H, Hkv, sites, width=PER_HEAD, norm=RMS, rope=1,
              theta=10000.0, causal=1, eps=1e-5, no_gain=0, bias=0, sink=0, clip=0.0,
              softcap=0.0):
    cfg = dict(B=B, T=T, d=d, H=H, Hkv=Hkv, sites=sites, width=width, norm=norm, rope=rope,
               theta=theta, causal=causal, eps=eps)
    dk = d // H
    assert d % H == 0 and H % Hkv == 0 and dk % 2 == 0
    x = torch.randn(B * T, d)
    # the parameters under the twin's names, in nb_attn_params_bind's order
    vals = {"att_proj.weight": 0.3 * torch.randn(d + 2 * Hkv * dk, d),
            "attn_out.weight": 0.3 * torch.randn(d, d)}
    for site, bit in SITES:
        if sites & bit and not no_gain:
            vals[site + "_norm.weight"] = rand_gain(site_width(d, H, Hkv, width, site))
    if bias & twin.ATTN_BIAS_QKV:
        vals["att_proj.bias"] = 0.5 * torch.randn(d + 2 * Hkv * dk)
    if bias & twin.ATTN_BIAS_OUT:
        vals["attn_out.bias"] = 0.5 * torch.randn(d)
    if sink == SINK_LEARNED:  # O(1) logits: the sink takes a visible share of every head
        vals["sinks"] = torch.randn(H)

    # the twin (site norms without gain: the twin's gains stay 1)
    blk = twin_block(d, H, Hkv, norm=dict(type=NORM_KINDS[norm], eps=eps),
                     attn=dict(sites=sites, site_width="per_head" if width == PER_HEAD else
                               "full", rope=bool(rope), rope_theta=theta,
                               non_causal=not causal, bias=bias, sink=SINKS[sink],
                               clip_qkv=clip, softcap=softcap))
    set_params(blk, vals)
    blk.probs = []
    xt = leaf(x)
    out = blk.attention(xt.reshape(B, T, d)).reshape(B * T, d)
    # the direct transcription
    direct = {k: leaf(v) for k, v in vals.items()}
    xd = leaf(x)
    logits = []
    ref, p = attn_forward(cfg, xd, direct["att_proj.weight"], direct["attn_out.weight"],
                          {s: direct[s + "_norm.weight"] for s, _ in SITES
                           if s + "_norm.weight" in direct},
                          direct.get("att_proj.bias"), direct.get("attn_out.bias"),
                          direct["sinks"] if sink == SINK_LEARNED else
                          torch.zeros(H) if sink == SINK_OFF_BY_ONE else None, clip, softcap,
                          logits)
    dout = torch.randn(B * T, d)
    grads, ref_grads = backward_both((out, ref), dout, (
        [xt] + [blk.get_parameter(k) for k in vals], [xd] + list(direct.values())))
    check_same(name, [out, blk.probs[0]] + grads, [ref, p] + ref_grads)

    # attention must not be (nearly) uniform, or the score path is barely tested
    pv = p.detach()
    vis = pv[pv > 0]
    assert vis.max() > 0.5, name
    # and a sink takes a visible share in every head, or dz and the rescaling go untested
    sink_mass = (1 - pv.sum(-1)).mean(dim=(0, 2))  # per head, over the B*T rows
    assert not sink or sink_mass.min() > 0.02, (name, sink_mass)
    # clip_qkv clamps a good share of Q|K|V, and no value sits within float32 reach of +-c
    if clip:
        raw = x @ vals["att_proj.weight"].T + vals.get("att_proj.bias", 0)
        share = (raw.abs() > clip).double().mean().item()
        gap = (raw.abs() - clip).abs().min().item()
        assert CLIP_SHARE[0] <= share <= CLIP_SHARE[1] and gap > CLIP_GAP, (name, share, gap)
    # the softcap bends a good share of the visible scaled scores
    if softcap:
        visible = torch.ones(T, T, dtype=torch.bool)
        visible = visible.tril() if causal else visible
        share = (logits[0].abs() > softcap)[..., visible].double().mean().item()
        assert SOFTCAP_SHARE[0] <= share <= SOFTCAP_SHARE[1], (name, share)

    for field, val in (("B", B), ("T", T), ("d", d), ("H", H), ("Hkv", Hkv), ("sites", sites),
                       ("width", width), ("norm", norm), ("no_gain", no_gain), ("rope", rope),
                       ("theta", theta), ("causal", causal), ("eps", eps)):
        w.add(name + "." + field, val)
    if bias:  # optional: absent = no biases
        w.add(name + ".bias", bias)
    if sink:  # optional: absent = no sink
        w.add(name + ".sink", sink)
    if clip:  # optional: absent = off
        w.add(name + ".clip_qkv", clip)
    if softcap:  # optional: absent = off
        w.add(name + ".softcap", softcap)
    # the fixture's names of the twin's parameters, in the order the file has always had
    fixture = [("att_proj.weight", "w_qkv"), ("attn_out.weight", "w_o")] + \
        [(s + "_norm.weight", s + "_gain") for s, _ in SITES] + \
        [("att_proj.bias", "b_qkv"), ("attn_out.bias", "b_o"), ("sinks", "sinks")]
    w.add(name + ".x", x)
    for k, f in fixture:
        if k in vals:
            w.add(name + "." + f, vals[k])
    w.add(name + ".dout", dout)
    w.add(name + ".out", out)
    named = dict(zip(["x"] + list(vals), grads))
    for k, f in [("x", "x")] + fixture:
        if k in named:
            w.add(name + ".d" + f, named[k])
    if sink:
        w.add(name + ".sink_mass", sink_mass)


# ---- FFN -----------------------------------------------------------------------------------


def gelu_tanh_explicit(h):
    # GPT-2: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))))


def ffn_direct(x, w_in, b_in, w_out, b_out, typ):
    """The FFN as OLMo / GPT-2 write it."""
    h = F.linear(x, w_in, b_in)  # x W_in^T (+ b_in)
    if typ == SWIGLU:
        # OLMo SwiGLU: x, gate = h.chunk(2, -1); silu(gate) * x  (first half value, second gate)
        u, z = h.chunk(2, dim=-1)
        a = F.silu(z) * u
    elif typ == GELU_TANH:
        a = gelu_tanh_explicit(h)
    else:
        a = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))  # the exact erf form
    return F.linear(a, w_out, b_out)


def ffn_case(w, name, B, T, d, f, typ, bias):
    x = torch.randn(B * T, d)
    rows_in = 2 * f if typ == SWIGLU else f
    vals = {"ff_proj.weight": 0.3 * torch.randn(rows_in, d),
            "ff_out.weight": 0.3 * torch.randn(d, f)}
    if bias:
        vals["ff_proj.bias"] = 0.5 * torch.randn(rows_in)
        vals["ff_out.bias"] = 0.5 * torch.randn(d)

    blk = twin_block(d, 2, 2, ffn=dict(type=FFN_TYPES[typ], d_ff=f, bias=1 if bias else -1))
    set_params(blk, vals)
    xt = leaf(x)
    out = blk.ffn(xt)
    twin_params = [blk.get_parameter(k) for k in vals]
    direct = {k: leaf(v) for k, v in vals.items()}
    xd = leaf(x)
    ref = ffn_direct(xd, direct["ff_proj.weight"], direct.get("ff_proj.bias"),
                     direct["ff_out.weight"], direct.get("ff_out.bias"), typ)
    dout = torch.randn(B * T, d)
    grads, ref_grads = backward_both((out, ref), dout, ([xt] + twin_params,
                                                        [xd] + list(direct.values())))
    check_same(name, [out] + grads, [ref] + ref_grads)

    for field, val in (("B", B), ("T", T), ("d", d), ("f", f), ("type", typ),
                       ("bias", 1 if bias else 0)):
        w.add(name + "." + field, val)
    w.add(name + ".x", x)
    w.add(name + ".w_in", vals["ff_proj.weight"])
    if bias:
        w.add(name + ".b_in", vals["ff_proj.bias"])
    w.add(name + ".w_out", vals["ff_out.weight"])
    if bias:
        w.add(name + ".b_out", vals["ff_out.bias"])
    w.add(name + ".dout", dout)
    w.add(name + ".out", out)
    named = dict(zip(["dx"] + ["dw_in", "dw_out", "db_in", "db_out"][:len(vals)], grads))
    for field in ("dx", "dw_in", "db_in", "dw_out", "db_out"):
        if field in named:
            w.add(name + "." + field, named[field])


def self_checks():
    """Sanity of the reference pieces themselves."""
    # RoPE: the explicit pair formula
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
    check_norm_rope_order(t, sin, cos, rand_gain(dk))


def write(w, outdir, fname):
    path = os.path.join(outdir, fname)
    n = w.write(path)
    print("wrote %s: %d tensors, %d bytes" % (path, len(w.records), n))
    for c in w.case_names():
        print("  " + c)


def main():
    outdir = output_dir("gen_sublayer_fixtures.py")
    torch.manual_seed(SEED)
    torch.set_default_dtype(torch.float64)
    self_checks()

    Q, K, V, C = SITE_Q, SITE_K, SITE_V, SITE_C
    w = Writer(MAX_BYTES)
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
    # projection biases (GPT-2 both, here under QKVC norms and RoPE: b_qkv enters before the
    # norms); their own random stream, so that the cases above and the FFN's keep theirs
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED + 1)
        attn_case(w, "attn_bias_qkvc_gqa_rope", 2, 5, 16, 4, 2, Q | K | V | C, bias=3)
        attn_case(w, "attn_bias_out_mha", 1, 7, 16, 4, 4, 0, rope=0, bias=2)
    # attention sinks (gpt-oss's learned logit per query head; the off-by-one softmax): GQA
    # (one sink per query head, not per KV head), non-causal rows (no key masked), full-width
    # QKVC norms with biases (the C norm after the sink's rescaling: a per-head C norm would
    # all but undo it, leaving dz ~ 0); a stream of their own too
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED + 2)
        attn_case(w, "attn_sink_learned_gqa_rope", 2, 7, 16, 4, 2, Q | K, sink=SINK_LEARNED)
        attn_case(w, "attn_sink_obo_noncausal_mha", 2, 5, 16, 4, 4, Q | K | V, rope=0, causal=0,
                  sink=SINK_OFF_BY_ONE)
        attn_case(w, "attn_sink_learned_qkvc_full_mqa_bias", 1, 7, 16, 4, 1, Q | K | V | C,
                  width=FULL, bias=3, sink=SINK_LEARNED)
    # OLMo's clip_qkv (Q|K|V clamped after b_qkv, before the site norms), checked against
    # OLMo's clamp of the projection (nbfixture.attention): no site norms with both biases and
    # GQA (the clamp alone before RoPE); OLMo-2's full-width Q, K norms then RoPE, MHA (the
    # clamp, then the norms over the clamped rows); per-head QKVC LayerNorms with MQA, learned
    # sinks and no causal mask; a stream of their own
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED + 3)
        attn_case(w, "attn_clip_none_gqa_bias", 2, 5, 16, 4, 2, 0, bias=3, clip=1.0)
        attn_case(w, "attn_clip_qk_full_rope", 2, 7, 16, 4, 4, Q | K, width=FULL, eps=1e-6,
                  clip=0.8)
        attn_case(w, "attn_clip_qkvc_ln_mqa_sink", 1, 7, 16, 4, 1, Q | K | V | C, norm=LAYER,
                  causal=0, sink=SINK_LEARNED, clip=1.2)
    # Gemma 2's attention-logit softcap (the scaled scores s become c tanh(s / c), before the
    # mask and a sink's column), checked against Gemma 2's eager attention (nbfixture.attention),
    # c near the 75th percentile of the case's |s| (SOFTCAP_SHARE beyond it): no site norms,
    # GQA and RoPE (the largest scores); per-head Q, K norms then RoPE with learned sinks (z_h
    # joins uncapped) and GQA; full-width QKVC norms, MQA, both biases and no causal mask (the
    # cap on every score, none masked); a stream of their own
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED + 4)
        attn_case(w, "attn_softcap_none_gqa_rope", 2, 7, 16, 4, 2, 0, softcap=1.2)
        attn_case(w, "attn_softcap_qk_gqa_rope_sink", 2, 5, 16, 4, 2, Q | K, sink=SINK_LEARNED,
                  softcap=1.3)
        attn_case(w, "attn_softcap_qkvc_full_mqa_noncausal_bias", 2, 5, 16, 4, 1, Q | K | V | C,
                  width=FULL, causal=0, bias=3, softcap=1.2)
    write(w, outdir, "attention.bin")

    w = Writer(MAX_BYTES)
    ffn_case(w, "ffn_swiglu", 2, 5, 16, 24, SWIGLU, False)
    ffn_case(w, "ffn_swiglu_bias", 1, 7, 16, 24, SWIGLU, True)
    ffn_case(w, "ffn_gelu_tanh_bias", 2, 5, 16, 32, GELU_TANH, True)
    ffn_case(w, "ffn_gelu_erf_bias", 2, 7, 16, 32, GELU_ERF, True)
    ffn_case(w, "ffn_gelu_tanh_nobias", 1, 7, 16, 32, GELU_TANH, False)
    write(w, outdir, "ffn.bin")


if __name__ == "__main__":
    main()
