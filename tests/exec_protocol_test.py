#!/usr/bin/env python3
"""The kernel side of the exec protocol (scripts/python/tapegrad_exec.py,
docs/exec_protocol.md), spoken to as tapegrad does: a plain-Python attention
kernel (causal, head_scale; dv != d, windows, grouped heads declared) runs as a child
(this file with --serve) and each test sends it frames on its stdin and reads
its replies. The kernel computes in Python floats, so its backward is checked
against central differences of its own forward through the protocol.
Standard library only; run by CTest (exec_protocol)."""
import math
import os
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "python"))
import tapegrad_exec as tx  # noqa: E402
from exec_conformance import Kernel as Child, frame, rand  # noqa: E402


# ---- the kernel under test -----------------------------------------------------------------
def visible(i, j, Tq, Tk, a):
    p = i + Tk - Tq   # bottom-right aligned
    if a["causal"] and j > p:
        return False
    if a["window_left"] >= 0 and j < p - a["window_left"]:
        return False
    if a["window_right"] >= 0 and j > p + a["window_right"]:
        return False
    return True


def attention(q, k, v, **a):
    B, Tq, H, d = q.shape
    _, Tk, Hkv, dv = v.shape
    at = lambda t, b, i, h, c: t.data[((b * t.shape[1] + i) * t.shape[2] + h) * t.shape[3] + c]
    out = [0.0] * (B * Tq * H * dv)
    P = {}
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for i in range(Tq):
                js = [j for j in range(Tk) if visible(i, j, Tq, Tk, a)]
                c_h = a["scale"] * (a["head_scale"].data[h] if "head_scale" in a else 1.0)
                s = {j: c_h * sum(at(q, b, i, h, c) * at(k, b, j, g, c) for c in range(d)) for j in js}
                m = max(s.values()) if s else 0.0
                z = sum(math.exp(x - m) for x in s.values())
                for j in js:
                    P[b, h, i, j] = math.exp(s[j] - m) / z
                    for c in range(dv):
                        out[((b * Tq + i) * H + h) * dv + c] += P[b, h, i, j] * at(v, b, j, g, c)
    return tx.tensor((B, Tq, H, dv), out), (q, k, v, a, P)


def attention_backward(saved, dout, needs):
    q, k, v, a, P = saved
    B, Tq, H, d = q.shape
    _, Tk, Hkv, dv = v.shape
    idx = lambda t, b, i, h, c: ((b * t.shape[1] + i) * t.shape[2] + h) * t.shape[3] + c
    dq, dk, dvv = [0.0] * len(q.data), [0.0] * len(k.data), [0.0] * len(v.data)
    dhs = [0.0] * H
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            hs = a["head_scale"].data[h] if "head_scale" in a else 1.0
            for i in range(Tq):
                js = [j for j in range(Tk) if (b, h, i, j) in P]
                dP = {j: sum(dout.data[((b * Tq + i) * H + h) * dv + c] * v.data[idx(v, b, j, g, c)] for c in range(dv))
                      for j in js}
                D = sum(P[b, h, i, j] * dP[j] for j in js)
                for j in js:
                    p = P[b, h, i, j]
                    dlogit = p * (dP[j] - D)   # d loss / d (scale · hs · q·k)
                    ds = dlogit * a["scale"] * hs
                    for c in range(dv):
                        dvv[idx(v, b, j, g, c)] += p * dout.data[((b * Tq + i) * H + h) * dv + c]
                    qk = 0.0
                    for c in range(d):
                        dq[idx(q, b, i, h, c)] += ds * k.data[idx(k, b, j, g, c)]
                        dk[idx(k, b, j, g, c)] += ds * q.data[idx(q, b, i, h, c)]
                        qk += q.data[idx(q, b, i, h, c)] * k.data[idx(k, b, j, g, c)]
                    dhs[h] += dlogit * a["scale"] * qk
    grads = {"q": tx.tensor(q.shape, dq), "k": tx.tensor(k.shape, dk), "v": tx.tensor(v.shape, dvv),
             "head_scale": tx.tensor((H,), dhs)}
    return {n: grads[n] for n in needs}


