"""Run services in this process: each gets its own NATS and Redis connections, exactly as
if it were a separate process (they share nothing but the subjects and the store)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
import threading
from collections.abc import Awaitable, Callable, Sequence

import structlog
from nats.aio.client import Client

from clearance_api.errors import ClearanceError
from clearance_runtime.messaging import bus
from clearance_runtime.messaging.lease import Lease
from clearance_runtime.process import logs, metrics, probes, retries
from clearance_runtime.process.settings import Settings
from clearance_runtime.storage import packing, store

log = logs.get(__name__)
NAMES = ("watcher", "compiler", "cache-invalidator", "decision", "gateway")


def every_service(settings: Settings) -> list[str]:
    """What ``run all`` runs: every service, but the watcher in a region whose stream is a
    mirror (its events come from the source region's watcher)."""
    return [name for name in NAMES if not (name == "watcher" and settings.stream_mirror)]
#: Seconds from SIGTERM/SIGINT to exit, at most (the contract's bound is 5 s).
CLOSE_WITHIN = 4.0
#: Child processes (embedded servers) to kill if the watchdog has to end the process.
CHILDREN: list[subprocess.Popen[bytes]] = []


def _force_exit() -> None:
    log.error("stop_forced", after_seconds=CLOSE_WITHIN)
    for child in CHILDREN:
        with contextlib.suppress(OSError):
            child.kill()
    os._exit(1)


async def run_service(name: str, settings: Settings) -> None:
    """Run one service; an unexpected error restarts it (with the retry policy's
    back-off) instead of ending it, so in ``run all`` one service's defect never takes
    the others down."""
    if name not in NAMES:
        raise SystemExit(f"unknown service {name!r}; choose from {', '.join(NAMES)} or all")
    if name == "watcher" and settings.stream_mirror:
        raise SystemExit(f"invalid configuration: CLEARANCE_STREAM_MIRROR="
                         f"{settings.stream_mirror}: this region's event stream is a mirror, "
                         f"which takes no publishes; run the watcher in the region that holds "
                         f"the source stream")
    # Each service runs in its own task: the binding stays with its log lines.
    structlog.contextvars.bind_contextvars(service=name)
    run = functools.partial(_supervised, name, settings)
    while not await retries.forever("service", run, on=retries.any_error,
                                    backoff=retries.FAILURE):
        pass  # it failed after running for a while: restarted at once, back-off afresh


#: A service that ran this long before failing is restarted at once, its back-off afresh.
HEALTHY_SPELL = 30.0


async def _supervised(name: str, settings: Settings) -> bool:
    """One run: True when the service ended by itself, False when it failed after a
    healthy spell; a failure sooner is raised, to be restarted after a back-off. Every
    failure is logged with its traceback and counted."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await _run_once(name, settings)
    except Exception as exc:
        log.error("service_failed", error=repr(exc)[:500],
                  exc_info=(type(exc), exc, exc.__traceback__))
        metrics.SERVICE_RESTARTS.labels(service=name).inc()
        if loop.time() - started > HEALTHY_SPELL:
            return False
        raise
    return True


#: Redis connections per service at most (Valkey accepts 10,000 clients by default).
REDIS_CONNECTIONS = 1024


class ConnectionClosed(ClearanceError):
    """The NATS connection closed for good (not a disconnect it recovers from)."""


async def _closed_watch(nc: Client, work: asyncio.Task[None]) -> None:
    """A connection the server closed (a protocol error, an auth change) never comes
    back on its own, and every publish on it fails: restart the service with a new one
    rather than retry for ever."""
    while not work.done():
        if nc.is_closed:
            raise ConnectionClosed("NATS connection closed")
        await asyncio.sleep(1.0)


async def _run_once(name: str, settings: Settings) -> None:
    # Each service as its own NATS user where one is configured (``run all``), reading
    # replies under that user's own inbox prefix.
    nc = await bus.connect(settings.nats_url_for(name), name=f"clearance-{name}",
                           inbox_prefix=settings.inbox_prefix_for(name))
    # redis-py's default pool of 100 refused bursts with "Too many connections" (seen in
    # the soak). A blocking pool queues instead but costs ~10% of cached-check throughput
    # (its condition and timeout per command, measured with the bench), so: a larger pool.
    # A Sentinel URL follows the primary across failovers (clearance_runtime.storage.store).
    redis = store.connect(settings.redis_url, max_connections=REDIS_CONNECTIONS,
                          health_check_interval=10)
    packing.use_hiredis_packing(redis)  # C packing: big invalidations and batch commits
    runner: Callable[[], Awaitable[None]]
    lease = functools.partial(Lease, nc.jetstream(), ttl=settings.lease_ttl_s,
                              renew=settings.lease_renew_s, topology=settings.topology)
    # Each service's package is imported when it starts, not with this module: a process
    # running one service saves the others' imports (~0.45 s of a ~1 s start).
    if name == "gateway":  # asks over NATS only; its Redis client is never connected
        from clearance_gateway.app import Gateway  # noqa: PLC0415 - see above

        runner = Gateway(nc, settings).run
    elif name == "watcher":
        from clearance_watcher.app import Watcher  # noqa: PLC0415 - see above

        # One active watcher per set of sources; replicas wait as standbys.
        sources = "-".join(s for s, on in (("manifests", settings.manifests is not None),
                                            ("kubernetes", settings.kubernetes)) if on)
        # Its NATS user may not update the lease bucket: the compiler reconciles it.
        watcher_lease = lease(f"watcher.{sources or 'none'}", service=name, reconcile=False)
        runner = functools.partial(watcher_lease.hold, Watcher(nc, settings, redis).run)
    elif name == "compiler":
        from clearance_compiler.app import Compiler  # noqa: PLC0415 - see above
        from clearance_core.inherit.authority import Authority  # noqa: PLC0415 - see above

        # Exactly one active compiler (folding is order-sensitive); replicas are standbys.
        compiler_lease = lease("compiler", service=name)
        compiler = Compiler(nc, redis, allow_unset=settings.allow_unset,
                            authority=Authority.of(settings.admin_namespace_list),
                            topology=settings.topology)
        runner = functools.partial(compiler_lease.hold, compiler.run)
    elif name == "cache-invalidator":
        from clearance_invalidator.app import Invalidator  # noqa: PLC0415 - see above

        runner = Invalidator(nc, redis).run
    else:
        from clearance_decision.app import DecisionService  # noqa: PLC0415 - see above

        runner = DecisionService(nc, redis, settings).run
    # Readiness pings the store when no heartbeat wrote to it lately (a standby, an
    # outage); the gateway uses none (its client is never connected).
    probes.register(name, connected=lambda: nc.is_connected,
                    ping=None if name == "gateway" else redis.ping)
    log.info("service_started")
    try:
        async with asyncio.TaskGroup() as group:
            work = group.create_task(runner())
            group.create_task(_closed_watch(nc, work))
    finally:
        probes.unregister(name)
        metrics.forget(name)
        # Bounded: with NATS or Redis gone, draining would wait for a server that is not
        # coming back, and a stop must finish within seconds (CLOSE_WITHIN).
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.5):
                await (nc.drain() if nc.is_connected else nc.close())
        with contextlib.suppress(Exception):
            async with asyncio.timeout(0.5):
                await redis.aclose()


async def run_console(settings: Settings, host: str, port: int) -> None:
    """The ops console, restarted after a back-off if it fails (it holds no state worth
    keeping: its rates start afresh)."""
    from clearance_console import app as console_app  # noqa: PLC0415 - as the services

    structlog.contextvars.bind_contextvars(service="console")
    run = functools.partial(console_app.run, settings.nats_url_for("console"), host=host,
                            port=port, inbox_prefix=settings.inbox_prefix_for("console"),
                            settings=settings)
    await retries.forever("service", run, on=retries.any_error, backoff=retries.FAILURE)


async def run_services(names: Sequence[str], settings: Settings, *,
                       console: tuple[str, int] | None = None) -> None:
    """Run until every service ends or SIGINT/SIGTERM arrives; then stop them cleanly
    (in-flight requests finish, connections drain) and return. ``console``: also serve
    the ops console on that host and port."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    stopping = asyncio.Event()

    def stop() -> None:
        if stopping.is_set():  # a second signal: no more waiting
            os._exit(130)
        stopping.set()
        # Whatever a service's shutdown waits on (a server that is gone, a blocked
        # thread), the process ends within CLOSE_WITHIN of the signal.
        watchdog = threading.Timer(CLOSE_WITHIN, _force_exit)
        watchdog.daemon = True
        watchdog.start()
        main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(probes.serve(settings.metrics_port, host=settings.metrics_host,
                                           max_lag=settings.ready_max_lag), name="probes")
            for name in names:
                group.create_task(run_service(name, settings), name=name)
            if console is not None:
                group.create_task(run_console(settings, *console), name="console")
    except asyncio.CancelledError:
        if not stopping.is_set():
            raise
        log.info("services_stopped", services=list(names))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
