"""The Kubernetes API source: list and watch every kind in ``registry.WATCHED`` into a ledger.

Per kind, independently of the others (the algorithm of kopf's continuous watch and of
client-go's reflector):

1. Discovery: ``GET /api/v1`` or ``/apis/<group>/<version>``. A kind whose group, version
   or plural is not served (an optional CRD such as OpenShift's groups) is skipped with
   a warning; it is not an error.
2. LIST, page by page, and hand the complete snapshot to ``ledger.sync``: objects the
   ledger knows but the API no longer has (deleted while nobody watched) become DELETED.
3. WATCH from the list's ``resourceVersion`` with bookmarks and a server-side timeout.
   ADDED/MODIFIED/DELETED go to ``ledger.apply``; a BOOKMARK only advances the
   resourceVersion. The resourceVersion advances only after the ledger took the event,
   so an event the ledger failed on is delivered again.
4. When the server ends the watch (its timeout), watch again from the last
   resourceVersion. 410 Gone means that version is no longer in the server's history:
   go back to 2. Any other error is retried from the last resourceVersion (or by a LIST
   if none) after the retry policy's back-off (``retries.FAILURE``); a failure after
   progress (the resourceVersion moved) resumes at once, its back-off afresh.

The client is ``kubernetes_asyncio``: configuration and authentication (kubeconfig or
the pod's service account, token refresh), TLS and one aiohttp session. Requests are
plain GETs of API paths, and objects stay the JSON the server sent (no client models).
An optional :class:`Observer` (the status writer, ``statuses.py``) hears of every LIST
snapshot and watch event after the ledger took it; ``call`` serves its PATCHes.
Everything runs on the event loop: the ledger is awaited between two lines of a watch,
so a slow ledger slows the watch down (backpressure) instead of queueing events, and
cancelling ``run()`` closes the watch's connection at once.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import kubernetes_asyncio.client
import msgspec
from kubernetes_asyncio.client import ApiException

from clearance_api.errors import GoneError
from clearance_api.wire import EventType
from clearance_core.folding.registry import WATCHED
from clearance_runtime.edges import kubeclient
from clearance_runtime.process import health, logs, retries
from clearance_watcher.ledger import Sink

log = logs.get(__name__)

REDISCOVER_SECONDS = 60.0
PAGE_SIZE = 500
LIST_READ_TIMEOUT = 60.0
_JSON = {"Accept": "application/json"}
_decode = msgspec.json.decode
_CHANGES: dict[str, EventType] = {"ADDED": "ADDED", "MODIFIED": "MODIFIED",
                                  "DELETED": "DELETED"}


class Observer(Protocol):
    """Hears of what the API serves after the ledger took it (the status writer)."""

    def listed(self, kind: str, objects: list[dict[str, Any]]) -> None:
        """A complete snapshot of ``kind``."""

    def seen(self, event_type: EventType, obj: dict[str, Any]) -> None:
        """One watch event."""


@dataclass
class _Cursor:
    kind: str
    api_version: str
    plural: str
    kind_name: str = ""  # CamelCase Kind, set on objects that lack it (LIST items do)
    rv: str | None = None  # None: a LIST is needed before the next watch

    @property
    def group_path(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"


async def api_client(kubeconfig: Path | None) -> kubernetes_asyncio.client.ApiClient:
    """An API client from the kubeconfig file, or from the pod's service account."""
    # Every kind holds a watch connection; a smaller pool would make a LIST (or a status
    # patch: at most 4 at once) wait.
    return await kubeclient.api_client(kubeconfig, pool_size=len(WATCHED) + 8)


