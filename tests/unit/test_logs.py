"""Every line a Clearance process writes to stderr parses as JSON
(docs/operations.md: Configuration)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest

from clearance_runtime.process.settings import Settings

SCRIPT = r'''
import logging
from clearance_runtime.process import logs
from clearance_core.monitor import patterns
from clearance_api.errors import InvalidObject
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


CHOOSE = r'''
import logging, sys
from clearance_runtime.process import logs
from clearance_runtime.process.settings import Settings
logs.configure("INFO", service="probe", fmt=Settings.from_env().log_format)
logs.get("probe").info("hello", n=1)
logging.getLogger("nats.aio.client").warning("library line")
'''


def _run_choose(env: dict[str, str], *, tty: bool) -> str:
    if not tty:
        return subprocess.run([sys.executable, "-c", CHOOSE], capture_output=True, text=True,
                              timeout=60, check=True, env={**os.environ, **env}).stderr
    primary, secondary = pty.openpty()
    try:
        subprocess.run([sys.executable, "-c", CHOOSE], stderr=secondary, timeout=60,
                       check=True, env={**os.environ, **env})
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the pty is closed once everything was read
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(primary)


def test_a_terminal_gets_console_lines_and_anything_else_json() -> None:
    piped = _run_choose({}, tty=False).splitlines()
    assert [json.loads(line)["event"] for line in piped] == ["hello", "library line"]
    console = _run_choose({}, tty=True)
    assert "hello" in console and "library line" in console
    assert not console.lstrip().startswith("{")
    forced = _run_choose({"CLEARANCE_LOG_FORMAT": "json"}, tty=True).splitlines()
    assert json.loads(forced[0])["event"] == "hello"
    readable = _run_choose({"CLEARANCE_LOG_FORMAT": "Console"}, tty=False)
    assert "hello" in readable and "n=1" in readable and not readable.startswith("{")


def test_a_log_format_that_is_neither_is_refused() -> None:
    with pytest.raises(SystemExit, match="CLEARANCE_LOG_FORMAT='xml'"):
        Settings.from_env({"CLEARANCE_LOG_FORMAT": "xml"})
