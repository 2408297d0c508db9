#!/usr/bin/python3
"""compare.py - the twin's loss (and gradients) of an examples/train checkpoint, and the C trainer's.

    /usr/bin/python3 examples/pytorch/compare.py CK.safetensors --data FILE [--train PATH]
                     [--grads] [--val-frac F] [--atol A] [--rtol R] [--float64]

Loads CK (a checkpoint trained with `train --data FILE`) into the PyTorch twin and prints the
mean loss over the checkpoint's validation batches: the number `train --load CK --eval --data
FILE` prints as val_loss. With --train it runs that command too and checks
|twin - C| <= atol + rtol |C|; the exit status is 1 when they differ by more.

--grads (with --train) also compares gradients: the trainer resumes CK for one more step with
lr 0, beta1 0 and no clipping, so the step leaves the parameters as they are and its first
Adam moment (optimizer.m.* of the checkpoint it saves) is the gradient of that step's training
batch; the twin computes the loss of the same batch (data.c train_batch) and its gradients
with autograd. Checked: the step's loss (the trainer's --csv) as above, and per tensor
max |g_twin - g_C| <= gatol + grtol max |g_C|.

--dump FILE writes what `train --load CK --dump FILE --data DATA` writes, from the twin: every
named intermediate of the first validation batch's forward and backward (the library's TRACE
NAMES), in the same order, for `nbdiff C.safetensors TWIN.safetensors --atol A --rtol R` to
name the first tensor where the two part.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from normblocks_twin import (Trace, load_checkpoint, read_safetensors,  # noqa: E402
                             text_eval_loss, text_train_batch, text_val_batches,
                             write_safetensors)


def run(cmd):
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        print(res.stdout)
        sys.exit("%s failed (status %d)" % (" ".join(cmd), res.returncode))
    return res.stdout


def model_flags(meta):
    """The trainer flags that rebuild the checkpoint's model (as its metadata records it)."""
    f = (["--schedule", meta["schedule"]] if meta["preset"] == "custom" else
         ["--preset", meta["preset"], "--layers", meta["n_layers"]])
    f += ["--d", meta["d_model"], "--heads", meta["n_heads"], "--kv-heads", meta["n_kv_heads"],
          "--ff", meta["d_ff"], "--ffn", meta["ffn"], "--norm", meta["norm"]]
    for key in MODEL_KEYS:  # each written only when set: "--key value", a flag's value "on"
        if key in meta:
            flag = "--" + key.replace("_", "-")
            f += [flag] if key in FLAG_KEYS else [flag, meta[key]]
    f += ["--embed-scale", {"0": "off", "1": "learn", "2": "sqrt-d"}[meta.get("embed_scale", "0")]]
    return f + ([] if meta["rope"] == "1" else ["--no-rope"])


# the trainer's model options written to checkpoints (examples/train/cli.c, O_MODEL)
MODEL_KEYS = ("rope_theta", "eps", "mixln_alpha", "sites", "site_width", "ffn_bias", "final_norm",
              "embed_norm", "siamese_scale", "siamese_fusion", "siamese_no_fusion_norm",
              "value_residual", "hyper", "hyper_streams", "hyper_form", "hyper_sinkhorn",
              "completep", "depth_base", "width_base", "logit_softcap", "attn_gate", "attn_sink",
              "clip_qkv", "attn_softcap", "norm_gain", "norm_bias", "gain_offset", "branch_scale",
              "dwa", "dwa_dilation", "dwa_period", "attn_res", "attn_res_block", "unet_skips",
              "reinject_x0", "mup", "mup_base_head_dim", "mup_embed_mult", "mup_output_mult",
              "value_embeds")
FLAG_KEYS = ("siamese_no_fusion_norm", "gain_offset", "dwa", "attn_res", "unet_skips",
             "reinject_x0", "mup")


def check_order(path, model):
    """The stack's library_parameters() order is the order of the checkpoint's data (the
    trainer's flat buffer: wte, embed_scale, the value embeddings' tables, the stack's tensor
    table, lm_head)."""
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
    header.pop("__metadata__", None)
    stored = [k for k in sorted(header, key=lambda k: header[k]["data_offsets"][0])
              if not k.startswith("optimizer.")]
    io = ("wte.weight", "embed_scale")
    ve = ["value_embeds.%d.weight" % t for t in range(len(getattr(model.transformer,
                                                                  "value_embeds", [])))]
    stack = [n for n, _ in model.transformer.library_parameters() if n not in io + tuple(ve)]
    mine = ["transformer." + n for n in io if hasattr(model.transformer, n.split(".")[0])]
    mine += ["transformer." + n for n in ve]  # vembed.c: after the embedding, before the stack
    mine += ["transformer." + n for n in stack] + ["lm_head.weight"]
    mine += ["sz"] if hasattr(model, "sz") else []  # nGPT's logit scale (train --preset ngpt)
    print("tensor order: %s" % ("the checkpoint's" if mine == stored else "DIFFERS"))
    return mine == stored


