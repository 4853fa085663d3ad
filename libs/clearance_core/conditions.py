"""``when`` conditions of AccessPolicy blocks: CEL, with ``self`` = the accumulated policy.

``self.rules`` maps rule name to the AccessRule as written, ``self.unset`` is the list of
rule names unset so far (CONTRACT section 6). For example
``has(self.rules.ops) && self.rules.ops.permissions.viewMetrics == true``.

The engine is ``cel-expr-python``, the CEL project's bindings of cel-cpp (why: see the
comment on the dependency in pyproject.toml). Three properties matter here:

* **Compile is a type check.** ``self`` is the only declared variable, so the RFC's
  ``spec.rules.a > 50`` (no ``self.``) fails to compile, as does a syntax error or an
  expression whose type can never be a boolean: the policy is invalid, with the engine's
  message (:func:`check` raises InvalidObject).
* **Evaluation is bounded** by the engine: at most 10,000 comprehension iterations per
  evaluation, 32 levels of recursion, and our limit of :data:`MAX_LENGTH` characters. A
  condition can fail but never stall the compiler.
* **A runtime error counts as false** (CONTRACT): a missing key (``self.rules.x`` where
  there is no rule ``x``; write ``has(self.rules.x)``), a non-boolean result, an exhausted
  budget, a value the engine cannot represent. :func:`evaluate` returns the message, and
  the policy's Enforced condition becomes Unknown.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cel_expr_python import cel

from clearance_core.errors import InvalidObject

MAX_LENGTH = 4096  # characters of one ``when`` expression
_MESSAGE_LIMIT = 300


def _environment() -> Any:
    # ``self`` is a map from string to any value: the accumulated policy as JSON.
    return cel.NewEnv(variables={"self": cel.Type.Map(cel.Type.STRING, cel.Type.DYN)})


_ENV = _environment()
_BOOLISH = ("bool", "dyn")


def _message(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "…"


@lru_cache(maxsize=2048)
def _program(expression: str) -> Any:
    """The compiled program (once per distinct expression); raises InvalidObject."""
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
    return program


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


def evaluate(expression: str, self_value: dict[str, Any]) -> tuple[bool, str | None]:
    """``(result, error)``: the condition's value, or ``(False, message)`` when evaluating it
    fails at run time (checked expressions only; an unchecked one is an error too)."""
    try:
        program = _program(expression)
    except InvalidObject as exc:
        return False, exc.message
    try:
        value = program.eval(data={"self": self_value})
        kind = value.type().name()
        if kind == "ERROR":
            return False, _message(RuntimeError(value.value()))
        result = value.value()
    except Exception as exc:  # budget exhausted, unrepresentable value, engine failure
        return False, _message(exc)
    if not isinstance(result, bool):
        return False, f"evaluated to {kind.lower()}, not a boolean"
    return result, None
