"""The ``clearance`` command line without a server: parsing, the requests it builds, its
tables, connection options, exit statuses for usage errors, and what it imports."""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance_cli import client, commands, decisions, main, output, reviews, services
from clearance_cli.flags import CliError


def parse(*argv: str) -> argparse.Namespace:
    return main.parser().parse_args(list(argv))


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def test_every_option_and_argument_of_every_command_has_help() -> None:
    commands_found = subparsers(main.parser())
    assert set(commands_found) == {c.name for c in main.COMMANDS}
    missing = [f"{name} {action.dest}" for name, sub in commands_found.items()
               for action in sub._actions
               if not isinstance(action, argparse._HelpAction) and not action.help]
    assert missing == []


def test_commands_are_registered_once_and_run_something_that_exists() -> None:
    names = [c.name for c in main.COMMANDS]
    assert len(names) == len(set(names))
    for command in main.COMMANDS:
        module, _, function = command.run.partition(":")
        assert callable(getattr(__import__(module, fromlist=[function]), function)), command


def test_run_choices_are_the_services() -> None:
    assert commands.SERVICES == services.NAMES


def test_check_without_name_asks_about_every_item_of_the_type() -> None:
    """The bug: ``--type pods --cluster X`` asked about a pod named X."""
    request = decisions.check_request(parse("check", "--user", "bob", "--type", "pods",
                                            "--cluster", "X"))
    assert (request.resource.type, request.resource.name, request.resource.cluster) == (
        "pods", "*", "X")
    cluster = decisions.check_request(parse("check", "--user", "bob", "--cluster", "X"))
    assert (cluster.resource.type, cluster.resource.name) == ("cluster", "X")
    named = decisions.check_request(parse("check", "--as", "bob", "--as-group", "g",
                                          "--type", "pods", "--cluster", "X", "--name", "p",
                                          "-n", "shop"))
    assert (named.resource.name, named.resource.namespace) == ("p", "shop")
    assert named.principal.groups == ["g"]


def test_can_i_builds_a_subject_access_review() -> None:
    review = reviews.subject_review(parse("can-i", "get", "pods/log", "-n", "payments",
                                          "--as", "alice", "--as-group", "team"))
    body = json.loads(msgspec.json.encode(review))
    assert body["spec"]["resourceAttributes"] == {  # empty members left out, as kubectl
        "namespace": "payments", "verb": "get", "resource": "pods", "subresource": "log"}
    assert (body["spec"]["user"], body["spec"]["groups"]) == ("alice", ["team"])
    url = json.loads(msgspec.json.encode(reviews.subject_review(
        parse("can-i", "get", "/healthz", "--as", "a"))))
    assert url["spec"]["nonResourceAttributes"] == {"path": "/healthz", "verb": "get"}
    assert reviews.resource_parts("deployments.apps/scale") == ("deployments", "scale", "apps")


