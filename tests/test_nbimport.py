#!/usr/bin/env python3
"""nbimport against small valid and hostile safetensors files (issue 23): a valid Llama and
GPT-2 file run (exit 0, the output checked where it is known in closed form), and each hostile
file is refused with exit 1 and a message naming the tensor or key: non-finite weights, shapes
and data_offsets that are not non-negative integers in range, metadata values that are unknown,
unparsable or not strings, keys named twice, OUT naming an input file, a FIFO as MODEL.
Python standard library only.

    python3 tests/test_nbimport.py path/to/nbimport
"""
import json
import time
import math
import os
import struct
import subprocess
import sys
import tempfile

NBIMPORT = os.path.realpath(sys.argv[1])
README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")
passed = failed = 0
D, FF, B, T = 8, 16, 2, 3


def tensors(items, meta=None):
    """items: (name, shape, values) F32 -> (header dict, data bytes), contiguous; values None: a
    1-D tensor of zeros"""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, shape, vals in items:
        b = b"\0" * 4 * shape[0] if vals is None else b"".join(struct.pack("<f", v) for v in vals)  # None: zeros
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    return header, data


def write(path, header, data=b"", raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return path


def read_out(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    a, b = h["out"]["data_offsets"]
    return h["out"]["shape"], struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a:8 + n + b])


def check(what, args, rc, *words):
    global passed, failed
    try:
        r = subprocess.run([NBIMPORT] + args, capture_output=True, text=True, timeout=30)
        code, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        code, out, err = "timeout", "", ""
    msgs = [w for w in words if w not in err]
    if code == rc and not msgs:
        passed += 1
        print(f"ok: {what} (exit {rc})")
        return True
    failed += 1
    print(f"FAIL: {what}: exit {code} (expected {rc}); missing {msgs}\n  stdout: {out!r}\n  stderr: {err!r}")
    return False


