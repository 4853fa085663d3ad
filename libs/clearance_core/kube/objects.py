"""One parsing convention for every Kubernetes object Clearance reads
(docs/api/README.md: Conventions).

Policies, MetricSources, Roles, bindings, Groups and ManagedClusters all arrive as the
API server serves them, or as any other producer writes them. Each kind reads its
fields through these helpers so they agree on the edge cases:

* ``null`` means absent. The API server prunes nulls of non-nullable fields, so
  ``enabled: null`` is the default ``true``, not an error (:func:`prune`).
* A number or boolean where a string is expected compares in its JSON form (``10``,
  ``true``, ``1.5``): YAML authors write ``allowed: [10]`` meaning ``"10"``
  (:func:`text`, :func:`texts`, and :data:`Text` inside msgspec schemas).
* Times are strict RFC 3339 ``date-time`` (:func:`rfc3339`); ISO basic and week forms
  that ``datetime.fromisoformat`` would also take are refused.
* Integers are 64-bit (the stored, msgpack-encoded form cannot hold more) and nesting is
  bounded; an object beyond either limit is invalid with a reason naming the limit.

Every failure is :class:`~clearance_api.errors.InvalidObject` with the field's path.
"""

from __future__ import annotations

import hashlib
import math
import re
from datetime import datetime
from typing import Any

import msgspec

from clearance_api.errors import InvalidObject

MAX_DEPTH = 64
INT_MIN, INT_MAX = -(2**63), 2**63 - 1

_json = msgspec.json.Encoder()
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})")


class Text(str):
    """A string field of a msgspec schema that also accepts scalars in their JSON form
    (decoded by :func:`dec_hook`; encodes and compares as the ``str`` it is)."""

    __slots__ = ()


def dec_hook(kind: type, value: Any) -> Any:
    """``msgspec.convert(..., dec_hook=dec_hook)`` support for :class:`Text` fields."""
    if kind is Text:
        converted = scalar_text(value)
        if converted is None:
            raise ValueError(f"expected a string, not {_describe(value)}")
        return Text(converted)
    raise NotImplementedError(kind)


def scalar_text(value: Any) -> str | None:
    """The JSON form of a scalar (``None`` for anything that is not one)."""
    if isinstance(value, str):
        return str(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float) and math.isfinite(value):
        return _json.encode(value).decode()
    return None


def text(value: Any, where: str) -> str:
    """A string field: strings as they are, scalars in JSON form."""
    converted = scalar_text(value)
    if converted is None:
        raise InvalidObject(f"{where} must be a string, not {_describe(value)}")
    return converted


def texts(value: Any, where: str) -> list[str]:
    """A list of strings: absent is empty, null entries are absent, scalars in JSON form."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidObject(f"{where} must be a list of strings, not {_describe(value)}")
    # Strings as they are; only another entry's place is spelled out (a Group lists
    # thousands of users, and naming each one's place cost more than the rest).
    return [entry if type(entry) is str else text(entry, f"{where}[{index}]")
            for index, entry in enumerate(value) if entry is not None]


def mapping(value: Any, where: str) -> dict[str, Any]:
    """An object field: absent (or null) is empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidObject(f"{where} must be an object, not {_describe(value)}")
    return value


def rfc3339(value: Any, where: str) -> float:
    """A strict RFC 3339 date-time (offset required) as a POSIX timestamp."""
    if not isinstance(value, str) or _RFC3339.fullmatch(value) is None:
        raise InvalidObject(
            f"{where}: {value!r} is not an RFC 3339 date-time (e.g. 2025-01-01T00:00:00Z)")
    try:
        return datetime.fromisoformat(value.upper().replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError):
        raise InvalidObject(f"{where}: {value!r} is not a valid date-time") from None


def prune(value: Any, where: str = "", *, as_text: bool = False) -> Any:
    """A copy without nulls (null = absent), checked against the size limits.

    ``as_text`` turns every other scalar into its JSON form too: for kinds whose every
    leaf is a string (Roles, bindings), that is the whole convention in one pass."""
    return _prune(value, None, where or "object", 0, as_text)


