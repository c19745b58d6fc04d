#!/bin/sh
# attn_scale --precision end to end (mixed precision, 0.22):
# - a bad --precision is refused before anything is written;
# - bf16 and fp16 logs name the precision and the emulation; fp16 logs its loss
#   scale and overflow skips; an fp32 log is as before (no precision key);
# - each precision trains to another loss than fp32 (the products were rounded);
# - exact resume: --stop-at then --resume gives the straight run's rows, in bf16
#   and in fp16 (whose checkpoint holds the loss scale);
# - resuming with another --precision is refused, the files unchanged;
# - fp16: a non-finite gradient (--debug-nan) is an overflow: the step skipped,
#   the scale halved, the run goes on (exit 0); fp32 and bf16 stop (exit 3);
# - the log tools pair runs of the same precision only, and show it.
#   precision_cli.sh ATTN_SCALE TOP
bin=$1
top=$2
. "$(dirname "$0")/cli_util.sh"
T="--batch 4 --seq-len 8 --vocab 16 --alphabet 4 --d-model 16 --heads 2 --d-head 8 --log-every 5 --warmup 10"

# ---- refusals before anything is written --------------------------------------------
run 2 badprec $T --steps 20 --precision int8 --log bad.tsv --save bad.st
grep -q "precision.*'int8' is not one of fp32 bf16 fp16" badprec.err || no "--precision int8: message: $(cat badprec.err)"
[ -e bad.tsv ] || [ -e bad.st ] && no "--precision int8 left a file"

# ---- headers and columns ------------------------------------------------------------
for p in fp32 bf16 fp16; do run 0 "$p" $T --steps 40 --precision "$p" --log "$p.tsv"; done
grep -q '^# precision' fp32.tsv && no "fp32 log names a precision (every log before 0.22 is fp32 without the key)"
for p in bf16 fp16; do
    [ "$(grep -c "^# precision=$p\$" "$p.tsv")" -eq 1 ] || no "$p log: '# precision=$p' not there once"
    grep -q '^# precision_emulated=1$' "$p.tsv" || no "$p log: no precision_emulated=1"
    [ "$(summary "$p.out")" = "$(summary fp32.out)" ] && no "$p trained to fp32's summary: nothing was rounded"
done
rows fp16.tsv | head -1 | grep -q "	loss_scale	overflow_skips$" || no "fp16 log: no loss_scale, overflow_skips columns"
rows bf16.tsv | head -1 | grep -q "loss_scale" && no "bf16 log has a loss scale"
[ "$(rows fp16.tsv | tail -1 | awk -F'\t' '{print $(NF-1), $NF}')" = "65536 0" ] ||
    no "fp16 log: loss scale and skips at the end are not 65536 0: $(rows fp16.tsv | tail -1)"

# ---- exact resume ---------------------------------------------------------------------
for p in bf16 fp16; do
    run 0 "stop$p" $T --steps 40 --precision "$p" --stop-at 23 --save "$p.st" --log "r$p.tsv"
    run 0 "resume$p" $T --steps 40 --precision "$p" --resume "$p.st" --save "$p.st" --log "r$p.tsv"
    [ "$(rows "$p.tsv")" = "$(rows "r$p.tsv")" ] || no "$p: stop-at 23 + resume: rows differ from the straight run"
    [ "$(summary "$p.out")" = "$(summary "resume$p.out")" ] || no "$p: stop-at 23 + resume: summary differs"
done
grep -a -q '"amp.loss_scale_log2":"16"' fp16.st || no "fp16 checkpoint: no amp.loss_scale_log2 16"
grep -a -q '"amp.loss_scale_log2"' bf16.st && no "bf16 checkpoint holds a loss scale"
guard rbf16.tsv bf16.st
bad otherprec "precision" $T --steps 60 --precision fp16 --resume keep.st --save keep.st --log keep.tsv
bad toFP32 "precision" $T --steps 60 --resume keep.st --save keep.st --log keep.tsv

# ---- fp16's overflow: skipped, the scale halved, the run goes on -------------------------
run 0 nan16 $T --steps 40 --precision fp16 --debug-nan 12 --log nan16.tsv
last=$(rows nan16.tsv | tail -1 | awk -F'\t' '{print $(NF-1), $NF}')
[ "$last" = "32768 1" ] || no "fp16 --debug-nan 12: loss scale and skips at the end are '$last', want '32768 1'"
grep -q "fp16: 1 steps skipped for overflow in all, the loss scale now 32768" nan16.err || no "fp16 --debug-nan: stderr: $(cat nan16.err)"
run 3 nan32 $T --steps 40 --debug-nan 12 --log nan32.tsv
run 3 nanbf $T --steps 40 --precision bf16 --debug-nan 12 --log nanbf.tsv

# ---- the log tools ------------------------------------------------------------------------
for p in fp32 bf16; do run 0 "none$p" $T --steps 40 --scale none --precision "$p" --log "none_$p.tsv"; done
bash "$top/scripts/summarize.sh" fp32.tsv bf16.tsv none_fp32.tsv none_bf16.tsv >sum.txt 2>&1 || no "summarize failed: $(cat sum.txt)"
grep -q "none vs sqrt, hist adam d_head=8 seed=1 kernel=composed precision=bf16: final loss" sum.txt ||
    no "summarize: no bf16 pair: $(cat sum.txt)"
[ "$(grep -c '^none vs sqrt' sum.txt)" -eq 2 ] || no "summarize: want 2 verdicts (fp32 with fp32, bf16 with bf16): $(grep '^none vs' sum.txt)"
grep -q 'precision=bf16' sum.txt || no "summarize's table does not show precision=bf16"
python3 "$top/scripts/tglogs.py" precision fp32.tsv bf16.tsv none_fp32.tsv none_bf16.tsv >prec.md || no "tglogs precision failed"
[ "$(grep -c '^| fp32 | 1 \|^| bf16 | 1 ' prec.md)" -eq 2 ] || no "tglogs precision: want a fp32 and a bf16 row: $(cat prec.md)"

[ "$fails" -eq 0 ] && echo "precision_cli: all passed" || { echo "precision_cli: $fails failed"; exit 1; }
