"""The compiler's reader of the event stream (``clearance_runtime.messaging.pull.Puller``),
on the real
NATS server: every message once, in stream order, in bounded batches; an idle stream
answers at once when an event comes; a request that expires is renewed; a deleted
consumer is an outage the compiler restarts from."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from clearance_runtime.messaging import bus
from clearance_runtime.messaging.pull import Puller, PullFailed
from clearance_runtime.process import servers
from clearance_runtime.process.outages import is_transient
from tests.conftest import Servers
from tests.support.streams import delete_streams

STREAM, SUBJECTS, DURABLE = "PULL_TEST", "pulltest.>", "reader"


async def with_consumer(js: JetStreamContext) -> None:
    """The test stream and its durable consumer, as the compiler configures its own."""
    await js.add_stream(name=STREAM, subjects=[SUBJECTS])
    await with_consumer_only(js)


@pytest.fixture
async def nc(real_servers: Servers) -> AsyncIterator[Client]:
    await delete_streams(real_servers.nats_url, STREAM, state_dir=real_servers.root / "nats")
    client = await nats.connect(real_servers.nats_url)
    js = client.jetstream()
    await with_consumer(js)
    yield client
    await js.delete_stream(STREAM)
    await client.close()


async def publish(nc: Client, count: int, start: int = 0) -> None:
    js = nc.jetstream()
    for i in range(start, start + count):
        await js.publish(f"pulltest.o{i % 97}", str(i).encode())


@contextlib.asynccontextmanager
async def reading(nc: Client, **options: Any) -> AsyncIterator[Puller]:
    """A started reader of the test consumer, stopped afterwards."""
    puller = Puller(nc, stream=STREAM, durable=DURABLE, **options)
    await puller.start()
    try:
        yield puller
    finally:
        await puller.stop()


async def read(puller: Puller, count: int, *, batch: int) -> list[int]:
    """Stream sequences of ``count`` messages, checking each batch's size and acking it."""
    seqs: list[int] = []
    while len(seqs) < count:
        msgs = await puller.next_batch(wait=5.0)
        assert msgs, f"stalled after {len(seqs)} of {count}"
        assert len(msgs) <= batch
        seqs += [at.stream_seq for _, at in msgs]
        assert [int(m.data) for m, _ in msgs] == [s - 1 for s in seqs[-len(msgs):]]
        assert all(at == bus.position(m) for m, at in msgs)
        await msgs[-1].msg.ack()
    return seqs


async def test_a_backlog_comes_once_in_stream_order_in_bounded_batches(nc: Client) -> None:
    await publish(nc, 1300)
    async with reading(nc, batch=128) as puller:
        assert await read(puller, 1300, batch=128) == list(range(1, 1301))
        assert await puller.next_batch(wait=0.3) == []  # nothing more, nothing twice
        await publish(nc, 200, start=1300)  # and what comes later follows on
        assert await read(puller, 200, batch=128) == list(range(1301, 1501))


async def test_an_idle_stream_answers_at_once_when_an_event_comes(nc: Client) -> None:
    async with reading(nc, batch=512) as puller:
        started = time.monotonic()
        assert await puller.next_batch(wait=0.3) == []
        assert time.monotonic() - started < 2.0
        waiting = asyncio.ensure_future(puller.next_batch(wait=10.0))
        await asyncio.sleep(0.2)
        published = time.monotonic()
        await publish(nc, 1)
        msgs = await waiting
        assert [m.data for m, _ in msgs] == [b"0"]
        # The open request delivers it: no poll interval between the event and the fold.
        assert time.monotonic() - published < 1.0


async def test_an_expired_request_is_renewed(nc: Client) -> None:
    async with reading(nc, batch=16, expires=0.3) as puller:
        for _ in range(4):  # more than one expiry, each ending the open request
            assert await puller.next_batch(wait=0.4) == []
        await publish(nc, 40)
        assert await read(puller, 40, batch=16) == list(range(1, 41))


async def test_a_deleted_consumer_is_an_outage_to_restart_from(nc: Client) -> None:
    async with reading(nc, batch=16) as puller:
        assert await puller.next_batch(wait=0.2) == []  # a request is open
        await nc.jetstream().delete_consumer(STREAM, DURABLE)
        with pytest.raises(PullFailed) as caught:
            for _ in range(20):
                await puller.next_batch(wait=0.5)
        assert is_transient(caught.value)  # the compiler's retry loop starts over



