"""The worst-case cost of evaluating one ``when`` condition, before it runs.

The engine bounds comprehension iterations (10,000 per evaluation, all loops together)
but not the work of one iteration: ``self.unset + self.unset`` copies the list, and
eight such copies in two nested loops over a 1,000-name ``unset`` took 36 s and 12 GB in
one evaluation (measured with cel-expr-python 0.1.3). Its runtime options (an iteration
limit, a cost limit) are not reachable from Python, so the bound is computed here, the
way Kubernetes bounds CEL in CRD validation rules: a static estimate over the engine's
own checked syntax tree.

:func:`cost` walks the checked tree (:mod:`clearance_core.inherit.cel_tree`) for a ``self`` of a
given :class:`Shape` and returns an upper bound on the work, in *units*: one unit is one
element or character touched (converted, copied, compared, hashed or matched). Sizes use
the same measure (:func:`measure`). Every rule is monotone in each dimension of the
shape, so the cost with every dimension rounded up to a power of two bounds the real one,
and the compiler only ever computes it for such shapes (cached per expression).

The estimate errs high: ``dyn`` values are assumed as large as anything they could be,
an addition whose type may be a string or a list is a copy, a loop runs as often as its
range has elements (never more than the engine's 10,000 iterations per evaluation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clearance_core.inherit.cel_tree import Malformed, Node, Tree

#: The engine's comprehension limit: iterations of every loop of one evaluation together.
ITERATIONS = 10_000
#: ``map``/``filter`` loops nested in one another: deeper is refused as too complex.
NESTED_LISTS = 6


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
