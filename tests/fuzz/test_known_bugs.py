"""The example input of every bug the fuzzers found (``known_bugs.KNOWN_BUGS``).

An open bug's example is ``xfail`` (not strict: it turns XPASS when the fix lands, and
then its entry gets ``open=False``); a closed bug's example is a strict regression test.
Each example runs against the running system exactly as the fuzzers send it, with the same
checks.
"""

from __future__ import annotations

import pytest

from tests.fuzz.conftest import Driver, report
from tests.fuzz.hostile import HostileEvent
from tests.fuzz.known_bugs import KNOWN_BUGS, KnownBug
from tests.fuzz.live import event_burst, request_burst

#: Each open bug's example waits this long for its missing reply or stalled pipeline.
FUZZ_TIMEOUT = 3.0


def _cases(target: str) -> list[object]:
    return [pytest.param(bug, id=bug.id, marks=[pytest.mark.xfail(
        strict=False, reason=f"known bug {bug.id}: {bug.observed}")] if bug.open else [])
        for bug in KNOWN_BUGS if bug.target == target]


@pytest.mark.parametrize("bug", _cases("request"))
def test_request_example(live: Driver, bug: KnownBug) -> None:
    findings = live.run(request_burst(live.system, bug.where, [bug.example], live.goods))
    if findings:
        live.recover()
    shown = [f for f in findings if not bug.shows or f.label in bug.shows]
    assert not shown, report(shown)


@pytest.mark.parametrize("bug", _cases("event"))
def test_event_example(live: Driver, bug: KnownBug) -> None:
    event = HostileEvent(bug.where, f"clearance.events.{bug.where}.fuzz-known", bug.example)
    findings = live.run(event_burst(live.system, [event], live.sentinel))
    if findings:
        live.recover()
    shown = [f for f in findings if not bug.shows or f.label in bug.shows]
    assert not shown, report(shown)
