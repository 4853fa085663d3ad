"""Manifests for ``clearance validate`` and ``clearance test``: files and directories read
as the watcher reads them (:mod:`clearance_runtime.edges.manifest_files`), each object with
where it was found, and what could not be read as a :class:`Finding`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from clearance_api.errors import InvalidObject
from clearance_cli.flags import USAGE, CliError
from clearance_core.folding.kinds import ObjectRef, ref_of
from clearance_core.folding.offline import as_published
from clearance_runtime.edges import manifest_files

Severity = Literal["error", "warning"]


class Finding(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One problem, as ``clearance validate -o json`` prints it."""

    severity: Severity
    #: ``FILE:DOCUMENT`` (documents counted from 1; ``[i]`` for an item of a List).
    location: str
    kind: str = ""
    namespace: str = ""
    name: str = ""
    #: The field's JSON path, when the problem is one field's.
    path: str = ""
    message: str
    suggestion: str | None = None

    def line(self) -> str:
        """``FILE:DOCUMENT KIND NS/NAME: PATH: MESSAGE (did you mean "X"?)``."""
        who = ""
        if self.kind:
            who = f" {self.kind} {f'{self.namespace}/' if self.namespace else ''}{self.name}"
        parts = [f"{self.location}{who}"]
        if self.severity == "warning":
            parts.append("warning")
        if self.path:
            parts.append(self.path)
        hint = f' (did you mean "{self.suggestion}"?)' if self.suggestion else ""
        message = " ".join(self.message.split())  # one line, whatever YAML's errors hold
        return ": ".join([*parts, message]) + hint


class Located(msgspec.Struct, frozen=True):
    """An object of a watched kind and where it was found."""

    location: str
    ref: ObjectRef
    obj: dict[str, Any]

    def finding(self, severity: Severity, message: str, *, path: str = "",
                suggestion: str | None = None) -> Finding:
        return Finding(severity=severity, location=self.location,
                       kind=str(self.obj.get("kind")), namespace=self.ref.namespace,
                       name=self.ref.name, path=path, message=message,
                       suggestion=suggestion)


class Loaded(msgspec.Struct):
    #: Objects, and what could not be read, in the order of the files and documents.
    entries: list[Located | Finding]
    files: int = 0
    #: A file could not be read at all (exit status 2, not 1).
    unreadable: bool = False

    @property
    def objects(self) -> list[Located]:
        return [entry for entry in self.entries if isinstance(entry, Located)]


def _where(path: Path, document: manifest_files.Document) -> str:
    item = "" if document.item is None else f"[{document.item}]"
    return f"{path}:{document.position + 1}{item}"


def load(paths: Sequence[Path], *, max_bytes: int = manifest_files.MAX_BYTES) -> Loaded:
    """Every object under ``paths`` (files, or directories read recursively for
    ``*.yaml``, ``*.yml`` and ``*.json``); a later object with the same kind, namespace and
    name replaces an earlier one, as in the watcher (with a warning). CliError (exit 2)
    for a path that does not exist."""
    loaded = Loaded(entries=[])
    first: dict[ObjectRef, str] = {}
    for path in paths:
        if not path.exists():
            raise CliError(f"{path}: no such file or directory", USAGE)
        for file in manifest_files.files(path) if path.is_dir() else [path]:
            loaded.files += 1
            try:
                documents = manifest_files.read_documents(file, max_bytes=max_bytes)
            except InvalidObject as exc:
                loaded.unreadable |= isinstance(exc, manifest_files.Unreadable)
                loaded.entries.append(Finding(severity="error", location=str(file),
                                              message=f"{exc.message} (the file is skipped)"))
                continue
            for document in documents:
                _add(loaded, first, _where(file, document), document.obj)
    return loaded


def _add(loaded: Loaded, first: dict[ObjectRef, str], where: str, obj: Any) -> None:
    skipped = " (the watcher skips the whole file)"
    if not isinstance(obj, dict):
        loaded.entries.append(Finding(severity="error", location=where,
                                      message=f"not an object{skipped}"))
        return
    try:
        ref = ref_of(obj)
    except InvalidObject as exc:
        loaded.entries.append(Finding(severity="error", location=where,
                                      message=f"{exc.message}{skipped}"))
        return
    try:
        published = as_published(obj)  # what the compiler would read (YAML dates as text)
    except ValueError:
        published = obj  # the fold says it is rejected
    located = Located(where, ref, published)
    loaded.entries.append(located)
    if ref in first:
        loaded.entries.append(located.finding(
            "warning", f"also defined at {first[ref]}: this later one is used"))
    first[ref] = where
