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
    "$check" "exec:$(port "$name.py")" --d-head 8 >"$name.out" 2>"$name.err"; rc=$?
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
[ "$(grep -c '^FAIL' m2.out)" = 2 ] || { no "gemma2 with the mask before the cap: other failures"; grep FAIL m2.out; }

# the programs: refused before anything is written; a sinks_always kernel in a model without sinks
small=(--d-head 16 --heads 2 --d-model 32 --seq-len 16 --batch 8 --steps 5 --log-every 5 --warmup 1)
"$scale" "${small[@]}" --attn "exec:$(port nanogpt.py)" --scale none --log none.tsv >/dev/null 2>refused.err; rc=$?
[ $rc != 0 ] && grep -q "scale_rsqrt_d" refused.err && [ ! -e none.tsv ] ||
    { no "attn_scale --scale none with nanoGPT's own scale: exit $rc"; cat refused.err; ls; }
"$scale" "${small[@]}" --attn "exec:$(port gpt_oss.py)" --log oss.tsv >/dev/null 2>oss.err || { no "GPT-OSS's port without --sinks"; cat oss.err; }

sleep 0.5
! pgrep -f -- "$tag" >/dev/null || { no "kernel processes left: $(pgrep -af -- "$tag")"; pkill -f -- "$tag"; }
[ $fails = 0 ] && echo "ports_cli: all checks passed"
exit $((fails > 0))
