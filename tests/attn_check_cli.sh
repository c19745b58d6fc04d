#!/bin/bash
# attn_check end to end: the built-in ops and the example's right kernel conform
# (exit 0); every kernel of tests/plugins/bad_kernels.c and the example's
# forgetful one is refused (exit 1) with its bug named; bad usage and a file that
# will not load exit 2; a hang and a crash are reported, not suffered.
# The catalogue (tests/plugins/catalogue.c, ABI 2): one wrong kernel per bug class
# of every feature, each named in its words; its `right` kernel passes every check
# of every feature; a kernel at c = d_head gets a right mask verdict.
#   tests/attn_check_cli.sh ATTN_CHECK OK.so NOSCALE.so BAD.so BAND.tsv CATALOGUE.so WINDOW1.so
set -u
bin=$1 ok=$2 noscale=$3 badso=$4 band=$5 cat=$6 win1=$7
. "$(dirname "$0")/cli_util.sh"
check() {   # check NAME WANT_RC PHRASE KERNEL [FLAGS...]: the exit status and a phrase of the report
    local name=$1 want=$2 phrase=$3
    shift 3
    "$bin" "$@" >"$name.out" 2>"$name.err"
    local rc=$?
    [ $rc -eq "$want" ] || { no "$name: exit $rc, want $want"; sed 's/^/  | /' "$name.out" "$name.err" | head -8; }
    [ -z "$phrase" ] || grep -qF -- "$phrase" "$name.out" "$name.err" ||
        { no "$name: the report lacks '$phrase'"; sed 's/^/  | /' "$name.out" | head -12; }
}
for k in composed fused; do check "$k" 0 "verdict: the kernel conforms" "builtin:$k" --layers 0; done
check example_ok 0 "verdict: the kernel conforms" "plugin:$ok" --layers 0
check plain_right 0 "verdict: the kernel conforms" "plugin:$badso:plain_right" --layers 0
# the seed's bug, in the example's words and in tapegrad's op called with scale 1
check example_noscale 1 'c = 11.31 = √128: the kernel ignores `scale`' "plugin:$noscale" --layers 0
grep -qF "outside the band 1/16 .. 1" example_noscale.out || no "example_noscale: no health forecast outside the band"
grep -qF "expect the collapse of docs/results.md#the-main-result" example_noscale.out || no "example_noscale: no collapse forecast"
check forgets_scale 1 'c = 11.31 = √128: the kernel ignores `scale`' "plugin:$badso:forgets_scale" --layers 0
check divides_by_d 1 "to q·k (the same at twice the scale): its own 1/d_head; possibly c = 1/√d_head: divided by d_head, or the scale applied twice" "plugin:$badso:divides_by_d" --layers 0
grep -qF 'c = 0.08839: the kernel ignores `scale`' divides_by_d.out || no "divides_by_d: c at d_head 128 is not 0.08839"
check twice_too_warm 1 "c = 2: it follows \`scale\` but 2.00 times too warm" "plugin:$badso:twice_too_warm" --layers 0
check own_sqrt 1 'the kernel ignores `scale` and applies its own multiplier 0.08839 to q·k (the same at twice the scale): its own 1/√d_head, right at this scale only' "plugin:$badso:own_sqrt" --layers 0
check no_causal_mask 1 "row 0 of head 0 sees keys 0..11, not key 0: no causal mask" "plugin:$badso:no_causal_mask" --layers 0
check mask_off_by_one 1 "sees keys 0..1, not key 0: the mask is off by one (each row sees the next position)" "plugin:$badso:mask_off_by_one" --layers 0
check mask_hides_diagonal 1 "the mask hides the diagonal (off by one): row 0 does not see its own position" "plugin:$badso:mask_hides_diagonal" --layers 0
for k in no_causal_mask mask_off_by_one mask_hides_diagonal; do   # a mask's bug is named by the mask probe, not the temperature's
    grep -q '^FAIL  temperature' $k.out && no "$k: the temperature probe fails too: $(grep -m1 '^FAIL  temperature' $k.out)"
