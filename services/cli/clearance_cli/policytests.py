"""``clearance test FILE...``: policy assertions in YAML, checked offline against manifests.

A test file names the manifests (a directory or file, or a list of them, relative to the
test file) and the checks that must hold::

    manifests: .
    tests:
      - name: contractors never see production
        principal: {username: dave}            # groups, email: optional
        action: view                           # view (default) | view_metrics
        resource: {type: cluster, name: prod-us-east}
        expect: deny                           # allow | deny | partial
        policy: clusterpulse/contractors-no-production   # optional: the deciding policy
        permissions: []                        # optional: exactly these
        filters: {pods: {visibility: filtered}}          # optional: at least these
        reason: contractors                    # optional: a part of the reason
        now: "2027-01-01T00:00:00Z"            # optional (also for the whole file)

The manifests are folded as the compiler folds them and each check decided as the decision
service decides it (:class:`clearance_core.folding.offline.Offline`); a failure is reported with
the decision's deciding policy and reason. Unknown fields in a test file are errors (with a
suggestion), as in manifests. Exit status: 0 every test passed, 1 one failed, 2 a test
file could not be read.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from clearance_api.errors import InvalidObject, RequestError
from clearance_api.wire import Action, DecisionKind, Principal, Resource
from clearance_cli import inputs, output
from clearance_cli.flags import NO, OK, CliError
from clearance_cli.manifests import load
from clearance_cli.validate import counted, max_bytes, offline_for
from clearance_core.folding.offline import Offline
from clearance_core.kube import objects, strict
from clearance_core.monitor.decide import Decision


class Case(msgspec.Struct, kw_only=True):
    """One test: a check and what its answer must be."""

    name: str
    principal: Principal
    action: Action = "view"
    resource: Resource
    expect: DecisionKind
    policy: str | None = None
    permissions: list[Action] | None = None
    filters: dict[str, Any] | None = None
    reason: str | None = None
    now: str | None = None


class TestFile(msgspec.Struct, kw_only=True):
    manifests: str | list[str]
    tests: list[Case]
    now: str | None = None


class Result(msgspec.Struct, kw_only=True):
    """One test's outcome, as ``-o json`` prints it."""

    file: str
    name: str
    passed: bool
    expected: DecisionKind
    decision: DecisionKind | None = None
    policy: str | None = None
    reason: str = ""
    permissions: list[str] = []
    filters: dict[str, Any] | None = None
    #: Why it failed, one line each.
    failures: list[str] = []


class Report(msgspec.Struct, kw_only=True):
    passed: int
    failed: int
    results: list[Result]


def shape_of(kind: Any) -> strict.Shape:
    """The fields a msgspec type accepts, for the strict check of test files."""
    info = kind if isinstance(kind, msgspec.inspect.Type) else msgspec.inspect.type_info(kind)
    if isinstance(info, msgspec.inspect.StructType):
        return strict.Shape(fields={f.encode_name: shape_of(f.type) for f in info.fields})
    if isinstance(info, msgspec.inspect.ListType):
        return strict.Shape(items=shape_of(info.item_type))
    if isinstance(info, msgspec.inspect.UnionType):
        shapes = [s for s in (shape_of(t) for t in info.types) if s.checked]
        return shapes[0] if len(shapes) == 1 else strict.ANY
    return strict.ANY


_SHAPE = shape_of(TestFile)


def read(path: Path) -> TestFile:
    """A test file, checked (CliError naming the file and the field otherwise)."""
    raw = inputs.read(path)
    problems = strict.unknown_fields(_SHAPE, raw, "")
    if problems:
        raise CliError(f"{path}: {strict.problems_message(problems)}")
    try:
        return msgspec.convert(raw, TestFile)
    except msgspec.ValidationError as exc:
        raise CliError(f"{path}: {exc}") from None


def _time(value: str | None, where: str) -> float | None:
    if value is None:
        return None
    try:
        return objects.rfc3339(value, where)
    except InvalidObject as exc:
        raise CliError(exc.message) from None


