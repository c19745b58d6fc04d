# Per-head attention entropy over training, one panel per run.
#   gnuplot -c scripts/entropy.gp OUT.png TITLE RUN.tsv [RUN.tsv ...]
# Entropy is normalised by the uniform entropy of the causal rows (1 = uniform,
# 0 = all weight on one token): the 'nent_l*_h*' columns.
out = ARG1; title = ARG2
n = ARGC - 2
set terminal pngcairo size 600*(n < 3 ? n : 3), 420*((n + 2) / 3) font ",10" noenhanced
set output out
set datafile separator "\t"
set datafile columnheaders
set multiplot layout (n + 2) / 3, (n < 3 ? n : 3) title title
set yrange [0:1.05]
set xlabel "step"
set ylabel "entropy / uniform"
set grid
set key bottom right
label(f) = system(sprintf("basename '%s' .tsv", f))
do for [i=3:ARGC] {
    f = ARGV[i]
    cols = system(sprintf("awk '!/^#/ { print; exit }' '%s' | tr '\\t' '\\n' | grep -c '^nent_'", f)) + 0
    hdr = system(sprintf("awk '!/^#/ { print; exit }' '%s' | tr '\\t' '\\n' | grep '^nent_' | tr '\\n' ' '", f))
    set title label(f)
    plot for [h=1:cols] f using "step":(column(word(hdr, h))) with lines lw 1.5 title word(hdr, h)[6:]
}
unset multiplot
