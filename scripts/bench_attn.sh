#!/usr/bin/env bash
# The two attention ops side by side: forward + backward of one op (B = 1,
# H = 4, d_head = 64, causal) at each sequence length, the ops alternating,
# ROUNDS rounds; prints the raw lines, then a table of the medians.
#   scripts/bench_attn.sh                       T = 512 1024 2048 4096, 1 thread, 3 rounds
#   THREADS=2 ROUNDS=5 SEQ="1024 4096" scripts/bench_attn.sh
#   ISA=avx2 scripts/bench_attn.sh     the AVX2 code on an AVX-512 machine (as scripts/bench.sh)
#   SHAPES=models scripts/bench_attn.sh   both ops at the models' own attention shapes (bench_step's
#                                    small: B16 T32 H4 d16, seed: B32 T64 H4 d128, large: B16 T256 H8 d32),
#                                    alternating, ROUNDS rounds of the best of 20; the rate counted
#                                    two ways, each over the FMA peak: as the full T×T products of
#                                    the op without a mask (what both ops skip parts of) and as the
#                                    visible (causal) pairs only
#   WINDOWS="64 256 1024" scripts/bench_attn.sh   the fused op at T = 4096 (or SEQ) with a causal
#                                    sliding window of each W keys against none (W = 0), alternating:
#                                    the time per visible (query, key) pair should stay flat
# Runs build/experiments/bench_attn as a user runs it (OPENBLAS_CORETYPE unset).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
threads=${THREADS:-1}; rounds=${ROUNDS:-3}; seqs=${SEQ:-512 1024 2048 4096}
bench="$top/build/experiments/bench_attn"; tg_env=(env -u OPENBLAS_CORETYPE)
[ -x "$bench" ] || { echo "bench_attn.sh: build first (scripts/test.sh)" >&2; exit 2; }
case "${ISA:-native}" in
    native) ;;
    avx2) bench="$top/build-avx2/experiments/bench_attn"; tg_env=(env LIBXSMM_TARGET=hsw OPENBLAS_CORETYPE=Haswell)
          [ -x "$bench" ] || { echo "bench_attn.sh: ISA=avx2 needs build-avx2/ (-DTG_AVX512_CLONES=OFF)" >&2; exit 2; } ;;
    *) echo "bench_attn.sh: ISA=$ISA: native or avx2" >&2; exit 2 ;;
esac
raw=$(mktemp); trap 'rm -f "$raw"' EXIT
# the tables' awk: med(list) of a space-separated list; f[name] = value of a line's name=value fields
awk_lib='
function med(list,   n, a, i, j, x) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { x = a[i]; a[i] = a[j]; a[j] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ delete f; for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] } }
'
echo "# $(date -u +%FT%TZ) $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg), threads=$threads rounds=$rounds ISA=${ISA:-native}"
if [ -n "${SHAPES:-}" ]; then   # both ops at the models' shapes
    [ "$SHAPES" = models ] || { echo "bench_attn.sh: SHAPES=models is the one set" >&2; exit 2; }
    for r in $(seq "$rounds"); do
        for s in "small 16 32 4 16" "seed 32 64 4 128" "large 16 256 8 32"; do
            set -- $s
            for attn in composed fused; do
                echo "size=$1 $("${tg_env[@]}" "$bench" --attn $attn --batch "$2" --seq-len "$3" --heads "$4" --d-head "$5" \
                    --threads "$threads" --reps 20 --sgemm 0)" | tee -a "$raw"
            done
        done
    done
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    awk "$awk_lib"'
    {
        k = f["size"] SUBSEP f["attn"]; ms[k] = ms[k] " " f["ms"]; fmas = fmas " " f["fma_gflops"]
        # products run: composed 6 of T·T·d (QKᵀ, PV; PᵀdO, dOVᵀ, dL·K, dLᵀQ), fused 7 (QKᵀ again)
        full[k] = (f["attn"] == "fused" ? 7 : 6) * 2 * f["T"] * f["T"] * f["d_head"] * f["B"] * f["H"] / 1e9
        vis[k] = full[k] * (f["causal"] ? (f["T"] + 1) / (2 * f["T"]) : 1)
        kern = "OpenBLAS core " f["blas_core"] ", libxsmm " f["libxsmm"] ", FMA peak at " f["fma_bits"] " bits"
        if (!(f["size"] in seen)) { seen[f["size"]] = 1; order[++n] = f["size"]; shape[f["size"]] = "B" f["B"] " T" f["T"] " H" f["H"] " d" f["d_head"] }
    }
    END {
        fma = med(fmas)
        printf "%-6s %-18s %11s %9s %9s %11s %9s %9s %8s\n", "size", "shape", "composed_ms", "full_fma", "vis_fma", "fused_ms", "full_fma", "vis_fma", "faster"
        for (i = 1; i <= n; i++) {
            s = order[i]; c = med(ms[s SUBSEP "composed"]); u = med(ms[s SUBSEP "fused"])
            printf "%-6s %-18s %11.3f %8.0f%% %8.0f%% %11.3f %8.0f%% %8.0f%% %8s\n", s, shape[s],
                   c, 100 * full[s SUBSEP "composed"] / (c / 1e3) / fma, 100 * vis[s SUBSEP "composed"] / (c / 1e3) / fma,
                   u, 100 * full[s SUBSEP "fused"] / (u / 1e3) / fma, 100 * vis[s SUBSEP "fused"] / (u / 1e3) / fma,
                   (c <= u ? "composed" : "fused") sprintf(" %.2fx", (c <= u ? u / c : c / u))
        }
        print "forward+backward, causal, 1 op call; ms: median over the rounds of the best of 20;"
        print "full_fma: the op'"'"'s products as if unmasked (composed 6, fused 7 of 2 T^2 d FLOPs a head; both skip masked blocks) over the FMA peak;"
        print "vis_fma: the visible (causal) pairs only, over the same peak;"
        print "kernels: " kern " " fma " GFLOP/s (the median of the runs'"'"' own measurements)"
    }' "$raw"
    exit 0
