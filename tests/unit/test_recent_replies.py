"""Model-based test of the replies a decision process reuses (``clearance_decision.recent``).

A Hypothesis state machine plays the decision cache and the state it caches: questions
(request bodies) have answers that events change; an event's invalidation removes the
entries of the questions it changes and moves the system revision and the invalidation
epoch, as ``lua/invalidate.lua`` does; entries also expire on their own (no position
moves); clocks move past validity limits and the TTL; the state is rebuilt. A question is
asked the way ``Checks.many`` asks it: a kept reply is reused only if
:func:`~clearance_decision.recent.reusable` says so at the position this iteration's
lookup read, otherwise the cache is read (an entry there is kept again). Every reply sent
must be the one the state gives at the revision it carries, and never past its validity.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from clearance_decision import recent as recent_module
from clearance_decision.recent import Position, Recent, reusable

BODIES = [b'{"q":%d}' % n for n in range(6)]
SIZE = 4
TTL = 10.0


class RecentReplies(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.answers = {body: 0 for body in BODIES}  # the state: each question's answer
        self.cached: dict[bytes, tuple[int, float | None]] = {}  # entry: answer, limit
        self.revision, self.epoch, self.build = 0, 0, 0
        self.now = 1000.0
        self.recent = Recent(SIZE, TTL)
        self.sent: list[tuple[bytes, bytes]] = []

    def position(self) -> Position:
        return (self.revision, b"b%d" % self.build, None if self.epoch == 0
                else str(self.epoch).encode())

    @staticmethod
    def reply(answer: int, revision: int) -> bytes:
        return b"answer %d at %d" % (answer, revision)

    @rule(body=st.sampled_from(BODIES), limit=st.one_of(st.none(), st.floats(0.1, 20)))
    def ask(self, body: bytes, limit: float | None) -> None:
        position, now = self.position(), self.now
        kept = self.recent.get(body)
        if kept is not None and reusable(kept, position, now):
            sent = kept.reply
        else:
            entry = self.cached.get(body)
            if entry is None or (entry[1] is not None and now >= entry[1]):
                # A miss: evaluated from the state and cached (not kept: only hits are).
                valid_until = None if limit is None else now + limit
                self.cached[body] = (self.answers[body], valid_until)
                sent = self.reply(self.answers[body], self.revision)
            else:
                sent = self.reply(entry[0], self.revision)
                self.recent.keep(body, sent, position, "allow", valid_until=entry[1], now=now)
        assert sent == self.reply(self.answers[body], self.revision), (body, sent)
        self.sent.append((body, sent))

    @rule(changed=st.sets(st.sampled_from(BODIES)), moves=st.booleans())
    def event(self, changed: set[bytes], moves: bool) -> None:
        """An event changes some answers; its invalidation drops their entries and moves
        the epoch (a call naming entries), and the revision unless it is a replay."""
        for body in changed:
            self.answers[body] += 1
            self.cached.pop(body, None)
        if changed:
            self.epoch += 1
        if moves or not changed:
            self.revision += 1

    @rule(body=st.sampled_from(BODIES))
    def expire(self, body: bytes) -> None:
        self.cached.pop(body, None)  # Valkey's TTL or eviction: no position moves

    @rule(body=st.sampled_from(BODIES))
    def expire_then_change(self, body: bytes) -> None:
        """The entry expired, then an event changed its answer: the call names the
        entry's index sets, finds nothing to delete, and still moves the epoch."""
        self.cached.pop(body, None)
        self.answers[body] += 1
        self.epoch += 1

    @rule(seconds=st.floats(0.01, 15))
    def wait(self, seconds: float) -> None:
        self.now += seconds
        # A limit that passed ends the answer: the state's answer is another from then.
        for body, (_, limit) in list(self.cached.items()):
            if limit is not None and self.now >= limit:
                del self.cached[body]
                self.answers[body] += 1
        for body in BODIES:  # and a kept reply whose limit passed is never sent again
            kept = self.recent.get(body)
            if kept is not None and reusable(kept, self.position(), self.now):
                assert self.now < kept.until

    @rule()
    def rebuild(self) -> None:
        """The store is wiped and rebuilt: every entry gone, a new build id; the
        revision and epoch start again (they may reach the same numbers)."""
        self.cached.clear()
        self.build += 1
        self.revision, self.epoch = 0, 0

    @invariant()
    def bounded(self) -> None:
        assert len(self.recent) <= SIZE
        kept = [(body, self.recent.get(body)) for body in BODIES]
        assert self.recent.weight == sum(len(b) + len(k.reply) for b, k in kept if k)


RecentReplies.TestCase.settings = settings(max_examples=200, stateful_step_count=40,
                                           deadline=None)
TestRecentReplies = RecentReplies.TestCase


def test_nothing_is_kept_without_a_cache() -> None:
    recent = Recent(16, 0)
    recent.keep(b"{}", b"reply", (1, b"b", None), "allow", valid_until=None, now=0.0)
    assert not recent.enabled
    assert recent.get(b"{}") is None


def test_the_least_recently_read_reply_leaves_first() -> None:
    recent = Recent(2, 60)
    position: Position = (1, b"b", None)
    for body in (b"a", b"b", b"a", b"c"):  # "a" read again before "c" arrives
        recent.keep(body, body, position, "allow", valid_until=None, now=0.0)
    assert recent.get(b"b") is None
    assert recent.get(b"a") is not None
    assert recent.get(b"c") is not None


def test_large_questions_are_not_kept_and_the_bytes_are_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A body padded to a megabyte is never kept; many large ones stay within MAX_BYTES."""
    monkeypatch.setattr(recent_module, "MAX_BYTES", 10_000)
    replies = Recent(1000, 60)
    position: Position = (1, b"b", None)
    padded = b"{" + b" " * (1 << 20) + b"}"
    replies.keep(padded, b"reply", position, "allow", valid_until=None, now=0.0)
    assert replies.get(padded) is None and replies.weight == 0
    for n in range(100):
        body = b'{"n":%d}' % n + b" " * 3000
        replies.keep(body, b"reply", position, "allow", valid_until=None, now=0.0)
        assert replies.weight <= 10_000
    assert len(replies) == 3  # the three most recent
