"""``deploy/kubernetes`` holds together as a highly available deployment: every workload has
a disruption budget, is spread across machines, stops as a lame duck within its grace
period, is probed on what its process serves, and is configured only with settings that
exist — each service's environment, resolved as the kubelet would, is read by
``Settings.from_env`` as the process would at start."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from clearance_api import nats_urls
from clearance_cli.services import CLOSE_WITHIN
from clearance_runtime.process import settings
from clearance_runtime.storage import store

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy/kubernetes"
WORKLOADS = ("Deployment", "StatefulSet")
SERVICES = {"watcher", "compiler", "cache-invalidator", "decision", "gateway", "console"}
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _documents() -> list[dict[str, Any]]:
    found = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        found += [(doc | {"_file": path.name}) for doc in yaml.safe_load_all(path.read_text())
                  if doc]
    return found


DOCS = _documents()


def _workloads() -> list[dict[str, Any]]:
    return [d for d in DOCS if d["kind"] in WORKLOADS]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = selector.get("matchLabels", {})
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def _clearance(workload: dict[str, Any]) -> bool:
    return workload["spec"]["template"]["metadata"]["labels"].get(
        "app.kubernetes.io/name") == "clearance"


def _config() -> dict[str, str]:
    (config,) = [d for d in DOCS if d["kind"] == "ConfigMap"
                 and d["metadata"]["name"] == "clearance-config"]
    return {k: str(v) for k, v in config["data"].items()}


def _environment(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: the ConfigMap first, then
    ``env`` in order, each ``$(NAME)`` replaced by an earlier value (Secrets: a stand-in
    password). An unknown reference stays literal — as in Kubernetes, where it is a bug."""
    env = dict(_config()) if container.get("envFrom") else {}
    for item in container.get("env", []):
        if "value" in item:
            value = _REF.sub(lambda m: env.get(m[1], m[0]), str(item["value"]))
        else:
            value = "pSecret0"
        env[item["name"]] = value
    return env


@pytest.mark.parametrize("workload", _workloads(), ids=lambda w: w["metadata"]["name"])
def test_every_workload_has_a_disruption_budget_and_is_spread(workload: dict[str, Any]) -> None:
    labels = workload["spec"]["template"]["metadata"]["labels"]
    budgets = [d for d in DOCS if d["kind"] == "PodDisruptionBudget"
               and _selects(d["spec"]["selector"], labels)]
    assert len(budgets) == 1, f"{workload['metadata']['name']}: {len(budgets)} budgets"
    spec = workload["spec"]["template"]["spec"]
    anti = spec.get("affinity", {}).get("podAntiAffinity", {})
    terms = [t.get("podAffinityTerm", t) for key in anti for t in anti[key]]
    spreads = spec.get("topologySpreadConstraints", [])
    assert any(t["topologyKey"] == "kubernetes.io/hostname" and _selects(t["labelSelector"], labels)
               for t in terms + spreads), workload["metadata"]["name"]


@pytest.mark.parametrize("workload", _workloads(), ids=lambda w: w["metadata"]["name"])
def test_every_container_stops_as_a_lame_duck_within_its_grace(workload: dict[str, Any]) -> None:
    spec = workload["spec"]["template"]["spec"]
    grace = spec.get("terminationGracePeriodSeconds", 30)
    for container in spec["containers"]:
        command = container["lifecycle"]["preStop"]["exec"]["command"]
        if _clearance(workload):
            # A pause, then SIGTERM, after which the process exits within CLOSE_WITHIN.
            assert command[0] == "sleep", command
            assert grace >= float(command[1]) + CLOSE_WITHIN, workload["metadata"]["name"]
            assert grace <= float(command[1]) + CLOSE_WITHIN + 5  # no needless wait
        else:
            slept = [float(n) for n in re.findall(r"sleep (\d+)", shlex.join(command))]
            assert grace > sum(slept), workload["metadata"]["name"]


def test_every_service_runs_highly_available_where_it_can() -> None:
    components = {w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]:
                  w for w in _workloads() if _clearance(w)}
    assert set(components) == SERVICES
    for name in ("watcher", "compiler", "decision", "gateway"):
        assert components[name]["spec"]["replicas"] >= 2, name


@pytest.mark.parametrize("workload", [w for w in _workloads() if _clearance(w)],
                         ids=lambda w: w["metadata"]["name"])
def test_services_are_probed_on_the_metrics_port_and_configured_with_real_settings(
        workload: dict[str, Any]) -> None:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    env = _environment(container)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert str(ports["metrics"]) == env["CLEARANCE_METRICS_PORT"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # Every CLEARANCE_* variable is a setting, or a part another one is built from.
    known = set(settings.ENV.values())
    parts = {ref for w in _workloads() if _clearance(w)
             for c in w["spec"]["template"]["spec"]["containers"]
             for item in c.get("env", []) for ref in _REF.findall(str(item.get("value", "")))}
    for name in env:
        if name.startswith("CLEARANCE_"):
            assert name in known or name in parts, f"{name}: no such setting"
    assert not any(_REF.search(v) for v in env.values()), "an unresolved $(…) reference"
    # And the process would start with it: every value decodes, every URL parses.
    parsed = settings.Settings.from_env(env)
    urls = nats_urls.parse(parsed.nats_url)
    assert len(urls) == 3, "every NATS node"
    if "CLEARANCE_REDIS_URL" in env:
        target = store.parse_sentinel(parsed.redis_url)
        assert len(target.sentinels) == 3 and target.service == "clearance"
        assert target.sentinel_password is not None


def test_valkey_is_a_primary_with_replicas_on_volumes_watched_by_three_sentinels() -> None:
    sets = {w["metadata"]["name"]: w for w in _workloads() if w["kind"] == "StatefulSet"}
    nodes, sentinels = sets["valkey"], sets["valkey-sentinel"]
    assert nodes["spec"]["replicas"] == 3 and sentinels["spec"]["replicas"] == 3
    assert nodes["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    (scripts,) = [d for d in DOCS if d["kind"] == "ConfigMap"
                  and d["metadata"]["name"] == "valkey-scripts"]
    assert "--appendonly yes" in scripts["data"]["valkey.sh"]
    assert "--replicaof" in scripts["data"]["valkey.sh"]
    assert "sentinel monitor clearance $primary 6379 2" in scripts["data"]["sentinel.sh"]
    # The Sentinels the services name are this set's pods.
    named = _config()["CLEARANCE_REDIS_SENTINELS"].split(",")
    assert named == [f"valkey-sentinel-{i}.valkey-sentinel.clearance.svc:26379"
                     for i in range(3)]


def test_kustomization_lists_every_manifest() -> None:
    listed = set(yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"])
    files = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml",
                                                       "webhook-authz-config.yaml"}
    assert files <= listed
