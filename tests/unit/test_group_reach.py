"""Group membership and the cache's group indexes: no cached check outlives a change.

A cached check is indexed under its principal's username and the groups it had when the
check was computed; a Group's membership change invalidates nothing while no policy names
the group. This property runs the real folds (Groups and MonitorAccessPolicies) with
:func:`~clearance_core.folding.folds.reach_members` as the compiler applies it, against a model
of the cache — entries cached between events, dropped by the index sets each change
names — and requires every entry still cached to hold the answer a fresh evaluation
gives: which policies name one of the user's groups.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from clearance_core.folding.fold import Affected
from clearance_core.folding.folds import FoldEvent, reach_members
from clearance_core.folding.kinds import ObjectRef
from clearance_core.folding.model import Model
from clearance_core.folding.registry import REGISTRY
from tests.unit.policies import policy

USERS = ("u1", "u2", "u3")
GROUPS = ("g1", "g2")


class Audiences:
    """Implements ``Writes`` for the audiences (the writes themselves are not under test)."""

    def __init__(self) -> None:
        self.announce, self.invalidate = Affected(), Affected()

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def group(name: str, *users: str) -> dict[str, Any]:
    return {"apiVersion": "user.openshift.io/v1", "kind": "Group", "metadata": {"name": name},
            "users": list(users)}


def answer(model: Model, user: str) -> frozenset[str]:
    """What decides for ``user``: the policies naming one of its groups."""
    groups = groups_of(model, user)
    return frozenset(key for key, p in model.policies.items() if groups & set(p.groups))


def groups_of(model: Model, user: str) -> set[str]:
    return {name for name, members in model.groups.items() if user in members}


EVENTS = st.one_of(
    st.tuples(st.just("group"), st.sampled_from(GROUPS),
              st.lists(st.sampled_from(USERS), unique=True) | st.none()),
    st.tuples(st.just("policy"), st.sampled_from(("p1", "p2")),
              st.lists(st.sampled_from(GROUPS), unique=True, min_size=1) | st.none()),
    st.tuples(st.just("ask"), st.sampled_from(USERS), st.none()))


@settings(max_examples=400, deadline=None)
@given(st.lists(EVENTS, max_size=16))
@example([("ask", "u1", None), ("group", "g1", ["u1"]),  # joins a group nothing names,
          ("policy", "p1", ["g1"]), ("ask", "u1", None)])  # then a policy names it
def test_a_cached_check_never_outlives_a_change_of_its_groups(
        events: list[tuple[str, str, list[str] | None]]) -> None:
    model = Model()
    cached: dict[str, tuple[frozenset[str], set[str]]] = {}  # user -> (answer, indexes)
    for seq, (kind, name, value) in enumerate(events, start=1):
        if kind == "ask":
            if name not in cached:
                cached[name] = (answer(model, name), {f"u:{name}", *(
                    f"g:{g}" for g in groups_of(model, name))})
            assert cached[name][0] == answer(model, name), (name, cached[name])
            continue
        obj = group(name, *value or ()) if kind == "group" else policy(
            name, groups=value or ["unused"], default="all")
        stream_kind = "group" if kind == "group" else "monitoraccesspolicy"
        ref = ObjectRef(stream_kind, "" if kind == "group" else "ns", name)
        tx = Audiences()
        REGISTRY[stream_kind].fold(model, tx, FoldEvent(
            seq, "DELETED" if value is None else "MODIFIED", obj, ref, 0.0))
        reach_members(model, tx)
        named = {f"u:{u}" for u in tx.invalidate.users} | {
            f"g:{g}" for g in tx.invalidate.groups}
        cached = {u: entry for u, entry in cached.items() if not entry[1] & named}
        for user, (held, _) in cached.items():
            assert held == answer(model, user), (user, held, answer(model, user))
