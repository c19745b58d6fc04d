#!/usr/bin/env bash
# A second implementation of the exec protocol's kernel side (tests/exec_kernel.c: C, from
# docs/exec_protocol.md alone) through what the Python one goes through: the protocol's own
# checks (scripts/python/exec_conformance.py), attn_check's whole battery (it conforms; with the seed's
# bug the temperature check names √d), and attn_scale trained with it (the built-in op's rows,
# with grouped heads and a window too); no kernel process left behind.
#   exec_c_kernel.sh EXEC_KERNEL ATTN_CHECK ATTN_SCALE SOURCE_DIR
set -uo pipefail
kernel=$1 check=$2 scale=$3 src=$4
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tag="--tag=exec_c_kernel.$$"   # this test's kernels only
cd "$tmp"
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }

python3 "$src/scripts/python/exec_conformance.py" "$kernel" >conf.out 2>&1 || { no "the protocol's checks"; cat conf.out; }
python3 "$src/scripts/python/exec_conformance.py" "$kernel" --noscale >conf_ns.out 2>&1 &&
    no "the protocol's checks pass a kernel that ignores the scale"
grep -q "FAIL: forward textbook: differs from the contract" conf_ns.out || { no "the protocol's checks miss the scale"; cat conf_ns.out; }

"$check" "exec:$kernel $tag" >right.out 2>right.err
rc=$?
[ $rc = 0 ] && grep -q "verdict: the kernel conforms" right.out || { no "attn_check: exit $rc"; grep -v '^ok' right.out | head; tail -5 right.err; }
grep -q "declared    dv != d, grouped heads, Tq != Tk, window, padding;" right.out || no "attn_check did not see the declared features"
"$check" "exec:$kernel --noscale $tag" --d-head 128 >noscale.out 2>noscale.err
rc=$?
[ $rc = 1 ] || no "attn_check on the kernel without the scale: exit $rc, want 1"
grep -q "^FAIL  temperature d_head=128  c = 11.31 = √128" noscale.out || { no "the temperature check does not name √128"; grep temperature noscale.out; }

small=(--d-head 8 --heads 4 --d-model 32 --seq-len 8 --batch 4 --steps 20 --log-every 1 --warmup 2)
same() { python3 "$src/tests/same_rows.py" "$@"; }   # A.tsv B.tsv TOL: the two train alike
for v in plain "gqa_window --kv-heads 2 --window 4"; do
    set -- $v
    name=$1; shift
    "$scale" "${small[@]}" "$@" --log "builtin_$name.tsv" >/dev/null 2>"builtin_$name.err" || no "attn_scale $name: the built-in op failed"
    "$scale" "${small[@]}" "$@" --attn "exec:$kernel $tag" --log "c_$name.tsv" >/dev/null 2>"c_$name.err" ||
        { no "attn_scale $name with the C kernel: exit $?"; tail -3 "c_$name.err"; }
    msg=$(same "c_$name.tsv" "builtin_$name.tsv" 1e-5 2>&1) || no "attn_scale $name: the C kernel's run is not the built-in op's: $msg"
done
grep -q "^# attn_exec_name=c kernel$" c_plain.tsv || no "the log does not name the C kernel"

sleep 0.5
! pgrep -f -- "$tag" >/dev/null || { no "kernel processes left behind: $(pgrep -af -- "$tag")"; pkill -f -- "$tag"; }
echo "exec_c_kernel: $(tail -1 conf.out); attn_check $(sed -n 2p right.out); noscale: $(grep -c '^FAIL' noscale.out) checks failed"
[ $fails = 0 ] && echo "exec_c_kernel: all checks passed"
exit $((fails > 0))
