#!/usr/bin/env bash
# How far off may the attention scale be, and can a model learn it back? The
# grids, figures and tables of issue 11, each one command:
#   scripts/science.sh map      temperature map: --scale mult c for each c of --mults and c = sqrt(d_head)
#                               (the `none` cell), each head size of --dheads, AdamW; and the --sgd-dheads
#                               rows with SGD (lr 0.3 -> 0.01, as scripts/sweep.sh). Heatmaps of the final
#                               loss and of the entropy at 10% of the steps, final loss against c, the band table.
#   scripts/science.sh learned  the learned per-head scale (--learned-param of each of --forms, started at
#                               each of --inits) at each of --dheads: the multiplier against the step per head
#                               next to the loss, and when the multiplier enters the map's band.
#   scripts/science.sh torch    tapegrad (build/experiments/attn_scale) and PyTorch (scripts/torch_attn_scale.py),
#                               none and sqrt: the loss curves on one figure and the ranges side by side.
#   scripts/science.sh maps     attention maps of none and sqrt on the probe at steps 0, 10% and the end.
# options: --seeds "1 2 3"  --steps 600  --dheads "8 32 128"  --mults "0.0625 0.125 0.25 0.5 1 2 4 8 16"
#          --sgd-dheads "128" ("" for none)  --forms "log"  --inits "none sqrt"  --scale-lr LR (learned; 0: --lr)
#          --band LO,HI (learned: the band in c; default: from the map's results in the same --out)
#          --reach NATS (map: 0.05)  --out DIR (runs/; each grid in DIR/science-<grid>/)
#          --figures DIR (default: that folder)  --jobs N
# A run whose log is complete for the same flags is not run again, so a grid can be stopped and restarted.
# "Reaches the scaled loss": final loss (mean of the last 10% of logged steps, as scripts/summarize.sh) at
# most L1 + 0.05 nats (--reach NATS), L1 the c = 1 run's final loss at the same optimizer, head size and
# seed; the band: the c of the grid, contiguous around c = 1, where every seed reaches it.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
grid=$1; shift
case "$grid" in map|learned|torch|maps) ;; *) usage ;; esac
seeds="1 2 3"; steps=600; dheads=""; mults="0.0625 0.125 0.25 0.5 1 2 4 8 16"; sgd_dheads="128"
forms="log"; inits="none sqrt"; scale_lr=0; band=""; reach=0.05; out="$top/runs"; figures=""; jobs=$(nproc)
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage
    case "$1" in
        --seeds) seeds=$2 ;; --steps) steps=$2 ;; --dheads) dheads=$2 ;; --mults) mults=$2 ;;
        --sgd-dheads) sgd_dheads=$2 ;; --forms) forms=$2 ;; --inits) inits=$2 ;; --scale-lr) scale_lr=$2 ;;
        --band) band=$2 ;; --reach) reach=$2 ;; --out) out=$2 ;; --figures) figures=$2 ;; --jobs) jobs=$2 ;;
        *) echo "scripts/science.sh: unknown option '$1'" >&2; usage ;;
    esac
    shift 2
done
if [ -z "$dheads" ]; then case "$grid" in map) dheads="8 32 128" ;; learned) dheads="128 32" ;; *) dheads="128" ;; esac; fi
num() { [[ "$2" =~ ^[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$ ]] || { echo "scripts/science.sh: $1 '$2' is not a number" >&2; exit 2; }; }
for s in $seeds; do [[ "$s" =~ ^[0-9]+$ ]] || { echo "scripts/science.sh: seed '$s' is not a whole number" >&2; exit 2; }; done
for d in $dheads $sgd_dheads; do [[ "$d" =~ ^[1-9][0-9]*$ ]] || { echo "scripts/science.sh: head size '$d' is not a positive number" >&2; exit 2; }; done
for c in $mults; do num "--mults value" "$c"; done
num --scale-lr "$scale_lr"
num --reach "$reach"
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "scripts/science.sh: --steps '$steps' is not a positive number" >&2; exit 2; }
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "scripts/science.sh: --jobs '$jobs' is not a positive number" >&2; exit 2; }
[ -z "$band" ] || [[ "$band" =~ ^[0-9.eE+-]+,[0-9.eE+-]+$ ]] || { echo "scripts/science.sh: --band '$band': LO,HI" >&2; exit 2; }
for f in $forms; do case $f in log|linear) ;; *) echo "scripts/science.sh: --forms: '$f' is not log or linear" >&2; exit 2 ;; esac; done
for i in $inits; do case $i in none|sqrt) ;; *) echo "scripts/science.sh: --inits: '$i' is not none or sqrt" >&2; exit 2 ;; esac; done
bin="$top/build/experiments/attn_scale"
[ -x "$bin" ] || { echo "scripts/science.sh: $bin is missing: run scripts/test.sh first" >&2; exit 2; }
. "$top/scripts/setup.sh"
tg_need "${TG_PLOT_PACKAGES[@]}"
[ "$grid" = torch ] && tg_need "${TG_TORCH_PACKAGES[@]}"
dir="$out/science-$grid"
figs=${figures:-$dir}
mkdir -p "$dir" "$figs"
warmup=$(( steps < 50 ? steps : 50 ))
common="--steps $steps --warmup $warmup --threads 1"
sqrt_of() { awk -v d="$1" 'BEGIN { printf "%.17g", sqrt(d) }'; }

