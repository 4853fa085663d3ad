"""Strict field checking (``clearance_core.kube.strict``): an unknown or misspelled field makes
an object invalid with its JSON path and a suggestion, for every kind Clearance reads —
but only in the parts Clearance defines or reads, and never for what Kubernetes itself
accepts. The shapes follow the CRDs in deploy/crds exactly."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.errors import InvalidObject, UnknownFields
from clearance_cli import shapes
from clearance_core.folding.fold import group_users
from clearance_core.folding.folds.bindings import cluster_set_of
from clearance_core.folding.kinds import kind_of
from clearance_core.inherit.accesspolicy import compile_access_policy
from clearance_core.kube import crd_shapes, strict
from clearance_core.monitor.metricsource import compile_source
from clearance_core.monitor.policy import compile_policy
from clearance_core.rbac.rules import parse_binding, parse_role
from tests.unit.accesspolicies import access_policy, block, rule
from tests.unit.policies import policy

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "deploy" / "crds"

#: Each checked kind's compiler: what the compiler (or the RBAC parser) runs first.
COMPILERS: dict[str, Callable[[Any], object]] = {
    "monitoraccesspolicy": compile_policy,
    "accesspolicy": compile_access_policy,
    "metricsource": compile_source,
    "role": parse_role,
    "clusterrole": parse_role,
    "rolebinding": parse_binding,
    "clusterrolebinding": parse_binding,
    "group": group_users,
    "managedclustersetbinding": cluster_set_of,
}


def _examples() -> list[dict[str, Any]]:
    found = []
    for path in sorted((ROOT / "examples").glob("*.yaml")) + sorted(
            (ROOT / "docs" / "rfc0009").glob("*.yaml")):
        found += [doc for doc in yaml.safe_load_all(path.read_text())
                  if isinstance(doc, dict) and "kind" in doc]
    return found


def _built() -> list[dict[str, Any]]:
    """Objects as the unit tests' builders and the Kubernetes API write them."""
    rbac = "rbac.authorization.k8s.io"
    return [
        policy("built", users=["u"], groups=["g"], service_accounts=[{"name": "s"}],
               default="all", not_before="2025-01-01T00:00:00Z", rules=[{
                   "selector": {"matchNames": ["a*"], "matchPattern": "b.*",
                                "matchLabels": {"env": "prod"}},
                   "permissions": {"view": True, "viewMetrics": False},
                   "resources": [{"type": "pvc", "visibility": "filtered", "filters": {
                       "names": {"allowed": ["x"]}, "namespaces": {"denied": ["y"]},
                       "labels": {"tier": "web"}, "fields": {"phase": {"allowed": ["a"]}}},
                       "aggregations": {"include": ["count"], "exclude": ["cost"]}}]}]),
        access_policy("built", defaults=block({"a": rule(users=["u"], view=True)}, "merge",
                                              "true"),
                      overrides=block({"b": rule(groups=["g"], effect="Deny")}), unset=["c"]),
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole",
         "metadata": {"name": "agg", "labels": {"a": "b"}, "resourceVersion": "7",
                      "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:x": {}}}],
                      "ownerReferences": [{"kind": "X", "name": "y", "uid": "1"}]},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"],
                    "resourceNames": ["p"]}, {"nonResourceURLs": ["/x"], "verbs": ["get"]}],
         "aggregationRule": {"clusterRoleSelectors": [{
             "matchLabels": {"a": "b"},
             "matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
         "metadata": {"name": "rb", "namespace": "shop", "annotations": {"a": "b"}},
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "view"},
         "subjects": [{"kind": "Group", "apiGroup": rbac, "name": "dev"},
                      {"kind": "ServiceAccount", "name": "ci", "namespace": "shop"}]},
        {"apiVersion": "user.openshift.io/v1", "kind": "Group",
         "metadata": {"name": "g", "uid": "u"}, "users": ["a"]},
        {"apiVersion": "cluster.open-cluster-management.io/v1beta2",
         "kind": "ManagedClusterSetBinding", "metadata": {"name": "s", "namespace": "n"},
         "spec": {"clusterSet": "s"},
         "status": {"conditions": [{"type": "Bound", "status": "True", "anything": 1}]}},
        {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
         "metadata": {"name": "m", "namespace": "n"},
         "spec": {"source": {"apiVersion": "v1", "kind": "PersistentVolumeClaim"},
                  "fields": [{"name": "phase", "path": ".status.phase"}],
                  "computed": [{"name": "x", "expression": "1"}],
                  "collection": {"intervalSeconds": 60},
                  "rbac": {"resourceTypeName": "pvc", "filterableFields": ["phase"],
                           "filterAggregations": True},
                  "aggregations": [{"name": "n", "function": "count", "groupBy": "phase",
                                    "filter": {"field": "phase", "operator": "in",
                                               "value": ["a", "b"]}},
                                   {"name": "p", "function": "percentile", "field": "x",
                                    "percentile": 90}]},
         "status": {"phase": "Active", "whatever": {"x": 1}}},
    ]


