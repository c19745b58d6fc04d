# Sourced by the shell tests of attn_scale (robust_cli.sh, scale_cli.sh) after
# setting bin: a scratch folder to work in (kept when KEEP is set, for
# debugging), the failure count and the helpers.
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
rows() { grep -v '^#' "$1"; }                       # the header row and the data rows
summary() { sed 's/ seconds=.*//' "$1"; }            # the summary line without the time
run() {   # run WANT_RC NAME ARGS...: stdout in NAME.out, stderr in NAME.err
    want=$1; name=$2; shift 2
    "$bin" "$@" >"$name.out" 2>"$name.err"
    rc=$?
    [ "$rc" -eq "$want" ] || { no "$name: exit $rc, want $want"; sed 's/^/  | /' "$name.err" | head -5; }
}
# Refusals: guard LOG FILE copies them to keep.tsv and keep.st, which the
# refused runs are pointed at; bad NAME EXPECTED_MESSAGE ARGS... wants exit 2,
# the message, and both copies unchanged.
guard() { orig_log=$1; orig_st=$2; cp "$1" keep.tsv; cp "$2" keep.st; }
bad() {
    name=$1; msg=$2; shift 2
    run 2 "$name" "$@"
    grep -q -- "$msg" "$name.err" || { no "$name: message lacks '$msg'"; sed 's/^/  | /' "$name.err" | head -3; }
    cmp -s keep.tsv "$orig_log" || { no "$name: an existing log changed"; cp "$orig_log" keep.tsv; }
    cmp -s keep.st "$orig_st" || { no "$name: an existing $orig_st changed"; cp "$orig_st" keep.st; }
}
