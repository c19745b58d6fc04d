#!/usr/bin/env bash
# attn_check on a kernel in another process (exec:CMD, docs/exec_protocol.md),
# the plain-Python kernel of tests/exec_protocol_test.py: it conforms; with the
# seed's bug (the scale ignored) the temperature check names it; a kernel that
# does not start, dies at its first forward, hangs, writes garbage or answers the
# wrong shape is named (the call and what was wrong), attn_check exits
# with its own status, and no kernel process is left behind.
#   exec_cli.sh ATTN_CHECK SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tag="--tag=exec_cli.$$"   # this test's kernels only: other tests may run kernels at the same time
k="python3 $src/tests/exec_protocol_test.py --serve $tag"
cd "$tmp"
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
# --layers 0: one layer (the layers are probed once, on the right kernel: run3)
run() { local name=$1; shift; "$bin" "$@" --d-head 8 --layers 0 >"$name.out" 2>"$name.err"; echo $? >"$name.rc"; }
run3() { local name=$1; shift; "$bin" "$@" --d-head 8 >"$name.out" 2>"$name.err"; echo $? >"$name.rc"; }
left() { pgrep -f -- "$tag" >/dev/null; }

run3 right "exec:$k"
[ "$(cat right.rc)" = 0 ] && grep -q "verdict: the kernel conforms" right.out || { no "the right kernel does not conform"; cat right.out right.err | head -20; }

# grouped heads and windows declared without dv != d: the probes then call with dv = d only
run nodv "exec:$k --features gqa,window"
[ "$(cat nodv.rc)" = 0 ] && grep -q "verdict: the kernel conforms" nodv.out || { no "a kernel without dv != d does not conform"; grep -v '^ok' nodv.out | head -8; }

run noscale "exec:$k --noscale"
[ "$(cat noscale.rc)" = 1 ] || no "the kernel without the scale: exit $(cat noscale.rc), want 1"
grep -q "^FAIL  temperature" noscale.out || { no "the temperature check does not name the forgotten scale"; grep temperature noscale.out | head -3; }

run nostart "exec:exit 3"
[ "$(cat nostart.rc)" = 2 ] || no "a kernel that does not start: exit $(cat nostart.rc), want 2"
grep -q "attn_check: exec:exit 3: hello: the kernel exited with status 3" nostart.err || { no "a kernel that does not start is not named"; cat nostart.err; }

run dies "exec:$k --die-on-forward"
[ "$(cat dies.rc)" = 1 ] || no "a kernel that dies: exit $(cat dies.rc), want 1"
grep -q "exited with status 4 before answering" dies.out || { no "a kernel that dies: not said"; head -5 dies.out; }

run hangs "exec:$k --hang-on-forward" --timeout 2
[ "$(cat hangs.rc)" = 1 ] || no "a kernel that hangs: exit $(cat hangs.rc), want 1"
grep -q "no answer in 2 s" hangs.out || { no "a kernel that hangs: not said"; head -5 hangs.out; }

run garbage "exec:$k --garbage-on-forward"
[ "$(cat garbage.rc)" = 1 ] || no "a kernel that writes garbage: exit $(cat garbage.rc), want 1"
grep -q "^FAIL  forward     d_head=8 .*forward 1 (q \[2,1,2,8\].*): the kernel's frame says [0-9]* bytes, outside 1..2^30 (not the protocol: stray output on its stdout?)" garbage.out ||
    { no "a kernel that writes garbage: not said"; head -5 garbage.out; }

run wrongshape "exec:$k --raw-wrong-shape"
[ "$(cat wrongshape.rc)" = 1 ] || no "a kernel that answers the wrong shape: exit $(cat wrongshape.rc), want 1"
grep -q "^FAIL  forward     d_head=8 .*: the kernel's out is F32 \[2,1,2,9\], the call needs F32 \[2,1,2,8\]" wrongshape.out ||
    { no "a kernel that answers the wrong shape: not said"; head -5 wrongshape.out; }

sleep 0.5
! left || { no "kernel processes left behind: $(pgrep -af -- "$tag")"; pkill -f -- "$tag"; }
echo "exec_cli: right $(sed -n 2p right.out); noscale: $(grep -c '^FAIL' noscale.out) checks failed"
[ $fails = 0 ] && echo "exec_cli: all checks passed"
exit $((fails > 0))
