"""Status written back, as deployed: the CRDs show it and the watcher may write only it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from clearance_core.folding.registry import REGISTRY, SPECS, STATUS_WRITTEN

ROOT = Path(__file__).resolve().parents[2]


def _crd(kind: str) -> dict[str, Any]:
    spec = REGISTRY[kind]
    path = ROOT / "deploy/crds" / f"{spec.plural}.{spec.group}.yaml"
    crd: dict[str, Any] = yaml.safe_load(path.read_text())
    return crd


def test_the_written_kinds_are_the_policies() -> None:
    assert {"monitoraccesspolicy", "accesspolicy"} == STATUS_WRITTEN


def test_their_crds_have_a_status_subresource_and_show_state_message_and_age() -> None:
    for kind in STATUS_WRITTEN:
        (version,) = _crd(kind)["spec"]["versions"]
        assert version["subresources"] == {"status": {}}, kind
        columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
        assert columns["State"]["jsonPath"] == ".status.state", kind
        assert columns["Message"]["jsonPath"] == ".status.message", kind
        assert columns["Age"]["jsonPath"] == ".metadata.creationTimestamp", kind
        assert all(columns[n].get("priority", 0) == 0 for n in ("State", "Message", "Age"))
        assert list(columns)[-3:] == ["State", "Message", "Age"], kind
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        assert {"state", "message", "conditions", "observedGeneration"} <= set(status), kind


def test_the_watcher_may_patch_exactly_the_policies_statuses() -> None:
    documents = list(yaml.safe_load_all((ROOT / "deploy/kubernetes/rbac.yaml").read_text()))
    role = next(d for d in documents
                if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "clearance-watcher")
    writes = {(group, resource, verb) for rule in role["rules"]
              for group in rule["apiGroups"] for resource in rule["resources"]
              for verb in rule["verbs"] if verb not in ("get", "list", "watch")}
    assert writes == {
        ("clusterpulse.io", "monitoraccesspolicies/status", "patch"),
        ("clearance.io", "accesspolicies/status", "patch"),
        # The decision service's, unchanged: bearer tokens (docs/security.md).
        ("authentication.k8s.io", "tokenreviews", "create"),
    }
    # Status rules grant nothing else, and the read rules nothing on a subresource.
    for rule in role["rules"]:
        if any(r.endswith("/status") for r in rule["resources"]):
            assert rule["verbs"] == ["patch"]
        else:
            assert all("/" not in r for r in rule["resources"])
    assert {(s.group, f"{s.plural}/status") for s in SPECS if s.writes_status} == {
        (g, r) for g, r, v in writes if v == "patch"}
