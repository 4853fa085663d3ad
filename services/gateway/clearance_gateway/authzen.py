"""AuthZEN Authorization API 1.0 (OpenID): ``POST /access/v1/evaluation``,
``POST /access/v1/evaluations`` and ``GET /.well-known/authzen-configuration``.

Clearance's types in AuthZEN's shapes, answered by ``clearance.v1.check.batch``:

* subject ``{"type": "user", "id": username, "properties": {"groups", "email"}}``
  (other properties are ignored; other types are refused);
* action ``{"name": "view" | "view_metrics"}``;
* resource ``{"type", "id": name, "properties": {"cluster", "namespace", "labels",
  "fields"}}`` — a Clearance resource, ``id`` its name (``"*"``: any);
* the answer ``{"decision": bool, "context": {"reason", "outcome", "policy",
  "permissions", "filters", "revision"}}``: ``decision`` is true for Clearance's
  ``allow``; for ``partial`` (allowed, but only through the ``filters``) it is false
  unless the evaluation's ``context`` says ``{"clearance": {"accept_partial": true}}``
  — a policy enforcement point that applies the filters — so one that reads only
  ``decision`` never shows what the filters hide. ``outcome`` always says which.

An evaluations request takes the top-level subject, action, resource and context as
defaults for each of its ``evaluations`` (at most ``CLEARANCE_GATEWAY_MAX_EVALUATIONS``,
1,000 by default; more is HTTP 400); evaluations for one subject are asked together in
``check.batch`` requests of at most ``CHUNK`` checks, ``PARALLEL`` at a time per HTTP
request, so one large request takes its turn beside the others instead of holding the
decision service for seconds. ``options.evaluations_semantic``: ``execute_all`` (the
default), ``deny_on_first_deny`` (the answers up to and including the first false) or
``permit_on_first_permit`` (up to and including the first true). An evaluation that
cannot be asked is ``{"decision": false, "context": {"error": {"status": 400,
"message"}}}`` in its place; a request that is not one is HTTP 400 with the message;
a decision service that cannot answer is HTTP 503 (500 for an internal error).
``X-Request-ID`` comes back on the response and names the NATS requests in logs.

The metadata's URLs are ``CLEARANCE_GATEWAY_URL``, or else built from the configured
address — never from the request's ``Host``, which its sender chooses.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import msgspec
from aiohttp import web

from clearance_api.errors import BadRequest, Internal, RequestError
from clearance_api.wire import SUBJECT_BATCH, FieldValue, Resource
from clearance_api.wire.limits import MAX_CHECKS, MAX_GROUPS
from clearance_core.kube.resources import cluster_of
from clearance_gateway.upstream import Upstream, json_object, status_of
from clearance_runtime.edges.httpserve import Bounds

ACTIONS = ("view", "view_metrics")
#: Checks in one ``check.batch`` the gateway sends, and such batches in flight per HTTP
#: request: the decision service answers other requests between them.
CHUNK = 100
PARALLEL = 2
#: ``context`` member by which an evaluation accepts a partial decision as ``true``.
OPT_IN = "clearance"
Semantic = Literal["execute_all", "deny_on_first_deny", "permit_on_first_permit"]
REQUEST_ID = "X-Request-ID"
_RESULT_CONTEXT = ("policy", "permissions", "filters", "warnings", "revision")


class SubjectProperties(msgspec.Struct):
    groups: list[str] = []
    email: str | None = None


class Subject(msgspec.Struct):
    type: str
    id: str
    properties: SubjectProperties = msgspec.field(default_factory=SubjectProperties)


class Action(msgspec.Struct):
    name: str


class ResourceProperties(msgspec.Struct):
    cluster: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = {}
    fields: dict[str, FieldValue] = {}


class AuthzenResource(msgspec.Struct):
    type: str
    id: str
    properties: ResourceProperties = msgspec.field(default_factory=ResourceProperties)


class Options(msgspec.Struct):
    evaluations_semantic: Semantic = "execute_all"


class Evaluation(msgspec.Struct):
    subject: Subject | None = None
    action: Action | None = None
    resource: AuthzenResource | None = None
    context: dict[str, Any] | None = None


class Evaluations(Evaluation):
    evaluations: list[dict[str, Any]] | None = None
    options: Options = msgspec.field(default_factory=Options)


class _Ask(msgspec.Struct, frozen=True):
    """One evaluation as Clearance asks it: who, and one check; and whether its PEP
    applies filters (a partial decision may then be true)."""

    principal: dict[str, Any]
    check: dict[str, Any]
    accept_partial: bool = False


class AuthZen:
    def __init__(self, upstream: Upstream, *, public_url: str, bounds: Bounds,
                 max_evaluations: int = 1000) -> None:
        self._upstream = upstream
        self.public_url = public_url.rstrip("/")
        self._bounds = bounds
        self._max_evaluations = min(max_evaluations, MAX_CHECKS)

    async def evaluation(self, request: web.Request) -> web.Response:
        rid = request.headers.get(REQUEST_ID)
        try:
            doc = await json_object(request, self._bounds)
            ask = _ask(_convert(doc, Evaluation))
            (answer,) = await self._answer([ask], rid)
        except RequestError as exc:
            return _failure(exc, rid)
        return _json(answer, rid)

    async def evaluations(self, request: web.Request) -> web.Response:
        rid = request.headers.get(REQUEST_ID)
        try:
            doc = await json_object(request, self._bounds)
            evaluations = doc.get("evaluations")
            # Counted before the request is converted: a refused one costs no more.
            if isinstance(evaluations, list) and len(evaluations) > self._max_evaluations:
                raise BadRequest(f"at most {self._max_evaluations} evaluations per request "
                                 f"(got {len(evaluations)})")
            batch = _convert(doc, Evaluations)
            if not batch.evaluations:  # backwards compatible: one evaluation
                (answer,) = await self._answer([_ask(batch)], rid)
                return _json(answer, rid)
            asks: list[_Ask | BadRequest] = []
            for index, item in enumerate(batch.evaluations):
                try:
                    asks.append(_ask(_with_defaults(batch, item)))
                except BadRequest as exc:
                    asks.append(BadRequest(f"evaluations[{index}]: {exc.message}"))
            answers = await self._answer(asks, rid)
        except RequestError as exc:
            return _failure(exc, rid)
        return _json({"evaluations": _semantic(answers, batch.options.evaluations_semantic)},
                     rid)

    async def metadata(self, request: web.Request) -> web.Response:
        base = self.public_url
        return web.json_response({
            "policy_decision_point": base,
            "access_evaluation_endpoint": f"{base}/access/v1/evaluation",
            "access_evaluations_endpoint": f"{base}/access/v1/evaluations",
        })

    async def _answer(self, asks: list[_Ask | BadRequest],
                      rid: str | None) -> list[dict[str, Any]]:
        """One answer per ask, in order: the asks of each distinct principal in
        check.batch requests of at most ``CHUNK``, ``PARALLEL`` in flight."""
        answers: list[dict[str, Any] | None] = [None] * len(asks)
        by_principal: dict[bytes, list[tuple[int, _Ask]]] = {}
        for index, ask in enumerate(asks):
            if isinstance(ask, BadRequest):
                answers[index] = _error_answer(ask)
            else:
                key = msgspec.json.encode(ask.principal)
                by_principal.setdefault(key, []).append((index, ask))
        chunks = [group[start:start + CHUNK] for group in by_principal.values()
                  for start in range(0, len(group), CHUNK)]
        slots = asyncio.Semaphore(PARALLEL)

        async def answer(chunk: list[tuple[int, _Ask]]) -> list[dict[str, Any]]:
            async with slots:
                return await self._batch([ask for _, ask in chunk], rid)

        tasks = [asyncio.ensure_future(answer(chunk)) for chunk in chunks]
        try:
            replies = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:  # one failed: the request has failed, stop the rest
                task.cancel()
            raise
        for chunk, results in zip(chunks, replies, strict=True):
            for (index, _), result in zip(chunk, results, strict=True):
                answers[index] = result
        return [answer for answer in answers if answer is not None]

    async def _batch(self, asks: list[_Ask], rid: str | None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"principal": asks[0].principal,
                                "checks": [ask.check for ask in asks]}
        if rid is not None:
            body["request_id"] = rid
        try:
            reply = await self._upstream.ask(SUBJECT_BATCH, body)
        except BadRequest as exc:  # about these evaluations only: each says so
            return [_error_answer(exc)] * len(asks)
        results = reply.get("results")
        if not isinstance(results, list) or len(results) != len(asks):
            raise Internal("the decision service answered another number of checks")
        revision = reply.get("revision")
        return [_decision({"revision": revision, **result}, ask.accept_partial)
                for ask, result in zip(asks, results, strict=True)]


def _convert(doc: dict[str, Any], kind: type[Any]) -> Any:
    try:
        return msgspec.convert(doc, kind)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid request: {exc}") from None


def _with_defaults(defaults: Evaluations, item: Any) -> Evaluation:
    """An evaluation's own subject, action, resource and context, else the request's."""
    if not isinstance(item, dict):
        raise BadRequest("an evaluation is a JSON object")
    own = _convert(item, Evaluation)
    return Evaluation(subject=own.subject or defaults.subject,
                      action=own.action or defaults.action,
                      resource=own.resource or defaults.resource,
                      context=own.context if own.context is not None else defaults.context)


def _ask(evaluation: Evaluation) -> _Ask:
    subject, action, resource = evaluation.subject, evaluation.action, evaluation.resource
    if subject is None or action is None or resource is None:
        raise BadRequest("an evaluation needs a subject, an action and a resource")
    if subject.type != "user":
        raise BadRequest(f"subject type {subject.type!r}: Clearance decides for type 'user'")
    if action.name not in ACTIONS:
        raise BadRequest(f"action {action.name!r}: Clearance's actions are "
                         f"{', '.join(ACTIONS)}")
    if len(subject.properties.groups) > MAX_GROUPS:
        raise BadRequest(f"at most {MAX_GROUPS} groups per subject")
    props = resource.properties
    target = Resource(type=resource.type, name=resource.id, cluster=props.cluster,
                      namespace=props.namespace, labels=props.labels, fields=props.fields)
    cluster_of(target)  # the check the decision service makes, per evaluation here
    principal: dict[str, Any] = {"username": subject.id, "groups": subject.properties.groups}
    if subject.properties.email is not None:
        principal["email"] = subject.properties.email
    return _Ask(principal=principal,
                check={"action": action.name, "resource": msgspec.to_builtins(target)},
                accept_partial=_accepts_partial(evaluation.context))


def _accepts_partial(context: dict[str, Any] | None) -> bool:
    """Whether the evaluation's PEP said it applies filters: exactly
    ``{"clearance": {"accept_partial": true}}`` in its context (anything else: no)."""
    own = (context or {}).get(OPT_IN)
    return isinstance(own, dict) and own.get("accept_partial") is True


def _decision(result: dict[str, Any], accept_partial: bool) -> dict[str, Any]:
    """AuthZEN's answer to one check: true for an allow, and for a partial only where
    the PEP accepts one (it must then apply ``context.filters``)."""
    outcome = result.get("decision")
    context = {"reason": result.get("reason", ""), "outcome": outcome}
    context.update({key: result[key] for key in _RESULT_CONTEXT if key in result})
    allowed = result.get("allowed") is True and (
        outcome == "allow" or (outcome == "partial" and accept_partial))
    return {"decision": allowed, "context": context}


def _error_answer(exc: RequestError) -> dict[str, Any]:
    return {"decision": False,
            "context": {"error": {"status": status_of(exc), "message": exc.message}}}


def _semantic(answers: list[dict[str, Any]], semantic: Semantic) -> list[dict[str, Any]]:
    """The answers the semantic returns: all, or up to the first that decides it."""
    stop = {"deny_on_first_deny": False, "permit_on_first_permit": True}.get(semantic)
    if stop is None:
        return answers
    for index, answer in enumerate(answers):
        if answer["decision"] is stop:
            return answers[:index + 1]
    return answers


def _json(body: dict[str, Any], rid: str | None) -> web.Response:
    return web.json_response(body, headers={REQUEST_ID: rid} if rid is not None else None)


def _failure(exc: RequestError, rid: str | None) -> web.Response:
    """A whole-request error: the status and the message, as AuthZEN's HTTPS binding."""
    return web.Response(status=status_of(exc), text=exc.message,
                        headers={REQUEST_ID: rid} if rid is not None else None)
