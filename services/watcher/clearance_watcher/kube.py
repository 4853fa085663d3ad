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
   go back to 2. Any other error is logged, backed off (0.5 s doubling to 10 s; reset
   after progress) and retried from the last resourceVersion, or by a LIST if none.

The kubernetes client is synchronous. Every blocking call (discovery, a list page, each
step of a watch stream) runs on this source's own thread pool, one call per kind at a
time, while the ledger is always awaited on the event loop: a slow ledger slows the
watch down (backpressure) instead of queueing events. Cancelling ``run()`` stops the
watch with ``Watch.stop()``, which shuts the socket down under a blocked read.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Callable, Generator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config
import kubernetes.watch
from kubernetes.client import ApiException

from clearance_core.errors import ClearanceError
from clearance_core.registry import WATCHED
from clearance_runtime import logs
from clearance_watcher.ledger import Sink

log = logs.get(__name__)
T = TypeVar("T")

REDISCOVER_SECONDS = 60.0
BACKOFF_MIN = 0.5
BACKOFF_MAX = 10.0
PAGE_SIZE = 500
LIST_READ_TIMEOUT = 60.0
STOP_GRACE = 2.0  # how long a cancelled run waits for its threads to let go
_END = object()
# The core group has no generic list call; these are the core resources we know how to list
# (a core kind missing here is skipped like an unserved one).
_CORE_LISTERS = {"namespaces": "list_namespace"}


class GoneError(ClearanceError):
    """The watched resourceVersion left the server's history: only a LIST can resume."""


@dataclass
class _Cursor:
    kind: str
    api_version: str
    plural: str
    kind_name: str = ""  # CamelCase Kind, set on objects that lack it (LIST items do)
    rv: str | None = None  # None: a LIST is needed before the next watch


def api_client(kubeconfig: Path | None) -> kubernetes.client.ApiClient:
    """An API client from the kubeconfig file, or from the pod's service account."""
    cfg = kubernetes.client.Configuration()
    if kubeconfig is None:
        kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=cfg
        )
    else:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=cfg
        )
    # Every kind holds a watch connection; a smaller pool would churn and warn.
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize, len(WATCHED) + 4)
    return kubernetes.client.ApiClient(cfg)


