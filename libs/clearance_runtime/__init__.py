"""Shared I/O for Clearance's services: settings, logging, metrics, NATS, Redis state.

Services build on this layer and on :mod:`clearance_core`; they never import each other.
"""
