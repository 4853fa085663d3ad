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
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from clearance_api.wire import REQUESTS
from clearance_runtime.process import servers
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
        self.epoch = 0
        self.stopped_early = False
        self.next_report = 0
        self.restarting = asyncio.Lock()
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
        async with self.restarting:
            self.restarts += 1
            self.epoch += 1
            _log(f"  restarting the system on empty state ({why})")
            await self.system.restart()
            await self.goods.record(self.system)

    async def requests(self, docs: dict[str, list[Any]]) -> None:
        """``--workers`` concurrent senders (a request that gets no reply costs its
        deadline; the others keep going meanwhile), each with its own seeded generator."""
        step = max(self.args.requests // 10, 1)
        self.next_report = step

        async def worker(index: int) -> None:
            rnd = random.Random(self.args.seed * 1000 + index)
            while self.sent < self.args.requests:
                await self._request_burst(rnd, docs, step)

        await asyncio.gather(*(worker(i) for i in range(self.args.workers)))

    async def _request_burst(self, rnd: random.Random, docs: dict[str, list[Any]],
                             step: int) -> None:
        subject = rnd.choice(SUBJECTS)
        bodies = [hostile_request(rnd.choice(docs[subject]), rnd, big=self.args.big)
                  for _ in range(rnd.randint(1, self.args.burst))]
        bodies = [b for b in bodies if self._keep("request", subject, b)]
        if not bodies:
            return
        async with self.restarting:  # not while the system restarts
            epoch = self.epoch
        findings = await request_burst(self.system, subject, bodies, self.goods)
        sent = len(bodies) + len(self.goods.expected)
        self.sent += sent
        self.tally.counts["requests sent"] += sent
        if epoch != self.epoch:
            return  # the system restarted under this burst: its findings say nothing
        self._record(findings)
        if any(f.label == "missing replies" for f in findings) and not await self._healthy() \
                and epoch == self.epoch:
            self._record([Finding("services died", subject, b"\n".join(bodies),
                                  "no status reply after a burst with missing replies")])
            await self._recover("decision service not answering")
        if self.sent >= self.next_report:
            _log(f"  requests: {self.sent:,} sent, {self.tally.bad} bad so far")
            self.next_report += step

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
                    _log(f"  stopping the event phase early: {stalls} stalls "
                         f"(--max-restarts {self.args.max_restarts})")
                    self.stopped_early = True
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
    if campaign.stopped_early:
        rows.append(("event phase stopped early (too many stalls)", 1))
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
        system = LiveSystem(nats_url, redis_url, root / "clearance",
                            reply_timeout=args.reply_timeout)
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
    parser.add_argument("--workers", type=int, default=8,
                        help="request bursts in flight at once (a neighbour failure is then "
                             "attributed to its own burst, though a concurrent one may share "
                             "its batch)")
    parser.add_argument("--reply-timeout", type=float, default=5.0,
                        help="seconds a request may take before it counts as unanswered")
    parser.add_argument("--event-burst", type=int, default=20, help="hostile objects per burst")
    parser.add_argument("--big", type=float, default=0.004,
                        help="chance that a hostile edit is a large value (1 MB, deep)")
    parser.add_argument("--bound", type=float, default=5.0,
                        help="seconds a sentinel policy may take to take effect")
    parser.add_argument("--max-restarts", type=int, default=25,
                        help="stop the event phase after this many stalls")
    parser.add_argument("--skip-known", action="store_true",
                        help="leave out inputs of the bugs listed in tests/fuzz/known_bugs.py")
    parser.add_argument("--service-log", default=None, help="keep the services' log here")
    parser.add_argument("--findings", default=None,
                        help="write every finding (label, where, detail, input) as JSON lines")
    return parser.parse_args(argv)


async def _main_until_signalled(args: argparse.Namespace) -> int:
    """SIGTERM, like Ctrl-C, stops the campaign cleanly (servers and services stopped)."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await main(args)


if __name__ == "__main__":
    sys.exit(asyncio.run(_main_until_signalled(parse(sys.argv[1:]))))
