"""Admission while the cache is scanned: outside a scan every answer is stored; during
one, an answer is stored from its question's second sight on; hits and pauses end it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from clearance_decision.admission import HIT_FLOOR, WINDOW_SECONDS, Admission


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scanned(rate: int = 100, *, remembered: int = 1 << 16) -> tuple[Admission, Clock]:
    """An admission that has just judged a window of misses only, at 4x its rate."""
    clock = Clock()
    admission = Admission(rate, clock=clock, remembered=remembered)
    clock.now += WINDOW_SECONDS
    admission.counted(0, int(4 * rate * WINDOW_SECONDS))
    assert admission.scanning
    return admission, clock


def test_at_a_human_pace_every_answer_is_stored() -> None:
    clock = Clock()
    admission = Admission(100, clock=clock)
    for n in range(2000):
        clock.now += 0.05  # 20 distinct questions a second, none hit
        admission.counted(0, 1)
        assert admission.admit(f"k{n}")
    assert not admission.scanning and admission.skipped == 0


def test_in_a_scan_a_question_is_stored_from_its_second_sight() -> None:
    admission, _ = scanned()
    assert not admission.admit("new")
    assert admission.admit("new")  # asked again: stored now
    assert admission.skipped == 1


def test_questions_asked_just_before_the_scan_count_as_seen() -> None:
    clock = Clock()
    admission = Admission(100, clock=clock)
    assert admission.admit("before")  # stored: no scan yet
    clock.now += WINDOW_SECONDS
    admission.counted(0, 1000)
    assert admission.scanning
    assert admission.admit("before")


def test_hits_end_the_scan() -> None:
    admission, clock = scanned()
    clock.now += WINDOW_SECONDS
    looked = 1000
    admission.counted(int(looked * HIT_FLOOR) + 1, looked - int(looked * HIT_FLOOR) - 1)
    assert not admission.scanning
    assert admission.admit("fresh")


def test_a_pause_ends_the_scan() -> None:
    admission, clock = scanned(rate=100)
    clock.now += 60.0  # a minute without a question, then one miss
    admission.counted(0, 1)
    assert not admission.scanning


def test_zero_stores_every_answer() -> None:
    clock = Clock()
    admission = Admission(0, clock=clock)
    for n in range(100):
        clock.now += 0.001
        admission.counted(0, 10_000)
        assert admission.admit(f"k{n}")
    assert not admission.enabled and not admission.scanning


def test_the_doorkeeper_is_bounded() -> None:
    admission, _ = scanned(remembered=100)
    for n in range(10_000):
        admission.admit(f"k{n}")
    assert len(admission._seen) + len(admission._older) <= 200
    # The most recent keys are still remembered; the oldest are forgotten.
    assert admission.admit("k9999")
    assert not admission.admit("k0")


@given(st.lists(st.tuples(st.integers(0, 30), st.booleans(), st.floats(0, 0.02)),
                max_size=300))
def test_only_a_new_question_in_a_scan_goes_unstored(
        steps: list[tuple[int, bool, float]]) -> None:
    """Whatever the traffic: a refusal happens only during a scan, only for a key not
    asked within the doorkeeper's memory, and the same key is stored when asked again."""
    clock = Clock()
    admission = Admission(50, clock=clock)
    asked: set[int] = set()
    for key, hit, pause in steps:
        clock.now += pause
        admission.counted(int(hit), int(not hit))
        scanning = admission.scanning
        stored = admission.admit(f"k{key}")
        if not stored:
            assert scanning and key not in asked
            assert admission.admit(f"k{key}")
        asked.add(key)


def test_a_burst_is_found_a_scan_before_its_window_ends() -> None:
    clock = Clock()
    admission = Admission(1000, clock=clock)
    clock.now += 0.01
    admission.counted(0, 100)
    assert not admission.scanning  # 100 misses: not yet a window's worth (250)
    admission.counted(0, 200)
    assert admission.scanning  # 300 misses in 10 ms
    assert not admission.admit("burst")
