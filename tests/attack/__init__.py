"""The attack suite: hostile clients, authors and objects against real servers."""