done
grep -qF "info  features    declared    dv != d; not declared" forgets_scale.out || no "a textbook kernel's features line: $(grep -m1 features forgets_scale.out)"
check abi1 2 "declares plugin ABI 1 (a tg_attention_fn and TG_ATTENTION_PLUGIN_DECLARE, tapegrad 0.12's), which tapegrad 0.20 no longer loads" "plugin:$(dirname "$badso")/plugin_abi1_hidden.so"
check ignores_head_scale 1 "the kernel ignores head_scale" "plugin:$badso:ignores_head_scale" --layers 0
check wrong_backward 1 "the backward is not the gradient of the forward for v" "plugin:$badso:wrong_backward" --layers 0
grep -c '^FAIL' wrong_backward.out | grep -qx 1 || no "wrong_backward: more than the gradient of v failed: $(grep '^FAIL' wrong_backward.out)"
check nan_long_rows 1 "at T=256, not causal, without head_scale: a non-finite output" "plugin:$badso:nan_long_rows" --layers 0
check needs_dv_eq_d 1 "it refused: needs_dv_eq_d: dv" "plugin:$badso:needs_dv_eq_d" --layers 0
check crashes_dv 1 "the kernel crashed (Segmentation fault) in the forward probe" "plugin:$badso:crashes_dv" --layers 0
check hangs_long 1 "the kernel hung: the forward probe got no answer within 2 s" "plugin:$badso:hangs_long" --d-head 8 --timeout 2 --layers 0
# ---- the catalogue: every feature's bugs, by name ----------------------------------------------
# (the wrong kernels and the built-in ops at layer 0 alone: they do not compute by layer; the catalogue's
# right kernel at the default three)
for k in composed fused; do grep -q "^info  features    declared    dv != d, grouped heads, Tq != Tk, window, padding, bias, alibi, softcap, sinks, dropout; not declared (not checked, and never called with them): none" $k.out ||
    no "builtin:$k: the features line does not list every feature"; done
check right 0 "verdict: the kernel conforms (91 checks)" "plugin:$cat:right"
check example_window1 1 "row 128 sees keys 0..128, not keys 1..128: sees 129 keys, the window asks for 128 (left = 127): off by one" "plugin:$win1" --layers 0
grep '^FAIL' example_window1.out | grep -vc '^FAIL  [a-z]* *L[0-9]' | grep -qx 3 || no "example_window1: more than the window failed: $(grep '^FAIL' example_window1.out)"
c() { check "$1" 1 "$2" "plugin:$cat:$1" --layers 0; }   # the catalogue's bugs do not depend on the layer
# precision (0.21): a kernel in bf16, declared, conforms by FlashAttention's rule; undeclared, its cause is named
check bf16_right 0 "verdict: the kernel conforms" "plugin:$cat:bf16_right" --layers 0
grep -q "^attn_check plugin:.*ABI 2: dv != d; precision bf16" bf16_right.out || no "bf16_right: the precision not in the header line"
grep -q "^ok    forward     d_head=128  agrees with an exact attention .*(bf16: at most 2x a textbook" bf16_right.out ||
    no "bf16_right: the forward not judged in bf16"
grep -q "^ok    gradient    d/d q, k, v worst error/limit .* against the exact gradients (bf16" bf16_right.out ||
    no "bf16_right: the gradients not judged analytically"
