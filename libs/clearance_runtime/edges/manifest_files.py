"""Manifest files as the watcher reads them: ``*.yaml``, ``*.yml`` and ``*.json`` under a
directory, each a stream of documents, loaded with :mod:`.safeyaml` within a size limit.

One reader for the watcher's manifest source and for ``clearance validate`` / ``clearance
test``, so a file the running system would skip is a file the checks refuse, for the same
reason. A ``kind: List`` document stands for its ``items``. A policy test file (``clearance
test``: a document with a ``tests`` list and no ``kind``) is no manifest and is left out,
so one may live beside the manifests it tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import yaml

from clearance_api.errors import InvalidObject
from clearance_runtime.edges import safeyaml

SUFFIXES = (".yaml", ".yml", ".json")
#: CLEARANCE_MANIFEST_MAX_BYTES's default.
MAX_BYTES = 8 << 20


class Unreadable(InvalidObject):
    """A file that cannot be opened or read (not its content's fault)."""


class FileRejected(InvalidObject):
    """A file refused for what reading it would cost; ``reason`` labels the counter."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class Document(NamedTuple):
    """One object of a file: the document it is in (0 for the first) and, for a
    ``kind: List`` document, its index in ``items``."""

    position: int
    item: int | None
    obj: Any


def files(directory: Path) -> list[Path]:
    """Every manifest file under ``directory``, in sorted path order."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.suffix in SUFFIXES and p.is_file())


def read_documents(path: Path, *, max_bytes: int = MAX_BYTES) -> list[Document]:
    """Every document of one file (empty ones left out), ``List`` items each on its own.
    :class:`FileRejected` for a file too large or an alias bomb, InvalidObject for one that
    cannot be read or is not YAML: a file is taken whole or not at all."""
    try:
        with path.open("rb") as stream:
            data = stream.read(max_bytes + 1)  # never more, even if the file grows
        if len(data) > max_bytes:
            raise FileRejected(f"the file is larger than the limit of {max_bytes:,} bytes "
                               "(CLEARANCE_MANIFEST_MAX_BYTES)", "file_too_large")
        loaded = safeyaml.load_all(data.decode("utf-8"))
    except safeyaml.Refused as exc:
        raise FileRejected(f"refused: {exc}", "yaml_aliases") from None
    except OSError as exc:
        raise Unreadable(f"cannot read: {exc}") from None
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise InvalidObject(f"cannot read: {exc}") from None
    documents: list[Document] = []
    for position, document in enumerate(loaded):
        if document is None or is_policy_test(document):  # '---' with nothing between
            continue
        if isinstance(document, dict) and document.get("kind") == "List" \
                and isinstance(document.get("items"), list):
            documents += [Document(position, index, obj)
                          for index, obj in enumerate(document["items"])]
        else:
            documents.append(Document(position, None, document))
    return documents


def is_policy_test(document: Any) -> bool:
    """Whether a document is a ``clearance test`` file's (not a Kubernetes object)."""
    return isinstance(document, dict) and "kind" not in document \
        and isinstance(document.get("tests"), list)
