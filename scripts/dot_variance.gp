# The seed's variance argument: std of q·k against d_k, and what it does to softmax.
#   gnuplot -c scripts/dot_variance.gp IN.tsv OUT.png      (IN: build/experiments/dot_variance output)
# Left, log-log: std of q·k, q·k/sqrt(d_k) and q·k/d_k (points) with their
# predictions sqrt(d_k), 1 and 1/sqrt(d_k) (lines). Right: mean softmax entropy
# over T keys for each scaling; the dashed line is uniform attention, ln T.
in = ARG1; out = ARG2
set terminal pngcairo size 1300,520 font ",11"
set output out
set datafile separator "\t"
set datafile columnheaders
pairs = system(sprintf("sed -n 's/^# pairs=//p' '%s'", in))
keys = system(sprintf("sed -n 's/^# keys=//p' '%s'", in))
uniform = log(keys + 0)
set multiplot layout 1,2 title sprintf("q·k of independent N(0,1) vectors: %s pairs per d_k", pairs)
set logscale xy 2
set format y "%g"
set yrange [1.0/64:512]
set ytics ("1/64" 1.0/64, "1/16" 1.0/16, "1/4" 0.25, 1, 4, 16, 64, 256)
set xlabel "d_k"
set ylabel "standard deviation"
set grid
set key top left box opaque
set title "std(q·k) grows as sqrt(d_k); dividing by sqrt(d_k) holds it at 1"
plot sqrt(x) with lines lw 2 lc rgb "#1f77b4" dt 2 title "sqrt(d_k) (predicted)", \
     in using "d_k":"std" with points pt 7 ps 1.4 lc rgb "#1f77b4" title "std(q·k)", \
     1 with lines lw 2 lc rgb "#2ca02c" dt 2 notitle, \
     in using "d_k":"std_sqrt" with points pt 5 ps 1.3 lc rgb "#2ca02c" title "std(q·k / sqrt(d_k)), predicted 1", \
     1/sqrt(x) with lines lw 2 lc rgb "#d62728" dt 2 notitle, \
     in using "d_k":"std_dk" with points pt 9 ps 1.5 lc rgb "#d62728" title "std(q·k / d_k), predicted 1/sqrt(d_k)"
unset logscale y
set ytics auto
set format y "%.1f"
set yrange [0:uniform * 1.12]
set ylabel "softmax entropy (nats)"
set key right center box opaque
set title sprintf("softmax over T = %s keys: near one-hot unscaled, near uniform with 1/d_k", keys)
plot uniform with lines lw 2 lc rgb "gray40" dt 2 title sprintf("uniform, ln T = %.2f", uniform), \
     in using "d_k":"ent_raw" with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "q·k", \
     in using "d_k":"ent_sqrt" with linespoints lw 2 pt 5 lc rgb "#2ca02c" title "q·k / sqrt(d_k)", \
     in using "d_k":"ent_dk" with linespoints lw 2 pt 9 lc rgb "#d62728" title "q·k / d_k"
unset multiplot
