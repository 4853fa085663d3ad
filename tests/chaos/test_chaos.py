"""The CI-sized fault suite: the scenarios that pass, each on its own fresh deployment of
real processes (about 10 s each). ``python3 dev.py chaos`` runs all of them, failing ones
included, and prints the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.scenarios import SCENARIOS, Scenario, run_scenario, table

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.timeout(150)]


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.ci], ids=lambda s: s.name)
async def test_fault_is_survived(scenario: Scenario, tmp_path: Path) -> None:
    row = await run_scenario(scenario, tmp_path)
    report = table([row]) + "".join(f"\n- {line}" for line in row.details)
    assert row.passed, report
    # The load had teeth: many replies could only have been right one way (fewer while
    # the system revision stands still, e.g. with the invalidator down).
    assert row.decisive > row.replies // 5, report
