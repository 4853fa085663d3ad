"""The one error hierarchy of Clearance.

Every failure that can reach a client maps to exactly one contract error code
(docs/api/README.md: Conventions): ``bad_request``, ``not_found``, ``stale``, ``unavailable``,
``internal``. Objects that fail validation raise :class:`InvalidObject`, which never
crosses the wire: the compiler turns it into the object's status.

    ClearanceError
    ├── RequestError          (code carried by the subclass)
    │   ├── BadRequest        bad_request
    │   │   ├── Refused       (HTTP surfaces) refused before any question is asked, with
    │   │   │                 its own HTTP status: 401, 403, 408, 413, 415
    │   │   └── PlaygroundError   (console) a pasted object the dry run cannot read
    │   ├── NotFound          not_found
    │   ├── Stale             stale
    │   ├── Unavailable       unavailable
    │   └── Internal          internal
    ├── InvalidObject         a watched object (or manifest file) that cannot take effect
    │   ├── UnknownFields     a field its kind does not know (clearance_core.kube.strict)
    │   ├── Malformed         (cel_tree) a checked CEL expression this reader cannot read
    │   ├── Unreadable        (manifest_files) a file that cannot be opened or read
    │   └── FileRejected      (manifest_files) a file refused for what reading it costs
    ├── Coordination          a service lost the ground it acted on: the loop that raised
    │   │                     it starts again from a known point (never a client's error)
    │   ├── LostSync          the store no longer holds what this compiler built
    │   ├── LeaseLost         another copy holds the lease now
    │   └── GoneError         (watcher) a watch's resourceVersion expired: relist
    ├── Rejected              (watcher) an object that can never be published, and why
    ├── _Retry            (watcher statuses) a status write the API server asked to retry
    ├── PullFailed            (runtime pull, also a nats.errors.Error) a pull request failed
    ├── ReplicasRefused       (runtime jetstream, also a nats.errors.Error) the cluster refused
    │                         CLEARANCE_JETSTREAM_REPLICAS for a stream
    ├── StreamMismatch        (runtime jetstream) the event stream is a mirror where the
    │                         source is configured, or the other way (CLEARANCE_STREAM_MIRROR)
    ├── safeyaml.Refused      (runtime, also a yaml.YAMLError) a document refused for what
    │                         loading it would cost (aliases)
    ├── CliError              (cli) a usage or input error: printed, exit status 2
    ├── StateInUse            (cli) another ``clearance up`` holds the state directory
    └── ConnectionClosed      (cli) the bus closed under a running service

Errors that must also be a library's (nats-py's, PyYAML's) to be caught where that
library's are live beside it, with this root as well; the test suite holds every
exception class of Clearance under :class:`ClearanceError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # the CLI imports this tree before anything else: keep it bare
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


class Coordination(ClearanceError):
    """A service lost the ground it acted on; the loop that raised it restarts from a
    known point."""


class LostSync(Coordination):
    """Redis no longer holds the state this writer built (flushed, restored, or written
    by another compiler): restart from the checkpoint."""


class LeaseLost(Coordination):
    """Another copy holds the lease now (or it could not be renewed in time)."""


class GoneError(Coordination):
    """The watched resourceVersion left the server's history: only a LIST can resume."""

