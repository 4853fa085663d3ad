"""A lean request/reply server over nats-py, with the contract's error envelope.

Why not FastStream's subscriber pipeline: on this machine kind it answers at ~0.29x the
throughput of a bare nats-py echo (its per-message decode, dependency injection and
logging), and the decision path must stay above 0.5x. This module keeps what the
decision service needs and nothing else: a queue-group subscription per subject (so
replicas share the load), one task per request under a concurrency bound, a request id
bound into every log line, and fail-closed error replies.

A handler gets the raw body and returns the encoded reply. Any ``RequestError`` becomes
``{"error": {"code", "message"}}``; anything else becomes ``internal`` — never an allow.
Every request whose reply subject is an inbox gets a reply: one too large for the
server's ``max_payload`` becomes a ``bad_request`` naming that limit.

Replies go to inboxes only (``clearance_api.inboxes``): a reply subject is the caller's
to choose, and one naming the event stream, a lease key or a status subject would have
the service publish there with its own rights. A request whose reply subject is not
under an accepted inbox prefix is not answered (nor handled): it is counted in
``clearance_requests_refused_total{reason="reply_subject"}`` and logged, at most once per
``REFUSAL_LOG_SECONDS`` per subject, so a flood of them cannot fill a disk.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg

from clearance_api import inboxes
from clearance_api.errors import BadRequest, Internal, RequestError
from clearance_api.wire import ErrorBody, ErrorReply
from clearance_api.wire.limits import MAX_DEPTH, nesting_exceeds
from clearance_runtime.process import logs, metrics

log = logs.get(__name__)
Handler = Callable[[bytes], Awaitable[bytes]]
ManyHandler = Callable[[list[bytes]], Awaitable[list[bytes]]]
T = TypeVar("T")
_encode = msgspec.json.Encoder().encode


class _RequestId(msgspec.Struct):
    request_id: Any = None


_request_id = msgspec.json.Decoder(_RequestId).decode


def request_id_of(body: bytes) -> str | None:
    """The request's ``request_id``, or None; never raises (it runs on error paths)."""
    try:
        value = _request_id(body).request_id
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeError):
        return None
    return value if isinstance(value, str) else None


def error_reply(exc: RequestError, request_id: str | None) -> bytes:
    reply = ErrorReply(error=ErrorBody(code=exc.code, message=exc.message))
    if request_id is not None:
        reply.request_id = request_id
    return _encode(reply)


def decode_request(decoder: msgspec.json.Decoder[T], body: bytes) -> T:
    """Decode a request; every decoding problem is a ``bad_request`` with msgspec's text,
    and a body nested deeper than ``MAX_DEPTH`` is one naming that limit."""
    if nesting_exceeds(body):
        raise BadRequest(f"request nests deeper than the limit of {MAX_DEPTH} levels")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"request is not valid JSON: {exc}") from None
    except RecursionError:  # not expected past nesting_exceeds; fail as a bad request
        raise BadRequest(f"request nests deeper than the limit of {MAX_DEPTH} levels") from None
    except UnicodeError:  # msgspec reports invalid UTF-8 in a string this way
        raise BadRequest("request is not valid UTF-8") from None


async def reply_to(subject: str, handler: Handler, body: bytes) -> tuple[bytes, str]:
    """Answer one request: (encoded reply, ``ok`` or the error code). Never raises.

    A ``RequestError`` becomes its error reply; anything else becomes ``internal`` for
    this request alone (fail closed: never an allow, never a neighbour's answer).
    """
    try:
        return await handler(body), "ok"
    except RequestError as exc:
        rid = request_id_of(body)
        log.info("request_failed", subject=subject, request_id=rid, code=exc.code,
                 error=exc.message)
        metrics.BOUND.decision(subject, exc.code).inc()
        return error_reply(exc, rid), exc.code
    except Exception as exc:
        rid = request_id_of(body)
        with structlog.contextvars.bound_contextvars(request_id=rid):
            log.exception("request_crashed", subject=subject)
        metrics.BOUND.decision(subject, "internal").inc()
        return error_reply(Internal(f"internal error: {type(exc).__name__}"), rid), "internal"


#: Seconds between two log lines about refused reply subjects of one request subject.
REFUSAL_LOG_SECONDS = 10.0


class _Refusals:
    """Refused requests, counted each and logged at most once per period per subject
    (with how many were refused since the last line)."""

    def __init__(self) -> None:
        self._logged: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}

    def refuse(self, subject: str, reply: str) -> None:
        metrics.REQUESTS_REFUSED.labels(subject=subject, reason="reply_subject").inc()
        now = time.monotonic()
        if now - self._logged.get(subject, -REFUSAL_LOG_SECONDS) < REFUSAL_LOG_SECONDS:
            self._unlogged[subject] = self._unlogged.get(subject, 0) + 1
            return
        self._logged[subject] = now
        # The reply subject is the caller's text: shortened, and logged as data.
        log.warning("request_refused", subject=subject, reason="reply_subject",
                    reply=reply[:200], refused_unlogged=self._unlogged.pop(subject, 0))


