"""Configuration from the environment (CONTRACT section 8), read once per process."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw.strip() else default
    except ValueError:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from None


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    return raw in ("1", "true", "yes", "on")


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    nats_url: str = "nats://127.0.0.1:4222"
    redis_url: str = "redis://127.0.0.1:6379/0"
    decision_cache_ttl: int = 300
    log_level: str = "INFO"
    metrics_port: int = 0  # 0: no metrics endpoint
    allow_unset: bool = True
    manifests: Path | None = None
    kubeconfig: Path | None = None
    kubernetes: bool = False  # watch a Kubernetes API (in-cluster or kubeconfig)
    manifest_poll_seconds: float = 0.25
    #: /readyz fails while a consumer is more than this many events behind.
    ready_max_lag: int = 1000

    @classmethod
    def from_env(cls) -> Settings:
        manifests = os.environ.get("CLEARANCE_MANIFESTS") or None
        kubeconfig = os.environ.get("CLEARANCE_KUBECONFIG") or None
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        return cls(
            nats_url=os.environ.get("CLEARANCE_NATS_URL", cls.nats_url),
            redis_url=os.environ.get("CLEARANCE_REDIS_URL", cls.redis_url),
            decision_cache_ttl=_int("CLEARANCE_DECISION_CACHE_TTL", 300),
            log_level=os.environ.get("CLEARANCE_LOG_LEVEL", "INFO").upper(),
            metrics_port=_int("CLEARANCE_METRICS_PORT", 0),
            allow_unset=_bool("CLEARANCE_ALLOW_UNSET", True),
            manifests=Path(manifests) if manifests else None,
            kubeconfig=Path(kubeconfig) if kubeconfig else None,
            kubernetes=_bool("CLEARANCE_KUBERNETES", bool(kubeconfig) or in_cluster),
            manifest_poll_seconds=float(os.environ.get("CLEARANCE_MANIFEST_POLL", "0.25")),
            ready_max_lag=_int("CLEARANCE_READY_MAX_LAG", 1000),
        )
