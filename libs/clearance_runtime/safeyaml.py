"""YAML without expansion bombs: PyYAML's safe loader, with every document's node graph
measured before it becomes Python objects.

An alias makes the composed document a graph in which one node can be reached many
times: 600 bytes of anchors, each aliasing the one before nine times, describe billions
of nodes. PyYAML builds them shared (cheap), but whatever then walks the result — an
encoder, a comparison, a fold — walks every copy, and a service stalls or runs out of
memory. So each document is refused (:class:`TooLarge`, a ``yaml.YAMLError``) when it
uses more than ``max_aliases`` aliases, when it would expand to more than ``max_nodes``
nodes, or when an alias refers to a node that contains it (a recursive structure has no
finite expansion). The measure is linear in the distinct nodes (each node's expanded size
is computed once), so a refusal is as fast as a parse.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

#: Aliases one document may use; hand-written manifests rarely use any.
MAX_ALIASES = 100
#: Nodes one document may expand to (every scalar, sequence and mapping, counting each
#: alias as a copy of what it refers to).
MAX_NODES = 100_000

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser where built


class TooLarge(yaml.YAMLError):
    """A document refused for its aliases or its expanded size."""


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def measure(root: Node, *, max_aliases: int = MAX_ALIASES,
            max_nodes: int = MAX_NODES) -> int:
    """The expanded node count of a composed document; ``TooLarge`` past a bound."""
    sizes: dict[int, int] = {}  # id(node) -> its expanded size, once computed
    on_path: set[int] = set()
    aliases = 0
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            if size > max_nodes:
                raise TooLarge(f"a YAML document expands to more than {max_nodes} nodes "
                               "(through aliases)")
            sizes[key] = size
            continue
        if key in on_path:
            raise TooLarge("a YAML alias refers to a node that contains it (a recursive "
                           "structure)")
        if key in sizes:  # reached again: an alias
            aliases += 1
            if aliases > max_aliases:
                raise TooLarge(f"a YAML document uses more than {max_aliases} aliases")
            continue
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))
    return sizes[id(root)]


class _Loader(_Base):  # type: ignore[misc]
    max_aliases = MAX_ALIASES
    max_nodes = MAX_NODES

    def construct_document(self, node: Node) -> Any:
        measure(node, max_aliases=self.max_aliases, max_nodes=self.max_nodes)
        return super().construct_document(node)


def load_all(text: str, *, max_aliases: int = MAX_ALIASES,
             max_nodes: int = MAX_NODES) -> list[Any]:
    """Every document of ``text`` (``yaml.safe_load_all``'s objects); ``TooLarge`` for a
    document past a bound, ``yaml.YAMLError`` for text that is not YAML."""
    loader = _Loader(text)
    loader.max_aliases, loader.max_nodes = max_aliases, max_nodes
    try:
        documents = []
        while loader.check_data():
            documents.append(loader.get_data())
        return documents
    finally:
        loader.dispose()
