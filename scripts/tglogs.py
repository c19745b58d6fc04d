#!/usr/bin/env python3
"""Tables of tapegrad run logs, read by column name (the schema: docs/logs.md).

One definition of every per-run figure and of the none-vs-sqrt verdict, shared by
scripts/summarize.sh, `scripts/sweep collect|table` and the sweep's figures.
Standard library only.

    tglogs.py stats LOG... [--keys k1,k2]        one TSV line per log (what logstats.awk printed)
    tglogs.py summarize LOG...                   the table and verdicts of scripts/summarize.sh
    tglogs.py collect DIR [--keys-fixed ...] [--compare KEY=A:B] [--pass-ratio R] [--pass-gap G]
                                                 DIR/summary.tsv and DIR/aggregate.tsv of a sweep
    tglogs.py brief AGGREGATE.tsv                the brief table of an aggregate
    tglogs.py table SUMMARY.tsv KEY=VALUE...     the rows of a summary with those values, aligned
    tglogs.py plotdata AGGREGATE.tsv OUTDIR [--x KEY] [--panel KEY] [--line KEY]
                                                 one data file per line of a figure, with a header row
    tglogs.py map-cells SUMMARY AGGREGATE [--reach NATS]   the temperature map's cells.tsv
    tglogs.py map-band CELLS --mults "C ..."     its band.tsv;   map-cells-text CELLS: the cells as printed
    tglogs.py map-rows CELLS OPTIM:D_HEAD[:CAP]... the map figures' data, a row number per panel
    tglogs.py capmap-gaps SUMMARY                the map under caps: none against c = 1, per cap and seed
    tglogs.py learned-runs SUMMARY RUNSDIR [--band LO,HI] [--map MAPDIR] [--reach NATS]   the learned grid's runs.tsv
    tglogs.py learned-cells RUNS AGGREGATE       its cells.tsv
    tglogs.py maps-heads SCALE=SUMMARY...        the maps' summary-heads.tsv (attn_maps --summary files)
    tglogs.py maps-topkey SCALE=DUMP...          the maps' top-key.tsv (attn_maps FILE's text)
    tglogs.py logat [--steps 0,60,end] LOG...   what logs say at given steps (scripts/logat.sh)
    tglogs.py textverdict LOG... [--gap NATS]   none vs sqrt per pair: losses, validation gap, heads, verdict
    tglogs.py import IN.csv OUT.tsv --col ... --entropy PAT --task T --scale S --seq-len N   another trainer's log
    tglogs.py rejudge-aggregate AGGREGATE        a 0.22 aggregate's text cells judged by their task's rule
    tglogs.py ranges LOG...                      per framework and scale: final loss and entropy ranges over seeds
    tglogs.py legend LOG...                      plot.sh's labels (kernel, features, curves that coincide)
    tglogs.py align FILE...                      a TSV with its columns aligned (two spaces between columns)
    tglogs.py col FILE NAME...                   the named columns of a TSV (header row first)

Definitions (docs/experiment.md#tables-and-plots-of-logs):
  final_loss  mean training loss over the last 10% of the logged steps (at least one row)
  ent_end     mean over those rows of ent_mean / ref_entropy_uniform
  ent0        ent_mean / uniform at the first row; ent10: at the first row whose step is
              at least 10% of `# steps`
  low10       the heads (nent_* columns) below LOW_HEAD there; "-" when no row reached it
  max_logit   the largest maxlogit_* of the last row
  verdict     judge(): an unscaled run against the scaled run of the same other settings (runs
              paired by the scale they applied: effective_scale), in its task's terms: on
              the counting tasks (TOY_TASKS) its final loss at least PASS_RATIO times and
              PASS_GAP nats above; on any other task its validation loss (else final loss)
              at least TEXT_GAP nats above and more heads below LOW_HEAD at 10% of the run.
              A quantity that is nan is "not measured" and no verdict passes on it
              (docs/logs.md#the-verdicts).
"""
import argparse
import glob
import math
import os
import re
import sys

# The experiment's defaults; every one may be overridden by an option.
PASS_RATIO = 3.0            # final loss of the unscaled run / the scaled run's, at least
TEXT_GAP = 0.10             # any other task (text): the unscaled run this many nats above on validation (docs/logs.md#the-verdicts)
PASS_GAP = 0.25             # and at least this many nats above it
LOW_HEAD = 0.1              # a head below this entropy / uniform counts as collapsed


def over_uniform(ent, unif):
    """entropy / uniform; 1 when the uniform entropy is 0 (every row sees one key: uniform and one-hot
    are the same weights, as the logs' nent_ columns say)."""
    return ent / unif if unif > 0 else 1.0
COMPARE = ("scale", "none", "sqrt")   # the key whose two values are compared
SWEEP_FIXED_KEYS = ["task", "optim", "scale", "d_head", "seed", "steps"]
SEED_KEY = "seed"
# attn_scale's flags added after logs were recorded (experiments/attn_cfg.c, attn_added_flags):
# a log names them only when set; without the line, a log has the value every earlier run had.
ADDED_KEYS = {"kv_heads": "0", "window": "0", "bias": "none", "alibi": "0", "softcap": "0", "sinks": "0",
              "attn_dropout": "0", "precision": "fp32", "qinit": "default"}
FOLD = "+fold"   # a run whose W_q's initialisation was folded (qinit=fold, 0.24) is labelled by its scale + FOLD


# Header keys that are not settings of the training: where a run wrote, how it was run or watched,
# what it measured or derived. Every other key (the flags that shape the training, a plugin's
# SHA-256, the corpus's) is a setting: two runs are paired only when all their settings but the
# compared one (the scale) agree (docs/logs.md#which-runs-are-compared).
NOT_SETTINGS = {"tapegrad attn_scale", "tapegrad import", "tapegrad tapegrad_log", "source", "log_format", "precision_emulated", "loss_scale", "threads", "log", "log_every", "save", "save_every", "resume", "stop_at",
                "on_nan", "debug_nan", "dump_attn", "dump_attn_file", "allow_noncausal", "overwrite", "sample",
                "sample_len", "temperature", "profile", "check", "exec_timeout", "eval_every", "attn_scale_value",
                "n_params", "blas", "gemm_plan", "gemm_plan_mode", "attn_plugin_file", "attn_plugin_abi",
                "attn_scale_columns", "attn_measured", "attn_measure_note", "attn_exec_protocol",
                "attn_multiplier_meaning", "attn_max_logit_meaning", "corpus_source", "corpus_files",
                "corpus_bytes", "corpus_train_bytes", "corpus_non_text_bytes", "qinit_factor"}
# the attention features a run may set, with their defaults (ADDED_KEYS) in this order in a table
FEATURE_KEYS = ["kv_heads", "window", "bias", "alibi", "softcap", "sinks", "attn_dropout"]
INTERPRETERS = {"python", "python3", "sh", "bash", "env", "exec", "nice", "taskset", "stdbuf", "timeout", "uv",
                "poetry", "conda", "pixi"}


class LogError(Exception):
    pass


def is_setting(key):
    return key not in NOT_SETTINGS and not key.startswith(("ref_", "tapegrad ")) and key != ""


def setting_differences(a, b, skip=()):
    """The settings two headers (dicts) give different values, sorted: keys both have (a key
    only one log has is from another version of the program, or describes one kernel)."""
    return sorted(k for k in a if k in b and is_setting(k) and k not in skip and a[k] != b[k])


# what a verdict compares: the scale applied and W_q's initialisation (a folded run is an arm of its own,
# none+fold, judged against sqrt like none: docs/logs.md#which-runs-are-compared)
ARM_KEYS = ("scale", "qinit")


# the built-in ops as --attn names them: 0.20's words and 0.19's (a run's identity keeps 0.19's)
BUILTINS = ("composed", "fused", "saved", "online", "builtin:composed", "builtin:fused", "builtin:saved",
            "builtin:online")


def kernel_name(header):
    """The attention kernel of a run: the built-in op (BUILTINS), plugin:FILE[:SYMBOL] by its
    file's name, exec:NAME by the name the kernel gave itself (attn_exec_name) or else the first
    word of its command that is not an interpreter or an option, or the framework of a log with
    no attn (the PyTorch twin's: torch)."""
    attn = header.get("attn", "-")
    if attn.startswith("plugin:"):
        return "plugin:" + plugin_name(attn)
    if attn.startswith("exec:"):
        if header.get("attn_exec_name"):   # the name the kernel gave itself (its hello)
            return "exec:" + header["attn_exec_name"]
        words = attn[5:].split()
        name = next((w for w in words if not w.startswith("-") and "=" not in w
                     and os.path.basename(w) not in INTERPRETERS), words[0] if words else "?")
        return "exec:" + os.path.basename(name.strip("'\""))
    if attn == "-" and header.get("framework", "-") not in ("-", ""):
        return header["framework"]
    return attn


def features(header):
    """The attention features a run set, as "softcap=50,window=16", or "-" for none."""
    on = ["%s=%s" % (k, header[k]) for k in FEATURE_KEYS if k in header and header[k] != ADDED_KEYS[k]]
    if header.get("precision", "fp32") != "fp32":   # mixed precision (0.22): a setting of the run, shown with them
        on.append("precision=" + header["precision"])
    return ",".join(on) if on else "-"


NOT_MEASURED = "not measured"   # what a table says for a value a log holds as nan (docs/logs.md)


def num(x, spec):
    """x with a %-spec, or "not measured" for nan: a table never makes a number up."""
    return spec % x if math.isfinite(x) else NOT_MEASURED


# ---- reading -------------------------------------------------------------------
class Log:
    """A run log: header values by key, the column names, the rows (lists of strings)."""

    def __init__(self, path):
        self.path = path
        self.header = {}
        self.columns = None
        self.rows = []
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if line.startswith("# "):
                    key, _, value = line[2:].partition("=")
                    self.header[key] = value
                    continue
                if line.startswith("#") or line == "":
                    continue
                fields = line.split("\t")
                if self.columns is None:
                    if len(fields) == 1 and "," in line:
                        raise LogError("%s:%d: not a tapegrad log: its column line is comma-separated (a CSV? "
                                       "`tapegrad-logs import` turns it into one: docs/logs.md#bring-your-own-logs)"
                                       % (path, lineno))
                    self.columns = fields
                    self.index = {name: i for i, name in enumerate(fields)}
                else:
                    for name, v in zip(self.columns, fields):   # every column of a run log is a number
                        try:
                            float(v)
                        except ValueError:
                            raise LogError("%s:%d: column %s: not a number: %r" % (path, lineno, name, v))
                    self.rows.append(fields)
        if self.columns is None:
            raise LogError("%s: no column line" % path)
        for key, value in ADDED_KEYS.items():
            self.header.setdefault(key, value)

    def col(self, row, name):
        return row[self.index[name]]

    def names(self, prefix):
        return [c for c in self.columns if c.startswith(prefix)]


def fnum(s):
    """A field as a number (nan and inf included). Anything else is an error naming the field:
    a table never reads garbage as 0."""
    try:
        return float(s)
    except (ValueError, TypeError):
        raise LogError("not a number: %r" % (s,))


def run_name(path):
    name = os.path.basename(path)
    return name[:-4] if name.endswith(".tsv") else name


def g17(x):
    return "%.17g" % x


# ---- the per-run figures ---------------------------------------------------------
def log_stats(log):
    """final_loss, ent_end, ent0, ent10 (ent over uniform), low10 ("-" or a count), nheads, max_logit."""
    for need in ("step", "loss", "ent_mean"):
        if need not in log.index:
            raise LogError("%s: no column %s (a log needs step, loss and ent_mean: docs/logs.md#what-a-log-needs)"
                           % (log.path, need))
    n = len(log.rows)
    if n < 2:
        raise LogError("%s: fewer than 2 logged steps" % log.path)
    unif = fnum(log.header.get("ref_entropy_uniform", "0"))
    loss = [fnum(log.col(r, "loss")) for r in log.rows]
    ent = [fnum(log.col(r, "ent_mean")) for r in log.rows]
    k = (n + 9) // 10
    fl = fe = 0.0
    for i in range(n - k, n):
        fl += loss[i]
        fe += ent[i]
    fl /= k
    fe = over_uniform(fe / k, unif)
    heads = [log.index[c] for c in log.names("nent_")]
    target = fnum(log.header.get("steps", "0")) / 10
    e10, low10 = 0.0, "-"
    for r in log.rows:
        if fnum(log.col(r, "step")) >= target:
            e10 = fnum(log.col(r, "ent_mean"))
            vals = [fnum(r[h]) for h in heads]
            # a plugin's weights that could not be measured log nan: no head is counted as anything
            low10 = (str(sum(1 for v in vals if v < LOW_HEAD)) if any(math.isfinite(v) for v in vals) or not vals
                     else NOT_MEASURED)
            break
    mx = math.nan
    for c in log.names("maxlogit_"):
        v = fnum(log.col(log.rows[-1], c))
        if math.isfinite(v) and not (v <= mx):
            mx = v
    if not log.names("maxlogit_"):
        mx = 0.0
    return {"final_loss": fl, "ent_end": fe, "ent0": over_uniform(ent[0], unif), "ent10": over_uniform(e10, unif), "low10": low10,
            "nheads": len(heads), "max_logit": mx}


