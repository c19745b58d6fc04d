#!/usr/bin/env python3
"""An exec kernel that computes nothing: its out and gradients are zeros of the right shapes, so
what a call costs is the exec protocol's own (both sides' framing and checks, the pipes, the
Python module's copies). scripts/exec_cost.sh times it beside real kernels."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
import tapegrad_exec as tx  # noqa: E402


def forward(q, k, v, **a):
    B, Tq, H, _ = q.shape
    shapes = {"q": q.shape, "k": k.shape, "v": v.shape}
    shapes.update({n: a[n].shape for n in ("head_scale", "bias", "sinks") if n in a})
    return tx.tensor((B, Tq, H, v.shape[3])), shapes


def backward(shapes, dout, needs):
    return {n: tx.tensor(shapes[n]) for n in needs}


if __name__ == "__main__":
    sys.exit(tx.serve(forward, backward, name="zeros (protocol cost)", features=["dv", "gqa", "window"]))
