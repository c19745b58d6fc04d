#!/usr/bin/env bash
# Builds the two kernels, checks their gradients, then trains the toy model of
# attn_scale three ways on the same seeds: the built-in op (tapegrad's
# tg_attention), my_attention.so (applies `scale`) and my_attention_noscale.so
# (forgets it: the seed's bug), and plots loss and per-head entropy side by side.
#   PKG_CONFIG_PATH=<prefix>/lib/pkgconfig ./run.sh [--steps 600] [--seeds "1 2 3"] [--out runs]
# Needs an installed tapegrad (its bin/attn_scale and bin/tapegrad-logs) and gnuplot.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
steps=600 seeds="1 2 3" out="$here/runs"
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) steps=$2; shift 2 ;;
        --seeds) seeds=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
prefix=$(pkg-config --variable=prefix tapegrad) || { echo "run.sh: pkg-config finds no tapegrad (PKG_CONFIG_PATH)" >&2; exit 2; }
bin="$prefix/bin"
[ -x "$bin/attn_scale" ] || { echo "run.sh: $bin/attn_scale is missing" >&2; exit 2; }
make -s -C "$here" ${STATIC:+STATIC=$STATIC}   # STATIC=--static: the checks against libtapegrad.a
"$here/check"
"$here/check_noscale"   # passes too: a gradient check cannot see a wrong forward
mkdir -p "$out"
# attn_check compares the forward with tapegrad's and names what is wrong: exit 0 for the right
# kernel, 1 for the forgetful one (its full reports: $out/attn_check-*.txt)
"$bin/attn_check" "plugin:$here/my_attention.so" >"$out/attn_check-my_attention.txt" 2>/dev/null \
    || { cat "$out/attn_check-my_attention.txt" >&2; echo "run.sh: attn_check refused my_attention.so" >&2; exit 1; }
if "$bin/attn_check" "plugin:$here/my_attention_noscale.so" >"$out/attn_check-my_attention_noscale.txt" 2>/dev/null; then
    echo "run.sh: attn_check passed the kernel that forgets the scale" >&2; exit 1
fi
for f in my_attention my_attention_noscale; do
    grep -E '^(verdict|FAIL  temperature  *d_head=128|FAIL  health)' "$out/attn_check-$f.txt" | sed "s/^/attn_check $f.so: /"
done
warmup=$(( steps >= 100 ? 50 : steps / 5 ))   # attn_scale's default, or less for a short check
for s in $seeds; do
    for run in builtin my_attention my_attention_noscale; do
        attn=composed
        [ $run = builtin ] || attn="plugin:$here/$run.so"
        printf '%-22s seed %s: ' "$run" "$s"
        "$bin/attn_scale" --steps "$steps" --warmup "$warmup" --seed "$s" --attn "$attn" --log "$out/${run}_s$s.tsv" --overwrite \
            2> >(grep -v '^attn_scale: note: OPENBLAS_CORETYPE' >&2) | sed 's/.*final_loss=/final_loss=/'
    done
done
"$bin/tapegrad-logs" summarize "$out"/*.tsv
"$bin/tapegrad-logs" plot "$out"/*_s"${seeds%% *}".tsv -o "$out/compare.png" --title "seed ${seeds%% *}: built-in vs plugins"
echo "figures: $out/compare.png, $out/compare-entropy.png"
