#!/usr/bin/env bash
# How far off may the attention scale be, and can a model learn it back? The
# grids, figures and tables of issue 11, each one command. The attn_scale runs
# of every grid go through the sweep tool (scripts/sweep plan, run --engine
# local, collect: checkpoints, resumes, validates each run, writes
# DIR/summary.tsv and DIR/aggregate.tsv); the tables and figures here are
# computed from those and from the logs in DIR/runs/.
#   scripts/science.sh map      temperature map: --scale mult c for each c of --mults and c = sqrt(d_head)
#                               (the `none` cell), each head size of --dheads, AdamW; and the --sgd-dheads
#                               rows with SGD (lr 0.3 -> 0.01, as the dhead preset). Heatmaps of the final
#                               loss and of the entropy at 10% of the steps, final loss against c, the band.
#   scripts/science.sh learned  the learned per-head scale: --learned-param of each of --forms, started at each
#                               of --inits, at each --scale-lr of --scale-lrs, at each of --dheads: the
#                               multiplier per head against the step next to the loss, whether the run reaches
#                               the scaled loss, and when the multiplier enters the map's band.
#   scripts/science.sh torch    tapegrad (through the sweep) and PyTorch (scripts/torch_attn_scale.py, its own
#                               loop: the sweep runs attn_scale only), none and sqrt: the loss curves on one
#                               figure and the ranges side by side.
#   scripts/science.sh maps     attention maps of none and sqrt on the probe at steps 0, 10% and the end.
#   scripts/science.sh capmap   the temperature map under soft-capping (issue 39): --scale mult c for each c of
#                               --mults and c = sqrt(d_head), at each head size of --dheads (128), crossed with
#                               each cap of --caps (0: none); AdamW, the counting task. The band per cap (against
#                               that cap's c = 1), none's gap to the uncapped sqrt, loss and entropy against c.
#   scripts/science.sh capcode  none and sqrt on the code model with scripts/reproduce_code.sh's recipe (1,000
#                               steps, init lm; the sweep preset logits-code), caps 50, 30, 10 and none, and sinks,
#                               kv-heads 1, window 32, ALiBi, dropout 0.1 each alone: 54 runs. The table (validation
#                               loss, gaps, when the unscaled heads collapse and whether they recover, max logit)
#                               and the curves.
# options: --seeds "1 2 3"  --steps 600  --dheads "8 32 128"  --mults "0.0625 0.125 0.25 0.5 1 2 4 8 16"
#          --caps "0 50 30 10 5" (capmap)  --sgd-dheads "128" ("" for none)  --forms "log linear"  --inits "none sqrt"
#          --scale-lrs "0 0.03" (learned; 0: the model's --lr)  --band LO,HI (learned; default: the map's band
#          from the same --out)  --reach NATS (0.05)  --out DIR (runs/; each grid in DIR/science-<grid>/)
#          --figures DIR (default: the grid's folder; names science-*.png)  --tables DIR (also copy the small
#          tables there as science-<grid>-*.tsv)  --jobs N (runs at a time, one thread each)
#          --plugin FILE.so[:SYMBOL] (every attn_scale run of the grid with your attention kernel,
#          --attn plugin:..., docs/plugins.md; give it its own --out)
# A grid stopped and started again finishes what is missing (the sweep tool). The grid's settings are fixed
# once planned: other --steps for the same runs need another --out.
# "Reaches the scaled loss": final loss (mean of the last 10% of logged steps, scripts/tglogs.py) at most
# L1 + 0.05 nats (--reach NATS), L1 the c = 1 run's final loss at the same optimizer, head size and seed; the
# band: the c of the grid, contiguous around c = 1, where every seed reaches it.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sweep="$top/scripts/sweep"
usage() { sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '/^set -e/d; s/^# \{0,1\}//' >&2; exit 2; }
die() { echo "scripts/science.sh: $*" >&2; exit 2; }
[ $# -ge 1 ] || usage
grid=$1; shift
case "$grid" in map|capmap|capcode|learned|torch|maps) ;; *) usage ;; esac
seeds="1 2 3"; steps=600; dheads=""; mults="0.0625 0.125 0.25 0.5 1 2 4 8 16"; sgd_dheads="128"
forms="log linear"; inits="none sqrt"; scale_lrs="0 0.03"; band=""; reach=0.05; out="$top/runs"
figures=""; tables=""; jobs=$(nproc); plugin=; caps="0 50 30 10 5"
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage
    case "$1" in
        --seeds) seeds=$2 ;; --steps) steps=$2 ;; --dheads) dheads=$2 ;; --mults) mults=$2 ;;
        --sgd-dheads) sgd_dheads=$2 ;; --forms) forms=$2 ;; --inits) inits=$2 ;; --scale-lrs) scale_lrs=$2 ;;
        --band) band=$2 ;; --reach) reach=$2 ;; --out) out=$2 ;; --figures) figures=$2 ;; --tables) tables=$2 ;;
        --jobs) jobs=$2 ;; --plugin) plugin=$2 ;; --caps) caps=$2 ;;
        *) echo "scripts/science.sh: unknown option '$1'" >&2; usage ;;
    esac
    shift 2
