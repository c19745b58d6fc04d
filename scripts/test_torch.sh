#!/usr/bin/env bash
# The tests about PyTorch, with PyTorch: installs Debian's python3-torch (for /usr/bin/python3)
# when missing, builds as scripts/test.sh does (in build/), and runs the tests that skip without
# it (torch_exec: the serve_torch layer; torch_ports: the ports of public models' attention;
# torch_cli: examples/torch_attention through attn_check and attn_scale; torch_log: examples/torch_log,
# a PyTorch model of your own logged by tapegrad_log and imported from CSV, judged and plotted).
# Fails if any of them skipped. CI runs it after scripts/test.sh.
set -euo pipefail
export TG_PLAN=estimate
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/setup.sh"
tg_need "${TG_BUILD_PACKAGES[@]}" "${TG_TORCH_PACKAGES[@]}"
/usr/bin/python3 -c 'import torch' || { echo "scripts/test_torch.sh: /usr/bin/python3 cannot import torch" >&2; exit 1; }
cmake -S "$top" -B "$top/build" -DTG_WERROR=ON >/dev/null
cmake --build "$top/build" -j "$(nproc)"
out=$(mktemp); trap 'rm -f "$out"' EXIT
ctest --test-dir "$top/build" --output-on-failure -R '^torch_' | tee "$out"
! grep -q 'Not Run\|Skipped' "$out" || { echo "scripts/test_torch.sh: a torch test skipped with torch installed" >&2; exit 1; }
grep -q '100% tests passed, 0 tests failed out of 4' "$out"
