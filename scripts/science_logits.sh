#!/usr/bin/env bash
# Does anything real kernels do to the logits, or to the heads, hide or rescue the
# forgotten scale? d_head 128, none against sqrt, with each of: soft-capping 50, 30
# and a tight 5; attention sinks; grouped heads (kv-heads 1: 4 query heads per
# key/value head on the counting task, 2 on the code model, which has 2 heads); a
# sliding window (8 of 32 keys; 32 of 128 on code); ALiBi; attention dropout 0.1 —
# and neither (the baseline). Two tasks: the counting task at attn_scale's
# defaults (600 steps) and the code model of scripts/reproduce_code.sh at 400 steps.
# The runs go through the sweep tool (presets logits and logits-code: checkpoints,
# resumes, validation); the tables and the figure are computed from its
# aggregate.tsv by column name.
#   scripts/science_logits.sh [--seeds 1..3] [--out DIR] [--jobs N] [--docs] [--table-only]
# --out: runs/ by default (DIR/logits-hist, DIR/logits-code); --docs: the tables and
# aggregates to docs/data/logits/, the figure to docs/logits.png. --table-only: no runs;
# the table and figure again from the aggregates (DIR's, or with --docs docs/data/logits's;
# an aggregate of 0.22 or before gets its code cells judged by the text rule first:
# tglogs.py rejudge-aggregate, docs/logs.md#the-verdicts).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seeds=1..3; out="$top/runs"; jobs=$(nproc); docs=""; table_only=""
usage() { sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '/^set -e/d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) [ $# -ge 2 ] || usage; seeds=$2; shift 2 ;;
        --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
        --jobs) [ $# -ge 2 ] || usage; jobs=$2; shift 2 ;;
        --docs) docs=1; shift ;;
        --table-only) table_only=1; shift ;;
        *) usage ;;
    esac
done
command -v gnuplot >/dev/null || { echo "scripts/science_logits.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
for task in hist code; do
    dir="$out/logits-$task"; preset=logits; [ $task = code ] && preset=logits-code
    if [ -n "$table_only" ]; then
        agg="$dir/aggregate.tsv"; [ -n "$docs" ] && agg="$top/docs/data/logits/$task-aggregate.tsv"
        [ -r "$agg" ] || { echo "scripts/science_logits.sh: --table-only: no $agg" >&2; exit 2; }
        mkdir -p "$dir"
        python3 "$top/scripts/tglogs.py" rejudge-aggregate "$agg" >"$dir/aggregate.tsv.new"
        mv "$dir/aggregate.tsv.new" "$dir/aggregate.tsv"
        continue
    fi
    "$top/scripts/sweep" preset $preset "$dir" --seeds "$seeds" >&2
    "$top/scripts/sweep" run "$dir" -j "$jobs" --threads 1 >&2
    "$top/scripts/sweep" collect "$dir" --compare scale=none:sqrt >/dev/null
done
# one row per feature and task: none and sqrt's final loss (mean, min..max), the gap, the heads
# below 10% of the uniform entropy at 10% of the run
python3 - "$out/logits-hist/aggregate.tsv" "$out/logits-code/aggregate.tsv" "$out/logits-table.tsv" "$out/logits-plot" <<'PY'
import sys
FEATURES = [("softcap", "0", "softcap {}"), ("sinks", "0", "sinks"), ("kv_heads", "0", "kv-heads {}"),
            ("window", "0", "window {}"), ("alibi", "0", "ALiBi"), ("attn_dropout", "0", "dropout {}")]
def feature(row):
    for key, default, label in FEATURES:
        if key in row and row[key] not in (default, "-"):
            return label.format(row[key])
    return "baseline"
def read(path):
    with open(path, encoding="utf-8") as f:
        head = f.readline().rstrip("\n").split("\t")
        return [dict(zip(head, line.rstrip("\n").split("\t"))) for line in f if line.strip()]
table = [["task", "feature", "none_loss", "none_min", "none_max", "sqrt_loss", "sqrt_min", "sqrt_max", "gap_min",
          "gap_max", "none_heads_low10", "sqrt_heads_low10", "reproduced"]]
plot = {"hist": [], "code": []}
for task, path in zip(("hist", "code"), sys.argv[1:3]):
    cells = {}
    for r in read(path):
        cells.setdefault(feature(r), {})[r["scale"]] = r
    order = sorted(cells, key=lambda f: (f != "baseline", f))
    for i, f in enumerate(order):
        n, s = cells[f].get("none"), cells[f].get("sqrt")
        if not n or not s:
            sys.exit("science_logits: %s %s lacks none or sqrt" % (task, f))
        table.append([task, f, n["final_loss_mean"], n["final_loss_min"], n["final_loss_max"], s["final_loss_mean"],
                      s["final_loss_min"], s["final_loss_max"], n["gap_min"], n["gap_max"], n["heads_low10"],
                      s["heads_low10"], n["reproduced"]])
        plot[task].append("%s\t%d\t%s\t%s %s %s\t%s %s %s" % (task, i, f.replace(" ", "_"), n["final_loss_mean"],
                    n["final_loss_min"], n["final_loss_max"], s["final_loss_mean"], s["final_loss_min"],
                    s["final_loss_max"]))
with open(sys.argv[3], "w", encoding="utf-8") as f:
    f.write("\n".join("\t".join(r) for r in table) + "\n")
for task in plot:   # one file a task, for gnuplot
    with open("%s-%s.dat" % (sys.argv[4], task), "w", encoding="utf-8") as f:
        f.write("\n".join(plot[task]) + "\n")
PY
column -t -s $'\t' "$out/logits-table.tsv"
# the figure: per task, each feature's final loss, none (red) and sqrt (blue), min..max over seeds
gnuplot <<GP
set terminal pngcairo size 1100,460 font ",9" noenhanced
set output '$out/logits.png'
set multiplot layout 1,2 title "d_head 128: none vs sqrt with what real kernels do to the logits and heads (final loss, mean and min..max over seeds $seeds)"
set grid ytics; set key below horizontal; set xtics rotate by 35 right; set ylabel "final training loss (nats)"
set offsets 0.5, 0.5, 0, 0
do for [t in "hist code"] {
    set title (t eq "hist" ? "counting task (600 steps; log scale)" : "code model (400 steps)")
    if (t eq "hist") { set logscale y } else { unset logscale y }
    plot '$out/logits-plot-'.t.'.dat' using (\$2-0.12):4:5:6:xtic(3) with yerrorbars pt 7 lc rgb "#d7301f" title "none (1)", \
         '' using (\$2+0.12):7:8:9 with yerrorbars pt 5 lc rgb "#2166ac" title "sqrt (1/sqrt(d))"
}
unset multiplot
GP
echo "wrote $out/logits-table.tsv $out/logits.png" >&2
if [ -n "$docs" ]; then
    mkdir -p "$top/docs/data/logits"
    cp "$out/logits-table.tsv" "$top/docs/data/logits/table.tsv"
    cp "$out/logits-hist/aggregate.tsv" "$top/docs/data/logits/hist-aggregate.tsv"
    cp "$out/logits-code/aggregate.tsv" "$top/docs/data/logits/code-aggregate.tsv"
    cp "$out/logits.png" "$top/docs/logits.png"
    echo "docs: docs/data/logits/, docs/logits.png; now run scripts/docs.sh" >&2
fi
