#!/usr/bin/env bash
# Attention maps of attn_scale --dump-attn files, as one grid of heatmaps.
#   scripts/plot_attn.sh MAPS.st [MAPS.st ...] -o OUT.png [--title TEXT] [--steps S1,S2,...]
# Rows: the heads (every layer's, in order). Columns: each file's steps, the
# files side by side (e.g. --scale none and --scale sqrt). Each panel is the
# probe sequence's T×T weights: query position down, key position across, the
# probe's tokens on both axes ('^' is hist's BOS), the masked upper half blank,
# colour from white (weight 0) to dark red (weight 1) on a square-root scale, so
# that spread weights (1/(i+1) each) stay visible. --steps: only these steps of
# each file. `build/experiments/attn_maps --summary FILE` says in numbers where
# each head's rows put their largest weight.
# The files must share the probe (same task and --seq-len). Needs the build
# (build/experiments/attn_maps; installed: tapegrad-logs sets TG_ATTN_MAPS) and gnuplot.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { echo "usage: scripts/plot_attn.sh MAPS.st [MAPS.st ...] -o OUT.png [--title TEXT] [--steps S1,S2,...]" >&2; exit 2; }
out=""; title="attention on the probe sequence"; only=""; files=()
while [ $# -gt 0 ]; do
    case "$1" in
        -o) [ $# -ge 2 ] || usage; out="$2"; shift 2 ;;
        --title) [ $# -ge 2 ] || usage; title="$2"; shift 2 ;;
        --steps) [ $# -ge 2 ] || usage; only="$2"; shift 2 ;;
        -h|--help) usage ;;
        -*) echo "scripts/plot_attn.sh: unknown option '$1'" >&2; usage ;;
        *) files+=("$1"); shift ;;
    esac
done
[ -n "$out" ] && [ ${#files[@]} -gt 0 ] || usage
case "$out" in *.png) ;; *) echo "scripts/plot_attn.sh: -o must name a .png file" >&2; exit 2 ;; esac
[[ -z "$only" || "$only" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "scripts/plot_attn.sh: --steps '$only': steps separated by commas" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "scripts/plot_attn.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
maps="${TG_ATTN_MAPS:-$top/build/experiments/attn_maps}"
[ -x "$maps" ] || { echo "scripts/plot_attn.sh: $maps is missing: run scripts/test.sh first" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meta() { sed -n "s/^# $2=//p" "$1" | head -1; }
# per file: its text dump, the steps to show (with their block offsets), a label
cols=(); kvs=(); tokens=""; rows=0
for k in "${!files[@]}"; do
    f=${files[$k]}
    [ -r "$f" ] || { echo "scripts/plot_attn.sh: cannot read '$f'" >&2; exit 2; }
    "$maps" "$f" >"$tmp/$k.txt" || exit 2
    tk=$(meta "$tmp/$k.txt" tokens)
    [ -z "$tokens" ] && tokens=$tk
    [ "$tk" = "$tokens" ] || { echo "scripts/plot_attn.sh: '$f' has another probe sequence than '${files[0]}' (task or --seq-len differ)" >&2; exit 2; }
    L=$(meta "$tmp/$k.txt" config.layers); H=$(meta "$tmp/$k.txt" config.heads)
    nh=$((L * H)); [ $rows -eq 0 ] && rows=$nh
    [ $nh -eq $rows ] || { echo "scripts/plot_attn.sh: '$f' has $nh heads, '${files[0]}' has $rows" >&2; exit 2; }
    IFS=, read -ra st <<<"$(meta "$tmp/$k.txt" steps)"
    sc=$(meta "$tmp/$k.txt" config.scale)
    case $sc in
        mult) sc="mult c=$(meta "$tmp/$k.txt" config.scale-mult)" ;;
        learned) sc="learned $(meta "$tmp/$k.txt" config.learned-param) from $(meta "$tmp/$k.txt" config.learned-init)" ;;
    esac
    label="$sc dh=$(meta "$tmp/$k.txt" config.d-head) seed=$(meta "$tmp/$k.txt" config.seed)"
    w=$(meta "$tmp/$k.txt" config.window); kvh=$(meta "$tmp/$k.txt" config.kv-heads)   # set only when used
    [ -n "$w" ] && label+=" window=$w"
    [ -n "$kvh" ] && label+=" kv_heads=$kvh"
    for key in bias alibi softcap sinks attn-dropout; do   # also set only when used
        val=$(meta "$tmp/$k.txt" config.$key)
        [ -n "$val" ] && label+=" $key=$val"
    done
    kvs+=("${kvh:-0}")
    shown=0
    for s in "${!st[@]}"; do
        [ -z "$only" ] || [[ ",$only," == *",${st[$s]},"* ]] || continue
        cols+=("$k|$s|${#st[@]}|${st[$s]}|$label"); shown=1
    done
    [ $shown -eq 1 ] || { echo "scripts/plot_attn.sh: '$f' has none of the steps $only (it has $(meta "$tmp/$k.txt" steps))" >&2; exit 2; }
done
alphabet=$(meta "$tmp/0.txt" config.alphabet); task=$(meta "$tmp/0.txt" config.task)
read -ra tok <<<"$tokens"
T=${#tok[@]}
tics=""
for i in "${!tok[@]}"; do
    t=${tok[$i]}; [ "$task" = hist ] && [ "$t" = "$alphabet" ] && t="^"
    tics+="${tics:+, }\"$t\" $i"
done
ncol=${#cols[@]}
pw=230; ph=260; W=$((ncol * pw + 40)); Hpx=$((rows * ph + 90))
top=$(awk "BEGIN { print 1 - 75 / $Hpx }"); vspace=$(awk "BEGIN { print 40 / $Hpx }")
{
    echo "set terminal pngcairo size $W,$Hpx font \",8\" noenhanced"
    echo "set output '$out'"
    echo "set multiplot layout $rows,$ncol title \"$title (colour: sqrt(weight), white 0, dark red 1)\" font \",11\" margins 0.01,0.99,0.01,$top spacing 0.012,$vspace"
    echo "set palette defined (0 'white', 0.25 '#fdd49e', 0.5 '#fc8d59', 0.75 '#d7301f', 1 '#4d0000')"
    echo "set cbrange [0:1]; unset colorbox"
    echo "set xrange [-0.5:$T-0.5]; set yrange [$T-0.5:-0.5]"
    echo "set xtics ($tics) rotate by 90 font ',5' scale 0; set ytics ($tics) font ',5' scale 0"
    echo "set size ratio -1"
    for ((r = 0; r < rows; r++)); do
        for c in "${cols[@]}"; do
            IFS='|' read -r k s n step label <<<"$c"
            kv=""; [ "${kvs[$k]}" -gt 0 ] && kv=" (kv $(( (r % H) / (H / kvs[$k]) )))"
            # with sinks: the mean weight the sink took in this map (attn_maps' block line)
            sw=$(sed -n "s/^# block=$((r * n + s)) .*sink_weight=\([0-9.]*\).*/\1/p" "$tmp/$k.txt")
            [ -n "$sw" ] && kv+=", sink $(printf '%.2f' "$sw")"
            echo "set title \"$label\\nl$((r / H)) h$((r % H))$kv, step $step\" font ',8'"
            echo "plot '$tmp/$k.txt' index $((r * n + s)) using 1:2:(sqrt(\$3)) with image notitle"
        done
    done
    echo "unset multiplot"
} >"$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
echo "wrote $out ($rows heads x $ncol columns)"
