#!/bin/sh
# attn_scale's --kv-heads, --window and what changes the logits (--bias table,
# --alibi, --softcap, --sinks, --attn-dropout) end to end, at a tiny size.
#   tests/attn_features_cli.sh ATTN_SCALE ATTN_MAPS
# - both flags train with either op (composed and fused log the same losses
#   to 1e-4) and are named in the log header; at their earlier value (0) they
#   are written neither in the header nor in the checkpoint, as before they existed;
# - a resume with another value of either is refused (exit 2, files unchanged),
#   and a checkpoint without them (a run from before) refuses a resume that sets them;
# - the code model (--task code) takes both;
# - --window W: the dumped maps are 0 outside the window, and attn_maps prints NaN there;
# - bad values: --kv-heads not dividing --heads; a flag whose feature the plugin
#   kernel does not declare (its descriptor, plugin ABI 2) is refused before anything
#   is written, naming the flag, the feature and what the kernel declares.
#   tests/attn_features_cli.sh ATTN_SCALE ATTN_MAPS CATALOGUE.so
set -u
bin=$1
maps=$2
cat=$3
. "$(dirname "$0")/cli_util.sh"
T="--batch 4 --seq-len 12 --vocab 16 --alphabet 4 --d-model 16 --heads 4 --d-head 8 --log-every 5 --warmup 5 --steps 30"

run 0 plain $T --log plain.tsv --save plain.st
grep -q '^# window=\|^# kv_heads=' plain.tsv && no "a run without the flags names them in its header"
grep -a -q 'config.window\|config.kv-heads' plain.st && no "a run without the flags records them in its checkpoint"

for attn in composed fused; do
    run 0 gqa_$attn $T --kv-heads 2 --window 4 --attn $attn --log gqa_$attn.tsv
done
grep -q '^# kv_heads=2$' gqa_composed.tsv || no "the header lacks kv_heads=2"
grep -q '^# window=4$' gqa_composed.tsv || no "the header lacks window=4"
# the uniform reference counts the keys a window leaves: mean of ln(min(i + 1, 4)) over 12 rows
want=$(awk 'BEGIN { for (i = 0; i < 12; i++) s += log(i + 1 < 4 ? i + 1 : 4); printf "%.6f", s / 12 }')
grep -q "^# ref_entropy_uniform=$want\$" gqa_composed.tsv || no "ref_entropy_uniform is not $want: $(grep ref_entropy gqa_composed.tsv)"
same=$(paste gqa_composed.tsv gqa_fused.tsv | awk -F'\t' '!/^#/ && $1 ~ /^[0-9]+$/ { n = NF / 2; d = $2 - $(n + 2); if (d < 0) d = -d; if (d > m) m = d } END { print (m <= 1e-4) ? "yes" : "no " m }')
[ "$same" = yes ] || no "composed and fused losses differ by more than 1e-4 with --kv-heads 2 --window 4: $same"
[ "$(rows plain.tsv | tail -1 | cut -f2)" = "$(rows gqa_composed.tsv | tail -1 | cut -f2)" ] && no "--kv-heads 2 --window 4 logs the same final loss as the plain run"

# --window 1: every row sees one key, so the uniform entropy is 0 and each head's entropy / uniform is 1
# (one-hot and uniform coincide), not 0/0; the log tables read the run
run 0 w1 $T --window 1 --log w1.tsv
grep -q '^# ref_entropy_uniform=0.000000$' w1.tsv || no "--window 1: ref_entropy_uniform is not 0: $(grep ref_entropy w1.tsv)"
! rows w1.tsv | grep -qi 'nan' || no "--window 1 logs NaN: $(rows w1.tsv | grep -i nan | head -2)"
python3 "$(dirname "$0")/../scripts/tglogs.py" stats w1.tsv >w1.stats 2>&1 || no "tglogs stats fails on a --window 1 log: $(cat w1.stats)"

# resume: another value refused, files kept
run 0 st $T --kv-heads 2 --window 4 --log w.tsv --save w.st --stop-at 15
guard w.tsv w.st
bad otherwin "setting differs: --window is 4 in the checkpoint, 3 in this run" $T --kv-heads 2 --window 3 --log keep.tsv --save keep.st --resume keep.st
bad nowin "setting differs: --window is 4 in the checkpoint, 0 in this run" $T --kv-heads 2 --log keep.tsv --save keep.st --resume keep.st
bad otherkv "setting differs: --kv-heads is 2 in the checkpoint, 1 in this run" $T --kv-heads 1 --window 4 --log keep.tsv --save keep.st --resume keep.st
run 0 resumed $T --kv-heads 2 --window 4 --log w.tsv --save w.st --resume w.st
guard plain.tsv plain.st
bad oldwin "setting differs: --window is 0 in the checkpoint, 5 in this run" $T --window 5 --log keep.tsv --save keep.st --resume keep.st

