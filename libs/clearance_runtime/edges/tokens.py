"""``token`` principals (docs/security.md): a Kubernetes bearer token, verified with a
TokenReview (``authentication.k8s.io/v1``), becomes the principal it names.

The principal is the reviewed user's ``username`` and ``groups`` exactly as the API
server's authenticators return them (``system:authenticated`` included, since the
server says so); there is no email. Outcomes are cached by a SHA-256 of the token —
never the token itself, which is neither stored nor logged — in a bounded LRU: an
authenticated token for at most ``TTL`` seconds (a revoked token may answer for that
long, like the API server's own webhook token cache), a rejected one for
``FAILURE_TTL``. Concurrent requests with one token share one review.

Where audiences are configured, the review asks for them and the API server's answer
must name at least one of them in ``status.audiences``: a reviewer that is not audience
aware answers without any, and the token is then refused like a rejected one (the API
server's documented rule for clients that set ``spec.audiences``).

A failure never becomes a principal: a token the API server rejects, or whose
audiences do not intersect the configured ones, is a ``bad_request``; no Kubernetes API
(no kubeconfig and not in a pod), a TokenReview the API server refuses (the service
account lacks ``create`` on ``tokenreviews``), a timeout or a broken reply is
``unavailable`` and is not cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

import aiohttp
import kubernetes_asyncio.client
import msgspec

from clearance_api.errors import BadRequest, Unavailable
from clearance_api.wire import Principal
from clearance_runtime.edges import kubeclient
from clearance_runtime.process import logs

log = logs.get(__name__)

REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
#: Seconds an authenticated token's principal is reused (the contract's bound: 60).
TTL = 60.0
#: Seconds a rejected token stays rejected without asking again.
FAILURE_TTL = 10.0
MAX_ENTRIES = 10_000
#: Seconds a TokenReview may take (connect and read).
TIMEOUT = 5.0
#: TokenReviews in flight at once: many distinct tokens (each its own review) queue
#: rather than become as many requests to the API server.
MAX_IN_FLIGHT = 32


class _User(msgspec.Struct):
    username: str = ""
    groups: list[str] = []


class _Status(msgspec.Struct):
    authenticated: bool = False
    user: _User = msgspec.field(default_factory=_User)
    audiences: list[str] | None = None
    error: str = ""


class _Review(msgspec.Struct):
    status: _Status = msgspec.field(default_factory=_Status)


_decode_review = msgspec.json.Decoder(_Review).decode
Outcome = Principal | BadRequest


def fingerprint(token: str) -> str:
    """What logs may say about a token: enough to tell two apart, nothing to use."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


class TokenReviews:
    """Tokens to principals, through the API server, cached (see the module doc)."""

    def __init__(self, kubeconfig: Path | None, *, audiences: Sequence[str] = (),
                 ttl: float = TTL, failure_ttl: float = FAILURE_TTL,
                 max_entries: int = MAX_ENTRIES, timeout: float = TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._kubeconfig = kubeconfig
        self._audiences = list(audiences)
        self._ttl = min(ttl, TTL)
        self._failure_ttl = min(failure_ttl, ttl)
        self._max = max_entries
        self._timeout = timeout
        self._clock = clock
        self._cache: OrderedDict[bytes, tuple[float, Outcome]] = OrderedDict()
        self._pending: dict[bytes, asyncio.Task[Outcome]] = {}
        self._api: kubernetes_asyncio.client.ApiClient | None = None
        self._connecting = asyncio.Lock()
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.reviews = 0  # TokenReviews sent, for tests and curiosity

    async def principal(self, token: str) -> Principal:
        """The principal ``token`` names; ``BadRequest`` if the API server rejects it,
        ``Unavailable`` if it cannot be asked."""
        key = hashlib.sha256(token.encode()).digest()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > self._clock():
            self._cache.move_to_end(key)
            return _unwrap(hit[1])
        task = self._pending.get(key)
        if task is None:
            task = asyncio.create_task(self._review(key, token))
            self._pending[key] = task
            task.add_done_callback(lambda _: self._pending.pop(key, None))
        # Shielded: a requester that gives up does not cancel the others' review.
        return _unwrap(await asyncio.shield(task))

    async def _review(self, key: bytes, token: str) -> Outcome:
        outcome = await self._ask(token)
        ttl = self._ttl if isinstance(outcome, Principal) else self._failure_ttl
        self._cache[key] = (self._clock() + ttl, outcome)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return outcome

    async def _ask(self, token: str) -> Outcome:
        async with self._in_flight:
            return await self._ask_now(token)

    async def _ask_now(self, token: str) -> Outcome:
        api = await self._client()
        spec: dict[str, object] = {"token": token}
        if self._audiences:
            spec["audiences"] = self._audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": spec}
        self.reviews += 1
        try:
            resp: aiohttp.ClientResponse = await api.call_api(
                REVIEW_PATH, "POST", body=body,
                header_params={"Content-Type": "application/json",
                               "Accept": "application/json"},
                auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=self._timeout))
            async with resp:
                data = await resp.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise Unavailable(f"TokenReview failed: {type(exc).__name__}: {exc}") from None
        if resp.status in (401, 403):
            raise Unavailable(f"the Kubernetes API refused the TokenReview ({resp.status}): "
                              "the decision service needs `create` on "
                              "tokenreviews.authentication.k8s.io")
        if not 200 <= resp.status <= 299:
            raise Unavailable(f"TokenReview failed: HTTP {resp.status}")
        try:
            status = _decode_review(data).status
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise Unavailable(f"TokenReview reply unreadable: {exc}") from None
        if not status.authenticated or not status.user.username:
            log.info("token_rejected", token=fingerprint(token), error=status.error)
            return BadRequest(f"token not authenticated: {status.error or 'rejected'}")
        if self._audiences and not set(status.audiences or ()) & set(self._audiences):
            log.info("token_audience_refused", token=fingerprint(token),
                     audiences=status.audiences or [])
            return BadRequest("token not authenticated: the review names none of the "
                              f"audiences {', '.join(self._audiences)} (it names "
                              f"{', '.join(status.audiences or []) or 'none'})")
        log.debug("token_reviewed", token=fingerprint(token), user=status.user.username)
        return Principal(username=status.user.username, groups=status.user.groups)

    async def _client(self) -> kubernetes_asyncio.client.ApiClient:
        async with self._connecting:
            if self._api is None:
                try:
                    self._api = await kubeclient.api_client(self._kubeconfig)
                except Exception as exc:  # any configuration problem: not this request's
                    raise Unavailable(
                        "token principals need a Kubernetes API (CLEARANCE_KUBECONFIG, or "
                        f"run in a pod): {type(exc).__name__}: {exc}") from None
            return self._api

    async def close(self) -> None:
        for task in list(self._pending.values()):
            task.cancel()
        if self._api is not None:
            await self._api.close()
            self._api = None


def _unwrap(outcome: Outcome) -> Principal:
    if isinstance(outcome, BadRequest):
        raise BadRequest(outcome.message)
    return outcome
