"""What the alert rules and the Grafana dashboard in ``deploy/`` ask of Prometheus, read
as a parser reads it (shared by the unit and integration tests)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import promql_parser
import yaml

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "clearance-rules.yaml"
PROMETHEUS_RULE = ROOT / "deploy" / "prometheus" / "prometheusrule.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "clearance.json"
#: Series Prometheus makes itself, not Clearance.
PROMETHEUS_OWN = {"up"}
#: Grafana's variables, replaced as Grafana would before the query is sent.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}


def rules() -> dict[str, Any]:
    return dict(yaml.safe_load(RULES.read_text()))


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def rule_expressions() -> Iterator[tuple[str, str]]:
    """(alert, expression) of every rule."""
    for group in rules()["groups"]:
        for rule in group["rules"]:
            yield rule.get("alert") or rule.get("record"), rule["expr"]


def dashboard_panels(board: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    for panel in (board or dashboard())["panels"]:
        yield panel
        yield from panel.get("panels", ())  # a collapsed row holds its panels


def dashboard_expressions() -> Iterator[tuple[str, str]]:
    """(panel title, expression with Grafana's variables replaced) of every query."""
    for panel in dashboard_panels():
        for target in panel.get("targets", ()):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            yield panel["title"], expr


def metric_names(expressions: Iterable[str]) -> set[str]:
    """Every metric name the expressions select (parsing each: a syntax error raises)."""
    names: set[str] = set()

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    for expr in expressions:
        promql_parser.walk(promql_parser.parse(expr), visit)
    return names - PROMETHEUS_OWN


def exposed_names(families: Iterable[Any]) -> set[str]:
    """The series names a scrape can show for metric families (prometheus_client's own
    ``Metric`` objects, or those its text parser returns): a counter ``x`` is
    ``x_total``, a histogram ``x`` is ``x_bucket``, ``x_sum`` and ``x_count``."""
    suffixes = {"counter": ("_total", "_created"),
                "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("", "_sum", "_count", "_created"),
                "info": ("_info",)}
    names: set[str] = set()
    for family in families:
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names
