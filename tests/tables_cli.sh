#!/usr/bin/env bash
# Issue 37, as a new user meets it: tables and plots that tell kernels and
# features apart, and messages that say what to do.
# - summarize never pairs runs whose settings differ but for the scale (the
#   issue's case: a no-softcap `none` run of an outside kernel and a softcap-50
#   `sqrt` run of the built-in op): no verdict, the closest run and what differs;
#   the table's kernel and features columns; a kernel measured under a softcap
#   says in its header what its multiplier and max_logit are, and its plot label;
#   a loss curve that lies on another is named in the legend;
# - a wrong flag value is one line and a pointer to --help (no usage dump), an
#   unknown flag suggests the nearest; --eval-every's help says what it wants;
# - an exec kernel that dies before answering is named with its last stderr
#   line and a hint (a Python module its interpreter lacks); tapegrad's own
#   Python module is found without PYTHONPATH.
#   tables_cli.sh ATTN_SCALE ATTN_CHECK SOURCE_DIR CATALOGUE.so
set -uo pipefail
scale=$1 check=$2 src=$3 cat=$4
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
small=(--d-head 8 --heads 2 --d-model 16 --seq-len 8 --batch 4 --steps 20 --log-every 2 --warmup 2)
run() { local name=$1; shift; "$scale" "${small[@]}" "$@" >"$name.out" 2>"$name.err"; echo $? >"$name.rc"; }

# ---- tables: the pair, and the right one ------------------------------------
run cap_sqrt --scale sqrt --softcap 50 --log cap_sqrt.tsv
run ext_none --scale none --attn "plugin:$cat:right" --log ext_none.tsv
run ext_cap --scale sqrt --softcap 50 --attn "plugin:$cat:right" --log ext_cap.tsv
run cap_none --scale none --softcap 50 --log cap_none.tsv
for r in cap_sqrt ext_none ext_cap cap_none; do [ "$(cat $r.rc)" = 0 ] || { no "$r: exit $(cat $r.rc)"; cat $r.err; }; done
bash "$src/scripts/summarize.sh" ext_none.tsv cap_sqrt.tsv >pair.txt 2>&1 || no "summarize failed: $(cat pair.txt)"
grep -q "^none vs sqrt" pair.txt && no "summarize paired runs whose kernel and softcap differ: $(grep '^none vs' pair.txt)"
grep -q "^none run ext_none: no sqrt run with the same settings, no verdict; the closest, cap_sqrt, differs in attn (plugin:.*catalogue.so:right vs composed), softcap (0 vs 50)" pair.txt ||
    no "summarize does not say why ext_none has no verdict: $(tail -2 pair.txt)"
head -1 pair.txt | grep -q " kernel  *features " || no "the table has no kernel and features columns: $(head -1 pair.txt)"
grep "  cap_sqrt$" pair.txt | grep -q " composed  *softcap=50 " || no "the softcap run's row: $(grep cap_sqrt pair.txt)"
grep "  ext_none$" pair.txt | grep -q " plugin:[^ ]*catalogue.so:right  *- " || no "the plugin run's row: $(grep ext_none pair.txt)"
bash "$src/scripts/summarize.sh" cap_none.tsv cap_sqrt.tsv ext_cap.tsv >pair2.txt 2>&1
[ "$(grep -c '^none vs sqrt' pair2.txt)" = 1 ] && grep -q "^none vs sqrt, hist adam d_head=8 seed=1 kernel=composed softcap=50: final loss" pair2.txt ||
    no "the same settings are not paired once: $(grep -A3 '^$' pair2.txt)"
grep -q "^plugin '[^']*catalogue.so:right' vs composed, hist adam scale=sqrt d_head=8 seed=1 softcap=50: final loss" pair2.txt ||
    no "the plugin is not compared with the built-in op of its settings: $(tail -3 pair2.txt)"

# the measured kernel's header under a softcap, and without one
grep -q "^# attn_multiplier_meaning=an effective slope: .*under the cap of 50 tanh flattens" ext_cap.tsv ||
    no "the softcap run's header does not say what its multiplier is: $(grep meaning ext_cap.tsv)"