def record(what, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok: {what}")
    else:
        failed += 1
        print(f"FAIL: {what}: {detail}")


def llama(zero=True):
    """A 1-layer Pre-LN Llama in HF names: projections zero (or small values), gains 1."""
    def w(r, c):
        return [0.0 if zero else 0.01 * ((i * 7) % 11 - 5) for i in range(r * c)]
    p = "model.layers.0."
    return [(p + "self_attn.q_proj.weight", [D, D], w(D, D)), (p + "self_attn.k_proj.weight", [D, D], w(D, D)),
            (p + "self_attn.v_proj.weight", [D, D], w(D, D)), (p + "self_attn.o_proj.weight", [D, D], w(D, D)),
            (p + "mlp.up_proj.weight", [FF, D], w(FF, D)), (p + "mlp.gate_proj.weight", [FF, D], w(FF, D)),
            (p + "mlp.down_proj.weight", [D, FF], w(D, FF)), (p + "input_layernorm.weight", [D], [1.0] * D),
            (p + "post_attention_layernorm.weight", [D], [1.0] * D), ("model.norm.weight", [D], [1.0] * D)]


def gpt2():
    """A 1-layer GPT-2 in the hub's names (no "transformer." prefix), Conv1D (in, out)."""
    p = "h.0."
    z = lambda n: [0.0] * n  # noqa: E731
    return [(p + "ln_1.weight", [D], [1.0] * D), (p + "ln_1.bias", [D], z(D)),
            (p + "attn.c_attn.weight", [D, 3 * D], z(3 * D * D)), (p + "attn.c_attn.bias", [3 * D], z(3 * D)),
            (p + "attn.c_proj.weight", [D, D], z(D * D)), (p + "attn.c_proj.bias", [D], z(D)),
            (p + "ln_2.weight", [D], [1.0] * D), (p + "ln_2.bias", [D], z(D)),
            (p + "mlp.c_fc.weight", [D, FF], z(D * FF)), (p + "mlp.c_fc.bias", [FF], z(FF)),
            (p + "mlp.c_proj.weight", [FF, D], z(FF * D)), (p + "mlp.c_proj.bias", [D], z(D)),
            ("ln_f.weight", [D], [1.0] * D), ("ln_f.bias", [D], z(D))]


META = {"preset": "pre", "n_layers": "1", "d_model": str(D), "n_heads": "2", "n_kv_heads": "2",
        "d_ff": str(FF), "rope": "0", "format": "pt"}
GMETA = dict(META, preset="gpt2")
X = [0.1 * ((i * 5) % 13 - 6) for i in range(B * T * D)]


def model(path, items=None, meta=None, edit=None):
    header, data = tensors(llama() if items is None else items, META if meta is None else meta)
    if edit:
        edit(header)
    return write(path, header, data)


def run(what, mpath, rc, *words, style="hf-llama", out="out.st"):
    return check(what, [style, mpath, inp, out], rc, *words)


os.chdir(tempfile.mkdtemp(prefix="test_nbimport."))
inp = write("in.st", *tensors([("E", [B, T, D], X)]))

# --- valid files ----------------------------------------------------------------------------
# zero projections: every residual branch is 0, the output is the final norm of the input
# (gain 1, eps 1e-5): RMSNorm for Llama, LayerNorm for GPT-2
for what, mp, style, layer in [("a valid Llama file", model("llama.st"), "hf-llama", False),
                               ("a valid GPT-2 file", model("gpt2.st", gpt2(), GMETA), "hf-gpt2", True)]:
    if os.path.exists("out.st"):
        os.remove("out.st")
    if run(what, mp, 0, style=style):
        shape, out = read_out("out.st")
        worst = 0.0
        for r in range(B * T):
            x = X[r * D:(r + 1) * D]
            mu = sum(x) / D if layer else 0.0
            var = sum((v - mu) ** 2 for v in x) / D
            worst = max(worst, max(abs((v - mu) / math.sqrt(var + 1e-5) - o) for v, o in zip(x, out[r * D:])))
        record(f"{what}: the output is the final norm of E", shape == [B, T, D] and worst < 1e-5,
               f"shape {shape}, max error {worst:.3g}")
check("a valid Llama file of non-zero weights", ["hf-llama", model("llama2.st", llama(False)), inp, "out.st"], 0)

# --- 1: non-finite weights --------------------------------------------------------------------
for v, word in [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")]:
    items = llama()
    name, shape, vals = items[4]
    items[4] = (name, shape, [0.0] * 5 + [v] + vals[6:])
    run(f"a {word} weight", model("nf.st", items), 1, "model.layers.0.mlp.up_proj.weight", "non-finite",
        "element 5")
items = llama(False)
items[7] = (items[7][0], [D], [1e30] * D)  # finite, but the forward overflows
check("finite weights whose forward overflows", ["hf-llama", model("ovf.st", items), inp, "ovf_out.st"], 1,
      "non-finite")
check("...writes no output", ["hf-llama", "ovf_out.st", inp, "x.st"], 1, "cannot open ovf_out.st")
check("a NaN in E", ["hf-llama", model("llama.st"), write("nan_in.st", *tensors([("E", [B, T, D],
                     [math.nan] + X[1:])])), "out.st"], 1, "tensor E", "non-finite")


# --- 2: shapes and data_offsets ---------------------------------------------------------------
def set_(key, value, name="model.layers.0.self_attn.q_proj.weight"):
    def f(h):
        h[name][key] = value
    return f


def del_(key, name="model.layers.0.self_attn.q_proj.weight"):
    def f(h):
        del h[name][key]
    return f


for what, edit, word in [
        ("a shape of 1e10", set_("shape", [1e10, 8]), "shape"),
        ("a shape of 1e10 x 0", set_("shape", [1e10, 0]), "shape"),
        ("a shape of 2^40 x 2^40", set_("shape", [2 ** 40, 2 ** 40]), "shape"),
        ("a shape of 1e300", set_("shape", [1e300]), "shape"),
        ("a fractional shape [8, 32.5]", set_("shape", [8, 32.5]), "shape"),
        ("a fractional shape [0.5, 8]", set_("shape", [0.5, 8]), "shape"),
        ("a negative shape [-8, -8]", set_("shape", [-8, -8]), "shape"),
        ("a shape that is a string", set_("shape", "8x8"), "shape"),
        ("a shape of strings", set_("shape", ["8", "8"]), "shape"),
        ("no shape", del_("shape"), "has no shape"),
        ("no data_offsets", del_("data_offsets"), "data_offsets"),
        ("data_offsets []", set_("data_offsets", []), "data_offsets"),
        ("negative data_offsets", set_("data_offsets", [-256, 0]), "data_offsets"),
        ("fractional data_offsets", set_("data_offsets", [0.5, 256.5]), "data_offsets"),
        ("data_offsets of strings", set_("data_offsets", ["0", "256"]), "data_offsets"),
        ("data_offsets in the wrong order", set_("data_offsets", [256, 0]), "end before they begin"),
        ("data_offsets beyond the data", set_("data_offsets", [0, 1e12]), "beyond"),
        ("data_offsets of the wrong size", set_("data_offsets", [0, 252]), "bytes"),
        ("data_offsets of three numbers", set_("data_offsets", [0, 128, 256]), "data_offsets"),
        ("a tensor entry that is a number", lambda h: h.__setitem__("model.layers.0.self_attn.q_proj.weight", 3),
         "not a JSON object")]:
    run(what, model("bad.st", edit=edit), 1, "model.layers.0.self_attn.q_proj.weight", word)
eh, ed = tensors([("E", [B, T, D], X)])
eh["E"]["shape"] = [1e10, T, D]
check("E of shape [1e10, T, d]", ["hf-llama", model("llama.st"), write("e.st", eh, ed), "out.st"], 1, "E", "shape")
eh["E"]["shape"] = [B, T, D + 0.5]
check("E of shape [B, T, d + 0.5]", ["hf-llama", model("llama.st"), write("e.st", eh, ed), "out.st"], 1, "E",
      "shape")


# --- 3: metadata values -------------------------------------------------------------------------
def meta(base=META, **kw):
    m = dict(base)
    for k, v in kw.items():
        if v is None:
            del m[k]
        else:
            m[k] = v
    return m


# norm rms on a GPT-2 file: RMSNorm (no biases), so the LayerNorm biases have no place
run("norm: rms on a GPT-2 file is RMSNorm", model("g.st", gpt2(), meta(GMETA, norm="rms")), 1, "ln_1.bias",
    "no place", style="hf-gpt2")
for key, val, word in [("norm", "rmsnorm", "rms, layer, dyt, derf or l2"), ("norm", "", "rms, layer, dyt, derf or l2"),
                       ("ffn", "relu", "swiglu"), ("mixln_alpha", "abc", "a finite number"),
                       ("mixln_alpha", "0.5x", "a finite number"), ("mixln_alpha", "", "a finite number"),
                       ("mixln_alpha", "nan", "a finite number"), ("mixln_alpha", "1e999", "a finite number"),
                       ("mixln_alpha", "\n0.5", "a finite number"),
                       ("attn_bias", "x", "0, 1, 2 or 3"), ("attn_bias", "4", "0, 1, 2 or 3"),
                       ("attn_bias", "", "0, 1, 2 or 3"), ("n_layers", "", "not an integer"),
                       ("n_layers", "1.5", "not an integer"), ("n_layers", "-1", "not an integer"),
                       ("n_layers", " 1", "not an integer"), ("n_layers", "99999999999999999999", "not an integer"),
                       ("rope", "2", "not an integer from 0 to 1"), ("preset", "nosuch", "unknown preset"),
                       ("hyper", "mhc2", "none, mhc, hc, ihc or mhc-lite"), ("hyper_form", "dyn", "dynamic or static"),
                       ("hyper_streams", "9", "not an integer from 0 to 8"),
                       ("hyper_sinkhorn", "x", "not an integer from 0 to 100")]:
    run(f"{key}: {val!r}", model("m.st", meta=meta(**{key: val})), 1, f'"{key}"' if key != "preset" else val,
        word)
for key, val in [("n_layers", 1), ("preset", 3), ("norm", None), ("mixln_alpha", 0.5), ("attn_bias", 1),
                 ("rope", False)]:
    m = meta(**{key: "x"})
    m[key] = val
    run(f"{key} as JSON {json.dumps(val)}", model("m.st", meta=m), 1, f'"{key}"', "must be a string")
run("no n_heads", model("m.st", meta=meta(n_heads=None)), 1, '"n_heads"', "no")
# examples/train's --hyper: its maps have no Hugging Face name, refused by the first one's (the
# file padded as a checkpoint's optimizer moments pad it: its values outnumber the stack's)
PAD = [("optimizer.pad", [4096], [0.0] * 4096)]
run("hyper-connections on a Llama file", model("m.st", llama() + PAD, meta(hyper="mhc")), 1, "blocks.0.hc_attn_fn",
    "no name in the hf-llama layout", "hyper")
run("a hyper key nbimport does not know", model("m.st", meta=meta(hyper="mhc", hyper_rate="1")), 1,
    '"hyper_rate"')
run("__metadata__ not an object", write("mo.st", *tensors(llama(), "x")), 1, "__metadata__", "not a JSON object")
run("norm: rms, ffn: swiglu, attn_bias: 0, mixln_alpha: 0.5 (valid values)",
    model("m.st", meta=meta(norm="rms", ffn="swiglu", attn_bias="0", mixln_alpha="0.5")), 0)


# --- 4: keys named twice --------------------------------------------------------------------------
def dup_meta(first, second):
    h, d = tensors(llama(), None)
    body = json.dumps(h)[1:]
    m = json.dumps(META)[:-1] + ", " + json.dumps(first)[1:-1] + ", " + json.dumps(second)[1:-1] + "}"
    return write("dup.st", None, d, raw_header=('{"__metadata__": ' + m + ", " + body).encode())


run("norm twice in __metadata__", dup_meta({"norm": "rms"}, {"norm": "layer"}), 1, '"norm"', "twice", "__metadata__")
run("a key nbimport does not read twice in __metadata__", dup_meta({"x": "1"}, {"x": "1"}), 1, '"x"', "twice")
h, d = tensors(llama(), META)
body = json.dumps(h)
q = '"model.norm.weight": ' + json.dumps(h["model.norm.weight"])
run("a tensor named twice", write("dupt.st", None, d, raw_header=(body[:-1] + ", " + q + "}").encode()), 1,
    "model.norm.weight", "twice")
run("__metadata__ twice", write("dupm.st", None, d, raw_header=(body[:-1] + ', "__metadata__": {}}').encode()),
    1, "__metadata__", "twice")
eh, ed = tensors([("E", [B, T, D], X)])
check("E twice in INPUT", ["hf-llama", model("llama.st"),
                           write("dupe.st", None, ed, raw_header=(json.dumps(eh)[:-1] + ', "E": ' +
                                                                  json.dumps(eh["E"]) + "}").encode()), "out.st"],
      1, '"E"', "twice")

# --- 5: OUT naming an input -------------------------------------------------------------------------
mp = model("keep.st")
with open(mp, "rb") as f:
    before = f.read()
check("OUT is MODEL", ["hf-llama", mp, inp, mp], 1, "same file", mp)
check("OUT is INPUT", ["hf-llama", mp, inp, inp], 1, "same file", inp)
os.symlink(mp, "link.st")
check("OUT is a symlink to MODEL", ["hf-llama", mp, inp, "link.st"], 1, "same file")
os.link(mp, "hard.st")
check("OUT is a hard link to MODEL", ["hf-llama", mp, inp, "hard.st"], 1, "same file")
check("--export: OUT is MODEL", ["--export", "hf-llama", mp, mp], 1, "same file")
with open(mp, "rb") as f:
    record("MODEL unchanged after all of them", f.read() == before, "MODEL was overwritten")
check("MODEL still runs", ["hf-llama", mp, inp, "out.st"], 0)

# --- 6: not a regular file -----------------------------------------------------------------------
os.mkfifo("fifo.st")
check("a FIFO as MODEL", ["hf-llama", "fifo.st", inp, "out.st"], 1, "fifo.st", "not a regular file")
check("a FIFO as INPUT", ["hf-llama", mp, "fifo.st", "out.st"], 1, "fifo.st", "not a regular file")
check("a directory without config.json as MODEL", ["hf-llama", ".", inp, "out.st"], 1, "without config.json")
check("a missing MODEL", ["hf-llama", "nosuch.st", inp, "out.st"], 1, "nosuch.st")

# --- 7: outputs are checked before any work; special files are never opened or replaced ------------
check("OUT is a FIFO (no blocking)", ["hf-llama", mp, inp, "fifo.st"], 1, "fifo.st", "not a regular file")
check("--export: OUT is a FIFO", ["--export", "hf-llama", mp, "fifo.st"], 1, "fifo.st", "not a regular file")
check("OUT is /dev/null (a device)", ["hf-llama", mp, inp, "/dev/null"], 1, "/dev/null", "not a regular file")
check("OUT is a directory", ["hf-llama", mp, inp, "."], 1, "not a regular file")
check("OUT in a missing directory", ["hf-llama", mp, inp, "nosuch/out.st"], 1, "nosuch", "not a directory")
record("the FIFO is still a FIFO", os.path.exists("fifo.st") and not os.path.isfile("fifo.st"))

# --- 8: every metadata key is understood, or refused by name (issue 23) -----------------------------
run("a metadata key nbimport does not know", model("m.st", meta=meta(sliding_window="4096")), 1, '"sliding_window"',
    "not a key nbimport knows")
run("a value of examples/train's sites key nbimport does not know", model("m.st", meta=meta(sites="q,x")), 1,
    '"sites"', "comma list of q, k, v, c")
if run("eps in the metadata (examples/train writes it when set)", model("m.st", meta=meta(eps="0.5", rope_theta="5e5")),
       0):
    shape, out = read_out("out.st")
    err = max(abs(v / math.sqrt(sum(x * x for x in X[r * D:(r + 1) * D]) / D + 0.5) - o)
              for r in range(B * T) for v, o in zip(X[r * D:(r + 1) * D], out[r * D:(r + 1) * D]))
    record("...is honoured: the output is RMSNorm(E) with eps 0.5", err < 1e-5, f"max error {err:.3g}")
run("eps that is not a number", model("m.st", meta=meta(eps="small")), 1, '"eps"')
run("a per-layer schedule", model("m.st", meta=meta(schedule="pre,post")), 1, '"schedule"', "cannot run")
run("the training keys examples/train writes are known", model("m.st", meta=meta(lr="0.003", seed="1", steps="10")), 0)
run("metadata of a model far larger than the file", model("m.st", meta=meta(n_layers="100000", d_model="4096",
                                                                            n_heads="32", n_kv_heads="32",
                                                                            d_ff="11008")),
    1, "100000 layers of d_model 4096", "its files hold")



# --- 9: --export refuses a stack the target's model code would run as another model --------------
def nb_model(kv=2, layer=False, ff=FF):
    """a 1-layer stack in the library's names (n_heads 2, n_kv_heads kv; LayerNorms carry biases)"""
    hd = D // 2
    items = [("blocks.0.att_proj.weight", [D + 2 * kv * hd, D], [0.01] * (D + 2 * kv * hd) * D),
             ("blocks.0.attn_out.weight", [D, D], [0.01] * D * D),
             ("blocks.0.ff_proj.weight", [(1 if layer else 2) * ff, D], [0.01] * (1 if layer else 2) * ff * D),
             ("blocks.0.ff_out.weight", [D, ff], [0.01] * D * ff)]
    for n in ("blocks.0.attn_norm", "blocks.0.ff_norm", "ln_f"):
        items.append((n + ".weight", [D], [1.0] * D))
        if layer:
            items.append((n + ".bias", [D], [0.0] * D))
    if layer:
        items += [("blocks.0.ff_proj.bias", [ff], [0.0] * ff), ("blocks.0.ff_out.bias", [D], [0.0] * D)]
    return items


gqa = model("gqa.st", nb_model(kv=1), meta(n_kv_heads="1", rope="1"))
check("--export of a GQA + SwiGLU stack as hf-gpt2", ["--export", "hf-gpt2", gqa, "x.st"], 1, "n_kv_heads",
      "no GQA")
check("...as gpt2-linear", ["--export", "gpt2-linear", gqa, "x.st"], 1, "gpt2-linear", "n_kv_heads")
check("--export of a SwiGLU stack as hf-gpt2", ["--export", "hf-gpt2", model("sw.st", nb_model(), META), "x.st"], 1,
      "ffn", "without a gate")
check("--export of a stack without RoPE as hf-llama", ["--export", "hf-llama", model("nr.st", nb_model(), META),
                                                       "x.st"], 1, "rope", "Llama")
check("--export of a LayerNorm stack as hf-llama",
      ["--export", "hf-llama", model("ln.st", nb_model(layer=True), meta(norm="layer", ffn="gelu", rope="1")),
       "x.st"], 1, "norm", "RMSNorm")
for style in ("hf-llama", "hf-gpt2", "gpt2-linear"):
    check(f"--export of a stack with hyper-connections as {style}",
          ["--export", style, model("hy.st", nb_model() + PAD, meta(rope="1", hyper="ihc", hyper_streams="2")),
           "x.st"],
          1, "hyper", style)
record("...the refusals wrote nothing", not os.path.exists("x.st"), "x.st exists")
check("--export of a GQA stack with RoPE as hf-llama (Llama has GQA)", ["--export", "hf-llama", gqa, "x.st"], 0)
# nGPT (NVIDIA/ngpt's names): its preset exports and runs back in that layout; other layouts
# refuse it by its norm, and the ngpt layout refuses another preset
NFF = 4 * D  # NVIDIA/ngpt's c_fc: 2 x 4 n_embd
ng_items = [("blocks.0.att_proj.weight", [3 * D, D], [0.01 * (i % 7 + 1) for i in range(3 * D * D)]),
            ("blocks.0.attn_out.weight", [D, D], [0.02 * (i % 5 + 1) for i in range(D * D)]),
            ("blocks.0.sqk", [D], [0.35] * D),
            ("blocks.0.ff_proj.weight", [2 * NFF, D], [0.01 * (i % 3 + 1) for i in range(2 * NFF * D)]),
            ("blocks.0.ff_out.weight", [D, NFF], [0.01 * (i % 4 + 1) for i in range(D * NFF)]),
            ("blocks.0.suv", [2 * NFF], [1.0] * 2 * NFF),
            ("blocks.0.attn_alpha", [D], [0.35] * D), ("blocks.0.mlp_alpha", [D], [0.35] * D)]
ng = model("ng.st", ng_items, meta(preset="ngpt", d_ff=str(NFF), rope="1"))
check("--export of the ngpt preset as ngpt", ["--export", "ngpt", ng, "ngx.st"], 0)
eh, ed = tensors([("E", [B, T, D], [0.1 * (i % 9) - 0.4 for i in range(B * T * D)])])
check("...and it runs back from NVIDIA/ngpt's names", ["ngpt", "ngx.st", write("ng_e.st", eh, ed), "ng_out.st"], 0)
if os.path.exists("ng_out.st"):
    out = read_out("ng_out.st")[1]
    norms = [sum(v * v for v in out[i * D:(i + 1) * D]) ** 0.5 for i in range(B * T)]
    record("...every token of its output on the unit sphere", all(abs(n - 1) < 1e-5 for n in norms), str(norms))
V = 5
io = [("transformer.wte.weight", [V, D], [0.1] * V * D), ("lm_head.weight", [V, D], [0.2] * V * D)]
check("--export ngpt of a checkpoint without sz", ["--export", "ngpt", model("ngio.st", ng_items + io,
      meta(preset="ngpt", d_ff=str(NFF), rope="1")), "x.st"], 1, "sz")
check("--export ngpt of a checkpoint with sz (NVIDIA/ngpt's GPT.sz)",
      ["--export", "ngpt", model("ngsz.st", ng_items + io + [("sz", [V], [0.5 + i for i in range(V)])],
                                 meta(preset="ngpt", d_ff=str(NFF), rope="1")), "ngsz_x.st"], 0)
if os.path.exists("ngsz_x.st"):
    with open("ngsz_x.st", "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    a, b = h["sz"]["data_offsets"]
    record("...sz written as it is, 1-D", h["sz"]["shape"] == [V] and list(
        struct.unpack("<%df" % V, raw[8 + n + a:8 + n + b])) == [0.5 + i for i in range(V)], str(h.get("sz")))
check("--export of the ngpt preset as hf-llama", ["--export", "hf-llama", ng, "x.st"], 1, "norm", "RMSNorm")
check("--export of a pre stack as ngpt", ["--export", "ngpt", model("pre.st", nb_model(), meta(rope="1")), "x.st"],
      1, "preset", "ngpt")



# --- 10: a Hugging Face directory: config.json describes the stack (issue 24) ---------------------
LLAMA_CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
             "intermediate_size": FF, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
             "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "rope_scaling": None,
             "attention_bias": False, "mlp_bias": False, "max_position_embeddings": 2048, "vocab_size": 256,
             "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
             "transformers_version": "4.44.0", "initializer_range": 0.02, "use_cache": True,
             "pretraining_tp": 1, "attention_dropout": 0.0}


def hub(path, cfg, items=None, shards=1):
    os.makedirs(path, exist_ok=True)
    for f in os.listdir(path):
        os.remove(os.path.join(path, f))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    items = llama() if items is None else items
    if shards == 1:
        write(os.path.join(path, "model.safetensors"), *tensors(items, {"format": "pt"}))
    else:
        wmap = {}
        for k in range(shards):
            part = items[k::shards]
            name = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
            write(os.path.join(path, name), *tensors(part, {"format": "pt"}))
            wmap.update({n: name for n, _, _ in part})
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, f)
    return path


def final_norm_err(out, eps):
    worst = 0.0
    for r in range(B * T):
        x = X[r * D:(r + 1) * D]
        ms = sum(v * v for v in x) / D
        worst = max(worst, max(abs(v / math.sqrt(ms + eps) - o) for v, o in zip(x, out[r * D:])))
    return worst


for what, cfg_edit, shards, eps in [("a Llama hub directory", {}, 1, 1e-5),
                                    ("...its rms_norm_eps honoured (0.5)", {"rms_norm_eps": 0.5}, 1, 0.5),
                                    ("a sharded hub directory (index.json)", {}, 3, 1e-5),
                                    ("a Qwen2 directory", {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
                                                           "use_sliding_window": False, "sliding_window": 4096,
                                                           "max_window_layers": 21}, 1, 1e-5)]:
    items = llama()
    if cfg_edit.get("model_type") == "qwen2":  # Qwen2's q, k, v biases (zero)
        items += [("model.layers.0.self_attn.%s_proj.bias" % x, [D], [0.0] * D) for x in "qkv"]
    d = hub("hub", dict(LLAMA_CFG, **cfg_edit), items, shards)
    if os.path.exists("out.st"):
        os.remove("out.st")
    if check(what, ["hf-llama", d, inp, "out.st"], 0):
        shape, out = read_out("out.st")
        err = final_norm_err(out, eps)
        record(f"{what}: the output is RMSNorm(E) with eps {eps}", shape == [B, T, D] and err < 1e-5, f"max error {err:.3g}")
# the file beside a config.json, its metadata without the stack
os.makedirs("beside", exist_ok=True)
with open("beside/config.json", "w") as f:
    json.dump(LLAMA_CFG, f)
check("a file with config.json beside it", ["hf-llama", write("beside/w.st", *tensors(llama(), {"format": "pt"})), inp,
                                            "out.st"], 0)
for what, edit, words in [
        ("an unknown config key", {"quantization_config": {"bits": 4}}, ['"quantization_config"', "refused"]),
        ("rope_scaling set (Llama 3.1)", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, ['"rope_scaling"']),
        ("hidden_act gelu", {"hidden_act": "gelu"}, ['"hidden_act"', "silu"]),
        ("a sliding window", {"use_sliding_window": True}, ['"use_sliding_window"']),
        ("head_dim that does not split d_model", {"head_dim": 8}, ['"head_dim"']),
        ("mistral with a sliding window", {"model_type": "mistral", "sliding_window": 4096}, ['"sliding_window"', "full attention"]),
        ("model_type phi3", {"model_type": "phi3"}, ['"model_type" is phi3']),
        ("rope_parameters as a string", {"rope_parameters": "default"}, ['"rope_parameters"', "object"]),
        ("rope_parameters as an array", {"rope_parameters": [1, 2]}, ['"rope_parameters"', "object"]),
        ("rms_norm_eps below float's range", {"rms_norm_eps": 1e-50}, ['"rms_norm_eps"', "float range"]),
        ("mlp_bias true", {"mlp_bias": True}, ['"mlp_bias"']),
        ("a string for hidden_size", {"hidden_size": "8"}, ['"hidden_size"', "integer"]),
        ("rms_norm_eps of 0", {"rms_norm_eps": 0}, ['"rms_norm_eps"']),
        ("sliding layers in layer_types", {"model_type": "qwen3", "head_dim": D // 2, "layer_types": ["sliding_attention"]}, ['"layer_types"']),
        ("no num_hidden_layers", {"num_hidden_layers": None}, ['"num_hidden_layers" is missing']),
        ("rope_parameters of YaRN", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, ['"rope_parameters"']),
        ("qwen3 without head_dim (its default 128)", {"model_type": "qwen3"}, ['"head_dim"', "128"])]:
    cfg = dict(LLAMA_CFG, **edit)
    if edit.get("num_hidden_layers", 0) is None:
        del cfg["num_hidden_layers"]
    run(f"config.json: {what}", hub("hub", cfg), 1, "config.json", *words)
run("rope_parameters of the default RoPE (newer transformers)",
    hub("hub", dict({k: v for k, v in LLAMA_CFG.items() if k != "rope_theta"},
                    rope_parameters={"rope_type": "default", "rope_theta": 500000.0})), 0)
run("a llama config.json with STYLE hf-gpt2", hub("hub", LLAMA_CFG), 1, "STYLE hf-llama", style="hf-gpt2")
run("a mistral config.json with sliding_window null: Llama", hub("hub", dict(LLAMA_CFG, model_type="mistral",
                                                                             sliding_window=None)), 0)
shape_m, out_m = read_out("out.st")
run("the same as llama", hub("hub", LLAMA_CFG), 0)
record("...a Mistral directory without a sliding window computes Llama's output", read_out("out.st") == (shape_m, out_m))
# read as Python's json reads it, or refused: a key twice (json keeps the last), text after the object
with open("hub/config.json", "w") as f:
    f.write(json.dumps(LLAMA_CFG)[:-1] + ', "rms_norm_eps": 1e-3}')
run("a config.json with a key twice", "hub", 1, '"rms_norm_eps" is given twice', "last value")
with open("hub/config.json", "w") as f:
    f.write(json.dumps(LLAMA_CFG) + ' {"model_type": "gpt2"}')
run("a config.json with text after its object", "hub", 1, "text after its JSON object")
with open("hub/config.json", "w") as f:
    f.write(json.dumps(LLAMA_CFG) + " \n\t ")
run("a config.json with white space after its object", "hub", 0)
# the work bounded by the files before the stack is built: a 300-byte config.json of 2^24
# layers is refused at once (it used to build the whole stack first)
t0 = time.time()
run("a config.json of 2^24 layers on a small file", hub("hub", dict(LLAMA_CFG, num_hidden_layers=1 << 24)), 1,
    "16777216 layers", "its files hold")
record("...refused within a second", time.time() - t0 < 1.0, f"{time.time() - t0:.2f} s")
before = open(os.path.join(hub("hub", LLAMA_CFG), "config.json")).read()
run("OUT is the model directory's config.json", "hub", 1, "same file", "config.json", out="hub/config.json")
record("...which is left as it was", open("hub/config.json").read() == before)
GPT2_CFG = {"model_type": "gpt2", "n_layer": 1, "n_embd": D, "n_head": 2, "n_inner": FF, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257, "resid_pdrop": 0.1,
            "summary_type": "cls_index", "task_specific_params": {"text-generation": {"max_length": 50}}}
run("a GPT-2 hub directory", hub("hub", GPT2_CFG, gpt2()), 0, style="hf-gpt2")
run("a GPT-2 config with exact GELU", hub("hub", dict(GPT2_CFG, activation_function="gelu"), gpt2()), 1,
    '"activation_function"', style="hf-gpt2")
run("a GPT-2 config scaling attention by layer", hub("hub", dict(GPT2_CFG, scale_attn_by_inverse_layer_idx=True),
                                                      gpt2()), 1, '"scale_attn_by_inverse_layer_idx"', style="hf-gpt2")
with open("hub/config.json", "w") as f:
    f.write("{not json")
run("a config.json that is not JSON", "hub", 1, "config.json", "not a JSON object")
run("shards naming a path outside the directory", hub("hub", LLAMA_CFG, shards=2), 0)
with open("hub/model.safetensors.index.json", "w") as f:
    json.dump({"weight_map": {"model.norm.weight": "../llama.st"}}, f)
run("...an index naming ../llama.st", "hub", 1, "not a file name of the directory")

# from token ids to logits, as the model type defines them (issue 37): E = the embedding's rows
# (GPT-2: + wpe), the stack, the head (lm_head, or the embedding when tied). The logits are held
# against the stack's output for the same E (the E path, tested above) times the head, in Python.
V = 11
def ids_file(path, ids, dtype="I64"):
    fmt = "<q" if dtype == "I64" else "<i"
    b = b"".join(struct.pack(fmt, v) for v in ids)
    return write(path, {"ids": {"dtype": dtype, "shape": [B, T], "data_offsets": [0, len(b)]}}, b)
def read_named(path, name):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    a, b = h[name]["data_offsets"]
    return h[name]["shape"], struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a:8 + n + b])
emb = [0.05 * ((i * 5) % 9 - 4) for i in range(V * D)]
head = [0.03 * ((i * 7) % 13 - 6) for i in range(V * D)]
wpe = [0.02 * ((i * 3) % 7 - 3) for i in range(4 * D)]
ids = [3, 0, 10, 7, 7, 1]
for what, style, cfg, items, tied in [
        ("llama", "hf-llama", LLAMA_CFG, llama(zero=False), False),
        ("llama with tied embeddings", "hf-llama", dict(LLAMA_CFG, tie_word_embeddings=True), llama(zero=False), True),
        ("gpt2", "hf-gpt2", GPT2_CFG, gpt2(), False)]:
    gp = style == "hf-gpt2"
    extra = [("transformer.wte.weight" if gp else "model.embed_tokens.weight", [V, D], emb)]
    extra += [] if tied else [("lm_head.weight", [V, D], head)]
    extra += [("transformer.wpe.weight", [4, D], wpe)] if gp else []
    hub("hub", cfg, items + extra)
    ids_file("ids.st", ids, "I32" if gp else "I64")
    if not check(f"ids to logits: {what}", [style, "hub", "ids.st", "logits.st"], 0):
        continue
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]  # the files' values, as nbimport reads them
    E = [f32(emb[i * D + k]) + (f32(wpe[(r % T) * D + k]) if gp else 0.0) for r, i in enumerate(ids) for k in range(D)]
    write("E_ids.st", *tensors([("E", [B, T, D], E)]))
    check(f"...the same E as an input ({what})", [style, "hub", "E_ids.st", "out_E.st"], 0)
    _, out = read_named("out_E.st", "out")
    shape, got = read_named("logits.st", "logits")
    h = emb if tied else head
    want = [sum(out[r * D + k] * h[v * D + k] for k in range(D)) for r in range(B * T) for v in range(V)]
    err = max(abs(a - b) for a, b in zip(got, want)) / max(abs(b) for b in want)
    record(f"...its logits = the stack's output times the {'embedding (tied)' if tied else 'head'} ({what}: "
           f"relative error {err:.2g})", shape == [B, T, V] and err < 1e-5 and read_named("logits.st", "out")[1] == out)
