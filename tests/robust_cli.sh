#!/bin/sh
# attn_scale end to end, at a tiny size: runs that survive.
#   tests/robust_cli.sh ATTN_SCALE
# - determinism: same flags, seed and thread count give byte-identical logs
#   (1 thread and 2 threads, each twice);
# - exact resume: --stop-at then --resume, and --steps 60 --save then
#   --steps 120 --resume (a flat schedule), give the straight run's rows and
#   summary; SIGTERM / SIGINT / SIGHUP / SIGKILL mid-run, then --resume, too;
# - failure handling: a NaN gradient stops with exit 3 naming the step and the
#   tensor, keeps the last checkpoint and flushes the log; --on-nan skip goes on;
# - hostile input: bad flags, paths and checkpoints exit 2 with one message,
#   before training, and leave existing files as they were;
# - one writer: a second process on a running run's log or checkpoint is
#   refused (exit 4, the holder's pid); a fresh run does not replace another
#   run's files without --overwrite; FIFOs, sockets, devices and folders are
#   refused as --log/--save.
set -u
bin=$1
. "$(dirname "$0")/cli_util.sh"
T="--batch 4 --seq-len 8 --vocab 16 --alphabet 4 --d-model 16 --heads 2 --d-head 8 --log-every 5 --warmup 10"

# ---- determinism ------------------------------------------------------------
for th in 1 2; do
    for k in a b; do
        mkdir -p "det$th$k"
        (cd "det$th$k" && "$bin" $T --steps 80 --threads $th --log run.tsv >out 2>err) || no "determinism run $th$k failed"
    done
    cmp -s "det${th}a/run.tsv" "det${th}b/run.tsv" || no "--threads $th: two runs' logs differ"
    [ "$(summary "det${th}a/out")" = "$(summary "det${th}b/out")" ] || no "--threads $th: summaries differ"
done
if cmp -s "det1a/run.tsv" "det2a/run.tsv"; then echo "note: --threads 1 and 2 gave the same log here"
else echo "note: --threads 1 and 2 differ (expected: other float summation orders)"; fi

# ---- exact resume -------------------------------------------------------------
run 0 straight $T --steps 120 --log straight.tsv
run 0 stop $T --steps 120 --stop-at 55 --save ck.st --log resumed.tsv
[ -s resumed.out ] && no "--stop-at printed a summary line"
grep -q 'stopped before step 55' stop.err || no "--stop-at: no message"
run 0 resume $T --steps 120 --resume ck.st --save ck.st --log resumed.tsv
[ "$(rows straight.tsv)" = "$(rows resumed.tsv)" ] || no "stop-at 55 + resume: rows differ from the straight run"
[ "$(summary straight.out)" = "$(summary resume.out)" ] || no "stop-at 55 + resume: summary differs"
[ "$(grep -c '^step' resumed.tsv)" -eq 1 ] || no "resumed log has the column line twice"
# the issue's form: --steps 60 --save, then --steps 120 --resume (flat schedule)
F="$T --warmup 0 --lr 0.003 --lr-min 0.003"
run 0 flat_straight $F --steps 120 --log flat_straight.tsv
run 0 flat_a $F --steps 60 --save flat.st --log flat.tsv
run 0 flat_b $F --steps 120 --resume flat.st --log flat.tsv
[ "$(rows flat_straight.tsv)" = "$(rows flat.tsv)" ] || no "--steps 60 --save + --steps 120 --resume: rows differ"
[ "$(summary flat_straight.out)" = "$(summary flat_b.out)" ] || no "--steps 60/120 resume: summary differs"
grep -q 'changed: --steps 60 -> 120' flat_b.err || no "resume does not say --steps changed"
# Adafactor (its factored moments and step count in the checkpoint) and the folded W_q (whose
# start the qk_mult columns divide by: the seed's, not the checkpoint's), --stop-at then --resume
A="$T --optim adafactor --lr 0.01 --scale none --qinit fold"
run 0 af_straight $A --steps 120 --log af_straight.tsv
run 0 af_stop $A --steps 120 --stop-at 55 --save af.st --log af.tsv
run 0 af_resume $A --steps 120 --resume af.st --save af.st --log af.tsv
[ "$(rows af_straight.tsv)" = "$(rows af.tsv)" ] || no "adafactor + qinit fold: stop-at 55 + resume: rows differ"
[ "$(summary af_straight.out)" = "$(summary af_resume.out)" ] || no "adafactor + qinit fold: summary differs"
grep -q '^# optim=adafactor$' af.tsv && grep -q '^# qinit=fold$' af.tsv || no "adafactor + fold: not in the log's header"
run 2 af_other $T --optim adam --lr 0.01 --scale none --qinit fold --steps 120 --resume af.st
grep -q "optim" af_other.err || no "an adafactor checkpoint resumed under adam: $(cat af_other.err)"
run 2 af_nofold $T --optim adafactor --lr 0.01 --scale none --steps 120 --resume af.st
grep -q "qinit" af_nofold.err || no "a folded run resumed without the fold: $(cat af_nofold.err)"
# resuming a finished run's checkpoint again just re-evaluates the last step
run 0 again $T --steps 120 --resume ck.st
[ "$(summary straight.out)" = "$(summary again.out)" ] || no "resuming at the last step: summary differs"