def check_grads(a, meta, data):
    """One lr-0 step of the C trainer from the checkpoint; its loss and gradients vs the twin's.
    Returns (ok, loss difference, worst gradient ratio)."""
    step = int(meta["step"])
    with tempfile.TemporaryDirectory() as tmp:
        g_ck, csv = os.path.join(tmp, "g.safetensors"), os.path.join(tmp, "g.csv")
        run([a.train, "--resume", a.checkpoint, "--allow-change", "all", "--data", a.data,
             "--val-frac", repr(a.val_frac), "--steps", str(step + 1), "--lr", "0",
             "--beta1", "0", "--clip", "0", "--seed", meta["seed"], "--batch", meta["batch"],
             "--seq", meta["seq"], "--eval-batches", "1", "--quiet", "--save", g_ck,
             "--csv", csv] + model_flags(meta))
        with open(csv) as f:
            ref = float(f.read().strip().splitlines()[-1].split(",")[1])
        tensors, gmeta = read_safetensors(g_ck)
    model, _ = load_checkpoint(a.checkpoint)
    if a.float64:
        model = model.double()
    # lr 0: the parameters the step saved are the ones it started from (nGPT's: to the rounding
    # of its normalization after the step, which scales unit vectors by 1 within float32 ulps)
    rtol = 4e-7 if "sz" in tensors else 0
    for name, p in model.named_parameters():
        if not torch.allclose(tensors[name], p.detach().float(), rtol=rtol, atol=0):
            sys.exit("the lr-0 step changed %s" % name)
    tok = text_train_batch(data, int(gmeta["seed"]), step, int(gmeta["batch"]),
                           int(gmeta["seq"]), a.val_frac)
    loss, _ = model.loss(tok)
    loss.backward()
    diff, lim = abs(float(loss) - ref), a.atol + a.rtol * abs(ref)
    ok = diff <= lim
    print("step %d: twin loss %.9g, C %.9g  |twin - C| = %.3g (limit %.3g) %s" %
          (step + 1, float(loss), ref, diff, lim, "ok" if ok else "MISMATCH"))
    worst, worst_name = 0.0, ""
    for name, p in model.named_parameters():
        g_c = tensors["optimizer.m." + name].double()
        scale = float(g_c.abs().max())
        err = float((p.grad.double() - g_c).abs().max())
        ratio = err / (a.gatol + a.grtol * scale)
        if ratio > worst:
            worst, worst_name = ratio, name
        if ratio > 1:
            ok = False
            print("  gradient of %s: max |twin - C| = %.3g, max |C| = %.3g: MISMATCH" %
                  (name, err, scale))
    print("gradients: %d tensors, worst %s at %.3g of its limit %s" %
          (len(list(model.parameters())), worst_name, worst, "ok" if ok else "MISMATCH"))
    return ok, diff, worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("checkpoint")
    ap.add_argument("--data", required=True, help="the corpus the checkpoint was trained on")
    ap.add_argument("--train", help="the C trainer: run its --eval and compare")
    ap.add_argument("--val-frac", type=float, default=0.1, help="as train's --val-frac [0.1]")
    # float32 rounding: see examples/pytorch/README.md
    ap.add_argument("--atol", type=float, default=1e-6)
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--grads", action="store_true", help="also the gradients of a training step")
    ap.add_argument("--gatol", type=float, default=1e-7)
    ap.add_argument("--grtol", type=float, default=1e-5)
    ap.add_argument("--float64", action="store_true", help="run the twin in float64")
    ap.add_argument("--dump", metavar="FILE", help="the twin's trace of the first validation "
                    "batch, as train --dump writes it")
    a = ap.parse_args()

    torch.set_num_threads(1)
    model, meta = load_checkpoint(a.checkpoint)
    if meta.get("data") != "file":
        sys.exit("%s was not trained on a --data file (data: %s)" % (a.checkpoint,
                                                                     meta.get("data")))
    order_ok = check_order(a.checkpoint, model)
    if a.float64:
        model = model.double()
    with open(a.data, "rb") as f:
        data = f.read()
    if str(len(data)) != meta.get("data_bytes"):
        sys.exit("%s has %d bytes, the checkpoint's data %s" % (a.data, len(data),
                                                                 meta.get("data_bytes")))
    if a.dump:
        tok = next(iter(text_val_batches(data, int(meta["eval_batches"]), int(meta["batch"]),
                                         int(meta["seq"]), a.val_frac)))
        trace = Trace()
        loss, _ = model.loss(tok, trace=trace)
        loss.backward()
        write_safetensors(a.dump, trace.items(), {"producer": "examples/pytorch/compare.py"})
        print("twin: %d tensors of the first validation batch (loss %.9g) to %s" %
              (len(trace.items()), float(loss), a.dump))
        return 0
    twin = text_eval_loss(model, meta, data, a.val_frac)
    print("twin: %s preset %s: val_loss %.9g (%s)" % (a.checkpoint, meta["preset"], twin,
                                                     "float64" if a.float64 else "float32"))
    if not a.train:
        return 0 if order_ok else 1
    out = run([a.train, "--load", a.checkpoint, "--eval", "--data", a.data,
               "--val-frac", repr(a.val_frac)])
    m = re.search(r"val_loss (\S+)", out)
    if not m:
        sys.exit("no val_loss in the output of train --eval:\n" + out)
    ref = float(m.group(1))
    diff, lim = abs(twin - ref), a.atol + a.rtol * abs(ref)
    ok = diff <= lim and order_ok
    print("C:    val_loss %.9g  |twin - C| = %.3g (limit %.3g) %s" % (ref, diff, lim,
                                                                    "ok" if ok else "MISMATCH"))
    if a.grads:
        ok = check_grads(a, meta, data)[0] and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