ids_file("ids_bad.st", [3, 0, 11, 7, 7, 1])
check("ids outside the vocabulary", ["hf-gpt2", "hub", "ids_bad.st", "o.st"], 1, "ids[2] is 11, outside the vocabulary [0, 11)")
ids_file("ids.st", ids)
check("ids with STYLE normblocks", ["normblocks", model("m.st"), "ids.st", "o.st"], 1, "hf-llama or hf-gpt2")

# --- 11: --export to a directory: the HF class that computes the stack, or a refusal ---------------
io = [("transformer.wte.weight", [256, D], [0.01] * 256 * D), ("lm_head.weight", [256, D], [0.02] * 256 * D)]
items = io + [("transformer." + n, sh, v) for n, sh, v in nb_model()]
check("--export of a checkpoint-like file to a directory", ["--export", "hf-llama", model("ck.st", items, meta(rope="1")),
                                                            "hfdir/"], 0, )
cfg = json.load(open("hfdir/config.json")) if os.path.exists("hfdir/config.json") else {}
record("...config.json of a LlamaForCausalLM, vocab 256, eps written short",
       cfg.get("model_type") == "llama" and cfg.get("vocab_size") == 256 and cfg.get("rms_norm_eps") == 1e-5, str(cfg))
check("...and it imports back", ["hf-llama", "hfdir", inp, "back.st"], 0)
items_b = items + [("transformer.blocks.0.attn_out.bias", [D], [0.0] * D)]
check("--export to a directory of a stack with the output bias only", ["--export", "hf-llama",
      model("ckb.st", items_b, meta(rope="1", attn_bias="2")), "hfdir2/"], 1, "attn_bias", "all of Q, K, V and O")
