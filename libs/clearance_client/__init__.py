"""Clearance's Python client: typed async calls for every request/reply subject, over
nats-py, with an opt-in local decision cache kept fresh by ``clearance.decisions.changed``.

    async with await ClearanceClient.connect("nats://127.0.0.1:4222",
                                             cache=DecisionCache()) as clearance:
        result = await clearance.check(CheckRequest(principal=..., action="view",
                                                    resource=...))

Requests and replies are the contract's msgspec Structs (``clearance_api.wire``); error
replies raise ``clearance_api.errors`` (``RequestError`` and its subclasses).
"""

from __future__ import annotations

from clearance_client.cache import DecisionCache
from clearance_client.client import ERRORS, METHODS, CallOptions, ClearanceClient

__all__ = ["ERRORS", "METHODS", "CallOptions", "ClearanceClient", "DecisionCache"]
