"""Every ``clearance`` question against the example fleet under ``clearance up``, in each
output format; exit statuses as kubectl's; NATS credentials and TLS on secured servers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nkeys
import pytest
import yaml

from clearance_runtime.process import servers
from tests.integration.test_clearance_up import (
    GUARDRAILS_WITHOUT_METRICS,
    Fleet,
    clearance,
    stop,
)
from tests.integration.test_nats_accounts import _self_signed

BOB = ["--user", "bob", "--group", "developers"]
WALKTHROUGH = Path(__file__).resolve().parents[2] / "docs" / "walkthrough"
ALICE = ["--user", "alice", "--group", "platform-team"]
#: command line -> (a member of its JSON reply, the first words of its table's header).
QUESTIONS: dict[str, tuple[list[str], str, list[str]]] = {
    "check": (["check", *BOB, "--cluster", "staging-us-east", "--type", "pods"], "decision",
              ["DECISION", "POLICY"]),
    "batch": (["batch", *BOB, "checks.yaml"], "results", ["#", "RESOURCE", "DECISION"]),
    "can-i": (["can-i", "list", "pods", "-n", "shop", "--as", "bob", "--as-group",
               "developers"], "status", ["yes"]),
    "can-i --list": (["can-i", "--list", "-n", "shop", *BOB], "status",
                     ["RESOURCES", "NON-RESOURCE-URLS"]),
    "who-can": (["who-can", "list", "pods", "-n", "shop"], "users", ["KIND", "NAME"]),
    "who-can-see": (["who-can-see", "prod-us-east", "--type", "pods", "-n", "shop"],
                    "subjects", ["KIND", "NAME", "DECISION", "POLICY"]),
    "filter": (["filter", *BOB, "--cluster", "staging-us-east", "--type", "pvc", "pvcs.json"],
               "items", ["partial:", "1", "of", "2", "visible"]),
    "metrics": (["metrics", *BOB, "--cluster", "staging-us-east", "metrics.yaml"], "metrics",
                ["partial"]),
    "custom-types": (["custom-types", "--user", "sam", "--group", "security"], "types",
                     ["TYPE", "certificate"]),
    "permissions": (["permissions", *BOB], "clusters", ["CLUSTER", "DECISION", "PERMISSIONS"]),
    "policies": (["policies", "--user", "dave", "--group", "developers", "--group",
                  "contractors"], "policies", ["NAMESPACE", "NAME", "PRIORITY"]),
    "effective": (["effective", "fleet"], "rules", ["fleet", "(revision"]),
    "reach": (["reach", "clearance-system/fleet-baseline"], "targets", ["TARGET", "fleet"]),
    "simulate": (["simulate", "guardrails.yaml"], "targets", ["apply", "guardrails.yaml:"]),
    "policy-status": (["policy-status", "accesspolicy", "shop/shop-intent"], "conditions",
                      ["TYPE", "STATUS", "REASON"]),
    "search": (["search", *ALICE, "search.json"], "items", ["1", "of", "2", "visible"]),
    "search-plan": (["search-plan", *ALICE], "sql", ["GROUP", "RESOURCE"]),
    "status": (["status"], "services", ["REVISION", "POLICIES"]),
    "cache-clear": (["cache-clear", "--user", "bob"], "cleared", ["CLEARED"]),
    "request": (["request", "clearance.v1.status"], "policies", ["FIELD", "VALUE"]),
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    started = Fleet(tmp_path_factory.mktemp("cli-fleet") / "state")
    yield started.env
    stop(started.up)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README walkthrough's request files (docs/walkthrough), and a policy to
    simulate."""
    here = tmp_path_factory.mktemp("cli-files")
    for path in WALKTHROUGH.iterdir():
        shutil.copy(path, here / path.name)
    (here / "guardrails.yaml").write_text(GUARDRAILS_WITHOUT_METRICS)
    return here


def _member(fmt: str, text: str) -> dict[str, Any]:
    value = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    assert isinstance(value, dict)
    return value


@pytest.mark.parametrize("fmt", ["table", "json", "yaml"])
@pytest.mark.parametrize("name", list(QUESTIONS))
def test_every_question_in_every_format(fleet: dict[str, str], files: Path, name: str,
                                        fmt: str) -> None:
    argv, member, header = QUESTIONS[name]
    done = clearance(fleet, *argv, "-o", fmt, cwd=files)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    if fmt == "table":
        assert done.stdout.split()[:len(header)] == header, done.stdout
    else:
        assert member in _member(fmt, done.stdout), done.stdout


