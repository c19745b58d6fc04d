#!/usr/bin/env bash
# What the OpenBLAS kernel costs, side by side in one run: the sgemm rate
# (N×N, `blas_info --sgemm`) and `bench_step` ms/step, per kernel, alternating
# over the rounds; medians. The kernels:
#   Prescott    OPENBLAS_CORETYPE=Prescott: the SSE3 fallback OpenBLAS 0.3.21
#               takes on CPUs it does not know (kept: a user's variable)
#   restarted   the same Prescott kernel as OpenBLAS's own pick
#               (TG_BLAS_TEST_AS_DETECTED=1): the programs restart themselves
#               with the core that fits the CPU
#   Haswell     OPENBLAS_CORETYPE=Haswell (AVX2)
#   unset       no variable: OpenBLAS's own detection
#   scripts/bench_kernel.sh                       2 threads, seed, N=2048, 5 rounds
#   ROUNDS=3 SIZE=small N=1024 THREADS=1 scripts/bench_kernel.sh
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
threads=${THREADS:-2}; rounds=${ROUNDS:-5}; size=${SIZE:-seed}; n=${N:-2048}
bin="$top/build/experiments"
[ -x "$bin/blas_info" ] || { echo "bench_kernel.sh: build first (cmake -S . -B build && cmake --build build)" >&2; exit 2; }
raw=$(mktemp); trap 'rm -f "$raw"' EXIT
kernels=(Prescott restarted Haswell unset)
envs=("OPENBLAS_CORETYPE=Prescott" "TG_BLAS_TEST_AS_DETECTED=1 OPENBLAS_CORETYPE=Prescott" "OPENBLAS_CORETYPE=Haswell" "")

echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
     "load average: $(cut -d' ' -f1-3 /proc/loadavg); threads=$threads size=$size N=$n rounds=$rounds"
for r in $(seq "$rounds"); do
    for i in "${!kernels[@]}"; do
        # shellcheck disable=SC2086   # the assignments are words for env
        run=(env -u OPENBLAS_CORETYPE ${envs[$i]})
        s=$("${run[@]}" "$bin/blas_info" --sgemm "$n" --threads "$threads" 2>/dev/null)
        b=$("${run[@]}" "$bin/bench_step" --size "$size" --threads "$threads" --sgemm 0 2>/dev/null)
        echo "kernel=${kernels[$i]} $s $b" | tee -a "$raw"
    done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# against Prescott in the same round: time speed-ups, robust to a load that changes between rounds
ratios() { paste -d' ' <(grep "^kernel=$1 " "$raw" | field "$2") <(grep "^kernel=Prescott " "$raw" | field "$2") |
           awk -v inv="$3" '{ print inv ? $2 / $1 : $1 / $2 }' | median; }
printf "%-10s %-12s %14s %10s %14s %10s\n" kernel core_used sgemm_GFLOP/s speedup step_ms speedup
for k in "${kernels[@]}"; do
    rows=$(grep "^kernel=$k " "$raw")
    printf "%-10s %-12s %14.1f %10.2f %14.2f %10.2f\n" "$k" "$(field core <<<"$rows" | sort -u | tr '\n' ' ')" \
        "$(field sgemm_gflops <<<"$rows" | median)" "$(ratios "$k" sgemm_gflops 0)" \
        "$(field median_ms <<<"$rows" | median)" "$(ratios "$k" median_ms 1)"
done
echo "medians over the rounds; speedup: the median over rounds of the speed-up over Prescott in the same round;"
echo "core_used: the core OpenBLAS ran after the programs' start-up"
