"""The RBAC index kept current object by object answers exactly like one built from
scratch of the final state, whatever the sequence of puts and removes (aggregated
ClusterRoles included: labels, selectors and rules all change under it)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_core.rbac.index import RbacIndex
from clearance_core.rbac.rules import (
    Binding,
    Role,
    RoleKey,
    binding_subjects,
    parse_binding,
    parse_role,
)
from tests.unit.test_rbac import (
    LABELS,
    NAMESPACES,
    PEOPLE,
    SUBJECTS,
    attrs_st,
    cr,
    crb,
    index,
    rb,
    requests_in,
    res,
    role,
    rule,
    rules_st,
    selector_st,
)

CLUSTER_ROLES = [f"c{i}" for i in range(5)]
ROLES = [f"r{i}" for i in range(3)]


@st.composite
def cluster_roles(draw: st.DrawFn) -> dict[str, Any]:
    aggregate = draw(st.none() | st.lists(selector_st, max_size=2))
    return cr(draw(st.sampled_from(CLUSTER_ROLES)), *draw(st.lists(rules_st, max_size=3)),
              labels=draw(st.sampled_from(LABELS)), aggregate=aggregate)


@st.composite
def roles(draw: st.DrawFn) -> dict[str, Any]:
    return role(draw(st.sampled_from(NAMESPACES)), draw(st.sampled_from(ROLES)),
                *draw(st.lists(rules_st, max_size=3)))


@st.composite
def bindings(draw: st.DrawFn) -> dict[str, Any]:
    name = f"b{draw(st.integers(0, 5))}"
    specs = draw(st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=3))
    targets = [*CLUSTER_ROLES, "gone"]
    if draw(st.booleans()):
        return crb(name, draw(st.sampled_from(targets)), *specs)
    ref = draw(st.sampled_from([f"ClusterRole:{r}" for r in targets]
                               + [f"Role:{r}" for r in ROLES]))
    return rb(draw(st.sampled_from(NAMESPACES)), name, ref, *specs)


Ident = tuple[str, str, str]


def identity(value: Role | Binding) -> Ident:
    return value.kind, value.namespace, value.name


removals = st.one_of(
    st.tuples(st.just("ClusterRole"), st.just(""), st.sampled_from(CLUSTER_ROLES)),
    st.tuples(st.just("Role"), st.sampled_from(NAMESPACES), st.sampled_from(ROLES)),
    st.tuples(st.just("ClusterRoleBinding"), st.just(""),
              st.sampled_from([f"b{i}" for i in range(6)])),
    st.tuples(st.just("RoleBinding"), st.sampled_from(NAMESPACES),
              st.sampled_from([f"b{i}" for i in range(6)])),
)
operations = st.lists(
    st.one_of(cluster_roles(), cluster_roles(), roles(), bindings(), bindings(), removals),
    max_size=25)


def apply(idx: RbacIndex, state: dict[Ident, Role | Binding], op: Any) -> None:
    if isinstance(op, tuple):
        state.pop(op, None)
        if op[0].endswith("Binding"):
            idx.remove_binding(op)
        else:
            idx.remove_role(RoleKey(*op))
        return
    value: Role | Binding = parse_role(op) if op["kind"].endswith("Role") else \
        parse_binding(op)
    state[identity(value)] = value
    if isinstance(value, Role):
        idx.put_role(value)
    else:
        idx.put_binding(value)


def scratch(state: dict[Ident, Role | Binding]) -> RbacIndex:
    return RbacIndex([v for v in state.values() if isinstance(v, Role)],
                     [v for v in state.values() if isinstance(v, Binding)])


def assert_same(got: RbacIndex, want: RbacIndex, requests: list[Any]) -> None:
    for attrs in requests:
        assert got.who_can(attrs) == want.who_can(attrs)
        # What a deny says no rule names (the rules' verbs and resources, counted).
        assert got.unnamed(attrs) == want.unnamed(attrs)
        for username, member_of in PEOPLE:
            assert got.allowed(attrs, username, member_of) == want.allowed(
                attrs, username, member_of)
    for username, member_of in PEOPLE:
        assert got.binding_namespaces(username, member_of) == want.binding_namespaces(
            username, member_of)
        for namespace in ("", *NAMESPACES, "ns3"):
            assert got.rules_for(username, member_of, namespace) == want.rules_for(
                username, member_of, namespace)
            assert got.evaluation_error(username, member_of, namespace) == \
                want.evaluation_error(username, member_of, namespace)
    for namespace in ("", *NAMESPACES, "ns3"):
        assert got.named([namespace]) == want.named([namespace])
    for kind, namespaces, names in (("ClusterRole", [""], CLUSTER_ROLES),
                                    ("Role", NAMESPACES, ROLES)):
        for namespace in namespaces:
            for name in names:
                assert got.effective_rules(kind, namespace, name) == want.effective_rules(
                    kind, namespace, name)
                assert got.subjects_of_role(kind, namespace, name) == want.subjects_of_role(
                    kind, namespace, name)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(cluster_roles(), roles(), bindings()), max_size=10), operations,
       st.data())
def test_any_sequence_of_changes_answers_like_a_fresh_build(
        initial: list[dict[str, Any]], ops: list[Any], data: st.DataObject) -> None:
    state: dict[Ident, Role | Binding] = {}
    for obj in initial:
        apply(RbacIndex(), state, obj)
    idx = scratch(state)  # built in bulk, then changed one object at a time
    for op in ops:
        apply(idx, state, op)
    objects = [o for o in (*initial, *ops) if isinstance(o, dict)]
    requests = data.draw(st.lists(requests_in(objects) if objects else attrs_st,
                                  min_size=1, max_size=4))
    assert_same(idx, scratch(state), requests)
    # who-can-see's names: every ClusterRoleBinding's subjects and one namespace's
    # RoleBindings', as a scan of every binding finds them.
    for namespace in NAMESPACES:
        users: set[str] = set()
        groups: set[str] = set()
        for value in state.values():
            if isinstance(value, Binding) and value.namespace in ("", namespace):
                named_users, named_groups = binding_subjects(value)
                users.update(named_users)
                groups.update(named_groups)
        assert idx.named([namespace]) == (users, groups)


@settings(max_examples=100, deadline=None)
@given(operations, st.data())
def test_removing_everything_leaves_an_empty_index(ops: list[Any], data: st.DataObject
                                                   ) -> None:
    state: dict[Ident, Role | Binding] = {}
    idx = RbacIndex()
    for op in ops:
        apply(idx, state, op)
    for ident in list(state):
        apply(idx, state, ident)
    assert_same(idx, RbacIndex(), data.draw(st.lists(attrs_st, min_size=1, max_size=3)))
    # Nothing is left behind for subjects or tokens that came and went.
    parts = vars(idx)
    for part in (parts["_roles"], parts["_bindings"]):
        assert not any(vars(part).values()), vars(part)
    assert not any(parts[name] for name in ("_by_resource", "_non_resource", "_indexed"))


def test_a_relabelled_clusterrole_moves_in_and_out_of_a_chain_of_aggregates() -> None:
    admin = cr("admin", aggregate=[{"matchLabels": {"to-admin": "true"}}])
    edit = cr("edit", labels={"to-admin": "true"},
              aggregate=[{"matchLabels": {"to-edit": "true"}}])
    reader = cr("pods-reader", rule("get", "", "pods"))
    idx = index(admin, edit, reader, crb("b", "admin", "User:alice"))
    get_pods = res("get", "pods", "ns1")
    assert not idx.allowed(get_pods, "alice", ())[0]
    idx.put_role(parse_role(cr("pods-reader", rule("get", "", "pods"),
                               labels={"to-edit": "true"})))
    assert idx.allowed(get_pods, "alice", ())[0]
    assert idx.subjects_of_role("ClusterRole", "", "pods-reader") == (["alice"], [])
    idx.put_role(parse_role(cr("edit", labels={"to-admin": "false"},
                               aggregate=[{"matchLabels": {"to-edit": "true"}}])))
    assert not idx.allowed(get_pods, "alice", ())[0]
    assert idx.subjects_of_role("ClusterRole", "", "pods-reader") == ([], [])
    idx.remove_role(RoleKey("ClusterRole", "", "edit"))
    idx.put_role(parse_role(cr("pods-reader", rule("get", "", "pods"),
                               labels={"to-admin": "true"})))
    assert idx.allowed(get_pods, "alice", ())[0]
    idx.remove_binding(("ClusterRoleBinding", "", "b"))
    assert idx.who_can(get_pods) == ([], [])
