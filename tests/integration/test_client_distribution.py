"""The client is its own distribution (``libs/pyproject.toml``: clearance-client): the
wheel holds the contract (``clearance_api``) and the client (``clearance_client``) and
nothing else, it requires nats-py and msgspec alone, and an application that has only
those answers a real check through it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import Servers
from tests.integration.harness import System, cluster, publish
from tests.support.policies import policy

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {"clearance_api", "clearance_client", "nats", "msgspec"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "--disable-pip-version-check", str(ROOT / "libs"), "-w", str(out)],
                   check=True, capture_output=True, timeout=300)
    (found,) = out.glob("clearance_client-*.whl")
    return found


def test_the_wheel_holds_the_contract_and_the_client_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(archive.read(n).decode() for n in names if n.endswith("/METADATA"))
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(
        ".dist-info")}
    assert tops == {"clearance_api", "clearance_client"}
    assert "clearance_api/wire/decisions.py" in names
    requires = sorted(line.split(": ", 1)[1].split("=")[0] for line in metadata.splitlines()
                      if line.startswith("Requires-Dist: "))
    assert requires == ["msgspec", "nats-py"]


@pytest.fixture
async def system(clean_servers: Servers) -> AsyncIterator[System]:
    sys_ = System(clean_servers.nats_url, clean_servers.redis_url, None)
    await sys_.start("compiler", "cache-invalidator", "decision")
    await publish(sys_, "managedcluster", cluster("east"))
    await publish(sys_, "monitoraccesspolicy", policy("ann", users=["ann"], default="all"))
    await sys_.settle()
    yield sys_
    await sys_.close()


#: Run in a fresh interpreter that refuses to import any third-party module but the
#: client's own dependencies: what an application with only clearance-client has.
SCRIPT = """
import asyncio, importlib.abc, sys
ALLOWED = set(sys.argv[2].split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top not in ALLOWED and top not in sys.stdlib_module_names and top != "_cffi_backend":
            raise ImportError(f"the client needs {top}")
        return None
sys.meta_path.insert(0, Refuse())
from clearance_client import ClearanceClient
from clearance_api.wire import CheckRequest, Principal, Resource
async def main():
    async with await ClearanceClient.connect(sys.argv[1]) as client:
        reply = await client.check(CheckRequest(principal=Principal(username="ann"),
                                                action="view",
                                                resource=Resource(type="cluster", name="east")))
        print(reply.decision)
asyncio.run(main())
"""


async def test_an_application_with_only_the_client_answers_a_check(system: System) -> None:
    # Not subprocess.run: the services answer on this test's event loop.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-c", SCRIPT, system.settings.nats_url, ",".join(sorted(ALLOWED)),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd="/")
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "allow"
