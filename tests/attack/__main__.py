"""``python3 dev.py attack``: run the attack suite and print what each family tried.

    python -m tests.attack [--full] [--only TEXT]... [-- PYTEST ARGS]

Each module of ``tests/attack`` is one family of attacks (its docstring's first line
says which); each test one attack. The table lists, per family, how many attacks were
tried and how many held (the attack failed to grant, stall, leak or crash). ``--full``
sets ``CLEARANCE_ATTACK_FULL=1``: the families that have heavier variants (bigger
floods, more connections) run them. The full test command runs the same modules without
``--full``. Exits 1 if any attack succeeded.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


def family(module: Path) -> str:
    """The first line of a family module's docstring."""
    doc = ast.get_docstring(ast.parse(module.read_text())) or module.stem
    return doc.strip().splitlines()[0].rstrip(".")


class Tally:
    """A pytest plugin: outcomes per attack module."""

    def __init__(self) -> None:
        self.outcomes: dict[str, dict[str, str]] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        module = report.nodeid.split("::", 1)[0]
        tests = self.outcomes.setdefault(module, {})
        if (report.when == "call" or report.outcome != "passed") \
                and tests.get(report.nodeid) in (None, "passed"):
            tests[report.nodeid] = report.outcome


def table(tally: Tally) -> str:
    rows = [("family", "module", "attacks", "held", "succeeded")]
    for module, tests in sorted(tally.outcomes.items()):
        held = sum(outcome == "passed" for outcome in tests.values())
        rows.append((family(HERE.parents[1] / module), Path(module).name, str(len(tests)),
                     str(held), str(len(tests) - held)))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
             for row in rows]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def main() -> int:
    parser = argparse.ArgumentParser(prog="python3 dev.py attack")
    parser.add_argument("--full", action="store_true", help="heavier variants too")
    parser.add_argument("--only", action="append", default=[],
                        help="families whose module name contains TEXT (repeatable)")
    args, rest = parser.parse_known_args()
    if args.full:
        os.environ["CLEARANCE_ATTACK_FULL"] = "1"
    modules = sorted(str(p) for p in HERE.glob("test_*.py")
                     if not args.only or any(t in p.stem for t in args.only))
    tally = Tally()
    code = pytest.main(["-q", "-p", "no:cacheprovider", *modules,
                        *[a for a in rest if a != "--"]], plugins=[tally])
    print()
    print(table(tally))
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
