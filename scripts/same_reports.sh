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
# On purpose since 0.20: a plugin of ABI 1 (plugin_bad.so's textbook kernels, plugin_abi1_hidden.so)
# is refused by the new build, which the script checks; plugin_bad.so's kernels, rebuilt as ABI 2 in
# the new build's tests/, must then give the old report but for its first line and its features line.
# A plugin that does not load is told so in words that no longer offer ABI 1: the old build's message
# with those words taken out ("and no ABI declaration (ABI 1: ...)", "(and ABI 1)") must be the new's.
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
            "plugin:$p/plugin_my_attention_noscale.so|--train 60" "exec:$old/tests/exec_kernel|--d-head 16 --train 30"
            "plugin:$p/plugin_my_attention.so|--d-head 16 --train 30 --window 8")
fi
runs=()
for k in "${kernels[@]}"; do runs+=("$k|--d-head 8"); done
runs+=("${extra[@]}")
bad=0
# the old report of an ABI 1 kernel against the new build's refusal, and against its ABI 2 rebuild
abi1() {   # abi1 DIR (holding old/, new/ and, for plugin_bad.so, new2/)
    if ! grep -q "ABI 1" "$1/old/stdout" || ! grep -q "which tapegrad 0.20 no longer loads" "$1/new/stderr" ||
        ! grep -q "^exit 2$" "$1/new/stdout"; then return 1; fi
    [ -d "$1/new2" ] || return 0
    for v in old new2; do grep -v '^attn_check \|^info  features ' "$1/$v/stdout" >"$1/$v.body"; done
    cmp -s "$1/old.body" "$1/new2.body" && cmp -s "$1/old/stderr" "$1/new2/stderr"
}
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
    if [[ "$kernel" == plugin:$p/plugin_bad.so:* ]]; then   # its ABI 2 rebuild, in the new build's tests/
        d=$work/new2-$i
        mkdir "$d"
        # shellcheck disable=SC2086
        (cd "$d" && TG_PLAN=estimate OPENBLAS_NUM_THREADS=1 "$new/experiments/attn_check" \
            "plugin:$new/tests/plugin_bad.so:${kernel##*:}" $flags >stdout 2>stderr; echo "exit $?" >>stdout)
    fi
    sed 's/ and no ABI declaration (ABI 1: TG_ATTENTION_PLUGIN_DECLARE)//; s/this program takes ABI 2 (and ABI 1)/this program takes ABI 2/' \
        "$work/old-$i/stderr" >"$work/old-$i.stderr"
    if diff -r "$work/old-$i" "$work/new-$i" >"$work/diff"; then
        echo "same: $kernel $flags"
    elif ! cmp -s "$work/old-$i/stderr" "$work/old-$i.stderr" && cmp -s "$work/old-$i.stderr" "$work/new-$i/stderr" &&
        cmp -s "$work/old-$i/stdout" "$work/new-$i/stdout"; then
        echo "same but the ABI 1 alternative left out of its message: $kernel $flags"
    elif mkdir -p "$work/abi1-$i" && cp -r "$work/old-$i" "$work/abi1-$i/old" && cp -r "$work/new-$i" "$work/abi1-$i/new" &&
        { [ ! -d "$work/new2-$i" ] || cp -r "$work/new2-$i" "$work/abi1-$i/new2"; } && abi1 "$work/abi1-$i"; then
        if [ -d "$work/new2-$i" ]; then
            echo "refused on purpose (ABI 1); its ABI 2 rebuild the same but the first and features lines: $kernel $flags"
        else
            echo "refused on purpose (ABI 1): $kernel $flags"
        fi
    else
        echo "DIFFERENT: $kernel $flags"
        head -20 "$work/diff"
        bad=1
    fi
done
exit $bad
