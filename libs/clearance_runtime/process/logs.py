"""structlog set-up: JSON lines with the request id bound per request
(docs/operations.md: Configuration); in a terminal, structlog's console lines instead
(``CLEARANCE_LOG_FORMAT`` decides)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import msgspec
import structlog

_encoder = msgspec.json.Encoder(enc_hook=repr)
#: The configured level, for hot paths that must not even build a log call's arguments.
LEVEL = logging.INFO


def _serialize(obj: Any, **_: Any) -> bytes:
    # JSONRenderer always passes default=; msgspec takes enc_hook instead.
    return _encoder.encode(obj)


# Tracebacks as JSON, without frame locals: those may hold tokens or request bodies.
_TRACEBACKS = structlog.processors.ExceptionRenderer(
    structlog.tracebacks.ExceptionDictTransformer(show_locals=False))


def _serialize_text(obj: Any, **_: Any) -> str:
    return _encoder.encode(obj).decode()


def console(fmt: str | None) -> bool:
    """Console lines for ``console``; JSON for ``json``; unset: console only when a person
    is reading stderr (a terminal), so log collectors always get JSON."""
    if fmt is not None:
        return fmt == "console"
    return sys.stderr.isatty()


def configure(level: str = "INFO", *, service: str, fmt: str | None = "json") -> None:
    """``fmt``: ``json``, ``console``, or None to choose by :func:`console`."""
    global LEVEL  # noqa: PLW0603  (set once at process start)
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    LEVEL = numeric
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    readable = console(fmt)
    # The console renderer prints tracebacks itself: plainly, since its default (rich)
    # would show frame locals, which may hold tokens or request bodies.
    ending: list[Any] = [structlog.dev.ConsoleRenderer(
        colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback)] \
        if readable else [_TRACEBACKS, structlog.processors.JSONRenderer(serializer=_serialize)]
    structlog.configure(
        processors=[*shared, *ending],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(sys.stderr) if readable
        else structlog.BytesLoggerFactory(sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
    # Third-party libraries (nats, kubernetes_asyncio, aiohttp, asyncio) log through the stdlib:
    # keep their warnings on the same stream, rendered by the same renderer, so with JSON
    # every line a process writes parses as JSON.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *(ending if readable else
              [_TRACEBACKS, structlog.processors.JSONRenderer(serializer=_serialize_text)]),
        ],
    ))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(numeric, logging.WARNING))


def get(name: str) -> Any:
    return structlog.get_logger(name)
