#!/usr/bin/env bash
# Regenerates docs/data/attn_check/: the attn_check reports docs/attn_check.md quotes, from the
# built tree (scripts/test.sh builds it), OPENBLAS_CORETYPE unset, paths relative to the top.
#   scripts/attn_check_docs.sh            the reports (seconds)
#   scripts/attn_check_docs.sh --train    also my_attention_noscale --train 300 (about a minute)
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
bin=build/experiments/attn_check
[ -x "$bin" ] || { echo "scripts/attn_check_docs.sh: $bin is missing: build first (scripts/test.sh)" >&2; exit 2; }
out=docs/data/attn_check
mkdir -p "$out"
report() {   # report NAME KERNEL [FLAGS...]: attn_check's report (exit 1 is a finding, not a failure)
    local name=$1; shift
    local rc=0
    env -u OPENBLAS_CORETYPE "$bin" "$@" >"$out/$name.txt.tmp" 2>/dev/null || rc=$?
    [ $rc -le 1 ] || { echo "scripts/attn_check_docs.sh: attn_check $* exited $rc" >&2; rm -f "$out/$name.txt.tmp"; exit 1; }
    mv "$out/$name.txt.tmp" "$out/$name.txt"
}
report fused builtin:fused
report my_attention_noscale plugin:build/tests/plugin_my_attention_noscale.so
report my_attention_window1 plugin:build/tests/plugin_my_attention_window1.so
cat=build/tests/plugin_catalogue.so
for k in sqrt_inverse width_scale gqa_tile top_left; do report "$k" "plugin:$cat:$k"; done
report textbook_forgets_scale plugin:build/tests/plugin_bad.so:forgets_scale
# the ports of real model code (tests/ports): PyTorch for /usr/bin/python3 (scripts/test_torch.sh installs it)
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    export PYTHONPATH="$top/scripts/python"
    report port_gemma2 "exec:/usr/bin/python3 tests/ports/gemma2.py"
    report port_gemma2_mask_before_cap "exec:/usr/bin/python3 tests/ports/gemma2.py --mistake mask-before-cap"
    report port_llama_forget_scaling "exec:/usr/bin/python3 tests/ports/llama.py --mistake forget-scaling"
    # the code-completion models (0.21): each in fp32, bf16 and fp16, and its porting mistake in bf16
    for m in starcoder codegen gpt_neox t5 opt phi; do
        for p in fp32 bf16 fp16; do report "port_${m}_$p" "exec:/usr/bin/python3 tests/ports/$m.py --precision $p"; done
    done
    while read -r m mistake; do
        report "port_${m}_bf16_$mistake" "exec:/usr/bin/python3 tests/ports/$m.py --precision bf16 --mistake $mistake"
    done <<'MISTAKES'
starcoder drop-unscale
starcoder forget-scaling
codegen mask-top-left
gpt_neox causal-top-left
t5 rsqrt-d
opt scale-qk
phi hidden-size
phi view-heads
MISTAKES
else
    echo "scripts/attn_check_docs.sh: /usr/bin/python3 cannot import torch: the ports' reports are left as they are" >&2
fi
if [ "${1:-}" = --train ]; then
    report my_attention_noscale-train300 plugin:build/tests/plugin_my_attention_noscale.so --train 300
fi
echo "scripts/attn_check_docs.sh: wrote $out/"
