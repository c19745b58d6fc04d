#!/usr/bin/env bash
# Builds the three kernels (plugin ABI 2, grouped heads and windows declared),
# checks their gradients, then trains the toy model of attn_scale three ways on
# the same seeds: the built-in op (tapegrad's tg_attend), my_attention.so
# (applies `scale`) and my_attention_noscale.so (forgets it: the seed's bug),
# and plots loss and per-head entropy side by side. Then the same with 2
# key/value heads and a sliding window of 8 keys: my_attention.so against
# my_attention_window1.so (a window of 9 keys: off by one), attn_check's verdict
# on each, and their curves.
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
if "$bin/attn_check" "plugin:$here/my_attention_window1.so" >"$out/attn_check-my_attention_window1.txt" 2>/dev/null; then
    echo "run.sh: attn_check passed the kernel whose window is off by one" >&2; exit 1
fi
for f in my_attention my_attention_noscale my_attention_window1; do
    grep -E '^(verdict|FAIL  temperature  *d_head=128|FAIL  health|FAIL  window )' "$out/attn_check-$f.txt" | sed "s/^/attn_check $f.so: /"
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
# grouped heads (4 query heads on 2 key/value heads) and a window of 8 keys: the right kernel, and the off-by-one one.
# attn_scale refuses the second (exit 5, nothing written): its weights reach a key the window hides, which the
# measurement before the run sees; --allow-noncausal trains it anyway, to show what the extra key does.
set +e
"$bin/attn_scale" --steps "$steps" --warmup "$warmup" --kv-heads 2 --window 8 --attn "plugin:$here/my_attention_window1.so" \
    --log "$out/refused.tsv" 2>&1 >/dev/null | grep -v '^attn_scale: note: OPENBLAS_CORETYPE' | cut -c1-240
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 5 ] || { echo "run.sh: attn_scale ran the off-by-one window kernel (exit $rc, want 5)" >&2; exit 1; }
for s in $seeds; do
    for run in my_attention my_attention_window1; do
        printf '%-22s seed %s, --kv-heads 2 --window 8: ' "$run" "$s"
        "$bin/attn_scale" --steps "$steps" --warmup "$warmup" --seed "$s" --kv-heads 2 --window 8 \
            --attn "plugin:$here/$run.so" --log "$out/win_${run}_s$s.tsv" --overwrite \
            $([ $run = my_attention_window1 ] && echo --allow-noncausal) \
            2> >(grep -v '^attn_scale: note: OPENBLAS_CORETYPE\|--allow-noncausal:' >&2) | sed 's/.*final_loss=/final_loss=/'
    done
done
"$bin/tapegrad-logs" summarize "$out"/*.tsv
"$bin/tapegrad-logs" plot "$out"/[bm]*_s"${seeds%% *}".tsv -o "$out/compare.png" --title "seed ${seeds%% *}: built-in vs plugins"
"$bin/tapegrad-logs" plot "$out"/win_*_s"${seeds%% *}".tsv -o "$out/window.png" \
    --title "seed ${seeds%% *}, --kv-heads 2 --window 8: right vs off by one"
echo "figures: $out/compare.png, $out/compare-entropy.png, $out/window.png, $out/window-entropy.png"
