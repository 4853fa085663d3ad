"""structlog set-up: JSON lines with the request id bound per request (CONTRACT section 8)."""

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


def configure(level: str = "INFO", *, service: str) -> None:
    global LEVEL  # noqa: PLW0603  (set once at process start)
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    LEVEL = numeric
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.dict_tracebacks,
            structlog.processors.JSONRenderer(serializer=_serialize),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.BytesLoggerFactory(sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
    # Third-party libraries (nats, kubernetes, urllib3) log through the stdlib: keep their
    # warnings, in one line each, on the same stream.
    logging.basicConfig(stream=sys.stderr, level=max(numeric, logging.WARNING),
                        format='{"level":"%(levelname)s","logger":"%(name)s","event":%(message)r}')


def get(name: str) -> Any:
    return structlog.get_logger(name)