done
if [ -z "$dheads" ]; then case "$grid" in map) dheads="8 32 128" ;; learned) dheads="128 32" ;; *) dheads="128" ;; esac; fi
[ "$grid" != capmap ] || [ -n "$caps" ] || die "--caps needs a value"
num() { [[ "$2" =~ ^[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$ ]] || die "$1 '$2' is not a number"; }
for s in $seeds; do [[ "$s" =~ ^[0-9]+$ ]] || die "seed '$s' is not a whole number"; done
for d in $dheads $sgd_dheads; do [[ "$d" =~ ^[1-9][0-9]*$ ]] || die "head size '$d' is not a positive number"; done
for c in $mults; do num "--mults value" "$c"; done
for c in $scale_lrs; do num "--scale-lrs value" "$c"; done
for c in $caps; do num "--caps value" "$c"; done
num --reach "$reach"
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || die "--steps '$steps' is not a positive number"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "--jobs '$jobs' is not a positive number"
[ -z "$band" ] || [[ "$band" =~ ^[0-9.eE+-]+,[0-9.eE+-]+$ ]] || die "--band '$band': LO,HI"
for f in $forms; do case $f in log|linear) ;; *) die "--forms: '$f' is not log or linear" ;; esac; done
for i in $inits; do case $i in none|sqrt) ;; *) die "--inits: '$i' is not none or sqrt" ;; esac; done
[ -n "$seeds" ] && [ -n "$dheads" ] || die "--seeds and --dheads need a value"
bin="$top/build/experiments/attn_scale"
[ -x "$bin" ] || die "$bin is missing: run scripts/test.sh first"
. "$top/scripts/setup.sh"
tg_need "${TG_PLOT_PACKAGES[@]}" "${TG_SWEEP_PACKAGES[@]}"
[ "$grid" = torch ] && tg_need "${TG_TORCH_PACKAGES[@]}"
dir="$out/science-$grid"
figs=${figures:-$dir}
mkdir -p "$dir" "$figs"
dir=$(cd "$dir" && pwd)
warmup=$(( steps < 50 ? steps : 50 ))
list() { echo $* | tr ' ' ','; }   # "1 2 3" -> 1,2,3 (a grid's values)
sqrt_of() { awk -v d="$1" 'BEGIN { printf "%.17g", sqrt(d) }'; }
# "c k" prints c as a fraction or integer when it is a power of 2 (1/16 ... 16), else with 3 digits
tex_c='function cname(c,   l, r) { l = log(c) / log(2); r = sprintf("%.0f", l) + 0
    if ((l - r)^2 < 1e-12) return r >= 0 ? sprintf("%d", 2^r) : sprintf("1/%d", 2^-r); return sprintf("%.3g", c) }'

# ---- running: through the sweep tool ------------------------------------------------
# sweep_grid PLAN-OPTIONS...: plan (the grid's runs, --steps, the warm-up), run what is missing,
# record the wall time, collect summary.tsv and aggregate.tsv (its brief table in collect.txt)
sweep_grid() {
    local label=$grid; [ "$grid" = torch ] && label="torch (tapegrad)"
    local with_plugin=()
    [ -z "$plugin" ] || with_plugin=(--plugin "kernel=$plugin" --set attn=kernel)
    "$sweep" plan "$dir" "$@" --set steps="$steps" --set warmup="$warmup" "${with_plugin[@]+"${with_plugin[@]}"}"
    sweep_finish "$label"
}
# sweep_finish LABEL: run what is missing of the planned grid in $dir, record the wall time, collect
sweep_finish() {
    local label=$1 all done_before t0=$SECONDS load
    all=$(wc -l <"$dir/manifest.tsv")
    done_before=$("$sweep" status "$dir" 2>&1 | sed -n 's/.*: \([0-9]*\) done,.*/\1/p')
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    "$sweep" run "$dir" --engine local -j "$jobs" --threads 1
    if [ "$done_before" -lt "$all" ]; then
        printf '%s\t%s\t%d runs of %d\t%d s wall\t%d at a time, 1 thread each\tload average before %s, after %s\n' \
            "$(date -u +%FT%TZ)" "$label" $((all - done_before)) "$all" $((SECONDS - t0)) "$jobs" "$load" \
            "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$dir/walltime.tsv" >&2
    fi
    "$sweep" collect "$dir" >"$dir/collect.txt"
}
# the machine and kernel the runs used: the CPU, the logs' distinct `# blas=` lines, the runs' seconds
run_env() {
    run_env_lines >"$dir/run.txt"; cat "$dir/run.txt"
}
run_env_lines() {
    echo "== $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; kernel of the runs: $(cat "$dir"/runs/*.tsv |
        sed -n 's/^# blas=//p' | sort | uniq -c | sed 's/^ *\([0-9]*\) /\1 runs: /' | paste -sd';')"
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^seconds=/) { s = substr($i, 9) + 0; t += s; n++; if (s > m) m = s } }
        END { if (n) printf "== %d runs took %.0f s of training (sum of their seconds=), the longest %.0f s\n", n, t, m }' "$dir"/runs/*.done
    [ -s "$dir/walltime.tsv" ] && sed 's/^/== wall time: /' "$dir/walltime.tsv"
    return 0
}
# publish NAME...: copy tables of the grid's folder to --tables as science-<grid>-NAME
publish() {
    [ -n "$tables" ] || return 0
    mkdir -p "$tables"
    local f; for f in "$@"; do cp "$dir/$f" "$tables/science-$grid-$f"; done
    echo "tables: $(printf "$tables/science-$grid-%s " "$@")"
}

