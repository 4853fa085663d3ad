"""A kind declared outside the library, read by checks, with no library change.

This module declares ``ClusterTag`` — an object that adds labels to one cluster, which
MonitorAccessPolicies' ``matchLabels`` selectors then read — as a registry entry, its
fold and one stored family (``clearance_core.folding.families.Family``), and nothing else. The
real compiler, cache-invalidator and decision service must then fold it, store it in
Valkey, load it back into the compiler's model, carry it to the decision service's
mirror on the change records, drop exactly the cached answers about its cluster, and
decide with its labels: the recipe in ARCHITECTURE.md ("How to add a kind"), proven.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from clearance_api.errors import InvalidObject
from clearance_core.folding import families, registry
from clearance_core.folding.fold import Affected
from clearance_core.folding.folds import FoldEvent, FoldResult
from clearance_core.folding.model import Model, Writes
from clearance_core.kube import objects, strict
from clearance_runtime.reading.mirror import StateMirror
from clearance_runtime.storage import families as runtime_families
from clearance_runtime.storage.state import StateStore
from tests.conftest import Servers
from tests.integration.harness import System, cluster, publish
from tests.support.policies import policy

# The declaration: a value, its family, its fold, its registry entry. -------------------

class Tag(msgspec.Struct, frozen=True):
    cluster: str
    labels: dict[str, str]


#: Its shape, for strict field checking: held by the kind's own module.
SHAPE = strict.from_openapi(strict.object_structure({"properties": {"spec": {"properties": {
    "cluster": {"type": "string"},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}}))


def _tag_of(obj: dict[str, Any]) -> Tag:
    strict.check(SHAPE, obj)
    spec = objects.mapping(obj.get("spec"), "spec")
    labels = objects.mapping(spec.get("labels"), "spec.labels")
    return Tag(objects.text(spec.get("cluster"), "spec.cluster"),
               {key: objects.text(value, f"spec.labels.{key}")
                for key, value in labels.items()})


def _concerns(field: str, old: Tag | None, new: Tag | None) -> Affected:
    # A cluster's labels are read only by checks about that cluster: its entries go,
    # every other cluster's stay.
    return Affected(clusters={tag.cluster for tag in (old, new) if tag is not None})


TAGS = families.Family(
    "cluster_tags", "clr:x:tags",
    encode=lambda tag: msgspec.json.encode(tag).decode(),
    decode=msgspec.json.Decoder(Tag).decode,
    mirrored=True,
    concerns=_concerns,
    labels=lambda field, tag: (tag.cluster, tag.labels),
)


def fold_tag(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    try:
        tag = None if event.deleted else _tag_of(event.obj)
    except InvalidObject as exc:
        families.store(model, tx, TAGS, event.key, None)
        return FoldResult("invalid", error=exc.message)
    families.store(model, tx, TAGS, event.key, tag)
    return FoldResult("deleted" if tag is None else "compiled")


SPEC = registry.KindSpec("clustertag", "example.io/v1", "clustertags", False, fold_tag,
                         families=(TAGS,), name="ClusterTag")


def tag(name: str, on: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "example.io/v1", "kind": "ClusterTag", "metadata": {"name": name},
            "spec": {"cluster": on, "labels": labels}}


# The proof. ------------------------------------------------------------------------------

@pytest.fixture
def declared() -> Iterator[None]:
    registry.register(SPEC)
    try:
        yield
    finally:
        registry.unregister(SPEC.kind)


@pytest.fixture
async def system(declared: None, clean_servers: Servers) -> AsyncIterator[System]:
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    await sys_.start("compiler", "cache-invalidator", "decision")
    for name in ("east", "west"):
        await publish(sys_, "managedcluster", cluster(name, env="prod"))
    await publish(sys_, "monitoraccesspolicy", policy(
        "gold", users=["alice"],
        rules=[{"selector": {"matchLabels": {"tier": "gold"}},
                "permissions": {"view": True}}]))
    await sys_.settle()
    yield sys_
    await sys_.close()


@pytest.fixture
async def redis(clean_servers: Servers) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(clean_servers.redis_url)
    yield client
    await client.aclose()


async def answers(system: System, revision: int) -> dict[str, tuple[str, bool]]:
    """alice's (decision, cached) about each cluster."""
    found = {}
    for name in ("east", "west"):
        reply = await system.check("alice", name, min_revision=revision)
        found[name] = (reply["decision"], reply["cached"])
    return found


