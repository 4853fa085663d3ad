"""Request bodies from files: YAML or JSON (JSON is YAML), ``-`` for standard input."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from clearance_cli.flags import CliError


def read(path: Path) -> Any:
    """The one document in ``path``; CliError naming the file otherwise."""
    import yaml  # noqa: PLC0415  (0.1 s to import: only commands reading a file pay it)

    from clearance_runtime.edges import safeyaml  # noqa: PLC0415  (imports yaml)

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
        documents = [doc for doc in safeyaml.load_all(text) if doc is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise CliError(f"{path}: {exc}") from None
    if len(documents) != 1:
        raise CliError(f"{path}: holds {len(documents)} documents, not one")
    return documents[0]
