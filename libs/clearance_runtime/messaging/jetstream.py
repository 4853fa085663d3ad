"""Where Clearance keeps its JetStream state, and how many copies of it: the event
stream, the lease bucket, and their replicas (docs/operations.md: Configuration).

On a NATS cluster a stream (and a consumer, and a key-value bucket, which is a stream
``KV_<bucket>``) with one replica lives on one node: losing that node stops every policy
change until it is back. ``CLEARANCE_JETSTREAM_REPLICAS=3`` keeps three copies, so a
node's loss costs only a leader election. Each service that uses one brings it to the
configured count at start (:func:`reconcile`): created that way if missing, updated (and
logged) if it exists with another count, so scaling an existing deployment is a restart
with the new setting. An operator's other tuning of the stream is left alone.

In a region that answers from another region's events (docs/regions.md) the stream is a
*mirror*: ``mirror`` names the JetStream domain of the region whose stream of the same
name it copies. A mirror keeps its source's sequence numbers, so a revision names the same
event in both regions; it takes no publishes of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from clearance_api.errors import ClearanceError
from clearance_api.wire import EVENTS_STREAM
from clearance_runtime.process import logs

log = logs.get(__name__)

DEFAULT_LEASE_BUCKET = "CLEARANCE_LEASES"


@dataclass(frozen=True)
class Topology:
    """The names and the replica count of this deployment's JetStream state."""

    stream: str = EVENTS_STREAM
    lease_bucket: str = DEFAULT_LEASE_BUCKET
    replicas: int = 1
    #: The JetStream domain of the stream this one mirrors ("": this stream is the source).
    mirror: str = ""

    @property
    def lease_stream(self) -> str:
        """The stream that holds the lease bucket (JetStream's naming for KV buckets)."""
        return f"KV_{self.lease_bucket}"

    @property
    def mirror_api(self) -> str:
        """The API prefix through which the mirrored stream is reached (its domain's)."""
        return f"$JS.{self.mirror}.API"


async def reconcile(js: JetStreamContext, stream: str, *, replicas: int,
                    max_age: float | None = None, update: bool = True) -> StreamConfig:
    """Bring the existing ``stream`` to ``replicas`` copies (and, when given, a max age in
    seconds); the configuration in force after. NotFoundError if there is no such stream.
    ``update=False`` (a service whose NATS user may not update it: the watcher) only
    logs a difference, for the compiler to reconcile.

    A count the servers cannot hold (more replicas than nodes up; more than one on a
    server outside a cluster) is refused: :class:`ReplicasRefused` says so and what to
    set. It is a bus error, so the services retry it, logged each time: a node that is
    down may come back, and scaling then goes through."""
    info = await js.stream_info(stream)
    config = info.config
    changes: dict[str, object] = {}
    if (config.num_replicas or 1) != replicas:
        changes["num_replicas"] = replicas
    if max_age is not None and abs((config.max_age or 0.0) - max_age) > 0.001:
        changes["max_age"] = max_age
        # JetStream refuses a duplicate window longer than the max age (a KV bucket's
        # is the shorter of its TTL and 2 minutes).
        if (config.duplicate_window or 0.0) > max_age:
            changes["duplicate_window"] = max_age
    if not changes:
        return config
    if not update:
        log.warning("stream_differs", stream=stream, replicas=config.num_replicas or 1,
                    max_age=config.max_age, wanted={k: v for k, v in changes.items()})
        return config
    updated = StreamConfig.from_response(config.as_dict())
    for field, value in changes.items():
        setattr(updated, field, value)
    try:
        info = await js.update_stream(updated)
    except nats.js.errors.BadRequestError as exc:
        raise ReplicasRefused(stream, replicas, exc) from None
    log.info("stream_reconciled", stream=stream,
             replicas_was=config.num_replicas or 1, max_age_was=config.max_age,
             **{k: v for k, v in changes.items()})
    return info.config


class ReplicasRefused(nats.errors.Error, ClearanceError):
    """The servers refused a stream's replica count (too few nodes up, or a setting to
    fix)."""

    def __init__(self, stream: str, replicas: int, cause: Exception) -> None:
        super().__init__(f"stream {stream}: {replicas} replica(s) refused by NATS: {cause} "
                         f"(CLEARANCE_JETSTREAM_REPLICAS: at most the cluster's node count; "
                         f"1 on a server outside a cluster)")


class StreamMismatch(ClearanceError):
    """The event stream is not what this region's configuration says it is: a mirror
    where the source is expected, or the other way round (a setting or a stream to
    fix; nothing is folded from, or published to, the wrong one)."""


#: One set per NATS account, with the names every deployment had before they were settings.
DEFAULT = Topology()