def test_answers_in_the_tables(fleet: dict[str, str], files: Path) -> None:
    policies = clearance(fleet, *QUESTIONS["policies"][0]).stdout.splitlines()
    assert [line.split()[:2] for line in policies[1:]] == [
        ["clusterpulse", "contractors-no-production"], ["clusterpulse", "developers-non-prod"]]
    rows = {line.split()[0]: line.split()[1:] for line in
            clearance(fleet, *QUESTIONS["permissions"][0]).stdout.splitlines()[1:]}
    assert rows["dev-sandbox"] == ["allow", "view"]
    assert rows["prod-us-east"] == ["deny", "-"]
    who = clearance(fleet, *QUESTIONS["who-can"][0]).stdout.splitlines()[1:]
    assert [line.split() for line in who] == [
        ["User", "system:serviceaccount:shop:ci"], ["Group", "developers"],
        ["Group", "platform-team"]]
    seeing = {tuple(line.split()[:2]): line.split()[2:] for line in
              clearance(fleet, *QUESTIONS["who-can-see"][0]).stdout.splitlines()[1:]}
    assert seeing["user", "bob"] == ["partial", "shop/shop-intent"]
    assert seeing["user", "dave"] == ["deny", "clusterpulse/contractors-no-production"]
    assert seeing["group", "developers"] == ["partial", "shop/shop-intent"]
    assert seeing["others", "*"] == ["deny", "-"]
    assert list(seeing)[-1] == ("others", "*")
    batch = clearance(fleet, *QUESTIONS["batch"][0], cwd=files).stdout.splitlines()
    assert [line.split()[:4] for line in batch[1:]] == [
        ["0", "cluster", "dev-sandbox", "allow"],
        ["1", "pods", "prod-us-east/shop/*", "partial"]]  # as the README shows
    visible = clearance(fleet, *QUESTIONS["filter"][0], cwd=files).stdout
    assert "data-0" in visible and "scratch" not in visible


