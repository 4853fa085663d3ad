"""Fuzzing every request subject on a running system (the contract's section 0 promises).

Each example is a burst of hostile requests to one subject — documents drawn from the
subject's wire Struct with hostile values planted in them, or bodies that are not a JSON
object at all — sent concurrently with the known-good requests of ``live.GOOD_REQUESTS``.
Every reply must arrive and be a JSON object; an error never carries a result (never an
allow) and is never ``internal``; the known-good requests get exactly the answers they got
alone. Inputs of the open bugs in ``known_bugs.py`` are left out (their examples run in
``test_known_bugs.py``).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance_api.wire import REQUESTS, SUBJECT_CHECK
from tests.fuzz import known_bugs
from tests.fuzz.conftest import Driver, report
from tests.fuzz.live import request_burst
from tests.fuzz.settings import fuzz
from tests.fuzz.strategies import hostile_requests

pytestmark = pytest.mark.integration


def _fuzz_subject(live: Driver, subject: str, bodies: list[bytes]) -> None:
    bodies = [b for b in bodies if known_bugs.known("request", subject, b) is None]
    findings = live.run(request_burst(live.system, subject, bodies, live.goods))
    if findings:
        live.recover()
    assert not findings, report(findings)


@pytest.mark.parametrize("subject", sorted(REQUESTS))
def test_hostile_requests_get_their_own_error_or_answer(live: Driver, subject: str) -> None:
    @fuzz(max_examples=30)
    @given(st.lists(hostile_requests(subject), min_size=1, max_size=6))
    def burst(bodies: list[bytes]) -> None:
        _fuzz_subject(live, subject, bodies)

    burst()


def test_hostile_checks_coalesced_with_good_ones_do_not_change_their_answers(
        live: Driver) -> None:
    # Many checks at once: the decision service answers every check that arrived in one
    # event-loop iteration together (one task, one MGET), so hostile and good checks share
    # a batch here.
    @fuzz(max_examples=12)
    @given(st.lists(hostile_requests(SUBJECT_CHECK), min_size=10, max_size=30))
    def burst(bodies: list[bytes]) -> None:
        _fuzz_subject(live, SUBJECT_CHECK, bodies)

    burst()
