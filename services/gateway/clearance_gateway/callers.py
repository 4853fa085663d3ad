"""Who may ask the gateway: every request but ``GET /healthz`` comes from an
authenticated caller, or gets ``401`` and no decision.

``CLEARANCE_GATEWAY_AUTH`` says how a caller proves who it is:

* ``mtls`` — a client certificate ``CLEARANCE_GATEWAY_CLIENT_CA`` signed, required in
  the TLS handshake (a client without one never reaches HTTP). The caller is named as
  Kubernetes names certificate users: the subject's common name is the user, its
  organizations are the groups.
* ``token`` — ``Authorization: Bearer <token>``, a Kubernetes bearer token that a
  TokenReview authenticates (``clearance_runtime.edges.tokens``, cached at most 60 s, the
  audiences of ``CLEARANCE_TOKEN_AUDIENCES`` enforced). This is how an API server whose
  webhook kubeconfig holds a ``token`` authenticates.
* ``mtls-or-token`` — either.
* ``none`` — no client authentication: a loud warning at start. ``clearance up`` uses
  it, on loopback only.

Unset, it is ``mtls`` when a client CA is configured, else ``token``.
``CLEARANCE_GATEWAY_ALLOWED_CALLERS`` (``user:NAME``, ``group:NAME``, a bare name is a
user) narrows the authenticated callers to those named: anyone else gets ``403``.

A token the API server does not authenticate is ``401``; a TokenReview that cannot be
made (no Kubernetes API, refused, timed out) is ``503``: never an answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from clearance_api.errors import BadRequest, Refused, RequestError
from clearance_api.wire.limits import MAX_TOKEN
from clearance_gateway.upstream import status_of
from clearance_runtime.edges.httpserve import Handler, Middleware
from clearance_runtime.edges.tokens import TokenReviews, fingerprint
from clearance_runtime.process import logs

log = logs.get(__name__)

MODES = ("mtls", "token", "mtls-or-token", "none")
#: Paths any client may ask: liveness says nothing but "connected to NATS".
OPEN_PATHS = frozenset({"/healthz"})


class Caller(msgspec.Struct, frozen=True):
    """Who asked, and how they proved it (certificate, token or none)."""

    username: str
    groups: tuple[str, ...] = ()
    by: str = "none"


CALLER: web.RequestKey[Caller] = web.RequestKey("caller", Caller)


def allowed_callers(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """``CLEARANCE_GATEWAY_ALLOWED_CALLERS`` as (users, groups); SystemExit naming a
    malformed entry (a typo must not widen or silently empty the list)."""
    users: set[str] = set()
    groups: set[str] = set()
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        kind, sep, name = entry.partition(":")
        if not sep:
            kind, name = "user", entry
        if kind not in ("user", "group") or not name:
            raise SystemExit(f"invalid configuration: CLEARANCE_GATEWAY_ALLOWED_CALLERS: "
                             f"{entry!r} is not user:NAME, group:NAME or NAME")
        (users if kind == "user" else groups).add(name)
    return frozenset(users), frozenset(groups)


def certificate_caller(peercert: Any) -> Caller | None:
    """The caller a verified client certificate names (CN: user, O: groups)."""
    if not isinstance(peercert, dict) or not peercert.get("subject"):
        return None
    names: list[str] = []
    groups: list[str] = []
    for rdn in peercert["subject"]:
        for key, value in rdn:
            if key == "commonName":
                names.append(value)
            elif key == "organizationName":
                groups.append(value)
    return Caller(username=names[0] if names else "", groups=tuple(groups), by="certificate")


class Callers:
    """The gateway's authentication (see the module's docstring)."""

    def __init__(self, mode: str, *, client_ca: Path | None, allowed: str = "",
                 tokens: TokenReviews | None = None) -> None:
        if mode not in MODES:
            raise SystemExit(f"invalid configuration: CLEARANCE_GATEWAY_AUTH={mode!r}: "
                             f"expected one of {', '.join(MODES)}")
        if mode in ("mtls", "mtls-or-token") and client_ca is None:
            raise SystemExit(f"invalid configuration: CLEARANCE_GATEWAY_AUTH={mode} needs "
                             "CLEARANCE_GATEWAY_CLIENT_CA (the CA that signs client "
                             "certificates)")
        self.mode = mode
        self._users, self._groups = allowed_callers(allowed)
        self._certificates = mode in ("mtls", "mtls-or-token")
        self._tokens = tokens if mode in ("token", "mtls-or-token") else None
        if self._tokens is None and mode in ("token", "mtls-or-token"):
            raise SystemExit(f"CLEARANCE_GATEWAY_AUTH={mode} needs token reviews")

    @property
    def client_certificate(self) -> bool | None:
        """What the TLS handshake asks of a client (see ``tls.server_context``)."""
        return {"mtls": True, "mtls-or-token": None}.get(self.mode, False)

    async def authenticate(self, request: web.Request) -> Caller:
        """The caller of ``request``, allowed; ``Refused`` (401, 403) or ``Unavailable``."""
        if self.mode == "none":
            return Caller(username="", by="none")
        caller = None
        if self._certificates and request.transport is not None:
            # Only a certificate the handshake verified against the client CA is here.
            caller = certificate_caller(request.transport.get_extra_info("peercert"))
        if caller is None and self._tokens is not None:
            caller = await self._bearer(request)
        if caller is None:
            raise Refused(401, "client authentication required: "
                          + ("a client certificate" if self.mode == "mtls" else
                             "an Authorization: Bearer token" if self.mode == "token" else
                             "a client certificate or an Authorization: Bearer token"))
        if (self._users or self._groups) and not (
                caller.username in self._users or self._groups.intersection(caller.groups)):
            log.info("gateway_caller_refused", caller=caller.username, by=caller.by)
            raise Refused(403, f"caller {caller.username!r} is not allowed to ask this "
                               "gateway (CLEARANCE_GATEWAY_ALLOWED_CALLERS)")
        return caller

    async def _bearer(self, request: web.Request) -> Caller | None:
        assert self._tokens is not None
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        if len(token) > MAX_TOKEN:
            raise Refused(401, f"bearer token longer than {MAX_TOKEN} bytes")
        try:
            principal = await self._tokens.principal(token)
        except BadRequest as exc:  # the API server did not authenticate it
            log.info("gateway_token_refused", token=fingerprint(token))
            raise Refused(401, exc.message) from None
        return Caller(username=principal.username, groups=tuple(principal.groups),
                      by="token")

    def middleware(self) -> Middleware:
        @web.middleware
        async def authenticated(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path not in OPEN_PATHS:
                try:
                    request[CALLER] = await self.authenticate(request)
                except RequestError as exc:  # Refused, or a TokenReview not made
                    status = status_of(exc)
                    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
                    return web.Response(status=status, text=exc.message + "\n",
                                        headers=headers)
            return await handler(request)

        return authenticated
