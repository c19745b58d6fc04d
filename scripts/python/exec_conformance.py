#!/usr/bin/env python3
"""The exec protocol's checks of a kernel (docs/exec_protocol.md), for any implementation:
speaks to the kernel CMD as tapegrad does and checks what the page specifies, never an
implementation's wording — the hello, out against a plain attention in Python floats (with
every feature the kernel declares among dv, gqa, tq_tk, window, padding), the backward
against central differences of the kernel's own forward, ids (backward once, release), each
refused frame answered with a one-line `error` (its id when the request had one) after which
the kernel serves on, a bad length prefix, bye and end of input.

    exec_conformance.py CMD [ARG...]      (standard library only; exit 0: conforms, 1: not)

CMD runs as an argument vector (no shell). Installed beside tapegrad_exec.py
(share/tapegrad/python). Its numbers are the textbook checks at tiny sizes; attn_check
exec:CMD is the full battery. Run by CTest on the Python module's kernel
(exec_conformance) and on the C one (tests/exec_kernel.c, in exec_c_kernel)."""
import math
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # beside tapegrad_exec.py, here and installed
import tapegrad_exec as tx  # noqa: E402

KNOWN = list(tx.FEATURES)   # the tokens of ops/attn_tables.h, as the module has them (tests/feature_table.py)
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)
        print("FAIL:", what)
    return ok


def frame(meta, tensors=None):
    """A request's bytes: the length prefix and the body, protocol 1."""
    body = tx.encode(dict({"protocol": "1"}, **meta), tensors or {})
    return struct.pack("<Q", len(body)) + body


class Closed(Exception):
    """The kernel closed its stdout instead of answering."""


class Kernel:
    """A kernel run as a child, spoken to as tapegrad does (tests/exec_protocol_test.py uses it too).
    stderr: None passes the kernel's through; subprocess.PIPE keeps it for Closed's message."""

    def __init__(self, cmd, stderr=None):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)

    def send_raw(self, raw):
        self.p.stdin.write(raw)
        self.p.stdin.flush()

    def read(self):
        body = tx.read_frame(self.p.stdout)   # validates the length prefix
        if body is None:
            said = self.p.stderr.read().decode(errors="replace") if self.p.stderr else ""
            raise Closed("the kernel closed its stdout (exit %s)%s" % (self.p.poll(), "; stderr: " + said if said else ""))
        return tx.decode(body)   # validates the safetensors body: dtypes, offsets, lengths

    def ask(self, meta, tensors=None):
        self.send_raw(frame(meta, tensors))
        return self.read()

    def close(self):
        try:
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        rc = self.p.wait(timeout=30)
        self.p.stdout.close()
        if self.p.stderr:
            self.p.stderr.close()
        return rc


def rand(shape, seed):
    x, vals = seed * 2654435761 % 2**32, []
    for _ in range(tx.numel(shape)):
        x = (1103515245 * x + 12345) % 2**31
        vals.append(x / 2**31 * 2 - 1)
    return tx.tensor(shape, vals)


def reference(q, k, v, f, head_scale=None, kv_len=None):
    """The attention contract (docs/ops.md) in Python floats."""
    B, Tq, H, d = q.shape
    _, Tk, Hkv, dv = v.shape
    at = lambda t, b, i, h, c: t.data[((b * t.shape[1] + i) * t.shape[2] + h) * t.shape[3] + c]
    out = [0.0] * (B * Tq * H * dv)
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            s = f["scale"] * (head_scale.data[h] if head_scale else 1.0)
            for i in range(Tq):
                p = i + Tk - Tq
                js = [j for j in range(Tk) if not (f["causal"] and j > p) and not (0 <= f["wl"] and j < p - f["wl"])
                      and not (0 <= f["wr"] and j > p + f["wr"]) and not (kv_len and j >= kv_len.data[b])]
                x = {j: s * sum(at(q, b, i, h, c) * at(k, b, j, g, c) for c in range(d)) for j in js}
                m = max(x.values()) if x else 0.0
                z = sum(math.exp(y - m) for y in x.values())
                for j in js:
                    for c in range(dv):
                        out[((b * Tq + i) * H + h) * dv + c] += math.exp(x[j] - m) / z * at(v, b, j, g, c)
    return out


def one_line_error(got, ident, what):
    meta = got[0]
    ok = check(meta.get("type") == "error", "%s: answered %s, not error" % (what, meta.get("type")))
    ok = ok and check(meta.get("message", "").strip() and "\n" not in meta["message"], "%s: no one-line message" % what)
    if ident is not None:
        ok = ok and check(meta.get("id") == ident, "%s: the error's id is %s, the request's %s" % (what, meta.get("id"), ident))
    return ok


