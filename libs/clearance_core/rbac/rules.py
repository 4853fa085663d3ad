"""Kubernetes RBAC objects and rule matchers, evaluated exactly as the API server does.

README: RBAC reviews answers SubjectAccessReviews, rules reviews and who-can queries from
the Roles, ClusterRoles and bindings on the event stream, so every matcher here is a
transcription of Kubernetes' own (``pkg/apis/rbac/v1/evaluation_helpers.go`` and
``pkg/registry/rbac/validation/rule.go``). The surprising parts are deliberate:

* ``"*"`` in ``resources`` covers subresources too, but ``pods`` does not cover
  ``pods/log``, ``*/scale`` covers any resource's ``scale`` and ``pods/*`` is literal;
* a rule with ``resourceNames`` never allows a request without a name (list, create);
* a trailing ``*`` in a non-resource URL is a prefix match; ``*`` elsewhere is literal.

Parsing is strict about shapes (:class:`~clearance_api.errors.InvalidObject`) but not
about the API server's validation rules: any producer may append to the stream, and the
authorizer evaluates a rule that mixes resources and URLs rather than rejecting it.
The index that answers the questions lives in :mod:`clearance_core.rbac.index`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, NamedTuple, TypeAlias, TypeVar

import msgspec

from clearance_api.errors import InvalidObject
from clearance_core.kube import objects, strict
from clearance_core.kube.principal import SA_PREFIX

API_GROUP = "rbac.authorization.k8s.io"
API_VERSION = f"{API_GROUP}/v1"


class ResourceAttributes(msgspec.Struct, frozen=True, kw_only=True):
    """A resource request; field names are those of SubjectAccessReview's resourceAttributes."""

    verb: str
    resource: str
    group: str = ""
    version: str = ""  # never consulted by RBAC, kept so a SAR decodes as sent
    subresource: str = ""
    name: str = ""
    namespace: str = ""


