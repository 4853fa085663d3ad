"""Every line a Clearance process writes to stderr parses as JSON (CONTRACT section 8)."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r'''
import logging
from clearance_runtime import logs
from clearance_core import patterns
from clearance_core.errors import InvalidObject
logs.configure("INFO", service="probe")
logging.getLogger("nats.aio.client").warning("lost %s: 'quoted' \"double\"\nsecond line", "x")
try:
    raise RuntimeError("boom")
except RuntimeError:
    secret = "token-123"
    logging.getLogger("asyncio").exception("Task exception was never retrieved")
    logs.get("probe").error("failed", exc_info=True)
try:
    patterns.check("(?<=x)", "where")  # RE2 must not write its own stderr lines
except InvalidObject:
    pass
logs.get("probe").info("done", n=1)
'''


def test_library_and_service_lines_are_all_json_without_frame_locals() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            timeout=60, check=True)
    lines = result.stderr.splitlines()
    records = [json.loads(line) for line in lines]  # raises on any non-JSON line
    assert [r["event"] for r in records] == [
        "lost x: 'quoted' \"double\"\nsecond line", "Task exception was never retrieved",
        "failed", "done"]
    assert records[0]["logger"] == "nats.aio.client" and records[0]["level"] == "warning"
    assert records[1]["exception"][0]["exc_type"] == "RuntimeError"
    assert "token-123" not in result.stderr
