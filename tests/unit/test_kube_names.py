"""What a review says of a name no RBAC rule uses, and what ``can-i`` warns of
(``clearance_core.rbac.names``, ``RbacIndex.unnamed``)."""

from __future__ import annotations

from clearance_core.rbac import names as kube_names
from clearance_core.rbac.index import RbacIndex
from clearance_core.rbac.rules import NonResourceAttributes, PolicyRule, ResourceAttributes, Role

READER = Role(kind="ClusterRole", name="reader", rules=(
    PolicyRule(verbs=("get", "list"), api_groups=("",), resources=("pods", "pods/log")),
    PolicyRule(verbs=("get",), non_resource_urls=("/healthz",))))


def attrs(verb: str, resource: str) -> ResourceAttributes:
    return ResourceAttributes(verb=verb, resource=resource)


def test_a_deny_names_the_verb_and_the_resource_no_rule_uses() -> None:
    index = RbacIndex([READER])
    assert index.unnamed(attrs("get", "pods")) == []
    assert index.unnamed(attrs("lst", "pods")) == ['no RBAC rule names verb "lst"']
    assert index.unnamed(attrs("get", "pdos")) == ['no RBAC rule names resource "pdos"']
    assert index.unnamed(attrs("watch", "secrets")) == [
        'no RBAC rule names verb "watch"', 'no RBAC rule names resource "secrets"']
    assert index.unnamed(NonResourceAttributes(path="/x", verb="post")) == [
        'no RBAC rule names verb "post"']


def test_a_wildcard_names_every_verb_and_resource_and_a_removed_role_none() -> None:
    index = RbacIndex([READER])
    star = Role(kind="ClusterRole", name="admin", rules=(
        PolicyRule(verbs=("*",), api_groups=("*",), resources=("*",)),))
    index.put_role(star)
    assert index.unnamed(attrs("lst", "pdos")) == []
    index.remove_role(star.key)
    index.remove_role(READER.key)
    assert index.unnamed(attrs("get", "pods")) == [
        'no RBAC rule names verb "get"', 'no RBAC rule names resource "pods"']


def test_can_i_warns_of_verbs_and_resources_as_kubectl() -> None:
    assert kube_names.unknown_verb("get") is None
    assert kube_names.unknown_verb("deletecollection") is None
    assert kube_names.unknown_verb("lst") == "verb 'lst' is not a known verb"
    assert kube_names.unknown_verb("post", non_resource=True) is None
    assert kube_names.unknown_verb("post") == "verb 'post' is not a known verb"
    reason = 'no RBAC rule names resource "pdos"'
    assert kube_names.unknown_resource("pdos", reason) == (
        "resource 'pdos' is neither a built-in Kubernetes resource nor named by any Role "
        "or ClusterRole rule")
    # A built-in resource, or one some rule names (the reason does not say otherwise).
    assert kube_names.unknown_resource("deployments", 'no RBAC rule names resource '
                                                      '"deployments"') is None
    assert kube_names.unknown_resource("managedclusters", "") is None
