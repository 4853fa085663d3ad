"""YAML from untrusted authors: PyYAML's safe loader, with aliases bounded.

``yaml.safe_load`` builds no arbitrary objects, but it expands aliases by reference: a
500-byte "billion laughs" (nine aliases of nine aliases of ... a string) loads at once as
a small graph and explodes when anything walks it — the watcher's JSON encoding of an
event, a hash, a comparison, the console's dry run. So each document's node graph is
measured after it is composed and before it becomes Python objects, and refused
(:class:`Refused`, a ``yaml.YAMLError`` naming the limit) when

* it uses more than ``max_aliases`` aliases,
* its aliases add more than ``max_expansion`` values to it (each alias counts the whole
  subtree it names, nested aliases included), or
* an alias names a node that contains it (a recursive value, which no JSON can hold).

The measure is linear in the document's distinct nodes (each node's expanded size is
computed once), so a refusal costs no more than the parse. A large document without
aliases (a Group of 100,000 users) is not bounded here: its size is its text's.

Used by the watcher's manifest directory and the console's dry run.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from clearance_api.errors import ClearanceError

#: Aliases one document may use; hand-written manifests rarely use any.
MAX_ALIASES = 100
#: Values aliases may add to one document.
MAX_EXPANSION = 10_000



class Refused(yaml.YAMLError, ClearanceError):
    """The text may be valid YAML, but loading it would cost too much."""


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def measure(root: Node, *, max_aliases: int = MAX_ALIASES,
            max_expansion: int = MAX_EXPANSION) -> int:
    """How many values the document's aliases add to it; :class:`Refused` past a bound."""
    sizes: dict[int, int] = {}  # id(node) -> its expanded size, once computed
    on_path: set[int] = set()
    aliases = 0
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in on_path:
            raise Refused("an alias refers to a value that contains it")
        if key in sizes:  # reached again: an alias
            aliases += 1
            if aliases > max_aliases:
                raise Refused(f"more than {max_aliases} aliases in one document")
            continue
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))
    added = sizes[id(root)] - len(sizes)
    if added > max_expansion:
        raise Refused(f"aliases expand the document by more than {max_expansion:,} values")
    return added


class _Loader(yaml.SafeLoader):
    """The pure-Python safe loader, never libyaml's: its composer recurses on the C stack,
    and ``[`` nested 50,000 deep kills the process (a segmentation fault; Python's
    composer raises RecursionError instead, which the callers report)."""

    max_aliases = MAX_ALIASES
    max_expansion = MAX_EXPANSION

    def construct_document(self, node: Node) -> Any:
        measure(node, max_aliases=self.max_aliases, max_expansion=self.max_expansion)
        return super().construct_document(node)


def load_all(text: str, *, max_aliases: int = MAX_ALIASES,
             max_expansion: int = MAX_EXPANSION) -> list[Any]:
    """Every document of ``text`` (``yaml.safe_load_all``'s objects); :class:`Refused`
    for a document past a bound, ``yaml.YAMLError`` for text that is not YAML."""
    loader = _Loader(text)
    loader.max_aliases, loader.max_expansion = max_aliases, max_expansion
    try:
        documents = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            documents.append(loader.get_data())
        return documents
    finally:
        loader.dispose()


def load(text: str, *, max_aliases: int = MAX_ALIASES,
         max_expansion: int = MAX_EXPANSION) -> Any:
    """The single document of ``text`` (None if empty); as :func:`load_all`."""
    loader = _Loader(text)
    loader.max_aliases, loader.max_expansion = max_aliases, max_expansion
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
