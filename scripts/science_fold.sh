#!/usr/bin/env bash
# Is a scale folded into the initialisation a cure? T5 computes attention with no 1/sqrt(d_k):
# W_q starts 1/sqrt(d_head) smaller instead (attn_scale --qinit fold), and it trained with
# Adafactor. At d_head 128, --scale none with the fold beside none and sqrt, under AdamW, SGD and
# Adafactor, 3 seeds each, on two tasks: the counting task at attn_scale's defaults (600 steps)
# and the code model of scripts/reproduce_code.sh (init lm, 1,000 steps). Every log carries the
# effective multiplier of q.k over training (qk_mult_l*: docs/logs.md), so the figure shows
# whether the fold holds or melts.
# The runs go through the sweep tool (presets fold and fold-code: checkpoints, resumes); the
# table and the figures are made from the logs by tglogs.py fold-table and fold-curves.
# --noclip: instead, the check of why Adafactor keeps the fold: without the global --clip its steps
# are relative to each parameter's size, so none+fold and sqrt should train alike to rounding
# (seed 1, on each task, four runs; with --docs to docs/data/fold/noclip.txt).
#   scripts/science_fold.sh [--seeds 1..3] [--out DIR] [--jobs N] [--bin ATTN_SCALE] [--docs] [--table-only | --noclip]
# --bin: the attn_scale the sweeps run (default build/experiments/attn_scale; a copy keeps a
# rebuild during the hour of runs out of them). --out: runs/ by default (DIR/sweep-fold, DIR/sweep-fold-code); --docs: the logs, the table
# and the record to docs/data/fold/, the figures to docs/fold-hist.png and docs/fold-code.png.
# --table-only: no runs; the table and figures again from the logs (DIR's, or with --docs
# docs/data/fold's).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seeds=1..3; out="$top/runs"; jobs=$(nproc); docs=""; table_only=""; noclip=""; bin="$top/build/experiments/attn_scale"
usage() { sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '/^set -e/d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) [ $# -ge 2 ] || usage; seeds=$2; shift 2 ;;
        --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
        --jobs) [ $# -ge 2 ] || usage; jobs=$2; shift 2 ;;
        --bin) [ $# -ge 2 ] || usage; bin=$2; shift 2 ;;
        --docs) docs=1; shift ;;
        --table-only) table_only=1; shift ;;
        --noclip) noclip=1; shift ;;
        --help|-h) usage ;;
        *) echo "scripts/science_fold.sh: unknown option '$1'" >&2; usage ;;
    esac
