"""The one error hierarchy of Clearance.

Every failure that can reach a client maps to exactly one contract error code
(README: Conventions): ``bad_request``, ``not_found``, ``stale``, ``unavailable``,
``internal``. Objects that fail validation raise :class:`InvalidObject`, which never
crosses the wire: the compiler turns it into the object's status.

    ClearanceError
    ├── RequestError          (code carried by the subclass)
    │   ├── BadRequest        bad_request
    │   │   └── Refused       (HTTP surfaces) refused before any question is asked, with
    │   │                     its own HTTP status: 401, 403, 408, 413, 415
    │   ├── NotFound          not_found
    │   ├── Stale             stale
    │   ├── Unavailable       unavailable
    │   └── Internal          internal
    ├── InvalidObject         a watched object (or manifest file) that cannot take effect
    │   └── UnknownFields     a field its kind does not know (clearance_core.kube.strict)
    └── GoneError             (watcher) a watch's resourceVersion expired: relist
"""

from __future__ import annotations

from typing import ClassVar

from clearance_api.wire.common import ErrorCode


class ClearanceError(Exception):
    """Root of every error Clearance raises on purpose."""


class RequestError(ClearanceError):
    """A request could not be answered; carries the contract error code."""

    code: ClassVar[ErrorCode] = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(RequestError):
    code = "bad_request"


class Refused(BadRequest):
    """An HTTP request refused before it is read or asked (no credentials, a foreign
    origin, a body too slow or too large): the client's fault, with its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NotFound(RequestError):
    code = "not_found"


class Stale(RequestError):
    code = "stale"


class Unavailable(RequestError):
    code = "unavailable"


class Internal(RequestError):
    code = "internal"


class InvalidObject(ClearanceError):
    """A watched object is invalid; it takes no effect and its status says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownFields(InvalidObject):
    """An object with fields its kind does not know: invalid, like any other error, and
    each field named — ``problems``: (JSON path, the known field probably meant)."""

    def __init__(self, message: str,
                 problems: tuple[tuple[str, str | None], ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems
