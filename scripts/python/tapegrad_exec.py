"""The kernel side of tapegrad's exec protocol, version 1 (docs/exec_protocol.md).

Standard library only. A kernel supplies forward and backward and calls serve();
this module reads frames from stdin, checks them, calls the kernel, checks what
it returns, and writes the replies to stdout. Tensors are Tensor(shape, data):
data an array('f') in row-major order.

    def forward(q, k, v, **args):      return out, saved
    def backward(saved, dout, needs):  return {"q": dq, "k": dk, ...}   (the names in needs)
    serve(forward, backward, name="my kernel", features=["gqa"], conventions=["causal_only"])

With PyTorch (optional; imported only then), one function and torch.autograd for the backward:

    def attention(q, k, v, *, scale, causal, **rest):   return out     (torch tensors)
    serve_torch(attention, name="my kernel", features=["gqa"], layout="bhtd")
"""
import json
import os
import struct
import sys
import traceback
from array import array
from collections import namedtuple

PROTOCOL = "1"
MAX_FRAME = 1 << 30
FEATURES = ("dv", "gqa", "tq_tk", "window", "padding", "bias", "alibi", "softcap", "sinks", "dropout")
# Conventions a kernel may declare in its hello (tapegrad 0.17; ops/attn_tables.h's table, in its order):
# tapegrad sends no call outside them (it refuses such a call itself, naming the convention), and
# supplies sinks of -inf to a sinks_always kernel whose call has none.
CONVENTIONS = ("causal_only", "no_head_scale", "scale_rsqrt_d", "window_causal", "alibi_causal", "sinks_always",
               "empty_mean", "empty_nan", "mqa_only", "empty_prefix", "scale_folded")
# The precision a kernel computes in (tapegrad 0.21; fp32 when it declares none): tapegrad sends a bf16 or
# fp16 kernel q, k, v and dout as BF16 or F16 tensors; this module widens them to floats (exactly), and
# serve_torch hands the function torch tensors of that dtype.
PRECISIONS = ("fp32", "bf16", "fp16")
OPTIONAL = ("head_scale", "kv_len", "bias", "alibi", "sinks")   # a forward's tensors besides q, k, v
GRADABLE = ("q", "k", "v", "head_scale", "bias", "sinks")

Tensor = namedtuple("Tensor", "shape data")


