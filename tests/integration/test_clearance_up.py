"""``clearance up`` as a new user runs it: embedded servers, examples/, an answer, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from clearance_runtime import servers

ROOT = Path(__file__).resolve().parents[2]
CLEARANCE = str(Path(sys.executable).parent / "clearance")


def test_up_answers_the_example_question_and_stops_cleanly(tmp_path: Path) -> None:
    nats_port, redis_port = servers.free_port(), servers.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_")}
    up = subprocess.Popen(
        [CLEARANCE, "up", "--state", str(tmp_path / "state"), "--manifests",
         str(ROOT / "examples"), "--nats-port", str(nats_port), "--redis-port",
         str(redis_port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert up.stdout is not None
        banner = "".join(up.stdout.readline() for _ in range(4))
        assert "Clearance is up." in banner
        env["CLEARANCE_NATS_URL"] = f"nats://127.0.0.1:{nats_port}"
        deadline = time.monotonic() + 20
        while True:
            done = subprocess.run(
                [CLEARANCE, "check", "--user", "alice", "--cluster", "prod-us-east"],
                env=env, capture_output=True, text=True, timeout=30, check=False)
            if done.returncode == 0:
                reply = json.loads(done.stdout)
                if reply.get("revision", 0) >= 25:  # every example loaded
                    break
            assert time.monotonic() < deadline, done.stderr
            time.sleep(0.2)
        assert (reply["decision"], reply["policy"]) == ("allow", "clusterpulse/platform-full")
    finally:
        up.send_signal(signal.SIGINT)
        sent = time.monotonic()
        assert up.wait(timeout=20) == 0
        assert time.monotonic() - sent < 5.0  # services, then both servers, within 5 s
    for port in (nats_port, redis_port):  # both servers are gone
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                raise AssertionError(f"port {port} still served")
        except OSError:
            pass
