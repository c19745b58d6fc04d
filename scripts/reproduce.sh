#!/usr/bin/env bash
# The main result: train the toy model at d_head = 128 with the scale modes
# none, sqrt, dk and qknorm, 3 seeds each, plot, and print the table.
#   scripts/reproduce.sh [--seeds "1 2 3"] [--out runs] [--jobs N] [--precision P] [--docs] [--record FILE]
# Installs what is missing (build tools, OpenBLAS, CMocka, gnuplot), builds in
# build/, writes runs/*.tsv and runs/*.png, then runs the seed-figure binaries.
# --docs: also copies what the docs show into the repository: the logs to
# docs/data/reproduce/, the seed figures' printouts to docs/data/seed/, the
# figures to docs/, and this run's record (machine, kernels, load, wall time)
# to docs/data/reproduce/run.txt; then `scripts/docs.sh` updates the pages.
# --precision fp32|bf16|fp16: the same runs with attn_scale --precision (bf16, fp16: mixed
# precision, emulated), into runs-P/ by default; with --docs their logs and run.txt go to
# docs/data/precision/P/ and the loss and entropy figures to docs/dhead128-P*.png (the
# comparison of docs/results.md#does-precision-change-the-failure; fp32 given explicitly too).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/setup.sh"
seeds="1 2 3"; out=""; jobs=$(nproc); docs=""; record=""; precision=fp32; pset=""
usage() { echo "usage: scripts/reproduce.sh [--seeds \"1 2 3\"] [--out DIR] [--jobs N] [--precision fp32|bf16|fp16] [--docs] [--record FILE]" >&2; exit 2; }
t_all=$SECONDS   # the whole command, set-up and build included
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) [ $# -ge 2 ] || usage; seeds="$2"; shift 2 ;;
        --out) [ $# -ge 2 ] || usage; out="$2"; shift 2 ;;
        --jobs) [ $# -ge 2 ] || usage; jobs="$2"; shift 2 ;;
        --precision) [ $# -ge 2 ] || usage; precision="$2"; pset=1; shift 2 ;;
        --docs) docs=1; shift ;;
        --record) [ $# -ge 2 ] || usage; record=$2; shift 2 ;;
        *) echo "scripts/reproduce.sh: unknown option '$1'" >&2; usage ;;
    esac
done
for s in $seeds; do [[ "$s" =~ ^[0-9]+$ ]] || { echo "scripts/reproduce.sh: seed '$s' is not a number" >&2; exit 2; }; done
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "scripts/reproduce.sh: --jobs '$jobs' is not a positive number" >&2; exit 2; }
case "$precision" in fp32|bf16|fp16) ;; *) echo "scripts/reproduce.sh: --precision '$precision' is not fp32, bf16 or fp16" >&2; exit 2 ;; esac
[ -n "$out" ] || { [ -z "$pset" ] && out="$top/runs" || out="$top/runs-$precision"; }

# only what it runs: half the build time of everything (16 s of 31 on 2 cores)
tg_build "$top/build" attn_scale blas_info worked_example dot_variance softmax_saturation
bin="$top/build/experiments"
mkdir -p "$out"

start=$(date +%s); load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "training: scale none, sqrt, dk, qknorm x seeds $seeds at d_head 128 (attn_scale defaults, --precision $precision), $jobs at a time" >&2
modes="none sqrt dk qknorm"
list=()
for mode in $modes; do
    for s in $seeds; do list+=("$mode $s"); done
done
# one OpenBLAS thread per run, runs side by side: the small per-head GEMMs gain
# nothing from a second thread. --overwrite: a rerun replaces the logs of the
# previous reproduction on purpose (attn_scale refuses that without it)
if ! printf '%s\n' "${list[@]}" | xargs -P "$jobs" -L 1 bash -c '
        bin=$1 out=$2 prec=$3 mode=$4 seed=$5
        "$bin/attn_scale" --scale "$mode" --seed "$seed" --threads 1 --precision "$prec" --log "$out/${mode}_s$seed.tsv" \
            --overwrite > "$out/${mode}_s$seed.out" ||
            { echo "scripts/reproduce.sh: attn_scale --scale $mode --seed $seed failed" >&2; exit 1; }' _ "$bin" "$out" "$precision"; then
    echo "scripts/reproduce.sh: a training run failed (see above)" >&2
    exit 1
