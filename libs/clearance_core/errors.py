"""The one error hierarchy of Clearance.

Every failure that can reach a client maps to exactly one contract error code
(CONTRACT section 0): ``bad_request``, ``not_found``, ``stale``, ``unavailable``,
``internal``. Objects that fail validation raise :class:`InvalidObject`, which never
crosses the wire: the compiler turns it into the object's status.

    ClearanceError
    ├── RequestError          (code carried by the subclass)
    │   ├── BadRequest        bad_request
    │   ├── NotFound          not_found
    │   ├── Stale             stale
    │   ├── Unavailable       unavailable
    │   └── Internal          internal
    ├── InvalidObject         a watched object (or manifest file) that cannot take effect
    └── GoneError             (watcher) a watch's resourceVersion expired: relist
"""

from __future__ import annotations

from typing import ClassVar

from clearance_core.wire.common import ErrorCode


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
