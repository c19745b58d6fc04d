# The seed's "why large scores hurt": softmax(c·[2, 1, 0.5]) as c grows.
#   gnuplot -c scripts/softmax_saturation.gp IN.tsv OUT.png   (IN: softmax_saturation's c-sweep TSV)
# Three panels over c (log axis): the weights, the entropy, and the Frobenius
# norm of the softmax Jacobian diag(p) − p pᵀ (engine's backward pass: points;
# closed form: line). Shaded: c beyond '# c_gone=', where the norm is below 1e-3.
in = ARG1; out = ARG2
set terminal pngcairo size 1000,1150 font ",11"
set output out
set datafile separator "\t"
set datafile columnheaders
cg = system(sprintf("sed -n 's/^# c_gone=//p' '%s'", in)) + 0
set multiplot layout 3,1 title "softmax(c · [2, 1, 0.5]): from a soft preference to a hard pick with no gradient" margins 0.1, 0.95, 0.06, 0.93 spacing 0, 0.07
set logscale x
set xrange [0.1:20]
set xtics (0.1, 0.2, 0.5, 1, 2, 5, 10, 20)
set grid
set object 1 rect from first cg, graph 0 to graph 1, graph 1 fc rgb "#ececec" fs solid noborder behind
set arrow 1 from first cg, graph 0 to first cg, graph 1 nohead lw 2 lc rgb "#d62728"
set arrow 2 from first 11.3, graph 0 to first 11.3, graph 1 nohead lw 2 dt 2 lc rgb "black"
set arrow 3 from first 1, graph 0 to first 1, graph 1 nohead lw 1.5 dt 2 lc rgb "gray50"
set label 1 "c = 1: the seed's\nscores [2, 1, 0.5]" at first 1.08, graph 0.55 left font ",10"
set label 2 sprintf("gradient gone:\n‖J‖ < 10^{-3} for c > %.2f", cg) at first cg * 0.93, graph 0.55 right tc rgb "#d62728" font ",10"
set label 3 "c = 11.3:\nthe std of\nunscaled q·k\nat d_k = 128" at first 11.3 * 1.05, graph 0.55 left font ",10"
set ylabel "weight"
set yrange [0:1.05]
set key at graph 0.02, graph 0.97 left top box opaque
set title "the weights"
plot in using "c":"p1" with lines lw 2.5 lc rgb "#1f77b4" title "p_1 (score 2)", \
     in using "c":"p2" with lines lw 2.5 lc rgb "#ff7f0e" title "p_2 (score 1)", \
     in using "c":"p3" with lines lw 2.5 lc rgb "#2ca02c" title "p_3 (score 0.5)"
set ylabel "entropy (nats)"
set yrange [0:1.2]
set title "the entropy (ln 3 = 1.10 is uniform)"
plot in using "c":"entropy" with lines lw 2.5 lc rgb "#9467bd" title "entropy", \
     log(3) with lines dt 2 lc rgb "gray40" title "ln 3"
set logscale y
set yrange [1e-9:1]
set label 3 at first 11.3 * 1.05, graph 0.9   # above the curve, which is below 1e-4 there
set format y "10^{%T}"
set ylabel "‖diag(p) − p p^T‖_F"
set xlabel "c (scores multiplied by c)"
set key at graph 0.02, graph 0.05 left bottom box opaque
set title "the softmax Jacobian: how much any gradient can pass through"
plot in using "c":"jac_exact" with lines lw 2 lc rgb "black" title "closed form", \
     in using "c":"jac_norm" with points pt 7 ps 1 lc rgb "#1f77b4" title "backward pass (one per Jacobian row)", \
     1e-3 with lines dt 2 lw 1.5 lc rgb "#d62728" title "10^{-3}"
unset multiplot
