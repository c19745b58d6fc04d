#!/usr/bin/env bash
# What a sweep task costs beyond its training run, under the local engine and
# under a local single-node Slurm (scripts/slurm_local.sh; needs root): N runs
# of 2 steps of a tiny model, 2 at a time (-j 2; the node has nproc CPUs, one per
# task), REPS times each engine side by side; prints each wall time and the
# median per-task overhead of Slurm over GNU parallel.
#   scripts/sweep_overhead.sh [N] [REPS]      (default 16 runs, 3 repetitions)
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
n=${1:-16}; reps=${2:-3}
sweep=$top/scripts/sweep
tmp=$(mktemp -d)
cluster=""
trap '[ -z "$cluster" ] || "$top/scripts/slurm_local.sh" down "$cluster"; rm -rf "$tmp"' EXIT
"$top/scripts/slurm_local.sh" install
eval "$("$top/scripts/slurm_local.sh" up)"
cluster=$SLURM_LOCAL_DIR
T=(--set steps=2 --set warmup=0 --set log-every=1 --set batch=2 --set seq-len=8 --set vocab=16 --set alphabet=4
   --set d-model=16 --set heads=2 --set d-head=8)
now() { date +%s.%N; }
for r in $(seq "$reps"); do
    for e in local slurm; do
        "$sweep" plan "$tmp/$e$r" --grid "seed=1..$n" "${T[@]}" 2>/dev/null
        t0=$(now)
        if [ $e = local ]; then "$sweep" run "$tmp/$e$r" -j 2 2>/dev/null
        else "$sweep" run "$tmp/$e$r" --engine slurm --wait 2>/dev/null; fi
        t=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { print b - a }')
        [ "$(ls "$tmp/$e$r"/runs/*.done | wc -l)" -eq "$n" ] || { echo "$e: not every run finished" >&2; exit 1; }
        printf '%s\t%d\t%.2f\n' "$e" "$r" "$t"
    done
done | tee "$tmp/times" | awk -F'\t' -v n="$n" '
    { print $1 " run " $2 ": " $3 " s for " n " tasks"; t[$1, $2] = $3; reps = $2 }
    END {
        for (r = 1; r <= reps; r++) d[r] = (t["slurm", r] - t["local", r]) * 2 / n
        for (i = 1; i <= reps; i++) for (j = i + 1; j <= reps; j++) if (d[j] < d[i]) { x = d[i]; d[i] = d[j]; d[j] = x }
        printf "Slurm over GNU parallel, per task (2 slots): median %.2f s (of %d repetitions; %.2f..%.2f)\n", d[int((reps + 1) / 2)], reps, d[1], d[reps]
        printf "(includes up to 2 s of --wait polling per sweep)\n"
    }'
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
