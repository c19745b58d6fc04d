#!/usr/bin/env bash
# What the exec protocol costs (docs/exec_protocol.md#cost): attn_scale --profile at the toy sizes with
# the built-in op, a kernel that computes nothing (scripts/exec_cost_kernel.py: the protocol's own
# cost) and the PyTorch kernel of examples/torch_attention, side by side, R times (medians); then
# the 300 steps of `attn_check --train 300` (attn_scale --steps 300 --warmup 30) with the built-in op
# and the PyTorch kernel: the training loop's seconds, and the wall time (the kernel's start and the
# pre-flight's, a second kernel's, included).
#   scripts/exec_cost.sh [--repeats 3] [--out DIR]     (prints the table; DIR keeps the raw output)
# Installs python3-torch when missing; builds in build/.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/setup.sh"
repeats=3 out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --repeats) repeats=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "scripts/exec_cost.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
tg_need "${TG_TORCH_PACKAGES[@]}"
tg_build "$top/build" attn_scale blas_info
[ -n "$out" ] || { out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; }
mkdir -p "$out"
export PYTHONPATH="$top/scripts/python"
bin=$top/build/experiments/attn_scale
declare -A kernel=([builtin]=composed [zeros]="exec:/usr/bin/python3 $top/scripts/exec_cost_kernel.py"
                   [torch]="exec:/usr/bin/python3 $top/examples/torch_attention/attention.py")
declare -A size=([seed]="" [small]="--d-head 16 --heads 4 --d-model 64")
tg_machine "$top/build" | tee "$out/machine.txt"
for r in $(seq "$repeats"); do
    for s in seed small; do
        for k in builtin zeros torch; do
            # shellcheck disable=SC2086   # the size's flags are words
            "$bin" --steps 60 --profile ${size[$s]} --attn "${kernel[$k]}" >"$out/$s-$k-$r.out" 2>"$out/$s-$k-$r.prof"
        done
    done
done
for r in $(seq "$repeats"); do
    for k in builtin torch; do
        t0=$EPOCHREALTIME
        "$bin" --steps 300 --warmup 30 --attn "${kernel[$k]}" >"$out/train300-$k-$r.out" 2>/dev/null
        awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "wall=%.2f\n", b - a }' >>"$out/train300-$k-$r.out"
    done
done
python3 - "$out" "$repeats" <<'PY'
import re, statistics, sys
out, R = sys.argv[1], int(sys.argv[2])
def profile(path):
    text = open(path).read()
    step = float(re.search(r"# profile: \d+ steps, ([\d.]+) ms a step", text).group(1))
    lines = text.split("\n")
    i = next(n for n, l in enumerate(lines) if l.startswith("op "))
    cols = lines[i].split()
    att = {"fwd_ms": 0.0, "bwd_ms": 0.0}
    for l in lines[i + 1:]:
        f = l.split()
        if f and f[0] in ("exec_attention", "tg_attention", "tg_attend", "tg_attention_composed"):
            row = dict(zip(cols, f))
            att = {"fwd_ms": float(row["fwd_ms"]), "bwd_ms": float(row["bwd_ms"])}
    return step, att
sizes = {"seed": (32, 32, 4, 128), "small": (32, 32, 4, 16)}   # B, T, H, d_head (attn_scale's defaults)
print("%-6s %-8s %10s %10s %10s %14s" % ("size", "kernel", "step_ms", "attn_fwd", "attn_bwd", "MB/step piped"))
for s, (B, T, H, d) in sizes.items():
    for k in ("builtin", "zeros", "torch"):
        runs = [profile("%s/%s-%s-%d.prof" % (out, s, k, r)) for r in range(1, R + 1)]
        mb = 0 if k == "builtin" else 8 * B * T * H * d * 4 / 1e6   # q, k, v, out; dout, dq, dk, dv
        print("%-6s %-8s %10.2f %10.2f %10.2f %14.1f" % (s, k, statistics.median(r[0] for r in runs),
              statistics.median(r[1]["fwd_ms"] for r in runs), statistics.median(r[1]["bwd_ms"] for r in runs), mb))
for k in ("builtin", "torch"):
    texts = [open("%s/train300-%s-%d.out" % (out, k, r)).read() for r in range(1, R + 1)]
    secs = [float(re.search(r"seconds=([\d.]+)", t).group(1)) for t in texts]
    wall = [float(re.search(r"wall=([\d.]+)", t).group(1)) for t in texts]
    print("300 steps (attn_check --train 300's run), %-7s: training %.1f s, wall %.1f s (medians of %d; %s)" % (
        k, statistics.median(secs), statistics.median(wall), R, ", ".join("%.1f/%.1f" % x for x in zip(secs, wall))))
PY
