#!/usr/bin/env bash
# Summarises attn_scale logs: one row per run, then the √d_k verdicts.
#   scripts/summarize.sh runs/*.tsv
# The per-run figures (final_loss, ent/unif at the end, at 0 and at 10% of the
# steps, heads below 10% of uniform there) are defined in scripts/logstats.awk.
# Verdict: the unscaled run against the scaled run of the same task, optimizer,
# d_head, seed, steps, lr, init and framework (scripts/torch_attn_scale.py's
# logs say framework=torch; verdicts pair runs of one framework only): "failure reproduced" when its final loss is
# at least 3x the scaled run's and at least 0.25 nats above it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)   # its siblings: scripts/, or share/tapegrad/ once installed
[ $# -gt 0 ] || { echo "usage: scripts/summarize.sh LOG.tsv ..." >&2; exit 2; }
for f in "$@"; do [ -r "$f" ] || { echo "scripts/summarize.sh: cannot read '$f'" >&2; exit 2; }; done
set +e
stats=$(awk -F'\t' -v keys=task,optim,scale,d_head,seed,steps,lr,init,framework -f "$here/logstats.awk" "$@")
bad=$?
set -e
printf '%s\n' "$stats" | awk -F'\t' -v bad=$bad '
NF < 17 { next }
{
    run = $1; sub(/.*\//, "", run); sub(/\.tsv$/, "", run)
    printf "%-7s %-5s %-7s %6s %5s %6s %11.4f %9.3f %9.3f %9.3f %14s  %s\n", $2, $3, $4, $5, $6, $7, $11, $12, $13, $14, $15 "/" $16, run
    fw = $10 == "-" ? "" : $10   # tapegrad logs have no framework line
    runs[++nruns] = $2 "|" $3 "|" $5 "|" $4 "|" $7 "|" $8 "|" $9 "|" fw; rseed[nruns] = $6; rloss[nruns] = $11; rlow[nruns] = $15; rnh[nruns] = $16
}
BEGIN { printf "%-7s %-5s %-7s %6s %5s %6s %11s %9s %9s %9s %14s  %s\n", "task", "optim", "scale", "d_head", "seed", "steps", "final_loss", "ent/unif", "ent@0", "ent@10%", "heads<0.1@10%", "run" }
END {
    # verdicts: every unscaled run against the scaled run of the same task, optimizer, d_head and seed
    printf "\n"
    for (i = 1; i <= nruns; i++) {
        split(runs[i], p, "|"); if (p[4] != "none") continue
        for (j = 1; j <= nruns; j++) {
            split(runs[j], q, "|")
            if (q[4] != "sqrt" || q[1] != p[1] || q[2] != p[2] || q[3] != p[3] || q[5] != p[5] || q[6] != p[6] || q[7] != p[7] || q[8] != p[8] || rseed[j] != rseed[i]) continue
            ratio = rloss[j] > 0 ? rloss[i] / rloss[j] : 0; gap = rloss[i] - rloss[j]
            ok = ratio >= 3 && gap >= 0.25
            printf "none vs sqrt, %s%s %s d_head=%s seed=%s: loss %.4f vs %.4f, ratio %.1fx, gap %.3f nats: %s; unscaled heads below 10%% of uniform at 10%% of steps: %s/%s, scaled: %s/%s\n",
                p[8] != "" ? p[8] " " : "", p[1], p[2], p[3], rseed[i], rloss[i], rloss[j], ratio, gap, ok ? "failure reproduced" : "NOT reproduced", rlow[i], rnh[i], rlow[j], rnh[j]
        }
    }
    exit bad
}'
