#!/usr/bin/env bash
# The seed's own story on real data: a small byte-level code-completion model
# (attn_scale --task code, the C headers of Debian's libc6-dev by default) with
# the scale forgotten (none) and applied (sqrt), d_head 128, 2 layers, 3 seeds.
#   scripts/reproduce_code.sh [--seeds "1 2 3"] [--steps 1000] [--out runs/code] [--jobs N] [--data PATH] [--all] [--torch] [--precision P] [--docs]
# Prints the runs' table, a verdict per seed (on text: the unscaled run's final
# validation loss at least 0.25 nats above the scaled one's; a 3x ratio means
# little when both losses stay far from 0), and what the none and sqrt models of
# the first seed write after the same prompts. Figures: OUT/code-loss.png
# (training loss), OUT/code-val.png (validation loss), OUT/code-entropy.png.
# --all adds dk, qknorm and the learned log scale started at none (its own rate
# 0.03, as the learned-scale results use). --torch also trains the PyTorch twin
# (scripts/torch_attn_scale.py: the same task, corpus, split and validation
# windows; Debian's python3-torch, installed when missing) for none and sqrt at
# the first seed, and overlays the validation losses: OUT/code-torch-val.png.
# --docs: copies the logs, the completions and the run's record (machine,
# kernels, wall time) to docs/data/code/ and the figures to docs/.
# --precision fp32|bf16|fp16: attn_scale --precision (bf16, fp16: mixed precision, emulated), into
# runs/code-P by default; with --docs to docs/data/precision/code-P/, its validation figure to docs/ (the
# comparison of docs/results.md#does-precision-change-the-failure; fp32 given explicitly too).
set -euo pipefail
invocation="scripts/reproduce_code.sh $*"
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/setup.sh"
seeds="1 2 3"; steps=1000; out=""; jobs=$(nproc); data=""; all=""; docs=""; torch=""; precision=fp32; pset=""
usage() { sed -n '5p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) [ $# -ge 2 ] || usage; seeds=$2; shift 2 ;;
        --steps) [ $# -ge 2 ] || usage; steps=$2; shift 2 ;;
        --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
        --jobs) [ $# -ge 2 ] || usage; jobs=$2; shift 2 ;;
        --data) [ $# -ge 2 ] || usage; data=$2; shift 2 ;;
        --all) all=1; shift ;;
        --torch) torch=1; shift ;;
        --docs) docs=1; shift ;;
        --precision) [ $# -ge 2 ] || usage; precision=$2; pset=1; shift 2 ;;
        *) echo "scripts/reproduce_code.sh: unknown option '$1'" >&2; usage ;;
    esac
done
for s in $seeds; do [[ "$s" =~ ^[0-9]+$ ]] || { echo "scripts/reproduce_code.sh: seed '$s' is not a number" >&2; exit 2; }; done
[[ "$steps" =~ ^[1-9][0-9]*$ ]] && [ "$steps" -ge 100 ] || { echo "scripts/reproduce_code.sh: --steps '$steps': at least 100" >&2; exit 2; }
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "scripts/reproduce_code.sh: --jobs '$jobs' is not a positive number" >&2; exit 2; }
case "$precision" in fp32|bf16|fp16) ;; *) echo "scripts/reproduce_code.sh: --precision '$precision' is not fp32, bf16 or fp16" >&2; exit 2 ;; esac
[ -z "$pset" ] || [ -z "$torch" ] || { echo "scripts/reproduce_code.sh: --torch trains the PyTorch twin in fp32 only: leave it out with --precision $precision" >&2; exit 2; }
[ -n "$out" ] || { [ -z "$pset" ] && out="$top/runs/code" || out="$top/runs/code-$precision"; }

tg_build "$top/build" attn_scale blas_info
bin="$top/build/experiments/attn_scale"
mkdir -p "$out"
# the model of the independent PyTorch probe (issue 19): 2 pre-LN layers, d_model 128, 2 heads of 128,
# a small language model's init (--init lm: embeddings N(0, 0.02²), matrices N(0, 1/fan_in)),
# T 128, batch 16, AdamW 1e-3 with warm-up and cosine, clip 1; the validation loss every 10% of the steps
every=$((steps / 10))
model=(--task code --init lm --seq-len 128 --batch 16 --d-model 128 --heads 2 --d-head 128 --layers 2 --lr 1e-3 --lr-min 1e-4
       --warmup $((steps / 20)) --steps "$steps" --log-every "$every" --eval-every "$every" --threads 1)