# ---- the temperature map ------------------------------------------------------------
map_grid() {
    local grids=() opt dh c hs extra
    for opt in adam sgd; do
        hs=$dheads; [ $opt = sgd ] && hs=$sgd_dheads
        for dh in $hs; do
            # c = sqrt(d_head) is the none cell, unless the grid has it already (d_head 4, 16, 64, ...)
            extra=$(sqrt_of "$dh")
            for c in $mults; do awk -v a="$c" -v b="$extra" 'BEGIN { exit !((a - b)^2 < 1e-10 * b * b) }' && extra=""; done
            grids+=(--grid "optim=$opt d_head=$dh scale-mult=$(list $mults $extra) seed=$(list $seeds)")
        done
    done
    sweep_grid "${grids[@]}" --set scale=mult --set optim=sgd:lr=0.3 --set optim=sgd:lr-min=0.01
}

# the map under soft-capping (issue 39): the map's c at each head size of --dheads (128) crossed with each
# cap of --caps (0: none), AdamW, the counting task at its defaults
capmap_grid() {
    local dh extra c grids=()
    for dh in $dheads; do
        extra=$(sqrt_of "$dh")
        for c in $mults; do awk -v a="$c" -v b="$extra" 'BEGIN { exit !((a - b)^2 < 1e-10 * b * b) }' && extra=""; done
        grids+=(--grid "d_head=$dh scale-mult=$(list $mults $extra) softcap=$(list $caps) seed=$(list $seeds)")
    done
    sweep_grid "${grids[@]}" --set scale=mult
}

# cells.tsv: per optimizer, head size and c: the seeds, the final loss (mean, min, max over seeds) and the
# entropy at 10% of the steps (aggregate.tsv), how many seeds reached the c = 1 loss (summary.tsv);
# band.tsv: per optimizer and head size the band, the c = 1 loss, and where none falls
map_tables() {
    python3 "$top/scripts/tglogs.py" map-cells "$dir/summary.tsv" "$dir/aggregate.tsv" --reach "$reach" >"$dir/cells.tsv"
    # the band: the c of --mults (not the extra none cell) contiguous around c = 1 where every seed reached
    python3 "$top/scripts/tglogs.py" map-band "$dir/cells.tsv" --mults "$mults" >"$dir/band.tsv"
    echo "== cells: mean final loss over seeds (min-max), entropy/uniform at 10% of the steps, seeds that reached the c = 1 loss + $reach"
    python3 "$top/scripts/tglogs.py" map-cells-text "$dir/cells.tsv"
    echo
    echo "== band of c reaching the scaled loss (final loss <= L1 + $reach nats for every seed, L1: c = 1, same seed), and where none falls"
    column -t -s$'\t' "$dir/band.tsv"
    echo
    run_env
    publish summary.tsv aggregate.tsv cells.tsv band.tsv run.txt
}

# log2 c axis ticks at the grid's values, named 1/16 ... 16
log2_tics() {
    awk -F'\t' -v mults="$mults" "$tex_c"' BEGIN { n = split(mults, M, " "); for (i = 1; i <= n; i++) printf "%s\"%s\" %.6g", (i > 1 ? ", " : ""), cname(M[i]), log(M[i]) / log(2) }'
}

