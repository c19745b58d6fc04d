#!/usr/bin/env bash
# The attention op's share of the FMA peak inside the training step, per size and per build,
# from bench_step --profile (the composed op: the models' default), in alternating rounds:
#   scripts/bench_tiles.sh                                   # build/, small seed large, 5 rounds, 1 thread
#   BUILDS="build /tmp/avx2" SIZES="small seed" ROUNDS=7 scripts/bench_tiles.sh
#   BUILDS="../old/build build" scripts/bench_tiles.sh      # before/after, side by side
#   OPS="tg_layernorm tg_cross_entropy" scripts/bench_tiles.sh   # also these ops' fwd/bwd ms
# A build configured with -DTG_AVX512_CLONES=OFF runs the AVX2 tiles; give it LIBXSMM_TARGET=hsw
# (AVX2 libxsmm, so the FMA peak is taken at 256 bits) by naming it as DIR:hsw.
# Prints, per size and build, the medians over the rounds: the attention op's forward and backward
# ms and of_fma, the step's of_fma and median ms, and the kernels each build ran with.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILDS=${BUILDS:-build}
SIZES=${SIZES:-small seed large}
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-1}
ATTN=${ATTN:-composed}
OPS=${OPS:-}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for b in $BUILDS; do
    dir=${b%%:*}
    [ -x "$dir/experiments/bench_step" ] || { echo "bench_tiles.sh: $dir/experiments/bench_step: not built" >&2; exit 2; }
done
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
     "load average: $(cut -d' ' -f1-3 /proc/loadavg), threads=$THREADS rounds=$ROUNDS attn=$ATTN"
for size in $SIZES; do
    for r in $(seq "$ROUNDS"); do
        i=0
        for b in $BUILDS; do
            dir=${b%%:*}
            env=()
            [ "$b" != "${b%:hsw}" ] && env=(LIBXSMM_TARGET=hsw)
            env "${env[@]}" "$dir/experiments/bench_step" --size "$size" --threads "$THREADS" --attn "$ATTN" --profile \
                >"$out/$size.$i.$r" 2>/dev/null || { echo "bench_tiles.sh: bench_step failed ($b, $size)" >&2; exit 1; }
            i=$((i + 1))
        done
    done
done
python3 - "$out" "$ROUNDS" "$ATTN" "$OPS" $BUILDS <<'EOF'
import os, statistics, sys
out, rounds, attn, extra, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(), sys.argv[5:]
op = "tg_attention" if attn == "composed" else "tg_flash_attention"
xhead = "".join(f" {e.removeprefix('tg_') + ' fwd/bwd ms':>24}" for e in extra)
print(f"{'size':6} {'build':24} {'attn_fwd_ms':>11} {'attn_bwd_ms':>11} {'attn_of_fma':>11} {'step_of_fma':>11} "
      f"{'step_ms':>8}{xhead}  kernels")
sizes = sorted({f.split('.')[0] for f in os.listdir(out)}, key=["small", "seed", "large"].index)
for size in sizes:
    for i, b in enumerate(builds):
        rows = []
        kern = ""
        for r in range(1, rounds + 1):
            kv, profs, cols = {}, {}, None
            for line in open(os.path.join(out, f"{size}.{i}.{r}")):
                if line.startswith("size="):
                    kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
                elif line.startswith("op "):
                    cols = line.split()
                elif cols and line.split() and line.split()[0] in [op] + extra:
                    profs[line.split()[0]] = dict(zip(cols, line.split()))
            for o in [op] + extra:
                if o not in profs:
                    sys.exit(f"bench_tiles.sh: no {o} row in {b}'s profile at {size}")
            prof = profs[op]
            rows.append((float(prof["fwd_ms"]), float(prof["bwd_ms"]), float(prof["of_fma"].rstrip("%")),
                         float(kv["of_fma"]), float(kv["median_ms"]))
                        + tuple(float(profs[e][k]) for e in extra for k in ("fwd_ms", "bwd_ms")))
            kern = f"blas={kv['blas_core']} libxsmm={kv['libxsmm']} tiles={kv.get('tiles', '-')} fma_bits={kv['fma_bits']}"
        med = [statistics.median(c) for c in zip(*rows)]
        xs = "".join(f" {f'{med[5 + 2 * k]:.3f} / {med[6 + 2 * k]:.3f}':>24}" for k in range(len(extra)))
        print(f"{size:6} {b:24} {med[0]:11.3f} {med[1]:11.3f} {med[2]:10.1f}% {med[3]:11.3f} {med[4]:8.3f}{xs}  {kern}")
print(f"medians over {rounds} alternating rounds; attn_of_fma: the op's FLOPs (the products it runs) over the FMA peak "
      f"at fma_bits (bench_step --profile); step_of_fma: bench_step's own line")
EOF