class KubeSource:
    def __init__(
        self,
        api: kubernetes_asyncio.client.ApiClient,
        ledger: Sink,
        *,
        kinds: Mapping[str, tuple[str, str, bool]] = WATCHED,
        timeout_seconds: int = 300,
        connect_timeout: float = 10.0,
        observer: Observer | None = None,
    ) -> None:
        self._api = api
        self._ledger = ledger
        self._observer = observer
        self._kinds = dict(kinds)
        self._timeout = timeout_seconds
        self._connect_timeout = connect_timeout

    async def run(self) -> None:
        """List and watch every kind until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for kind, (api_version, plural, _) in self._kinds.items():
                tg.create_task(self._follow(_Cursor(kind, api_version, plural)))
        await asyncio.Future()  # every kind was skipped: still run until cancelled

    async def _follow(self, cur: _Cursor) -> None:
        while True:
            health.stop_if_asked()  # a publish in the session may have swallowed a stop
            await retries.forever("kubernetes", functools.partial(self._session, cur),
                                  on=retries.any_error, backoff=retries.FAILURE,
                                  kind=cur.kind)

    async def _session(self, cur: _Cursor) -> None:
        """Discover, list if needed, and watch until the server ends the watch. A 410 Gone
        asks for a LIST next; a failure after progress ends the session (the next one
        starts at once); any other failure is raised, to be retried after a back-off."""
        if not cur.kind_name:
            kind_name = await self._discover(cur)
            if kind_name is None:
                log.warning("kind_skipped", kind=cur.kind, api_version=cur.api_version,
                            plural=cur.plural, reason="not served by the API server")
                # Fail closed: objects of a kind the server no longer serves (its CRD was
                # removed) must not keep granting access from the stream.
                await self._ledger.sync([], kinds={cur.kind})
                if self._observer is not None:
                    self._observer.listed(cur.kind, [])
                # A CRD may be installed later: look again now and then.
                await asyncio.sleep(REDISCOVER_SECONDS)
                return
            cur.kind_name = kind_name
        before = cur.rv
        try:
            if cur.rv is None:
                await self._relist(cur)
            await self._watch(cur)
        except GoneError:
            log.info("watch_expired", kind=cur.kind, resource_version=cur.rv)
            cur.rv = None
        except Exception as exc:
            if cur.rv is None or cur.rv == before:
                raise
            log.warning("watch_failed", kind=cur.kind, error=_describe(exc),
                        resource_version=cur.rv)

    async def _discover(self, cur: _Cursor) -> str | None:
        """The served Kind name for the cursor's plural, or None when it is not served."""
        try:
            doc = await self._get_json(cur.group_path)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        for res in doc.get("resources") or []:
            if isinstance(res, dict) and res.get("name") == cur.plural:
                name = res.get("kind")
                # Trust the server's Kind only if it is the kind we were asked for.
                return name if isinstance(name, str) and name.lower() == cur.kind else cur.kind
        return None

    async def _relist(self, cur: _Cursor) -> None:
        items: list[dict[str, Any]] = []
        query: list[tuple[str, str]] = [("limit", str(PAGE_SIZE))]
        rv = ""
        while True:
            page = await self._get_json(f"{cur.group_path}/{cur.plural}", query)
            meta = page.get("metadata") or {}
            items.extend(_complete(obj, cur) for obj in page.get("items") or []
                         if isinstance(obj, dict))
            # Every page of a paginated list is cut from the first page's snapshot.
            rv = rv or str(meta.get("resourceVersion") or "")
            if not meta.get("continue"):
                break
            query = [("limit", str(PAGE_SIZE)), ("continue", str(meta["continue"]))]
        await self._ledger.sync(items, kinds={cur.kind})
        if self._observer is not None:
            self._observer.listed(cur.kind, items)
        cur.rv = rv
        log.info("kind_listed", kind=cur.kind, objects=len(items), resource_version=rv)

    async def _watch(self, cur: _Cursor) -> None:
        query = [("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(self._timeout))]
        if cur.rv:
            query.append(("resourceVersion", cur.rv))
        # The read timeout outlasts the server's own, so a silent but healthy watch ends
        # by the server's timeout, and a dead connection by ours.
        resp = await self._get(f"{cur.group_path}/{cur.plural}", query,
                               read_timeout=self._timeout + 30)
        async with resp:
            while line := await resp.content.readline():
                event = _watch_event(line)
                if event is None:
                    continue
                event_type, obj = event
                if event_type == "ERROR":
                    # A Status: 410 Gone when the version left the server's history.
                    raise _status_error(obj)
                change = _CHANGES.get(event_type)
                if change is not None:
                    await self._ledger.apply(change, _complete(obj, cur))
                    if self._observer is not None:
                        self._observer.seen(change, obj)
                elif event_type != "BOOKMARK":
                    log.warning("watch_event_ignored", kind=cur.kind, type=event_type)
                    continue
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if isinstance(rv, str) and rv:
                    cur.rv = rv

    async def _get_json(self, path: str,
                        query: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        return await call_json(self._api, "GET", path, query=query,
                               connect_timeout=self._connect_timeout)

    async def _get(self, path: str, query: list[tuple[str, str]] | None, *,
                   read_timeout: float) -> aiohttp.ClientResponse:
        return await call(self._api, "GET", path, query, read_timeout=read_timeout,
                          connect_timeout=self._connect_timeout)


async def call(api: kubernetes_asyncio.client.ApiClient, method: str, path: str,
               query: list[tuple[str, str]] | None = None, *, body: Any = None,
               content_type: str | None = None, read_timeout: float = LIST_READ_TIMEOUT,
               connect_timeout: float = 10.0) -> aiohttp.ClientResponse:
    """Call an API path, authenticated; the response unread. A status other than 2xx
    raises ApiException (a 410 raises GoneError)."""
    headers = dict(_JSON)
    if content_type is not None:
        headers["Content-Type"] = content_type
    resp: aiohttp.ClientResponse = await api.call_api(
        path, method, query_params=query, header_params=headers, body=body,
        auth_settings=["BearerToken"], _preload_content=False,
        _request_timeout=aiohttp.ClientTimeout(connect=connect_timeout,
                                               sock_connect=connect_timeout,
                                               sock_read=read_timeout),
    )
    if 200 <= resp.status <= 299:
        return resp
    async with resp:
        raw = await resp.read()
    try:
        status = _as_dict(_decode(raw))
    except (msgspec.DecodeError, ValueError):
        status = {}
    raise _status_error({**status, "code": resp.status,
                         "reason": status.get("reason") or resp.reason})


async def call_json(api: kubernetes_asyncio.client.ApiClient, method: str, path: str,
                    **kwargs: Any) -> dict[str, Any]:
    """:func:`call`, and the JSON object it answered."""
    async with await call(api, method, path, **kwargs) as resp:
        # Raw JSON rather than the client's models: objects exactly as the server sent.
        return _as_dict(_decode(await resp.read()))


def _watch_event(line: bytes) -> tuple[str, dict[str, Any]] | None:
    """``(type, object)`` of one watch line, None for a line that is not JSON (skipped
    like a blank one). A bare Status (no event around it) raises its error, as does any
    other JSON that is not an event."""
    try:
        event = _decode(line)
    except msgspec.DecodeError:
        return None
    if isinstance(event, dict):
        obj, event_type = event.get("object"), event.get("type")
        if isinstance(obj, dict) and isinstance(event_type, str):
            return event_type, obj
        if "code" in event:
            raise _status_error(event)
    raise ValueError(f"malformed watch event: {line[:200]!r}")


def _status_error(status: dict[str, Any]) -> Exception:
    code = status.get("code")
    reason = f"{status.get('reason') or ''}: {status.get('message') or ''}".strip(": ")
    exc = ApiException(status=code if isinstance(code, int) else 500, reason=reason)
    return GoneError(_describe(exc)) if exc.status == 410 else exc


def _complete(obj: dict[str, Any], cur: _Cursor) -> dict[str, Any]:
    # LIST items carry neither apiVersion nor kind; the ledger needs both.
    obj.setdefault("apiVersion", cur.api_version)
    obj.setdefault("kind", cur.kind_name)
    return obj


def _as_dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _describe(exc: BaseException) -> str:
    # str() of an ApiException carries the response headers and body: too much for a log line.
    if isinstance(exc, ApiException):
        return f"ApiException: {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
