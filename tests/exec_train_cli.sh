#!/usr/bin/env bash
# attn_scale --attn exec:CMD (docs/exec_protocol.md) with the plain-Python kernel of
# tests/exec_protocol_test.py: the run's rows are the built-in op's (to float
# rounding); a kernel that dies mid-run fails the run with exit 6, the log's last
# line naming the step, the kernel and the call, the checkpoint before it kept, and
# a resume from it finishes as the straight run did; one that hangs mid-run likewise; what identifies the kernel for
# a resume (its files' bytes, not where they are; every other word of the command);
# a kernel that hangs, writes garbage or lacks a feature the flags use, or a command
# that does not start, refused with nothing written; the code model's validation
# loss failing too; no kernel process left behind.
#   exec_train_cli.sh ATTN_SCALE SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tag="--tag=exec_train_cli.$$"   # this test's kernels only
export PYTHONPATH="$src/scripts/python"   # the kernel's module, for the copy below
cp "$src/tests/exec_protocol_test.py" "$tmp/kernel.py"
k="python3 kernel.py --serve $tag"
cd "$tmp"
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
small=(--d-head 8 --heads 2 --d-model 16 --seq-len 8 --batch 4 --steps 20 --log-every 1 --warmup 2)
run() { local name=$1; shift; "$bin" "${small[@]}" "$@" >"$name.out" 2>"$name.err"; echo $? >"$name.rc"; }
rows() { grep -v '^#' "$1"; }
same() { python3 "$src/tests/same_rows.py" "$@"; }   # A.tsv B.tsv TOL: the two train alike

run builtin --log builtin.tsv
run right --attn "exec:$k" --log right.tsv
[ "$(cat right.rc)" = 0 ] || { no "the right kernel: exit $(cat right.rc)"; cat right.err; }
msg=$(same right.tsv builtin.tsv 1e-5 2>&1) || no "the exec kernel's run is not the built-in op's: $msg"
grep -q "^# attn_exec=python3 sha256:$(sha256sum kernel.py | cut -c1-64) --serve $tag$" right.tsv ||
    no "the log does not record the command with the file's digest: $(grep '^# attn_exec=' right.tsv)"
grep -q "^# attn_exec_name=plain python$" right.tsv || no "the log does not name the kernel"

# dies at its 13th forward (told by the environment, which is not part of the kernel's identity): exit 6,
# named, the checkpoint of step 5 kept
EXEC_TEST_DIE_AFTER=12 run dies --attn "exec:$k" --log dies.tsv --save dies.st --save-every 5
[ "$(cat dies.rc)" = 6 ] || { no "a kernel that dies mid-run: exit $(cat dies.rc), want 6"; cat dies.err; }
tail -1 dies.tsv | grep -q "^# failed: step [0-9]*: exec kernel plain python: forward [0-9]* (q \[4,8,2,8\].*): the kernel exited with status 4 before answering$" ||
    no "the log's last line does not name the failure: $(tail -1 dies.tsv)"
grep -q "the last checkpoint (step 5) is kept" dies.err || no "the kept checkpoint is not said: $(cat dies.err)"
# hangs at its 13th forward: the call's time limit ends the run the same way, the kernel killed
EXEC_TEST_HANG_AFTER=12 run hangsmid --attn "exec:$k" --exec-timeout 2 --log hangsmid.tsv --save hangsmid.st --save-every 5
[ "$(cat hangsmid.rc)" = 6 ] || { no "a kernel that hangs mid-run: exit $(cat hangsmid.rc), want 6"; cat hangsmid.err; }
tail -1 hangsmid.tsv | grep -q "^# failed: step [0-9]*: exec kernel plain python: forward [0-9]* (q \[4,8,2,8\].*): no answer in 2 s$" ||
    no "a kernel that hangs mid-run: the log's last line: $(tail -1 hangsmid.tsv)"
[ -s hangsmid.st ] && grep -q "the last checkpoint (step 5) is kept" hangsmid.err || no "a kernel that hangs mid-run: the checkpoint is not kept"

