"""Wildcards as the contract defines them: ``*`` any run, ``?`` one character.

Everything else is literal (regex metacharacters are escaped, unlike ClusterPulse,
where ``a+b*`` became the regex ``^a+b.*$``), and every pattern is anchored at both
ends. A list of patterns compiles into one literal set plus one combined regex, so a
matcher costs one set lookup and at most one regex call per value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import msgspec


def is_wildcard(pattern: str) -> bool:
    return "*" in pattern or "?" in pattern


@lru_cache(maxsize=4096)
def to_regex(pattern: str) -> str:
    """Translate one wildcard into a regular expression source for ``fullmatch``.

    Built so Python's backtracking engine runs in linear time: a naive ``a.*b.*c`` costs
    O(n^k) on hostile input (``*a*a*a*a*b`` against 5,000 ``a``s never finishes). Between
    the first and the last ``*``, each segment is found at its earliest occurrence inside
    an atomic group that is never re-entered; this greedy placement is the classic glob
    algorithm and loses no match, because a segment placed earlier only leaves more
    room for the rest. Only the tail ``.*last`` backtracks, once, against the end.

    Cached: a fleet's policies repeat a few wildcards, and escaping one character at a
    time was most of compiling a selector.
    """
    segments = [_segment(part) for part in pattern.split("*")]
    if len(segments) == 1:
        return segments[0]
    middle = "".join(f"(?>(?s:.*?){seg})" for seg in segments[1:-1])
    return f"{segments[0]}{middle}(?s:.*){segments[-1]}"


def _segment(part: str) -> str:
    return "".join("(?s:.)" if char == "?" else re.escape(char) for char in part)


class NameSet(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A compiled list of names and wildcards: literals plus one anchored regex."""

    literals: frozenset[str] = frozenset()
    regex: str | None = None

    @classmethod
    def of(cls, patterns: Iterable[str]) -> NameSet:
        patterns = list(patterns)
        literals = frozenset(p for p in patterns if not is_wildcard(p))
        wild = sorted({to_regex(p) for p in patterns if is_wildcard(p)})
        regex = "(?:" + "|".join(wild) + ")" if wild else None
        return cls(literals=literals, regex=regex)

    def __bool__(self) -> bool:
        return bool(self.literals) or self.regex is not None

    def matches(self, value: str) -> bool:
        if value in self.literals:
            return True
        return self.regex is not None and compiled(self.regex).fullmatch(value) is not None


@lru_cache(maxsize=4096)
def compiled(source: str) -> re.Pattern[str]:
    """Compile a regex once per process (policies are decoded many times, compiled once)."""
    return re.compile(source)