def stats_line(log, keys):
    s = log_stats(log)
    out = [log.path] + [log.header.get(k, "-") for k in keys]
    out += [g17(s["final_loss"]), g17(s["ent_end"]), g17(s["ent0"]), g17(s["ent10"]), s["low10"],
            "%d" % s["nheads"], g17(s["max_logit"])]
    return "\t".join(out)


def verdict(loss, ref_loss, ratio_min=PASS_RATIO, gap_min=PASS_GAP):
    """(ratio, gap, reproduced) of an unscaled run's final loss against the scaled one's."""
    ratio = loss / ref_loss if ref_loss > 0 else 0.0
    gap = loss - ref_loss
    return ratio, gap, ratio >= ratio_min and gap >= gap_min


# ---- the verdicts: runs paired by the scale they applied, judged in their task's terms -------------
# attn_scale's synthetic tasks, judged by the main result's rule (PASS_RATIO and PASS_GAP on the final
# training loss); every other task (code, a text task of your own) by TEXT_GAP and the heads' collapse.
TOY_TASKS = ("hist", "recall")
SCALE_TOL = 1.25   # a measured multiplier within this factor of 1, 1/sqrt(d) or 1/d is that scale


def task_rule(header):
    """"count" for attn_scale's synthetic tasks (TOY_TASKS), "text" for any other."""
    return "count" if header.get("task", "-") in TOY_TASKS else "text"


def declared_scale(header):
    """The scale a kernel declares it applies whatever it is passed (a convention in its identity),
    or None: scale_rsqrt_d applies 1/sqrt(d_head), scale_folded none (1/sqrt(d_head) in W_q's init)."""
    decl = " ".join(header.get(k, "") for k in ("attn_exec_features", "attn_plugin_abi", "attn_conventions"))
    if "scale_rsqrt_d" in decl:
        return "sqrt"
    if "scale_folded" in decl:
        return "none"
    return None


def measured_multiplier(log):
    """The median of the scale_* columns at the first row where any is finite and positive: the
    multiplier a kernel measured from outside applied at the start (before training moved its
    logits, so a softcap's tanh is still linear there), or nan."""
    cols = [log.index[c] for c in log.names("scale_")]
    for r in log.rows:
        v = sorted(x for x in (fnum(r[i]) for i in cols) if math.isfinite(x) and x > 0)
        if v:
            return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
    return math.nan


def effective_scale(log):
    """(label, note): the scale a run applied, by which runs pair and are labelled. A built-in op
    applies the scale it is passed (`scale`); a kernel measured from outside (attn_scale_columns=
    measured) applied what its scale_* columns measured at the start: "none" (c = 1), "sqrt" (c =
    1/sqrt(d_head)), "dk" (c = 1/d_head), each within SCALE_TOL, else "c=X"; the scale passed when it
    agrees. Not measured: the kernel's declared scale, else the scale passed, said in the note."""
    h = log.header
    passed = h.get("scale", "-")
    if h.get("attn_scale_columns") != "measured":
        return passed, ""
    c = measured_multiplier(log)
    decl = declared_scale(h)
    if not math.isfinite(c):
        if decl:
            return decl, "multiplier not measured; the kernel declares %s" % decl
        return passed, "multiplier not measured: the scale passed (%s) assumed" % passed
    d = fnum(h.get("d_head", "nan"))
    mult = fnum(h.get("scale_mult", "1")) if h.get("scale_mult", "") not in ("", "-") else 1.0
    expect = {"none": mult, "sqrt": mult / math.sqrt(d), "dk": mult / d} if math.isfinite(d) and d > 0 else {}
    near = lambda x: x > 0 and abs(math.log(c / x)) <= math.log(SCALE_TOL)
    if passed in expect and near(expect[passed]):
        return passed, ""
    for name in ("sqrt", "none", "dk"):
        if name in expect and near(expect[name]):
            return name, "measured multiplier %.4g, passed %s" % (c, passed)
    return "c=%.3g" % c, "measured multiplier %.4g, passed %s" % (c, passed)


class Run:
    """A log with what the verdicts read: its stats, the scale it applied, its task's rule, and its
    last validation loss (nan: none logged)."""

    def __init__(self, path):
        self.path, self.name = path, run_name(path)
        self.log = Log(path)
        self.header = self.log.header
        self.stats = log_stats(self.log)
        self.scale, self.scale_note = effective_scale(self.log)
        if self.header.get("qinit") == "fold":
            self.scale += FOLD
        self.rule = task_rule(self.header)
        self.val = last_value(self.log, "val_loss") if "val_loss" in self.log.index else math.nan


def load_runs(paths, err=sys.stderr):
    """(runs, status): every readable log as a Run; each one that is not is named on err (status 1)."""
    runs, bad = [], 0
    for p in paths:
        try:
            runs.append(Run(p))
        except (LogError, OSError) as e:
            print(e, file=err)
            bad = 1
    return runs, bad


def heads_low(run):
    """The count of heads below LOW_HEAD at 10% of the run, or None when not measured (or no row)."""
    x = run.stats["low10"]
    return int(x) if x not in (NOT_MEASURED, "-") else None


def judge(a, b, ratio_min=PASS_RATIO, gap_min=PASS_GAP, text_gap=TEXT_GAP):
    """The verdict on an unscaled run a against the scaled run b of the same settings, in their task's
    terms (docs/logs.md#the-verdicts): a dict with on ("final loss", "validation loss" or "final
    training loss"), x, y (a's and b's), ratio, gap, low_a, low_b (None: not measured), ok (True,
    False, or None: not judged) and text ("failure reproduced", "NOT reproduced", "not judged: ...").
    Counting tasks: x >= ratio_min * y and x - y >= gap_min on the final training loss. Any other task
    (text): the validation loss gap (the training loss when no validation was logged) at least
    text_gap nats, and more of a's heads collapsed at 10% of the run than b's."""
    la, lb = heads_low(a), heads_low(b)
    v = {"low_a": la, "low_b": lb}
    if a.rule == "count":
        x, y = a.stats["final_loss"], b.stats["final_loss"]
        ratio, gap, ok = verdict(x, y, ratio_min, gap_min)
        on = "final loss"
    else:
        has_val = math.isfinite(a.val) and math.isfinite(b.val)
        x, y = (a.val, b.val) if has_val else (a.stats["final_loss"], b.stats["final_loss"])
        on = "validation loss" if has_val else "final training loss"
        ratio = x / y if y > 0 else 0.0
        gap = x - y
        ok = gap >= text_gap and (la is not None and lb is not None and la > lb)
    v.update(on=on, x=x, y=y, ratio=ratio, gap=gap, ok=ok)
    if not (math.isfinite(x) and math.isfinite(y)):
        v["ok"], v["text"] = None, "not judged: the %s was not measured (nan)" % on
    elif a.rule == "text" and (la is None or lb is None) and gap >= text_gap:
        v["ok"], v["text"] = None, "not judged: the heads' entropy was not measured"
    else:
        v["text"] = "failure reproduced" if ok else "NOT reproduced"
    return v


def pairs(runs, low=COMPARE[1], high=COMPARE[2]):
    """Per run that applied `low` (its effective scale), W_q's initialisation folded or not: (run, [the
    runs that applied `high` with every other setting the same], why none did or ""). The same for any
    order of the runs."""
    out = []
    for a in runs:
        if a.scale not in (low, low + FOLD):
            continue
        mates, closest = [], None
        for b in runs:
            if b.scale != high:
                continue
            diff = setting_differences(a.header, b.header, ARM_KEYS)
            if not diff:
                mates.append(b)
            elif closest is None or len(diff) < len(closest[1]):
                closest = (b, diff)
        why = ""
        if not mates:
            if closest:
                b, diff = closest
                why = "no %s run with the same settings, no verdict; the closest, %s, differs in %s" % (
                    high, b.name, ", ".join("%s (%s vs %s)" % (k, a.header[k], b.header[k]) for k in diff[:4]) +
                    (" and %d more" % (len(diff) - 4) if len(diff) > 4 else ""))
            else:
                why = "no %s run among the logs, no verdict" % high
        out.append((a, sorted(mates, key=lambda r: r.path), why))
    return out


def kernel_verdict(k, b, gap_min=PASS_GAP, text_gap=TEXT_GAP):
    """A kernel from outside (run k) against the built-in op's run b of the same settings, as attn_check
    --train judges it: its failure ("FAILS: the collapse of the forgotten scale"), heads that collapse
    where the built-in op's do not, a loss more than the task's tolerance (gap_min nats on counting,
    text_gap on text) above or below, else "trains like the built-in op" only when its heads were
    measured. Returns (v of judge, text)."""
    v = judge(k, b)
    tol = gap_min if k.rule == "count" else text_gap
    lk, lb = v["low_a"], v["low_b"]
    collapse = lk is not None and lb is not None and lk > lb
    if v["ok"]:
        return v, "FAILS (the collapse of the forgotten scale)"
    if not (math.isfinite(v["x"]) and math.isfinite(v["y"])):
        return v, "not judged: the %s was not measured (nan)" % v["on"]
    if collapse or v["gap"] >= tol:
        return v, "FAILS: it trains worse than the built-in op%s%s" % (
            " by more than %g nats" % tol if v["gap"] >= tol else "", " and its heads collapse" if collapse and v["gap"] >= tol
            else ": its heads collapse" if collapse else "")
    if v["gap"] <= -tol:
        return v, "FAILS: it ends more than %g nats below the built-in op (does it see keys the mask hides?)" % tol
    if lk is None:
        return v, "loss within %g nats of the built-in op; heads not measured: not judged" % tol
    return v, "trains like the built-in op (within %g nats, heads as spread)" % tol


# ---- summarize.sh ------------------------------------------------------------------
def summarize(paths, out=sys.stdout, err=sys.stderr):
    """The table of scripts/summarize.sh and a verdict per unscaled run; returns the exit status.
    Runs are labelled and paired by the scale they applied (effective_scale); an unscaled run gets a
    verdict (judge) against every scaled run whose settings are all the same (scale aside): kernel,
    features, task, d_head, seed, lr...; when there is none, why. Then each kernel from outside
    against the built-in op's run of the same settings (kernel_verdict)."""
    runs, bad = load_runs(paths, err)
    kw = max([6] + [len(kernel_name(r.header)) for r in runs])
    fw = max([8] + [len(features(r.header)) for r in runs])
    sw = max([7] + [len(r.scale) for r in runs])
    out.write("%-7s %-5s %-*s %6s %5s %6s %-*s %-*s %11s %9s %9s %9s %14s  %s\n" % (
        "task", "optim", sw, "scale", "d_head", "seed", "steps", kw, "kernel", fw, "features", "final_loss", "ent/unif",
        "ent@0", "ent@10%", "heads<0.1@10%", "run"))
    for r in runs:
        h, s = r.header, r.stats
        low = s["low10"] if s["low10"] == NOT_MEASURED else "%s/%d" % (s["low10"], s["nheads"])
        out.write("%-7s %-5s %-*s %6s %5s %6s %-*s %-*s %11.4f %9s %9s %9s %14s  %s\n" % (
            h.get("task", "-"), h.get("optim", "-"), sw, r.scale, h.get("d_head", "-"), h.get(SEED_KEY, "-"),
            h.get("steps", "-"), kw, kernel_name(h), fw, features(h), s["final_loss"], num(s["ent_end"], "%.3f"),
            num(s["ent0"], "%.3f"), num(s["ent10"], "%.3f"), low, r.name))
    out.write("\n")
    for r in runs:
        if r.scale_note:
            out.write("%s: scale %s (%s)\n" % (r.name, r.scale, r.scale_note))
    low, high = COMPARE[1], COMPARE[2]
    for a, mates, why in pairs(runs, low, high):
        if why:
            out.write("%s run %s: %s\n" % (a.scale, a.name, why))
        for b in mates:
            out.write(verdict_line(a, b, low, high) + "\n")
    # a kernel from outside (plugin or exec) against the built-in op of the same settings and seed
    for k in runs:
        attn = k.header.get("attn", "-")
        if not (attn.startswith("plugin:") or attn.startswith("exec:")):
            continue
        for b in runs:
            if b.header.get("attn", "-") not in BUILTINS or setting_differences(k.header, b.header, ("attn",)):
                continue
            v, text = kernel_verdict(k, b)
            feat = features(k.header)
            out.write("%s '%s' vs %s, %s %s scale=%s d_head=%s seed=%s%s: %s %.4f vs %.4f, gap %.3f nats; heads "
                      "below 10%% of uniform at 10%% of steps: %s vs %s: %s\n" % (
                          "plugin" if attn.startswith("plugin:") else "exec", kernel_name(k.header).split(":", 1)[1],
                          b.header["attn"], k.header.get("task", "-"), k.header.get("optim", "-"),
                          k.scale if k.scale == k.header.get("scale", "-") else "%s (passed %s)" % (
                              k.scale, k.header.get("scale", "-")),
                          k.header.get("d_head", "-"), k.header.get(SEED_KEY, "-"), "" if feat == "-" else " " + feat,
                          v["on"], v["x"], v["y"], v["gap"], heads_text(v["low_a"], k), heads_text(v["low_b"], b), text))
    return bad


