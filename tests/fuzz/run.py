"""``python3 dev.py fuzz``: the fuzz campaign against a running system, with counts.

Starts nats-server and valkey-server from the wheels (temporary state), Clearance as
``clearance run all`` with the example fleet, then:

1. **requests** — at least ``--requests`` hostile requests over every request subject, in
   concurrent bursts beside the known-good requests (so the coalesced check path batches
   hostile and good checks together);
2. **events** — at least ``--objects`` hostile objects of every kind on
   ``clearance.events.<kind>.<id>``, in bursts; after each burst the sentinel policy is
   flipped and must take effect within a bound, and probe questions are asked.

Inputs come from a corpus of schema-valid documents drawn with Hypothesis (the wire
Structs, the CRDs), mutated with hostile values by a seeded generator: the same
``--seed`` replays the same campaign. A wedged or dead system is restarted on empty state
(and counted) so one bug does not hide the rest. Prints the counts; exits 1 unless every
bad count is 0. ``--skip-known`` leaves out the inputs of the bugs listed in
``tests/fuzz/known_bugs.py`` (to see whether anything else is left).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from clearance_core.wire import REQUESTS
from clearance_runtime import servers
from tests.fuzz import known_bugs
from tests.fuzz.hostile import HostileEvent
from tests.fuzz.live import Goods, LiveSystem, Sentinel, event_burst, request_burst
from tests.fuzz.oracle import BAD, Finding, Tally
from tests.fuzz.strategies import (
    EVENT_KINDS,
    hostile_event,
    hostile_request,
    valid_objects,
    valid_requests,
)

SUBJECTS = tuple(REQUESTS)


def corpus(strategy: st.SearchStrategy[Any], size: int) -> list[Any]:
    """``size`` documents drawn by Hypothesis (deterministic: derandomized)."""
    drawn: list[Any] = []

    @settings(max_examples=size, database=None, derandomize=True, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(doc: Any) -> None:
        drawn.append(doc)

    draw()
    return drawn


def _log(message: str) -> None:
    print(message, flush=True)


class Campaign:
    def __init__(self, args: argparse.Namespace, system: LiveSystem) -> None:
        self.args = args
        self.system = system
        self.rnd = random.Random(args.seed)
        self.tally = Tally()
        self.goods = Goods()
        self.sent = 0
        self.objects = 0
        self.skipped = 0
        self.restarts = 0
        self.findings = open(args.findings, "w") if args.findings else None  # noqa: SIM115

    def _record(self, findings: list[Finding]) -> None:
        self.tally.add(findings)
        if self.findings is not None:
            for f in findings:
                self.findings.write(json.dumps({
                    "label": f.label, "where": f.where, "detail": f.detail,
                    "input": base64.b64encode(f.body[:200_000]).decode()}) + "\n")

    def _keep(self, target: known_bugs.Target, where: str, body: bytes) -> bool:
        if self.args.skip_known and known_bugs.known(target, where, body):
            self.skipped += 1
            return False
        return True

    async def _healthy(self) -> bool:
        if not self.system.alive():
            return False
        status = await self.system.ask("clearance.v1.status", {}, timeout=5.0)
        return isinstance(status, dict) and "revision" in status

    async def _recover(self, why: str) -> None:
        self.restarts += 1
        _log(f"  restarting the system on empty state ({why})")
        await self.system.restart()
        await self.goods.record(self.system)

    async def requests(self, docs: dict[str, list[Any]]) -> None:
        big = self.args.big
        step = max(self.args.requests // 10, 1)
        next_report = step
        while self.sent < self.args.requests:
            subject = self.rnd.choice(SUBJECTS)
            bodies = [hostile_request(self.rnd.choice(docs[subject]), self.rnd, big=big)
                      for _ in range(self.rnd.randint(1, self.args.burst))]
            bodies = [b for b in bodies if self._keep("request", subject, b)]
            if not bodies:
                continue
            findings = await request_burst(self.system, subject, bodies, self.goods)
            self.sent += len(bodies) + len(self.goods.expected)
            self.tally.counts["requests sent"] += len(bodies) + len(self.goods.expected)
            self._record(findings)
            if any(f.label == "missing replies" for f in findings) and not await self._healthy():
                self.tally.add([Finding("services died", subject, b"\n".join(bodies),
                                        "no status reply after a burst with missing replies")])
                await self._recover("decision service not answering")
            if self.sent >= next_report:
                _log(f"  requests: {self.sent:,} sent, {self.tally.bad} bad so far")
                next_report += step

    async def events(self, objects: dict[str, list[Any]]) -> None:
        sentinel = Sentinel(bound=self.args.bound)
        step = max(self.args.objects // 10, 1)
        next_report = step
        stalls = 0
        while self.objects < self.args.objects:
            burst: list[HostileEvent] = []
            while len(burst) < self.args.event_burst:
                kind = self.rnd.choice(EVENT_KINDS)
                event = hostile_event(kind, self.rnd.choice(objects[kind]), self.rnd,
                                      big=self.args.big)
                if self._keep("event", kind, event.body):
                    burst.append(event)
            findings = await event_burst(self.system, burst, sentinel)
            self.objects += len(burst)
            self.tally.counts["hostile objects"] += len(burst)
            self._record(findings)
            if any(f.label in ("pipeline stalls", "services died") for f in findings):
                stalls += 1
                if stalls > self.args.max_restarts:
                    _log(f"  stopping the event phase: {stalls} stalls")
                    return
                await self._recover("pipeline stalled")
            if self.objects >= next_report:
                _log(f"  events: {self.objects:,} hostile objects, {self.tally.bad} bad so far")
                next_report += step


def _keep_log(source: Path, target: Path) -> None:
    target.write_bytes(source.read_bytes() if source.exists() else b"")


def table(campaign: Campaign, seconds: float) -> str:
    counts = campaign.tally.counts
    rows = [("requests sent", counts["requests sent"]),
            ("hostile objects", counts["hostile objects"])]
    rows += [(label, counts[label]) for label in BAD]
    rows += [("restarts (after a stall or a dead service)", campaign.restarts)]
    if campaign.args.skip_known:
        rows.append(("inputs skipped as known bugs", campaign.skipped))
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}}  {value:>9,}" for label, value in rows]
    lines.append(f"{'seconds':<{width}}  {seconds:>9,.0f}")
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    _log("drawing the corpus (Hypothesis: wire Structs and CRD schemas) ...")
    docs = {s: corpus(valid_requests(s), args.corpus) for s in SUBJECTS}
    objects = {k: corpus(valid_objects(k), args.corpus) for k in EVENT_KINDS}
    with tempfile.TemporaryDirectory(prefix="clearance-fuzz-") as tmp:
        root = Path(tmp)
        nats_srv, nats_url = servers.nats_server(root / "nats")
        valkey_srv, redis_url = servers.valkey_server(root / "valkey", persist=False)
        nats_srv.start()
        valkey_srv.start()
        system = LiveSystem(nats_url, redis_url, root / "clearance")
        campaign = Campaign(args, system)
        try:
            await system.start()
            await campaign.goods.record(system)
            _log(f"requests: {args.requests:,} to {len(SUBJECTS)} subjects ...")
            await campaign.requests(docs)
            _log(f"events: {args.objects:,} hostile objects of {len(EVENT_KINDS)} kinds ...")
            await campaign.events(objects)
        finally:
            await system.close()
            if args.service_log:
                await asyncio.to_thread(_keep_log, system.log_path, Path(args.service_log))
            valkey_srv.stop()
            nats_srv.stop()
    print()
    print(table(campaign, time.monotonic() - started))
    for label in BAD:
        for finding in campaign.tally.examples.get(label, []):
            print(finding)
    bad = campaign.tally.bad
    print(f"\n{'FAIL' if bad else 'OK'}: {bad} bad outcomes (seed {args.seed})")
    return 1 if bad else 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dev.py fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--corpus", type=int, default=80,
                        help="schema-valid documents drawn per subject and per kind")
    parser.add_argument("--burst", type=int, default=24, help="hostile requests per burst")
    parser.add_argument("--event-burst", type=int, default=20, help="hostile objects per burst")
    parser.add_argument("--big", type=float, default=0.004,
                        help="chance that a hostile edit is a large value (1 MB, deep)")
    parser.add_argument("--bound", type=float, default=5.0,
                        help="seconds a sentinel policy may take to take effect")
    parser.add_argument("--max-restarts", type=int, default=200,
                        help="stop the event phase after this many stalls")
    parser.add_argument("--skip-known", action="store_true",
                        help="leave out inputs of the bugs listed in tests/fuzz/known_bugs.py")
    parser.add_argument("--service-log", default=None, help="keep the services' log here")
    parser.add_argument("--findings", default=None,
                        help="write every finding (label, where, detail, input) as JSON lines")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
