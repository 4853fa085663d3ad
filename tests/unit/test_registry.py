"""The kind registry is the single list: the watcher, the compiler and deploy/ agree."""

from __future__ import annotations

from pathlib import Path

import yaml

from clearance_core.folding.registry import REGISTRY, SPECS, WATCHED

ROOT = Path(__file__).resolve().parents[2]


def test_every_kind_is_listed_once_with_a_fold_or_deliberately_none() -> None:
    assert len(SPECS) == len(REGISTRY) == len(WATCHED)
    uncompiled = {spec.kind for spec in SPECS if spec.fold is None}
    assert uncompiled == {"customresourcedefinition"}


def test_the_watchers_cluster_role_grants_exactly_the_registry_kinds() -> None:
    documents = list(yaml.safe_load_all((ROOT / "deploy/kubernetes/rbac.yaml").read_text()))
    role = next(d for d in documents
                if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "clearance-watcher")
    granted = {(group, resource) for rule in role["rules"]
               if rule["verbs"] == ["get", "list", "watch"]
               for group in rule["apiGroups"] for resource in rule["resources"]}
    assert granted == {(spec.group, spec.plural) for spec in SPECS}