map_figures() {
    local rows=() names=() panels=() r=0 opt dh hs
    for opt in adam sgd; do
        hs=$dheads; [ $opt = sgd ] && hs=$sgd_dheads
        for dh in $hs; do
            rows+=("\"$opt, d_head $dh\" $r")
            names+=("$opt d_head=$dh")
            panels+=("$opt:$dh")
            r=$((r + 1))
        done
    done
    # the none cells last: a line through a row's other cells must not break at them
    python3 "$top/scripts/tglogs.py" map-rows "$dir/cells.tsv" "${panels[@]}" >"$dir/.rows.tsv"
    [ "$(wc -l <"$dir/.rows.tsv")" -gt 1 ] || die "no finished map runs to plot"
    local ytics tics xmin xmax
    ytics=$(IFS=,; echo "${rows[*]}"); tics=$(log2_tics)
    xmin=$(python3 "$top/scripts/tglogs.py" col "$dir/.rows.tsv" log2c | awk 'NR == 2 || (NR > 2 && $1 < m) { m = $1 } END { print m - 0.6 }')
    xmax=$(python3 "$top/scripts/tglogs.py" col "$dir/.rows.tsv" log2c | awk 'NR == 2 || (NR > 2 && $1 > m) { m = $1 } END { print m + 0.6 }')
    # .rows.tsv has a header row: every column below is read by its name
    local what col cb fmt name
    for what in loss ent; do
        col=loss_mean; cb="set logscale cb; set cblabel 'final loss (nats, log scale)'"; fmt="%.3f"; name=science-map-loss.png
        [ $what = ent ] && { col=ent10_mean; cb="set cbrange [0:1]; set cblabel 'attention entropy / uniform at 10% of the steps'"; fmt="%.2f"; name=science-map-entropy10.png; }
        gnuplot <<EOF
set terminal pngcairo size 1150,$((170 + 95 * r)) font ",10" noenhanced
set output '$figs/$name'
set datafile separator "\t"
set datafile columnheaders
set title "temperature map: softmax(c/sqrt(d_head) q.k), mean over seeds $(list $seeds), $steps steps\nnarrow black-framed cells: none (c = sqrt(d_head)); green frame, bold number: every seed reached the c = 1 loss + $reach nats"
set xlabel "c, the multiplier of the scaled logits (log2 axis; c = 1: sqrt, c = sqrt(d_head): none)"
set xrange [$xmin:$xmax]; set yrange [$r - 0.5:-0.5]
set ytics ($ytics)
set xtics ($tics)
$cb
set palette defined (0 "#2b0a3d", 0.15 "#7a1f5c", 0.5 "#e0603a", 1 "#f7f3a6")
set style fill solid 1.0 noborder
none = 'column("none") > 0.5'
all = 'column("reached") == column("seeds")'
set style textbox opaque noborder margins 1,1
plot '$dir/.rows.tsv' using (@none ? 1/0 : column("log2c")):"row":(0.5):(0.45):"$col" with boxxyerror lc palette notitle, \
     '' using (@none ? column("log2c") : 1/0):"row":(0.2):(0.45):"$col" with boxxyerror lc palette notitle, \
     '' using (@none ? column("log2c") : 1/0):"row":(0.2):(0.45) with boxxyerror fs empty lc rgb "white" lw 4 notitle, \
     '' using (@none ? column("log2c") : 1/0):"row":(0.2):(0.45) with boxxyerror fs empty lc rgb "black" lw 1.5 notitle, \
     '' using (@all ? column("log2c") : 1/0):"row":(@none ? 0.17 : 0.46):(0.41) with boxxyerror fs empty lc rgb "#1e8449" lw 3 notitle, \
     '' using (@all ? 1/0 : column("log2c")):(column("row") + (@none ? 0.25 : -0.12)):(sprintf("$fmt", column("$col"))) with labels boxed font ",8" notitle, \
     '' using (@all ? column("log2c") : 1/0):(column("row") + (@none ? 0.25 : -0.12)):(sprintf("$fmt", column("$col"))) with labels boxed font ",9:Bold" notitle, \
     '' using (@none ? column("log2c") : 1/0):(column("row") - 0.25):("none") with labels boxed font ",7" notitle
EOF
    done
    local titles; titles=$(printf '"%s" ' "${names[@]}")
    gnuplot <<EOF
set terminal pngcairo size 1050,620 font ",11" noenhanced
set output '$figs/science-map-loss-vs-c.png'
set title "final loss against c: mean over seeds $(list $seeds), bars from the lowest to the highest seed\nopen circle: none (c = sqrt(d_head)); dashed: the c = 1 loss (mean) + $reach nats"
set xlabel "c, the multiplier of the scaled logits (log2 axis)"; set ylabel "final loss (nats, log scale)"
set xtics ($tics)
set xrange [$xmin:$xmax]
set logscale y; set grid; set key outside right
set datafile separator "\t"
set datafile columnheaders
array T[$r] = [$(printf '"%s",' "${names[@]}" | sed 's/,$//')]
array L1[$r] = [$(for ((i = 0; i < r; i++)); do python3 "$top/scripts/tglogs.py" col "$dir/.rows.tsv" row c loss_mean | awk -F'\t' -v i=$i 'NR > 1 && $1 == i && $2 == "1" { v = $3 } END { printf "%s,", v == "" ? "NaN" : v }'; done | sed 's/,$//')]
plot for [i=0:$((r - 1))] '$dir/.rows.tsv' using (column("row") == i && column("none") < 0.5 ? column("log2c") : 1/0):"loss_mean":"loss_min":"loss_max" with yerrorlines lw 2 pt 7 ps 0.8 lc i + 1 \
        title T[i + 1], \
     for [i=0:$((r - 1))] '' using (column("row") == i && column("none") > 0.5 ? column("log2c") : 1/0):"loss_mean":"loss_min":"loss_max" with yerrorbars pt 6 ps 2 lw 2 lc i + 1 notitle, \
     for [i=0:$((r - 1))] L1[i + 1] + $reach with lines dt 2 lw 1 lc i + 1 notitle
EOF
    rm -f "$dir/.rows.tsv"
    echo "figures: $figs/science-map-loss.png $figs/science-map-entropy10.png $figs/science-map-loss-vs-c.png"
}

# ---- the map under soft-capping ------------------------------------------------------------
# cells.tsv and band.tsv with a softcap column: the band of each cap against that cap's own c = 1 run;
# gaps.tsv: each cap's none cell against the uncapped c = 1 loss (the question: does the cap save the
# forgotten scale, against the model the team meant to train?)
capmap_tables() {
    python3 "$top/scripts/tglogs.py" map-cells "$dir/summary.tsv" "$dir/aggregate.tsv" --reach "$reach" >"$dir/cells.tsv"
    python3 "$top/scripts/tglogs.py" map-band "$dir/cells.tsv" --mults "$mults" >"$dir/band.tsv"
    python3 "$top/scripts/tglogs.py" capmap-gaps "$dir/summary.tsv" >"$dir/gaps.tsv"
    echo "== cells: mean final loss over seeds (min-max), entropy/uniform at 10% of the steps, seeds that reached the same cap's c = 1 loss + $reach"
    python3 "$top/scripts/tglogs.py" map-cells-text "$dir/cells.tsv"
    echo
    echo "== band of c reaching the same cap's c = 1 loss (every seed within $reach nats), and where none (c = sqrt(d_head)) falls"
    column -t -s$'\t' "$dir/band.tsv"
    echo
    echo "== none (c = sqrt(d_head)) at each cap against sqrt without a cap (c = 1, cap none), per seed: gap = none - sqrt (nats)"
    column -t -s$'\t' "$dir/gaps.tsv"
    echo
    run_env
    publish summary.tsv aggregate.tsv cells.tsv band.tsv gaps.tsv run.txt
}