# ---- running: one line per run, "label|program|flags" -----------------------------
runs=()
add() { runs+=("$1|$2|$3"); }
run_all() {
    local todo=() r label prog flags
    for r in "${runs[@]}"; do
        IFS='|' read -r label prog flags <<<"$r"
        # done already: the summary line printed by a run with these very flags
        if [ -f "$dir/$label.flags" ] && [ "$(cat "$dir/$label.flags")" = "$prog $flags" ] &&
            grep -q 'final_loss=' "$dir/$label.out" 2>/dev/null; then continue; fi
        printf '%s\n' "$prog $flags" >"$dir/$label.flags"
        todo+=("$r")
    done
    echo "science $grid: ${#runs[@]} runs, ${#todo[@]} to run, $jobs at a time, in $dir" >&2
    [ ${#todo[@]} -eq 0 ] && return 0
    local start=$SECONDS
    if ! printf '%s\n' "${todo[@]}" | xargs -P "$jobs" -d '\n' -n 1 bash -c '
            IFS="|" read -r label prog flags <<<"$4"
            case $prog in
                attn_scale) cmd=("$1" --overwrite) ;;   # a rerun replaces the log of a failed or changed run
                torch) cmd=(/usr/bin/python3 "$3/scripts/torch_attn_scale.py") ;;
            esac
            "${cmd[@]}" $flags --log "$2/$label.tsv" >"$2/$label.out" 2>"$2/$label.err" ||
                { echo "scripts/science.sh: $label failed: $(tail -1 "$2/$label.err")" >&2; rm -f "$2/$label.flags"; exit 1; }' \
            _ "$bin" "$dir" "$top"; then
        echo "scripts/science.sh: a run failed" >&2
        exit 1
    fi
    echo "science $grid: ${#todo[@]} runs in $((SECONDS - start)) s" >&2
}
logs_of() { local r; for r in "${runs[@]}"; do echo "$dir/${r%%|*}.tsv"; done; }

# final loss and entropy at 10% (as scripts/summarize.sh) of each log, with its settings:
# optim d_head c none(1/0: the extra cell c = sqrt(d_head), label _cnone_) seed final ent10 file
run_table() {
    awk -F'\t' '
    function flush(   k, i, fl, c) {
        if (!file) return
        k = int((nrow + 9) / 10); fl = 0
        for (i = nrow - k + 1; i <= nrow; i++) fl += loss[i]
        c = cfg["scale"] == "mult" ? cfg["scale_mult"] : cfg["scale"] == "none" ? sqrt(cfg["d_head"]) : 1
        printf "%s\t%s\t%.6g\t%d\t%s\t%.6f\t%.4f\t%s\n", cfg["optim"], cfg["d_head"], c,
            file ~ /_cnone_/, cfg["seed"], fl / k, e10, file
    }
    FNR == 1 { flush(); file = FILENAME; nrow = 0; hdr = 0; delete cfg; e10 = -1 }
    /^# / { split(substr($0, 3), kv, "="); cfg[kv[1]] = kv[2]; next }
    !hdr { hdr = 1; next }
    { nrow++; loss[nrow] = $2; if (e10 < 0 && $1 + 0 >= cfg["steps"] / 10) e10 = $3 / cfg["ref_entropy_uniform"] }
    END { flush() }' "$@"
}

