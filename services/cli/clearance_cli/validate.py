"""``clearance validate PATH...``: what the running system would make of manifests, found
offline, before they are applied (no server is asked anything).

The files are read as the watcher reads them, and the objects folded into compiled state
by the compiler's own folds (:class:`clearance_core.folding.offline.Offline`); what each object came
to is read back from the statuses those folds produce. So every object is checked as the
system would check it, and against the others: a field filter on a field its type's
MetricSource does not declare filterable, a custom type no MetricSource declares, an
AccessPolicy whose target is not among the manifests or whose namespace may not write it.

One line per problem (``FILE:DOCUMENT KIND NS/NAME: PATH: MESSAGE``), or ``-o json``;
exit status 0 when every object is valid (warnings allowed, unless
``--strict-warnings``), 1 when one is not, 2 for a usage error or a file that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
import time

import msgspec

from clearance_api.wire import StatusCondition
from clearance_cli import output
from clearance_cli.flags import NO, OK, USAGE, CliError
from clearance_cli.manifests import Finding, Loaded, Located, Severity, load
from clearance_core.folding.offline import Offline
from clearance_core.inherit.authority import Authority, parse_namespaces
from clearance_core.kube import strict

#: AccessPolicy ``Accepted`` reasons that are warnings: the manifests given may not hold
#: the whole fleet, so a target may exist elsewhere.
_WARNING_REASONS = frozenset({"TargetNotFound"})


class Report(msgspec.Struct, kw_only=True):
    """``clearance validate -o json``."""

    valid: bool
    files: int
    objects: int
    errors: int
    warnings: int
    problems: list[Finding]


def offline_for(args: argparse.Namespace) -> Offline:
    """An empty :class:`Offline` with the settings a compiler here would run with
    (``--admin-namespaces`` over CLEARANCE_ADMIN_NAMESPACES)."""
    from clearance_runtime.process.settings import Settings  # noqa: PLC0415 - only when run

    try:
        settings = Settings.from_env()
    except (ValueError, msgspec.ValidationError) as exc:
        raise CliError(f"settings: {exc}") from None
    admins = parse_namespaces(args.admin_namespaces) if args.admin_namespaces is not None \
        else settings.admin_namespace_list
    if not admins:
        raise CliError("--admin-namespaces must name at least one namespace")
    return Offline(authority=Authority.of(admins), allow_unset=settings.allow_unset,
                   now=time.time())


def max_bytes() -> int:
    from clearance_runtime.process.settings import Settings  # noqa: PLC0415 - only when run

    try:
        return Settings.from_env().manifest_max_bytes
    except (ValueError, msgspec.ValidationError) as exc:
        raise CliError(f"settings: {exc}") from None


def findings(loaded: Loaded, offline: Offline) -> list[Finding]:
    """Every problem of the loaded objects once folded (``offline`` has folded them)."""
    found: list[Finding] = []
    last = {located.ref: located for located in loaded.objects}
    for located in loaded.entries:
        if isinstance(located, Finding):
            found.append(located)
            continue
        unknown = strict.unknown_fields(strict.SHAPES.get(located.ref.kind, strict.ANY),
                                        located.obj, "")
        found += [located.finding("error", "unknown field", path=problem.path,
                                  suggestion=problem.suggestion) for problem in unknown]
        # What the fold made of it belongs to the object in force (the last of its name).
        if last[located.ref] is located:
            found += _outcome(located, offline, strict_found=bool(unknown))
    return found


def _outcome(located: Located, offline: Offline, *, strict_found: bool) -> list[Finding]:
    ref = located.ref
    key = f"{ref.namespace}/{ref.name}"
    outcome = offline.outcomes.get(ref)
    if outcome is not None and outcome.outcome == "failed":  # never folded, or it broke
        return [located.finding("error", outcome.error or "failed")]
    if ref.kind == "monitoraccesspolicy":
        status = offline.policy_status(key)
        if status is None:
            return []
        found = [located.finding("warning", warning) for warning in status.warnings]
        if status.state == "Error" and not strict_found:
            found.insert(0, located.finding("error", str(status.message)))
        return found
    if ref.kind == "accesspolicy":
        return _conditions(located, offline.access_conditions(key) or [],
                           strict_found=strict_found)
    if outcome is None or outcome.outcome != "invalid" or strict_found:
        return []
    return [located.finding("error", outcome.error or "invalid")]


def _conditions(located: Located, conditions: list[StatusCondition], *,
                strict_found: bool) -> list[Finding]:
    found = []
    for condition in conditions:
        if condition.type == "Accepted" and condition.status == "False":
            if condition.reason == "Invalid" and strict_found:
                continue
            severity: Severity = "warning" if condition.reason in _WARNING_REASONS \
                else "error"
            found.append(located.finding(severity, f"{condition.reason}: {condition.message}"))
        elif condition.type == "Enforced" and condition.status == "Unknown":
            found.append(located.finding("warning", f"{condition.reason}: "
                                                    f"{condition.message}"))
    return found


def counted(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def validate(args: argparse.Namespace) -> int:
    offline = offline_for(args)
    loaded = load(args.paths, max_bytes=max_bytes())
    offline.fold([located.obj for located in loaded.objects])
    problems = findings(loaded, offline)
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    report = Report(valid=errors == 0, files=loaded.files, objects=len(loaded.objects),
                    errors=errors, warnings=warnings, problems=problems)
    if args.output == "text":
        for problem in problems:
            print(problem.line())
        print(f"{counted(report.objects, 'object')} in {counted(report.files, 'file')}: "
              f"{counted(errors, 'error')}, {counted(warnings, 'warning')}", file=sys.stderr)
    else:
        sys.stdout.write(output.document(args.output, msgspec.to_builtins(report)))
    if loaded.unreadable:
        return USAGE
    if errors or (warnings and args.strict_warnings):
        return NO
    return OK
