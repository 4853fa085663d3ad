"""The worst-case cost of evaluating one ``when`` condition, before it runs.

The engine bounds comprehension iterations (10,000 per evaluation, all loops together)
but not the work of one iteration: ``self.unset + self.unset`` copies the list, and
eight such copies in two nested loops over a 1,000-name ``unset`` took 36 s and 12 GB in
one evaluation (measured with cel-expr-python 0.1.3). Its runtime options (an iteration
limit, a cost limit) are not reachable from Python, so the bound is computed here, the
way Kubernetes bounds CEL in CRD validation rules: a static estimate over the engine's
own checked syntax tree.

:func:`parse` decodes the tree from ``Expression.serialize()`` (a ``google.protobuf.Any``
holding a ``cel.expr.CheckedExpr``, decoded with a minimal protobuf reader: protobuf
itself is not a dependency). :func:`cost` walks it for ``self`` of a given size and
returns an upper bound on the work, in *units*: one unit is one element or character
touched (converted, copied, compared, hashed or matched). Sizes use the same measure
(:func:`measure`). Every rule is monotone in the size of ``self``, so the cost at the
next power of two above the real size bounds the cost at the real size, and the compiler
only ever computes it at powers of two (cached per expression).

The estimate errs high: ``dyn`` values are assumed as large as anything they could be,
an addition whose type may be a string or a list is a copy, a loop runs as often as its
range has elements (never more than the engine's 10,000 iterations per evaluation).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: The engine's comprehension limit: iterations of every loop of one evaluation together.
ITERATIONS = 10_000
#: ``map``/``filter`` loops nested in one another: deeper is refused as too complex.
NESTED_LISTS = 6

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


def measure(value: Any) -> int:
    """The size of a JSON-like value in units: one per value, plus one per character of
    its strings and keys."""
    if isinstance(value, str):
        return 1 + len(value)
    if isinstance(value, dict):
        return 1 + sum(measure(k) + measure(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return 1 + sum(measure(v) for v in value)
    return 1


@dataclass(frozen=True, slots=True)
class Shape:
    """What the estimate knows of a value: its size, its number of elements (entries of
    a map, items of a list), its largest key and its largest element, whether it is a
    map (None: could be either), and the shapes of known fields."""

    size: int
    count: int = 0
    key: int = 0
    item: int = 0
    is_map: bool | None = None
    fields: tuple[tuple[str, Shape], ...] = ()

    @classmethod
    def of(cls, size: int) -> Shape:
        """Anything of that size."""
        size = max(1, size)
        return cls(size, size, size, size)

    def field(self, name: str) -> Shape:
        for known, shape in self.fields:
            if known == name:
                return shape
        return Shape.of(self.item or self.size)

    def element(self) -> Shape:
        """A loop variable over it: a key of a map, an item of a list."""
        if self.is_map is True:
            return Shape.of(self.key)
        if self.is_map is False:
            return Shape.of(self.item)
        return Shape.of(max(self.key, self.item))


SCALAR = Shape(1)


def self_shape(*sizes: int) -> Shape:
    """``self`` = ``{"rules": {...}, "unset": [...]}`` from the sizes of its parts: the
    rules' total size, number, largest name and largest rule; the unset list's total
    size, number and largest name."""
    rules, rule_count, rule_key, rule_item, unset, unset_count, unset_item = sizes
    shaped_rules = Shape(rules, rule_count, rule_key, rule_item, True)
    shaped_unset = Shape(unset, unset_count, 0, unset_item, False)
    return Shape(1 + 6 + rules + 6 + unset, 2, 6, max(rules, unset), True,
                 (("rules", shaped_rules), ("unset", shaped_unset)))


# Function groups of the standard library (the environment loads no extension).
_LOGICAL = {"_&&_", "_||_", "!_", "@not_strictly_false", "__not_strictly_false__"}
_COMPARE = {"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"}
_ARITHMETIC = {"_-_", "_*_", "_/_", "_%_", "-_", "size", "getDate", "getDayOfMonth",
               "getDayOfWeek", "getDayOfYear", "getFullYear", "getHours",
               "getMilliseconds", "getMinutes", "getMonth", "getSeconds", "type"}
_PARSE = {"bool", "int", "uint", "double", "duration", "timestamp"}  # read their argument
_PREFIX = {"startsWith", "endsWith"}
_SEARCH = {"contains", "matches"}
_COPY = {"string", "bytes", "dyn"}


@dataclass(slots=True)
class _Estimate:
    tree: Tree
    self_value: Shape
    #: Shapes of the loop variables in scope (they shadow ``self`` if so named).
    scope: dict[str, Shape] = field(default_factory=dict)
    #: Loops whose accumulator is not a scalar (map, filter) being estimated: each walks
    #: its step twice, so their nesting is bounded (:data:`NESTED_LISTS`).
    lists: int = 0


def cost(tree: Tree, self_value: Shape) -> int:
    """An upper bound on the units one evaluation spends with ``self`` of that shape
    (not counting the conversion of ``self`` itself: it happens once per state)."""
    return _walk(_Estimate(tree, self_value), tree.root, 1)[1]


def _walk(est: _Estimate, node: Node, times: int) -> tuple[Shape, int]:
    """``(shape, cost)`` of ``node`` evaluated ``times`` times in all (the cost is the
    total over those times; the shape is one value's)."""
    shape, spent = _one(est, node, times)
    return (SCALAR if node.id in est.tree.scalars else shape), spent


def _all(est: _Estimate, nodes: list[Node], times: int) -> tuple[list[Shape], int]:
    shapes, total = [], 0
    for child in nodes:
        shape, spent = _walk(est, child, times)
        shapes.append(shape)
        total += spent
    return shapes, total


def _one(est: _Estimate, node: Node, times: int) -> tuple[Shape, int]:
    if node.kind == "const":
        return Shape(1 + node.length), times
    if node.kind == "ident":
        if node.name in est.scope:
            return est.scope[node.name], times
        return (est.self_value if node.name == "self" else SCALAR), times
    if node.kind == "select":
        shape, spent = _walk(est, node.args[0], times)
        # A field lookup hashes the field name; has() answers a boolean.
        found = SCALAR if node.test_only else shape.field(node.name)
        return found, spent + times * (1 + len(node.name))
    if node.kind == "list":
        shapes, spent = _all(est, node.args, times)
        size = 1 + sum(s.size for s in shapes)
        item = max((s.size for s in shapes), default=0)
        return Shape(size, len(shapes), 0, item, False), spent + times * size
    if node.kind == "struct":  # a map literal: keys and values alternate
        shapes, spent = _all(est, node.args, times)
        size = 1 + sum(s.size for s in shapes)
        keys, values = shapes[0::2], shapes[1::2]
        return Shape(size, len(keys), max((s.size for s in keys), default=0),
                     max((s.size for s in values), default=0), True), spent + times * size
    if node.kind == "comprehension":
        return _comprehension(est, node, times)
    if node.kind == "call":
        return _call(est, node, times)
    raise Malformed(f"unknown expression kind {node.kind!r}")


def _call(est: _Estimate, node: Node, times: int) -> tuple[Shape, int]:
    shapes, spent = _all(est, node.args, times)
    sizes = [s.size for s in shapes]
    first = sizes[0] if sizes else 1
    last = sizes[-1] if sizes else 1
    name = node.name
    if name in _LOGICAL or name in _ARITHMETIC:
        return SCALAR, spent + times
    if name in _PARSE:
        return SCALAR, spent + times * (1 + first)
    if name == "_?_:_":
        branches = shapes[1:] or [SCALAR]
        return _widest(branches), spent + times
    if name in _COMPARE:  # element by element, up to the smaller side
        return SCALAR, spent + times * (1 + min(sizes, default=1))
    if name == "_+_":  # a string, bytes or list concatenation copies both sides
        return _joined(shapes), spent + times * (1 + sum(sizes))
    if name == "_[_]":  # the key is hashed (a map) or the item found (a list)
        return Shape.of(shapes[0].item if shapes else 1), spent + times * (1 + last)
    if name in ("@in", "in"):  # each element compared, or the key hashed
        return SCALAR, spent + times * (1 + first + last)
    if name in _PREFIX:
        return SCALAR, spent + times * (1 + min(first, last))
    if name in _SEARCH:  # a substring search or an RE2 match: text x pattern at worst
        return SCALAR, spent + times * (1 + first + last + first * last)
    if name in _COPY:
        return Shape.of(first), spent + times * (1 + first)
    # Nothing else is declared; should the engine add a function, bound it harshly.
    total = sum(sizes)
    return Shape.of(total), spent + times * (1 + total * total)


def _widest(shapes: list[Shape]) -> Shape:
    return Shape(max(s.size for s in shapes), max(s.count for s in shapes),
                 max(s.key for s in shapes), max(s.item for s in shapes))


def _joined(shapes: list[Shape]) -> Shape:
    return Shape(sum(s.size for s in shapes), sum(s.count for s in shapes),
                 max((s.key for s in shapes), default=0),
                 max((s.item for s in shapes), default=0))


def _comprehension(est: _Estimate, node: Node, times: int) -> tuple[Shape, int]:
    parts = node.parts
    if "range" not in parts or "init" not in parts:
        raise Malformed("incomplete comprehension")
    source, spent = _walk(est, parts["range"], times)
    init, init_spent = _walk(est, parts["init"], times)
    spent += init_spent
    # The engine stops every evaluation at ITERATIONS iterations of all loops together.
    each = min(source.count, ITERATIONS)
    loops = min(times * each, ITERATIONS)
    saved = {name: est.scope.get(name) for name in (node.iter_var, node.accu_var)}
    est.scope[node.iter_var] = source.element()
    step = parts.get("step")
    if step is None or node.id in est.tree.scalars or step.id in est.tree.scalars:
        accumulated = SCALAR  # all, exists, exists_one: a boolean or a count
    else:
        # map, filter: the accumulator grows by at most one step's value per iteration.
        # The step's shape with the initial accumulator first, then its cost with the
        # accumulator at its largest.
        est.lists += 1
        if est.lists > NESTED_LISTS:
            raise Malformed(f"more than {NESTED_LISTS} map/filter loops nested")
        est.scope[node.accu_var] = init
        grown = _walk(est, step, loops)[0]
        est.lists -= 1
        accumulated = Shape(init.size + each * grown.size, init.count + each * grown.count,
                            max(init.key, grown.key), max(init.item, grown.item))
    est.scope[node.accu_var] = accumulated
    for part in ("condition", "step"):
        if part in parts:
            spent += _walk(est, parts[part], loops)[1]
    est.scope.pop(node.iter_var, None)
    if "result" in parts:
        result, result_spent = _walk(est, parts["result"], times)
    else:
        result, result_spent = accumulated, 0
    for name, old in saved.items():
        if old is None:
            est.scope.pop(name, None)
        else:
            est.scope[name] = old
    return result, spent + result_spent + loops
