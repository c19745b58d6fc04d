#!/usr/bin/env bash
# scripts/sweep with the Slurm engine, on a real single-node Slurm started here
# (scripts/slurm_local.sh; needs root). 8 small runs as one job array, and while
# it runs:
# - one running task is requeued with `scontrol requeue` (Slurm stops it, it
#   checkpoints, Slurm starts it again, it resumes);
# - another's training process is SIGKILLed (its wrapper resumes it in place);
# - a third's batch shell gets SIGUSR1, as `--signal=B:USR1@T` sends it before
#   the time limit (it checkpoints and requeues itself);
# - `sweep run` again while the array is queued submits nothing.
# Then every run finishes, and `collect` gives a summary.tsv byte-identical to
# the same sweep run through the local engine without interruption.
#   tests/sweep_slurm.sh [BUILD_DIR]      (default: build/)
set -u
# products planned by the estimate (ops/tg_gemm_plan.h): the Slurm jobs inherit it (sbatch exports the environment)
export TG_PLAN=estimate
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$top/build}
bin=$build/experiments/attn_scale
sweep=$top/scripts/sweep
[ -x "$bin" ] || { echo "FAIL: $bin is missing (scripts/test.sh builds it)"; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "FAIL: the Slurm test needs root (SlurmUser=root)"; exit 1; }
"$top/scripts/slurm_local.sh" install || exit 1
tmp=$(mktemp -d)
cluster=""
cleanup() {
    [ -n "$cluster" ] && "$top/scripts/slurm_local.sh" down "$cluster"
    rm -rf "$tmp"
}
trap cleanup EXIT
t0=$SECONDS
out=$("$top/scripts/slurm_local.sh" up) || exit 1
eval "$out"
cluster=$SLURM_LOCAL_DIR
echo "cluster up in $((SECONDS - t0)) s"
cd "$tmp" || exit 1
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
wait_for() {   # wait_for SECONDS CMD...: poll until CMD succeeds
    local t=$(( $1 * 5 )); shift
    until "$@"; do [ $t -gt 0 ] || return 1; sleep 0.2; t=$((t - 1)); done
}
S() { "$sweep" "$@"; }

SIZE="--set batch=8 --set seq-len=16 --set vocab=16 --set alphabet=4 --set d-model=32 --set heads=2 --set log-every=5 --set warmup=10 --set steps=4000 --set save-every=25"
GRID="scale=none,sqrt d_head=8,16 seed=1,2"
S plan slurm --grid "$GRID" $SIZE --bin "$bin" 2>/dev/null || { no "plan failed"; exit 1; }
S plan local --grid "$GRID" $SIZE --bin "$bin" 2>/dev/null
cmp -s slurm/manifest.tsv local/manifest.tsv || no "one grid planned twice gave two manifests"

t1=$SECONDS
# --time: an sbatch option the tool passes through
S run slurm --engine slurm --bin "$bin" --time=30 2>submit.err || { no "sbatch failed"; cat submit.err; }
S run slurm --engine slurm --bin "$bin" 2>again.err
grep -q "nothing to submit" again.err || { no "run again while queued: $(cat again.err)"; }
[ "$(wc -l <slurm/slurm/jobs.tsv)" -eq 1 ] || no "run again while queued submitted a second array"
job=$(cut -f1 slurm/slurm/jobs.tsv)
scontrol show job "$job" | grep -q 'TimeLimit=00:30:00' || no "--time=30 did not reach sbatch"
ids=$(cat slurm/slurm/sub-*.ids)

# a running task whose run has a checkpoint (and is not in $1): "task id"
running_with_ckpt() {
    local t id
    for t in $(squeue -h -r -j "$job" -t RUNNING -o %K 2>/dev/null); do
        id=$(sed -n "$((t + 1))p" slurm/slurm/sub-*.ids)
        [[ " $1 " == *" $id "* ]] && continue
        [ -s "slurm/runs/$id.st" ] && [ -s "slurm/runs/$id.tsv.lock" ] && { echo "$t $id"; return 0; }
    done
    return 1
}
pick() { picked=$(running_with_ckpt "$1"); }

