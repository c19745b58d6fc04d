#!/usr/bin/env python3
"""The paths a comment or a page names that are not there (scripts/docs.sh --check runs it): in
every source, build and script file of the tree and every page (README.md, docs/*.md), each path
into the tree's folders (core/ ops/ optim/ experiments/ tests/ scripts/ examples/ docs/) with a
file's ending, and each page#anchor into docs/, must name a file that exists and a heading of that
page. Run from the top. Prints "FILE:LINE: 'PATH': ..." a dead one; exit 1 when there is one.
Anchors: ANCHORS_FILE, lines "page<TAB>anchor" (docs.sh makes them)."""
import os
import re
import subprocess
import sys

ROOTS = ("core", "ops", "optim", "experiments", "tests", "scripts", "examples", "docs")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*?\.(?:c|h|md|sh|py|gp|in|txt|tsv|cpp|cmake|map|dynlist|png))"
                  r"(#[\w-]+)?(?![\w/]|\.\w)" % "|".join(ROOTS))
CODE = (".c", ".h", ".cpp", ".sh", ".py", ".cmake", ".in", ".gp", ".map", ".dynlist", ".md", "CMakeLists.txt", "run")


def files():
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True,
                             check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = [os.path.relpath(os.path.join(d, f)) for d, _, fs in os.walk(".") for f in fs]
    for f in out:
        if not f or f.startswith(("build", "docs/data/")) or "/fuzz/corpus/" in f or "/fuzz/regress/" in f:
            continue
        if f.endswith(CODE) and os.path.isfile(f):
            yield f


def main():
    anchors = set()
    if len(sys.argv) > 1:
        with open(sys.argv[1], encoding="utf-8") as fh:
            anchors = {tuple(line.rstrip("\n").split("\t", 1)) for line in fh if "\t" in line}
    bad = 0
    for f in files():
        with open(f, encoding="utf-8", errors="replace") as fh:
            for ln, line in enumerate(fh, 1):
                for m in PATH.finditer(line):
                    path, anchor = m.group(1).rstrip("."), m.group(2)
                    if "*" in path or "<" in path or path.endswith("/"):
                        continue
                    if not os.path.exists(path):
                        print("%s:%d: '%s': no such file" % (f, ln, path))
                        bad += 1
                    elif anchor and path.endswith(".md") and anchors and (path, anchor[1:]) not in anchors:
                        print("%s:%d: '%s%s': no heading with that anchor in %s" % (f, ln, path, anchor, path))
                        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
