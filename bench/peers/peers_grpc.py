"""Cerbos and SpiceDB as peers of the benchmark: their servers, asked over gRPC with the
clients their users would use (Cerbos's SDK stubs, authzed's), requests built up front
as Clearance's bodies are."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import facts
import grpc
from authzed.api.v1 import (
    CheckBulkPermissionsRequest,
    CheckBulkPermissionsRequestItem,
    CheckPermissionRequest,
    CheckPermissionResponse,
    Consistency,
    ObjectReference,
    SubjectReference,
)
from authzed.api.v1.permission_service_pb2_grpc import PermissionsServiceStub
from cerbos.effect.v1 import effect_pb2
from cerbos.engine.v1 import engine_pb2
from cerbos.request.v1 import request_pb2
from cerbos.svc.v1 import svc_pb2_grpc
from google.protobuf import struct_pb2
from peer import BATCH, Peer, each

from clearance_runtime.process.servers import free_port

HERE = Path(__file__).resolve().parent


async def _listening(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        return
    raise RuntimeError(f"{what} did not listen on {port} within 60 s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class CerbosPeer(Peer):
    name = "Cerbos"

    def __init__(self, proc: subprocess.Popen[bytes], stub: Any) -> None:
        self._proc = proc
        self._stub = stub

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, state: Path, binary: Path) -> AsyncIterator[CerbosPeer]:
        policies = state / "cerbos-policies"
        policies.mkdir(parents=True)
        for name, text in facts.cerbos_policies().items():
            (policies / name).write_text(text)
        grpc_port, http_port = free_port(), free_port()
        config = state / "cerbos.yaml"
        config.write_text(
            "server:\n"
            f"  httpListenAddr: 127.0.0.1:{http_port}\n"
            f"  grpcListenAddr: 127.0.0.1:{grpc_port}\n"
            # 50 by default: a batch of 100 is one request, as it is for the others.
            f"  requestLimits:\n    maxResourcesPerRequest: {BATCH}\n"
            "storage:\n  driver: disk\n"
            f"  disk:\n    directory: {policies}\n    watchForChanges: false\n"
            "audit:\n  enabled: false\n"
            "telemetry:\n  disabled: true\n")
        log = (state / "cerbos.log").open("wb")
        proc = subprocess.Popen([str(binary), "server", f"--config={config}",  # noqa: ASYNC220
                                 "--log-level=warn"], stdout=log, stderr=log)
        try:
            await _listening(grpc_port, proc, "cerbos")
            async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                yield cls(proc, svc_pb2_grpc.CerbosServiceStub(channel))
        finally:
            _stop(proc)
            log.close()

    def pids(self) -> list[int]:
        return [self._proc.pid]

    @staticmethod
    def _principal(u: int) -> Any:
        return engine_pb2.Principal(id=facts.user(u), roles=facts.groups_of(u),
                                    policy_version="default")

    @staticmethod
    def _entry(i: int) -> Any:
        attr = {k: struct_pb2.Value(string_value=v) for k, v in facts.labels(i).items()}
        return request_pb2.CheckResourcesRequest.ResourceEntry(
            actions=["view"], resource=engine_pb2.Resource(
                kind="cluster", id=facts.cluster(i), policy_version="default", attr=attr))

    def single(self, pairs: Sequence[tuple[int, int]]) -> list[Any]:
        return [request_pb2.CheckResourcesRequest(
            request_id="1", principal=self._principal(u), resources=[self._entry(i)])
            for u, i in pairs]

    def batch(self, groups: Sequence[tuple[int, list[int]]]) -> list[Any]:
        return [request_pb2.CheckResourcesRequest(
            request_id="1", principal=self._principal(u),
            resources=[self._entry(i) for i in clusters]) for u, clusters in groups]

    async def answers(self, pairs: Sequence[tuple[int, int]]) -> list[bool]:
        replies = await each(self._stub.CheckResources, self.single(pairs))
        return [r.results[0].actions["view"] == effect_pb2.EFFECT_ALLOW for r in replies]

    async def ask(self, request: Any) -> None:
        await self._stub.CheckResources(request)

    async def ask_batch(self, request: Any) -> None:
        reply = await self._stub.CheckResources(request)
        assert len(reply.results) == BATCH


class SpiceDBPeer(Peer):
    name = "SpiceDB (embedded)"
    #: Answers may come from SpiceDB's caches, as Clearance's cached shapes do.
    CONSISTENCY = Consistency(minimize_latency=True)

    def __init__(self, proc: subprocess.Popen[bytes], stub: Any) -> None:
        self._proc = proc
        self._stub = stub

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, library: Path) -> AsyncIterator[SpiceDBPeer]:
        port = free_port()
        env = {**os.environ, "SPICEDB_LIBRARY_PATH": str(library)}
        proc = subprocess.Popen(  # noqa: ASYNC220 - started before any load
            [sys.executable, str(HERE / "spicedb_host.py"), str(port)], env=env,
            stdout=subprocess.DEVNULL)
        try:
            await _listening(port, proc, "the SpiceDB host")
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                yield cls(proc, PermissionsServiceStub(channel))
        finally:
            _stop(proc)

    def pids(self) -> list[int]:
        return [self._proc.pid]

    @staticmethod
    def _subject(u: int) -> Any:
        return SubjectReference(object=ObjectReference(object_type="user",
                                                       object_id=facts.user(u)))

    @staticmethod
    def _cluster(i: int) -> Any:
        return ObjectReference(object_type="cluster", object_id=facts.cluster(i))

    def single(self, pairs: Sequence[tuple[int, int]]) -> list[Any]:
        return [CheckPermissionRequest(consistency=self.CONSISTENCY,
                                       resource=self._cluster(i), permission="view",
                                       subject=self._subject(u)) for u, i in pairs]

    def batch(self, groups: Sequence[tuple[int, list[int]]]) -> list[Any]:
        return [CheckBulkPermissionsRequest(consistency=self.CONSISTENCY, items=[
            CheckBulkPermissionsRequestItem(resource=self._cluster(i), permission="view",
                                            subject=self._subject(u)) for i in clusters])
            for u, clusters in groups]

    async def answers(self, pairs: Sequence[tuple[int, int]]) -> list[bool]:
        replies = await each(self._stub.CheckPermission, self.single(pairs))
        return [r.permissionship == CheckPermissionResponse.PERMISSIONSHIP_HAS_PERMISSION
                for r in replies]

    async def ask(self, request: Any) -> None:
        await self._stub.CheckPermission(request)

    async def ask_batch(self, request: Any) -> None:
        reply = await self._stub.CheckBulkPermissions(request)
        assert len(reply.pairs) == BATCH
