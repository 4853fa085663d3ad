"""``-o json|yaml|table``: replies as documents, or as tables with fixed columns."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any


def document(fmt: str, value: Any) -> str:
    """The reply as JSON (indented, as the service sent it) or YAML, newline-terminated."""
    if fmt == "yaml":
        import yaml  # noqa: PLC0415  (0.1 s to import; only -o yaml needs it)

        return str(yaml.safe_dump(value, sort_keys=False, allow_unicode=True))
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def table(header: Sequence[str] | None, rows: Iterable[Sequence[object]],
          indent: str = "") -> list[str]:
    """Columns padded to their widest cell, in the header's order (kubectl's layout); an
    empty cell prints as ``-`` so every row splits into the same number of words."""
    shown = [*([list(header)] if header else []), *([cell_text(c) for c in row] for row in rows)]
    if not shown:
        return []
    widths = [max(len(row[i]) for row in shown) for i in range(len(shown[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            .rstrip() for row in shown]


def cell_text(value: object) -> str:
    if value is None or value in ("", []):
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(cell_text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def fields(reply: dict[str, Any], skip: Iterable[str] = ()) -> list[str]:
    """Any reply as FIELD VALUE rows (``request`` and replies without a shape of their
    own); ``request_id`` is shown only when it was sent."""
    hidden = {*skip, *(("request_id",) if reply.get("request_id") is None else ())}
    return table(["FIELD", "VALUE"], ([k, v] for k, v in reply.items() if k not in hidden))
