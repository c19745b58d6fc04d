#!/usr/bin/env bash
# CI: tapegrad as a library, the way a user gets it. For a static and a shared
# build: configure, build, install into a temporary prefix (then move the
# prefix: nothing may point back into the build or the first location), and
# - compile every installed header on its own;
# - build examples/custom_op (copied out of the tree) with find_package(tapegrad)
#   and with pkg-config (`--static` for the static library), and run both: they
#   gradient-check the example's op and train with it;
# - run an installed program, bin/attn_scale, from a temporary folder.
# The shared library must export tg_* names only, each declared in an installed
# header. Last, the static and shared attn_scale logs must be byte-identical.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$top/scripts/setup.sh"
tg_need "${TG_BUILD_PACKAGES[@]}" "${TG_INSTALL_PACKAGES[@]}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jobs=$(nproc)

run_example() {   # run_example <label> <program>: its output, and it must succeed
    echo "-- $1" >&2
    "$2" | sed 's/^/   /' >&2
}

for variant in static shared; do
    t0=$SECONDS
    b=$work/build-$variant P=$work/$variant
    shared=OFF
    [ $variant = shared ] && shared=ON
    # the tests are scripts/test.sh's business: here only what installs
    cmake -S "$top" -B "$b" -DTG_WERROR=ON -DBUILD_SHARED_LIBS=$shared -DBUILD_TESTING=OFF >/dev/null
    cmake --build "$b" -j "$jobs" >/dev/null
    cmake --install "$b" --prefix "$work/first-$variant" >/dev/null
    mv "$work/first-$variant" "$P"
    rm -rf "$b"

    for h in "$P"/include/tapegrad/*.h; do
        echo "#include <tapegrad/${h##*/}>" | cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$P/include" -x c - \
            || { echo "test_install: installed header ${h##*/} does not compile on its own" >&2; exit 1; }
    done

    ex=$work/example-$variant-cmake
    cp -r "$top/examples/custom_op" "$ex"
    cmake -S "$ex" -B "$ex/build" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_FLAGS=-Werror >/dev/null
    cmake --build "$ex/build" >/dev/null
    run_example "$variant, find_package(tapegrad)" "$ex/build/custom_op"

    ex=$work/example-$variant-pkgconfig
    cp -r "$top/examples/custom_op" "$ex"
    static=""
    [ $variant = static ] && static=--static
    PKG_CONFIG_PATH="$P/lib/pkgconfig" make -s -C "$ex" STATIC=$static CFLAGS="-O2 -Wall -Wextra -Werror" >/dev/null
    run_example "$variant, pkg-config --cflags --libs${static:+ $static} tapegrad" "$ex/custom_op"

    # which libtapegrad the programs use: none at run time (static), the installed one (shared)
    for prog in "$ex/custom_op" "$P/bin/attn_scale"; do
        needed=$(readelf -d "$prog" | grep -c 'NEEDED.*libtapegrad' || true)
        want=0
        [ $variant = shared ] && want=1
        [ "$needed" -eq $want ] || { echo "test_install: $prog: $needed libtapegrad dependencies, want $want" >&2; exit 1; }
    done
    if [ $variant = shared ]; then
        # the whole of ldd's output first: grep -q closing the pipe early kills ldd (SIGPIPE, pipefail)
        loaded=$(ldd "$P/bin/attn_scale")
        grep -q "libtapegrad.so.* => $P/bin/../lib/" <<<"$loaded" \
            || { echo "test_install: bin/attn_scale does not load $P/lib/libtapegrad.so" >&2; exit 1; }
        sh "$top/tests/exported_symbols.sh" "$P/lib/libtapegrad.so" "$P/include/tapegrad" >&2
    fi

    mkdir "$work/run-$variant"
    (cd "$work/run-$variant" && "$P/bin/attn_scale" --steps 5 --warmup 1 --log-every 1 --log log.tsv >&2)
    [ "$(grep -vc '^#' "$work/run-$variant/log.tsv")" -eq 7 ] \
        || { echo "test_install: $variant bin/attn_scale wrote no 6-step log" >&2; exit 1; }
    echo "== test_install: $variant: $((SECONDS - t0))s" >&2
done
cmp "$work/run-static/log.tsv" "$work/run-shared/log.tsv" \
    || { echo "test_install: static and shared attn_scale logs differ" >&2; exit 1; }
echo "test_install: static and shared installs pass" >&2
