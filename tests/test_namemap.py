#!/usr/bin/python3
"""Name maps end to end: the PyTorch twin writes stacks in the layouts of the codebases the seeds
come from, nbimport loads each into the C stack through nb_stack_tensor_parts and runs it, and
its output must equal the twin's; and nbimport's exports load back into the twin.

    /usr/bin/python3 tests/test_namemap.py path/to/nbimport

The layouts are the twin's (normblocks_twin.to_hf / from_hf / hf_parts), written from those
codebases' own conventions, not from the library's table: Hugging Face Llama as the Mix-LN code
names its norms (Pre-LN layers: input_layernorm, post_attention_layernorm; Post-LN layers:
post_attention_layernorm after the attention add, post_feedforward_layernorm after the MLP add;
sandwich: input_, post_attention_, pre_feedforward_, post_feedforward_layernorm; OLMo-2:
post_attention_ and post_feedforward_layernorm on the sublayer outputs), separate q/k/v and
gate/up/down projections, self_attn.q_norm / k_norm (Qwen3 per head, OLMo-2 over the whole
projection); Hugging Face GPT-2 with Conv1D weights stored (in, out), fused c_attn [Q|K|V] and
attention biases, also as the hub's files have it (no "transformer." prefix, causal-mask
buffers); a Llama file with Q/K/V biases (Qwen2's). The C tool and the twin must agree:

1. Name maps. Each stack written by to_hf runs in nbimport to the twin's output, and
   `nbimport --export` of the library-named tensors writes exactly to_hf's tensors (names,
   shapes, values). BF16 and F16 files (the weights rounded to them) run to the twin's output on
   the same rounded weights. A GPT-2 file with a tensor that has no place, a Llama file missing a
   norm, and a GPT-2 file in the other GPT-2 layout are refused with a message naming it.
2. Hugging Face directories, one per family nbimport reads (llama, llama with attention_bias,
   qwen2, qwen3, qwen3 with attention_bias, olmo2, gpt2; D=32, H=4, KV=2 where GQA is allowed,
   FF=48, 2 layers): save_hf_dir writes config.json + model.safetensors; the twin's stack equals
   an independent float64 transcription of the Hugging Face classes' forward (hf_reference,
   written from transformers' modeling_llama / qwen2 / qwen3 / olmo2 / gpt2, reading only
   config.json and the HF-named tensors: this holds the layouts and configs to what those
   classes compute, Qwen3's per-head and OLMo-2's full-width QK norms included), nbimport runs
   the directory to the twin's output, and load_hf_dir reads it back exactly. One family also
   sharded (model.safetensors.index.json + 2 shards).
3. The other way: `nbimport --export STYLE LIB DIR/` of a library-named file with an embedding
   and head (examples/train's names and metadata) gives a directory whose load_hf_dir stack
   computes the same output bitwise, with the same embedding and head, and whose config.json is
   the twin's hf_config (Qwen3's from the preset name Pre-QK-Pre); a stack no HF class computes
   (Mix-LN) is refused by both, and the Mix-LN and sandwich stacks the hf-llama names hold (for
   the Mix-LN code, read in section 1) are refused by --export naming the field.
4. config.json refusals: keys the library does not compute are refused by nbimport and by the
   twin's config_from_hf, both naming the key; inert keys are accepted by both.
5. Attention sinks: a Llama-named file with gpt-oss's self_attn.sinks (hf_parts' names) runs in
   nbimport to the twin's output; the export of the stack is refused by both, naming attn_sink.
6. OLMo's clip_qkv: an OLMo-2-named file with the trainer's clip_qkv key runs in nbimport to
   the twin's clamped output; the export is refused by both, naming clip_qkv (Olmo2Config
   drops OLMo-1's clip_qkv).
7. Gemma 2's attention-logit softcap: a Llama-named file with the trainer's attn_softcap key
   runs in nbimport to the twin's capped output; the export is refused by both, naming
   attn_softcap (no Llama-family, OLMo-2 or GPT-2 class caps its scores).
8. DenseFormer's depth-weighted average and Attention Residuals: library-named files with the
   trainer's keys (dwa, dwa_dilation, dwa_period; attn_res, attn_res_block) run in nbimport to
   the twin's output; the export is refused by both, naming dwa and attn_res.
9. modded-nanogpt's U-Net skips and x_0 re-injection: library-named files with the trainer's
   keys (unet_skips and reinject_x0 "on"; reinject_x0 alone) run in nbimport to the twin's
   output; the export is refused by both, naming unet_skips (reinject_x0 alone: reinject_x0).
10. Width muP: an hf-llama file with the trainer's keys (mup, mup_base_head_dim, and the
   width_base and multipliers nbimport ignores) runs in nbimport to the twin's output at muP's
   attention scale; the export is refused by both, naming softmax_scale.
11. modded-nanogpt's value embeddings: a library-named file with the trainer's key value_embeds
   (its layers mix the trainer's tables at each token, which a stack run on embeddings cannot
   have) is refused by nbimport, reading and exporting, naming value_embeds; the twin's to_hf
   and hf_family refuse the stack, naming value_embeds.

Tolerance: float32 rounding of a 2-4 layer stack, |C - twin| <= 1e-5 + 1e-4 |twin| (measured
~1e-6); the float64 twin against the float64 transcription, 1e-10 + 1e-9 |ref|. Exits 77
(CTest's skip) without torch.
"""
import copy
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP: torch cannot be imported (Debian: apt-get install python3-torch)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "pytorch"))
import normblocks_twin as twin  # noqa: E402
from normblocks_twin import Stack, StackConfig, read_safetensors, write_safetensors  # noqa: E402

