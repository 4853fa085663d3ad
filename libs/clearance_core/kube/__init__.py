"""Kubernetes objects as Clearance reads them: one parsing convention, the kinds and
their registry, strict field checking, tombstones, status patches."""
