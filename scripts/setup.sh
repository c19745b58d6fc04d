# Sourced by the scripts: installs the Debian packages named, only those
# missing, with sudo when not root. One apt-get update per call, only if needed.
tg_need() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "tapegrad: installing ${missing[*]}" >&2
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}
TG_BUILD_PACKAGES=(cmake build-essential pkg-config libopenblas-dev libxsmm-dev libcmocka-dev python3)
# CI only: clang's libFuzzer (scripts/fuzz.sh) and valgrind (scripts/valgrind.sh).
TG_FUZZ_PACKAGES=(clang libclang-rt-14-dev)
TG_VALGRIND_PACKAGES=(valgrind)
# Sweeps (scripts/sweep): GNU parallel runs them, gnuplot draws the figures;
# a real single-node Slurm for the Slurm engine's test (scripts/slurm_local.sh).
TG_SWEEP_PACKAGES=(parallel gnuplot-nox)
TG_SLURM_PACKAGES=(slurmctld slurmd slurm-client munge)
# CI only (scripts/test_install.sh): `pkg-config --static` of OpenBLAS asks for -lgfortran.
TG_INSTALL_PACKAGES=(libgfortran-12-dev)
# Plots (scripts/plot.sh, plot_attn.sh, science.sh) and the PyTorch references (bench_torch.py,
# torch_attn_scale.py, scripts/science.sh torch): installed by the scripts that need them.
TG_PLOT_PACKAGES=(gnuplot-nox)
TG_TORCH_PACKAGES=(python3-torch)

# The machine and kernels a measurement ran on, for the records under docs/data/:
#   tg_machine BUILD_DIR   prints "cpu: ..." and "blas: ..." (blas_info's line)
tg_machine() {
    echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
    echo "blas: $("$1/experiments/blas_info" 2>/dev/null)${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE set)}${LIBXSMM_TARGET:+ (LIBXSMM_TARGET=$LIBXSMM_TARGET set)}"
}

# The experiments' prologue: what building and plotting need installed, then a
# Release build in BUILD_DIR (configured once, rebuilt when sources changed).
#   tg_build BUILD_DIR [TARGET...]   only those targets (and what they need), else all
#   (TG_CMAKE_ARGS: more configure arguments, e.g. -DTG_AVX512_CLONES=OFF)
tg_build() {
    local dir=$1; shift
    tg_need "${TG_BUILD_PACKAGES[@]}" gnuplot-nox
    # shellcheck disable=SC2086   # word splitting of TG_CMAKE_ARGS is the point
    cmake -S "$top" -B "$dir" ${TG_CMAKE_ARGS:-} >/dev/null
    if [ $# -gt 0 ]; then cmake --build "$dir" -j "$(nproc)" --target "$@" >/dev/null
    else cmake --build "$dir" -j "$(nproc)" >/dev/null; fi
}
