"""``python3 dev.py chaos``: run the fault suite and print its table.

    python -m tests.chaos [--ci] [--only TEXT]... [--rate 500] [--events 1000]
                          [--docs] [--keep]

``--docs`` writes the table into docs/robustness.md (section "Fault suite"); ``--keep`` leaves
each scenario's logs and data under the printed directory. Exits 1 if any scenario
failed (a wrong allow, a lost or doubly-applied event, a revision going back, no
recovery within 10 s).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.scenarios import SCENARIOS, Row, run_scenario, table

#: The page whose "Fault suite" section holds the latest full run's table.
PAGE = Path(__file__).resolve().parents[2] / "docs" / "robustness.md"
BEGIN, END = "<!-- fault-suite-table -->", "<!-- /fault-suite-table -->"


def write_table(rows: list[Row], *, rate: float, events: int) -> None:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    body = (f"{BEGIN}\nLatest full run ({stamp}, {events:,} events per burst, "
            f"{rate:.0f} checks/s, 2-core shared machine; ✗ = the scenario fails):\n\n"
            f"{table(rows)}\n{END}")
    text = PAGE.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{PAGE.name} has no {BEGIN} ... {END} block")
    PAGE.write_text(pattern.sub(lambda _: body, text))


async def main(args: argparse.Namespace) -> int:
    chosen = [s for s in SCENARIOS
              if (not args.ci or s.ci)
              and (not args.only or any(t.lower() in s.name.lower() for t in args.only))]
    root = Path(tempfile.mkdtemp(prefix="clearance-chaos-"))
    rows: list[Row] = []
    try:
        for index, scenario in enumerate(chosen):
            started = time.monotonic()
            print(f"[{index + 1}/{len(chosen)}] {scenario.name} ...", flush=True)
            row = await run_scenario(scenario, root / f"s{index}", rate=args.rate,
                                     events=args.events)
            rows.append(row)
            verdict = "ok" if row.passed else "FAILED"
            print(f"    {verdict} in {time.monotonic() - started:.0f} s ({row.replies:,} replies,"
                  f" {row.decisive:,} of them decisive)", flush=True)
            for line in row.details:
                print(f"    - {line}", flush=True)
    finally:
        if args.keep:
            print(f"logs and data kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(table(rows))
    if args.docs:
        write_table(rows, rate=args.rate, events=args.events)
    return 0 if all(row.passed for row in rows) else 1


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 dev.py chaos")
    parser.add_argument("--ci", action="store_true", help="only the CI subset")
    parser.add_argument("--only", action="append", default=[],
                        help="scenarios whose name contains TEXT (repeatable)")
    parser.add_argument("--rate", type=float, default=500.0, help="checks per second")
    parser.add_argument("--events", type=int, default=1000, help="events per burst")
    parser.add_argument("--docs", action="store_true",
                        help="write the table to docs/robustness.md")
    parser.add_argument("--keep", action="store_true", help="keep logs and data")
    return parser.parse_args()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(asyncio.run(main(parse())))
