#!/usr/bin/env python3
"""The attention features have one table, TG_ATTN_FEATURE_TABLE in ops/attn_tables.h (issue 38):
its tokens, in bit order, are the exec protocol's (scripts/python/tapegrad_exec.py's FEATURES, which
exec_conformance.py's checks take) and the C kernel's (tests/exec_kernel.c's FEATURES); bits run
0, 1, ... without a gap; ops/attn_tables.c has a row of behaviour for each, in the same order. The
same for the conventions (TG_ATTN_CONVENTION_TABLE, tapegrad_exec.CONVENTIONS). Standard library;
run by CTest (feature_table)."""
import os
import re
import sys
import unittest

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "scripts", "python"))
import tapegrad_exec  # noqa: E402


def table(name="FEATURE"):
    text = open(os.path.join(TOP, "ops", "attn_tables.h"), encoding="utf-8").read()
    block = text[text.index("#define TG_ATTN_%s_TABLE(X)" % name):]
    block = block[:block.index("#define TG_ATTN_%s_ENUM_" % name)]
    return [(m.group(1), int(m.group(2)), m.group(3), m.group(4))
            for m in re.finditer(r'X\((\w+), (\d+), "([^"]*)", "([^"]*)"\)', block)]


class FeatureTable(unittest.TestCase):
    def test_bits_are_dense(self):
        rows = table()
        self.assertGreaterEqual(len(rows), 10)
        self.assertEqual([r[1] for r in rows], list(range(len(rows))))

    def test_python_side_has_the_tokens_in_order(self):
        self.assertEqual(tuple(r[3] for r in table()), tuple(tapegrad_exec.FEATURES))

    def test_conventions_too(self):   # the conventions' table (0.17): dense bits, the Python side's order
        rows = table("CONVENTION")
        self.assertGreaterEqual(len(rows), 8)
        self.assertEqual([r[1] for r in rows], list(range(len(rows))))
        self.assertEqual(tuple(r[3] for r in rows), tuple(tapegrad_exec.CONVENTIONS))

    def test_behaviour_rows_in_table_order(self):   # attn_tables.c: features[], conventions[] (0.20)
        src = open(os.path.join(TOP, "ops", "attn_tables.c"), encoding="utf-8").read()
        for name, prefix in (("FEATURE", "TG_ATTN_F_"), ("CONVENTION", "TG_ATTN_C_")):
            ids = [r[0] for r in table(name)]
            rows = re.findall(r"\{%s(\w+), name_(\w+), token_(\w+)," % prefix, src)
            self.assertEqual([r[0] for r in rows], ids, name)
            self.assertTrue(all(a == b == c for a, b, c in rows), rows)

    def test_ids_are_the_tokens_upper_case(self):   # attn_check --tables names TG_ATTN_F_<TOKEN>
        for name in ("FEATURE", "CONVENTION"):
            for r in table(name):
                self.assertEqual(r[0], r[3].upper(), r)

    def test_conformance_checks_take_the_module_tokens(self):
        import exec_conformance
        self.assertEqual(tuple(exec_conformance.KNOWN), tuple(tapegrad_exec.FEATURES))

    def test_c_kernel_declares_known_tokens(self):
        src = open(os.path.join(TOP, "tests", "exec_kernel.c"), encoding="utf-8").read()
        m = re.search(r'FEATURES\[\] = "([^"]*)"', src)
        self.assertIsNotNone(m, "tests/exec_kernel.c has no FEATURES")
        known = {r[3] for r in table()}
        self.assertTrue(set(m.group(1).split(",")) <= known, m.group(1))


if __name__ == "__main__":
    unittest.main()
