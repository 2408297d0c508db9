#!/usr/bin/python3
"""Name maps end to end: the PyTorch twin writes stacks in the layouts of the codebases the seeds
come from, nbimport loads each into the C stack through nb_stack_tensor_parts and runs it, and
its output must equal the twin's.

    /usr/bin/python3 tests/test_namemap.py path/to/nbimport

The layouts are written here from those codebases' own conventions, not from the library's
table: Hugging Face Llama as the Mix-LN code names its norms (Pre-LN layers: input_layernorm,
post_attention_layernorm; Post-LN layers: post_attention_layernorm after the attention add,
post_feedforward_layernorm after the MLP add; sandwich: input_, post_attention_,
pre_feedforward_, post_feedforward_layernorm), separate q/k/v and gate/up/down projections;
Hugging Face GPT-2 with Conv1D weights stored (in, out), fused c_attn [Q|K|V] and attention
biases, also as the hub's files have it (no "transformer." prefix, causal-mask buffers); a
Llama file with Q/K/V biases (Qwen2's). `nbimport --export` of the library-named tensors must
write exactly those files (names, shapes, values; embeddings and buffers aside). Tolerance:
float32 rounding of a 2-4 layer stack, |C - twin| <= 1e-5 + 1e-4 |twin| (measured ~1e-6).
BF16 and F16 files (the weights rounded to them) run to the twin's output on the same rounded
weights. Also: a GPT-2 file with a tensor that has no place, and a Llama file missing a norm,
are refused with a message naming it. Exits 77 (CTest's skip) without torch.
"""
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
from normblocks_twin import Stack, StackConfig, read_safetensors, write_safetensors  # noqa: E402

# (name, preset, n_layers, layout, extra StackConfig fields)
H = 4
CASES = [("pre", "pre", 2, "hf-llama", {}),
         ("mixln", "mixln", 4, "hf-llama", {}),        # layer 0 Post-LN, layers 1-3 Pre-LN
         ("sandwich", "sandwich", 2, "hf-llama", {}),
         ("gpt2", "gpt2", 2, "hf-gpt2", {"n_kv_heads": H}),  # GPT-2 has no GQA
         ("qkv_bias", "pre", 2, "hf-llama", {"attn_bias": 1}),  # Qwen2's Q/K/V biases
         ("hybrid", "hybrid", 2, "normblocks", {})]
D, HKV, FF, B, T = 32, 2, 48, 2, 7