class NonResourceAttributes(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    verb: str


Attributes: TypeAlias = ResourceAttributes | NonResourceAttributes


class PolicyRule(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename={
        "api_groups": "apiGroups",
        "resource_names": "resourceNames",
        "non_resource_urls": "nonResourceURLs",
    },
):
    """One rule as stored: order and duplicates inside each list are kept."""

    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    def allows(self, attrs: Attributes) -> bool:
        """Kubernetes ``RuleAllows``: no other attribute (version, selectors) is consulted."""
        if not verb_matches(self, attrs.verb):
            return False
        if isinstance(attrs, NonResourceAttributes):
            return non_resource_url_matches(self, attrs.path)
        combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        return (
            api_group_matches(self, attrs.group)
            and resource_matches(self, combined, attrs.subresource)
            and resource_name_matches(self, attrs.name)
        )

    def as_stored(self) -> dict[str, Any]:
        """The PolicyRule JSON (``verbs`` always, the other lists when non-empty)."""
        return self._json(
            ("apiGroups", self.api_groups),
            ("resources", self.resources),
            ("resourceNames", self.resource_names),
            ("nonResourceURLs", self.non_resource_urls),
        )

    def resource_rule(self) -> dict[str, Any]:
        """The SelfSubjectRulesReview ResourceRule for this rule (omitempty like the API)."""
        return self._json(
            ("apiGroups", self.api_groups),
            ("resources", self.resources),
            ("resourceNames", self.resource_names),
        )

    def non_resource_rule(self) -> dict[str, Any]:
        return self._json(("nonResourceURLs", self.non_resource_urls))

    def _json(self, *fields: tuple[str, tuple[str, ...]]) -> dict[str, Any]:
        out: dict[str, Any] = {"verbs": list(self.verbs)}  # verbs is not omitempty
        out.update((key, list(value)) for key, value in fields if value)
        return out


# The matchers, one per Go function in evaluation_helpers.go, same names.


def verb_matches(rule: PolicyRule, verb: str) -> bool:
    return "*" in rule.verbs or verb in rule.verbs


def api_group_matches(rule: PolicyRule, group: str) -> bool:
    return "*" in rule.api_groups or group in rule.api_groups


def resource_matches(rule: PolicyRule, combined: str, subresource: str) -> bool:
    if "*" in rule.resources or combined in rule.resources:
        return True
    # Go spells this len(r)==len(sub)+2 && HasPrefix(r,"*/") && HasSuffix(r,sub).
    return bool(subresource) and f"*/{subresource}" in rule.resources


def resource_name_matches(rule: PolicyRule, name: str) -> bool:
    return not rule.resource_names or name in rule.resource_names


def non_resource_url_matches(rule: PolicyRule, path: str) -> bool:
    for url in rule.non_resource_urls:
        if url in ("*", path):
            return True
        # TrimRight strips every trailing '*': "/apis/*" matches "/apis/" and below.
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


# Label selectors for aggregationRule.clusterRoleSelectors (metav1.LabelSelector).


class Requirement(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":  # an absent key satisfies NotIn, as in Kubernetes
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None


class LabelSelector(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``matchLabels`` AND ``matchExpressions``; the empty selector selects everything."""

    match_labels: dict[str, str] = {}
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            req.matches(labels) for req in self.match_expressions
        )


class RoleKey(NamedTuple):
    """How a binding names a role: kind, namespace ("" for ClusterRoles), name."""

    kind: str
    namespace: str
    name: str


RoleKind = Literal["Role", "ClusterRole"]
BindingKind = Literal["RoleBinding", "ClusterRoleBinding"]
#: The four kinds, by their token on the event stream (``ObjectRef.kind``).
KINDS: dict[str, RoleKind | BindingKind] = {
    "role": "Role", "clusterrole": "ClusterRole",
    "rolebinding": "RoleBinding", "clusterrolebinding": "ClusterRoleBinding"}


def object_key(kind: str, namespace: str, name: str) -> str:
    """The one key of a Role, ClusterRole or binding wherever it is kept (the store, its
    change log, the compiler's model): ``Kind/namespace/name``. A cluster-scoped kind has
    no namespace whatever its metadata says, as parsing ignores it too. ``%`` and ``/`` in
    the namespace (never in a Kubernetes one) are escaped, so no two objects share a key."""
    if kind not in ("Role", "RoleBinding"):
        namespace = ""
    return f"{kind}/{namespace.replace('%', '%25').replace('/', '%2F')}/{name}"


def is_role_key(key: str) -> bool:
    """Whether an :func:`object_key` names a Role or ClusterRole (else a binding)."""
    return key.startswith(("Role/", "ClusterRole/"))


class Role(msgspec.Struct, frozen=True, kw_only=True):
    """A Role (namespaced) or a ClusterRole; ``aggregation`` is None unless aggregated."""

    kind: RoleKind
    name: str
    namespace: str = ""
    labels: dict[str, str] = {}
    rules: tuple[PolicyRule, ...] = ()
    aggregation: tuple[LabelSelector, ...] | None = None

    @property
    def key(self) -> RoleKey:
        return RoleKey(self.kind, self.namespace, self.name)


_Name = Annotated[str, msgspec.Meta(min_length=1)]


class Subject(msgspec.Struct, frozen=True, kw_only=True):
    kind: Literal["User", "Group", "ServiceAccount"]
    name: _Name
    namespace: str = ""


class RoleRef(msgspec.Struct, frozen=True, kw_only=True):
    kind: RoleKind
    name: _Name


class Binding(msgspec.Struct, frozen=True, kw_only=True):
    kind: BindingKind
    name: str
    namespace: str = ""
    role_ref: RoleRef
    subjects: tuple[Subject, ...] = ()

    @property
    def role_key(self) -> RoleKey:
        """A ``Role`` reference is looked up in the binding's own namespace."""
        namespace = self.namespace if self.role_ref.kind == "Role" else ""
        return RoleKey(self.role_ref.kind, namespace, self.role_ref.name)

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def subject_key(subject: Subject, binding_namespace: str) -> tuple[bool, str] | None:
    """(is_group, name) the subject matches; None when it matches nobody.

    A ServiceAccount without a namespace takes the binding's; in a ClusterRoleBinding
    (no namespace) it matches nobody, like ``appliesToUser``.
    """
    if subject.kind == "User":
        return False, subject.name
    if subject.kind == "Group":
        return True, subject.name
    namespace = subject.namespace or binding_namespace
    if not namespace:
        return None
    return False, f"{SA_PREFIX}{namespace}:{subject.name}"


def binding_subjects(binding: Binding) -> tuple[list[str], list[str]]:
    """Sorted (users, groups) a binding names; service accounts as their usernames."""
    users: set[str] = set()
    groups: set[str] = set()
    for subject in binding.subjects:
        key = subject_key(subject, binding.namespace)
        if key is not None:
            (groups if key[0] else users).add(key[1])
    return sorted(users), sorted(groups)


def describe_subject(subject: Subject, binding_namespace: str) -> str:
    """Kubernetes' ``describeSubject``: service accounts print as ``name/namespace``."""
    if subject.kind == "ServiceAccount":
        return f'ServiceAccount "{subject.name}/{subject.namespace or binding_namespace}"'
    return f'{subject.kind} "{subject.name}"'


# Parsing Kubernetes objects.

_T = TypeVar("_T")


def _convert(value: Any, typ: type[_T], where: str) -> _T:
    # Every leaf of these kinds is a string: nulls are absent and other scalars compare in
    # their JSON form (objects.prune), like every kind Clearance reads.
    try:
        return msgspec.convert(objects.prune(value, where, as_text=True), typ)
    except msgspec.ValidationError as exc:
        raise InvalidObject(f"{where}: {exc}") from None


def _header(obj: Any, kinds: tuple[str, str]) -> tuple[bool, str, str, dict[str, Any]]:
    """Whether the object is of the cluster-scoped kind (``kinds[1]``), its namespace ("" for
    that kind), name and metadata."""
    if not isinstance(obj, dict):
        raise InvalidObject("object must be a JSON object")
    kind = obj.get("kind")
    if kind not in kinds:
        raise InvalidObject(f"kind must be {kinds[0]} or {kinds[1]}, not {kind!r}")
    if obj.get("apiVersion", API_VERSION) != API_VERSION:
        raise InvalidObject(f"apiVersion must be {API_VERSION}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise InvalidObject("metadata is required")
    name, namespace = meta.get("name"), meta.get("namespace") or ""
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        raise InvalidObject("metadata.name (and metadata.namespace, if any) must be strings")
    if kind == kinds[0] and not namespace:
        raise InvalidObject(f"a {kind} needs metadata.namespace")
    strict.check_object(kind.lower(), obj)
    return kind == kinds[1], namespace if kind == kinds[0] else "", name, meta


def parse_role(obj: Any) -> Role:
    """A Role or ClusterRole object as a :class:`Role`. Raises InvalidObject."""
    cluster_scoped, namespace, name, meta = _header(obj, ("Role", "ClusterRole"))
    kind: RoleKind = "ClusterRole" if cluster_scoped else "Role"
    labels = _convert(meta.get("labels") or {}, dict[str, str], "metadata.labels")
    rules = _convert(obj.get("rules") or [], tuple[PolicyRule, ...], "rules")
    aggregation: tuple[LabelSelector, ...] | None = None
    raw_aggregation = obj.get("aggregationRule") if kind == "ClusterRole" else None
    if raw_aggregation is not None:
        if not isinstance(raw_aggregation, dict):
            raise InvalidObject("aggregationRule must be an object")
        aggregation = _convert(
            raw_aggregation.get("clusterRoleSelectors") or [],
            tuple[LabelSelector, ...],
            "aggregationRule.clusterRoleSelectors",
        )
        for i, selector in enumerate(aggregation):
            for j, req in enumerate(selector.match_expressions):
                # The same checks as metav1.LabelSelectorAsSelector, which would fail.
                if (req.operator in ("In", "NotIn")) != bool(req.values):
                    raise InvalidObject(
                        f"aggregationRule.clusterRoleSelectors[{i}].matchExpressions[{j}]: "
                        f"{req.operator} {'needs' if not req.values else 'takes no'} values"
                    )
    return Role(
        kind=kind,
        name=name, namespace=namespace, labels=labels, rules=rules, aggregation=aggregation,
    )


def parse_binding(obj: Any) -> Binding:
    """A RoleBinding or ClusterRoleBinding object as a :class:`Binding`. Raises InvalidObject."""
    cluster_scoped, namespace, name, _ = _header(obj, ("RoleBinding", "ClusterRoleBinding"))
    kind: BindingKind = "ClusterRoleBinding" if cluster_scoped else "RoleBinding"
    if obj.get("roleRef") is None:
        raise InvalidObject("roleRef is required")
    role_ref = _convert(obj["roleRef"], RoleRef, "roleRef")
    if kind == "ClusterRoleBinding" and role_ref.kind != "ClusterRole":
        raise InvalidObject("a ClusterRoleBinding can only reference a ClusterRole")
    subjects = _convert(obj.get("subjects") or [], tuple[Subject, ...], "subjects")
    return Binding(
        kind=kind,
        name=name, namespace=namespace, role_ref=role_ref, subjects=subjects,
    )
