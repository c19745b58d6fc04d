#!/usr/bin/env bash
# tapegrad against PyTorch, side by side: per size, R rounds, each round runs
# tapegrad's bench_step, PyTorch with glibc's default malloc and PyTorch with
# malloc tuned not to return memory to the OS, one after the other. Prints the
# raw lines, then a table of the medians over the rounds and the ratios.
#   scripts/bench.sh                      sizes small seed large, 2 threads, 3 rounds
#   THREADS=1 ROUNDS=5 SIZES="seed" scripts/bench.sh
#   ATTN=composed scripts/bench.sh        tapegrad's other attention op
#   BASE=/path/to/other/build scripts/bench.sh
#                                         also that build's bench_step in each round (before/after)
#   ISA=avx2 scripts/bench.sh             the AVX2 code on an AVX-512 machine: tapegrad from
#                                         build-avx2/ (-DTG_AVX512_CLONES=OFF) with LIBXSMM_TARGET=hsw and
#                                         OPENBLAS_CORETYPE=Haswell, PyTorch with OPENBLAS_CORETYPE=Haswell and
#                                         ATEN_CPU_CAPABILITY=avx2 (docs/speed.md#avx2-on-an-avx-512-machine)
# Needs a Release build in build/ and Debian's python3-torch (/usr/bin/python3).
# Kernels: tapegrad runs as a user runs it (OPENBLAS_CORETYPE unset: it picks
# its kernel itself); PyTorch (Debian's uses the system OpenBLAS) gets
# OPENBLAS_CORETYPE set to the core that fits this CPU, from blas_info.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
threads=${THREADS:-2}; rounds=${ROUNDS:-3}; sizes=${SIZES:-small seed large}
steps=${STEPS:-20}; attn=${ATTN:-}
bench="$top/build/experiments/bench_step"
[ -x "$bench" ] || { echo "bench.sh: build first (cmake -S . -B build && cmake --build build)" >&2; exit 2; }
isa=${ISA:-native}
case "$isa" in
    native) tg_env=(env -u OPENBLAS_CORETYPE) ;;
    avx2) bench="$top/build-avx2/experiments/bench_step"
          [ -x "$bench" ] || { echo "bench.sh: ISA=avx2 needs build-avx2/ (cmake -S . -B build-avx2 -DTG_AVX512_CLONES=OFF -DBUILD_TESTING=OFF)" >&2; exit 2; }
          tg_env=(env LIBXSMM_TARGET=hsw OPENBLAS_CORETYPE=Haswell) ;;
    *) echo "bench.sh: ISA=$isa: native or avx2" >&2; exit 2 ;;
esac
base=${BASE:+$BASE/experiments/bench_step}
[ -z "$base" ] || [ -x "$base" ] || { echo "bench.sh: BASE=$BASE has no experiments/bench_step" >&2; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "bench.sh: needs python3-torch for /usr/bin/python3" >&2; exit 2; }
best=$(env -u OPENBLAS_CORETYPE "$top/build/experiments/blas_info" --best-core)
torch_env=(env)
if [ "$isa" = avx2 ]; then best=Haswell; torch_env=(env ATEN_CPU_CAPABILITY=avx2); fi
torch_core=$(OPENBLAS_VERBOSE=2 OPENBLAS_CORETYPE=$best /usr/bin/python3 -c 'import torch' 2>&1 | sed -n 's/^Core: //p')
tuned=(env MALLOC_TRIM_THRESHOLD_=1000000000000 MALLOC_MMAP_THRESHOLD_=1000000000000 MALLOC_TOP_PAD_=268435456)
raw=$(mktemp); trap 'rm -f "$raw"' EXIT

echo "# $(date -u +%FT%TZ) $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)," \
     "threads=$threads rounds=$rounds steps=$steps OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-default} ISA=$isa TG_PLAN=${TG_PLAN:-measure}"
for size in $sizes; do
    for r in $(seq "$rounds"); do
        sg=1; [ "$r" -gt 1 ] && sg=0   # the sgemm reference once a size
        "${tg_env[@]}" "$bench" --size "$size" --threads "$threads" --steps "$steps" --sgemm "$sg" ${attn:+--attn "$attn"} \
            | sed 's/^/impl=tapegrad /' | tee -a "$raw"
        [ -z "$base" ] || "${tg_env[@]}" "$base" --size "$size" --threads "$threads" --steps "$steps" \
            --sgemm 0 ${attn:+--attn "$attn"} | sed 's/^/impl=base /' | tee -a "$raw"
        "${torch_env[@]}" OPENBLAS_CORETYPE=$best /usr/bin/python3 "$top/scripts/bench_torch.py" --size "$size" --threads "$threads" --steps "$steps" \
            | sed 's/^/impl=torch /' | tee -a "$raw"
        "${torch_env[@]}" "${tuned[@]}" OPENBLAS_CORETYPE="$best" /usr/bin/python3 "$top/scripts/bench_torch.py" --size "$size" --threads "$threads" \
            --steps "$steps" --label torch-tuned | sed 's/^/impl=torch_tuned /' | tee -a "$raw"
    done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# kernels: tapegrad ($([ "$isa" = avx2 ] && echo "AVX2 build, LIBXSMM_TARGET=hsw OPENBLAS_CORETYPE=Haswell" || echo "OPENBLAS_CORETYPE unset")) ran OpenBLAS core=$(sed -n 's/.* blas_core=\([^ ]*\).*/\1/p' "$raw" |
    sort -u | tr '\n' ' ')and libxsmm=$(sed -n 's/.* libxsmm=\([^ ]*\).*/\1/p' "$raw" | sort -u | tr '\n' ' ')plan=$(sed -n 's/.* plan=\([^ ]*\).*/\1/p' "$raw" | sort -u | tr '\n' ' ')- PyTorch (OPENBLAS_CORETYPE=$best${torch_env[1]:+ ${torch_env[1]}}) ran core=${torch_core:-unknown} (OPENBLAS_VERBOSE=2)"
