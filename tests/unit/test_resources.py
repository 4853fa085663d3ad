"""Resource normalisation and the cache key of a decision (CONTRACT sections 0, 2)."""

from __future__ import annotations

from clearance_core.resources import decision_digest
from clearance_core.wire import Resource


def digest(**fields: object) -> str:
    resource = Resource(type="pvc", name="data", cluster="c1", fields=fields)  # type: ignore[arg-type]
    return decision_digest("principal", "view", resource, "c1")


def test_any_json_number_has_a_cache_key_of_its_own() -> None:
    # An integer beyond 64 bits is valid JSON: it must get an answer, not an error.
    keys = {digest(size=2**70), digest(size=2**70 + 1), digest(size=-(2**70)),
            digest(size=1), digest(size="1"), digest(size=1.0)}
    assert len(keys) == 6
    assert digest(size=2**70) == digest(size=2**70)