# ---- the temperature map ------------------------------------------------------------
map_grid() {
    local opt dh c s lr
    for opt in adam sgd; do
        local hs=$dheads; lr="--lr 3e-3 --lr-min 3e-4"
        [ $opt = sgd ] && { hs=$sgd_dheads; lr="--lr 0.3 --lr-min 0.01"; }
        for dh in $hs; do
            # c = sqrt(d_head) is the none cell, unless the grid has it already (d_head 4, 16, 64, ...)
            local extra=none
            for c in $mults; do awk -v a="$c" -v b="$(sqrt_of "$dh")" 'BEGIN { exit !((a - b)^2 < 1e-10 * b * b) }' && extra=""; done
            for c in $mults $extra; do
                local cv=$c; [ "$c" = none ] && cv=$(sqrt_of "$dh")
                for s in $seeds; do
                    add "${opt}_dh${dh}_c${c}_s$s" attn_scale "$common --optim $opt $lr --d-head $dh --scale mult --scale-mult $cv --seed $s"
                done
            done
        done
    done
}

# per cell: optim d_head c log2c none n mean min max ent10 reached; and the band per optim and d_head
map_tables() {
    run_table $(logs_of) >"$dir/map-runs.tsv"
    awk -F'\t' -v reach="$reach" '
    { key = $1 SUBSEP $2 SUBSEP $3; if (!(key in n)) order[++nk] = key
      n[key]++; sum[key] += $6; e[key] += $7; nn[key] = $4
      if (!(key in mn) || $6 < mn[key]) mn[key] = $6; if (!(key in mx) || $6 > mx[key]) mx[key] = $6
      fin[key, $5] = $6; seeds[$5] = 1; if ($3 == 1) one[$1 SUBSEP $2] = 1 }
    END {
        for (i = 1; i <= nk; i++) {
            split(order[i], p, SUBSEP); key = order[i]; r = 0; m = 0
            for (s in seeds) if ((key, s) in fin) { m++; l1 = fin[p[1], p[2], 1, s]
                if (((p[1], p[2], 1, s) in fin) && fin[key, s] <= l1 + reach) r++ }
            printf "%s\t%s\t%s\t%.4f\t%d\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%d\n", p[1], p[2], p[3], log(p[3]) / log(2), nn[key],
                n[key], sum[key] / n[key], mn[key], mx[key], e[key] / n[key], ((p[1] SUBSEP p[2]) in one) ? r : -1
        }
    }' "$dir/map-runs.tsv" | sort -t$'\t' -k1,1 -k2,2n -k3,3g >"$dir/map-cells.tsv"
    # the band: grid values (not the none cell) contiguous around c = 1 where every seed reached
    awk -F'\t' '
    $5 == 0 { k = $1 SUBSEP $2; c[k, ++m[k]] = $3; ok[k, m[k]] = $11 == $6; if ($3 == 1) at1[k] = m[k] }
    $5 == 1 || ($3 - sqrt($2))^2 < 1e-10 * $3 * $3 {
        k = $1 SUBSEP $2; none[k] = $3; nmean[k] = $7; nmin[k] = $8; nmax[k] = $9; nreach[k] = $11 < 0 ? "n/a" : $11 "/" $6 }
    $3 == 1 && $5 == 0 { l1[$1 SUBSEP $2] = $7; l1min[$1 SUBSEP $2] = $8; l1max[$1 SUBSEP $2] = $9 }
    END {
        for (k in m) {
            split(k, p, SUBSEP)
            if (!(k in at1)) { printf "%s\t%s\tn/a\tn/a\t-\t%s\t-\t-\t-\n", p[1], p[2], none[k]; continue }
            lo = at1[k]; hi = at1[k]
            while (lo > 1 && ok[k, lo - 1]) lo--
            while (hi < m[k] && ok[k, hi + 1]) hi++
            inb = (k in none) && ok[k, at1[k]] && none[k] >= c[k, lo] && none[k] <= c[k, hi]
            printf "%s\t%s\t%s\t%s\t%.4f (%.4f-%.4f)\t%s\t%s\t%s\t%s\n", p[1], p[2], ok[k, at1[k]] ? c[k, lo] : "none",
                ok[k, at1[k]] ? c[k, hi] : "none", l1[k], l1min[k], l1max[k], (k in none) ? none[k] : "-",
                (k in none) ? sprintf("%.4f (%.4f-%.4f)", nmean[k], nmin[k], nmax[k]) : "-", (k in none) ? nreach[k] : "-",
                (k in none) ? (inb ? "yes" : "no") : "-"
        }
    }' "$dir/map-cells.tsv" | sort -t$'\t' -k1,1 -k2,2n >"$dir/map-band.tsv"
    sed -i '1i optim\td_head\tband_lo\tband_hi\tloss_c1\tnone_c\tnone_loss\tnone_reached\tnone_in_band' "$dir/map-band.tsv"
    echo "== cells: mean final loss over seeds (min-max), entropy/uniform at 10% of the steps, seeds that reached the c = 1 loss"
    awk -F'\t' 'BEGIN { printf "%-5s %6s %10s %5s %8s %19s %8s %8s\n", "optim", "d_head", "c", "none", "loss", "(min-max)", "ent@10%", "reached" }
        { printf "%-5s %6s %10s %5s %8.4f %19s %8.3f %8s\n", $1, $2, $3, $5 ? "none" : "", $7, "(" $8 "-" $9 ")", $10, $11 < 0 ? "n/a" : $11 "/" $6 }' "$dir/map-cells.tsv"
    echo
    echo "== band of c reaching the scaled loss (final loss <= L1 + $reach nats for every seed, L1: c = 1), and where none falls"
    column -t -s$'\t' "$dir/map-band.tsv"
}

