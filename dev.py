#!/usr/bin/env python3
"""Bootstrap and run Clearance with nothing but Python 3.11+.

    python3 dev.py up      # set up .venv/ and run the whole system (clearance up)
    python3 dev.py test    # set up .venv/ and run the full test suite
    python3 dev.py bench   # benchmarks (not tests)
    python3 dev.py bench --peers  # Clearance beside Cerbos and SpiceDB (bench/peers/)
    python3 dev.py fuzz    # fuzz campaign on a running system (>= 100,000 requests), counts
    python3 dev.py chaos   # the fault suite on real processes; prints its table
    python3 dev.py attack  # the attack suite on real processes; prints its table
    python3 dev.py regions # two regions on loopback, one mirroring the other (docs/regions.md)
    python3 dev.py lint    # ruff, mypy --strict, import-linter, schema drift
    python3 dev.py soak    # steady mixed load with policy churn, watched (--minutes 30)
    python3 dev.py screenshots  # the ops console's views, photographed into docs/console/

Idempotent: .venv/ is (re)installed only when pyproject.toml changed since last time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".clearance-installed"


def _fingerprint() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()
                          + (ROOT / "libs" / "pyproject.toml").read_bytes()).hexdigest()


def ensure_venv() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - said plainly to an older Python
        raise SystemExit("Clearance needs Python 3.11 or newer")
    if STAMP.exists() and STAMP.read_text() == _fingerprint() and (BIN / "clearance").exists():
        return
    if not (BIN / "python").exists():
        print("creating .venv/ ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing Clearance and its pinned dependencies into .venv/ ...", flush=True)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    # The client distribution (libs/: clearance_api + clearance_client) in the same
    # resolution: the servers' distribution depends on it.
    subprocess.run([*pip, "-e", str(ROOT / "libs"), "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(_fingerprint())


#: System packages some tests drive (Debian's; no PyPI package ships them): the ops
#: console's browser tests use chromium through its chromedriver, and the alert rules are
#: checked, and their unit tests run, by Prometheus's own promtool.
SYSTEM_TOOLS = {Path("/usr/bin/chromium"): "chromium",
                Path("/usr/bin/chromedriver"): "chromium-driver",
                Path("/usr/bin/promtool"): "prometheus"}


def ensure_browser() -> None:
    """Install the missing SYSTEM_TOOLS with apt-get when this runs as root; otherwise
    say what to install (their tests fail without them, they are never skipped)."""
    missing = sorted({package for path, package in SYSTEM_TOOLS.items() if not path.exists()})
    if not missing:
        return
    if os.name == "posix" and os.geteuid() == 0 and Path("/usr/bin/apt-get").exists():
        print(f"installing {', '.join(missing)} (browser and alert-rule tests) ...",
              flush=True)
        apt = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if subprocess.call(apt, env=env) != 0:
            subprocess.run(["apt-get", "update", "-q"], check=True)
            subprocess.run(apt, check=True, env=env)
        return
    raise SystemExit(f"some tests need Debian's {', '.join(missing)}: run "
                     f"`sudo apt-get install -y {' '.join(missing)}`, then retry")


def run_forwarding(argv: list[str]) -> int:
    """Run ``argv`` in a process group of its own and hand it SIGINT and SIGTERM: stopping
    this script (Ctrl-C, or a SIGTERM from a supervisor) stops ``clearance up`` cleanly
    and, with it, its nats-server and valkey-server, instead of leaving them orphaned."""
    child = subprocess.Popen(argv, start_new_session=True)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    code = child.wait()
    # ``just`` may end before what it started has finished stopping (a server flushing
    # JetStream to disk): this script returns only once the group is gone, so "it exited"
    # means "everything stopped" to a supervisor about to start another.
    deadline = time.monotonic() + 30
    while _group_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return code


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is left in process group ``pgid``."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else "up"
    rest = sys.argv[2:]
    ensure_venv()
    just = [str(BIN / "just"), "--justfile", str(ROOT / "justfile"), "--working-directory",
            str(ROOT)]
    if command in ("test", "screenshots"):
        ensure_browser()
    if command == "up" and os.name == "posix":
        return run_forwarding([*just, command, *rest])
    if command in ("up", "test", "bench", "fuzz", "chaos", "attack", "soak", "lint",
                   "schemas", "screenshots", "regions"):
        return subprocess.call([*just, command, *rest])
    if command == "setup":
        return 0
    raise SystemExit(
        f"unknown command {command!r}: use up, test, bench, fuzz, chaos, attack, soak, "
        "lint, screenshots, regions or setup")


if __name__ == "__main__":
    sys.exit(main())
