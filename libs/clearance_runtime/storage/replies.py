"""Redis replies as Python values: a client may hand back bytes or str (decoded
responses), and every reader needs one or the other."""

from __future__ import annotations


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def blob(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