map_figures() {
    local rows=() names="" r=0 opt dh
    : >"$dir/map-rows.tsv"
    for opt in adam sgd; do
        local hs=$dheads; [ $opt = sgd ] && hs=$sgd_dheads
        for dh in $hs; do
            rows+=("\"$opt d_head $dh\" $r")
            names+="${opt}_dh$dh "
            awk -F'\t' -v o=$opt -v d=$dh -v r=$r '$1 == o && $2 == d { print r "\t" $0 }' "$dir/map-cells.tsv" >>"$dir/map-rows.tsv"
            r=$((r + 1))
        done
    done
    [ -s "$dir/map-rows.tsv" ] || { echo "scripts/science.sh: no finished map runs to plot" >&2; exit 1; }
    local ytics; ytics=$(IFS=,; echo "${rows[*]}")
    local xmin xmax
    xmin=$(awk -F'\t' 'NR == 1 || $5 < m { m = $5 } END { print m - 0.6 }' "$dir/map-rows.tsv")
    xmax=$(awk -F'\t' 'NR == 1 || $5 > m { m = $5 } END { print m + 0.6 }' "$dir/map-rows.tsv")
    # columns of map-rows.tsv: 1 row, 2 optim, 3 d_head, 4 c, 5 log2c, 6 none, 7 n, 8 mean, 9 min, 10 max, 11 ent10, 12 reached
    for what in loss ent; do
        local col=8 cb="set logscale cb; set cblabel 'final loss (nats, log scale)'" fmt="%.3f" name=map-loss.png
        [ $what = ent ] && { col=11; cb="set cbrange [0:1]; set cblabel 'entropy / uniform at 10% of the steps'"; fmt="%.2f"; name=map-entropy10.png; }
        gnuplot <<EOF
set terminal pngcairo size 1100,$((140 + 90 * r)) font ",10" noenhanced
set output '$figs/$name'
set title "temperature map: softmax(c/sqrt(d_head) q.k), mean over seeds $seeds, $steps steps (framed cell: none, c = sqrt(d_head))"
set xlabel "log2 c"
set xrange [$xmin:$xmax]; set yrange [$r - 0.5:-0.5]
set ytics ($ytics)
set xtics 1
$cb
set palette defined (0 "#2b0a3d", 0.15 "#7a1f5c", 0.5 "#e0603a", 1 "#f7f3a6")
set style fill solid 1.0 noborder
none(x) = x > 0.5
set style textbox opaque noborder margins 1,1
plot '$dir/map-rows.tsv' using (none(\$6) ? 1/0 : \$5):1:(0.5):(0.45):$col with boxxyerror lc palette notitle, \
     '' using (none(\$6) ? \$5 : 1/0):1:(0.22):(0.45):$col with boxxyerror lc palette notitle, \
     '' using (none(\$6) ? \$5 : 1/0):1:(0.22):(0.45) with boxxyerror fs empty lc rgb "black" lw 2 notitle, \
     '' using 5:(\$1 + (none(\$6) ? 0.3 : 0)):(sprintf("$fmt", \$$col)) with labels boxed font ",8" notitle
EOF
    done
    gnuplot <<EOF
set terminal pngcairo size 1000,600 font ",11" noenhanced
set output '$figs/map-loss-vs-c.png'
set title "final loss against c (mean over seeds $seeds, bars: min to max); open circle: none (c = sqrt(d_head))"
set xlabel "log2 c"; set ylabel "final loss (nats)"
set logscale y; set grid; set key outside right
set datafile separator "\t"
plot for [i=0:$((r - 1))] '$dir/map-rows.tsv' using (\$1 == i && \$6 < 0.5 ? \$5 : 1/0):8:9:10 with yerrorlines lw 2 lc i + 1 \
        title word("$names", i + 1), \
     for [i=0:$((r - 1))] '' using (\$1 == i && \$6 > 0.5 ? \$5 : 1/0):8:9:10 with yerrorbars pt 6 ps 2 lw 2 lc i + 1 notitle
EOF
    echo "figures: $figs/map-loss.png $figs/map-entropy10.png $figs/map-loss-vs-c.png"
}

