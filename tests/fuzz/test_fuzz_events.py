"""Fuzzing the event stream on a running system (the contract's section 1 promises).

Each example publishes a burst of events — objects of every watched kind drawn from the
CRD schemas (or the Kubernetes shapes), some left valid, most with hostile values planted
anywhere in the envelope or the object, some under another kind's subject, some not JSON —
then flips the sentinel policy, which must take effect within 5 s (and the status
revision must reach it), then asks probe questions about the principals the hostile
policies name (each must be answered within the section 0 promises); the services must
still be running. Inputs of the open bugs in ``known_bugs.py`` are left out.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import known_bugs
from tests.fuzz.conftest import Driver, report
from tests.fuzz.hostile import HostileEvent
from tests.fuzz.live import event_burst
from tests.fuzz.settings import fuzz
from tests.fuzz.strategies import EVENT_KINDS, hostile_events


def _fuzz_events(live: Driver, events: list[HostileEvent]) -> None:
    events = [e for e in events if known_bugs.known("event", e.kind, e.body) is None]
    findings = live.run(event_burst(live.system, events, live.sentinel))
    if findings:
        live.recover()
    assert not findings, report(findings)


@pytest.mark.parametrize("kind", EVENT_KINDS)
def test_hostile_objects_of_each_kind_never_stop_the_pipeline(live: Driver, kind: str) -> None:
    @fuzz(max_examples=6)
    @given(st.lists(hostile_events((kind,)), min_size=1, max_size=6))
    def burst(events: list[HostileEvent]) -> None:
        _fuzz_events(live, events)

    burst()


def test_hostile_objects_of_all_kinds_interleaved_never_stop_the_pipeline(live: Driver) -> None:
    @fuzz(max_examples=20)
    @given(st.lists(hostile_events(), min_size=4, max_size=12))
    def burst(events: list[HostileEvent]) -> None:
        _fuzz_events(live, events)

    burst()
