"""Operating a real ``clearance run`` process: probes that mean something, a status that
shows every service (the watcher included), and a stop within 5 s in every state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from clearance_runtime.process import probes, servers
from tests.conftest import Servers

CLEARANCE = str(Path(sys.executable).parent / "clearance")


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(predicate: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
            if value:
                return value
        except OSError:
            pass
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def start(service: str, nats_url: str, redis_url: str, port: int,
          manifests: Path | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    env.update(CLEARANCE_NATS_URL=nats_url, CLEARANCE_REDIS_URL=redis_url,
               CLEARANCE_METRICS_PORT=str(port),
               # `run all` includes the gateway: a port of its own beside other runs.
               CLEARANCE_GATEWAY_PORT=str(servers.free_port()))
    if manifests is not None:
        env["CLEARANCE_MANIFESTS"] = str(manifests)
    return subprocess.Popen([CLEARANCE, "run", service], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_within(proc: subprocess.Popen[bytes], sig: int, seconds: float = 5.0) -> float:
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    took = time.monotonic() - sent
    assert took < seconds, f"exit took {took:.1f} s"
    return took


def test_probes_status_and_a_clean_stop(clean_servers: Servers, tmp_path: Path) -> None:
    port = servers.free_port()
    proc = start("all", clean_servers.nats_url, clean_servers.redis_url, port, tmp_path)
    try:
        ready = wait_for(lambda: get(port, "/readyz")[0] == 200 and get(port, "/readyz"))
        body = json.loads(ready[1])
        assert body["ok"] and set(body["services"]) == {
            "watcher", "compiler", "cache-invalidator", "decision", "gateway"}
        status, text = get(port, "/healthz")
        assert status == 200 and json.loads(text)["problems"] == {}
        assert get(port, "/metrics")[0] == 200
        assert "clearance_consumer_lag" in get(port, "/metrics")[1]
        assert get(port, "/anything-else")[0] == 404  # a wrong probe path fails
        reply = subprocess.run(
            [CLEARANCE, "request", "clearance.v1.status"], capture_output=True, text=True,
            env={**os.environ, "CLEARANCE_NATS_URL": clean_servers.nats_url},
            timeout=30, check=True)
        services = json.loads(reply.stdout)["services"]
        assert services["watcher"]["healthy"] is True
        assert all(s["healthy"] for s in services.values())
    finally:
        stop_within(proc, signal.SIGTERM)
    assert proc.returncode == 0


def test_readiness_fails_while_redis_is_gone_and_stop_stays_fast(tmp_path: Path) -> None:
    nats_srv, nats_url = servers.nats_server(tmp_path / "nats")
    valkey_srv, redis_url = servers.valkey_server(tmp_path / "valkey", persist=False)
    nats_srv.start()
    valkey_srv.start()
    port = servers.free_port()
    proc = start("decision", nats_url, redis_url, port)
    try:
        wait_for(lambda: get(port, "/readyz")[0] == 200)
        valkey_srv.kill()
        _status, text = wait_for(lambda: (r := get(port, "/readyz"))[0] == 503 and r)
        assert "decision" in json.loads(text)["problems"]
        nats_srv.kill()  # both servers gone: the case that used to ignore SIGTERM
        time.sleep(1.0)
        stop_within(proc, signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
        valkey_srv.stop()
        nats_srv.stop()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_every_service_stops_within_five_seconds_with_servers_gone(
        tmp_path: Path, sig: int) -> None:
    nats_srv, nats_url = servers.nats_server(tmp_path / "nats")
    valkey_srv, redis_url = servers.valkey_server(tmp_path / "valkey", persist=False)
    nats_srv.start()
    valkey_srv.start()
    procs = {name: start(name, nats_url, redis_url, servers.free_port(), tmp_path)
             for name in ("watcher", "compiler", "cache-invalidator", "decision")}
    try:
        time.sleep(3.0)  # connected and running
        nats_srv.kill()
        valkey_srv.kill()
        time.sleep(1.0)
        for proc in procs.values():
            proc.send_signal(sig)
        sent = time.monotonic()
        for name, proc in procs.items():
            proc.wait(timeout=15)
            assert time.monotonic() - sent < 5.0, f"{name} took too long"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()


def _heartbeat_age(port: int, service: str) -> float:
    for line in get(port, "/metrics")[1].splitlines():
        if line.startswith(f'clearance_heartbeat_age_seconds{{service="{service}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no heartbeat age for {service}")


def test_a_valkey_outage_fails_readiness_never_liveness(tmp_path: Path) -> None:
    """Liveness follows the process's own loops, readiness its servers: in Kubernetes a
    Valkey failover must take pods out of service, never restart them all mid-failover."""
    nats_srv, nats_url = servers.nats_server(tmp_path / "nats")
    valkey_srv, redis_url = servers.valkey_server(tmp_path / "valkey")
    nats_srv.start()
    valkey_srv.start()
    port = servers.free_port()
    proc = start("all", nats_url, redis_url, port, tmp_path)
    try:
        wait_for(lambda: get(port, "/readyz")[0] == 200)
        valkey_srv.kill()
        # Each service finds the outage on its own probe: wait for the decision's.
        _status, text = wait_for(lambda: (r := get(port, "/readyz"))[0] == 503
                                 and "decision" in json.loads(r[1])["problems"] and r)
        problems = json.loads(text)["problems"]
        assert "Valkey unreachable" in problems["decision"], problems
        assert "gateway" not in problems  # it uses no store
        # Past the point where every store heartbeat is stale (what liveness used to
        # follow), every liveness probe still passes.

        def stale_and_live() -> bool:
            status, body = get(port, "/healthz")
            assert status == 200, body
            return all(_heartbeat_age(port, s) > probes.STALE_AFTER + 1
                       for s in ("watcher", "compiler", "cache-invalidator", "decision"))

        wait_for(stale_and_live, timeout=30)
        assert get(port, "/readyz")[0] == 503
        valkey_srv.start()
        _status, text = wait_for(lambda: (r := get(port, "/readyz"))[0] == 200 and r,
                                 timeout=30)
        assert json.loads(text)["problems"] == {}
        assert get(port, "/healthz")[0] == 200
    finally:
        stop_within(proc, signal.SIGTERM)
        valkey_srv.stop()
        nats_srv.stop()