# ---- the learned scale ----------------------------------------------------------------
learned_grid() {
    local dh f i s lrflag="" tag=""
    [ "$scale_lr" != 0 ] && { lrflag="--scale-lr $scale_lr"; tag="_slr$scale_lr"; }
    for dh in $dheads; do for f in $forms; do for i in $inits; do for s in $seeds; do
        add "learned_${f}_from${i}${tag}_dh${dh}_s$s" attn_scale \
            "$common --d-head $dh --scale learned --learned-param $f --learned-init $i $lrflag --seed $s"
    done; done; done; done
}

# per run and head: c = s_h (the logged multiplier times sqrt(d_head)) at step 0 and at the end, the first
# logged step at which every head of the run is inside the band, the final loss
learned_tables() {
    local mapband="$out/science-map/map-band.tsv"
    echo "== learned scale: c_h = s_h, the multiplier of q.k over 1/sqrt(d_head); band: $( [ -n "$band" ] && echo "--band $band" ||
        { [ -s "$mapband" ] && echo "from $mapband (adam rows)" || echo "none given, no map results: step_in_band is n/a"; })"
    printf 'run\td_head\tfinal_loss\tc_step0\tc_end(min-max over heads)\tstep_in_band\n'
    local f
    for f in $(logs_of); do
        awk -F'\t' -v band="$band" -v mapband="$mapband" '
        /^# / { split(substr($0, 3), kv, "="); cfg[kv[1]] = kv[2]; next }
        !hdr { hdr = 1; for (i = 1; i <= NF; i++) if ($i ~ /^scale_l/) sc[++nh] = i
               r = sqrt(cfg["d_head"]); lo = hi = ""
               if (band != "") { split(band, b, ","); lo = b[1]; hi = b[2] }
               else while ((getline line < mapband) > 0) { split(line, q, "\t")
                   if (q[1] == "adam" && q[2] == cfg["d_head"] && q[3] != "none" && q[3] != "n/a") { lo = q[3]; hi = q[4] } }
               next }
        { nrow++; loss[nrow] = $2; inb = lo != ""; mn = 1e30; mx = 0
          for (h = 1; h <= nh; h++) { c = $(sc[h]) * r; if (c < mn) mn = c; if (c > mx) mx = c; if (c < lo * 0.999 || c > hi * 1.001) inb = 0 }   # the log has 6 digits
          if (nrow == 1) c0 = sprintf("%.3g-%.3g", mn, mx)
          if (inb && first == "") first = $1; cend = sprintf("%.3g-%.3g", mn, mx) }
        END { k = int((nrow + 9) / 10); fl = 0; for (i = nrow - k + 1; i <= nrow; i++) fl += loss[i]
              n = FILENAME; sub(/.*\//, "", n); sub(/\.tsv$/, "", n)
              printf "%s\t%s\t%.4f\t%s\t%s\t%s\n", n, cfg["d_head"], fl / k, c0, cend,
                  lo == "" ? "n/a" : first == "" ? "never" : first }' "$f"
    done | tee "$dir/learned.tsv"
}

