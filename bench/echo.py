"""The baseline: the leanest possible nats-py responder (queue group, echoes the body)."""

from __future__ import annotations

import asyncio
import sys

import nats
from nats.aio.msg import Msg


async def main(url: str, subject: str) -> None:
    nc = await nats.connect(url)

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(subject, queue="echo", cb=echo)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
