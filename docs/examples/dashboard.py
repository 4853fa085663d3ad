"""A dashboard backend on Clearance's Python client: a small aiohttp app.

It sits behind an authenticating proxy (an OAuth proxy, an API gateway) that asserts who
the user is in ``X-Forwarded-User``, ``X-Forwarded-Email`` and ``X-Forwarded-Groups``
(comma-separated). Cluster pages are guarded by ``clearance.v1.check``, answered from the
client's local cache when it can — which ``clearance.decisions.changed`` keeps fresh.

    python docs/examples/dashboard.py --nats nats://127.0.0.1:4222 --port 8080
    curl -H 'X-Forwarded-User: alice' -H 'X-Forwarded-Groups: sre' localhost:8080/api/clusters

Errors are never shown as access: a refused or failed check is a 403 or a 5xx.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from clearance_api.errors import BadRequest, NotFound, RequestError
from clearance_api.wire import CheckRequest, Principal, PrincipalRequest, Resource
from clearance_client import ClearanceClient, DecisionCache

CLIENT = web.AppKey("clearance", ClearanceClient)


def principal(request: web.Request) -> Principal:
    user = request.headers.get("X-Forwarded-User")
    if not user:
        raise web.HTTPUnauthorized(text="no X-Forwarded-User: not behind the auth proxy?")
    groups = [g.strip() for g in request.headers.get("X-Forwarded-Groups", "").split(",")
              if g.strip()]
    return Principal(username=user, groups=groups,
                     email=request.headers.get("X-Forwarded-Email"))


async def clusters(request: web.Request) -> web.Response:
    """Every cluster the user may see, with what they may do there."""
    reply = await request.app[CLIENT].permissions(PrincipalRequest(principal=principal(request)))
    return web.json_response({name: {"decision": p.decision, "permissions": p.permissions}
                              for name, p in sorted(reply.clusters.items())
                              if p.decision != "deny"})


async def cluster(request: web.Request) -> web.Response:
    """One cluster's page: shown only on an allow (or a partial view, with its filters)."""
    name = request.match_info["name"]
    result = await request.app[CLIENT].check(CheckRequest(
        principal=principal(request), action="view", resource=Resource(type="cluster",
                                                                       name=name)))
    if not result.allowed:
        raise web.HTTPForbidden(text=f"not allowed: {result.reason}")
    return web.json_response({"cluster": name, "decision": result.decision,
                              "permissions": result.permissions, "filters": result.filters,
                              "policy": result.policy, "cached": result.cached})


async def status(request: web.Request) -> web.Response:
    reply = await request.app[CLIENT].status()
    return web.json_response({"revision": reply.revision, "policies": reply.policies,
                              "healthy": all(s.healthy for s in reply.services.values())})


@web.middleware
async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Clearance's error replies: never a page, always a status saying why."""
    try:
        response: web.StreamResponse = await handler(request)
    except (BadRequest, NotFound) as exc:
        raise web.HTTPBadRequest(text=f"{exc.code}: {exc.message}") from None
    except RequestError as exc:  # stale, unavailable, internal
        raise web.HTTPServiceUnavailable(text=f"{exc.code}: {exc.message}") from None
    return response


def create_app(nats_url: str, **connect: Any) -> web.Application:
    """The app; it connects on start-up (``connect`` goes to ``ClearanceClient.connect``:
    credentials, TLS…) and closes the connection on clean-up."""
    app = web.Application(middlewares=[errors])

    async def clearance(app: web.Application) -> AsyncIterator[None]:
        client = await ClearanceClient.connect(nats_url, **connect)
        app[CLIENT] = client
        yield
        await client.close()

    app.cleanup_ctx.append(clearance)
    app.router.add_get("/api/clusters", clusters)
    app.router.add_get("/api/clusters/{name}", cluster)
    app.router.add_get("/api/status", status)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", default="nats://127.0.0.1:4222")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--creds", help="NATS credentials file (the deploy/ `client` role)")
    args = parser.parse_args()
    connect: dict[str, Any] = {"cache": DecisionCache(max_entries=50_000, ttl=30)}
    if args.creds:
        connect["user_credentials"] = args.creds
    web.run_app(create_app(args.nats, **connect), port=args.port)


if __name__ == "__main__":
    main()
