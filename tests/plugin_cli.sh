#!/bin/bash
# attn_scale with attention plugins (--attn plugin:FILE.so[:SYMBOL]), end to end:
#   tests/plugin_cli.sh ATTN_SCALE ATTN_MAPS OK.so NOSCALE.so BAD.so SWEEP PLUGIN_DIR CXX.so|none ATTN_CHECK
# - loading: a missing file, a file that is not ELF, another machine's ELF, a
#   missing symbol, a control character, a plugin that declares no ABI or
#   another ABI: exit 2, a message naming the file and the problem, no log or
#   checkpoint written; an ABI 2 plugin built -fvisibility=hidden and one built
#   as C++ load (and pass attn_check); an ABI 1 plugin is refused (since 0.20),
#   the message naming the version and the rewrite; a 127-byte kernel name
#   survives a checkpoint's round trip;
# - features: a run whose flags use a feature the kernel declares trains with it
#   (grouped heads and a window: the same losses as the built-in op);
# - guards: a kernel whose weights leak past the causal mask is refused before
#   anything is written (exit 5), or trains with --allow-noncausal; one that
#   starts leaking mid-run ends the run with "# failed:" (exit 5); one that
#   crashes in-process leaves "# crashed: SIGSEGV at step N: ..." as the log's
#   last line, and the next run on the same files starts and resumes;
# - training: the right kernel logs the multiplier 1/sqrt(d_head) it applied,
#   the forgetful one 1 (measured from the outside: neither fills stats), and the
#   log header names the plugin's file, SHA-256 and symbol;
# - the forgetful plugin reproduces the built-in op's `--scale none` run at
#   step 0 (the same row) and its heads are sharper than the right kernel's;
# - resume: with another plugin (by hash) refused; with the same plugin at
#   another path accepted, and the log's rows byte-identical to a straight run;
# - --dump-attn works for a plugin (maps measured with V = identity);
# - kernels written for dv = d are measured when T <= d (V padded); those that
#   refuse or crash on the call, or whose weights are not causal, are not: the
#   run trains, the health columns are nan, the header and stderr say why;
# - the sweep tool plans plugin runs (--plugin NAME=FILE).
set -u
bin=$1 maps=$2 ok=$3 noscale=$4 badso=$5 sweep=$6 pdir=$7 cxx=$8 check=$9
cat=$pdir/plugin_catalogue.so
. "$(dirname "$0")/cli_util.sh"
T="--batch 4 --seq-len 8 --vocab 16 --alphabet 4 --d-model 16 --heads 2 --d-head 16 --log-every 5 --warmup 5"
col() {   # col LOG NAME ROW: a column's value by name in data row ROW (1 = first; -1 = last)
    awk -F'\t' -v name="$2" -v row="$3" '/^#/ { next } !n++ { for (i = 1; i <= NF; i++) if ($i == name) c = i; next }
        { v[++r] = $c } END { print (row < 0 ? v[r + 1 + row] : v[row]) }' "$1"
}
hdr() { sed -n "s/^# $2=//p" "$1"; }
nothing_written() { for f in "$@"; do [ ! -e "$f" ] || no "$f was written by a refused run"; done; }

# ---- loading ------------------------------------------------------------------
loadfail() {   # loadfail NAME MESSAGE SPEC
    run 2 "$1" $T --steps 10 --attn "plugin:$3" --log "$1.tsv" --save "$1.st"
    grep -q -- "$2" "$1.err" || { no "$1: message lacks '$2'"; sed 's/^/  | /' "$1.err" | head -3; }
    nothing_written "$1.tsv" "$1.st"
}
loadfail missing "plugin nosuch.so: No such file" nosuch.so
echo "not a shared object" >text.so
loadfail text "plugin text.so: not a shared object (no ELF header" text.so
# a 64-byte ELF header of an aarch64 shared object (ET_DYN = 3, EM_AARCH64 = 183)
{ printf '\177ELF\002\001\001'; head -c 9 /dev/zero; printf '\003\000\267\000'; head -c 44 /dev/zero; } >arm.so
loadfail arm "plugin arm.so: built for aarch64 (64-bit), this program is x86-64" arm.so
loadfail nosym "no kernel descriptor tg_attn_plugin_nosuch" "$ok:nosuch"
loadfail abi_none "no kernel descriptor tg_attn_plugin_attention (ABI 2: TG_ATTENTION_PLUGIN(attention, features) after the kernel), though it has a symbol of that name" "$pdir/plugin_none.so"
loadfail abi3 "its descriptor tg_attn_plugin_attention says plugin ABI 3; this program takes ABI 2: rebuild it" "$pdir/plugin_abi3.so"
loadfail abi1 "declares plugin ABI 1 (a tg_attention_fn and TG_ATTENTION_PLUGIN_DECLARE, tapegrad 0.12's), which tapegrad 0.20 no longer loads (0.19 was the last): make the kernel a tg_attend_fn on tg_attn_args and export it with TG_ATTENTION_PLUGIN(attention, TG_ATTN_F_DV)" "$pdir/plugin_abi1_hidden.so"
run 0 hidden $T --steps 5 --attn "plugin:$pdir/plugin_hidden.so" --log hidden.tsv
[ "$(hdr hidden.tsv attn_plugin_abi)" = "ABI 2: dv != d, grouped heads, Tq != Tk, window, padding, bias, alibi, softcap, sinks, dropout" ] ||
    no "-fvisibility=hidden plugin: header says '$(hdr hidden.tsv attn_plugin_abi)'"
