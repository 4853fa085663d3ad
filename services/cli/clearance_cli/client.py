"""A small NATS client for operators: ``clearance check`` and ``clearance request``."""

from __future__ import annotations

import argparse
import json
import os
import sys

import msgspec
import nats
import nats.errors

from clearance_cli.embedded import endpoints_file
from clearance_core.wire import SUBJECT_CHECK, CheckRequest, Principal, Resource


def nats_url() -> str:
    if os.environ.get("CLEARANCE_NATS_URL"):
        return os.environ["CLEARANCE_NATS_URL"]
    path = endpoints_file()
    if path.exists():
        return str(json.loads(path.read_text())["nats"])
    return "nats://127.0.0.1:4222"


async def main(args: argparse.Namespace) -> int:
    if args.command == "check":
        request = CheckRequest(
            principal=Principal(username=args.user, groups=args.group, email=args.email),
            action=args.action,
            resource=Resource(type=args.type, name=args.name or args.cluster,
                              cluster=args.cluster),
            explain=args.explain,
        )
        subject, body = SUBJECT_CHECK, msgspec.json.encode(request)
    else:
        subject, body = args.subject, args.body.encode()
    try:
        nc = await nats.connect(nats_url(), connect_timeout=2, max_reconnect_attempts=0)
    except (OSError, nats.errors.Error) as exc:
        print(f"cannot reach NATS at {nats_url()}: {exc}", file=sys.stderr)
        return 2
    try:
        reply = await nc.request(subject, body, timeout=5)
    except nats.errors.NoRespondersError:
        print(f"no service answers {subject}", file=sys.stderr)
        return 2
    except nats.errors.TimeoutError:
        print(f"{subject}: no reply within 5 s", file=sys.stderr)
        return 2
    finally:
        await nc.close()
    print(json.dumps(json.loads(reply.data), indent=2))
    return 0
