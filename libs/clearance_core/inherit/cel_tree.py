"""The checked syntax tree of a CEL expression, read from the engine itself.

``cel-expr-python`` does not expose its syntax tree, but ``Expression.serialize()`` returns
it: a ``google.protobuf.Any`` holding a ``cel.expr.CheckedExpr`` (the expression, and the
type the checker inferred for every node). :func:`parse` decodes what
:mod:`clearance_core.inherit.cel_cost` needs with a minimal protobuf reader (protobuf itself is not
a dependency); the field numbers are those of ``cel/expr/syntax.proto`` and
``checked.proto``, part of the CEL specification. Reading the engine's own tree, rather
than parsing the text again, means the estimate sees exactly what will run: macros
expanded into comprehensions, every call named.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

# Field numbers of cel/expr/syntax.proto and checked.proto (stable: part of the CEL spec).
_ANY_VALUE = 2
_CHECKED_REFERENCES, _CHECKED_TYPES, _CHECKED_EXPR = 2, 3, 4
_EXPR_ID, _CONST, _IDENT, _SELECT, _CALL, _LIST, _STRUCT, _COMPREHENSION = 2, 3, 4, 5, 6, 7, 8, 9
_CONST_STRING, _CONST_BYTES = 6, 7
_TYPE_NULL, _TYPE_PRIMITIVE, _TYPE_WRAPPER, _TYPE_WELL_KNOWN = 2, 3, 4, 5
_SCALAR_PRIMITIVES = {1, 2, 3, 4}  # bool, int64, uint64, double (not string, bytes)
_SCALAR_WELL_KNOWN = {2, 3}  # timestamp, duration


class Malformed(ValueError):
    """The serialized expression is not what this reader expects."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise Malformed("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """``(field number, value)`` of one message: an int for varints, bytes for
    length-delimited fields; fixed-width fields (doubles) are skipped."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise Malformed("truncated field")
            yield number, data[at:at + length]
            at += length
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise Malformed(f"unsupported wire type {wire}")


def _message(data: int | bytes) -> bytes:
    if not isinstance(data, bytes):
        raise Malformed("expected a message")
    return data


def _text(data: int | bytes) -> str:
    return _message(data).decode("utf-8", "replace")


@dataclass(slots=True)
class Node:
    """One expression of the tree, as much of it as the estimate needs."""

    id: int = 0
    kind: str = ""  # const ident select call list struct comprehension
    name: str = ""  # ident name, selected field, called function
    length: int = 0  # a string or bytes constant's length
    test_only: bool = False  # has(x.f)
    args: list[Node] = field(default_factory=list)  # operand/target first, then arguments
    # comprehension: iter_var, accu_var and the parts
    iter_var: str = ""
    accu_var: str = ""
    parts: dict[str, Node] = field(default_factory=dict)


_COMPREHENSION_PARTS = {2: "range", 4: "init", 5: "condition", 6: "step", 7: "result"}


def _node(data: bytes, depth: int = 0) -> Node:
    if depth > 256:
        raise Malformed("nested too deeply")
    node = Node()
    for number, value in _fields(data):
        if number == _EXPR_ID and isinstance(value, int):
            node.id = value
        elif number == _CONST:
            node.kind = "const"
            for inner, constant in _fields(_message(value)):
                if inner in (_CONST_STRING, _CONST_BYTES) and isinstance(constant, bytes):
                    node.length = len(constant)
        elif number == _IDENT:
            node.kind = "ident"
            node.name = next((_text(v) for n, v in _fields(_message(value)) if n == 1), "")
        elif number == _SELECT:
            node.kind = "select"
            for inner, part in _fields(_message(value)):
                if inner == 1:
                    node.args.insert(0, _node(_message(part), depth + 1))
                elif inner == 2:
                    node.name = _text(part)
                elif inner == 3:
                    node.test_only = bool(part)
        elif number == _CALL:
            node.kind = "call"
            target: list[Node] = []
            for inner, part in _fields(_message(value)):
                if inner == 1:
                    target.append(_node(_message(part), depth + 1))
                elif inner == 2:
                    node.name = _text(part)
                elif inner == 3:
                    node.args.append(_node(_message(part), depth + 1))
            node.args = target + node.args
        elif number == _LIST:
            node.kind = "list"
            node.args = [_node(_message(part), depth + 1)
                         for inner, part in _fields(_message(value)) if inner == 1]
        elif number == _STRUCT:
            node.kind = "struct"
            for inner, entry in _fields(_message(value)):
                if inner != 2:
                    continue
                for part_number, part in _fields(_message(entry)):
                    if part_number in (3, 4):  # map key, value (field keys are names)
                        node.args.append(_node(_message(part), depth + 1))
        elif number == _COMPREHENSION:
            node.kind = "comprehension"
            for inner, part in _fields(_message(value)):
                if inner == 1:
                    node.iter_var = _text(part)
                elif inner == 3:
                    node.accu_var = _text(part)
                elif inner in _COMPREHENSION_PARTS:
                    node.parts[_COMPREHENSION_PARTS[inner]] = _node(_message(part), depth + 1)
                elif inner == 8:  # a second iteration variable: not in the standard macros
                    raise Malformed("two-variable comprehensions are not supported")
    return node


@dataclass(slots=True)
class Tree:
    root: Node
    #: Expression ids whose checked type is a scalar (a bool, number, null, timestamp or
    #: duration): their values have size 1 whatever their operands.
    scalars: frozenset[int]


def parse(serialized: bytes) -> Tree:
    """The checked tree of ``Expression.serialize()``; raises :class:`Malformed`."""
    checked = next((_message(v) for n, v in _fields(serialized) if n == _ANY_VALUE), None)
    if checked is None:
        raise Malformed("not a serialized expression")
    root: Node | None = None
    scalars: set[int] = set()
    for number, value in _fields(checked):
        if number == _CHECKED_EXPR:
            root = _node(_message(value))
        elif number == _CHECKED_TYPES:
            key, kind = 0, None
            for inner, part in _fields(_message(value)):
                if inner == 1 and isinstance(part, int):
                    key = part
                elif inner == 2:
                    kind = _message(part)
            if kind is not None and _is_scalar(kind):
                scalars.add(key)
    if root is None:
        raise Malformed("no expression")
    return Tree(root, frozenset(scalars))


def _is_scalar(kind: bytes) -> bool:
    for number, value in _fields(kind):
        if number == _TYPE_NULL:
            return True
        if number in (_TYPE_PRIMITIVE, _TYPE_WRAPPER):
            return value in _SCALAR_PRIMITIVES
        if number == _TYPE_WELL_KNOWN:
            return value in _SCALAR_WELL_KNOWN
    return False
