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
# products planned by the estimate (ops/tg_gemm_plan.h): deterministic, nothing written to the cache
export TG_PLAN=estimate
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

    # no test hook in what is installed (TG_TEST_HOOKS is off without the tests)
    if grep -aq 'TG_BLAS_TEST_' "$P"/lib/libtapegrad.*; then
        echo "test_install: the installed library holds the test hooks (TG_BLAS_TEST_*)" >&2; exit 1
    fi
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
    run_example "$variant, pkg-config --cflags --libs${static:+ $static} tapegrad-train" "$ex/custom_op"

    # the training kit's small example, as docs/install.md shows it: build, run, resume
    kit=$work/kit-$variant
    mkdir "$kit"
    awk '/^## The training kit/ { on = 1 } on && /^```c$/ { code = 1; next } code && /^```$/ { exit } code' \
        "$top/docs/install.md" >"$kit/toy.c"
    [ -s "$kit/toy.c" ] || { echo "test_install: no C example under docs/install.md's 'The training kit'" >&2; exit 1; }
    cc -std=c11 -Wall -Wextra -Werror "$kit/toy.c" -o "$kit/toy" \
        $(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags --libs $static tapegrad-train) -Wl,-rpath,"$P/lib"
    (cd "$kit" && ./toy >out 2>err && ./toy resume >>out 2>>err) \
        || { cat "$kit/err" >&2; echo "test_install: the training kit's example failed ($variant)" >&2; exit 1; }
    grep -q '^w = 3.0' "$kit/out" || { cat "$kit/out" >&2; echo "test_install: the kit's example did not fit w = 3" >&2; exit 1; }
    grep -q 'resuming toy.st at step 200' "$kit/err" || { echo "test_install: the kit's example did not resume" >&2; exit 1; }
    echo "-- $variant, the training kit's example: $(tail -1 "$kit/out")" >&2
    # and the loop of one's own with two of the run's services (the same page)
    awk '/^### A loop of your own/ { on = 1 } on && /^```c$/ { code = 1; next } code && /^```$/ { exit } code' \
        "$top/docs/install.md" >"$kit/loop.c"
    [ -s "$kit/loop.c" ] || { echo "test_install: no C example under docs/install.md's 'A loop of your own'" >&2; exit 1; }
    cc -std=c11 -Wall -Wextra -Werror "$kit/loop.c" -o "$kit/loop" \
        $(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags --libs $static tapegrad-train) -Wl,-rpath,"$P/lib"
    (cd "$kit" && ./loop >loop.out 2>loop.err) \
        || { cat "$kit/loop.err" >&2; echo "test_install: the services' example failed ($variant)" >&2; exit 1; }
    grep -q '^w = 3.0.*, checkpoint at step 200, status 0' "$kit/loop.out" && [ -s "$kit/loop.st" ] \
        || { cat "$kit/loop.out" >&2; echo "test_install: the services' example did not fit w = 3 or save" >&2; exit 1; }
    echo "-- $variant, the services' example: $(tail -1 "$kit/loop.out")" >&2

    # which libtapegrad the programs use: none at run time (static), the installed one (shared)
    for prog in "$ex/custom_op" "$P/bin/attn_scale"; do
        needed=$(readelf -d "$prog" | grep -c 'NEEDED.*\[libtapegrad\.so' || true)
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
        sh "$top/tests/exported_symbols.sh" "$P/lib/libtapegrad_train.so" "$P/include/tapegrad" \
            "tg_train tg_services_before tg_runtime_init tg_runlog_open tg_attn_log_values" >&2
        sh "$top/tests/exported_symbols.sh" "$P/lib/libtapegrad_attn.so" "$P/include/tapegrad" \
            "tg_kernel_open tg_sandbox_run tg_attn_plugin_open tg_attn_exec_open tg_attn_measure tg_attn_check" >&2
    fi

    # a researcher's own attention kernel, out of tree: two plugins built with nothing
    # but the installed headers, gradient-checked, trained by the installed attn_scale
    # (statically linked in the static variant) against the built-in op, logs
    # summarized and plotted by the installed tapegrad-logs
    ex=$work/my_attention-$variant
    cp -r "$top/examples/my_attention" "$ex"
    PKG_CONFIG_PATH="$P/lib/pkgconfig" STATIC=$static CFLAGS="-O2 -Wall -Wextra -Werror" \
        bash "$ex/run.sh" --steps 40 --seeds 1 --out "$ex/runs" >"$ex/out.txt" 2>&1 \
        || { sed 's/^/   /' "$ex/out.txt" >&2; echo "test_install: examples/my_attention failed ($variant)" >&2; exit 1; }
    sed 's/^/   /' "$ex/out.txt" >&2
    for f in builtin_s1 my_attention_s1 my_attention_noscale_s1 win_my_attention_s1 win_my_attention_window1_s1; do
        [ -s "$ex/runs/$f.tsv" ] || { echo "test_install: my_attention: no $f.tsv" >&2; exit 1; }
    done
    [ -s "$ex/runs/compare-entropy.png" ] && [ -s "$ex/runs/window.png" ] || { echo "test_install: my_attention: no figure" >&2; exit 1; }
    grep -q "attn_check my_attention_window1.so: FAIL  window      causal (127, 0) row 128 sees keys 0..128, not keys 1..128: sees 129 keys, the window asks for 128 (left = 127): off by one" "$ex/out.txt" \
        || { echo "test_install: my_attention: attn_check's verdict on the off-by-one window is not shown" >&2; exit 1; }
    grep -q 'my_attention (forgets the scale): gradient checks passed' "$ex/out.txt" \
        || { echo "test_install: my_attention: the forgetful kernel's gradient check did not run" >&2; exit 1; }
    # the right plugin trains as the built-in op does (the same function), rows equal to 4 decimals
    cut -f1-3 "$ex/runs/builtin_s1.tsv" | grep -v '^#' | awk '{ printf "%s %.4f %.3f\n", $1, $2, $3 }' >"$ex/a"
    cut -f1-3 "$ex/runs/my_attention_s1.tsv" | grep -v '^#' | awk '{ printf "%s %.4f %.3f\n", $1, $2, $3 }' >"$ex/b"
    sed -n 2p "$ex/a" | cmp -s - <(sed -n 2p "$ex/b") \
        || { echo "test_install: my_attention.so's step 0 differs from the built-in op's" >&2; exit 1; }

    # a PyTorch kernel (examples/torch_attention) checked and trained by the installed programs, its
    # module from share/tapegrad/python: once (static), when /usr/bin/python3 has torch (CI: scripts/test_torch.sh
    # installed it before this step)
    if [ $variant = static ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
        tex=$work/torch_attention
        cp -r "$top/examples/torch_attention" "$tex"
        PKG_CONFIG_PATH="$P/lib/pkgconfig" bash "$tex/run.sh" --steps 40 --seeds 1 --out "$tex/runs" >"$tex/out.txt" 2>&1 \
            || { sed 's/^/   /' "$tex/out.txt" >&2; echo "test_install: examples/torch_attention failed" >&2; exit 1; }
        sed 's/^/   /' "$tex/out.txt" >&2
        grep -q "^attn_check attention: verdict: the kernel conforms" "$tex/out.txt" &&
            grep -q "^attn_check reference: verdict: the kernel conforms" "$tex/out.txt" &&
            grep -q "^attn_check attention_forget_scale: FAIL  temperature d_head=128  c = 11.31 = √128" "$tex/out.txt" \
            || { echo "test_install: torch_attention: attn_check's verdicts are not the expected ones" >&2; exit 1; }
        [ -s "$tex/runs/compare-entropy.png" ] || { echo "test_install: torch_attention: no figure" >&2; exit 1; }
        cut -f1-3 "$tex/runs/builtin_s1.tsv" | grep -v '^#' | awk '{ printf "%s %.4f %.3f\n", $1, $2, $3 }' >"$tex/a"
        cut -f1-3 "$tex/runs/torch_s1.tsv" | grep -v '^#' | awk '{ printf "%s %.4f %.3f\n", $1, $2, $3 }' >"$tex/b"
        cmp -s "$tex/a" "$tex/b" || { echo "test_install: the PyTorch kernel's rows differ from the built-in op's" >&2; exit 1; }
        # the installed protocol checks (share/tapegrad/python/exec_conformance.py) on the PyTorch kernel
        PYTHONPATH="$P/share/tapegrad/python" /usr/bin/python3 "$P/share/tapegrad/python/exec_conformance.py" \
            /usr/bin/python3 "$tex/attention.py" >"$tex/conf.txt" 2>&1 \
            || { sed 's/^/   /' "$tex/conf.txt" >&2; echo "test_install: torch_attention: exec_conformance failed" >&2; exit 1; }
        tail -1 "$tex/conf.txt" | sed 's/^/   /' >&2
        # your own PyTorch model's logs (examples/torch_log): written by the installed tapegrad_log, imported
        # by the installed tapegrad-logs import, summarized and plotted by it (short: one seed, 60 steps)
        tlg=$work/torch_log
        cp -r "$top/examples/torch_log" "$tlg"
        PKG_CONFIG_PATH="$P/lib/pkgconfig" bash "$tlg/run.sh" --steps 60 --seeds 1 --out "$tlg/runs" >"$tlg/out.txt" 2>&1 \
            || { sed 's/^/   /' "$tlg/out.txt" >&2; echo "test_install: examples/torch_log failed" >&2; exit 1; }
        grep -q "^none vs sqrt, torch bytes adamw d_head=128 seed=1 kernel=torch: validation loss" "$tlg/runs/summary.txt" &&
            grep -q "^none vs sqrt, torch bytes" "$tlg/runs/imported/summary.txt" && [ -s "$tlg/runs/torch_log-valloss.png" ] \
            || { echo "test_install: torch_log: no verdict or figure from the installed tools" >&2; exit 1; }
    elif [ $variant = static ]; then
        echo "-- examples/torch_attention skipped: /usr/bin/python3 cannot import torch (scripts/test_torch.sh installs it)" >&2
    fi
    # another trainer's CSV through the installed tapegrad-logs import, and the installed writer (no torch)
    printf 'step,loss,e/0/0\n0,2,1.0\n10,1.5,0.5\n20,1.2,0.2\n' >"$work/own-$variant.csv"
    "$P/bin/tapegrad-logs" import "$work/own-$variant.csv" "$work/own-$variant.tsv" --col step=step --col loss=loss \
        --entropy 'e/{l}/{h}' --task text --scale none --seq-len 8 2>/dev/null &&
        "$P/bin/tapegrad-logs" summarize "$work/own-$variant.tsv" >/dev/null &&
        PYTHONPATH="$P/share/tapegrad/python" python3 -c 'import tapegrad_log; assert tapegrad_log.uniform_entropy(1) == 0' \
        || { echo "test_install: $variant: tapegrad-logs import or the tapegrad_log module" >&2; exit 1; }

    mkdir "$work/run-$variant"
    (cd "$work/run-$variant" && "$P/bin/attn_scale" --steps 5 --warmup 1 --log-every 1 --log log.tsv >&2)
    [ "$(grep -vc '^#' "$work/run-$variant/log.tsv")" -eq 7 ] \
        || { echo "test_install: $variant bin/attn_scale wrote no 6-step log" >&2; exit 1; }
    echo "== test_install: $variant: $((SECONDS - t0))s" >&2
done
cmp "$work/run-static/log.tsv" "$work/run-shared/log.tsv" \
    || { echo "test_install: static and shared attn_scale logs differ" >&2; exit 1; }
echo "test_install: static and shared installs pass" >&2
