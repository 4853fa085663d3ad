"""What every subcommand is made of, and the flags they share (connection, output,
principal). Imported to build the parser, so it imports nothing but the standard library:
a command's implementation is loaded only when that command runs (see ``Command.run``)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass

from clearance_api.errors import ClearanceError

#: Exit statuses, as kubectl's: a question answered "no" is 1, never an error.
OK, NO, USAGE, UNAVAILABLE = 0, 1, 2, 3

OUTPUTS = ("table", "json", "yaml")


class CliError(ClearanceError):
    """A failure the user can act on: printed as one line on stderr, never a traceback."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Command:
    """One subcommand of ``clearance``."""

    name: str
    help: str
    #: Adds the command's own arguments (every one with help text).
    arguments: Callable[[argparse.ArgumentParser], None]
    #: ``module:function`` that runs it, ``(args) -> exit status``; imported only when the
    #: command runs, so ``clearance check`` never loads the services (0.8 s of imports).
    run: str
    #: Asks a question over NATS: takes the connection, timeout and output flags.
    remote: bool = True
    #: The output when ``-o`` is not given.
    output: str = "table"


def _env(name: str) -> str | None:
    return os.environ.get(f"CLEARANCE_NATS_{name}") or None


def connection_flags() -> argparse.ArgumentParser:
    """NATS server, credentials, TLS and timeout: on every remote command (a parent parser,
    so each option is written once). Each falls back to a ``CLEARANCE_NATS_*`` variable."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection (each also from the environment)")
    group.add_argument("-s", "--server", metavar="URL", default=None,
                       help="NATS URL, or a cluster's several separated by commas "
                            "(CLEARANCE_NATS_URL; else the one `clearance up` wrote "
                            "to .clearance/endpoints.json; else nats://127.0.0.1:4222)")
    group.add_argument("--timeout", type=_seconds, default=5.0, metavar="SECONDS",
                       help="give up connecting, and waiting for the reply, after this long "
                            "(default 5)")
    group.add_argument("--nats-creds", metavar="FILE", default=_env("CREDS"),
                       help="NATS user credentials file, JWT and seed (CLEARANCE_NATS_CREDS)")
    group.add_argument("--nats-nkey", metavar="FILE", default=_env("NKEY"),
                       help="NATS nkey seed file (CLEARANCE_NATS_NKEY)")
    group.add_argument("--nats-user", metavar="USER", default=_env("USER"),
                       help="NATS user name (CLEARANCE_NATS_USER)")
    group.add_argument("--nats-password", metavar="PASSWORD", default=_env("PASSWORD"),
                       help="NATS password (CLEARANCE_NATS_PASSWORD; prefer the variable: "
                            "a flag shows in the process list)")
    group.add_argument("--nats-token", metavar="TOKEN", default=_env("TOKEN"),
                       help="NATS authentication token (CLEARANCE_NATS_TOKEN)")
    group.add_argument("--nats-inbox-prefix", metavar="PREFIX", default=_env("INBOX_PREFIX"),
                       help="where replies arrive (CLEARANCE_NATS_INBOX_PREFIX; default "
                            "_INBOX.<user> for the user of --nats-user or the URL, else "
                            "_INBOX): a NATS user may read only its own inboxes")
    group.add_argument("--tls-ca", metavar="FILE", default=_env("TLS_CA"),
                       help="CA certificates to trust for the server (CLEARANCE_NATS_TLS_CA); "
                            "implies TLS")
    group.add_argument("--tls-cert", metavar="FILE", default=_env("TLS_CERT"),
                       help="client certificate for mutual TLS (CLEARANCE_NATS_TLS_CERT)")
    group.add_argument("--tls-key", metavar="FILE", default=_env("TLS_KEY"),
                       help="the client certificate's private key (CLEARANCE_NATS_TLS_KEY)")
    return parent


def output_flags(default: str) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-o", "--output", choices=OUTPUTS, default=default,
                        help=f"output format (default {default}); json and yaml print the "
                             "reply as the service sent it")
    return parent


def principal(parser: argparse.ArgumentParser, *, required: bool = True,
              email: bool = True) -> None:
    """Who is asking (docs/api/README.md: Principals); ``--as``/``--as-group`` are kubectl's
    spellings."""
    parser.add_argument("--user", "--as", dest="user", required=required, metavar="USER",
                        help="the principal's username")
    parser.add_argument("--group", "--as-group", dest="groups", action="append", default=[],
                        metavar="GROUP", help="a group the principal is in (repeatable)")
    if email:
        parser.add_argument("--email", default=None,
                            help="the principal's email (groups may list members by email)")


def namespace(parser: argparse.ArgumentParser) -> None:
    """``-n`` or ``-A``; neither asks cluster-wide, as ``-A`` (there is no kubeconfig
    context to take a current namespace from)."""
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", default="",
                       help="the namespace to ask about (default: all namespaces)")
    scope.add_argument("-A", "--all-namespaces", action="store_true",
                       help="ask about all namespaces (the default; excludes -n)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text}: a timeout is more than 0 and at most "
                                         "3600 seconds")
    return value
