"""The manifest-directory source: YAML files as a second source of truth (local use, GitOps).

Every ``*.yaml``/``*.yml``/``*.json`` file under the directory is read as a stream of
Kubernetes objects (multi-document YAML). The directory is polled; each scan becomes one
complete snapshot handed to the ledger, which emits ADDED/MODIFIED/DELETED for what
changed: files added, edited or removed, and documents added to or removed from a file.

A file that does not parse, or that holds a document which is not an object of a watched
kind, is logged and skipped *as a whole*: the objects it last contributed stay as they
were (never half-published, never deleted because of a typo). So is a file that would
cost too much to read, and that is counted as a rejection
(``clearance_watcher_rejected_total{kind="file",reason}``): one over
``CLEARANCE_MANIFEST_MAX_BYTES`` (``file_too_large``: not even read), or one whose YAML
aliases would expand beyond ``clearance_runtime.edges.safeyaml``'s bounds (``yaml_aliases``: a
500-byte "billion laughs" loads as a small graph and explodes when the event is encoded).
The other files, and later changes to them, are published as usual. Files are read by
:mod:`clearance_runtime.edges.manifest_files`, as ``clearance validate`` reads them.

A file written in place is empty between its truncation and its write: a poll landing
there would withdraw every object the file holds — a Deny among them, a wrong allow until
the next poll. So a file that held objects and is found empty is believed only when it is
found empty, unchanged, at the next poll too (a file emptied on purpose is withdrawn one
poll later).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from clearance_api.errors import InvalidObject
from clearance_core.folding.kinds import ref_of
from clearance_core.folding.registry import WATCHED
from clearance_runtime.edges import manifest_files
from clearance_runtime.process import health, logs, metrics
from clearance_watcher.ledger import Sink

log = logs.get(__name__)
#: Kept here too: the watcher's own names for the shared reader's (manifest_files).
SUFFIXES = manifest_files.SUFFIXES
FileRejected = manifest_files.FileRejected


def parse_file(path: Path, *, max_bytes: int = 8 << 20) -> list[dict[str, Any]]:
    """All objects of one file, or InvalidObject: a file is taken whole or not at all."""
    objects: list[dict[str, Any]] = []
    for position, _, obj in manifest_files.read_documents(path, max_bytes=max_bytes):
        if not isinstance(obj, dict):
            raise InvalidObject(f"document {position} is not a mapping")
        try:
            ref_of(obj)
        except (InvalidObject, AttributeError) as exc:
            message = getattr(exc, "message", str(exc))
            raise InvalidObject(f"document {position}: {message}") from None
        objects.append(obj)
    return objects


class ManifestSource:
    """Polls a directory and reports full snapshots to the ledger."""

    def __init__(self, directory: Path, sink: Sink, *, poll_seconds: float = 0.25,
                 max_bytes: int = 8 << 20) -> None:
        self._dir = directory
        self._sink = sink
        self._poll = poll_seconds
        self._max_bytes = max_bytes
        self._stamps: dict[Path, tuple[int, int]] = {}
        self._good: dict[Path, list[dict[str, Any]]] = {}
        #: Files that held objects and were found empty, by the stamp they had then.
        self._emptied: dict[Path, tuple[int, int]] = {}
        self._first = True

    def _files(self) -> list[Path]:
        return manifest_files.files(self._dir)

    def scan(self) -> bool:
        """Re-read changed files; True if the snapshot may have changed."""
        changed = self._first
        self._first = False
        files = self._files()
        for gone in set(self._stamps) - set(files):
            del self._stamps[gone]
            self._good.pop(gone, None)
            self._emptied.pop(gone, None)
            changed = True
        for path in files:
            try:
                stat = path.stat()
            except OSError:
                continue
            stamp = (stat.st_mtime_ns, stat.st_size)
            if self._stamps.get(path) == stamp:
                continue
            if stat.st_size == 0 and self._good.get(path) and \
                    self._emptied.get(path) != stamp:
                self._emptied[path] = stamp  # maybe mid-write: look again next poll
                continue
            self._emptied.pop(path, None)
            self._stamps[path] = stamp
            changed = True
            try:
                self._good[path] = parse_file(path, max_bytes=self._max_bytes)
            except FileRejected as exc:
                metrics.WATCHER_REJECTED.labels(kind="file", reason=exc.reason).inc()
                log.warning("manifest_rejected", file=str(path), reason=exc.reason,
                            error=exc.message,
                            kept=len(self._good.get(path, ())))  # as they were
            except InvalidObject as exc:
                metrics.MALFORMED.labels(where="manifest").inc()
                log.warning("manifest_skipped", file=str(path), error=exc.message)
        return changed

    def snapshot(self) -> list[dict[str, Any]]:
        # Later files win on duplicates (sorted path order), with a warning.
        seen: dict[Any, tuple[Path, dict[str, Any]]] = {}
        for path in sorted(self._good):
            for obj in self._good[path]:
                ref = ref_of(obj)
                if ref in seen:
                    log.warning("manifest_duplicate", object=str(ref), first=str(seen[ref][0]),
                                used=str(path))
                seen[ref] = (path, obj)
        return [obj for _, obj in seen.values()]

    async def run(self) -> None:
        log.info("manifests_watching", directory=str(self._dir))
        while True:
            health.stop_if_asked()  # a publish may have swallowed a stop
            if await asyncio.to_thread(self.scan):
                await self._sink.sync(self.snapshot(), kinds=WATCHED.keys())
            await asyncio.sleep(self._poll)
