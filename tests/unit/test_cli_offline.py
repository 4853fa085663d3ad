"""``clearance validate`` and ``clearance test`` as CI runs them: real processes, real
files, no server; their output and their exit statuses (0 valid/passed, 1 invalid/failed,
2 usage or unreadable input)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clearance_watcher.manifests import parse_file
from tests.support.accesspolicies import access_policy, rule
from tests.support.policies import policy

ROOT = Path(__file__).resolve().parents[2]
CLEARANCE = str(Path(sys.executable).parent / "clearance")
RBAC = "rbac.authorization.k8s.io"


def clearance(*args: str | Path, cwd: Path = ROOT,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    return subprocess.run([CLEARANCE, *map(str, args)], capture_output=True, text=True,
                          timeout=120, check=False, cwd=cwd, env={**environment, **(env or {})})


def write(path: Path, *objects: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


def source(type_name: str, *fields: str) -> dict[str, Any]:
    return {"apiVersion": "clusterpulse.io/v1alpha1", "kind": "MetricSource",
            "metadata": {"name": type_name, "namespace": "ns"},
            "spec": {"rbac": {"resourceTypeName": type_name, "filterableFields": list(fields)}}}


def issue_typos() -> list[dict[str, Any]]:
    """The typos of the issue, as a new policy author would write them."""
    typo = policy("typo", groups=["developers"], rules=[
        {"selector": {"matchName": ["prod-*"]}, "permissions": {"veiw": True}}])
    typo["spec"]["identity"]["priorty"] = typo["spec"]["identity"].pop("priority")
    spelled = access_policy("ops", namespace="clearance-system",
                            rules={"ops": {"subjects": {"grups": ["ops"]}}})
    return [typo, spelled]


# validate -------------------------------------------------------------------------------


def test_the_shipped_manifests_are_valid() -> None:
    done = clearance("validate", "examples", "docs/rfc0009")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""
    assert "0 errors, 0 warnings" in done.stderr  # on stderr: stdout is problems only


def test_each_typo_of_the_issue_fails_with_its_path_and_a_suggestion(tmp_path: Path) -> None:
    write(tmp_path / "typos.yaml", *issue_typos())
    done = clearance("validate", tmp_path)
    assert done.returncode == 1
    where = f"{tmp_path / 'typos.yaml'}"
    assert done.stdout.splitlines() == [
        f'{where}:1 MonitorAccessPolicy ns/typo: spec.identity.priorty: unknown field '
        '(did you mean "priority"?)',
        f'{where}:1 MonitorAccessPolicy ns/typo: spec.scope.clusters.rules[0].selector.'
        'matchName: unknown field (did you mean "matchNames"?)',
        f'{where}:1 MonitorAccessPolicy ns/typo: spec.scope.clusters.rules[0].permissions.'
        'veiw: unknown field (did you mean "view"?)',
        f'{where}:2 AccessPolicy clearance-system/ops: spec.rules.ops.subjects.grups: '
        'unknown field (did you mean "groups"?)']
    report = json.loads(clearance("validate", tmp_path, "-o", "json").stdout)
    assert (report["valid"], report["objects"], report["errors"]) == (False, 2, 4)
    assert report["problems"][0] == {
        "severity": "error", "location": f"{where}:1", "kind": "MonitorAccessPolicy",
        "namespace": "ns", "name": "typo", "path": "spec.identity.priorty",
        "message": "unknown field", "suggestion": "priority"}


def test_objects_are_checked_against_each_other_as_the_compiler_does(tmp_path: Path) -> None:
    filtered = policy("fields", groups=["g"], rules=[{"selector": {"matchNames": ["*"]},
                                                      "resources": [{
        "type": "pvc", "visibility": "filtered",
        "filters": {"fields": {"owner": {"allowed": ["me"]}}}}]}])
    undeclared = policy("widgets", groups=["g"], rules=[{"selector": {"matchNames": ["*"]},
                                                         "resources": [{"type": "widget"}]}])
    write(tmp_path / "a.yaml", source("pvc", "phase"), filtered, undeclared,
          access_policy("nowhere", namespace="nowhere", target=("Cluster", "nowhere"),
                        rules={"r": rule(users=["u"])}),
          access_policy("fleet", namespace="team", rules={"r": rule(users=["u"])}))
    lines = clearance("validate", tmp_path / "a.yaml").stdout.splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "rules[0] filters pvc on field 'owner', which MetricSource ns/pvc does not list in "
        "filterableFields",
        "warning: custom type 'widget' has no MetricSource",
        "warning: TargetNotFound: Policy target Cluster nowhere was not found",
        "Unauthorized: Policy namespace team may not govern Fleet fleet: only the admin "
        "namespaces (clearance-system) may write policies for it"]
    # The admin namespaces are the compiler's: the flag, else CLEARANCE_ADMIN_NAMESPACES.
    for extra, env in ((["--admin-namespaces", "clearance-system,team"], {}),
                       ([], {"CLEARANCE_ADMIN_NAMESPACES": "team"})):
        done = clearance("validate", tmp_path / "a.yaml", *extra, env=env)
        assert "Unauthorized" not in done.stdout, extra


def test_warnings_pass_unless_asked_not_to(tmp_path: Path) -> None:
    write(tmp_path / "w.yaml", policy("widgets", groups=["g"], rules=[{
        "selector": {"matchNames": ["*"]}, "resources": [{"type": "widget"}]}]))
    assert clearance("validate", tmp_path).returncode == 0
    assert clearance("validate", tmp_path, "--strict-warnings").returncode == 1


def test_the_compilers_own_errors_and_what_the_watcher_would_skip(tmp_path: Path) -> None:
    write(tmp_path / "rbac.yaml",
          {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding",
           "metadata": {"name": "rb", "namespace": "shop"},
           "subjects": [{"kind": "Group", "apiGroup": RBAC, "name": "dev"}]},
          {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding",
           "metadata": {"name": "ok", "namespace": "shop"},
           "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
           "subjects": [{"kind": "Group", "apiGroup": RBAC, "name": "dev"}]})
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    write(tmp_path / "other.yaml", {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "c"}})
    lines = clearance("validate", tmp_path).stdout.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'broken.yaml'}: cannot read: ")
    assert lines[0].endswith("(the file is skipped)")
    assert lines[1:] == [
        f"{tmp_path / 'other.yaml'}:1: unsupported kind 'ConfigMap' (the watcher skips the "
        "whole file)",
        f"{tmp_path / 'rbac.yaml'}:1 RoleBinding shop/rb: roleRef is required"]


def test_what_the_watcher_would_reject_is_reported_and_yaml_dates_are_text(
        tmp_path: Path) -> None:
    dated = policy("dated", users=["u"])
    dated["spec"]["lifecycle"]["validity"]["notBefore"] = "DATE"
    text = yaml.safe_dump_all([policy("n" * 300, users=["u"]), dated], sort_keys=False)
    (tmp_path / "m.yaml").write_text(text.replace("DATE", "2026-01-01T00:00:00Z"))
    assert "notBefore: 2026-01-01T00:00:00Z" in (tmp_path / "m.yaml").read_text()
    lines = clearance("validate", tmp_path).stdout.splitlines()
    assert len(lines) == 1  # the unquoted timestamp is published as its text: valid
    assert lines[0].endswith(": rejected by the watcher: metadata.name is 300 characters; "
                             "the limit is 253")


def test_usage_and_unreadable_files_exit_2(tmp_path: Path) -> None:
    done = clearance("validate", tmp_path / "missing")
    assert (done.returncode, done.stdout) == (2, "")
    assert "no such file or directory" in done.stderr
    assert clearance("validate").returncode == 2
    if os.geteuid() != 0:  # root reads any file
        locked = write(tmp_path / "locked.yaml", policy())
        locked.chmod(0)
        assert clearance("validate", locked).returncode == 2


def test_a_policy_test_file_beside_the_manifests_is_not_one_of_them() -> None:
    """Neither the watcher (no "manifest_skipped" for it) nor validate reads it."""
    tests = ROOT / "examples" / "tests.yaml"
    assert parse_file(tests) == []
    report = json.loads(clearance("validate", "examples", "-o", "json").stdout)
    assert report["files"] == len(list((ROOT / "examples").glob("*.yaml")))
    assert not any("tests.yaml" in p["location"] for p in report["problems"])


# test -----------------------------------------------------------------------------------


def test_the_example_fleets_tests_pass() -> None:
    done = clearance("test", "examples/tests.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(line.startswith("PASS  examples/tests.yaml: ") for line in lines[:-1])
    assert lines[-1] == f"{len(lines) - 1} passed, 0 failed"
    assert len(lines) > 15


def test_they_fail_naming_the_deciding_policy_when_a_policy_is_broken(tmp_path: Path
                                                                      ) -> None:
    """A typo in the contractors' Deny: it takes no part, and the shop team's intent lets
    dave see the shop's pods — which the test file catches."""
    fleet = tmp_path / "examples"
    shutil.copytree(ROOT / "examples", fleet)
    policies = fleet / "policies.yaml"
    text = policies.read_text()
    broken = text.replace("- selector: {matchLabels: {environment: production}}",
                          "- selector: {matchLabel: {environment: production}}")
    assert broken != text
    policies.write_text(broken)
    done = clearance("test", fleet / "tests.yaml")
    assert done.returncode == 1
    failed = done.stdout.split("FAIL  ")[1:]
    assert len(failed) == 2
    shop = next(block for block in failed if "shop intent either" in block)
    assert "expected deny, got partial" in shop
    assert "decided by shop/shop-intent: pods filtered by AccessPolicy rule " \
           "shop-developers of shop/shop-intent" in shop
    assert done.stdout.splitlines()[-1] == f"{17 - 2} passed, 2 failed"
    assert "1 object of the manifests is invalid and takes no part" in done.stderr
    report = json.loads(clearance("test", fleet / "tests.yaml", "-o", "json").stdout)
    assert (report["passed"], report["failed"]) == (15, 2)


