#!/usr/bin/env python3
"""The attention op against its floor: bench_attn lines of a normal build and of one built with
-DTG_TILE_FLOOR (tiles=...-floor: every tile product cut to one k step, wrong results), in
alternating rounds; per shape the median ms of each, the floor's share of the op, and the op's
share of the FMA peak were its products free (of_fma · ms / floor_ms).
    python3 scripts/python/attn_floor.py docs/data/bench/attn-floor.txt
"""
import statistics
import sys


def main(path):
    rows = [dict(w.split("=", 1) for w in line.split() if "=" in w)
            for line in open(path) if line.startswith("attn=")]
    by = {}
    for r in rows:   # columns by name
        floor = r["tiles"].endswith("-floor")
        key = (int(r["T"]), int(r["B"]), int(r["H"]), int(r["d_head"]), r["causal"])
        d = by.setdefault(key, {"op": [], "floor": [], "of_fma": []})
        d["floor" if floor else "op"].append(float(r["ms"]))
        if not floor:
            d["of_fma"].append(float(r["of_fma"].rstrip("%")))
    if not by:
        sys.exit(f"attn_floor.py: {path}: no attn= lines (bench_attn's output?)")
    print(f"{'T':>4} {'B':>3} {'H':>2} {'d_head':>6} {'op_ms':>7} {'floor_ms':>8} {'floor':>6} {'of_fma':>6} "
          f"{'if_free':>7} rounds")
    for (T, B, H, dh, _causal), d in sorted(by.items()):
        if not d["op"] or not d["floor"]:
            sys.exit(f"attn_floor.py: {path}: T={T} B={B} d_head={dh} lacks an op or a floor line")
        op, fl, of = (statistics.median(d[k]) for k in ("op", "floor", "of_fma"))
        print(f"{T:4} {B:3} {H:2} {dh:6} {op:7.3f} {fl:8.3f} {100 * fl / op:5.0f}% {of:5.0f}% {of * op / fl:6.0f}% "
              f"{len(d['op']):6}")
    print("medians over the rounds; floor: its share of the op's time; of_fma: the op's (bench_attn: visible "
          "pairs); if_free: of_fma were the products' k loops free")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: attn_floor.py BENCH_ATTN_OUTPUT")
    main(sys.argv[1])
