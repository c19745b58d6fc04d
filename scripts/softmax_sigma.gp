# Rows of T random scores with standard deviation σ: why the query and key
# weights stop learning once the scores are large.
#   gnuplot -c scripts/softmax_sigma.gp IN.tsv OUT.png   (IN: softmax_saturation --sigma-out TSV)
# Left: mean softmax entropy and mean largest weight. Right: median Frobenius
# norm of the softmax Jacobian (backward pass: points; closed form: line) and
# the share of rows whose norm is below 1e-3. σ = 1 is q·k/sqrt(d_k) of unit
# vectors; σ = 11.3 is unscaled q·k at d_k = 128.
in = ARG1; out = ARG2
set terminal pngcairo size 1300,520 font ",11"
set output out
set datafile separator "\t"
set datafile columnheaders
keys = system(sprintf("sed -n 's/^# keys=//p' '%s'", in))
rows = system(sprintf("sed -n 's/^# rows=//p' '%s'", in))
uniform = log(keys + 0)
set multiplot layout 1,2 title sprintf("softmax over rows of T = %s random scores of std σ (%s rows per σ)", keys, rows)
set logscale x
set xrange [0.09:18]
set xtics (0.1, 0.2, 0.5, 1, 2, 5, 11.3, 16)
set xlabel "σ (standard deviation of the scores)"
set grid
set arrow 1 from first 1, graph 0 to first 1, graph 1 nohead lw 1.5 dt 2 lc rgb "#2ca02c"
set arrow 2 from first 11.3, graph 0 to first 11.3, graph 1 nohead lw 2 dt 2 lc rgb "black"
set label 1 "σ = 1:\nq·k / sqrt(d_k)" at first 1.06, graph 0.96 left tc rgb "#2ca02c" font ",10"
set label 2 "σ = 11.3:\nunscaled q·k,\nd_k = 128" at first 10.7, graph 0.96 right font ",10"
set ylabel "entropy (nats)"
set yrange [0:uniform * 1.25]
set y2label "mean largest weight"
set y2range [0:1.1]
set y2tics 0.2
set ytics nomirror
set key at graph 0.02, graph 0.6 left top box opaque
set title "attention goes from uniform to one-hot"
plot uniform with lines dt 2 lc rgb "gray40" title sprintf("ln T = %.2f (uniform)", uniform), \
     in using "sigma":"ent_mean" with linespoints lw 2 pt 7 lc rgb "#9467bd" title "mean entropy", \
     in using "sigma":"pmax_mean" axes x1y2 with linespoints lw 2 pt 5 lc rgb "#ff7f0e" title "largest weight (right)"
set logscale y
set format y "10^{%T}"
set yrange [1e-3:3]
set ylabel "median ‖diag(p) − p p^T‖_F"
set y2label "share of rows with ‖J‖_F < 10^{-3}"
set y2range [0:1]
set label 1 at first 1.06, graph 0.45
set label 2 at first 10.7, graph 0.45
set key at graph 0.02, graph 0.98 left top box opaque
set title "the gradient through softmax shrinks as the rows saturate"
plot in using "sigma":"jac_exact_median" with lines lw 2 lc rgb "black" title "median, closed form", \
     in using "sigma":"jac_median" with points pt 7 ps 1.2 lc rgb "#1f77b4" title "median, backward pass", \
     in using "sigma":"frac_gone" axes x1y2 with linespoints lw 2 pt 9 lc rgb "#d62728" title "rows below 10^{-3} (right)"
unset multiplot
