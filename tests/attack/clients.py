"""Hostile HTTP clients for the attack suite, written on raw sockets (an HTTP library
would not send half a request and wait), and where a server listens, read from the
kernel."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import ssl
import time
from pathlib import Path


async def held(port: int, *, first: bytes, drip: bytes = b"", every: float = 0.2,
               tls: ssl.SSLContext | None = None, limit: float = 30.0) -> tuple[float, bytes]:
    """Connect, send ``first``, then one byte of ``drip`` every ``every`` seconds (a
    slowloris) until the server closes the connection: (seconds it stayed open, what the
    server sent). ``limit`` ends the attempt (the server never closed it). A connection
    the server closes before it is established stayed open for as long as that took."""
    began = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=tls, server_hostname="localhost" if tls else None)
    except (OSError, ssl.SSLError):  # refused, or closed during its handshake
        return time.monotonic() - began, b""
    opened = time.monotonic()
    received = b""

    async def dripping() -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError, RuntimeError):
            writer.write(first)
            await writer.drain()
            for byte in drip:
                await asyncio.sleep(every)
                writer.write(bytes([byte]))
                await writer.drain()
        await asyncio.sleep(limit)

    sender = asyncio.create_task(dripping())
    try:
        async with asyncio.timeout(limit):
            while True:
                try:
                    chunk = await reader.read(65536)
                except (ConnectionError, ssl.SSLError):
                    break
                if not chunk:
                    break
                received += chunk
    finally:
        sender.cancel()
        with contextlib.suppress(BaseException):
            await sender
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1)
    return time.monotonic() - opened, received


def head(path: str, host: str, *extra: str, method: str = "POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on TCP ``port`` (Linux's table)."""
    found: set[str] = set()
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) != port or fields[3] != "0A":  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # The kernel writes each 32-bit word in host (little-endian) order.
            ordered = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.add(str(ipaddress.ip_address(ordered if width == 16 else ordered[:4])))
    return found


def outside_address() -> str | None:
    """An address of this machine that is not loopback (the one its default route
    uses), or None. A UDP connect sends nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


def reachable(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1.0):
            return True
    except OSError:
        return False


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")
