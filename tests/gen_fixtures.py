#!/usr/bin/python3
"""Generate the PyTorch reference fixtures for tests/test_fixtures.c.

    /usr/bin/python3 tests/gen_fixtures.py tests/fixtures

Writes <outdir>/primitives.bin. The norms are the PyTorch twin's (normblocks_twin.norm),
checked against their direct transcription (nbfixture.norm_fn) to 1e-12, output and gradients;
the softmax is torch's own. All in float64 with autograd (nothing here knows how normblocks
computes anything): for every case, loss = sum(out * upstream) with a random upstream gradient,
then loss.backward().

File format: NBFX0001, written by tests/nbfixture.py, read by tests/fixture.h. Scalar parameters
are stored as 1-element tensors (dims = [1]).

Per-case tensors (names are "<case>.<field>"):
    norms:   x, gain (optional), bias (optional, LayerNorm and DyT), alpha (DyT, 1 value),
             dy, y, dx, dgain, dbias, dalpha (DyT), seg (0 = whole row), eps (DyT: unused, 1)
    softmax: s, dp, p, lse, ds, scale, causal
The test takes rows/width (rows/cols) from the dims of x (s).
"""
import os

import torch

from nbfixture import DYT, LAYER, NORM_KINDS, RMS, Writer, norm_fn, output_dir, twin

SEED = 20240601


def uniform_gain(n):
    # around 1 +- 0.5
    return 1.0 + (torch.rand(n) * 2 - 1) * 0.5


def seg_norm(fn, x, gain, bias, alpha, seg, eps):
    # the norm fn(x, gain, bias, alpha, eps) over each segment of seg values of a row
    rows, width = x.shape
    return fn(x.reshape(rows, width // seg, seg), gain, bias, alpha, eps).reshape(rows, width)


def norm_case(w, name, kind, x, seg, eps, gain=None, bias=None, alpha=None):
    rows, width = x.shape
    code = {"rms": RMS, "ln": LAYER, "dyt": DYT}[kind]
    alpha = torch.tensor([alpha]) if alpha is not None else None
    dy = torch.randn(rows, width)

    def run(fn):  # y and the leaves x, gain, bias, alpha (None where absent), after backward
        leaves = [t.clone().requires_grad_(True) if t is not None else None
                  for t in (x, gain, bias, alpha)]
        y = seg_norm(fn, *leaves, seg if seg else width, eps)
        (y * dy).sum().backward()
        return y, leaves

    y, leaves = run(lambda t, g, b, a, e: twin.norm(NORM_KINDS[code], t, g, b, e, a))
    ref, direct = run(lambda t, g, b, a, e: norm_fn(code, t, g, b, e, a))
    for got, want in zip([y] + [t.grad for t in leaves if t is not None],
                         [ref] + [t.grad for t in direct if t is not None]):
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), name
    x, g, b, a = leaves
    w.add(name + ".x", x)
    if g is not None:
        w.add(name + ".gain", g)
    if b is not None:
        w.add(name + ".bias", b)
    w.add(name + ".dy", dy)
    w.add(name + ".y", y)
    w.add(name + ".dx", x.grad)
    if g is not None:
        w.add(name + ".dgain", g.grad)
    if b is not None:
        w.add(name + ".dbias", b.grad)
    if a is not None:  # DyT
        w.add(name + ".alpha", a)
        w.add(name + ".dalpha", a.grad)
    w.add(name + ".seg", seg)
    w.add(name + ".eps", eps)


def softmax_case(w, name, rows, cols, scale, causal):
    s = (torch.randn(rows, cols) * 2.0).requires_grad_(True)
    z = scale * s
    if causal:
        i = torch.arange(rows).unsqueeze(1)
        j = torch.arange(cols).unsqueeze(0)
        masked = j > i + (cols - rows)  # bottom-right aligned
        z = z.masked_fill(masked, float("-inf"))
    p = torch.softmax(z, dim=-1)
    lse = torch.logsumexp(z, dim=-1)
    dp = torch.randn(rows, cols)
    (p * dp).sum().backward()
    w.add(name + ".s", s)
    w.add(name + ".dp", dp)
    w.add(name + ".p", p)
    w.add(name + ".lse", lse)
    w.add(name + ".ds", s.grad)
    w.add(name + ".scale", scale)
    w.add(name + ".causal", 1 if causal else 0)


def main():
    outdir = output_dir("gen_fixtures.py")
    torch.manual_seed(SEED)
    torch.set_default_dtype(torch.float64)
    w = Writer()

    # RMSNorm
    norm_case(w, "rms_row", "rms", torch.randn(6, 16), 0, 1e-5, gain=uniform_gain(16))
    norm_case(w, "rms_seg", "rms", torch.randn(5, 24), 8, 1e-6, gain=uniform_gain(8))
    norm_case(w, "rms_nogain", "rms", torch.randn(4, 12), 0, 1e-5)
    norm_case(w, "rms_big", "rms", torch.randn(4, 32) * 30 + 5, 16, 1e-5, gain=uniform_gain(16))

    # LayerNorm
    norm_case(w, "ln_row", "ln", torch.randn(6, 16), 0, 1e-5,
              gain=uniform_gain(16), bias=torch.randn(16) * 0.5)
    norm_case(w, "ln_seg", "ln", torch.randn(5, 24), 8, 1e-5,
              gain=uniform_gain(8), bias=torch.randn(8) * 0.5)
    # mean far from zero: a one-pass E[x^2] - E[x]^2 variance loses ~all digits in float32
    norm_case(w, "ln_offset", "ln", torch.randn(4, 32) + 100, 0, 1e-5,
              gain=uniform_gain(32), bias=torch.randn(32) * 0.5)
    norm_case(w, "ln_plain", "ln", torch.randn(3, 10), 0, 1e-5)

    # Softmax, scale 0.35
    softmax_case(w, "sm_full", 5, 7, 0.35, False)
    softmax_case(w, "sm_causal", 6, 6, 0.35, True)
    softmax_case(w, "sm_causal_rect", 3, 6, 0.35, True)

    # DyT (eps unused: stored as 1): alpha scales the slope; 2.5 with |x| ~ 2 saturates tanh
    norm_case(w, "dyt_row", "dyt", torch.randn(6, 16), 0, 1.0, gain=uniform_gain(16),
              bias=torch.randn(16) * 0.5, alpha=0.8)
    norm_case(w, "dyt_seg", "dyt", torch.randn(5, 24), 8, 1.0, gain=uniform_gain(8), alpha=1.4)
    norm_case(w, "dyt_plain", "dyt", 2 * torch.randn(3, 10), 0, 1.0, alpha=2.5)

    path = os.path.join(outdir, "primitives.bin")
    n = w.write(path)
    print("wrote %s: %d tensors, %d bytes" % (path, len(w.records), n))


if __name__ == "__main__":
    main()
