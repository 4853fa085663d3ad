"""clearance_api.wire is the public contract in code: its exported names are deliberate."""

from __future__ import annotations

import msgspec

import clearance_api.wire as wire


def test_every_exported_name_exists_and_nothing_public_is_unlisted() -> None:
    exported = set(wire.__all__)
    assert all(hasattr(wire, name) for name in exported)
    public_structs = {name for name, value in vars(wire).items()
                      if isinstance(value, type) and issubclass(value, msgspec.Struct)
                      and not name.startswith("_")}
    assert public_structs <= exported, sorted(public_structs - exported)
    assert len(wire.__all__) == len(exported)  # no name listed twice


def test_every_subject_has_a_request_and_a_reply_struct() -> None:
    subjects = {value for name, value in vars(wire).items() if name.startswith("SUBJECT_")}
    served = set(wire.REQUESTS)
    # Every request/reply subject of the contract is served; the rest are events.
    assert served <= subjects
    assert subjects - served <= {wire.SUBJECT_DECISIONS_CHANGED}
    for subject, (request, reply) in wire.REQUESTS.items():
        assert subject.startswith("clearance.v1.")
        assert issubclass(request, wire.RequestBase), subject
        assert "revision" in reply.__struct_fields__ or subject.endswith("review.subject"), \
            subject


def test_every_request_accepts_the_common_fields() -> None:
    for request, _ in wire.REQUESTS.values():
        fields = set(request.__struct_fields__)
        assert {"request_id", "min_revision", "timeout_ms"} <= fields, request.__name__
