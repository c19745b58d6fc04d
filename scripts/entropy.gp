# Per-head attention entropy over training, one panel per run.
#   gnuplot -c scripts/entropy.gp OUT.png TITLE LEGEND.tsv RUN.tsv [RUN.tsv ...]
# LEGEND.tsv: a line per run, its panel title first (tglogs.py legend).
# Entropy is normalised by the uniform entropy of the causal rows (1 = uniform,
# 0 = all weight on one token): the 'nent_l*_h*' columns.
out = ARG1; title = ARG2; legend = ARG3
n = ARGC - 3
set terminal pngcairo size 600*(n < 3 ? n : 3), 420*((n + 2) / 3) font ",10" noenhanced
set output out
set datafile separator "\t"
set datafile columnheaders
set multiplot layout (n + 2) / 3, (n < 3 ? n : 3) title title
set yrange [0:1.05]
set xlabel "step"
set ylabel "entropy / uniform"
set grid
set key outside right top font ",8"   # beside the panel: never over a curve
label(i) = system(sprintf("sed -n '%dp' '%s' | cut -f1", i - 3, legend))
do for [i=4:ARGC] {
    f = ARGV[i]
    cols = system(sprintf("awk '!/^#/ { print; exit }' '%s' | tr '\\t' '\\n' | grep -c '^nent_'", f)) + 0
    hdr = system(sprintf("awk '!/^#/ { print; exit }' '%s' | tr '\\t' '\\n' | grep '^nent_' | tr '\\n' ' '", f))
    # a plugin's weights that could not be measured are nan in the log: say so, plot nothing made up
    finite = system(sprintf("awk -F'\t' '/^#/ { next } !n++ { for (i = 1; i <= NF; i++) if ($i ~ /^nent_/) c[i] = 1; next } { for (i in c) if ($i != \"nan\" && $i != \"-nan\") k++ } END { print k + 0 }' '%s'", f)) + 0
    note = system(sprintf("sed -n 's/^# attn_measure_note=//p' '%s' | head -1 | cut -c1-90", f))
    set title label(i) font ",8"
    if (cols == 0) {
        set label 1 "no per-head entropy in this log:\nno nent_l*_h* columns (docs/logs.md#columns)" at graph 0.5, 0.55 center
        plot 2 notitle
        unset label 1
    } else { if (finite == 0) {
        set label 1 "entropy not measured:\nthe kernel's weights could not be measured\n(the log's attn_measure_note)" at graph 0.5, 0.55 center
        if (strlen(note) > 0) { set label 2 note at graph 0.5, 0.3 center font ",8" }
        plot 2 notitle
        unset label 1; unset label 2
    } else {
        plot for [h=1:cols] f using "step":(column(word(hdr, h))) with lines lw 1.5 title word(hdr, h)[6:]
    } }
}
unset multiplot