check("--export of a stack without embedding and head to a directory", ["--export", "hf-llama",
      model("nb.st", nb_model(), meta(rope="1")), "hfdir3/"], 1, "no embedding and head")

# --- 12: --export writes a layout only for a stack its model code computes (issue 26) --------------
# A refused stack is refused before any tensor is read: these files hold only the stack's
# description and zeros enough for its size. The message names the first field that differs, a
# file and a directory alike, and nothing is written.
ZEROS = [("optimizer.pad", [1 << 15], None)]


def described(meta_kw, base=None):
    """a file of only a stack's description (and zeros as many as its parameters)"""
    return model("described.st", ZEROS, meta(base or dict(META, n_layers="4"), **meta_kw))


def refused(what, style, meta_kw, *words, base=None, out="refused.st"):
    if os.path.exists(out):
        os.remove(out)
    check(what, ["--export", style, described(meta_kw, base), out], 1, "cannot be expressed in the %s layout" % style,
          *words)
    record(what + ": nothing written", not os.path.exists(out.rstrip("/")), out + " exists")


LL = dict(rope="1")                          # Llama's: RMSNorm, SwiGLU (the defaults), RoPE
GP = dict(META, n_layers="4", preset="gpt2", d_ff=str(4 * D))  # GPT-2's: LayerNorm, GELU, biases (the name)
NG = dict(META, n_layers="4", preset="ngpt", rope="1", d_ff=str(4 * D))
refused("sandwich as hf-llama (the issue's: Llama's code has no output norms)", "hf-llama", dict(LL, preset="sandwich"),
        "layout: output_norm (preset sandwich, layer 0, attention)", "post_attention_layernorm")
