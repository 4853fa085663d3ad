"""Deleting JetStream streams between tests, for good.

nats-server answers a stream's deletion before its files are gone (it renames the
directory ``.<name>`` and removes it later): a stream created under the same name before
then can come back holding the deleted one's messages and consumers (seen under load, about
one create in five). So a deletion that a test's next stream relies on waits for the files.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import nats
from nats.js.errors import NotFoundError


async def delete_streams(nats_url: str, *names: str, state_dir: Path) -> None:
    """Delete ``names`` on the server at ``nats_url`` whose state directory (the one
    ``servers.nats_server`` was given) is ``state_dir``, and wait until their files are gone."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        for name in names:
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(name)
    finally:
        await nc.close()

    def held() -> bool:
        return any(path.name.lstrip(".") in names
                   for path in state_dir.glob("jetstream/*/*/streams/*"))

    for _ in range(2000):
        if not held():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"nats-server never removed the files of {names}")