def wrong_shape(q, k, v, **a):
    out, saved = attention(q, k, v, **a)
    return tx.tensor(out.shape[:3] + (out.shape[3] + 1,)), saved


# ---- the client's side: the protocol checks' own (scripts/python/exec_conformance.py) ---------
class Kernel(Child):
    def __init__(self, *args):
        super().__init__([sys.executable, os.path.abspath(__file__), "--serve"] + list(args), stderr=subprocess.PIPE)


class Protocol(unittest.TestCase):
    def setUp(self):
        self.k = Kernel()
        meta, tensors = self.k.ask({"type": "hello", "tapegrad": "test"})
        self.assertEqual((meta["type"], meta["name"], meta["features"]), ("hello", "plain python", "dv,gqa,window"))

    def tearDown(self):
        self.assertEqual(self.k.close(), 0)   # end of input: exit 0

    def forward(self, ident, q, k, v, **fields):
        meta = dict({"type": "forward", "id": str(ident), "scale": "0.7"}, **fields)
        return self.k.ask(meta, {"q": q, "k": k, "v": v})

    def test_uniform_weights_average_the_visible_values(self):
        q, k, v = tx.tensor((1, 4, 2, 3)), rand((1, 4, 1, 3), 1), rand((1, 4, 1, 3), 2)   # q = 0: equal logits
        meta, t = self.forward(1, q, k, v, causal="1", window_left="1")
        self.assertEqual((meta["type"], meta["id"]), ("out", "1"))
        out = t["out"]
        self.assertEqual(out.shape, (1, 4, 2, 3))
        for i in range(4):
            js = [j for j in range(4) if i - 1 <= j <= i]
            for h in range(2):
                for c in range(3):
                    want = sum(v.data[j * 3 + c] for j in js) / len(js)
                    self.assertAlmostEqual(out.data[(i * 2 + h) * 3 + c], want, places=6)
        # Tq != Tk is a feature this kernel did not declare: refused, not computed
        meta, _ = self.forward(2, rand((1, 2, 2, 3), 3), k, v)
        self.assertIn("the call uses tq_tk, which this kernel did not declare", meta["message"])

    def test_backward_matches_finite_differences(self):
        q, k, v = rand((1, 3, 2, 2), 3), rand((1, 3, 1, 2), 4), rand((1, 3, 1, 2), 5)
        w = rand((1, 3, 2, 2), 6)   # loss = sum(out * w): dout = w
        meta, _ = self.forward(1, q, k, v, causal="1", needs_grad="q,k,v")
        meta, g = self.k.ask({"type": "backward", "id": "1"}, {"dout": w})
        self.assertEqual((meta["type"], sorted(g)), ("grads", ["dk", "dq", "dv"]))
        ident = 10
        for name, t in (("q", q), ("k", k), ("v", v)):
            for e in range(len(t.data)):
                f = []
                for step in (1e-2, -1e-2):
                    x = {"q": q, "k": k, "v": v}
                    data = tx.array("f", t.data)
                    data[e] += step
                    x[name] = tx.Tensor(t.shape, data)
                    ident += 1
                    _, o = self.forward(ident, x["q"], x["k"], x["v"], causal="1")
                    self.k.ask({"type": "release", "id": str(ident)})
                    f.append(sum(a * b for a, b in zip(o["out"].data, w.data)))
                fd = (f[0] - f[1]) / 2e-2
                self.assertAlmostEqual(g["d" + name].data[e], fd, delta=2e-3 + 2e-3 * abs(fd),
                                       msg="d%s[%d]" % (name, e))
        meta, _ = self.k.ask({"type": "backward", "id": "1"}, {"dout": w})
        self.assertIn("backwarded already", meta["message"])
        self.assertEqual(self.k.ask({"type": "release", "id": "1"})[0]["type"], "released")
        meta, _ = self.k.ask({"type": "release", "id": "1"})
        self.assertEqual(meta["type"], "error")

    def test_refusals_name_the_problem_and_the_kernel_serves_on(self):
        q, k, v = rand((1, 2, 2, 2), 7), rand((1, 2, 2, 2), 8), rand((1, 2, 2, 2), 9)
        cases = [
            ({"type": "forward", "id": "5", "scale": "1"}, {"q": q, "k": k}, "without tensor v"),
            ({"type": "forward", "id": "5"}, {"q": q, "k": k, "v": v}, "scale is missing"),
            ({"type": "forward", "id": "5", "scale": "1", "softcap": "30"}, {"q": q, "k": k, "v": v},
             "softcap, which this kernel did not declare"),
            ({"type": "forward", "id": "5", "scale": "1"}, {"q": q, "k": k, "v": rand((1, 3, 2, 2), 1)}, "do not fit"),
            ({"type": "forward", "scale": "1"}, {"q": q, "k": k, "v": v}, "forward without an id"),
            ({"type": "backward", "id": "99"}, {"dout": q}, "no forward made"),
            ({"type": "dance", "id": "1"}, {}, "unknown message type 'dance'"),
            ({"type": "forward", "id": "5", "scale": "1", "needs_grad": "bias"}, {"q": q, "k": k, "v": v},
             "needs_grad names bias"),
        ]
        for meta, tensors, want in cases:
            got, _ = self.k.ask(meta, tensors)
            self.assertEqual(got["type"], "error", want)
            self.assertIn(want, got["message"])
        # a float64 tensor: the dtype named
        body = tx.encode({"protocol": "1", "type": "forward", "id": "6", "scale": "1"}, {"q": q, "k": k, "v": v})
        body = body.replace(b'"dtype":"F32","shape":[1,2,2,2],"data_offsets":[0,', b'"dtype":"F64","shape":[1,2,2,2],"data_offsets":[0,', 1)
        self.k.send_raw(struct.pack("<Q", len(body)) + body)
        got, _ = tx.decode(tx.read_frame(self.k.p.stdout))
        self.assertIn("dtype F64", got["message"])
        # not JSON, and another protocol version
        self.k.send_raw(struct.pack("<Q", 12) + struct.pack("<Q", 4) + b"{{{{")
        self.assertIn("not JSON", tx.decode(tx.read_frame(self.k.p.stdout))[0]["message"])
        got, _ = self.k.ask({"type": "hello", "protocol": "2"})
        self.assertIn("protocol '2'", got["message"])
        # still serving
        meta, t = self.forward(7, q, k, v)
        self.assertEqual(meta["type"], "out")


