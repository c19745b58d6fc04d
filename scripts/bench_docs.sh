#!/usr/bin/env bash
# The benchmarks docs/speed.md shows, written to docs/data/bench/ (run it on a
# quiet machine; each output names the date, the load average, the CPU and the
# kernels). Then scripts/docs.sh updates the page.
#   scripts/bench_docs.sh            all of them (about 20 minutes on 2 cores)
#   scripts/bench_docs.sh step1 attn  only those (fma step2 step2p step1 attn window shapes gemm profile kernel
#                                     blocks tiles)
#   ISA=avx2 scripts/bench_docs.sh   the AVX2 code on this AVX-512 machine (build-avx2/, made here
#                                    with -DTG_AVX512_CLONES=OFF; LIBXSMM_TARGET=hsw,
#                                    OPENBLAS_CORETYPE=Haswell) -> docs/data/bench/avx2/ (no kernel)
# fma:    blas_info --fma, 1 and 2 threads, 3 times each (the FMA peak); bench_step --size seed
#         --threads 1 --sgemm 1 --profile (the step's and each op's share of it) -> fma.txt
# step2:  scripts/bench.sh (2 threads)            -> step-threads2.txt
# step2p: the same with OMP_WAIT_POLICY=passive     -> step-threads2-passive.txt
# step1:  THREADS=1 scripts/bench.sh              -> step-threads1.txt
# attn:   scripts/bench_attn.sh (1 thread)        -> attn.txt
# window: WINDOWS="64 256 1024" scripts/bench_attn.sh (1 thread, T 4096) -> attn-window.txt
# shapes: SHAPES=models ROUNDS=5 scripts/bench_attn.sh (1 thread, the models' shapes) -> attn-shapes.txt
# gemm:   bench_gemm --size S --threads 1          -> gemm-small.txt, gemm-seed.txt, gemm-large.txt
# profile: bench_step --size seed --threads 1 --profile -> profile-seed.txt
# kernel: OMP_WAIT_POLICY=passive ROUNDS=7 scripts/bench_kernel.sh -> kernel.txt
# blocks: bench_blocks (the tiles' register blocks, 1 thread) -> blocks.txt
# tiles:  scripts/bench_tiles.sh (the composed op's share in the step, 1 thread; BUILDS="OLD build ..."
#         to put other builds beside this one) -> tiles.txt
# Every benchmark runs tapegrad as a user runs it (OPENBLAS_CORETYPE unset).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$top/docs/data/bench"
what=("$@"); [ ${#what[@]} -gt 0 ] || what=(fma step2 step2p step1 attn window shapes gemm profile kernel)
isa=${ISA:-native}; gemm_bin="$top/build/experiments/bench_gemm"; gemm_env=(env -u OPENBLAS_CORETYPE)
if [ "$isa" = avx2 ]; then
    out="$out/avx2"; gemm_bin="$top/build-avx2/experiments/bench_gemm"
    gemm_env=(env LIBXSMM_TARGET=hsw OPENBLAS_CORETYPE=Haswell)
    cmake -S "$top" -B "$top/build-avx2" -DTG_AVX512_CLONES=OFF -DBUILD_TESTING=OFF >/dev/null
    cmake --build "$top/build-avx2" -j "$(nproc)" >/dev/null
    [ ${#@} -gt 0 ] || what=(fma step2 step2p step1 attn window gemm profile)
fi
export ISA=$isa
mkdir -p "$out"
save() {   # save FILE COMMAND...: the command's output, kept only if it succeeds
    local file=$1; shift
    echo "bench_docs.sh: $* > docs/data/bench/$file" >&2
    "$@" >"$out/.$file.tmp" || { rm -f "$out/.$file.tmp"; echo "bench_docs.sh: $* failed" >&2; exit 1; }
    mv "$out/.$file.tmp" "$out/$file"
}
for w in "${what[@]}"; do
    case "$w" in
        fma) save fma.txt bash -c 'echo "# $(sed -n "s/^model name[[:space:]]*: //p" /proc/cpuinfo | head -1) (family $(sed -n "s/^cpu family[[:space:]]*: //p" /proc/cpuinfo | head -1) model $(sed -n "s/^model[[:space:]]*: //p" /proc/cpuinfo | head -1)), $(nproc) cores, $(date -u +%F), load average: $(cut -d" " -f1-3 /proc/loadavg), ISA=$ISA"
                 for t in 1 2; do for r in 1 2 3; do "${@:2}" "$1/blas_info" --fma --threads $t; done; done
                 "${@:2}" "$1/bench_step" --size seed --threads 1 --steps 20 --sgemm 1 --profile' _ "${gemm_bin%/bench_gemm}" "${gemm_env[@]}" ;;
        step2) save step-threads2.txt env THREADS=2 "$top/scripts/bench.sh" ;;
        step2p) save step-threads2-passive.txt env OMP_WAIT_POLICY=passive THREADS=2 "$top/scripts/bench.sh" ;;
        step1) save step-threads1.txt env THREADS=1 "$top/scripts/bench.sh" ;;
        attn) save attn.txt "$top/scripts/bench_attn.sh" ;;
        window) save attn-window.txt env WINDOWS="64 256 1024" "$top/scripts/bench_attn.sh" ;;
        shapes) save attn-shapes.txt env SHAPES=models ROUNDS=5 "$top/scripts/bench_attn.sh" ;;
        gemm) for s in small seed large; do   # bench_gemm names the kernels; the CPU goes first
                  save "gemm-$s.txt" bash -c 'echo "# $(sed -n "s/^model name[[:space:]]*: //p" /proc/cpuinfo | head -1), $(nproc) cores, load average: $(cut -d" " -f1-3 /proc/loadavg), ISA=$ISA"
                      exec "${@:3}" "$1" --size "$2" --threads 1' _ "$gemm_bin" "$s" "${gemm_env[@]}"
              done ;;
        profile) save profile-seed.txt "${gemm_env[@]}" "${gemm_bin%/bench_gemm}/bench_step" --size seed --threads 1 --steps 20 --sgemm 0 --profile ;;
        kernel) [ "$isa" = native ] || { echo "bench_docs.sh: kernel is for ISA=native" >&2; exit 2; }
                save kernel.txt env -u OPENBLAS_CORETYPE OMP_WAIT_POLICY=passive ROUNDS=7 "$top/scripts/bench_kernel.sh" ;;
        blocks) save blocks.txt "${gemm_bin%/bench_gemm}/lab/bench_blocks" ;;
        tiles) save tiles.txt env BUILDS="${BUILDS:-build}" ROUNDS=11 "$top/scripts/bench_tiles.sh" ;;
        *) echo "bench_docs.sh: unknown benchmark '$w' (fma step2 step2p step1 attn window shapes gemm profile kernel blocks tiles)" >&2; exit 2 ;;
    esac
done
echo "bench_docs.sh: wrote docs/data/bench/; now run scripts/docs.sh" >&2