grep -q "^# attn_max_logit_meaning=.*not capped, it may exceed the cap of 50" ext_cap.tsv || no "nor its max_logit"
grep -q "^# attn_multiplier_meaning=.*the multiplier it applied$" ext_none.tsv || no "the no-softcap run's header: $(grep meaning ext_none.tsv)"
grep -q "meaning=" cap_sqrt.tsv && no "a built-in op's log has meaning lines (its columns are its own)"

# the plot: labels with kernel and features, a curve on another named, the softcap note
cp cap_sqrt.tsv again.tsv
python3 "$src/scripts/tglogs.py" legend cap_sqrt.tsv again.tsv ext_cap.tsv >legend.txt || no "tglogs.py legend failed"
sed -n 2p legend.txt | grep -q "^again \[composed softcap=50\] = cap_sqrt's curve (identical)	1$" || no "legend: $(sed -n 2p legend.txt)"
sed -n 3p legend.txt | grep -q "(softcap: multiplier = fitted slope, max_logit uncapped)" || no "legend: $(sed -n 3p legend.txt)"
if command -v gnuplot >/dev/null; then
    bash "$src/scripts/plot.sh" cap_sqrt.tsv again.tsv ext_cap.tsv -o p.png >plot.out 2>&1 && [ -s p.png ] && [ -s p-entropy.png ] ||
        no "plot.sh failed: $(cat plot.out)"
else
    echo "tables_cli: gnuplot not installed: plot.sh not run (scripts/test.sh installs it)"
fi

# ---- flags ---------------------------------------------------------------------------------
"$scale" --kv-head 2 >kv.out 2>kv.err; rc=$?
[ $rc = 2 ] && grep -q "^attn_scale: unknown flag '--kv-head'; did you mean --kv-heads?$" kv.err ||
    no "an unknown flag: exit $rc, $(cat kv.err)"
"$scale" --steps abc >val.out 2>val.err; rc=$?
[ $rc = 2 ] && grep -q "^attn_scale: --steps: 'abc' is not an integer$" val.err && grep -q "^(attn_scale --help lists every flag)$" val.err ||
    no "a wrong value: exit $rc, $(cat val.err)"
grep -q "usage:" val.err kv.err && no "a wrong flag prints the usage: $(wc -l <val.err) lines"
[ "$(grep -vc '^attn_scale: note:' val.err)" -le 2 ] || no "a wrong value prints $(wc -l <val.err) lines"
"$check" --tiemout 3 builtin:composed >ck.out 2>ck.err
grep -q "unknown flag '--tiemout'; did you mean --timeout?" ck.err || no "attn_check's unknown flag: $(cat ck.err)"
"$scale" --frobnicate 1 2>far.err; grep -q "did you mean" far.err && no "a far-off flag got a suggestion: $(cat far.err)"
"$scale" --help 2>/dev/null | grep -A1 -- "--eval-every" | grep -q "every N steps, N a multiple of --log-every" || no "--eval-every's help does not say it wants a multiple of --log-every"

# ---- an exec kernel that dies: its last words and a hint ---------------------------------------
printf 'import sys\nimport no_such_module_tg37\n' >nomod.py
"$check" "exec:python3 nomod.py" --d-head 8 >nomod.out 2>nomod.err; rc=$?
[ $rc = 2 ] || no "a kernel whose import fails: exit $rc, want 2"
grep -q "hello: the kernel exited with status 1 before answering; its last line on stderr: ModuleNotFoundError: No module named 'no_such_module_tg37' (the interpreter the command starts has no module no_such_module_tg37: install it for that interpreter, or start the kernel with one that has it" nomod.err ||
    no "a kernel whose import fails is not explained: $(grep -v '^\[kernel' nomod.err)"
# tapegrad's own module, with no PYTHONPATH: found (the kernel then exits 7 on purpose)
printf 'import sys\nimport tapegrad_exec\nsys.exit(7)\n' >own.py
env -u PYTHONPATH "$check" "exec:python3 own.py" --d-head 8 >own.out 2>own.err
grep -q "hello: the kernel exited with status 7 before answering" own.err && ! grep -q "No module named" own.err ||
    no "tapegrad_exec is not found without PYTHONPATH: $(grep -v '^\[kernel' own.err)"

[ $fails = 0 ] && echo "tables_cli: all checks passed"
exit $((fails > 0))