def test_can_i_exit_statuses_like_kubectl(fleet: dict[str, str]) -> None:
    ask = ["can-i", "list", "pods", "--as", "bob", "--as-group", "developers"]
    yes = clearance(fleet, *ask, "-n", "shop")
    assert (yes.returncode, yes.stdout) == (0, "yes\n")
    no = clearance(fleet, *ask, "-n", "payments")
    assert (no.returncode, no.stdout) == (1, "no\n")
    quiet = clearance(fleet, *ask, "-n", "payments", "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (1, "", "")
    assert clearance(fleet, *ask, "-n", "shop", "-q").returncode == 0
    # All namespaces: the RoleBinding in shop is not enough.
    assert clearance(fleet, *ask, "-A", "-q").returncode == 1
    assert clearance(fleet, "can-i", "get", "pods/log", "--as", "alice",
                     "--as-group", "platform-team", "-A", "-q").returncode == 0
    as_json = clearance(fleet, *ask, "-n", "payments", "-o", "json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["status"]["allowed"] is False


def test_check_exit_statuses_like_can_i(fleet: dict[str, str]) -> None:
    """A script can ask `check -q` and branch on the answer: 0 allow or partial, 1 deny."""
    allow = clearance(fleet, "check", "--user", "bob", "--cluster", "dev-sandbox", "-q")
    assert (allow.returncode, allow.stdout, allow.stderr) == (0, "", "")
    deny = clearance(fleet, "check", "--user", "bob", "--cluster", "prod-us-east", "-q")
    assert (deny.returncode, deny.stdout, deny.stderr) == (1, "", "")
    partial = clearance(fleet, "check", "--user", "bob", "--cluster", "staging-us-east",
                        "--type", "pods", "-q")
    assert partial.returncode == 0
    shown = clearance(fleet, "check", "--user", "bob", "--cluster", "prod-us-east")
    assert shown.returncode == 1 and "deny" in shown.stdout
    version = clearance(fleet, "--version")
    assert version.returncode == 0 and version.stdout.startswith("clearance ")


def test_errors_are_one_clear_line_with_a_status_of_2_or_3(fleet: dict[str, str]) -> None:
    refused = clearance(fleet, "request", "clearance.v1.check", "{}", "-o", "table")
    assert refused.returncode == 2
    assert refused.stderr.startswith("Error from server (bad_request): ")
    assert json.loads(clearance(fleet, "request", "clearance.v1.check", "{}").stderr)[
        "error"]["code"] == "bad_request"
    nobody = clearance(fleet, "request", "clearance.v1.nothing")
    assert nobody.returncode == 3
    # Clearance runs (its status answers): the subject is what is wrong.
    assert nobody.stderr.startswith(
        "error: no service answers clearance.v1.nothing (is it a Clearance subject? known "
        "subjects: clearance.v1.cache.clear, clearance.v1.check, "), nobody.stderr
    port = servers.free_port()
    gone = clearance(fleet, "status", "-s", f"nats://127.0.0.1:{port}", "--timeout", "1")
    assert gone.returncode == 3
    assert gone.stderr.startswith(f"error: cannot reach NATS at nats://127.0.0.1:{port}")
    # A cluster's several URLs: none answering is the same clear line, naming them all;
    # one that answers (listed after a dead one) is enough.
    other = servers.free_port()
    cluster = f"nats://127.0.0.1:{port}, nats://u:secret@127.0.0.1:{other}"
    none = clearance(fleet, "status", "-s", cluster, "--timeout", "2")
    assert none.returncode == 3
    assert none.stderr.startswith(f"error: cannot reach NATS at nats://127.0.0.1:{port},"
                                  f"nats://127.0.0.1:{other}"), none.stderr
    assert "secret" not in none.stderr
    typo = clearance(fleet, "status", "-s", f"nats://127.0.0.1:{port};http://x")
    assert typo.returncode == 2 and typo.stderr.startswith("error: --server"), typo.stderr
    live = clearance(fleet, "status", "-s", f"nats://127.0.0.1:{port},{fleet['CLEARANCE_NATS_URL']}")
    assert live.returncode == 0, live.stderr
    unknown = clearance(fleet, "who-can-see", "nowhere")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("Error from server (not_found): cluster 'nowhere'")
    for done in (refused, nobody, gone, none, typo, unknown):
        assert "Traceback" not in done.stderr and done.stdout == ""


def test_unknown_names_are_warned_of_on_stderr(fleet: dict[str, str], tmp_path: Path) -> None:
    """A misspelled cluster, type, user, verb or resource: the answer and its exit status
    as before, and a ``Warning:`` line on stderr (kept in the reply with -o json)."""
    east = 'Warning: cluster "prod-us-eas" is not in the inventory (did you mean ' \
           '"prod-us-east"?)\n'
    typo = clearance(fleet, "check", *BOB, "--cluster", "prod-us-eas")
    assert (typo.returncode, typo.stderr) == (1, east)
    assert typo.stdout.split()[6] == "deny"
    as_json = clearance(fleet, "check", *BOB, "--cluster", "prod-us-eas", "-o", "json")
    assert as_json.returncode == 1 and as_json.stderr == ""
    assert json.loads(as_json.stdout)["warnings"] == [east[len("Warning: "):-1]]
    quiet = clearance(fleet, "check", *BOB, "--cluster", "prod-us-eas", "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (1, "", "")
    pods = clearance(fleet, "check", *BOB, "--cluster", "staging-us-east", "--type", "pdos")
    assert pods.returncode == 1 and pods.stderr == (
        'Warning: type "pdos" is neither a built-in type nor declared by a MetricSource: its '
        'items are hidden (did you mean "pods"?)\n')
    nobody = clearance(fleet, "check", "--user", "bbo", "--cluster", "dev-sandbox")
    assert nobody.stderr == (
        'Warning: no policy names principal "bbo" or any of its groups: it is answered as '
        'anyone unnamed is ("others" in who-can-see)\n')
    checks = yaml.safe_load((WALKTHROUGH / "checks.yaml").read_text())
    checks.append({"action": "view", "resource": {"type": "cluster", "name": "prod-us-eas"}})
    (tmp_path / "checks.yaml").write_text(yaml.safe_dump(checks))
    batch = clearance(fleet, "batch", *BOB, "checks.yaml", cwd=tmp_path)
    assert batch.returncode == 0 and batch.stderr == east.replace("Warning: ", "Warning: #2: ")
    verb = clearance(fleet, "can-i", "lst", "pods", "--as", "bob", "-n", "shop")
    assert (verb.returncode, verb.stdout) == (1, "no\n")
    assert verb.stderr == ("Warning: verb 'lst' is not a known verb\n"
                           '  no RBAC rule names verb "lst"\n')
    resource = clearance(fleet, "can-i", "list", "pdos", "--as", "bob", "--as-group",
                         "developers", "-n", "shop")
    assert (resource.returncode, resource.stdout) == (1, "no\n")
    assert resource.stderr == (
        "Warning: resource 'pdos' is neither a built-in Kubernetes resource nor named by any "
        'Role or ClusterRole rule\n  no RBAC rule names resource "pdos"\n')
    known = clearance(fleet, "can-i", "list", "pods", "--as", "bob", "-n", "payments")
    assert (known.returncode, known.stderr) == (1, "")


# Credentials and TLS ----------------------------------------------------------------------

_SEED = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
_NKEY_PUBLIC = nkeys.from_seed(_SEED).public_key.decode()


def _secured(tmp: Path, block: str) -> tuple[servers.Server, str]:
    port = servers.free_port()
    conf = tmp / "nats.conf"
    conf.write_text(f"host: 127.0.0.1\nport: {port}\n{block}\n")
    server = servers.Server(name="nats-server", argv=[servers.nats_binary(), "-c", str(conf)],
                            port=port, log_path=tmp / "nats.log")
    server.start()
    return server, f"nats://127.0.0.1:{port}"


def _connected(env: dict[str, str], url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """A request nobody serves: status 3 "no service answers" once connected."""
    return clearance(env, "request", "clearance.v1.status", "-s", url, "--timeout", "2", *flags)


def test_credentials_from_flags_and_environment(tmp_path: Path) -> None:
    seed = tmp_path / "user.nk"
    seed.write_bytes(_SEED)
    server, url = _secured(tmp_path, (
        "authorization { users = [ {user: ops, password: s3cret}, "
        f"{{nkey: {_NKEY_PUBLIC}}} ] }}"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    try:
        anonymous = _connected(env, url)
        assert anonymous.returncode == 3 and "cannot reach NATS" in anonymous.stderr
        assert "authorization" in anonymous.stderr.lower()
        assert "no service answers" in _connected(
            env, url, "--nats-user", "ops", "--nats-password", "s3cret").stderr
        with_env = {**env, "CLEARANCE_NATS_USER": "ops", "CLEARANCE_NATS_PASSWORD": "s3cret"}
        assert "no service answers" in _connected(with_env, url).stderr
        wrong = _connected(env, url, "--nats-user", "ops", "--nats-password", "nope")
        assert wrong.returncode == 3 and "Traceback" not in wrong.stderr
        assert "no service answers" in _connected(env, url, "--nats-nkey", str(seed)).stderr
    finally:
        server.stop()
    token_server, token_url = _secured(tmp_path, "authorization { token: t0ken }")
    try:
        assert "no service answers" in _connected(
            env, token_url, "--nats-token", "t0ken").stderr
        assert "no service answers" in _connected(
            {**env, "CLEARANCE_NATS_TOKEN": "t0ken"}, token_url).stderr
    finally:
        token_server.stop()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for a test cert")
def test_tls_with_a_ca_and_a_client_certificate(tmp_path: Path) -> None:
    _self_signed(tmp_path)
    server, url = _secured(tmp_path, (
        f'tls {{ cert_file: "{tmp_path / "tls.crt"}", key_file: "{tmp_path / "tls.key"}", '
        f'ca_file: "{tmp_path / "ca.crt"}", verify: true }}'))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    try:
        untrusted = _connected(env, url)
        assert untrusted.returncode == 3 and "Traceback" not in untrusted.stderr
        mutual = ["--tls-ca", str(tmp_path / "ca.crt"), "--tls-cert", str(tmp_path / "tls.crt"),
                  "--tls-key", str(tmp_path / "tls.key")]
        assert "no service answers" in _connected(env, url, *mutual).stderr
        from_env = {**env, "CLEARANCE_NATS_TLS_CA": str(tmp_path / "ca.crt"),
                    "CLEARANCE_NATS_TLS_CERT": str(tmp_path / "tls.crt"),
                    "CLEARANCE_NATS_TLS_KEY": str(tmp_path / "tls.key")}
        assert "no service answers" in _connected(from_env, url).stderr
    finally:
        server.stop()
