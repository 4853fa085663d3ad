"""The ops console's arithmetic and readings: rates, percentiles, policies by state, the
principals it learns from watched objects, lag when the status does not report it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from clearance_console.live import STALE_SECONDS, Directory, Live
from clearance_console.policies import Registry, classify, from_subject, names_in
from clearance_console.rates import Counter, Samples, percentile

times = st.lists(st.floats(min_value=0, max_value=500, allow_nan=False), max_size=200)


@given(times)
def test_counter_history_holds_exactly_the_last_span_seconds(stamps: list[float]) -> None:
    counter = Counter(span=60)
    for stamp in sorted(stamps):
        counter.add(stamp)
    now = max(stamps, default=0.0)
    history = counter.history(now)
    assert len(history) == 60
    assert sum(history) == sum(1 for s in stamps if int(s) > int(now) - 60)
    assert counter.total == len(stamps)


def test_rate_is_the_mean_of_the_complete_seconds() -> None:
    counter = Counter()
    for second in range(100, 110):
        counter.add(second + 0.5, count=3)
    counter.add(110.2, count=50)  # the current second is still filling: not counted
    assert counter.rate(110.5, window=10) == 3.0


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1),
       st.floats(min_value=0.1, max_value=100))
def test_percentile_is_a_sample_with_enough_below(values: list[float], pct: float) -> None:
    ordered = sorted(values)
    chosen = percentile(ordered, pct)
    assert chosen in ordered
    assert sum(v <= chosen for v in ordered) >= pct / 100 * len(ordered)


def test_samples_forget_what_left_the_window() -> None:
    samples = Samples(span=60)
    samples.add(0.0, 100.0)
    samples.add(50.0, 1.0)
    assert samples.summary(70.0) == {"count": 1, "p50": 1.0, "p95": 1.0, "p99": 1.0,
                                     "max": 1.0}


def test_policies_by_state() -> None:
    def cond(kind: str, status: str, reason: str) -> dict[str, str]:
        return {"type": kind, "status": status, "reason": reason, "message": reason + "!"}

    assert classify("AccessPolicy", "a", "b", {"conditions": [
        cond("Accepted", "True", "Accepted"), cond("Enforced", "False", "Overridden")],
    }).state == "Overridden"  # type: ignore[union-attr]
    invalid = classify("AccessPolicy", "a", "b", {"conditions": [
        cond("Accepted", "False", "TargetNotFound")]})
    assert invalid is not None
    assert (invalid.state, invalid.reason) == ("Invalid", "TargetNotFound")
    unauthorized = classify("AccessPolicy", "team", "grab", {"conditions": [
        cond("Accepted", "False", "Unauthorized")]})
    assert unauthorized is not None
    assert (unauthorized.state, unauthorized.reason, unauthorized.message) == \
        ("Unauthorized", "Unauthorized", "Unauthorized!")
    expired = classify("MonitorAccessPolicy", "a", "b", {
        "state": "Expired", "message": "ended", "warnings": ["type x unknown"],
        "conditions": [cond("Compiled", "True", "Compiled"), cond("Active", "False", "Expired")]})
    assert expired is not None
    assert (expired.state, expired.reason, expired.warnings) == ("Expired", "Expired",
                                                                 ["type x unknown"])
    assert classify("MonitorAccessPolicy", "a", "b", {"state": "Deleted"}) is None
    registry = Registry()
    registry.update("MonitorAccessPolicy", "a", "b", {"state": "Error", "message": "bad"})
    registry.update("AccessPolicy", "a", "c", {"conditions": [cond("Accepted", "True", "x")]})
    assert registry.snapshot()["counts"] == {"Active": 1, "Invalid": 1, "Unauthorized": 0,
                                             "Expired": 0, "Overridden": 0, "Inactive": 0}
    registry.update("MonitorAccessPolicy", "a", "b", {"state": "Deleted"})
    assert [p["name"] for p in registry.snapshot()["policies"]] == ["c"]


def test_subjects_and_reported_names() -> None:
    assert from_subject("clearance.status.accesspolicy.shop.shop-intent") == (
        "AccessPolicy", "shop", "shop-intent")
    assert from_subject("clearance.status.other.a.b") is None
    assert names_in({"Active": 3, "Invalid": ["ns/broken"]}) == [
        ("MonitorAccessPolicy", "ns", "broken")]
    assert names_in({"AccessPolicy": {"Overridden": [{"namespace": "n", "name": "p"}]}}) == [
        ("AccessPolicy", "n", "p")]


def test_directory_learns_principals_from_watched_objects() -> None:
    directory = Directory()
    directory.harvest({"kind": "Group", "metadata": {"name": "sre"}, "users": ["olivia"]})
    directory.harvest({"kind": "MonitorAccessPolicy", "spec": {"identity": {"subjects": {
        "users": ["erin"], "serviceAccounts": [{"namespace": "m", "name": "bot"}]}}}})
    directory.harvest({"kind": "RoleBinding", "subjects": [
        {"kind": "Group", "name": "developers"}, {"kind": "User", "name": "bob"}]})
    assert list(directory.users) == ["olivia", "erin", "system:serviceaccount:m:bot", "bob"]
    assert list(directory.groups) == ["sre", "developers"]


def test_lag_is_reported_or_measured_behind_the_watcher() -> None:
    live = Live()
    live.polled({"revision": 5, "services": {
        "watcher": {"revision": 9, "healthy": True},
        "compiler": {"revision": 5, "healthy": True},
        "decision": {"revision": 5, "healthy": True, "lag": 2, "heartbeat_age_ms": 1500}},
        "policies": 0, "cache": {"entries": 0, "hits": 0, "misses": 0}}, 1.0, 0.001)
    rows = {row["name"]: row for row in live.services()}
    assert (rows["compiler"]["lag"], rows["compiler"]["lag_source"]) == (4, "behind watcher")
    assert (rows["decision"]["lag"], rows["decision"]["heartbeat_age"]) == (2, 1.5)
    assert rows["watcher"]["lag"] is None


def test_the_probe_does_not_count_in_the_hit_rate() -> None:
    live = Live()
    status = {"revision": 1, "services": {}, "cache": {"entries": 1, "hits": 0, "misses": 0}}
    live.polled(status, 1.0, 0.001)
    live.probed(1.5, 0.001, cached=True)
    live.polled({**status, "cache": {"entries": 1, "hits": 1, "misses": 0}}, 2.0, 0.001)
    assert live.hits.total == 0


def test_health_is_unknown_once_the_bus_is_down_or_the_status_stale() -> None:
    """The page must not stay green after NATS died: the last `healthy` heard is shown
    only while the bus is up and a status was answered within STALE_SECONDS."""
    live = Live()
    live.polled({"revision": 3, "services": {"decision": {"revision": 3, "healthy": True}},
                 "policies": 0, "cache": {}}, 100.0, 0.001)
    fresh = live.snapshot(101.0)
    assert fresh["bus"] == {"connected": True, "stale": False}
    assert [row["healthy"] for row in fresh["services"]] == [True]
    down = live.snapshot(101.0, connected=False)
    assert down["bus"]["connected"] is False
    assert [row["healthy"] for row in down["services"]] == [None]
    stale = live.snapshot(100.0 + STALE_SECONDS + 0.5)
    assert stale["bus"]["stale"] is True
    assert [row["healthy"] for row in stale["services"]] == [None]
    assert Live().snapshot(0.0)["bus"]["stale"] is True  # nothing heard yet
