"""A downstream service following Clearance's events, written with FastStream.

It listens to ``clearance.decisions.changed`` (whose answers may have changed: drop your
own per-user caches, refresh open dashboards) and to ``clearance.status.>`` (a policy's
status: alert on an invalid or overridden policy). Bodies are decoded into the contract's
msgspec Structs, so a message off the contract is refused, not half-read.

    python docs/examples/subscriber.py            # CLEARANCE_NATS_URL, default localhost
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field

import msgspec
from faststream import FastStream
from faststream.nats import NatsBroker
from faststream.nats.annotations import NatsMessage

from clearance_api.wire import SUBJECT_DECISIONS_CHANGED, DecisionsChanged, PolicyStatus


@dataclass
class Follower:
    """What the subscriber learnt; a real service would act on it instead."""

    changes: list[DecisionsChanged] = field(default_factory=list)
    #: (kind, namespace token, name token) -> its latest status
    statuses: dict[tuple[str, str, str], PolicyStatus] = field(default_factory=dict)
    seen: asyncio.Event = field(default_factory=asyncio.Event)

    def stale_users(self) -> set[str]:
        return {u for c in self.changes for u in c.principals.users}


def create(nats_url: str) -> tuple[NatsBroker, Follower]:
    broker = NatsBroker(nats_url)
    follower = Follower()

    @broker.subscriber(SUBJECT_DECISIONS_CHANGED)
    async def decisions_changed(msg: NatsMessage) -> None:
        event = msgspec.json.decode(msg.body, type=DecisionsChanged)
        follower.changes.append(event)
        follower.seen.set()

    @broker.subscriber("clearance.status.>")
    async def status_changed(msg: NatsMessage) -> None:
        # clearance.status.<kind>.<namespace>.<name>; a name may hold further dots
        _, _, kind, namespace, name = msg.raw_message.subject.split(".", 4)
        follower.statuses[(kind, namespace, name)] = msgspec.json.decode(msg.body,
                                                                         type=PolicyStatus)
        follower.seen.set()

    return broker, follower


broker, follower = create(os.environ.get("CLEARANCE_NATS_URL", "nats://127.0.0.1:4222"))
app = FastStream(broker)

if __name__ == "__main__":
    asyncio.run(app.run())
