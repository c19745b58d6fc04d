# Validation loss curves (the val_loss column, logged every --eval-every steps) of several runs.
#   gnuplot -c scripts/valloss.gp OUT.png TITLE RUN.tsv [RUN.tsv ...]
out = ARG1; title = ARG2
set terminal pngcairo size 1000,600 font ",11" noenhanced
set output out
set datafile separator "\t"
set datafile columnheaders
set datafile missing "nan"
set title title
set xlabel "step"
set ylabel "validation loss (nats per byte)"
set key outside right
set grid
label(f) = system(sprintf("basename '%s' .tsv", f))
plot for [i=3:ARGC] ARGV[i] using "step":"val_loss" with linespoints lw 2 pt 7 ps 0.6 title label(ARGV[i])