c bf16_undeclared "differs by about bf16's rounding: declare precision bf16 if the kernel computes in it"
c sqrt_inverse 'c = 128: the kernel follows `scale` inversely (half the multiplier at twice the scale): it divides by `scale` instead of multiplying; possibly c = d_head: multiplied by √d_head instead of divided (the exponent'"'"'s sign flipped)'
grep -q "^ok    mask        causal " sqrt_inverse.out || no "sqrt_inverse (c = d_head, saturated rows): the mask verdict is not right: $(grep ' mask ' sqrt_inverse.out)"
grep -q "^ok    mask        not causal " sqrt_inverse.out || no "sqrt_inverse: the non-causal mask verdict is not right"
c width_scale 'c = 0.5774: the kernel ignores `scale` and applies its own multiplier 0.05103 to q·k (the same at twice the scale); possibly c = 1/√H: scaled by the model width H·d_head, not the head'"'"'s d_head'
c scale_twice 'c = 0.08839: the multiplier grows as scale² (4 times at twice the scale): the scale is applied twice; possibly c = 1/√d_head: divided by d_head, or the scale applied twice'
c gqa_tile "query head 1 reads kv head 1, not 0: tile order (h mod Hkv) instead of repeat_interleave (h / group) (reads 0 1 0 1)"
c top_left "query 0 sees key 0, not keys 0..7: causal mask aligned top-left: a decoding step with a KV cache sees only the first key"
c window_plus_one "sees 129 keys, the window asks for 128 (left = 127): off by one"
c window_two_sided "row 0 sees keys 0..127, not key 0: also sees up to 127 keys ahead: a two-sided window"
c window_ignored "sees every key up to its own: the window is ignored"
c padding_leak "row 0 of batch 0 (kv_len 5) sees keys 0..7: keys past kv_len leak"
c padding_nan "a row that sees no key (kv_len 0) gives NaN instead of 0"
c bias_scaled "the bias enters the logits times 0.25 = the softmax scale: it is added before the scale, not after"
c bias_head0 "head 1 gets head 0's bias"
c alibi_flipped "slopes measured -0.5 -0.25 -0.125, given 0.5 0.25 0.125: the sign is flipped"
c alibi_reversed "the heads' slopes in reverse order"
c alibi_scaled "the slopes are multiplied by the softmax scale"
c cap_before_scale "the cap is applied before the scale: logits capped to ±2.5 = scale · cap, not ±5"
c cap_ignored "no cap: 14 of 15 keys get weight 0"
c mask_before_cap "hidden keys weigh e^-5 = 0.00674 of a seen key"
grep -q "^ok    softcap     cap 5 " mask_before_cap.out || no "mask_before_cap: the cap itself is not judged right"
grep -q "^ok    mask " mask_before_cap.out || no "mask_before_cap: without a cap its mask is right, yet the mask probe failed"
c sinks_ignored "the rows sum to 1, the sink is ignored"
c sinks_base2 "σ·ln 2: the sink is taken in base 2 (2^σ), the keys in base e"
c sinks_numerator "above 1: the sink's e^σ is added to the keys' weights (the numerator), not only to the denominator"
grep -q "the sink is ignored" sinks_numerator.out && no "sinks_numerator: the false cause 'the sink is ignored'"
c window_right_from_left "a (3, 3) window: the right bound is taken from the left one"
c padding_on_queries "kv_len masks the queries, not the keys"
c alibi_one_sided "the logits get +slope·j (the key's position), BLOOM's one-sided ramp, equal to ALiBi only under a causal mask (declare alibi_causal"
grep -q "the sign is flipped" alibi_one_sided.out && no "alibi_one_sided: the false cause 'the sign is flipped'"
check bloom_alibi 0 "verdict: the kernel conforms" "plugin:$cat:bloom_alibi" --layers 0
grep -q "^info  convention  alibi_causal declared: ALiBi under a causal mask only" bloom_alibi.out || no "bloom_alibi: its convention is not an info line"
grep -q "conventions: ALiBi under a causal mask only" bloom_alibi.out || no "bloom_alibi: the plugin's description does not list its conventions"
c dropout_no_rescale "kept weights are scaled by 1, not 1/(1 − p) = 1.33: no rescale"
c dropout_fresh_mask "two calls with one dropout_seed drop different weights"
grep -q "^info  gradient    with dropout not judged apart: the dropout probe failed .*does the backward use the forward.s mask" dropout_fresh_mask.out ||
    no "dropout_fresh_mask: the gradient at a fixed seed is not deferred to the dropout probe that named the cause"
c dropout_seed_ignored "dropout_seed 7 and 8 drop the same weights"
c no_softmax "every row weighs its keys 0 with equal logits: not a softmax"
c mask_after_softmax "sums to 0.0833333 = 1/12 with equal logits: the mask is applied after the softmax (each seen key keeps 1/12 of all keys, not renormalised)"
# a wrong temperature fails the temperature (and forward, health) alone: every feature's probe holds at any multiplier
for k in sqrt_inverse width_scale scale_twice; do
    other=$(grep '^FAIL' $k.out | grep -v "^FAIL  temperature \|^FAIL  forward \|^FAIL  health " | head -1)
    [ -z "$other" ] || no "$k: a probe of a feature fails on a kernel whose only bug is its temperature: $other"
