"""What a declared family adds to the labels checks read: the decision service's mirror,
value by value, and the offline fold, all at once, agree — and never make a cluster
known."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from clearance_core.folding import registry
from clearance_core.folding.families import Family, labels_with
from clearance_core.folding.folds import FoldResult
from clearance_runtime.reading.mirror import StateMirror
from clearance_runtime.storage import keys
from clearance_runtime.storage.families import CLUSTERS

_pair = msgspec.json.Decoder(tuple[str, dict[str, str]]).decode
TAGS = Family("unit_tags", "clr:x:unit-tags", lambda v: msgspec.json.encode(v).decode(),
              _pair, mirrored=True, labels=lambda field, value: value)
SPEC = registry.KindSpec("unittag", "example.io/v1", "unittags", False,
                         lambda model, tx, event: FoldResult("compiled"), families=(TAGS,))

NAMES = st.sampled_from(["east", "west", "c:1"])
LABELS = st.dictionaries(st.sampled_from(["tier", "env"]), st.sampled_from(["a", "b", "c"]),
                         max_size=2)
#: (family, field, value or None): a cluster's own labels, or a tag adding some.
WRITES = st.lists(st.one_of(
    st.tuples(st.just("clusters"), NAMES, st.none() | LABELS),
    st.tuples(st.just("tags"), st.sampled_from(["t1", "t2", "t3"]),
              st.none() | st.tuples(NAMES, LABELS))), max_size=30)


@pytest.fixture(scope="module", autouse=True)
def declared() -> Iterator[None]:
    registry.register(SPEC)
    yield
    registry.unregister(SPEC.kind)


@given(writes=WRITES)
# Two tags setting one key of one cluster: the same one wins on both sides.
@example(writes=[("clusters", "east", {"env": "a"}), ("tags", "t1", ("east", {"env": "b"})),
                 ("tags", "t2", ("east", {"env": "c"}))])
def test_the_mirror_and_the_offline_view_agree_and_add_no_cluster(
        writes: list[tuple[str, str, Any]]) -> None:
    mirror = StateMirror(None)  # type: ignore[arg-type]  # applying needs no store
    own: dict[str, dict[str, str]] = {}
    tags: dict[str, tuple[str, dict[str, str]]] = {}
    for family, field, value in writes:
        held: dict[str, Any] = own if family == "clusters" else tags
        if value is None:
            held.pop(field, None)
        else:
            held[field] = value
        encoded = None if value is None else \
            (CLUSTERS if family == "clusters" else TAGS).encode(value)
        mirror._apply(keys.CLUSTERS if family == "clusters" else TAGS.key, field, encoded)
    assert mirror.labels == labels_with(own, {TAGS.name: tags}, [TAGS])
    assert set(mirror.labels) == set(own)  # no cluster made known
