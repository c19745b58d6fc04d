# Loss curves of several runs on one chart.
#   gnuplot -c scripts/loss.gp OUT.png TITLE RUN.tsv [RUN.tsv ...]
# Each run is labelled by its file name; the dashed line is the first run's
# context-free reference loss ('# ref_loss_context_free=' in its header).
out = ARG1; title = ARG2
set terminal pngcairo size 1000,600 font ",11" noenhanced
set output out
set datafile separator "\t"
set datafile columnheaders
set title title
set xlabel "step"
set ylabel "training loss (nats)"
set key outside right
set grid
ref = system(sprintf("sed -n 's/^# ref_loss_context_free=//p' '%s'", ARG3)) + 0
label(f) = system(sprintf("basename '%s' .tsv", f))
plot for [i=3:ARGC] ARGV[i] using "step":"loss" with lines lw 2 title label(ARGV[i]), \
     ref with lines dt 2 lc rgb "gray40" title "context-free reference"
