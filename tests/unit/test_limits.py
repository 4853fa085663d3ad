"""Request limits (docs/api/README.md: Conventions): the nesting check agrees with the real
depth."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import BadRequest
from clearance_api.wire import (
    BatchRequest,
    CheckRequest,
    FilterRequest,
    MetricsRequest,
    RulesReviewRequest,
    SearchFilterRequest,
    SubjectAccessReview,
)
from clearance_api.wire.limits import (
    MAX_CHECKS,
    MAX_DEPTH,
    MAX_GROUPS,
    MAX_ITEMS,
    nesting_exceeds,
)
from clearance_runtime.messaging.responder import decode_request


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


# Strings full of what a careless scanner would take for structure.
tricky = st.text(alphabet='[]{}"\\ab:,', max_size=6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | tricky,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky, inner, max_size=4),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=6))
def test_the_nesting_check_agrees_with_the_decoded_depth(value: Any, limit: int) -> None:
    body = msgspec.json.encode(value)
    assert nesting_exceeds(body, limit) == (depth(value) > limit)


def test_the_limit_is_exact_and_strings_never_count() -> None:
    def nested(levels: int) -> bytes:
        return b'{"a":' * (levels - 1) + b"[]" + b"}" * (levels - 1)

    assert not nesting_exceeds(nested(MAX_DEPTH))
    assert nesting_exceeds(nested(MAX_DEPTH + 1))
    assert not nesting_exceeds(msgspec.json.encode(["[" * 1000, "{" * 1000, "\\\"[[" * 100]))
    assert not nesting_exceeds(b"[" * 30 + b"{}" * 40)  # unterminated: the decoder says so


def test_the_check_answers_on_the_largest_bodies() -> None:
    """The largest bodies NATS carries, every item at the limit or one far past it: the
    scan answers both (its time is the benchmark's business, not a unit test's)."""
    chain = b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1)
    within = b"[" + b",".join([chain] * 250_000) + b"]"  # ~32 MB, every item at the limit
    assert not nesting_exceeds(within)
    assert nesting_exceeds(b"[" * 16_000_000 + b"]" * 16_000_000)


def lists(levels: int) -> list[Any]:
    """Lists nested ``levels`` deep (inside a request object: one level more)."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


PRINCIPAL = {"username": "alice"}
OVER = [
    (BatchRequest, {"principal": PRINCIPAL,
                    "checks": [{"action": "view", "resource": {"type": "pod"}}] * (MAX_CHECKS + 1)},
     MAX_CHECKS),
    (FilterRequest, {"principal": PRINCIPAL, "cluster": "c", "type": "pods",
                     "items": [{"name": "p"}] * (MAX_ITEMS + 1)}, MAX_ITEMS),
    (SearchFilterRequest, {"principal": PRINCIPAL,
                           "items": [{"cluster": "c", "resource": "r", "name": "n"}]
                           * (MAX_ITEMS + 1)}, MAX_ITEMS),
    (MetricsRequest, {"principal": PRINCIPAL, "cluster": "c",
                      "nodes": [{"name": "n"}] * (MAX_ITEMS + 1)}, MAX_ITEMS),
    (CheckRequest, {"principal": {"username": "a", "groups": ["g"] * (MAX_GROUPS + 1)},
                    "action": "view", "resource": {"type": "pod", "cluster": "c"}}, MAX_GROUPS),
    (SubjectAccessReview, {"spec": {"user": "a", "groups": ["g"] * (MAX_GROUPS + 1)}},
     MAX_GROUPS),
    (RulesReviewRequest, {"user": "a", "groups": ["g"] * (MAX_GROUPS + 1)}, MAX_GROUPS),
    (CheckRequest, {"principal": PRINCIPAL, "action": "view",
                    "resource": {"type": "pod", "cluster": "c"},
                    "ignored": lists(MAX_DEPTH)},
     MAX_DEPTH),
]


@pytest.mark.parametrize(("kind", "body", "limit"), OVER,
                         ids=[f"{kind.__name__}-{limit}" for kind, _, limit in OVER])
def test_a_request_over_a_limit_is_a_bad_request_naming_it(
        kind: type[Any], body: dict[str, Any], limit: int) -> None:
    with pytest.raises(BadRequest, match=f"{limit}"):
        decode_request(msgspec.json.Decoder(kind), msgspec.json.encode(body))


def test_a_request_at_the_limits_is_decoded() -> None:
    body = {"principal": {"username": "a", "groups": ["g"] * MAX_GROUPS},
            "checks": [{"action": "view", "resource": {"type": "pod", "cluster": "c",
                                                       "labels": {"a": "b"}}}] * MAX_CHECKS,
            "ignored": lists(MAX_DEPTH - 1)}
    decoded = decode_request(msgspec.json.Decoder(BatchRequest), msgspec.json.encode(body))
    assert len(decoded.checks) == MAX_CHECKS
