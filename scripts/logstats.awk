# The per-run figures of attn_scale logs, one TSV line per log, shared by
# scripts/summarize.sh and `scripts/sweep collect` so both use one definition:
#   awk -F'\t' -v keys=task,optim,scale -f scripts/logstats.awk LOG.tsv ...
# prints: the log's path, the values of `keys` from its '# key=value' header,
# then final_loss ent_end ent0 ent10 low10 nheads max_logit (full precision):
# final_loss: mean training loss over the last 10% of logged steps;
# ent_end, ent0, ent10: mean attention entropy over heads / uniform entropy of
#   the causal rows (1 = uniform, 0 = one token), over the last 10%, at step 0,
#   and at the first logged step >= 10% of the steps;
# low10: heads below 10% of uniform at that step ("-" if none logged);
# max_logit: the largest attention logit of any layer at the last logged step.
function flush(   n, k, i, fl, fe, out, nk, kk) {
    if (!file) return
    n = nrow; if (n < 2) { printf "%s: fewer than 2 logged steps\n", file > "/dev/stderr"; bad = 1; return }
    k = int((n + 9) / 10); fl = 0; fe = 0
    for (i = n - k + 1; i <= n; i++) { fl += loss[i]; fe += ent[i] }
    fl /= k; fe /= k * unif
    out = file
    nk = split(keys, kk, ",")
    for (i = 1; i <= nk; i++) out = out "\t" ((kk[i] in cfg) ? cfg[kk[i]] : "-")
    printf "%s\t%.17g\t%.17g\t%.17g\t%.17g\t%s\t%d\t%.17g\n", out, fl, fe, e0 / unif, e10 / unif, low10, nh, mxl
}
FNR == 1 { flush(); file = FILENAME; nrow = 0; hdr = 0; delete cfg; low10 = "-"; e10 = 0; nh = 0; nm = 0 }
/^# / { split(substr($0, 3), kv, "="); cfg[kv[1]] = kv[2]; if (kv[1] == "ref_entropy_uniform") unif = kv[2] + 0; next }
/^#/ { next }
!hdr {
    hdr = 1; nh = 0; nm = 0
    for (i = 1; i <= NF; i++) { if ($i ~ /^nent_/) hc[++nh] = i; if ($i ~ /^maxlogit_/) mc[++nm] = i }
    target = cfg["steps"] / 10; got10 = 0; next
}
{
    nrow++; loss[nrow] = $2; ent[nrow] = $3
    if (nrow == 1) e0 = $3
    if (!got10 && $1 + 0 >= target) {
        got10 = 1; e10 = $3; low10 = 0
        for (h = 1; h <= nh; h++) if ($(hc[h]) < 0.1) low10++
    }
    mxl = 0
    for (h = 1; h <= nm; h++) if (h == 1 || $(mc[h]) + 0 > mxl) mxl = $(mc[h]) + 0
}
END { flush(); exit bad }
