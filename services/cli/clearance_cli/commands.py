"""Every subcommand's arguments, one :class:`Command` each (registered in
:mod:`clearance_cli.main`). Standard library only: implementations load when they run."""

from __future__ import annotations

import argparse
from pathlib import Path

from clearance_cli.flags import Command, namespace, principal

_TARGET = "fleet, clusterset/NAME, cluster/NAME or namespace/CLUSTER/NAME"
_FILE = "a YAML or JSON file ('-': standard input)"


def _up(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state", type=Path, default=Path(".clearance"),
                        help="state directory (default .clearance/)")
    parser.add_argument("--manifests", type=Path, default=None,
                        help="manifest directory (default examples/, or CLEARANCE_MANIFESTS)")
    parser.add_argument("--nats-port", type=int, default=4222,
                        help="NATS port, if free (default 4222; else any free port)")
    parser.add_argument("--redis-port", type=int, default=6379,
                        help="Valkey port, if free (default 6379; else any free port)")
    parser.add_argument("--gateway-port", type=int, default=None,
                        help="the gateway's HTTPS port (default CLEARANCE_GATEWAY_PORT, 8443; "
                             "a free one if taken)")
    parser.add_argument("--console-port", type=int, default=8080,
                        help="the ops console's port on 127.0.0.1 (taken: a free one)")


#: The services ``clearance run`` knows (clearance_cli.services.NAMES, kept light here).
SERVICES = ("watcher", "compiler", "cache-invalidator", "decision", "gateway")


def _run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("service", choices=["all", *SERVICES],
                        help="the service to run, or all of them in this process")
    parser.add_argument("--gateway-port", type=int, default=None,
                        help="the gateway's HTTPS port (CLEARANCE_GATEWAY_PORT)")
    parser.add_argument("--tls-cert", type=Path, default=None,
                        help="the gateway's PEM certificate (CLEARANCE_GATEWAY_TLS_CERT)")
    parser.add_argument("--tls-key", type=Path, default=None,
                        help="the gateway's PEM key (CLEARANCE_GATEWAY_TLS_KEY); with neither: "
                             "a self-signed pair for local use")


def _console(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; elsewhere, set "
                             "CLEARANCE_CONSOLE_TOKEN and CLEARANCE_CONSOLE_HOSTS)")
    parser.add_argument("--port", type=int, default=8080,
                        help="port to listen on (default 8080)")


def _schemas(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="fail if proto-schemas/ drifted")
    parser.add_argument("--out", type=Path, default=Path("proto-schemas"),
                        help="output directory (default proto-schemas/)")
    parser.add_argument("--crds", type=Path, default=Path("deploy/crds"),
                        help="the CRDs the strict field check follows (default deploy/crds/)")
    parser.add_argument("--shapes", type=Path,
                        default=Path("libs/clearance_core/kube/crd_shapes.py"),
                        help="the module generated from them (default "
                             "libs/clearance_core/kube/crd_shapes.py)")


def _check(parser: argparse.ArgumentParser) -> None:
    principal(parser)
    parser.add_argument("--action", default="view", choices=["view", "view_metrics"],
                        help="what the principal wants to do (default view)")
    parser.add_argument("--type", default="cluster",
                        help="resource type: cluster (default), pods, namespaces, a custom type")
    parser.add_argument("--cluster", required=True, help="the cluster the resource is in")
    parser.add_argument("--name", default=None,
                        help="one item; without it the question is about the cluster itself "
                             "(--type cluster) or every item of the type (name *)")
    parser.add_argument("-n", "--namespace", default=None,
                        help="the namespace the resource is in")
    parser.add_argument("--explain", action="store_true",
                        help="add the trace: every policy naming the principal and its fate")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing: the exit status answers (0 allow or partial, "
                             "1 deny)")


def _batch(parser: argparse.ArgumentParser) -> None:
    principal(parser)
    parser.add_argument("file", type=Path,
                        help=f"the checks, a list of {{action, resource}}: {_FILE}")
    parser.add_argument("--explain", action="store_true", help="add a trace to each result")


def _principal_only(parser: argparse.ArgumentParser) -> None:
    principal(parser)


def _cache_clear(parser: argparse.ArgumentParser) -> None:
    principal(parser, required=False)
    parser.add_argument("--all", action="store_true",
                        help="drop every principal's cached decisions (instead of --user)")


def _policy_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", type=str.lower,
                        choices=["monitoraccesspolicy", "map", "accesspolicy", "ap"],
                        help="MonitorAccessPolicy (map) or AccessPolicy (ap)")
    parser.add_argument("policy", help="NAMESPACE/NAME")


def _filter(parser: argparse.ArgumentParser) -> None:
    principal(parser)
    parser.add_argument("--cluster", required=True, help="the cluster the items are in")
    parser.add_argument("--type", required=True, help="their type (pods, namespaces, pvc...)")
    parser.add_argument("file", type=Path,
                        help=f"the items (a list, or {{items, aggregations}}): {_FILE}")


def _metrics(parser: argparse.ArgumentParser) -> None:
    principal(parser)
    parser.add_argument("--cluster", required=True, help="the cluster measured")
    parser.add_argument("file", type=Path, help=f"{{namespaces, nodes}}: {_FILE}")


def _custom_types(parser: argparse.ArgumentParser) -> None:
    principal(parser)
    parser.add_argument("--cluster", default=None, help="only types visible in this cluster")