def _subset(expected: Any, actual: Any) -> bool:
    """Whether ``actual`` holds everything ``expected`` says: each key with a value that
    holds the expected one, each list entry somewhere in the list, scalars equal."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and _subset(value, actual[key]) for key, value in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and all(
            any(_subset(entry, candidate) for candidate in actual) for entry in expected)
    return bool(expected == actual)


def judge(case: Case, decision: Decision) -> list[str]:
    """What the decision gets wrong (nothing: the test passes)."""
    wrong = []
    if decision.decision != case.expect:
        wrong.append(f"expected {case.expect}, got {decision.decision}")
    if case.policy is not None and decision.policy != case.policy:
        wrong.append(f"expected policy {case.policy}, got {decision.policy or 'none'}")
    if case.permissions is not None and set(case.permissions) != set(decision.permissions):
        wrong.append(f"expected permissions [{', '.join(case.permissions)}], got "
                     f"[{', '.join(decision.permissions)}]")
    if case.filters is not None and not _subset(case.filters, decision.filters or {}):
        wrong.append(f"expected filters to include {_json(case.filters)}, got "
                     f"{_json(decision.filters)}")
    if case.reason is not None and case.reason not in decision.reason:
        wrong.append(f"expected a reason containing {case.reason!r}")
    return wrong


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def run_file(path: Path, args: argparse.Namespace,
             folded: dict[tuple[Path, ...], Offline]) -> list[Result]:
    tests = read(path)
    written = [tests.manifests] if isinstance(tests.manifests, str) else tests.manifests
    manifests = tuple((path.parent / entry).resolve() for entry in written)
    offline = folded.get(manifests)
    if offline is None:
        offline = folded[manifests] = offline_for(args)
        loaded = load(list(manifests), max_bytes=max_bytes())
        offline.fold([located.obj for located in loaded.objects])
        invalid = sum(o.outcome in ("invalid", "failed") for o in offline.outcomes.values())
        if invalid and args.output == "text":
            verbs = "is invalid and takes" if invalid == 1 else "are invalid and take"
            print(f"{path}: note: {counted(invalid, 'object')} of the manifests {verbs} no "
                  f"part (clearance validate {' '.join(written)})", file=sys.stderr)
    file_now = _time(tests.now, f"{path}: now")
    results = []
    for index, case in enumerate(tests.tests):
        now = _time(case.now, f"{path}: tests[{index}].now") or file_now or time.time()
        results.append(_run(path, case, offline, now))
    return results


def _run(path: Path, case: Case, offline: Offline, now: float) -> Result:
    result = Result(file=str(path), name=case.name, passed=False, expected=case.expect)
    try:
        decision = offline.check(case.principal, action=case.action, resource=case.resource,
                                 now=now)
    except RequestError as exc:
        result.failures = [f"the decision service would refuse this check: {exc.message}"]
        return result
    result.decision, result.policy = decision.decision, decision.policy
    result.reason, result.permissions = decision.reason, list(decision.permissions)
    result.filters = decision.filters
    result.failures = judge(case, decision)
    result.passed = not result.failures
    return result


def _print(results: list[Result]) -> None:
    for result in results:
        print(f"{'PASS' if result.passed else 'FAIL'}  {result.file}: {result.name}")
        for failure in result.failures:
            print(f"      {failure}")
        if not result.passed and result.decision is not None:
            print(f"      decided by {result.policy or 'no policy'}: {result.reason}")


def run_tests(args: argparse.Namespace) -> int:
    folded: dict[tuple[Path, ...], Offline] = {}
    results: list[Result] = []
    for path in args.files:
        results += run_file(path, args, folded)
    failed = sum(not r.passed for r in results)
    if args.output == "text":
        _print(results)
        print(f"{len(results) - failed} passed, {failed} failed")
    else:
        report = Report(passed=len(results) - failed, failed=failed, results=results)
        sys.stdout.write(output.document(args.output, msgspec.to_builtins(report)))
    return NO if failed else OK
