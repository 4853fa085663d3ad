"""The fault suite's judge, on a synthetic stream: it must flag a wrong allow, a wrong
deny, a revision going back and an object left in an old version — and nothing else."""

from __future__ import annotations

import msgspec

from tests.chaos.load import Reply
from tests.chaos.reference import Reference
from tests.chaos.scenarios import Stored, stored_mismatches, verify_replies
from tests.chaos.workload import PROBES, Fleet


class Fixed:
    def __init__(self, revision: int) -> None:
        self.revision = revision

    def bound_after(self, when: float) -> int:
        return self.revision


def _stream(events: int = 300) -> tuple[Fleet, Reference]:
    fleet = Fleet(seed=3)
    changes = [*fleet.initial(), *(fleet.next() for _ in range(events))]
    reference = Reference(PROBES)
    reference.fold_all((seq, msgspec.json.encode({"type": t, "object": o}))
                       for seq, (t, o) in enumerate(changes, start=1))
    return fleet, reference


def _flip(reference: Reference) -> tuple[tuple[str, str], int]:
    """A probe and a revision at which its answer changes from deny to allow."""
    for probe in PROBES:
        for revision in range(2, reference.last + 1):
            if not reference.allowed_at(probe, revision - 1) and \
                    reference.allowed_at(probe, revision):
                return probe, revision
    raise AssertionError("the workload never flips an answer")


def _reply(probe: tuple[str, str], revision: int, allowed: bool, at: float) -> Reply:
    return Reply(sent=at, received=at + 0.001, probe=probe, outcome="ok", allowed=allowed,
                 revision=revision)


def test_answers_are_judged_at_the_revisions_they_may_reflect() -> None:
    _, reference = _stream()
    probe, flip = _flip(reference)
    replies = [
        _reply(probe, flip - 1, False, 1.0),  # right
        _reply(probe, flip, True, 2.0),  # right
        _reply(probe, flip, False, 3.0),  # wrong deny: the allow at flip is reflected
    ]
    verdicts = verify_replies(replies, reference, Fixed(flip))
    assert (verdicts.checked, verdicts.wrong_allows, verdicts.wrong_denies,
            verdicts.regressions) == (3, 0, 1, 0)
    # An allow claiming flip - 1 may come from the newer state the checkpoint had reached.
    newer = verify_replies([_reply(probe, flip - 1, True, 1.0)], reference, Fixed(flip))
    assert newer.wrong_allows == 0
    # ... but not when the checkpoint had not reached it.
    stale = verify_replies([_reply(probe, flip - 1, True, 1.0)], reference, Fixed(flip - 1))
    assert stale.wrong_allows == 1


def test_a_revision_going_back_is_counted_and_judged_at_the_announced_one() -> None:
    _, reference = _stream()
    probe, flip = _flip(reference)
    replies = [
        _reply(probe, flip, True, 1.0),
        # From a half-rebuilt state: an older revision, and the older answer.
        _reply(probe, flip - 1, False, 2.0),
    ]
    verdicts = verify_replies(replies, reference, Fixed(flip))
    assert (verdicts.regressions, verdicts.wrong_denies) == (1, 1)
    # Concurrent requests may legitimately finish out of order.
    overlapping = [_reply(probe, flip, True, 1.0),
                   Reply(sent=0.5, received=1.5, probe=probe, outcome="ok", allowed=False,
                         revision=flip - 1)]
    assert verify_replies(overlapping, reference, Fixed(flip)).regressions == 0


def test_errors_are_counted_not_judged() -> None:
    _, reference = _stream()
    replies = [Reply(sent=1.0, received=1.1, probe=PROBES[0], outcome="unavailable"),
               Reply(sent=1.0, received=3.0, probe=PROBES[0], outcome="timeout")]
    verdicts = verify_replies(replies, reference, Fixed(reference.last))
    assert verdicts.checked == 0
    assert verdicts.errors == {"unavailable": 1, "timeout": 1}


def test_an_object_left_in_an_older_version_is_a_lost_event() -> None:
    _, reference = _stream()
    current = Stored(
        policies={f"{ref.namespace}/{ref.name}": obj for ref, obj in reference.objects.items()
                  if ref.kind == "monitoraccesspolicy" and obj is not None},
        groups={ref.name: sorted(obj["users"]) for ref, obj in reference.objects.items()
                if ref.kind == "group" and obj is not None},
        clusters={ref.name: obj["metadata"]["labels"] for ref, obj in reference.objects.items()
                  if ref.kind == "managedcluster" and obj is not None},
    )
    assert stored_mismatches(reference, current) == []
    key = next(iter(current.policies))
    older = {**current.policies[key], "metadata": {**current.policies[key]["metadata"],
                                                   "resourceVersion": "0"}}
    current.policies[key] = older
    del current.clusters["dev-1"]
    lost = stored_mismatches(reference, current)
    assert len(lost) == 2 and any("managedcluster//dev-1" in line for line in lost)


def test_the_reference_recomputes_every_answer_an_event_can_change() -> None:
    """It re-decides only the users an event names (a shortcut); deciding every probe
    after every event must give the same step functions."""

    class Everyone(Reference):
        def _record(self, seq: int, users: set[str] | None) -> None:
            super()._record(seq, None)

    fleet = Fleet(seed=11)
    changes = [*fleet.initial(), *(fleet.next() for _ in range(400))]
    messages = [(seq, msgspec.json.encode({"type": t, "object": o}))
                for seq, (t, o) in enumerate(changes, start=1)]
    quick, full = Reference(PROBES), Everyone(PROBES)
    quick.fold_all(messages)
    full.fold_all(messages)
    for probe in PROBES:
        assert [quick.allowed_at(probe, r) for r in range(len(messages) + 1)] == \
            [full.allowed_at(probe, r) for r in range(len(messages) + 1)], probe
