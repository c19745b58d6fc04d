#!/usr/bin/env bash
# What attn_scale logs say at given steps: one line per log and step.
#   scripts/logat.sh [--steps 0,60,end] LOG.tsv ...
# For each step the first logged row at or after it ("end": the last row):
# the loss; the entropy over heads / uniform (mean, and the lowest and highest
# head); the largest attention logit and the share of rows with a top weight
# above 0.99 (over layers: the largest); the multiplier of q·k the heads used
# (lowest..highest; it moves only with --scale learned).
set -euo pipefail
usage() { echo "usage: scripts/logat.sh [--steps S,S,...|end] LOG.tsv ..." >&2; exit 2; }
steps="0,end"
[ "${1:-}" != --steps ] || { [ $# -ge 2 ] || usage; steps=$2; shift 2; }
[ $# -gt 0 ] || usage
[[ "$steps" =~ ^([0-9]+|end)(,([0-9]+|end))*$ ]] || { echo "scripts/logat.sh: --steps '$steps': numbers or 'end', separated by ','" >&2; exit 2; }
for f in "$@"; do [ -r "$f" ] || { echo "scripts/logat.sh: cannot read '$f'" >&2; exit 2; }; done
awk -F'\t' -v steps="$steps" '
function flush(   j, r) {
    if (!file) return
    if (!nrow) { printf "scripts/logat.sh: %s has no logged rows\n", file > "/dev/stderr"; bad = 1; return }
    for (j = 1; j <= ns; j++) {
        r = 0
        if (S[j] == "end") r = nrow
        else for (i = 1; i <= nrow && !r; i++) if (st[i] + 0 >= S[j] + 0) r = i
        if (r) print name "\t" row[r]
    }
}
BEGIN {
    ns = split(steps, S, ",")
    printf "%-14s %6s %9s %8s %15s %9s %6s %17s\n", "run", "step", "loss", "ent/unif", "heads (min..max)", "max_logit", "sat", "multiplier"
}
FNR == 1 { flush(); file = FILENAME; name = file; sub(/.*\//, "", name); sub(/\.tsv$/, "", name); nrow = 0; hdr = 0 }
/^# ref_entropy_uniform=/ { split($0, kv, "="); unif = kv[2] + 0; next }
/^#/ { next }
!hdr {
    hdr = 1; nn = nm = nsat = nsc = 0
    for (i = 1; i <= NF; i++) {
        if ($i ~ /^nent_/) N[++nn] = i; else if ($i ~ /^maxlogit_/) M[++nm] = i
        else if ($i ~ /^sat_/) T[++nsat] = i; else if ($i ~ /^scale_/) C[++nsc] = i
    }
    next
}
{
    lo = hi = $(N[1]); for (i = 2; i <= nn; i++) { if ($(N[i]) < lo) lo = $(N[i]); if ($(N[i]) > hi) hi = $(N[i]) }
    ml = 0; for (i = 1; i <= nm; i++) if ($(M[i]) + 0 > ml) ml = $(M[i]) + 0
    sat = 0; for (i = 1; i <= nsat; i++) if ($(T[i]) + 0 > sat) sat = $(T[i]) + 0
    clo = chi = $(C[1]) + 0; for (i = 2; i <= nsc; i++) { if ($(C[i]) + 0 < clo) clo = $(C[i]) + 0; if ($(C[i]) + 0 > chi) chi = $(C[i]) + 0 }
    nrow++; st[nrow] = $1
    row[nrow] = sprintf("%6d %9.4f %8.3f %15s %9.1f %6.3f %17s", $1, $2, $3 / unif, sprintf("%.3f..%.3f", lo, hi), ml, sat,
                        sprintf("%.4g..%.4g", clo, chi))
}
END {
    flush()
    exit bad
}' "$@" | awk -F'\t' '   # the run names as wide as the longest
    NR == 1 { h = substr($0, 16); w = 14; next }   # the header: "run" in 14 columns, a space, the rest
    { n[NR] = $1; r[NR] = $2; if (length($1) > w) w = length($1) }
    END { printf "%-*s %s\n", w, "run", h; for (i = 2; i <= NR; i++) printf "%-*s %s\n", w, n[i], r[i] }'