def heads_text(n, run):
    return NOT_MEASURED if n is None else "%d/%d" % (n, run.stats["nheads"])


def verdict_line(a, b, low=COMPARE[1], high=COMPARE[2]):
    """summarize's line for the unscaled run a against the scaled run b: the task's measure, the
    ratio (counting) or the gap alone (text), the verdict, the collapsed heads."""
    v = judge(a, b)
    h = a.header
    fwk = "" if h.get("framework", "-") in ("-", "") else h["framework"] + " "
    feat = features(h)
    rule = ("ratio %.1fx, gap %.3f nats" % (v["ratio"], v["gap"]) if a.rule == "count" else
            "gap %.3f nats (text: at least %g and more heads collapsed)" % (v["gap"], TEXT_GAP))
    return ("%s vs %s, %s%s %s d_head=%s seed=%s kernel=%s%s: %s %.4f vs %.4f, %s: %s; unscaled heads below 10%% of "
            "uniform at 10%% of steps: %s, scaled: %s" % (
                a.scale if a.scale == low + FOLD else low, high, fwk, h.get("task", "-"), h.get("optim", "-"), h.get("d_head", "-"), h.get(SEED_KEY, "-"),
                kernel_name(h), "" if feat == "-" else " " + feat, v["on"], v["x"], v["y"], rule, v["text"],
                heads_text(v["low_a"], a), heads_text(v["low_b"], b)))


def plugin_name(attn):
    """plugin:/path/k.so:sym -> k.so:sym (the file's name, not its folder)."""
    spec = attn[len("plugin:"):]
    return os.path.basename(spec)


def ranges(paths):
    """Per framework (a run named torch_*: pytorch) and scale, over seeds: the final loss and the
    entropy over uniform at step 0 and at 10% of the steps, min-max (science.sh torch)."""
    order, cell = [], {}
    for p in paths:
        log = Log(p)
        scale = log.header.get("scale", "-")
        s = log_stats(log)
        k = ("pytorch" if run_name(p).startswith("torch_") else "tapegrad", scale)
        if k not in cell:
            order.append(k)
            cell[k] = []
        # the table's rounding, as summarize prints the figures
        cell[k].append((float("%.4f" % s["final_loss"]), float("%.3f" % s["ent0"]), float("%.3f" % s["ent10"])))
    out = ["framework\tscale\tseeds\tfinal_loss min-max\tent@0 min-max\tent@10% min-max"]
    for k in order:
        v = cell[k]
        lo = [min(x[i] for x in v) for i in range(3)]
        hi = [max(x[i] for x in v) for i in range(3)]
        out.append("%s\t%s\t%d\t%.4f-%.4f\t%.3f-%.3f\t%.3f-%.3f" % (k[0], k[1], len(v), lo[0], hi[0], lo[1], hi[1],
                                                                   lo[2], hi[2]))
    return "\n".join(out) + "\n"


# ---- the temperature map (science.sh map) ------------------------------------------------
def awk_num(x):
    """A number as awk's print writes it: an integer as one, else %.6g (OFMT)."""
    return "%d" % x if x == int(x) and abs(x) < 1e16 else "%.6g" % x


def cname(c):
    """c as a fraction or integer when it is a power of 2 (1/16 ... 16), else with 3 digits."""
    l = math.log(c) / math.log(2)
    r = float("%.0f" % l)
    if (l - r) ** 2 < 1e-12:
        return "%d" % 2 ** r if r >= 0 else "1/%d" % 2 ** -r
    return "%.3g" % c


def map_cells(summary_path, aggregate_path, reach):
    """cells.tsv: per optimizer, head size and c (the scale_mult column): the seeds, the final loss
    (mean, min, max over seeds) and the entropy at 10% of the steps, and how many seeds reached the
    c = 1 run's final loss + reach (-1 when no c = 1 run). Sorted by optimizer, head size, c. When the
    runs vary the soft-cap (science.sh capmap), a column softcap after d_head: a cell per cap, and
    "reached" is against the c = 1 run of the same cap."""
    sh, srows = read_tsv(summary_path)
    sc = {n: i for i, n in enumerate(sh)}
    by_cap = "softcap" in sc
    cap_of = lambda r, col: (r[col["softcap"]],) if by_cap else ()
    fin, seeds = {}, []
    for r in srows:
        fin[(r[sc["optim"]], r[sc["d_head"]]) + cap_of(r, sc) + (r[sc["scale_mult"]], r[sc["seed"]])] = fnum(r[sc["final_loss"]])
        if r[sc["seed"]] not in seeds:
            seeds.append(r[sc["seed"]])
    ah, arows = read_tsv(aggregate_path)
    ac = {n: i for i, n in enumerate(ah)}
    out = []
    for r in arows:
        v = lambda n: r[ac[n]]
        key, c = (v("optim"), v("d_head")) + cap_of(r, ac), v("scale_mult")
        nr, has1 = 0, False
        for s in seeds:
            if key + (c, s) in fin and key + ("1", s) in fin:
                has1 = True
                nr += fin[key + (c, s)] <= fin[key + ("1", s)] + reach
        cf, df = fnum(c), fnum(key[1])
        out.append(list(key) + [c, awk_num(math.log(cf) / math.log(2)), "1" if (cf - math.sqrt(df)) ** 2 < 1e-10 * df else "0",
                                v("seeds"), v("final_loss_mean"), v("final_loss_min"), v("final_loss_max"), v("ent10_mean"),
                                "%d" % (nr if has1 else -1)])
    n = len(key) if out else 2
    out.sort(key=lambda r: (r[0],) + tuple(fnum(x) for x in r[1:n + 1]))
    head = ["optim", "d_head"] + (["softcap"] if by_cap else []) + ["c", "log2c", "none", "seeds", "loss_mean", "loss_min",
                                                                     "loss_max", "ent10_mean", "reached"]
    return "\n".join("\t".join(r) for r in [head] + out) + "\n"


def map_band(cells_path, mults):
    """band.tsv: per optimizer and head size (and cap, when cells.tsv has a softcap column), the c of
    `mults` contiguous around c = 1 where every seed reached the c = 1 loss, the c = 1 loss, and where
    the none cell falls."""
    head, rows = read_tsv(cells_path)
    c = {n: i for i, n in enumerate(head)}
    keys = ["optim", "d_head"] + (["softcap"] if "softcap" in c else [])
    grid = {fnum(m) for m in mults}
    order, cells = [], {}
    for r in rows:
        k = tuple(r[c[n]] for n in keys)
        if k not in cells:
            order.append(k)
            cells[k] = {"c": [], "ok": [], "at1": None}
        e = cells[k]
        loss = lambda: "%.4f (%.4f-%.4f)" % (fnum(r[c["loss_mean"]]), fnum(r[c["loss_min"]]), fnum(r[c["loss_max"]]))
        reached, seeds = fnum(r[c["reached"]]), fnum(r[c["seeds"]])
        if r[c["none"]] == "1":
            e["none"] = r[c["c"]]
            e["nl"] = loss()
            e["nr"] = "n/a" if reached < 0 else "%s/%s" % (r[c["reached"]], r[c["seeds"]])
        if fnum(r[c["c"]]) in grid:
            e["c"].append(r[c["c"]])
            e["ok"].append(reached == seeds)
            if fnum(r[c["c"]]) == 1:
                e["at1"] = len(e["c"]) - 1
                e["l1"] = loss()
    out = [keys + ["band_lo", "band_hi", "loss_c1 (min-max)", "none_c", "none_loss (min-max)", "none_reached",
                   "none_in_band"]]
    for k in order:
        e = cells[k]
        lo = hi = "n/a"
        inb = "-"
        if e["at1"] is not None:
            a = b = e["at1"]
            while a > 0 and e["ok"][a - 1]:
                a -= 1
            while b < len(e["c"]) - 1 and e["ok"][b + 1]:
                b += 1
            lo, hi = e["c"][a], e["c"][b]
            if "none" in e:
                inb = "yes" if fnum(lo) <= fnum(e["none"]) <= fnum(hi) else "no"
        out.append(list(k) + [lo, hi, e.get("l1", "-"), "%.4g" % fnum(e["none"]) if "none" in e else "-",
                              e.get("nl", "-"), e.get("nr", "-"), inb])
    return "\n".join("\t".join(r) for r in out) + "\n"


def map_rows(cells_path, panels):
    """The temperature map figures' data: a header row, then the cells of each (optim, d_head) of
    `panels` ("adam:8" ...; "adam:128:50" for a cap of a capmap's cells) with the panel's row number
    first, the none cells last."""
    head, rows = read_tsv(cells_path)
    c = {n: i for i, n in enumerate(head)}
    out = []
    for r_i, p in enumerate(panels):
        o, d, cap = (p.split(":") + [None])[:3]
        out += [[str(r_i)] + r for r in rows if r[c["optim"]] == o and r[c["d_head"]] == d and
                (cap is None or fnum(r[c["softcap"]]) == fnum(cap))]
    out.sort(key=lambda r: fnum(r[1 + c["none"]]))   # stable: the order within stays
    return "\n".join("\t".join(r) for r in [["row"] + head] + out) + "\n"


def map_cells_text(cells_path):
    """The cells as science.sh prints them (a cap column when cells.tsv has one)."""
    head, rows = read_tsv(cells_path)
    c = {n: i for i, n in enumerate(head)}
    by_cap = "softcap" in c
    out = ["%-5s %6s %s%7s %5s %8s %19s %8s %8s" % ("optim", "d_head", "%6s " % "cap" if by_cap else "", "c", "", "loss",
                                                 "(min-max)", "ent@10%", "reached")]
    for r in rows:
        v = lambda n: r[c[n]]
        none = v("none") == "1"
        cap = "%6s " % ("none" if fnum(v("softcap")) == 0 else v("softcap")) if by_cap else ""
        out.append("%-5s %6s %s%7s %5s %8.4f %19s %8.3f %8s" % (
            v("optim"), v("d_head"), cap, "%.3g" % fnum(v("c")) if none else cname(fnum(v("c"))), "none" if none else "",
            fnum(v("loss_mean")), "(%.4f-%.4f)" % (fnum(v("loss_min")), fnum(v("loss_max"))), fnum(v("ent10_mean")),
            "n/a" if fnum(v("reached")) < 0 else "%s/%s" % (v("reached"), v("seeds"))))
    return "\n".join(out) + "\n"


def capmap_gaps(summary_path):
    """gaps.tsv of science.sh capmap: per head size, cap and seed, the none run (c = sqrt(d_head)) at
    that cap against the c = 1 run of the same cap and against the c = 1 run without a cap (the model
    the team meant to train): final losses, the gaps (none - c = 1, nats), and the none run's heads
    below 10% of uniform entropy at 10% of the steps."""
    h, rows = read_tsv(summary_path)
    c = {n: i for i, n in enumerate(h)}
    fin, order = {}, []
    for r in rows:
        d, cap, m, s = r[c["d_head"]], r[c["softcap"]], fnum(r[c["scale_mult"]]), r[c["seed"]]
        fin[(d, fnum(cap), m, s)] = r
        if (d, cap, s) not in order:
            order.append((d, cap, s))
    order.sort(key=lambda k: (fnum(k[0]), fnum(k[1]) if fnum(k[1]) > 0 else math.inf, fnum(k[2])))
    out = [["d_head", "softcap", "seed", "none_loss", "c1_loss", "c1_nocap_loss", "gap_vs_c1", "gap_vs_c1_nocap",
            "none_heads_low10"]]
    for d, cap, s in order:
        none = next((r for (dd, cc, m, ss), r in fin.items() if dd == d and cc == fnum(cap) and ss == s and
                     (m - math.sqrt(fnum(d))) ** 2 < 1e-10 * fnum(d)), None)
        c1, c0 = fin.get((d, fnum(cap), 1.0, s)), fin.get((d, 0.0, 1.0, s))
        if none is None:
            continue
        nl = fnum(none[c["final_loss"]])
        l1 = fnum(c1[c["final_loss"]]) if c1 else math.nan
        l0 = fnum(c0[c["final_loss"]]) if c0 else math.nan
        g = lambda x: "-" if math.isnan(x) else "%.4f" % x
        out.append([d, "none" if fnum(cap) == 0 else cap, s, "%.4f" % nl, g(l1), g(l0), g(nl - l1), g(nl - l0),
                    none[c["heads_low10"]]])
    return "\n".join("\t".join(r) for r in out) + "\n"