_sorted_json = msgspec.json.Encoder(order="sorted").encode
#: An object as JSON (as the store keeps it).
to_json = _json.encode
from_json = msgspec.json.Decoder(dict[str, Any]).decode


def spec_hash(spec: Any) -> str:
    """A spec's hash (in statuses and compiled records): of its JSON with sorted keys."""
    return json_hash(_sorted_json(spec))


def json_hash(sorted_json: bytes) -> str:
    """:func:`spec_hash` from the sorted JSON already made (:func:`prune_sorted`)."""
    return hashlib.sha256(sorted_json).hexdigest()[:16]


#: An integer literal this long may lie outside the 64-bit range (2**63 has 19 digits).
#: Looked for as a run of zeros once every digit is made a zero: the same answer as the
#: regular expression ``[0-9]{19}``, in a fifth of the time (the search was over half of
#: this function's cost, paid for every policy folded).
_LONG_NUMBER = b"0" * 19
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def prune_sorted(value: Any, where: str = "") -> tuple[Any, bytes]:
    """:func:`prune`'s result and its JSON with sorted keys (what a spec's hash is taken
    of), in one pass when there is nothing to prune: the sorted JSON is made first, and
    when it holds no ``null`` (nor a non-finite number: those encode as ``null``), no
    integer of 19 digits or more and fewer brackets than the depth limit, pruning would
    return an equal copy, so the value itself is returned (not a copy: callers only read
    it). Anything else — a ``null`` inside a string included — takes the full walk."""
    try:
        blob = _sorted_json(value)
    except (TypeError, ValueError, OverflowError):
        blob = b"null"  # not encodable as it is: the walk says why
    if b"null" not in blob and blob.count(b"{") + blob.count(b"[") <= MAX_DEPTH \
            and _LONG_NUMBER not in blob.translate(_DIGITS_AS_ZERO):
        return value, blob
    pruned = prune(value, where)
    return pruned, _sorted_json(pruned)


#: Where a value sits: (its parent's path, its key or index); the root is a string. Built
#: into text only for an error: formatting every path of every object was a measurable
#: part of folding a backlog.
_Path = tuple[Any, str | int] | None


def _prune(value: Any, parent: _Path, step: str | int, depth: int, as_text: bool) -> Any:
    if depth > MAX_DEPTH:
        raise InvalidObject(f"{_where(parent, step)}: nested deeper than the limit of "
                            f"{MAX_DEPTH} levels")
    if type(value) is str:
        return value
    # Maps and lists are walked in a loop that keeps string leaves without a call (most
    # leaves are strings: a call per leaf was most of compiling a policy). A string one
    # level down is within the limit when this level is below it.
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        path: _Path = None
        leaves = depth < MAX_DEPTH
        for key, item in value.items():
            if leaves and type(item) is str:
                out[key] = item
            elif item is not None:
                if path is None:
                    path = (parent, step)
                out[key] = _prune(item, path, key, depth + 1, as_text)
        return out
    if isinstance(value, list):
        items: list[Any] = []
        path = None
        leaves = depth < MAX_DEPTH
        for index, item in enumerate(value):
            if leaves and type(item) is str:
                items.append(item)
            elif item is not None:
                if path is None:
                    path = (parent, step)
                items.append(_prune(item, path, index, depth + 1, as_text))
        return items
    if type(value) is int and not INT_MIN <= value <= INT_MAX:
        raise InvalidObject(
            f"{_where(parent, step)}: integer {_short(value)} is outside the 64-bit range "
            f"[{INT_MIN}, {INT_MAX}]")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidObject(f"{_where(parent, step)}: {value} is not a finite number")
    if as_text and not isinstance(value, str):
        return scalar_text(value)
    return value


def _where(parent: _Path, step: str | int) -> str:
    """The path's text, as ``spec.rules[0].selector``."""
    steps: list[str | int] = [step]
    while parent is not None:
        parent, up = parent
        steps.append(up)
    root, *rest = reversed(steps)
    return str(root) + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in rest)


def _short(number: int) -> str:
    digits = str(number) if number.bit_length() < 4000 else "(a very large number)"
    return digits if len(digits) <= 40 else f"{digits[:20]}…({len(digits)} digits)"


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return repr(value)[:60]
