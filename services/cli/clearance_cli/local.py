"""The commands that run something here rather than ask a question: ``up``, ``run``,
``schemas`` (proto-schemas/ and the CRDs' field module); and ``request``, which sends any
body exactly as written."""

from __future__ import annotations

import argparse
import contextlib

import msgspec
import uvloop

from clearance_cli import client, output
from clearance_cli import schemas as proto_schemas
from clearance_runtime.process import heap, logs
from clearance_runtime.process.settings import Settings


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env()
    logs.configure(settings.log_level, service=f"clearance-{args.command}",
                   fmt=settings.log_format)
    return settings


# The services load only for the commands that run them: ``request`` is a question, and
# a question's start stays free of aiohttp and the services (clearance_cli.main).


def up(args: argparse.Namespace) -> int:
    from clearance_cli import embedded  # noqa: PLC0415 - see above

    settings = _settings(args)
    with contextlib.suppress(KeyboardInterrupt):
        embedded.up(args, settings)
    return 0


def run(args: argparse.Namespace) -> int:
    from clearance_cli import services  # noqa: PLC0415 - see above

    settings = _gateway_flags(args, _settings(args))
    names = services.every_service(settings) if args.service == "all" else [args.service]
    heap.settle()
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(services.run_services(names, settings))
    return 0


def _gateway_flags(args: argparse.Namespace, settings: Settings) -> Settings:
    """Settings with the gateway's command-line flags over its environment."""
    flags = {"gateway_port": args.gateway_port, "gateway_tls_cert": args.tls_cert,
             "gateway_tls_key": args.tls_key}
    given = {key: value for key, value in flags.items() if value is not None}
    return msgspec.structs.replace(settings, **given) if given else settings


def console(args: argparse.Namespace) -> int:
    from clearance_cli import services  # noqa: PLC0415 - see above
    from clearance_console.app import url as console_url  # noqa: PLC0415 - see above

    settings = _settings(args)
    print(f"Clearance console: {console_url(args.host, args.port)}", flush=True)
    heap.settle()
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(services.run_services([], settings, console=(args.host, args.port)))
    return 0


def schemas(args: argparse.Namespace) -> int:
    from clearance_cli import shapes  # noqa: PLC0415 - see above

    wire = proto_schemas.main(args.out, check=args.check)
    crds = shapes.main(args.crds, args.shapes, check=args.check)
    return wire or crds


def request(args: argparse.Namespace) -> int:
    # Not checked here: what the service answers to a malformed body is worth seeing.
    return client.ask(args, args.subject, args.body.encode(), output.fields)
