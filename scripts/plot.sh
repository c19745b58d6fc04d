#!/usr/bin/env bash
# Plots any attn_scale logs.
#   scripts/plot.sh RUN.tsv [RUN.tsv ...] -o OUT.png [--title TEXT]
# writes OUT.png (loss curves of all runs), OUT-entropy.png (per-head entropy,
# one panel per run), OUT-valloss.png (validation loss, scripts/valloss.gp: the
# runs with a val_loss column, when any has one) and OUT-heatmap-<run>.png
# (per-head entropy over steps).
# Each run is labelled with its kernel and features; a loss curve that lies on
# an earlier run's is drawn dashed with markers and its label says so.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { echo "usage: scripts/plot.sh RUN.tsv [RUN.tsv ...] -o OUT.png [--title TEXT]" >&2; exit 2; }
out=""; title="attn_scale"; runs=()
while [ $# -gt 0 ]; do
    case "$1" in
        -o) [ $# -ge 2 ] || usage; out="$2"; shift 2 ;;
        --title) [ $# -ge 2 ] || usage; title="$2"; shift 2 ;;
        -h|--help) usage ;;
        -*) echo "scripts/plot.sh: unknown option '$1'" >&2; usage ;;
        *) runs+=("$1"); shift ;;
    esac
done
[ -n "$out" ] && [ ${#runs[@]} -gt 0 ] || usage
header() { awk '!/^#/ { print; exit }' "$1"; }   # the column names: first line not a comment
command -v gnuplot >/dev/null || { echo "scripts/plot.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
for f in "${runs[@]}"; do
    [ -r "$f" ] || { echo "scripts/plot.sh: cannot read '$f'" >&2; exit 2; }
    head=$(header "$f")
    case "$head" in
        step$'\t'loss$'\t'ent_mean*) ;;
        *,*) echo "scripts/plot.sh: '$f' is not a tapegrad log: its column line is comma-separated (a CSV? tapegrad-logs import turns it into one: docs/logs.md#bring-your-own-logs)" >&2; exit 2 ;;
        *) miss=$(for c in step loss ent_mean; do printf '%s\n' "$head" | tr '\t' '\n' | grep -qx "$c" || echo "$c"; done | head -1)
           echo "scripts/plot.sh: '$f': ${miss:+no column $miss: }its first columns must be step, loss, ent_mean (docs/logs.md#what-a-log-needs)" >&2; exit 2 ;;
    esac
    [ "$(grep -v '^#' "$f" | wc -l)" -ge 3 ] || { echo "scripts/plot.sh: '$f' has fewer than 2 logged steps" >&2; exit 2; }
done
base="${out%.png}"
tmp=$(mktemp); legend=$(mktemp)
trap 'rm -f "$tmp" "$legend"' EXIT
# labels: each run's kernel and features, and which curves lie on another (scripts/tglogs.py legend)
python3 "$here/tglogs.py" legend "${runs[@]}" >"$legend"
gnuplot -c "$here/loss.gp" "$out" "$title: loss" "$legend" "${runs[@]}"
gnuplot -c "$here/entropy.gp" "$base-entropy.png" "$title: per-head attention entropy" "$legend" "${runs[@]}"
# the validation loss (--task code --eval-every, or an imported val_loss) of the runs that logged it
val=(); for f in "${runs[@]}"; do header "$f" | tr '\t' '\n' | grep -qx val_loss && val+=("$f"); done
[ ${#val[@]} -eq 0 ] || gnuplot -c "$here/valloss.gp" "$base-valloss.png" "$title: validation loss" "${val[@]}"
for f in "${runs[@]}"; do
    name=$(basename "$f" .tsv)
    if [ "$(header "$f" | tr '\t' '\n' | grep -c '^nent_')" -eq 0 ]; then
        echo "scripts/plot.sh: $name: no heatmap: the log has no nent_l*_h* columns (per-head entropy: docs/logs.md#columns)" >&2
        continue
    fi
    if ! grep -v '^#' "$f" | awk -F'\t' 'NR==1 { for (i=1;i<=NF;i++) if ($i ~ /^nent_/) c[i]=1; next }
            { for (i in c) if ($i != "nan" && $i != "-nan") ok = 1 } END { exit !ok }'; then
        echo "scripts/plot.sh: $name: no heatmap: its entropy columns are nan (the kernel's weights were not measured: the log's attn_measure_note)" >&2
        continue
    fi
    # step head value triples from the nent_ columns, one block per step
    grep -v '^#' "$f" | awk -F'\t' 'NR==1 { for (i=1;i<=NF;i++) if ($i ~ /^nent_/) c[n++]=i; next }
        { for (h=0;h<n;h++) print $1, h, $(c[h]); print "" }' > "$tmp"
    nh=$(header "$f" | tr '\t' '\n' | grep -c '^nent_')
    gnuplot -c "$here/heatmap.gp" "$base-heatmap-$name.png" "$title: $name" "$tmp" "$nh"
done
echo "wrote $out $base-entropy.png${val[0]:+ $base-valloss.png} $base-heatmap-*.png"
