#!/usr/bin/env bash
# Same reports, two builds: attn_check's report (stdout, stderr, exit status) on every kernel of the
# plugin catalogue (tests/plugins: catalogue.c, bad_kernels.c, the loading cases, the C++ kernel),
# the example's kernels (examples/my_attention), the built-in ops, the exec protocol's kernels
# (tests/exec_protocol_test.py, the C kernel tests/exec_kernel.c) and, where /usr/bin/python3 has
# torch, the ports of public models (tests/ports, with their porting mistakes) and
# examples/torch_attention; some with --d-head 128, --tsv, --softcap or --train. For a refactor that
# must not change a verdict: a build of the last release against this one, both run on the same
# plugin files (the OLD build's, so a plugin built against the old headers is what the new one loads).
#   scripts/same_reports.sh OLD_BUILD NEW_BUILD        (build folders: bin in experiments/, plugins in tests/)
#   QUICK=1 scripts/same_reports.sh ...                 (no --train, no --d-head 128 runs)
# Exit 0 when every report is the same, 1 when one differs (the diff is shown).
set -u
[ $# -eq 2 ] && [ -x "$1/experiments/attn_check" ] && [ -x "$2/experiments/attn_check" ] ||
    { echo "usage: scripts/same_reports.sh OLD_BUILD NEW_BUILD (each with experiments/attn_check)" >&2; exit 2; }
old=$(realpath "$1") new=$(realpath "$2") top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
p=$old/tests
kernels=(builtin:composed builtin:fused)
symbols() { nm -D --defined-only "$1" | awk -v pre="$2" '$2 ~ /^[TDRB]$/ && index($3, pre) == 1 { print substr($3, length(pre) + 1) }'; }
for s in $(symbols "$p/plugin_catalogue.so" tg_attn_plugin_); do kernels+=("plugin:$p/plugin_catalogue.so:$s"); done
for s in $(symbols "$p/plugin_bad.so" ""); do
    case $s in tg_*|_*) ;; *) kernels+=("plugin:$p/plugin_bad.so:$s") ;; esac
done
for f in my_attention my_attention_noscale my_attention_window1 cxx hidden abi1_hidden none abi3 long; do
    [ -e "$p/plugin_$f.so" ] && kernels+=("plugin:$p/plugin_$f.so")
done
kernels+=("plugin:$p/plugin_long.so:$(symbols "$p/plugin_long.so" tg_attn_plugin_ | head -1)")
ek="python3 $top/tests/exec_protocol_test.py --serve"
kernels+=("exec:$ek" "exec:$ek --noscale" "exec:$ek --features gqa,window" "exec:$old/tests/exec_kernel"
          "exec:$old/tests/exec_kernel --noscale")
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    for f in "$top"/tests/ports/*.py; do
        case $f in */hf_masks.py) continue ;; esac
        kernels+=("exec:/usr/bin/python3 $f")
    done
    kernels+=("exec:/usr/bin/python3 $top/tests/ports/llama.py --mistake forget-scaling"
              "exec:/usr/bin/python3 $top/tests/ports/gemma2.py --mistake mask-before-cap")
    for f in "$top"/examples/torch_attention/*.py; do kernels+=("exec:/usr/bin/python3 $f"); done
else
    echo "note: /usr/bin/python3 has no torch: the ports and examples/torch_attention are not compared" >&2
fi
# kernel|flags: the runs beyond the default flags
extra=("builtin:composed|--tsv" "plugin:$p/plugin_catalogue.so:gqa_tile|--tsv" "builtin:fused|--softcap 30"
       "plugin:$p/plugin_catalogue.so:width_scale|--softcap 10")
if [ -z "${QUICK:-}" ]; then
    extra+=("plugin:$p/plugin_my_attention_noscale.so|--d-head 128" "exec:$ek --noscale|--d-head 128"
            "plugin:$p/plugin_my_attention_noscale.so|--train 60" "exec:$ek|--d-head 16 --train 30"
            "plugin:$p/plugin_my_attention.so|--d-head 16 --train 30 --window 8")
fi
runs=()
for k in "${kernels[@]}"; do runs+=("$k|--d-head 8"); done
runs+=("${extra[@]}")
bad=0
for i in "${!runs[@]}"; do
    kernel=${runs[$i]%%|*} flags=${runs[$i]#*|}
    for v in old new; do   # the two side by side (a core each)
        d=$work/$v-$i
        mkdir "$d"
        bin=$old/experiments/attn_check
        [ $v = new ] && bin=$new/experiments/attn_check
        # shellcheck disable=SC2086
        (cd "$d" && TG_PLAN=estimate OPENBLAS_NUM_THREADS=1 "$bin" "$kernel" $flags >stdout 2>stderr; echo "exit $?" >>stdout) &
    done
    wait
    if diff -r "$work/old-$i" "$work/new-$i" >"$work/diff"; then
        echo "same: $kernel $flags"
    else
        echo "DIFFERENT: $kernel $flags"
        head -20 "$work/diff"
        bad=1
    fi
done
exit $bad
