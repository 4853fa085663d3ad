"""The compiler reads each message's place in the stream from its ack subject itself
(``bus.position``); it must agree with nats-py's own reading on every subject form."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.aio.msg import Msg

from clearance_runtime.messaging import bus

_token = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-",
                 min_size=1, max_size=12)
_count = st.integers(min_value=0, max_value=2**63 - 1)
_nanos = st.integers(min_value=0, max_value=4_102_444_800 * 10**9)  # up to the year 2100


def _expected(reply: str) -> bus.Position:
    meta = Msg.Metadata._from_reply(reply)
    assert meta.timestamp is not None
    return bus.Position(meta.sequence.stream, int(meta.timestamp.timestamp() * 1000),
                        meta.num_pending, meta.sequence.consumer)


@given(stream=_token, consumer=_token, delivered=_count, sseq=_count, cseq=_count,
       nanos=_nanos, pending=_count)
def test_the_short_ack_subject_reads_as_nats_py_reads_it(
        stream: str, consumer: str, delivered: int, sseq: int, cseq: int, nanos: int,
        pending: int) -> None:
    reply = f"$JS.ACK.{stream}.{consumer}.{delivered}.{sseq}.{cseq}.{nanos}.{pending}"
    found = bus.position(SimpleNamespace(reply=reply))
    expected = _expected(reply)
    assert (found.stream_seq, found.pending, found.consumer_seq) == \
        (expected.stream_seq, expected.pending, expected.consumer_seq)
    # nats-py goes through a float of seconds; the exact integer division may differ
    # from it by the float's rounding, never by more than a millisecond.
    assert abs(found.stored_ms - expected.stored_ms) <= 1
    assert found.stored_ms == nanos // 1_000_000


@given(domain=_token, account=_token, stream=_token, consumer=_token, delivered=_count,
       sseq=_count, cseq=_count, nanos=_nanos, pending=_count, tail=st.lists(_token, max_size=2))
def test_the_ack_subject_with_a_domain_reads_as_nats_py_reads_it(
        domain: str, account: str, stream: str, consumer: str, delivered: int, sseq: int,
        cseq: int, nanos: int, pending: int, tail: list[str]) -> None:
    reply = ".".join(["$JS", "ACK", domain, account, stream, consumer, str(delivered),
                      str(sseq), str(cseq), str(nanos), str(pending), "r1", *tail])
    found = bus.position(SimpleNamespace(reply=reply))
    expected = _expected(reply)
    assert (found.stream_seq, found.pending, found.consumer_seq) == \
        (expected.stream_seq, expected.pending, expected.consumer_seq)
    assert found.stored_ms == nanos // 1_000_000


@pytest.mark.parametrize("reply", [None, "", "_INBOX.abc", "$JS.ACK.s.c.1.2.3",
                                   "$JS.NAK.s.c.1.2.3.4.5", "$JS.ACK.s.c.1.x.3.4.5"])
def test_a_message_that_is_not_from_jetstream_is_refused(reply: str | None) -> None:
    with pytest.raises(ValueError, match=r"JetStream|invalid literal"):
        bus.position(SimpleNamespace(reply=reply))


async def test_the_connection_of_a_jetstream_context_is_the_one_it_was_made_from() -> None:
    """``bus.connection_of`` reads nats-py's private attribute: an upgrade that moves it
    must fail here, not in the watcher's reload."""
    nc = Client()
    assert bus.connection_of(nc.jetstream()) is nc
