#!/usr/bin/env python3
"""The PyTorch layer of the exec protocol's kernel side (tapegrad_exec.serve_torch) and the kernels of
examples/torch_attention, driven in-process through the protocol's frames: the example's einsum
kernel gives the plain-Python attention's out and gradients (causal, window, grouped heads, dv != d,
head_scale; both layouts); PyTorch's own attention (reference.py) gives the same; the seed's bug
(--forget-scale) is the same function at scale 1; a function that returns something else than a
tensor, or an out that does not depend on its inputs, is answered with an error naming it.
Skips (exit 77) when torch cannot be imported: Debian's python3-torch, which scripts/test_torch.sh
installs, is for /usr/bin/python3."""
import io
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "scripts", "python"))
sys.path.insert(0, os.path.join(here, "..", "examples", "torch_attention"))
sys.path.insert(0, here)
try:
    import torch
except ImportError:
    print("SKIP: torch cannot be imported by %s (Debian: python3-torch for /usr/bin/python3; "
          "scripts/test_torch.sh installs it)" % sys.executable)
    sys.exit(77)
import tapegrad_exec as tx  # noqa: E402
import attention as example  # noqa: E402
import reference  # noqa: E402
from exec_protocol_test import attention as plain, attention_backward as plain_backward, rand  # noqa: E402
from exec_conformance import frame  # noqa: E402


def session(fn, requests, features=("dv", "gqa", "window"), layout="bhtd"):
    """Serves the frames of requests (after a hello) with serve_torch(fn); the replies, decoded."""
    fin = io.BytesIO(frame({"type": "hello"}) + b"".join(frame(m, t) for m, t in requests))
    fout = io.BytesIO()
    rc = tx.serve_torch(fn, name="under test", features=list(features), layout=layout, stdin=fin, stdout=fout,
                        log=io.StringIO())
    assert rc == 0, rc
    fout.seek(0)
    replies = []
    while True:
        body = tx.read_frame(fout)
        if body is None:
            return replies[1:]
        replies.append(tx.decode(body))


CASES = [   # (B, Tq, H, Hkv, d, dv, fields)
    (2, 5, 2, 2, 4, 4, {"causal": "1"}),
    (1, 6, 4, 2, 3, 5, {"causal": "1", "window_left": "2", "window_right": "0"}),
    (1, 4, 2, 1, 4, 2, {"causal": "0", "window_left": "1", "window_right": "1"}),
]


def call(B, T, H, Hkv, d, dv, fields, seed, head_scale=False):
    q, k, v = rand((B, T, H, d), seed), rand((B, T, Hkv, d), seed + 1), rand((B, T, Hkv, dv), seed + 2)
    t = {"q": q, "k": k, "v": v}
    if head_scale:
        t["head_scale"] = tx.tensor((H,), [0.5 + 0.25 * h for h in range(H)])
    meta = dict({"type": "forward", "id": "1", "scale": "%.9g" % (d ** -0.5), "needs_grad": ",".join(sorted(t))}, **fields)
    return meta, t


def plain_args(meta, t):
    a = {"scale": float(meta["scale"]), "causal": int(meta["causal"]), "window_left": int(meta.get("window_left", -1)),
         "window_right": int(meta.get("window_right", -1))}
    if "head_scale" in t:
        a["head_scale"] = t["head_scale"]
    return a


class TorchLayer(unittest.TestCase):
    def check_against_plain(self, fn, layout, tol_out=2e-6, tol_grad=2e-5):
        for n, (B, T, H, Hkv, d, dv, fields) in enumerate(CASES):
            for hs in (False, True):
                meta, t = call(B, T, H, Hkv, d, dv, fields, 10 * n + 1, hs)
                dout = rand((B, T, H, dv), 99)
                replies = session(fn, [(meta, t), ({"type": "backward", "id": "1"}, {"dout": dout}),
                                       ({"type": "release", "id": "1"}, {})], layout=layout)
                self.assertEqual([m["type"] for m, _ in replies], ["out", "grads", "released"], replies[0][0])
                want, saved = plain(t["q"], t["k"], t["v"], **plain_args(meta, t))
                for a, b in zip(replies[0][1]["out"].data, want.data):
                    self.assertAlmostEqual(a, b, delta=tol_out)
                grads = plain_backward(saved, dout, meta["needs_grad"].split(","))
                for name, g in grads.items():
                    got = replies[1][1]["d" + name]
                    self.assertEqual(got.shape, g.shape, name)
                    for a, b in zip(got.data, g.data):
                        self.assertAlmostEqual(a, b, delta=tol_grad * (1 + abs(b)), msg="d%s, case %d" % (name, n))

    def test_example_kernel_is_the_plain_attention(self):
        self.check_against_plain(example.make_attention(False), "bhtd")

    def test_pytorch_own_attention_is_the_plain_attention(self):
        self.check_against_plain(reference.attention, "bhtd")

    def test_layout_bthd(self):
        def bthd(q, k, v, **a):   # the wire's layout: [B, T, H, d]
            return example.make_attention(False)(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 **a).transpose(1, 2)
        self.check_against_plain(bthd, "bthd")

    def test_forgotten_scale_is_scale_one(self):
        meta, t = call(1, 5, 2, 2, 8, 8, {"causal": "1"}, 3)
        got = session(example.make_attention(True), [(dict(meta, needs_grad=""), t)])[0][1]["out"]
        want, _ = plain(t["q"], t["k"], t["v"], **dict(plain_args(meta, t), scale=1.0))
        right, _ = plain(t["q"], t["k"], t["v"], **plain_args(meta, t))
        for a, b in zip(got.data, want.data):
            self.assertAlmostEqual(a, b, delta=2e-6)
        self.assertGreater(max(abs(a - b) for a, b in zip(got.data, right.data)), 1e-2)

    def test_bad_functions_are_named(self):
        meta, t = call(1, 3, 1, 1, 2, 2, {"causal": "1"}, 5)
        got = session(lambda q, k, v, **a: [0.0], [(meta, t)])[0][0]
        self.assertEqual(got["type"], "error")
        self.assertIn("returned list, not a torch.Tensor", got["message"])
        got = session(lambda q, k, v, **a: torch.zeros_like(q), [(meta, t)])[0][0]
        self.assertIn("does not depend on", got["message"])
        got = session(lambda q, k, v, **a: q[..., :1], [(dict(meta, needs_grad=""), t)])[0][0]
        self.assertIn("the kernel's out has shape [1, 3, 1, 1] (3 values), the call needs [1, 3, 1, 2]", got["message"])

    def test_name_defaults_to_the_function(self):
        def my_attention(q, k, v, **a):
            return v.clone()
        fin, fout = io.BytesIO(frame({"type": "hello"})), io.BytesIO()
        self.assertEqual(tx.serve_torch(my_attention, features=["dv"], stdin=fin, stdout=fout, log=io.StringIO()), 0)
        fout.seek(0)
        self.assertEqual(tx.decode(tx.read_frame(fout))[0]["name"], "my_attention")

    def test_kv_len_arrives_as_int64(self):
        seen = {}

        def fn(q, k, v, kv_len=None, **a):
            seen["kv_len"] = kv_len
            return v.clone()
        meta, t = call(2, 3, 1, 1, 2, 2, {"causal": "0"}, 7)
        t["kv_len"] = tx.tensor((2,), [3, 1])
        session(fn, [(dict(meta, needs_grad=""), t)], features=("padding",))
        self.assertEqual(seen["kv_len"].dtype, torch.int64)
        self.assertEqual(seen["kv_len"].tolist(), [3, 1])


if __name__ == "__main__":
    unittest.main()
