"""Clearance's public API as Python: the msgspec Structs of every request, reply and
event (``wire``), the one error tree (``errors``) and the inbox rules replies follow
(``inboxes``).

It imports nothing but msgspec and the standard library, so the client distribution
(``clearance-client``: this package and ``clearance_client``) needs only nats-py and
msgspec; the servers build on it like any client.
"""
