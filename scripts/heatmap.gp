# Heatmap of per-head normalised attention entropy (x: step, y: head).
#   gnuplot -c scripts/heatmap.gp OUT.png TITLE MATRIX.txt NHEADS
# MATRIX.txt holds "step head value" triples, one block per step, made from a
# log by scripts/plot.sh.
out = ARG1; title = ARG2
set terminal pngcairo size 1000,360 font ",10" noenhanced
set output out
set title title
set xlabel "step"
set ylabel "head (layers x heads, in order)"
set cbrange [0:1]
set cblabel "entropy / uniform"
set palette defined (0 "#2b0a3d", 0.1 "#7a1f5c", 0.5 "#e0603a", 1 "#f7f3a6")
set yrange [-0.5:ARG4 - 0.5]
set ytics 1
set autoscale xfix
plot ARG3 using 1:2:3 with image notitle
