"""What the watcher refuses to read or publish, and what stands in for it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import nats.errors
import nats.js.errors
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import InvalidObject
from clearance_core.folding import rejections
from clearance_core.folding.kinds import (
    MAX_NAME,
    MAX_NAMESPACE,
    ObjectRef,
    event_subject,
    over_limits,
    ref_of,
    subject_token,
)
from clearance_runtime.edges import safeyaml
from clearance_watcher.ledger import MAX_MSG_ID, bounded_msg_id, permanent
from clearance_watcher.manifests import FileRejected, parse_file

LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{b}: &{b} [{','.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi",
                                                                     strict=True)])


def test_a_billion_laughs_is_refused_fast_and_small_aliases_still_load() -> None:
    assert len(LAUGHS) < 500
    started = time.perf_counter()
    with pytest.raises(safeyaml.Refused, match="aliases expand the document"):
        safeyaml.load(LAUGHS)
    assert time.perf_counter() - started < 0.5
    assert safeyaml.load("base: &b {x: 1}\nmore: {<<: *b, y: 2}\nsame: *b") == {
        "base": {"x": 1}, "more": {"x": 1, "y": 2}, "same": {"x": 1}}
    assert safeyaml.load_all("a: 1\n---\nb: 2\n") == [{"a": 1}, {"b": 2}]


def test_recursive_and_too_many_aliases_are_refused() -> None:
    with pytest.raises(safeyaml.Refused, match="contains it"):
        safeyaml.load("a: &a [1, *a]")
    many = "x: &x 1\n" + "\n".join(f"k{i}: *x" for i in range(safeyaml.MAX_ALIASES + 1))
    with pytest.raises(safeyaml.Refused, match="aliases in one document"):
        safeyaml.load(many)
    # The counts start again for each document.
    within = "x: &x 1\n" + "\n".join(f"k{i}: *x" for i in range(safeyaml.MAX_ALIASES))
    assert len(safeyaml.load_all(f"{within}\n---\n{within}\n")) == 2


scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
documents = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                         max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(document=documents)
def test_without_aliases_the_bounded_loader_equals_safe_load(document: Any) -> None:
    text = yaml.safe_dump(document)
    assert safeyaml.load(text) == yaml.safe_load(text)


def test_a_manifest_file_over_the_size_bound_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("kind: Group\nmetadata: {name: g}\nusers: [" + "u," * 5000 + "u]\n")
    with pytest.raises(FileRejected) as caught:
        parse_file(path, max_bytes=1000)
    assert caught.value.reason == "file_too_large"
    assert len(parse_file(path, max_bytes=1 << 20)) == 1
    bomb = tmp_path / "bomb.yaml"
    nested = LAUGHS.replace("\n", "\n  ")
    bomb.write_text(f"kind: Group\nmetadata: {{name: g}}\nusers: []\nx:\n  {nested}\n")
    with pytest.raises(FileRejected) as caught:
        parse_file(bomb)
    assert caught.value.reason == "yaml_aliases"
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    with pytest.raises(InvalidObject):
        parse_file(deep)


def group(name: str = "g", **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "user.openshift.io/v1", "kind": "Group",
            "metadata": {"name": name, **meta}, "users": []}


@pytest.mark.parametrize("uid", ["u" * 5000, "a b", "ü" * 10, "x\r\nNats: 1", "*", ">"])
def test_an_unsafe_or_over_long_uid_counts_as_absent(uid: str) -> None:
    obj = group(uid=uid)
    ref = ref_of(obj)
    assert subject_token(obj, ref) == subject_token(group(), ref)
    assert len(event_subject(obj, ref)) < 100


def test_names_over_the_kubernetes_limits_are_named() -> None:
    assert over_limits(ObjectRef("group", "", "n" * MAX_NAME)) is None
    assert "metadata.name" in (over_limits(ObjectRef("group", "", "n" * (MAX_NAME + 1)))
                               or "")
    assert "metadata.namespace" in (over_limits(ObjectRef(
        "role", "n" * (MAX_NAMESPACE + 1), "r")) or "")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000))
def test_a_message_id_is_always_a_short_printable_header_value(text: str) -> None:
    found = bounded_msg_id(text)
    assert len(found) <= MAX_MSG_ID and found.isascii() and found.isprintable()
    assert " " not in found and "\r" not in found and "\n" not in found
    assert bounded_msg_id(text) == found  # stable: a retry is de-duplicated


class FakeConnection:
    """Only ``last_error``, which nats-py sets from the server's -ERR lines."""

    def __init__(self, error: str | None) -> None:
        self.last_error = None if error is None else nats.errors.Error(error)


@pytest.mark.parametrize(("exc", "last", "expected"), [
    (nats.errors.MaxPayloadError(), None, True),
    (nats.js.errors.BadRequestError(code=400, description="message size exceeds maximum"),
     None, True),
    (nats.js.errors.ServiceUnavailableError(code=503), None, False),
    (nats.errors.TimeoutError(), None, False),
    (nats.errors.TimeoutError(),
     'nats: Permissions Violation for Publish to "clearance.events.group.x"', True),
    (nats.errors.TimeoutError(),
     'nats: Permissions Violation for Publish to "clearance.events.group.other"', False),
    (nats.errors.ConnectionClosedError(), None, False),
    (OSError("reset"), None, False),
])
def test_what_a_publish_can_never_do_is_permanent_and_outages_are_not(
        exc: BaseException, last: str | None, expected: bool) -> None:
    assert permanent(exc, "clearance.events.group.x",
                     FakeConnection(last)) is expected  # type: ignore[arg-type]


def test_a_tombstone_is_small_keeps_the_identity_and_says_why() -> None:
    huge = {"apiVersion": "clearance.io/v1alpha1", "kind": "AccessPolicy",
            "metadata": {"name": "p", "namespace": "ns", "uid": "1234-abcd",
                         "generation": 7, "resourceVersion": "99",
                         "annotations": {"x": "y" * 100_000}},
            "spec": {"rules": {"a": {"subjects": {"users": ["u"] * 10_000}}}}}
    tomb = rejections.tombstone(huge, ref_of(huge), "too large " * 500)
    assert len(str(tomb)) < 2000
    assert ref_of(tomb) == ref_of(huge)
    assert event_subject(tomb, ref_of(tomb)) == event_subject(huge, ref_of(huge))
    assert tomb["metadata"]["generation"] == 7
    reason = rejections.reason_of(tomb)
    assert reason is not None and reason.startswith("rejected by the watcher: too large")
    assert rejections.reason_of(huge) is None
    hostile = group(uid="u" * 5000, generation="7", resourceVersion="r" * 5000)
    tomb = rejections.tombstone(hostile, ref_of(hostile), "x")
    assert set(tomb["metadata"]) == {"name", "annotations"}
