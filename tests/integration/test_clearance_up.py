"""``clearance up`` as a new user runs it: embedded servers, examples/, an answer, Ctrl-C;
then the walkthrough of the example fleet, asked with the ``clearance`` command (check,
effective, simulate, reach) as the README and docs/guide/ show it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from clearance_runtime.process import servers
from tests.attack.clients import listening_addresses

ROOT = Path(__file__).resolve().parents[2]
CLEARANCE = str(Path(sys.executable).parent / "clearance")
#: One event per object in examples/: the revision at which every example is loaded.
EXAMPLES_LOADED = 32


def start_up(state: Path) -> tuple[subprocess.Popen[str], dict[str, str], tuple[int, int]]:
    """``clearance up`` on free ports, once every example is loaded."""
    nats_port, redis_port = servers.free_port(), servers.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    up = subprocess.Popen(
        [CLEARANCE, "up", "--state", str(state), "--manifests", str(ROOT / "examples"),
         "--nats-port", str(nats_port), "--redis-port", str(redis_port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert up.stdout is not None
        banner = "".join(up.stdout.readline() for _ in range(4))
        assert "Clearance is up." in banner
        env["CLEARANCE_NATS_URL"] = f"nats://127.0.0.1:{nats_port}"
        deadline = time.monotonic() + 20
        while True:
            done = clearance(env, "request", "clearance.v1.status")
            if done.returncode == 0 and json.loads(done.stdout)["revision"] >= EXAMPLES_LOADED:
                break
            assert time.monotonic() < deadline, done.stderr
            time.sleep(0.2)
    except BaseException:
        up.kill()
        up.wait()
        raise
    return up, env, (nats_port, redis_port)


def clearance(env: dict[str, str], *args: str,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLEARANCE, *args], env=env, capture_output=True, text=True,
                          timeout=30, check=False, cwd=cwd)


def stop(up: subprocess.Popen[str]) -> float:
    """Ctrl-C; the seconds it took to exit."""
    up.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        assert up.wait(timeout=20) == 0
    finally:
        if up.poll() is None:
            up.kill()
    return time.monotonic() - sent


class Fleet:
    """The example fleet under ``clearance up``: its process, ports and the environment
    for the ``clearance`` command."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.up, self.env, self.ports = start_up(state)
        assert self.up.stdout is not None
        self.banner = ""  # the rest of it, after the lines start_up read
        while "Ctrl-C stops everything." not in self.banner:
            self.banner += self.up.stdout.readline()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One ``clearance up`` for the module; its last test stops it (Ctrl-C)."""
    started = Fleet(tmp_path_factory.mktemp("fleet") / "state")
    yield started
    if started.up.poll() is None:
        stop(started.up)


@pytest.fixture
def fleet(running: Fleet) -> dict[str, str]:
    return running.env


def test_up_serves_https_and_the_console_on_loopback_only(running: Fleet) -> None:
    """The banner's addresses are where it listens — 127.0.0.1 only — and it says the
    gateway asks no client authentication there (what `curl` in the banner relies on)."""
    gateway = re.search(r"HTTPS\s+(https://127\.0\.0\.1:(\d+))", running.banner)
    console = re.search(r"Console\s+http://127\.0\.0\.1:(\d+)/", running.banner)
    assert gateway is not None and console is not None, running.banner
    assert "no client authentication: loopback only" in running.banner
    for port in (int(gateway[2]), int(console[1])):
        assert listening_addresses(port) == {"127.0.0.1"}
    context = ssl.create_default_context(
        cafile=str(running.state / "gateway" / "tls.crt"))
    request = urllib.request.Request(
        gateway[1] + "/access/v1/evaluation", method="POST", data=json.dumps({
            "subject": {"type": "user", "id": "alice", "properties": {
                "groups": ["platform-team"]}},
            "action": {"name": "view"},
            "resource": {"type": "cluster", "id": "prod-us-east"}}).encode())
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        assert json.loads(response.read())["decision"] is True


def test_up_answers_the_example_question(fleet: dict[str, str]) -> None:
    done = clearance(fleet, "check", "--user", "alice", "--cluster", "prod-us-east",
                     "-o", "json")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert (reply["decision"], reply["policy"]) == ("allow", "clusterpulse/platform-full")


def check(env: dict[str, str], user: str, cluster: str, *extra: str) -> dict[str, Any]:
    done = clearance(env, "check", "--user", user, "--cluster", cluster, *extra, "-o", "json")
    reply: dict[str, Any] = json.loads(done.stdout)
    # The exit status answers too, as can-i's: 0 allowed (allow, partial), 1 deny.
    assert done.returncode == (0 if reply["allowed"] else 1), done.stderr
    return reply


def answer(reply: dict[str, Any]) -> tuple[str, str | None]:
    return reply["decision"], reply["policy"]


def test_the_walkthrough_answers_of_the_example_fleet(fleet: dict[str, str]) -> None:
    """The README's table, MonitorAccessPolicies and inherited AccessPolicies together."""
    assert answer(check(fleet, "carol@example.com", "prod-us-east")) == (
        "allow", "clusterpulse/platform-full")
    assert answer(check(fleet, "dave", "prod-us-east")) == (
        "deny", "clusterpulse/contractors-no-production")
    assert answer(check(fleet, "bob", "dev-sandbox")) == (
        "allow", "clusterpulse/developers-non-prod")
    assert answer(check(fleet, "bob", "prod-us-east")) == ("deny", None)
    pods = check(fleet, "bob", "staging-us-east", "--type", "pods")
    assert pods["decision"] == "partial" and set(pods["filters"]) == {"pods", "namespaces"}
    # The Fleet's default lets SREs into every cluster; the production override hides
    # payments from them there.
    olivia = check(fleet, "olivia", "staging-us-east")
    assert answer(olivia) == ("allow", "clearance-system/fleet-baseline")
    assert olivia["permissions"] == ["view", "view_metrics"]
    assert answer(check(fleet, "olivia", "prod-eu-west", "--type", "pods", "--name", "api-0",
                        "--namespace", "payments")) == ("deny", "platform/production-guardrails")
    assert answer(check(fleet, "olivia", "prod-eu-west", "--type", "pods", "--name", "api-0",
                        "--namespace", "checkout")) == (
        "allow", "platform/production-guardrails")
    # The Fleet's Deny override wins over mallory's platform-team MonitorAccessPolicy.
    assert answer(check(fleet, "mallory", "prod-us-east")) == (
        "deny", "clearance-system/fleet-baseline")
    # The shop team's intent lets developers see its pods on prod-us-east, nothing more.
    shop = check(fleet, "bob", "prod-us-east", "--type", "pods", "--namespace", "shop")
    assert answer(shop) == ("partial", "shop/shop-intent")
    assert shop["filters"]["pods"]["filters"] == {"names": {"denied": ["*-debug"]}}
    assert answer(check(fleet, "bob", "prod-us-east", "--type", "pods", "--namespace",
                        "payments")) == ("deny", None)
    assert answer(check(fleet, "dave", "prod-us-east", "--type", "pods", "--namespace",
                        "shop")) == ("deny", "clusterpulse/contractors-no-production")