learned_figures() {
    local dh tag=""
    [ "$scale_lr" != 0 ] && tag="-slr$scale_lr"
    for dh in $dheads; do
        local files=() f
        for f in $(logs_of); do case $f in *_dh${dh}_s*) files+=("$f") ;; esac; done
        # the logs as one argument: gnuplot -c takes at most 9
        gnuplot -c /dev/stdin "$figs/learned-dh$dh$tag.png" "$dh" "$band" "$out/science-map/map-band.tsv" "${files[*]}" <<'EOF'
out = ARG1; dh = ARG2 + 0; r = sqrt(dh)
set terminal pngcairo size 1300,520 font ",10" noenhanced
set output out
set datafile separator "\t"
set datafile columnheaders
lo = 0; hi = 0
if (strlen(ARG3) > 0) {
    lo = real(system(sprintf("echo '%s' | cut -d, -f1", ARG3)))
    hi = real(system(sprintf("echo '%s' | cut -d, -f2", ARG3)))
} else {
    b = system(sprintf("awk -F'\\t' '$1 == \"adam\" && $2 == %d && $3 != \"none\" && $3 != \"n/a\" { print $3, $4 }' '%s' 2>/dev/null", dh, ARG4))
    if (strlen(b) > 0) { lo = real(word(b, 1)); hi = real(word(b, 2)) }
}
set multiplot layout 1,2 title sprintf("learned per-head scale, d_head %d: s_h against the step (every head) and the loss%s", dh, \
    strstrt(ARG5, "_slr") ? " (_slr: --scale-lr)" : "")
label(f) = system(sprintf("basename '%s' .tsv | sed 's/^learned_//'", f))
form(f) = (strstrt(f, "_log_") ? 0 : 2) + (strstrt(f, "fromnone") ? 0 : 1)
colour(f) = word(strstrt(f, "_slr") ? "#8e44ad #16a085 #5d6d7e #1e8449" : "#c0392b #2471a3 #7f8c8d #27ae60", form(f) + 1)
heads(f) = system(sprintf("awk '!/^#/ { print; exit }' '%s' | tr '\\t' '\\n' | grep -c '^scale_l'", f)) + 0
set logscale y
set xlabel "step"; set ylabel "c = s_h (multiplier of q.k / (1/sqrt(d_head)))"; set grid
set key top right font ",8"
if (lo > 0) {
    set object 1 rect from graph 0, first lo to graph 1, first hi fc rgb "#d5f5e3" fs solid 0.5 noborder behind
    set label 1 "band of the map" at graph 0.02, first hi offset 0,0.6 font ",8"
}
set arrow 2 from graph 0, first r to graph 1, first r nohead dt 2 lc rgb "gray40"
set label 2 "none (sqrt(d_head))" at graph 0.02, first r offset 0,0.6 font ",8"
F = ARG5
n = words(F)
plot for [i=1:n] word(F, i) using "step":(column(sprintf("scale_l0_h%d", 0)) * r) with lines lw 2 lc rgb colour(word(F, i)) title label(word(F, i)), \
     for [i=1:n] for [h=1:heads(word(F, i))-1] word(F, i) using "step":(column(sprintf("scale_l0_h%d", h)) * r) with lines lw 1 lc rgb colour(word(F, i)) notitle
unset object 1; unset label 1; unset arrow 2; unset label 2
set ylabel "training loss (nats)"
plot for [i=1:n] word(F, i) using "step":"loss" with lines lw 1.5 lc rgb colour(word(F, i)) title label(word(F, i))
unset multiplot
EOF
        echo "figure: $figs/learned-dh$dh$tag.png"
    done
}

# ---- tapegrad against PyTorch -----------------------------------------------------------
torch_grid() {
    local sc s dh=${dheads%% *}
    /usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "scripts/science.sh: torch: /usr/bin/python3 cannot import torch" >&2; exit 2; }
    for sc in none sqrt; do for s in $seeds; do
        add "tapegrad_${sc}_s$s" attn_scale "$common --d-head $dh --scale $sc --seed $s"
        add "torch_${sc}_s$s" torch "$common --d-head $dh --scale $sc --seed $s"
    done; done
}

