#!/usr/bin/python3
"""The PyTorch twin (examples/pytorch/normblocks_twin.py) against the stack fixtures.

    /usr/bin/python3 tests/test_twin_fixtures.py tests/fixtures/blocks.bin

tests/fixtures/blocks.bin holds the float64 references test_block_fixtures checks the library
against: one case per preset and option (Mix-LN alphas, the HybridNorm site ablations with
explicit site masks, SiameseNorm's paper scale, paper fusion and no-fusion-norm ablation,
hyper-connections, CompleteP's depth_alpha, nGPT and its parts as options, DenseFormer's
depth-weighted average and its period, Attention Residuals, modded-nanogpt's U-Net skips,
x_0 re-injection and value embeddings, ...),
many of which the trainer cannot build. gen_block_fixtures.py computed them with the twin, after
checking it against its direct transcriptions of the papers' equations. This test holds the
twin of today to those committed values: for each case the twin is built from the case's
description, takes the case's parameters by name (strict: the same names and shapes as the
library's tensor table) and through the library's flat-buffer order (load_flat), and in float64
must give the case's output, input gradient and parameter gradients (loss = sum(out * dout)),
and with Attention Residuals its depth weights (attn_res_weights, nb_stack_attn_res_weights'
matrix), with value embeddings on the case's rows (ve) their gradient (dve), within
1e-9 + 1e-9 |ref|: a change of the twin's math or of its parameter table fails here
before a regenerated fixture could carry it into the library's tests.
blocks_bf16.bin next to it (gen_bf16_fixtures.py: cases "bf16_<case>", the references of
test_block_fixtures_bf16) is checked the same way with the twin in gemm.precision "bf16", and
blocks_porting.bin (gen_porting_fixtures.py: the porting options, checked there against the
official codes) in float64. And the twin's StackConfig is grouped as nb_stack_desc is
(check_config: groups as dicts, the refusals of unknown and 0.1 names, a caller's config left
as it was).
Exits 77 (CTest's skip) when torch cannot be imported.
"""
import copy
import os
import sys
from dataclasses import replace

try:
    import torch
