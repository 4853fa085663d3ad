"""The route table, generated from ``clearance_api.wire.REQUESTS``, and its one adapter.

Every subject is answered by the same :class:`Route`: decode the body once into the
subject's request Struct (``bad_request`` naming the problem), run the checks that need
no state, turn a ``token`` into its principal (a TokenReview, cached), wait for
``min_revision`` (``stale`` after ``timeout_ms``), call the handler, echo ``request_id``
and encode the reply Struct. A state store outage is
``unavailable``; any other error is mapped by the responder — an error, never an allow.

A handler takes the request Struct that ``REQUESTS`` names for its subject and returns the
reply Struct it names. :func:`route_table` checks this when the service starts: a subject
without a handler, a handler for no subject, or a handler of other types stops the start
instead of leaving a subject unanswered or answering it off the contract.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

import msgspec

from clearance_api.errors import BadRequest
from clearance_api.wire import REQUESTS, PrincipalBase
from clearance_runtime.edges.tokens import TokenReviews
from clearance_runtime.messaging.responder import decode_request
from clearance_runtime.reading.reads import STORE_OUTAGES, Reads, unavailable

#: request Struct -> reply Struct (typed as ``REQUESTS`` says; checked at start).
Handler = Callable[[Any], Awaitable[Any]]
#: (reply Struct, request body) -> the reply's bytes, for a subject not sent as encoded.
Encoder = Callable[[Any, bytes], bytes]
_encode = msgspec.json.Encoder().encode


class Serve(NamedTuple):
    """What the service provides for one subject."""

    handler: Handler
    #: Checks that need no state: run before ``min_revision`` is awaited, so a request
    #: that can never be answered is refused at once rather than after a wait.
    validate: Callable[[Any], None] | None = None
    encode: Encoder | None = None
    #: Answer ``unavailable`` while the compiled state is being rebuilt. Checks, lists and
    #: views get this from their snapshot and cache reads; the others ask first.
    whole: bool = False


class Route:
    """One subject's adapter; as a responder handler it takes a body, returns a reply."""

    def __init__(self, subject: str, serve: Serve, reads: Reads,
                 tokens: TokenReviews | None = None) -> None:
        request_type, reply_type = REQUESTS[subject]
        _check_types(subject, serve.handler, request_type, reply_type)
        self.subject = subject
        self._decoder = msgspec.json.Decoder(request_type)
        self._handler, self._validate, self._encoder = serve.handler, serve.validate, \
            serve.encode
        self._whole = serve.whole
        self._reads = reads
        self._tokens = tokens

    def decode(self, body: bytes) -> Any:
        """The request Struct, its stateless checks passed (``BadRequest`` otherwise)."""
        request = decode_request(self._decoder, body)
        if isinstance(request, PrincipalBase):
            _check_principal(request)
        if self._validate is not None:
            self._validate(request)
        return request

    async def answer(self, request: Any, body: bytes, handler: Handler | None = None) -> bytes:
        """Answer a decoded request (with ``handler`` instead of the route's, if given)."""
        try:
            if isinstance(request, PrincipalBase) and request.token is not None:
                if self._tokens is None:
                    raise BadRequest("token principals are not served here")
                request.principal = await self._tokens.principal(request.token)
            if request.min_revision is not None:
                await self._reads.wait_for(request.min_revision, request.timeout_ms)
            if self._whole:
                await self._reads.ensure_whole()
            reply = await (handler or self._handler)(request)
        except STORE_OUTAGES as exc:
            raise unavailable(exc) from None
        return self.encode(reply, request, body)

    def encode(self, reply: Any, request: Any, body: bytes) -> bytes:
        if self._encoder is not None:
            return self._encoder(reply, body)
        if request.request_id is not None:
            reply.request_id = request.request_id
        return _encode(reply)

    async def __call__(self, body: bytes) -> bytes:
        return await self.answer(self.decode(body), body)


def route_table(serves: Mapping[str, Serve], reads: Reads,
                tokens: TokenReviews | None = None) -> dict[str, Route]:
    """One route per subject of ``REQUESTS``, in its order; every subject served.
    ``tokens`` verifies ``token`` principals (None: such requests are refused)."""
    unserved = [s for s in REQUESTS if s not in serves]
    unknown = [s for s in serves if s not in REQUESTS]
    if unserved or unknown:
        raise TypeError(f"route table: no handler for {unserved}, no subject for {unknown}")
    return {subject: Route(subject, serves[subject], reads, tokens) for subject in REQUESTS}


def _check_principal(request: PrincipalBase) -> None:
    """Exactly one of ``principal`` and ``token`` (cache.clear: at most one), before any
    wait: a request that names nobody, or names someone twice, is never answered."""
    if request.principal is not None and request.token is not None:
        raise BadRequest("invalid request: give either `principal` or `token`, not both")
    if request.needs_principal and request.principal is None and request.token is None:
        raise BadRequest("invalid request: a `principal` or a `token` is required")


def _check_types(subject: str, handler: Handler, request: type, reply: type) -> None:
    hints = typing.get_type_hints(handler)
    returns = hints.pop("return", None)
    if list(hints.values()) != [request] or returns is not reply:
        raise TypeError(f"{subject}: {getattr(handler, '__qualname__', handler)} must take "
                        f"{request.__name__} and return {reply.__name__}")