refused("...to a directory: the same refusal", "hf-llama", dict(LL, preset="sandwich"), "output_norm", "sandwich",
        out="refused_dir/")
refused("GQA + SwiGLU as hf-gpt2 (the issue's)", "hf-gpt2", dict(n_kv_heads="1"), "layout: n_kv_heads", "no GQA")
for preset, field, words in [("post", "post_norm", "layer 0, attention"), ("mixln", "post_norm", "mixln"),
                             ("deepnorm", "post_norm", "deepnorm"), ("periln", "output_norm", "periln"),
                             ("none", "input_norm", "every sublayer's input"), ("hybrid", "input_norm", "hybrid"),
                             ("pre_post", "residual_from_norm", "HybridNorm"), ("lns", "input_scale", "layer 1"),
                             ("rezero", "branch_scale", "ReZero"), ("layerscale", "branch_scale", "LayerScale"),
                             ("siamese", "preset", "SiameseNorm"), ("pre_sites_pre", "sites", "Qwen3"),
                             ("dyt", "norm", "RMSNorm")]:
    refused(f"{preset} as hf-llama", "hf-llama", dict(LL, preset=preset), "layout: " + field, words)
refused("olmo2 with Q, K, V biases only as hf-llama", "hf-llama", dict(LL, preset="olmo2", attn_bias="1"),
        "layout: attn_bias", "OLMo-2's attention_bias")
