"""The manifest directory's poller never takes a file caught mid-write for the truth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from clearance_watcher.manifests import ManifestSource
from tests.support.policies import policy


class _Nowhere:
    async def sync(self, objects: list[dict[str, Any]], *, kinds: Any) -> None:
        raise AssertionError("scan() alone is exercised here")


def _names(source: ManifestSource) -> list[str]:
    return [obj["metadata"]["name"] for obj in source.snapshot()]


def test_a_file_found_empty_once_keeps_its_objects_until_the_next_poll(
        tmp_path: Path) -> None:
    """An editor or a sync that writes in place truncates first: a poll between the
    truncation and the write must not withdraw the file's Deny."""
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump(policy("no-prod", groups=["contractors"], effect="Deny")))
    source = ManifestSource(tmp_path, _Nowhere())
    assert source.scan() and _names(source) == ["no-prod"]
    path.write_text("")  # truncated: the write has not happened yet
    assert not source.scan() and _names(source) == ["no-prod"]
    path.write_text(yaml.safe_dump(policy("no-dev", groups=["contractors"], effect="Deny")))
    assert source.scan() and _names(source) == ["no-dev"]  # the write, taken at once


def test_a_file_emptied_on_purpose_is_withdrawn_one_poll_later(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump(policy("p", users=["alice"])))
    (tmp_path / "empty.yaml").write_text("")  # empty from the start: nothing to keep
    source = ManifestSource(tmp_path, _Nowhere())
    assert source.scan() and _names(source) == ["p"]
    path.write_text("")
    assert not source.scan() and _names(source) == ["p"]
    assert source.scan() and _names(source) == []  # still empty, unchanged: believed