class KubeSource:
    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        ledger: Sink,
        *,
        kinds: Mapping[str, tuple[str, str, bool]] = WATCHED,
        timeout_seconds: int = 300,
        connect_timeout: float = 10.0,
    ) -> None:
        self._api = api
        self._ledger = ledger
        self._kinds = dict(kinds)
        self._timeout = timeout_seconds
        self._connect_timeout = connect_timeout
        self._custom = kubernetes.client.CustomObjectsApi(api)
        self._core = kubernetes.client.CoreV1Api(api)
        self._pool: ThreadPoolExecutor | None = None

    async def run(self) -> None:
        """List and watch every kind until cancelled."""
        # A dedicated pool: at most one blocking call per kind, and the default executor
        # (as few as 5 threads) would let long watches starve each other.
        self._pool = ThreadPoolExecutor(len(self._kinds) + 2, thread_name_prefix="kube")
        try:
            async with asyncio.TaskGroup() as tg:
                for kind, (api_version, plural, _) in self._kinds.items():
                    tg.create_task(self._follow(_Cursor(kind, api_version, plural)))
            await asyncio.Future()  # every kind was skipped: still run until cancelled
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def _follow(self, cur: _Cursor) -> None:
        delay = BACKOFF_MIN
        while True:
            before = cur.rv
            try:
                if not cur.kind_name:
                    kind_name = await self._discover(cur)
                    if kind_name is None:
                        log.warning("kind_skipped", kind=cur.kind, api_version=cur.api_version,
                                    plural=cur.plural, reason="not served by the API server")
                        # Fail closed: objects of a kind the server no longer serves (its
                        # CRD was removed) must not keep granting access from the stream.
                        await self._ledger.sync([], kinds={cur.kind})
                        # A CRD may be installed later: look again now and then.
                        await asyncio.sleep(REDISCOVER_SECONDS)
                        continue
                    cur.kind_name = kind_name
                if cur.rv is None:
                    await self._relist(cur)
                await self._watch(cur)
                delay = BACKOFF_MIN
            except GoneError:
                log.info("watch_expired", kind=cur.kind, resource_version=cur.rv)
                cur.rv = None
            except Exception as exc:  # a kind must outlive any one failure
                if cur.rv != before:
                    delay = BACKOFF_MIN
                log.warning("kube_retry", kind=cur.kind, error=_describe(exc), retry_in=delay,
                            relist=cur.rv is None)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    async def _discover(self, cur: _Cursor) -> str | None:
        """The served Kind name for the cursor's plural, or None when it is not served."""
        if cur.api_version == "v1" and cur.plural not in _CORE_LISTERS:
            return None
        path = "/api/v1" if cur.api_version == "v1" else f"/apis/{cur.api_version}"
        try:
            doc = await self._in_thread(self._get_json, path)
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
        token: str | None = None
        rv = ""
        while True:
            page = await self._in_thread(self._list_page, cur, token)
            meta = page.get("metadata") or {}
            items.extend(_complete(obj, cur) for obj in page.get("items") or []
                         if isinstance(obj, dict))
            # Every page of a paginated list is cut from the first page's snapshot.
            rv = rv or str(meta.get("resourceVersion") or "")
            token = str(meta["continue"]) if meta.get("continue") else None
            if token is None:
                break
        await self._ledger.sync(items, kinds={cur.kind})
        cur.rv = rv
        log.info("kind_listed", kind=cur.kind, objects=len(items), resource_version=rv)

    async def _watch(self, cur: _Cursor) -> None:
        func, args = self._lister(cur)
        kwargs: dict[str, Any] = {
            "allow_watch_bookmarks": True,
            "timeout_seconds": self._timeout,
            # The read timeout outlasts the server's own, so a silent but healthy watch
            # ends by the server's timeout, and a dead connection by ours.
            "_request_timeout": (self._connect_timeout, self._timeout + 30),
        }
        if cur.rv:
            kwargs["resource_version"] = cur.rv
        # return_type=object: events stay the plain dicts the server sent.
        w: Any = kubernetes.watch.Watch(return_type=object)  # type: ignore[no-untyped-call]
        stream: Generator[dict[str, Any]] = w.stream(func, *args, **kwargs)
        try:
            while (event := await self._next(w, stream)) is not _END:
                # The client yields None for a line that is not JSON; skip it like a blank.
                if not isinstance(event, dict) or not isinstance(event.get("raw_object"), dict):
                    continue
                event_type, obj = event.get("type"), event["raw_object"]
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    await self._ledger.apply(event_type, _complete(obj, cur))
                elif event_type != "BOOKMARK":
                    log.warning("watch_event_ignored", kind=cur.kind, type=event_type)
                    continue
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if isinstance(rv, str) and rv:
                    cur.rv = rv
        except ApiException as exc:
            if exc.status == 410:  # an ERROR event or the HTTP status, raised by the client
                raise GoneError(_describe(exc)) from exc
            raise
        finally:
            w.stop()
            # Closing the stream closes its response (not blocking). A ValueError means the
            # stream still runs in a thread that did not let go in time; it ends on its own.
            with contextlib.suppress(ValueError):
                stream.close()

    async def _next(self, w: Any, stream: Generator[dict[str, Any]]) -> object:
        """One step of the watch stream, in a thread; cancellation unblocks that thread."""
        assert self._pool is not None
        fut = asyncio.get_running_loop().run_in_executor(self._pool, next, stream, _END)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            fut.add_done_callback(_consume)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + STOP_GRACE
            while not fut.done() and loop.time() < deadline:
                # Repeated: the response may only now exist, and stream() clears the
                # flag of a stop() that came before it started.
                w.stop()
                await asyncio.wait([fut], timeout=0.05)
            raise

    def _lister(self, cur: _Cursor) -> tuple[Callable[..., Any], tuple[str, ...]]:
        if cur.api_version == "v1":
            return getattr(self._core, _CORE_LISTERS[cur.plural]), ()
        group, version = cur.api_version.split("/", 1)
        return self._custom.list_cluster_custom_object, (group, version, cur.plural)

    def _list_page(self, cur: _Cursor, token: str | None) -> dict[str, Any]:
        func, args = self._lister(cur)
        kwargs: dict[str, Any] = {"limit": PAGE_SIZE, "_preload_content": False,
                                  "_request_timeout": (self._connect_timeout, LIST_READ_TIMEOUT)}
        if token:
            kwargs["_continue"] = token
        # Raw JSON rather than the client's models: objects exactly as the server sent them.
        return _as_dict(json.loads(func(*args, **kwargs).data))

    def _get_json(self, path: str) -> dict[str, Any]:
        params = self._api.param_serialize(
            "GET", path, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        resp: Any = self._api.call_api(
            *params, _request_timeout=(self._connect_timeout, LIST_READ_TIMEOUT)
        )
        body: bytes = resp.read()
        if not 200 <= resp.status <= 299:
            ApiException.from_response(http_resp=resp, body=body.decode(errors="replace"),
                                       data=None)  # raises
        return _as_dict(json.loads(body))

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._pool is not None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))


def _complete(obj: dict[str, Any], cur: _Cursor) -> dict[str, Any]:
    # LIST items carry neither apiVersion nor kind; the ledger needs both.
    obj.setdefault("apiVersion", cur.api_version)
    obj.setdefault("kind", cur.kind_name)
    return obj


def _as_dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _describe(exc: Exception) -> str:
    # str() of an ApiException carries the response headers and body: too much for a log line.
    if isinstance(exc, ApiException):
        return f"ApiException: {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def _consume(fut: asyncio.Future[Any]) -> None:
    # Nobody awaits a step abandoned on cancellation: retrieve its error to keep it quiet.
    if not fut.cancelled():
        fut.exception()
