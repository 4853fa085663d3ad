"""User-supplied regular expressions: RE2 syntax, linear time, at most 256 characters.

``matchPattern`` selectors and MetricSource ``matches`` conditions are written by policy
authors and run against names and values chosen by whoever sends a request. On a
backtracking engine a pattern like ``(a|aa)*c`` against forty characters blocks the
service for minutes, so these run on RE2 (the syntax ClusterPulse's Go code accepts, and
a matcher whose time is linear in its input). The 256-character limit is ClusterPulse's
CRD limit; a longer or invalid pattern makes its object invalid, with the reason.
"""

from __future__ import annotations

from functools import lru_cache

import re2

from clearance_api.errors import InvalidObject

MAX_PATTERN_LENGTH = 256

_OPTIONS = re2.Options()
# RE2 writes parse errors to stderr through absl logging (non-JSON lines); the error is
# reported in the object's status instead.
_OPTIONS.log_errors = False
# Only whole-match yes/no is ever asked: no capture bookkeeping.
_OPTIONS.never_capture = True


def check(pattern: str, where: str) -> None:
    """Raise InvalidObject naming ``where`` unless ``pattern`` is a usable RE2 pattern."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise InvalidObject(
            f"{where}: pattern is {len(pattern)} characters, the limit is "
            f"{MAX_PATTERN_LENGTH}")
    try:
        _compiled(pattern)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise InvalidObject(f"{where}: invalid regular expression (RE2 syntax): {detail}") from None


def fullmatch(pattern: str, text: str) -> bool:
    """Whether ``pattern`` (already checked) matches the whole of ``text``."""
    regex = _compiled(pattern)
    try:
        return regex.fullmatch(text) is not None
    except UnicodeEncodeError:
        # Lone surrogates have no UTF-8 form; compare them as U+FFFD, like Go does.
        return regex.fullmatch(_without_surrogates(text)) is not None


def _without_surrogates(text: str) -> str:
    return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re2._Regexp:
    return re2.compile(pattern, _OPTIONS)
