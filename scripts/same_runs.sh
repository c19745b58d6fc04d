#!/bin/bash
# Same runs, two builds: runs attn_scale's kinds of run (plain, NaN skipped,
# NaN stop, --stop-at then --resume, attention-map dumps, the code task with a
# validation loss) with two binaries, each in its own folder, and compares
# every file they write byte for byte (logs, checkpoints, dumps) and their
# stdout and stderr (but the seconds of the summary line). For a refactor that
# must not change a run: a build of the last release against this one.
#   scripts/same_runs.sh OLD/attn_scale NEW/attn_scale
# Exit 0 when every run is the same, 1 when one differs (the diff is shown).
set -u
[ $# -eq 2 ] && [ -x "$1" ] && [ -x "$2" ] || { echo "usage: scripts/same_runs.sh OLD_ATTN_SCALE NEW_ATTN_SCALE" >&2; exit 2; }
old=$(realpath "$1") new=$(realpath "$2") top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$top"/ops/*.c >"$work/corpus.c"
S="--batch 4 --seq-len 8 --vocab 16 --alphabet 4 --d-model 16 --heads 2 --d-head 8 --log-every 5 --warmup 10"
runs=(
    "--steps 60 --log a.tsv"
    "--steps 60 --log a.tsv --on-nan skip --debug-nan 7"
    "--steps 60 --log a.tsv --debug-nan 12 --save c.st"
    "--steps 60 --log a.tsv --save c.st --stop-at 30;--steps 60 --log a.tsv --save c.st --resume c.st"
    "--steps 40 --log a.tsv --attn fused --dump-attn 0,20,40 --dump-attn-file m.st"
    "--task code --data ../corpus.c --steps 20 --log a.tsv --eval-every 10"
    "--steps 30 --log a.tsv --on-nan skip --debug-nan 0 --save c.st"
)
bad=0
for i in "${!runs[@]}"; do
    for v in old new; do
        d=$work/$v-$i
        mkdir "$d"
        bin=$old
        [ $v = new ] && bin=$new
        IFS=';' read -ra parts <<<"${runs[$i]}"
        for p in "${parts[@]}"; do
            # shellcheck disable=SC2086
            (cd "$d" && TG_PLAN=estimate "$bin" $S $p >>stdout 2>>stderr; echo "exit $?" >>stdout)
        done
        sed -i 's/ seconds=[0-9.]*//' "$d/stdout"
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
