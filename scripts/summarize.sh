#!/usr/bin/env bash
# Summarises attn_scale logs: one row per run, then the √d_k verdicts.
#   scripts/summarize.sh runs/*.tsv
# final_loss: mean training loss over the last 10% of logged steps.
# ent/unif: mean attention entropy over heads / uniform entropy of the causal
#   rows (1 = uniform, 0 = one token), at the end (last 10%) and at 10% of the
#   steps (ent@10%) and at step 0 (ent@0); heads<0.1@10%: how many heads are below 10% of uniform there.
# Verdicts pair runs of one framework only (scripts/torch_attn_scale.py's logs say framework=torch).
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/summarize.sh LOG.tsv ..." >&2; exit 2; }
for f in "$@"; do [ -r "$f" ] || { echo "scripts/summarize.sh: cannot read '$f'" >&2; exit 2; }; done
awk -F'\t' '
function flush(   n, k, i, fl, fe, h) {
    if (!file) return
    n = nrow; if (n < 2) { printf "%s: fewer than 2 logged steps\n", file > "/dev/stderr"; bad = 1; return }
    k = int((n + 9) / 10); fl = 0; fe = 0
    for (i = n - k + 1; i <= n; i++) { fl += loss[i]; fe += ent[i] }
    fl /= k; fe /= k * unif
    key = cfg["task"] "|" cfg["optim"] "|" cfg["d_head"] "|" cfg["scale"] "|" cfg["steps"] "|" cfg["lr"] "|" cfg["init"] "|" cfg["framework"]
    printf "%-7s %-5s %-7s %6s %5s %6s %11.4f %9.3f %9.3f %9.3f %14s  %s\n", cfg["task"], cfg["optim"], cfg["scale"], cfg["d_head"], cfg["seed"], cfg["steps"], fl, fe, e0 / unif, e10 / unif, low10 "/" nh, run
    runs[++nruns] = key; rseed[nruns] = cfg["seed"]; rloss[nruns] = fl; rlow[nruns] = low10; rnh[nruns] = nh; re10[nruns] = e10 / unif
    rhmin[nruns] = hmin10
}
FNR == 1 { flush(); file = FILENAME; run = FILENAME; sub(/.*\//, "", run); sub(/\.tsv$/, "", run); nrow = 0; hdr = 0; delete cfg; low10 = "-"; e10 = 0; nh = 0 }
/^# / { split(substr($0, 3), kv, "="); cfg[kv[1]] = kv[2]; if (kv[1] == "ref_entropy_uniform") unif = kv[2] + 0; next }
!hdr { hdr = 1; nh = 0; for (i = 1; i <= NF; i++) { col[$i] = i; if ($i ~ /^nent_/) hc[++nh] = i }; target = cfg["steps"] / 10; got10 = 0; next }
{
    nrow++; loss[nrow] = $2; ent[nrow] = $3
    if (nrow == 1) e0 = $3
    if (!got10 && $1 + 0 >= target) {
        got10 = 1; e10 = $3; low10 = 0; hmin10 = 1
        for (h = 1; h <= nh; h++) { if ($(hc[h]) < 0.1) low10++; if ($(hc[h]) < hmin10) hmin10 = $(hc[h]) }
    }
}
BEGIN { printf "%-7s %-5s %-7s %6s %5s %6s %11s %9s %9s %9s %14s  %s\n", "task", "optim", "scale", "d_head", "seed", "steps", "final_loss", "ent/unif", "ent@0", "ent@10%", "heads<0.1@10%", "run" }
END {
    flush()
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
}' "$@"
