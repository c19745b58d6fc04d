#!/usr/bin/env bash
# A training step in fp32, bf16 and fp16 side by side (bench_step --precision): per size, R rounds,
# each round the three precisions one after the other, then a table of the medians over the
# rounds, each precision's step against fp32's, and what the CPU has for bf16 (AVX512_BF16, AMX).
#   scripts/bench_precision.sh                    sizes small seed large, 1 thread, 3 rounds
#   THREADS=2 ROUNDS=5 SIZES="seed" scripts/bench_precision.sh [--out FILE]
# Without bf16 product kernels the low precisions are emulated (operands rounded, fp32 products):
# the table says so, and their ratio is the rounding's cost, not a speed-up.
# Needs a Release build in build/.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
threads=${THREADS:-1}; rounds=${ROUNDS:-3}; sizes=${SIZES:-small seed large}; steps=${STEPS:-20}
out=""
case "${1:-}" in
    "") ;;
    --out) [ $# -ge 2 ] || { echo "usage: scripts/bench_precision.sh [--out FILE]" >&2; exit 2; }; out=$2 ;;
    *) echo "scripts/bench_precision.sh: unknown option '$1' (usage: [--out FILE])" >&2; exit 2 ;;
esac
bench="$top/build/experiments/bench_step"
[ -x "$bench" ] || { echo "bench_precision.sh: build first (scripts/test.sh or cmake --build build)" >&2; exit 2; }
[[ "$threads" =~ ^[1-9][0-9]*$ && "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_precision.sh: THREADS and ROUNDS are positive numbers" >&2; exit 2; }
raw=$(mktemp); trap 'rm -f "$raw"' EXIT
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
bf16hw=$(for f in avx512_bf16 amx_bf16 avx512_fp16; do [[ " $flags " == *" $f "* ]] && printf '%s ' "$f"; done; true)
{
    echo "# $(date -u +%FT%TZ) $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), family $(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -1) model $(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg), threads=$threads rounds=$rounds steps=$steps"
    echo "# bf16/fp16 instructions: ${bf16hw:-none (no AVX512_BF16, AMX or AVX512_FP16)}"
    for r in $(seq "$rounds"); do
        for s in $sizes; do
            for p in fp32 bf16 fp16; do
                "$bench" --size "$s" --threads "$threads" --steps "$steps" --sgemm 0 --precision "$p" | tee -a "$raw"
            done
        done
    done
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    python3 - "$raw" <<'EOF'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1]) if line.startswith("size=")]
k = rows[0]
print("# kernels: OpenBLAS core=%s, libxsmm=%s, attention tiles=%s" % (k["blas_core"], k["libxsmm"], k["tiles"]))
print()
print("%-6s %-5s %8s %11s %9s %8s %7s" % ("size", "prec", "emulated", "median_ms", "vs_fp32", "GFLOP/s", "of_fma"))
for size in dict.fromkeys(r["size"] for r in rows):
    med = {}
    for p in ("fp32", "bf16", "fp16"):
        sel = [r for r in rows if r["size"] == size and r["precision"] == p]
        if not sel:
            continue
        med[p] = (statistics.median(float(r["median_ms"]) for r in sel), statistics.median(float(r["gflops"]) for r in sel),
                  statistics.median(float(r["of_fma"]) for r in sel), sel[0]["emulated"])
    for p, (ms, gf, fma, emu) in med.items():
        print("%-6s %-5s %8s %9.2fms %8.2fx %8.1f %6.0f%%" % (size, p, "yes" if emu == "1" else "no", ms, med["fp32"][0] / ms,
                                                           gf, 100 * fma))
print("vs_fp32: fp32's median step over this one's (above 1: faster); of_fma: the step's FLOPs over the fp32 FMA")
print("peak (blas_info --fma); medians over the rounds. emulated: operands rounded, the products fp32's.")
EOF
} | if [ -n "$out" ]; then tee "$out.tmp" && mv "$out.tmp" "$out"; else cat; fi
