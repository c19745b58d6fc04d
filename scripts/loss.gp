# Loss curves of several runs on one chart.
#   gnuplot -c scripts/loss.gp OUT.png TITLE LEGEND.tsv RUN.tsv [RUN.tsv ...]
# LEGEND.tsv (tglogs.py legend): a line per run, its label and 1 when its curve
# lies on an earlier run's: that one is drawn dashed with open circles, so a
# curve is never hidden under another, and its label names the other. The
# dashed gray line is the first run's context-free reference loss
# ('# ref_loss_context_free=' in its header).
out = ARG1; title = ARG2; legend = ARG3
set terminal pngcairo size 1000,600 font ",11" noenhanced
set output out
set datafile separator "\t"
set datafile columnheaders
set title title
set xlabel "step"
set ylabel "training loss (nats)"
set key below left Left reverse font ",9" maxrows 8   # under the plot: never over a curve
set grid
# a log without the key (your own trainer's: docs/logs.md) has no reference line
refs = system(sprintf("sed -n 's/^# ref_loss_context_free=//p' '%s' | head -1", ARG4))
ref = (strlen(refs) > 0 && refs ne "nan") ? refs + 0 : NaN
label(i) = system(sprintf("sed -n '%dp' '%s' | cut -f1", i - 3, legend))
same(i) = system(sprintf("sed -n '%dp' '%s' | cut -f2", i - 3, legend)) + 0
plot for [i=4:ARGC] ARGV[i] using "step":(same(i) ? NaN : column("loss")) with lines lw 2 lc (i - 3) \
         title (same(i) ? "" : label(i)), \
     for [i=4:ARGC] ARGV[i] using "step":(same(i) ? column("loss") : NaN) with linespoints lw 2 dt 2 pt 6 ps 1.2 \
         pi 4 lc (i - 3) title (same(i) ? label(i) : ""), \
     ref with lines dt 2 lc rgb "gray40" title (ref == ref ? "context-free reference" : "")