# ---- the learned scale (science.sh learned) -----------------------------------------------
def learned_runs(summary_path, runs_dir, band, mapband_path, mapsum_path, reach):
    """runs.tsv: per run of the learned grid: the multiplier c_h = s_h of every head (its scale_*
    column times sqrt(d_head)) at step 0 and at the end (lowest-highest), the first logged step at
    which every head is inside the band (the map's, AdamW, same d_head; or `band` "LO,HI"), whether
    it is inside at the end, and whether the run reached the map's c = 1 loss + reach (AdamW, same
    d_head and seed). Sorted by form (log first), start, d_head (largest first), scale lr, seed."""
    blo = {}
    if mapband_path and os.path.exists(mapband_path):
        h, rows = read_tsv(mapband_path)
        c = {n: i for i, n in enumerate(h)}
        for r in rows:
            if r[c["optim"]] == "adam" and r[c["band_lo"]] != "n/a":
                blo[r[c["d_head"]]] = (r[c["band_lo"]], r[c["band_hi"]])
    l1 = {}
    if mapsum_path and os.path.exists(mapsum_path):
        h, rows = read_tsv(mapsum_path)
        c = {n: i for i, n in enumerate(h)}
        for r in rows:
            if r[c["optim"]] == "adam" and fnum(r[c["scale_mult"]]) == 1:
                l1[(r[c["d_head"]], r[c["seed"]])] = r[c["final_loss"]]
    h, rows = read_tsv(summary_path)
    c = {n: i for i, n in enumerate(h)}
    out = []
    for r in rows:
        rid, d, seed = r[c["id"]], r[c["d_head"]], r[c["seed"]]
        lo, hi = band.split(",") if band else blo.get(d, ("", ""))
        log = Log(os.path.join(runs_dir, rid + ".tsv"))
        scales = [log.index[n] for n in log.names("scale_l")]
        root = math.sqrt(fnum(d))
        first, c0, cend, endin = "", "", "", False
        for i, x in enumerate(log.rows):
            mn, mx, inb = 1e30, 0.0, lo != ""
            for k in scales:
                v = fnum(x[k]) * root
                mn, mx = min(mn, v), max(mx, v)
                if lo != "" and (v < fnum(lo) * 0.999 or v > fnum(hi) * 1.001):   # the log has 6 digits
                    inb = False
            if i == 0:
                c0 = "%.3g-%.3g" % (mn, mx)
            if inb and first == "":
                first = log.col(x, "step")
            cend, endin = "%.3g-%.3g" % (mn, mx), inb
        fl = r[c["final_loss"]]
        reached = ("yes" if fnum(fl) <= fnum(l1[(d, seed)]) + reach else "no") if (d, seed) in l1 else "n/a"
        out.append([rid, r[c["learned_param"]], r[c["learned_init"]], d, r[c["scale_lr"]], seed, "%.4f" % fnum(fl),
                    reached, c0, cend, "n/a" if lo == "" else first or "never",
                    "n/a" if lo == "" else "yes" if endin else "no"])
    out.sort(key=lambda x: fnum(x[5]))
    out.sort(key=lambda x: fnum(x[4]))
    out.sort(key=lambda x: -fnum(x[3]))
    out.sort(key=lambda x: x[2])
    out.sort(key=lambda x: x[1], reverse=True)
    head = ["id", "form", "init", "d_head", "scale_lr", "seed", "final_loss", "reached", "c_step0", "c_end",
            "step_in_band", "in_band_at_end"]
    return "\n".join("\t".join(x) for x in [head] + out) + "\n"


def learned_cells(runs_path, aggregate_path):
    """cells.tsv: per form, start, d_head and scale lr: the final loss over seeds, the seeds that
    reached, the step in band per seed."""
    h, rows = read_tsv(runs_path)
    c = {n: i for i, n in enumerate(h)}
    reached, na, steps = {}, {}, {}
    for r in rows:
        k = (r[c["form"]], r[c["init"]], r[c["d_head"]], r[c["scale_lr"]])
        reached[k] = reached.get(k, 0) + (r[c["reached"]] == "yes")
        na[k] = na.get(k, 0) + (r[c["reached"]] == "n/a")
        steps.setdefault(k, []).append(r[c["step_in_band"]])
    h, rows = read_tsv(aggregate_path)
    a = {n: i for i, n in enumerate(h)}
    out = []
    for r in rows:
        v = lambda n: r[a[n]]
        k = (v("learned_param"), v("learned_init"), v("d_head"), v("scale_lr"))
        out.append(list(k) + [v("seeds"), "%.4f (%.4f-%.4f)" % (fnum(v("final_loss_mean")), fnum(v("final_loss_min")),
                                                                fnum(v("final_loss_max"))),
                              "n/a" if na.get(k) else "%d/%s" % (reached.get(k, 0), v("seeds")),
                              ",".join(steps.get(k, []))])
    out.sort(key=lambda x: fnum(x[3]))
    out.sort(key=lambda x: -fnum(x[2]))
    out.sort(key=lambda x: x[1])
    out.sort(key=lambda x: x[0], reverse=True)
    head = ["form", "init", "d_head", "scale_lr", "seeds", "final_loss mean (min-max)", "reached", "step_in_band"]
    return "\n".join("\t".join(x) for x in [head] + out) + "\n"


# ---- attention maps (science.sh maps) ---------------------------------------------------
def maps_heads(summaries):
    """summary-heads.tsv: per scale and step, the mean over heads of each share column of
    `attn_maps --summary` (every column but layer, head and step). summaries: [(scale, path)]."""
    out, names = [], None
    for scale, path in summaries:
        h, rows = read_tsv(path)
        share = [i for i, n in enumerate(h) if n not in ("layer", "head", "step")]
        if names is None:
            names = [h[i] for i in share]
        step = h.index("step")
        order, sums, n = [], {}, {}
        for r in rows:
            st = r[step]
            if st not in n:
                order.append(st)
                n[st] = 0
                sums[st] = [0.0] * len(share)
            n[st] += 1
            for j, i in enumerate(share):
                sums[st][j] += fnum(r[i])
        for st in order:
            out.append([scale, st, str(n[st])] + ["%.3f" % (x / n[st]) for x in sums[st]])
    head = ["scale", "step", "heads"] + ["%s (mean)" % x for x in names or []]
    return "\n".join("\t".join(x) for x in [head] + out) + "\n"


def maps_topkey(scale, text):
    """Rows of top-key.tsv from `attn_maps FILE`'s text: per layer, head and step, the key that most
    query rows (1..T-1) put their largest weight on (ties: the earlier key), its token ("BOS" at 0),
    and the share of rows."""
    out, tok, blk, mx, arg = [], [], None, {}, {}

    def flush():
        if blk is None:
            return
        T = len(tok)
        count, best = {}, -1
        for q in range(1, T):
            a = arg.get(q, "")
            count[a] = count.get(a, 0) + 1
            if best == -1 or count[a] > count[best] or (count[a] == count[best] and fnum(a) < fnum(best)):
                best = a
        out.append([scale, blk["layer"], blk["head"], blk["step"], str(best),
                    "BOS" if fnum(best) == 0 else tok[int(fnum(best))], "%.3f" % (count[best] / (T - 1))])

    for line in text.splitlines():
        if line.startswith("# tokens="):
            tok = line[len("# tokens="):].split()
        elif line.startswith("# block="):
            flush()
            blk = dict(kv.split("=", 1) for kv in line[2:].split())
            mx, arg = {}, {}
        elif line.startswith("#") or blk is None:
            continue
        else:
            f = line.split()
            if len(f) == 3 and f[2] != "NaN" and fnum(f[1]) > 0:
                q, w = int(fnum(f[1])), fnum(f[2])
                if q not in mx or w > mx[q]:
                    mx[q], arg[q] = w, f[0]
    flush()
    return out


# ---- logat.sh -------------------------------------------------------------------------------
def logat(paths, steps, err=sys.stderr):
    """What logs say at given steps ("end": the last row): per log and step, the first row at or
    after it: loss, entropy / uniform (mean, lowest..highest head), the largest logit and
    saturation over layers, the heads' multipliers (lowest..highest). Returns (text, status)."""
    lines, bad = [], 0
    for p in paths:
        log = Log(p)
        if not log.rows:
            print("scripts/logat.sh: %s has no logged rows" % p, file=err)
            bad = 1
            continue
        unif = fnum(log.header.get("ref_entropy_uniform", "0"))
        idx = lambda prefix: [log.index[n] for n in log.names(prefix)]
        N, M, T, C = idx("nent_"), idx("maxlogit_"), idx("sat_"), idx("scale_")
        for s in steps:
            if s == "end":
                r = log.rows[-1]
            else:
                r = next((x for x in log.rows if fnum(log.col(x, "step")) >= fnum(s)), None)
                if r is None:
                    continue
            nv = [fnum(r[i]) for i in N]
            cv = [fnum(r[i]) for i in C]
            mv = [fnum(r[i]) for i in M]
            tv = [fnum(r[i]) for i in T]
            fin = lambda xs: [x for x in xs if math.isfinite(x)]
            # nan (a plugin's weights not measured) is said, never printed as a number
            span = lambda xs, f: (f % (min(fin(xs)), max(fin(xs)))) if fin(xs) else "-" if not xs else NOT_MEASURED
            top = lambda xs, f: (f % max([0.0] + fin(xs))) if fin(xs) or not xs else NOT_MEASURED
            lines.append((run_name(p), "%6d %9.4f %8s %15s %9s %6s %17s" % (
                fnum(log.col(r, "step")), fnum(log.col(r, "loss")), num(over_uniform(fnum(log.col(r, "ent_mean")), unif), "%.3f"),
                span(nv, "%.3f..%.3f"), top(mv, "%.1f"), top(tv, "%.3f"), span(cv, "%.4g..%.4g"))))
    w = max([14] + [len(n) for n, _ in lines])
    head = "%6s %9s %8s %15s %9s %6s %17s" % ("step", "loss", "ent/unif", "heads (min..max)", "max_logit", "sat",
                                                "multiplier")
    return "".join("%-*s %s\n" % (w, n, r) for n, r in [("run", head)] + lines), bad


# ---- on real text (scripts/reproduce_code.sh) ------------------------------------------------
def last_value(log, column):
    """The last row's value of a column that is not NaN (val_loss is logged every --eval-every)."""
    for r in reversed(log.rows):
        v = fnum(log.col(r, column))
        if not math.isnan(v):
            return v
    return float("nan")


def text_verdicts(paths, gap_min=TEXT_GAP):
    """Per unscaled run, against each scaled run of the same settings (pairs: by the scale applied,
    whatever the order of the files): the final training losses (mean of the last 10% of rows), the
    final validation losses, their gap, the collapsed heads and the verdict of judge (on text: the
    validation gap at least gap_min nats and more heads collapsed; a ratio means little on text,
    where both losses stay far from 0). A precision column when any run is not fp32 (0.22), a kernel
    column when the kernels differ; the unpaired runs after the table, with why."""
    runs, _ = load_runs(paths)
    found = pairs(runs)
    mixed = any(r.header["precision"] != "fp32" for r in runs)
    kernels = len({kernel_name(r.header) for r in runs}) > 1
    many = any(len(m) > 1 for _, m, _ in found)   # a run with two partners (the same run twice): say which pair
    folded = any(a.scale.endswith(FOLD) for a, _, _ in found)   # none and none+fold: say which
    order = {"fp32": 0, "bf16": 1, "fp16": 2}
    head = (["precision"] if mixed else []) + (["kernel"] if kernels else []) + (["none run"] if folded else []) + [
        "seed", "train none", "train sqrt", "val none", "val sqrt", "val gap", "heads<0.1@10% none",
        "heads<0.1@10% sqrt", "verdict"] + (["logs"] if many else [])
    rows, notes = [], []
    for a, mates, why in found:
        if why:
            notes.append("%s run %s: %s" % (a.scale, a.name, why))
        for b in mates:
            v = judge(a, b, text_gap=gap_min)
            seed = a.header.get(SEED_KEY, "-")
            key = (order.get(a.header["precision"], 9), kernel_name(a.header), a.scale,
                   float(seed) if re.match(r"^-?[0-9.]+$", seed) else math.inf, seed, a.path, b.path)
            rows.append((key, ([a.header["precision"]] if mixed else []) + ([kernel_name(a.header)] if kernels else []) +
                        ([a.scale] if folded else []) + [
                a.header.get(SEED_KEY, "-"), "%.4f" % a.stats["final_loss"], "%.4f" % b.stats["final_loss"],
                num(a.val, "%.4f"), num(b.val, "%.4f"), "%.3f" % v["gap"] if v["on"] == "validation loss" else
                "%.3f (train)" % v["gap"], heads_text(v["low_a"], a), heads_text(v["low_b"], b), v["text"]] + (
                ["%s vs %s" % (a.path, b.path)] if many else [])))
    text = align([head] + [r for _, r in sorted(rows)])
    for r in runs:
        if r.scale_note:
            notes.append("%s: scale %s (%s)" % (r.name, r.scale, r.scale_note))
    return text + "".join(n + "\n" for n in notes)


