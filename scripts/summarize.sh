#!/usr/bin/env bash
# Summarises run logs: one row per run, then the √d_k verdicts.
#   scripts/summarize.sh runs/*.tsv
# The per-run figures (final_loss, ent/unif at the end, at 0 and at 10% of the
# steps, heads below 10% of uniform there) and the verdict are defined once, in
# scripts/tglogs.py (columns read by name: docs/logs.md).
# Verdicts (docs/logs.md#the-verdicts): each unscaled run against the scaled run whose
# settings are all the same but the scale (task, optimizer, d_head, seed, steps, lr,
# init, kernel, features, precision, framework: runs pair within one framework).
# Runs pair by the scale they applied: a kernel measured from outside by the multiplier
# its scale_* columns measured, not the scale it was passed. "failure reproduced":
#   counting tasks (hist, recall): final loss at least 3x the scaled run's and 0.25 nats above;
#   any other task (code, text): validation loss (else final training loss) at least
#   0.10 nats above, and more heads below 10% of uniform at 10% of the run.
# A quantity a log holds as nan is "not measured" and no verdict passes on it.
# Other trainers' CSV or TSV logs: scripts/tglogs.py import (docs/logs.md#bring-your-own-logs).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)   # its siblings: scripts/, or share/tapegrad/ once installed
case "${1:-}" in -h|--help) sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '/^set -e/d; s/^# \{0,1\}//'; exit 0 ;; esac
[ $# -gt 0 ] || { echo "usage: scripts/summarize.sh LOG.tsv ... (--help: what it prints)" >&2; exit 2; }
for f in "$@"; do [ -r "$f" ] || { echo "scripts/summarize.sh: cannot read '$f'" >&2; exit 2; }; done
exec python3 "$here/tglogs.py" summarize "$@"