capmap_figures() {
    local dh=${dheads%% *} panels=() names=() r=0 cap tics xmin xmax
    for cap in $caps; do
        panels+=("adam:$dh:$cap")
        if awk -v c="$cap" 'BEGIN { exit !(c == 0) }'; then names+=("no cap"); else names+=("cap $cap"); fi
        r=$((r + 1))
    done
    python3 "$top/scripts/tglogs.py" map-rows "$dir/cells.tsv" "${panels[@]}" >"$dir/.rows.tsv"
    [ "$(wc -l <"$dir/.rows.tsv")" -gt 1 ] || die "no finished capmap runs to plot"
    tics=$(log2_tics)
    xmin=$(python3 "$top/scripts/tglogs.py" col "$dir/.rows.tsv" log2c | awk 'NR == 2 || (NR > 2 && $1 < m) { m = $1 } END { print m - 0.4 }')
    xmax=$(python3 "$top/scripts/tglogs.py" col "$dir/.rows.tsv" log2c | awk 'NR == 2 || (NR > 2 && $1 > m) { m = $1 } END { print m + 0.4 }')
    local machine; machine=$(head -1 "$dir/run.txt" | sed 's/^== //; s/"//g; s/ chosen_by=[^ ]*//; s/ threads=1 omp_threads=1//' | cut -c1-130)
    local what col ylab yset name err style bars
    for what in loss ent; do
        col=loss_mean; ylab="final loss (nats, log scale)"; yset="set logscale y"; name=science-capmap-loss-vs-c.png
        err=':"loss_min":"loss_max"'; style=yerrorlines; bars=" (bars: lowest..highest seed)"
        if [ $what = ent ]; then
            col=ent10_mean; ylab="attention entropy / uniform at 10% of the steps"; yset="set yrange [0:1.05]"
            name=science-capmap-entropy10-vs-c.png; err=""; style=linespoints; bars=""
        fi
        gnuplot <<EOF
set terminal pngcairo size 1100,640 font ",10" noenhanced
set output '$figs/$name'
set title "cap * tanh(c/sqrt(d_head) q.k / cap), d_head $dh, counting task, $steps steps: mean over seeds $(list $seeds)$bars\nopen circle: none (c = sqrt(d_head), the forgotten scale)\n$machine"
set xlabel "c, the multiplier of the scaled logits (log2 axis; c = 1: sqrt)"; set ylabel "$ylab"
set xtics ($tics)
set xrange [$xmin:$xmax]
$yset; set grid; set key outside right
set datafile separator "\t"
set datafile columnheaders
array T[$r] = [$(printf '"%s",' "${names[@]}" | sed 's/,$//')]
plot for [i=0:$((r - 1))] '$dir/.rows.tsv' using (column("row") == i && column("none") < 0.5 ? column("log2c") : 1/0):"$col"$err with $style lw 2 pt 7 ps 0.8 lc i + 1 title T[i + 1], \
     for [i=0:$((r - 1))] '' using (column("row") == i && column("none") > 0.5 ? column("log2c") : 1/0):"$col" with points pt 6 ps 2.2 lw 2 lc i + 1 notitle
EOF
    done
    rm -f "$dir/.rows.tsv"
    echo "figures: $figs/science-capmap-loss-vs-c.png $figs/science-capmap-entropy10-vs-c.png"
}

# ---- the logit features on real code, today's recipe (issue 39) ----------------------------------
# the sweep preset logits-code (scripts/reproduce_code.sh's model and recipe, 1,000 steps): none and sqrt
# with caps 50, 30, 10 and without, and with sinks, kv-heads 1, window 32, ALiBi, dropout 0.1, each alone
capcode_grid() {
    "$sweep" preset logits-code "$dir" --seeds "$(list $seeds)"
    sweep_finish "$grid"
}

capcode_tables() {
    python3 "$top/scripts/tglogs.py" feature-table "$dir" >"$dir/table.tsv"
    echo "== none against sqrt on code (validation loss at the end, mean and min-max over seeds; gap per seed), the unscaled"
    echo "== heads: below 10% of uniform at 10% of the steps, the step their lowest head first fell below it, how many rose above again"
    column -t -s$'\t' "$dir/table.tsv"
    echo
    run_env
    publish table.tsv summary.tsv run.txt
}

capcode_figures() {
    local feats=("no cap" "cap 50" "cap 30" "cap 10") data="$dir/.curves"
    python3 "$top/scripts/tglogs.py" feature-curves "$dir" "$data" "${feats[@]}"
    local machine; machine=$(head -1 "$dir/run.txt" | sed 's/^== //; s/"//g; s/ chosen_by=[^ ]*//; s/ threads=1 omp_threads=1//' | cut -c1-130)
    gnuplot <<EOF
set terminal pngcairo size 1200,560 font ",10" noenhanced
set output '$figs/science-capcode-curves.png'
set datafile separator "\t"
set datafile columnheaders
set multiplot layout 1,2 title "code model (scripts/reproduce_code.sh's recipe), d_head 128, mean over seeds $(list $seeds): none dashed, sqrt solid, one colour per cap\n$machine"
set xlabel "step"; set grid; set key top right
set ylabel "validation loss (nats)"
set title "validation loss"
plot for [i=1:4] sprintf("$data/%s_sqrt.tsv", word("no_cap cap_50 cap_30 cap_10", i)) using "step":"val_loss" with linespoints lw 2 pt 7 ps 0.5 lc i title word("no-cap cap-50 cap-30 cap-10", i), \
     for [i=1:4] sprintf("$data/%s_none.tsv", word("no_cap cap_50 cap_30 cap_10", i)) using "step":"val_loss" with linespoints lw 2 dt 2 pt 6 ps 0.5 lc i notitle
set ylabel "lowest head's entropy / uniform"
set title "the lowest head (below 0.1: collapsed)"
set yrange [0:1.05]
plot for [i=1:4] sprintf("$data/%s_sqrt.tsv", word("no_cap cap_50 cap_30 cap_10", i)) using "step":"low_head" with linespoints lw 2 pt 7 ps 0.5 lc i title word("no-cap cap-50 cap-30 cap-10", i), \
     for [i=1:4] sprintf("$data/%s_none.tsv", word("no_cap cap_50 cap_30 cap_10", i)) using "step":"low_head" with linespoints lw 2 dt 2 pt 6 ps 0.5 lc i notitle, \
     0.1 with lines lc rgb "gray" dt 3 notitle
unset multiplot
EOF
    rm -rf "$data"
    echo "figures: $figs/science-capcode-curves.png"
}

