#!/bin/bash
# Same runs, two builds: runs attn_scale's kinds of run (plain, NaN skipped, NaN stop, --stop-at then
# --resume, attention-map dumps of one and of two layers, the code task with a validation loss and
# --sample, every scale mode, every attention feature at once, a refused run) with two binaries, each
# in its own folder, and compares every file they write byte for byte (logs, checkpoints, dumps) and
# their stdout and stderr (but the seconds of the summary line). With a build's tests/ folder as the
# third argument, the kernels from outside too: the example's plugins (trained, resumed, dumped), a
# catalogue kernel whose weights leak (exit 5), and the exec protocol's Python kernel. For a refactor
# that must not change a run: a build of the last release against this one.
#   scripts/same_runs.sh OLD/attn_scale NEW/attn_scale [OLD_BUILD/tests]
# Exit 0 when every run is the same, 1 when one differs (the diff is shown).
set -u
[ $# -ge 2 ] && [ -x "$1" ] && [ -x "$2" ] ||
    { echo "usage: scripts/same_runs.sh OLD_ATTN_SCALE NEW_ATTN_SCALE [OLD_BUILD/tests]" >&2; exit 2; }
old=$(realpath "$1") new=$(realpath "$2") top=$(cd "$(dirname "$0")/.." && pwd)
plug=${3:+$(realpath "$3")}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$top"/ops/*.c >"$work/corpus.c"
S="--batch 4 --seq-len 8 --vocab 16 --alphabet 4 --d-model 16 --heads 2 --d-head 8 --log-every 5 --warmup 10"
# each run: attn_scale's arguments after $S as the shell reads them (quotes kept); ';' separates the
# invocations of one run (a stop and its resume)
runs=(
    "--steps 60 --log a.tsv"
    "--steps 60 --log a.tsv --on-nan skip --debug-nan 7"
    "--steps 60 --log a.tsv --debug-nan 12 --save c.st"
    "--steps 60 --log a.tsv --save c.st --stop-at 30;--steps 60 --log a.tsv --save c.st --resume c.st"
    "--steps 40 --log a.tsv --attn fused --dump-attn 0,20,40 --dump-attn-file m.st"
    "--task code --data ../corpus.c --steps 20 --log a.tsv --eval-every 10"
    "--steps 30 --log a.tsv --on-nan skip --debug-nan 0 --save c.st"
    "--steps 30 --log a.tsv --layers 2 --attn fused --scale qknorm --dump-attn 0,30 --dump-attn-file m.st"
    "--steps 30 --log a.tsv --layers 2 --dump-attn 15 --dump-attn-file m.st --scale mult --scale-mult 4"
    "--steps 30 --log a.tsv --scale learned --learned-init none --learned-param log --scale-lr 0.01"
    "--steps 30 --log a.tsv --scale none --optim sgd --lr 0.1"
    "--steps 30 --log a.tsv --scale dk --init gpt2 --weight-decay 0.1"
    "--steps 30 --log a.tsv --heads 4 --kv-heads 2 --window 4 --bias table --alibi --softcap 20 --sinks --attn-dropout 0.1 --save c.st --stop-at 15;--steps 30 --log a.tsv --heads 4 --kv-heads 2 --window 4 --bias table --alibi --softcap 20 --sinks --attn-dropout 0.1 --save c.st --resume c.st"
    "--steps 30 --log a.tsv --attn fused --heads 4 --kv-heads 1 --window 3 --sinks --dump-attn 30 --dump-attn-file m.st"
    "--task code --data ../corpus.c --steps 20 --save c.st;--task code --data ../corpus.c --steps 20 --resume c.st --sample 'int ' --sample-len 40"
    "--steps 10 --log a.tsv --attn nosuch"
    "--steps 10 --window 4 --check"
)
if [ -n "$plug" ]; then
    ek="python3 $top/tests/exec_protocol_test.py --serve"
    runs+=(
        "--steps 20 --log a.tsv --attn plugin:$plug/plugin_my_attention.so --dump-attn 0,20 --dump-attn-file m.st"
        "--steps 20 --log a.tsv --attn plugin:$plug/plugin_my_attention_noscale.so --save c.st --stop-at 10;--steps 20 --log a.tsv --attn plugin:$plug/plugin_my_attention_noscale.so --save c.st --resume c.st"
        "--steps 20 --log a.tsv --attn plugin:$plug/plugin_my_attention.so --window 3 --heads 4 --kv-heads 2"
        "--steps 60 --log a.tsv --attn plugin:$plug/plugin_catalogue.so:leaks_late"
        "--steps 10 --log a.tsv --attn plugin:$plug/plugin_catalogue.so:noncausal --allow-noncausal"
        "--steps 10 --log a.tsv --attn plugin:$plug/plugin_my_attention.so --sinks"
        "--steps 10 --log a.tsv --attn plugin:$plug/plugin_catalogue.so:textbook_only"
        "--steps 60 --log a.tsv --save c.st --save-every 20 --attn plugin:$plug/plugin_catalogue.so:crashes_late"
        "--steps 10 --log a.tsv --attn 'exec:$ek' --save c.st --stop-at 5;--steps 10 --log a.tsv --attn 'exec:$ek' --save c.st --resume c.st"
        "--steps 10 --log a.tsv --attn 'exec:$ek --noscale' --heads 4 --kv-heads 2 --window 4 --dump-attn 10 --dump-attn-file m.st"
        "--steps 10 --log a.tsv --attn 'exec:$ek --features gqa' --window 4"
    )
fi
bad=0
for i in "${!runs[@]}"; do
    for v in old new; do
        d=$work/$v-$i
        mkdir "$d"
        bin=$old
        [ $v = new ] && bin=$new
        IFS=';' read -ra parts <<<"${runs[$i]}"
        for p in "${parts[@]}"; do
            eval "args=($p)"
            # shellcheck disable=SC2086,SC2154
            (cd "$d" && TG_PLAN=estimate "$bin" $S "${args[@]}" >>stdout 2>>stderr; echo "exit $?" >>stdout) 2>/dev/null
        done
        sed -i 's/ seconds=[0-9.]*//' "$d/stdout"
        for l in "$d"/*.lock; do [ -e "$l" ] && sed -i 's/^pid=[0-9]*/pid=PID/' "$l"; done   # a crash's locks
    done
    if diff -r "$work/old-$i" "$work/new-$i" >"$work/diff"; then
        echo "same: ${runs[$i]}"
    else
        echo "DIFFERENT: ${runs[$i]}"
        head -20 "$work/diff"
        bad=1
    fi
done
exit $bad
