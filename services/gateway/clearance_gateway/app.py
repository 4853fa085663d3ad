"""The gateway: HTTPS interfaces users already have, each answered over NATS.

* ``POST /authorize`` — the Kubernetes webhook authorizer (:mod:`.webhook`);
* ``POST /access/v1/evaluation``, ``POST /access/v1/evaluations`` and
  ``GET /.well-known/authzen-configuration`` — AuthZEN 1.0 (:mod:`.authzen`);
* ``GET /healthz`` — 200 while connected to NATS, else 503.

A thin service like the others: it meets the decision service only on the
``clearance.v1.*`` subjects and reads no store, so any number of replicas can run. Its
heartbeat for the probes is a serving loop that is connected to NATS.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from nats.aio.client import Client

from clearance_gateway import tls
from clearance_gateway.authzen import AuthZen
from clearance_gateway.upstream import MAX_BODY, Upstream
from clearance_gateway.webhook import Webhook
from clearance_runtime import logs, probes
from clearance_runtime.settings import Settings

log = logs.get(__name__)
#: Seconds in-flight HTTP requests get to finish at a stop (within the 5 s bound).
SHUTDOWN_SECONDS = 1.0


class Gateway:
    def __init__(self, nc: Client, settings: Settings) -> None:
        self._nc = nc
        self._settings = settings
        upstream = Upstream(nc, timeout=settings.gateway_timeout)
        self._webhook = Webhook(upstream)
        self._authzen = AuthZen(upstream, public_url=settings.gateway_url)

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/authorize", self._webhook.authorize)
        app.router.add_post("/access/v1/evaluation", self._authzen.evaluation)
        app.router.add_post("/access/v1/evaluations", self._authzen.evaluations)
        app.router.add_get("/.well-known/authzen-configuration", self._authzen.metadata)
        app.router.add_get("/healthz", self._health)
        return app

    async def _health(self, _: web.Request) -> web.Response:
        connected = self._nc.is_connected
        return web.json_response({"nats": "connected" if connected else "disconnected"},
                                 status=200 if connected else 503)

    async def run(self) -> None:
        settings = self._settings
        context, cert = tls.server_context(
            cert=settings.gateway_tls_cert, key=settings.gateway_tls_key,
            client_ca=settings.gateway_client_ca, self_signed_dir=settings.gateway_tls_dir)
        runner = web.AppRunner(self.application(), access_log=None,
                               shutdown_timeout=SHUTDOWN_SECONDS)
        await runner.setup()
        try:
            site = web.TCPSite(runner, settings.gateway_host, settings.gateway_port,
                               ssl_context=context)
            await site.start()
            log.info("gateway_ready", url=site.name, certificate=str(cert),
                     mutual_tls=settings.gateway_client_ca is not None)
            while True:
                if self._nc.is_connected:
                    probes.beat("gateway", 0, 0)
                await asyncio.sleep(1.0)
        finally:
            await runner.cleanup()
