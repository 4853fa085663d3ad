"""``clearance up``: the embedded default, for a laptop or a demo.

Starts nats-server (JetStream, state in ``.clearance/nats``) and valkey-server (append-
only file in ``.clearance/valkey``) from the installed wheels, then every service in this
process with ``examples/`` as the manifest directory. Ctrl-C stops services first, then
the servers.

Everything listens on 127.0.0.1. The gateway asks no client authentication there
(``CLEARANCE_GATEWAY_AUTH=none``, which the banner says) unless
``CLEARANCE_GATEWAY_AUTH`` or ``CLEARANCE_GATEWAY_CLIENT_CA`` is set, or
``CLEARANCE_GATEWAY_HOST`` is not a loopback address — then it asks as configured.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import socket
from pathlib import Path

import msgspec
import uvloop

from clearance_api import inboxes
from clearance_cli import services, statelock
from clearance_cli.flags import CliError
from clearance_console.app import url as console_url
from clearance_gateway import tls
from clearance_gateway.app import base_url
from clearance_runtime.process import heap, servers
from clearance_runtime.process.settings import Settings

ENDPOINTS = "endpoints.json"


def _port(preferred: int) -> int:
    """``preferred`` if free, else (or for 0, "any") a free one: the port printed and
    recorded is always the one the server will listen on."""
    if preferred == 0:
        return servers.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
        except OSError:
            return servers.free_port()
    return preferred


def endpoints_file(state: Path = Path(".clearance")) -> Path:
    return state / ENDPOINTS


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def gateway_auth(settings: Settings) -> Settings:
    """``clearance up``'s gateway: no client authentication on loopback, unless told."""
    if settings.gateway_auth is None and settings.gateway_client_ca is None \
            and loopback(settings.gateway_host):
        return msgspec.structs.replace(settings, gateway_auth="none")
    return settings


def _banner(nats_url: str, redis_url: str, manifests: Path, *, gateway: str,
            certificate: Path, console: str, auth: str, console_token: bool) -> str:
    who = ("no client authentication: loopback only" if auth == "none"
           else f"clients authenticate: {auth}")
    login = ", asks for CLEARANCE_CONSOLE_TOKEN at /login" if console_token else ""
    return f"""
Clearance is up.
  NATS   {nats_url}   (JetStream stream CLEARANCE_EVENTS)
  Valkey {redis_url}
  HTTPS  {gateway}   (webhook authorizer /authorize, AuthZEN /access/v1/evaluation[s];
         {who})
  Console {console}   (ops console: live state and a playground{login})
  manifests watched: {manifests}  (edit, add or delete files: decisions follow)

Ask a question (in another terminal):
  .venv/bin/clearance check --user alice --group platform-team --cluster prod-us-east
  .venv/bin/clearance check --user bob --cluster prod-us-east --explain
  .venv/bin/clearance effective namespace/prod-us-east/shop
  .venv/bin/clearance request clearance.v1.status
  curl --cacert {certificate} {gateway}/access/v1/evaluation \\
    -d '{{"subject": {{"type": "user", "id": "alice"}}, "action": {{"name": "view"}},
         "resource": {{"type": "cluster", "id": "prod-us-east"}}}}'

Ctrl-C stops everything.
""".rstrip()


def up(args: argparse.Namespace, settings: Settings) -> None:
    state: Path = args.state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    try:  # held until this process ends, however it ends (statelock)
        lock = statelock.hold(state)
    except statelock.StateInUse as exc:
        raise CliError(str(exc)) from None
    try:
        _up(args, settings, state)
    finally:
        lock.close()


def _up(args: argparse.Namespace, settings: Settings, state: Path) -> None:
    manifests = (args.manifests or settings.manifests or Path("examples")).resolve()
    # Owned: they die with this process, even killed with SIGKILL, and a pair a
    # previous run left behind on this state directory (a run that is gone: this one
    # holds the directory) is stopped first.
    for name in servers.stop_left_behind(state / "nats", state / "valkey"):
        print(f"stopped the {name} a previous run left on {state}", flush=True)
    nats_srv, nats_url = servers.nats_server(state / "nats", _port(args.nats_port),
                                             owned=True)
    valkey_srv, redis_url = servers.valkey_server(state / "valkey", _port(args.redis_port),
                                                  owned=True)
    nats_srv.start()
    try:
        valkey_srv.start()
        # If a stop ever has to be forced, the servers go with the process.
        services.CHILDREN.extend(s.proc for s in (nats_srv, valkey_srv) if s.proc)
        console_port = _port(args.console_port)
        endpoints_file(state).write_text(json.dumps({
            "nats": nats_url, "redis": redis_url,
            "console": console_url("127.0.0.1", console_port)}))
        os.environ["CLEARANCE_NATS_URL"] = nats_url
        os.environ["CLEARANCE_REDIS_URL"] = redis_url
        # The gateway's self-signed certificate stays with the state, so that a client
        # told to trust it keeps trusting it across restarts.
        gateway_port = _port(args.gateway_port or settings.gateway_port)
        tls_dir = settings.gateway_tls_dir or state / "gateway"
        # The embedded server has no users: every service on its URL, replies anywhere
        # under _INBOX and _INBOX_<name> (whatever per-service users the environment
        # names elsewhere).
        run_settings = gateway_auth(msgspec.structs.replace(
            settings, nats_url=nats_url, redis_url=redis_url, manifests=manifests,
            gateway_port=gateway_port, gateway_tls_dir=tls_dir, nats_inbox_prefix="",
            reply_prefixes=",".join(inboxes.DEFAULT_ACCEPTED), watcher_nats_url="",
            compiler_nats_url="",
            cache_invalidator_nats_url="", decision_nats_url="", gateway_nats_url="",
            console_nats_url="",
        ))
        gateway = base_url(run_settings.gateway_host, gateway_port)
        certificate = settings.gateway_tls_cert or tls_dir / tls.CERT_FILE
        print(_banner(nats_url, redis_url, manifests, gateway=gateway, certificate=certificate,
                      console=console_url("127.0.0.1", console_port),
                      auth=run_settings.gateway_auth_mode,
                      console_token=bool(settings.console_token)), flush=True)
        heap.settle()
        uvloop.run(services.run_services(services.NAMES, run_settings,
                                         console=("127.0.0.1", console_port)))
        print("\nstopped.", flush=True)
    finally:
        # Within the 5 s a stop may take (services have had at most ~2 s of it): both
        # servers are asked at once, then each gets what is left of 1.5 s.
        servers.stop_all([valkey_srv, nats_srv], timeout=1.5)
        endpoints_file(state).unlink(missing_ok=True)