def main(cmd):
    k = Kernel(cmd)
    meta, t = k.ask({"type": "hello", "tapegrad": "conformance"})
    check(meta.get("type") == "hello" and meta.get("protocol") == "1" and not t, "hello: %s" % meta)
    check(bool(meta.get("name")), "hello: no name")
    feats = [x for x in meta.get("features", "").split(",") if x]
    check("features" in meta and all(x in KNOWN for x in feats), "hello: features '%s'" % meta.get("features"))
    has = set(feats)
    print("kernel '%s', features: %s" % (meta.get("name"), ",".join(feats) or "(textbook)"))

    # ---- forwards against the reference, one per declared feature and the textbook call
    ident = [0]

    def forward(q, kk, v, scale=0.7, causal=0, wl=-1, wr=-1, head_scale=None, kv_len=None, needs=""):
        ident[0] += 1
        fields = {"type": "forward", "id": str(ident[0]), "scale": repr(scale), "causal": str(causal),
                  "window_left": str(wl), "window_right": str(wr), "needs_grad": needs}
        tensors = {"q": q, "k": kk, "v": v}
        if head_scale:
            tensors["head_scale"] = head_scale
        if kv_len:
            tensors["kv_len"] = kv_len
        return str(ident[0]), k.ask(fields, tensors)

    B, H, d = 2, 4, 3
    cases = [("textbook", dict(T=5, Tk=5, Hkv=H, dv=d, causal=1)),
             ("head_scale", dict(T=4, Tk=4, Hkv=H, dv=d, head_scale=rand((H,), 11)))]
    if "dv" in has:
        cases.append(("dv", dict(T=4, Tk=4, Hkv=H, dv=5)))
    if "gqa" in has:
        cases.append(("gqa", dict(T=4, Tk=4, Hkv=2, dv=d, causal=1)))
    if "tq_tk" in has:
        cases.append(("tq_tk", dict(T=3, Tk=6, Hkv=H, dv=d, causal=1)))
    if "window" in has:
        cases.append(("window", dict(T=6, Tk=6, Hkv=H, dv=d, causal=1, wl=1, wr=0)))
        cases.append(("window, two-sided", dict(T=6, Tk=6, Hkv=H, dv=d, wl=2, wr=1)))
    if "padding" in has:
        cases.append(("padding", dict(T=5, Tk=5, Hkv=H, dv=d, kv_len=tx.tensor((B,), [3, 0]))))
    for n, (what, c) in enumerate(cases):
        q, kk, v = rand((B, c["T"], H, d), 3 * n + 1), rand((B, c["Tk"], c["Hkv"], d), 3 * n + 2), rand((B, c["Tk"], c["Hkv"], c["dv"]), 3 * n + 3)
        f = dict(scale=0.7, causal=c.get("causal", 0), wl=c.get("wl", -1), wr=c.get("wr", -1))
        i, (meta, t) = forward(q, kk, v, f["scale"], f["causal"], f["wl"], f["wr"], c.get("head_scale"), c.get("kv_len"))
        if not check(meta.get("type") == "out" and meta.get("id") == i and list(t) == ["out"],
                     "forward %s: %s %s" % (what, meta, sorted(t))):
            continue
        check(t["out"].shape == (B, c["T"], H, c["dv"]), "forward %s: out %s" % (what, t["out"].shape))
        want = reference(q, kk, v, f, c.get("head_scale"), c.get("kv_len"))
        err = max(abs(a - b) for a, b in zip(t["out"].data, want))
        check(err < 1e-5, "forward %s: differs from the contract by %.3g" % (what, err))
        check(k.ask({"type": "release", "id": i})[0].get("type") == "released", "release %s" % i)

    # ---- backward: central differences of the kernel's own forward (loss = sum(out * w))
    hs = rand((H,), 5)
    Hkv = 2 if "gqa" in has else H
    q, kk, v = rand((1, 3, H, 2), 21), rand((1, 3, Hkv, 2), 22), rand((1, 3, Hkv, 2), 23)
    w = rand((1, 3, H, 2), 24)
    gid, (meta, _) = forward(q, kk, v, causal=1, head_scale=hs, needs="q,k,v,head_scale")
    meta, g = k.ask({"type": "backward", "id": gid}, {"dout": w})
    check(meta.get("type") == "grads" and meta.get("id") == gid and sorted(g) == ["dhead_scale", "dk", "dq", "dv"],
          "backward: %s %s" % (meta, sorted(g)))
    inputs = {"q": q, "k": kk, "v": v, "head_scale": hs}
    worst = 0.0
    for name, t in inputs.items():
        if "d" + name not in g:
            continue
        check(g["d" + name].shape == t.shape, "d%s has shape %s, %s has %s" % (name, g["d" + name].shape, name, t.shape))
        for e in range(len(t.data)):
            f = []
            for step in (1e-2, -1e-2):
                x = dict(inputs)
                data = tx.array("f", t.data)
                data[e] += step
                x[name] = tx.Tensor(t.shape, data)
                i, (m2, o) = forward(x["q"], x["k"], x["v"], causal=1, head_scale=x["head_scale"])
                k.ask({"type": "release", "id": i})
                f.append(sum(a * b for a, b in zip(o["out"].data, w.data)))
            fd = (f[0] - f[1]) / 2e-2
            worst = max(worst, abs(g["d" + name].data[e] - fd) / (1 + abs(fd)))
    check(worst < 3e-3, "backward: differs from central differences by %.3g" % worst)
    one_line_error(k.ask({"type": "backward", "id": gid}, {"dout": w}), gid, "a second backward of one id")
    check(k.ask({"type": "release", "id": gid})[0].get("type") == "released", "release after backward")
    one_line_error(k.ask({"type": "release", "id": gid}), gid, "a release of a released id")

    # ---- refusals: each an error, the kernel serving on
    q, kk, v = rand((1, 2, 2, 2), 7), rand((1, 2, 2, 2), 8), rand((1, 2, 2, 2), 9)
    undeclared = [x for x in KNOWN if x not in has]
    refusals = [
        ("a forward without v", {"type": "forward", "id": "900", "scale": "1"}, {"q": q, "k": kk}, "900"),
        ("a forward without scale", {"type": "forward", "id": "901"}, {"q": q, "k": kk, "v": v}, "901"),
        ("shapes that do not fit", {"type": "forward", "id": "902", "scale": "1"},
         {"q": q, "k": kk, "v": rand((1, 3, 2, 2), 1)}, "902"),
        ("q of rank 3", {"type": "forward", "id": "903", "scale": "1"}, {"q": rand((2, 2, 2), 1), "k": kk, "v": v}, "903"),
        ("a forward without an id", {"type": "forward", "scale": "1"}, {"q": q, "k": kk, "v": v}, None),
        ("a backward of an unknown id", {"type": "backward", "id": "999"}, {"dout": q}, "999"),
        ("an unknown type", {"type": "dance", "id": "1"}, {}, "1"),
        ("needs_grad of an input the call lacks", {"type": "forward", "id": "904", "scale": "1", "needs_grad": "bias"},
         {"q": q, "k": kk, "v": v}, "904"),
        ("an extra tensor", {"type": "forward", "id": "905", "scale": "1"}, {"q": q, "k": kk, "v": v, "zzz": q}, "905"),
    ]
    if "softcap" in undeclared:
        refusals.append(("an undeclared feature (softcap)", {"type": "forward", "id": "906", "scale": "1", "softcap": "30"},
                         {"q": q, "k": kk, "v": v}, "906"))
    for what, meta, tensors, i in refusals:
        one_line_error(k.ask(meta, tensors), i, what)
    body = tx.encode({"protocol": "1", "type": "forward", "id": "907", "scale": "1"}, {"q": q, "k": kk, "v": v})
    for what, raw in [
            ("a float64 tensor", body.replace(b'"dtype":"F32"', b'"dtype":"F64"', 1)),
            ("a body that is not JSON", struct.pack("<Q", 4) + b"{{{{"),
            ("a header longer than the body", struct.pack("<Q", 1000) + b"{}"),
            ("data bytes the tensors do not use", body + b"\0\0\0\0"),
            ("a tensor cut short", body[:-4])]:
        k.send_raw(struct.pack("<Q", len(raw)) + raw)
        one_line_error(k.read(), None, what)
    one_line_error(k.ask({"type": "hello", "protocol": "2"}), None, "protocol 2")
    i, (meta, t) = forward(q, kk, v)
    check(meta.get("type") == "out", "the kernel does not serve on after the refusals: %s" % meta)
    check(k.close() == 0, "end of input: the kernel's exit is not 0")

    # ---- the lifecycle
    k = Kernel(cmd)
    one_line_error(k.ask({"type": "forward", "id": "1", "scale": "1"}, {"q": q, "k": kk, "v": v}), "1",
                   "a forward before hello")
    k.ask({"type": "hello"})
    k.send_raw(struct.pack("<Q", 1 << 40))
    one_line_error(k.read(), None, "a length prefix of 2^40")
    rc = k.close()
    check(rc != 0, "a lost stream: the kernel's exit is 0")
    k = Kernel(cmd)
    k.ask({"type": "hello"})
    k.send_raw(struct.pack("<Q", 0))
    one_line_error(k.read(), None, "a length prefix of 0")
    k.close()
    k = Kernel(cmd)
    k.ask({"type": "hello"})
    k.send_raw(frame({"type": "bye"}))
    check(k.p.wait(timeout=30) == 0, "bye: the kernel's exit is not 0")
    k.close()

    print("exec_conformance: %s" % ("%d checks failed" % len(fails) if fails else "the kernel conforms"))
    return 1 if fails else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: exec_conformance.py CMD [ARG...]")
    try:
        sys.exit(main(sys.argv[1:]))
    except Closed as e:
        sys.exit("FAIL: %s" % e)
