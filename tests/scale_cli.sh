#!/bin/sh
# attn_scale's scale flags and attention-map dumps end to end, at a tiny size.
#   tests/scale_cli.sh ATTN_SCALE ATTN_MAPS
# - --scale mult: c = 1 logs exactly what sqrt logs, c = sqrt(d_head) what none
#   logs (the rows; the header names the flags);
# - --learned-param log: the logged multiplier starts at the start value and
#   moves; a checkpoint of the other form is refused; --scale-lr moves it faster;
# - --dump-attn: the log is the same with and without it (all but the header
#   lines that record the dump flags and the log's path), with either attention op; the file has
#   every map; a run stopped and resumed writes the same file as a straight run;
#   bad dump flags and paths (a FIFO, a folder) exit 2 and leave files as they were.
set -u
bin=$1
maps=$2
. "$(dirname "$0")/cli_util.sh"
T="--batch 4 --seq-len 8 --vocab 16 --alphabet 4 --d-model 16 --heads 2 --d-head 8 --log-every 5 --warmup 10 --steps 40"

# ---- --scale mult is the same code path -----------------------------------------
run 0 sqrt $T --scale sqrt --log sqrt.tsv
run 0 m1 $T --scale mult --scale-mult 1 --log m1.tsv
[ "$(rows sqrt.tsv)" = "$(rows m1.tsv)" ] || no "--scale mult --scale-mult 1: rows differ from --scale sqrt"
run 0 none $T --scale none --log none.tsv
run 0 mr $T --scale mult --scale-mult 2.8284271247461903 --log mr.tsv
[ "$(rows none.tsv)" = "$(rows mr.tsv)" ] || no "--scale mult --scale-mult sqrt(8): rows differ from --scale none"
grep -q '^# scale_mult=2.82842708$' mr.tsv || no "the header does not record --scale-mult"
run 0 m4 $T --scale mult --scale-mult 4 --log m4.tsv
sc=$(rows m4.tsv | awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "scale_l0_h0") c = i; next } { print $c; exit }')
[ "$sc" = "1.41421" ] || no "--scale-mult 4 at d_head 8: the log's multiplier is '$sc', want 4/sqrt(8) = 1.41421"