# ---- signals: the checkpoint and the log survive; resume is exact -------------
# The signal lands wherever it lands; the test then compares the resumed run
# with a straight run up to 100 steps past the checkpoint.
long="$T --steps 200000 --warmup 100"
for sig in TERM INT HUP KILL; do
    "$bin" $long --save "$sig.st" --save-every 50 --log "$sig.tsv" >"$sig.out" 2>"$sig.err" &
    pid=$!
    i=0
    while [ ! -s "$sig.st" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done   # a checkpoint exists
    sleep 0.2
    kill -s "$sig" "$pid"
    wait "$pid"
    rc=$?
    case $sig in TERM) want=143 ;; INT) want=130 ;; HUP) want=129 ;; KILL) want=137 ;; esac
    [ "$rc" -eq "$want" ] || { no "SIG$sig: exit $rc, want $want"; continue; }
    [ "$(tail -c 1 "$sig.tsv" | od -An -c | tr -d ' ')" = '\n' ] || no "SIG$sig: the log's last line is cut"
    # SIGKILL during a checkpoint write can leave that write's temporary file
    # (.KILL.st.XXXXXX): harmless, the previous checkpoint is whole
    [ "$sig" = KILL ] && rm -f .KILL.st.*
    if [ "$sig" != KILL ]; then
        tail -1 "$sig.tsv" | grep -q "^# interrupted by SIG$sig before step" || no "SIG$sig: no note in the log"
    fi
    at=$(grep -ao '"step":"[0-9]*"' "$sig.st" | tr -dc 0-9)   # the checkpoint's step, from its JSON header
    [ -n "$at" ] || { no "SIG$sig: no step in the checkpoint"; continue; }
    stop=$((at + 100))
    run 0 "res$sig" $long --resume "$sig.st" --save "$sig.st" --stop-at $stop --log "$sig.tsv"
    run 0 "ref$sig" $long --save "ref$sig.st" --stop-at $stop --log "ref$sig.tsv"
    if [ "$(rows "ref$sig.tsv")" = "$(rows "$sig.tsv")" ]; then echo "SIG$sig: checkpoint at step $at, resumed to $stop: rows identical"
    else no "SIG$sig at step $at: resumed rows differ from a straight run"; fi
done

# ---- non-finite values --------------------------------------------------------
run 0 pre $T --steps 40 --log nan.tsv
cp nan.tsv nan_before.tsv
# the same run again, now with a NaN: it replaces the clean run's log on purpose
run 3 nan $T --steps 40 --debug-nan 23 --save nan.st --save-every 10 --log nan.tsv --overwrite
grep -q 'step 23: non-finite gradient norm (nan): gradient of parameter tok_emb \[16,16\] is nan' nan.err ||
    no "NaN: the message does not name the step and the tensor: $(head -1 nan.err)"
