#!/usr/bin/env bash
# A PyTorch attention kernel checked and trained by tapegrad (docs/exec_protocol.md): attn_check on
# attention.py (the einsum kernel), attention.py --forget-scale (the seed's bug) and reference.py
# (PyTorch's own attention), then the toy model of attn_scale trained on the same seeds with the
# built-in op, the einsum kernel and the forgetful one, summarized and plotted side by side.
#   PKG_CONFIG_PATH=<prefix>/lib/pkgconfig ./run.sh [--steps 600] [--seeds "1 2 3"] [--out runs]
# Needs an installed tapegrad (bin/attn_check, bin/attn_scale, bin/tapegrad-logs,
# share/tapegrad/python), gnuplot, and PyTorch for $PYTHON (default /usr/bin/python3: Debian's
# python3-torch).
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
py=${PYTHON:-/usr/bin/python3}
[ -x "$bin/attn_scale" ] || { echo "run.sh: $bin/attn_scale is missing" >&2; exit 2; }
[ -r "$prefix/share/tapegrad/python/tapegrad_exec.py" ] || { echo "run.sh: $prefix/share/tapegrad/python/tapegrad_exec.py is missing" >&2; exit 2; }
"$py" -c 'import torch' 2>/dev/null || { echo "run.sh: $py cannot import torch (Debian: apt-get install python3-torch)" >&2; exit 2; }
export PYTHONPATH="$prefix/share/tapegrad/python${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
kernel="$py $here/attention.py"
quiet() { grep -v '^attn_scale: note: OPENBLAS_CORETYPE' >&2 || true; }
# attn_check: the right kernel and PyTorch's conform (exit 0), the forgetful one does not (exit 1);
# full reports in $out/attn_check-*.txt
for k in attention reference attention_forget_scale; do
    case $k in
        attention) cmd=$kernel ;;
        reference) cmd="$py $here/reference.py" ;;
        attention_forget_scale) cmd="$kernel --forget-scale" ;;
    esac
    set +e
    "$bin/attn_check" "exec:$cmd" >"$out/attn_check-$k.txt" 2>"$out/attn_check-$k.err"
    rc=$?
    set -e
    want=0
    [ $k = attention_forget_scale ] && want=1
    [ $rc = $want ] || { cat "$out/attn_check-$k.txt" "$out/attn_check-$k.err" >&2; echo "run.sh: attn_check on $k: exit $rc, want $want" >&2; exit 1; }
    grep -E '^(verdict|FAIL  temperature  *d_head=128)' "$out/attn_check-$k.txt" | sed "s/^/attn_check $k: /"
done
warmup=$(( steps >= 100 ? 50 : steps / 5 ))   # attn_scale's default, or less for a short check
for s in $seeds; do
    for run in builtin torch torch_forget_scale; do
        case $run in
            builtin) attn=composed ;;
            torch) attn="exec:$kernel" ;;
            torch_forget_scale) attn="exec:$kernel --forget-scale" ;;
        esac
        printf '%-20s seed %s: ' "$run" "$s"
        "$bin/attn_scale" --steps "$steps" --warmup "$warmup" --seed "$s" --attn "$attn" --log "$out/${run}_s$s.tsv" \
            --overwrite 2> >(quiet) | sed 's/.*final_loss=/final_loss=/'
    done
done
"$bin/tapegrad-logs" summarize "$out"/*.tsv
first=${seeds%% *}
"$bin/tapegrad-logs" plot "$out"/*_s"$first".tsv -o "$out/compare.png" --title "seed $first: built-in vs a PyTorch kernel"
echo "figures: $out/compare.png, $out/compare-entropy.png"
