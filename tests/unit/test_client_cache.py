"""The client's local decision cache: exactly what an event names goes, nothing else does,
an answer computed across a change concerning it is never stored, and it stays bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from clearance_api.wire import (
    ChangedPrincipals,
    CheckRequest,
    CheckResult,
    DecisionsChanged,
    Principal,
    Resource,
)
from clearance_client.cache import DecisionCache, principal_names

USERS = ["ann", "bob", "ann@example.com", "system:serviceaccount:shop:bot"]
GROUPS = ["sre", "dev", "system:serviceaccounts:shop"]
principals = st.builds(Principal, username=st.sampled_from(USERS[:2] + USERS[3:]),
                       groups=st.lists(st.sampled_from(GROUPS[:2]), max_size=2, unique=True),
                       email=st.sampled_from([None, "ann@example.com"]))
events = st.builds(lambda users, groups, everyone: DecisionsChanged(
    revision=1, principals=ChangedPrincipals(users=users, groups=groups), all=everyone),
    st.lists(st.sampled_from(USERS), max_size=2), st.lists(st.sampled_from(GROUPS), max_size=2),
    st.booleans())


def ask(principal: Principal, cluster: str = "east") -> CheckRequest:
    return CheckRequest(principal=principal, action="view",
                        resource=Resource(type="cluster", name=cluster))


ALLOW = CheckResult(decision="allow", allowed=True, reason="test", revision=5)


def named(principal: Principal, event: DecisionsChanged, complete: bool) -> bool:
    names, groups = principal_names(principal)
    users, grps = set(event.principals.users), set(event.principals.groups)
    return event.all or bool(names & users) or bool(grps and (not complete or groups & grps))


@settings(max_examples=300, deadline=None)
@given(st.lists(principals, min_size=1, max_size=6), events, st.booleans())
def test_an_event_drops_exactly_the_answers_it_names(
        people: list[Principal], event: DecisionsChanged, complete: bool) -> None:
    cache = DecisionCache(complete_groups=complete)
    for who in people:
        cache.put(cache.key(ask(who)), who, ALLOW, since=cache.begin())
    cache.changed(event)
    for who in people:
        kept = cache.get(cache.key(ask(who))) is not None
        assert kept == (not named(who, event, complete)), (who, event)


@settings(max_examples=300, deadline=None)
@given(principals, st.lists(events, max_size=4), st.booleans())
def test_an_answer_asked_before_a_change_about_it_is_not_stored(
        who: Principal, meanwhile: list[DecisionsChanged], complete: bool) -> None:
    cache = DecisionCache(complete_groups=complete)
    since = cache.begin()
    for event in meanwhile:
        cache.changed(event)
    stored = cache.put(cache.key(ask(who)), who, ALLOW, since=since)
    assert stored == (not any(named(who, e, complete) for e in meanwhile))


def test_bounded_by_size_least_recently_used_first_and_by_ttl() -> None:
    now = [0.0]
    cache = DecisionCache(max_entries=2, ttl=10, clock=lambda: now[0])
    ann, bob, cat = (Principal(username=u) for u in ("ann", "bob", "cat"))
    for who in (ann, bob):
        cache.put(cache.key(ask(who)), who, ALLOW, since=cache.begin())
    assert cache.get(cache.key(ask(ann))) is not None  # ann is now the most recent
    cache.put(cache.key(ask(cat)), cat, ALLOW, since=cache.begin())
    assert len(cache) == 2 and cache.get(cache.key(ask(bob))) is None
    now[0] = 10.0
    assert cache.get(cache.key(ask(ann))) is None and len(cache) == 1


def test_a_hit_says_cached_and_never_answers_below_min_revision() -> None:
    cache = DecisionCache()
    who = Principal(username="ann")
    cache.put(cache.key(ask(who)), who, ALLOW, since=cache.begin())
    hit = cache.get(cache.key(ask(who)), min_revision=5)
    assert hit is not None and hit.cached and hit.allowed
    assert cache.get(cache.key(ask(who)), min_revision=6) is None


def test_more_changes_than_remembered_refuse_the_answer() -> None:
    cache = DecisionCache(complete_groups=True)
    who = Principal(username="ann")
    since = cache.begin()
    for _ in range(300):  # none names ann, but too many to tell
        cache.changed(DecisionsChanged(revision=1, principals=ChangedPrincipals(users=["x"])))
    assert not cache.put(cache.key(ask(who)), who, ALLOW, since=since)


def test_service_accounts_are_named_by_their_derived_groups() -> None:
    bot = Principal(username="system:serviceaccount:shop:bot")
    assert principal_names(bot)[1] == {"system:serviceaccounts",
                                       "system:serviceaccounts:shop"}
