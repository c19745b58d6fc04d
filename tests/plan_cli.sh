#!/bin/sh
# The product plan (ops/tg_gemm_plan.h) through attn_scale: the estimate is
# deterministic and writes nothing; a measured plan is kept in TG_PLAN_DIR,
# reused, and gives byte-identical logs; damaged, foreign and other-version
# plan files are refused with a message and measured again or estimated;
# a resume under another plan says so at its step; runs measuring at once
# leave one whole file; --profile prints the per-op table.
#   plan_cli.sh path/to/attn_scale
bin=$1
. "$(dirname "$0")/cli_util.sh"
unset TG_PLAN TG_PLAN_DIR XDG_CACHE_HOME
export HOME="$tmp/home"
mkdir -p "$HOME"
common="--steps 20 --warmup 2 --log-every 5 --d-head 32 --batch 8"
plan_of() { sed -n 's/^# gemm_plan=//p' "$1"; }
same() { [ "$(grep -v '^# log=' "$1")" = "$(grep -v '^# log=' "$2")" ]; }   # logs but for their own name

# estimate: named, deterministic, and no file anywhere
TG_PLAN=estimate run 0 e1 $common --log e1.tsv
TG_PLAN=estimate run 0 e2 $common --log e2.tsv
same e1.tsv e2.tsv || no "two estimated runs differ"
plan_of e1.tsv | grep -qx '[0-9a-f]\{8\}' || no "the log names no plan: '$(plan_of e1.tsv)'"
[ -z "$(ls -A "$HOME")" ] || no "the estimate wrote into HOME: $(ls -A "$HOME")"

# measure (the default): the file in HOME's cache, then in TG_PLAN_DIR, reused
run 0 h1 $common --log h1.tsv
ls "$HOME"/.cache/tapegrad/gemm-plan-*.tsv >/dev/null 2>&1 || no "no plan file under HOME/.cache/tapegrad"
export TG_PLAN_DIR="$tmp/cache"
run 0 m1 $common --log m1.tsv --profile
f=$(ls "$TG_PLAN_DIR"/gemm-plan-*.tsv 2>/dev/null)
[ -n "$f" ] || no "no plan file in TG_PLAN_DIR"
grep -q ' [1-9][0-9]* measured now' m1.err || no "m1 measured nothing: $(grep 'plan ' m1.err)"
run 0 m2 $common --log m2.tsv --profile
grep -q ' 0 measured now, 0 estimated' m2.err || no "m2 did not reuse the file: $(grep 'plan ' m2.err)"
same m1.tsv m2.tsv || no "the same plan gave different logs"
[ "$(plan_of m1.tsv)" = "$(plan_of m2.tsv)" ] || no "plan names differ"
grep -q '^tg_matmul ' m1.err || no "--profile printed no tg_matmul row"
grep -q '^# profile: 19 steps' m1.err || no "--profile did not count 19 steps: $(grep '^# profile' m1.err)"
good=$(cat "$f")

# damaged, foreign, other versions: refused with a message, measured again, file replaced
refused() {   # refused NAME MESSAGE: the file was damaged as NAME says
    run 0 "$1" $common --log "$1.tsv"
    grep -q -- "$2" "$1.err" || { no "$1: message lacks '$2'"; sed 's/^/  | /' "$1.err" | head -3; }
    grep -q 'measuring again' "$1.err" || no "$1: not measured again"
    sed -n 3p "$f" | grep -q '^ta	M	N	K' || no "$1: the file was not replaced by a good one"
    printf '%s\n' "$good" > "$f"
}
head -c 200 "$f" > cut && mv cut "$f"
refused cut "cut short"
printf '0\t64\tx\n' >> "$f"
refused garbage "line $(wc -l < "$f")"
sed -i '2s/cpu=[^;]*family/cpu=Some Other CPU family/' "$f"
refused other_cpu "made on another machine"
sed -i '2s/libxsmm=[0-9.]*/libxsmm=1.16/' "$f"
refused other_libxsmm "made on another machine or with other libraries"
sed -i '1s/.*/# tapegrad gemm plan 9/' "$f"
refused other_format "not a tapegrad plan of this format"
: > "$f"
refused empty "empty"