except ImportError:
    print("SKIP: torch cannot be imported (Debian: apt-get install python3-torch)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
from nbfixture import read_nbfx, twin, twin_config  # noqa: E402

ATOL, RTOL = 1e-9, 1e-9
SCALARS = ("L", "B", "T", "d", "H", "Hkv", "f", "rope", "theta", "eps", "norm", "ffn",
           "mixln_alpha", "siamese_paper_scale", "siamese_paper_fusion", "sites",
           "siamese_no_fusion_norm", "attn_bias", "value_residual", "hyper", "hyper_streams",
           "hyper_static", "hyper_sinkhorn", "depth_alpha", "depth_base", "interp_init",
           "qk_scale", "softmax_scale", "ffn_in_scale", "attn_gate", "norm_gain", "norm_bias",
           "gain_offset", "embed_scale_on", "branch_scale", "ffn_bias", "attn_sink", "clip_qkv",
           "softcap", "dwa", "dwa_dilation", "dwa_period", "attn_res", "attn_res_block",
           "unet_skips", "reinject_x0", "value_embeds")


def cases(recs):
    by = {}
    for name, t in recs.items():
        case, _, field = name.partition(".")
        by.setdefault(case, {})[field] = t
    return by


def check_case(name, c):
    s = {k: float(c[k].item()) for k in SCALARS if k in c}
    key = "".join(chr(int(v)) for v in c["preset_key"].tolist())
    cfg = twin_config(s, key)
    if name.startswith("bf16_"):  # blocks_bf16.bin: the twin's bf16 mode (and its out16_ cases
        # gemm.bf16_outputs)
        out16 = int(c["bf16_outputs"].item()) if "bf16_outputs" in c else 0
        cfg = cfg.with_fields(gemm=dict(precision="bf16", bf16_outputs=out16))
    stack = twin.Stack(cfg).double()
    params = {k: v for k, v in c.items()
              if (k.startswith(("blocks.", "embed_norm.", "ln_", "hc_head_", "final_res.")) or
                  k == "embed_scale") and not k.startswith("grad.")}
    stack.load_state_dict(params, strict=True)  # names and shapes of the library's table
    flat = torch.cat([p.detach().reshape(-1) for _, p in stack.library_parameters()])
    again = twin.Stack(cfg).double()
    again.load_flat(flat)  # the flat buffer round trip
    for k, v in again.state_dict().items():
        if not torch.equal(v, params[k]):
            raise AssertionError("load_flat put %s elsewhere" % k)
    B, T, d = int(s["B"]), int(s["T"]), int(s["d"])
    E = c["E"].reshape(B, T, d).clone().requires_grad_(True)
    ve = c["ve"].clone().requires_grad_(True) if "ve" in c else None  # (N, B*T, H_kv d_k)
    depth = []
    out = stack(E, depth_weights=depth, value_embeds=ve)
    (out * c["dout"].reshape(B, T, d)).sum().backward()
    worst, what = 0.0, ""
    pairs = [("out", out.detach().reshape(B * T, d), c["out"]),
             ("din", E.grad.reshape(B * T, d), c["din"])]
    if ve is not None:  # the value embeddings' rows' gradient
        pairs.append(("dve", ve.grad, c["dve"]))
    # Attention Residuals: blocks.bin's cases hold the weights (blocks_bf16.bin's do not)
    if "attn_res_weights" in c or (depth and not name.startswith("bf16_")):
        pairs.append(("attn_res_weights", twin.attn_res_weights(stack.config, depth),
                      c["attn_res_weights"]))
    pairs += [("grad." + k, p.grad, c["grad." + k]) for k, p in stack.named_parameters()]
    for label, got, ref in pairs:
        r = float(((got - ref).abs() / (ATOL + RTOL * ref.abs())).max())
        if r > worst:
            worst, what = r, label
    return worst, what, len(params)


def refused(fn, *words):
    """fn() raises TypeError naming every one of words."""
    try:
        fn()
    except TypeError as e:
        assert all(w in str(e) for w in words), "%s: %s" % (words, e)
        return
    raise AssertionError("accepted: expected a TypeError naming %s" % (words,))


def check_config():
    """StackConfig's groups as nb_stack_desc groups them: a dict for a group, merged field by
    field with what a preset name sets; an unknown group key and a 0.1 flat name refused, naming
    it and where it is now; resolve, Stack and with_fields leave the caller's config as it was."""
    dims = dict(n_layers=2, d_model=16, n_heads=4)
    cfg = twin.StackConfig.from_name("QKV-Post", attn=dict(rope=True), ffn={"d_ff": 32}, **dims)
    assert isinstance(cfg.attn, twin.AttnConfig) and isinstance(cfg.ffn, twin.FfnConfig)
    assert (cfg.attn.sites, cfg.attn.rope, cfg.ffn.d_ff) == (twin.SITES_QKV, True, 32), cfg
    gpt2 = twin.StackConfig.from_name("gpt2", ffn=twin.FfnConfig(d_ff=32), **dims)
    assert (gpt2.ffn.type, gpt2.ffn.d_ff, gpt2.norm.type) == ("gelu_tanh", 32, "layer"), gpt2
    refused(lambda: twin.StackConfig(attn=dict(rotary=True), **dims), "StackConfig.attn",
            "'rotary'")
    refused(lambda: twin.StackConfig(rope=True, **dims), "rope moved to attn.rope")
    refused(lambda: twin.StackConfig.from_name("pre", d_ff=32, **dims), "d_ff moved to ffn.d_ff")
    refused(lambda: replace(cfg, hyper_streams=2), "hyper_streams moved to hyper.streams")
    refused(lambda: twin.StackConfig(norm="layer", **dims), "StackConfig.norm", "norm.type")
    refused(lambda: twin.StackConfig(attn=dict(attn_bias=1), **dims), "'attn_bias'", "attn.bias")
    before = copy.deepcopy(cfg)
    c = twin.resolve(cfg)
    assert (c.norm.type, c.attn.rope_theta, c.ffn.bias) == ("rms", 10000.0, -1), c
    twin.Stack(cfg)
    more = cfg.with_fields(attn=dict(bias=twin.ATTN_BIAS_QKV))
    assert (more.attn.sites, more.attn.rope, more.attn.bias) == (twin.SITES_QKV, True, 1), more
    assert cfg == before, "resolve, Stack or with_fields changed the caller's config"


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "fixtures", "blocks.bin")
    torch.set_num_threads(1)
    failed = 0
    all_cases = cases(read_nbfx(path))
    for other in ("blocks_bf16.bin", "blocks_porting.bin"):
        other = os.path.join(os.path.dirname(path), other)
        if os.path.exists(other):
            all_cases.update(cases(read_nbfx(other)))
    try:
        check_config()
        print("ok: StackConfig's groups (dicts, refusals, the caller's config unchanged)")
    except AssertionError as e:
        failed += 1
        print("FAIL: StackConfig's groups: %s" % e)
    for name, c in all_cases.items():
        try:
            worst, what, n = check_case(name, c)
            ok = worst <= 1
            msg = ("%d tensors, every result bitwise equal" % n if worst == 0 else
                   "%d tensors, worst %s at %.3g of the tolerance" % (n, what, worst))
        except Exception as e:  # a refused description or a name/shape mismatch
            ok, msg = False, "%s: %s" % (type(e).__name__, e)
        failed += not ok
        print("%s: %s: %s" % ("ok" if ok else "FAIL", name, msg))
    print("%d passed, %d failed" % (len(all_cases) + 1 - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