def llama_layout(stack, p):
    """The Mix-LN code's Llama names of the twin's parameters."""
    out = {"model.embed_tokens.weight": torch.randn(256, D), "lm_head.weight": torch.randn(256, D)}
    kv = stack.config.n_kv_heads * (D // H)
    for blk in stack.blocks:
        pre, lib = "model.layers.%d." % blk.l, "blocks.%d." % blk.l
        for kind in ("weight", "bias"):
            if lib + "att_proj." + kind in p:
                q, k, v = p[lib + "att_proj." + kind].split((D, kv, kv))
                out[pre + "self_attn.q_proj." + kind] = q
                out[pre + "self_attn.k_proj." + kind] = k
                out[pre + "self_attn.v_proj." + kind] = v
        out[pre + "self_attn.o_proj.weight"] = p[lib + "attn_out.weight"]
        up, gate = p[lib + "ff_proj.weight"].chunk(2)  # SwiGLU: silu(gate) * up
        out[pre + "mlp.up_proj.weight"] = up
        out[pre + "mlp.gate_proj.weight"] = gate
        out[pre + "mlp.down_proj.weight"] = p[lib + "ff_out.weight"]
        a, f = blk.spec.attn, blk.spec.ffn
        names = {}
        if a.post_norm:  # Post-LN layer
            names = {"attn_post_norm": "post_attention_layernorm",
                     "ff_post_norm": "post_feedforward_layernorm"}
        elif a.output_norm:  # sandwich
            names = {"attn_norm": "input_layernorm", "attn_out_norm": "post_attention_layernorm",
                     "ff_norm": "pre_feedforward_layernorm",
                     "ff_out_norm": "post_feedforward_layernorm"}
        elif a.input_norm and f.input_norm:  # Pre-LN layer
            names = {"attn_norm": "input_layernorm", "ff_norm": "post_attention_layernorm"}
        for lib_norm, hf in names.items():
            out[pre + hf + ".weight"] = p[lib + lib_norm + ".weight"]
    out["model.norm.weight"] = p["ln_f.weight"]
    return out


def gpt2_layout(stack, p):
    """Hugging Face GPT-2's names: Conv1D weights (in, out), biases everywhere."""
    out = {"transformer.wte.weight": torch.randn(256, D), "transformer.wpe.weight": torch.randn(64, D)}
    for blk in stack.blocks:
        pre, lib = "transformer.h.%d." % blk.l, "blocks.%d." % blk.l
        out[pre + "ln_1.weight"] = p[lib + "attn_norm.weight"]
        out[pre + "ln_1.bias"] = p[lib + "attn_norm.bias"]
        out[pre + "attn.c_attn.weight"] = p[lib + "att_proj.weight"].t()
        out[pre + "attn.c_attn.bias"] = p[lib + "att_proj.bias"]
        out[pre + "attn.c_proj.weight"] = p[lib + "attn_out.weight"].t()
        out[pre + "attn.c_proj.bias"] = p[lib + "attn_out.bias"]
        out[pre + "ln_2.weight"] = p[lib + "ff_norm.weight"]
        out[pre + "ln_2.bias"] = p[lib + "ff_norm.bias"]
        out[pre + "mlp.c_fc.weight"] = p[lib + "ff_proj.weight"].t()
        out[pre + "mlp.c_fc.bias"] = p[lib + "ff_proj.bias"]
        out[pre + "mlp.c_proj.weight"] = p[lib + "ff_out.weight"].t()
        out[pre + "mlp.c_proj.bias"] = p[lib + "ff_out.bias"]
    out["transformer.ln_f.weight"] = p["ln_f.weight"]
    out["transformer.ln_f.bias"] = p["ln_f.bias"]
    return out


def run(nbimport, layout, model, E, work, tag, dtype="F32"):
    mpath, ipath, opath = (os.path.join(work, tag + s) for s in (".model", ".input", ".out"))
    write_safetensors(mpath, list(model.items()), META, dtype)
    write_safetensors(ipath, [("E", E)])
    r = subprocess.run([nbimport, layout, mpath, ipath, opath], capture_output=True, text=True)
    return r, (read_safetensors(opath)[0]["out"] if r.returncode == 0 else None)


def main():
    nbimport = sys.argv[1]
    torch.manual_seed(7)
    failed = 0
    global META
    with tempfile.TemporaryDirectory() as work:
        for name, preset, L, layout, extra in CASES:
            kv_heads = extra.get("n_kv_heads", HKV)
            cfg = StackConfig.from_name(preset, n_layers=L, d_model=D, n_heads=H,
                                        n_kv_heads=kv_heads, d_ff=FF, rope=layout != "hf-gpt2",
                                        **{k: v for k, v in extra.items() if k != "n_kv_heads"})
            stack = Stack(cfg)
            with torch.no_grad():
                for n_, t in stack.named_parameters():
                    t.copy_(1 + 0.2 * torch.randn_like(t) if t.dim() == 1 and "bias" not in n_
                            else 0.3 * torch.randn_like(t) / (t.shape[-1] ** 0.5 if t.dim() == 2 else 1))
            p = {n_: t.detach() for n_, t in stack.library_parameters()}
            E = torch.randn(B, T, D)
            with torch.no_grad():
                ref = stack(E)
            c = stack.config
            META = {"preset": preset, "n_layers": str(L), "d_model": str(D), "n_heads": str(H),
                    "n_kv_heads": str(kv_heads), "d_ff": str(FF), "rope": "0" if layout == "hf-gpt2" else "1",
                    "norm": c.norm, "ffn": c.ffn, "attn_bias": str(c.attn_bias)}
            model = (llama_layout(stack, p) if layout == "hf-llama" else
                     gpt2_layout(stack, p) if layout == "hf-gpt2" else dict(p))
            r, out = run(nbimport, layout, model, E, work, name)
            if out is None:
                failed += 1
                print("FAIL: %s (%s): nbimport exit %d: %s" % (name, layout, r.returncode,
                                                             r.stderr.strip()))
                continue
            err = (out - ref).abs()
            lim = 1e-5 + 1e-4 * ref.abs()
            ok = bool((err <= lim).all())
            failed += not ok
            print("%s: %s (%s): %d tensors, max |C - twin| %.2e" %
                  ("ok" if ok else "FAIL", name, layout, len(model), float(err.max())))
            # the other way: the library's names exported to the layout equal the file above
            lib_path, exp_path = os.path.join(work, name + ".lib"), os.path.join(work, name + ".exp")
            write_safetensors(lib_path, list(p.items()), META)
            r = subprocess.run([nbimport, "--export", layout, lib_path, exp_path],
                               capture_output=True, text=True)
            want = {k: v for k, v in model.items() if k not in IO}
            got = read_safetensors(exp_path)[0] if r.returncode == 0 else {}
            ok = (r.returncode == 0 and set(got) == set(want) and
                  all(got[k].shape == want[k].shape and torch.equal(got[k], want[k].float())
                      for k in want))
            failed += not ok
            print("%s: %s: --export writes the layout's names, shapes and values (%s)" %
                  ("ok" if ok else "FAIL", name, r.stderr.strip() or "%d tensors" % len(got)))
            if layout == "hf-gpt2":
                # the hub's files: no "transformer." prefix, causal-mask buffers per layer
                hub = {k[len("transformer."):] if k.startswith("transformer.") else k: v
                       for k, v in model.items()}
                for l in range(L):
                    hub["h.%d.attn.bias" % l] = torch.ones(T, T).tril()[None, None]
                    hub["h.%d.attn.masked_bias" % l] = torch.tensor(-1e4)
                r, out = run(nbimport, layout, hub, E, work, name + "_hub")
                ok = out is not None and bool(((out - ref).abs() <= 1e-5 + 1e-4 * ref.abs()).all())
                failed += not ok
                print("%s: %s: the hub's names and buffers load and run (%s)" %
                      ("ok" if ok else "FAIL", name, r.stderr.strip() or "same output"))
                # nanoGPT's and llm.c's nn.Linear layout: the same names, nothing transposed
                linear = {k: (v.t() if v.dim() == 2 and k.endswith(
                    ("c_attn.weight", "c_proj.weight", "c_fc.weight")) else v)
                    for k, v in model.items()}
                r, out = run(nbimport, "gpt2-linear", linear, E, work, name + "_linear")
                ok = out is not None and bool(((out - ref).abs() <= 1e-5 + 1e-4 * ref.abs()).all())
                failed += not ok
                print("%s: %s: the nn.Linear layout loads as gpt2-linear (%s)" %
                      ("ok" if ok else "FAIL", name, r.stderr.strip() or "same output"))
                # the wrong GPT-2 layout is refused at c_attn, naming the right style (the
                # square c_proj alone could not tell: it is never reached)
                for style, f, want in (("hf-gpt2", linear, "gpt2-linear"),
                                       ("gpt2-linear", model, "hf-gpt2")):
                    r, out = run(nbimport, style, f, E, work, name + "_wrong")
                    ok = (r.returncode == 1 and "h.0.attn.c_attn.weight" in r.stderr and
                          "STYLE " + want in r.stderr)
                    failed += not ok
                    print("%s: %s: a file in the other layout is refused as %s (%s)" %
                          ("ok" if ok else "FAIL", name, style, r.stderr.strip()))
                # a tensor the stack has no place for is refused, by name
                model["transformer.h.1.mlp.c_fc2.weight"] = torch.zeros(D, FF)
                r, out = run(nbimport, layout, model, E, work, name + "_extra")
                ok = r.returncode == 1 and "h.1.mlp.c_fc2.weight has no place" in r.stderr
                failed += not ok
                print("%s: %s: a tensor with no place is refused (%s)" %
                      ("ok" if ok else "FAIL", name, r.stderr.strip()))
            if name in ("pre", "gpt2"):  # half-precision files, as most published checkpoints
                for dtype, tdt in (("BF16", torch.bfloat16), ("F16", torch.float16)):
                    p_h = {k: v.to(tdt).float() for k, v in p.items()}  # exact in the file
                    with torch.no_grad():
                        for k, v in stack.named_parameters():
                            v.copy_(p_h[k])
                        ref_h = stack(E)
                    model_h = llama_layout(stack, p_h) if layout == "hf-llama" else \
                        gpt2_layout(stack, p_h)
                    r, out = run(nbimport, layout, model_h, E, work, name + dtype, dtype)
                    ok = out is not None and bool(
                        ((out - ref_h).abs() <= 1e-5 + 1e-4 * ref_h.abs()).all())
                    failed += not ok
                    print("%s: %s: a %s file loads and runs (%s)" %
                          ("ok" if ok else "FAIL", name, dtype, r.stderr.strip() or
                           "max |C - twin| %.2e" % float((out - ref_h).abs().max())))
            if layout == "hf-llama" and name == "pre":  # a missing norm is named
                del model["model.layers.1.post_attention_layernorm.weight"]
                r, out = run(nbimport, layout, model, E, work, name + "_missing")
                ok = r.returncode == 1 and "post_attention_layernorm" in r.stderr
                failed += not ok
                print("%s: %s: a missing tensor is named (%s)" %
                      ("ok" if ok else "FAIL", name, r.stderr.strip()))
    print("%s" % ("all passed" if not failed else "%d failed" % failed))
    return 1 if failed else 0


META = {}
IO = ("model.embed_tokens.weight", "lm_head.weight", "transformer.wte.weight",
      "transformer.wpe.weight")
if __name__ == "__main__":
    sys.exit(main())
