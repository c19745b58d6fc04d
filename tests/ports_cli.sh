#!/usr/bin/env bash
# The catalogue of real model code (tests/ports, docs/attn_check.md#ports-of-real-model-code): each port of a public
# model's eager attention passes attn_check with its conventions as info lines, and each of the
# two porting mistakes is named; attn_scale refuses, before writing anything, a run outside a
# port's conventions (nanoGPT's own scale under --scale none) and trains with GPT-OSS's port,
# which has no call without sinks, on a model without them. Skips (77) without torch.
#   ports_cli.sh ATTN_CHECK ATTN_SCALE SOURCE_DIR
set -uo pipefail
check=$1 scale=$2 src=$3
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || { echo "SKIP: $py cannot import torch (python3-torch; scripts/test_torch.sh installs it)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export PYTHONPATH="$src/scripts/python"
tag="ports_cli_$$"
cd "$tmp"
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
port() { echo "$py -X $tag $src/tests/ports/$1"; }

# port: conventions it must list
while read -r name conventions; do
    "$check" "exec:$(port "$name.py")" --d-head 8 --layers 0 >"$name.out" 2>"$name.err"; rc=$?
    [ $rc = 0 ] && grep -q "^verdict: the kernel conforms" "$name.out" || { no "$name: exit $rc"; grep -v '^ok\|^info' "$name.out" "$name.err" | head; }
    for c in ${conventions//,/ }; do
        grep -q "^info  convention  $c " "$name.out" || no "$name: no info line for its convention $c"
    done
    ! grep -q "^FAIL\|^CRASH" "$name.out" || no "$name: a failed line"
done <<'PORTS'
llama causal_only,no_head_scale,empty_mean
mistral causal_only,no_head_scale,window_causal,empty_mean
gemma2 causal_only,no_head_scale,window_causal,empty_mean
gpt_oss causal_only,no_head_scale,window_causal,sinks_always,empty_mean
bloom causal_only,no_head_scale,scale_rsqrt_d,alibi_causal,empty_mean
nanogpt causal_only,no_head_scale,scale_rsqrt_d
PORTS
grep -q "^info  padding     empty row   a row with no key (kv_len 0) gives the mean of v" llama.out || no "llama: the empty row's convention not reported"
grep -q "^ok    alibi       slopes" bloom.out || no "bloom: its one-sided ALiBi not checked under the causal mask"
grep -q "^ok    temperature d_head=8    c = 1.0000: softmax(q·k/√d_head) with its own multiplier" nanogpt.out ||
    no "nanogpt: its own scale not measured"

# the porting mistakes, each named (and nothing else failing but what follows from it)
"$check" "exec:$(port llama.py) --mistake forget-scaling" --d-head 8 >m1.out 2>&1; rc=$?
[ $rc = 1 ] && grep -q "^FAIL  temperature d_head=8    c = 2.83 = √8: the kernel ignores .scale. (softmax of the raw q·k, the seed's bug)" m1.out ||
    { no "llama without scaling: exit $rc, not named"; grep FAIL m1.out; }
! grep "^FAIL" m1.out | grep -v "temperature\|health\|forward" || no "llama without scaling: a failure that is not the scale's"
! grep -q "see the .* probe for what" m1.out || no "llama without scaling: a forward line points at a probe that passed"
"$check" "exec:$(port gemma2.py) --mistake mask-before-cap" --d-head 8 >m2.out 2>&1; rc=$?
[ $rc = 1 ] && grep -q "^FAIL  softcap     cap and mask hidden keys weigh e^-5 = .* the mask is added to the logits before the cap" m2.out ||
    { no "gemma2 with the mask before the cap: exit $rc, not named"; grep FAIL m2.out; }
[ "$(grep '^FAIL' m2.out | grep -vc '^FAIL  [a-z]* *L[0-9]')" = 2 ] || { no "gemma2 with the mask before the cap: other failures"; grep FAIL m2.out; }

# StarCoder (0.21): one kv head, a layer-dependent multiplier, in fp32, bf16 and fp16 (declared): each
# conforms at layers 0, 1 and 11; in bf16 its dropped fp32 unscale is named at layer 1 (c = 1/2), and
# its forgotten scale is the seed's bug with the collapse forecast
for p in fp32 bf16 fp16; do
    "$check" "exec:$(port starcoder.py) --precision $p" --d-head 8 >sc_$p.out 2>&1; rc=$?
    [ $rc = 0 ] && grep -q "^verdict: the kernel conforms" sc_$p.out || { no "starcoder $p: exit $rc"; grep "^FAIL\|^CRASH" sc_$p.out | head; }
    grep -q "^info  convention  mqa_only " sc_$p.out || no "starcoder $p: no info line for mqa_only"
    grep -q "^ok    temperature L11 d_head=8" sc_$p.out || no "starcoder $p: layer 11 not probed"
done
grep -q "^ok    forward     d_head=8    agrees with an exact attention .*(bf16: at most 2x a textbook" sc_bf16.out ||
    no "starcoder bf16: not judged by FlashAttention's rule"
"$check" "exec:$(port starcoder.py) --precision bf16 --mistake drop-unscale" --d-head 8 >m3.out 2>&1; rc=$?
[ $rc = 1 ] && grep -q "^FAIL  temperature L1 d_head=8 c = 0.500.: it follows .scale. but 2.00 times too cold" m3.out &&
    grep -q "^ok    temperature d_head=8 " m3.out || { no "starcoder bf16 without the unscale: exit $rc, not named"; grep FAIL m3.out | head -4; }
"$check" "exec:$(port starcoder.py) --precision bf16 --mistake forget-scaling" --d-head 8 >m4.out 2>&1; rc=$?
[ $rc = 1 ] && grep -q "^FAIL  temperature d_head=8    c = 2.83 = √8: the kernel ignores .scale. (softmax of the raw q·k, the seed's bug)" m4.out &&
    grep -q "^FAIL  health .*expect the collapse" m4.out || { no "starcoder bf16 without scaling: exit $rc, not named"; grep FAIL m4.out | head -4; }
# the code-completion models' ports (0.21), each in fp32, bf16 and fp16, its conventions as info lines (at
# layer 0: none of them computes by layer; StarCoder, which does, is probed at three above)
while read -r name conventions; do
    for p in fp32 bf16 fp16; do
        "$check" "exec:$(port "$name.py") --precision $p" --d-head 8 --layers 0 >"$name-$p.out" 2>&1; rc=$?
        [ $rc = 0 ] && grep -q "^verdict: the kernel conforms" "$name-$p.out" || { no "$name $p: exit $rc"; grep "^FAIL\|^CRASH" "$name-$p.out" | head -3; }
        for c in ${conventions//,/ }; do
            grep -q "^info  convention  $c " "$name-$p.out" || no "$name $p: no info line for its convention $c"
        done
    done
done <<'PORTS'
codegen causal_only,no_head_scale,empty_mean
gpt_neox causal_only,no_head_scale,empty_prefix
t5 no_head_scale,empty_mean,scale_folded
opt causal_only,no_head_scale,empty_mean
phi causal_only,no_head_scale,scale_rsqrt_d,empty_mean
PORTS
grep -q "^info  padding     empty row   a row with no key (kv_len 0) gives the mean of v over its causal prefix" gpt_neox-bf16.out ||
    no "gpt_neox: its empty rows (the causal prefix) not reported"
grep -q "^ok    temperature d_head=8    multiplier 1.000. on q·k: no scale, as declared (scale_folded" t5-fp16.out ||
    no "t5: its folded scale not measured"
grep -q "^ok    health .*assuming 1/√d_head folded into W_q's initialisation" t5-bf16.out || no "t5: the forecast does not say what it assumes"
# their porting mistakes, each named in fp32 and bf16
while read -r name mistake want; do
    for p in fp32 bf16; do
        "$check" "exec:$(port "$name.py") --precision $p --mistake $mistake" --d-head 8 --layers 0 >"m-$name-$p.out" 2>&1; rc=$?
        [ $rc = 1 ] && grep -q "$want" "m-$name-$p.out" || { no "$name $p --mistake $mistake: exit $rc, not named"; grep "^FAIL" "m-$name-$p.out" | head -4; }
        ! grep "^FAIL" "m-$name-$p.out" | grep -q "^FAIL  gradient" || no "$name $p --mistake $mistake: a gradient failure for a forward's mistake"
    done
done <<'MISTAKES'
codegen mask-top-left ^FAIL  alignment   Tq=1, Tk=8, causal query 0 sees key 0, not keys 0..7: causal mask aligned top-left
gpt_neox causal-top-left ^FAIL  alignment   Tq=3, Tk=8, causal query 0 sees key 0, not keys 0..5: causal mask aligned top-left
t5 rsqrt-d ^FAIL  temperature d_head=8    multiplier 0.353.* the kernel declares no scale (scale_folded) but applies one
opt scale-qk ^FAIL  temperature d_head=8    c = 0.35.*the scale is applied twice
phi hidden-size ^FAIL  temperature d_head=8    c = 0.57.*possibly c = 1/√H: scaled by the model width
phi view-heads ^FAIL  layout      T=8, H=2    query .* heads and positions swapped
MISTAKES

# declared fp32, a bf16 kernel fails with the cause named
sed -e 's/return attn(q, k, v,/return attn(q.bfloat16(), k.bfloat16(), v.bfloat16(),/' "$src/tests/ports/starcoder.py" >sc_undeclared.py
sed -e 's/precision=opt.precision,/precision="fp32",/' "$src/tests/ports/hf_masks.py" >hf_masks.py
grep -q 'precision="fp32",' hf_masks.py && grep -q "q.bfloat16()" sc_undeclared.py || no "the undeclared bf16 kernel was not made"
"$check" "exec:$py -X $tag $tmp/sc_undeclared.py --precision bf16" --d-head 8 --layers 0 >m5.out 2>&1; rc=$?
[ $rc = 1 ] && grep -q "^FAIL  forward     d_head=8 .*declare precision bf16" m5.out || { no "an undeclared bf16 kernel: exit $rc, cause not named"; grep FAIL m5.out | head -3; }

# the programs: refused before anything is written; a sinks_always kernel in a model without sinks
small=(--d-head 16 --heads 2 --d-model 32 --seq-len 16 --batch 8 --steps 5 --log-every 5 --warmup 1)
"$scale" "${small[@]}" --attn "exec:$(port nanogpt.py)" --scale none --log none.tsv >/dev/null 2>refused.err; rc=$?
[ $rc != 0 ] && grep -q "scale_rsqrt_d" refused.err && [ ! -e none.tsv ] ||
    { no "attn_scale --scale none with nanoGPT's own scale: exit $rc"; cat refused.err; ls; }
"$scale" "${small[@]}" --attn "exec:$(port gpt_oss.py)" --log oss.tsv >/dev/null 2>oss.err || { no "GPT-OSS's port without --sinks"; cat oss.err; }
# T5's folded scale (0.21): refused under --scale sqrt with the way out said; under --scale none the model
# folds 1/sqrt(d_head) into W_q's initialisation and logs it; StarCoder in bf16 trains with its heads measured
"$scale" "${small[@]}" --attn "exec:$(port t5.py)" --log t5sqrt.tsv >/dev/null 2>t5sqrt.err; rc=$?
[ $rc = 2 ] && grep -q "scale_folded.*runs with --scale none" t5sqrt.err && [ ! -e t5sqrt.tsv ] || { no "t5 under --scale sqrt: exit $rc"; cat t5sqrt.err; }
"$scale" "${small[@]}" --scale none --attn "exec:$(port t5.py) --precision bf16" --log t5.tsv >/dev/null 2>t5.err || { no "t5 --scale none"; cat t5.err; }
grep -q "^# qinit=fold$" t5.tsv && grep -q "^# qinit_factor=0.25 (.*the kernel declares scale_folded)" t5.tsv ||
    no "t5: the fold not in the log's header"
# the qk_mult columns start at the fold's 1/sqrt(16) = 0.25, as --scale none --qinit fold's with the built-in op
python3 - t5.tsv <<'PY' || no "t5: the effective multiplier does not start at 0.25"
import csv, sys
rows = [r for r in csv.DictReader((l for l in open(sys.argv[1]) if not l.startswith("#")), delimiter="\t")]
sys.exit(0 if abs(float(rows[0]["wq_growth_l0"]) - 0.25) < 1e-6 else 1)
PY
grep -q "^# attn_precision=bf16" t5.tsv || no "t5 bf16: the precision not in the log's header"
"$scale" "${small[@]}" --kv-heads 1 --attn "exec:$(port starcoder.py) --precision bf16" --log sc.tsv >/dev/null 2>sc.err || { no "starcoder bf16 training"; cat sc.err; }
python3 - sc.tsv <<'PY' || no "starcoder bf16: its heads' entropy not in the log"
import csv, math, sys
rows = [r for r in csv.DictReader((l for l in open(sys.argv[1]) if not l.startswith("#")), delimiter="\t")]
assert rows and all(math.isfinite(float(r["nent_l0_h0"])) and math.isfinite(float(r["nent_l0_h1"])) for r in rows), rows[:2]
PY

sleep 0.5
! pgrep -f -- "$tag" >/dev/null || { no "kernel processes left: $(pgrep -af -- "$tag")"; pkill -f -- "$tag"; }
[ $fails = 0 ] && echo "ports_cli: all checks passed"
exit $((fails > 0))
