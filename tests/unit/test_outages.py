"""Store errors classified by what redis-py makes of the server's reply (its type), not
by a message it has already stripped of the error code."""

from __future__ import annotations

import pytest
import redis.exceptions as rx
from redis._parsers.base import BaseParser

from clearance_runtime.process.outages import is_store_outage, is_transient


@pytest.mark.parametrize("reply", [
    "READONLY You can't write against a read only replica.",
    "LOADING Valkey is loading the dataset in memory",
    "OOM command not allowed when used memory > 'maxmemory'.",
    "MOVED 3999 127.0.0.1:6381",
    "ASK 3999 127.0.0.1:6381",
    "TRYAGAIN Multiple keys request during rehashing of slot",
    "CLUSTERDOWN The cluster is down",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "NOREPLICAS Not enough good replicas to write.",
    "MISCONF Errors writing to the AOF file",
    "BUSY Valkey is busy running a script.",
])
def test_failover_replies_are_outages_to_wait_out(reply: str) -> None:
    error = BaseParser.parse_error(reply)
    assert is_store_outage(error), (type(error), str(error))
    assert is_transient(error)


@pytest.mark.parametrize("error", [
    rx.ConnectionError("Connection refused"), rx.TimeoutError("Timeout reading"),
    rx.ConnectionError("The previous master is now a slave"),
])
def test_connection_failures_are_outages(error: Exception) -> None:
    assert is_transient(error)


@pytest.mark.parametrize("reply", [
    "ERR Error running script: too many results to unpack",
    "WRONGTYPE Operation against a key holding the wrong kind of value",
    "ERR Protocol error: invalid bulk length",
])
def test_what_the_command_itself_causes_is_not_an_outage(reply: str) -> None:
    assert not is_transient(BaseParser.parse_error(reply))
    assert not is_transient(rx.DataError("Invalid input of type: 'dict'"))