def test_expectations_of_policy_permissions_filters_and_time(tmp_path: Path) -> None:
    write(tmp_path / "m.yaml", {"apiVersion": "cluster.open-cluster-management.io/v1",
                                "kind": "ManagedCluster", "metadata": {"name": "c1"}},
          policy("p", users=["u"], default="all", not_after="2030-01-01T00:00:00Z"))
    cases = [
        {"name": "ok", "principal": {"username": "u"}, "now": "2029-01-01T00:00:00Z",
         "resource": {"type": "pods", "cluster": "c1"}, "expect": "allow", "policy": "ns/p",
         "permissions": ["view"], "reason": "default: all"},
        {"name": "expired", "principal": {"username": "u"},
         "resource": {"type": "cluster", "name": "c1"}, "expect": "allow"},
        {"name": "filters", "principal": {"username": "u"},
         "resource": {"type": "cluster", "name": "c1"}, "expect": "allow",
         "now": "2029-01-01T00:00:00Z", "filters": {"pods": {}}, "policy": "ns/other"},
        {"name": "refused", "principal": {"username": ""},
         "resource": {"type": "cluster", "name": "c1"}, "expect": "deny"},
    ]
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(
        {"manifests": "m.yaml", "now": "2031-01-01T00:00:00Z", "tests": cases}))
    done = clearance("test", tmp_path / "t.yaml", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"PASS  {tmp_path / 't.yaml'}: ok",
        f"FAIL  {tmp_path / 't.yaml'}: expired",
        "      expected allow, got deny",
        "      decided by no policy: no policy in force matches this principal and cluster",
        f"FAIL  {tmp_path / 't.yaml'}: filters",
        "      expected policy ns/other, got ns/p",
        '      expected filters to include {"pods":{}}, got null',
        "      decided by ns/p: allowed by policy ns/p (default: all)",
        f"FAIL  {tmp_path / 't.yaml'}: refused",
        "      the decision service would refuse this check: principal.username must not "
        "be empty",
        "1 passed, 3 failed"]


@pytest.mark.parametrize(("written", "says"), [
    ({"manifests": ".", "tests": [{"name": "x", "principal": {"username": "u"},
                                   "resource": {"type": "cluster", "name": "c"},
                                   "expct": "allow"}]},
     'tests[0].expct: unknown field (did you mean "expect"?)'),
    ({"manifests": ".", "tests": [{"name": "x", "principal": {"username": "u"},
                                   "resource": {"type": "cluster", "name": "c"},
                                   "expect": "maybe"}]},
     "Invalid enum value 'maybe'"),
    ({"manifest": ".", "tests": []}, 'manifest: unknown field (did you mean "manifests"?)'),
])
def test_a_malformed_test_file_is_a_usage_error(tmp_path: Path, written: dict[str, Any],
                                                says: str) -> None:
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(written))
    done = clearance("test", tmp_path / "t.yaml")
    assert done.returncode == 2
    assert says in done.stderr
