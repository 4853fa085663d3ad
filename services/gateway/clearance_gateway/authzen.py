"""AuthZEN Authorization API 1.0 (OpenID): ``POST /access/v1/evaluation``,
``POST /access/v1/evaluations`` and ``GET /.well-known/authzen-configuration``.

Clearance's types in AuthZEN's shapes, answered by ``clearance.v1.check.batch``:

* subject ``{"type": "user", "id": username, "properties": {"groups", "email"}}``
  (other properties are ignored; other types are refused);
* action ``{"name": "view" | "view_metrics"}``;
* resource ``{"type", "id": name, "properties": {"cluster", "namespace", "labels",
  "fields"}}`` — a Clearance resource, ``id`` its name (``"*"``: any);
* the answer ``{"decision": allowed, "context": {"reason", "outcome", "policy",
  "permissions", "filters", "revision"}}``: ``decision`` is true for Clearance's
  ``allow`` and ``partial`` (``outcome`` says which, ``filters`` what a partial hides).

An evaluations request takes the top-level subject, action, resource and context as
defaults for each of its ``evaluations``; evaluations for one subject go in one
``check.batch``. ``options.evaluations_semantic``: ``execute_all`` (the default),
``deny_on_first_deny`` (the answers up to and including the first false) or
``permit_on_first_permit`` (up to and including the first true). An evaluation that
cannot be asked is ``{"decision": false, "context": {"error": {"status": 400,
"message"}}}`` in its place; a request that is not one is HTTP 400 with the message;
a decision service that cannot answer is HTTP 503 (500 for an internal error).
``X-Request-ID`` comes back on the response and names the NATS requests in logs.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import msgspec
from aiohttp import web

from clearance_core.errors import BadRequest, Internal, RequestError
from clearance_core.resources import cluster_of
from clearance_core.wire import SUBJECT_BATCH, FieldValue, Resource
from clearance_core.wire.limits import MAX_CHECKS, MAX_GROUPS
from clearance_gateway.upstream import Upstream, json_object, status_of

ACTIONS = ("view", "view_metrics")
Semantic = Literal["execute_all", "deny_on_first_deny", "permit_on_first_permit"]
REQUEST_ID = "X-Request-ID"
_RESULT_CONTEXT = ("policy", "permissions", "filters", "revision")


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
    """One evaluation as Clearance asks it: who, and one check."""

    principal: dict[str, Any]
    check: dict[str, Any]


class AuthZen:
    def __init__(self, upstream: Upstream, *, public_url: str = "") -> None:
        self._upstream = upstream
        self._public_url = public_url.rstrip("/")

    async def evaluation(self, request: web.Request) -> web.Response:
        rid = request.headers.get(REQUEST_ID)
        try:
            doc = await json_object(request)
            ask = _ask(_convert(doc, Evaluation))
            (answer,) = await self._answer([ask], rid)
        except RequestError as exc:
            return _failure(exc, rid)
        return _json(answer, rid)

    async def evaluations(self, request: web.Request) -> web.Response:
        rid = request.headers.get(REQUEST_ID)
        try:
            doc = await json_object(request)
            batch = _convert(doc, Evaluations)
            if not batch.evaluations:  # backwards compatible: one evaluation
                (answer,) = await self._answer([_ask(batch)], rid)
                return _json(answer, rid)
            if len(batch.evaluations) > MAX_CHECKS:
                raise BadRequest(f"at most {MAX_CHECKS} evaluations per request")
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
        base = self._public_url or f"{request.scheme}://{request.host}"
        return web.json_response({
            "policy_decision_point": base,
            "access_evaluation_endpoint": f"{base}/access/v1/evaluation",
            "access_evaluations_endpoint": f"{base}/access/v1/evaluations",
        })

    async def _answer(self, asks: list[_Ask | BadRequest],
                      rid: str | None) -> list[dict[str, Any]]:
        """One answer per ask, in order: one check.batch per distinct principal."""
        answers: list[dict[str, Any] | None] = [None] * len(asks)
        by_principal: dict[bytes, list[tuple[int, _Ask]]] = {}
        for index, ask in enumerate(asks):
            if isinstance(ask, BadRequest):
                answers[index] = _error_answer(ask)
            else:
                key = msgspec.json.encode(ask.principal)
                by_principal.setdefault(key, []).append((index, ask))
        groups = list(by_principal.values())
        replies = await asyncio.gather(*(self._batch(
            [ask for _, ask in group], rid) for group in groups))
        for group, results in zip(groups, replies, strict=True):
            for (index, _), result in zip(group, results, strict=True):
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
        return [_decision({"revision": revision, **result}) for result in results]


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
                check={"action": action.name, "resource": msgspec.to_builtins(target)})


def _decision(result: dict[str, Any]) -> dict[str, Any]:
    context = {"reason": result.get("reason", ""), "outcome": result.get("decision")}
    context.update({key: result[key] for key in _RESULT_CONTEXT if key in result})
    return {"decision": result.get("allowed") is True, "context": context}


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
