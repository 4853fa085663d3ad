"""hiredis packs every command byte for byte as redis-py's own packer does, and refuses
what redis-py refuses, with redis-py's error."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from clearance_runtime.storage.packing import LARGE, use_hiredis_packing

ARGS = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=["Cs"])),  # encodable text
    st.binary(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.binary().map(memoryview),
    # Around the size from which a last argument travels as its own chunk.
    st.tuples(st.binary(min_size=1, max_size=8), st.integers(LARGE - 2, LARGE + 2)).map(
        lambda b: (b[0] * b[1])[:b[1]]))
NAMES = st.sampled_from(["SET", "CONFIG GET", b"GET", b"CLIENT SETNAME", "EVALSHA"])


def connections() -> tuple[Any, Connection]:
    client = use_hiredis_packing(aioredis.Redis())
    return client.connection_pool.make_connection(), Connection()


@given(name=NAMES, args=st.lists(ARGS, max_size=20))
def test_a_command_packs_as_redis_py_packs_it(name: str | bytes, args: list[Any]) -> None:
    fast, plain = connections()
    assert b"".join(fast.pack_command(name, *args)) \
        == b"".join(bytes(c) for c in plain.pack_command(name, *args))


@given(name=NAMES, args=st.lists(ARGS, max_size=5), size=st.integers(LARGE - 1, LARGE + 1))
def test_a_large_last_argument_is_sent_as_it_is(name: str | bytes, args: list[Any],
                                                 size: int) -> None:
    """A batch commit's packed argument is not copied into the command (hiredis copies
    one that large slowly), and the command's bytes are redis-py's all the same."""
    fast, plain = connections()
    last = bytes(range(256)) * (size // 256) + bytes(size % 256)
    chunks = fast.pack_command(name, *args, last)
    assert any(chunk is last for chunk in chunks) == (size >= LARGE)
    assert b"".join(chunks) == b"".join(bytes(c) for c in plain.pack_command(name, *args, last))


@given(commands=st.lists(st.tuples(NAMES, st.lists(ARGS, max_size=5)), max_size=10))
def test_a_pipeline_packs_as_redis_py_packs_it(commands: list[tuple[Any, list[Any]]]) -> None:
    fast, plain = connections()
    flat = [(name, *args) for name, args in commands]
    assert b"".join(fast.pack_commands(flat)) \
        == b"".join(bytes(c) for c in plain.pack_commands(flat))


@pytest.mark.parametrize("bad", [True, None, object()])
def test_what_redis_py_refuses_is_refused_with_its_error(bad: object) -> None:
    fast, _ = connections()
    with pytest.raises(DataError):
        fast.pack_command("SET", "k", bad)


def test_unencodable_text_fails_as_with_redis_py() -> None:
    fast, plain = connections()
    for conn in (fast, plain):
        with pytest.raises(UnicodeEncodeError):
            conn.pack_command("SET", "k", "\ud800")
