"""Inputs from outside: HTTP serving with its bounds, Kubernetes tokens and client, YAML
from untrusted authors, manifest files."""