tail -1 nan.tsv | grep -q '^# stopped at step 23: non-finite' || no "NaN: no note at the end of the log"
[ "$(rows nan.tsv | tail -1 | cut -f1)" = 20 ] || no "NaN: the last row should be step 20"
[ "$(rows nan.tsv | head -6)" = "$(rows nan_before.tsv | head -6)" ] || no "NaN: rows before step 23 differ"
run 0 nan_resume $T --steps 40 --resume nan.st 2>/dev/null
grep -q 'at step 20' nan_resume.err || no "NaN: the last good checkpoint (step 20) was not kept"
run 0 skip $T --steps 40 --debug-nan 23 --on-nan skip --log skip.tsv
grep -q '1 steps skipped' skip.err || no "--on-nan skip: no count of skipped steps"
grep -q '^25	' skip.tsv || no "--on-nan skip: the run did not go on"

# ---- hostile input: exit 2, one message, nothing written ------------------------
guard straight.tsv ck.st
bad unknown "unknown flag '--nope'" --nope --log keep.tsv
bad steps0 "steps: 0 is out of range" --steps 0 --log keep.tsv
bad batchneg "batch: -1 is out of range" --batch -1 --log keep.tsv
bad dmodel0 "d-model: 0 is out of range" --d-model 0 --log keep.tsv
bad seqlen "seq-len: 5000 is out of range" --seq-len 5000 --log keep.tsv
bad recall "seq-len 15 must be even" --task recall --seq-len 15 --log keep.tsv
bad alphabet "alphabet 8 needs" --vocab 8 --log keep.tsv
bad lr "lr: 'nan' is not a finite number" --lr nan --log keep.tsv
bad huge "at most 2^31-1" --batch 65536 --seq-len 4096 --vocab 4096 --log keep.tsv
bad memory "GiB" --layers 64 --d-model 8192 --d-head 4096 --log keep.tsv
bad logdir "cannot create a file in its folder" $T --log no/such/dir/x.tsv
bad logfolder "not a regular file" $T --log .
bad savedir "cannot create a file in its folder" $T --save no/such/x.st --log keep.tsv
bad saveevery "--save-every needs --save" $T --save-every 5 --log keep.tsv
bad stopat "--stop-at 200 is not before --steps 120" $T --steps 120 --stop-at 200 --save x.st
bad same "is also the checkpoint file" $T --log keep.st --save keep.st
bad missing "cannot open" $T --resume no.st --log keep.tsv
bad notfile "not a regular file" $T --resume . --log keep.tsv
bad differs "setting differs: --d-model is 16 in the checkpoint, 32 in this run" $T --d-model 32 --resume keep.st --save keep.st --log keep.tsv
bad beyond "at step 120, beyond --steps 100" $T --steps 100 --resume keep.st --save keep.st --log keep.tsv
cp ck.st damaged.st
printf 'X' | dd of=damaged.st bs=1 seek=3000 conv=notrunc 2>/dev/null
bad damaged "checksum mismatch" $T --steps 150 --resume damaged.st --save keep.st --log keep.tsv
head -c 2000 ck.st >cut.st
bad truncated "does not fit\|go past" $T --steps 150 --resume cut.st --save keep.st --log keep.tsv
# a log of another run (another seed) is not appended to
run 0 seed2 $T --steps 120 --seed 2 --log other.tsv
cp other.tsv other_keep.tsv
bad otherlog "its header says seed=2, this run has 1" $T --steps 150 --resume keep.st --log other.tsv
cmp -s other.tsv other_keep.tsv || no "a refused resume changed another run's log"