torch_tables() {
    "$top/scripts/summarize.sh" $(logs_of) | tee "$dir/summary.txt"
    echo
    echo "== ranges over seeds $seeds: final loss, entropy/uniform at step 0 and at 10% of the steps"
    awk 'NR > 1 && NF >= 12 && $1 != "none" { split($12, p, "_"); k = p[1] " " $3
        if (!(k in n)) order[++m] = k; n[k]++
        if (!(k in lo) || $7 < lo[k]) lo[k] = $7; if (!(k in hi) || $7 > hi[k]) hi[k] = $7
        if (!(k in e0l) || $9 < e0l[k]) e0l[k] = $9; if (!(k in e0h) || $9 > e0h[k]) e0h[k] = $9
        if (!(k in e1l) || $10 < e1l[k]) e1l[k] = $10; if (!(k in e1h) || $10 > e1h[k]) e1h[k] = $10 }
        END { printf "%-9s %-5s %17s %13s %13s\n", "framework", "scale", "final loss", "ent@0", "ent@10%"
              for (i = 1; i <= m; i++) { k = order[i]; split(k, q, " ")
                  printf "%-9s %-5s %8.4f-%-8.4f %6.3f-%-6.3f %6.3f-%-6.3f\n", q[1], q[2], lo[k], hi[k], e0l[k], e0h[k], e1l[k], e1h[k] } }' \
        "$dir/summary.txt" | tee "$dir/ranges.txt"
}

torch_figures() {
    gnuplot -c /dev/stdin "$figs/torch-vs-tapegrad.png" "$steps" "$(logs_of | tr '\n' ' ')" <<'EOF'
set terminal pngcairo size 1000,600 font ",11" noenhanced
set output ARG1
set datafile separator "\t"
set datafile columnheaders
set title sprintf("tapegrad (solid) and PyTorch (dashed): none and sqrt, one line a seed, %s steps", ARG2)
set xlabel "step"; set ylabel "training loss (nats)"; set logscale y; set grid; set key outside right
label(f) = system(sprintf("basename '%s' .tsv", f))
colour(f) = strstrt(f, "torch_") ? (strstrt(f, "_none_") ? "#e67e22" : "#5dade2") : (strstrt(f, "_none_") ? "#922b21" : "#1a5276")
dash(f) = strstrt(f, "torch_") ? 2 : 1
F = ARG3
plot for [i=1:words(F)] word(F, i) using "step":"loss" with lines lw 2 dt dash(word(F, i)) lc rgb colour(word(F, i)) title label(word(F, i))
EOF
    echo "figure: $figs/torch-vs-tapegrad.png"
}

# ---- attention maps -------------------------------------------------------------------------
maps_grid() {
    local sc s=${seeds%% *} dh=${dheads%% *}
    for sc in none sqrt; do
        add "maps_${sc}_dh${dh}_s$s" attn_scale "$common --d-head $dh --scale $sc --seed $s --dump-attn 0,$((steps / 10)),$steps --dump-attn-file $dir/maps_${sc}_dh${dh}_s$s.st"
    done
}

maps_figures() {
    local s=${seeds%% *} dh=${dheads%% *}
    "$top/scripts/plot_attn.sh" "$dir/maps_none_dh${dh}_s$s.st" "$dir/maps_sqrt_dh${dh}_s$s.st" -o "$figs/attn-maps-dh$dh.png" \
        --title "attention on the probe sequence, d_head $dh, seed $s: none (left) and sqrt (right), steps 0, $((steps / 10)), $steps"
    echo "== where each head's rows put their largest weight (build/experiments/attn_maps --summary)"
    local sc
    for sc in none sqrt; do
        echo "-- $sc"
        "$top/build/experiments/attn_maps" --summary "$dir/maps_${sc}_dh${dh}_s$s.st" | grep -v '^#' | tee "$dir/maps-summary-$sc.tsv"
    done
}

"${grid}_grid"
run_all
case $grid in
    map) map_tables; map_figures ;;
    learned) learned_tables; learned_figures ;;
    torch) torch_tables; torch_figures ;;
    maps) maps_figures ;;
esac
