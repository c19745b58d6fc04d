#!/usr/bin/env bash
# What attn_scale logs say at given steps: one line per log and step.
#   scripts/logat.sh [--steps 0,60,end] LOG.tsv ...
# For each step the first logged row at or after it ("end": the last row):
# the loss; the entropy over heads / uniform (mean, and the lowest and highest
# head); the largest attention logit and the share of rows with a top weight
# above 0.99 (over layers: the largest); the multiplier of q·k the heads used
# (lowest..highest; it moves only with --scale learned).
set -euo pipefail
usage() { echo "usage: scripts/logat.sh [--steps S,S,...|end] LOG.tsv ..." >&2; exit 2; }
steps="0,end"
[ "${1:-}" != --steps ] || { [ $# -ge 2 ] || usage; steps=$2; shift 2; }
[ $# -gt 0 ] || usage
[[ "$steps" =~ ^([0-9]+|end)(,([0-9]+|end))*$ ]] || { echo "scripts/logat.sh: --steps '$steps': numbers or 'end', separated by ','" >&2; exit 2; }
for f in "$@"; do [ -r "$f" ] || { echo "scripts/logat.sh: cannot read '$f'" >&2; exit 2; }; done
exec python3 "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/tglogs.py" logat --steps "$steps" "$@"   # columns by name
