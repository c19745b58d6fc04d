"""What the ports share: finding tapegrad_exec, and the masks as the model code they port builds
them. Each port (tests/ports/*.py) is one model's eager attention, rewritten from its public
source (docs/attn_check.md#ports-of-real-model-code says which file at which commit), fed the mask its own model
code would build, and served over the exec protocol with the conventions that code keeps."""
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
for p in (os.path.join(here, "..", "..", "scripts", "python"),):
    if os.path.exists(os.path.join(p, "tapegrad_exec.py")) and p not in sys.path:
        sys.path.append(p)   # PYTHONPATH, when set, comes first
import tapegrad_exec  # noqa: E402,F401  (the ports import it from here)


def allowed(B, Tq, Tk, causal, kv_len=None, sliding_window=None):
    """[B, 1, Tq, Tk] bool, as transformers' masking functions decide it: query i sits at cache
    position i + Tk - Tq (the queries are the newest tokens of the cache); causal keeps keys at or
    before it, a sliding window of W keeps the last W of those (kv_idx > q_idx - W), padding keeps
    the keys the attention_mask marks (here: the first kv_len[b])."""
    q_pos = torch.arange(Tq).view(1, 1, Tq, 1) + (Tk - Tq)
    kv = torch.arange(Tk).view(1, 1, 1, Tk)
    ok = torch.ones(B, 1, Tq, Tk, dtype=torch.bool)
    if causal:
        ok = ok & (kv <= q_pos)
    if sliding_window is not None:
        ok = ok & (kv > q_pos - sliding_window)
    if kv_len is not None:
        ok = ok & (kv < kv_len.view(B, 1, 1, 1))
    return ok


def additive(ok, dtype=torch.float32):
    """The eager path's float mask: 0 where allowed, the dtype's most negative finite value
    elsewhere (transformers: torch.where(mask, 0, torch.finfo(dtype).min)). A row with no allowed
    key is then min + a logit = min everywhere: its softmax weighs every key alike."""
    zero = torch.tensor(0.0, dtype=dtype)
    return torch.where(ok, zero, torch.tensor(torch.finfo(dtype).min, dtype=dtype))


def window_of(window_left, window_right, causal):
    """tapegrad's window (left, right; -1 unbounded) as a sliding_window W of a causal model: the
    key itself and W - 1 before it. Only a causal left window has one (the window_causal convention:
    tapegrad sends no other)."""
    if window_left < 0:
        return None
    assert causal and window_right < 1, "a port with window_causal got another window"
    return window_left + 1


def mm(a, b):
    """a @ b as the model's GPU kernels compute it in its dtype: products accumulated in fp32, the
    result rounded once to the inputs' dtype. torch 1.13's CPU matmul in bf16 accumulates in bf16
    (4096 products of 0.01 sum to 4.0, not 40.96) and its bf16 baddbmm with beta=0 has given NaN
    rows: no GPU kernel does either, so a port in bf16 or fp16 multiplies through this."""
    return torch.matmul(a.float(), b.float()).to(a.dtype)


def softmax_in(x, dim=-1):
    """softmax in x's dtype, as a GPU computes it (in fp32 inside, the result rounded to x's dtype):
    torch 1.13 has no CPU softmax for float16."""
    return torch.nn.functional.softmax(x.float(), dim=dim).to(x.dtype)


def serve_port(model, mistakes, attention_of, features, conventions):
    """A port's main (0.21's ports): --mistake (one of mistakes) and --precision fp32 | bf16 | fp16
    (what it declares and computes in: q, k, v arrive in it), then attention_of(options) served
    with serve_torch, heads first, on one thread, named model-precision[-mistake]."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--mistake", choices=mistakes)
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    opt = ap.parse_args()
    torch.set_num_threads(1)
    name = model + "-" + opt.precision + ("-" + opt.mistake if opt.mistake else "")
    return tapegrad_exec.serve_torch(attention_of(opt), name=name, layout="bhtd", precision=opt.precision,
                                     features=features, conventions=conventions)
