"""The metrics Clearance exports, the policy census, and the alert rules and Grafana
dashboard shipped in ``deploy/``: every expression parses, every metric they name is
one the services export, and every exported metric is documented in docs/operations.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest

from clearance_api.wire import StatusCondition
from clearance_core.folding import census
from clearance_core.folding.fold import fold_policy
from clearance_core.inherit import status as inherit_status
from clearance_core.monitor.policy import CompiledPolicy
from clearance_runtime.process import metrics, retries
from tests import observability
from tests.support.policies import policy

DEPLOY = observability.ROOT / "deploy"
SEVERITIES = {"warning", "critical"}
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


# The census ---------------------------------------------------------------------------

def _compiled(**spec: object) -> CompiledPolicy:
    compiled, _ = fold_policy("ADDED", policy(users=["a"], **spec), None, {})  # type: ignore[arg-type]
    assert compiled is not None
    return compiled


MONITOR_KINDS = {
    "Active": {},
    "Inactive": {"enabled": False},
    "Error": {"priority": -1},
    "Expired": {"not_after": "2020-01-01T00:00:00Z"},
}
ACCESS_KINDS: dict[str, list[StatusCondition]] = {
    "Invalid": inherit_status.invalid_conditions("bad"),
    "TargetNotFound": [inherit_status.accepted(target_found=False, target="Cluster/x")],
    "Unauthorized": [inherit_status.accepted(unauthorized="team may not govern Fleet")],
    "Enforced": [inherit_status.accepted(), StatusCondition(
        type="Enforced", status="True", reason="Enforced", message="")],
    "Overridden": [inherit_status.accepted(), StatusCondition(
        type="Enforced", status="False", reason="Overridden", message="")],
}


@given(st.lists(st.sampled_from(sorted(MONITOR_KINDS))),
       st.lists(st.sampled_from(sorted(ACCESS_KINDS))))
def test_the_census_counts_every_policy_once_in_the_state_its_status_shows(
        monitor: list[str], access: list[str]) -> None:
    now = 1_900_000_000.0
    compiled = [_compiled(name=f"m{i}", **MONITOR_KINDS[state])  # type: ignore[arg-type]
                for i, state in enumerate(monitor)]
    found = census.census(compiled, {f"ns/a{i}": ACCESS_KINDS[state]
                                     for i, state in enumerate(access)}, now)
    assert found[census.MONITOR] == {s: monitor.count(s) for s in census.MONITOR_STATES}
    assert found[census.ACCESS] == {s: access.count(s) for s in census.ACCESS_STATES}


def test_an_accepted_access_policy_without_enforced_condition_is_accepted() -> None:
    assert census.access_state([inherit_status.accepted()]) == "Accepted"
    assert census.access_state([]) == "Accepted"


# What the services export -------------------------------------------------------------

def exported() -> set[str]:
    """Every series name of this process's registry that is Clearance's."""
    return {name for name in observability.exposed_names(REGISTRY.collect())
            if name.startswith("clearance_")}


def families() -> set[str]:
    """Every Clearance metric family (the modules that register one are imported above:
    metrics, and retries for its own counter)."""
    assert retries.RETRIES is not None
    return {family.name + ("_total" if family.type == "counter" else "")
            + ("_info" if family.type == "info" else "")
            for family in REGISTRY.collect() if family.name.startswith("clearance_")}


def test_build_info_names_the_version_and_python() -> None:
    (family,) = [f for f in REGISTRY.collect() if f.name == "clearance_build"]
    (sample,) = family.samples
    assert sample.name == "clearance_build_info" and sample.value == 1
    assert set(sample.labels) == {"version", "python"}
    assert sample.labels["version"] not in ("", "unknown")


def test_every_exported_metric_is_documented_in_the_operations_guide() -> None:
    page = (observability.ROOT / "docs" / "operations.md").read_text()
    section = page.split("## Metrics and alerts", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(clearance_[a-z_]+)(?:\{[^}]*\})?` \|", section,
                                re.MULTILINE))
    assert documented == families()


# The alert rules ----------------------------------------------------------------------

def test_the_rule_file_has_the_shape_prometheus_reads() -> None:
    groups = observability.rules()["groups"]
    assert groups and {g["name"] for g in groups} == {"clearance"}
    alerts = [rule["alert"] for group in groups for rule in group["rules"]]
    assert len(alerts) == len(set(alerts))
    for group in groups:
        assert set(group) <= {"name", "interval", "rules", "limit"}
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert re.fullmatch(r"Clearance[A-Z][A-Za-z]+", rule["alert"])
            assert DURATION.match(rule["for"])
            assert rule["labels"]["severity"] in SEVERITIES
            assert set(rule["annotations"]) == {"summary", "description"}
            assert all(isinstance(v, str) for v in rule["labels"].values())


def test_the_alerts_asked_for_are_there() -> None:
    alerts = {alert for alert, _ in observability.rule_expressions()}
    assert {"ClearanceConsumerLag", "ClearanceRevisionNotAdvancing", "ClearanceErrorRate",
            "ClearanceInvalidationLatency", "ClearanceHeartbeatMissing"} <= alerts


def test_every_rule_parses_and_names_only_exported_metrics() -> None:
    used = observability.metric_names(expr for _, expr in observability.rule_expressions())
    assert used and used <= exported(), used - exported()


def test_the_operator_resource_holds_the_rule_file_unchanged() -> None:
    resource = yaml.safe_load(observability.PROMETHEUS_RULE.read_text())
    assert resource["kind"] == "PrometheusRule"
    assert resource["spec"] == observability.rules()


def test_the_pod_monitor_selects_the_four_services_on_their_metrics_port() -> None:
    monitor = yaml.safe_load((DEPLOY / "prometheus" / "podmonitor.yaml").read_text())
    selector = monitor["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    for service in ("watcher", "compiler", "cache-invalidator", "decision"):
        for doc in yaml.safe_load_all((DEPLOY / "kubernetes" / f"{service}.yaml").read_text()):
            if doc["kind"] != "Deployment":
                continue
            template = doc["spec"]["template"]
            assert selector.items() <= template["metadata"]["labels"].items()
            ports = [p for c in template["spec"]["containers"] for p in c.get("ports", ())]
            assert endpoint["port"] in {p["name"] for p in ports}
    kustomized = yaml.safe_load((DEPLOY / "prometheus" / "kustomization.yaml").read_text())
    assert set(kustomized["resources"]) == {"podmonitor.yaml", "prometheusrule.yaml"}


PROMTOOL = shutil.which("promtool")


def test_promtool_accepts_the_rules_and_their_unit_tests(tmp_path: Path) -> None:
    # Debian's prometheus package ships it; `python3 dev.py test` installs it (no PyPI
    # package does). Never skipped: without it this test fails and says so.
    assert PROMTOOL is not None, "promtool is missing: apt-get install prometheus"
    for args in (["check", "rules", str(observability.RULES)],
                 ["test", "rules", str(DEPLOY / "prometheus" / "clearance-rules.test.yaml")]):
        done = subprocess.run([PROMTOOL, *args], capture_output=True, text=True,
                              cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


# The dashboard ------------------------------------------------------------------------

def test_the_dashboard_is_a_grafana_dashboard_on_a_chosen_prometheus() -> None:
    board = observability.dashboard()
    assert board["uid"] == "clearance" and board["schemaVersion"] >= 36
    (variable,) = board["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource", "datasource", "prometheus")
    panels = list(observability.dashboard_panels(board))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))


def test_every_dashboard_query_parses_and_names_only_exported_metrics() -> None:
    used = observability.metric_names(
        expr for _, expr in observability.dashboard_expressions())
    assert used and used <= exported(), used - exported()


def test_the_dashboard_shows_the_operational_facts() -> None:
    used = observability.metric_names(
        expr for _, expr in observability.dashboard_expressions())
    assert {"clearance_build_info", "clearance_revision", "clearance_policies",
            "clearance_connection_up", "clearance_consumer_lag",
            "clearance_heartbeat_age_seconds"} <= used


def test_forgetting_a_service_removes_its_revision_and_lag() -> None:
    metrics.REVISION.labels(service="unit-test").set(3)
    metrics.CONSUMER_LAG.labels(service="unit-test", consumer="c").set(2)
    metrics.forget("unit-test")
    assert "unit-test" not in {s.labels.get("service") for f in REGISTRY.collect()
                               for s in f.samples if f.name in ("clearance_revision",
                                                                "clearance_consumer_lag")}


@given(amounts=st.lists(st.tuples(st.floats(0, 10, allow_nan=False), st.integers(0, 50)),
                        max_size=6))
def test_a_batch_of_observations_records_what_one_by_one_records(
        amounts: list[tuple[float, int]]) -> None:
    """The responder records one batch's latency once, for every reply of it."""
    exports = []
    for together in (False, True):
        registry = CollectorRegistry()
        histogram = Histogram("t_seconds", "t", ["subject"], registry=registry,
                              buckets=(0.001, 0.5, 1, 5)).labels(subject="s")
        for amount, count in amounts:
            if together:
                metrics.observe_many(histogram, amount, count)
            else:
                for _ in range(count):
                    histogram.observe(amount)
        exports.append(generate_latest(registry).decode())
    assert _same(exports[0], exports[1])


def _same(one: str, other: str) -> bool:
    """The same buckets and count; the same sum but for its last digits (a product
    against repeated additions); creation times aside."""
    def parts(text: str) -> tuple[list[str], float]:
        lines = [line for line in text.splitlines() if not line.startswith("#")]
        total = [float(line.split()[-1]) for line in lines if "_sum" in line]
        return [line for line in lines if "_sum" not in line and "_created" not in line], \
            sum(total)
    (a, x), (b, y) = parts(one), parts(other)
    return a == b and abs(x - y) <= 1e-9 * max(1.0, abs(x))
