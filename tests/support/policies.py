"""Builders for MonitorAccessPolicy objects used across the unit tests."""

from __future__ import annotations

from typing import Any


def policy(
    name: str = "p",
    *,
    namespace: str = "ns",
    priority: int = 100,
    effect: str = "Allow",
    enabled: bool = True,
    users: list[str] | None = None,
    groups: list[str] | None = None,
    service_accounts: list[dict[str, str]] | None = None,
    default: str = "none",
    rules: list[dict[str, Any]] | None = None,
    not_before: str | None = None,
    not_after: str | None = None,
) -> dict[str, Any]:
    validity = {}
    if not_before:
        validity["notBefore"] = not_before
    if not_after:
        validity["notAfter"] = not_after
    return {
        "apiVersion": "clusterpulse.io/v1alpha1",
        "kind": "MonitorAccessPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "identity": {
                "priority": priority,
                "subjects": {
                    "users": users or [],
                    "groups": groups or [],
                    "serviceAccounts": service_accounts or [],
                },
            },
            "access": {"effect": effect, "enabled": enabled},
            "scope": {"clusters": {"default": default, "rules": rules or []}},
            "lifecycle": {"validity": validity},
        },
    }
