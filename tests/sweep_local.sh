#!/usr/bin/env bash
# scripts/sweep with the local engine (GNU parallel), end to end at a small size:
# - plan: unknown keys/values refused with attn_scale's own message and nothing
#   written; the tool's own flags refused as keys; re-planning with more seeds
#   adds lines and changes none; a scoped --set reaches only its runs;
# - run: parallel stopped with SIGTERM mid-sweep, then the whole sweep SIGKILLed
#   mid-run (its training processes, in their own process groups, go on as
#   orphans holding their locks), then `run` again: every run finishes and
#   `collect` gives a summary.tsv byte-identical to an uninterrupted sweep's,
#   and every log the same rows;
# - status and collect on a partly finished sweep say what is missing;
# - a --set value may hold commas, and collect draws settings holding a '/'.
#   tests/sweep_local.sh SWEEP ATTN_SCALE
set -u
sweep=$1; bin=$2
tmp=$(mktemp -d)
cleanup() {   # stop whatever this test started and left running
    [ -n "${orphans:-}" ] && kill -CONT $orphans 2>/dev/null
    [ -n "${sid:-}" ] && kill -KILL $(ps -o pid= -s "$sid") 2>/dev/null
    for f in "$tmp"/*/runs/*.lock; do
        [ -f "$f" ] && p=$(sed -n 's/^pid=\([0-9]*\).*/\1/p' "$f") && [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
    done
    [ -n "${KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp" || exit 1
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
command -v parallel >/dev/null || { echo "FAIL: GNU parallel is not installed (scripts/test.sh installs it)"; exit 1; }
S() { "$sweep" "$@"; }
SIZE="--set batch=8 --set seq-len=16 --set vocab=16 --set alphabet=4 --set d-model=32 --set heads=2 --set log-every=5 --set warmup=10 --set steps=1000 --set save-every=20"
GRID="scale=none,sqrt d_head=8,16 seed=1,2"
wait_for() {   # wait_for SECONDS CMD...: poll until CMD succeeds
    local t=$(( $1 * 10 )); shift
    until "$@"; do [ $t -gt 0 ] || return 1; sleep 0.1; t=$((t - 1)); done
}
n_done() { ls "$1"/runs/*.done 2>/dev/null | wc -l; }
has() { compgen -G "$1" >/dev/null; }
more_done() { [ "$(n_done test)" -gt "$before" ]; }

# ---- plan -------------------------------------------------------------------------
S plan ref --grid "$GRID" $SIZE --bin "$bin" 2>plan.err || { no "plan failed"; cat plan.err; }
[ "$(wc -l <ref/manifest.tsv)" -eq 8 ] || no "plan: $(wc -l <ref/manifest.tsv) runs, want 8"
cp ref/manifest.tsv manifest.keep
refused() {   # refused NAME MESSAGE PLAN-ARGS...
    local name=$1 msg=$2; shift 2
    S plan ref "$@" --bin "$bin" >/dev/null 2>"$name.err" && no "plan $name: accepted"
    grep -q -- "$msg" "$name.err" || { no "plan $name: message lacks '$msg'"; sed 's/^/  | /' "$name.err" | head -3; }
    cmp -s ref/manifest.tsv manifest.keep || { no "plan $name: the manifest changed"; cp manifest.keep ref/manifest.tsv; }
}
refused key "attn_scale: unknown flag '--nope'" --grid "$GRID nope=1" $SIZE
refused value "attn_scale: --scale: 'nne' is not one of" --grid "scale=nne seed=1" $SIZE
S plan x --grid "$GRID" $SIZE --set steps=5 --bin "$bin" 2>cross.err && no "plan cross: accepted"
grep -q "attn_scale: --warmup 10 is longer than --steps 5" cross.err || { no "plan cross: not attn_scale's message"; cat cross.err; }
[ -e x ] && no "plan cross: wrote its folder"
refused reserved "--log is set by the sweep itself" --grid "$GRID log=x.tsv" $SIZE
refused changed "is already planned with other flags" --grid "$GRID" $SIZE --set lr=1e-2
refused range "range '3..1' is empty" --grid "scale=none seed=3..1" $SIZE
S plan more --grid "$GRID" $SIZE --bin "$bin" 2>/dev/null
S plan more --grid "scale=none,sqrt d_head=8,16 seed=1..3" $SIZE --bin "$bin" 2>/dev/null
[ "$(head -8 more/manifest.tsv)" = "$(cat manifest.keep)" ] || no "re-planning with more seeds changed the first lines"
[ "$(wc -l <more/manifest.tsv)" -eq 12 ] || no "re-planning with seed 3: $(wc -l <more/manifest.tsv) runs, want 12"
S plan scoped --grid "optim=adam,sgd seed=1" $SIZE --set optim=sgd:lr=0.3 --bin "$bin" 2>/dev/null
grep -q $'^optim-sgd_seed-1\t.*--lr 0.3 ' scoped/manifest.tsv || no "--set optim=sgd:lr=0.3 did not reach the sgd run"
grep $'^optim-adam_seed-1\t' scoped/manifest.tsv | grep -q -- '--lr ' && no "--set optim=sgd:lr=0.3 reached the adam run"
mkdir test && cp ref/manifest.tsv test/manifest.tsv

# ---- the reference: uninterrupted ------------------------------------------------------
t0=$SECONDS
S run ref -j 2 --bin "$bin" 2>ref.err || { no "the uninterrupted sweep failed"; tail -5 ref.err; }
echo "uninterrupted sweep: 8 runs in $((SECONDS - t0)) s"
S collect ref >/dev/null 2>collect.err || { no "collect failed"; cat collect.err; }

# ---- parallel stopped mid-sweep ---------------------------------------------------------
setsid "$sweep" run test -j 2 --bin "$bin" >run1.out 2>&1 &
sid=$!
before=0
wait_for 300 more_done || no "no run finished in 300 s"
# and a run under way has a checkpoint: stopped now, it must resume (on a loaded machine a run
# may otherwise be stopped while it starts up, before it saves anything, and nothing would resume)
midway() { for f in test/runs/*.st; do [ -s "$f" ] && [ ! -s "${f%.st}.done" ] && return 0; done; return 1; }
wait_for 120 midway || no "no unfinished run wrote a checkpoint in 120 s"
par=$(pgrep -P "$sid" -x parallel || pgrep -P "$sid" | head -1)
[ -n "$par" ] && kill -TERM "$par"
wait "$sid"
# the wrappers and training processes end after parallel: wait for every one
ended() { ! ps -o pid= -s "$sid" >/dev/null; }
wait_for 60 ended || no "processes of the sweep still run 60 s after parallel was stopped"
sid=""
has 'test/runs/*.lock' && no "lock files left after the stopped sweep's processes ended: $(ls test/runs/*.lock)"
done1=$(n_done test)
echo "parallel stopped with SIGTERM: $done1 of 8 runs done"
[ "$done1" -lt 8 ] || no "parallel was stopped after every run had finished: nothing was interrupted"
S status test 2>status.err
grep -q "$done1 done, 0 running" status.err || { no "status after the stop"; cat status.err; }
S collect test >/dev/null 2>partial.err
grep -q "$((8 - done1)) runs not finished" partial.err || { no "collect on a partial sweep does not say what is missing"; cat partial.err; }

# ---- the sweep SIGKILLed mid-run, but its training processes go on, orphaned -------------
setsid "$sweep" run test -j 2 --bin "$bin" >run2.out 2>&1 &
sid=$!
before=$(n_done test)
wait_for 120 more_done || no "the second run finished nothing in 120 s"
# every process of the sweep but its training processes (those holding a
# lock): as a SIGKILLed batch shell leaves its children running. They are
# paused (SIGSTOP) right after, so that they still run when the next sweep
# comes, whatever the machine's speed (not before: a stopped process whose
# process group loses its parent gets SIGHUP).
training() { orphans=$(for f in test/runs/*.tsv.lock; do sed -n 's/^pid=\([0-9]*\).*/\1/p' "$f" 2>/dev/null; done |
                       while read -r p; do kill -0 "$p" 2>/dev/null && echo "$p"; done); [ -n "$orphans" ]; }
wait_for 60 training || no "no training process to leave running"
parents=$(for p in $orphans; do ps -o ppid= -p "$p"; done)
kill -KILL $(ps -o pid=,comm= -s "$sid" | awk '$2 != "attn_scale" { print $1 }') 2>/dev/null
reparented() { for p in $orphans; do ps -o ppid= -p "$p" | grep -qxF -f <(printf '%s\n' $parents) && return 1; done; return 0; }
wait_for 30 reparented || no "the training processes kept their killed parents"
# Pause them only once every other process of the session has exited: a
# process group that turns orphaned while one of its members is stopped gets
# SIGHUP (the training process would then save and leave, and the next sweep
# would meet no lock). The kernel decides that when each process exits, so
# none may still be exiting when the orphans stop.
wait "$sid" 2>/dev/null
others() { ps -o pid=,stat=,comm= -s "$sid" | awk '$3 != "attn_scale" && $2 !~ /^Z/' | grep -q .; }
alone() { ! others; }
wait_for 30 alone || no "processes of the killed sweep still running: $(ps -o pid=,comm= -s "$sid" | tr '\n' ' ')"
orphans=$(for p in $orphans; do kill -STOP "$p" 2>/dev/null && echo "$p"; done)
sid=""
[ -n "$orphans" ] || echo "note: the orphaned runs ended before they could be paused (a loaded machine): the wait for an orphan's lock is not exercised this time"
echo "sweep SIGKILLed: $(n_done test) of 8 runs done, training processes left (paused): $(echo $orphans)"

# ---- run again: waits for the orphans' locks, resumes the rest ---------------------------------
# The orphans stay paused until a run of the new sweep has met one's lock.
S run test -j 2 --bin "$bin" 2>run3.err &
run3=$!
locked() { grep -q 'is in use by' test/runs/*.err; }
# A paused orphan can still end: the kernel sends SIGHUP and SIGCONT to a
# process group that turns orphaned with a stopped member, and it decides
# that as the killed sweep's processes are reaped (one CI run met it once).
alive() { for p in $orphans; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
locked_or_gone() { locked || ! alive; }
if [ -n "$orphans" ]; then
    wait_for 120 locked_or_gone || no "no run of the new sweep met an orphan's lock"
    locked || echo "note: the paused orphans ended before a run met their lock (SIGHUP of an orphaned process group): the wait for a lock is not exercised this time"
    kill -CONT $orphans 2>/dev/null
fi
wait "$run3" || { no "the resumed sweep failed"; tail -5 run3.err; }
[ "$(n_done test)" -eq 8 ] || no "after run again: $(n_done test) of 8 done"
echo "runs that waited for an orphan's lock, then resumed: $(grep -l 'is in use by' test/runs/*.err | wc -l)"
S collect test >/dev/null 2>&1 || no "collect after the interruptions failed"
cmp -s ref/summary.tsv test/summary.tsv || { no "summary.tsv differs from the uninterrupted sweep's"; diff ref/summary.tsv test/summary.tsv | head -5; }
cmp -s ref/aggregate.tsv test/aggregate.tsv || no "aggregate.tsv differs"
for f in ref/runs/*.tsv; do
    g=test/runs/${f##*/}
    [ "$(grep -v '^# \(log\|save\|resume\)=' "$f")" = "$(grep -v '^# \(log\|save\|resume\)=' "$g")" ] || no "${f##*/}: the log differs from the uninterrupted run's"
done
resumed=$(grep -l 'resuming' test/runs/*.err | wc -l)
echo "runs resumed from a checkpoint: $resumed"
[ "$resumed" -ge 1 ] || no "no run was resumed from a checkpoint: the interruptions tested nothing"
if command -v gnuplot >/dev/null; then
    for p in loss entropy10; do [ -s "test/$p.png" ] || no "collect wrote no $p.png"; done
fi
[ "$(awk -F'\t' 'NR > 1 && $4 == "none" && $NF != "-"' test/summary.tsv | wc -l)" -eq 4 ] || no "summary.tsv: not 4 verdicts for the 4 none runs"
S status test 2>status.err
grep -q "8 done, 0 running, 0 queued, 0 interrupted (started, will resume), 0 failed, 0 not started" status.err || { no "final status"; cat status.err; }
ls test/runs/*.lock >/dev/null 2>&1 && no "lock files left: $(ls test/runs/*.lock)"

# ---- a run that fails: status names it with its last message; collect goes on ----------
S plan bad --grid "seed=1,2" $SIZE --set debug-nan=30 --set steps=60 --bin "$bin" 2>/dev/null
S plan bad --grid "seed=3" $SIZE --set steps=60 --bin "$bin" 2>/dev/null
S run bad -j 2 --bin "$bin" 2>bad.err && no "a sweep with failing runs exited 0"
grep -q "1 done, 0 running, 0 queued, 0 interrupted (started, will resume), 2 failed" bad.err || { no "status with failed runs"; cat bad.err; }
grep -q "failed: seed-1 exit 3 attn_scale: stopping (--on-nan stop)" bad.err || { no "status does not name the failed run and its message"; cat bad.err; }
S collect bad >/dev/null 2>bad_collect.err || no "collect with failed runs failed"
grep -q "2 runs not finished" bad_collect.err || no "collect does not name the failed runs as missing"

# ---- a --set value with commas; a setting that varies holds a '/' (scripts/science.sh maps) ----
S plan maps --grid "scale=none,sqrt" $SIZE --set steps=20 --set dump-attn=0,10,20 --set scale=none:dump-attn-file="$tmp/none.st" \
    --set scale=sqrt:dump-attn-file="$tmp/sqrt.st" --bin "$bin" 2>maps.err || { no "plan with --set dump-attn=0,10,20"; cat maps.err; }
S run maps -j 2 --bin "$bin" 2>>maps.err || { no "the maps sweep failed"; tail -3 maps.err; }
[ -s none.st ] && [ -s sqrt.st ] || no "the maps sweep wrote no maps"
S collect maps >/dev/null 2>>maps.err || { no "collect with a varying setting holding a '/' failed"; tail -3 maps.err; }
if command -v gnuplot >/dev/null; then [ -s maps/loss.png ] || no "collect drew no loss.png for the maps sweep"; fi

[ "$fails" -eq 0 ] && echo "sweep_local: all checks passed"
exit "$fails"
