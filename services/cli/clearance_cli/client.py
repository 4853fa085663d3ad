"""One request over NATS for a remote command: connect with the command line's
credentials and TLS, send, and print the reply (or say clearly why there is none)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import nats
import nats.errors
from nats.aio.client import Client

from clearance_api import inboxes
from clearance_api.wire import REQUESTS, SUBJECT_STATUS
from clearance_cli import output, statelock
from clearance_cli.flags import NO, OK, UNAVAILABLE, USAGE, CliError

#: Error codes that mean "what you asked cannot be answered as asked" (exit 2); the
#: others (stale, unavailable, internal) are the system's trouble (exit 3).
USER_ERRORS = frozenset({"bad_request", "not_found"})

#: Where ``clearance up`` writes the URLs of its servers, for the commands run beside it.
ENDPOINTS = Path(".clearance") / "endpoints.json"

Table = Callable[[dict[str, Any]], list[str]]
Verdict = Callable[[dict[str, Any]], int]


def nats_url(args: argparse.Namespace) -> str:
    if getattr(args, "server", None):
        return str(args.server)
    if os.environ.get("CLEARANCE_NATS_URL"):
        return os.environ["CLEARANCE_NATS_URL"]
    # Only while the clearance up that wrote them runs: a killed one leaves the file.
    if ENDPOINTS.exists() and statelock.held(ENDPOINTS.parent):
        return str(json.loads(ENDPOINTS.read_text())["nats"])
    return "nats://127.0.0.1:4222"


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """A context when any TLS flag is given (a ``tls://`` URL alone gets nats-py's
    default one, trusting the system's CAs)."""
    if not (args.tls_ca or args.tls_cert):
        return None
    if args.tls_key and not args.tls_cert:
        raise CliError("--tls-key needs --tls-cert")
    for flag, path in (("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert),
                       ("--tls-key", args.tls_key)):
        if path and not os.path.isfile(path):
            raise CliError(f"{flag} {path}: no such file")
    try:
        context = ssl.create_default_context(cafile=args.tls_ca)
        if args.tls_cert:
            context.load_cert_chain(args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise CliError(f"TLS files: {exc}") from None
    return context


def connect_options(args: argparse.Namespace) -> dict[str, Any]:
    """``nats.connect`` keyword arguments from the connection flags."""
    options: dict[str, Any] = {
        # nats-py's max_reconnect_attempts=0 means "for ever", initial connect included:
        # one retry, soon, then give up (request() bounds the whole by --timeout too).
        "connect_timeout": args.timeout, "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0.1, "allow_reconnect": False,
        "name": f"clearance-cli-{args.command}"}
    if args.nats_creds and args.nats_nkey:
        raise CliError("--nats-creds and --nats-nkey exclude each other")
    for flag, path in (("--nats-creds", args.nats_creds), ("--nats-nkey", args.nats_nkey)):
        if path and not os.path.isfile(path):
            raise CliError(f"{flag} {path}: no such file")
    if args.nats_creds:
        options["user_credentials"] = args.nats_creds
    if args.nats_nkey:
        options["nkeys_seed"] = args.nats_nkey
    if args.nats_user or args.nats_password:
        options["user"], options["password"] = args.nats_user, args.nats_password
    if args.nats_token:
        options["token"] = args.nats_token
    # Replies under the user's own inbox prefix: the only one its NATS user may read.
    try:
        options["inbox_prefix"] = inboxes.prefix_for(
            nats_url(args), user=args.nats_user, explicit=args.nats_inbox_prefix)
    except ValueError as exc:
        raise CliError(f"--nats-inbox-prefix: {exc}") from None
    context = tls_context(args)
    if context is not None:
        options["tls"] = context
    return options


async def request(args: argparse.Namespace, subject: str, body: bytes) -> dict[str, Any]:
    """The reply to one request, decoded; CliError (exit 3) when there is none."""
    url = nats_url(args)
    options = connect_options(args)
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:  # auth refusals arrive here first
        errors.append(str(exc) or type(exc).__name__)

    try:
        async with asyncio.timeout(args.timeout):
            nc = await nats.connect(url, error_cb=on_error, **options)
    except (OSError, ssl.SSLError, nats.errors.Error, TimeoutError) as exc:
        reason = errors[-1] if errors else str(exc) or (
            f"no answer within {args.timeout:g} s" if isinstance(exc, TimeoutError)
            else type(exc).__name__)
        raise CliError(f"cannot reach NATS at {_redacted(url)}: {reason}", UNAVAILABLE) \
            from None
    try:
        reply = await nc.request(subject, body, timeout=args.timeout)
    except nats.errors.NoRespondersError:
        raise CliError(await _no_responders(nc, subject, args.timeout), UNAVAILABLE) \
            from None
    except nats.errors.TimeoutError:
        raise CliError(f"{subject}: no reply within {args.timeout:g} s", UNAVAILABLE) from None
    except nats.errors.Error as exc:
        raise CliError(f"{subject}: {exc}", UNAVAILABLE) from None
    finally:
        await nc.close()
    try:
        decoded = json.loads(reply.data)
    except ValueError:
        raise CliError(f"{subject}: the reply is not JSON", UNAVAILABLE) from None
    if not isinstance(decoded, dict):
        raise CliError(f"{subject}: the reply is not a JSON object", UNAVAILABLE)
    return decoded


async def _no_responders(nc: Client, subject: str, wait: float) -> str:
    """Why nothing answered ``subject``: Clearance is not running, or it is (its status
    subject answers) and serves no such subject — a misspelled one, say."""
    if subject != SUBJECT_STATUS:
        try:
            await nc.request(SUBJECT_STATUS, b"{}", timeout=wait)
        except (nats.errors.Error, TimeoutError):
            pass
        else:
            return (f"no service answers {subject} (is it a Clearance subject? known "
                    f"subjects: {', '.join(sorted(REQUESTS))})")
    return f"no service answers {subject} (is Clearance running?)"


def _redacted(url: str) -> str:
    """Scheme, host and port: credentials may ride in the URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def ask(args: argparse.Namespace, subject: str, body: msgspec.Struct | bytes, table: Table,
        verdict: Verdict | None = None) -> int:
    """Send, print the reply in the chosen format, return the exit status."""
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    reply = asyncio.run(request(args, subject, data))
    error = reply.get("error")
    if isinstance(error, dict):
        code = str(error.get("code"))
        if args.output == "table":
            print(f"Error from server ({code}): {error.get('message')}", file=sys.stderr)
        else:
            print(output.document(args.output, reply), file=sys.stderr, end="")
        return USAGE if code in USER_ERRORS else UNAVAILABLE
    status = verdict(reply) if verdict is not None else OK
    if getattr(args, "quiet", False):
        return status
    if args.output == "table":
        # As kubectl: warnings on stderr, the answer on stdout (-o json keeps them in
        # the reply).
        for warning in warnings_of(reply):
            print(f"Warning: {warning}", file=sys.stderr)
        lines = table(reply)
        if lines:
            print("\n".join(lines))
    else:
        print(output.document(args.output, reply), end="")
    return status


#: Check numbers a batch's warning lists before "and N more".
LISTED = 5


def warnings_of(reply: dict[str, Any]) -> list[str]:
    """A reply's warnings (README: Warnings): its own, then a batch's, each text once
    with the checks (``#i``) it concerns."""
    found = [str(w) for w in _listed(reply.get("warnings"))]
    results = reply.get("results")
    by_text: dict[str, list[int]] = {}
    for index, result in enumerate(results if isinstance(results, list) else []):
        if isinstance(result, dict):
            for warning in _listed(result.get("warnings")):
                by_text.setdefault(str(warning), []).append(index)
    for text, indexes in by_text.items():
        shown = ", ".join(f"#{i}" for i in indexes[:LISTED])
        more = f" and {len(indexes) - LISTED} more" if len(indexes) > LISTED else ""
        found.append(f"{shown}{more}: {text}")
    return found


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def yes_no(allowed: bool) -> int:
    return OK if allowed else NO
