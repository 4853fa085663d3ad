"""``python3 dev.py regions``: two Clearance regions on loopback (docs/regions.md).

    python -m tests.regions [--dir DIR] [--manifests DIR]

Region A (the hub) loads a copy of ``examples/`` (or ``--manifests``) with its watcher;
region B answers from a mirror of A's stream. Prints where each region answers (its NATS
URL, as the ``client`` and ``operator`` users), asks both the same question and shows
the two answers at the same revision, then runs until Ctrl-C. Edit the manifests under
A's directory and ask either region again; each process's log is under ``DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import nats
import nats.errors

from clearance_api import inboxes
from tests import secured
from tests.regions import Region, Regions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: The question both regions are asked once they are up (examples/ grants it).
QUESTION = {"principal": {"username": "alice", "groups": []}, "action": "view",
            "resource": {"type": "cluster", "name": "prod-us-east"}}


async def _ask(region: Region, body: dict[str, Any], timeout: float = 60.0
               ) -> dict[str, Any]:
    """Ask ``region`` as its ``operator`` user until it answers from a built state."""
    url = region.url_as("operator")
    nc = await nats.connect(url, inbox_prefix=inboxes.prefix_for(url))
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                reply: dict[str, Any] = json.loads((await nc.request(
                    "clearance.v1.check", json.dumps(body).encode(), timeout=5)).data)
                if reply.get("error", {}).get("code") != "unavailable":
                    return reply
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise SystemExit(f"region {region.domain} did not answer within {timeout} s")
            await asyncio.sleep(0.2)
    finally:
        await nc.close()


async def main(root: Path, manifests: Path) -> None:
    regions = Regions(root)
    assert regions.hub.manifests is not None
    shutil.copytree(manifests, regions.hub.manifests, dirs_exist_ok=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await regions.start()
    try:
        in_a = await _ask(regions.hub, QUESTION)
        in_b = await _ask(regions.eu, {**QUESTION, "min_revision": in_a.get("revision", 0),
                                       "timeout_ms": 30_000})
        for region, reply in ((regions.hub, in_a), (regions.eu, in_b)):
            role = "hub: watcher, compiler, invalidator, decision" if region is regions.hub \
                else "mirror of hub's stream: compiler, invalidator, decision"
            print(f"region {region.domain} ({role})\n"
                  f"  NATS    {secured.as_user(region.nats_url, 'client')}\n"
                  f"          {secured.as_user(region.nats_url, 'operator')}\n"
                  f"  Valkey  {region.redis_url}\n"
                  f"  alice views prod-us-east: {reply.get('decision', reply)} "
                  f"at revision {reply.get('revision')}")
        print(f"manifests (region hub's watcher): {regions.hub.manifests}\n"
              f"logs: {root}/<a|b>/logs, {root}/<a|b>/nats/nats.log\n"
              f"e.g. clearance status -s "
              f"{secured.as_user(regions.eu.nats_url, 'operator')}\n"
              f"Ctrl-C stops both regions.", flush=True)
        await stop.wait()
    finally:
        await regions.close()


def run() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.regions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the regions keep their state and logs "
                             "(default: a new temporary directory, kept)")
    parser.add_argument("--manifests", type=Path, default=EXAMPLES,
                        help="the manifests region hub's watcher loads (default: examples/)")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="clearance-regions-"))
    root.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(root, args.manifests))


if __name__ == "__main__":
    run()