# a given file: read-only, estimated where refused or missing
printf '%s\n' "$good" | sed '2s/cpu=[^;]*family/cpu=Some Other CPU family/' > foreign-plan.tsv
TG_PLAN="$tmp/foreign-plan.tsv" run 0 foreign $common --log foreign.tsv
grep -q 'made on another machine.*estimating every product instead' foreign.err || no "foreign plan file not refused"
[ "$(plan_of foreign.tsv)" = "$(plan_of e1.tsv)" ] || no "a refused plan file was not the estimate"
TG_PLAN="$tmp/nope.tsv" run 0 nope $common --log nope.tsv
grep -q 'nope.tsv: no such file' nope.err || no "a missing plan file was not named"
printf '%s\n' "$good" | sed 's/libxsmm	/XX	/; s/openblas	/libxsmm	/; s/XX	/openblas	/' > flipped.tsv
cp flipped.tsv flipped.orig
TG_PLAN="$tmp/flipped.tsv" run 0 flip $common --log flip.tsv
[ "$(plan_of flip.tsv)" != "$(plan_of m1.tsv)" ] || no "a flipped plan has the same name"
cmp -s flipped.tsv flipped.orig || no "a given plan file was written to"

# a plan folder that cannot be made: measured for this process only, said once
: > notadir
TG_PLAN_DIR="$tmp/notadir/sub" run 0 nokeep $common --log nokeep.tsv
[ "$(grep -c 'the product plan is not kept (cannot make the folder' nokeep.err)" -eq 1 ] ||
    no "an unusable plan folder was not said once: $(cat nokeep.err)"

# resume: the same plan byte-identical, another plan said at the step
mkdir a b c
(cd a && TG_PLAN=estimate "$bin" $common --log r.tsv --save r.st >out 2>err) || no "straight run failed"
(cd b && TG_PLAN=estimate "$bin" $common --log r.tsv --save r.st --stop-at 10 >out 2>err &&
    TG_PLAN=estimate "$bin" $common --log r.tsv --save r.st --resume r.st >out 2>err) || no "stop and resume failed"
[ "$(grep -v '^# resume=' a/r.tsv)" = "$(grep -v '^# resume=' b/r.tsv)" ] ||
    no "resume under the same plan is not byte-identical (but for its # resume= line)"
(cd c && TG_PLAN=estimate "$bin" $common --log r.tsv --save r.st --stop-at 10 >out 2>err &&
    TG_PLAN="$tmp/flipped.tsv" "$bin" $common --log r.tsv --save r.st --resume r.st >out 2>err) || no "resume under another plan failed"
grep -qx "# gemm_plan changed at step 10: $(plan_of a/r.tsv) -> $(plan_of flip.tsv)" c/r.tsv ||
    no "the log does not say the plan changed at step 10: $(grep gemm_plan c/r.tsv)"
grep -q 'product plan .* from step 10 is not bit-identical' c/err || no "no note on stderr about the plan change"
[ "$(rows c/r.tsv | wc -l)" -eq "$(rows a/r.tsv | wc -l)" ] || no "the resumed log lost or repeated rows"

# runs measuring at once: one whole file with both runs' shapes, no temporary left
export TG_PLAN_DIR="$tmp/race"
"$bin" $common --log x1.tsv >x1.out 2>x1.err & p1=$!
"$bin" $common --d-head 16 --log x2.tsv >x2.out 2>x2.err & p2=$!
wait $p1 || no "racing run 1 failed"
wait $p2 || no "racing run 2 failed"
g=$(ls "$TG_PLAN_DIR"/gemm-plan-*.tsv)
TG_PLAN="$g" run 0 after1 $common --log after1.tsv
TG_PLAN="$g" run 0 after2 $common --d-head 16 --log after2.tsv
grep -q 'plan file' after1.err after2.err && no "the raced plan file is refused: $(cat after1.err after2.err)"
[ "$(plan_of after1.tsv)" = "$(plan_of x1.tsv)" ] || no "run 1's decisions are not in the raced file"
[ "$(plan_of after2.tsv)" = "$(plan_of x2.tsv)" ] || no "run 2's decisions are not in the raced file"
ls -A "$TG_PLAN_DIR" | grep -v '^gemm-plan-[0-9a-f]*\.tsv\(\.lock\)\?$' && no "files left in the plan folder"

[ $fails -eq 0 ] && echo "plan_cli: all passed"
exit $fails
