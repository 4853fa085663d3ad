"""``filter``, ``metrics`` and ``custom-types``: lists and metrics as a principal may see
them (README: The API); the items come from a file, as a UI would send them."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from clearance_api.wire import (
    SUBJECT_CUSTOM_TYPES,
    SUBJECT_FILTER,
    SUBJECT_METRICS,
    CustomTypesRequest,
    FilterRequest,
    MetricsRequest,
)
from clearance_cli import client, inputs
from clearance_cli.decisions import principal_of
from clearance_cli.flags import CliError
from clearance_cli.output import table


def _convert(args: argparse.Namespace, raw: dict[str, Any], kind: type[msgspec.Struct],
             shape: str) -> Any:
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise CliError(f"{args.file}: {shape}: {exc}") from None


def filter_items(args: argparse.Namespace) -> int:
    document = inputs.read(args.file)
    given = document if isinstance(document, dict) else {"items": document}
    body = _convert(args, {**given, "principal": msgspec.to_builtins(principal_of(args)),
                           "cluster": args.cluster, "type": args.type},
                    FilterRequest, "a list of items, or {items, aggregations}")

    def show(reply: dict[str, Any]) -> list[str]:
        items = reply.get("items") or []
        lines = [f"{reply.get('decision')}: {reply.get('visible')} of {reply.get('total')} "
                 "visible"]
        if items:
            lines += table(["NAME", "NAMESPACE"],
                           ([i.get("name"), i.get("namespace")] for i in items))
        aggregations = reply.get("aggregations")
        if aggregations:
            lines += ["", *table(["AGGREGATION", "VALUE"], aggregations.items())]
        return lines

    return client.ask(args, SUBJECT_FILTER, body, show)


def metrics(args: argparse.Namespace) -> int:
    document = inputs.read(args.file)
    if not isinstance(document, dict):
        raise CliError(f"{args.file}: an object {{namespaces, nodes}}")
    body = _convert(args, {**document, "principal": msgspec.to_builtins(principal_of(args)),
                           "cluster": args.cluster}, MetricsRequest, "{namespaces, nodes}")

    def show(reply: dict[str, Any]) -> list[str]:
        values = reply.get("metrics") or {}
        head = [f"{reply.get('decision')}"
                f"{' (filtered)' if reply.get('filtered') else ''}"]
        return head + (table(["METRIC", "VALUE"], values.items()) if values else [])

    return client.ask(args, SUBJECT_METRICS, body, show)


def custom_types(args: argparse.Namespace) -> int:
    body = CustomTypesRequest(principal=principal_of(args), cluster=args.cluster)
    return client.ask(args, SUBJECT_CUSTOM_TYPES, body,
                      lambda reply: table(["TYPE"], ([t] for t in reply.get("types") or [])))