# ---- one writer per run file ----------------------------------------------------
# A run holds FILE.lock for its log and its checkpoint: a second process naming
# either is refused at once (exit 4, the holder's pid named), whatever it asks,
# and the first run goes on unharmed: stopped and resumed, its rows are a
# straight run's.
"$bin" $long --save held.st --save-every 50 --log held.tsv >held.out 2>held.err &
holder=$!
i=0
while [ ! -s held.st ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
[ -s held.st ] || no "lock: the first run wrote no checkpoint in 30 s"
for args in "--log held.tsv --overwrite" "--log ./held.tsv --overwrite" "--save held.st --overwrite --log x1.tsv" \
            "--resume held.st --save held.st" "--resume held.st --log held.tsv"; do
    run 4 second $long $args
    grep -q "is in use by process $holder .*held\.\(st\|tsv\)\.lock" second.err ||
        { no "lock: '$args' not refused with the holder's pid"; sed 's/^/  | /' second.err | head -3; }
done
[ -e x1.tsv ] && no "lock: a refused run created its log"
kill -s TERM "$holder"
wait "$holder"
[ $? -eq 143 ] || no "lock: the first run did not end as SIGTERM asked"
[ "$(grep -c '^# tapegrad' held.tsv)" -eq 1 ] || no "lock: the first run's log got a second header"
at=$(grep -ao '"step":"[0-9]*"' held.st | tr -dc 0-9)
run 0 held_res $long --resume held.st --save held.st --stop-at $((at + 50)) --log held.tsv
run 0 held_ref $long --save held_ref.st --stop-at $((at + 50)) --log held_ref.tsv
[ "$(rows held.tsv)" = "$(rows held_ref.tsv)" ] || no "lock: the first run's rows differ from a straight run's after the refusals"
ls ./*.lock >/dev/null 2>&1 && no "lock files left after every run ended: $(ls ./*.lock | tr '\n' ' ')"

# ---- a fresh run does not replace another run's files ---------------------------
cp straight.tsv mine.tsv
cp ck.st mine.st
bad fresh_log "exists .* belongs to another run; continue that run with --resume" $T --steps 120 --seed 3 --log mine.tsv
cmp -s mine.tsv straight.tsv || no "fresh_log: the other run's log changed"
bad fresh_save "pass --overwrite to replace it on purpose" $T --steps 120 --seed 3 --save mine.st
cmp -s mine.st ck.st || no "fresh_save: the other run's checkpoint changed"
bad other_save "--save names its --resume file" $T --steps 120 --resume ck.st --save mine.st
run 0 replaced $T --steps 120 --seed 3 --log mine.tsv --save mine.st --overwrite
grep -q '^# seed=3$' mine.tsv || no "--overwrite: the log was not replaced"
grep -q '^# overwrite' mine.tsv && no "--overwrite is written into the log's settings"
: >empty.tsv
run 0 empty $T --steps 20 --log empty.tsv   # an empty file is nobody's log

# ---- --log/--save on something that is not a regular file -----------------------
# Nodes made here, in this test's own folder (never /dev): a FIFO, a socket, a
# character device (root only), a folder. Each is refused before anything is
# written, and is still what it was.
mkdir nodes
mkfifo nodes/fifo
kinds="fifo:-p dir:-d"
if python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("nodes/sock")' 2>/dev/null; then kinds="$kinds sock:-S"
else echo "note: no python3: the socket case is not tested"; fi
if mknod nodes/chr c 1 3 2>/dev/null; then kinds="$kinds chr:-c"
else echo "note: not root: the character-device case is not tested"; fi
ln -s fifo nodes/link
kinds="$kinds link:-p"
for kv in $kinds; do
    node=nodes/${kv%%:*}; test=${kv#*:}
    [ "$node" = nodes/dir ] && node=nodes
    for flag in --log --save; do
        other=""; [ $flag = --save ] && other="--log nodes/$flag.tsv"
        run 2 "node_${kv%%:*}$flag" $T --steps 20 $flag "$node" $other
        grep -q -- "$flag $node: not a regular file" "node_${kv%%:*}$flag.err" ||
            { no "$flag on ${kv%%:*}: no 'not a regular file'"; sed 's/^/  | /' "node_${kv%%:*}$flag.err" | head -3; }
        test "$test" "$node" || no "$flag on ${kv%%:*}: the node was replaced"
    done
done
[ -z "$(ls -A nodes | grep -v '^\(fifo\|sock\|chr\|link\)$')" ] || no "refused runs left files among the nodes: $(ls -A nodes)"

ls -a | grep -q '^\.[^.]' && no "temporary files left: $(ls -a | grep '^\.[^.]' | tr '\n' ' ')"

[ "$fails" -eq 0 ] && echo "robust_cli: all checks passed"
exit "$fails"
