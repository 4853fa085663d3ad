"""A small NATS client for operators: ``clearance check``, ``can-i``, ``who-can``,
``request``, and the inherited-policy commands of :mod:`clearance_cli.inherited`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import msgspec
import nats
import nats.errors

from clearance_cli import inherited
from clearance_cli.embedded import endpoints_file
from clearance_core.resources import singular
from clearance_core.wire import SUBJECT_CHECK, CheckRequest, Principal, Resource


def nats_url() -> str:
    if os.environ.get("CLEARANCE_NATS_URL"):
        return os.environ["CLEARANCE_NATS_URL"]
    path = endpoints_file()
    if path.exists():
        return str(json.loads(path.read_text())["nats"])
    return "nats://127.0.0.1:4222"


def resource_parts(text: str) -> tuple[str, str, str]:
    """kubectl's RESOURCE syntax: ``pods``, ``pods/log``, ``deployments.apps`` ->
    (resource, subresource, group)."""
    resource, _, subresource = text.partition("/")
    resource, _, group = resource.partition(".")
    return resource, subresource, group


def review_body(args: argparse.Namespace) -> tuple[str, bytes]:
    if args.command == "who-can":
        resource, subresource, group = resource_parts(args.resource)
        body: dict[str, object] = {"verb": args.verb, "resource": resource, "group": group,
                                   "subresource": subresource, "namespace": args.namespace,
                                   "name": args.name}
        return "clearance.v1.review.resource", json.dumps(body).encode()
    spec: dict[str, object] = {"user": args.user, "groups": args.groups}
    if args.resource.startswith("/"):
        spec["nonResourceAttributes"] = {"path": args.resource, "verb": args.verb}
    else:
        resource, subresource, group = resource_parts(args.resource)
        spec["resourceAttributes"] = {"verb": args.verb, "resource": resource, "group": group,
                                      "subresource": subresource,
                                      "namespace": args.namespace, "name": args.name}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": spec}
    return "clearance.v1.review.subject", json.dumps(review).encode()


def show(args: argparse.Namespace, reply: dict[str, Any]) -> int:
    """kubectl-like output: ``yes``/``no`` (exit 0/1) for can-i, a list for who-can."""
    if "error" in reply:
        print(json.dumps(reply, indent=2), file=sys.stderr)
        return 2
    if args.command in inherited.COMMANDS:
        return inherited.show(args, reply)
    if args.command == "can-i":
        status = reply.get("status")
        assert isinstance(status, dict)
        allowed = bool(status.get("allowed"))
        print("yes" if allowed else "no")
        if status.get("reason"):
            print(f"  {status['reason']}", file=sys.stderr)
        return 0 if allowed else 1
    if args.command == "who-can":
        for label in ("users", "groups"):
            names = reply.get(label) or []
            assert isinstance(names, list)
            print(f"{label.capitalize()}:")
            for name in names:
                print(f"  {name}")
        return 0
    print(json.dumps(reply, indent=2))
    return 0


def request_of(args: argparse.Namespace) -> tuple[str, bytes]:
    """The subject and body a command sends."""
    if args.command in ("can-i", "who-can"):
        return review_body(args)
    if args.command in inherited.COMMANDS:
        return inherited.request_of(args)
    if args.command == "check":
        # Without --name a check asks about the cluster itself, or about the whole type
        # (never about an item that happens to carry the cluster's name).
        whole = args.cluster if singular(args.type) == "cluster" else "*"
        request = CheckRequest(
            principal=Principal(username=args.user, groups=args.group, email=args.email),
            action=args.action,
            resource=Resource(type=args.type, name=args.name or whole,
                              cluster=args.cluster, namespace=args.namespace),
            explain=args.explain,
        )
        return SUBJECT_CHECK, msgspec.json.encode(request)
    return args.subject, args.body.encode()


async def main(args: argparse.Namespace) -> int:
    try:
        subject, body = request_of(args)
    except inherited.CommandError as exc:
        print(exc, file=sys.stderr)
        return 2
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
    return show(args, json.loads(reply.data))