VALID = [obj for obj in _examples() + _built() if kind_of(obj) in COMPILERS]


def compile_(obj: dict[str, Any]) -> object:
    return COMPILERS[kind_of(obj)](obj)


def problems(obj: dict[str, Any]) -> list[str]:
    return [str(p) for p in strict.unknown_fields(strict.SHAPES[kind_of(obj)], obj, "")]


# The shapes are the CRDs' ---------------------------------------------------------------


def test_the_generated_module_is_the_crds_structure() -> None:
    """``clearance schemas`` wrote crd_shapes.py from deploy/crds; it has not drifted."""
    assert (ROOT / "libs/clearance_core/kube/crd_shapes.py").read_text() == shapes.render(CRDS), \
        "run `clearance schemas`"
    assert shapes.structures(CRDS) == crd_shapes.SCHEMAS
    assert set(crd_shapes.SCHEMAS) == {"monitoraccesspolicy", "accesspolicy", "metricsource"}


def _version(name: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / name).read_text())
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def test_an_access_rule_has_one_schema_and_the_monitor_rules_resource_filters() -> None:
    spec = _version("accesspolicies.clearance.io.yaml")["properties"]
    rules = [spec["rules"], spec["defaults"]["properties"]["rules"],
             spec["overrides"]["properties"]["rules"]]
    assert rules[0]["additionalProperties"] == rules[1]["additionalProperties"] \
        == rules[2]["additionalProperties"]
    monitor = _version("monitoraccesspolicies.clusterpulse.io.yaml")["properties"]
    monitor_rule = monitor["scope"]["properties"]["clusters"]["properties"]["rules"]["items"]
    access_rule = rules[0]["additionalProperties"]
    assert strict.structure(access_rule["properties"]["resources"]) == \
        strict.structure(monitor_rule["properties"]["resources"])
    assert strict.structure(access_rule["properties"]["subjects"]) == \
        strict.structure(monitor["identity"]["properties"]["subjects"])


# What is valid stays valid --------------------------------------------------------------


@pytest.mark.parametrize("obj", VALID, ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_every_example_and_every_object_kubernetes_serves_is_valid(obj: dict[str, Any]
                                                                   ) -> None:
    assert problems(obj) == []
    compile_(obj)


def test_metadata_and_status_may_hold_anything() -> None:
    obj = policy()
    obj["metadata"].update(labels={"a": "b"}, annotations={"c": "d"}, generation=3,
                           managedFields=[{"manager": "m", "fieldsV1": {"f:spec": {}}}],
                           finalizers=["x"], whatever={"deep": [1]})
    obj["status"] = {"state": "Active", "conditions": [{"type": "X", "extra": True}], "x": 1}
    assert problems(obj) == []
    compile_policy(obj)


# Unknown fields -------------------------------------------------------------------------


def test_the_issues_typos_are_named_with_their_path_and_what_was_meant() -> None:
    obj = policy(effect="Deny", rules=[{"selector": {"matchName": ["prod-*"]},
                                        "permissions": {"veiw": True}}])
    obj["spec"]["identity"]["priorty"] = 5
    with pytest.raises(UnknownFields) as caught:
        compile_policy(obj)
    assert caught.value.problems == (
        ("spec.identity.priorty", "priority"),
        ("spec.scope.clusters.rules[0].selector.matchName", "matchNames"),
        ("spec.scope.clusters.rules[0].permissions.veiw", "view"))
    assert caught.value.message == (
        'spec.identity.priorty: unknown field (did you mean "priority"?); '
        'spec.scope.clusters.rules[0].selector.matchName: unknown field '
        '(did you mean "matchNames"?); '
        'spec.scope.clusters.rules[0].permissions.veiw: unknown field (did you mean "view"?)')
    spelled = access_policy(rules={"ops": {"subjects": {"grups": ["ops"]}}})
    with pytest.raises(UnknownFields, match=r'spec\.rules\.ops\.subjects\.grups: unknown '
                                            r'field \(did you mean "groups"\?\)'):
        compile_access_policy(spelled)


def test_case_is_suggested_first_and_nothing_is_suggested_when_nothing_is_close() -> None:
    obj = policy(rules=[{"selector": {"matchnames": ["a"]}, "resources": [
        {"type": "pods", "filters": {"fields": {"f": {"alowed": ["x"]}}, "zzzzzz": 1}}]}])
    assert problems(obj) == [
        'spec.scope.clusters.rules[0].selector.matchnames: unknown field '
        '(did you mean "matchNames"?)',
        'spec.scope.clusters.rules[0].resources[0].filters.fields.f.alowed: unknown field '
        '(did you mean "allowed"?)',
        "spec.scope.clusters.rules[0].resources[0].filters.zzzzzz: unknown field"]


def test_a_null_unknown_field_is_still_unknown_and_a_null_known_one_is_absent() -> None:
    obj = policy()
    obj["spec"]["access"]["enabled"] = None
    compile_policy(obj)  # null = absent = the default
    obj["spec"]["access"]["enabeld"] = None
    assert problems(obj) == ['spec.access.enabeld: unknown field (did you mean "enabled"?)']


def test_what_kubernetes_refuses_is_unknown_in_its_kinds_too() -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "r", "namespace": "n"},
            "rule": [{"verbs": ["get"], "resources": ["pods"]}],
            "aggregationRule": {"clusterRoleSelectors": []}}  # a Role has none
    assert problems(role) == ['rule: unknown field (did you mean "rules"?)',
                              "aggregationRule: unknown field"]
    with pytest.raises(InvalidObject, match="rule: unknown field"):
        parse_role(role)
    group = {"apiVersion": "user.openshift.io/v1", "kind": "Group", "metadata": {"name": "g"},
             "user": ["a"]}
    with pytest.raises(InvalidObject, match='user: unknown field \\(did you mean "users"'):
        group_users(group)