H = 4
D, HKV, FF, B, T, VOCAB = 32, 2, 48, 2, 7, 50
QK = twin.SITE_Q | twin.SITE_K
# (name, preset, n_layers, layout, extra StackConfig fields)
CASES = [("pre", "pre", 2, "hf-llama", {}),
         ("mixln", "mixln", 4, "hf-llama", {}),        # layer 0 Post-LN, layers 1-3 Pre-LN
         ("sandwich", "sandwich", 2, "hf-llama", {}),
         ("gpt2", "gpt2", 2, "hf-gpt2", {"n_kv_heads": H}),  # GPT-2 has no GQA
         ("qkv_bias", "pre", 2, "hf-llama", {"attn": {"bias": 1}}),  # Qwen2's Q/K/V biases
         ("hybrid", "hybrid", 2, "normblocks", {})]
# the layouts' names hold these for the codes that write them (the Mix-LN code's Llama), which
# nbimport reads; Llama's own code would run them as Pre-LN, so --export refuses them, by field
EXPORT_REFUSED = {"mixln": "post_norm (preset mixln, layer 0, attention)",
                  "sandwich": "output_norm (preset sandwich, layer 0, attention)"}
# (name, model_type, preset, extra StackConfig fields): one stack per HF family
FAMILIES = [("llama", "llama", "pre", {"norm": {"eps": 1e-6}}),
            ("llama_bias", "llama", "pre", {"attn": {"bias": 3}}),
            ("qwen2", "qwen2", "pre", {"attn": {"bias": 1}}),
            ("qwen3", "qwen3", "pre", {"attn": {"sites": QK, "site_width": "per_head"}}),
            ("qwen3_bias", "qwen3", "pre",
             {"attn": {"sites": QK, "site_width": "per_head", "bias": 3}}),
            ("olmo2", "olmo2", "olmo2", {"attn": {"rope_theta": 500000.0}}),
            ("gpt2", "gpt2", "gpt2", {"n_kv_heads": H})]
IO = ("model.embed_tokens.weight", "lm_head.weight", "transformer.wte.weight",
      "transformer.wpe.weight")
failed = 0


def report(ok, what, detail=""):
    global failed
    failed += not ok
    print("%s: %s%s" % ("ok" if ok else "FAIL", what, " (%s)" % detail if detail else ""))


def close(out, ref, atol=1e-5, rtol=1e-4):
    return out is not None and out.shape == ref.shape and \
        bool(((out - ref).abs() <= atol + rtol * ref.abs()).all())


def make_stack(preset, L, rope, **fields):
    """A twin stack with random weights: gains near 1, matrices scaled by 1/sqrt(fan-in).
    fields: StackConfig fields on top (a group's merged with these: attn=dict(bias=1) keeps
    rope)."""
    cfg = StackConfig.from_name(preset, n_layers=L, d_model=D, n_heads=H, n_kv_heads=HKV,
                                ffn=dict(d_ff=FF), attn=dict(rope=rope)).with_fields(**fields)
    stack = Stack(cfg)
    with torch.no_grad():
        for n_, t in stack.named_parameters():
            t.copy_(1 + 0.2 * torch.randn_like(t) if t.dim() == 1 and "bias" not in n_
                    else 0.3 * torch.randn_like(t) / (t.shape[-1] ** 0.5 if t.dim() == 2 else 1))
    return stack.eval()


def forward(stack, E):
    with torch.no_grad():
        return stack(E)


def train_meta(stack, preset):
    """examples/train's metadata keys for a stack (as nbimport and config_from_metadata read)."""
    c = stack.config
    return {"preset": preset, "n_layers": str(c.n_layers), "d_model": str(c.d_model),
            "n_heads": str(c.n_heads), "n_kv_heads": str(c.n_kv_heads),
            "d_ff": str(c.ffn.d_ff), "rope": str(int(c.attn.rope)), "norm": c.norm.type,
            "ffn": "gelu" if c.ffn.type == "gelu_tanh" else c.ffn.type,
            "attn_bias": str(c.attn.bias)}


def nbimport_run(nbimport, style, model, E, work, tag):
    """nbimport STYLE MODEL INPUT OUT: (completed process, output tensor or None)."""
    ipath, opath = os.path.join(work, tag + ".input"), os.path.join(work, tag + ".out")
    write_safetensors(ipath, [("E", E)])
    r = subprocess.run([nbimport, style, model, ipath, opath], capture_output=True, text=True)
    return r, (read_safetensors(opath)[0]["out"] if r.returncode == 0 else None)


def run_file(nbimport, layout, tensors, meta, E, work, tag, dtype="F32"):
    """Write tensors (with the stack's metadata) as one file and run it through nbimport."""
    mpath = os.path.join(work, tag + ".model")
    write_safetensors(mpath, list(tensors.items()), meta, dtype)
    return nbimport_run(nbimport, layout, mpath, E, work, tag)


# ---- the Hugging Face classes' forward, transcribed (float64), from config.json and HF names ----


