"""Configuration from the environment (README: Configuration), read once per process.

Every ``CLEARANCE_*`` variable is decoded by msgspec into :class:`Settings`, so every bad
value — an integer that is not one, a boolean spelled ``ture``, a negative port — ends the
process the same way: one line naming the variable, the value and what was expected.
Booleans take ``true/false``, ``1/0``, ``yes/no`` and ``on/off`` (any case).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

import msgspec

from clearance_api import inboxes
from clearance_core.inherit.authority import parse_namespaces

_Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Seconds = Annotated[float, msgspec.Meta(gt=0)]
_Positive = Annotated[int, msgspec.Meta(ge=1)]


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
    #: Loopback unless configured (deploy/ sets 0.0.0.0 for the pod).
    gateway_host: str = "127.0.0.1"
    gateway_port: _Port = 8443
    #: PEM certificate (chain) and key; both unset: a self-signed pair for local use.
    gateway_tls_cert: Path | None = None
    gateway_tls_key: Path | None = None
    #: Where the self-signed pair is kept (reused while valid); unset: a temp directory.
    gateway_tls_dir: Path | None = None
    #: PEM CA bundle: when set, every client must present a certificate it signed.
    gateway_client_ca: Path | None = None
    #: The gateway's public base URL, for AuthZEN metadata (unset: from the bind address).
    gateway_url: str = ""
    gateway_timeout: _Seconds = 5.0

    # -- Bounded work per object: what the watcher reads before it rejects.
    #: A manifest file larger than this many bytes is rejected whole (not read).
    manifest_max_bytes: Annotated[int, msgspec.Meta(gt=0)] = 8 << 20

    # -- The bus: NATS users, inboxes and replies (deploy/nats/accounts.conf) ------------
    #: Where this process receives replies; unset: ``_INBOX.<user>`` for the user name in
    #: the NATS URL, else ``_INBOX`` (clearance_api.inboxes.prefix_for).
    nats_inbox_prefix: str = ""
    #: Reply subjects the decision service answers: those under one of these inbox
    #: prefixes (comma-separated; ``P_*``: every prefix extending P's last token, as
    #: ``_INBOX_client`` extends ``_INBOX``); any other gets no reply, is counted and logged.
    reply_prefixes: str = ",".join(inboxes.DEFAULT_ACCEPTED)
    #: Each service's own NATS URL (its own user) where several run in one process
    #: (``clearance run all``); unset: ``nats_url``.
    watcher_nats_url: str = ""
    compiler_nats_url: str = ""
    cache_invalidator_nats_url: str = ""
    decision_nats_url: str = ""
    gateway_nats_url: str = ""
    console_nats_url: str = ""

    # -- Policy authority (inherited AccessPolicies): the hub namespaces that may write
    # policies for the Fleet and every target below it (comma-separated).
    admin_namespaces: str = "clearance-system"

    # -- Namespace targets (a question that names no namespace): how many (question,
    # Namespace target) pairs one request may weigh — a whole type or an item without its
    # namespace, times the Namespace targets of its cluster that concern the principal;
    # more is a bad_request (name the namespaces, or ask for less at once).
    namespace_target_budget: _Positive = 100_000

    # -- Dry runs (clearance.v1.effective.simulate): who gains or loses access where.
    #: Rows of the access diff one dry run answers — (target, subject, resource), each a
    #: check before and after; the rest are counted and the reply says it was cut. The
    #: rows' (question, Namespace target) pairs share CLEARANCE_NAMESPACE_TARGET_BUDGET.
    simulate_access_rows: _Positive = 2_000

    # -- HTTP surfaces (gateway, console, metrics): where they listen, who may ask, and
    # how much one client may hold or cause (clearance_runtime/httpserve.py).
    #: Address of the metrics/probe server (deploy/ sets 0.0.0.0 for Prometheus and
    #: the kubelet's probes).
    metrics_host: str = "127.0.0.1"
    #: How a gateway client proves who it is: mtls (a certificate the client CA signed,
    #: in the handshake), token (a bearer token a TokenReview authenticates),
    #: mtls-or-token, or none (no client authentication: logged loudly at start).
    #: Unset: mtls with CLEARANCE_GATEWAY_CLIENT_CA, else token.
    gateway_auth: Literal["mtls", "token", "mtls-or-token", "none"] | None = None
    #: Callers the gateway answers (comma-separated ``user:NAME`` / ``group:NAME``; a
    #: bare name is a user); empty: any authenticated caller.
    gateway_allowed_callers: str = ""
    gateway_max_connections: _Positive = 256
    #: Evaluations in one AuthZEN request (more: HTTP 400).
    gateway_max_evaluations: _Positive = 1000
    #: When set, the console asks for it (a bearer header, or a cookie from /login).
    console_token: str = ""
    #: Host names the console answers besides loopback and its bind address
    #: (comma-separated, as typed in the browser; the port is the console's own).
    console_hosts: str = ""
    console_max_connections: _Positive = 64
    #: Seconds a client has to send a request's headers (from connecting, or from the
    #: previous answer) and, separately, its body; then the connection is closed.
    http_header_timeout: _Seconds = 10.0
    http_body_timeout: _Seconds = 10.0

    def __post_init__(self) -> None:
        if not self.admin_namespace_list:
            raise ValueError("CLEARANCE_ADMIN_NAMESPACES must name at least one namespace")

    @property
    def admin_namespace_list(self) -> tuple[str, ...]:
        return parse_namespaces(self.admin_namespaces)

    def nats_url_for(self, service: str) -> str:
        """The NATS URL ``service`` connects with: its own, else the process's."""
        own: str = getattr(self, f"{service.replace('-', '_')}_nats_url", "")
        return own or self.nats_url

    def inbox_prefix_for(self, service: str) -> str:
        """The inbox prefix of ``service``'s connection (SystemExit if none can be made:
        a user name in its URL that is no subject token, and no explicit prefix)."""
        url = self.nats_url_for(service)
        try:
            return inboxes.prefix_for(url, explicit=self.nats_inbox_prefix or None)
        except ValueError as exc:
            raise SystemExit(f"invalid configuration: {service}'s NATS URL: {exc} "
                             f"(CLEARANCE_NATS_INBOX_PREFIX)") from None

    @property
    def reply_prefix_list(self) -> tuple[str, ...]:
        return inboxes.parse_prefixes(self.reply_prefixes)

    @property
    def gateway_auth_mode(self) -> str:
        """How gateway clients authenticate: as set, else by what is configured."""
        if self.gateway_auth is not None:
            return self.gateway_auth
        return "mtls" if self.gateway_client_ca is not None else "token"

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
        if "gateway_auth" in raw:
            raw["gateway_auth"] = raw["gateway_auth"].lower()
        if "log_level" in raw:
            raw["log_level"] = raw["log_level"].upper()
        if "kubernetes" not in raw:
            # On with a kubeconfig or inside a pod, unless said otherwise.
            raw["kubernetes"] = bool(raw.get("kubeconfig")
                                     or env.get("KUBERNETES_SERVICE_HOST"))
        try:
            settings = msgspec.convert(raw, cls, strict=False, dec_hook=_dec_hook)
        except msgspec.ValidationError as exc:
            raise SystemExit(_explain(exc, raw)) from None
        settings.check_bus()
        return settings

    def check_bus(self) -> None:
        """SystemExit naming the variable for an inbox or reply prefix that is no subject."""
        for field, check in (("reply_prefixes", inboxes.parse_prefixes),
                             ("nats_inbox_prefix", _inbox_prefix)):
            try:
                check(getattr(self, field))
            except ValueError as exc:
                raise SystemExit(f"invalid configuration: {ENV[field]}="
                                 f"{getattr(self, field)!r}: {exc}") from None


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
    # The bus.
    "nats_inbox_prefix": "CLEARANCE_NATS_INBOX_PREFIX",
    "reply_prefixes": "CLEARANCE_REPLY_PREFIXES",
    "watcher_nats_url": "CLEARANCE_WATCHER_NATS_URL",
    "compiler_nats_url": "CLEARANCE_COMPILER_NATS_URL",
    "cache_invalidator_nats_url": "CLEARANCE_CACHE_INVALIDATOR_NATS_URL",
    "decision_nats_url": "CLEARANCE_DECISION_NATS_URL",
    "gateway_nats_url": "CLEARANCE_GATEWAY_NATS_URL",
    "console_nats_url": "CLEARANCE_CONSOLE_NATS_URL",
    # Policy authority.
    "admin_namespaces": "CLEARANCE_ADMIN_NAMESPACES",
    # Namespace targets.
    "namespace_target_budget": "CLEARANCE_NAMESPACE_TARGET_BUDGET",
    # HTTP surfaces
    "metrics_host": "CLEARANCE_METRICS_HOST",
    "gateway_auth": "CLEARANCE_GATEWAY_AUTH",
    "gateway_allowed_callers": "CLEARANCE_GATEWAY_ALLOWED_CALLERS",
    "gateway_max_connections": "CLEARANCE_GATEWAY_MAX_CONNECTIONS",
    "gateway_max_evaluations": "CLEARANCE_GATEWAY_MAX_EVALUATIONS",
    "console_token": "CLEARANCE_CONSOLE_TOKEN",
    "console_hosts": "CLEARANCE_CONSOLE_HOSTS",
    "console_max_connections": "CLEARANCE_CONSOLE_MAX_CONNECTIONS",
    "http_header_timeout": "CLEARANCE_HTTP_HEADER_TIMEOUT",
    "http_body_timeout": "CLEARANCE_HTTP_BODY_TIMEOUT",
    # Bounded work per object.
    "manifest_max_bytes": "CLEARANCE_MANIFEST_MAX_BYTES",
}
_BOOLEANS = {"allow_unset", "kubernetes", "decision_mirror", "write_status"}
_BOOLEAN_WORDS = {"yes": "true", "on": "true", "no": "false", "off": "false"}


def _inbox_prefix(prefix: str) -> None:
    if prefix:
        inboxes.prefix_for("", explicit=prefix)


def _dec_hook(kind: type, value: Any) -> Any:
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(kind)


def _explain(exc: msgspec.ValidationError, raw: Mapping[str, Any]) -> str:
    message = str(exc)
    if message.startswith("CLEARANCE_"):  # a check across a value (``__post_init__``)
        return f"invalid configuration: {message}"
    field = message.rsplit("$.", 1)[-1].strip("`") if "$." in message else ""
    variable = ENV.get(field, "a CLEARANCE_* variable")
    reason = message.split(" - at ", 1)[0]
    if field in _BOOLEANS:
        reason = "expected a boolean (true/false, 1/0, yes/no, on/off)"
    choices = [str(choice) for arg in get_args(get_type_hints(Settings).get(field))
               if get_origin(arg) is Literal for choice in get_args(arg)]
    if choices:
        reason = f"expected one of {', '.join(choices)}"
    return f"invalid configuration: {variable}={raw.get(field)!r}: {reason}"