# ---- the learned scale ----------------------------------------------------------------
learned_grid() {
    sweep_grid --grid "learned-param=$(list $forms) learned-init=$(list $inits) d_head=$(list $dheads) scale-lr=$(list $scale_lrs) seed=$(list $seeds)" \
        --set scale=learned
}

# runs.tsv: per run, c_h = s_h (the logged multiplier times sqrt(d_head)) at step 0 and at the end (min-max
# over heads), the first logged step at which every head is inside the band and whether they all are at the
# end, the final loss and whether it reached the map's c = 1 loss of the same head size and seed + reach
learned_tables() {
    local mapdir="$out/science-map" src
    if [ -n "$band" ]; then src="--band $band"
    elif [ -s "$mapdir/band.tsv" ]; then src="the map's band, $mapdir/band.tsv (adam rows)"
    else src="none: no --band and no map results in $mapdir, so step_in_band is n/a"; fi
    python3 "$top/scripts/tglogs.py" learned-runs "$dir/summary.tsv" "$dir/runs" ${band:+--band "$band"} --map "$mapdir" \
        --reach "$reach" >"$dir/runs.tsv"
    echo "== learned scale: c_h = s_h, the multiplier of q.k over 1/sqrt(d_head); scale_lr 0: the model's --lr; band: $src"
    echo "== reached: final loss <= the map's c = 1 loss (adam, same d_head and seed) + $reach"
    column -t -s$'\t' "$dir/runs.tsv"
    echo
    echo "== per setting: final loss mean (min-max) over seeds, seeds that reached, step in band per seed"
    python3 "$top/scripts/tglogs.py" learned-cells "$dir/runs.tsv" "$dir/aggregate.tsv" >"$dir/cells.tsv"
    column -t -s$'\t' "$dir/cells.tsv"
    echo
    run_env
    publish summary.tsv aggregate.tsv runs.tsv cells.tsv run.txt
}

