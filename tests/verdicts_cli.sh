#!/usr/bin/env bash
# The verdicts in each task's terms, the same from every tool, by the scale a run applied, on nothing
# unmeasured; other trainers' logs imported and written (docs/logs.md#the-verdicts, #bring-your-own-logs).
#   tests/verdicts_cli.sh SOURCE_DIR
src=$1
tg="python3 $src/scripts/tglogs.py"
. "$src/tests/cli_util.sh"
# -- the docs' own data: counting (docs/data/precision/fp32) and code (docs/data/code), 3 seeds each
for set in precision/fp32 code; do
    python3 "$src/tests/verdicts_agree.py" "$src/scripts/tglogs.py" "$tmp/agree-${set//\//-}" \
        "$src"/docs/data/$set/none_s*.tsv "$src"/docs/data/$set/sqrt_s*.tsv >agree.out 2>&1 \
        || { no "the tools disagree on docs/data/$set"; sed 's/^/  | /' agree.out | head -20; }
done
bash "$src/scripts/summarize.sh" "$src"/docs/data/code/*.tsv >code.txt 2>&1 || no "summarize docs/data/code failed"
[ "$(grep -c ': failure reproduced;' code.txt)" -eq 3 ] || { no "summarize docs/data/code: want 3 'failure reproduced'"; grep '^none' code.txt | head -3; }
! grep -q 'NOT reproduced' code.txt || no "summarize docs/data/code: says NOT reproduced"
# -- a 0.22 aggregate (code judged by the 3x) re-judged from its own figures; docs' table is that
agg="$src/docs/data/logits/code-aggregate.tsv"
$tg rejudge-aggregate "$agg" | cmp -s - "$agg" || no "rejudge-aggregate does not give docs/data/logits/code-aggregate.tsv"
python3 - "$agg" <<'PY' >old.tsv
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
c = {n: i for i, n in enumerate(rows[0])}
for r in rows[1:]:
    if r[c["reproduced"]] != "-":
        r[c["reproduced"]] = "0/3"      # what 0.22's collect wrote
print("\n".join("\t".join(r) for r in rows))
PY
$tg rejudge-aggregate old.tsv | cmp -s - "$agg" || no "rejudge-aggregate of 0.22's verdicts"
awk 'BEGIN { FS = OFS = "\t" } NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i } NR == 2 { $c["gap_min"] = "0.05" } { print }' \
    "$agg" >straddle.tsv
$tg rejudge-aggregate straddle.tsv >/dev/null 2>straddle.err && no "a gap range across 0.10 with collapsed heads was split"
grep -q "straddle 0.1 nats where heads collapsed" straddle.err || { no "rejudge's refusal"; cat straddle.err; }
# -- the same verdicts whatever the order of the files
$tg textverdict "$src"/docs/data/code/*.tsv "$src"/docs/data/precision/code-fp32/*.tsv >a.txt
$tg textverdict $(ls "$src"/docs/data/precision/code-fp32/*.tsv "$src"/docs/data/code/*.tsv | sort -r) >b.txt
cmp -s a.txt b.txt || { no "textverdict depends on the order of the files"; diff a.txt b.txt | head -5; }
[ "$(grep -c 'failure reproduced' a.txt)" -eq 12 ] || no "textverdict: want 12 pairs (3 seeds x 2 x 2 logs), reproduced"
# -- a kernel that forgets the scale itself: passed sqrt, its scale_* columns measure c = 1
awk 'BEGIN { OFS = FS = "\t" } /^# scale=/ { print "# scale=sqrt"; next } /^# attn=/ { print "# attn=exec:python3 k.py";
     print "# attn_exec_name=forgets"; print "# attn_scale_columns=measured"; next } { print }' \
    "$src/docs/data/code/none_s1.tsv" >forgets_s1.tsv
cp "$src/docs/data/code/none_s1.tsv" "$src/docs/data/code/sqrt_s1.tsv" .
for order in "none_s1.tsv sqrt_s1.tsv forgets_s1.tsv" "forgets_s1.tsv sqrt_s1.tsv none_s1.tsv"; do
    bash "$src/scripts/summarize.sh" $order >k.txt 2>&1 || no "summarize with the forgetting kernel failed"
    grep -q '^forgets_s1: scale none (measured multiplier 1, passed sqrt)' k.txt || { no "the kernel's run is not labelled by its measured scale"; cat k.txt | head -12; }
    [ "$(grep -c '^none vs sqrt.*kernel=composed.*: failure reproduced' k.txt)" -eq 1 ] || { no "the built-in pair's verdict ($order)"; grep '^none' k.txt; }
    grep -q "^none run forgets_s1: no sqrt run with the same settings.*differs in attn" k.txt || { no "the kernel's run does not say why it is unpaired"; grep forgets k.txt; }
    grep -q "^exec 'forgets' vs composed, code adam scale=none .*: FAILS (the collapse of the forgotten scale)" k.txt || { no "the kernel against the built-in sqrt run"; grep "^exec" k.txt; }
    $tg textverdict $order >kt.txt
    [ "$(grep -c 'failure reproduced' kt.txt)" -eq 1 ] && ! grep -q 'NOT reproduced' kt.txt || { no "textverdict with the forgetting kernel ($order)"; cat kt.txt; }
done
# -- nothing judged that was not measured: the unscaled heads' entropy nan
mkdir -p nm
awk 'BEGIN { FS = OFS = "\t" } /^#/ { print; next } !h++ { for (i = 1; i <= NF; i++) if ($i ~ /^(nent|ent)_/) c[i] = 1; print; next }
     { for (i in c) $i = "nan"; print }' "$src/docs/data/code/none_s1.tsv" >nm/none_s1.tsv
cp sqrt_s1.tsv nm/
bash "$src/scripts/summarize.sh" nm/none_s1.tsv nm/sqrt_s1.tsv >nm.txt 2>&1
grep -q "^none vs sqrt.*: not judged: the heads' entropy was not measured; unscaled heads .*: not measured, scaled: 0/4" nm.txt ||
    { no "an unmeasured head is judged"; grep '^none' nm.txt; }
# -- another trainer's CSV: imported, refused with the missing column's name, nothing half-written
python3 - <<'PY'
import csv, math
for name, tau, drop in (("none", 30.0, 1.0), ("sqrt", 4000.0, 2.0)):
    with open("torch_%s.csv" % name, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["global_step", "train/loss", "val/loss"] + ["attn/l%d/h%d" % (l, h) for l in range(2) for h in range(2)])
        for s in range(0, 1001, 50):
            w.writerow([s, 3 - drop * s / 1000, "" if s % 100 else 3.1 - drop * s / 1000] +
                       ["%.5f" % (3.2 * math.exp(-s / tau)) for _ in range(4)])
PY
for s in none sqrt; do
    $tg import torch_$s.csv torch_$s.tsv --col step=global_step --col loss=train/loss --col val_loss=val/loss \
        --entropy 'attn/l{l}/h{h}' --task text --scale $s --seq-len 64 --seed 1 --steps 1000 2>imp.err ||
        { no "import $s failed"; cat imp.err; }
done
bash "$src/scripts/summarize.sh" torch_none.tsv torch_sqrt.tsv >imp.txt 2>&1 || no "summarize of imported logs failed"
grep -q "^none vs sqrt, import text .*validation loss 2.1000 vs 1.1000, gap 1.000 nats.*: failure reproduced; unscaled heads below 10% of uniform at 10% of steps: 4/4, scaled: 0/4" imp.txt ||
    { no "the imported pair's verdict"; cat imp.txt; }
bash "$src/scripts/plot.sh" torch_none.tsv torch_sqrt.tsv -o imp.png >plot.out 2>&1 && [ -s imp.png ] && [ -s imp-entropy.png ] && [ -s imp-valloss.png ] ||
    { no "plot of imported logs"; cat plot.out; }
$tg import torch_none.csv missing.tsv --col step=global_step --col loss=loss --entropy 'attn/l{l}/h{h}' --task text \
    --scale none --seq-len 64 >/dev/null 2>miss.err && no "a missing column was accepted"
grep -q "no column 'loss' (--col loss=loss)" miss.err || { no "the refusal does not name the column"; cat miss.err; }
sed 's/attn\/l1\/h1/other/' torch_none.csv >gap.csv
$tg import gap.csv missing.tsv --col step=global_step --col loss=train/loss --entropy 'attn/l{l}/h{h}' --task text \
    --scale none --seq-len 64 >/dev/null 2>miss2.err && no "a missing head column was accepted"
grep -q "no column 'attn/l1/h1'" miss2.err || { no "the refusal does not name the head's column"; cat miss2.err; }
awk -F, -v OFS=, 'NR == 5 { $2 = "oops" } { print }' torch_none.csv >garbage.csv
$tg import garbage.csv missing.tsv --col step=global_step --col loss=train/loss --entropy 'attn/l{l}/h{h}' --task text \
    --scale none --seq-len 64 >/dev/null 2>miss3.err && no "a non-number was accepted"
grep -q "garbage.csv:5: column train/loss: not a number: 'oops'" miss3.err || { no "the refusal does not name line and column"; cat miss3.err; }
[ ! -e missing.tsv ] && [ -z "$(ls | grep '\.import')" ] || no "a refused import left a file"
cp torch_none.tsv keep.tsv
$tg import torch_none.csv torch_none.tsv --col step=global_step --col loss=train/loss --entropy 'attn/l{l}/h{h}' \
    --task text --scale none --seq-len 64 2>over.err && no "import over an existing log without --overwrite"
cmp -s keep.tsv torch_none.tsv || no "a refused import changed the existing log"
bash "$src/scripts/summarize.sh" torch_none.csv >csv.txt 2>&1 && no "summarize read a CSV"
grep -q "not a tapegrad log: its column line is comma-separated.*tapegrad-logs import" csv.txt || { no "summarize's CSV message"; cat csv.txt; }
bash "$src/scripts/plot.sh" torch_none.csv -o c.png >pc.txt 2>&1 && no "plot read a CSV"
grep -q "not a tapegrad log: its column line is comma-separated" pc.txt || { no "plot's CSV message"; cat pc.txt; }
printf '# steps=10\nstep\tloss\tentropy\n0\t1\t1\n5\t1\t1\n10\t1\t1\n' >noent.tsv
bash "$src/scripts/plot.sh" noent.tsv -o n.png >pn.txt 2>&1 && no "plot read a log without ent_mean"
grep -q "'noent.tsv': no column ent_mean" pn.txt || { no "plot does not name the missing column"; cat pn.txt; }
bash "$src/scripts/summarize.sh" noent.tsv >sn.txt 2>&1 && no "summarize read a log without ent_mean"
grep -q "noent.tsv: no column ent_mean" sn.txt || { no "summarize does not name the missing column"; cat sn.txt; }
bash "$src/scripts/summarize.sh" --help >help.txt 2>&1 && grep -q "Verdicts" help.txt || no "summarize.sh --help"
# -- the writer, without torch: entropy as tapegrad computes it, refusals
PYTHONPATH="$src/scripts/python" python3 "$src/tests/tapegrad_log_test.py" || no "tapegrad_log's tests"
[ $fails -eq 0 ] && echo "verdicts_cli: all passed"
exit $((fails > 0))
