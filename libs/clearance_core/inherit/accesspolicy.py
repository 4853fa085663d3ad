"""AccessPolicy (clearance.io/v1alpha1): schema, validation, compilation (README: Inherited).

``compile_access_policy`` turns the Kubernetes object into a
:class:`CompiledAccessPolicy` or raises :class:`~clearance_api.errors.InvalidObject`;
nothing is ever half compiled. The object's fields follow the shared conventions of
:mod:`clearance_core.kube.objects`: ``null`` is absent (so ``strategy: null`` is ``atomic`` and
``effect: null`` is ``Allow``), scalars in string lists compare in their JSON form,
``creationTimestamp`` is strict RFC 3339, integers are 64-bit and nesting is bounded.

Choices the contract leaves open:

* ``targetRef.name`` is required for every kind (the Fleet's must be ``fleet``);
  ``targetRef.cluster`` is required for a Namespace and refused for the other kinds, so a
  Namespace written with ``kind: Cluster`` is reported instead of targeting a cluster.
* An empty ``rules: {}`` beside ``defaults``/``overrides`` contributes nothing and is not
  counted as the other kind of policy; non-empty bare rules beside a block are invalid.
* A policy with no rules anywhere is valid (it may only ``unset``).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from clearance_api.errors import InvalidObject
from clearance_core.inherit import conditions
from clearance_core.inherit.hierarchy import FLEET_NAME, KINDS, LEVEL, Target
from clearance_core.kube import objects, strict
from clearance_core.monitor.filters import ResourceFilter, compile_filter

Effect = Literal["Allow", "Deny"]
Strategy = Literal["atomic", "merge"]
BlockKind = Literal["defaults", "overrides", "rules"]
API_VERSION = "clearance.io/v1alpha1"
MAX_RULES = 1000  # rules in one block: an effective policy is a product of these


class AccessRule(msgspec.Struct, frozen=True, kw_only=True):
    """One named rule, compiled; ``raw`` is the rule as written (nulls pruned), which is
    what ``self.rules`` holds in ``when`` conditions and what ``effective`` replies show."""

    effect: Effect = "Allow"
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()  # system:serviceaccount:<ns>:<name>
    permissions: tuple[str, ...] = ("view",)
    filters: tuple[ResourceFilter, ...] = ()
    raw: dict[str, Any] = {}


class Block(msgspec.Struct, frozen=True, kw_only=True):
    """A ``defaults`` or ``overrides`` block, or bare ``rules`` (an atomic default)."""

    kind: BlockKind
    strategy: Strategy = "atomic"
    when: str | None = None
    rules: dict[str, AccessRule] = {}


class CompiledAccessPolicy(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    target: Target
    #: ``metadata.creationTimestamp`` as POSIX seconds; None (missing) counts as newest.
    created: float | None = None
    #: Applied in this order: bare rules, or defaults then overrides.
    blocks: tuple[Block, ...] = ()
    unset: tuple[str, ...] = ()
    hash: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def precedence(self) -> tuple[int, float, str]:
        """Ascending = highest first: the higher level, then the older creation time
        (missing = newest), then ``namespace/name`` ascending."""
        created = self.created if self.created is not None else float("inf")
        return (LEVEL[self.target.kind], created, self.key)

    def rule_names(self) -> list[str]:
        """Every rule name the policy sets, in spec order, each once."""
        return list(dict.fromkeys(name for block in self.blocks for name in block.rules))

    def block_of(self, rule_name: str) -> BlockKind | None:
        """The last block naming the rule (an override of its own default wins)."""
        found: BlockKind | None = None
        for block in self.blocks:
            if rule_name in block.rules:
                found = block.kind
        return found


# Compilation -----------------------------------------------------------------------------


def _object(value: Any, where: str) -> dict[str, Any]:
    return objects.mapping(value, where)


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidObject(f"{where} must be a non-empty string")
    return value


def compile_target(raw: Any) -> Target:
    ref = _object(raw, "spec.targetRef")
    if not ref:
        raise InvalidObject("spec.targetRef is required")
    kind = ref.get("kind")
    if kind not in KINDS:
        raise InvalidObject(
            f"spec.targetRef.kind must be one of {', '.join(KINDS)}, not "
            f"{objects.scalar_text(kind) or 'a non-string'}")
    name = _name(ref.get("name"), "spec.targetRef.name")
    cluster = ref.get("cluster")
    if kind == "Fleet" and name != FLEET_NAME:
        raise InvalidObject(f"spec.targetRef.name of the Fleet must be {FLEET_NAME!r}")
    if kind == "Namespace":
        return Target(kind="Namespace", name=name,
                      cluster=_name(cluster, "spec.targetRef.cluster"))
    if cluster is not None:
        raise InvalidObject(
            f"spec.targetRef.cluster is only for kind Namespace, not {kind}")
    return Target(kind=kind, name=name)


def service_account_username(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def _subjects(raw: Any, where: str) -> tuple[tuple[str, ...], ...]:
    subjects = _object(raw, where)
    users = objects.texts(subjects.get("users"), f"{where}.users")
    groups = objects.texts(subjects.get("groups"), f"{where}.groups")
    accounts = []
    entries = subjects.get("serviceAccounts")
    if entries is not None and not isinstance(entries, list):
        raise InvalidObject(f"{where}.serviceAccounts must be a list")
    for index, entry in enumerate(entries or ()):
        at = f"{where}.serviceAccounts[{index}]"
        account = _object(entry, at)
        name = objects.text(account.get("name"), f"{at}.name") \
            if account.get("name") is not None else ""
        if not name:
            raise InvalidObject(f"{at}.name is required")
        namespace = account.get("namespace")
        # The namespace defaults to ``default``, as in MonitorAccessPolicy (README: Principals).
        namespace = objects.text(namespace, f"{at}.namespace") if namespace is not None \
            else "default"
        accounts.append(service_account_username(namespace or "default", name))
    return (tuple(dict.fromkeys(users)), tuple(dict.fromkeys(groups)),
            tuple(dict.fromkeys(accounts)))


def _permissions(raw: Any, where: str) -> tuple[str, ...]:
    permissions = _object(raw, where)
    view, metrics = permissions.get("view"), permissions.get("viewMetrics")
    for key, value in (("view", view), ("viewMetrics", metrics)):
        if value is not None and not isinstance(value, bool):
            raise InvalidObject(f"{where}.{key} must be a boolean")
    # No permissions (absent, or nothing set) grants view only (README: Principals).
    if view is None and metrics is None:
        return ("view",)
    return tuple(action for action, granted in (("view", view), ("view_metrics", metrics))
                 if granted)


def compile_rule(raw: Any, where: str) -> AccessRule:
    rule = _object(raw, where)
    effect = rule.get("effect", "Allow")
    if effect not in ("Allow", "Deny"):
        raise InvalidObject(f"{where}.effect must be Allow or Deny")
    users, groups, accounts = _subjects(rule.get("subjects"), f"{where}.subjects")
    resources = rule.get("resources")
    if resources is not None and not isinstance(resources, list):
        raise InvalidObject(f"{where}.resources must be a list of resource filters")
    filters = tuple(compile_filter(entry, f"{where}.resources[{index}]")
                    for index, entry in enumerate(resources or ()))
    return AccessRule(effect=effect, users=users, groups=groups, service_accounts=accounts,
                      permissions=_permissions(rule.get("permissions"),
                                               f"{where}.permissions"),
                      filters=filters, raw=rule)


def _rules(raw: Any, where: str) -> dict[str, AccessRule]:
    rules = _object(raw, where)
    if len(rules) > MAX_RULES:
        raise InvalidObject(f"{where} has {len(rules)} rules, the limit is {MAX_RULES}")
    compiled = {}
    for name, rule in rules.items():
        if not isinstance(name, str) or not name:
            raise InvalidObject(f"{where}: rule names must be non-empty strings")
        compiled[name] = compile_rule(rule, f"{where}.{name}")
    return compiled


def _block(raw: Any, kind: BlockKind) -> Block:
    where = f"spec.{kind}"
    block = _object(raw, where)
    strategy = block.get("strategy", "atomic")  # omitted (or null) means atomic
    if strategy not in ("atomic", "merge"):
        raise InvalidObject(f"{where}.strategy must be atomic or merge")
    when = block.get("when")
    if when is not None:
        if not isinstance(when, str):
            raise InvalidObject(f"{where}.when must be a CEL expression (a string)")
        conditions.check(when, f"{where}.when")
    return Block(kind=kind, strategy=strategy, when=when,
                 rules=_rules(block.get("rules"), f"{where}.rules"))


def _identity(obj: Any) -> tuple[str, str, float | None]:
    if not isinstance(obj, dict):
        raise InvalidObject("an AccessPolicy must be an object")
    meta = _object(obj.get("metadata"), "metadata")
    name = _name(meta.get("name"), "metadata.name")
    namespace = meta.get("namespace") or ""
    if not isinstance(namespace, str):
        raise InvalidObject("metadata.namespace must be a string")
    stamp = meta.get("creationTimestamp")
    created = None if stamp is None else objects.rfc3339(stamp, "metadata.creationTimestamp")
    return namespace, name, created


def compile_access_policy(obj: Any) -> CompiledAccessPolicy:
    """Validate and compile an AccessPolicy object. Raises InvalidObject (only)."""
    namespace, name, created = _identity(obj)
    spec = objects.prune(obj.get("spec"), "spec")  # the limits first
    strict.check_object("accesspolicy", obj)
    if not isinstance(spec, dict):
        raise InvalidObject("spec is required (an object)")
    target = compile_target(spec.get("targetRef"))
    bare = _rules(spec.get("rules"), "spec.rules")
    has_blocks = spec.get("defaults") is not None or spec.get("overrides") is not None
    if bare and has_blocks:
        raise InvalidObject(
            "spec has both bare rules and defaults/overrides blocks: use one or the other")
    if has_blocks:
        blocks = tuple(_block(spec[kind], kind) for kind in ("defaults", "overrides")
                       if spec.get(kind) is not None)
    else:
        blocks = (Block(kind="rules", rules=bare),)  # bare rules: an atomic default
    unset = tuple(dict.fromkeys(objects.texts(spec.get("unset"), "spec.unset")))
    return CompiledAccessPolicy(namespace=namespace, name=name, target=target,
                                created=created, blocks=blocks, unset=unset,
                                hash=objects.spec_hash(spec))


def aimed_at(obj: Any) -> Target | None:
    """The target an object's ``spec.targetRef`` names, if it reads — an invalid policy's
    too, so that ``effective`` lists it where it was aimed (None: it names none)."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return None
    try:
        return compile_target(spec.get("targetRef"))
    except InvalidObject:
        return None


def policy_key(obj: Any) -> str | None:
    """``namespace/name`` of an object, or None when its metadata cannot say."""
    try:
        namespace, name, _ = _identity(obj)
    except InvalidObject:
        try:  # a bad timestamp still leaves a usable name
            meta = obj["metadata"]
            return f"{meta.get('namespace') or ''}/{_name(meta.get('name'), 'name')}"
        except (InvalidObject, KeyError, TypeError, AttributeError):
            return None
    return f"{namespace}/{name}"