async def test_a_declared_kind_is_folded_stored_mirrored_invalidated_and_decided_on(
        system: System, redis: aioredis.Redis) -> None:
    revision = await system.settle()
    await answers(system, revision)
    assert await answers(system, revision) == {"east": ("deny", True),
                                               "west": ("deny", True)}
    follower = StateMirror(redis)
    await follower.current()  # loaded now: from here on it follows the change records

    revision = await publish(system, "clustertag", tag("east-gold", "east", tier="gold"))
    await system.settle()

    # Decided on, and invalidated exactly: east's answer went and now allows; west's
    # answer is the one cached before.
    assert await answers(system, revision) == {"east": ("allow", False),
                                               "west": ("deny", True)}
    # Stored in Valkey, under its family's hash, encoded as declared.
    stored = await redis.hget(TAGS.key, "/east-gold")
    assert isinstance(stored, bytes)
    assert TAGS.decode(stored) == Tag("east", {"tier": "gold"})
    # Mirrored from the change record's values (no reload), and read by checks.
    await follower.current()
    assert (follower.loads, follower.catch_ups) == (1, 1)
    assert follower.labels["east"] == {"env": "prod", "tier": "gold"}
    assert follower.labels["west"] == {"env": "prod"}
    # Loaded back into a restarted compiler's model.
    model = await StateStore(redis).load_model()
    assert model.stored == {"cluster_tags": {"/east-gold": Tag("east", {"tier": "gold"})}}

    # Deleted: withdrawn everywhere, east's answer goes again and denies.
    revision = await publish(system, "clustertag", tag("east-gold", "east"), deleted=True)
    await system.settle()
    assert await answers(system, revision) == {"east": ("deny", False),
                                               "west": ("deny", True)}
    assert await redis.hget(TAGS.key, "/east-gold") is None
    await follower.current()
    assert follower.labels["east"] == {"env": "prod"}


async def test_a_declared_kind_cannot_make_a_cluster_known(
        system: System, redis: aioredis.Redis) -> None:
    """Labels for a cluster outside the inventory are kept but read by no check: the
    cluster stays unknown (a kind adding labels cannot add clusters)."""
    revision = await publish(system, "clustertag", tag("far", "nowhere", tier="gold"))
    await system.settle()
    reply = await system.check("alice", "nowhere", min_revision=revision)
    assert reply["decision"] == "deny"
    follower = StateMirror(redis)
    await follower.current()
    assert "nowhere" not in follower.labels
    assert follower.declared_values["cluster_tags"]["/far"] == Tag("nowhere",
                                                                   {"tier": "gold"})


@pytest.mark.parametrize("spoil", [
    lambda spec: spec.update(labels=["not", "a", "mapping"]),
    lambda spec: spec.update(clusterr="east"),  # a field the kind does not have
])
async def test_an_invalid_declared_object_is_withdrawn_and_the_pipeline_moves_on(
        system: System, redis: aioredis.Redis, spoil: Any) -> None:
    revision = await publish(system, "clustertag", tag("east-gold", "east", tier="gold"))
    await system.settle()
    assert (await system.check("alice", "east", min_revision=revision))["decision"] == "allow"
    bad = tag("east-gold", "east", tier="gold")
    spoil(bad["spec"])
    revision = await publish(system, "clustertag", bad)
    await system.settle()
    assert await redis.hget(TAGS.key, "/east-gold") is None
    assert (await system.check("alice", "east", min_revision=revision))["decision"] == "deny"


def test_a_kind_or_a_hash_cannot_be_declared_twice(declared: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(SPEC)
    other = registry.KindSpec("othertag", "example.io/v1", "othertags", False, fold_tag,
                              families=(TAGS,), name="OtherTag")
    with pytest.raises(ValueError, match="is taken"):
        registry.register(other)
    with pytest.raises(ValueError, match="library's own"):
        registry.unregister("group")
    outside = families.Family("outside", "tags", TAGS.encode, TAGS.decode)
    with pytest.raises(ValueError, match="not under clr:"):
        registry.register(registry.KindSpec("outsidetag", "example.io/v1", "outsidetags",
                                            False, fold_tag, families=(outside,)))


def test_a_declared_family_cannot_take_a_hash_of_the_library() -> None:
    taken = families.Family("taken", "clr:pol", TAGS.encode, TAGS.decode)
    registry.register(registry.KindSpec("takentag", "example.io/v1", "takentags", False,
                                        fold_tag, families=(taken,)))
    try:
        with pytest.raises(ValueError, match="is the library's"):
            runtime_families.every()
    finally:
        registry.unregister("takentag")
