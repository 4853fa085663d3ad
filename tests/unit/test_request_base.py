"""Fields every request accepts are bounded, so none can overflow a wait."""

from __future__ import annotations

import msgspec
import pytest

from clearance_api.wire import StatusRequest


@pytest.mark.parametrize("body", [
    b'{"timeout_ms": 1' + b"0" * 400 + b', "min_revision": 5}',
    b'{"timeout_ms": 60001}', b'{"timeout_ms": -1}', b'{"min_revision": -1}',
    b'{"min_revision": 9223372036854775808}'])
def test_out_of_range_waits_are_refused(body: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(body, type=StatusRequest)


def test_the_largest_waits_are_accepted() -> None:
    request = msgspec.json.decode(b'{"timeout_ms": 60000, "min_revision": 9223372036854775807}',
                                  type=StatusRequest)
    assert (request.timeout_ms, request.min_revision) == (60000, 2**63 - 1)