def _rms(x, w, eps):
    """LlamaRMSNorm / Qwen3RMSNorm / Olmo2RMSNorm: w * x / sqrt(mean(x^2) + eps)."""
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _causal_attention(q, k, v, scale):
    """eager_attention_forward: (B, heads, T, hd); KV heads repeated as repeat_kv does."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        Bk, hk, Tk, hd = k.shape
        k = k[:, :, None].expand(Bk, hk, rep, Tk, hd).reshape(Bk, hk * rep, Tk, hd)
        v = v[:, :, None].expand(Bk, hk, rep, Tk, hd).reshape(Bk, hk * rep, Tk, hd)
    w = q @ k.transpose(2, 3) * scale
    Tq = q.shape[2]
    w = w.masked_fill(torch.ones(Tq, Tq, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(w, dim=-1) @ v


def _llama_like_layer(conf, t, l, x):
    """A decoder layer of LlamaDecoderLayer / Qwen2 / Qwen3 / Olmo2DecoderLayer."""
    mt, eps = conf["model_type"], conf["rms_norm_eps"]
    Hq, Hk = conf["num_attention_heads"], conf["num_key_value_heads"]
    hd = conf["hidden_size"] // Hq
    p = "model.layers.%d." % l
    Bx, Tx, _ = x.shape

    def lin(h, name):
        b = t.get(p + name + ".bias")
        return h @ t[p + name + ".weight"].t() + (b if b is not None else 0)

    def attn(h):
        q, k, v = lin(h, "self_attn.q_proj"), lin(h, "self_attn.k_proj"), lin(h, "self_attn.v_proj")
        if mt == "olmo2":  # Olmo2Attention: q_norm, k_norm over the whole projections
            q, k = _rms(q, t[p + "self_attn.q_norm.weight"], eps), \
                _rms(k, t[p + "self_attn.k_norm.weight"], eps)
        q, k, v = (z.view(Bx, Tx, -1, hd) for z in (q, k, v))
        if mt == "qwen3":  # Qwen3Attention: q_norm, k_norm over each head's head_dim
            q, k = _rms(q, t[p + "self_attn.q_norm.weight"], eps), \
                _rms(k, t[p + "self_attn.k_norm.weight"], eps)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        inv = 1.0 / conf["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        emb = torch.arange(Tx, dtype=torch.float64)[:, None] * inv[None]
        emb = torch.cat((emb, emb), dim=-1)
        q = q * emb.cos() + _rotate_half(q) * emb.sin()
        k = k * emb.cos() + _rotate_half(k) * emb.sin()
        o = _causal_attention(q, k, v, hd ** -0.5).transpose(1, 2).reshape(Bx, Tx, -1)
        return lin(o, "self_attn.o_proj")

    def mlp(h):
        return lin(torch.nn.functional.silu(lin(h, "mlp.gate_proj")) * lin(h, "mlp.up_proj"),
                   "mlp.down_proj")

    if mt == "olmo2":  # Olmo2DecoderLayer: norms after the sublayers, before the adds
        x = x + _rms(attn(x), t[p + "post_attention_layernorm.weight"], eps)
        return x + _rms(mlp(x), t[p + "post_feedforward_layernorm.weight"], eps)
    x = x + attn(_rms(x, t[p + "input_layernorm.weight"], eps))
    return x + mlp(_rms(x, t[p + "post_attention_layernorm.weight"], eps))


def _gpt2_block(conf, t, l, x):
    """GPT2Block: Conv1D projections x @ W + b with W (in, out), LayerNorms, gelu_new."""
    p, eps, nh = "transformer.h.%d." % l, conf["layer_norm_epsilon"], conf["n_head"]
    Bx, Tx, d = x.shape

    def conv(h, name):
        return h @ t[p + name + ".weight"] + t[p + name + ".bias"]

    def ln(h, name):
        return torch.nn.functional.layer_norm(h, (d,), t[p + name + ".weight"],
                                              t[p + name + ".bias"], eps)

    q, k, v = conv(ln(x, "ln_1"), "attn.c_attn").split(d, dim=2)
    q, k, v = (z.view(Bx, Tx, nh, d // nh).transpose(1, 2) for z in (q, k, v))
    o = _causal_attention(q, k, v, 1.0 / math.sqrt(d // nh)).transpose(1, 2).reshape(Bx, Tx, d)
    x = x + conv(o, "attn.c_proj")
    h = conv(ln(x, "ln_2"), "mlp.c_fc")
    h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))))
    return x + conv(h, "mlp.c_proj")


def hf_reference(conf, tensors, E):
    """The Hugging Face class's stack (decoder layers and final norm, the embedding outside) on
    the embedded input E, from config.json and the HF-named tensors, in float64."""
    t = {k: v.double() for k, v in tensors.items()}
    x = E.double()
    if conf["model_type"] == "gpt2":
        for l in range(conf["n_layer"]):
            x = _gpt2_block(conf, t, l, x)
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), t["transformer.ln_f.weight"],
                                              t["transformer.ln_f.bias"],
                                              conf["layer_norm_epsilon"])
    for l in range(conf["num_hidden_layers"]):
        x = _llama_like_layer(conf, t, l, x)
    return _rms(x, t["model.norm.weight"], conf["rms_norm_eps"])


# ---- 1. name maps ------------------------------------------------------------------------------


def name_maps(nbimport, work):
    for name, preset, L, layout, extra in CASES:
        stack = make_stack(preset, L, layout != "hf-gpt2", **extra)
        p = {n_: t.detach() for n_, t in stack.library_parameters()}
        E = torch.randn(B, T, D)
        ref = forward(stack, E)
        meta = train_meta(stack, preset)
        model = (twin.to_hf(stack, layout, torch.randn(VOCAB, D), torch.randn(VOCAB, D))
                 if layout != "normblocks" else dict(p))
        r, out = run_file(nbimport, layout, model, meta, E, work, name)
        report(close(out, ref), "%s (%s): %d tensors" % (name, layout, len(model)),
               r.stderr.strip() or "max |C - twin| %.2e" % float((out - ref).abs().max()))
        # the library's names exported to the layout are to_hf's tensors
        lib_path, exp_path = os.path.join(work, name + ".lib"), os.path.join(work, name + ".exp")
        write_safetensors(lib_path, list(p.items()), meta)
        r = subprocess.run([nbimport, "--export", layout, lib_path, exp_path],
                           capture_output=True, text=True)
        want = {k: v for k, v in model.items() if k not in IO}
        got = read_safetensors(exp_path)[0] if r.returncode == 0 else {}
        if name in EXPORT_REFUSED:
            report(r.returncode == 1 and "layout: " + EXPORT_REFUSED[name] in r.stderr and
                   not os.path.exists(exp_path),
                   "%s: --export %s refuses it, naming the field" % (name, layout), r.stderr.strip())
        else:
            report(r.returncode == 0 and set(got) == set(want) and
                   all(got[k].shape == want[k].shape and torch.equal(got[k], want[k]) for k in want),
                   "%s: --export writes to_hf's names, shapes and values" % name,
                   r.stderr.strip() or "%d tensors" % len(got))
        # the twin reads the layout back (from_hf) to the same stack
        if layout != "normblocks":
            back = twin.from_hf(model, layout, copy.deepcopy(stack)).eval()
            report(torch.equal(forward(back, E), ref), "%s: from_hf reads to_hf's tensors back"
                   % name)
        if layout == "hf-gpt2":
            gpt2_variants(nbimport, work, name, stack, model, meta, E, ref)
        if name in ("pre", "gpt2"):
            half_precision(nbimport, work, name, stack, layout, p, meta, E)
        if name == "pre":  # a missing norm is named, by nbimport and by from_hf
            del model["model.layers.1.post_attention_layernorm.weight"]
            r, out = run_file(nbimport, layout, model, meta, E, work, name + "_missing")
            report(r.returncode == 1 and "post_attention_layernorm" in r.stderr,
                   "%s: a missing tensor is named" % name, r.stderr.strip())
            report(raises(lambda: twin.from_hf(model, layout, copy.deepcopy(stack)),
                          "model.layers.1.post_attention_layernorm.weight"),
                   "%s: from_hf names the missing tensor" % name)


def raises(fn, *words):
    """fn() raises ValueError whose message holds every word."""
    try:
        fn()
    except ValueError as e:
        return all(w in str(e) for w in words)
    return False


def gpt2_variants(nbimport, work, name, stack, model, meta, E, ref):
    L = stack.config.n_layers
    # the hub's files: no "transformer." prefix, causal-mask buffers per layer
    hub = {k[len("transformer."):] if k.startswith("transformer.") else k: v
           for k, v in model.items()}
    for l in range(L):
        hub["h.%d.attn.bias" % l] = torch.ones(T, T).tril()[None, None]
        hub["h.%d.attn.masked_bias" % l] = torch.tensor(-1e4)
    r, out = run_file(nbimport, "hf-gpt2", hub, meta, E, work, name + "_hub")
    report(close(out, ref), "%s: the hub's names and buffers load and run" % name,
           r.stderr.strip())
    back = twin.from_hf(hub, "hf-gpt2", copy.deepcopy(stack)).eval()
    report(torch.equal(forward(back, E), ref), "%s: from_hf reads the hub's names too" % name)
    # nanoGPT's and llm.c's nn.Linear layout: the same names, nothing transposed
    linear = {k: (v.t() if v.dim() == 2 and k.endswith(
        ("c_attn.weight", "c_proj.weight", "c_fc.weight")) else v) for k, v in model.items()}
    r, out = run_file(nbimport, "gpt2-linear", linear, meta, E, work, name + "_linear")
    report(close(out, ref), "%s: the nn.Linear layout loads as gpt2-linear" % name,
           r.stderr.strip())
    # the wrong GPT-2 layout is refused at c_attn, naming the right style (the square c_proj
    # alone could not tell: it is never reached)
    for style, f, want in (("hf-gpt2", linear, "gpt2-linear"), ("gpt2-linear", model, "hf-gpt2")):
        r, out = run_file(nbimport, style, f, meta, E, work, name + "_wrong")
        report(r.returncode == 1 and "h.0.attn.c_attn.weight" in r.stderr and
               "STYLE " + want in r.stderr,
               "%s: a file in the other layout is refused as %s" % (name, style), r.stderr.strip())
    report(raises(lambda: twin.from_hf(linear, "hf-gpt2", copy.deepcopy(stack)), "c_attn.weight"),
           "%s: from_hf refuses the nn.Linear layout as hf-gpt2, naming c_attn" % name)
    # a tensor the stack has no place for is refused, by name
    extra = dict(model, **{"transformer.h.1.mlp.c_fc2.weight": torch.zeros(D, FF)})
    r, out = run_file(nbimport, "hf-gpt2", extra, meta, E, work, name + "_extra")
    report(r.returncode == 1 and "h.1.mlp.c_fc2.weight has no place" in r.stderr,
           "%s: a tensor with no place is refused" % name, r.stderr.strip())
    report(raises(lambda: twin.from_hf(extra, "hf-gpt2", copy.deepcopy(stack)),
                  "h.1.mlp.c_fc2.weight has no place"),
           "%s: from_hf refuses a tensor with no place" % name)


def half_precision(nbimport, work, name, stack, layout, p, meta, E):
    """BF16 and F16 files, as most published checkpoints: the twin on the same rounded weights."""
    for dtype, tdt in (("BF16", torch.bfloat16), ("F16", torch.float16)):
        rounded = copy.deepcopy(stack)
        with torch.no_grad():
            for k, v in rounded.named_parameters():
                v.copy_(p[k].to(tdt).float())  # exact in the file
        ref_h = forward(rounded, E)
        model_h = twin.to_hf(rounded, layout)
        r, out = run_file(nbimport, layout, model_h, meta, E, work, name + dtype, dtype)
        report(close(out, ref_h), "%s: a %s file loads and runs" % (name, dtype),
               r.stderr.strip() or "max |C - twin| %.2e" % float((out - ref_h).abs().max()))


# ---- 2. Hugging Face directories ----------------------------------------------------------------


def guarded(what, fn, *args):
    """fn(*args); an exception (the twin refusing, a file not written) is a failure, named."""
    try:
        fn(*args)
    except (ValueError, KeyError, OSError, RuntimeError) as e:
        report(False, what, "%s: %s" % (type(e).__name__, e))


def hf_directories(nbimport, work):
    for name, model_type, preset, extra in FAMILIES:
        guarded("%s: a Hugging Face directory" % name, hf_directory, nbimport, work, name,
                model_type, preset, extra)


def hf_directory(nbimport, work, name, model_type, preset, extra):
    """One family: save_hf_dir, the transcribed HF forward, nbimport, load_hf_dir."""
    gpt2 = model_type == "gpt2"
    stack = make_stack(preset, 2, not gpt2, **extra)
    embed, head = torch.randn(VOCAB, D), torch.randn(VOCAB, D)
    E = torch.randn(B, T, D)
    ref = forward(stack, E)
    path = os.path.join(work, "hf_" + name)
    conf = twin.save_hf_dir(path, stack, embed, head)
    report(conf["model_type"] == model_type and twin.hf_family(stack.config) == model_type,
           "%s: save_hf_dir writes a %s directory" % (name, conf["architectures"][0]))
    # the twin's stack is what the Hugging Face class computes from the directory
    hconf, tensors = twin.read_hf_dir(path)
    want = hf_reference(hconf, tensors, E.double())
    got = forward(copy.deepcopy(stack).double(), E.double())
    report(close(got, want, 1e-10, 1e-9), "%s: the twin equals the transcribed %s forward%s"
           % (name, model_type, {"qwen3": " (q_norm, k_norm per head)",
                                 "olmo2": " (q_norm, k_norm full width, post norms)"}
              .get(model_type, "")), "max |twin - HF| %.2e" % float((got - want).abs().max()))
    meta = read_safetensors(os.path.join(path, "model.safetensors"))[1]  # HF's loader needs it
    report(meta == {"format": "pt"}, "%s: model.safetensors has {\"format\": \"pt\"}" % name)
    style = "hf-gpt2" if gpt2 else "hf-llama"
    r, out = nbimport_run(nbimport, style, path, E, work, name + "_dir")
    report(close(out, ref), "%s: nbimport runs the directory to the twin's output" % name,
           r.stderr.strip() or "max |C - twin| %.2e" % float((out - ref).abs().max()))
    back, e2, h2 = twin.load_hf_dir(path)
    report(torch.equal(forward(back, E), ref) and torch.equal(e2, embed) and
           torch.equal(h2, head), "%s: load_hf_dir reads it back exactly" % name)
    if name == "qwen3":  # shards: model.safetensors.index.json and 2 files
        spath = os.path.join(work, "hf_sharded_" + name)
        twin.save_hf_dir(spath, stack, embed, head, shards=2)
        files = sorted(os.listdir(spath))
        r, out = nbimport_run(nbimport, style, spath, E, work, name + "_shards")
        back, e2, h2 = twin.load_hf_dir(spath)
        report(close(out, ref) and len([f for f in files if f.endswith(".safetensors")]) == 2
               and torch.equal(forward(back, E), ref) and torch.equal(h2, head),
               "%s: a sharded directory runs in nbimport and loads back" % name,
               r.stderr.strip() or ", ".join(files))


# ---- 3. nbimport --export to a directory, read by the twin ------------------------------------


def floats32(conf):
    """config values with floats rounded to float32 (the C tool's nb_real)."""
    return {k: (float(torch.tensor(v, dtype=torch.float32)) if isinstance(v, float) else v)
            for k, v in conf.items()}


def exports(nbimport, work):
    for name, model_type, preset, extra in FAMILIES:
        guarded("%s: --export to a directory" % name, export, nbimport, work, name,
                model_type, preset, extra)
    mixln_refused(nbimport, work)


def export(nbimport, work, name, model_type, preset, extra):
    """One family: a trainer-style file exported by nbimport, read by load_hf_dir."""
    gpt2 = model_type == "gpt2"
    stack = make_stack(preset, 2, not gpt2, **extra)
    embed, head = torch.randn(VOCAB, D), torch.randn(VOCAB, D)
    E = torch.randn(B, T, D)
    # the metadata's preset name: Qwen3's per-head Q, K norms are the HybridNorm name Pre-QK-Pre
    meta = train_meta(stack, "gpt2" if gpt2 else "Pre-QK-Pre" if model_type == "qwen3" else preset)
    lib = os.path.join(work, name + "_train.safetensors")
    write_safetensors(lib, [("transformer.wte.weight", embed)] +
                      [("transformer." + k, v) for k, v in stack.library_parameters()] +
                      [("lm_head.weight", head)], meta)
    out_dir = os.path.join(work, name + "_export") + "/"
    r = subprocess.run([nbimport, "--export", "hf-gpt2" if gpt2 else "hf-llama", lib,
                        out_dir], capture_output=True, text=True)
    if r.returncode != 0:
        return report(False, "%s: nbimport --export to a directory" % name, r.stderr.strip())
    # the stack as nbimport reads the metadata (eps: the preset's default), in the twin
    cfg = twin.config_from_metadata(dict(meta, vocab_size=str(twin.VOCAB)))
    cfg.attn.bias = stack.config.attn.bias
    back, e2, h2 = twin.load_hf_dir(out_dir)
    mine = Stack(cfg)
    mine.load_state_dict(stack.state_dict())
    report(written_type(out_dir) == model_type and
           torch.equal(forward(back, E), forward(mine.eval(), E)) and
           torch.equal(e2, embed) and torch.equal(h2, head),
           "%s: --export DIR/ loads in the twin to the same output, embedding and head" % name)
    with open(os.path.join(out_dir, "config.json")) as f:
        written = json.load(f)
    positions = read_hf_dir_wpe(out_dir)
    want = twin.hf_config(cfg, VOCAB, positions or 1024)
    report(floats32(written) == floats32(want),
           "%s: its config.json is the twin's hf_config (%s)" % (name, model_type),
           "" if floats32(written) == floats32(want) else "C %s, twin %s" % (written, want))


def written_type(path):
    with open(os.path.join(path, "config.json")) as f:
        return json.load(f).get("model_type")


def mixln_refused(nbimport, work):
    """A stack no Hugging Face class computes: refused by both (nbimport naming the field)."""
    stack = make_stack("mixln", 4, True)
    lib = os.path.join(work, "mixln_train.safetensors")
    write_safetensors(lib, [("transformer.wte.weight", torch.randn(VOCAB, D))] +
                      [("transformer." + k, v) for k, v in stack.library_parameters()] +
                      [("lm_head.weight", torch.randn(VOCAB, D))], train_meta(stack, "mixln"))
    r = subprocess.run([nbimport, "--export", "hf-llama", lib, os.path.join(work, "mx_out/")],
                       capture_output=True, text=True)
    report(r.returncode == 1 and "layout: post_norm (preset mixln" in r.stderr and
           raises(lambda: twin.hf_family(stack.config), "no Hugging Face model class"),
           "a Mix-LN stack: no HF class computes it, for nbimport and the twin", r.stderr.strip())


def read_hf_dir_wpe(path):
    """The rows of GPT-2's wpe in a directory (0 when it has none); checks they are zeros."""
    wpe = twin.read_hf_dir(path)[1].get("transformer.wpe.weight")
    if wpe is not None and bool(wpe.abs().max() > 0):
        report(False, "%s: the exported positions are zeros" % path)
    return 0 if wpe is None else wpe.shape[0]


# ---- 4. config.json refusals ----------------------------------------------------------------


def config_refusals(nbimport, work):
    stack = make_stack("pre", 2, True, norm=dict(eps=1e-6))
    path = os.path.join(work, "hf_conf")
    conf = twin.save_hf_dir(path, stack, torch.randn(VOCAB, D), torch.randn(VOCAB, D))
    E = torch.randn(B, T, D)
    # (change, the key the refusal names; None: accepted)
    changes = [({"foo": 1}, "foo"), ({"rope_scaling": {"type": "linear", "factor": 2.0}},
                                     "rope_scaling"),
               ({"head_dim": 16}, "head_dim"), ({"hidden_act": "gelu"}, "hidden_act"),
               ({"mlp_bias": True}, "mlp_bias"), ({"model_type": "phi3"}, "model_type"),
               ({"model_type": "mistral", "sliding_window": 4096}, "sliding_window"),
               ({"model_type": "mistral", "sliding_window": None}, None),
               ({"num_attention_heads": 0}, "num_attention_heads"),
               ({"layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
               ({"bos_token_id": 1, "layer_types": ["full_attention"] * 2, "use_cache": True,
                 "sliding_window": None, "use_sliding_window": False}, None)]
    for change, key in changes:
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(dict(conf, **change), f)
        r, out = nbimport_run(nbimport, "hf-llama", path, E, work, "conf")
        c_ok = r.returncode == 0 if key is None else r.returncode == 1 and key in r.stderr
        try:
            twin.load_hf_dir(path)
            t_ok = key is None
        except ValueError as e:
            t_ok = key is not None and key in str(e)
        report(c_ok and t_ok, "config.json with %s: %s by nbimport and the twin" %
               (json.dumps(change), "accepted" if key is None else "refused"), r.stderr.strip())


def hf_llama_named(stack):
    """The stack's tensors under hf-llama's names (hf_parts), for a stack to_hf refuses."""
    p = {n_: t.detach() for n_, t in stack.library_parameters()}
    return {name: p[lib][r0:r0 + rows] for lib, parts in twin.hf_parts(stack, "hf-llama")
            for name, r0, rows, _ in parts}


def export_refused(nbimport, work, tag, stack, meta, field):
    """No Llama-family class has the option: nbimport --export hf-llama of the library-named
    file and the twin's to_hf both refuse the stack, naming field, and nothing is written."""
    lib_path, exp_path = os.path.join(work, tag + ".lib"), os.path.join(work, tag + ".exp")
    write_safetensors(lib_path, [(n_, t.detach()) for n_, t in stack.library_parameters()], meta)
    r = subprocess.run([nbimport, "--export", "hf-llama", lib_path, exp_path],
                       capture_output=True, text=True)
    report(r.returncode == 1 and field in r.stderr and not os.path.exists(exp_path),
           "%s: --export hf-llama refuses it, naming %s" % (tag, field), r.stderr.strip())
    report(raises(lambda: twin.to_hf(stack, "hf-llama"), field),
           "%s: to_hf refuses it, naming %s" % (tag, field))


def sinks(nbimport, work):
    """gpt-oss's sinks under Llama's names (self_attn.sinks, transformers' GptOssAttention):
    nbimport reads a file written in hf_parts' names (to_hf refuses the stack) to the twin's
    output; no Llama-family or GPT-2 class has a sink, so both refuse the export, naming
    attn_sink."""
    stack = make_stack("pre", 2, True, attn=dict(sink="learned"))
    E = torch.randn(B, T, D)
    model = hf_llama_named(stack)
    meta = dict(train_meta(stack, "pre"), attn_sink="learned")
    r, out = run_file(nbimport, "hf-llama", model, meta, E, work, "sinks")
    report(close(out, forward(stack, E)) and "model.layers.1.self_attn.sinks" in model,
           "sinks (hf-llama): %d tensors, self_attn.sinks read" % len(model), r.stderr.strip())
    export_refused(nbimport, work, "sinks", stack, meta, "attn_sink")


def read_not_other(nbimport, work, layout, stack, other, meta, tag, field, what):
    """nbimport reads a file of stack in layout's names (hf-llama, or the library's) with the
    trainer's metadata meta to the twin's output, not to other's (the stack without the
    option), and both refuse the export, naming field. what: the check's name, with %d for the
    tensor count."""
    E = torch.randn(B, T, D)
    model = (hf_llama_named(stack) if layout == "hf-llama"
             else {n_: t.detach() for n_, t in stack.library_parameters()})
    r, out = run_file(nbimport, layout, model, meta, E, work, tag)
    ref = forward(stack, E)
    report(close(out, ref) and not close(forward(other, E), ref), what % len(model),
           r.stderr.strip())
    export_refused(nbimport, work, tag, stack, meta, field)


def attn_option(nbimport, work, preset, field, value, key, tag):
    """An attention option that no exported class computes, with the trainer's model key
    (%.9g): nbimport reads an hf-llama file of the stack with the key to the twin's output (not
    the output without the option), and both refuse the export, naming the key."""
    stack = make_stack(preset, 2, True, attn={field: value})
    plain = make_stack(preset, 2, True)
    plain.load_state_dict(stack.state_dict())
    meta = dict(train_meta(stack, preset), **{key: "%.9g" % value})
    read_not_other(nbimport, work, "hf-llama", stack, plain, meta, tag, key,
                   "%s (hf-llama, %s): %%d tensors, %s %g read" % (field, preset, key, value))


def clip_qkv(nbimport, work):
    """OLMo's clip_qkv on OLMo-2 (the trainer's key "clip_qkv"), with a c that clamps a good
    share of Q|K|V; Olmo2Attention clamps nothing, so the export is refused."""
    attn_option(nbimport, work, "olmo2", "clip_qkv", 0.2, "clip_qkv", "clip")


def softcap(nbimport, work):
    """Gemma 2's attention-logit softcap on Pre-Norm (the trainer's key "attn_softcap"), with a
    c below about half of the scaled scores; no exported class caps its scores
    (Gemma2Attention does, and no layout writes it), so the export is refused."""
    attn_option(nbimport, work, "pre", "softcap", 0.05, "attn_softcap", "softcap")


def dwa(nbimport, work):
    """DenseFormer's depth-weighted average on Pre-Norm with the dilation 2 (the trainer's keys
    "dwa" on, "dwa_dilation"): nbimport reads the stack in the library's names (no Hugging Face
    layout names dwa.weight) to the twin's output, not the plain stack's, and both refuse the
    export, naming dwa."""
    stack = make_stack("pre", 3, True, residual=dict(dwa=1, dwa_dilation=2))
    plain = make_stack("pre", 3, True)
    plain.load_state_dict({k: v for k, v in stack.state_dict().items() if ".dwa." not in k})
    meta = dict(train_meta(stack, "pre"), dwa="on", dwa_dilation="2")
    read_not_other(nbimport, work, "normblocks", stack, plain, meta, "dwa", "dwa",
                   "dwa (normblocks, pre): %d tensors, dwa on, dwa_dilation 2 read")


def dwa_period(nbimport, work):
    """DenseFormer's period on Pre-Norm with 4 layers (the trainer's keys "dwa" on,
    "dwa_period" 2): only layers 1 and 3 have dwa.weight and average, layers 0 and 2 pass their
    outputs on; nbimport reads the stack in the library's names to the twin's output, not the
    plain stack's, and both refuse the export, naming dwa."""
    stack = make_stack("pre", 4, True, residual=dict(dwa=1, dwa_period=2))
    assert [n_ for n_, _ in stack.library_parameters() if ".dwa." in n_] == \
        ["blocks.1.dwa.weight", "blocks.3.dwa.weight"]
    plain = make_stack("pre", 4, True)
    plain.load_state_dict({k: v for k, v in stack.state_dict().items() if ".dwa." not in k})
    meta = dict(train_meta(stack, "pre"), dwa="on", dwa_period="2")
    read_not_other(nbimport, work, "normblocks", stack, plain, meta, "dwa_period", "dwa",
                   "dwa_period (normblocks, pre, 4 layers): %d tensors, dwa on, dwa_period 2 "
                   "read")


def attn_res(nbimport, work):
    """Attention Residuals on Pre-Norm in blocks of 2 sublayers (the trainer's keys "attn_res"
    on, "attn_res_block"), the pseudo-queries drawn far from 0: nbimport reads the stack in the
    library's names (no Hugging Face layout names the readers) to the twin's output, not that of
    uniform depth weights (the queries 0), and both refuse the export, naming attn_res."""
    stack = make_stack("pre", 3, True, residual=dict(attn_res=1, attn_res_block=2))
    uniform = copy.deepcopy(stack)
    with torch.no_grad():
        for (n_, t), u in zip(stack.named_parameters(), uniform.parameters()):
            if n_.endswith(".proj.weight"):  # blocks.<l>.attn_res/mlp_res.*, final_res.*
                t.copy_(1.5 * torch.randn_like(t) / D ** 0.5)
                u.zero_()
    meta = dict(train_meta(stack, "pre"), attn_res="on", attn_res_block="2")
    read_not_other(nbimport, work, "normblocks", stack, uniform, meta, "attn_res", "attn_res",
                   "attn_res (normblocks, pre): %d tensors, attn_res on, attn_res_block 2 read")


def unet(nbimport, work):
    """modded-nanogpt's U-Net skips and x_0 re-injection on Pre-Norm with 4 layers (the
    trainer's keys "unet_skips" and "reinject_x0" on), and the re-injection alone with 3, their
    scalars drawn far from the init (make_stack's 1 + N(0, 0.2^2)): nbimport reads the stack in
    the library's names (no Hugging Face layout names skip_weight or lambdas) to the twin's
    output, not the plain stack's, and both refuse the export, naming unet_skips (the
    re-injection alone: reinject_x0)."""
    for L, keys in ((4, ("unet_skips", "reinject_x0")), (3, ("reinject_x0",))):
        stack = make_stack("pre", L, True, residual={k: 1 for k in keys})
        plain = make_stack("pre", L, True)
        plain.load_state_dict({k: v for k, v in stack.state_dict().items()
                               if not k.endswith((".skip_weight", ".lambdas"))})
        meta = dict(train_meta(stack, "pre"), **{k: "on" for k in keys})
        read_not_other(nbimport, work, "normblocks", stack, plain, meta, keys[0], keys[0],
                       "%s (normblocks, pre, %d layers): %%d tensors, %s on read"
                       % (keys[0], L, " and ".join(keys)))


def mup(nbimport, work):
    """Width muP's attention scale (the trainer's keys "mup" on and "mup_base_head_dim"; its
    width_base and multipliers belong to the model around the stack, read and ignored): an
    hf-llama file runs in nbimport to the twin's output at sqrt(h_base) / d_h, not at
    1/sqrt(d_h), and both refuse the export, naming softmax_scale (Llama scales by 1/sqrt(d_h))."""
    scale = float(torch.tensor(2 ** 0.5 / (D // H), dtype=torch.float32))  # h_base 2
    stack = make_stack("pre", 2, True, attn=dict(softmax_scale=scale))
    plain = make_stack("pre", 2, True)
    plain.load_state_dict(stack.state_dict())
    meta = dict(train_meta(stack, "pre"), mup="on", mup_base_head_dim="2", width_base="4",
                mup_embed_mult="3", mup_output_mult="0.5")
    read_not_other(nbimport, work, "hf-llama", stack, plain, meta, "mup", "softmax_scale",
                   "mup (hf-llama, pre): %d tensors, the attention's scale sqrt(2) / d_h read")


def value_embeds(nbimport, work):
    """modded-nanogpt's value embeddings (the trainer's key "value_embeds" N) on Pre-Norm with 4
    layers and 2 tables: the stack's layers mix the trainer's tables
    (transformer.value_embeds.<t>.weight) gathered at each token, rows nb_stack_set_value_embeds
    takes and nbimport, which runs a stack on embeddings, has not; so it refuses the
    library-named file (exit 1, naming value_embeds, no output) and its export, and the twin
    refuses the Hugging Face export (to_hf, hf_family), naming value_embeds."""
    stack = make_stack("pre", 4, True, residual=dict(value_embeds=2))
    model = {n_: t.detach() for n_, t in stack.library_parameters()}
    meta = dict(train_meta(stack, "pre"), value_embeds="2")
    r, out = run_file(nbimport, "normblocks", model, meta, torch.randn(B, T, D), work,
                      "value_embeds")
    report(r.returncode == 1 and out is None and "value_embeds" in r.stderr,
           "value_embeds (normblocks, pre, 4 layers): %d tensors, nbimport refuses the file, "
           "naming value_embeds" % len(model), r.stderr.strip())
    export_refused(nbimport, work, "value_embeds", stack, meta, "value_embeds")
    report(raises(lambda: twin.hf_family(stack.config), "value_embeds: no Hugging Face decoder"),
           "value_embeds: hf_family refuses it, naming value_embeds")


def main():
    nbimport = sys.argv[1]
    torch.manual_seed(7)
    with tempfile.TemporaryDirectory() as work:
        name_maps(nbimport, work)
        hf_directories(nbimport, work)
        exports(nbimport, work)
        config_refusals(nbimport, work)
        sinks(nbimport, work)  # after the others: its stack's init draws from the seeded stream
        clip_qkv(nbimport, work)  # after the others, for the same reason
        softcap(nbimport, work)  # after the others, for the same reason
        dwa(nbimport, work)  # after the others, for the same reason
        attn_res(nbimport, work)  # after the others, for the same reason
        unet(nbimport, work)  # after the others, for the same reason
        mup(nbimport, work)  # after the others, for the same reason
        value_embeds(nbimport, work)  # after the others, for the same reason
        dwa_period(nbimport, work)  # last, for the same reason
    print("all passed" if not failed else "%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