run 2 textwin $T --steps 5 --window 4 --attn "plugin:$badso:forgets_scale" --log textwin.tsv
grep -qF -- "--window needs window, which the plugin $badso:forgets_scale does not declare (ABI 2: dv != d)" textwin.err ||
    no "a textbook kernel with --window: $(cat textwin.err)"
nothing_written textwin.tsv
if [ "$cxx" != none ]; then
    run 0 cxx $T --steps 5 --attn "plugin:$cxx:cxx_attention" --log cxx.tsv
    "$check" "plugin:$cxx:cxx_attention" >cxx_check.out 2>&1 || no "attn_check refuses the C++ plugin: $(grep -m3 '^FAIL' cxx_check.out)"
else
    echo "plugin_cli: no C++ compiler: the C++ plugin was not built (skipped)"
fi
# a 127-byte kernel name: the checkpoint keeps it whole, so the run resumes
long=k123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890abcdef
[ ${#long} -eq 127 ] || no "the long name is ${#long} bytes, not 127"
run 0 long_straight $T --steps 20 --attn "plugin:$pdir/plugin_long.so:$long" --log long_s.tsv
run 0 long_part $T --steps 20 --attn "plugin:$pdir/plugin_long.so:$long" --log long.tsv --save long.st --stop-at 10
run 0 long_resume $T --steps 20 --attn "plugin:$pdir/plugin_long.so:$long" --log long.tsv --save long.st --resume long.st
[ "$(hdr long.tsv attn_plugin_symbol)" = "$long" ] || no "127-byte symbol: header has '$(hdr long.tsv attn_plugin_symbol)'"
[ "$(rows long.tsv)" = "$(rows long_s.tsv)" ] || no "127-byte symbol: the resumed run's rows differ from a straight run's"
loadfail folder "not a regular file" .
run 2 ctrl $T --steps 10 --attn "plugin:a$(printf '\t')b.so" --log ctrl.tsv
grep -q "control character" ctrl.err || no "ctrl: message lacks 'control character'"
run 2 badspec $T --steps 10 --attn plugn:x.so
grep -q "expected saved, online, plugin:FILE.so\[:SYMBOL\] or exec:CMD (composed and fused: saved and online before 0.20)" badspec.err || no "badspec: message lacks the choices"
run 2 check_missing $T --attn plugin:nosuch.so --check
grep -q "plugin nosuch.so: No such file" check_missing.err || no "--check: a missing plugin not named: $(cat check_missing.err)"
run 0 check_ok $T --attn "plugin:$ok" --check

# ---- training ----------------------------------------------------------------
run 0 ok $T --steps 30 --attn "plugin:$ok" --log ok.tsv
run 0 noscale $T --steps 30 --attn "plugin:$noscale" --log noscale.tsv
run 0 builtin_none $T --steps 30 --scale none --log builtin_none.tsv
[ "$(col ok.tsv scale_l0_h0 1)" = 0.25 ] || no "right kernel: scale column $(col ok.tsv scale_l0_h0 1), want 0.25 = 1/sqrt(16)"
[ "$(col noscale.tsv scale_l0_h1 -1)" = 1 ] || no "forgetful kernel: scale column $(col noscale.tsv scale_l0_h1 -1), want 1"
[ "$(hdr ok.tsv attn_scale_value)" = 0.25 ] || no "header: attn_scale_value is not the scale passed"
[ "$(hdr ok.tsv attn_scale_columns)" = measured ] || no "header: no attn_scale_columns=measured"
[ "$(hdr ok.tsv attn_plugin_sha256)" = "$(sha256sum "$ok" | cut -d' ' -f1)" ] || no "header: attn_plugin_sha256 is not the file's"
[ "$(hdr ok.tsv attn_plugin_symbol)" = attention ] || no "header: attn_plugin_symbol"
[ "$(rows noscale.tsv | sed -n 2p | cut -f1-12)" = "$(rows builtin_none.tsv | sed -n 2p | cut -f1-12)" ] ||
    no "forgetful plugin, step 0: $(rows noscale.tsv | sed -n 2p | cut -f1-6) vs built-in none $(rows builtin_none.tsv | sed -n 2p | cut -f1-6)"
for h in 0 1; do   # at this tiny size (d_head 16) the forgotten scale sharpens, it does not collapse
    awk -v a="$(col noscale.tsv nent_l0_h$h 1)" -v b="$(col ok.tsv nent_l0_h$h 1)" 'BEGIN { exit !(a < b - 0.2) }' ||
        no "forgetful plugin, head $h: entropy/uniform $(col noscale.tsv nent_l0_h$h 1) not below the right one's $(col ok.tsv nent_l0_h$h 1)"
done
grep -q "final_loss=" ok.out || no "no summary line for a plugin run"

# ---- resume ------------------------------------------------------------------
run 0 straight $T --steps 30 --attn "plugin:$noscale" --log straight.tsv
run 0 part $T --steps 30 --attn "plugin:$noscale" --log part.tsv --save part.st --stop-at 15
cp part.tsv part_keep.tsv; cp part.st part_keep.st
run 2 other $T --steps 30 --attn "plugin:$ok" --log part.tsv --save part.st --resume part.st
grep -q "setting differs: attn_plugin_sha256" other.err || { no "resume with another plugin: not refused by its hash"; head -3 other.err; }
cmp -s part.st part_keep.st && cmp -s part.tsv part_keep.tsv || no "a refused resume changed the run's files"
cp "$noscale" moved.so
run 0 moved $T --steps 30 --attn plugin:moved.so --log part.tsv --save part.st --resume part.st
[ "$(rows part.tsv)" = "$(rows straight.tsv)" ] || no "resume with the same plugin at another path: rows differ from the straight run"

# ---- attention maps ----------------------------------------------------------
run 0 dump $T --steps 10 --attn "plugin:$noscale" --log dump.tsv --dump-attn 0,10 --dump-attn-file maps.st
"$maps" --summary maps.st >maps.txt 2>maps.err || no "attn_maps cannot read a plugin run's maps: $(head -1 maps.err)"
[ "$(grep -vc '^#' maps.txt)" -ge 4 ] || no "attn_maps --summary: fewer than 4 rows for 2 steps x 2 heads"

# ---- kernels written for dv = d, and kernels that cannot be measured ---------
# T = 8 <= d_head 16: V = identity padded to dv = d is a call they take, so they are measured
for sym in needs_dv_eq_d crashes_dv; do
    run 0 "${sym}_measured" $T --steps 10 --attn "plugin:$badso:$sym" --log "${sym}_m.tsv"
    [ "$(hdr "${sym}_m.tsv" attn_measured)" = yes ] || no "$sym at T <= d: not measured"
    [ "$(col "${sym}_m.tsv" scale_l0_h0 1)" = 0.25 ] || no "$sym at T <= d: multiplier $(col "${sym}_m.tsv" scale_l0_h0 1)"
done
# T = 8 > d_head 4: dv must be T, which they refuse or crash on
for sym in needs_dv_eq_d crashes_dv; do
    run 0 "$sym" $T --d-head 4 --steps 10 --attn "plugin:$badso:$sym" --log "$sym.tsv"
    [ "$(hdr "$sym.tsv" attn_measured)" = no ] || no "$sym: header lacks attn_measured=no"
    [ "$(col "$sym.tsv" ent_l0_h0 -1)" = nan ] || no "$sym: entropy column '$(col "$sym.tsv" ent_l0_h0 -1)', want nan"
    grep -q "cannot be measured" "$sym.err" || no "$sym: no note on stderr"
    awk -v x="$(col "$sym.tsv" loss -1)" 'BEGIN { exit !(x > 0 && x < 100) }' || no "$sym: loss not finite"
done
grep -q "crashed" crashes_dv.err || no "crashes_dv: the note does not say the kernel crashed"
grep -q "dv 8 != d 4" needs_dv_eq_d.err || no "needs_dv_eq_d: the note does not give the kernel's message"

# ---- the guards: weights past the causal mask, a crash -----------------------
run 5 noncausal $T --steps 10 --attn "plugin:$badso:no_causal_mask" --log noncausal.tsv --save noncausal.st
grep -q "not causal weights" noncausal.err || no "no_causal_mask: the refusal does not say the weights are not causal: $(cat noncausal.err)"
grep -q -- "--allow-noncausal" noncausal.err || no "no_causal_mask: the refusal does not name --allow-noncausal"
nothing_written noncausal.tsv noncausal.st
run 0 noncausal_ok $T --steps 10 --attn "plugin:$badso:no_causal_mask" --log noncausal_ok.tsv --allow-noncausal
grep -q "not causal weights" noncausal_ok.err || no "--allow-noncausal: no note"
# a window of W + 1 keys (the example's off-by-one kernel) puts weight on a key the window hides: refused too
run 5 win1 $T --steps 10 --window 4 --attn "plugin:$pdir/plugin_my_attention_window1.so" --log win1.tsv
grep -q "which the call hides (row 4 sees keys 1..4): a leak past the mask (its weights reach keys the mask hides: --allow-noncausal trains on anyway); nothing was written" win1.err ||
    no "window off by one: the refusal does not say what leaks: $(cat win1.err)"
nothing_written win1.tsv
run 0 win1_ok $T --steps 10 --window 4 --attn "plugin:$pdir/plugin_my_attention_window1.so" --log win1.tsv --allow-noncausal
[ "$(hdr win1.tsv attn_measured)" = no ] && [ "$(col win1.tsv ent_l0_h0 -1)" = nan ] ||
    no "--allow-noncausal: the header says attn_measured=$(hdr win1.tsv attn_measured) with entropy $(col win1.tsv ent_l0_h0 -1)"
# right for 40 calls, then leaking: the run stops at its next logged step
run 5 late $T --steps 60 --attn "plugin:$cat:leaks_late" --log late.tsv --save late.st --save-every 1000
tail -1 late.tsv | grep -q '^# failed: step [0-9]*: the attention kernel.s weights reach keys the mask hides' ||
    no "leaks_late: the log does not end with '# failed:': $(tail -1 late.tsv)"
[ ! -e late.st ] || no "leaks_late: a checkpoint was written after the leak was seen"
# a crash in the plugin: the log's last line says so; the next run on these files is not stopped by them
run 139 crash $T --steps 60 --attn "plugin:$cat:crashes_late" --log crash.tsv --save crash.st --save-every 10
tail -1 crash.tsv | grep -q "^# crashed: SIGSEGV at step [0-9]*: while training with the attention plugin .*plugin_catalogue.so:crashes_late (sha256 " ||
    no "crashes_late: the log's last line is not '# crashed:': $(tail -1 crash.tsv)"
[ -e crash.st ] || no "crashes_late: no checkpoint from before the crash"
ls -a | grep -q '\.tmp\|tmp\.' && no "crashes_late: a temporary file was left: $(ls -a | grep 'tmp')"
run 0 crash_resume $T --steps 35 --attn "plugin:$cat:crashes_late" --log crash.tsv --save crash.st --save-every 10 --resume crash.st
grep -q "^# crashed" crash.tsv && no "the resumed log still holds the '# crashed:' line"
run 0 after_crash $T --steps 20 --attn "plugin:$ok" --log crash.tsv --save crash.st --overwrite
# --on-nan skip, every step non-finite: nothing trained, so no success (exit 3), a few lines, not one per step
run 3 allnan $T --steps 30 --attn "plugin:$cat:nan_out" --on-nan skip --log allnan.tsv
grep -q "every one of the 30 steps was skipped for non-finite values: the model did not train" allnan.err ||
    no "--on-nan skip with every step NaN: not said: $(tail -2 allnan.err)"
[ "$(grep -c 'non-finite loss' allnan.err)" -le 10 ] || no "--on-nan skip: one stderr line per skipped step ($(grep -c 'non-finite loss' allnan.err))"
tail -1 allnan.tsv | grep -q "^# failed: every one of the 30 steps was skipped" || no "--on-nan skip: the log does not say it failed"
grep -q "final_loss=" allnan.out && no "--on-nan skip with nothing trained printed a summary line"
# most steps skipped (3 of 4 calls NaN): more than the stated half, so it fails too
run 3 often $T --steps 40 --attn "plugin:$cat:nan_often" --on-nan skip --log often.tsv
tail -1 often.tsv | grep -qE "^# failed: ([0-9]+ of the 40 steps \([0-9]+%\) were skipped for non-finite values, more than 50%|the last loss is nan)" ||
    no "--on-nan skip with 3 of 4 steps NaN: $(tail -1 often.tsv)"
# a right kernel with grouped heads and a window (it declares both): the built-in op's losses
run 0 gqa_win $T --steps 10 --kv-heads 1 --window 4 --attn "plugin:$ok" --log gqa_win.tsv
run 0 gqa_win_ref $T --steps 10 --kv-heads 1 --window 4 --log gqa_win_ref.tsv
for row in 1 -1; do
    awk -v a="$(col gqa_win.tsv loss $row)" -v b="$(col gqa_win_ref.tsv loss $row)" 'BEGIN { d = a - b; exit !(d < 1e-3 && d > -1e-3) }' ||
        no "plugin with --kv-heads 1 --window 4: loss $(col gqa_win.tsv loss $row) vs built-in $(col gqa_win_ref.tsv loss $row)"
done
run 0 forgets $T --steps 5 --attn "plugin:$badso:forgets_scale" --log forgets.tsv
[ "$(col forgets.tsv scale_l0_h0 1)" = 1 ] || no "forgets_scale (tg_attention with scale 1): measured $(col forgets.tsv scale_l0_h0 1), want 1"

# ---- the sweep tool ----------------------------------------------------------
"$sweep" plan sw --grid "attn=mine,composed seed=1" --plugin "mine=$noscale" --set steps=5 $(echo $T | sed 's/--\([a-z-]*\) \([0-9]*\)/--set \1=\2/g') \
    --bin "$bin" >plan.out 2>plan.err || no "sweep plan with --plugin failed: $(head -2 plan.err)"
grep -q "^attn-mine_seed-1	.*--attn plugin:$noscale" sw/manifest.tsv 2>/dev/null || no "sweep manifest lacks the plugin run: $(cat sw/manifest.tsv 2>/dev/null | head -2)"

# a plugin against the built-in op, end to end: names in the table and legend, --compare, --x attn
"$sweep" plan cmp --grid "attn=mine,composed seed=1" --plugin "mine=$noscale" --set steps=20 --set d-head=16 \
    $(echo $T | sed 's/--\([a-z-]*\) \([0-9]*\)/--set \1=\2/g; s/--set d-head=16//') --bin "$bin" >cmp_plan.out 2>&1 ||
    no "sweep plan (compare): $(tail -2 cmp_plan.out)"
"$sweep" plan cmp --grid "attn=mine seed=2" --plugin "mine=$ok" --set steps=20 --bin "$bin" >cmp_again.out 2>&1 &&
    no "sweep plan: a second meaning of the plugin name 'mine' was accepted"
grep -q "this sweep.s mine is plugin:$noscale, not plugin:$ok; nothing written" cmp_again.out || no "sweep plan: the clash of names not said: $(tail -1 cmp_again.out)"
if command -v parallel >/dev/null; then
    "$sweep" run cmp -j 2 --bin "$bin" >cmp_run.out 2>&1 || no "sweep run (compare): $(tail -3 cmp_run.out)"
    "$sweep" collect cmp --compare attn=mine:composed --x attn --panel optim >cmp_collect.out 2>&1 ||
        no "sweep collect --compare attn=mine:composed --x attn: $(tail -3 cmp_collect.out)"
    awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { print $c["attn"] }' cmp/summary.tsv | sort | tr '\n' ' ' |
        grep -qx "composed mine " || no "sweep summary: attn is not named mine/composed: $(cut -f1-3 cmp/summary.tsv | tail -2)"
    grep -q "plugin:" cmp/summary.tsv cmp/aggregate.tsv && no "sweep tables name a plugin by its path"
    if command -v gnuplot >/dev/null; then
        [ -s cmp/loss.png ] && [ -s cmp/entropy10.png ] || no "sweep collect --x attn: no figures"
    fi
else
    echo "plugin_cli: GNU parallel is missing: the sweep's compare run skipped"
fi
# the tables and plots of a run whose weights were not measured say so
unlog=crashes_dv.tsv
python3 "$(dirname "$sweep")/tglogs.py" summarize "$unlog" >un_sum.out 2>&1
grep -q "not measured" un_sum.out || no "summarize of an unmeasured plugin run: no 'not measured': $(tail -1 un_sum.out)"
if command -v gnuplot >/dev/null; then
    bash "$(dirname "$sweep")/plot.sh" "$unlog" ok.tsv -o un.png >un_plot.out 2>&1 || no "plot.sh on an unmeasured run failed: $(tail -2 un_plot.out)"
    grep -q "no heatmap: its entropy columns are nan" un_plot.out || no "plot.sh: the missing heatmap is not explained"
fi

echo "plugin_cli: $fails failures"
[ "$fails" -eq 0 ]
