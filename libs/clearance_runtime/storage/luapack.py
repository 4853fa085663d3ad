"""Arguments for Lua scripts that take one msgpack argument (``cmsgpack.unpack``).

The compiler's commit, the cache's stores and the invalidator's calls each travel as one
msgpack argument instead of thousands of separate ones (packing those was most of their
cost on the client). Lua's cmsgpack knows no bin type, so a blob goes as a msgpack *str*:
a Lua string holds any bytes.
"""

from __future__ import annotations

import msgspec


def as_str(blob: bytes) -> msgspec.Raw:
    """The blob as a msgpack *str*."""
    size = len(blob)
    if size < 32:
        head = bytes((0xA0 | size,))
    elif size < 1 << 8:
        head = b"\xd9" + size.to_bytes(1, "big")
    elif size < 1 << 16:
        head = b"\xda" + size.to_bytes(2, "big")
    else:
        head = b"\xdb" + size.to_bytes(4, "big")
    return msgspec.Raw(head + blob)
