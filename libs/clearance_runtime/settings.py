"""Configuration from the environment (CONTRACT section 8), read once per process.

Every ``CLEARANCE_*`` variable is decoded by msgspec into :class:`Settings`, so every bad
value — an integer that is not one, a boolean spelled ``ture``, a negative port — ends the
process the same way: one line naming the variable, the value and what was expected.
Booleans take ``true/false``, ``1/0``, ``yes/no`` and ``on/off`` (any case).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

_Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Seconds = Annotated[float, msgspec.Meta(gt=0)]


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    nats_url: str = "nats://127.0.0.1:4222"
    redis_url: str = "redis://127.0.0.1:6379/0"
    decision_cache_ttl: _NonNegative = 300
    log_level: str = "INFO"
    #: json or console; unset: console when stderr is a terminal, else JSON lines.
    log_format: Literal["json", "console"] | None = None
    metrics_port: _Port = 0  # 0: no metrics/probe endpoint
    allow_unset: bool = True
    manifests: Path | None = None
    kubeconfig: Path | None = None
    kubernetes: bool = False  # watch a Kubernetes API (in-cluster or kubeconfig)
    #: With a Kubernetes API: write policies' statuses back to their status subresource.
    write_status: bool = True
    manifest_poll_seconds: _Seconds = 0.25
    #: /readyz fails while a consumer is more than this many events behind.
    ready_max_lag: _NonNegative = 1000
    #: The decision service answers cache misses from its in-memory mirror of the
    #: compiled state (off: one Lua snapshot read per miss, as before; for comparison).
    decision_mirror: bool = True
    #: Audiences a ``token`` principal's TokenReview asks for (comma-separated; none:
    #: the API server's own).
    token_audiences: str = ""
    # The gateway (HTTPS: the Kubernetes webhook authorizer and AuthZEN).
    gateway_host: str = "0.0.0.0"  # noqa: S104 - a server in a pod listens on every address
    gateway_port: _Port = 8443
    #: PEM certificate (chain) and key; both unset: a self-signed pair for local use.
    gateway_tls_cert: Path | None = None
    gateway_tls_key: Path | None = None
    #: Where the self-signed pair is kept (reused while valid); unset: a temp directory.
    gateway_tls_dir: Path | None = None
    #: PEM CA bundle: when set, every client must present a certificate it signed.
    gateway_client_ca: Path | None = None
    #: The gateway's public base URL, for AuthZEN metadata (unset: from the request).
    gateway_url: str = ""
    gateway_timeout: _Seconds = 5.0
    # Bounded work per object: what the watcher reads before it rejects.
    #: A manifest file larger than this many bytes is rejected whole (not read).
    manifest_max_bytes: Annotated[int, msgspec.Meta(gt=0)] = 8 << 20

    @property
    def token_audience_list(self) -> list[str]:
        return [a.strip() for a in self.token_audiences.split(",") if a.strip()]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``CLEARANCE_*`` variables; SystemExit with one clear line for
        any value that does not decode."""
        env = os.environ if environ is None else environ
        raw: dict[str, Any] = {}
        for field, variable in ENV.items():
            value = env.get(variable, "").strip()
            if value:
                raw[field] = _BOOLEAN_WORDS.get(value.lower(), value) \
                    if field in _BOOLEANS else value
        if "log_format" in raw:
            raw["log_format"] = raw["log_format"].lower()
        if "log_level" in raw:
            raw["log_level"] = raw["log_level"].upper()
        if "kubernetes" not in raw:
            # On with a kubeconfig or inside a pod, unless said otherwise.
            raw["kubernetes"] = bool(raw.get("kubeconfig")
                                     or env.get("KUBERNETES_SERVICE_HOST"))
        try:
            return msgspec.convert(raw, cls, strict=False, dec_hook=_dec_hook)
        except msgspec.ValidationError as exc:
            raise SystemExit(_explain(exc, raw)) from None


#: Settings field -> environment variable.
ENV = {
    "nats_url": "CLEARANCE_NATS_URL",
    "redis_url": "CLEARANCE_REDIS_URL",
    "decision_cache_ttl": "CLEARANCE_DECISION_CACHE_TTL",
    "log_level": "CLEARANCE_LOG_LEVEL",
    "log_format": "CLEARANCE_LOG_FORMAT",
    "metrics_port": "CLEARANCE_METRICS_PORT",
    "allow_unset": "CLEARANCE_ALLOW_UNSET",
    "manifests": "CLEARANCE_MANIFESTS",
    "kubeconfig": "CLEARANCE_KUBECONFIG",
    "kubernetes": "CLEARANCE_KUBERNETES",
    "write_status": "CLEARANCE_WRITE_STATUS",
    "manifest_poll_seconds": "CLEARANCE_MANIFEST_POLL",
    "ready_max_lag": "CLEARANCE_READY_MAX_LAG",
    "decision_mirror": "CLEARANCE_DECISION_MIRROR",
    "token_audiences": "CLEARANCE_TOKEN_AUDIENCES",
    "gateway_host": "CLEARANCE_GATEWAY_HOST",
    "gateway_port": "CLEARANCE_GATEWAY_PORT",
    "gateway_tls_cert": "CLEARANCE_GATEWAY_TLS_CERT",
    "gateway_tls_key": "CLEARANCE_GATEWAY_TLS_KEY",
    "gateway_tls_dir": "CLEARANCE_GATEWAY_TLS_DIR",
    "gateway_client_ca": "CLEARANCE_GATEWAY_CLIENT_CA",
    "gateway_url": "CLEARANCE_GATEWAY_URL",
    "gateway_timeout": "CLEARANCE_GATEWAY_TIMEOUT",
    # Bounded work per object.
    "manifest_max_bytes": "CLEARANCE_MANIFEST_MAX_BYTES",
}
_BOOLEANS = {"allow_unset", "kubernetes", "decision_mirror", "write_status"}
_BOOLEAN_WORDS = {"yes": "true", "on": "true", "no": "false", "off": "false"}


def _dec_hook(kind: type, value: Any) -> Any:
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(kind)


def _explain(exc: msgspec.ValidationError, raw: Mapping[str, Any]) -> str:
    message = str(exc)
    field = message.rsplit("$.", 1)[-1].strip("`") if "$." in message else ""
    variable = ENV.get(field, "a CLEARANCE_* variable")
    reason = message.split(" - at ", 1)[0]
    if field in _BOOLEANS:
        reason = "expected a boolean (true/false, 1/0, yes/no, on/off)"
    return f"invalid configuration: {variable}={raw.get(field)!r}: {reason}"
