"""The Kubernetes webhook authorizer: ``POST /authorize``, a SubjectAccessReview in and
the same object back with its ``status``, exactly what the API server's
``--authorization-webhook-config-file`` expects.

It is answered by ``clearance.v1.review.subject`` — the decision service's RBAC index,
the same answer ``clearance can-i`` gives — so this module only translates:

* ``authorization.k8s.io/v1`` and ``v1beta1`` (whose spec names the groups ``group``,
  not ``groups``); the reply keeps the request's version and spelling;
* ``status.allowed`` and ``reason`` as the RBAC index says; ``denied`` is never set, so a
  "no" is the webhook's "no opinion" and the API server asks its next authorizer (RBAC
  only grants; it never forbids);
* a review that is not one (not JSON, another kind or version, no spec, no user or
  group, no or both attributes) is HTTP 400 with the reason, never allowed; a decision
  service that cannot be reached, or fails, is HTTP 503/500: the API server counts a
  non-200 as a failed authorization — no allow — and retries with back-off.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from clearance_api.errors import BadRequest, Internal, RequestError
from clearance_api.wire import SUBJECT_REVIEW_SUBJECT
from clearance_gateway.upstream import Upstream, json_object, status_of
from clearance_runtime.edges.httpserve import Bounds
from clearance_runtime.process import logs

log = logs.get(__name__)

V1 = "authorization.k8s.io/v1"
V1BETA1 = "authorization.k8s.io/v1beta1"
KIND = "SubjectAccessReview"


class Webhook:
    def __init__(self, upstream: Upstream, bounds: Bounds) -> None:
        self._upstream = upstream
        self._bounds = bounds

    async def authorize(self, request: web.Request) -> web.Response:
        review: dict[str, Any] = {"apiVersion": V1, "kind": KIND}
        try:
            review = await json_object(request, self._bounds)
            status = await self._status(review)
        except RequestError as exc:
            log.info("webhook_failed", code=exc.code, error=exc.message)
            answer = _reply(review, {"allowed": False, "reason": exc.message,
                                     "evaluationError": exc.message})
            return web.json_response(answer, status=status_of(exc))
        return web.json_response(_reply(review, status))

    async def _status(self, review: dict[str, Any]) -> dict[str, Any]:
        version, kind, spec = review.get("apiVersion"), review.get("kind"), review.get("spec")
        if kind != KIND or version not in (V1, V1BETA1):
            raise BadRequest(f"expected a {KIND} of {V1} or {V1BETA1}, "
                             f"got kind {kind!r} of {version!r}")
        if not isinstance(spec, dict):
            raise BadRequest("the review has no spec object")
        if version == V1BETA1:
            spec = {("groups" if key == "group" else key): value
                    for key, value in spec.items()}
        reply = await self._upstream.ask(SUBJECT_REVIEW_SUBJECT,
                                         {"apiVersion": V1, "kind": KIND, "spec": spec})
        got = reply.get("status")
        if not isinstance(got, dict) or not isinstance(got.get("allowed"), bool):
            raise Internal("the decision service's review has no status")
        status: dict[str, Any] = {"allowed": got["allowed"], "reason": got.get("reason", "")}
        if got.get("evaluationError"):
            status["evaluationError"] = got["evaluationError"]
        return status


def _reply(review: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """The review as sent (every member, the API server's spelling) with ``status``."""
    answer = dict(review)
    answer.setdefault("apiVersion", V1)
    answer.setdefault("kind", KIND)
    answer["status"] = status
    return answer
