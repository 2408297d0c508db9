#!/usr/bin/env python3
"""nbdiff against small valid and hostile safetensors files (issue 23): exit status 0 same,
1 differs (a value, or a tensor in only one file), 2 cannot compare (bad options, malformed
files, dtype or shape mismatch, nothing to compare), and the message of each error.
Python standard library only.

    python3 tests/test_nbdiff.py path/to/nbdiff
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

NBDIFF = os.path.realpath(sys.argv[1])
FMT = {"F32": "<f", "F64": "<d", "F16": "<e", "I32": "<i"}
passed = failed = 0


def tensors(items, meta=None):
    """items: (name, dtype, shape, values) -> (header dict, data bytes), contiguous"""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dt, shape, vals in items:
        b = b"".join(struct.pack(FMT[dt], v) for v in vals)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    return header, data


def write(path, header, data=b"", raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    if raw_header is None:
        h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return path


def st(path, items, meta=None):
    return write(path, *tensors(items, meta))


def edited(path, items, edit, extra=b""):
    """a file of items whose header dict is changed by edit(header) before writing"""
    header, data = tensors(items)
    edit(header)
    return write(path, header, data + extra)


def check(what, args, rc, *words, out_words=()):
    global passed, failed
    r = subprocess.run([NBDIFF] + args, capture_output=True, text=True, timeout=60)
    msgs = [w for w in words if w not in r.stderr] + [w for w in out_words if w not in r.stdout]
    if r.returncode == rc and not msgs:
        passed += 1
        print(f"ok: {what} (exit {rc})")
    else:
        failed += 1
        print(f"FAIL: {what}: exit {r.returncode} (expected {rc}); missing {msgs}\n"
              f"  stdout: {r.stdout!r}\n  stderr: {r.stderr!r}")


os.chdir(tempfile.mkdtemp(prefix="test_nbdiff."))
W = ("w", "F32", [2, 3], [0.5, -1.0, 2.0, 3.0, 0.0, 1e-3])
V = ("v", "F32", [3], [1.0, 2.0, 3.0])
a = st("a.st", [W, V], meta={"format": "pt"})
b = st("b.st", [W, V])

# --- valid files --------------------------------------------------------------------------
check("identical files", [a, b], 0, out_words=["2 tensors compared, 0 differ"])
check("--help", ["--help"], 0, out_words=["Exit status", "only in A"])
d = st("d.st", [W, ("v", "F32", [3], [1.0, 2.5, 3.0])])
check("a real difference", [a, d], 1, out_words=["first tensor that differs, in a.st's order: v"])
check("a difference within --atol", [a, d, "--atol", "0.5"], 0)
check("a difference beyond --atol", [a, d, "--atol", "0.49"], 1)
check("--all lists every tensor", [a, d, "--all"], 1, out_words=["w ", "DIFFERS"])
# a tensor of a dtype nbdiff does not read, skipped by --prefix, does not stop the rest
i1 = st("i1.st", [W, ("idx", "I32", [2], [1, 2])])
i2 = st("i2.st", [W, ("idx", "I32", [2], [1, 2])])
check("an I32 tensor outside --prefix", [i1, i2, "--prefix", "w"], 0)
check("an I32 tensor compared", [i1, i2], 2, "idx", "F32, F64, F16 or BF16")
check("zero-size and scalar tensors", [st("z1.st", [("e", "F32", [0, 4], []), ("s", "F32", [], [2.0])]),
                                      st("z2.st", [("e", "F32", [0, 4], []), ("s", "F32", [], [2.0])])], 0)

# --- 1: crashes ---------------------------------------------------------------------------
def set_(name, key, value):
    def f(h):
        h[name][key] = value
    return f


def del_(name, key):
    def f(h):
        del h[name][key]
    return f


check("data_offsets []", [edited("o0.st", [V], set_("v", "data_offsets", [])), b], 2, "v", "data_offsets")
check("data_offsets [] in B", [a, edited("o0.st", [W, V], set_("w", "data_offsets", []))], 2, "w",
      "data_offsets")
one = ("x", "F32", [1], [4.0])
check("a 1-value tensor without shape", [edited("ns.st", [one], del_("x", "shape")), st("x.st", [one])], 2,
      "tensor x has no shape")
check("a 1-value tensor without shape in B", [st("x.st", [one]), edited("ns.st", [one], del_("x", "shape"))],
      2, "tensor x has no shape")

# --- 2: --scaled and non-finite values ------------------------------------------------------
inf, nan = math.inf, math.nan
bi = st("bi.st", [("t", "F32", [4], [inf, 1.0, 2.0, 3.0])])
check("--scaled: one Inf in B does not pass a wrong value",
      [st("ai.st", [("t", "F32", [4], [inf, 100.0, 2.0, 3.0])]), bi, "--atol", "1e-3", "--scaled"], 1,
      out_words=["first tensor that differs", "worst [1]"])
check("--scaled: the scale is over finite values",
      [st("ai2.st", [("t", "F32", [4], [inf, 1.002, 2.0, 3.0])]), bi, "--atol", "1e-3", "--scaled"], 0)
check("--scaled: a finite value against Inf",
      [st("ai3.st", [("t", "F32", [4], [1e30, 1.0, 2.0, 3.0])]), bi, "--atol", "1", "--rtol", "1", "--scaled"],
      1, out_words=["worst [0]"])
check("Inf against -Inf", [st("n1.st", [("t", "F32", [1], [inf])]), st("n2.st", [("t", "F32", [1], [-inf])]),
                           "--atol", "1", "--rtol", "1"], 1)
check("NaN against a number", [st("n3.st", [("t", "F32", [1], [nan])]), st("n4.st", [("t", "F32", [1], [1.0])]),
                               "--atol", "1"], 1)
check("the same Inf and NaN", [st("n5.st", [("t", "F32", [3], [inf, nan, -inf])]),
                               st("n6.st", [("t", "F32", [3], [inf, nan, -inf])]), "--scaled", "--atol", "1"], 0)

# --- 3: nothing compared, junk --------------------------------------------------------------
empty = write("empty.st", {})
check("first file {}", [empty, b], 2, "nothing was compared")
check("both files {}", [empty, empty], 2, "nothing was compared")
check("a --prefix that matches nothing", [a, b, "--prefix", "nomatch."], 2, "nothing was compared")
hdr, data = tensors([V])
check("junk after the JSON in the header",
      [write("j1.st", None, data, raw_header=json.dumps(hdr).encode() + b" junk!!"), b], 2, "bytes after its JSON object")
check("a header of {} then data", [write("j2.st", {}, b"junkjunk"), b], 2, "after the last tensor")
check("junk after the tensors' data", [write("j3.st", hdr, data + b"junk"), b], 2, "after the last tensor")
check("a header that is not JSON", [write("j4.st", None, b"", raw_header=b"{\"v\": "), b], 2, "not a JSON object")
check("a truncated file", [write("j5.st", hdr, data[:-1]), b], 2, "v")

# --- 4: tensors in one file only ------------------------------------------------------------
only = st("only.st", [W, V, ("extra", "F32", [1], [1.0])])
check("a tensor only in B", [a, only], 1, out_words=["only in only.st: extra", "1 only in only.st"])
check("a tensor only in A", [only, a], 1, out_words=["only in only.st: extra"])
check("a tensor only in B, outside --prefix", [a, only, "--prefix", "w"], 0)
check("no tensor in common", [st("p.st", [("p", "F32", [1], [1.0])]), st("q.st", [("q", "F32", [1], [1.0])])],
      2, "nothing was compared", out_words=["only in p.st: p", "only in q.st: q"])

# --- 5: dtypes --------------------------------------------------------------------------------
check("F32 against F16 of the same values", [st("f32.st", [("h", "F32", [2], [1.0, 0.5])]),
                                             st("f16.st", [("h", "F16", [2], [1.0, 0.5])])], 2, "h", "F32", "F16")
check("F16 against F16", [st("f16b.st", [("h", "F16", [2], [1.0, 0.5])]),
                          st("f16c.st", [("h", "F16", [2], [1.0, 0.5])])], 0)
check("an unknown dtype", [edited("dt.st", [V], set_("v", "dtype", "F33")), b], 2, "v", "dtype")
check("shapes that differ", [a, st("sh.st", [W, ("v", "F32", [3, 1], [1.0, 2.0, 3.0])])], 2, "v", "[3,1]")

# --- 6: numeric options -----------------------------------------------------------------------
for opt, val in [("--atol", "5%"), ("--atol", "nan"), ("--atol", "inf"), ("--atol", "-1"), ("--rtol", ""),
                 ("--rtol", "1e-3x"), ("--rtol", "1e999"), ("--atol", " 1"), ("--atol", "0x")]:
    check(f"{opt} {val!r}", [a, b, opt, val], 2, opt, "not a finite number >= 0")
check("--atol without a value", [a, b, "--atol"], 2, "--atol needs a value")
check("an unknown option", [a, b, "--bogus"], 2, "--bogus", "usage")
check("a third file", [a, b, b], 2, "usage")
check("one file", [a], 2, "usage")
check("--atol 1e-5 --rtol 0", [a, b, "--atol", "1e-5", "--rtol", "0"], 0)

# --- 7: shapes, offsets, the header's type ----------------------------------------------------
big = ("m", "F32", [2, 2], [1.0, 2.0, 3.0, 4.0])
for what, edit, word in [
        ("a fractional shape [32, 32.5]", set_("m", "shape", [32, 32.5]), "shape"),
        ("a fractional shape [0.5, 8]", set_("m", "shape", [0.5, 8]), "shape"),
        ("a negative shape [-2, -2]", set_("m", "shape", [-2, -2]), "shape"),
        ("a shape that is a string", set_("m", "shape", "2x2"), "shape"),
        ("a shape of strings", set_("m", "shape", ["2", "2"]), "shape"),
        ("negative data_offsets", set_("m", "data_offsets", [-16, 0]), "data_offsets"),
        ("fractional data_offsets", set_("m", "data_offsets", [0.5, 16.5]), "data_offsets"),
        ("data_offsets in the wrong order", set_("m", "data_offsets", [16, 0]), "data_offsets"),
        ("data_offsets beyond the data", set_("m", "data_offsets", [0, 32]), "beyond"),
        ("data_offsets of the wrong size", set_("m", "data_offsets", [0, 12]), "bytes"),
        ("data_offsets of three numbers", set_("m", "data_offsets", [0, 8, 16]), "data_offsets"),
        ("a tensor entry that is a number", lambda h: h.__setitem__("m", 3), "not a JSON object")]:
    bad = edited("bad.st", [big], edit)
    check(what, [bad, bad], 2, "m", word)
check("a hole between tensors", [edited("hole.st", [V], set_("v", "data_offsets", [4, 16]), b"\0" * 4), b], 2,
      "v", "hole")
two = [("p", "F32", [2], [1.0, 2.0]), ("q", "F32", [2], [3.0, 4.0])]
check("overlapping tensors", [edited("ov.st", two, set_("q", "data_offsets", [0, 8]), b""), st("two.st", two)], 2,
      "overlap")
check("a tensor named twice", [write("dup.st", None, struct.pack("<f", 1.0) * 2,
                                     raw_header=b'{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                                b'"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'),
                               b], 2, "t", "twice")
check("a header that is a JSON array", [write("arr.st", [1, 2]), b], 2, "not a JSON object")
check("a header that is a JSON array in B", [a, write("arr.st", [1, 2])], 2, "not a JSON object")
check("a header that is a string", [write("str.st", "x"), b], 2, "not a JSON object")
check("__metadata__ that is not an object", [write("meta.st", *tensors([V], meta="x")), b], 2, "__metadata__")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