def rows(output: str) -> dict[str, list[str]]:
    """The rule table of ``clearance effective``: rule name -> its columns."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("RULE "))
    table = {}
    for line in lines[start + 1:]:
        if line.startswith("policies on its path"):
            break
        cells = line.split()
        table[cells[0]] = cells[1:]
    return table


def test_effective_prints_each_rule_with_its_source_and_block(fleet: dict[str, str]) -> None:
    done = clearance(fleet, "effective", "namespace/prod-us-east/shop")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("namespace/prod-us-east/shop (revision ")
    assert rows(done.stdout) == {
        "shop-developers": ["rules", "shop/shop-intent", "Allow", "group:developers", "view",
                            "pods:filtered"],
        "sre": ["overrides", "platform/production-guardrails", "Allow", "group:sre",
                "view,viewMetrics", "namespaces:filtered"],
        "suspended": ["overrides", "clearance-system/fleet-baseline", "Deny",
                      "group:suspended", "-", "-"]}
    assert "highest first: clearance-system/fleet-baseline, platform/production-guardrails, " \
           "shop/shop-intent" in done.stdout
    staging = rows(clearance(fleet, "effective", "cluster/staging-us-east").stdout)
    assert staging["sre"][:2] == ["defaults", "clearance-system/fleet-baseline"]
    assert rows(clearance(fleet, "effective", "fleet").stdout).keys() == {"sre", "suspended"}
    missing = clearance(fleet, "effective", "cluster/nowhere")
    assert missing.returncode == 2 and "Error from server (not_found)" in missing.stderr
    unknown_set = clearance(fleet, "effective", "clusterset/staging")
    assert unknown_set.returncode == 2 and "(not_found)" in unknown_set.stderr
    usage = clearance(fleet, "effective", "namespace/shop")
    assert usage.returncode == 2 and "namespace/CLUSTER/NAME" in usage.stderr


GUARDRAILS_WITHOUT_METRICS = """\
apiVersion: clearance.io/v1alpha1
kind: AccessPolicy
metadata: {name: production-guardrails, namespace: platform}
spec:
  targetRef: {kind: ClusterSet, name: production}
  overrides:
    strategy: merge
    rules:
      sre:
        subjects: {groups: [sre]}
        permissions: {view: true}
