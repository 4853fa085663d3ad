"""The watcher's ledger against a real JetStream: minimal events, de-duplication, restarts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import nats
import nats.errors
import pytest
from nats.js import JetStreamContext

from clearance_runtime.messaging import bus
from clearance_watcher.ledger import LOAD_BATCH, Ledger
from tests.conftest import Servers
from tests.integration.harness import cluster
from tests.support.policies import policy


@pytest.fixture
async def js(clean_servers: Servers) -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(clean_servers.nats_url)
    jsc = nc.jetstream()
    await bus.ensure_stream(jsc)
    yield jsc
    await nc.close()


async def events(js: JetStreamContext) -> list[tuple[str, str, str]]:
    """(type, name, subject) of every message in the stream, in order."""
    info = await js.stream_info("CLEARANCE_EVENTS")
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg("CLEARANCE_EVENTS", seq)
        body: dict[str, Any] = msgspec.json.decode(msg.data or b"")
        out.append((body["type"], body["object"]["metadata"]["name"], msg.subject or ""))
    return out


async def test_unchanged_objects_are_not_republished(js: JetStreamContext) -> None:
    ledger = Ledger(js, source="test")
    await ledger.sync([cluster("a", env="x"), cluster("b")], kinds={"managedcluster"})
    await ledger.sync([cluster("a", env="x"), cluster("b")], kinds={"managedcluster"})
    await ledger.sync([cluster("a", env="y")], kinds={"managedcluster"})
    assert [(t, n) for t, n, _ in await events(js)] == [
        ("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]


async def test_subjects_are_per_object_and_nats_safe(js: JetStreamContext) -> None:
    ledger = Ledger(js, source="test")
    with_uid = cluster("u")
    with_uid["metadata"]["uid"] = "3f1c9a2e-0b1d-4c55-9a0e-1f2b3c4d5e6f"
    await ledger.sync([with_uid, cluster("dotted.name")], kinds={"managedcluster"})
    subjects = [s for _, _, s in await events(js)]
    assert subjects[0] == "clearance.events.managedcluster.3f1c9a2e-0b1d-4c55-9a0e-1f2b3c4d5e6f"
    assert subjects[1].startswith("clearance.events.managedcluster.n-")
    assert subjects[1].count(".") == 3


async def test_a_publish_whose_ack_was_lost_is_retried_and_stored_once(
        js: JetStreamContext, monkeypatch: pytest.MonkeyPatch) -> None:
    real_publish = js.publish
    calls: list[dict[str, str]] = []

    async def lose_first_ack(subject: str, payload: bytes, **kw: Any) -> Any:
        calls.append(kw["headers"])
        ack = await real_publish(subject, payload, **kw)
        if len(calls) == 1:
            raise nats.errors.TimeoutError  # stored, but the ack never arrived
        return ack

    monkeypatch.setattr(js, "publish", lose_first_ack)
    ledger = Ledger(js, source="test")
    await ledger.apply("ADDED", cluster("a"))
    assert len(calls) == 2 and calls[0] == calls[1]  # same Nats-Msg-Id on the retry
    assert len(await events(js)) == 1
    assert next(iter(ledger.known.values())).seq == 1


async def test_readding_identical_content_after_a_delete_is_not_swallowed(
        js: JetStreamContext) -> None:
    ledger = Ledger(js, source="test")
    for _ in range(2):
        await ledger.sync([cluster("a")], kinds={"managedcluster"})
        await ledger.sync([], kinds={"managedcluster"})
    assert [t for t, _, _ in await events(js)] == ["ADDED", "DELETED", "ADDED", "DELETED"]


async def test_restart_loads_the_stream_and_deletes_what_vanished_meanwhile(
        js: JetStreamContext) -> None:
    first = Ledger(js, source="test")
    await first.sync([cluster("a"), cluster("b")], kinds={"managedcluster"})
    other = Ledger(js, source="elsewhere")
    await other.sync([cluster("c")], kinds={"managedcluster"})
    # The watcher restarts; while it was down, b was deleted.
    second = Ledger(js, source="test")
    await second.load()
    assert {r.name for r in second.known} == {"a", "b"}  # another source's objects are not ours
    await second.sync([cluster("a")], kinds={"managedcluster"})
    assert [(t, n) for t, n, _ in await events(js)][-1] == ("DELETED", "b")
    assert len(await events(js)) == 4  # a was not republished


async def test_a_restart_loads_a_stream_longer_than_one_read(js: JetStreamContext) -> None:
    """More objects than one read of the stream carries (``LOAD_BATCH``), each in its
    last version: every one known after the restart, none republished, none missed."""
    count = 2 * LOAD_BATCH + 37
    first = Ledger(js, source="test")
    await first.sync([cluster(f"c{i}", v="1") for i in range(count)], kinds={"managedcluster"})
    await first.sync([cluster(f"c{i}", v="2" if i % 3 == 0 else "1") for i in range(count)],
                     kinds={"managedcluster"})
    second = Ledger(js, source="test")
    await second.load()
    assert len(second.known) == count
    assert all(known.obj["metadata"]["labels"]["v"] == ("2" if int(ref.name[1:]) % 3 == 0
                                                        else "1")
               for ref, known in second.known.items())
    published = len(await events(js))
    await second.sync([cluster(f"c{i}", v="2" if i % 3 == 0 else "1") for i in range(count - 1)],
                      kinds={"managedcluster"})
    assert [(t, n) for t, n, _ in await events(js)][published:] == [("DELETED", f"c{count - 1}")]


async def test_recreated_object_closes_its_old_subject(js: JetStreamContext) -> None:
    ledger = Ledger(js, source="test")
    old, new = cluster("a"), cluster("a")
    old["metadata"]["uid"] = "uid-1"
    new["metadata"]["uid"] = "uid-2"
    await ledger.apply("ADDED", old)
    await ledger.apply("ADDED", new)
    assert [(t, s.rsplit(".", 1)[1]) for t, _, s in await events(js)] == [
        ("ADDED", "uid-1"), ("DELETED", "uid-1"), ("ADDED", "uid-2")]


async def test_a_status_only_change_of_a_policy_is_not_an_event(js: JetStreamContext) -> None:
    # The watcher writes the status of policies itself: its own writes, and any other
    # status change, must not come back through the stream (nor feed the compiler).
    ledger = Ledger(js, source="test")

    def served(rv: str, *, status: dict[str, Any] | None = None, **labels: str
               ) -> dict[str, Any]:
        obj = policy("ops")
        obj["metadata"].update(uid="u1", resourceVersion=rv, generation=1, labels=labels,
                               managedFields=[{"manager": f"m{rv}"}])
        return obj if status is None else {**obj, "status": status}

    await ledger.apply("ADDED", served("5"))
    await ledger.apply("MODIFIED", served("6", status={"state": "Active"}))
    await ledger.sync([served("7", status={"state": "Error"})], kinds={"monitoraccesspolicy"})
    await ledger.apply("MODIFIED", served("8", status={"state": "Error"}, team="a"))
    assert [t for t, _, _ in await events(js)] == ["ADDED", "MODIFIED"]
    # A new version whose status did not move is still one (as every version always was).
    await ledger.apply("MODIFIED", served("9", status={"state": "Error"}, team="a"))
    assert [t for t, _, _ in await events(js)] == ["ADDED", "MODIFIED", "MODIFIED"]

    # Other kinds keep every version the API serves (their status may well matter).
    other = cluster("c")
    await ledger.apply("ADDED", {**other, "metadata": {**other["metadata"],
                                                       "resourceVersion": "1"}})
    await ledger.apply("MODIFIED", {**other, "status": {"x": 1}, "metadata": {
        **other["metadata"], "resourceVersion": "2"}})
    assert [t for t, _, _ in await events(js)][-2:] == ["ADDED", "MODIFIED"]
