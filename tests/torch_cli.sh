#!/usr/bin/env bash
# examples/torch_attention through the programs (docs/exec_protocol.md): attn_check finds the
# PyTorch einsum kernel and PyTorch's own attention conforming and names the seed's bug in the
# kernel that forgets the scale; attn_scale trains with the kernel as with the built-in op (rows
# equal to float rounding), and with the forgetful one as the built-in --scale none (the measured
# multiplier is 1). Skips (exit 77) when /usr/bin/python3 cannot import torch (python3-torch,
# installed by scripts/test_torch.sh).
#   torch_cli.sh ATTN_CHECK ATTN_SCALE SOURCE_DIR
set -uo pipefail
check=$1 scale=$2 src=$3
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || { echo "SKIP: $py cannot import torch (python3-torch; scripts/test_torch.sh installs it)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export PYTHONPATH="$src/scripts/python"
ex=$src/examples/torch_attention
tag="torch_cli_$$"   # this test's kernels: python3 -X keeps it in their command line, ignored
cd "$tmp"
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
k="$py -X $tag $ex/attention.py"

"$check" "exec:$k" --d-head 8 >right.out 2>right.err; rc=$?
[ $rc = 0 ] && grep -q "verdict: the kernel conforms" right.out || { no "the einsum kernel: exit $rc"; grep -v '^ok' right.out right.err | head; }
"$check" "exec:$py -X $tag $ex/reference.py" --d-head 8 >ref.out 2>ref.err; rc=$?
[ $rc = 0 ] && grep -q "verdict: the kernel conforms" ref.out || { no "PyTorch's attention: exit $rc"; grep -v '^ok' ref.out ref.err | head; }
"$check" "exec:$k --forget-scale" --d-head 8 >bug.out 2>bug.err; rc=$?
[ $rc = 1 ] && grep -q "^FAIL  temperature d_head=8    c = 2.83 = √8: the kernel ignores .scale." bug.out ||
    { no "the forgotten scale: exit $rc, not named"; grep temperature bug.out; }

small=(--d-head 16 --heads 2 --d-model 32 --seq-len 16 --batch 8 --steps 30 --log-every 5 --warmup 3)
same() { python3 "$src/tests/same_rows.py" "$@"; }   # A.tsv B.tsv TOL: the two train alike
"$scale" "${small[@]}" --log builtin.tsv >/dev/null 2>&1 || no "the built-in run failed"
"$scale" "${small[@]}" --scale none --log none.tsv >/dev/null 2>&1 || no "the built-in --scale none run failed"
"$scale" "${small[@]}" --attn "exec:$k" --log torch.tsv >torch.out 2>torch.err || { no "the torch kernel's run failed"; cat torch.err; }
msg=$(same torch.tsv builtin.tsv 1e-4 2>&1) || no "the torch kernel does not train as the built-in op: $msg"
"$scale" "${small[@]}" --attn "exec:$k --forget-scale" --log bug.tsv >/dev/null 2>bug.err || { no "the forgetful kernel's run failed"; cat bug.err; }
msg=$(same bug.tsv none.tsv 1e-4 2>&1) || no "the forgetful kernel does not train as --scale none: $msg"
grep -v '^#' bug.tsv | tail -1 | python3 -c '
import sys
head = open("bug.tsv").read().split("\n")
cols = [l for l in head if l and not l.startswith("#")][0].split("\t")
last = dict(zip(cols, sys.stdin.read().split("\t")))
sys.exit(0 if abs(float(last["scale_l0_h0"]) - 1) < 1e-3 else "multiplier %s" % last["scale_l0_h0"])' ||
    no "the forgetful kernel's measured multiplier is not 1"

sleep 0.5
! pgrep -f -- "$tag" >/dev/null || { no "kernel processes left: $(pgrep -af -- "$tag")"; pkill -f -- "$tag"; }
[ $fails = 0 ] && echo "torch_cli: all checks passed"
exit $((fails > 0))