def raised_where(e):
    """Where an exception was raised, for its one-line error reply: the last frame of the
    traceback as file:line in function, and when that is not in the kernel's own code (a library's,
    this module's) also the kernel's last frame: "mykernel.py:12 in attend (raised in
    functional.py:4921 in softmax)"."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return ""
    here = os.path.abspath(__file__)
    say = lambda f: "%s:%d in %s" % (os.path.basename(f.filename), f.lineno, f.name)
    own = [f for f in frames if os.path.abspath(f.filename) != here and "-packages" + os.sep not in f.filename
           and not f.filename.startswith(os.path.dirname(os.__file__) + os.sep)]
    last = frames[-1]
    if own and own[-1] is not last:
        return " (at %s; raised in %s)" % (say(own[-1]), say(last))
    return " (at %s)" % say(last)


class ProtocolError(Exception):
    """A frame or a call that breaks the protocol: the message goes back as an error reply."""


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def tensor(shape, values=None):
    """A Tensor of that shape: zeros, or the values given (any iterable of numbers)."""
    shape = tuple(int(s) for s in shape)
    data = array("f", values) if values is not None else array("f", bytes(4 * numel(shape)))
    if len(data) != numel(shape):
        raise ProtocolError("%d values for shape %s" % (len(data), list(shape)))
    return Tensor(shape, data)


# ---- safetensors bodies ---------------------------------------------------------------
def _f32_bytes(name, t):
    """t's values as little-endian F32 bytes: a view of t.data when it is float32 already (an
    array('f'), a numpy array, any 1-D buffer of 'f'), else a converted copy."""
    try:
        mv = memoryview(t.data)
        ok = mv.format in ("f", "<f", "=f") and mv.ndim == 1 and mv.c_contiguous
    except TypeError:
        ok = False
    if not ok:
        mv = memoryview(array("f", t.data))
    if len(mv) != numel(t.shape):
        raise ProtocolError("tensor %s: %d values for shape %s" % (name, len(mv), list(t.shape)))
    if sys.byteorder != "little":
        a = array("f", mv)
        a.byteswap()
        mv = memoryview(a)
    return mv.cast("B")


def _widen(dtype, raw):
    """Little-endian F32, BF16 or F16 bytes as an array('f'): exact (every bf16 and fp16 value is a float)."""
    a = array("f")
    if dtype == "F32":
        a.frombytes(raw)
    elif dtype == "BF16":   # a bf16 is a float's top half: put it there, zeros below
        wide = bytearray(2 * len(raw))
        wide[2::4], wide[3::4] = raw[0::2], raw[1::2]
        a.frombytes(bytes(wide))
    else:
        a.extend(struct.unpack("<%de" % (len(raw) // 2), raw))
        return a
    if sys.byteorder != "little":
        a.byteswap()
    return a


def encode_parts(meta, tensors):
    """encode()'s bytes as a list of pieces (the header, then each tensor's bytes as a view when it
    can be one): write_frame sends them without joining them first."""
    header, blobs, offset = {"__metadata__": {str(k): str(v) for k, v in meta.items()}}, [], 0
    for name in sorted(tensors):
        raw = _f32_bytes(name, tensors[name])
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)   # safetensors pads the header to 8 bytes
    return [struct.pack("<Q", len(head)) + head] + blobs


def encode(meta, tensors):
    """A safetensors file: meta (str -> str) as __metadata__, tensors (name -> Tensor) as F32."""
    return b"".join(encode_parts(meta, tensors))


def decode(body):
    """(meta, tensors) of a safetensors body; ProtocolError naming what is wrong."""
    if len(body) < 8:
        raise ProtocolError("body of %d bytes: shorter than a safetensors header length" % len(body))
    (h,) = struct.unpack_from("<Q", body, 0)
    if h > len(body) - 8:
        raise ProtocolError("header length %d runs past the body's %d bytes" % (h, len(body)))
    body = memoryview(body)   # slices below are views, not copies
    try:
        header = json.loads(bytes(body[8:8 + h]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError("header is not JSON: %s" % e)
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ProtocolError("__metadata__ is not an object of strings")
    data, spans, tensors = body[8 + h:], [], {}
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise ProtocolError("tensor %s: not {dtype, shape, data_offsets}" % name)
        size = {"F32": 4, "BF16": 2, "F16": 2}.get(e["dtype"])
        if size is None:
            raise ProtocolError("tensor %s: dtype %s, protocol 1 takes F32, BF16 and F16" % (name, e["dtype"]))
        shape, off = e["shape"], e["data_offsets"]
        if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
            raise ProtocolError("tensor %s: shape %r" % (name, shape))
        if not (isinstance(off, list) and len(off) == 2 and all(isinstance(o, int) for o in off)
                and 0 <= off[0] <= off[1] <= len(data)):
            raise ProtocolError("tensor %s: data_offsets %r outside the %d data bytes" % (name, off, len(data)))
        if off[1] - off[0] != size * numel(shape):
            raise ProtocolError("tensor %s: %d bytes for shape %s (%s: %d)" % (name, off[1] - off[0], shape, e["dtype"],
                                                                              size * numel(shape)))
        a = _widen(e["dtype"], data[off[0]:off[1]])
        tensors[name] = Tensor(tuple(shape), a)
        spans.append((off[0], off[1], name))
    spans.sort()
    end = 0
    for b, e, name in spans:
        if b != end:
            raise ProtocolError("tensor %s: starts at byte %d, the data before it ends at %d (gap or overlap)"
                                % (name, b, end))
        end = e
    if end != len(data):
        raise ProtocolError("%d data bytes after the last tensor" % (len(data) - end))
    return meta, tensors


# ---- frames -------------------------------------------------------------------------------
class StreamLost(Exception):
    """The length prefix is unusable: the stream cannot be followed any further."""


def read_exact(f, n):
    chunks, got = [], 0
    while got < n:
        b = f.read(n - got)
        if not b:
            break
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_frame(f):
    """The next body, or None at a clean end of input (no byte of a new frame)."""
    head = read_exact(f, 8)
    if not head:
        return None
    if len(head) < 8:
        raise StreamLost("the input ended inside a frame's length (%d of 8 bytes)" % len(head))
    (n,) = struct.unpack("<Q", head)
    if n < 1 or n > MAX_FRAME:
        raise StreamLost("frame length %d outside 1..2^30" % n)
    body = read_exact(f, n)
    if len(body) < n:
        raise StreamLost("the input ended inside a frame (%d of %d bytes)" % (len(body), n))
    return body


def write_frame(f, body):
    """One frame: body is bytes, or a list of pieces (encode_parts) written one after the other."""
    parts = body if isinstance(body, list) else [body]
    f.write(struct.pack("<Q", sum(len(p) for p in parts)))
    for p in parts:
        f.write(p)
    f.flush()


# ---- serving -------------------------------------------------------------------------------
def _int(meta, key, default, lo=None):
    v = meta.get(key)
    if v is None:
        return default
    try:
        x = int(v)
    except ValueError:
        raise ProtocolError("%s '%s' is not an integer" % (key, v))
    if lo is not None and x < lo:
        raise ProtocolError("%s %d: at least %d" % (key, x, lo))
    return x


def _float(meta, key, default=None):
    v = meta.get(key)
    if v is None:
        if default is None:
            raise ProtocolError("%s is missing" % key)
        return default
    try:
        return float(v)
    except ValueError:
        raise ProtocolError("%s '%s' is not a number" % (key, v))


def forward_args(meta, tensors, features):
    """The call's fields and tensors, checked against each other and the declared features."""
    for name in ("q", "k", "v"):
        if name not in tensors:
            raise ProtocolError("forward without tensor %s" % name)
    extra = set(tensors) - {"q", "k", "v"} - set(OPTIONAL)
    if extra:
        raise ProtocolError("forward with unknown tensors: %s" % ", ".join(sorted(extra)))
    q, k, v = tensors["q"].shape, tensors["k"].shape, tensors["v"].shape
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise ProtocolError("q %s, k %s, v %s: each is [B, T, heads, dim]" % (list(q), list(k), list(v)))
    B, Tq, H, d = q
    if k[0] != B or v[0] != B or k[3] != d or v[1] != k[1] or v[2] != k[2] or min(q + k + v) < 1:
        raise ProtocolError("q %s, k %s, v %s do not fit: q [B,Tq,H,d], k [B,Tk,Hkv,d], v [B,Tk,Hkv,dv]"
                            % (list(q), list(k), list(v)))
    Tk, Hkv, dv = k[1], k[2], v[3]
    if H % Hkv:
        raise ProtocolError("H %d is not a multiple of Hkv %d" % (H, Hkv))
    a = {"scale": _float(meta, "scale"), "causal": _int(meta, "causal", 0), "window_left": _int(meta, "window_left", -1, -1),
         "window_right": _int(meta, "window_right", -1, -1), "softcap": _float(meta, "softcap", 0.0),
         "dropout": _float(meta, "dropout", 0.0), "dropout_seed": _int(meta, "dropout_seed", 0, 0),
         "layer": _int(meta, "layer", 0, 0)}
    if a["causal"] not in (0, 1):
        raise ProtocolError("causal %d: 0 or 1" % a["causal"])
    needs = [n for n in meta.get("needs_grad", "").split(",") if n]
    for n in needs:
        if n not in GRADABLE or (n not in ("q", "k", "v") and n not in tensors):
            raise ProtocolError("needs_grad names %s, which the call does not have a gradient for" % n)
    a["needs_grad"] = needs
    want = {"head_scale": (H,), "kv_len": (B,), "alibi": (H,), "sinks": (H,)}
    for n, shape in want.items():
        if n in tensors and tensors[n].shape != shape:
            raise ProtocolError("%s has shape %s, the call needs %s" % (n, list(tensors[n].shape), list(shape)))
    if "bias" in tensors:
        bs = tensors["bias"].shape
        if len(bs) != 4 or bs[0] not in (1, B) or bs[1] not in (1, H) or bs[2:] != (Tq, Tk):
            raise ProtocolError("bias has shape %s, the call needs [%d or 1, %d or 1, %d, %d]" % (list(bs), B, H, Tq, Tk))
    used = {"dv": dv != d, "gqa": Hkv < H, "tq_tk": Tq != Tk,
            "window": a["window_left"] >= 0 or a["window_right"] >= 0, "padding": "kv_len" in tensors,
            "bias": "bias" in tensors, "alibi": "alibi" in tensors, "softcap": a["softcap"] > 0,
            "sinks": "sinks" in tensors, "dropout": a["dropout"] > 0}
    missing = [f for f in FEATURES if used[f] and f not in features]
    if missing:
        raise ProtocolError("the call uses %s, which this kernel did not declare" % ", ".join(missing))
    for n in OPTIONAL:
        if n in tensors:
            a[n] = tensors[n]
    return a, (B, Tq, H, dv)


