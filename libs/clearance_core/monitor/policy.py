"""MonitorAccessPolicy (clusterpulse.io/v1alpha1): schema, validation, compilation.

``compile_policy`` turns the Kubernetes object into a :class:`CompiledPolicy` or raises
:class:`~clearance_api.errors.InvalidObject`; there is no partially compiled policy.
The compiled form is what the compiler stores and the decision service evaluates:
wildcards are translated and combined, ``matchPattern`` is checked, times are parsed,
and subjects are flattened into the three index keys (users, groups, service accounts).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import msgspec

from clearance_api.errors import InvalidObject
from clearance_api.wire import Action
from clearance_core.kube import objects, strict
from clearance_core.kube.objects import Text
from clearance_core.monitor import patterns
from clearance_core.monitor.filters import BUILTIN_TYPES, ResourceFilter, compile_filter
from clearance_core.monitor.wildcard import NameSet

Effect = Literal["Allow", "Deny"]
DEFAULT_PRIORITY = 100  # the CRD's default when the API server has not defaulted it


# Schema, as written by users (camelCase). Unknown fields never reach these Structs:
# ``strict`` refuses them first, with their path.


class _ServiceAccount(msgspec.Struct, kw_only=True):
    name: Text
    namespace: Text = Text("default")


class _Subjects(msgspec.Struct, kw_only=True, rename="camel"):
    users: list[Text] = []
    groups: list[Text] = []
    service_accounts: list[_ServiceAccount] = []


class _Identity(msgspec.Struct, kw_only=True):
    priority: int = DEFAULT_PRIORITY
    subjects: _Subjects = msgspec.field(default_factory=_Subjects)


class _Access(msgspec.Struct, kw_only=True):
    effect: Effect
    enabled: bool = True


class _Selector(msgspec.Struct, kw_only=True, rename="camel"):
    match_names: list[Text] | None = None
    match_pattern: Text | None = None
    match_labels: dict[str, Text] | None = None


class _Permissions(msgspec.Struct, kw_only=True, rename="camel"):
    view: bool | None = None
    view_metrics: bool | None = None


class _Rule(msgspec.Struct, kw_only=True):
    selector: _Selector = msgspec.field(default_factory=_Selector)
    permissions: _Permissions | None = None
    resources: list[dict[str, Any]] = []


class _Clusters(msgspec.Struct, kw_only=True):
    default: Literal["all", "allow", "none", "deny", "filtered"] = "none"
    rules: list[_Rule] = []


class _Scope(msgspec.Struct, kw_only=True):
    clusters: _Clusters = msgspec.field(default_factory=_Clusters)


class _Validity(msgspec.Struct, kw_only=True, rename="camel"):
    not_before: str | None = None
    not_after: str | None = None


class _Lifecycle(msgspec.Struct, kw_only=True):
    validity: _Validity = msgspec.field(default_factory=_Validity)


class _Spec(msgspec.Struct, kw_only=True):
    identity: _Identity
    access: _Access
    scope: _Scope = msgspec.field(default_factory=_Scope)
    lifecycle: _Lifecycle = msgspec.field(default_factory=_Lifecycle)


# Compiled form ------------------------------------------------------------------------
# Selectors and rules are not tracked by the cyclic collector (gc=False): immutable
# values that cannot form a cycle, of which a fleet holds tens of thousands
# (clearance_runtime.process.heap). CompiledPolicy is tracked: ``dict=True`` requires it.


class CompiledSelector(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    names: NameSet | None = None
    pattern: str | None = None
    labels: dict[str, str] | None = None


class CompiledRule(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    selector: CompiledSelector
    permissions: tuple[Action, ...]
    filters: tuple[ResourceFilter, ...] = ()


class CompiledPolicy(msgspec.Struct, kw_only=True, frozen=True, dict=True):
    """A policy ready to evaluate. ``valid=False`` records an invalid policy for traces
    and status only: the evaluator never lets it decide."""

    namespace: str
    name: str
    priority: int
    effect: Effect
    enabled: bool
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()
    default_match: bool = False
    rules: tuple[CompiledRule, ...] = ()
    not_before: float | None = None
    not_after: float | None = None
    valid: bool = True
    error: str | None = None
    hash: str = ""
    #: Custom resource types (MetricSource ``resourceTypeName``) its rules mention.
    custom_types: tuple[str, ...] = ()

    @functools.cached_property
    def key(self) -> str:
        # Cached (``dict=True`` gives the frozen Struct a ``__dict__`` for it, outside
        # its encoded fields): a miss reads it about twenty times per check.
        return f"{self.namespace}/{self.name}"

    def sort_key(self) -> tuple[int, int, str]:
        """docs/guide/monitor-access-policies.md order: ascending priority, Deny first, then
        ns/name."""
        return (self.priority, 0 if self.effect == "Deny" else 1, self.key)

    def order(self) -> str:
        """``sort_key`` as one string whose byte order is the evaluation order, for the
        cache invalidator's Lua (numbers there are doubles: a priority above 2**53 would
        compare equal to its neighbours). Priorities fit in 20 digits: they are >= 0 and
        at most 2**63 - 1 (objects.INT_MAX)."""
        return f"{self.priority:020d}{0 if self.effect == 'Deny' else 1}{self.key}"


def service_account_username(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def parse_time(value: str, field: str) -> float:
    """Strict RFC 3339 with an explicit offset; anything else makes the policy invalid."""
    return objects.rfc3339(value, field)


def _compile_selector(selector: _Selector, index: int) -> CompiledSelector:
    pattern = str(selector.match_pattern) if selector.match_pattern else None
    if pattern is not None:
        patterns.check(pattern, f"rules[{index}].selector.matchPattern")
    names = NameSet.of(map(str, selector.match_names)) if selector.match_names else None
    labels = {key: str(value) for key, value in (selector.match_labels or {}).items()}
    return CompiledSelector(
        names=names, pattern=pattern, labels=labels or None
    )


def _compile_permissions(permissions: _Permissions | None) -> tuple[Action, ...]:
    # A rule with no permissions (absent, or nothing set) grants view only.
    if permissions is None or (permissions.view is None and permissions.view_metrics is None):
        return ("view",)
    granted: list[Action] = []
    if permissions.view:
        granted.append("view")
    if permissions.view_metrics:
        granted.append("view_metrics")
    return tuple(granted)


def _compile_filters(resources: list[dict[str, Any]], index: int) -> tuple[ResourceFilter, ...]:
    return tuple(
        compile_filter(entry, f"rules[{index}].resources[{position}]")
        for position, entry in enumerate(resources)
    )


def object_identity(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise InvalidObject("metadata.name is required")
    namespace = meta.get("namespace") or ""
    if not isinstance(namespace, str):
        raise InvalidObject("metadata.namespace must be a string")
    return namespace, meta["name"]


def compile_policy(obj: dict[str, Any]) -> CompiledPolicy:
    """Validate and compile a MonitorAccessPolicy object. Raises InvalidObject."""
    namespace, name = object_identity(obj)
    raw_spec, spec_json = objects.prune_sorted(obj.get("spec"), "spec")  # the limits first
    strict.check_object("monitoraccesspolicy", obj)
    if not isinstance(raw_spec, dict):
        raise InvalidObject("spec is required")
    try:
        spec = msgspec.convert(raw_spec, _Spec, dec_hook=objects.dec_hook)
    except msgspec.ValidationError as exc:
        raise InvalidObject(f"spec: {exc}") from None
    identity = spec.identity
    if identity.priority < 0:
        raise InvalidObject("spec.identity.priority must be an integer >= 0")
    validity = spec.lifecycle.validity
    not_before = (
        parse_time(validity.not_before, "spec.lifecycle.validity.notBefore")
        if validity.not_before
        else None
    )
    not_after = (
        parse_time(validity.not_after, "spec.lifecycle.validity.notAfter")
        if validity.not_after
        else None
    )
    rules = []
    for index, rule in enumerate(spec.scope.clusters.rules):
        rules.append(
            CompiledRule(
                selector=_compile_selector(rule.selector, index),
                permissions=_compile_permissions(rule.permissions),
                filters=_compile_filters(rule.resources, index),
            )
        )
    custom_types = sorted({f.type for r in rules for f in r.filters} - BUILTIN_TYPES)
    subjects = identity.subjects
    return CompiledPolicy(
        namespace=namespace,
        name=name,
        priority=identity.priority,
        effect=spec.access.effect,
        enabled=spec.access.enabled,
        users=tuple(dict.fromkeys(map(str, subjects.users))),
        groups=tuple(dict.fromkeys(map(str, subjects.groups))),
        service_accounts=tuple(
            dict.fromkeys(
                service_account_username(sa.namespace or "default", sa.name)
                for sa in subjects.service_accounts
            )
        ),
        default_match=spec.scope.clusters.default in ("all", "allow"),
        rules=tuple(rules),
        not_before=not_before,
        not_after=not_after,
        hash=objects.json_hash(spec_json),
        custom_types=tuple(custom_types),
    )


def invalid_policy(obj: dict[str, Any], message: str) -> CompiledPolicy | None:
    """The record kept for an invalid policy: its identity and whatever subjects parse,
    so explanations can list it as skipped. ``None`` when not even the name is usable."""
    try:
        namespace, name = object_identity(obj)
    except InvalidObject:
        return None
    try:
        spec = objects.prune(obj.get("spec"), "spec")
    except InvalidObject:
        spec = None  # beyond the size limits: keep only the identity
    if not isinstance(spec, dict):
        spec = {}
    identity = spec.get("identity") if isinstance(spec.get("identity"), dict) else {}
    assert isinstance(identity, dict)
    try:
        subjects = msgspec.convert(identity.get("subjects") or {}, _Subjects,
                                   dec_hook=objects.dec_hook)
    except msgspec.ValidationError:
        subjects = _Subjects()
    priority = identity.get("priority", DEFAULT_PRIORITY)
    access = spec.get("access") if isinstance(spec.get("access"), dict) else {}
    assert isinstance(access, dict)
    effect = access.get("effect")
    return CompiledPolicy(
        namespace=namespace,
        name=name,
        priority=priority if type(priority) is int and priority >= 0 else DEFAULT_PRIORITY,
        effect=effect if effect in ("Allow", "Deny") else "Deny",
        enabled=access.get("enabled", True) is not False,
        users=tuple(map(str, subjects.users)),
        groups=tuple(map(str, subjects.groups)),
        service_accounts=tuple(
            service_account_username(sa.namespace or "default", sa.name)
            for sa in subjects.service_accounts
        ),
        valid=False,
        error=message,
        hash=objects.spec_hash(spec),
    )
