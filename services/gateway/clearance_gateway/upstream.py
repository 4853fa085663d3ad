"""Asking the decision service over NATS, and the HTTP side of its answers.

The gateway holds no state and reads no store: every answer is a request on a
``clearance.v1.*`` subject. An error reply becomes the error of the contract's one
hierarchy; no reply at all (no responders, a timeout, a closed connection) is
``unavailable``. Each maps to an HTTP status, so an HTTP client sees a failure as a
failure — never as a decision.
"""

from __future__ import annotations

from typing import Any

import msgspec
import nats.errors
from aiohttp import web
from nats.aio.client import Client

from clearance_api.errors import (
    BadRequest,
    Internal,
    NotFound,
    Refused,
    RequestError,
    Stale,
    Unavailable,
)
from clearance_api.wire.limits import MAX_DEPTH, nesting_exceeds
from clearance_runtime.edges.httpserve import Bounds, read_body

_ERRORS: dict[str, type[RequestError]] = {
    "bad_request": BadRequest, "not_found": NotFound, "stale": Stale,
    "unavailable": Unavailable, "internal": Internal,
}
#: HTTP status per contract error code: the caller's fault is 4xx, the system's 5xx.
HTTP_STATUS = {"bad_request": 400, "not_found": 404, "stale": 503, "unavailable": 503,
               "internal": 500}
#: Bytes of an HTTP request body: an AuthZEN request of the most evaluations (1,000 by
#: default) with labels and fields, or a review of a user in thousands of groups, fits.
MAX_BODY = 2 * 1024 * 1024
_encode = msgspec.json.Encoder().encode


class Upstream:
    def __init__(self, nc: Client, *, timeout: float) -> None:
        self._nc = nc
        self._timeout = timeout

    async def ask(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        """The decision service's reply to ``body`` on ``subject``; its error reply, or
        no reply, raised as the contract's error."""
        try:
            msg = await self._nc.request(subject, _encode(body), timeout=self._timeout)
        except (nats.errors.Error, TimeoutError) as exc:
            raise Unavailable(f"decision service unreachable over NATS: "
                              f"{type(exc).__name__}") from None
        try:
            reply = msgspec.json.decode(msg.data)
        except msgspec.DecodeError:
            raise Internal("decision service reply is not JSON") from None
        if not isinstance(reply, dict):
            raise Internal("decision service reply is not a JSON object")
        error = reply.get("error")
        if isinstance(error, dict):
            kind = _ERRORS.get(str(error.get("code")), Internal)
            raise kind(str(error.get("message", "")))
        return reply


async def json_object(request: web.Request, bounds: Bounds) -> dict[str, Any]:
    """The request's body as a JSON object, read within ``bounds`` (else ``Refused``,
    408 or 413); ``BadRequest`` for anything but a JSON object."""
    body = await read_body(request, bounds)
    if nesting_exceeds(body):
        raise BadRequest(f"request nests deeper than the limit of {MAX_DEPTH} levels")
    try:
        doc = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError, UnicodeError):
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise BadRequest("request body is not a JSON object")
    return doc


def status_of(exc: RequestError) -> int:
    if isinstance(exc, Refused):
        return exc.status
    return HTTP_STATUS.get(exc.code, 500)
