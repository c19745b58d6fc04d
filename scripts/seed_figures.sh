#!/usr/bin/env bash
# The seed's own figures: runs the three binaries of an existing build and
# plots their tables. Builds nothing.
#   scripts/seed_figures.sh [BUILD_DIR] [OUT_DIR]      (defaults: build/ and runs/)
# writes OUT_DIR/worked_example.txt, dot_variance.tsv, softmax_saturation.tsv,
# softmax_sigma.tsv and dot_variance.png, softmax_saturation.png, softmax_sigma.png,
# and each binary's printout (its summary tables, on stderr) in OUT_DIR/NAME.out.
# Exits non-zero if a binary fails (worked_example fails when its numbers do
# not match the seed's) or a plot cannot be made.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "${1:-}" in -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# -le 2 ] || { echo "usage: scripts/seed_figures.sh [BUILD_DIR] [OUT_DIR]" >&2; exit 2; }
build="${1:-$top/build}"
out="${2:-$top/runs}"
bin="$build/experiments"
for b in worked_example dot_variance softmax_saturation; do
    [ -x "$bin/$b" ] || { echo "scripts/seed_figures.sh: $bin/$b is missing; build first (scripts/test.sh)" >&2; exit 2; }
done
command -v gnuplot >/dev/null || { echo "scripts/seed_figures.sh: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }
mkdir -p "$out"

status=0
run() {   # run NAME ARGS...: a failing binary is reported, and the others still run
    local name=$1; shift
    echo "== $name" >&2
    if ! "$bin/$name" "$@" >"$out/$name.out" 2>&1 || ! cat "$out/$name.out" >&2; then
        echo "scripts/seed_figures.sh: $name failed" >&2
        status=1
    fi
}
run worked_example --out "$out/worked_example.txt"
run dot_variance --out "$out/dot_variance.tsv"
run softmax_saturation --out "$out/softmax_saturation.tsv" --sigma-out "$out/softmax_sigma.tsv"

plot() {   # plot SCRIPT IN OUT, when IN was written
    if [ -s "$2" ]; then
        gnuplot -c "$top/scripts/$1" "$2" "$3" || { echo "scripts/seed_figures.sh: gnuplot $1 failed" >&2; status=1; }
    fi
}
plot dot_variance.gp "$out/dot_variance.tsv" "$out/dot_variance.png"
plot softmax_saturation.gp "$out/softmax_saturation.tsv" "$out/softmax_saturation.png"
plot softmax_sigma.gp "$out/softmax_sigma.tsv" "$out/softmax_sigma.png"
[ $status -eq 0 ] && echo "wrote $out/{worked_example.txt,dot_variance.tsv,softmax_saturation.tsv,softmax_sigma.tsv,*.png}" >&2
exit $status
