"""clearance: run Clearance, and ask it questions over NATS from a shell.

    clearance up | run all|<service>     run the system (embedded servers, or existing ones)
    clearance console                    serve the ops console (a web page)
    clearance check | batch              access questions (clearance.v1.check[.batch])
    clearance can-i [--list] | who-can   RBAC reviews, like kubectl auth
    clearance filter | metrics | custom-types | permissions | policies
    clearance who-can-see CLUSTER        every subject named there, allowed and denied
    clearance effective | simulate | reach | policy-status
    clearance search | search-plan       ACM search, filtered per user
    clearance status | cache-clear       operating
    clearance request SUBJECT JSON       any request, the reply as JSON
    clearance validate PATH...           check manifests offline, before they are applied
    clearance test FILE...               policy tests (YAML assertions), offline
    clearance schemas [--check]          regenerate proto-schemas/ (or fail on drift)

Every question takes -o table|json|yaml, --timeout, and the NATS server, credentials and
TLS flags (or CLEARANCE_NATS_* variables). Exit status: 0 yes/done, 1 no (check: deny;
can-i; a simulated policy that would not be accepted; an invalid manifest; a failed policy
test), 2 usage or a refused request, 3 no answer. `check -q` and `can-i -q` print nothing:
the status answers.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Iterator
from typing import Any

from clearance_cli import commands
from clearance_cli.flags import CliError, Command, connection_flags, output_flags

#: Every subcommand, one line each, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    commands.UP,
    commands.RUN,
    commands.CONSOLE,
    commands.CHECK,
    commands.BATCH,
    commands.CAN_I,
    commands.WHO_CAN,
    commands.FILTER,
    commands.METRICS,
    commands.CUSTOM_TYPES,
    commands.PERMISSIONS,
    commands.POLICIES,
    commands.WHO_CAN_SEE,
    commands.EFFECTIVE,
    commands.SIMULATE,
    commands.REACH,
    commands.POLICY_STATUS,
    commands.SEARCH,
    commands.SEARCH_PLAN,
    commands.STATUS,
    commands.CACHE_CLEAR,
    commands.REQUEST,
    commands.VALIDATE,
    commands.TEST,
    commands.SCHEMAS,
)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="clearance", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action=_Version, nargs=0,
                     help="print the installed version and exit")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    connection = connection_flags()
    for command in COMMANDS:
        parents = [connection, output_flags(command.output)] if command.remote else []
        each = sub.add_parser(command.name, help=command.help, description=command.help,
                              parents=parents)
        command.arguments(each)
        each.set_defaults(run=command.run, remote=command.remote)
    return top


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked (a
    metadata scan on every command's start would slow every question)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        try:
            version = importlib.metadata.version("clearance")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        print(f"clearance {version}")
        parser.exit()


@contextlib.contextmanager
def _without_aiohttp(args: argparse.Namespace) -> Iterator[None]:
    """nats-py imports aiohttp, when installed, for ws:// URLs: 0.2-0.5 s of a question's
    start. A question's nats:// and tls:// URLs never need it, so while such a command
    loads ``import aiohttp`` fails and nats-py goes on without WebSocket support (``up``
    and ``run`` load the services, which do need it: they import it as usual)."""
    url = str(getattr(args, "server", None) or os.environ.get("CLEARANCE_NATS_URL", ""))
    if (not args.remote or "aiohttp" in sys.modules or "nats" in sys.modules
            or url.startswith("ws")):
        yield
        return
    sys.modules["aiohttp"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        del sys.modules["aiohttp"]


def run(args: argparse.Namespace) -> int:
    module, _, function = str(args.run).partition(":")
    with _without_aiohttp(args):
        implementation: Any = getattr(importlib.import_module(module), function)
    return int(implementation(args))


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        code = run(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = exc.code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:  # `clearance ... | head`
        code = 0
    sys.exit(code)


if __name__ == "__main__":
    main()

