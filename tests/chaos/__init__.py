"""The fault suite: Clearance as real processes, faults injected with signals and server
restarts, every reply checked against a reference evaluation of the stream.

``python3 dev.py chaos`` runs every scenario and prints the table; ``test_chaos.py`` runs
the CI-sized subset inside ``python3 dev.py test``.
"""