def _can_i(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("verb", nargs="?", help="get, list, watch, create... (not with --list)")
    parser.add_argument("resource", nargs="?",
                        help="pods, pods/log, deployments.apps, or a /url (not with --list)")
    parser.add_argument("name", nargs="?", default="", help="one object by name")
    principal(parser, email=False)
    namespace(parser)
    parser.add_argument("--list", action="store_true",
                        help="list the rules that apply instead (a rules review)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing: the exit status answers (0 yes, 1 no)")


def _who_can(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("verb", help="get, list, watch, create...")
    parser.add_argument("resource", help="pods, pods/log, deployments.apps")
    parser.add_argument("name", nargs="?", default="", help="one object by name")
    namespace(parser)


def _who_can_see(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cluster", help="the cluster asked about")
    parser.add_argument("--type", default=None,
                        help="every item of this type (pods, namespaces, a custom type); "
                             "without it: the cluster itself, or with -n the namespace")
    parser.add_argument("-n", "--namespace", default=None,
                        help="in this namespace (without --type: the namespace itself)")
    parser.add_argument("--action", default="view", choices=["view", "view_metrics"],
                        help="what they would do (default view)")


def _search(parser: argparse.ArgumentParser) -> None:
    principal(parser)
    parser.add_argument("file", type=Path, help="the results, a list of {cluster, group, "
                        f"resource, kind?, namespace?, name}}: {_FILE}")


def _effective(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help=_TARGET)


def _simulate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="a YAML file holding one AccessPolicy")
    parser.add_argument("--delete", action="store_true",
                        help="simulate deleting the policy instead of applying it")


def _reach(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", help="the AccessPolicy, NAMESPACE/NAME")
    parser.add_argument("--rule", default=None, help="only where this rule of it holds")


def _offline(parser: argparse.ArgumentParser) -> None:
    """What ``validate`` and ``test`` share: how to print, and the compiler's settings."""
    parser.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text",
                        help="text (default: one line each) or the report as json or yaml")
    parser.add_argument("--admin-namespaces", default=None, metavar="NS[,NS...]",
                        help="the namespaces that may write Fleet-wide AccessPolicies "
                             "(default CLEARANCE_ADMIN_NAMESPACES, else clearance-system)")


def _validate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="manifest files, or directories (*.yaml, *.yml, *.json below)")
    parser.add_argument("--strict-warnings", action="store_true",
                        help="fail (exit 1) on warnings too")
    _offline(parser)


def _test(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE",
                        help="policy test files (YAML: manifests and tests)")
    _offline(parser)


def _request(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("subject", help="the subject, e.g. clearance.v1.status")
    parser.add_argument("body", nargs="?", default="{}", help="the JSON body (default {})")


UP = Command("up", "run everything on embedded servers", _up, "clearance_cli.local:up",
             remote=False)
RUN = Command("run", "run services against existing servers", _run, "clearance_cli.local:run",
              remote=False)
CONSOLE = Command("console", "serve the ops console (a web page)", _console,
                  "clearance_cli.local:console", remote=False)
SCHEMAS = Command("schemas", "generate proto-schemas/ and the CRDs' field module", _schemas,
                  "clearance_cli.local:schemas", remote=False)
VALIDATE = Command("validate", "check manifests offline, strictly, as the compiler would",
                   _validate, "clearance_cli.validate:validate", remote=False)
TEST = Command("test", "run policy tests (YAML assertions) offline against manifests", _test,
               "clearance_cli.policytests:run_tests", remote=False)
CHECK = Command("check", "ask one access question", _check, "clearance_cli.decisions:check")
BATCH = Command("batch", "ask many questions for one principal", _batch,
                "clearance_cli.decisions:batch")
PERMISSIONS = Command("permissions", "what a principal may do on every cluster",
                      _principal_only, "clearance_cli.decisions:permissions")
POLICIES = Command("policies", "every MonitorAccessPolicy naming a principal",
                   _principal_only, "clearance_cli.decisions:policies")
STATUS = Command("status", "revision, services, policy count, cache", lambda _: None,
                 "clearance_cli.decisions:status")
CACHE_CLEAR = Command("cache-clear", "drop cached decisions (one principal's, or --all)",
                      _cache_clear, "clearance_cli.decisions:cache_clear")
POLICY_STATUS = Command("policy-status", "a policy's state and conditions", _policy_status,
                        "clearance_cli.decisions:policy_status")
FILTER = Command("filter", "the visible part of a list, aggregations recomputed", _filter,
                 "clearance_cli.lists:filter_items")
METRICS = Command("metrics", "cluster metrics from what a principal may see", _metrics,
                  "clearance_cli.lists:metrics")
CUSTOM_TYPES = Command("custom-types", "custom types a principal can see", _custom_types,
                       "clearance_cli.lists:custom_types")
CAN_I = Command("can-i", "like kubectl auth can-i (--list: the rules that apply)", _can_i,
                "clearance_cli.reviews:can_i")
WHO_CAN = Command("who-can", "who may do VERB on RESOURCE", _who_can,
                  "clearance_cli.reviews:who_can")
WHO_CAN_SEE = Command("who-can-see", "every subject named for a cluster (namespace, type) "
                      "with its decision, and what everyone else gets", _who_can_see,
                      "clearance_cli.decisions:who_can_see")
SEARCH = Command("search", "ACM search results a principal may see", _search,
                 "clearance_cli.reviews:search")
SEARCH_PLAN = Command("search-plan", "a principal's search rules as a query plan and SQL",
                      _principal_only, "clearance_cli.reviews:search_plan")
EFFECTIVE = Command("effective", "the effective AccessPolicy of a target", _effective,
                    "clearance_cli.inherited:effective")
SIMULATE = Command("simulate", "what applying (or deleting) an AccessPolicy would change",
                   _simulate, "clearance_cli.inherited:simulate")
REACH = Command("reach", "the targets where an AccessPolicy's rules hold", _reach,
                "clearance_cli.inherited:reach")
REQUEST = Command("request", "send a request to any subject, print the reply", _request,
                  "clearance_cli.local:request", output="json")