refused("Qwen3's QK norms with Q, K, V biases only as hf-llama", "hf-llama",
        dict(LL, preset="Pre-QK-Pre", attn_bias="1"), "layout: attn_bias", "Qwen3's attention_bias")
refused("the value residual as hf-llama", "hf-llama", dict(LL, value_residual="fixed"), "layout: value_residual")
refused("gelu as hf-llama", "hf-llama", dict(LL, ffn="gelu", norm="rms"), "layout: ffn", "SwiGLU")
GP_AS = dict(norm="layer", ffn="gelu", attn_bias="3")  # another preset with GPT-2's settings
for style in ("hf-gpt2", "gpt2-linear"):
    for kw, field, words in [(dict(norm="rms"), "norm", "LayerNorm"), (dict(rope="1"), "rope", "wpe"),
                             (dict(attn_bias="1"), "attn_bias", "attn_bias 3"),
                             (dict(GP_AS, preset="hybrid"), "sites", "no norms"),
                             (dict(GP_AS, preset="sandwich"), "output_norm", "sandwich"),
                             (dict(GP_AS, preset="siamese"), "preset", "siamese"),
                             (dict(value_residual="learn"), "value_residual", "ResFormer"),
                             (dict(hyper="hc", hyper_streams="2"), "hyper", "one residual stream")]:
        refused(f"gpt2 with {kw} as {style}", style, kw, "layout: " + field, words, base=GP)
