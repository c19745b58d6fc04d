#!/usr/bin/env bash
# What the op tests measure, as tables: how close each op's backward comes to
# the gradient checker's limit, the two attention ops' errors against a
# float64 reference under each OpenBLAS kernel, and examples/custom_op's run.
#   scripts/ops_report.sh [--docs] [BUILD_DIR]      (default build/, built already)
# prints all three; --docs writes them to docs/data/ops/gradcheck.txt,
# attention-errors.txt and custom_op.txt (for the docs' blocks; then scripts/docs.sh).
# Runs build/tests/test_op_* with TG_GC_VERBOSE=1 (every check's summary), and
# test_op_flash_attention once per kernel: OpenBLAS's own pick and
# OPENBLAS_CORETYPE=Prescott, Haswell and SkylakeX where the CPU can run them (an
# AVX2-only CPU skips SkylakeX: its AVX-512 code would die of SIGILL); installs BUILD_DIR into a
# temporary prefix and builds and runs examples/custom_op there (TG_GC_VERBOSE=1).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
docs=""
[ "${1:-}" != --docs ] || { docs=1; shift; }
build=${1:-$top/build}
[ -x "$build/tests/test_op_flash_attention" ] || { echo "scripts/ops_report.sh: $build/tests/test_op_flash_attention is missing: build first (scripts/test.sh)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# the worst error/limit of any check of each op's test (under 1 passes)
for t in "$build"/tests/test_op_*; do
    op=${t##*/test_op_}
    TG_GC_VERBOSE=1 env -u OPENBLAS_CORETYPE "$t" >"$tmp/out" 2>&1 || { echo "scripts/ops_report.sh: $t failed" >&2; cat "$tmp/out" >&2; exit 1; }
    awk -v op="$op" '/worst error\/limit/ { n++; w = $NF + 0 > w ? $NF + 0 : w } END { if (n) printf "%-14s %6d %17.3f\n", op, n, w }' "$tmp/out"
done | sort -k3,3nr | awk 'BEGIN { printf "%-14s %6s %17s\n", "op", "checks", "worst error/limit" } { print }' >"$tmp/gradcheck"

# the attention errors: per case and comparison, each figure's range over the kernels
cpu_has() { for f in "$@"; do grep -qw "$f" /proc/cpuinfo || return 1; done; }
cores=(unset Prescott)
! cpu_has avx2 fma || cores+=(Haswell)
! cpu_has avx512f avx512bw avx512dq avx512vl || cores+=(SkylakeX)
for core in "${cores[@]}"; do
    if [ $core = unset ]; then env -u OPENBLAS_CORETYPE "$build/tests/test_op_flash_attention"; else OPENBLAS_CORETYPE=$core "$build/tests/test_op_flash_attention"; fi >"$tmp/$core" 2>&1 ||
        { echo "scripts/ops_report.sh: test_op_flash_attention failed with OPENBLAS_CORETYPE=$core" >&2; cat "$tmp/$core" >&2; exit 1; }
done
named=$(IFS=,; echo "${cores[*]:1}" | sed 's/,/, /g')
kernels=$(env -u OPENBLAS_CORETYPE "$build/experiments/blas_info" | sed "s/.* core=\([^ ]*\).*libxsmm=\([^ ]*\).*/OpenBLAS core \1 (its own pick), $named; libxsmm \2/")
awk -v kernels="$kernels" '
    /kappa/ { c = $0; sub(/: kappa.*/, "", c); if (!(c in seen)) { seen[c] = 1; cases[++nc] = c }
              k = $0; sub(/.*kappa /, "", k); sub(/,.*/, "", k); kap[c] = k; next }
    / vs / { cmp = $0; sub(/^ +/, "", cmp); sub(/ *:.*/, "", cmp); if (!((c, cmp) in sc)) { sc[c, cmp] = 1; cmps[c] = cmps[c] "|" cmp }
             line = $0; sub(/.*: /, "", line); n = split(line, f, " ")
             for (i = 1; i < n; i += 2) { q = f[i]; v = f[i + 1] + 0; key = c SUBSEP cmp SUBSEP q
                 if (!(key in lo) || v < lo[key]) lo[key] = v; if (!(key in hi) || v > hi[key]) hi[key] = v
                 if (!(q in qs)) { qs[q] = 1; qorder[++nq] = q } } }
    function r(key) { return lo[key] == hi[key] ? sprintf("%.1e", lo[key]) : sprintf("%.1e-%.1e", lo[key], hi[key]) }
    END {
        print "max |error| / max |value| per tensor (dhs: the head-scale grad); ranges over the kernels:"
        print kernels
        for (i = 1; i <= nc; i++) {
            c = cases[i]; printf "\n%s (kappa %s)\n", c, kap[c]
            l = sprintf("  %-18s", ""); for (j = 1; j <= nq; j++) l = l sprintf(" %-17s", qorder[j]); sub(/ +$/, "", l); print l
            m = split(substr(cmps[c], 2), cm, "|")
            for (k = 1; k <= m; k++) { l = sprintf("  %-18s", cm[k]); for (j = 1; j <= nq; j++) l = l sprintf(" %-17s", r(c SUBSEP cm[k] SUBSEP qorder[j])); sub(/ +$/, "", l); print l }
        }
    }' "${cores[@]/#/$tmp/}" >"$tmp/attention"

# the out-of-tree example against an install of this build
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$top/examples/custom_op" -B "$tmp/custom_op" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/custom_op" >/dev/null
(cd "$tmp" && TG_GC_VERBOSE=1 env -u OPENBLAS_CORETYPE "$tmp/custom_op/custom_op" >"$tmp/custom_op.txt" 2>&1) ||
    { echo "scripts/ops_report.sh: examples/custom_op failed" >&2; cat "$tmp/custom_op.txt" >&2; exit 1; }

if [ -n "$docs" ]; then
    mkdir -p "$top/docs/data/ops"
    cp "$tmp/gradcheck" "$top/docs/data/ops/gradcheck.txt"
    cp "$tmp/attention" "$top/docs/data/ops/attention-errors.txt"
    cp "$tmp/custom_op.txt" "$top/docs/data/ops/custom_op.txt"
    echo "docs: docs/data/ops/{gradcheck,attention-errors,custom_op}.txt; now run scripts/docs.sh" >&2
fi
cat "$tmp/gradcheck"; echo; cat "$tmp/attention"; echo; cat "$tmp/custom_op.txt"