# resumed with another word in the command: refused; with the kernel's file moved (same bytes, other
# name, other spacing): accepted, and it ends as the straight run did
run other --attn "exec:$k --noscale" --log dies.tsv --save dies.st --resume dies.st
[ "$(cat other.rc)" = 2 ] && grep -q "setting differs: attn_exec is .*[0-9] in the checkpoint, .* --noscale in this run" other.err ||
    no "a resume with another command word is not refused: exit $(cat other.rc) $(cat other.err)"
mkdir moved && cp kernel.py moved/renamed.py
run resumed --attn "exec:python3  moved/renamed.py --serve $tag" --log dies.tsv --save dies.st --resume dies.st
[ "$(cat resumed.rc)" = 0 ] || { no "a resume with the kernel's file moved: exit $(cat resumed.rc)"; cat resumed.err; }
msg=$(same dies.tsv right.tsv 1e-5 2>&1) || no "the resumed run is not the straight run: $msg"
echo "# changed" >>moved/renamed.py
run changed --attn "exec:python3 moved/renamed.py --serve $tag" --steps 25 --log dies.tsv --save dies.st --resume dies.st
[ "$(cat changed.rc)" = 2 ] && grep -q "setting differs: attn_exec" changed.err ||
    no "a resume with the kernel's file changed is not refused: exit $(cat changed.rc) $(cat changed.err)"

# refused before anything is written: hangs (exit 6), garbage (6), the wrong shape (6), a feature it
# lacks (2), no such command (2)
run hangs --attn "exec:$k --hang-on-forward" --exec-timeout 1 --log hangs.tsv --save hangs.st --save-every 5
[ "$(cat hangs.rc)" = 6 ] && grep -q "no answer in 1 s; nothing was written" hangs.err ||
    no "a kernel that hangs: exit $(cat hangs.rc): $(cat hangs.err)"
run garbage --attn "exec:$k --garbage-on-forward" --log garbage.tsv
[ "$(cat garbage.rc)" = 6 ] && grep -q "outside 1..2^30 (not the protocol: stray output on its stdout?); nothing was written" garbage.err ||
    no "a kernel that writes garbage: exit $(cat garbage.rc): $(cat garbage.err)"
run wrongshape --attn "exec:$k --raw-wrong-shape" --log wrongshape.tsv
[ "$(cat wrongshape.rc)" = 6 ] && grep -q "the kernel's out is F32 \[4,8,2,9\], the call needs F32 \[4,8,2,8\]; nothing was written" wrongshape.err ||
    no "a kernel that answers the wrong shape: exit $(cat wrongshape.rc): $(cat wrongshape.err)"
run softcap --attn "exec:$k" --softcap 5 --log softcap.tsv
[ "$(cat softcap.rc)" = 2 ] && grep -q "^attn_scale: --softcap needs softcap, which the exec kernel 'plain python' (exec:$k) does not declare" softcap.err ||
    no "a feature the kernel lacks: exit $(cat softcap.rc): $(cat softcap.err)"
run nostart --attn "exec:no_such_kernel_command" --log nostart.tsv
[ "$(cat nostart.rc)" = 2 ] && grep -q "hello: the kernel exited with status 127 before answering; its last line on stderr: sh: 1: no_such_kernel_command: not found; nothing was written" nostart.err ||
    no "a command that does not start: exit $(cat nostart.rc): $(cat nostart.err)"
for f in hangs.tsv hangs.st garbage.tsv wrongshape.tsv softcap.tsv nostart.tsv; do [ ! -e "$f" ] || no "$f written"; done

# the code model: its validation loss calls the kernel too (on a context of its own)
EXEC_TEST_DIE_AFTER=3 "$bin" --task code --d-head 8 --heads 2 --d-model 16 --seq-len 16 --batch 2 --steps 4 --eval-every 2 --log-every 2 \
    --warmup 1 --attn "exec:$k" --log code.tsv >code.out 2>code.err
rc=$?
[ $rc = 6 ] && tail -1 code.tsv | grep -q "^# stopped before step 0: the validation loss: exec kernel plain python: forward" ||
    no "the code model's validation with a dying kernel: exit $rc, $(tail -1 code.tsv)"

sleep 0.5
! pgrep -f -- "$tag" >/dev/null || { no "kernel processes left behind: $(pgrep -af -- "$tag")"; pkill -f -- "$tag"; }
[ $fails = 0 ] && echo "exec_train_cli: all checks passed"
exit $((fails > 0))
