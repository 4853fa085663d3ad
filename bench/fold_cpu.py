"""The compiler's CPU to fold a rebuild's events, in this process, without sockets.

``bench/rebuild.py`` times the whole pipeline on real servers; on a shared machine its
figures move by ±7% from run to run, more than most single changes to the compiler
make. This folds the same 99,900 events (``rebuild.fleet_copy``) through the
compiler's own :class:`~clearance_compiler.folder.Folder` — decode, fold, the batch's
writes and change records, each commit's script input packed by hiredis as it is sent,
each status encoded — with a store that keeps nothing and a bus that takes nothing, as a
build from the first event folds them, and prints the CPU seconds per 100,000 events
(and the collector's share). What it leaves out is the compiler's I/O: reading the
stream, the sockets' writes, the round trips between batches (~30% of its CPU in
``rebuild.py``).

    python bench/fold_cpu.py [--copies N]

To compare with another checkout, put its ``libs`` and ``services/*`` first on
PYTHONPATH, and alternate the two runs.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import redis.asyncio as aioredis
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rebuild

from clearance_compiler.folder import Folder
from clearance_core.folding.model import Model
from clearance_runtime.process import heap
from clearance_runtime.storage.commits import Batch
from clearance_runtime.storage.packing import use_hiredis_packing

#: Events per commit, as the compiler reads them (``clearance_compiler.app.BATCH``).
BATCH = 512


class _Store:
    """Commits nothing, but builds and packs each commit as the compiler's store does."""

    def __init__(self) -> None:
        self._conn = use_hiredis_packing(aioredis.Redis()).connection_pool.make_connection()

    async def load_model(self) -> Model:
        return Model()

    async def commit(self, batch: Batch) -> None:
        script_keys, commands = batch.script_input()
        self._conn.pack_command("EVALSHA", "0" * 40, len(script_keys), *script_keys, "1",
                                commands)


class _Bus:
    async def publish(self, subject: str, payload: bytes) -> None:
        return None


async def fold(events: list[bytes]) -> float:
    """CPU seconds to fold ``events`` as one build."""
    folder = Folder(_Store(), _Bus())  # type: ignore[arg-type]
    folder.building_until = len(events)
    stored = int(time.time() * 1000) - 5000  # published a while ago: a backlog
    started = time.process_time()
    for start in range(0, len(events), BATCH):
        for seq, data in enumerate(events[start:start + BATCH], start + 1):
            await folder.fold(seq, data, stored, pending=len(events) - seq)
        await folder.commit()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=rebuild.COPIES)
    copies = parser.parse_args().copies
    events = [msgspec.json.encode({"type": "ADDED", "object": obj})
              for k in range(copies) for obj in rebuild.fleet_copy(k)]
    heap.settle()  # as a service starts
    collected = [0.0, 0.0]

    def timed(phase: str, _: dict[str, Any]) -> None:
        if phase == "start":
            collected[1] = time.perf_counter()
        else:
            collected[0] += time.perf_counter() - collected[1]

    gc.callbacks.append(timed)
    cpu = uvloop.run(fold(events))
    per = 100_000 / len(events)
    print(f"folded {len(events):,} events: {cpu * per:.3f} s of CPU per 100,000 "
          f"({collected[0] * per:.3f} s of it collecting garbage)")


if __name__ == "__main__":
    main()