class Lifecycle(unittest.TestCase):
    def test_name_defaults_to_the_forward_function(self):
        import io
        fin, fout = io.BytesIO(frame({"type": "hello"})), io.BytesIO()
        self.assertEqual(tx.serve(attention, attention_backward, stdin=fin, stdout=fout, log=io.StringIO()), 0)
        fout.seek(0)
        self.assertEqual(tx.decode(tx.read_frame(fout))[0]["name"], "attention")

    def test_conventions_in_the_hello(self):
        """0.17: a kernel's conventions go in its hello, and only when it has any (a tapegrad before
        0.17 reads the hello as before); an unknown one is refused before serving."""
        import io
        for conventions, want in ((["causal_only", "empty_mean"], "causal_only,empty_mean"), ([], None)):
            fin, fout = io.BytesIO(frame({"type": "hello"})), io.BytesIO()
            tx.serve(attention, attention_backward, conventions=conventions, stdin=fin, stdout=fout, log=io.StringIO())
            fout.seek(0)
            self.assertEqual(tx.decode(tx.read_frame(fout))[0].get("conventions"), want)
        with self.assertRaises(ValueError) as e:
            tx.serve(attention, conventions=["causual_only"], stdin=io.BytesIO(), stdout=io.BytesIO())
        self.assertIn("causual_only", str(e.exception))

    def test_precision_in_the_hello_and_half_tensors_widened(self):
        """0.21: a kernel's precision goes in its hello when it is not fp32; BF16 and F16 tensors
        decode to the floats they hold (exactly), and a forward's layer reaches the kernel."""
        import io
        for precision, want in (("bf16", "bf16"), ("fp32", None)):
            fin, fout = io.BytesIO(frame({"type": "hello"})), io.BytesIO()
            tx.serve(attention, attention_backward, precision=precision, stdin=fin, stdout=fout, log=io.StringIO())
            fout.seek(0)
            self.assertEqual(tx.decode(tx.read_frame(fout))[0].get("precision"), want)
        with self.assertRaises(ValueError):
            tx.serve(attention, precision="fp8", stdin=io.BytesIO(), stdout=io.BytesIO())
        # 1.0, -2.5, 0.1 (bf16 0x3dcd = 0.10009765625), 65504 and 2^-24 (fp16's smallest)
        bf16 = struct.pack("<4H", 0x3F80, 0xC020, 0x3DCD, 0x7F80)
        f16 = struct.pack("<3H", 0x7BFF, 0x0001, 0xBC00)
        head = {"b": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]},
                "h": {"dtype": "F16", "shape": [3], "data_offsets": [8, 14]}}
        import json
        h = json.dumps(head).encode()
        h += b" " * (-len(h) % 8)
        meta, tensors = tx.decode(struct.pack("<Q", len(h)) + h + bf16 + f16)
        self.assertEqual(list(tensors["b"].data), [1.0, -2.5, 0.10009765625, math.inf])
        self.assertEqual(list(tensors["h"].data), [65504.0, 2.0 ** -24, -1.0])
        seen = {}

        def forward(q, k, v, **a):
            seen.update(a)
            return attention(q, k, v, **a)
        q = tx.tensor([1, 2, 1, 2], [0.5, 1, -1, 0.25])
        fin = io.BytesIO(frame({"type": "hello"}) + frame({"type": "forward", "id": "1", "scale": "1", "layer": "7"},
                                                          {"q": q, "k": q, "v": q}))
        tx.serve(forward, attention_backward, stdin=fin, stdout=io.BytesIO(), log=io.StringIO())
        self.assertEqual(seen.get("layer"), 7)

    def test_exception_names_where_it_was_raised(self):
        """A kernel that raises: the one-line error reply names the exception and where the kernel's
        code raised it (file:line in function); the whole traceback goes to its stderr."""
        import io

        def bad_forward(q, k, v, **a):
            return helper(q)

        def helper(q):
            raise ValueError("q has the wrong layout")

        t = rand((1, 1, 1, 1), 1)
        fin = io.BytesIO(frame({"type": "hello"}) + frame({"type": "forward", "id": "1", "scale": "1"},
                                                          {"q": t, "k": t, "v": t}))
        fout, log = io.BytesIO(), io.StringIO()
        self.assertEqual(tx.serve(bad_forward, None, stdin=fin, stdout=fout, log=log), 0)
        fout.seek(0)
        tx.read_frame(fout)
        meta, _ = tx.decode(tx.read_frame(fout))
        line = helper.__code__.co_firstlineno + 1
        self.assertEqual(meta["type"], "error")
        self.assertIn("the kernel's forward raised ValueError: q has the wrong layout (at exec_protocol_test.py:%d "
                      "in helper)" % line, meta["message"])
        self.assertIn("Traceback (most recent call last)", log.getvalue())
        # raised inside a library (here the standard library's json): the kernel's own frame first
        try:
            import json

            def parses(x):
                return json.loads(x)
            parses("{")
        except ValueError as e:
            where = tx.raised_where(e)
        self.assertRegex(where, r"^ \(at exec_protocol_test\.py:\d+ in parses; raised in decoder\.py:\d+ in \w+\)$")

    def test_forward_before_hello(self):
        k = Kernel()
        meta, _ = k.ask({"type": "forward", "id": "1", "scale": "1"},
                        {"q": rand((1, 1, 1, 1), 1), "k": rand((1, 1, 1, 1), 2), "v": rand((1, 1, 1, 1), 3)})
        self.assertIn("before hello", meta["message"])
        self.assertEqual(k.close(), 0)

    def test_bad_length_loses_the_stream(self):
        k = Kernel()
        k.ask({"type": "hello"})
        k.send_raw(struct.pack("<Q", 1 << 40))
        meta, _ = tx.decode(tx.read_frame(k.p.stdout))
        self.assertIn("outside 1..2^30", meta["message"])
        self.assertEqual(k.close(), 2)

    def test_bye(self):
        k = Kernel()
        k.ask({"type": "hello"})
        k.send_raw(frame({"type": "bye"}))
        self.assertEqual(k.p.wait(timeout=20), 0)
        k.close()

    def test_a_kernel_with_the_wrong_out_shape_is_told(self):
        k = Kernel("--wrong-shape")
        k.ask({"type": "hello"})
        meta, _ = k.ask({"type": "forward", "id": "1", "scale": "1"},
                        {"q": rand((1, 2, 1, 2), 1), "k": rand((1, 2, 1, 2), 2), "v": rand((1, 2, 1, 2), 3)})
        self.assertIn("the kernel's out has shape [1, 2, 1, 3] (6 values), the call needs [1, 2, 1, 2]", meta["message"])
        self.assertEqual(k.close(), 0)


