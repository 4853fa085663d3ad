"""YAML for untrusted text: PyYAML's safe loader, with aliases bounded.

``yaml.safe_load`` builds no arbitrary objects, but it expands aliases by reference: a
500-byte "billion laughs" (nine aliases of nine aliases of ... a string) loads instantly
as a small graph and explodes when anything walks it — the watcher's JSON encoding of
the event, a hash, a comparison. :class:`BoundedLoader` counts while composing:

* at most ``max_aliases`` alias nodes in one document, and
* at most ``max_expansion`` nodes added by aliases (each alias adds the whole subtree it
  names, counted once per occurrence, nested aliases included);
* an alias naming a node that is still being composed (``&a [*a]``, a recursive value no
  JSON can hold) is refused.

What is refused raises :class:`Refused` (a ``yaml.YAMLError``) naming the limit. Used by
the watcher's manifest directory; the console and the CLI take pasted YAML through it too.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_ALIASES = 100
MAX_EXPANSION = 10_000


class Refused(yaml.YAMLError):
    """The text may be valid YAML, but loading it would cost too much."""


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses alias bombs (see the module's docstring)."""

    max_aliases = MAX_ALIASES
    max_expansion = MAX_EXPANSION

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._reset_counts()

    def _reset_counts(self) -> None:
        self._aliases = 0
        self._expansion = 0
        #: Nodes composed so far in this document -> their expanded size. Keyed by id:
        #: every node stays referenced (by its parent or an anchor) while composing.
        self._sizes: dict[int, int] = {}

    def compose_document(self) -> Node | None:
        try:
            return super().compose_document()
        finally:
            self._reset_counts()

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor  # type: ignore[no-untyped-call]
            target = self.anchors.get(anchor)
            self._aliases += 1
            if self._aliases > self.max_aliases:
                raise Refused(f"more than {self.max_aliases} aliases in one document")
            if target is not None:
                size = self._sizes.get(id(target))
                if size is None:
                    raise Refused(f"the alias *{anchor} refers to a value that contains it")
                self._expansion += size
                if self._expansion > self.max_expansion:
                    raise Refused(
                        f"aliases expand to more than {self.max_expansion:,} values")
        node: Node | None = super().compose_node(parent, index)
        if node is not None and id(node) not in self._sizes:
            self._sizes[id(node)] = self._size(node)
        return node

    def _size(self, node: Node) -> int:
        if isinstance(node, SequenceNode):
            return 1 + sum(self._sizes.get(id(child), 1) for child in node.value)
        if isinstance(node, MappingNode):
            return 1 + sum(self._sizes.get(id(key), 1) + self._sizes.get(id(value), 1)
                           for key, value in node.value)
        return 1


def load_all(text: str) -> list[Any]:
    """Every document of ``text``; raises ``yaml.YAMLError`` (:class:`Refused` for an
    alias bomb)."""
    loader = BoundedLoader(text)
    try:
        documents = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            documents.append(loader.get_data())
        return documents
    finally:
        loader.dispose()


def load(text: str) -> Any:
    """The single document of ``text`` (None if empty); as :func:`load_all`."""
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