def test_the_collectors_fields_of_a_metricsource_are_its_own_but_rbac_is_checked() -> None:
    source = copy.deepcopy(_built()[-1])
    source["spec"]["somethingNew"] = {"the collector's": True}
    compile_source(source)
    source["spec"]["rbac"]["filterAgregations"] = False
    source["spec"]["aggregations"][0]["groupby"] = "x"
    assert problems(source) == [
        'spec.rbac.filterAgregations: unknown field (did you mean "filterAggregations"?)',
        'spec.aggregations[0].groupby: unknown field (did you mean "groupBy"?)']


def test_a_hostile_number_of_unknown_fields_is_bounded_in_the_message() -> None:
    obj = policy()
    obj["spec"]["identity"].update({f"k{i}": i for i in range(20_000)})
    with pytest.raises(UnknownFields) as caught:
        compile_policy(obj)
    assert len(caught.value.problems) == strict.MAX_PROBLEMS
    assert caught.value.message.endswith(f"and {20_000 - strict.MAX_PROBLEMS} more unknown "
                                         "fields")
    assert len(caught.value.message) < 1000


# Properties -----------------------------------------------------------------------------


def _positions(shape: strict.Shape, value: Any, path: tuple[str | int, ...] = ()
               ) -> list[tuple[tuple[str | int, ...], frozenset[str]]]:
    """Every object of ``value`` whose fields are all known (not open): (its path, its
    known fields)."""
    found = []
    if isinstance(value, dict):
        if shape.fields is not None and not shape.open:
            found.append((path, frozenset(shape.fields)))
        for key, item in value.items():
            sub = (shape.fields or {}).get(key) or shape.values
            if sub is not None and item is not None:
                found += _positions(sub, item, (*path, key))
    elif isinstance(value, list) and shape.items is not None:
        for index, item in enumerate(value):
            found += _positions(shape.items, item, (*path, index))
    return found


def _at(obj: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def _text(path: tuple[str | int, ...]) -> str:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return text


_NAMES = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-", min_size=1,
                 max_size=12)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), name=_NAMES)
def test_an_unknown_field_anywhere_makes_the_object_invalid_with_its_path(
        data: st.DataObject, name: str) -> None:
    """Add a field of a name its object does not know, anywhere a kind's fields are all
    Clearance's or Kubernetes': invalid, naming exactly that path; without it, valid."""
    original = data.draw(st.sampled_from(VALID))
    shape = strict.SHAPES[kind_of(original)]
    path, known = data.draw(st.sampled_from(_positions(shape, original)))
    if name in known:
        return
    obj = copy.deepcopy(original)
    small = st.integers(-(2**63), 2**63 - 1)  # beyond: the size limit speaks first
    _at(obj, path)[name] = data.draw(st.one_of(st.none(), small, st.text(max_size=3),
                                               st.lists(small, max_size=2)))
    with pytest.raises(UnknownFields) as caught:
        compile_(obj)
    assert [p for p, _ in caught.value.problems] == [_text((*path, name))]
    del _at(obj, path)[name]
    compile_(obj)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), name=_NAMES)
def test_a_renamed_field_is_invalid_and_named_with_the_field_it_was(data: st.DataObject,
                                                                    name: str) -> None:
    """Rename one field the object sets to a name its object does not know: invalid with
    that path; when the name differs from the real one only by case or a letter or two,
    the real one is suggested."""
    original = data.draw(st.sampled_from(VALID))
    shape = strict.SHAPES[kind_of(original)]
    renamable = [(path, key) for path, known in _positions(shape, original)
                 for key in _at(original, path) if key in known
                 and (path or key not in ("apiVersion", "kind", "metadata"))]
    path, key = data.draw(st.sampled_from(renamable))
    known = dict(_positions(shape, original))[path]
    typo = data.draw(st.sampled_from([name, key.upper(), key[:-1], key + "s"]))
    if typo in known or not typo:
        return
    obj = copy.deepcopy(original)
    container = _at(obj, path)
    container[typo] = container.pop(key)
    with pytest.raises(UnknownFields) as caught:
        compile_(obj)
    [(where, suggestion)] = caught.value.problems
    assert where == _text((*path, typo))
    if typo in (key.upper(), key + "s") or (len(key) > 3 and typo == key[:-1]):
        assert suggestion == key
