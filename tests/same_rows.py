#!/usr/bin/env python3
"""Two run logs train alike: the same number of rows, and loss, ent_mean and grad_norm (read by
column name) within TOL of each other, relative (|a - b| <= TOL * (1 + |b|)). For the shell tests
that train one model two ways (an exec kernel against the built-in op, a resume against a
straight run).
    same_rows.py A.tsv B.tsv TOL      exit 0, or 1 naming the first step and column that differ"""
import csv
import sys


def rows(path):
    return list(csv.DictReader((l for l in open(path) if not l.startswith("#")), delimiter="\t"))


a, b, tol = rows(sys.argv[1]), rows(sys.argv[2]), float(sys.argv[3])
if not a or len(a) != len(b):
    sys.exit("rows: %d and %d" % (len(a), len(b)))
for x, y in zip(a, b):
    for col in ("loss", "ent_mean", "grad_norm"):
        if abs(float(x[col]) - float(y[col])) > tol * (1 + abs(float(y[col]))):
            sys.exit("step %s: %s %s vs %s" % (x["step"], col, x[col], y[col]))
