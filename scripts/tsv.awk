# A tab-separated table, columns aligned with two spaces between them (what the
# docs show of the small tables under docs/data/; `column -t` is not in every
# Debian install).   awk -f scripts/tsv.awk FILE.tsv ...
BEGIN { FS = "\t" }
{ row[NR] = $0; if (NF > nf) nf = NF; for (i = 1; i <= NF; i++) if (length($i) > w[i]) w[i] = length($i) }
END {
    for (r = 1; r <= NR; r++) {
        n = split(row[r], f, "\t"); line = ""
        for (i = 1; i < n; i++) line = line sprintf("%-*s  ", w[i], f[i])
        print line f[n]
    }
}
