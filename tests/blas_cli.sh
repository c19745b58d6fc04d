#!/bin/sh
# The programs' start-up kernel choice, for real (restarts, environment,
# argv), on any x86-64 machine: OPENBLAS_CORETYPE=Prescott with
# TG_BLAS_TEST_AS_DETECTED=1 plays "OpenBLAS did not know this CPU and fell
# back to Prescott"; TG_BLAS_TEST_FAIL makes the self-check fail for a core.
# Every run is bounded by timeout: a restart loop fails the test, not CI.
#   tests/blas_cli.sh ATTN_SCALE BLAS_INFO
set -u
as=$(realpath "$1"); bi=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
unset OPENBLAS_CORETYPE TG_BLAS_RESTART TG_BLAS_TEST_FAIL TG_BLAS_TEST_AS_DETECTED
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
run() {   # run WANT_RC NAME CMD...: stdout in NAME.out, stderr in NAME.err
    want=$1; name=$2; shift 2
    timeout 60 "$@" >"$name.out" 2>"$name.err"
    rc=$?
    [ "$rc" -eq "$want" ] || { no "$name: exit $rc, want $want"; sed 's/^/  | /' "$name.err" | head -8; }
}
lines() { grep -c "$2" "$1"; }
core_of() { sed -n 's/.* core=\([^ ]*\) .*/\1/p' "$1"; }
weak="env TG_BLAS_TEST_AS_DETECTED=1 OPENBLAS_CORETYPE=Prescott"

best=$("$bi" --best-core 2>best.err)
if [ -z "$best" ]; then
    grep -q "lacks SSE3" best.err && { echo "blas_cli: this CPU has no SSE3: nothing to test"; exit 0; }
    echo "FAIL: blas_info --best-core: $(cat best.err)"; exit 1
fi
echo "this CPU's best core: $best"

# ---- a weak kernel: exactly one restart, with the best core, argv intact ------
if [ "$best" != Prescott ]; then
    run 0 up_help $weak "$as" --help
    [ "$(wc -l <up_help.err)" -eq 1 ] || no "a weak kernel: want one stderr line, got: $(cat up_help.err)"
    grep -qx "attn_scale: OpenBLAS picked its Prescott kernel but this CPU has .*: restarting once with OPENBLAS_CORETYPE=$best (set OPENBLAS_CORETYPE yourself to choose)" up_help.err ||
        no "a weak kernel: the restart line is: $(cat up_help.err)"
    grep -q '^usage: attn_scale' up_help.out || no "a weak kernel: --help printed no usage after the restart"
    run 0 up_info $weak "$bi"
    [ "$(core_of up_info.out)" = "$best" ] || no "after the restart OpenBLAS runs $(core_of up_info.out), want $best"
    grep -q "chosen_by=tapegrad" up_info.out || no "after the restart: not chosen_by=tapegrad: $(cat up_info.out)"
    # argv exactly: a value with spaces, quotes and an empty one give the same message as without a restart
    run 2 argv_up $weak "$as" --steps "1 2 '3'" --log ""
    run 2 argv_same env OPENBLAS_CORETYPE="$best" "$as" --steps "1 2 '3'" --log ""
    tail -n +2 argv_up.err >argv_up.rest
    cmp -s argv_up.rest argv_same.err || no "argv changed across the restart: $(cat argv_up.rest) vs $(cat argv_same.err)"
    # the log names the kernel; a tiny run restarted once
    run 0 up_run $weak "$as" --steps 2 --batch 2 --seq-len 8 --vocab 16 --alphabet 4 --d-model 16 --heads 2 \
        --d-head 8 --log-every 1 --warmup 1 --log "a 'b'.tsv"
    grep -q "^# blas=OpenBLAS [^ ]* core=$best chosen_by=tapegrad threads=1 omp_threads=1 libxsmm=[a-z0-9]*\$" "a 'b'.tsv" ||
        no "the log's blas line: $(grep '^# blas' "a 'b'.tsv")"
    [ "$(lines up_run.err restarting)" -eq 1 ] || no "a tiny run: want one restart line: $(cat up_run.err)"
    # --resume with another core: accepted, with a note
    tiny="--steps 6 --batch 2 --seq-len 8 --vocab 16 --alphabet 4 --d-model 16 --heads 2 --d-head 8 --log-every 1 --warmup 1"
    run 0 res_a env OPENBLAS_CORETYPE=Prescott "$as" $tiny --stop-at 3 --save ck.st --log res.tsv
    run 0 res_b env OPENBLAS_CORETYPE="$best" "$as" $tiny --resume ck.st --log res.tsv
    grep -q "note: the log was started with OpenBLAS [^ ]* core=Prescott .* this run has OpenBLAS [^ ]* core=$best .*may not be bit-identical" \
        res_b.err || no "resume with another core: no note: $(cat res_b.err)"
    run 0 res_c env OPENBLAS_CORETYPE="$best" "$as" $tiny --resume ck.st --log res.tsv
    grep -q "bit-identical" res_c.err && no "resume with the same core: a note anyway"
fi

