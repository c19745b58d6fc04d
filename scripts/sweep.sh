#!/usr/bin/env bash
# The follow-up tables of docs/results.md, as presets of scripts/sweep: each trains
# `none` against `sqrt` (and more) over 3 seeds, prints scripts/summarize.sh's
# table and verdicts, and collects summary.tsv, aggregate.tsv and figures.
#   scripts/sweep.sh dhead     d_head 8, 32, 128 at d_model 128, with AdamW and with SGD
#   scripts/sweep.sh configs   the alternatives to the defaults: gpt2 init, lr 1e-3,
#                              seq-len 64, and the recall control task
#   scripts/sweep.sh learned   the learned per-head scale, started at 1/sqrt(d_head) and at 1
#   options: --seeds "1 2 3"  --out runs  --jobs N
#            --docs: also copy what the docs show into the repository:
#            summary.tsv and aggregate.tsv (and, for learned, the logs) to
#            docs/data/sweep-NAME/ with this run's record (run.txt: machine,
#            kernels, load, wall time), the figures to docs/sweep-NAME-*.png;
#            then `scripts/docs.sh` updates the pages
# The sweep lives in OUT/sweep-NAME: running this again finishes what is
# missing and reuses the finished runs (every run checkpoints and resumes);
# to train everything afresh, remove that folder first.
# Assumes scripts/reproduce.sh or scripts/test.sh has built build/.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/setup.sh"
usage() { echo "usage: scripts/sweep.sh dhead|configs|learned [--seeds \"1 2 3\"] [--out DIR] [--jobs N] [--docs]" >&2; exit 2; }
[ $# -ge 1 ] || usage
name=$1; shift
seeds="1 2 3"; out="$top/runs"; jobs=$(nproc); docs=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) [ $# -ge 2 ] || usage; seeds="$2"; shift 2 ;;
        --out) [ $# -ge 2 ] || usage; out="$2"; shift 2 ;;
        --jobs) [ $# -ge 2 ] || usage; jobs="$2"; shift 2 ;;
        --docs) docs=1; shift ;;
        *) usage ;;
    esac
done
case "$name" in dhead|configs|learned) ;; *) usage ;; esac
dir="$out/sweep-$name"
start=$(date +%s); load0=$(cut -d' ' -f1-3 /proc/loadavg)
"$top/scripts/sweep" preset "$name" "$dir" --seeds "$(echo $seeds | tr ' ' ',')"
"$top/scripts/sweep" run "$dir" -j "$jobs"
"$top/scripts/summarize.sh" $(cut -f1 "$dir/manifest.tsv" | sed "s|^|$dir/runs/|; s|\$|.tsv|")
"$top/scripts/sweep" collect "$dir"
line="sweep $name: $(wc -l <"$dir/manifest.tsv") runs in $(( $(date +%s) - start ))s"
echo "$line, in $dir"
if [ -n "$docs" ]; then   # what the docs' generated blocks read, and their figures
    data="$top/docs/data/sweep-$name"
    rm -rf "$data"; mkdir -p "$data"
    cp "$dir/summary.tsv" "$dir/aggregate.tsv" "$data/"
    # the learned scale's table needs each head's multiplier: its logs (6 small files; in logs/, as
    # .gitignore leaves out every runs/ folder)
    [ "$name" != learned ] || { mkdir "$data/logs"; cut -f1 "$dir/manifest.tsv" | sed "s|^|$dir/runs/|; s|\$|.tsv|" | xargs cp -t "$data/logs/"; }
    # the figures against d_head: only the head-size sweep has more than one
    [ "$name" != dhead ] || for f in loss entropy10; do cp "$dir/$f.png" "$top/docs/sweep-$name-$f.png"; done
    {
        echo "scripts/sweep.sh $name --seeds \"$seeds\" --jobs $jobs --docs ($(wc -l <"$dir/manifest.tsv") runs, $jobs at a time, --threads 1)"
        echo "$line (finished runs of an earlier attempt are reused, not timed), $(date -u +%F)"
        echo "load average before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg)"
        tg_machine "$top/build"
    } >"$data/run.txt"
    echo "docs: $data/, figures docs/sweep-$name-*.png; now run scripts/docs.sh" >&2
fi
