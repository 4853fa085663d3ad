"""The Lua script library: each script Clearance runs in Valkey is one ``.lua`` file in
``clearance_runtime/storage/lua/``, read once and registered with redis-py (EVALSHA, loaded again
on NOSCRIPT).

Kept as files rather than Python strings so that a script can be read, linted and tested
alone, and so that nothing is formatted into it: every key a script touches arrives in
``KEYS`` (what a Sentinel or Cluster deployment needs), every value in ``ARGV``.
"""

from __future__ import annotations

import functools
from importlib import resources

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

#: The directory of the library, inside the installed package.
LIBRARY = resources.files("clearance_runtime.storage") / "lua"


@functools.cache
def source(name: str) -> str:
    """The text of script ``name`` (``lua/<name>.lua``); FileNotFoundError if none."""
    return (LIBRARY / f"{name}.lua").read_text(encoding="utf-8")


def names() -> list[str]:
    """Every script of the library, sorted."""
    return sorted(entry.name[:-len(".lua")] for entry in LIBRARY.iterdir()
                  if entry.name.endswith(".lua"))


def register(redis: aioredis.Redis, name: str) -> AsyncScript:
    """Script ``name`` bound to ``redis``: call it with ``keys=`` and ``args=``."""
    return redis.register_script(source(name))
