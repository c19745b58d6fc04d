#!/usr/bin/env bash
# The follow-up tables of the README: each sweep trains `none` against `sqrt`
# (and more) over 3 seeds and prints scripts/summarize.sh's table and verdicts.
#   scripts/sweep.sh dhead     d_head 8, 32, 128 at d_model 128, with AdamW and with SGD
#   scripts/sweep.sh configs   the alternatives to the defaults: gpt2 init, lr 1e-3,
#                              seq-len 64, and the recall control task
#   scripts/sweep.sh learned   the learned per-head scale, started at 1/sqrt(d_head) and at 1
#   options: --seeds "1 2 3"  --out runs  --jobs N
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
bin="$top/build/experiments/attn_scale"
[ -x "$bin" ] || { echo "scripts/sweep.sh: $bin is missing: run scripts/test.sh first" >&2; exit 2; }
dir="$out/sweep-$name"
mkdir -p "$dir"

# one line per run: "label|flags"
runs=()
case "$name" in
    dhead)
        for opt in adam sgd; do
            lr=3e-3; lrmin=3e-4
            [ $opt = sgd ] && { lr=0.3; lrmin=0.01; }
            for dh in 8 32 128; do for sc in none sqrt; do for s in $seeds; do
                runs+=("${opt}_dh${dh}_${sc}_s$s|--optim $opt --lr $lr --lr-min $lrmin --d-head $dh --scale $sc --seed $s")
            done; done; done
        done ;;
    configs)
        for sc in none sqrt; do for s in $seeds; do
            runs+=("gpt2_${sc}_s$s|--init gpt2 --scale $sc --seed $s")
            runs+=("lr1e-3_${sc}_s$s|--lr 1e-3 --lr-min 1e-4 --scale $sc --seed $s")
            runs+=("T64_${sc}_s$s|--seq-len 64 --alphabet 16 --scale $sc --seed $s")
            runs+=("recall_${sc}_s$s|--task recall --scale $sc --seed $s")
        done; done ;;
    learned)
        for s in $seeds; do
            runs+=("learned_s$s|--scale learned --seed $s")
            runs+=("learnedfromnone_s$s|--scale learned --learned-init none --seed $s")
        done ;;
    *) usage ;;
esac

start=$(date +%s)
if ! printf '%s\n' "${runs[@]}" | xargs -P "$jobs" -d '\n' -n 1 bash -c '
        label=${3%%|*} flags=${3#*|}
        $1 $flags --threads 1 --log "$2/$label.tsv" > "$2/$label.out" ||
            { echo "scripts/sweep.sh: $label failed" >&2; exit 1; }' _ "$bin" "$dir"; then
    echo "scripts/sweep.sh: a run failed" >&2
    exit 1
fi
logs=()
for r in "${runs[@]}"; do logs+=("$dir/${r%%|*}.tsv"); done
"$top/scripts/summarize.sh" "${logs[@]}"
echo "sweep $name: ${#runs[@]} runs in $(( $(date +%s) - start ))s, logs in $dir"