refused("gpt2 with d_ff 2 d_model as gpt2-linear (llm.c has no n_inner)", "gpt2-linear", dict(d_ff=str(2 * D)),
        "layout: d_ff", "4 n_embd", base=GP)
refused("gpt2 with eps 1e-6 as gpt2-linear", "gpt2-linear", dict(eps="1e-6"), "layout: eps", "1e-5", base=GP)
for kw, field, words in [(dict(norm="rms"), "norm", "L2"), (dict(ffn="gelu"), "ffn", "SwiGLU"),
                         (dict(attn_bias="1"), "attn_bias", "bias-free"), (dict(d_ff=str(FF)), "d_ff", "4 n_embd"),
                         (dict(rope="0"), "rope", "rotary"), (dict(rope_theta="500000"), "rope_theta", "10000"),
                         (dict(value_residual="fixed"), "value_residual", "ResFormer"),
                         (dict(preset="pre", norm="l2"), "preset", "preset pre")]:
    refused(f"ngpt with {kw} as ngpt", "ngpt", kw, "layout: " + field, words, base=NG)


def accepted(what, style, meta_kw, base=None):
    """a stack the checks let through: only its missing tensors stop it"""
    check(what, ["--export", style, described(meta_kw, base), "acc.st"], 1, "MODEL has no")
    r = subprocess.run([NBIMPORT, "--export", style, "described.st", "acc.st"], capture_output=True, text=True)
    record(what + ": not refused as inexpressible", "cannot be expressed" not in r.stderr, r.stderr)


