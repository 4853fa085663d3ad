"""Resource normalisation and the cache key of a decision (README: Conventions; Principals)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance_api.errors import BadRequest
from clearance_api.wire import Resource
from clearance_core.kube.resources import decision_digest, home_namespace, place_of


def digest(**fields: object) -> str:
    resource = Resource(type="pvc", name="data", cluster="c1", fields=fields)  # type: ignore[arg-type]
    return decision_digest("principal", "view", resource, "c1")


def test_any_json_number_has_a_cache_key_of_its_own() -> None:
    # An integer beyond 64 bits is valid JSON: it must get an answer, not an error.
    keys = {digest(size=2**70), digest(size=2**70 + 1), digest(size=-(2**70)),
            digest(size=1), digest(size="1"), digest(size=1.0)}
    assert len(keys) == 6
    assert digest(size=2**70) == digest(size=2**70)


_NAMES = st.text(min_size=1, max_size=20)


@given(type_=st.sampled_from(["cluster", "clusters", "node", "nodes"]), name=_NAMES,
       namespace=st.none() | _NAMES)
def test_cluster_scoped_things_never_live_in_a_namespace(
        type_: str, name: str, namespace: str | None) -> None:
    assert home_namespace(type_, name, namespace) is None


@given(type_=st.sampled_from(["namespace", "namespaces"]), name=_NAMES,
       namespace=st.none() | _NAMES)
def test_a_namespace_lives_in_itself_or_the_request_is_refused(
        type_: str, name: str, namespace: str | None) -> None:
    if name != "*" and namespace not in (None, name):
        with pytest.raises(BadRequest, match="is not inside namespace"):
            home_namespace(type_, name, namespace)
    else:
        assert home_namespace(type_, name, namespace) == (namespace if name == "*" else name)


@given(type_=st.sampled_from(["pods", "operator", "alerts", "event", "pvc"]), name=_NAMES,
       namespace=st.none() | _NAMES)
def test_namespaced_things_live_where_the_request_says(
        type_: str, name: str, namespace: str | None) -> None:
    assert home_namespace(type_, name, namespace) == namespace


def test_place_of_names_the_resource_in_its_error() -> None:
    with pytest.raises(BadRequest, match=r"^resource: namespace 'a' is not inside"):
        place_of(Resource(type="namespaces", name="a", namespace="b", cluster="c"))
    assert place_of(Resource(type="nodes", namespace="b", cluster="c")) == ("c", None)
