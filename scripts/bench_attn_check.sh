#!/usr/bin/env bash
# How long attn_check's whole battery takes (docs/speed.md#attn_checks-battery): on the built-in op
# and on the PyTorch kernel of examples/torch_attention through the exec protocol, R times each,
# alternating (medians and minima); with --against BIN also that attn_check binary (another
# version), alternating with this one, on the PyTorch kernel. With --layers (0.21) instead: StarCoder's
# port (tests/ports/starcoder.py) in fp32 and bf16, at one layer (--layers 0) and at the default three
# (0, 1, 11), alternating (issue 55's budget: one exec kernel's battery <= 8 s, three layers <= 15 s).
#   scripts/bench_attn_check.sh [--repeats 5] [--against OTHER/attn_check | --layers]
# Installs python3-torch when missing; builds in build/.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/setup.sh"
repeats=5 against="" layers=0
while [ $# -gt 0 ]; do
    case "$1" in
        --repeats) [ $# -ge 2 ] || { echo "scripts/bench_attn_check.sh: --repeats needs a value" >&2; exit 2; }
                   repeats=$2; shift 2 ;;
        --against) [ $# -ge 2 ] || { echo "scripts/bench_attn_check.sh: --against needs a binary" >&2; exit 2; }
                   against=$2; shift 2 ;;
        --layers) layers=1; shift ;;
        *) echo "scripts/bench_attn_check.sh: unknown option '$1' (see the comment at its top)" >&2; exit 2 ;;
    esac
done
case "$repeats" in ''|*[!0-9]*|0) echo "scripts/bench_attn_check.sh: --repeats '$repeats': a positive integer" >&2; exit 2 ;; esac
[ -z "$against" ] || [ -x "$against" ] || { echo "scripts/bench_attn_check.sh: --against '$against' is not an executable" >&2; exit 2; }
tg_need "${TG_TORCH_PACKAGES[@]}"
tg_build "$top/build" attn_check blas_info
bin=$top/build/experiments/attn_check
torch="exec:/usr/bin/python3 $top/examples/torch_attention/attention.py"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(tg_machine "$top/build" | tr '\n' ' ')load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# attn_check's whole battery (every d_head, every declared feature), wall seconds, $repeats rounds alternating"
one() {   # one NAME BIN KERNEL [FLAGS...]: a run's wall seconds appended to $tmp/NAME (exit 1 is a finding, fine)
    local t0 t1 rc=0 name=$1 b=$2 k=$3
    shift 3
    t0=$(date +%s.%N)
    "$b" "$k" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    t1=$(date +%s.%N)
    [ $rc -le 1 ] || { echo "scripts/bench_attn_check.sh: $b $k exited $rc: $(grep -v '^\[kernel' "$tmp/err" | tail -2)" >&2; exit 1; }
    grep -q '^verdict:' "$tmp/out" || { echo "scripts/bench_attn_check.sh: $b $k printed no verdict" >&2; exit 1; }
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }' >>"$tmp/$name"
}
stats() { sort -g "$tmp/$1" | awk '{ x[NR] = $1 } END { m = NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2; printf "%.2f\t%.2f", m, x[1] }'; }
if [ $layers = 1 ]; then
    export PYTHONPATH="$top/scripts/python"
    sc="exec:/usr/bin/python3 $top/tests/ports/starcoder.py --precision"
    for ((r = 0; r < repeats; r++)); do
        for p in fp32 bf16; do
            one "$p-1" "$bin" "$sc $p" --layers 0
            one "$p-3" "$bin" "$sc $p"
        done
    done
    printf "kernel\tlayers\tmedian_s\tmin_s\n"
    for p in fp32 bf16; do
        printf "exec starcoder %s\t0\t%s\n" $p "$(stats "$p-1")"
        printf "exec starcoder %s\t0,1,11\t%s\n" $p "$(stats "$p-3")"
    done
    exit 0
fi
for ((r = 0; r < repeats; r++)); do
    one builtin "$bin" builtin:composed
    one torch "$bin" "$torch"
    [ -z "$against" ] || one against "$against" "$torch"
done
printf "kernel\tattn_check\tmedian_s\tmin_s\n"
printf "builtin:composed\tthis\t%s\n" "$(stats builtin)"
printf "exec torch einsum\tthis\t%s\n" "$(stats torch)"
[ -z "$against" ] || printf "exec torch einsum\t%s\t%s\n" "$against" "$(stats against)"
