"""The ``clearance`` command (CONTRACT section 8).

    clearance up                    embedded NATS + Valkey, all services, examples/ loaded
    clearance run all|<service>     services against CLEARANCE_NATS_URL / CLEARANCE_REDIS_URL
    clearance console               the ops console (web page) against CLEARANCE_NATS_URL
    clearance check ...             ask a question over NATS (what a client sends)
    clearance can-i / who-can ...   RBAC reviews, like kubectl auth
    clearance effective TARGET      an inherited AccessPolicy's effect on a target
    clearance simulate FILE         what applying (--delete: deleting) it would change
    clearance reach NS/NAME         where its rules hold
    clearance request SUBJECT JSON  send any request, print the reply
    clearance schemas [--check]     regenerate proto-schemas/ (or fail on drift)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path

import msgspec
import uvloop

from clearance_cli import client, embedded, inherited, schemas, services
from clearance_console.app import url as console_url
from clearance_runtime import logs
from clearance_runtime.settings import Settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clearance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run everything on embedded servers")
    up.add_argument("--state", type=Path, default=Path(".clearance"),
                    help="state directory (default .clearance/)")
    up.add_argument("--manifests", type=Path, default=None,
                    help="manifest directory (default examples/, or CLEARANCE_MANIFESTS)")
    up.add_argument("--nats-port", type=int, default=4222)
    up.add_argument("--redis-port", type=int, default=6379)
    up.add_argument("--gateway-port", type=int, default=None,
                    help="the gateway's HTTPS port (default CLEARANCE_GATEWAY_PORT, 8443; "
                         "a free one if taken)")
    up.add_argument("--console-port", type=int, default=8080,
                    help="the ops console's port on 127.0.0.1 (taken: a free one)")
    run = sub.add_parser("run", help="run services against existing servers")
    run.add_argument("service", choices=["all", *services.NAMES])
    run.add_argument("--gateway-port", type=int, default=None,
                     help="the gateway's HTTPS port (CLEARANCE_GATEWAY_PORT)")
    run.add_argument("--tls-cert", type=Path, default=None,
                     help="the gateway's PEM certificate (CLEARANCE_GATEWAY_TLS_CERT)")
    run.add_argument("--tls-key", type=Path, default=None,
                     help="the gateway's PEM key (CLEARANCE_GATEWAY_TLS_KEY); with neither: "
                          "a self-signed pair for local use")
    console = sub.add_parser("console", help="serve the ops console (a web page)")
    console.add_argument("--host", default="127.0.0.1",
                         help="address to listen on (default 127.0.0.1: it has no login)")
    console.add_argument("--port", type=int, default=8080)
    check = sub.add_parser("check", help="ask one access question")
    check.add_argument("--user", required=True)
    check.add_argument("--group", action="append", default=[])
    check.add_argument("--email")
    check.add_argument("--action", default="view")
    check.add_argument("--type", default="cluster")
    check.add_argument("--cluster", required=True)
    check.add_argument("--name", default=None)
    check.add_argument("-n", "--namespace", default=None,
                       help="the namespace the resource is in")
    check.add_argument("--explain", action="store_true")
    can_i = sub.add_parser("can-i", help="like kubectl auth can-i, over NATS")
    can_i.add_argument("verb")
    can_i.add_argument("resource", help="pods, pods/log, deployments.apps, or a /url")
    can_i.add_argument("name", nargs="?", default="")
    can_i.add_argument("-n", "--namespace", default="")
    can_i.add_argument("--as", dest="user", required=True)
    can_i.add_argument("--as-group", dest="groups", action="append", default=[])
    who_can = sub.add_parser("who-can", help="who may do VERB on RESOURCE")
    who_can.add_argument("verb")
    who_can.add_argument("resource", help="pods, pods/log, deployments.apps")
    who_can.add_argument("name", nargs="?", default="")
    who_can.add_argument("-n", "--namespace", default="")
    inherited.add_parsers(sub)
    request = sub.add_parser("request", help="send a request to any subject")
    request.add_argument("subject")
    request.add_argument("body", nargs="?", default="{}")
    sch = sub.add_parser("schemas", help="generate proto-schemas/ from the wire Structs")
    sch.add_argument("--check", action="store_true", help="fail if proto-schemas/ drifted")
    sch.add_argument("--out", type=Path, default=Path("proto-schemas"))
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    settings = Settings.from_env()
    if args.command == "schemas":
        sys.exit(schemas.main(args.out, check=args.check))
    if args.command in ("check", "request", "can-i", "who-can", *inherited.COMMANDS):
        sys.exit(asyncio.run(client.main(args)))
    logs.configure(settings.log_level, service=f"clearance-{args.command}")
    with contextlib.suppress(KeyboardInterrupt):
        if args.command == "up":
            embedded.up(args, settings)
        elif args.command == "console":
            print(f"Clearance console: {console_url(args.host, args.port)}", flush=True)
            uvloop.run(services.run_services([], settings, console=(args.host, args.port)))
        else:
            names = list(services.NAMES) if args.service == "all" else [args.service]
            uvloop.run(services.run_services(names, _gateway_flags(args, settings)))


def _gateway_flags(args: argparse.Namespace, settings: Settings) -> Settings:
    """Settings with the gateway's command-line flags over its environment."""
    flags = {"gateway_port": args.gateway_port, "gateway_tls_cert": args.tls_cert,
             "gateway_tls_key": args.tls_key}
    given = {key: value for key, value in flags.items() if value is not None}
    return msgspec.structs.replace(settings, **given) if given else settings


if __name__ == "__main__":
    main()