def misbehaving(mode):
    """The kernels of tests/test_attn_exec.c's failures: at the first forward, exit 4, hang, write
    bytes that are no frame; or (raw) answer every forward with an out one column too wide,
    bypassing this module's checks as a kernel of one's own might."""
    def forward(q, k, v, **a):
        if mode == "--die-on-forward":
            os._exit(4)
        if mode == "--hang-on-forward":
            import time
            time.sleep(3600)
        sys.stdout.buffer.write(b"garbage, not a frame\n")
        sys.stdout.buffer.flush()
        import time
        time.sleep(3600)
    return forward


def raw_wrong_shape():
    while True:
        body = tx.read_frame(sys.stdin.buffer)
        if body is None:
            return 0
        meta, t = tx.decode(body)
        if meta["type"] == "hello":
            reply = tx.encode({"protocol": "1", "type": "hello", "name": "raw", "features": ""}, {})
        elif meta["type"] == "forward":
            B, T, H, _ = t["q"].shape
            reply = tx.encode({"protocol": "1", "type": "out", "id": meta["id"]},
                              {"out": tx.tensor((B, T, H, t["v"].shape[3] + 1))})
        else:
            return 0
        tx.write_frame(sys.stdout.buffer, reply)


def close_input_after_hello():
    """Closes its stdin, then greets and exits 3 a moment later: the next request's write
    finds no reader (EPIPE), whatever the timing."""
    tx.read_frame(sys.stdin.buffer)
    os.close(0)
    tx.write_frame(sys.stdout.buffer, tx.encode({"protocol": "1", "type": "hello", "name": "closer",
                                                 "features": ""}, {}))
    import time
    time.sleep(0.2)
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        sys.argv = [x for x in sys.argv if not x.startswith("--tag=")]   # a caller's marker, for pgrep
        FEATURES = ["dv", "gqa", "window"]
        if "--features" in sys.argv:   # --features LIST: declare these instead (the kernel computes any of them)
            i = sys.argv.index("--features")
            FEATURES = [f for f in sys.argv[i + 1].split(",") if f]
            del sys.argv[i:i + 2]
        mode = sys.argv[2] if len(sys.argv) > 2 else ""
        if mode == "--raw-wrong-shape":
            sys.exit(raw_wrong_shape())
        if mode == "--close-input-after-hello":
            close_input_after_hello()
        if mode == "--noscale":   # the seed's bug: the scale passed is ignored (softmax(q·k))
            fwd = lambda q, k, v, **a: attention(q, k, v, **dict(a, scale=1.0))
            bwd = lambda saved, dout, needs: attention_backward(saved, dout, needs)
            sys.exit(tx.serve(fwd, bwd, name="no scale", features=["dv", "gqa", "window"]))
        after = os.environ.get("EXEC_TEST_DIE_AFTER") or os.environ.get("EXEC_TEST_HANG_AFTER")
        if after:   # serves N forwards right, then exits 4 (or hangs) at the next (the environment: not
            calls = [int(after)]   # the command, which a resume checks)

            def fwd(q, k, v, **a):
                if calls[0] == 0:
                    if os.environ.get("EXEC_TEST_HANG_AFTER"):
                        import time
                        time.sleep(3600)
                    os._exit(4)
                calls[0] -= 1
                return attention(q, k, v, **a)
            sys.exit(tx.serve(fwd, attention_backward, name="plain python", features=FEATURES))
        fwd = {"--wrong-shape": wrong_shape, "": attention}.get(mode) or misbehaving(mode)
        sys.exit(tx.serve(fwd, attention_backward, name="plain python", features=FEATURES))
    unittest.main()