# 1. scontrol requeue of a running task
wait_for 300 pick "" || no "no task was running with a checkpoint within 300 s"
set -- $picked; rq_task=$1 rq_id=$2
scontrol requeue "${job}_$rq_task" || no "scontrol requeue ${job}_$rq_task failed"
echo "requeued task $rq_task ($rq_id)"
# 2. SIGKILL to another task's training process
wait_for 300 pick "$rq_id" || no "no second task was running with a checkpoint within 300 s"
set -- $picked; kill_task=$1 kill_id=$2
pid=$(sed -n 's/^pid=\([0-9]*\).*/\1/p' "slurm/runs/$kill_id.tsv.lock")
kill -KILL "$pid" && echo "SIGKILLed the training process of task $kill_task ($kill_id, pid $pid)"
# 3. SIGUSR1 to a third task's batch shell, as --signal=B:USR1 before the time limit
wait_for 300 pick "$rq_id $kill_id" || no "no third task was running with a checkpoint within 300 s"
set -- $picked; usr_task=$1 usr_id=$2
pid=$(sed -n 's/^pid=\([0-9]*\).*/\1/p' "slurm/runs/$usr_id.tsv.lock")
shell=$(awk '{ print $4 }' "/proc/$pid/stat")   # the batch shell: the wrapper, parent of the training process
kill -USR1 "$shell" && echo "SIGUSR1 to the batch shell of task $usr_task ($usr_id, pid $shell)"

all_done() { [ "$(ls slurm/runs/*.done 2>/dev/null | wc -l)" -eq 8 ]; }
wait_for 900 all_done || no "not every run finished within 900 s: $(S status slurm 2>&1)"
echo "slurm sweep with three interruptions: $((SECONDS - t1)) s"
S status slurm 2>status.err
grep -q "8 done, 0 running, 0 queued" status.err || { no "status: $(cat status.err)"; }
S run slurm --engine slurm --bin "$bin" 2>final.err
grep -q "nothing to submit\|every run" final.err || no "run again when done: $(cat final.err)"
[ "$(wc -l <slurm/slurm/jobs.tsv)" -eq 1 ] || no "run again when done submitted something"

grep -q "restart 1" "slurm/runs/$rq_id.err" || no "$rq_id: no second attempt as Slurm restart 1 after scontrol requeue"
grep -q "resuming" "slurm/runs/$rq_id.err" || no "$rq_id: the requeued task did not resume from its checkpoint"
grep -q "retry 1 of" "slurm/runs/$kill_id.err" || no "$kill_id: the SIGKILLed run was not resumed in place"
grep -q "requeued before the time limit" "slurm/runs/$usr_id.err" || no "$usr_id: SIGUSR1 did not requeue the task"
grep -q "restart 1" "slurm/runs/$usr_id.err" || no "$usr_id: no Slurm restart after its own requeue"
for id in $rq_id $kill_id $usr_id; do sed "s/^/  $id | /" "slurm/runs/$id.err"; done

t2=$SECONDS
S run local -j 2 --bin "$bin" 2>/dev/null || no "the local sweep failed"
echo "the same sweep, local engine, uninterrupted: $((SECONDS - t2)) s"
S collect slurm >/dev/null 2>&1 && S collect local >/dev/null 2>&1 || no "collect failed"
cmp -s slurm/summary.tsv local/summary.tsv || { no "summary.tsv: slurm (interrupted) and local differ"; diff slurm/summary.tsv local/summary.tsv | head -6; }
for f in local/runs/*.tsv; do
    g=slurm/runs/${f##*/}
    [ "$(grep -v '^# \(log\|save\|resume\)=' "$f")" = "$(grep -v '^# \(log\|save\|resume\)=' "$g")" ] || no "${f##*/}: the Slurm run's log differs"
done

# the cluster goes down with nothing left running
t3=$SECONDS
"$top/scripts/slurm_local.sh" down "$cluster"
cluster=""
echo "cluster down in $((SECONDS - t3)) s"
for f in /proc/[0-9]*/cmdline; do
    { tr '\0' ' ' <"$f"; } 2>/dev/null | grep -q "$SLURM_LOCAL_DIR\|$tmp/slurm" && no "left running: $(tr '\0' ' ' <"$f")"
done
[ -e "$SLURM_LOCAL_DIR" ] && no "the cluster's folder is left: $SLURM_LOCAL_DIR"

echo "slurm test: $((SECONDS - t0)) s in all"
[ "$fails" -eq 0 ] && echo "sweep_slurm: all checks passed"
exit "$fails"
