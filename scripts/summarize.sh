#!/usr/bin/env bash
# Summarises run logs: one row per run, then the √d_k verdicts.
#   scripts/summarize.sh runs/*.tsv
# The per-run figures (final_loss, ent/unif at the end, at 0 and at 10% of the
# steps, heads below 10% of uniform there) and the verdict are defined once, in
# scripts/tglogs.py (columns read by name: docs/logs.md).
# Verdict: the unscaled run against the scaled run of the same task, optimizer,
# d_head, seed, steps, lr, init and framework (scripts/torch_attn_scale.py's
# logs say framework=torch; verdicts pair runs of one framework only): "failure reproduced" when its final loss is
# at least 3x the scaled run's and at least 0.25 nats above it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)   # its siblings: scripts/, or share/tapegrad/ once installed
[ $# -gt 0 ] || { echo "usage: scripts/summarize.sh LOG.tsv ..." >&2; exit 2; }
for f in "$@"; do [ -r "$f" ] || { echo "scripts/summarize.sh: cannot read '$f'" >&2; exit 2; }; done
exec python3 "$here/tglogs.py" summarize "$@"
