#!/usr/bin/python3
"""compare.py - the twin's validation loss of an examples/train checkpoint, and the C trainer's.

    /usr/bin/python3 examples/pytorch/compare.py CK.safetensors --data FILE [--train PATH]
                     [--val-frac F] [--atol A] [--rtol R] [--float64]

Loads CK (a checkpoint trained with `train --data FILE`) into the PyTorch twin and prints the
mean loss over the checkpoint's validation batches: the number `train --load CK --eval --data
FILE` prints as val_loss. With --train it runs that command too and checks
|twin - C| <= atol + rtol |C|; the exit status is 1 when they differ by more.
"""
import argparse
import os
import re
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from normblocks_twin import load_checkpoint, text_eval_loss  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("checkpoint")
    ap.add_argument("--data", required=True, help="the corpus the checkpoint was trained on")
    ap.add_argument("--train", help="the C trainer: run its --eval and compare")
    ap.add_argument("--val-frac", type=float, default=0.1, help="as train's --val-frac [0.1]")
    # float32 rounding: see examples/pytorch/README.md
    ap.add_argument("--atol", type=float, default=2e-5)
    ap.add_argument("--rtol", type=float, default=2e-5)
    ap.add_argument("--float64", action="store_true", help="run the twin in float64")
    a = ap.parse_args()

    torch.set_num_threads(1)
    model, meta = load_checkpoint(a.checkpoint)
    if meta.get("data") != "file":
        sys.exit("%s was not trained on a --data file (data: %s)" % (a.checkpoint,
                                                                     meta.get("data")))
    if a.float64:
        model = model.double()
    with open(a.data, "rb") as f:
        data = f.read()
    if str(len(data)) != meta.get("data_bytes"):
        sys.exit("%s has %d bytes, the checkpoint's data %s" % (a.data, len(data),
                                                                 meta.get("data_bytes")))
    twin = text_eval_loss(model, meta, data, a.val_frac)
    print("twin: %s preset %s: val_loss %.9g (%s)" % (a.checkpoint, meta["preset"], twin,
                                                     "float64" if a.float64 else "float32"))
    if not a.train:
        return 0
    cmd = [a.train, "--load", a.checkpoint, "--eval", "--data", a.data,
           "--val-frac", repr(a.val_frac)]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"val_loss (\S+)", res.stdout)
    if res.returncode != 0 or not m:
        print(res.stdout)
        sys.exit("%s failed (status %d)" % (" ".join(cmd), res.returncode))
    ref = float(m.group(1))
    diff, lim = abs(twin - ref), a.atol + a.rtol * abs(ref)
    ok = diff <= lim
    print("C:    val_loss %.9g  |twin - C| = %.3g (limit %.3g) %s" % (ref, diff, lim,
                                                                    "ok" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
