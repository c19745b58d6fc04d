#!/usr/bin/env python3
"""The house drawn by the layout: core -> ops -> optim -> the attention-kernel layer
(experiments/libtapegrad_attn) -> the training kit (experiments/libtapegrad_train) -> the
experiments' model (experiments/model) -> the programs (experiments/*.c) -> the lab's
micro-benchmarks (experiments/lab). Every quoted
#include of a file in one layer must name a header of its own layer or an
earlier one; no two implementations include each other's headers (X.c includes
Y.h and Y.c includes X.h: ops/gemm.c and ops/gemm_plan.c once did), directly or
round a longer circle; and no headers include each other. (A header below an
implementation that includes it is no circle: attn_geom.h includes the
contract in attention.h, and attention.c, the op, includes attn_geom.h.)
Usage: layers.py SOURCE_DIR; exit 1 with each breach named (file, line, header).
layers.py --draw SOURCE_DIR: the house as text, a room a layer from the top down: its folder, its
modules and the rooms below it whose headers it includes (README.md's Layout prints it)."""
import os
import re
import sys

draw = len(sys.argv) > 1 and sys.argv[1] == "--draw"
args = sys.argv[2:] if draw else sys.argv[1:]
top = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
LAYERS = [("core", "core"), ("ops", "ops"), ("optim", "optim"),
          ("kernels", os.path.join("experiments", "libtapegrad_attn")),
          ("kit", os.path.join("experiments", "libtapegrad_train")),
          ("model", os.path.join("experiments", "model")), ("programs", "experiments"),
          ("lab", os.path.join("experiments", "lab"))]
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}
# generated into the build tree: the layer that owns each
GENERATED = {"tg_version.h": "core", "tg_ops.h": "ops", "tapegrad.h": "optim", "attn.h": "kernels", "train.h": "kit"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def files_of(layer, folder):
    path = os.path.join(top, folder)
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full) and name.endswith((".c", ".h")):
            yield name, full


home = dict(GENERATED)   # header name -> layer
sources = []             # (layer, name, path)
for layer, folder in LAYERS:
    for name, full in files_of(layer, folder):
        sources.append((layer, name, full))
        if name.endswith(".h"):
            if name in home and home[name] != layer:
                sys.exit(f"layers.py: {name} is in two layers ({home[name]}, {layer})")
            home[name] = layer

bad = []
edges = {".c": {}, ".h": {}}   # from implementations, from headers: module (layer/stem) -> modules included
for layer, name, full in sources:
    stem = f"{layer}/{os.path.splitext(name)[0]}"
    with open(full, encoding="utf-8") as f:
        for ln, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            header = os.path.basename(m.group(1))
            if header not in home:
                continue   # the tests' helpers, a program's own header outside the layers
            owner = home[header]
            if RANK[owner] > RANK[layer]:
                bad.append(f"{os.path.relpath(full, top)}:{ln}: {layer} includes {header} of the later layer {owner}")
            dep = f"{owner}/{os.path.splitext(header)[0]}"
            if dep != stem:
                edges[os.path.splitext(name)[1]].setdefault(stem, set()).add(dep)

# circles between modules: depth-first search, each circle named once
state, stack = {}, []


def visit(g, kind, u):
    state[u] = 1
    stack.append(u)
    for v in sorted(g.get(u, ())):
        if state.get(v) == 1:
            bad.append(f"a circle of includes between {kind}: " + " -> ".join(stack[stack.index(v):] + [v]))
        elif not state.get(v):
            visit(g, kind, v)
    stack.pop()
    state[u] = 2


for ext, kind in ((".c", "implementations"), (".h", "headers")):
    state.clear()
    for u in sorted(edges[ext]):
        if not state.get(u):
            visit(edges[ext], kind, u)

if draw:   # the rooms, the top one first
    for name, folder in reversed(LAYERS):
        mods = sorted({os.path.splitext(n)[0] for l, n, _ in sources if l == name})
        below = set()
        for ext in edges:
            for u, vs in edges[ext].items():
                if u.split("/")[0] == name:
                    below |= {v.split("/")[0] for v in vs if v.split("/")[0] != name}
        uses = ", ".join(n for n, _ in reversed(LAYERS) if n in below) or "-"
        print("+-- %s (%s/)" % (name, folder.replace(os.sep, "/")))
        line = "|   "
        for m in mods:
            if len(line) + len(m) > 100:
                print(line.rstrip())
                line = "|   "
            line += m + " "
        print(line.rstrip())
        print("|   includes from: %s" % uses)
    sys.exit(1 if bad else 0)
for b in bad:
    print(b)
n_mod = len({f"{l}/{os.path.splitext(n)[0]}" for l, n, _ in sources})
print(f"layers: {len(sources)} files, {n_mod} modules, {sum(map(len, edges.values()))} includes between modules: "
      f"{'ok' if not bad else str(len(bad)) + ' breaches'}")
sys.exit(1 if bad else 0)
