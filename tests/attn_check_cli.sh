#!/bin/bash
# attn_check end to end: the built-in ops and the example's right kernel conform
# (exit 0); every kernel of tests/plugins/bad_kernels.c and the example's
# forgetful one is refused (exit 1) with its bug named; bad usage and a file that
# will not load exit 2; a hang and a crash are reported, not suffered.
#   tests/attn_check_cli.sh ATTN_CHECK OK.so NOSCALE.so BAD.so BAND.tsv
set -u
bin=$1 ok=$2 noscale=$3 badso=$4 band=$5
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
for k in composed fused; do check "$k" 0 "verdict: the kernel conforms" "builtin:$k"; done
check example_ok 0 "verdict: the kernel conforms" "plugin:$ok"
check plain_right 0 "verdict: the kernel conforms" "plugin:$badso:plain_right"
# the seed's bug, in the example's words and in tapegrad's op called with scale 1
check example_noscale 1 'c = 11.31 = √128: the kernel ignores `scale`' "plugin:$noscale"
grep -qF "outside the band 1/16 .. 1" example_noscale.out || no "example_noscale: no health forecast outside the band"
grep -qF "expect the collapse of docs/results.md#the-main-result" example_noscale.out || no "example_noscale: no collapse forecast"
check forgets_scale 1 'c = 11.31 = √128: the kernel ignores `scale`' "plugin:$badso:forgets_scale"
check divides_by_d 1 "c = 0.0884 = 1/√128: it divides by d_head" "plugin:$badso:divides_by_d"
check twice_too_warm 1 "c = 2.00: 2.00 times too warm" "plugin:$badso:twice_too_warm"
check own_sqrt 1 'c does not follow `scale`: the kernel computes its own 1/√d_head' "plugin:$badso:own_sqrt"
check no_causal_mask 1 "leak: row 0 depends on position 11, 11 later: no causal mask" "plugin:$badso:no_causal_mask"
check mask_off_by_one 1 "the mask is off by one (each row sees the next position)" "plugin:$badso:mask_off_by_one"
check mask_hides_diagonal 1 "row 0 does not see its own position" "plugin:$badso:mask_hides_diagonal"
check ignores_head_scale 1 "the kernel ignores head_scale" "plugin:$badso:ignores_head_scale"
check wrong_backward 1 "the backward is not the gradient of the forward for v" "plugin:$badso:wrong_backward"
grep -c '^FAIL' wrong_backward.out | grep -qx 1 || no "wrong_backward: more than the gradient of v failed: $(grep '^FAIL' wrong_backward.out)"
check nan_long_rows 1 "at T=256, not causal, without head_scale: a non-finite output" "plugin:$badso:nan_long_rows"
check needs_dv_eq_d 1 "it refused: needs_dv_eq_d: dv" "plugin:$badso:needs_dv_eq_d"
check crashes_dv 1 "the kernel crashed (Segmentation fault) in the forward probe" "plugin:$badso:crashes_dv"
check hangs_long 1 "the kernel hung: the forward probe got no answer within 2 s" "plugin:$badso:hangs_long" --d-head 8 --timeout 2
# one head size alone, and the TSV with a header row
check one_dhead 0 "" builtin:composed --d-head 32 --tsv
head -1 one_dhead.out | grep -qx "check	what	status	value	limit	text" || no "--tsv: no header row"
[ "$(grep -c 'd_head=' one_dhead.out)" -eq 3 ] || no "--d-head 32: want one forward, one temperature and the health line"
# the fused op stays under a tenth of the forward tolerance (the claim of tg_attn_check.h)
"$bin" builtin:fused --tsv >fused.tsv 2>/dev/null
awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["check"] == "forward" && !($c["value"] < $c["limit"] / 10) { bad = 1 }
    END { exit bad }' fused.tsv || no "fused: a forward error above a tenth of the limit: $(grep '^forward' fused.tsv)"
# the band attn_check forecasts with is the one the docs measured (AdamW, d_head 128)
[ "$(awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["optim"] == "adam" && $c["d_head"] == 128 { print $c["band_lo"], $c["band_hi"] }' "$band")" = "0.0625 1" ] ||
    no "docs/data/science-map-band.tsv's band at d_head 128 is not 1/16 .. 1: update TG_BAND_* in experiments/train/attn_check.c"
# --train: the toy model side by side (tiny: d_head 16, 20 steps)
check train_ok 0 "ok, it trains like tg_attention" "plugin:$ok" --d-head 16 --train 20
grep -q "^--train 20: attn_scale's default model (hist, d_head 16, seed 1)" train_ok.out || no "--train: no side-by-side table"
# usage and loading
check nokernel 2 "no KERNEL" --d-head 8
check badbuiltin 2 "the built-in ops are builtin:composed and builtin:fused" builtin:flash
check missing 2 "plugin nosuch.so: No such file" plugin:nosuch.so
echo "attn_check_cli: $fails failures"
[ "$fails" -eq 0 ]
