"""Hand-written hostile values and a seeded mutator that plants them in JSON documents.

Generated documents (from the wire Structs and the CRD schemas) are well-typed; the
values here are the ones a schema never produces but a client or producer can send:
integers outside every machine range, floats JSON cannot carry, 1 MB strings, NUL bytes,
lone surrogates and invalid UTF-8, every regex meta-character, wildcard bombs, deep
nesting and bodies that are not JSON at all.

Some of them cannot be a Python value that an encoder accepts (a lone surrogate, the bytes
``\\xff``, the literal ``1e400``): :class:`Raw` carries such bytes, and :func:`encode`
splices them verbatim into the encoded document.

The mutator takes a ``random.Random``: the in-suite tests hand it Hypothesis' ``randoms()``
(shrinkable, reproducible), the ``dev.py fuzz`` runner a seeded generator (fast).
"""

from __future__ import annotations

import copy
import json
import random
import secrets
from typing import Any

import msgspec

MB = 1 << 20


class Raw:
    """Bytes spliced verbatim into an encoded document (not valid as a Python value)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __repr__(self) -> str:
        shown = self.data if len(self.data) <= 40 else self.data[:40] + b"..."
        return f"Raw({shown!r}, {len(self.data)} bytes)"


def _nested(depth: int, open_: bytes = b"[", close: bytes = b"]") -> Raw:
    return Raw(open_ * depth + close * depth)


def _nested_objects(depth: int) -> Raw:
    return Raw(b'{"a":' * depth + b"{}" + b"}" * depth)


REGEX_META = ".^$*+?{}[]\\|()"

#: Integers at and beyond every boundary an encoder, a database or a regex engine has.
INTEGERS: list[Any] = [
    0, -1, 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63,
    -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 2**64 + 1, -(2**64) - 1, 10**30, -(10**30),
    Raw(b"1" + b"0" * 400), Raw(b"-" + b"9" * 5000),
]

#: Floats, including literals that overflow a double and tokens JSON does not have.
FLOATS: list[Any] = [
    0.5, -0.0, 1e308, -1e308, 5e-324, 2.0**64, 1e16 + 1,
    Raw(b"1e400"), Raw(b"-1e400"), Raw(b"1e-400"), Raw(b"NaN"), Raw(b"Infinity"),
    Raw(b"-Infinity"), Raw(b"1E+2147483648"),
]

#: Strings that break naive escaping, regex building, wildcard matching or logging.
STRINGS: list[Any] = [
    "", " ", "\x00", "a\x00b", "\n", "\r\n", "\t", "\u202e", "\ufeff", "\u0085", "é",
    "\U0001f600", "İ", "ß", "\\", '"', "'", "/", "..", ".", "%s%n", "{}", "${x}",
    "*", "?", "**", "*?*", "a*", "*-debug", "prod-*",
    REGEX_META, *REGEX_META, "a{4294967296}", "a{65536}", "(?P<x", "(a+)+$", "(a|aa)+$",
    "(.*)*b", "[", "\\", "(?i)", "(?=a)", "\\1", "\\p{L}",
    "*" * 1000, "?" * 1000, "*a" * 40 + "b", "?*" * 200 + "b",
    "a" * 64 + "!", "a" * 300,
    "system:serviceaccount:", "system:serviceaccount:ns:name", "system:authenticated",
    "local-cluster", "prod-us-east", "alice", "platform-team", "pods", "pod", "cluster",
    "clusters", "view", "view_metrics", "MonitorAccessPolicy", "pvc", "namespaces",
]

#: Strings whose bytes are not valid UTF-8 / not valid UTF-16 when decoded from JSON.
RAW_STRINGS: list[Any] = [
    Raw(b'"\\ud800"'), Raw(b'"\\udfff"'), Raw(b'"a\\udc80b"'), Raw(b'"\\ud800\\ud800"'),
    Raw(b'"\\u0000"'), Raw(b'"\xed\xa0\x80"'), Raw(b'"\xff\xfe"'), Raw(b'"\xc0\xaf"'),
    Raw(b'"\xf4\x90\x80\x80"'), Raw(b'"a\x00b"'), Raw(b'"\\x41"'), Raw(b'"unterminated'),
]

#: Values that are large or deep rather than odd.
BIG: list[Any] = [
    "a" * MB, "*" * MB, "\u00e9" * (MB // 2), ["x"] * 20000,
    dict.fromkeys(map(str, range(5000)), 1),
    _nested(64), _nested(1000), _nested(100_000), _nested_objects(1000),
    Raw(b'"' + b"\\u0041" * 200_000 + b'"'),
]

SHAPES: list[Any] = [None, True, False, [], {}, [None], {"": None}, [[[]]], {"a": {"b": {}}}]

#: Whole request or event bodies that are not a JSON object, or not JSON at all.
WHOLE_BODIES: list[bytes] = [
    b"", b" ", b"null", b"true", b"0", b"-1", b'"x"', b"[]", b"[{}]", b"{", b"}", b"{}{}",
    b"\xef\xbb\xbf{}", b"\xff", b"\x00", b'{"a":1,"a":2}', b"{'a': 1}", b"NaN", b"1e400",
    b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    b'{"' + b"k" * MB + b'": 1}', b" " * MB + b"{}",
]

#: Keys planted next to the real ones (ignored in a request, invalid in an object).
KEYS: list[str] = ["", "\x00", "__proto__", "constructor", "x" * 1000, "request_id",
                   "min_revision", "timeout_ms", "principal", "resource", "kind", "metadata",
                   "spec", "status", "$ref", "type", "object"]


def pick(rnd: random.Random, *, big: float = 0.03) -> Any:
    """One hostile value; large ones with probability ``big`` (they cost bandwidth)."""
    if rnd.random() < big:
        pool = BIG
    else:
        pool = rnd.choice((INTEGERS, INTEGERS, FLOATS, STRINGS, STRINGS, STRINGS, RAW_STRINGS,
                           SHAPES))
    return copy.deepcopy(rnd.choice(pool))  # a copy: later edits must not reach the pool


def _slots(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indexes) in a document, the root included."""
    found = [path]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found.extend(_slots(value, (*path, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc[:50]):
            found.extend(_slots(value, (*path, index)))
    return found


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def mutate(doc: Any, rnd: random.Random, *, edits: int | None = None, big: float = 0.03) -> Any:
    """A copy of ``doc`` with a few hostile edits: replace a value, plant an unknown key,
    wrap a value in a list or an object, delete a key, or append to a list."""
    doc = copy.deepcopy(doc)
    for _ in range(rnd.randint(1, 3) if edits is None else edits):
        path = rnd.choice(_slots(doc))
        target = _get(doc, path)
        op = rnd.random()
        if not path:  # the root: only add to it (a replaced root is a whole body)
            if isinstance(target, dict):
                target[rnd.choice(KEYS)] = pick(rnd, big=big)
            continue
        parent, last = _get(doc, path[:-1]), path[-1]
        if op < 0.6:
            parent[last] = pick(rnd, big=big)
        elif op < 0.7:
            parent[last] = [target]
        elif op < 0.75:
            parent[last] = {"value": target}
        elif op < 0.85 and isinstance(parent, dict):
            del parent[last]
        elif isinstance(target, dict):
            target[rnd.choice(KEYS)] = pick(rnd, big=big)
        elif isinstance(target, list):
            target.append(pick(rnd, big=big))
        else:
            parent[last] = pick(rnd, big=big)
    return doc


_encoder = msgspec.json.Encoder()


def encode(doc: Any) -> bytes:
    """JSON bytes of ``doc`` with every :class:`Raw` spliced in verbatim, and strings
    an encoder refuses (lone surrogates) written as the JSON escapes they would be."""
    raws: dict[str, bytes] = {}
    token = secrets.token_hex(6)

    def prepare(value: Any) -> Any:
        if isinstance(value, Raw):
            marker = f"@raw-{token}-{len(raws)}@"
            raws[marker] = value.data
            return marker
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return prepare(Raw(json.dumps(value).encode()))  # \udXXX escapes
            return value
        if isinstance(value, dict):
            return {str(prepare(k)) if isinstance(k, Raw) else k: prepare(v)
                    for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [prepare(v) for v in value]
        return value

    data = _encoder.encode(prepare(doc))
    for marker, raw in raws.items():
        data = data.replace(b'"' + marker.encode() + b'"', raw)
    return data


def hostile_body(doc: Any, rnd: random.Random, *, whole: float = 0.05, big: float = 0.03
                 ) -> bytes:
    """A request or event body: usually ``doc`` mutated, sometimes a body that is not a
    JSON object at all."""
    if rnd.random() < whole:
        return rnd.choice(WHOLE_BODIES)
    return encode(mutate(doc, rnd, big=big))


class HostileEvent(msgspec.Struct, frozen=True):
    """One message for the event stream: its subject and raw body."""

    kind: str
    subject: str
    body: bytes

    def __repr__(self) -> str:
        shown = self.body if len(self.body) <= 300 else self.body[:300] + b"..."
        return f"HostileEvent({self.subject!r}, {shown!r}, {len(self.body)} bytes)"
