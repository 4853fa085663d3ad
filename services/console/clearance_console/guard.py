"""Who the console answers: only requests addressed to it, from its own page or a client
that is not a browser, and — when ``CLEARANCE_CONSOLE_TOKEN`` is set — from whoever
knows the token.

* **Host**: the ``Host`` header must name the console as its user reaches it — 127.0.0.1,
  ``localhost``, ``[::1]``, its bind address (a wildcard bind: this host's name) or a
  name in ``CLEARANCE_CONSOLE_HOSTS`` — with its port. Anything else is ``403``: a
  DNS-rebinding page (``evil.example`` resolving to 127.0.0.1) sends its own name.
* **Cross-site**: on every API call and login, a browser's ``Sec-Fetch-Site`` must be
  ``same-origin`` (or ``none``: typed in the address bar), and an ``Origin`` must be the
  console's own; else ``403``. A non-browser client sends neither.
* **JSON only**: a ``POST`` must be ``Content-Type: application/json`` (``415``
  otherwise), which a cross-site form or ``text/plain`` fetch cannot send without a
  preflight the console never grants.
* **Token** (optional): ``Authorization: Bearer <token>``, or the session cookie
  ``/login`` sets (HttpOnly, SameSite=Strict) when given the token — typed, or in the
  URL fragment ``/login#token=...``, which never leaves the browser. The cookie holds a
  digest of the token, never the token. Without it: the page redirects to ``/login``,
  the API answers ``401``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
from collections.abc import Iterable

from aiohttp import web

from clearance_api.errors import Refused
from clearance_runtime.edges.httpserve import Handler, Middleware

COOKIE = "clearance_console"
WILDCARDS = ("", "0.0.0.0", "::")  # noqa: S104 - names of "every address", compared
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
#: Paths that need no token: the login page and the page's static files (no data).
PUBLIC = ("/login", "/static/")
_SAME_SITE = frozenset({"same-origin", "none"})


def _bracketed(host: str) -> str:
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host


def allowed_hosts(bind: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The ``Host`` values the console answers (lower case, with the port; without it
    too on port 80, as browsers send it)."""
    names = set(LOOPBACK)
    names.add(_bracketed(socket.gethostname() if bind in WILDCARDS else bind).lower())
    names.update(_bracketed(name.strip()).lower() for name in extra if name.strip())
    values = {f"{name}:{port}" for name in names}
    if port == 80:
        values |= names
    return frozenset(values)


class Guard:
    def __init__(self, *, bind: str, port: int, token: str = "",
                 extra_hosts: Iterable[str] = ()) -> None:
        self.hosts = allowed_hosts(bind, port, extra_hosts)
        self._token = token.encode()
        # What the cookie carries: proof of the token, not the token.
        self._session = hmac.new(self._token, b"clearance-console-session",
                                 hashlib.sha256).hexdigest() if token else ""

    @property
    def needs_token(self) -> bool:
        return bool(self._token)

    def check_host(self, request: web.Request) -> str:
        host = request.headers.get("Host", "").lower()
        if host not in self.hosts:
            raise Refused(403, f"this console does not answer for host {host!r} "
                               "(CLEARANCE_CONSOLE_HOSTS lists more names)")
        return host

    @staticmethod
    def check_same_origin(request: web.Request, host: str) -> None:
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site.lower() not in _SAME_SITE:
            raise Refused(403, f"cross-site request refused (Sec-Fetch-Site: {site})")
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() not in (f"http://{host}",
                                                         f"https://{host}"):
            raise Refused(403, f"cross-origin request refused (Origin: {origin})")

    @staticmethod
    def check_json(request: web.Request) -> None:
        if request.method == "POST" and request.content_type != "application/json":
            raise Refused(415, "send Content-Type: application/json")

    def authenticated(self, request: web.Request) -> bool:
        if not self._token:
            return True
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              self._token):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self._session.encode())

    def accepts(self, token: str) -> bool:
        return bool(self._token) and hmac.compare_digest(token.encode(), self._token)

    def login_cookie(self, response: web.StreamResponse) -> None:
        response.set_cookie(COOKIE, self._session, httponly=True, samesite="Strict",
                            path="/")

    def middleware(self) -> Middleware:
        @web.middleware
        async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
            try:
                host = self.check_host(request)
                path = request.path
                if path.startswith("/api/") or (path == "/login" and request.method == "POST"):
                    self.check_same_origin(request, host)
                    self.check_json(request)
            except Refused as exc:
                return _refusal(exc)
            if not path.startswith(PUBLIC) and not self.authenticated(request):
                if path.startswith("/api/"):
                    return _refusal(Refused(401, "log in first: /login (the console's "
                                                 "token, CLEARANCE_CONSOLE_TOKEN)"))
                raise web.HTTPSeeOther("/login")
            return await handler(request)

        return guarded


def _refusal(exc: Refused) -> web.Response:
    body = {"error": {"code": "bad_request", "message": exc.message}}
    return web.Response(status=exc.status, text=json.dumps(body),
                        content_type="application/json")