# per head size: rows = starts (--inits), for each --scale-lrs value two panels: every head's multiplier
# against the step (log axis; the map's band shaded, none dashed) and the loss; colour: the form
learned_figures() {
    local dh lo="" hi="" slr init
    for dh in $dheads; do
        # the band this grid's figures shade is the map grid's: --band, or science-map/band.tsv of the same --out
        if [ -n "$band" ]; then lo=${band%,*}; hi=${band#*,}
        elif [ -s "$out/science-map/band.tsv" ]; then
            read -r lo hi < <(python3 "$top/scripts/tglogs.py" col "$out/science-map/band.tsv" optim d_head band_lo band_hi |
                awk -F'\t' -v d="$dh" '$1 == "adam" && $2 == d && $3 != "n/a" { print $3, $4 }') || true
            [ -n "$lo" ] || echo "scripts/science.sh: learned: $out/science-map/band.tsv has no band for AdamW at d_head $dh: its figure shows none" >&2
        else
            die "learned: the figures shade the temperature map's band, from $out/science-map/band.tsv, which is missing: run 'scripts/science.sh map --out $out' first, or give --band LO,HI"
        fi
        local ninit ncol name="$figs/science-learned-dh$dh.png"
        ninit=$(wc -w <<<"$inits"); ncol=$((2 * $(wc -w <<<"$scale_lrs")))
        {
            echo "set terminal pngcairo size $((430 * ncol)),$((90 + 360 * ninit)) font ',10' noenhanced"
            echo "set output '$name'"
            echo "set datafile separator '\t'; set datafile columnheaders; set grid; set key bottom left font ',8' opaque"
            echo "set multiplot layout $ninit,$ncol title \"learned per-head scale, d_head $dh, seeds $(list $seeds): every head's multiplier c = s_h against the step, and the loss (one line a seed)\" font ',12'"
            for init in $inits; do
                for slr in $scale_lrs; do
                    local files=() f lr_t
                    lr_t="scale-lr $slr"; [ "$slr" = 0 ] && lr_t="scale-lr = model lr"
                    while IFS=$'\t' read -r f; do files+=("$dir/runs/$f.tsv"); done < <(
                        python3 "$top/scripts/tglogs.py" col "$dir/runs.tsv" id init d_head scale_lr |
                        awk -F'\t' -v i="$init" -v d="$dh" -v s="$slr" 'NR > 1 && $2 == i && $3 == d && $4 == s { print $1 }')
                    [ ${#files[@]} -gt 0 ] || continue
                    echo "set title 'from $init, $lr_t: multiplier per head'"
                    echo "set logscale y; set xlabel 'step'; set ylabel 'c = s_h (log axis)'; set yrange [0.05:30]"
                    [ -n "$lo" ] && echo "set object 1 rect from graph 0, first $lo to graph 1, first $hi fc rgb '#d5f5e3' fs solid 0.6 noborder behind"
                    echo "set arrow 2 from graph 0, first $(sqrt_of "$dh") to graph 1, first $(sqrt_of "$dh") nohead dt 2 lc rgb 'gray40'"
                    echo "set arrow 3 from graph 0, first 1 to graph 1, first 1 nohead dt 3 lc rgb 'gray40'"
                    # per run: its colour (the form) and a legend entry for the first run of each form
                    local plots=() colour=() key=() seen="" i f h t
                    for i in "${!files[@]}"; do
                        f=log; case ${files[$i]} in *learnedparam-linear*) f=linear ;; esac
                        colour[$i]=$([ $f = log ] && echo c0392b || echo 2471a3)
                        key[$i]=notitle; [[ "$seen" == *" $f"* ]] || { key[$i]="title '$f form'"; seen+=" $f"; }
                    done
                    for i in "${!files[@]}"; do
                        t=${key[$i]}
                        for h in $(awk '!/^#/ { print; exit }' "${files[$i]}" | tr '\t' '\n' | grep '^scale_l'); do
                            plots+=("'${files[$i]}' using 'step':(column('$h') * $(sqrt_of "$dh")) with lines lw 1 lc rgb '#${colour[$i]}' $t")
                            t=notitle
                        done
                    done
                    plots+=("NaN with filledcurves fc rgb '#d5f5e3' title 'band of the map (c)'" "NaN with lines dt 2 lc rgb 'gray40' title 'none: c = sqrt(d_head)'" "NaN with lines dt 3 lc rgb 'gray40' title 'sqrt: c = 1'")
                    [ -n "$lo" ] || unset 'plots[-3]'
                    (IFS=,; echo "plot ${plots[*]}")
                    echo "unset object 1; unset arrow 2; unset arrow 3"
                    echo "set title 'from $init, $lr_t: training loss'; set ylabel 'loss (nats, log axis)'; set yrange [0.005:5]"
                    plots=()
                    for i in "${!files[@]}"; do
                        plots+=("'${files[$i]}' using 'step':'loss' with lines lw 1.2 lc rgb '#${colour[$i]}' ${key[$i]}")
                    done
                    (IFS=,; echo "plot ${plots[*]}")
                done
            done
            echo "unset multiplot"
        } >"$dir/.learned.gp"
        gnuplot "$dir/.learned.gp"
        rm -f "$dir/.learned.gp"
        echo "figure: $name"
    done
}

# ---- tapegrad against PyTorch -----------------------------------------------------------
# tapegrad through the sweep; PyTorch (not attn_scale: the sweep cannot run it) by its own loop, with
# OPENBLAS_CORETYPE set to the core that fits this CPU (blas_info --best-core), as scripts/bench.sh does
torch_grid() {
    local dh=${dheads%% *}
    /usr/bin/python3 -c 'import torch' 2>/dev/null || die "torch: /usr/bin/python3 cannot import torch"
    sweep_grid --grid "scale=none,sqrt seed=$(list $seeds)" --set d_head="$dh"
    local best sc s todo=() id flags
    best=$(env -u OPENBLAS_CORETYPE "$top/build/experiments/blas_info" --best-core)
    mkdir -p "$dir/torch"
    OPENBLAS_VERBOSE=2 OPENBLAS_CORETYPE=$best /usr/bin/python3 -c 'import torch' 2>&1 | sed -n 's/^Core: //p' >"$dir/torch/core"
    for sc in none sqrt; do for s in $seeds; do
        id="torch_scale-${sc}_seed-$s"
        flags="--steps $steps --warmup $warmup --d-head $dh --scale $sc --seed $s --threads 1"
        # done: the summary line of a run with these very flags
        [ -s "$dir/torch/$id.done" ] && [ "$(cat "$dir/torch/$id.flags" 2>/dev/null)" = "$flags" ] && continue
        printf '%s\n' "$flags" >"$dir/torch/$id.flags"
        todo+=("$id")
    done; done
    [ ${#todo[@]} -gt 0 ] || return 0
    local t0=$SECONDS load; load=$(cut -d' ' -f1-3 /proc/loadavg)
    # shellcheck disable=SC2016
    printf '%s\n' "${todo[@]}" | OPENBLAS_CORETYPE=$best parallel --will-cite -j "$jobs" --halt now,fail=1 \
        'd='"$dir/torch"'; /usr/bin/python3 '"$top"'/scripts/torch_attn_scale.py $(cat $d/{}.flags) --log $d/{}.tsv >$d/{}.out 2>$d/{}.err &&
         mv $d/{}.out $d/{}.done || { echo "scripts/science.sh: torch run {} failed: $(tail -1 $d/{}.err)" >&2; exit 1; }' ||
        die "a PyTorch run failed"
    printf '%s\t%s\t%d runs of %d\t%d s wall\t%d at a time, 1 thread each\tload average before %s, after %s\n' \
        "$(date -u +%FT%TZ)" "torch (PyTorch)" ${#todo[@]} $(( $(wc -w <<<"$seeds") * 2 )) $((SECONDS - t0)) "$jobs" "$load" \
        "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$dir/walltime.tsv" >&2
}
torch_logs() { cut -f1 "$dir/manifest.tsv" | sed "s|^|$dir/runs/|; s|\$|.tsv|"; ls "$dir"/torch/torch_*.tsv; }

torch_tables() {
    # shellcheck disable=SC2046
    "$top/scripts/summarize.sh" $(torch_logs) | tee "$dir/summarize.txt"
    echo
    echo "== ranges over seeds $(list $seeds): final loss, entropy/uniform at step 0 and at 10% of the steps"
    # shellcheck disable=SC2046
    python3 "$top/scripts/tglogs.py" ranges $(torch_logs) >"$dir/ranges.tsv"
    column -t -s$'\t' "$dir/ranges.tsv"
    echo
    run_env
    echo "== PyTorch: OPENBLAS_CORETYPE=$(env -u OPENBLAS_CORETYPE "$top/build/experiments/blas_info" --best-core), OpenBLAS core $(cat "$dir/torch/core")" | tee -a "$dir/run.txt"
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^seconds=/) { t += substr($i, 9); n++ } } END { if (n) printf "== PyTorch: %d runs took %.0f s of training\n", n, t }' "$dir"/torch/*.done | tee -a "$dir/run.txt"
    publish summary.tsv ranges.tsv summarize.txt run.txt
}

torch_figures() {
    # shellcheck disable=SC2046
    gnuplot -c /dev/stdin "$figs/science-torch-vs-tapegrad.png" "$steps" "$(torch_logs | tr '\n' ' ')" "${dheads%% *}" <<'EOF'
set terminal pngcairo size 1000,600 font ",11" noenhanced
set output ARG1
set datafile separator "\t"
set datafile columnheaders
set title sprintf("training loss, d_head %s, %s steps, one line a seed\ntapegrad solid, PyTorch dashed; none red (tapegrad) or orange (PyTorch), sqrt blue", ARG4, ARG2)
set xlabel "step"; set ylabel "training loss (nats, log axis)"; set logscale y; set grid; set key outside right
fw(f) = strstrt(f, "/torch/") ? "PyTorch" : "tapegrad"
sc(f) = strstrt(f, "scale-none") ? "none" : "sqrt"
seed(f) = system(sprintf("sed -n 's/^# seed=//p' '%s'", f))
colour(f) = fw(f) eq "PyTorch" ? (sc(f) eq "none" ? "#e67e22" : "#5dade2") : (sc(f) eq "none" ? "#922b21" : "#1a5276")
dash(f) = fw(f) eq "PyTorch" ? 2 : 1
F = ARG3
plot for [i=1:words(F)] word(F, i) using "step":"loss" with lines lw 1.5 dt dash(word(F, i)) lc rgb colour(word(F, i)) \
    title sprintf("%s %s seed %s", fw(word(F, i)), sc(word(F, i)), seed(word(F, i)))
EOF
    echo "figure: $figs/science-torch-vs-tapegrad.png"
}

# ---- attention maps -------------------------------------------------------------------------
maps_grid() {
    local s=${seeds%% *} dh=${dheads%% *}
    sweep_grid --grid "scale=none,sqrt" --set seed="$s" --set d_head="$dh" --set dump-attn=0,$((steps / 10)),"$steps" \
        --set scale=none:dump-attn-file="$dir/maps-none.st" --set scale=sqrt:dump-attn-file="$dir/maps-sqrt.st"
}

maps_figures() {
    local s=${seeds%% *} dh=${dheads%% *} sc
    "$top/scripts/plot_attn.sh" "$dir/maps-none.st" "$dir/maps-sqrt.st" -o "$figs/science-attn-maps-dh$dh.png" \
        --title "attention on the probe sequence, d_head $dh, seed $s, steps 0, $((steps / 10)), $steps: none (left 3 columns) and sqrt (right 3)"
    echo "== where each head's rows put their largest weight (build/experiments/attn_maps --summary)"
    for sc in none sqrt; do
        echo "-- $sc"
        "$top/build/experiments/attn_maps" --summary "$dir/maps-$sc.st" | grep -v '^#' | tee "$dir/summary-$sc.tsv"
    done
    echo
    echo "== the same, mean over the heads: the share of rows whose largest weight is on each place"
    python3 "$top/scripts/tglogs.py" maps-heads none="$dir/summary-none.tsv" sqrt="$dir/summary-sqrt.tsv" >"$dir/summary-heads.tsv"
    column -t -s$'\t' "$dir/summary-heads.tsv"
    echo
    echo "== the key most rows of a head look at: its position (0: the BOS), token, and the share of rows (1..T-1) whose largest weight is there"
    for sc in none sqrt; do "$top/build/experiments/attn_maps" "$dir/maps-$sc.st" >"$dir/.maps-$sc.txt"; done
    python3 "$top/scripts/tglogs.py" maps-topkey none="$dir/.maps-none.txt" sqrt="$dir/.maps-sqrt.txt" >"$dir/top-key.tsv"
    rm -f "$dir/.maps-none.txt" "$dir/.maps-sqrt.txt"
    column -t -s$'\t' "$dir/top-key.tsv"
    echo
    run_env
    publish summary-none.tsv summary-sqrt.tsv summary-heads.tsv top-key.tsv run.txt
}

"${grid}_grid"
case $grid in
    map) map_tables; map_figures ;;
    capmap) capmap_tables; capmap_figures ;;
    capcode) capcode_tables; capcode_figures ;;
    learned) learned_tables; learned_figures ;;
    torch) torch_tables; torch_figures ;;
    maps) maps_figures ;;
esac