# ---- a scale folded into the initialisation (science_fold.sh, 0.24) ------------------------------
FOLD_ARMS = ("sqrt", "none", "none" + FOLD)
FOLD_OPTIMS = ("adam", "sgd", "adafactor")


def qk_mult(log, row):
    """The mean over layers of a row's qk_mult_l* columns (attn_scale 0.24: the effective multiplier of
    q.k against an unscaled model at a standard initialisation), nan when none is finite."""
    v = [fnum(log.col(row, c)) for c in log.names("qk_mult_l")]
    v = [x for x in v if math.isfinite(x)]
    return sum(v) / len(v) if v else math.nan


def row_at(log, frac):
    """The first row at or past frac of the run's steps (the last row for 1)."""
    target = fnum(log.header.get("steps", "0")) * frac
    for r in log.rows:
        if fnum(log.col(r, "step")) >= target:
            return r
    return log.rows[-1]


def fold_runs(paths):
    """{(task, optim, arm): [Run, ...]} and the verdict pairs of every none and none+fold run."""
    runs, bad = load_runs(paths)
    if bad:   # each named on stderr: a table of the readable rest would hide them
        raise LogError("fold: %d log(s) could not be read (above)" % (len(paths) - len(runs)))
    for r in runs:
        if not r.log.names("qk_mult_l"):
            raise LogError("%s: no qk_mult_l columns (a log of attn_scale 0.24 or later)" % r.path)
    cells = {}
    for r in runs:
        cells.setdefault((r.header.get("task", "-"), r.header.get("optim", "-"), r.scale), []).append(r)
    return cells, {a.path: mates for a, mates, _ in pairs(runs)}


def halfway_step(run):
    """The first logged step at which the effective multiplier reached d_head^(-1/4), halfway (on a log
    scale) from the fold's 1/sqrt(d_head) to the unscaled 1, as a string; "never" when it did not."""
    d = fnum(run.header.get("d_head", "nan"))
    for row in run.log.rows:
        c = qk_mult(run.log, row)
        if math.isfinite(c) and c >= d ** -0.25:
            return "%g" % fnum(run.log.col(row, "step"))
    return "never"


def spread(xs, spec="%.4f"):
    """mean (min..max) of the finite values, or "-"."""
    xs = [x for x in xs if math.isfinite(x)]
    if not xs:
        return "-"
    return (spec + " (" + spec + ".." + spec + ")") % (sum(xs) / len(xs), min(xs), max(xs))


def fold_table(paths):
    """Per task, optimizer and arm (sqrt, none, none+fold): the final loss (validation on text: the
    verdicts' measure), the gap to sqrt of the same seed, the heads below 10% of uniform at 10% of the
    run, the effective multiplier at the start, 10%, 50% and the end of the run (mean over seeds), and
    the step per seed at which it reached d_head^(-1/4) (halfway_step: how long a fold held), and per
    seed whether the run failed as the forgotten scale does (judge), trained like sqrt (within the
    task's tolerance, no more heads collapsed) or in between."""
    cells, mates = fold_runs(paths)
    head = ["task", "optim", "run", "seeds", "loss on", "final loss mean (min..max)", "gap to sqrt (min..max)",
            "heads<0.1@10%", "c@0", "c@10%", "c@50%", "c@end", "c>=d^-1/4 at step", "verdict"]
    rows = [head]
    tasks = sorted({k[0] for k in cells}, key=lambda t: (t not in TOY_TASKS, t))
    for task in tasks:
        for optim in FOLD_OPTIMS + tuple(sorted({k[1] for k in cells if k[1] not in FOLD_OPTIMS})):
            for arm in FOLD_ARMS:
                rs = sorted(cells.get((task, optim, arm), []), key=lambda r: r.path)
                if not rs:
                    continue
                on = "validation" if rs[0].rule == "text" and all(math.isfinite(r.val) for r in rs) else "train"
                loss = [r.val if on == "validation" else r.stats["final_loss"] for r in rs]
                gaps, lows, verdicts = [], [], {"fails": 0, "like sqrt": 0, "between": 0}
                for r in rs:
                    lows.append(str(heads_low(r)) if heads_low(r) is not None else "nm")
                    for b in mates.get(r.path, []):
                        v = judge(r, b)
                        gaps.append(v["gap"])
                        tol = PASS_GAP if r.rule == "count" else TEXT_GAP
                        if v["ok"]:
                            verdicts["fails"] += 1
                        elif v["ok"] is False and v["gap"] < tol and v["low_a"] is not None and v["low_a"] <= v["low_b"]:
                            verdicts["like sqrt"] += 1
                        else:
                            verdicts["between"] += 1
                mult = ["%.3g" % (sum(x) / len(x)) if x else "-" for x in (
                    [m for m in (qk_mult(r.log, row_at(r.log, f)) for r in rs) if math.isfinite(m)]
                    for f in (0.0, 0.1, 0.5, 1.0))]
                n = sum(verdicts.values())
                rows.append([task, optim, arm, str(len(rs)), on, spread(loss), spread(gaps, "%.3f") if gaps else "-",
                             "%s/%d" % (",".join(lows), rs[0].stats["nheads"])] + mult + [
                             ",".join(halfway_step(r) for r in rs)] + [
                    ", ".join("%s %d/%d" % (k, c, n) for k, c in verdicts.items() if c) if n else "-"])
    return align(rows)


