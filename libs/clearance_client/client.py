"""Typed async calls for every request/reply subject of the contract.

Each method takes its subject's request Struct and returns its reply Struct (both from
``clearance_api.wire``). An error reply raises the ``clearance_api.errors`` class of its
code; no reply at all raises ``Unavailable``; a reply that does not decode raises
``Internal`` — an error is never returned as an answer, so it can never read as an allow.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Self, TypedDict, TypeVar, Unpack

import msgspec
import nats
import nats.errors
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from clearance_api import inboxes, wire
from clearance_api.errors import BadRequest, Internal, NotFound, RequestError, Stale, Unavailable
from clearance_api.wire import ErrorBody, RequestBase
from clearance_client.cache import DecisionCache

R = TypeVar("R", bound=msgspec.Struct)
Callback = Callable[..., Awaitable[None]]

#: The error class of each contract code.
ERRORS: dict[str, type[RequestError]] = {
    cls.code: cls for cls in (BadRequest, NotFound, Stale, Unavailable, Internal)}
#: The service waits this long for ``min_revision`` when the request names no timeout_ms.
SERVER_WAIT_MS = 2000
_encode = msgspec.json.Encoder().encode


class CallOptions(TypedDict, total=False):
    """What every call accepts besides its request Struct."""

    #: Answer from state reflecting at least this revision (a ``PubAck.seq``), waiting up
    #: to the request's ``timeout_ms`` (the service's default 2 s), else ``Stale``.
    min_revision: int | None
    #: Seconds to wait for a reply beyond any ``min_revision`` wait (default: the
    #: client's ``request_timeout``); none in time is ``Unavailable``.
    timeout: float | None


class _Probe(msgspec.Struct):
    """Only the ``error`` member: any reply is looked at for it before anything else."""

    error: ErrorBody | None = None


_probe = msgspec.json.Decoder(_Probe)
_changes = msgspec.json.Decoder(wire.DecisionsChanged)


class ClearanceClient:
    """A connection to Clearance's decision service (and, with a cache, its events)."""

    def __init__(self, nc: Nats, *, request_timeout: float = 5.0,
                 cache: DecisionCache | None = None, owned: bool = False) -> None:
        self.nc, self.request_timeout, self.cache = nc, request_timeout, cache
        self._owned = owned
        self._decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}
        self._sub: Subscription | None = None
        self._reconnects = nc.stats["reconnects"]

    @classmethod
    async def connect(cls, servers: str | list[str] = "nats://127.0.0.1:4222", *,
                      request_timeout: float = 5.0, cache: DecisionCache | None = None,
                      inbox_prefix: str | None = None, **options: Any) -> Self:
        """Connect with nats-py; ``options`` go to ``nats.connect`` as they are
        (``user_credentials``, ``nkeys_seed``, ``user``/``password``, ``token``, ``tls``
        (an ``ssl.SSLContext``), ``tls_hostname``, ``name``…). Its callbacks still run.

        Replies arrive under ``inbox_prefix``; unset: ``_INBOX.<user>`` for the user
        named by ``user`` or in the URL (the only inboxes a user of Clearance's NATS
        accounts may read), else ``_INBOX``. With a credentials file, nkey or token, name
        the prefix your NATS user may subscribe to."""
        first = servers if isinstance(servers, str) else (servers[0] if servers else "")
        options["inbox_prefix"] = inboxes.prefix_for(first, user=options.get("user"),
                                                     explicit=inbox_prefix)
        box: list[ClearanceClient] = []
        callbacks = {name: options.pop(name, None)
                     for name in ("disconnected_cb", "reconnected_cb", "error_cb")}

        def chained(name: str) -> Callback:
            async def callback(*args: Any) -> None:
                if box:
                    box[0]._lost_events(args[0] if args else None)
                user = callbacks[name]
                if user is not None:
                    await user(*args)
            return callback

        options.setdefault("name", "clearance-client")
        nc = await nats.connect(servers, **{k: chained(k) for k in callbacks}, **options)
        client = cls(nc, request_timeout=request_timeout, cache=cache, owned=True)
        box.append(client)
        await client.start()
        return client

    async def start(self) -> None:
        """Follow ``clearance.decisions.changed`` for the cache (no-op without one)."""
        if self.cache is not None and self._sub is None:
            self._sub = await self.nc.subscribe(wire.SUBJECT_DECISIONS_CHANGED,
                                                cb=self._on_change)
            await self.nc.flush()  # subscribed before the first answer is kept

    async def close(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
            self._sub = None
        if self._owned:
            await self.nc.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the subjects --------------------------------------------------------------------

    async def check(self, request: wire.CheckRequest, **options: Unpack[CallOptions]
                    ) -> wire.CheckResult:
        """One decision; answered from the local cache when there is one and it holds a
        fresh answer (``cached`` is then true). Requests carrying a ``token`` instead of a
        principal always go to the service."""
        cache, principal = self.cache, request.principal
        # A token request names nobody the client could match an event against: not kept.
        if cache is None or principal is None or not self._cache_trusted():
            return await self._call(wire.SUBJECT_CHECK, request, wire.CheckResult, **options)
        key = cache.key(request)
        wanted = options.get("min_revision") or request.min_revision or 0
        hit = cache.get(key, min_revision=wanted)
        if hit is not None:
            return hit
        since = cache.begin()
        result = await self._call(wire.SUBJECT_CHECK, request, wire.CheckResult, **options)
        if self._cache_trusted():  # a reconnect meanwhile clears, and so refuses the put
            cache.put(key, principal, result, since=since)
        return result

    async def check_batch(self, request: wire.BatchRequest,
                          **options: Unpack[CallOptions]) -> wire.BatchReply:
        return await self._call(wire.SUBJECT_BATCH, request, wire.BatchReply, **options)

    async def status(self, request: wire.StatusRequest | None = None,
                     **options: Unpack[CallOptions]) -> wire.StatusReply:
        return await self._call(wire.SUBJECT_STATUS, request or wire.StatusRequest(),
                                wire.StatusReply, **options)

    async def filter(self, request: wire.FilterRequest,
                     **options: Unpack[CallOptions]) -> wire.FilterReply:
        return await self._call(wire.SUBJECT_FILTER, request, wire.FilterReply, **options)

    async def metrics(self, request: wire.MetricsRequest,
                      **options: Unpack[CallOptions]) -> wire.MetricsReply:
        return await self._call(wire.SUBJECT_METRICS, request, wire.MetricsReply, **options)

    async def custom_types(self, request: wire.CustomTypesRequest,
                           **options: Unpack[CallOptions]) -> wire.CustomTypesReply:
        return await self._call(wire.SUBJECT_CUSTOM_TYPES, request, wire.CustomTypesReply,
                                **options)

    async def review_subject(self, request: wire.SubjectAccessReview,
                             **options: Unpack[CallOptions]) -> wire.SubjectAccessReviewReply:
        return await self._call(wire.SUBJECT_REVIEW_SUBJECT, request, wire.SubjectAccessReviewReply,
                                **options)

    async def review_rules(self, request: wire.RulesReviewRequest,
                           **options: Unpack[CallOptions]) -> wire.RulesReviewReply:
        return await self._call(wire.SUBJECT_REVIEW_RULES, request, wire.RulesReviewReply,
                                **options)

    async def review_resource(self, request: wire.ResourceReviewRequest,
                              **options: Unpack[CallOptions]) -> wire.ResourceReviewReply:
        return await self._call(wire.SUBJECT_REVIEW_RESOURCE, request, wire.ResourceReviewReply,
                                **options)

    async def search_filter(self, request: wire.SearchFilterRequest,
                            **options: Unpack[CallOptions]) -> wire.SearchFilterReply:
        return await self._call(wire.SUBJECT_SEARCH_FILTER, request, wire.SearchFilterReply,
                                **options)

    async def search_plan(self, request: wire.PrincipalRequest,
                          **options: Unpack[CallOptions]) -> wire.SearchPlanReply:
        return await self._call(wire.SUBJECT_SEARCH_PLAN, request, wire.SearchPlanReply, **options)

    async def permissions(self, request: wire.PrincipalRequest,
                          **options: Unpack[CallOptions]) -> wire.PermissionsReply:
        return await self._call(wire.SUBJECT_PERMISSIONS, request, wire.PermissionsReply, **options)

    async def policies(self, request: wire.PrincipalRequest,
                       **options: Unpack[CallOptions]) -> wire.PoliciesReply:
        return await self._call(wire.SUBJECT_POLICIES, request, wire.PoliciesReply, **options)

    async def cache_clear(self, request: wire.CacheClearRequest | None = None,
                          **options: Unpack[CallOptions]) -> wire.CacheClearReply:
        return await self._call(wire.SUBJECT_CACHE_CLEAR, request or wire.CacheClearRequest(),
                                wire.CacheClearReply, **options)

    async def policy_status(self, request: wire.PolicyStatusRequest,
                            **options: Unpack[CallOptions]) -> wire.PolicyStatus:
        return await self._call(wire.SUBJECT_POLICY_STATUS, request, wire.PolicyStatus, **options)

    async def effective(self, request: wire.EffectiveRequest,
                        **options: Unpack[CallOptions]) -> wire.EffectiveReply:
        return await self._call(wire.SUBJECT_EFFECTIVE, request, wire.EffectiveReply, **options)

    async def effective_reach(self, request: wire.ReachRequest,
                              **options: Unpack[CallOptions]) -> wire.ReachReply:
        return await self._call(wire.SUBJECT_EFFECTIVE_REACH, request, wire.ReachReply, **options)

    async def effective_simulate(self, request: wire.SimulateRequest,
                                 **options: Unpack[CallOptions]) -> wire.SimulateReply:
        return await self._call(wire.SUBJECT_EFFECTIVE_SIMULATE, request, wire.SimulateReply,
                                **options)

    async def who_can_see(self, request: wire.WhoCanSeeRequest,
                          **options: Unpack[CallOptions]) -> wire.WhoCanSeeReply:
        """Every subject a policy or binding names for the cluster (namespace, type), with
        the decision ``check`` gives it alone, and ``others``: anyone named nowhere."""
        return await self._call(wire.SUBJECT_WHO_CAN_SEE, request, wire.WhoCanSeeReply,
                                **options)

    # -- one request ----------------------------------------------------------------------

    async def request(self, subject: str, request: RequestBase, reply_type: type[R],
                      **options: Unpack[CallOptions]) -> R:
        """Any subject: ``request`` as JSON, its reply decoded as ``reply_type``."""
        return await self._call(subject, request, reply_type, **options)

    async def _call(self, subject: str, request: RequestBase, reply_type: type[R],
                    **options: Unpack[CallOptions]) -> R:
        min_revision, timeout = options.get("min_revision"), options.get("timeout")
        if min_revision is not None:
            request = msgspec.structs.replace(request, min_revision=min_revision)
        wait = self.request_timeout if timeout is None else timeout
        if request.min_revision is not None:  # the service may wait that long first
            wait += (SERVER_WAIT_MS if request.timeout_ms is None else request.timeout_ms) / 1000
        try:
            msg = await self.nc.request(subject, _encode(request), timeout=wait)
        except nats.errors.NoRespondersError:
            raise Unavailable(f"{subject}: no decision service is answering") from None
        except nats.errors.TimeoutError:
            raise Unavailable(f"{subject}: no reply within {wait:g} s") from None
        return self._decode(subject, msg.data, reply_type)

    def _decode(self, subject: str, data: bytes, reply_type: type[R]) -> R:
        try:
            error = _probe.decode(data).error
            if error is None:
                decoder = self._decoders.get(reply_type)
                if decoder is None:
                    decoder = self._decoders[reply_type] = msgspec.json.Decoder(reply_type)
                reply: R = decoder.decode(data)
                return reply
        except msgspec.DecodeError as exc:
            raise Internal(f"{subject}: undecodable reply ({exc})") from None
        raise ERRORS.get(error.code, Internal)(error.message)

    # -- cache freshness ------------------------------------------------------------------

    async def _on_change(self, msg: Msg) -> None:
        if self.cache is None:
            return
        try:
            event = _changes.decode(msg.data)
        except msgspec.DecodeError:
            self.cache.clear()  # cannot tell whom it names
            return
        self.cache.changed(event)

    def _lost_events(self, error: object) -> None:
        """From the connection's callbacks: a disconnect, a reconnect or a dropped message
        of our subscription may have hidden an event, so nothing cached is trusted."""
        if self.cache is None:
            return
        if isinstance(error, nats.errors.SlowConsumerError) and error.sub is not self._sub:
            return
        if error is None or isinstance(error, nats.errors.SlowConsumerError):
            self.cache.clear()

    def _cache_trusted(self) -> bool:
        """Connected, subscribed and no reconnect since we last looked (also for a client
        built on a connection whose callbacks are not ours)."""
        reconnects = self.nc.stats["reconnects"]
        if self.cache is None or self._sub is None or not self.nc.is_connected \
                or reconnects != self._reconnects:
            self._reconnects = reconnects
            if self.cache is not None:
                self.cache.clear()
            return False
        return True


#: Subject -> the method that asks it (``check_methods`` verifies this at import).
METHODS: dict[str, str] = {
    wire.SUBJECT_CHECK: "check", wire.SUBJECT_BATCH: "check_batch",
    wire.SUBJECT_STATUS: "status", wire.SUBJECT_FILTER: "filter",
    wire.SUBJECT_METRICS: "metrics", wire.SUBJECT_CUSTOM_TYPES: "custom_types",
    wire.SUBJECT_REVIEW_SUBJECT: "review_subject", wire.SUBJECT_REVIEW_RULES: "review_rules",
    wire.SUBJECT_REVIEW_RESOURCE: "review_resource",
    wire.SUBJECT_SEARCH_FILTER: "search_filter", wire.SUBJECT_SEARCH_PLAN: "search_plan",
    wire.SUBJECT_PERMISSIONS: "permissions", wire.SUBJECT_POLICIES: "policies",
    wire.SUBJECT_CACHE_CLEAR: "cache_clear", wire.SUBJECT_POLICY_STATUS: "policy_status",
    wire.SUBJECT_EFFECTIVE: "effective", wire.SUBJECT_EFFECTIVE_REACH: "effective_reach",
    wire.SUBJECT_EFFECTIVE_SIMULATE: "effective_simulate",
    wire.SUBJECT_WHO_CAN_SEE: "who_can_see",
}


def check_methods() -> None:
    """Every subject of ``wire.REQUESTS`` has a method taking and returning its Structs."""
    if set(METHODS) != set(wire.REQUESTS):
        raise TypeError(f"client methods out of step with wire.REQUESTS: "
                        f"{set(METHODS) ^ set(wire.REQUESTS)}")
    for subject, (request, reply) in wire.REQUESTS.items():
        hints = typing.get_type_hints(getattr(ClearanceClient, METHODS[subject]))
        if request not in (*typing.get_args(hints["request"]), hints["request"]) \
                or hints["return"] is not reply:
            raise TypeError(f"ClearanceClient.{METHODS[subject]} must take "
                            f"{request.__name__} and return {reply.__name__}")


check_methods()
