"""proto-schemas/ is generated from the wire Structs and must not drift from them."""

from __future__ import annotations

from pathlib import Path

from clearance_cli import schemas

ROOT = Path(__file__).resolve().parents[2]


def test_proto_schemas_match_the_code() -> None:
    rendered = schemas.render()
    on_disk = {p.name: p.read_text() for p in (ROOT / "proto-schemas").glob("*.json")}
    assert set(on_disk) == set(rendered), "run `clearance schemas`"
    for name, text in rendered.items():
        assert on_disk[name] == text, f"proto-schemas/{name} drifted: run `clearance schemas`"


def test_every_request_subject_is_documented_in_asyncapi() -> None:
    asyncapi = schemas.render()["asyncapi.json"]
    for subject in ("clearance.v1.check", "clearance.v1.check.batch", "clearance.v1.status",
                    "clearance.decisions.changed", "clearance.events.{kind}.{id}"):
        assert f'"{subject}"' in asyncapi
