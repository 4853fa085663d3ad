"""The decision service has one read model: its mirror of the compiled state.

Only the mirror (which follows the change records) and ``reads`` (the operational reads:
the system revision, health, counts) hold a Redis client; every other module of the
read side — the snapshot, the inherited policies' views — reads the mirror, so no answer
can come from the store by another path than the one kept exact.
"""

from __future__ import annotations

import ast
from pathlib import Path

import clearance_runtime.reading

READING = Path(clearance_runtime.reading.__file__).parent
HOLD_A_CLIENT = {"mirror.py", "reads.py"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_only_the_mirror_and_the_operational_reads_hold_a_redis_client() -> None:
    modules = sorted(READING.glob("*.py"))
    assert {m.name for m in modules} >= HOLD_A_CLIENT | {"inherit_reads.py", "snapshot.py"}
    for module in modules:
        redis = {name for name in _imports(module) if name.split(".")[0] == "redis"}
        if module.name in HOLD_A_CLIENT:
            assert redis, module.name  # the test would pass vacuously otherwise
        else:
            assert not redis, f"{module.name} reads the store beside the mirror: {redis}"