done
command -v gnuplot >/dev/null || { echo "scripts/science_fold.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
. "$top/scripts/setup.sh"   # tg_machine
logs="$out/fold-logs"
if [ -n "$noclip" ]; then   # Adafactor without the global clip: none+fold against sqrt, row by row, on each task
    nc="$out/fold-noclip"; rm -rf "$nc"; mkdir -p "$nc"
    af=(--optim adafactor --lr 0.01 --lr-min 0.001 --clip 0 --seed 1)
    code=(--task code --init lm --seq-len 128 --batch 16 --d-model 128 --heads 2 --d-head 128 --layers 2 --warmup 50
          --steps 1000 --log-every 50 --eval-every 100)
    for task in hist code; do
        extra=(); [ $task = code ] && extra=("${code[@]}")
        "$bin" "${af[@]}" "${extra[@]+"${extra[@]}"}" --scale sqrt --log "$nc/$task-sqrt.tsv" >&2 & p1=$!
        "$bin" "${af[@]}" "${extra[@]+"${extra[@]}"}" --scale none --qinit fold --log "$nc/$task-fold.tsv" >&2 & p2=$!
        rc=0; wait $p1 || rc=1; wait $p2 || rc=1
        [ $rc = 0 ] || { echo "scripts/science_fold.sh --noclip: a $task run failed" >&2; exit 1; }
    done
    python3 - "$nc" >"$out/fold-noclip.txt" <<'PY'
import csv, sys
def rows(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader((l for l in f if not l.startswith("#")), delimiter="\t"))
print("scripts/science_fold.sh --noclip: Adafactor (lr 0.01 -> 0.001) with --clip 0, seed 1, sqrt vs none+fold")
for task in ("hist", "code"):
    a, b = rows("%s/%s-sqrt.tsv" % (sys.argv[1], task)), rows("%s/%s-fold.tsv" % (sys.argv[1], task))
    if [r["step"] for r in a] != [r["step"] for r in b]:
        sys.exit("science_fold: the two no-clip runs of %s logged different steps" % task)
    dl = max(abs(float(x["loss"]) - float(y["loss"])) for x, y in zip(a, b))
    dc = max(abs(float(x["qk_mult_l0"]) / float(y["qk_mult_l0"]) - 1) for x, y in zip(a, b))
    val = [(x["val_loss"], y["val_loss"]) for x, y in zip(a, b) if "val_loss" in x and x["val_loss"] != "nan"]
    print("%s: %d rows; largest training-loss difference %.2g nats, largest relative difference of qk_mult_l0 %.2g; "
          "final loss %s vs %s%s" % (task, len(a), dl, dc, a[-1]["loss"], b[-1]["loss"],
                                      ", final validation loss %s vs %s" % val[-1] if val else ""))
PY
    cat "$out/fold-noclip.txt"
    [ -z "$docs" ] || { mkdir -p "$top/docs/data/fold"; cp "$out/fold-noclip.txt" "$top/docs/data/fold/noclip.txt"; }
    exit 0
fi
if [ -n "$table_only" ]; then
    [ -n "$docs" ] && logs="$top/docs/data/fold/logs"
    ls "$logs"/*.tsv >/dev/null 2>&1 || { echo "scripts/science_fold.sh: --table-only: no logs in $logs" >&2; exit 2; }
else
    start=$(date +%s); load0=$(cut -d' ' -f1-3 /proc/loadavg)
    rm -rf "$logs"; mkdir -p "$logs"
    for preset in fold fold-code; do
        dir="$out/sweep-$preset"
        "$top/scripts/sweep" preset $preset "$dir" --seeds "$seeds" --bin "$bin" >&2
        "$top/scripts/sweep" run "$dir" -j "$jobs" --threads 1 --bin "$bin" >&2
        "$top/scripts/sweep" collect "$dir" --compare scale=none:sqrt >/dev/null
        task=hist; [ $preset = fold-code ] && task=code
        # one folder of logs, each named by its task and run id
        cut -f1 "$dir/manifest.tsv" | while read -r id; do cp "$dir/runs/$id.tsv" "$logs/$task-$id.tsv"; done
    done
    record="scripts/science_fold.sh --seeds $seeds --jobs $jobs: $(ls "$logs"/*.tsv | wc -l) runs of attn_scale, $jobs at a time, --threads 1
trained in $(( $(date +%s) - start ))s (finished runs of an earlier attempt are reused, not timed), $(date -u +%F)
load average before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg)
$(tg_machine "$top/build")"
    printf '%s\n' "$record" >"$out/fold-run.txt"
fi
python3 "$top/scripts/tglogs.py" fold-table "$logs"/*.tsv >"$out/fold-table.txt"
cat "$out/fold-table.txt"
rm -rf "$out/fold-plot"
python3 "$top/scripts/tglogs.py" fold-curves --outdir "$out/fold-plot" "$logs"/*.tsv
# per task: the effective multiplier of q.k over training (top) and the loss (bottom), one panel per
# optimizer; sqrt blue, none red, none+fold green; mean over seeds with their min..max shaded
for task in hist code; do
    ls "$out/fold-plot/$task"-*.dat >/dev/null 2>&1 || continue
    gnuplot <<GP
set terminal pngcairo size 1200,720 font ",9" noenhanced
set output '$out/fold-$task.png'
d = '$out/fold-plot/$task-'
set multiplot layout 2,3 title (('$task' eq 'hist' ? 'counting task (600 steps)' : 'code model (1,000 steps)') . ", d_head 128: the scale folded into W_q's initialisation (none+fold) beside none and sqrt; mean and min..max over seeds")
set grid; set key top left
optims = "adam sgd adafactor"
names = "AdamW SGD Adafactor"
do for [i=1:3] {
    o = word(optims, i)
    set title word(names, i) . ": effective multiplier of q.k"
    set logscale y; set yrange [0.05:3]; set format y "%g"; set xlabel "step"
    set ylabel "c (1 = none at a standard init)"
    plot d.o.'-sqrt.dat' using 1:3:4 with filledcurves lc rgb "#2166ac" fs transparent solid 0.2 notitle, \
         '' using 1:2 with lines lw 2 lc rgb "#2166ac" title "sqrt", \
         d.o.'-none.dat' using 1:3:4 with filledcurves lc rgb "#d7301f" fs transparent solid 0.2 notitle, \
         '' using 1:2 with lines lw 2 lc rgb "#d7301f" title "none", \
         d.o.'-none+fold.dat' using 1:3:4 with filledcurves lc rgb "#1a9850" fs transparent solid 0.2 notitle, \
         '' using 1:2 with lines lw 2 lc rgb "#1a9850" title "none+fold", \
         1/sqrt(128) with lines dt 2 lc rgb "gray" title "1/sqrt(128)"
}
do for [i=1:3] {
    o = word(optims, i)
    set title word(names, i) . ('$task' eq 'hist' ? ": training loss" : ": validation loss")
    unset logscale y; set autoscale y; set ylabel "nats"; set key top right
    if ('$task' eq 'hist') { set logscale y } else { set yrange [*:3.5] }
    # the rows with a loss (validation is evaluated every 100 steps, logged every 50)
    plot '< grep -v nan '.d.o.'-sqrt.dat' using 1:5 with linespoints pt 7 ps 0.4 lw 2 lc rgb "#2166ac" title "sqrt", \
         '< grep -v nan '.d.o.'-none.dat' using 1:5 with linespoints pt 7 ps 0.4 lw 2 lc rgb "#d7301f" title "none", \
         '< grep -v nan '.d.o.'-none+fold.dat' using 1:5 with linespoints pt 7 ps 0.4 lw 2 lc rgb "#1a9850" title "none+fold"
}
unset multiplot
GP
done
echo "wrote $out/fold-table.txt $out/fold-hist.png $out/fold-code.png" >&2
if [ -n "$docs" ]; then
    mkdir -p "$top/docs/data/fold"
    if [ -z "$table_only" ]; then
        rm -rf "$top/docs/data/fold/logs"; cp -r "$logs" "$top/docs/data/fold/logs"
        cp "$out/fold-run.txt" "$top/docs/data/fold/run.txt"
    fi
    cp "$out/fold-table.txt" "$top/docs/data/fold/table.txt"
    for task in hist code; do [ ! -f "$out/fold-$task.png" ] || cp "$out/fold-$task.png" "$top/docs/fold-$task.png"; done
    echo "docs: docs/data/fold/, docs/fold-*.png; now run scripts/docs.sh" >&2
fi
