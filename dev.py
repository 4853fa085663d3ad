#!/usr/bin/env python3
"""Bootstrap and run Clearance with nothing but Python 3.11+.

    python3 dev.py up      # set up .venv/ and run the whole system (clearance up)
    python3 dev.py test    # set up .venv/ and run the full test suite
    python3 dev.py bench   # benchmarks (not tests)
    python3 dev.py fuzz    # fuzz campaign on a running system (>= 100,000 requests), counts
    python3 dev.py chaos   # the fault suite on real processes; prints its table
    python3 dev.py lint    # ruff, mypy --strict, import-linter, schema drift
    python3 dev.py soak    # steady mixed load with policy churn, watched (--minutes 30)
    python3 dev.py screenshots  # the ops console's views, photographed into docs/console/

Idempotent: .venv/ is (re)installed only when pyproject.toml changed since last time.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".clearance-installed"


def _fingerprint() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()


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
    subprocess.run([*pip, "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(_fingerprint())


#: The ops console's browser tests drive Debian's chromium through its chromedriver.
BROWSER = (Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver"))


def ensure_browser() -> None:
    """Install chromium and chromium-driver with apt-get when they are missing and this
    runs as root; otherwise say what to install (the browser tests fail without them,
    they are never skipped)."""
    if all(path.exists() for path in BROWSER):
        return
    if os.name == "posix" and os.geteuid() == 0 and Path("/usr/bin/apt-get").exists():
        print("installing chromium and chromium-driver (the console's browser tests) ...",
              flush=True)
        apt = ["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"]
        if subprocess.call(apt) != 0:
            subprocess.run(["apt-get", "update", "-q"], check=True)
            subprocess.run(apt, check=True)
        return
    raise SystemExit("the ops console's browser tests need Debian's chromium and "
                     "chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver): run "
                     "`sudo apt-get install -y chromium chromium-driver`, then retry")


def main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else "up"
    rest = sys.argv[2:]
    ensure_venv()
    just = [str(BIN / "just"), "--justfile", str(ROOT / "justfile"), "--working-directory",
            str(ROOT)]
    if command in ("test", "screenshots"):
        ensure_browser()
    if command in ("up", "test", "bench", "fuzz", "chaos", "soak", "lint", "schemas",
                   "screenshots"):
        return subprocess.call([*just, command, *rest])
    if command == "setup":
        return 0
    raise SystemExit(
        f"unknown command {command!r}: use up, test, bench, fuzz, chaos, soak, lint, "
        "screenshots or setup")


if __name__ == "__main__":
    sys.exit(main())
