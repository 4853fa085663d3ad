"""Bugs the fuzzers found that are not fixed yet — one entry per distinct bug.

Each entry has the exact input that shows it (``tests/fuzz/test_known_bugs.py`` runs
every example: ``xfail`` while the bug is open, XPASS once its fix is merged) and a
predicate that recognises the whole class of inputs, which the strict fuzz tests (and
``dev.py fuzz --skip-known``) leave out while the bug is open. **When a fix is merged, set
``open=False``** (do not delete the entry): its example becomes an ordinary regression
test and the fuzzers cover its class again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Target = Literal["request", "event"]


@dataclass(frozen=True)
class KnownBug:
    id: str
    target: Target
    #: The request subject, or the event kind, of the example.
    where: str
    #: What the fuzzer observed (for the lead and for the xfail reason).
    observed: str
    example: bytes
    #: Recognises inputs of this bug's class: (target, subject or kind, body) -> bool.
    matches: Callable[[str, str, bytes], bool]
    #: False once the fix is merged: the example is then a strict regression test.
    open: bool = True
    #: The oracle labels the example demonstrates (empty: any finding counts).
    shows: tuple[str, ...] = ()


CHECK = "clearance.v1.check"
BATCH = "clearance.v1.check.batch"
MAP = "monitoraccesspolicy"


def invalid_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def depth(body: bytes) -> int:
    """The deepest nesting of JSON arrays and objects in ``body`` (strings skipped)."""
    deepest = level = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            level += 1
            deepest = max(deepest, level)
        elif byte in (0x5D, 0x7D):
            level -= 1
    return deepest


def deep(body: bytes) -> bool:
    return depth(body) > 200


_HUGE_INT = re.compile(rb"(?<![0-9.eE])-?[0-9]{20,}(?![0-9.eE])")


def huge_int(body: bytes) -> bool:
    """An integer literal msgpack cannot carry (outside [-2**63, 2**64 - 1]), roughly:
    any of 20 digits or more."""
    return _HUGE_INT.search(body) is not None


def backtracking_pattern(body: bytes) -> bool:
    """The hostile pool's patterns that backtrack: nested quantifiers, alternations of
    overlapping words, and wildcards with many ``*`` between literals."""
    return any(p in body for p in (b"(a+)+", b"(a|aa)+", b"(.*)*", b"*a*a*a", b"?*?*?*"))


def _on(target: Target, *wheres: str) -> Callable[[Target, str, bytes], bool]:
    return lambda t, w, _b: t == target and (not wheres or w in wheres)


def _all(*tests: Callable[..., bool]) -> Callable[[str, str, bytes], bool]:
    return lambda t, w, b: all(test(t, w, b) for test in tests)


def _body(test: Callable[[bytes], bool]) -> Callable[[str, str, bytes], bool]:
    return lambda _t, _w, b: test(b)


#: The embedded nats-server's max_payload (clearance_runtime.process.servers).
PAYLOAD_LIMIT = 32 * 1024 * 1024
_SAR_HEAD = (b'{"spec":{"user":"alice","resourceAttributes":{"verb":"get","resource":"pods"},'
             b'"uid":"')
_OVERSIZE_SAR = _SAR_HEAD + b"u" * (PAYLOAD_LIMIT - 40 - len(_SAR_HEAD)) + b'"}}'

KNOWN_BUGS: list[KnownBug] = [
    KnownBug(
        id="request-invalid-utf8",
        open=False,  # fixed: a regression test now
        target="request", where="clearance.v1.status",
        observed="a request body that is not valid UTF-8 gets no reply at all (the "
                 "responder's error path re-decodes the body for its request_id and raises "
                 "UnicodeDecodeError again), or `internal` where the bad bytes sit in a field "
                 "only the handler decodes; expected `bad_request`",
        example=b'{"request_id":"\xff"}',
        matches=_all(_on("request"), _body(invalid_utf8)),
    ),
    KnownBug(
        id="request-deep-nesting",
        open=False,  # fixed: a regression test now
        target="request", where="clearance.v1.status",
        observed="a request nested deeper than msgspec's recursion limit (here in an "
                 "unknown field) gets no reply: RecursionError while decoding, and again "
                 "while reading its request_id; expected `bad_request` naming a depth limit",
        example=b'{"zz":' + b"[" * 5000 + b"]" * 5000 + b"}",
        matches=_all(_on("request"), _body(deep)),
    ),
    KnownBug(
        id="check-huge-int-cache-key",
        open=False,  # fixed: a regression test now
        target="request", where=BATCH,
        observed="an integer outside [-2**63, 2**64-1] in resource.fields of a check "
                 "(check.batch here) is `internal` (OverflowError in msgpack while hashing the "
                 "cache key); expected `bad_request` or an answer",
        example=b'{"principal":{"username":"alice"},"checks":[{"action":"view","resource":'
                b'{"type":"cluster","name":"prod-us-east","fields":{"a":18446744073709551616}}}]}',
        matches=_all(_on("request", CHECK, BATCH), _body(huge_int)),
    ),
    KnownBug(
        id="coalesced-check-neighbours",
        open=False,  # fixed: a regression test now
        target="request", where=CHECK,
        observed="one check whose decoding or cache key raises anything but a RequestError "
                 "(a huge int in resource.fields, invalid UTF-8, deep nesting) fails every "
                 "other check coalesced into the same event-loop batch (check_many): they get "
                 "`internal` (or no reply) instead of their own answers",
        example=b'{"principal":{"username":"mallory"},"action":"view","resource":{"type":'
                b'"cluster","name":"prod-us-east","fields":{"a":18446744073709551616}}}',
        matches=_all(_on("request", CHECK),
                     _body(lambda b: huge_int(b) or invalid_utf8(b) or deep(b))),
        shows=("neighbour failures",),
    ),
    KnownBug(
        id="filter-aggregation-float-overflow",
        open=False,  # fixed: a regression test now
        target="request", where="clearance.v1.filter",
        observed="clearance.v1.filter on a type whose MetricSource sums a field is "
                 "`internal` (OverflowError: intermediate overflow in math.fsum) when the "
                 "values add up beyond the largest double (two items of 1e308)",
        example=b'{"principal":{"username":"alice"},"cluster":"prod-us-east","type":"pvc",'
                b'"items":[{"name":"a","fields":{"sizeGi":1e308}},'
                b'{"name":"b","fields":{"sizeGi":1e308}}]}',
        matches=_all(_on("request", "clearance.v1.filter"),
                     _body(lambda b: re.search(rb"[eE]\+?30[0-9]", b) is not None)),
    ),
    KnownBug(
        id="request-huge-timeout-ms",
        open=False,  # fixed: a regression test now
        target="request", where="clearance.v1.status",
        observed="`timeout_ms` of 10**400 (msgspec accepts any int) with a `min_revision` "
                 "not yet reached is `internal`: OverflowError converting it to seconds "
                 "(health.wait_for); expected `bad_request` naming a limit. (Related, not a "
                 "crash: any timeout_ms is honoured, so a request may hold a responder slot "
                 "for 2**63 ms; 1024 of them starve a subject.)",
        example=b'{"min_revision":1000000000,"timeout_ms":1' + b"0" * 400 + b"}",
        matches=_all(_on("request"), _body(lambda b: b"timeout_ms" in b and huge_int(b))),
    ),
    KnownBug(
        id="oversize-reply-silence",
        open=False,  # fixed: a regression test now
        target="request", where="clearance.v1.review.subject",
        observed="a SubjectAccessReview just under the 32 MiB payload limit is answered by "
                 "echoing it with its status, which exceeds the limit: the publish fails "
                 "(logged as reply_failed) and the client gets no reply at all; expected "
                 "`bad_request` naming the limit",
        example=_OVERSIZE_SAR,
        matches=_all(_on("request"), _body(lambda b: len(b) > PAYLOAD_LIMIT - 4096)),
    ),
    KnownBug(
        id="event-invalid-utf8",
        open=False,  # fixed: a regression test now
        target="event", where="group",
        observed="an event body that is not valid UTF-8 kills the compiler "
                 "(UnicodeDecodeError escapes Folder.fold: only msgspec errors are caught), "
                 "and with it `clearance run all` (TaskGroup); on restart it replays into the "
                 "same event: a crash loop; expected: counted as malformed and skipped",
        example=b'{"type":"ADDED","object":{"kind":"Group","metadata":{"name":"\xff"}}}',
        matches=_all(_on("event"), _body(invalid_utf8)),
    ),
    KnownBug(
        id="event-deep-nesting",
        open=False,  # fixed: a regression test now
        target="event", where="group",
        observed="an event nested deeper than msgspec's recursion limit kills the compiler "
                 "(RecursionError while decoding; not caught): process exit, crash loop",
        example=b'{"type":"ADDED","object":{"kind":"Group","metadata":{"name":"g"},"x":'
                + b"[" * 5000 + b"]" * 5000 + b"}}",
        matches=_all(_on("event"), _body(deep)),
    ),
    KnownBug(
        id="event-regex-repeat-overflow",
        open=False,  # fixed: a regression test now
        target="event", where=MAP,
        observed="matchPattern `a{4294967296}` (a repetition count beyond 2**32-1) kills the "
                 "compiler: re.compile raises OverflowError, only re.error is caught "
                 "(the same holds for MetricSource `matches` values): process exit, crash "
                 "loop; expected: the policy is invalid",
        example=b'{"type":"ADDED","object":{"apiVersion":"clusterpulse.io/v1alpha1","kind":'
                b'"MonitorAccessPolicy","metadata":{"name":"fuzz-a","namespace":"fuzz"},"spec":'
                b'{"identity":{"subjects":{"users":["fuzz-user"]}},"access":{"effect":"Allow"},'
                b'"scope":{"clusters":{"rules":[{"selector":{"matchPattern":"a{4294967296}"}}]}}}}}',
        matches=_all(_on("event"), _body(lambda b: re.search(rb"\{[0-9]{10,}", b) is not None)),
    ),
    KnownBug(
        id="event-huge-int-priority",
        open=False,  # fixed: a regression test now
        target="event", where=MAP,
        observed="a MonitorAccessPolicy with priority 18446744073709551616 (> 2**64-1) "
                 "kills the compiler: the spec fails validation, invalid_policy() keeps the "
                 "priority (an int >= 0), and msgpack cannot encode it (OverflowError in "
                 "state.encode_policy): process exit, crash loop",
        example=b'{"type":"ADDED","object":{"apiVersion":"clusterpulse.io/v1alpha1","kind":'
                b'"MonitorAccessPolicy","metadata":{"name":"fuzz-a","namespace":"fuzz"},"spec":'
                b'{"identity":{"priority":18446744073709551616,"subjects":{"users":'
                b'["fuzz-user"]}}}}}',
        matches=_all(_on("event"),
                     _body(lambda b: huge_int(b) and b"MonitorAccessPolicy" in b)),
    ),
    KnownBug(
        id="event-long-name-closes-compiler-connection",
        open=False,  # fixed: a regression test now
        target="event", where=MAP,
        observed="a MonitorAccessPolicy whose namespace/name is longer than ~4 KB makes the "
                 "compiler publish its status on a subject longer than NATS' control-line "
                 "limit (4096): the server closes the compiler's connection, nats-py does not "
                 "reconnect, and the compiler retries for ever on the closed connection "
                 "(ConnectionClosedError): the pipeline stalls for good, no process exits",
        example=b'{"type":"ADDED","object":{"apiVersion":"clusterpulse.io/v1alpha1","kind":'
                b'"MonitorAccessPolicy","metadata":{"name":"' + b"a" * 5000 + b'","namespace":'
                b'"fuzz"},"spec":{"identity":{"subjects":{"users":["fuzz-user"]}},"access":'
                b'{"effect":"Allow"},"scope":{"clusters":{"default":"all"}}}}}',
        matches=_all(_on("event"), _body(lambda b: b"MonitorAccessPolicy" in b and re.search(
            rb'"[^"]{3000,}"', b) is not None)),
    ),
    KnownBug(
        id="backtracking-patterns",
        open=False,  # fixed: a regression test now
        target="event", where=MAP,
        observed="a policy with matchPattern `(a+)+$` (or a wildcard such as `*a*a*a…b`) "
                 "makes every check of a subject it names on a cluster like 'aaaa…a!' "
                 "backtrack for minutes, blocking the decision service's event loop: no reply "
                 "to anyone; the contract requires linear-time matching (RE2)",
        example=b'{"type":"ADDED","object":{"apiVersion":"clusterpulse.io/v1alpha1","kind":'
                b'"MonitorAccessPolicy","metadata":{"name":"fuzz-a","namespace":"fuzz"},"spec":'
                b'{"identity":{"subjects":{"users":["fuzz-user"]}},"access":{"effect":"Allow"},'
                b'"scope":{"clusters":{"rules":[{"selector":{"matchPattern":"(a+)+$"}}]}}}}}',
        matches=_all(_on("event"), _body(backtracking_pattern)),
    ),
]


def known(target: Target, where: str, body: bytes) -> KnownBug | None:
    """The open bug whose class ``body`` belongs to, if any."""
    for bug in KNOWN_BUGS:
        if bug.open and bug.matches(target, where, body):
            return bug
    return None