# maps: 0 outside the window, NaN in attn_maps' text
run 0 dump $T --window 3 --dump-attn 30 --dump-attn-file m.st --log m.tsv
"$maps" m.st >m.txt 2>m.err || no "attn_maps cannot read a windowed dump: $(head -1 m.err)"
# block 0, query 7 sees keys 5..7: keys 0..4 NaN, 5..7 numbers summing to 1
awk '/^# block=0 /{ b = 1; next } /^# block=/{ b = 0 } b && NF == 3 && $2 == 7 { if ($1 < 5 || $1 > 7) { if ($3 != "NaN") bad++ } else s += $3 }
     END { exit !(bad == 0 && s > 0.999 && s < 1.001) }' m.txt || no "attn_maps: query 7 with --window 3 is not NaN outside keys 5..7 or its weights do not sum to 1"
run 0 dumpkv $T --kv-heads 2 --dump-attn 30 --dump-attn-file mk.st --log mk.tsv
"$maps" mk.st | grep -q '^# block=3 layer=0 head=3 step=30 kv_head=1$' || no "attn_maps does not name head 3's key/value head (1)"

# the code model takes both flags too
i=0; while [ $i -lt 300 ]; do echo "static int f$i(int x) { return x * $i + 1; }"; i=$((i + 1)); done >corpus.c
run 0 code --task code --data corpus.c --batch 4 --seq-len 16 --d-model 16 --heads 4 --d-head 8 --kv-heads 1 --window 5 \
    --warmup 5 --steps 20 --log-every 10 --eval-every 10 --log code.tsv
grep -q '^# window=5$' code.tsv && grep -q '^# kv_heads=1$' code.tsv || no "the code model's header lacks window=5 or kv_heads=1"
[ "$(rows code.tsv | tail -1 | awk -F'\t' '{ print ($2 > 0 && $2 < 10) ? "ok" : "bad" }')" = ok ] || no "the code model's last loss is not a number in (0, 10)"

# the logits' features: named in the header when set, not at all otherwise; a resume with another
# value refused; dropout's masks follow the step, so a resumed run logs the rows of a straight one
X="--bias table --alibi --softcap 4 --sinks --attn-dropout 0.2"
run 0 logits $T $X --log lg.tsv
for kv in bias=table alibi=1 softcap=4 sinks=1 attn_dropout=0.200000003; do
    grep -q "^# $kv\$" lg.tsv || no "the header lacks $kv: $(grep -E '^# (bias|alibi|softcap|sinks|attn_dropout)=' lg.tsv | tr '\n' ' ')"
done
grep -qE '^# (bias|alibi|softcap|sinks|attn_dropout)=' plain.tsv && no "a run without the logits' flags names them"
run 0 lgstop $T $X --log lgr.tsv --save lgr.st --stop-at 15
run 0 lgres $T $X --log lgr.tsv --save lgr.st --resume lgr.st
[ "$(rows lg.tsv)" = "$(rows lgr.tsv)" ] || no "--attn-dropout: a resumed run's rows differ from a straight run's"
run 0 lgres2 $T $X --attn-dropout 0.3 --log lgr2.tsv --save lgr2.st --stop-at 15
guard lgr2.tsv lgr2.st
bad otherdrop "setting differs: --attn-dropout is 0.300000012 in the checkpoint, 0.200000003 in this run" $T $X --log keep.tsv --save keep.st --resume keep.st
bad nosinks "setting differs: --sinks is 1 in the checkpoint, 0 in this run" $T --bias table --alibi --softcap 4 --attn-dropout 0.3 --log keep.tsv --save keep.st --resume keep.st
# the switches also take an explicit 0 or 1 (as a sweep writes them)
run 0 sw1 $T --sinks 1 --alibi 0 --check
run 2 sw2 $T --sinks=2 --check
grep -q -- "--sinks: '2' is not 0 or 1" sw2.err || no "--sinks=2: $(cat sw2.err)"
for f in "--bias table:bias" "--alibi:alibi" "--softcap 3:softcap" "--sinks:sinks" "--attn-dropout 0.1:dropout" \
         "--window 4:window" "--kv-heads 2:grouped heads"; do
    flag=${f%%:*} feat=${f#*:}
    run 2 plug $T $flag --attn "plugin:$cat:textbook_only" --check
    grep -qF -- "${flag%% *} needs $feat, which the plugin $cat:textbook_only does not declare (ABI 2: dv != d)" plug.err ||
        no "$flag with a plugin that does not declare it: $(cat plug.err)"
    run 2 plugrun $T $flag --attn "plugin:$cat:textbook_only" --log plugrun.tsv --save plugrun.st
    [ ! -e plugrun.tsv ] && [ ! -e plugrun.st ] || no "$flag with a plugin that does not declare it: files written"
    run 0 plugall $T $flag --attn "plugin:$cat:right" --check   # declares every feature
done
run 2 dropone $T --attn-dropout 1 --check

# bad values
run 2 nodiv $T --kv-heads 3 --check
grep -q -- "--kv-heads 3 does not divide --heads 4" nodiv.err || no "--kv-heads 3: $(cat nodiv.err)"
run 2 negwin $T --window -1 --check

[ "$fails" -eq 0 ] && echo "attn_features_cli: all checks passed"
exit "$fails"
