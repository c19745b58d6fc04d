#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, in build-fuzz/) and
# runs each for a bounded time, starting from its seed corpus.
#   scripts/fuzz.sh [SECONDS]     default 60 seconds per target
# A crash fails the script; libFuzzer leaves the input as build-fuzz/crash-*:
# fix the bug, then keep the input in tests/fuzz/regress/<target>/ so that the
# replay_<target> ctest checks it from then on (with gcc too).
set -euo pipefail
# products planned by the estimate (ops/tg_gemm_plan.h): deterministic, nothing written to the cache
export TG_PLAN=estimate
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/setup.sh"
secs=${1:-60}
case "$secs" in ''|*[!0-9]*) echo "scripts/fuzz.sh: SECONDS must be a whole number, not '$secs'" >&2; exit 2 ;; esac

tg_need "${TG_BUILD_PACKAGES[@]}" "${TG_FUZZ_PACKAGES[@]}"
build="$top/build-fuzz"
CC=clang cmake -S "$top" -B "$build" -DTG_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug -DTG_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_checkpoint fuzz_cli fuzz_runlog

export OPENBLAS_NUM_THREADS=1
status=0
for target in fuzz_checkpoint fuzz_cli fuzz_runlog; do
    # a scratch corpus: what libFuzzer adds stays out of the repository
    work="$build/corpus-$target"
    mkdir -p "$work"
    dict=()
    [ "$target" = fuzz_checkpoint ] && dict=(-dict="$top/tests/fuzz/safetensors.dict")
    echo "fuzz: $target for ${secs}s" >&2
    if ! (cd "$build" && "$build/tests/$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
            "$work" "$top/tests/fuzz/corpus/$target" 2>"$build/$target.log"); then
        echo "fuzz: $target FAILED; its output is in $build/$target.log, the input in $build/crash-*" >&2
        tail -40 "$build/$target.log" >&2
        status=1
    else
        grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$build/$target.log" | sed "s/^/fuzz: $target /" >&2 || true
    fi
done
exit $status