[ "$precision" = fp32 ] || model+=(--precision "$precision")
[ -z "$data" ] || model+=(--data "$data")
modes=(none sqrt)
[ -z "$all" ] || modes+=(dk qknorm learned)
start=$(date +%s); load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "training: ${modes[*]} x seeds $seeds, $steps steps, $jobs at a time" >&2
list=()
for m in "${modes[@]}"; do for s in $seeds; do list+=("$m $s"); done; done
if ! printf '%s\n' "${list[@]}" | xargs -P "$jobs" -L 1 bash -c '
        bin=$1 out=$2; shift 2
        args=("$@"); n=${#args[@]}; seed=${args[n-1]}; mode=${args[n-2]}   # xargs puts "MODE SEED" last
        set -- "${args[@]:0:n-2}"
        extra=(--scale "$mode")
        [ "$mode" = learned ] && extra=(--scale learned --learned-init none --learned-param log --scale-lr 0.03)
        "$bin" "$@" "${extra[@]}" --seed "$seed" --log "$out/${mode}_s$seed.tsv" --save "$out/${mode}_s$seed.st" \
            --overwrite > "$out/${mode}_s$seed.out" 2>"$out/${mode}_s$seed.err" ||
            { echo "scripts/reproduce_code.sh: --scale $mode --seed $seed failed:" >&2; tail -3 "$out/${mode}_s$seed.err" >&2; exit 1; }' \
        _ "$bin" "$out" "${model[@]}"; then
    exit 1
fi
secs=$(( $(date +%s) - start ))
first=${seeds%% *}
logs=(); for m in "${modes[@]}"; do logs+=("$out/${m}_s$first.tsv"); done
alllogs=(); for m in "${modes[@]}"; do for s in $seeds; do alllogs+=("$out/${m}_s$s.tsv"); done; done
"$top/scripts/plot.sh" "${logs[@]}" -o "$out/code-loss.png" --title "libc6-dev headers, byte level, d_head 128, seed $first" >/dev/null
mv "$out/code-loss-entropy.png" "$out/code-entropy.png"
rm -f "$out"/code-loss-heatmap-*.png
gnuplot -c "$top/scripts/valloss.gp" "$out/code-val.png" "libc6-dev headers: validation loss (last 10% of the bytes), d_head 128, seed $first" "${logs[@]}"

if [ -n "$torch" ]; then   # the PyTorch twin, first seed, none and sqrt, side by side (its kernel: the CPU's best)
    tg_need "${TG_TORCH_PACKAGES[@]}"
    best=$(env -u OPENBLAS_CORETYPE "$top/build/experiments/blas_info" --best-core)
    mkdir -p "$out/torch"
    for m in none sqrt; do
        OPENBLAS_CORETYPE=$best /usr/bin/python3 "$top/scripts/torch_attn_scale.py" "${model[@]}" --scale "$m" --seed "$first" \
            --log "$out/torch/torch_${m}_s$first.tsv" >"$out/torch/torch_${m}_s$first.out" 2>&1 &
    done
    wait || true
    for m in none sqrt; do
        [ -s "$out/torch/torch_${m}_s$first.out" ] && grep -q final_loss "$out/torch/torch_${m}_s$first.out" ||
            { echo "scripts/reproduce_code.sh: the PyTorch run $m failed:" >&2; tail -3 "$out/torch/torch_${m}_s$first.out" >&2; exit 1; }
    done
    gnuplot -c "$top/scripts/valloss.gp" "$out/code-torch-val.png" "validation loss, tapegrad and PyTorch, seed $first" \
        "$out/none_s$first.tsv" "$out/sqrt_s$first.tsv" "$out/torch/torch_none_s$first.tsv" "$out/torch/torch_sqrt_s$first.tsv"
fi

prompts=('#include <' 'struct timespec' 'extern int ' '#define __')
{
    for p in "${prompts[@]}"; do
        for m in none sqrt; do
            printf '== %s (seed %s), after "%s":\n' "$m" "$first" "$p"
            "$bin" "${model[@]}" --scale "$m" --seed "$first" --resume "$out/${m}_s$first.st" --sample "$p" \
                --sample-len 120 --temperature 0.5 2>/dev/null | cat -v
        done
    done
} >"$out/completions.txt"

echo
"$top/scripts/summarize.sh" "${alllogs[@]}"
echo "== per seed, none against sqrt (on text: the final validation loss at least 0.10 nats above and more heads collapsed: docs/logs.md#the-verdicts)"
python3 "$top/scripts/tglogs.py" textverdict "${alllogs[@]}"
echo
echo "== completions (temperature 0.5, 120 bytes; cat -v shows control bytes):"
cat "$out/completions.txt"
echo
echo "logs: $out/*.tsv   figures: $out/code-loss.png $out/code-val.png $out/code-entropy.png"
echo "trained in ${secs}s"

if [ -n "$docs" ]; then
    d="$top/docs/data/code"
    [ -z "$pset" ] || d="$top/docs/data/precision/code-$precision"
    rm -rf "$d"; mkdir -p "$d"
    cp "${alllogs[@]}" "$out/completions.txt" "$d/"
    if [ -z "$pset" ]; then
        cp "$out/code-loss.png" "$out/code-val.png" "$out/code-entropy.png" "$top/docs/"
    else
        cp "$out/code-val.png" "$top/docs/code-val-$precision.png"
    fi
    if [ -n "$torch" ]; then
        mkdir -p "$d/torch"; cp "$out"/torch/torch_*.tsv "$d/torch/"; cp "$out/code-torch-val.png" "$top/docs/"
    fi
    {
        echo "$invocation: ${#alllogs[@]} runs of attn_scale ($steps steps), $jobs at a time, --threads 1"
        echo "trained in ${secs}s, $(date -u +%F)"
        [ -z "$torch" ] || sed -n 's/.*seconds=\([0-9.]*\).*/PyTorch twin: a run took \1 s/p' "$out"/torch/*.out
        echo "load average before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg)"
        tg_machine "$top/build"
        sed -n 's/^# corpus_source=/corpus: /p; s/^# corpus_files=/corpus files: /p; s/^# corpus_bytes=/corpus bytes: /p; s/^# corpus_sha256=/corpus sha256: /p' "${logs[0]}"
    } >"$d/run.txt"
    echo "docs: $d/ (logs, completions, run.txt), figures in $top/docs/; now run scripts/docs.sh" >&2
fi