echo
awk -v threads="$threads" '
function med(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
    delete f
    for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    k = f["size"] SUBSEP f["impl"]
    ms[k] = ms[k] " " f["median_ms"]; rss[k] = f["peak_rss_mb"]
    if (f["impl"] == "tapegrad") { allocs[f["size"]] = f["allocs_per_step"]; attn[f["size"]] = f["attn"]; fma[f["size"]] = f["fma_gflops"] }
    if ("sgemm_gflops" in f) { sg[f["size"]] = f["sgemm_gflops"]; sgms[f["size"]] = f["sgemm_ms"]; pk[f["size"]] = f["peak_gflops"] }
    if (!(f["size"] in seen)) { seen[f["size"]] = 1; order[++ns] = f["size"]; gf[f["size"]] = f["gflops"] * f["median_ms"] }
}
END {
    printf "%-6s %-8s %10s %10s %12s %8s %9s %9s %9s %7s %8s %7s %7s %7s %7s %7s %8s\n", "size", "attn", "tapegrad", "torch", "torch_tuned",
           "ratio", "tg_GF/s", "sgemm_ms", "sgemm_GF/s", "of_sgemm", "peak_GF/s", "of_peak", "fma_GF/s", "of_fma", "allocs", "tg_MB", "torch_MB"
    for (s = 1; s <= ns; s++) {
        z = order[s]
        t = med(ms[z SUBSEP "tapegrad"]); p = med(ms[z SUBSEP "torch"]); q = med(ms[z SUBSEP "torch_tuned"])
        best = p < q ? p : q; gflop = gf[z] / 1e3
        printf "%-6s %-8s %8.2fms %8.2fms %10.2fms %7.2fx %9.1f %9.2f %9.1f %6.0f%% %8.1f %6.0f%% %8.1f %6.0f%% %7s %7.0f %8.0f\n", z, attn[z], t, p, q,
               t / best, gflop / (t / 1e3), sgms[z], sg[z], 100 * gflop / (t / 1e3) / sg[z], pk[z], 100 * gflop / (t / 1e3) / pk[z],
               fma[z], (fma[z] > 0 ? 100 * gflop / (t / 1e3) / fma[z] : 0), allocs[z],
               rss[z SUBSEP "tapegrad"], rss[z SUBSEP "torch"] < rss[z SUBSEP "torch_tuned"] ? rss[z SUBSEP "torch"] : rss[z SUBSEP "torch_tuned"]
    }
    print "ratio: tapegrad median over the better PyTorch median; of_sgemm: tapegrad GFLOP/s over the"
    print "sgemm-only rate of the same products (OpenBLAS, same threads); of_peak: over one 2048^3 sgemm"
    print "(OpenBLAS, same threads: the sgemm rate of the speed targets); fma_GF/s: the FMA peak at the width"
    print "the products run at, same threads (blas_info --fma), of_fma the step over it (the FLOPs the ops count:"
    print "the attention ops count the products they run, not masked blocks); medians over the rounds."
    if (threads == 2 || threads == 1) {   # issue 29: 2 threads <= 0.2x, 0.4x, 0.5x of PyTorch; 1 thread: seed >= 72%, large >= 70% of the FMA peak
        lim["small"] = 0.2; lim["seed"] = 0.4; lim["large"] = 0.5; flim["seed"] = 72; flim["large"] = 70; line = ""
        for (s = 1; s <= ns; s++) {
            z = order[s]; if (!(z in lim)) continue
            t = med(ms[z SUBSEP "tapegrad"]); p = med(ms[z SUBSEP "torch"]); q = med(ms[z SUBSEP "torch_tuned"]); best = p < q ? p : q
            r = t / best; line = line sprintf("%s%s %.2fx of PyTorch", line == "" ? "" : "; ", z, r)
            if (threads == 2) line = line sprintf(" (<= %.2fx: %s)", lim[z], r <= lim[z] ? "met" : "NOT met")
            if (threads == 1 && (z in flim) && fma[z] > 0) {
                o = 100 * gf[z] / 1e3 / (t / 1e3) / fma[z]
                line = line sprintf(", %.0f%% of the FMA peak (>= %d%%: %s)", o, flim[z], o >= flim[z] ? "met" : "NOT met")
            }
        }
        if (line != "") print "targets: " line
    }
    hdr = 0
    for (s = 1; s <= ns; s++) {
        z = order[s]
        if (!((z SUBSEP "base") in ms)) continue
        if (!hdr++) printf "\n%-6s %10s %10s %8s %10s %10s\n", "size", "base", "tapegrad", "speedup", "base_ratio", "ratio"
        b = med(ms[z SUBSEP "base"]); t = med(ms[z SUBSEP "tapegrad"])
        p = med(ms[z SUBSEP "torch"]); q = med(ms[z SUBSEP "torch_tuned"]); best = p < q ? p : q
        printf "%-6s %8.2fms %8.2fms %7.2fx %9.2fx %9.2fx\n", z, b, t, b / t, b / best, t / best
    }
    if (hdr) print "base: bench_step of BASE in the same rounds; speedup = base / tapegrad; ratios over the better PyTorch."
}' "$raw"