def serve(forward, backward=None, *, name=None, features=(), conventions=(), precision="fp32", stdin=None, stdout=None,
          log=None):
    """Answers tapegrad's requests until end of input or bye. Returns the exit status (0, or 2
    when the stream was lost); a kernel's script ends with sys.exit(serve(...)). name: what the
    kernel greets as (default: the forward function's name); conventions: CONVENTIONS it keeps;
    precision: one of PRECISIONS, what its products compute in (q, k, v and dout then arrive
    rounded to it, as floats). A forward's args include layer, the model's layer of the call."""
    if not name:
        name = getattr(forward, "__name__", "") or "kernel"
    features = list(features)
    bad = [f for f in features if f not in FEATURES]
    if bad:
        raise ValueError("unknown features %s (known: %s)" % (", ".join(bad), ", ".join(FEATURES)))
    conventions = list(conventions)
    bad = [c for c in conventions if c not in CONVENTIONS]
    if bad:
        raise ValueError("unknown conventions %s (known: %s)" % (", ".join(bad), ", ".join(CONVENTIONS)))
    if precision not in PRECISIONS:
        raise ValueError("unknown precision %s (known: %s)" % (precision, ", ".join(PRECISIONS)))
    fin = stdin if stdin is not None else sys.stdin.buffer
    fout = stdout if stdout is not None else sys.stdout.buffer
    log = log if log is not None else sys.stderr
    kept = {}   # id -> (saved, out shape, needs, backwarded)
    greeted = False

    def reply(kind, ident=None, tensors=None, **fields):
        meta = {"protocol": PROTOCOL, "type": kind}
        if ident is not None:
            meta["id"] = str(ident)
        meta.update({k: str(v) for k, v in fields.items()})
        write_frame(fout, encode_parts(meta, tensors or {}))

    while True:
        try:
            body = read_frame(fin)
        except StreamLost as e:
            print("tapegrad_exec: %s" % e, file=log)
            reply("error", message=str(e))
            return 2
        if body is None:
            return 0
        ident = None
        try:
            meta, tensors = decode(body)
            ident = meta.get("id")   # an error reply names the request's id, whatever its type
            if meta.get("protocol") != PROTOCOL:
                raise ProtocolError("protocol '%s': this kernel speaks %s" % (meta.get("protocol"), PROTOCOL))
            kind = meta.get("type")
            if kind != "hello" and kind != "bye":
                ident = _int(meta, "id", None, 1) if kind in ("forward", "backward", "release") else ident
                if ident is None or kind not in ("forward", "backward", "release"):
                    raise ProtocolError("%s without an id" % kind if kind in ("forward", "backward", "release")
                                        else "unknown message type '%s'" % kind)
            if kind == "bye":
                return 0
            if kind == "hello":
                if tensors:
                    raise ProtocolError("hello carries no tensors")
                greeted = True
                said = {"features": ",".join(features)}
                if conventions:   # left out when none: a tapegrad before 0.17 reads the hello as before
                    said["conventions"] = ",".join(conventions)
                if precision != "fp32":   # likewise before 0.21
                    said["precision"] = precision
                reply("hello", name=name, **said)
            elif not greeted:
                raise ProtocolError("%s before hello" % kind)
            elif kind == "forward":
                if ident in kept:
                    raise ProtocolError("id %d is in use (release it first)" % ident)
                args, want = forward_args(meta, tensors, features)
                q, k, v = tensors["q"], tensors["k"], tensors["v"]
                try:
                    out, saved = forward(q, k, v, **args)
                except ProtocolError:
                    raise
                except Exception as e:
                    traceback.print_exc(file=log)   # the whole of it on stderr, which tapegrad passes on
                    raise ProtocolError("the kernel's forward raised %s: %s%s" % (type(e).__name__, e, raised_where(e)))
                out = Tensor(tuple(out.shape), out.data)
                if out.shape != want or len(out.data) != numel(want):
                    raise ProtocolError("the kernel's out has shape %s (%d values), the call needs %s"
                                        % (list(out.shape), len(out.data), list(want)))
                kept[ident] = [saved, want, args["needs_grad"], {n: tensors[n].shape for n in tensors}, False]
                reply("out", ident, {"out": out})
            elif kind == "backward":
                if ident not in kept:
                    raise ProtocolError("backward of id %d, which no forward made (or was released)" % ident)
                saved, want, needs, shapes, done = kept[ident]
                if done:
                    raise ProtocolError("id %d was backwarded already" % ident)
                if set(tensors) != {"dout"} or tensors["dout"].shape != want:
                    raise ProtocolError("backward takes one tensor dout of shape %s; got %s" % (
                        list(want), ", ".join("%s %s" % (n, list(t.shape)) for n, t in sorted(tensors.items()))))
                if backward is None:
                    raise ProtocolError("this kernel has no backward")
                try:
                    grads = backward(saved, tensors["dout"], list(needs))
                except Exception as e:
                    traceback.print_exc(file=log)
                    raise ProtocolError("the kernel's backward raised %s: %s%s" % (type(e).__name__, e, raised_where(e)))
                grads = {n: Tensor(tuple(t.shape), t.data) for n, t in (grads or {}).items()}
                if set(grads) != set(needs):
                    raise ProtocolError("the kernel's backward returned %s, the call needs %s"
                                        % (sorted(grads), sorted(needs)))
                for n, t in grads.items():
                    if t.shape != shapes[n] or len(t.data) != numel(t.shape):
                        raise ProtocolError("the kernel's gradient of %s has shape %s, %s has %s"
                                            % (n, list(t.shape), n, list(shapes[n])))
                kept[ident][4] = True
                reply("grads", ident, {"d" + n: t for n, t in grads.items()})
            elif kind == "release":
                if kept.pop(ident, None) is None:
                    raise ProtocolError("release of id %d, which no forward made (or was released)" % ident)
                reply("released", ident)
        except ProtocolError as e:
            reply("error", ident, message=str(e).replace("\n", " "))