async def test_a_message_larger_than_a_request_may_carry_comes_alone_in_its_turn(
        nc: Client) -> None:
    js = nc.jetstream()
    await js.publish("pulltest.small", b"0")
    await js.publish("pulltest.large", b"1" + b"x" * 200_000)  # over max_bytes below
    await js.publish("pulltest.small", b"2")
    async with reading(nc, batch=16, max_bytes=64_000) as puller:
        got: list[bytes] = []
        for _ in range(10):
            got += [m.data[:1] for m, _ in await puller.next_batch(wait=2.0)]
            if len(got) == 3:
                break
        assert got == [b"0", b"1", b"2"]  # in order, none skipped, the large one whole


async def test_a_lost_delivery_fails_the_reader_instead_of_being_skipped(nc: Client) -> None:
    """With AckPolicy.ALL, acknowledging a later message would acknowledge a lost one:
    a gap in the consumer's delivery sequence must stop the reader (the compiler then
    restarts from its checkpoint and the server delivers the message again)."""
    await publish(nc, 3)
    async with reading(nc, batch=16) as puller:
        msgs = await read(puller, 3, batch=16)
        assert msgs == [1, 2, 3]
        # A delivery the server made but this client never handed over (dropped with a
        # connection): the next one received carries consumer sequence 5, not 4.
        lost = Msg(_client=nc, subject=puller._inbox, data=b"x",
                   reply=f"$JS.ACK.{STREAM}.{DURABLE}.1.5.5.1700000000000000000.0")
        await puller._on_message(lost)
        with pytest.raises(PullFailed, match="delivery 4 was lost"):
            await puller.next_batch(wait=1.0)
        assert is_transient(PullFailed("x"))

async def test_a_fresh_consumer_must_start_at_its_first_delivery(nc: Client) -> None:
    """The compiler asks again for a consumer whose creation it never saw answered, and
    reads it as fresh: had it delivered anything that never arrived, the first delivery
    received is not the first, and the reader fails instead of folding from there."""
    await publish(nc, 5)
    async with reading(nc, batch=16, fresh=True) as puller:
        assert not puller.answered
        assert await read(puller, 5, batch=16) == [1, 2, 3, 4, 5]
        assert puller.answered  # the consumer has a leader: its deletion may go on
    js = nc.jetstream()
    await js.delete_consumer(STREAM, DURABLE)
    await with_consumer_only(js)
    # Two deliveries the server made to someone else (lost on the way, for the compiler).
    other = await js.pull_subscribe_bind(DURABLE, stream=STREAM)
    assert len(await other.fetch(2, timeout=5.0)) == 2
    await other.unsubscribe()
    async with reading(nc, batch=16, fresh=True) as puller:
        with pytest.raises(PullFailed, match="delivery 1 was lost"):
            for _ in range(10):
                await puller.next_batch(wait=1.0)


async def with_consumer_only(js: JetStreamContext) -> None:
    """The durable consumer alone, on the test stream."""
    await js.add_consumer(STREAM, ConsumerConfig(
        durable_name=DURABLE, deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.ALL,
        ack_wait=60.0, max_ack_pending=2048))


async def test_a_restarted_server_gets_a_new_request_at_once(tmp_path: Path) -> None:
    """A server killed with a request open forgets it and never sends its 408: the
    reader asks again as soon as the connection is back, not after the expiry."""
    server, url = servers.nats_server(tmp_path / "nats")
    server.start()
    client = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        js = client.jetstream()
        await with_consumer(js)
        await publish(client, 10)
        puller = Puller(client, stream=STREAM, durable=DURABLE, batch=64, expires=30.0)
        await puller.start()
        assert await read(puller, 10, batch=64) == list(range(1, 11))
        assert await puller.next_batch(wait=0.2) == []  # a request is open at the server
        server.kill()
        server.start()
        for attempt in range(100):  # JetStream recovers its streams after the restart
            try:
                await js.publish("pulltest.o10", b"10", timeout=0.5)
                break
            except (nats.errors.Error, TimeoutError):
                assert attempt < 99
                await asyncio.sleep(0.1)
        await publish(client, 4, start=11)
        started = time.monotonic()
        assert await read(puller, 5, batch=64) == list(range(11, 16))
        assert time.monotonic() - started < 5.0  # the expiry (30 s) was not waited out
        await puller.stop()
    finally:
        await client.close()
        server.stop()