# ---- the learned scale, log form ---------------------------------------------------
L="$T --scale learned --learned-init none"
run 0 lin $L --log lin.tsv --save lin.st
run 0 lg $L --learned-param log --log lg.tsv
run 0 lgfast $L --learned-param log --scale-lr 0.03 --log lgfast.tsv
col() { rows "$1" | awk -F'\t' -v s="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "scale_l0_h0") c = i; next } $1 == s { print $c }'; }
[ "$(col lg.tsv 0)" = 1 ] || no "log form from none: step 0 multiplier $(col lg.tsv 0), want 1 (= sqrt(8) · 1/sqrt(8))"
moved=$(awk -v a="$(col lg.tsv 40)" -v b="$(col lgfast.tsv 40)" -v l="$(col lin.tsv 40)" \
    'BEGIN { print (a < 1 && b < a && l < 1) ? "yes" : "no" }')
[ "$moved" = yes ] || no "multipliers at step 40: linear $(col lin.tsv 40), log $(col lg.tsv 40), log with --scale-lr 0.03 $(col lgfast.tsv 40): want all below 1 and the faster one lowest"
run 2 otherform $L --learned-param log --resume lin.st
grep -q 'setting differs: --learned-param is linear in the checkpoint, log in this run' otherform.err ||
    no "resuming a linear-form checkpoint with --learned-param log: $(head -1 otherform.err)"
run 2 scalelr_plain $T --scale-lr 0.1
grep -q -- '--scale-lr needs --scale learned' scalelr_plain.err || no "--scale-lr without learned: $(head -1 scalelr_plain.err)"

# ---- attention maps: the run is the same with and without them --------------------
for attn in composed fused; do
    run 0 plain_$attn $T --attn $attn --log plain_$attn.tsv
    run 0 dump_$attn $T --attn $attn --log dump_$attn.tsv --dump-attn 0,20,40 --dump-attn-file maps_$attn.st
    grep -v '^# dump_attn\|^# log=' plain_$attn.tsv >a.txt
    grep -v '^# dump_attn\|^# log=' dump_$attn.tsv >b.txt
    cmp -s a.txt b.txt || no "--attn $attn: the log changes with --dump-attn"
    [ "$(grep -c '^# dump_attn' dump_$attn.tsv)" -eq 2 ] || no "--attn $attn: the header should differ only by the dump flags"
    [ "$(summary plain_$attn.out)" = "$(summary dump_$attn.out)" ] || no "--attn $attn: the summary changes with --dump-attn"
    "$maps" maps_$attn.st >maps_$attn.txt || no "attn_maps cannot read the --attn $attn dump"
    [ "$(grep -c '^# block=' maps_$attn.txt)" -eq 6 ] || no "--attn $attn: want 6 maps (2 heads x 3 steps)"
    [ "$(grep -c '^[0-9]' maps_$attn.txt)" -eq $((6 * 64)) ] || no "--attn $attn: want 8x8 entries a map"
    grep -q '^# steps=0,20,40$' maps_$attn.txt || no "--attn $attn: the file's steps"
    "$maps" --summary maps_$attn.st | grep -q '^0	1	40	' || no "--attn $attn: attn_maps --summary lacks head 1 at step 40"
done
# a run stopped at 25 and resumed makes the same file (steps 0 and 20 kept from it)
run 0 stop $T --log st.tsv --save st.st --stop-at 25 --dump-attn 0,20,40 --dump-attn-file maps_st.st
run 0 resume $T --log st.tsv --save st.st --resume st.st --dump-attn 0,20,40 --dump-attn-file maps_st.st
grep -q 'kept the maps of 2 earlier steps' resume.err || no "resume: $(grep dump resume.err)"
cmp -s maps_st.st maps_composed.st || no "stop at 25 + resume: the maps file differs from the straight run's"
# the maps of a run with another setting are not kept
cp maps_st.st other.st
run 0 other $T --seed 2 --log o.tsv --save o.st --stop-at 25 --dump-attn 0,40 --dump-attn-file o_maps.st
cp other.st o_maps.st
run 0 other_resume $T --seed 2 --log o.tsv --save o.st --resume o.st --dump-attn 0,40 --dump-attn-file o_maps.st
grep -q 'is not this run.s maps: nothing kept' other_resume.err || no "another run's maps were not refused: $(cat other_resume.err)"
"$maps" o_maps.st | grep -q '^# steps=40$' || no "after refusing another run's maps the file should hold step 40 only"

# ---- bad dump flags and paths: exit 2, nothing written ---------------------------
guard dump_composed.tsv maps_composed.st
mkfifo fifo
mkdir folder
bad beyond "step 41 is beyond --steps 40" $T --dump-attn 0,41 --dump-attn-file keep.st --log keep.tsv
bad order "steps must increase" $T --dump-attn 20,0 --dump-attn-file keep.st --log keep.tsv
bad nofile "--dump-attn needs --dump-attn-file" $T --dump-attn 0 --log keep.tsv
bad nosteps "--dump-attn-file needs --dump-attn" $T --dump-attn-file keep.st --log keep.tsv
bad fifo "fifo: not a regular file" $T --dump-attn 0 --dump-attn-file fifo --log keep.tsv
bad folder "dump-attn-file folder: not a regular file (a folder)" $T --dump-attn 0 --dump-attn-file folder --log keep.tsv
bad nodir "cannot create a file in its folder" $T --dump-attn 0 --dump-attn-file no/such/m.st --log keep.tsv
bad samelog "is also the --log file" $T --dump-attn 0 --dump-attn-file keep.tsv --log keep.tsv
bad savefifo "fifo: not a regular file" $T --save fifo --log keep.tsv
[ -p fifo ] || no "the FIFO was replaced"
ls -a | grep -q '^\.[^.]' && no "temporary files left: $(ls -a | grep '^\.[^.]' | tr '\n' ' ')"

[ "$fails" -eq 0 ] && echo "scale_cli: all checks passed"
exit "$fails"
