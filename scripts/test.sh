#!/usr/bin/env bash
# Installs what is missing, configures, builds and runs every test.
#   scripts/test.sh              Release build in build/, all tests
#   scripts/test.sh --sanitize   the same under ASan + UBSan, in build-asan/
set -euo pipefail
# products planned by the estimate (ops/tg_gemm_plan.h): deterministic, nothing written to the cache
export TG_PLAN=estimate
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/setup.sh"

build="$top/build"; flags=()
case "${1:-}" in
    "") ;;
    --sanitize) build="$top/build-asan"; flags=(-DCMAKE_BUILD_TYPE=Debug -DTG_SANITIZE=ON) ;;
    *) echo "scripts/test.sh: unknown option '$1' (use --sanitize or nothing)" >&2; exit 2 ;;
esac

tg_need "${TG_BUILD_PACKAGES[@]}" "${TG_SWEEP_PACKAGES[@]}"   # sweeps: tests/sweep_local.sh
cmake -S "$top" -B "$build" -DTG_WERROR=ON "${flags[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