def fold_curves(paths, outdir):
    """Per task, optimizer and arm, OUTDIR/TASK-OPTIM-ARM.dat: step, the effective multiplier (mean
    over layers) mean, min and max over seeds, and the loss (validation on text, where logged; else
    training) mean, min and max: the figure's lines."""
    cells, _ = fold_runs(paths)
    os.makedirs(outdir, exist_ok=True)
    for (task, optim, arm), rs in sorted(cells.items()):
        col = "val_loss" if all("val_loss" in r.log.index for r in rs) else "loss"
        steps = sorted({fnum(r.log.col(row, "step")) for r in rs for row in r.log.rows})
        lines = ["# step\tc_mean\tc_min\tc_max\t%s_mean\t%s_min\t%s_max" % (col, col, col)]
        for st in steps:
            c, l = [], []
            for r in rs:
                for row in r.log.rows:
                    if fnum(r.log.col(row, "step")) == st:
                        c.append(qk_mult(r.log, row))
                        l.append(fnum(r.log.col(row, col)))
            c = [x for x in c if math.isfinite(x)]
            l = [x for x in l if math.isfinite(x)]
            if len(c) < len(rs):   # a step not every seed logged (or a val_loss not evaluated there)
                continue
            lines.append("%g\t%.6g\t%.6g\t%.6g\t%s" % (st, sum(c) / len(c), min(c), max(c),
                         "%.6g\t%.6g\t%.6g" % (sum(l) / len(l), min(l), max(l)) if len(l) == len(rs) else "nan\tnan\tnan"))
        with open(os.path.join(outdir, "%s-%s-%s.dat" % (task, optim, arm)), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return 0


# ---- the logit features on real code, today's recipe (science.sh capcode) ----------------------
FEATURE_KEYS_CODE = [("softcap", "cap {}"), ("sinks", "sinks"), ("kv_heads", "kv-heads {}"), ("window", "window {}"),
                     ("alibi", "ALiBi"), ("attn_dropout", "dropout {}")]


def code_feature(log):
    """The one logit feature a run of the logits-code preset has ("cap 50", "sinks", ...), or "no cap"."""
    for key, label in FEATURE_KEYS_CODE:
        v = log.header.get(key)
        if v not in (None, "", "0", "-"):
            return label.format("%g" % fnum(v))   # the header's float (0.100000001) as it was given
    return "no cap"


def heads_path(log):
    """Per logged row: (step, the lowest head's entropy / uniform, the mean, the largest max_logit)."""
    unif = fnum(log.header.get("ref_entropy_uniform", "0"))
    N = [log.index[n] for n in log.names("nent_")]
    M = [log.index[n] for n in log.names("maxlogit_")]
    out = []
    for r in log.rows:
        nv = [fnum(r[i]) for i in N]
        out.append((fnum(log.col(r, "step")), min(nv) if nv else math.nan,
                    over_uniform(fnum(log.col(r, "ent_mean")), unif), max(fnum(r[i]) for i in M) if M else math.nan))
    return out


def feature_table(dir_):
    """table.tsv of science.sh capcode: per feature, none against sqrt over seeds: the final
    validation loss (mean, min, max), the per-seed gap (none − sqrt, min..max), the unscaled runs'
    heads below 10% of uniform at 10% of the steps, the step at which their lowest head first fell
    below 10% of uniform (per seed; "-": never) and how many ended above it again (recovered),
    and their largest logit at the end (mean over seeds)."""
    runs = {}
    for p in sorted(glob.glob(os.path.join(dir_, "runs", "*.tsv"))):
        if not os.path.exists(p[:-4] + ".done"):
            continue
        log = Log(p)
        runs.setdefault(code_feature(log), {}).setdefault(log.header.get("scale"), {})[log.header.get("seed")] = log
    order = sorted(runs, key=lambda f: (not f.endswith("cap"), f.split()[0] != "cap",
                                        -fnum(f.split()[1]) if f.startswith("cap ") else 0, f))
    head = ["feature", "seeds", "none_val", "none_min", "none_max", "sqrt_val", "sqrt_min", "sqrt_max", "gap_min", "gap_max",
            "none_heads_low10", "none_collapse_step", "none_recovered", "none_max_logit_end", "sqrt_max_logit_end"]
    out = [head]
    for f in order:
        n, q = runs[f].get("none", {}), runs[f].get("sqrt", {})
        seeds = sorted(set(n) & set(q), key=fnum)
        if not seeds:
            continue
        nv = [last_value(n[s], "val_loss") for s in seeds]
        qv = [last_value(q[s], "val_loss") for s in seeds]
        gaps = [a - b for a, b in zip(nv, qv)]
        low, steps, rec, mxn, mxq = [], [], 0, [], []
        for s in seeds:
            st = log_stats(n[s])
            low.append(str(st["low10"]))
            path = heads_path(n[s])
            first = next((step for step, lo, _, _ in path if lo < LOW_HEAD), None)
            steps.append("-" if first is None else "%d" % first)
            rec += first is not None and path[-1][1] >= LOW_HEAD
            mxn.append(path[-1][3])
            mxq.append(heads_path(q[s])[-1][3])
        m = lambda xs: "%.4f" % (sum(xs) / len(xs))
        out.append([f, "%d" % len(seeds), m(nv), "%.4f" % min(nv), "%.4f" % max(nv), m(qv), "%.4f" % min(qv),
                    "%.4f" % max(qv), "%.4f" % min(gaps), "%.4f" % max(gaps),
                    "%s/%d" % (",".join(low), len(n[seeds[0]].names("nent_"))),
                    ",".join(steps), "%d/%d" % (rec, sum(1 for x in steps if x != "-")), "%.1f" % (sum(mxn) / len(mxn)),
                    "%.1f" % (sum(mxq) / len(mxq))])
    return "\n".join("\t".join(r) for r in out) + "\n"


def feature_curves(dir_, features, outdir):
    """The code figure's data: per feature of `features` ("no cap", "cap 50", ...) and scale, a file
    FEATURE_SCALE.tsv (spaces as _) with the step, the mean over seeds of the validation loss and of
    the lowest head's entropy / uniform, with a header row."""
    runs = {}
    for p in sorted(glob.glob(os.path.join(dir_, "runs", "*.tsv"))):
        if os.path.exists(p[:-4] + ".done"):
            log = Log(p)
            runs.setdefault((code_feature(log), log.header.get("scale")), []).append(log)
    os.makedirs(outdir, exist_ok=True)
    for f in features:
        for scale in ("none", "sqrt"):
            logs = runs.get((f, scale), [])
            rows = {}
            for log in logs:
                for (step, lo, _, _), r in zip(heads_path(log), log.rows):
                    v = fnum(log.col(r, "val_loss"))
                    e = rows.setdefault(step, [[], []])
                    if not math.isnan(v):
                        e[0].append(v)
                    e[1].append(lo)
            with open(os.path.join(outdir, "%s_%s.tsv" % (f.replace(" ", "_"), scale)), "w", encoding="utf-8") as fh:
                fh.write("step\tval_loss\tlow_head\n")
                for step in sorted(rows):
                    v, lo = rows[step]
                    fh.write("%d\t%s\t%.6f\n" % (step, "%.6f" % (sum(v) / len(v)) if v else "nan", sum(lo) / len(lo)))
    return 0


# ---- plot.sh's legend -------------------------------------------------------------------
COINCIDE = 0.002   # a curve within this share of the plot's loss range of an earlier one is drawn under it


def legend(paths):
    """One line per log for scripts/plot.sh: its label, a tab, 1 when its loss curve lies on an
    earlier one's (within COINCIDE of the loss range at every common step: the plot draws it dashed,
    with markers, and the label names the curve it lies on) else 0. The label is the run's name,
    its kernel and features, and for a kernel measured from outside under a softcap what its
    logged multiplier and max_logit are (not what a built-in op logs: docs/logs.md)."""
    logs = [Log(p) for p in paths]
    curves = []
    for log in logs:
        c = {}
        for r in log.rows:
            v = fnum(log.col(r, "loss"))
            if math.isfinite(v):
                c[fnum(log.col(r, "step"))] = v
        curves.append(c)
    vals = [v for c in curves for v in c.values()]
    tol = COINCIDE * (max(vals) - min(vals)) if vals else 0.0
    out = []
    for i, (p, log) in enumerate(zip(paths, logs)):
        h = log.header
        feat = features(h)
        label = "%s [%s%s]" % (run_name(p), kernel_name(h), "" if feat == "-" else " " + feat)
        if h.get("attn_scale_columns") == "measured" and h.get("softcap", "0") not in ("0", "-"):
            label += " (softcap: multiplier = fitted slope, max_logit uncapped)"
        same = 0
        for j in range(i):
            common = [s for s in curves[i] if s in curves[j]]
            if len(common) >= 2 and max(abs(curves[i][s] - curves[j][s]) for s in common) <= tol:
                d = max(abs(curves[i][s] - curves[j][s]) for s in common)
                label += " = %s's curve (%s)" % (run_name(paths[j]), "identical" if d == 0 else "max diff %.2g" % d)
                same = 1
                break
        out.append("%s\t%d" % (label.replace("\t", " "), same))
    return "\n".join(out) + "\n"


# ---- precision (docs/results.md#does-precision-change-the-failure) ---------------------
def run_max(log, prefix):
    """The largest finite value of the columns named prefix* over every row (nan: none)."""
    mx = math.nan
    for r in log.rows:
        for c in log.names(prefix):
            v = fnum(log.col(r, c))
            if math.isfinite(v) and not (v <= mx):
                mx = v
    return mx


def precision_table(paths, ratio_min=PASS_RATIO, gap_min=PASS_GAP):
    """A markdown table of the main result per precision and seed: the unscaled run (none) against
    the scaled (sqrt) of the same settings, precision included; the largest logit either reached;
    for fp16 the loss scale at the end and the steps skipped for overflow. Then a line per
    precision."""
    runs = {}
    for p in paths:
        run = Run(p)
        h = run.header
        if run.scale not in ("none", "sqrt"):
            continue
        runs.setdefault((h["precision"], h.get(SEED_KEY, "-"), run.scale), []).append(run)
    for k, v in runs.items():
        if len(v) > 1:
            raise LogError("precision: %d runs of %s seed %s scale %s (%s): pass one of each" % (
                len(v), k[0], k[1], k[2], ", ".join(r.path for r in v)))
        runs[k] = v[0]
    order = {"fp32": 0, "bf16": 1, "fp16": 2}
    keys = sorted({(pr, seed) for pr, seed, _ in runs}, key=lambda k: (order.get(k[0], 9), k[0], int(k[1]) if k[1].isdigit() else 0))
    out = ["| precision | seed | loss none | loss sqrt | ratio | gap (nats) | failure | none: heads < 10% of uniform at 10% "
           "| max logit none | max logit sqrt | loss scale at the end (none, sqrt) | steps skipped for overflow (none, sqrt) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    per = {}
    for pr, seed in keys:
        a, b = runs.get((pr, seed, "none")), runs.get((pr, seed, "sqrt"))
        if a is None or b is None:
            out.append("| %s | %s | %s |" % (pr, seed, "no %s run: no verdict" % ("none" if a is None else "sqrt")))
            continue
        diff = setting_differences(a.header, b.header, ("scale",))
        j = judge(a, b, ratio_min, gap_min)
        ratio, gap, ok = j["ratio"], j["gap"], j["ok"]
        per.setdefault(pr, []).append((ok, ratio, gap))

        def amp(run, col):
            return run.log.col(run.log.rows[-1], col) if col in run.log.index else "-"
        out.append("| %s | %s | %.4f | %.4f | %.1fx | %.3f | %s | %s | %.1f | %.1f | %s, %s | %s, %s |" % (
            pr, seed, j["x"], j["y"], ratio, gap,
            ("reproduced" if ok else j["text"]) + (" (settings differ: %s)" % ", ".join(diff) if diff else ""),
            heads_text(j["low_a"], a), run_max(a.log, "maxlogit_"), run_max(b.log, "maxlogit_"),
            amp(a, "loss_scale"), amp(b, "loss_scale"), amp(a, "overflow_skips"), amp(b, "overflow_skips")))
    out.append("")
    for pr in sorted(per, key=lambda k: order.get(k, 9)):
        v = per[pr]
        out.append("%s: failure reproduced in %d of %d seeds; ratio %.1f-%.1fx, gap %.3f-%.3f nats" % (
            pr, sum(1 for x in v if x[0]), len(v), min(x[1] for x in v), max(x[1] for x in v),
            min(x[2] for x in v), max(x[2] for x in v)))
    return "\n".join(out) + "\n"


# ---- TSV tables ----------------------------------------------------------------------
def read_tsv(path):
    """Header names and rows (lists of strings) of a TSV whose first line names its columns."""
    with open(path, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if l.rstrip("\n") != ""]
    if not lines:
        raise LogError("%s: empty" % path)
    return lines[0].split("\t"), [l.split("\t") for l in lines[1:]]


def align(rows):
    """Columns aligned with two spaces between them; the last column unpadded (tsv.awk)."""
    width = {}
    for r in rows:
        for i, f in enumerate(r):
            width[i] = max(width.get(i, 0), len(f))
    out = []
    for r in rows:
        out.append("".join("%-*s  " % (width[i], f) for i, f in enumerate(r[:-1])) + r[-1])
    return "\n".join(out) + ("\n" if out else "")


# ---- a sweep: summary.tsv and aggregate.tsv ----------------------------------------------
def manifest(dir_):
    """[(id, {key: value as the manifest wrote it, in order})] of DIR/manifest.tsv (a plugin's
    attn by its name)."""
    runs, names = [], plugin_names(dir_)
    with open(os.path.join(dir_, "manifest.tsv"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            rid, _, flags = line.partition("\t")
            t = flags.split(" ")
            kv = {}
            for i in range(0, len(t) - 1, 2):
                kv[t[i][2:].replace("-", "_")] = t[i + 1]
            if kv.get("attn") in names:   # a plugin by the name `sweep plan --plugin NAME=FILE` gave it
                kv["attn"] = names[kv["attn"]]
            runs.append((rid, kv))
    return runs


def plugin_names(dir_):
    """{"plugin:FILE[:SYMBOL]": NAME} of DIR/plugins.tsv (written by `sweep plan --plugin`)."""
    names = {}
    path = os.path.join(dir_, "plugins.tsv")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, _, spec = line.rstrip("\n").partition("\t")
                if name and spec:
                    names[spec] = name
    return names


def sweep_keys(runs, fixed):
    """The fixed keys, then every other key of the manifest that varies or is not in every run."""
    first, order, count, varies = {}, [], {}, set()
    for _, kv in runs:
        for k, v in kv.items():
            if k not in first:
                first[k] = v
                order.append(k)
                count[k] = 0
            count[k] += 1
            if v != first[k]:
                varies.add(k)
    return list(fixed) + [k for k in order if k not in fixed and (k in varies or count[k] < len(runs))]


FLOAT_RE = re.compile(r"^-?[0-9]+\.[0-9]+(e[-+]?[0-9]+)?$")


def collect(dir_, fixed=SWEEP_FIXED_KEYS, compare=COMPARE, ratio_min=PASS_RATIO, gap_min=PASS_GAP, err=sys.stderr):
    """Writes DIR/summary.tsv; returns (its path, finished ids, unfinished ids)."""
    runs = manifest(dir_)
    keys = sweep_keys(runs, fixed)
    key, low, high = compare
    if key not in keys:
        raise LogError("collect: --compare %s: no such key in the sweep" % key)
    done, missing = [], []
    for rid, _ in runs:
        flag = os.path.join(dir_, "runs", rid + ".done")   # its summary line: the run finished
        (done if os.path.exists(flag) and os.path.getsize(flag) > 0 else missing).append(rid)
    if not done:
        raise LogError("collect: no run of %s has finished yet" % dir_)
    by_id = dict(runs)
    named = set(plugin_names(dir_).values())   # the plugins the sweep named (`plan --plugin NAME=FILE`)
    rows, cells, ref = [], [], {}
    for rid in done:
        run = Run(os.path.join(dir_, "runs", rid + ".tsv"))
        log, s = run.log, run.stats
        vals = []
        for k in keys:
            if k in by_id[rid]:
                vals.append(by_id[rid][k])   # as the manifest wrote it (3e-3, not the log's 0.00300000003)
            else:
                v = log.header.get(k, "-")
                vals.append("%.6g" % float(v) if FLOAT_RE.match(v) else v)
        # the kernel and features columns; a plugin by the name the sweep gave it
        attn = by_id[rid].get("attn")
        vals += [attn if attn in named else kernel_name(log.header), features(log.header)]
        if key == "scale" and (run.scale_note or run.scale.endswith(FOLD)) and run.scale != vals[keys.index(key)]:
            vals[keys.index(key)] = run.scale   # a kernel measured to apply another scale than it was passed, or none+fold
        # a folded run pairs with sqrt as none does: W_q's initialisation is part of the compared arm (ARM_KEYS)
        cell = "|".join(v for k, v in zip(keys + ["kernel", "features"], vals)
                        if k != key and not (key == "scale" and k in ARM_KEYS))
        m = len(rows)
        if vals[keys.index(key)] == high:
            ref[cell] = m
        rows.append((rid, vals, run))
        cells.append(cell)
    head = ["id"] + keys + ["kernel", "features", "final_loss", "ent_end", "ent0", "ent10", "heads_low10",
                            "max_logit", "ratio", "gap", "reproduced"]
    lines = ["\t".join(head)]
    for m, (rid, vals, run) in enumerate(rows):
        v, s = "-\t-\t-", run.stats
        if vals[keys.index(key)] in (low, low + FOLD) and cells[m] in ref:
            j = judge(run, rows[ref[cells[m]]][2], ratio_min, gap_min)
            v = "%.2f\t%.4f\t%s" % (j["ratio"], j["gap"], "yes" if j["ok"] else NOT_MEASURED if j["ok"] is None else "no")
        lines.append("\t".join([rid] + vals + [
            "%.6f" % s["final_loss"], "%.4f" % s["ent_end"], "%.4f" % s["ent0"], "%.4f" % s["ent10"],
            s["low10"] if s["low10"] == NOT_MEASURED else "%s/%d" % (s["low10"], s["nheads"]), "%.2f" % s["max_logit"],
            v]))
    path = os.path.join(dir_, "summary.tsv")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path, done, missing


def aggregate(summary_path):
    """mean, min, max over seeds of each cell (every setting but the seed), as TSV text."""
    head, rows = read_tsv(summary_path)
    c = {n: i for i, n in enumerate(head)}
    settings = [i for i in range(1, c["final_loss"]) if i != c.get(SEED_KEY)]
    out = ["\t".join([head[i] for i in settings] + [
        "seeds", "final_loss_mean", "final_loss_min", "final_loss_max", "ent10_mean", "ent10_min", "ent10_max",
        "heads_low10", "ratio_min", "ratio_max", "gap_min", "gap_max", "reproduced"])]
    order, cell = [], {}
    for r in rows:
        k = "\t".join(r[i] for i in settings)
        if k not in cell:
            order.append(k)
            cell[k] = {"n": 0, "loss": [], "ent": [], "low": [], "nh": "", "ratio": [], "gap": [], "yes": 0, "nm": 0}
        a = cell[k]
        a["n"] += 1
        a["loss"].append(fnum(r[c["final_loss"]]))
        a["ent"].append(fnum(r[c["ent10"]]))
        low, _, nh = r[c["heads_low10"]].partition("/")
        a["low"].append(low)
        a["nh"] = nh
        if r[c["ratio"]] != "-":
            a["ratio"].append(fnum(r[c["ratio"]]))
            a["gap"].append(fnum(r[c["gap"]]))
            a["yes"] += r[c["reproduced"]] == "yes"
            a["nm"] += r[c["reproduced"]] == NOT_MEASURED
    for k in order:
        a = cell[k]
        sl = 0.0
        for x in a["loss"]:
            sl += x
        se = 0.0
        for x in a["ent"]:
            se += x
        if a["ratio"]:
            v = "%.2f\t%.2f\t%.4f\t%.4f\t%d/%d%s" % (min(a["ratio"]), max(a["ratio"]), min(a["gap"]), max(a["gap"]),
                                                   a["yes"], len(a["ratio"]),
                                                   " (%d not measured)" % a["nm"] if a["nm"] else "")
        else:
            v = "-\t-\t-\t-\t-"
        low = NOT_MEASURED if all(x == NOT_MEASURED for x in a["low"]) else "%s/%s" % (",".join(a["low"]), a["nh"])
        out.append("%s\t%d\t%.6f\t%.6f\t%.6f\t%.4f\t%.4f\t%.4f\t%s\t%s" % (
            k, a["n"], sl / a["n"], min(a["loss"]), max(a["loss"]), se / a["n"], min(a["ent"]), max(a["ent"]), low, v))
    return "\n".join(out) + "\n"


def brief(agg_path, always=COMPARE[0]):
    """The settings that vary (and `always`, the kernel and the features), and per cell the loss,
    entropy and verdict ranges."""
    head, rows = read_tsv(agg_path)
    c = {n: i for i, n in enumerate(head)}
    keep = []
    for i in range(c["seeds"]):
        if len({r[i] for r in rows}) > 1 or head[i] in (always, "kernel", "features"):
            keep.append(i)
    w = {i: max([len(head[i])] + [len(r[i]) for r in rows]) for i in keep}
    out = ["".join("%-*s  " % (w[i], head[i]) for i in keep) + "%5s  %-26s %7s  %-14s %-13s %-15s %s" % (
        "seeds", "final_loss mean (min..max)", "ent@10%", "heads<0.1@10%", "ratio", "gap (nats)", "reproduced")]
    for r in rows:
        f = lambda n: r[c[n]]
        ratio = "-" if f("ratio_min") == "-" else "%.1f..%.1fx" % (fnum(f("ratio_min")), fnum(f("ratio_max")))
        gap = "-" if f("gap_min") == "-" else "%.2f..%.2f" % (fnum(f("gap_min")), fnum(f("gap_max")))
        loss = "%.4f (%.4f..%.4f)" % (fnum(f("final_loss_mean")), fnum(f("final_loss_min")), fnum(f("final_loss_max")))
        out.append("".join("%-*s  " % (w[i], r[i]) for i in keep) + "%5d  %-26s %7s  %-14s %-13s %-15s %s" % (
            int(fnum(f("seeds"))), loss, num(fnum(f("ent10_mean")), "%.3f"), f("heads_low10"), ratio, gap,
            f("reproduced")))
    return "\n".join(out) + "\n"


def table(summary_path, selection):
    """The header and the rows whose columns have the selected values, aligned."""
    head, rows = read_tsv(summary_path)
    c = {n: i for i, n in enumerate(head)}
    sel = []
    for kv in selection:
        k, _, v = kv.partition("=")
        if k not in c:
            raise LogError("table: no column %s in summary.tsv" % k)
        sel.append((c[k], v))
    return align([head] + [r for r in rows if all(r[i] == v for i, v in sel)])


def plotdata(agg_path, outdir, x="d_head", panel="optim", line=COMPARE[0]):
    """One TSV per line of the sweep's figures, OUTDIR/<panel value>\\t<NNNN> with a header row
    (x, final_loss_mean/min/max, ent10_mean/min/max), sorted by x, and its title in
    <...>.title; a line is `line`'s value and every other setting that varies within the panel."""
    head, rows = read_tsv(agg_path)
    c = {n: i for i, n in enumerate(head)}
    for k in (x, panel, line):
        if k not in c:
            raise LogError("plotdata: no column %s in %s" % (k, agg_path))
    seen = {}
    for r in rows:
        for i in range(c["seeds"]):
            seen.setdefault((r[c[panel]], i), set()).add(r[i])
    num, data = {}, {}
    for r in rows:
        title = r[c[line]]
        for i in range(c["seeds"]):
            if i not in (c[x], c[panel], c[line]) and len(seen[(r[c[panel]], i)]) > 1:
                title += " %s=%s" % (head[i], r[i])
        k = (r[c[panel]], title)
        if k not in num:
            num[k] = "%04d" % (len(num) + 1)
            data[k] = []
        data[k].append([r[c[x]]] + [r[c[n]] for n in ("final_loss_mean", "final_loss_min", "final_loss_max",
                                                       "ent10_mean", "ent10_min", "ent10_max")])
    # x_pos: x itself, or for categories (attn=composed, mine, ...) their place in sorted order; the
    # figure then names them on its axis. Returns True for categories.
    xs = sorted({r[c[x]] for r in rows})
    categorical = not all(FLOAT_RE.match(v) or re.match(r"^-?[0-9]+$", v) for v in xs)
    pos = {v: str(i + 1) for i, v in enumerate(xs)} if categorical else {v: v for v in xs}
    cols = [x, "x_pos", "final_loss_mean", "final_loss_min", "final_loss_max", "ent10_mean", "ent10_min", "ent10_max"]
    os.makedirs(outdir, exist_ok=True)
    for (p, title), n in num.items():
        base = os.path.join(outdir, "%s\t%s" % (p, n))
        with open(base + ".title", "w", encoding="utf-8") as f:
            f.write(title + "\n")
        with open(base, "w", encoding="utf-8") as f:
            f.write("\t".join(cols) + "\n")
            for r in sorted(data[(p, title)], key=lambda r: fnum(pos[r[0]])):
                f.write("\t".join([r[0], pos[r[0]]] + r[1:]) + "\n")
    return categorical


# ---- an aggregate made before 0.23, judged by its task's rule ----------------------------------
def rejudge_aggregate(agg_path, text_gap=TEXT_GAP):
    """An aggregate.tsv's text, its text-task cells' `reproduced` recomputed by judge's rule from what
    the aggregate holds (0.22's collect judged code by the counting task's 3x): per seed, the unscaled
    cell's heads below 10% against the scaled cell's of the same settings (the heads_low10 lists are in
    seed order in both), and the gap range: every seed passes the gap when gap_min >= text_gap, none
    when gap_max < text_gap; a range across it cannot be split by seed from an aggregate (an error:
    collect the runs again). Counting cells are unchanged (the rule is the same)."""
    head, rows = read_tsv(agg_path)
    c = {n: i for i, n in enumerate(head)}
    settings = [i for i in range(c["seeds"]) if head[i] != "scale"]
    sqrt = {tuple(r[i] for i in settings): r for r in rows if r[c["scale"]] == "sqrt"}
    for r in rows:
        if r[c["reproduced"]] == "-" or r[c["task"]] in TOY_TASKS:
            continue
        q = sqrt.get(tuple(r[i] for i in settings))
        if q is None:
            raise LogError("%s: the %s cell has no sqrt cell of the same settings" % (agg_path, r[c["scale"]]))
        lo = fnum(r[c["gap_min"]])
        a = r[c["heads_low10"]].partition("/")[0].split(",")
        b = q[c["heads_low10"]].partition("/")[0].split(",")
        if NOT_MEASURED in (r[c["heads_low10"]], q[c["heads_low10"]]) or len(a) != len(b):
            r[c["reproduced"]] = "0/%s (%s not measured)" % (r[c["seeds"]], r[c["seeds"]])
            continue
        collapsed = sum(1 for x, y in zip(a, b) if x.isdigit() and y.isdigit() and int(x) > int(y))
        if collapsed and lo < text_gap <= fnum(r[c["gap_max"]]):
            raise LogError("%s: gaps %.4f..%s straddle %g nats where heads collapsed: which seeds pass needs the "
                           "runs (collect again)" % (agg_path, lo, r[c["gap_max"]], text_gap))
        r[c["reproduced"]] = "%d/%d" % (collapsed if lo >= text_gap else 0, len(a))
    return "\n".join("\t".join(r) for r in [head] + rows) + "\n"


# ---- another trainer's log into tapegrad's format (tapegrad-logs import) ----------------------
def import_log(src, dst, cols, entropy, max_logit, task, scale, steps, seq_len, causal, unif, settings, overwrite,
               err=sys.stderr):
    """Reads a CSV or TSV whose first line names its columns (a .tsv: tabs; else commas) and writes
    a tapegrad log with scripts/python/tapegrad_log.py: cols maps tapegrad's columns (step, loss,
    val_loss) to the file's; entropy is the per-head entropy columns' name with {l} and {h} for the
    layer and head (nats), max_logit the largest logit's with {l} (and {h}). A row without a loss is
    skipped (said); an empty cell elsewhere is nan; anything else that is not a number is an error
    naming its line and column."""
    import csv
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
    import tapegrad_log as tl
    with open(src, newline="", encoding="utf-8-sig") as f:   # -sig: a spreadsheet's byte-order mark is not a column's name
        lines = [l for l in f if not l.startswith("#")]
    delim = "\t" if src.endswith(".tsv") or (lines and "\t" in lines[0] and "," not in lines[0]) else ","
    table = list(csv.reader(lines, delimiter=delim))
    if not table:
        raise LogError("%s: empty (no line of column names)" % src)
    names = table[0]
    where = {n: i for i, n in enumerate(names)}

    def need(col, flag):
        if col not in where:
            raise LogError("%s: no column '%s' (%s); its columns: %s" % (src, col, flag, ", ".join(names[:30])))
        return where[col]
    ci = {k: need(v, "--col %s=%s" % (k, v)) for k, v in cols.items()}
    for k in ("step", "loss"):
        if k not in ci:
            raise LogError("import: --col %s=COLUMN is required (the file's column for tapegrad's %s)" % (k, k))

    def grid(pattern, flag, per_head=True):
        if "{l}" not in pattern or (per_head and "{h}" not in pattern):
            raise LogError("import: %s '%s': the column's name with {l} for the layer%s" % (
                flag, pattern, " and {h} for the head" if per_head else ""))
        rx = re.compile("^" + re.escape(pattern).replace(re.escape("{l}"), "(?P<l>[0-9]+)")
                        .replace(re.escape("{h}"), "(?P<h>[0-9]+)") + "$")
        found = {}
        for n, i in where.items():
            m = rx.match(n)
            if m:
                found[(int(m.group("l")), int(m.group("h")) if "h" in m.groupdict() and m.group("h") else 0)] = i
        if not found:
            raise LogError("%s: no column matches %s '%s'; its columns: %s" % (src, flag, pattern, ", ".join(names[:30])))
        L = max(l for l, _ in found) + 1
        H = max(h for _, h in found) + 1
        for l in range(L):
            for h in range(H):
                if (l, h) not in found:
                    raise LogError("%s: no column '%s' (%s '%s' found others up to layer %d, head %d)" % (
                        src, pattern.replace("{l}", str(l)).replace("{h}", str(h)), flag, pattern, L - 1, H - 1))
        return L, H, found
    L, H, ent = grid(entropy, "--entropy")
    mx = grid(max_logit, "--max-logit", per_head=False) if max_logit else None

    def cell(row, i, lineno):
        v = row[i].strip() if i < len(row) else ""
        if v == "":
            return math.nan
        try:
            return float(v)
        except ValueError:
            raise LogError("%s:%d: column %s: not a number: %r" % (src, lineno, names[i], v))
    rows, skipped = [], 0
    for lineno, row in enumerate(table[1:], 2):
        if not any(x.strip() for x in row):
            continue
        step, loss = cell(row, ci["step"], lineno), cell(row, ci["loss"], lineno)
        if math.isnan(step):
            raise LogError("%s:%d: column %s: no step" % (src, lineno, cols["step"]))
        if math.isnan(loss):
            skipped += 1
            continue
        rows.append((lineno, row, step, loss))
    if len(rows) < 2:
        raise LogError("%s: fewer than 2 rows with a loss" % src)
    if steps is None:
        steps = int(rows[-1][2])
        print("import: steps=%d: the last step of %s (--steps N to say the run's length)" % (steps, src), file=err)
    if skipped:
        print("import: %d rows of %s have no %s: skipped" % (skipped, src, cols["loss"]), file=err)
    nl = mx[0] if mx else L
    if mx and nl != L:
        raise LogError("import: --max-logit has %d layers, --entropy %d" % (nl, L))
    if os.path.exists(dst) and not overwrite:
        raise LogError("import: %s exists (--overwrite to replace it)" % dst)
    tmp = "%s.import%d" % (dst, os.getpid())   # renamed over dst when whole: nothing half-written
    log = tl.RunLog(tmp, task=task, scale=scale, steps=steps, layers=L, heads=H, seq_len=seq_len, causal=causal,
                    entropy_uniform=unif, max_logit=bool(mx), val_loss="val_loss" in ci, overwrite=True,
                    program="import", source=os.path.basename(src), framework=settings.pop("framework", "import"),
                    **settings)
    try:
        for lineno, row, step, loss in rows:
            e = [[cell(row, ent[(l, h)], lineno) for h in range(H)] for l in range(L)]
            m = None
            if mx:
                m = [[cell(row, i, lineno) for (ll, _), i in sorted(mx[2].items()) if ll == l] for l in range(L)]
                m = [max(x) if all(math.isfinite(y) for y in x) else math.nan for x in m]
            log.row(int(step), loss, entropy=e, max_logit=m,
                    val_loss=cell(row, ci["val_loss"], lineno) if "val_loss" in ci else None)
    except (LogError, ValueError):
        log.close()
        os.unlink(tmp)
        raise
    log.close()
    os.replace(tmp, dst)
    return len(rows)


# ---- the command line -------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """argparse, with a usage error as every other error here: 'tglogs.py VERB: ...', exit 2."""

    def error(self, message):
        raise LogError("%s: %s (%s --help)" % (self.prog.split(" ", 1)[-1], message, self.prog))


def number(kind):
    def parse(s):
        try:
            return kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError("'%s' is not a number" % s)
    return parse


def verbs():
    """Each command's parser and what it runs (given the parsed options)."""
    table = {}

    def verb(name, help, run, *args):
        p = Parser(prog="tglogs.py " + name, description=help)
        for names, kw in args:
            p.add_argument(*names, **kw)
        table[name] = (p, run)

    def pos(name, help, nargs=None):
        return ((name,), dict(help=help, nargs=nargs) if nargs else dict(help=help))

    def flag(name, help, default, kind=str):
        return (("--" + name,), dict(help=help + " (default: %s)" % (default,), default=default,
                                     type=number(kind) if kind is not str else str, metavar=name.upper().replace("-", "_")))

    logs = pos("log", "a run log (TSV)", "*")

    def stats(a):
        keys, bad = [k for k in a.keys.split(",") if k], 0
        for p in a.log:
            try:
                print(stats_line(Log(p), keys))
            except (LogError, OSError) as e:
                print(e, file=sys.stderr)
                bad = 1
        return bad

    def summarize_(a):
        if not a.log:
            raise LogError("usage: scripts/summarize.sh LOG.tsv ...")
        return summarize(a.log)

    def collect_(a):
        key, _, pair = a.compare.partition("=")
        low, _, high = pair.partition(":")
        if not key or not low or not high:
            raise LogError("collect: --compare '%s': expected KEY=A:B" % a.compare)
        path, done, missing = collect(a.dir, a.keys_fixed.split(","), (key, low, high), a.pass_ratio, a.pass_gap)
        agg = os.path.join(a.dir, "aggregate.tsv")
        with open(agg + ".tmp", "w", encoding="utf-8") as f:
            f.write(aggregate(path))
        os.replace(agg + ".tmp", agg)
        sys.stdout.write(brief(agg, key))
        print("%d %d %s" % (len(done), len(missing), " ".join(missing[:20]) + (" ..." if len(missing) > 20 else "")),
              file=sys.stderr)
        return 0

    def out(text):
        sys.stdout.write(text)
        return 0

    def learned_runs_(a):
        m = a.map
        return out(learned_runs(a.summary, a.runs_dir, a.band, os.path.join(m, "band.tsv") if m else "",
                                os.path.join(m, "summary.tsv") if m else "", a.reach))

    def maps_topkey_(a):
        rows = []
        for x in a.pair:
            scale, _, path = x.partition("=")
            rows += maps_topkey(scale, open(path, encoding="utf-8").read() if path != "-" else sys.stdin.read())
        head = ["scale", "layer", "head", "step", "key_pos", "key_token", "share_of_rows"]
        return out("\n".join("\t".join(x) for x in [head] + rows) + "\n")

    def logat_(a):
        text, bad = logat(a.log, a.steps.split(","))
        sys.stdout.write(text)
        return bad

    def plotdata_(a):
        if plotdata(a.aggregate, a.outdir, a.x, a.panel, a.line):
            print("categorical")
        return 0

    def align_(a):
        rows = []
        for p in a.file:
            with open(p, encoding="utf-8") as f:
                rows += [l.rstrip("\n").split("\t") for l in f]
        return out(align(rows))

    def col(a):
        head, rows = read_tsv(a.file)
        c = {n: i for i, n in enumerate(head)}
        for n in a.name:
            if n not in c:
                raise LogError("%s: no column %s" % (a.file, n))
        for r in [head] + rows:
            print("\t".join(r[c[n]] for n in a.name))
        return 0

    reach = flag("reach", "how far from the best loss a cell counts as reached, nats", 0.05, float)
    verb("stats", "one TSV line per log", stats, logs, flag("keys", "header keys to add, comma-separated", ""))
    verb("summarize", "the table and verdicts of scripts/summarize.sh", summarize_, logs)
    verb("collect", "DIR/summary.tsv and DIR/aggregate.tsv of a sweep", collect_, pos("dir", "the sweep's folder"),
         flag("keys-fixed", "the keys that name a run", ",".join(SWEEP_FIXED_KEYS)),
         flag("compare", "the key and its two values compared, KEY=A:B", "%s=%s:%s" % COMPARE),
         flag("pass-ratio", "the failure's loss ratio, at least", PASS_RATIO, float),
         flag("pass-gap", "the failure's loss gap in nats, at least", PASS_GAP, float))
    verb("brief", "the brief table of an aggregate", lambda a: out(brief(a.aggregate, a.always)),
         pos("aggregate", "AGGREGATE.tsv"), flag("always", "the key always shown", COMPARE[0]))
    verb("aggregate", "the aggregate of a summary", lambda a: out(aggregate(a.summary)), pos("summary", "SUMMARY.tsv"))
    verb("table", "the rows of a summary with those values, aligned", lambda a: out(table(a.summary, a.selection)),
         pos("summary", "SUMMARY.tsv"), pos("selection", "KEY=VALUE", "*"))
    verb("plotdata", "one data file per line of a figure, with a header row", plotdata_,
         pos("aggregate", "AGGREGATE.tsv"), pos("outdir", "the folder for the data files"),
         flag("x", "the x axis' key", "d_head"), flag("panel", "the key of a panel", "optim"),
         flag("line", "the key of a line", COMPARE[0]))
    verb("map-cells", "the temperature map's cells.tsv", lambda a: out(map_cells(a.summary, a.aggregate, a.reach)),
         pos("summary", "SUMMARY.tsv"), pos("aggregate", "AGGREGATE.tsv"), reach)
    verb("map-band", "the temperature map's band.tsv", lambda a: out(map_band(a.cells, a.mults.split())),
         pos("cells", "CELLS.tsv"), flag("mults", "the multipliers, space-separated", ""))
    verb("map-rows", "the map figures' data, a row number per panel", lambda a: out(map_rows(a.cells, a.panel)),
         pos("cells", "CELLS.tsv"), pos("panel", "OPTIM:D_HEAD", "*"))
    verb("feature-table", "science.sh capcode's table.tsv", lambda a: out(feature_table(a.dir)), pos("dir", "the sweep's folder"))
    verb("feature-curves", "science.sh capcode's figure data", lambda a: feature_curves(a.dir, a.feature, a.outdir),
         pos("dir", "the sweep's folder"), pos("outdir", "the folder for the data files"), pos("feature", "FEATURE", "*"))
    verb("capmap-gaps", "science.sh capmap's gaps.tsv", lambda a: out(capmap_gaps(a.summary)),
         pos("summary", "SUMMARY.tsv"))
    verb("map-cells-text", "the cells as printed", lambda a: out(map_cells_text(a.cells)), pos("cells", "CELLS.tsv"))
    verb("learned-runs", "the learned grid's runs.tsv", learned_runs_, pos("summary", "SUMMARY.tsv"),
         pos("runs_dir", "RUNSDIR"), flag("band", "LO,HI", ""), flag("map", "the temperature map's folder", ""), reach)
    verb("learned-cells", "the learned grid's cells.tsv", lambda a: out(learned_cells(a.runs, a.aggregate)),
         pos("runs", "RUNS.tsv"), pos("aggregate", "AGGREGATE.tsv"))
    verb("maps-heads", "the maps' summary-heads.tsv (attn_maps --summary files)",
         lambda a: out(maps_heads([x.split("=", 1) for x in a.pair])), pos("pair", "SCALE=SUMMARY", "*"))
    verb("maps-topkey", "the maps' top-key.tsv (attn_maps FILE's text)", maps_topkey_, pos("pair", "SCALE=DUMP", "*"))
    verb("logat", "what logs say at given steps (scripts/logat.sh)", logat_, logs,
         flag("steps", "steps, comma-separated ('end': the last)", "0,end"))
    verb("textverdict", "on text: none vs sqrt per seed by the validation loss gap",
         lambda a: out(text_verdicts(a.log, a.gap)), logs, flag("gap", "nats, at least", TEXT_GAP, float))
    def import_(a):
        cols, settings = {}, {}
        for kv in a.col:
            k, _, v = kv.partition("=")
            if k not in ("step", "loss", "val_loss") or not v:
                raise LogError("import: --col '%s': expected step=, loss= or val_loss=COLUMN" % kv)
            cols[k] = v
        for kv in a.set:
            k, _, v = kv.partition("=")
            if not k or not _:
                raise LogError("import: --set '%s': expected KEY=VALUE" % kv)
            settings[k] = v
        for k in ("task", "scale", "entropy"):
            if not getattr(a, k):
                raise LogError("import: --%s is required (docs/logs.md#bring-your-own-logs)" % k)
        if a.seq_len is None and a.entropy_uniform is None:
            raise LogError("import: --seq-len T (or --entropy-uniform NATS) is required: the heads' entropy is "
                           "divided by uniform attention's")
        for k in ("seed", "d_head"):
            if getattr(a, k) is not None:
                settings[k] = getattr(a, k)
        n = import_log(a.src, a.dst, cols, a.entropy, a.max_logit, a.task, a.scale, a.steps, a.seq_len,
                       not a.no_causal, a.entropy_uniform, settings, a.overwrite)
        print("import: wrote %s (%d rows)" % (a.dst, n), file=sys.stderr)
        return 0

    verb("import", "another trainer's CSV or TSV as a tapegrad log (docs/logs.md#bring-your-own-logs)", import_,
         pos("src", "the CSV or TSV (first line: column names)"), pos("dst", "the tapegrad log to write"),
         (("--col",), dict(action="append", default=[], metavar="NAME=COLUMN",
                           help="step=, loss= (required) and val_loss= (optional): the file's column for each")),
         (("--entropy",), dict(metavar="PATTERN", help="the per-head entropy columns (nats), {l} the layer and {h} "
                                                       "the head: 'attn/entropy/l{l}/h{h}' (required)")),
         (("--max-logit",), dict(metavar="PATTERN", help="the largest logit's columns, {l} (and {h})")),
         (("--task",), dict(help="the task (required): hist and recall are judged as the counting task, any other "
                                 "as text")),
         (("--scale",), dict(help="what the run's attention applied: none, sqrt, ... (required)")),
         (("--steps",), dict(type=number(int), help="the run's length (default: the last step)")),
         (("--seq-len",), dict(type=number(int), help="the sequence length: uniform attention's entropy")),
         (("--no-causal",), dict(action="store_true", help="the attention was not causal")),
         (("--entropy-uniform",), dict(type=number(float), help="uniform attention's entropy, instead of --seq-len")),
         (("--seed",), dict(help="the run's seed")), (("--d-head",), dict(dest="d_head", help="the head dimension")),
         (("--set",), dict(action="append", default=[], metavar="KEY=VALUE", help="a setting (optim, lr, ...)")),
         (("--overwrite",), dict(action="store_true", help="replace DST")))
    verb("fold-table", "science_fold.sh's table: sqrt, none and none+fold per task and optimizer",
         lambda a: out(fold_table(a.log)), logs)
    verb("fold-curves", "science_fold.sh's figure data: the effective multiplier and loss over steps",
         lambda a: fold_curves(a.log, a.outdir), flag("outdir", "where the .dat files go", "."), logs)
    verb("rejudge-aggregate", "an aggregate made before 0.23 with its text cells judged by their task's rule",
         lambda a: out(rejudge_aggregate(a.aggregate)), pos("aggregate", "AGGREGATE.tsv"))
    verb("precision", "the main result per precision and seed, none against sqrt (markdown)",
         lambda a: out(precision_table(a.log)), logs)
    verb("ranges", "per framework and scale: final loss and entropy ranges over seeds", lambda a: out(ranges(a.log)), logs)
    verb("legend", "scripts/plot.sh's labels: per log, its label and 1 if its loss curve lies on an earlier one's",
         lambda a: out(legend(a.log)), logs)
    verb("align", "a TSV with its columns aligned (two spaces between columns)", align_, pos("file", "a TSV", "*"))
    verb("col", "the named columns of a TSV (header row first)", col, pos("file", "a TSV"), pos("name", "a column", "*"))
    return table


def main(argv):
    table = verbs()
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    verb, args = argv[0], argv[1:]
    try:
        if verb not in table:
            raise LogError("unknown command '%s' (tglogs.py --help lists them)" % verb)
        parser, run = table[verb]
        if args and args[0] in ("-h", "--help"):
            parser.print_help()
            return 0
        return run(parser.parse_intermixed_args(args))
    except (LogError, OSError, ValueError) as e:
        print("tglogs.py: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