# ---- PyTorch ------------------------------------------------------------------------------------
def serve_torch(attention, *, name=None, features=(), conventions=(), precision="fp32", layout="bthd", stdin=None,
                stdout=None, log=None):
    """serve() for one PyTorch function, attention(q, k, v, **args) -> out; its backward is
    torch.autograd's through whatever the function did (it must be differentiable in torch).

    q [B, Tq, H, d], k [B, Tk, Hkv, d], v [B, Tk, Hkv, dv] arrive as float32 torch tensors, and out
    [B, Tq, H, dv] is expected back; with layout="bhtd" they are [B, H, T, d] views (heads before
    positions, as torch.nn.functional and most PyTorch code keep them) and out is taken so.
    args: scale, causal (bool), window_left, window_right (-1: unbounded), softcap, dropout,
    dropout_seed, layer (the model's layer of the call, 0 first), and the call's optional tensors:
    head_scale [H], kv_len [B] (int64), bias [B or 1, H or 1, Tq, Tk], alibi [H], sinks [H]; a
    function takes what its features need and **rest. precision "bf16" or "fp16": q, k, v arrive
    as torch.bfloat16 or torch.float16 (the values tapegrad sent), and out and the gradients may be
    of any float dtype (sent back as float32). Importing torch happens here: the rest of this
    module needs only the standard library."""
    import torch

    low = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]

    if layout not in ("bthd", "bhtd"):
        raise ValueError("layout '%s': bthd or bhtd" % layout)

    def to_torch(t, grad):   # shares t.data's memory (this call's own copy of the frame's bytes)
        x = torch.frombuffer(t.data, dtype=torch.float32).reshape(t.shape)
        return x.requires_grad_(grad)

    def from_torch(x):   # a numpy view: the reply is written from torch's memory
        x = x.detach().to(torch.float32).contiguous()
        return Tensor(tuple(x.shape), x.numpy().reshape(-1))

    def heads_first(x):
        return x.transpose(1, 2) if layout == "bhtd" else x

    def forward(q, k, v, **a):
        needs = a.pop("needs_grad")
        given = {"q": q, "k": k, "v": v}
        for n in ("head_scale", "bias", "alibi", "sinks"):
            if n in a:
                given[n] = a.pop(n)
        kv_len = a.pop("kv_len", None)
        ins = {n: to_torch(t, False) for n, t in given.items()}
        if low is not None:   # the kernel's own dtype: exact, tapegrad rounded them to it
            ins.update({n: ins[n].to(low) for n in ("q", "k", "v")})
        ins = {n: x.requires_grad_(n in needs) for n, x in ins.items()}
        args = dict(a, causal=bool(a["causal"]))
        args.update({n: ins[n] for n in ins if n not in ("q", "k", "v")})
        if kv_len is not None:
            args["kv_len"] = torch.tensor([int(x) for x in kv_len.data], dtype=torch.int64)
        with torch.set_grad_enabled(bool(needs)):
            out = attention(heads_first(ins["q"]), heads_first(ins["k"]), heads_first(ins["v"]), **args)
            if not isinstance(out, torch.Tensor):
                raise ProtocolError("the kernel returned %s, not a torch.Tensor" % type(out).__name__)
            out = heads_first(out) if out.dim() == 4 else out
        if needs and not out.requires_grad:
            raise ProtocolError("the kernel's out does not depend on %s in torch's graph (no backward)" % ", ".join(needs))
        return from_torch(out), (out, [ins[n] for n in needs])

    def backward(saved, dout, needs):
        out, inputs = saved
        grads = torch.autograd.grad(out, inputs, grad_outputs=to_torch(dout, False).to(out.dtype), allow_unused=True)
        return {n: from_torch(g if g is not None else torch.zeros_like(x)) for n, g, x in zip(needs, grads, inputs)}

    name = name or getattr(attention, "__name__", "") or "torch kernel"   # the user's function's, not ours
    return serve(forward, backward, name=name, features=features, conventions=conventions, precision=precision,
                 stdin=stdin, stdout=stdout, log=log)