done
# each feature's bug fails its own probe and not another feature's (the forward line of the feature aside)
for k in top_left:alignment window_plus_one:window window_right_from_left:window padding_leak:padding padding_on_queries:padding bias_scaled:bias alibi_flipped:alibi alibi_one_sided:alibi cap_before_scale:softcap sinks_ignored:sinks sinks_base2:sinks dropout_no_rescale:dropout; do
    name=${k%%:*} probe=${k#*:}
    other=$(grep '^FAIL' $name.out | grep -v "^FAIL  $probe \|^FAIL  forward \|^FAIL  gradient    with " | head -1)
    [ -z "$other" ] || no "$name: a probe other than $probe fails: $other"
done

# one head size alone, and the TSV with a header row
check one_dhead 0 "" builtin:composed --d-head 32 --tsv
head -1 one_dhead.out | grep -qx "check	what	status	value	limit	text" || no "--tsv: no header row"
[ "$(grep 'd_head=' one_dhead.out | grep -vc 'L[0-9]* d_head=')" -eq 3 ] || no "--d-head 32: want one forward, one temperature and the health line"

# the fused op stays under a tenth of the forward tolerance (the claim of tg_attn_check.h)
"$bin" builtin:fused --tsv >fused.tsv 2>/dev/null
awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["check"] == "forward" && !($c["value"] < $c["limit"] / 10) { bad = 1 }
    END { exit bad }' fused.tsv || no "fused: a forward error above a tenth of the limit: $(grep '^forward' fused.tsv)"
# the band attn_check forecasts with is the one the docs measured (AdamW, d_head 128)
[ "$(awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["optim"] == "adam" && $c["d_head"] == 128 { print $c["band_lo"], $c["band_hi"] }' "$band")" = "0.0625 1" ] ||
    no "docs/data/science-map-band.tsv's band at d_head 128 is not 1/16 .. 1: update TG_BAND_* in experiments/libtapegrad_attn/probes_health.c"
# the forecast under a cap (issue 39): a kernel that forgets the scale and caps its logits, judged against the
# map under caps as docs/data holds it (the cell at c = √128 of that cap: reached by every seed or not; the
# forgotten scale's mean gap to sqrt without a cap), and a cap the map lacks falls back to the band
data=$(dirname "$band")
for cap in 50 30 10 5; do
    "$bin" "plugin:$cat:forgets_scale_capped" --d-head 128 --softcap $cap >capped_$cap.out 2>/dev/null
    want=$(python3 - "$data" $cap <<'PY'
import csv, sys
d, cap = sys.argv[1], float(sys.argv[2])
cell = [r for r in csv.DictReader(open(d + "/science-capmap-cells.tsv"), delimiter="\t")
        if float(r["softcap"]) == cap and r["none"] == "1"][0]
gaps = [float(r["gap_vs_c1_nocap"]) for r in csv.DictReader(open(d + "/science-capmap-gaps.tsv"), delimiter="\t")
        if r["softcap"] != "none" and float(r["softcap"]) == cap]
print("under cap %g: the counting task's map cell c = 11.3 %s as well as c = 1 there" %
      (cap, "trains" if cell["reached"] == cell["seeds"] else "does not train"))
print("(c = √128 ends %+.3f nats from uncapped sqrt)" % (sum(gaps) / len(gaps)))
code = {r["feature"]: r for r in csv.DictReader(open(d + "/science-capcode-table.tsv"), delimiter="\t")}
if "cap %g" % cap in code:   # none at the cap against sqrt without one, validation loss (means over the same seeds)
    gap = float(code["cap %g" % cap]["none_val"]) - float(code["no cap"]["sqrt_val"])
    print("on code it costs %+.3f nats" % gap)
    print("FAIL  health" if gap >= 0.05 else "ok    health")   # a cap that saves the toy task alone is no cure
PY
)
    while IFS= read -r phrase; do
        grep ' health ' capped_$cap.out | grep -qF "$phrase" || no "forgets_scale_capped --softcap $cap: the health line lacks '$phrase' (docs/data/science-capmap-*.tsv against cap_map in attn_checker.c): $(grep health capped_$cap.out)"
    done <<<"$want"
done
# under a cap the health line measures the capped logits (issue 57): the largest logit is C·tanh(x/C), at most C
for cap in 10 5; do
    python3 - capped_$cap.out $cap <<'PY' || no "--softcap $cap: the health line's logits are not capped: $(grep health capped_$cap.out)"
import re, sys
line = next(l for l in open(sys.argv[1]) if l[6:12] == "health")
m = re.search(r"causal, capped\): entropy/uniform ([0-9.]+) .*largest logit ([0-9.]+) ", line)
sys.exit(0 if m and float(m.group(2)) <= float(sys.argv[2]) and float(m.group(1)) > 0.2 else 1)   # uncapped: 48.6, 0.110
PY
done
"$bin" "plugin:$noscale" --softcap 10 >nocap.out 2>/dev/null
grep -q "^FAIL  health .*not capped: the kernel does not declare softcap, so no run caps it).*outside the band" nocap.out ||
    no "--softcap with a kernel that cannot cap: $(grep health nocap.out)"
# a kernel named by its file: the spelling that runs it; a second KERNEL: one only
printf 'pass\n' >k.py; : >k.so
check file_py 2 "'k.py' is a file: name the kernel in it as exec:'python3 k.py'" k.py
check file_so 2 "'k.so' is a file: name the kernel in it as plugin:k.so" k.so
check two_kernels 2 "attn_check takes one KERNEL (a command with arguments in quotes" composed fused
"$bin" "plugin:$cat:forgets_scale_capped" --d-head 128 --softcap 20 >capped_20.out 2>/dev/null
grep -q "^FAIL  health .*outside the band 1/16 .. 1 that trains as well as c = 1 (without a cap: the map under caps has no cap 20" capped_20.out ||
    no "--softcap 20 (not in the map): not judged against the band: $(grep health capped_20.out)"
# --train: the toy model side by side (tiny: d_head 16, 20 steps)
check train_ok 0 "ok, it trains like tg_attention" "plugin:$ok" --d-head 16 --train 20
grep -q "^--train 20: attn_scale's default model (hist, d_head 16, seed 1)" train_ok.out || no "--train: no side-by-side table"
# --train with the features the kernel declares; refused for one it does not
check train_win 0 "ok, it trains like tg_attention" "plugin:$ok" --d-head 16 --train 20 --window 8 --kv-heads 1
grep -q "^--train 20: attn_scale's default model (hist, d_head 16, seed 1, --window 8, --kv-heads 1)" train_win.out ||
    no "--train --window 8 --kv-heads 1: the table does not say so"
check train_nowin 2 "--train: --window needs window, which the plugin $cat:textbook_only does not declare (ABI 2: dv != d)" "plugin:$cat:textbook_only" --train 20 --window 8
# --train's verdict is the main result's: a kernel that forgets the scale is not "ok" when its loss is
# within 3x but its heads collapse (issue 38: "ok" at 1.38 vs 0.86 with heads at 0.018 of uniform)
check train_noscale 1 "FAIL, it trains worse than tg_attention by more than 0.25 nats and its heads collapse" \
    "plugin:$noscale" --d-head 128 --train 60
grep -q "^train: final loss .* heads' entropy at 10% of the run 0\.0[0-9]* vs 0\.[4-9]" train_noscale.out ||
    no "--train: the heads' entropy at 10% of the run is not said: $(tail -1 train_noscale.out)"
grep -q "ok, it trains like" train_noscale.out && no "--train says ok for a kernel that forgets the scale"
# every attention flag attn_scale has, each gated on what the kernel declares
check train_feats 0 "ok, it trains like tg_attention" "plugin:$cat:right" --d-head 16 --train 20 --bias table --alibi \
    --softcap 5 --sinks --attn-dropout 0.1
grep -q "^--train 20: attn_scale's default model (hist, d_head 16, seed 1, --bias table, --alibi, --softcap 5, --sinks, --attn-dropout 0.1)" \
    train_feats.out || no "--train with the logits' flags: the table does not say so: $(grep '^--train' train_feats.out)"
check train_nosinks 2 "--train: --sinks needs sinks, which the plugin $cat:textbook_only does not declare (ABI 2: dv != d)" "plugin:$cat:textbook_only" --train 20 --sinks
# the library decides nothing about files on its own: attn_check (which does not ask for a measured product plan)
# leaves no plan file and no folder in HOME's cache, TG_PLAN unset
mkdir -p home
env -u TG_PLAN -u TG_PLAN_DIR -u XDG_CACHE_HOME HOME="$PWD/home" "$bin" builtin:composed --d-head 8 >home.out 2>&1 ||
    no "attn_check with TG_PLAN unset: $(tail -2 home.out)"
[ -z "$(ls -A home)" ] || no "attn_check wrote into HOME on its own: $(find home | head -3)"
# usage and loading
check nokernel 2 "no KERNEL" --d-head 8
check badbuiltin 2 "the built-in ops are builtin:saved and builtin:online (builtin:composed and builtin:fused: their names before 0.20)" builtin:flash
check missing 2 "plugin nosuch.so: No such file" plugin:nosuch.so
echo "attn_check_cli: $fails failures"
[ "$fails" -eq 0 ]
