"""Who a ClusterRole change affects: the subjects of the bindings to it and to every
ClusterRole aggregating it, transitively, by its old or new labels. The model keeps
the aggregating ClusterRoles apart (a change searches only those); this property holds
it equal to a search over every role, through any sequence of roles coming, changing
(gaining or losing an aggregationRule) and going."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_core.folding.fold import Affected
from clearance_core.folding.rbac_changes import RbacModel
from clearance_core.rbac.rules import Role, RoleKey, binding_subjects, parse_binding, parse_role
from tests.unit.test_rbac import cr, crb

NAMES = ("a", "b", "c", "d")
LABELS = st.dictionaries(st.sampled_from(("x", "y")), st.sampled_from(("1", "2")), max_size=2)
ROLES = st.tuples(
    st.sampled_from(NAMES), LABELS,
    st.none() | st.lists(LABELS.map(lambda labels: {"matchLabels": labels}), max_size=2))
STEPS = st.lists(st.one_of(st.tuples(st.just("put"), ROLES),
                           st.tuples(st.just("drop"), st.sampled_from(NAMES))), max_size=12)


def naive(model: RbacModel, key: RoleKey, new: Role | None) -> Affected:
    """The same question, answered by searching every role."""
    versions = [r for r in (model.roles.get(key), new) if r is not None]
    found: set[RoleKey] = set()
    frontier = [r for r in versions if r.kind == "ClusterRole"]
    while frontier:
        role = frontier.pop()
        for candidate in model.roles.values():
            if candidate.key not in found and candidate.aggregation and any(
                    sel.matches(role.labels) for sel in candidate.aggregation):
                found.add(candidate.key)
                frontier.append(candidate)
    affected = Affected()
    for binding in model.bindings.values():
        if binding.role_key in {key} | found:
            affected.users.update(s.name for s in binding.subjects if s.kind == "User")
    return affected


def role(spec: tuple[str, dict[str, str], list[dict[str, Any]] | None]) -> Role:
    name, labels, aggregate = spec
    return parse_role(cr(name, labels=labels, aggregate=aggregate))


@settings(max_examples=300)
@given(steps=STEPS, change=ROLES)
def test_a_clusterrole_change_affects_what_a_search_of_every_role_finds(
        steps: list[tuple[str, Any]], change: tuple[str, dict[str, str], Any]) -> None:
    model = RbacModel()
    for name in NAMES:  # one binding per role, its own user
        binding = parse_binding(crb(f"to-{name}", name, f"User:u-{name}"))
        model.put_binding(f"ClusterRoleBinding//to-{name}", binding)
    for op, arg in steps:
        if op == "put":
            model.put_role(role(arg).key, role(arg))
        else:
            model.put_role(RoleKey("ClusterRole", "", arg), None)
    new = role(change)
    assert model.affected_by_role(new.key, new).users == naive(model, new.key, new).users
    gone = RoleKey("ClusterRole", "", change[0])
    assert model.affected_by_role(gone, None).users == naive(model, gone, None).users


GROUPS = ("ops", "dev", "a:b, c*")
BINDINGS = st.lists(st.tuples(
    st.sampled_from(("b1", "b2", "b3")),
    st.none() | st.lists(st.sampled_from(GROUPS), max_size=3)), max_size=12)


@settings(max_examples=300)
@given(steps=BINDINGS)
def test_whether_a_binding_names_a_group_is_what_a_search_of_every_binding_finds(
        steps: list[tuple[str, list[str] | None]]) -> None:
    # A Group change asks this on every event: it is counted, not searched.
    model = RbacModel()
    for name, groups in steps:
        key = f"ClusterRoleBinding//{name}"
        if groups is None:
            model.put_binding(key, None)
        else:
            model.put_binding(key, parse_binding(
                crb(name, "view", *(f"Group:{g}" for g in groups), "User:someone")))
        for group in GROUPS:
            assert model.binds_group(group) == any(
                group in binding_subjects(b)[1] for b in model.bindings.values())