"""


def test_simulate_prints_per_target_diffs_and_status_changes(
        fleet: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "guardrails.yaml").write_text(GUARDRAILS_WITHOUT_METRICS)
    done = clearance(fleet, "simulate", "guardrails.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "apply guardrails.yaml: 4 targets would change"
    assert [line for line in lines if not line.startswith(" ")][1:5] == [
        "clusterset/production", "cluster/prod-eu-west", "cluster/prod-us-east",
        "namespace/prod-us-east/shop"]
    assert lines[2].split() == ["~", "sre", "overrides", "platform/production-guardrails",
                                "Allow", "group:sre", "view", "-"]
    assert "status of platform/production-guardrails" in lines
    # Without its resources the override shows sre every namespace, but without metrics.
    moved = {(row[0], row[1], row[2]): row[4] for row in access_rows(done.stdout)}
    assert moved[("cluster/prod-eu-west", "group:sre", "namespaces")] == (
        "allow, changes: now wholly visible; namespaces payments no longer hidden; "
        "view_metrics revoked")
    assert moved[("cluster/prod-eu-west", "group:sre", "cluster")] == (
        "allow, loses: view_metrics revoked")
    # Nothing was applied.
    shop = rows(clearance(fleet, "effective", "namespace/prod-us-east/shop").stdout)
    assert shop["sre"][4] == "view,viewMetrics"

    deleted = clearance(fleet, "simulate", "--delete", "guardrails.yaml", cwd=tmp_path)
    assert deleted.returncode == 0, deleted.stderr
    text = deleted.stdout
    # Without the override the shop team's own sre rule holds in its namespace, and the
    # Fleet's default on the production clusters: two policies' status would move.
    assert ["~", "sre", "rules", "shop/shop-intent"] in [
        line.split()[:4] for line in text.splitlines()]
    assert "status of shop/shop-intent" in text
    assert "status of clearance-system/fleet-baseline" in text
    assert "  after:  (no such policy)" in text

    (tmp_path / "broken.yaml").write_text(GUARDRAILS_WITHOUT_METRICS.replace(
        "strategy: merge", "strategy: sideways"))
    broken = clearance(fleet, "simulate", "broken.yaml", cwd=tmp_path)
    assert broken.returncode == 1  # would not be accepted: a pipeline can refuse it
    assert "Accepted False Invalid" in broken.stdout
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")
    pod = clearance(fleet, "simulate", "pod.yaml", cwd=tmp_path)
    assert pod.returncode == 2 and "is not AccessPolicy" in pod.stderr


def access_rows(output: str) -> list[list[str]]:
    """The "who gains or loses access" table of ``clearance simulate``: TARGET, SUBJECT,
    RESOURCE, BEFORE and AFTER (the rest of the line) of each row."""
    lines = output.splitlines()
    start = lines.index("who gains or loses access (check, view)")
    assert lines[start + 1].split() == ["TARGET", "SUBJECT", "RESOURCE", "BEFORE", "AFTER"]
    found = []
    for line in lines[start + 2:]:
        if not line.startswith("  "):
            break
        target, subject, *rest = line.split()
        at = next(i for i, word in enumerate(rest) if word in ("allow", "deny", "partial"))
        found.append([target, subject, " ".join(rest[:at]), rest[at],
                      " ".join(rest[at + 1:])])
    return found


def test_simulate_shows_who_gains_the_payments_namespace(fleet: dict[str, str]) -> None:
    """docs/guide/inherited.md's dry run of the sample that drops the payments filter, pasted as
    written (from the repository's root)."""
    done = clearance(fleet, "simulate", "docs/walkthrough/guardrails-without-payments.yaml",
                     cwd=ROOT)
    assert done.returncode == 0, done.stderr
    table = access_rows(done.stdout)
    gains = [row[:4] for row in table if row[4].startswith("allow, gains:")]
    assert gains == [[f"cluster/{cluster}", subject, "namespaces", "partial"]
                     for cluster in ("prod-eu-west", "prod-us-east")
                     for subject in ("user:olivia", "group:sre")]
    assert all(row[4].endswith("namespaces payments no longer hidden")
               for row in table if row[4].startswith("allow, gains:"))
    assert {row[4] for row in table if row[2] != "namespaces"} == {"no change"}
    assert [row[:3] for row in table if row[0].startswith("namespace/")] == [
        ["namespace/prod-us-east/shop", subject, "namespace shop"]
        for subject in ("user:olivia", "group:sre")]


def test_reach_lists_the_targets_holding_a_policys_rules(fleet: dict[str, str]) -> None:
    done = clearance(fleet, "reach", "clearance-system/fleet-baseline", "--rule", "sre")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["TARGET", "fleet", "cluster/dev-sandbox",
                                   "cluster/local-cluster", "cluster/staging-us-east"]
    everywhere = clearance(fleet, "reach", "clearance-system/fleet-baseline").stdout.split()
    assert "namespace/prod-us-east/shop" in everywhere and "clusterset/production" in everywhere
    overridden = clearance(fleet, "reach", "shop/shop-intent", "--rule", "sre")
    assert overridden.returncode == 0 and overridden.stdout == ""
    assert "no target holds it" in overridden.stderr
    assert clearance(fleet, "reach", "shop/nope").returncode == 2


def test_policy_status_of_the_example_access_policies(fleet: dict[str, str]) -> None:
    def conditions(namespace: str, name: str) -> dict[str, str]:
        body = json.dumps({"kind": "AccessPolicy", "namespace": namespace, "name": name})
        done = clearance(fleet, "request", "clearance.v1.policy-status", body)
        assert done.returncode == 0, done.stderr
        return {c["type"]: c["reason"] for c in json.loads(done.stdout)["conditions"]}

    assert conditions("platform", "production-guardrails") == {
        "Accepted": "Accepted", "Enforced": "Enforced"}
    assert conditions("shop", "shop-intent")["Enforced"] == "PartiallyEnforced"
    assert conditions("clearance-system", "fleet-baseline")["Enforced"] == "PartiallyEnforced"


def test_a_second_up_on_the_same_state_refuses_and_leaves_the_first_alone(
        running: Fleet) -> None:
    """Two ``up`` on one state directory would share JetStream's store and Valkey's file:
    the second refuses at once, naming the first, instead of stopping its servers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    second = clearance(env, "up", "--state", str(running.state),
                       "--nats-port", str(servers.free_port()),
                       "--redis-port", str(servers.free_port()))
    assert second.returncode == 2, second
    assert f"another clearance up (pid {running.up.pid}) is running" in second.stderr
    assert running.up.poll() is None
    reply = json.loads(clearance(running.env, "request", "clearance.v1.status").stdout)
    assert reply["revision"] >= EXAMPLES_LOADED


def _section(lines: list[str], heading: str) -> range:
    """The line numbers of a Markdown section, its subsections included (a ``#`` inside
    a fenced block is no heading)."""
    start = lines.index(heading)
    level = len(heading) - len(heading.lstrip("#"))
    fenced = False
    for number in range(start + 1, len(lines)):
        line = lines[number]
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            hashes = len(line) - len(line.lstrip("#"))
            if hashes <= level and line[hashes:hashes + 1] == " ":
                return range(start, number)
    return range(start, len(lines))


class Shown(NamedTuple):
    """A ``$`` line of the documentation: where (file:line), the command, the exit status
    it shows with ``; echo $?`` (else None), and the output printed under it."""

    where: str
    command: str
    status: int | None
    output: list[str]


#: The sections whose console blocks a new user pastes, in the order they are read: the
#: README's quick start and walkthrough (its PATH line first), the command-line
#: reference (its warnings), and the dry runs of the example fleet's AccessPolicies.
WALKTHROUGH = (("README.md", "## Quick start"),
               ("README.md", "## The command line (`clearance`)"),
               ("docs/guide/cli.md", "# The command line (`clearance`)"),
               ("docs/guide/inherited.md", "## The example fleet's policies"))


def readme_walkthrough() -> list[Shown]:
    """The ``$`` lines of the console blocks in the WALKTHROUGH sections."""
    found: list[Shown] = []
    for path, heading in WALKTHROUGH:
        lines = (ROOT / path).read_text().splitlines()
        fence: str | None = None
        for number in _section(lines, heading):
            line = lines[number]
            if line.startswith("```"):
                fence = None if fence is not None else line[3:]
                continue
            if fence == "console" and line.startswith("$ "):
                output = []
                for out in lines[number + 1:]:
                    if out.startswith(("$ ", "```")):
                        break
                    output.append(out)
                command = line[2:]
                shown = None
                if command.endswith("echo $?"):  # the status: the output's first bare number
                    shown = next(int(out) for out in output if out.isdigit())
                found.append(Shown(f"{path}:{number + 1}", command, shown, output))
    return found


#: Commands whose output the documentation shows as it is printed, whatever the revision.
VERBATIM = ("clearance simulate ",)


def test_every_walkthrough_command_of_the_readme_can_be_pasted(running: Fleet) -> None:
    """A new user pastes the documented commands as written, from the repository's root:
    each answers (0, or 1 for a no), or exits as the docs show it does; none is a usage
    error or finds nothing to talk to. The PATH line comes first: the others need it. A
    dry run prints what the docs show it prints (elided with ``...`` or not)."""
    commands = readme_walkthrough()
    assert len(commands) >= 36, commands
    exports = [c.command for c in commands if c.command.startswith("export PATH=")]
    assert exports and exports[0].startswith('export PATH="$PWD/.venv/bin:$PATH"')
    env = {**running.env, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}
    verbatim = 0
    for shown in commands:
        number, command = shown.where, shown.command
        if command.startswith("export PATH="):
            continue
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60, check=False)
        if shown.status is not None:
            assert done.stdout.split()[-1:] == [str(shown.status)], (number, command, done)
        else:
            assert done.returncode in (0, 1), (number, command, done.stderr)
            assert done.stdout.strip(), (number, command, "printed nothing")
        if command.removeprefix(".venv/bin/").startswith(VERBATIM):
            printed = done.stdout.splitlines()
            if "..." in shown.output:  # the lines around the elision
                cut = shown.output.index("...")
                head, tail = shown.output[:cut], shown.output[cut + 1:]
                printed = [*printed[:len(head)], "...", *printed[len(printed) - len(tail):]]
            assert printed == shown.output, (number, command)
            verbatim += 1
    assert verbatim >= 4


def test_ctrl_c_stops_everything_within_5_seconds(running: Fleet) -> None:
    """Last in the module: it ends the fleet the tests above asked."""
    assert stop(running.up) < 5.0  # services, then both servers, within 5 s
    for port in running.ports:  # both servers are gone
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                raise AssertionError(f"port {port} still served")
        except OSError:
            pass


def _served(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_a_killed_up_takes_its_servers_and_a_new_one_starts_on_the_same_state(
        tmp_path: Path) -> None:
    """kill -9 of ``clearance up`` must not leave two servers on one state directory:
    its servers go with it, and the next ``up`` on the same state answers again."""
    state = tmp_path / "state"
    up, _, ports = start_up(state)
    up.kill()
    up.wait()
    deadline = time.monotonic() + 10
    while any(_served(port) for port in ports):
        assert time.monotonic() < deadline, "the servers outlived clearance up"
        time.sleep(0.1)
    again, env, _ = start_up(state)  # the examples load again: the state is usable
    try:
        reply = json.loads(clearance(env, "request", "clearance.v1.status").stdout)
        assert reply["revision"] >= EXAMPLES_LOADED
    finally:
        stop(again)


def test_the_endpoints_a_killed_up_left_are_not_followed(tmp_path: Path) -> None:
    """The commands run beside ``up`` find its NATS in ``.clearance/endpoints.json``; once
    that ``up`` is killed the file stays, but it is not followed to a dead server."""
    up, env, (nats_port, _) = start_up(tmp_path / ".clearance")
    beside = {k: v for k, v in env.items() if k != "CLEARANCE_NATS_URL"}
    try:
        asked = clearance(beside, "request", "clearance.v1.status", cwd=tmp_path)
        assert asked.returncode == 0, asked.stderr
    finally:
        up.kill()
        up.wait()
    assert (tmp_path / ".clearance" / "endpoints.json").exists()
    stale = clearance(beside, "request", "clearance.v1.status", "--timeout", "1",
                      cwd=tmp_path)
    # The default address instead (answered only if something else serves it there).
    assert f":{nats_port}" not in stale.stderr
    assert stale.returncode == 0 or "127.0.0.1:4222" in stale.stderr, stale.stderr


def test_an_up_stops_the_servers_a_previous_one_left_on_its_state(tmp_path: Path) -> None:
    """Without the parent-death signal (another OS, a signal lost), the pid files still
    name the servers left on the state directory; the next ``up`` stops them first."""
    state = tmp_path / "state"
    nats_srv, _ = servers.nats_server(state / "nats", owned=True)
    nats_srv.start()
    left = nats_srv.proc
    assert left is not None and (state / "nats" / servers.NATS_PID).exists()
    again, _, _ = start_up(state)
    try:
        assert left.wait(timeout=10) is not None  # stopped before the new one started
    finally:
        stop(again)
        nats_srv.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stopping_dev_py_up_stops_everything(tmp_path: Path, signum: int) -> None:
    """``python3 dev.py up`` runs ``clearance up`` through ``just``: a signal to the script
    (a supervisor's SIGTERM, a Ctrl-C) reaches ``clearance up``, which stops its services
    and both servers; nothing is orphaned."""
    nats_port, redis_port = servers.free_port(), servers.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    script = subprocess.Popen(
        [sys.executable, str(ROOT / "dev.py"), "up", "--state", str(tmp_path / "state"),
         "--manifests", str(ROOT / "examples"), "--nats-port", str(nats_port),
         "--redis-port", str(redis_port), "--gateway-port", str(servers.free_port()),
         "--console-port", str(servers.free_port())],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        env["CLEARANCE_NATS_URL"] = f"nats://127.0.0.1:{nats_port}"
        # Generous bounds: three test workers share two cores here.
        deadline = time.monotonic() + 60
        while clearance(env, "request", "clearance.v1.status").returncode != 0:
            assert script.poll() is None, "dev.py up ended before it answered"
            assert time.monotonic() < deadline, "dev.py up did not answer within 60 s"
            time.sleep(0.2)
        script.send_signal(signum)
        assert script.wait(timeout=45) is not None
        deadline = time.monotonic() + 10
        while _served(nats_port) or _served(redis_port):
            assert time.monotonic() < deadline, "a server outlived dev.py up"
            time.sleep(0.1)
        left = subprocess.run(["pgrep", "-f", str(tmp_path / "state")], capture_output=True,
                              text=True, check=False).stdout.split()
        assert left == [], f"processes left on the state directory: {left}"
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
        # Whatever a failing run left behind goes too (the assertion above said so).
        subprocess.run(["pkill", "-f", str(tmp_path / "state")], check=False)
