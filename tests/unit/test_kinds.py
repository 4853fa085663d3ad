"""How objects on the stream are identified and where they are published."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance_api.errors import InvalidObject
from clearance_core.folding.kinds import (
    ObjectRef,
    event_subject,
    ref_of,
    status_subject,
    subject_token,
)
from clearance_core.folding.registry import REGISTRY, WATCHED


def test_every_contract_kind_is_known_with_its_api() -> None:
    assert set(REGISTRY) == set(WATCHED) == {
        "monitoraccesspolicy", "metricsource", "accesspolicy", "managedcluster",
        "managedclusterset", "managedclustersetbinding", "role", "clusterrole",
        "rolebinding", "clusterrolebinding", "group", "namespace",
        "customresourcedefinition"}
    assert WATCHED["managedclustersetbinding"] == (
        "cluster.open-cluster-management.io/v1beta2", "managedclustersetbindings", True)
    assert WATCHED["rolebinding"] == ("rbac.authorization.k8s.io/v1", "rolebindings", True)
    assert REGISTRY["rolebinding"].group == "rbac.authorization.k8s.io"
    assert REGISTRY["namespace"].group == ""


def test_an_object_is_identified_by_kind_namespace_and_name() -> None:
    ref = ref_of({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "ns"}})
    assert ref == ObjectRef("rolebinding", "ns", "b") and str(ref) == "rolebinding/ns/b"
    assert ref_of({"kind": "Group", "metadata": {"name": "g"}}).namespace == ""


@pytest.mark.parametrize("obj", [
    {"kind": "Pod", "metadata": {"name": "x"}},
    {"kind": 3, "metadata": {"name": "x"}},
    {"kind": "Group"},
    {"kind": "Group", "metadata": {"name": ""}},
    {"kind": "Group", "metadata": {"name": "g", "namespace": 5}},
])
def test_unusable_identities_are_invalid(obj: dict[str, object]) -> None:
    with pytest.raises(InvalidObject):
        ref_of(obj)  # type: ignore[arg-type]


def test_the_subject_token_is_the_uid_when_nats_safe_else_derived() -> None:
    obj = {"kind": "Group", "metadata": {"name": "g", "uid": "0a1b-c2"}}
    ref = ref_of(obj)
    assert subject_token(obj, ref) == "0a1b-c2"
    assert event_subject(obj, ref) == "clearance.events.group.0a1b-c2"
    unsafe = {"kind": "Group", "metadata": {"name": "g", "uid": "a.b>c"}}
    token = subject_token(unsafe, ref_of(unsafe))
    assert token.startswith("n-") and token.replace("-", "").isalnum()
    assert token == subject_token({"kind": "Group", "metadata": {"name": "g"}}, ref)


def test_status_subjects_carry_kubernetes_names_and_hash_anything_else() -> None:
    ref = ObjectRef("monitoraccesspolicy", "team-a", "my.policy")
    assert status_subject(ref) == "clearance.status.monitoraccesspolicy.team-a.my.policy"
    assert status_subject(ObjectRef("group", "", "g")) == "clearance.status.group._.g"
    for hostile in ("a b", "x*", "y>", "n" * 5000, "tab\there", "..", "ünï", "_", "a_b"):
        subject = status_subject(ObjectRef("monitoraccesspolicy", "ns", hostile))
        token = subject.removeprefix("clearance.status.monitoraccesspolicy.ns.")
        assert token.startswith("_") and "." not in token and len(subject) < 100
    assert status_subject(ObjectRef("monitoraccesspolicy", "ns", "a b")) == \
        status_subject(ObjectRef("monitoraccesspolicy", "ns", "a b"))  # stable


def test_the_subjects_that_collided_are_apart() -> None:
    # Namespace a, name b.c and namespace a.b, name c were one subject; so were a
    # cluster-scoped object and one in a namespace named "_", and a hashed name and a real
    # name spelling that hash.
    dotted = status_subject(ObjectRef("accesspolicy", "a", "b.c"))
    assert dotted == "clearance.status.accesspolicy.a.b.c"
    assert status_subject(ObjectRef("accesspolicy", "a.b", "c")) != dotted
    assert status_subject(ObjectRef("group", "_", "g")) != \
        status_subject(ObjectRef("group", "", "g"))
    hashed = status_subject(ObjectRef("group", "ns", "a b")).rsplit(".", 1)[1]
    assert status_subject(ObjectRef("group", "ns", hashed)) != \
        status_subject(ObjectRef("group", "ns", "a b"))
    assert status_subject(ObjectRef("group", hashed, "x")).split(".")[3] != hashed


@given(st.text(alphabet=st.sampled_from("aZ09-_.:@ *>\t\nü\u0130\u212a"), max_size=12))
def test_a_name_is_its_own_status_token_exactly_when_a_subject_can_carry_it(name: str) -> None:
    carried = (0 < len(name) <= 253 and ".." not in name and not name.startswith(".")
               and not name.endswith(".")
               and all(c.isascii() and (c.isalnum() or c in "-.:@") for c in name))
    token = status_subject(ObjectRef("group", "", name)).removeprefix("clearance.status.group._.")
    assert (token == name) is carried
    assert carried or (token.startswith("_") and len(token) == 33)


# Namespaces and names as any producer may write them: Kubernetes-like words, dots, the
# hashed form's marker, what a subject cannot carry.
_PARTS = st.text(alphabet=st.sampled_from("ab0-._ *>:Zé"), max_size=8)


@given(st.tuples(_PARTS, _PARTS), st.tuples(_PARTS, _PARTS))
def test_no_two_objects_share_a_status_subject(one: tuple[str, str],
                                               two: tuple[str, str]) -> None:
    first, second = ObjectRef("accesspolicy", *one), ObjectRef("accesspolicy", *two)
    assert (status_subject(first) == status_subject(second)) is (first == second)


@given(_PARTS, _PARTS)
def test_the_namespace_is_one_token_and_the_name_the_rest(namespace: str, name: str) -> None:
    subject = status_subject(ObjectRef("monitoraccesspolicy", namespace, name))
    _, _, kind, ns_token, rest = subject.split(".", 4)
    assert kind == "monitoraccesspolicy"
    assert ns_token == (namespace or "_") or (ns_token.startswith("_") and len(ns_token) == 33)
    assert rest == name or (rest.startswith("_") and len(rest) == 33)
    assert all(token and token not in ("*", ">") for token in subject.split("."))
