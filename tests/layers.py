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
Usage: layers.py SOURCE_DIR; exit 1 with each breach named (file, line, header)."""
import os
import re
import sys

top = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
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

for b in bad:
    print(b)
n_mod = len({f"{l}/{os.path.splitext(n)[0]}" for l, n, _ in sources})
print(f"layers: {len(sources)} files, {n_mod} modules, {sum(map(len, edges.values()))} includes between modules: "
      f"{'ok' if not bad else str(len(bad)) + ' breaches'}")
sys.exit(1 if bad else 0)
