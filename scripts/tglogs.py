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
    tglogs.py textverdict LOG... [--gap NATS]   on text: none vs sqrt per seed by the validation loss gap
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
  verdict     an unscaled run "reproduces the failure" against the scaled run of the same
              other settings when its final loss is at least PASS_RATIO times and PASS_GAP
              nats above that run's.
"""
import argparse
import glob
import math
import os
import re
import sys

# The experiment's defaults; every one may be overridden by an option.
PASS_RATIO = 3.0            # final loss of the unscaled run / the scaled run's, at least
TEXT_GAP = 0.25             # on text (task code): the unscaled run's final validation loss this many nats above
PASS_GAP = 0.25             # and at least this many nats above it
LOW_HEAD = 0.1              # a head below this entropy / uniform counts as collapsed


def over_uniform(ent, unif):
    """entropy / uniform; 1 when the uniform entropy is 0 (every row sees one key: uniform and one-hot
    are the same weights, as the logs' nent_ columns say)."""
    return ent / unif if unif > 0 else 1.0
COMPARE = ("scale", "none", "sqrt")   # the key whose two values are compared
SUMMARY_KEYS = ["task", "optim", "scale", "d_head", "seed", "steps", "lr", "init", "framework", "attn"]
SWEEP_FIXED_KEYS = ["task", "optim", "scale", "d_head", "seed", "steps"]
SEED_KEY = "seed"
# attn_scale's flags added after logs were recorded (experiments/attn_cfg.c, attn_added_flags):
# a log names them only when set; without the line, a log has the value every earlier run had.
ADDED_KEYS = {"kv_heads": "0", "window": "0", "bias": "none", "alibi": "0", "softcap": "0", "sinks": "0",
              "attn_dropout": "0", "precision": "fp32"}
ADDED_KEY_LIST = sorted(ADDED_KEYS)


# Header keys that are not settings of the training: where a run wrote, how it was run or watched,
# what it measured or derived. Every other key (the flags that shape the training, a plugin's
# SHA-256, the corpus's) is a setting: two runs are paired only when all their settings but the
# compared one (the scale) agree (docs/logs.md#which-runs-are-compared).
NOT_SETTINGS = {"tapegrad attn_scale", "precision_emulated", "loss_scale", "threads", "log", "log_every", "save", "save_every", "resume", "stop_at",
                "on_nan", "debug_nan", "dump_attn", "dump_attn_file", "allow_noncausal", "overwrite", "sample",
                "sample_len", "temperature", "profile", "check", "exec_timeout", "eval_every", "attn_scale_value",
                "n_params", "blas", "gemm_plan", "gemm_plan_mode", "attn_plugin_file", "attn_plugin_abi",
                "attn_scale_columns", "attn_measured", "attn_measure_note", "attn_exec_protocol",
                "attn_multiplier_meaning", "attn_max_logit_meaning", "corpus_source", "corpus_files",
                "corpus_bytes", "corpus_train_bytes", "corpus_non_text_bytes"}
# the attention features a run may set, with their defaults (ADDED_KEYS) in this order in a table
FEATURE_KEYS = ["kv_heads", "window", "bias", "alibi", "softcap", "sinks", "attn_dropout"]
INTERPRETERS = {"python", "python3", "sh", "bash", "env", "exec", "nice", "taskset", "stdbuf", "timeout", "uv",
                "poetry", "conda", "pixi"}


class LogError(Exception):
    pass


def is_setting(key):
    return key not in NOT_SETTINGS and not key.startswith("ref_") and key != ""


def setting_differences(a, b, skip=()):
    """The settings two headers (dicts) give different values, sorted: keys both have (a key
    only one log has is from another version of the program, or describes one kernel)."""
    return sorted(k for k in a if k in b and is_setting(k) and k not in skip and a[k] != b[k])


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
            raise LogError("%s: no column %s" % (log.path, need))
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


# ---- summarize.sh ------------------------------------------------------------------
def summarize(paths, out=sys.stdout, err=sys.stderr):
    """The table of scripts/summarize.sh and a verdict per unscaled run; returns the exit status.
    An unscaled run is paired with the scaled run whose settings are all the same (scale aside):
    kernel, features, task, d_head, seed, lr... (setting_differences); when there is none, the
    closest scaled run and what differs is said instead of a verdict."""
    bad = 0
    runs = []
    for p in paths:
        try:
            log = Log(p)
            s = log_stats(log)
        except (LogError, OSError) as e:
            print(e, file=err)
            bad = 1
            continue
        v = {k: log.header.get(k, "-") for k in SUMMARY_KEYS + ADDED_KEY_LIST}
        runs.append((v, s, run_name(p), log.header))
    kw = max([6] + [len(kernel_name(h)) for _, _, _, h in runs])
    fw = max([8] + [len(features(h)) for _, _, _, h in runs])
    out.write("%-7s %-5s %-7s %6s %5s %6s %-*s %-*s %11s %9s %9s %9s %14s  %s\n" % (
        "task", "optim", "scale", "d_head", "seed", "steps", kw, "kernel", fw, "features", "final_loss", "ent/unif",
        "ent@0", "ent@10%", "heads<0.1@10%", "run"))
    for v, s, name, h in runs:
        low = s["low10"] if s["low10"] == NOT_MEASURED else "%s/%d" % (s["low10"], s["nheads"])
        out.write("%-7s %-5s %-7s %6s %5s %6s %-*s %-*s %11.4f %9s %9s %9s %14s  %s\n" % (
            v["task"], v["optim"], v["scale"], v["d_head"], v["seed"], v["steps"], kw, kernel_name(h), fw, features(h),
            s["final_loss"], num(s["ent_end"], "%.3f"), num(s["ent0"], "%.3f"), num(s["ent10"], "%.3f"), low, name))
    out.write("\n")
    key, low, high = COMPARE
    scale_keys = (key,)
    for v, s, name, h in runs:
        if v[key] != low:
            continue
        paired, closest = False, None
        for w, t, wname, g in runs:
            if w[key] != high:
                continue
            diff = setting_differences(h, g, scale_keys)
            if diff:
                if closest is None or len(diff) < len(closest[1]):
                    closest = (wname, diff, g)
                continue
            paired = True
            ratio, gap, ok = verdict(s["final_loss"], t["final_loss"])
            fwk = "" if v["framework"] == "-" else v["framework"] + " "
            feat = features(h)
            out.write("%s vs %s, %s%s %s d_head=%s seed=%s kernel=%s%s: loss %.4f vs %.4f, ratio %.1fx, gap %.3f "
                      "nats: %s; unscaled heads below 10%% of uniform at 10%% of steps: %s/%d, scaled: %s/%d\n" % (
                          low, high, fwk, v["task"], v["optim"], v["d_head"], v[SEED_KEY], kernel_name(h),
                          "" if feat == "-" else " " + feat, s["final_loss"], t["final_loss"], ratio, gap,
                          "failure reproduced" if ok else "NOT reproduced", s["low10"], s["nheads"], t["low10"],
                          t["nheads"]))
        if not paired and closest:
            wname, diff, g = closest
            out.write("%s run %s: no %s run with the same settings, no verdict; the closest, %s, differs in %s\n" % (
                low, name, high, wname, ", ".join("%s (%s vs %s)" % (k, h[k], g[k]) for k in diff[:4]) +
                (" and %d more" % (len(diff) - 4) if len(diff) > 4 else "")))
    # a kernel from outside (plugin or exec) against the built-in op of the same settings and seed
    for v, s, name, h in runs:
        if not (v["attn"].startswith("plugin:") or v["attn"].startswith("exec:")):
            continue
        for w, t, wname, g in runs:
            if w["attn"] not in BUILTINS or setting_differences(h, g, ("attn",)):
                continue
            ratio, gap, bad_run = verdict(s["final_loss"], t["final_loss"])
            feat = features(h)
            out.write("%s '%s' vs %s, %s %s scale=%s d_head=%s seed=%s%s: loss %.4f vs %.4f, ratio %.2fx, gap %.3f "
                      "nats: %s\n" % ("plugin" if v["attn"].startswith("plugin:") else "exec",
                                       kernel_name(h).split(":", 1)[1], w["attn"], v["task"], v["optim"], v["scale"],
                                       v["d_head"], v[SEED_KEY], "" if feat == "-" else " " + feat, s["final_loss"],
                                       t["final_loss"], ratio, gap,
                                       "FAILS (the collapse of the forgotten scale)" if bad_run
                                       else "trains like the built-in op" if abs(gap) < PASS_GAP
                                       else "differs from the built-in op"))
    return bad


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
    """Per seed, the unscaled (none) run against the scaled (sqrt) run of a text task: the final
    training loss (mean of the last 10% of rows), the final validation loss, their gap, and whether
    the unscaled one ends at least gap_min nats above on validation; a ratio means little on text,
    where the losses of both stay far from 0. Runs pair within one precision (0.22: a column then
    says which, when any is not fp32)."""
    runs = {}
    for p in paths:
        log = Log(p)
        s = log_stats(log)
        runs[(log.header.get("scale", "-"), log.header.get("seed", "-"), log.header["precision"])] = (
            s, last_value(log, "val_loss"), log)
    order = {"fp32": 0, "bf16": 1, "fp16": 2}
    mixed = any(k[2] != "fp32" for k in runs)
    head = (["precision"] if mixed else []) + ["seed", "train none", "train sqrt", "val none", "val sqrt", "val gap",
                                              "heads<0.1@10% none", "heads<0.1@10% sqrt", "verdict"]
    out = []
    for (scale, seed, prec), (s, val, log) in sorted(runs.items(), key=lambda kv: (order.get(kv[0][2], 9), fnum(kv[0][1]))):
        if scale != "none" or ("sqrt", seed, prec) not in runs:
            continue
        t, tval, _ = runs[("sqrt", seed, prec)]
        gap = val - tval
        out.append(([prec] if mixed else []) + [
            seed, "%.4f" % s["final_loss"], "%.4f" % t["final_loss"], "%.4f" % val, "%.4f" % tval, "%.3f" % gap,
            "%s/%d" % (s["low10"], s["nheads"]), "%s/%d" % (t["low10"], t["nheads"]),
            "failure reproduced" if gap >= gap_min else "NOT reproduced"])
    return align([head] + out)


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
        log = Log(p)
        h = log.header
        if h.get("scale") not in ("none", "sqrt"):
            continue
        runs[(h["precision"], h.get(SEED_KEY, "-"), h["scale"])] = log
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
        sa, sb = log_stats(a), log_stats(b)
        ratio, gap, ok = verdict(sa["final_loss"], sb["final_loss"], ratio_min, gap_min)
        per.setdefault(pr, []).append((ok, ratio, gap))

        def amp(log, col):
            if col not in log.index:
                return "-"
            return log.col(log.rows[-1], col)
        out.append("| %s | %s | %.4f | %.4f | %.1fx | %.3f | %s | %s/%d | %.1f | %.1f | %s, %s | %s, %s |" % (
            pr, seed, sa["final_loss"], sb["final_loss"], ratio, gap,
            ("reproduced" if ok else "NOT reproduced") + (" (settings differ: %s)" % ", ".join(diff) if diff else ""),
            sa["low10"], sa["nheads"], run_max(a, "maxlogit_"), run_max(b, "maxlogit_"),
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
        log = Log(os.path.join(dir_, "runs", rid + ".tsv"))
        s = log_stats(log)
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
        cell = "|".join(v for k, v in zip(keys + ["kernel", "features"], vals) if k != key)
        m = len(rows)
        if vals[keys.index(key)] == high:
            ref[cell] = m
        rows.append((rid, vals, s))
        cells.append(cell)
    head = ["id"] + keys + ["kernel", "features", "final_loss", "ent_end", "ent0", "ent10", "heads_low10",
                            "max_logit", "ratio", "gap", "reproduced"]
    lines = ["\t".join(head)]
    for m, (rid, vals, s) in enumerate(rows):
        v = "-\t-\t-"
        if vals[keys.index(key)] == low and cells[m] in ref:
            q = rows[ref[cells[m]]][2]
            ratio, gap, ok = verdict(s["final_loss"], q["final_loss"], ratio_min, gap_min)
            v = "%.2f\t%.4f\t%s" % (ratio, gap, "yes" if ok else "no")
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
            cell[k] = {"n": 0, "loss": [], "ent": [], "low": [], "nh": "", "ratio": [], "gap": [], "yes": 0}
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
    for k in order:
        a = cell[k]
        sl = 0.0
        for x in a["loss"]:
            sl += x
        se = 0.0
        for x in a["ent"]:
            se += x
        if a["ratio"]:
            v = "%.2f\t%.2f\t%.4f\t%.4f\t%d/%d" % (min(a["ratio"]), max(a["ratio"]), min(a["gap"]), max(a["gap"]),
                                                 a["yes"], len(a["ratio"]))
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
