#!/usr/bin/env bash
# The follow-up tables of the README, as presets of scripts/sweep: each trains
# `none` against `sqrt` (and more) over 3 seeds, prints scripts/summarize.sh's
# table and verdicts, and collects summary.tsv, aggregate.tsv and figures.
#   scripts/sweep.sh dhead     d_head 8, 32, 128 at d_model 128, with AdamW and with SGD
#   scripts/sweep.sh configs   the alternatives to the defaults: gpt2 init, lr 1e-3,
#                              seq-len 64, and the recall control task
#   scripts/sweep.sh learned   the learned per-head scale, started at 1/sqrt(d_head) and at 1
#   options: --seeds "1 2 3"  --out runs  --jobs N
# The sweep lives in OUT/sweep-NAME: running this again finishes what is
# missing and reuses the finished runs (every run checkpoints and resumes);
# to train everything afresh, remove that folder first.
# Assumes scripts/reproduce.sh or scripts/test.sh has built build/.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { echo "usage: scripts/sweep.sh dhead|configs|learned [--seeds \"1 2 3\"] [--out DIR] [--jobs N]" >&2; exit 2; }
[ $# -ge 1 ] || usage
name=$1; shift
seeds="1 2 3"; out="$top/runs"; jobs=$(nproc)
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) [ $# -ge 2 ] || usage; seeds="$2"; shift 2 ;;
        --out) [ $# -ge 2 ] || usage; out="$2"; shift 2 ;;
        --jobs) [ $# -ge 2 ] || usage; jobs="$2"; shift 2 ;;
        *) usage ;;
    esac
done
case "$name" in dhead|configs|learned) ;; *) usage ;; esac
dir="$out/sweep-$name"
start=$(date +%s)
"$top/scripts/sweep" preset "$name" "$dir" --seeds "$(echo $seeds | tr ' ' ',')"
"$top/scripts/sweep" run "$dir" -j "$jobs"
"$top/scripts/summarize.sh" $(cut -f1 "$dir/manifest.tsv" | sed "s|^|$dir/runs/|; s|\$|.tsv|")
"$top/scripts/sweep" collect "$dir"
echo "sweep $name: $(wc -l <"$dir/manifest.tsv") runs in $(( $(date +%s) - start ))s, in $dir"
