"""Every tool gives each pair of logs the same verdict: summarize's lines, textverdict's table, and a
sweep's collect (summary.tsv, aggregate.tsv, brief) on a sweep folder made of the same logs.
    python3 tests/verdicts_agree.py TGLOGS.py SCRATCH_DIR LOG...
Exit 1 with what disagrees; prints the verdicts per seed."""
import os
import re
import shutil
import subprocess
import sys

tglogs, scratch, logs = sys.argv[1], sys.argv[2], sys.argv[3:]


def run(*args):
    p = subprocess.run([sys.executable, tglogs] + list(args), capture_output=True, text=True)
    if p.returncode:
        sys.exit("tglogs.py %s failed: %s" % (args[0], p.stderr))
    return p.stdout


def header(path):
    h = {}
    for line in open(path, encoding="utf-8"):
        if not line.startswith("# "):
            break
        k, _, v = line[2:].rstrip("\n").partition("=")
        h[k] = v
    return h


# summarize: "none vs sqrt, TASK ... seed=S ...: VERDICT; unscaled heads"
summ = {}
for line in run("summarize", *logs).splitlines():
    m = re.match(r"^none vs sqrt, .* seed=(\S+) .*: (failure reproduced|NOT reproduced|not judged[^;]*);", line)
    if m:
        summ.setdefault(m.group(1), []).append(m.group(2))
# textverdict: the seed and verdict columns by name
text = {}
lines = run("textverdict", *logs).splitlines()
cols = re.split(r"  +", lines[0])
for line in lines[1:]:
    f = re.split(r"  +", line)
    if len(f) == len(cols):
        text.setdefault(f[cols.index("seed")], []).append(f[cols.index("verdict")])
# a sweep of the same runs: manifest, runs/ID.tsv and ID.done, then collect
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(os.path.join(scratch, "runs"))
with open(os.path.join(scratch, "manifest.tsv"), "w") as m:
    for i, p in enumerate(logs):
        h = header(p)
        rid = "r%02d" % i
        shutil.copy(p, os.path.join(scratch, "runs", rid + ".tsv"))
        with open(os.path.join(scratch, "runs", rid + ".done"), "w") as d:
            d.write("done\n")
        m.write("%s\t--task %s --scale %s --seed %s --d-head %s --steps %s\n" % (
            rid, h["task"], h["scale"], h["seed"], h["d_head"], h["steps"]))
brief = run("collect", scratch)
sweep = {}
with open(os.path.join(scratch, "summary.tsv")) as f:
    head = f.readline().rstrip("\n").split("\t")
    for line in f:
        r = dict(zip(head, line.rstrip("\n").split("\t")))
        if r["reproduced"] != "-":
            sweep.setdefault(r["seed"], []).append(
                {"yes": "failure reproduced", "no": "NOT reproduced"}.get(r["reproduced"], "not judged"))
with open(os.path.join(scratch, "aggregate.tsv")) as f:
    head = f.readline().rstrip("\n").split("\t")
    agg = [dict(zip(head, l.rstrip("\n").split("\t"))) for l in f]
yes = sum(v.count("failure reproduced") for v in sweep.values())
agg_yes = [a["reproduced"] for a in agg if a["reproduced"] != "-"]
bad = 0
for seed in sorted(set(summ) | set(text) | set(sweep)):
    a, b, c = sorted(summ.get(seed, [])), sorted(text.get(seed, [])), sorted(sweep.get(seed, []))
    same = a == b == c and a
    print("seed %s: summarize %s, textverdict %s, sweep %s%s" % (seed, a, b, c, "" if same else "  <- DISAGREE"))
    bad += not same
if agg_yes != ["%d/%d" % (yes, sum(len(v) for v in sweep.values()))]:
    print("aggregate says %s, the summary %d reproduced" % (agg_yes, yes))
    bad += 1
if ("%d/%d" % (yes, sum(len(v) for v in sweep.values()))) not in brief:
    print("brief does not show %d/%d:\n%s" % (yes, sum(len(v) for v in sweep.values()), brief))
    bad += 1
if any(v != "failure reproduced" for vs in summ.values() for v in vs):
    print("not every pair reproduces the failure")
    bad += 1
sys.exit(1 if bad else 0)
