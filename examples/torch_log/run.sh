#!/usr/bin/env bash
# Your own PyTorch training loop, judged by tapegrad's tools (docs/logs.md#bring-your-own-logs):
# train.py trains a small byte-level language model on C headers (libc6-dev's, as attn_scale
# --task code) with and without the 1/sqrt(d_head) scale, d_head 128, logging each run with the
# tapegrad_log writer (run_SCALE_sSEED.tsv) and as a plain CSV (run_SCALE_sSEED.csv). The CSVs go
# through `tapegrad-logs import`; then both sets are summarized (a verdict per seed) and plotted.
#   ./run.sh [--seeds "1 2 3"] [--steps 600] [--out DIR]
#   ./run.sh --test      in a scratch folder, with this tree's scripts; exit 77 without torch
# Uses an installed tapegrad (pkg-config; bin/tapegrad-logs, share/tapegrad/python) when there is
# one, else this tree's scripts/. PyTorch for $PYTHON (default /usr/bin/python3: python3-torch).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
seeds="1 2 3" steps=600 out="$here/runs" test=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) seeds=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --test) test=1; shift ;;
        *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
py=${PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import torch' 2>/dev/null; then
    echo "run.sh: $py cannot import torch (Debian: apt-get install python3-torch)${test:+: skipped}" >&2
    [ -n "$test" ] && exit 77 || exit 2
fi
# the corpus: libc6-dev's C headers, sorted (attn_scale --task code's text: the same on every Debian 12)
mapfile -t corpus < <(dpkg -L libc6-dev 2>/dev/null | grep '\.h$' | sort | while read -r f; do [ -f "$f" ] && echo "$f"; done)
[ ${#corpus[@]} -gt 0 ] || { echo "run.sh: no C headers of libc6-dev (Debian: apt-get install libc6-dev)" >&2; exit 2; }
tree="$here/../../scripts"
if [ -z "$test" ] && prefix=$(pkg-config --variable=prefix tapegrad 2>/dev/null) && [ -x "$prefix/bin/tapegrad-logs" ]; then
    logs() { "$prefix/bin/tapegrad-logs" "$@"; }
    export PYTHONPATH="$prefix/share/tapegrad/python${PYTHONPATH:+:$PYTHONPATH}"
else
    logs() { case "$1" in summarize|plot) c=$1; shift; bash "$tree/$c.sh" "$@" ;; *) python3 "$tree/tglogs.py" "$@" ;; esac; }
    export PYTHONPATH="$tree/python${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -n "$test" ]; then
    out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out/imported"
for s in $seeds; do   # the two scales of a seed side by side (one thread each)
    for scale in none sqrt; do
        "$py" "$here/train.py" --scale $scale --seed "$s" --steps "$steps" --out "$out" --corpus "${corpus[@]}" &
    done
    wait
done
for f in "$out"/run_*.csv; do
    n=$(basename "$f" .csv); scale=${n#run_}; scale=${scale%_s*}; seed=${n##*_s}
    logs import "$f" "$out/imported/$n.tsv" --col step=global_step --col loss=train/loss --col val_loss=val/loss \
        --entropy 'attn_entropy/layer{l}/head{h}' --task bytes --scale "$scale" --seed "$seed" --d-head 128 \
        --seq-len 64 --steps "$steps" --set optim=adamw --set framework=torch --overwrite
done
logs summarize "$out"/run_*.tsv | tee "$out/summary.txt"
logs summarize "$out"/imported/*.tsv | tee "$out/imported/summary.txt"
logs plot "$out"/run_*.tsv -o "$out/torch_log.png" --title "examples/torch_log"
if [ -n "$test" ]; then   # every seed a verdict, the same from the writer's logs and the imported CSVs
    n=$(echo $seeds | wc -w)
    a=$(grep -c '^none vs sqrt.*: failure reproduced;' "$out/summary.txt" || true)
    b=$(grep -c '^none vs sqrt.*: failure reproduced;' "$out/imported/summary.txt" || true)
    [ "$a" -eq "$n" ] && [ "$b" -eq "$n" ] || { echo "torch_log: failure reproduced in $a (writer) and $b (imported) of $n seeds" >&2; exit 1; }
    for p in torch_log.png torch_log-entropy.png torch_log-valloss.png; do [ -s "$out/$p" ] || { echo "torch_log: no $p" >&2; exit 1; }; done
    echo "torch_log: failure reproduced in $n of $n seeds, from the writer's logs and from the CSVs"
fi
