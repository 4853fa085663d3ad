"""The gateway: HTTPS interfaces users already have, each answered over NATS.

* ``POST /authorize`` — the Kubernetes webhook authorizer (:mod:`.webhook`);
* ``POST /access/v1/evaluation``, ``POST /access/v1/evaluations`` and
  ``GET /.well-known/authzen-configuration`` — AuthZEN 1.0 (:mod:`.authzen`);
* ``GET /healthz`` — 200 while connected to NATS, else 503 (the one path any client
  may ask: every other needs an authenticated caller, :mod:`.callers`).

It listens on 127.0.0.1 unless ``CLEARANCE_GATEWAY_HOST`` says otherwise, and keeps the
bounds of ``clearance_runtime.edges.httpserve``: connections, the time to send a request's
head and body, body bytes, and the checks one request may cause (:mod:`.authzen`).

A thin service like the others: it meets the decision service only on the
``clearance.v1.*`` subjects and reads no store, so any number of replicas can run. Its
heartbeat for the probes is a serving loop that is connected to NATS.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from aiohttp import web
from nats.aio.client import Client

from clearance_gateway import tls
from clearance_gateway.authzen import AuthZen
from clearance_gateway.callers import Callers
from clearance_gateway.upstream import MAX_BODY, Upstream
from clearance_gateway.webhook import Webhook
from clearance_runtime.edges import httpserve
from clearance_runtime.edges.tokens import TokenReviews
from clearance_runtime.process import logs, probes
from clearance_runtime.process.settings import Settings

log = logs.get(__name__)
WILDCARDS = ("", "0.0.0.0", "::")  # noqa: S104 - names of "every address", compared


def base_url(host: str, port: int) -> str:
    """The gateway's URL from its configured address (a wildcard: this host's name)."""
    name = socket.gethostname() if host in WILDCARDS else host
    try:
        if ipaddress.ip_address(name).version == 6:
            name = f"[{name}]"
    except ValueError:
        pass  # a name, not an address
    return f"https://{name}:{port}"


class Gateway:
    def __init__(self, nc: Client, settings: Settings) -> None:
        self._nc = nc
        self._settings = settings
        self.bounds = httpserve.Bounds(
            max_body=MAX_BODY, max_connections=settings.gateway_max_connections,
            header_timeout=settings.http_header_timeout,
            body_timeout=settings.http_body_timeout)
        mode = settings.gateway_auth_mode
        self._tokens = TokenReviews(settings.kubeconfig,
                                    audiences=settings.token_audience_list) \
            if mode in ("token", "mtls-or-token") else None
        self.callers = Callers(mode, client_ca=settings.gateway_client_ca,
                               allowed=settings.gateway_allowed_callers, tokens=self._tokens)
        upstream = Upstream(nc, timeout=settings.gateway_timeout)
        self._webhook = Webhook(upstream, self.bounds)
        self._authzen = AuthZen(
            upstream, bounds=self.bounds, max_evaluations=settings.gateway_max_evaluations,
            public_url=settings.gateway_url or base_url(settings.gateway_host,
                                                        settings.gateway_port))
        self.site: httpserve.BoundedSite | None = None

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[
            httpserve.closing, self.callers.middleware()])
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
            client_ca=settings.gateway_client_ca, self_signed_dir=settings.gateway_tls_dir,
            client_certificate=self.callers.client_certificate)
        self._warn_about_authentication()
        runner = httpserve.runner(self.application(), self.bounds)
        await runner.setup()
        try:
            self.site = httpserve.BoundedSite(runner, settings.gateway_host,
                                              settings.gateway_port, self.bounds,
                                              ssl_context=context)
            await self.site.start()
            port = self.site.addresses[0][1]
            if not settings.gateway_url:  # the port actually bound (0: any free one)
                self._authzen.public_url = base_url(settings.gateway_host, port)
            log.info("gateway_ready", url=self._authzen.public_url, certificate=str(cert),
                     addresses=[f"{a}:{p}" for a, p in self.site.addresses],
                     auth=self.callers.mode,
                     allowed_callers=settings.gateway_allowed_callers or "any authenticated")
            while True:
                probes.turn("gateway")  # readiness follows the NATS connection
                await asyncio.sleep(1.0)
        finally:
            await runner.cleanup()
            if self._tokens is not None:
                await self._tokens.close()

    def _warn_about_authentication(self) -> None:
        settings = self._settings
        if self.callers.mode == "none":
            log.warning("gateway_unauthenticated",
                        note="CLEARANCE_GATEWAY_AUTH=none: ANY client that reaches "
                             f"{settings.gateway_host}:{settings.gateway_port} gets "
                             "answers; use it on loopback only")
        elif self._tokens is not None and settings.kubeconfig is None \
                and not settings.kubernetes:
            log.error("gateway_tokens_unverifiable",
                      note=f"CLEARANCE_GATEWAY_AUTH={self.callers.mode} verifies bearer "
                           "tokens with TokenReviews, but there is no Kubernetes API "
                           "(CLEARANCE_KUBECONFIG, or run in a pod): token callers get 503")
        if settings.gateway_host in WILDCARDS and not settings.gateway_url:
            log.warning("gateway_url_unset",
                        note="listening on every address: set CLEARANCE_GATEWAY_URL to the "
                             "URL clients use, for the AuthZEN metadata")
