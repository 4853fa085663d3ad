"""Request size limits (README: Conventions): exceeding one is a ``bad_request`` naming it.

List lengths are declared on the wire Structs (``msgspec.Meta(max_length=...)``), so the
decoder refuses an oversized list before the service touches it, the message names the
limit, and the JSON Schemas in ``proto-schemas/`` carry it as ``maxItems``. Nesting depth
is checked on the raw bytes before decoding (:func:`nesting_exceeds`): msgspec would
otherwise recurse until the interpreter's stack limit, a bound that depends on where it
is called from rather than on the request. Request bytes are bounded by the NATS server's
``max_payload``, which no message can exceed.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, TypeVar

import msgspec

#: JSON nesting depth of a request body (``{}`` is one level; a check has three).
MAX_DEPTH = 64
#: Checks in one ``clearance.v1.check.batch``.
MAX_CHECKS = 10_000
#: Items in one ``clearance.v1.filter`` or ``clearance.v1.search.filter``, and namespaces
#: (and nodes) in one ``clearance.v1.metrics``.
MAX_ITEMS = 200_000
#: Groups a request may assert for one principal (each is a Redis lookup per decision).
MAX_GROUPS = 10_000
#: Bytes of a bearer token; service-account JWTs are about 1 KiB, OIDC tokens a few.
MAX_TOKEN = 16_384
#: Subjects one ``clearance.v1.who-can-see`` answer decides (users, groups and service
#: accounts named on the question's policies and bindings): each is a check of its own.
MAX_AUDIENCE = 50_000

T = TypeVar("T")
Checks = Annotated[list[T], msgspec.Meta(max_length=MAX_CHECKS)]
Items = Annotated[list[T], msgspec.Meta(max_length=MAX_ITEMS)]
Groups = Annotated[list[str], msgspec.Meta(max_length=MAX_GROUPS)]

# Everything but the structural characters and the quote, for bytes.translate.
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'[]{}"')
# An opener and a closer of either kind: their pairing is the decoder's to check.
_OPEN, _CLOSE = r"[\[{]", r"[\]}]"


def _balanced(height: int) -> str:
    """A regex for a run of complete groups nested at most ``height`` levels.

    Possessive repeats: the grammar is deterministic (``{`` opens, ``}`` closes), so no
    backtracking is ever useful, and the match runs in time linear in the text."""
    pattern = ""
    for _ in range(height):
        pattern = f"(?:{_OPEN}{pattern}{_CLOSE})*+"
    return pattern


@functools.cache
def _matchers(limit: int) -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
    within = re.compile(_balanced(limit).encode())
    # From where ``within`` stopped at an opener: does the text go ``limit + 1`` levels
    # down (each level may first hold complete groups that fit below it)? If not, the
    # group is merely unterminated, which is the decoder's to report.
    deeper = re.compile(("".join(
        _OPEN + _balanced(limit - 1 - level) for level in range(limit)) + _OPEN).encode())
    return within, deeper


def nesting_exceeds(body: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text nests arrays and objects deeper than ``limit`` levels.

    C-speed work only: a body with no more openers than ``limit`` cannot exceed it (the
    common case: two counts); otherwise strings are removed (escaped backslashes and
    quotes first, then every quoted run), leaving the brackets outside strings, and two
    linear regexes over them decide. For text that is not JSON the answer is False where
    it is not clearly too deep: the decoder refuses it with its own message.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    text = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    # Dropping two adjacent quotes removes an empty string or joins two strings: either
    # way what lies outside strings is unchanged, and most strings hold no bracket, so
    # little is left for the split.
    text = text.replace(b'""', b"")
    if b'"' in text:
        text = b"".join(text.split(b'"')[::2])
    within, deeper = _matchers(limit)
    stop = within.match(text)
    end = stop.end() if stop is not None else 0
    return deeper.match(text, end) is not None
