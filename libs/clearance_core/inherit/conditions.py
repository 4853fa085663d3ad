"""``when`` conditions of AccessPolicy blocks: CEL, with ``self`` = the accumulated policy.

``self.rules`` maps rule name to the AccessRule as written, ``self.unset`` is the list of
rule names unset so far (README: Inherited). For example
``has(self.rules.ops) && self.rules.ops.permissions.viewMetrics == true``.

The engine is ``cel-expr-python``, the CEL project's bindings of cel-cpp (why: see the
comment on the dependency in pyproject.toml). Three properties matter here:

* **Compile is a type check.** ``self`` is the only declared variable, so the RFC's
  ``spec.rules.a > 50`` (no ``self.``) fails to compile, as does a syntax error or an
  expression whose type can never be a boolean: the policy is invalid, with the engine's
  message (:func:`check` raises InvalidObject).
* **Evaluation is bounded**, in three ways (:mod:`clearance_core.inherit.cel_cost` says why the
  engine's own limits — 10,000 comprehension iterations, 32 levels of recursion — are not
  enough: one iteration can copy a list):

  - each expression's worst-case cost is estimated from the engine's checked syntax tree
    for the shape of ``self`` it is about to see; above :data:`PER_EVALUATION` units it is
    not evaluated (a runtime error), and one that exceeds it even for an empty policy does
    not compile;
  - ``self`` is converted into the engine's values once per state of the accumulated
    policy (:class:`View`), not once per evaluation, and never beyond :data:`MAX_SELF`;
  - each target's merge spends at most :data:`BUDGET` units on conditions
    (:class:`Budget`: conversions plus worst-case evaluation costs); once it is spent,
    every later condition of that merge is a runtime error.

  A condition can fail but never stall the compiler.
* **A runtime error counts as false** (the README): a missing key (``self.rules.x`` where
  there is no rule ``x``; write ``has(self.rules.x)``), a non-boolean result, an exhausted
  budget, a value the engine cannot represent. :func:`evaluate_in` returns the message,
  and the policy's Enforced condition becomes Unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cel_expr_python import cel

from clearance_api.errors import InvalidObject
from clearance_core.inherit import cel_cost, cel_tree
from clearance_core.inherit.cel_cost import Shape

MAX_LENGTH = 4096  # characters of one ``when`` expression
#: Units (:func:`clearance_core.inherit.cel_cost.measure`) one evaluation may cost at worst. A unit
#: took 10-70 ns on the reference machine (a regex step, a list copy, a conversion), so
#: this is 3-18 ms.
PER_EVALUATION = 250_000
#: Units one target's merge may spend on its conditions: conversions of ``self`` plus the
#: worst-case cost of each evaluation (20-70 ms).
BUDGET = 1_000_000
#: The largest ``self`` (in units) a condition sees: a few thousand rules.
MAX_SELF = 250_000
_MESSAGE_LIMIT = 300
BUDGET_SPENT = f"the conditions of this target exceeded their budget of {BUDGET:,} units"


def _environment() -> Any:
    # ``self`` is a map from string to any value: the accumulated policy as JSON.
    return cel.NewEnv(variables={"self": cel.Type.Map(cel.Type.STRING, cel.Type.DYN)})


_ENV = _environment()
_BOOLISH = ("bool", "dyn")
_EMPTY = cel_cost.self_shape(1, 0, 0, 0, 1, 0, 0)


def _message(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "…"


@dataclass(frozen=True, slots=True)
class _Program:
    program: Any  # cel.Expression
    tree: cel_tree.Tree


@lru_cache(maxsize=2048)
def _program(expression: str) -> _Program:
    """The compiled program and its tree (once per distinct expression); raises
    InvalidObject."""
    try:
        program = _ENV.compile(expression)
    except Exception as exc:  # the engine reports every compile problem as an exception
        raise InvalidObject(f"does not compile: {_message(exc)}") from None
    try:
        kind = program.return_type().name().lower()
    except Exception:
        kind = "dyn"
    if kind not in _BOOLISH:
        raise InvalidObject(f"must be a boolean expression, not {kind}")
    try:
        compiled = _Program(program, cel_tree.parse(program.serialize()))
        least = cel_cost.cost(compiled.tree, _EMPTY)
    except (cel_tree.Malformed, RecursionError) as exc:
        raise InvalidObject(f"its cost cannot be bounded: {_message(exc)}") from None
    if least > PER_EVALUATION:
        raise InvalidObject(
            f"its worst-case cost is {least:,} units even for an empty policy; the limit "
            f"is {PER_EVALUATION:,}")
    return compiled


def check(expression: str, where: str) -> None:
    """Raise InvalidObject naming ``where`` unless ``expression`` is a usable condition."""
    if len(expression) > MAX_LENGTH:
        raise InvalidObject(
            f"{where}: the expression is {len(expression)} characters, the limit is "
            f"{MAX_LENGTH}")
    if "\x00" in expression:
        raise InvalidObject(f"{where}: the expression contains a NUL character")
    try:
        _program(expression)
    except InvalidObject as exc:
        raise InvalidObject(f"{where}: {exc.message}") from None


def _ceiling(number: int) -> int:
    """The next power of two (costs are cached at these sizes: every cost rule is
    monotone, so the cost there bounds the cost at the real size)."""
    return 1 << max(0, number - 1).bit_length()


@lru_cache(maxsize=4096)
def _cost(expression: str, shape: Shape) -> int:
    return cel_cost.cost(_program(expression).tree, shape)


class Budget:
    """What one target's merge may still spend on conditions (units); once it runs out,
    every later condition of that merge fails."""

    __slots__ = ("left", "spent_out")

    def __init__(self, units: int | None = None) -> None:
        self.left = BUDGET if units is None else units
        self.spent_out = False

    def spend(self, units: int) -> bool:
        if self.spent_out or units > self.left:
            self.spent_out = True
            return False
        self.left -= units
        return True


class Stats:
    """The size and shape of ``self``, kept as rules and unset names are added."""

    __slots__ = ("rule_count", "rule_item", "rule_key", "rule_total", "unset")

    def __init__(self, unset: tuple[int, int, int] = (1, 0, 0)) -> None:
        self.rule_total, self.rule_count, self.rule_key, self.rule_item = 1, 0, 0, 0
        self.unset = unset  # (total, count, largest)

    def add_rule(self, name: str, size: int) -> None:
        key = 1 + len(name)
        self.rule_total += key + size
        self.rule_count += 1
        self.rule_key = max(self.rule_key, key)
        self.rule_item = max(self.rule_item, size)

    def add_unset(self, name: str) -> None:
        total, count, largest = self.unset
        self.unset = (total + 1 + len(name), count + 1, max(largest, 1 + len(name)))

    @property
    def size(self) -> int:
        return 1 + 6 + self.rule_total + 6 + self.unset[0]

    def shape(self) -> Shape:
        """Rounded up to powers of two: costs are cached by shape, and every cost rule
        is monotone, so the cost of the rounded shape bounds the real one."""
        total, count, largest = self.unset
        return cel_cost.self_shape(
            _ceiling(self.rule_total), _ceiling(self.rule_count), _ceiling(self.rule_key),
            _ceiling(self.rule_item), _ceiling(total), _ceiling(count), _ceiling(largest))


class View:
    """``self`` for one state of the accumulated policy: its JSON value, size and shape,
    and the engine's activation, which converts the value at the first evaluation that
    reads ``self`` and keeps it for the next ones (cel-cpp caches a variable's value in
    its activation; measured: 17 ms for 5,000 rules once, then 4 us per evaluation)."""

    __slots__ = ("_activation", "converted", "shape", "size", "value")

    def __init__(self, value: dict[str, Any], stats: Stats | None = None) -> None:
        self.value = value
        if stats is None:
            stats = Stats()
            for name, rule in (value.get("rules") or {}).items():
                stats.add_rule(name, cel_cost.measure(rule))
            for name in value.get("unset") or ():
                stats.add_unset(name)
        self.size = stats.size
        self.shape = stats.shape()
        self.converted = False
        self._activation: Any = None

    def activation(self) -> Any:
        if self._activation is None:
            self._activation = _ENV.Activation(data={"self": self.value})
        return self._activation


def evaluate_in(expression: str, view: View, budget: Budget) -> tuple[bool, str | None]:
    """``(result, error)`` of a checked condition for ``self`` = the view, within the
    budget: ``(False, message)`` when it fails at run time or would cost too much."""
    try:
        program = _program(expression)
    except InvalidObject as exc:
        return False, exc.message
    if view.size > MAX_SELF:
        return False, (f"the accumulated policy is {view.size:,} units; conditions see at "
                       f"most {MAX_SELF:,}")
    worst = _cost(expression, view.shape)
    if worst > PER_EVALUATION:
        return False, (f"its worst-case cost is {worst:,} units for this accumulated "
                       f"policy; the limit is {PER_EVALUATION:,}")
    if not budget.spend(worst + (0 if view.converted else view.size)):
        return False, BUDGET_SPENT
    view.converted = True
    try:
        return _result(program.program.eval(view.activation()))
    except Exception as exc:  # unrepresentable value, engine failure
        return False, _message(exc)


def evaluate(expression: str, self_value: dict[str, Any]) -> tuple[bool, str | None]:
    """The straightforward evaluation (tests compare :func:`evaluate_in` with it):
    ``self_value`` converted afresh, no cost estimate, no budget (the engine's iteration
    limit still applies)."""
    try:
        program = _program(expression)
    except InvalidObject as exc:
        return False, exc.message
    try:
        return _result(program.program.eval(data={"self": self_value}))
    except Exception as exc:  # iterations exhausted, unrepresentable value, engine failure
        return False, _message(exc)


def _result(value: Any) -> tuple[bool, str | None]:
    kind = value.type().name()
    if kind == "ERROR":
        return False, _message(RuntimeError(value.value()))
    result = value.value()
    if not isinstance(result, bool):
        return False, f"evaluated to {kind.lower()}, not a boolean"
    return result, None
