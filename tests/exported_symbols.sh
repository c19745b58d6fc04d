#!/bin/sh
# Usage: exported_symbols.sh libtapegrad.so [include/tapegrad ["SYMBOLS THAT MUST BE THERE"]]
# (libtapegrad_train.so too, with its own list)
# A shared libtapegrad exports the tg_-prefixed API and nothing else: no helper
# without the prefix, no symbol of a static archive linked in. Fails naming
# every other defined dynamic symbol, and if the API itself is missing. Given
# the installed headers' folder, every exported name must be declared there
# (no tg_ function of an internal header leaks out).
set -eu
lib=$1
hdrs=${2:-}
need=${3:-tg_version tg_ctx_init tg_record tg_backward tg_gradcheck tg_matmul tg_adamw_step tg_st_write}
[ -f "$lib" ] || { echo "exported_symbols: no such file: $lib" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort > "$tmp/all"
grep -v '^tg_' "$tmp/all" > "$tmp/other" || true
status=0
if [ -s "$tmp/other" ]; then
    echo "exported_symbols: $lib exports names without the tg_ prefix:" >&2
    sed 's/^/  /' "$tmp/other" >&2
    status=1
fi
for sym in $need; do
    grep -qx "$sym" "$tmp/all" || { echo "exported_symbols: $lib does not export $sym" >&2; status=1; }
done
if [ -n "$hdrs" ]; then
    cat "$hdrs"/*.h > "$tmp/headers"
    while read -r sym; do
        grep -qw "$sym" "$tmp/headers" || { echo "exported_symbols: $sym is in no header of $hdrs" >&2; status=1; }
    done < "$tmp/all"
fi
[ $status -eq 0 ] && echo "exported_symbols: $(wc -l < "$tmp/all") symbols, all tg_*"
exit $status
