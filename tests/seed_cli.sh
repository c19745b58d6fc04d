#!/bin/sh
# The seed-figure binaries' command line: --help, bad flags (exit 2), TSV on
# stdout ('#' lines, then one header row), --out written atomically, and an
# unwritable --out (exit 2, nothing left behind).
#   tests/seed_cli.sh WORKED_EXAMPLE DOT_VARIANCE SOFTMAX_SATURATION
set -u
we=$1; dv=$2; ss=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {   # check DESCRIPTION WANT_RC CMD...
    desc=$1; want=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL: $desc: exit $rc, want $want"; sed 's/^/  | /' "$tmp/err" | head -5; fails=$((fails + 1))
    fi
}
header() {   # header FILE EXPECTED_PREFIX: '#' lines first, then the header row
    first=$(grep -v '^#' "$1" | head -1)
    case "$first" in "$2"*) ;; *) echo "FAIL: $1: header is '$first', want '$2...'"; fails=$((fails + 1)) ;; esac
    if ! head -1 "$1" | grep -q '^#'; then echo "FAIL: $1 does not start with '#' lines"; fails=$((fails + 1)); fi
    if [ "$(grep -vc '^#' "$1")" -lt 2 ]; then echo "FAIL: $1 has no data rows"; fails=$((fails + 1)); fi
}
small_dv="--dims 4,8,...,32 --pairs 200 --queries 10 --keys 8"
small_ss="--rows 20 --keys 8 --sigmas 0.5,1,...,8"
for b in "$we" "$dv" "$ss"; do
    check "$b --help" 0 "$b" --help
    grep -q '^usage:' "$tmp/out" || { echo "FAIL: $b --help prints no usage"; fails=$((fails + 1)); }
    check "$b --no-such-flag" 2 "$b" --no-such-flag
    grep -q 'unknown flag' "$tmp/err" || { echo "FAIL: $b: no message for a bad flag"; fails=$((fails + 1)); }
    check "$b positional" 2 "$b" extra
    check "$b --out to a missing directory" 2 "$b" --out "$tmp/no/such/dir/x.tsv"
done
check "dot_variance --dims 4,8,...,1000" 2 "$dv" --dims 4,8,...,1000
check "dot_variance --dims 4.5" 2 "$dv" --dims 4.5
check "dot_variance --pairs 1" 2 "$dv" --pairs 1
check "softmax_saturation --sigmas 0" 2 "$ss" --sigmas 0
check "softmax_saturation --sigma-out to a missing directory" 2 "$ss" $small_ss --sigma-out "$tmp/no/x.tsv"
[ -e "$tmp/no" ] && { echo "FAIL: an unwritable --sigma-out left something"; fails=$((fails + 1)); }

check "worked_example" 0 "$we"
cp "$tmp/out" "$tmp/we.txt"; header "$tmp/we.txt" "quantity	i	j	value	seed	abs_diff"
check "dot_variance (stdout)" 0 "$dv" $small_dv
cp "$tmp/out" "$tmp/dv.txt"; header "$tmp/dv.txt" "d_k	mean	var	std	std_pred	std_sqrt	std_dk	ent_raw	ent_sqrt	ent_dk"
check "dot_variance --out" 0 "$dv" $small_dv --out "$tmp/dv.tsv"
[ -s "$tmp/out" ] && { echo "FAIL: dot_variance --out also wrote stdout"; fails=$((fails + 1)); }
cmp -s "$tmp/dv.tsv" "$tmp/dv.txt" || { echo "FAIL: dot_variance --out differs from its stdout"; fails=$((fails + 1)); }
header "$tmp/dv.tsv" "d_k	mean"
check "softmax_saturation --out --sigma-out" 0 "$ss" $small_ss --out "$tmp/ss.tsv" --sigma-out "$tmp/sig.tsv"
header "$tmp/ss.tsv" "c	p1	p2	p3	entropy	jac_norm	jac_exact"
header "$tmp/sig.tsv" "sigma	ent_mean"
ls -A "$tmp" | grep -q "^\." && { echo "FAIL: a temporary file was left behind: $(ls -A "$tmp" | grep "^\.")"; fails=$((fails + 1)); }
[ "$fails" -eq 0 ] && echo "seed_cli: all checks passed"
exit "$fails"