class Responder:
    def __init__(self, nc: Client, *, queue: str, max_in_flight: int = 1024,
                 reply_prefixes: tuple[str, ...] = inboxes.DEFAULT_ACCEPTED) -> None:
        self._nc = nc
        self._queue = queue
        self._is_inbox = inboxes.inbox_matcher(reply_prefixes)
        self._refusals = _Refusals()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._limit = max_in_flight
        self._tasks: set[asyncio.Task[None]] = set()
        self._subs: list[Any] = []

    async def serve(self, subject: str, handler: Handler) -> None:
        async def on_message(msg: Msg) -> None:
            if not self._answerable(subject, msg):
                return
            # Returns at once (after a free slot) so nats-py hands us the next message;
            # requests that arrive together run together (and share Redis round trips).
            await self._slots.acquire()
            task = asyncio.create_task(self._answer(subject, handler, msg))
            self._tasks.add(task)
            task.add_done_callback(self._done)

        self._subs.append(
            await self._nc.subscribe(subject, queue=self._queue, cb=on_message,
                                     pending_msgs_limit=65536)
        )

    async def serve_many(self, subject: str, handler: ManyHandler) -> None:
        """Serve a hot subject in batches: every request that arrived in one event-loop
        iteration is answered by one handler call (one task, one cache round trip),
        instead of a task and a future per request.

        The handler must answer each body on its own (see :func:`reply_to`): if it
        raises, every request of the batch gets that error."""
        queue: list[Msg] = []
        room = asyncio.Event()
        room.set()
        in_flight = 0
        limit = self._limit

        def drain() -> None:
            nonlocal queue, in_flight
            batch, queue = queue, []
            in_flight += len(batch)
            if in_flight >= limit:
                room.clear()
            task = asyncio.create_task(self._answer_many(subject, handler, batch))
            self._tasks.add(task)
            task.add_done_callback(functools.partial(finished, count=len(batch)))

        def finished(task: asyncio.Task[None], *, count: int) -> None:
            nonlocal in_flight
            self._tasks.discard(task)
            in_flight -= count
            if in_flight < limit:
                room.set()

        async def on_message(msg: Msg) -> None:
            if not self._answerable(subject, msg):
                return
            if not room.is_set():
                await room.wait()  # backpressure: nats-py buffers meanwhile
            if not queue:
                asyncio.get_running_loop().call_soon(drain)
            queue.append(msg)

        self._subs.append(
            await self._nc.subscribe(subject, queue=self._queue, cb=on_message,
                                     pending_msgs_limit=65536)
        )

    def _answerable(self, subject: str, msg: Msg) -> bool:
        """Whether to handle ``msg``: its reply subject is an accepted inbox. A request
        without one (a plain publish) is refused too: its answer would go nowhere."""
        if self._is_inbox(msg.reply):
            return True
        self._refusals.refuse(subject, msg.reply)
        return False

    async def _answer_many(self, subject: str, handler: ManyHandler, batch: list[Msg]) -> None:
        started = time.perf_counter()
        try:
            replies = await handler([msg.data for msg in batch])
        except RequestError as exc:
            replies = [error_reply(exc, request_id_of(msg.data)) for msg in batch]
            metrics.BOUND.decision(subject, exc.code).inc(len(batch))
        except Exception:  # fail closed: any surprise is an internal error, for each
            log.exception("batch_crashed", subject=subject, size=len(batch))
            replies = [error_reply(Internal("internal error"), request_id_of(msg.data))
                       for msg in batch]
            metrics.BOUND.decision(subject, "internal").inc(len(batch))
        metrics.observe_many(metrics.BOUND.latency(subject), time.perf_counter() - started,
                             len(batch))
        await self._send(subject, batch, replies)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    async def _answer(self, subject: str, handler: Handler, msg: Msg) -> None:
        started = time.perf_counter()
        body = msg.data
        reply, result = await reply_to(subject, handler, body)
        elapsed = time.perf_counter() - started
        metrics.BOUND.latency(subject).observe(elapsed)
        if logs.LEVEL <= logging.DEBUG:  # one line per request costs throughput: opt-in
            log.debug("request", subject=subject, request_id=request_id_of(body),
                      result=result, ms=round(elapsed * 1000, 3))
        await self._send(subject, [msg], [reply])

    async def _send(self, subject: str, msgs: Sequence[Msg], replies: Sequence[bytes]
                    ) -> None:
        """Publish each reply; one the server would refuse for its size is replaced by a
        ``bad_request`` naming the limit, so the requester never waits for nothing. One
        loop for a batch's replies: a coroutine frame per reply was a visible part of a
        cached check (the echo has none)."""
        publish, limit = self._nc.publish, self._nc.max_payload
        for msg, answer in zip(msgs, replies, strict=True):
            if not msg.reply:
                continue
            sent = answer if len(answer) <= limit else \
                self._too_large(subject, msg, answer, limit)
            try:
                await publish(msg.reply, sent)
            except Exception as exc:
                log.warning("reply_failed", subject=subject, error=str(exc))

    @staticmethod
    def _too_large(subject: str, msg: Msg, reply: bytes, limit: int) -> bytes:
        rid = request_id_of(msg.data)
        log.warning("reply_too_large", subject=subject, request_id=rid, size=len(reply),
                    max_payload=limit)
        metrics.BOUND.decision(subject, "bad_request").inc()
        return error_reply(BadRequest(
            f"the reply ({len(reply)} bytes) exceeds the NATS server's max_payload of "
            f"{limit} bytes; ask for less in one request"), rid)

    async def stop(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