def test_namespace_and_all_namespaces_exclude_each_other(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert parse("can-i", "list", "pods", "--as", "a", "-A").namespace == ""
    assert parse("who-can", "list", "pods", "-A").namespace == ""
    with pytest.raises(SystemExit) as exit_:
        parse("can-i", "list", "pods", "--as", "a", "-A", "-n", "x")
    assert exit_.value.code == 2 and "not allowed with" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["can-i", "--list", "get", "pods", "--as", "a"], "takes no VERB"),
    (["can-i", "get", "--as", "a"], "needs VERB and RESOURCE"),
    (["cache-clear"], "--user USER or --all"),
    (["policy-status", "ap", "no-slash"], "NAMESPACE/NAME"),
    (["effective", "namespace/only-one"], "namespace/CLUSTER/NAME"),
    (["reach", "nope"], "NAMESPACE/NAME"),
    (["status", "--tls-ca", "/nonexistent/ca.crt"], "--tls-ca /nonexistent/ca.crt"),
    (["status", "--nats-creds", "/nonexistent/u.creds"], "no such file"),
])
def test_usage_errors_exit_2_with_one_line_and_no_traceback(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main.main([*argv, "--server", "nats://127.0.0.1:1"] if argv[0] != "cache-clear"
                  else argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "Traceback" not in err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_files_that_are_not_requests_are_usage_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "two.yaml").write_text("a: 1\n---\nb: 2\n")
    (tmp_path / "items.yaml").write_text("- {nameless: true}\n")
    for argv in (["batch", "--user", "a", str(tmp_path / "two.yaml")],
                 ["filter", "--user", "a", "--cluster", "c", "--type", "pods",
                  str(tmp_path / "items.yaml")],
                 ["search", "--user", "a", str(tmp_path / "missing.yaml")]):
        with pytest.raises(SystemExit) as exit_:
            main.main(argv)
        assert exit_.value.code == 2
        assert "Traceback" not in capsys.readouterr().err


def test_timeout_must_be_a_positive_number(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse("status", "--timeout", "0.5").timeout == 0.5
    for bad in ("0", "soon", "-1"):
        with pytest.raises(SystemExit):
            parse("status", "--timeout", bad)
    assert "timeout" in capsys.readouterr().err


def test_connection_flags_and_their_environment_variables(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    creds = tmp_path / "user.creds"
    creds.write_text("x")
    options = client.connect_options(parse(
        "status", "--nats-creds", str(creds), "--nats-user", "u", "--nats-password", "p",
        "--nats-token", "t"))
    assert (options["user_credentials"], options["user"], options["password"],
            options["token"]) == (str(creds), "u", "p", "t")
    assert "tls" not in options
    monkeypatch.setenv("CLEARANCE_NATS_NKEY", str(creds))
    monkeypatch.setenv("CLEARANCE_NATS_USER", "from-env")
    from_env = client.connect_options(parse("status"))
    assert (from_env["nkeys_seed"], from_env["user"]) == (str(creds), "from-env")
    with pytest.raises(CliError, match="exclude each other"):
        client.connect_options(parse("status", "--nats-creds", str(creds)))


def test_replies_arrive_under_the_users_own_inbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLEARANCE_NATS_URL", raising=False)
    monkeypatch.delenv("CLEARANCE_NATS_USER", raising=False)
    monkeypatch.delenv("CLEARANCE_NATS_INBOX_PREFIX", raising=False)
    monkeypatch.chdir("/")  # no .clearance/endpoints.json
    assert client.connect_options(parse("status"))["inbox_prefix"] == "_INBOX"
    assert client.connect_options(parse(
        "status", "-s", "nats://operator:pw@nats:4222"))["inbox_prefix"] == "_INBOX.operator"
    assert client.connect_options(parse(
        "status", "--nats-user", "author", "--nats-password", "pw"))["inbox_prefix"] == \
        "_INBOX.author"
    monkeypatch.setenv("CLEARANCE_NATS_INBOX_PREFIX", "_INBOX.mine")
    assert client.connect_options(parse("status"))["inbox_prefix"] == "_INBOX.mine"
    with pytest.raises(CliError, match="inbox-prefix"):
        client.connect_options(parse("status", "--nats-inbox-prefix", "_INBOX.>"))


def test_tls_flags_build_a_context(tmp_path: Path) -> None:
    ca = Path(ssl.get_default_verify_paths().cafile or "")
    if not ca.is_file():
        pytest.skip("no system CA bundle to load")
    options = client.connect_options(parse("status", "--tls-ca", str(ca)))
    assert isinstance(options["tls"], ssl.SSLContext)
    with pytest.raises(CliError, match="needs --tls-cert"):
        client.connect_options(parse("status", "--tls-ca", str(ca), "--tls-key", str(ca)))


def test_server_flag_then_environment_then_default(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLEARANCE_NATS_URL", "nats://env:1")
    assert client.nats_url(parse("status", "-s", "nats://flag:1")) == "nats://flag:1"
    assert client.nats_url(parse("status")) == "nats://env:1"
    monkeypatch.delenv("CLEARANCE_NATS_URL")
    assert client.nats_url(parse("status")) == "nats://127.0.0.1:4222"


CELLS = st.one_of(st.none(), st.booleans(), st.integers(),
                  st.text(st.characters(categories=["L", "N", "P"]), max_size=12),
                  st.lists(st.text(st.characters(categories=["L"]), min_size=1, max_size=5),
                           max_size=3))


@given(st.integers(1, 6).flatmap(lambda n: st.lists(st.lists(CELLS, min_size=n, max_size=n),
                                                     max_size=6).map(lambda rows: (n, rows))))
def test_tables_keep_their_columns(shape: tuple[int, list[list[object]]]) -> None:
    """Every row splits into as many words as the header has, in the header's order (an
    empty cell is ``-``), whatever the cells hold (no spaces inside a cell)."""
    width, rows = shape
    header = [f"COL{i}" for i in range(width)]
    lines = output.table(header, rows)
    assert lines[0].split() == header
    for line, row in zip(lines[1:], rows, strict=True):
        assert line.split() == [output.cell_text(c) for c in row]


def test_documents_json_and_yaml() -> None:
    reply = {"decision": "allow", "permissions": ["view"], "filters": None}
    assert json.loads(output.document("json", reply)) == reply
    assert output.document("yaml", reply) == (
        "decision: allow\npermissions:\n- view\nfilters: null\n")
    assert output.fields({"cleared": 3, "revision": 9, "request_id": None}) == [
        "FIELD     VALUE", "cleared   3", "revision  9"]


def test_questions_load_neither_the_services_nor_aiohttp() -> None:
    """``--help`` loads only the parser; a question loads nats, but not the services
    (0.8 s of imports) and not aiohttp (nats-py's WebSocket support)."""
    script = (
        "import sys\n"
        "from clearance_cli import main\n"
        "main.parser()\n"
        "assert not {'nats', 'msgspec', 'yaml', 'clearance_runtime'} & set(sys.modules)\n"
        "assert {m for m in sys.modules if m.startswith('clearance_core.')}"
        " <= {'clearance_api.errors'}\n"
        "args = main.parser().parse_args(['status', '-s', 'nats://127.0.0.1:1',"
        " '--timeout', '0.3'])\n"
        "try:\n    main.run(args)\n"
        "except main.CliError as exc:\n    assert exc.code == 3\n"
        "heavy = {'clearance_decision', 'clearance_compiler', 'clearance_watcher', 'aiohttp',"
        " 'redis', 'yaml'}\n"
        "print(sorted(heavy & set(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_up_given_port_0_records_and_prints_the_port_it_chose() -> None:
    """``clearance up --console-port 0`` means "any free port": the banner and
    endpoints.json name the port chosen, never ``:0``."""
    from clearance_cli.embedded import _port  # noqa: PLC0415

    chosen = _port(0)
    assert chosen > 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", chosen))  # and it is free
