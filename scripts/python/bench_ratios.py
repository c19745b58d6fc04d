#!/usr/bin/env python3
"""The per-round ratios of a scripts/bench.sh output: tapegrad's median over the better of
PyTorch's two medians (default and tuned malloc) in the same round, per size, with their median
and range over the rounds (bench.sh's own table has the medians' ratio only).
    python3 scripts/python/bench_ratios.py docs/data/bench/step-threads2.txt
"""
import statistics
import sys


def main(path):
    rows = [dict(w.split("=", 1) for w in line.split() if "=" in w)
            for line in open(path) if line.startswith("impl=")]
    by = {}
    for r in rows:   # columns by name; the rounds in file order
        by.setdefault(r["size"], {}).setdefault(r["impl"], []).append(float(r["median_ms"]))
    if not by:
        sys.exit(f"bench_ratios.py: {path}: no impl= lines (a scripts/bench.sh output?)")
    print(f"{'size':6} {'tapegrad_ms':>11} {'torch_ms':>9} {'ratio':>6} {'ratio_range':>12} rounds")
    for size, d in by.items():
        if not all(k in d for k in ("tapegrad", "torch", "torch_tuned")):
            sys.exit(f"bench_ratios.py: {path}: size {size} lacks a tapegrad, torch or torch_tuned line")
        tg, best = d["tapegrad"], [min(a, b) for a, b in zip(d["torch"], d["torch_tuned"])]
        per = [a / b for a, b in zip(tg, best)]
        print(f"{size:6} {statistics.median(tg):11.2f} {statistics.median(best):9.2f} {statistics.median(per):5.2f}x "
              f"{min(per):5.2f}-{max(per):.2f}x {len(per):6}")
    print("ratio: the median over the rounds of tapegrad's median over the better PyTorch median of the same round")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench_ratios.py BENCH_SH_OUTPUT")
    main(sys.argv[1])