fi

# a run counts only if it printed its summary line
for item in "${list[@]}"; do
    set -- $item
    [ -s "$out/$1_s$2.out" ] || { echo "scripts/reproduce.sh: run $1 seed $2 did not finish" >&2; exit 1; }
done

first=${seeds%% *}
logs=()
for mode in $modes; do logs+=("$out/${mode}_s$first.tsv"); done
fig=dhead128 ptitle="" pflag=""
[ -z "$pset" ] || fig=dhead128-$precision ptitle=", $precision" pflag=" --precision $precision"
[ "$precision" = fp32 ] || ptitle="$ptitle (emulated)"
"$top/scripts/plot.sh" "${logs[@]}" -o "$out/$fig.png" --title "d_head = 128, seed $first$ptitle" >/dev/null
all=()
for mode in $modes; do for s in $seeds; do all+=("$out/${mode}_s$s.tsv"); done; done

if [ -z "$pset" ] && [ -x "$top/scripts/seed_figures.sh" ]; then
    "$top/scripts/seed_figures.sh" "$top/build" "$out" >/dev/null
fi
secs=$(( $(date +%s) - start ))

echo
"$top/scripts/summarize.sh" "${all[@]}"
echo
echo "logs: $out/*.tsv   plots: $out/$fig.png (loss), $out/$fig-entropy.png (per-head entropy), $out/$fig-heatmap-*.png"
echo "trained and plotted in ${secs}s"

if [ -n "$docs" ] && [ -n "$pset" ]; then   # docs/results.md#does-precision-change-the-failure
    data="$top/docs/data/precision/$precision"
    rm -rf "$data"; mkdir -p "$data"
    cp "${all[@]}" "$data/"
    cp "$out/$fig.png" "$out/$fig-entropy.png" "$top/docs/"
    record="$data/run.txt"
    echo "docs: $data/ (logs, run.txt), $top/docs/$fig*.png; now run scripts/docs.sh" >&2
elif [ -n "$docs" ]; then   # what the docs' generated blocks read, and their figures
    data="$top/docs/data"
    # only what this script writes there: run-avx2.txt and other machines' records stay
    mkdir -p "$data/reproduce"
    for mode in $modes; do rm -f "$data/reproduce/${mode}"_s*.tsv; done
    cp "${all[@]}" "$data/reproduce/"
    cp "$out/dhead128.png" "$out/dhead128-entropy.png" "$out/dhead128-heatmap-none_s$first.png" \
       "$out/dhead128-heatmap-sqrt_s$first.png" "$out"/{dot_variance,softmax_saturation,softmax_sigma}.png "$top/docs/"
    rm -rf "$data/seed"; mkdir -p "$data/seed"
    cp "$out"/{worked_example,dot_variance,softmax_saturation}.out "$data/seed/"
    record="$data/reproduce/run.txt"
    echo "docs: $data/reproduce/ (logs, run.txt), $data/seed/, figures in $top/docs/; now run scripts/docs.sh" >&2
fi
if [ -n "$record" ]; then   # the run's record: machine, kernels, plan, load, times
    {
        echo "scripts/reproduce.sh --jobs $jobs$pflag${docs:+ --docs}: $(( ${#all[@]} )) runs of attn_scale, $jobs at a time, --threads 1${TG_CMAKE_ARGS:+, TG_CMAKE_ARGS=$TG_CMAKE_ARGS}"
        echo "trained and plotted in ${secs}s; the whole command, set-up and build included, $(( SECONDS - t_all ))s; $(date -u +%F)"
        echo "load average before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg)"
        tg_machine "$top/build"
        echo "gemm_plan: $(sed -n 's/^# gemm_plan=//p' "${all[@]}" | sort | uniq -c | awk '{printf "%s%s (%s runs)", (NR > 1 ? ", " : ""), $2, $1}') (TG_PLAN=${TG_PLAN:-measure})"
    } >"$record.tmp" && mv "$record.tmp" "$record"
fi