check("--export ngpt to a directory: no Hugging Face class reads that layout", ["--export", "ngpt", "ngsz.st",
      "ngdir/"], 1, "no Hugging Face model class reads the ngpt layout")
accepted("mixln of 3 layers as hf-llama (floor(0.25 L) = 0: every layer Pre-LN)", "hf-llama",
         dict(LL, preset="mixln", n_layers="3"))
accepted("mixln_alpha -1 as hf-llama (the Mix-LN code's Pre-LN)", "hf-llama",
         dict(LL, preset="mixln", mixln_alpha="-1"))
accepted("lns of 1 layer as hf-llama (1/sqrt(1))", "hf-llama", dict(LL, preset="lns", n_layers="1"))
accepted("gpt2 with d_ff 2 d_model and eps 1e-6 as hf-gpt2 (n_inner, layer_norm_epsilon)", "hf-gpt2",
         dict(d_ff=str(2 * D), eps="1e-6"), base=GP)
# one file names the class whose config it needs; gpt2-linear wants the head tied to the embedding
llm = [("transformer." + n, sh, v) for n, sh, v in nb_model()]
check("--export of Q, K, V biases to a file names Qwen2", ["--export", "hf-llama", model("q2.st", llm + [
      ("transformer.blocks.0.att_proj.bias", [3 * D], [0.0] * 3 * D)], meta(rope="1", attn_bias="1")), "q2x.st"], 0)
r = subprocess.run([NBIMPORT, "--export", "hf-llama", "q2.st", "q2x.st"], capture_output=True, text=True)
record("...its message: the model of Qwen2ForCausalLM", "Qwen2ForCausalLM (model_type qwen2)" in r.stdout, r.stdout)
# a GPT-2 checkpoint as llm.c's (MLP 4 n_embd)
gpt4 = [("transformer." + n, sh, v) for n, sh, v in nb_model(layer=True, ff=4 * D)]
gpt4 += [("transformer.blocks.0.att_proj.bias", [3 * D], [0.0] * 3 * D),
         ("transformer.blocks.0.attn_out.bias", [D], [0.0] * D)]
g4_meta = meta(GMETA, d_ff=str(4 * D))
wte = [0.01 * (i % 13) for i in range(V * D)]
untied = gpt4 + [("transformer.wte.weight", [V, D], wte), ("lm_head.weight", [V, D], [v + 1 for v in wte])]
check("--export gpt2-linear of a head that is not the embedding", ["--export", "gpt2-linear",
      model("untied.st", untied, g4_meta), "untied_refused.st"], 1, "lm_head.weight", "ties")
record("...the refusal wrote nothing", not os.path.exists("untied_refused.st"), "untied_refused.st exists")
check("--export hf-gpt2 of it (tie_word_embeddings false)", ["--export", "hf-gpt2", "untied.st", "untied_x.st"], 0)
check("--export gpt2-linear of a tied head", ["--export", "gpt2-linear", model("tied.st", gpt4 + [
      ("transformer.wte.weight", [V, D], wte), ("lm_head.weight", [V, D], wte)], g4_meta), "tied_x.st"], 0)
check("--export gpt2-linear to a directory: no Hugging Face class reads that layout", ["--export", "gpt2-linear",
      "tied.st", "g2dir/"], 1, "no Hugging Face model class reads the gpt2-linear layout")

# --- 13: the export table: --help's, computed by the checks themselves, is README.md's, and --export
# refuses exactly its "no" cells, naming their field -------------------------------------------------
help_text = subprocess.run([NBIMPORT, "--help"], capture_output=True, text=True).stdout
rows = [ln for ln in help_text.splitlines() if ln.startswith("|")]
with open(README) as f:
    readme = f.read()
record("README.md's export table is nbimport --help's (the same rows)", len(rows) > 30 and "\n".join(rows) in readme,
       "README.md lacks the table --help prints: paste its rows into README.md")
styles = [c.strip() for c in rows[0].strip("|").split("|")][1:] if rows else []
STYLE_META = {"hf-llama": dict(norm="rms", ffn="swiglu", rope="1", attn_bias="0"),
              "hf-gpt2": dict(norm="layer", ffn="gelu", rope="0", attn_bias="3"),
              "gpt2-linear": dict(norm="layer", ffn="gelu", rope="0", attn_bias="3"),
              "ngpt": dict(norm="l2", ffn="swiglu", rope="1", attn_bias="0")}
cells_ok = cells = 0
for row in rows[2:]:
    cols = [c.strip() for c in row.strip("|").split("|")]
    name = cols[0].split("`")[1]
    own = cols[0].split("(norm ")[1].rstrip(")") if "(norm " in cols[0] else None
    for style, cell in zip(styles, cols[1:]):
        variants = [("0", cell)]
        if style == "hf-llama":  # attn_bias 0 gives llama, qwen3 or olmo2, attn_bias 1 qwen2; "no: "
            types = [] if cell.startswith("no") else cell.split(", ")  # without a field: by any
            variants = [("0", cell if cell.startswith("no") or set(types) - {"qwen2"} else "no: "),
                        ("1", "yes" if "qwen2" in types else "no: ")]
        for bias, want in variants:
            kw = dict(STYLE_META[style], preset=name, n_layers="4", d_ff=str(4 * D))
            if style == "hf-llama":
                kw["attn_bias"] = bias
            if own:
                kw["norm"] = own
            r = subprocess.run([NBIMPORT, "--export", style, model("cell.st", ZEROS, meta(**kw)), "cell_x.st"],
                               capture_output=True, text=True)
            no = "cannot be expressed in the %s layout" % style in r.stderr
            ok = r.returncode == 1 and (no and ("layout: " + want[4:]) in r.stderr if want.startswith("no:")
                                        else not no and "MODEL has no" in r.stderr)
            cells += 1
            cells_ok += ok
            if not ok:
                print(f"  table cell {name} / {style} (attn_bias {bias}): {want!r}, but: {r.stderr.strip()}")
record(f"every cell of the table is what --export does ({cells_ok} of {cells})", cells and cells_ok == cells)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
