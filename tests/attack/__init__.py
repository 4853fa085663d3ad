"""The attack suite: hostile clients, authors, objects and network peers against real
servers and processes, each attack asserting it fails to grant, stall, leak or crash.

Run alone with ``python3 dev.py attack``; the full test command runs it too.
"""
