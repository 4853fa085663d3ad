"""A nats-server running the shipped ``deploy/nats/accounts.conf``, for the tests that
check who may do what on the bus (tests/integration/test_nats_accounts.py and the
attack suite).

The accounts file is used as shipped, preceded by the users' passwords as configuration
variables (what the deployment passes as environment variables) and, unless a
certificate directory is given, without its ``tls`` block.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from clearance_runtime.process import servers

ROOT = Path(__file__).resolve().parents[1]
ACCOUNTS = ROOT / "deploy" / "nats" / "accounts.conf"
DECISION_YAML = ROOT / "deploy" / "kubernetes" / "decision.yaml"
#: The callers' users, then Clearance's own processes' (one each).
CALLERS = ("producer", "client", "author", "operator", "gateway")
SERVICES = ("watcher", "compiler", "cache-invalidator", "decision")
USERS = (*CALLERS, *SERVICES)
PASSWORDS = {user: f"{user}-secret-pw" for user in USERS}


def password_variable(user: str) -> str:
    return f"CLEARANCE_NATS_{user.upper().replace('-', '_')}_PASSWORD"


def config(directory: Path, port: int, *, tls_dir: Path | None = None) -> Path:
    """The server configuration including the shipped accounts; without a certificate
    directory the accounts' tls block is removed, else pointed at that directory."""
    accounts = ACCOUNTS.read_text()
    if tls_dir is None:
        accounts, count = re.subn(r"^tls \{.*?^\}\n", "", accounts, flags=re.S | re.M)
        assert count == 1, "accounts.conf should have exactly one top-level tls block"
    else:
        accounts = accounts.replace("/etc/nats/tls", str(tls_dir))
    directory.mkdir(parents=True, exist_ok=True)
    # Variables are seen only in the file that defines them: defined above the accounts.
    variables = "".join(f'{password_variable(user)}: "{pw}"\n'
                        for user, pw in PASSWORDS.items())
    (directory / "accounts.conf").write_text(variables + accounts)
    main = directory / "nats.conf"
    main.write_text(f'host: 127.0.0.1\nport: {port}\nmax_payload: 33554432\n'
                    f'jetstream {{ store_dir: "{directory / "js"}" }}\n'
                    f"include accounts.conf\n")
    return main


def server(directory: Path, *, tls_dir: Path | None = None) -> tuple[servers.Server, str]:
    """The server (not started) and its URL without credentials."""
    port = servers.free_port()
    conf = config(directory, port, tls_dir=tls_dir)
    return servers.Server(name="nats-server", argv=[servers.nats_binary(), "-c", str(conf)],
                          port=port, log_path=directory / "nats.log"), \
        f"nats://127.0.0.1:{port}"


def as_user(url: str, user: str) -> str:
    """``url`` with ``user``'s credentials."""
    return url.replace("://", f"://{user}:{PASSWORDS[user]}@", 1)


def reply_prefixes() -> str:
    """The decision service's ``CLEARANCE_REPLY_PREFIXES`` as deploy/kubernetes sets it."""
    for doc in yaml.safe_load_all(DECISION_YAML.read_text()):
        if doc and doc.get("kind") == "Deployment":
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            for item in container.get("env", []):
                if item["name"] == "CLEARANCE_REPLY_PREFIXES":
                    return str(item["value"])
    raise AssertionError("decision.yaml sets no CLEARANCE_REPLY_PREFIXES")


def service_urls(url: str) -> dict[str, str]:
    """Each service's own URL (``clearance run all`` with a user per service)."""
    return {name: as_user(url, name) for name in (*SERVICES, "gateway")}