fi
if [ -n "${WINDOWS:-}" ]; then   # the fused op with a sliding window against none
    t=${SEQ:-4096}
    [[ "$t" =~ ^[0-9]+$ ]] || { echo "bench_attn.sh: WINDOWS takes one SEQ" >&2; exit 2; }
    for r in $(seq "$rounds"); do
        for w in 0 $WINDOWS; do
            "${tg_env[@]}" "$bench" --attn fused --seq-len "$t" --window "$w" --threads "$threads" --reps 3 --sgemm 0 | tee -a "$raw"
        done
    done
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    awk "$awk_lib"'
    {
        w = f["window"]; T = f["T"]; ms[w] = ms[w] " " f["ms"]; gf[w] = gf[w] " " f["gflops"]
        kern = "OpenBLAS core " f["blas_core"] ", libxsmm " f["libxsmm"]
        if (!(w in seen)) { seen[w] = 1; order[++n] = w }
    }
    END {
        printf "%6s %6s %12s %10s %12s %10s\n", "T", "window", "pairs", "fused_ms", "ns_per_pair", "vs_none"
        base = med(ms[0])
        for (i = 1; i <= n; i++) {
            w = order[i]; W = w + 0; p = 0
            for (q = 0; q < T; q++) p += (W && q + 1 > W) ? W : q + 1
            m = med(ms[w])
            printf "%6d %6s %12d %10.1f %12.3f %9.2fx\n", T, (W ? W : "none"), p, m, m * 1e6 / p / 4, base / m
        }
        print "fused op, B = 1, H = 4, d_head = 64, causal, forward+backward; ms: median over the rounds of the best of 3;"
        print "pairs: visible (query, key) pairs of a head; ns_per_pair: ms over pairs of the 4 heads; vs_none: speed-up over no window;"
        print "kernels: " kern
    }' "$raw"
    exit 0
fi
for t in $seqs; do
    for r in $(seq "$rounds"); do
        for attn in composed fused; do
            "${tg_env[@]}" "$bench" --attn $attn --seq-len "$t" --threads "$threads" --reps 3 | tee -a "$raw"
        done
    done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
awk -v threads="$threads" "$awk_lib"'
{
    k = f["T"] SUBSEP f["attn"]; ms[k] = ms[k] " " f["ms"]; rss[k] = f["peak_rss_mb"]; ar[k] = f["arena_mb"]
    of[k] = of[k] " " f["of_sgemm"]; ofma[k] = ofma[k] " " f["of_fma"]; fma = f["fma_gflops"]
    kern = "OpenBLAS core " f["blas_core"] ", libxsmm " f["libxsmm"] ", FMA peak " fma " GFLOP/s at " f["fma_bits"] " bits"
    if (!(f["T"] in seen)) { seen[f["T"]] = 1; order[++n] = f["T"] }
}
END {
    printf "%6s %13s %13s %11s %11s %8s %10s %14s %15s %12s\n", "T", "composed_MB", "fused_MB", "composed_ms", "fused_ms", "speedup", "fused_arena",
           "fused_of_sgemm", "composed_of_fma", "fused_of_fma"
    for (i = 1; i <= n; i++) {
        t = order[i]; c = med(ms[t SUBSEP "composed"]); u = med(ms[t SUBSEP "fused"])
        printf "%6s %13.1f %13.1f %11.1f %11.1f %7.2fx %8.1fMB %13.0f%% %14.0f%% %11.0f%%\n", t, rss[t SUBSEP "composed"], rss[t SUBSEP "fused"], c, u, c / u,
               ar[t SUBSEP "fused"], med(of[t SUBSEP "fused"]) + 0, med(ofma[t SUBSEP "composed"]) + 0, med(ofma[t SUBSEP "fused"]) + 0
    }
    print "MB: peak RSS of the process; ms: median over the rounds of the best of 3 forward+backward;"
    print "fused_of_sgemm: its GFLOP/s (the causal half skipped) over one 2048^3 sgemm on the same threads;"
    print "*_of_fma: each op'"'"'s GFLOP/s over the FMA peak at the products'"'"' width, same threads (blas_info --fma);"
    print "kernels: " kern
    if (threads == 1 && ("4096" SUBSEP "fused") in ms) {   # the target of issue 9
        o = med(of["4096" SUBSEP "fused"]) + 0
        printf "target: fused at T = 4096, 1 thread: %.0f%% of the sgemm rate (>= 60%%: %s)\n", o, (o >= 60 ? "met" : "NOT met")
    }
}' "$raw"