# ---- the user's variable is never overridden ------------------------------------
run 0 user env OPENBLAS_CORETYPE=Prescott "$bi"
[ "$(core_of user.out)" = Prescott ] || no "OPENBLAS_CORETYPE=Prescott was not kept: $(cat user.out)"
grep -q "chosen_by=user" user.out || no "OPENBLAS_CORETYPE=Prescott: not chosen_by=user"
[ "$(lines user.err restarting)" -eq 0 ] || no "the user's variable was overridden: $(cat user.err)"
if [ "$best" != Prescott ]; then
    grep -q "^blas_info: note: OPENBLAS_CORETYPE=Prescott keeps OpenBLAS on its Prescott kernel" user.err ||
        no "a weak core set by the user: no note: $(cat user.err)"
fi
run 0 user_fail env OPENBLAS_CORETYPE=Prescott TG_BLAS_TEST_FAIL=Prescott "$bi"
grep -q "WARNING: the Prescott kernel (OPENBLAS_CORETYPE=Prescott, set by you) failed the sgemm self-check" \
    user_fail.err || no "the user's core failing the check: no warning: $(cat user_fail.err)"
[ "$(core_of user_fail.out)" = Prescott ] || no "the user's failing core was replaced"
run 1 user_crash env OPENBLAS_CORETYPE=Prescott TG_BLAS_TEST_FAIL=Prescott:crash "$as" --help
grep -q "crashed in the sgemm self-check (killed by signal 4" user_crash.err ||
    no "the user's core crashing: $(cat user_crash.err)"
[ -s user_crash.out ] && no "the user's core crashed, yet the program ran"

# ---- the marker: no upgrade after a restart, and a mangled one stops restarts ----
run 0 marked env TG_BLAS_RESTART=1:Prescott OPENBLAS_CORETYPE=Prescott "$bi"
[ "$(core_of marked.out)" = Prescott ] && grep -q chosen_by=tapegrad marked.out || no "marker: $(cat marked.out)"
[ -s marked.err ] && no "marker present: want no stderr, got: $(cat marked.err)"
run 1 mangled env TG_BLAS_RESTART=garbage TG_BLAS_TEST_FAIL='*' "$as" --help
grep -q "the restarts are used up" mangled.err || no "mangled marker: $(cat mangled.err)"
[ "$(lines mangled.err restarting)" -eq 0 ] || no "mangled marker: it restarted"

# ---- a failing self-check: the next kernel down; every kernel failing: the end ----
if [ "$best" != Prescott ]; then
    for how in "" ":crash"; do
        run 0 down$how env TG_BLAS_TEST_AS_DETECTED=1 OPENBLAS_CORETYPE=Prescott TG_BLAS_TEST_FAIL="$best$how" "$bi"
        [ "$(wc -l <"down$how.err")" -eq 2 ] || no "$best$how failing: want 2 stderr lines: $(cat "down$how.err")"
        next=$(sed -n 's/.*sgemm self-check .* the '"$best"' kernel .*restarting with OPENBLAS_CORETYPE=\(.*\)$/\1/p' \
            "down$how.err")
        [ -n "$next" ] && [ "$next" != "$best" ] || no "$best$how failing: no step down: $(cat "down$how.err")"
        [ "$(core_of "down$how.out")" = "$next" ] || no "$best$how failing: runs $(core_of "down$how.out"), want $next"
    done
fi
run 1 all $weak TG_BLAS_TEST_FAIL='*' "$as" --help
tail -1 all.err | grep -q "failed with the Prescott kernel (.*) and there is no lower kernel to try" ||
    no "every kernel failing: the last line is: $(tail -1 all.err)"
n=$(lines all.err restarting)
[ "$n" -ge 0 ] && [ "$n" -le 6 ] || no "every kernel failing: $n restarts"
[ -s all.out ] && no "every kernel failed, yet the program ran: $(head -2 all.out)"

# the FMA peak: measured at each width this CPU has (no threshold: speed is for the benchmarks), 0
# at one it lacks; the width the products run at follows libxsmm's target
run 0 fma "$bi" --fma
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" "$1"; }
has() { grep -qw "$1" /proc/cpuinfo; }
for w in 512 256; do
    g=$(field fma.out "fma${w}_gflops")
    if { [ $w = 512 ] && has avx512f; } || { [ $w = 256 ] && has avx2 && has fma; }; then
        awk -v g="$g" 'BEGIN { exit !(g > 0) }' || no "blas_info --fma: $w bits on a CPU that has them: '$g'"
    else
        [ "$g" = 0.0 ] || no "blas_info --fma: $w bits on a CPU without them: '$g', want 0.0"
    fi
done
case "$(field fma.out libxsmm)" in
    hsw*) want=256 ;; skx*|clx*|cpx*|spr*) want=512 ;; *) want="" ;;
esac
[ -z "$want" ] || [ "$(field fma.out code_bits)" = "$want" ] || no "blas_info --fma: code_bits $(field fma.out code_bits) with libxsmm=$(field fma.out libxsmm)"
if has avx2; then   # libxsmm held at AVX2 (docs/speed.md#avx2-on-an-avx-512-machine): the products' width is 256
    run 0 fma_hsw env LIBXSMM_TARGET=hsw "$bi" --fma
    [ "$(field fma_hsw.out code_bits)" = 256 ] || no "blas_info --fma with LIBXSMM_TARGET=hsw: code_bits $(field fma_hsw.out code_bits)"
fi

[ "$fails" -eq 0 ] && echo "blas_cli: all checks passed"
exit "$fails"
