"""scripts/python/tapegrad_log.py without torch: the entropy as tapegrad computes it, the log's
layout as docs/logs.md says, and each refusal naming what is wrong.
    PYTHONPATH=scripts/python python3 tests/tapegrad_log_test.py"""
import math
import os
import shutil
import sys
import tempfile

import tapegrad_log as tl

fails = 0


def check(ok, what):
    global fails
    if not ok:
        print("FAIL:", what)
        fails += 1


def refused(what, fn, words):
    try:
        fn()
    except tl.LogFormatError as e:
        check(words in str(e), "%s: message %r lacks %r" % (what, str(e), words))
        return
    check(False, "%s: not refused" % what)


# uniform attention's entropy: mean over rows of ln(i+1) (causal), ln T (not)
check(abs(tl.uniform_entropy(4) - (math.log(1) + math.log(2) + math.log(3) + math.log(4)) / 4) < 1e-15, "uniform, causal")
check(abs(tl.uniform_entropy(4, causal=False) - math.log(4)) < 1e-15, "uniform, not causal")
# a causal (1, 2, 3, 3) weight tensor: head 0 uniform over what each row sees, head 1 one-hot
T = 3
uni = [[1.0 / (i + 1) if j <= i else 0.0 for j in range(T)] for i in range(T)]
one = [[1.0 if j == 0 else 0.0 for j in range(T)] for i in range(T)]
e = tl.head_entropy([[uni, one]])
check(abs(e[0] - tl.uniform_entropy(T)) < 1e-12 and e[1] == 0.0, "head_entropy: uniform and one-hot: %s" % e)
check(tl.head_entropy([uni, one]) == e, "head_entropy: (H, Tq, Tk) as one batch")
d = tempfile.mkdtemp()
path = os.path.join(d, "run.tsv")
log = tl.RunLog(path, task="text", scale="none", steps=100, layers=1, heads=2, seq_len=T, seed=3, d_head=8,
                max_logit=True, val_loss=True, optim="adam")
log.row(0, 2.5, attn=[[[uni, one]]], max_logit=[[1.5, 7.0]], val_loss=2.6)
log.row(50, 1.5, entropy=[[0.5, 0.25]])
refused("steps that do not increase", lambda: log.row(50, 1.0, entropy=[[0.5, 0.25]]), "steps must increase")
refused("heads of the wrong count", lambda: log.row(60, 1.0, entropy=[[0.5]]), "layer 0 has 1 heads, the log has 2")
refused("both attn and entropy", lambda: log.row(70, 1.0, entropy=[[0.5, 0.5]], attn=[[[uni, one]]]), "exactly one")
log.close()
lines = open(path).read().splitlines()
hdr = dict(l[2:].split("=", 1) for l in lines if l.startswith("# ") and "=" in l)
check(hdr["task"] == "text" and hdr["scale"] == "none" and hdr["steps"] == "100" and hdr["optim"] == "adam",
      "header keys: %s" % hdr)
check(abs(float(hdr["ref_entropy_uniform"]) - tl.uniform_entropy(T)) < 1e-6, "ref_entropy_uniform")
rows = [l.split("\t") for l in lines if not l.startswith("#")]
cols = rows[0]
check(cols == ["step", "loss", "ent_mean", "ent_l0_h0", "ent_l0_h1", "maxlogit_l0", "nent_l0_h0", "nent_l0_h1",
               "val_loss"], "columns: %s" % cols)
r0 = dict(zip(cols, rows[1]))
check(abs(float(r0["nent_l0_h0"]) - 1) < 1e-5 and float(r0["nent_l0_h1"]) == 0, "nent: %s" % r0)
check(float(r0["maxlogit_l0"]) == 7.0 and float(r0["val_loss"]) == 2.6, "max logit, val loss: %s" % r0)
r1 = dict(zip(cols, rows[2]))
check(r1["val_loss"] == "nan" and r1["maxlogit_l0"] == "nan", "not measured is nan: %s" % r1)
check(abs(float(r1["ent_mean"]) - 0.375) < 1e-6, "ent_mean is the heads' mean")
refused("an existing file", lambda: tl.RunLog(path, task="t", scale="none", steps=1, layers=1, heads=1, seq_len=2),
        "exists")
refused("no seq_len", lambda: tl.RunLog(os.path.join(d, "x.tsv"), task="t", scale="none", steps=1, layers=1, heads=1),
        "seq_len")
refused("no task", lambda: tl.RunLog(os.path.join(d, "x.tsv"), task="", scale="none", steps=1, layers=1, heads=1,
                                     seq_len=2), "task and scale are required")
check(not os.path.exists(os.path.join(d, "x.tsv")), "a refused log left a file")
shutil.rmtree(d)
print("tapegrad_log: %s" % ("all passed" if not fails else "%d failed" % fails))
sys.exit(1 if fails else 0)
