"""Configuration from the environment (docs/operations.md: Configuration), read once per process.

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

from clearance_api import inboxes, nats_urls
from clearance_api.wire import EVENTS_STREAM
from clearance_core.inherit.authority import parse_namespaces
from clearance_runtime.messaging.jetstream import DEFAULT_LEASE_BUCKET, Topology
from clearance_runtime.storage import store

_Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Seconds = Annotated[float, msgspec.Meta(gt=0)]
_Positive = Annotated[int, msgspec.Meta(ge=1)]
#: JetStream names: letters, digits, ``-`` and ``_`` (no dots, wildcards or spaces).
_STREAM_NAME = r"^[A-Za-z0-9_-]{1,64}$"
_BUCKET_NAME = r"^[A-Za-z0-9_-]{1,60}$"
#: A JetStream domain, or none (empty): one subject token, letters, digits, - and _.
_DOMAIN_OR_NONE = r"^[A-Za-z0-9_-]{0,64}$"


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    #: One NATS server or a cluster's several: URLs separated by commas and/or spaces,
    #: each ``nats://`` or ``tls://`` (``user:password@`` allowed); a connection goes to
    #: any of them and moves to another when its node is lost (clearance_runtime.messaging.bus).
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
    # how much one client may hold or cause (clearance_runtime/edges/httpserve.py).
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

    # -- Cached checks near the wire (the decision service): replies read from the
    # decision cache kept by request body, reused while the cache's position (system
    # revision, build, invalidation epoch) has not moved; 0 keeps none
    # (services/decision/clearance_decision/recent.py).
    decision_recent_replies: _NonNegative = 16_384
    #: Misses a second (per decision process, with under a fifth of its lookups hitting)
    #: from which the cache is being scanned: an answer is then stored only when its
    #: question comes back (services/decision/clearance_decision/admission.py); 0 stores
    #: every answer.
    decision_scan_misses: _NonNegative = 5_000

    # -- NATS clusters: JetStream's copies, its names, and the single-writer leases ------
    #: Copies JetStream keeps of the event stream, the services' consumers and the lease
    #: bucket (1..5; at most the cluster's nodes). 3 on a 3-node cluster: a node's loss
    #: costs a leader election, not the stream. Existing ones are brought to this count
    #: when a service starts (clearance_runtime.messaging.jetstream).
    jetstream_replicas: Annotated[int, msgspec.Meta(ge=1, le=5)] = 1
    #: The event stream's name (its subjects stay clearance.events.>).
    stream_name: Annotated[str, msgspec.Meta(pattern=_STREAM_NAME)] = EVENTS_STREAM
    #: The key-value bucket holding the leases (its stream: KV_<bucket>).
    lease_bucket: Annotated[str, msgspec.Meta(pattern=_BUCKET_NAME)] = DEFAULT_LEASE_BUCKET
    #: Seconds a lease outlives its holder's last renewal: a standby takes over within
    #: about this after the holder dies. Longer than a JetStream leader election (~7 s
    #: measured on a 3-node cluster), so an election does not cost the lease.
    lease_ttl_s: _Seconds = 15.0
    #: Seconds between renewals. A holder that has not renewed for TTL - 2 x renew stops
    #: working (so two never work at once): the TTL must be at least 3 x renew.
    lease_renew_s: _Seconds = 3.0

    # -- Regions (docs/regions.md): a region answering from a mirror of another's stream -
    #: The JetStream domain of the region whose event stream this region's mirrors (this
    #: region's NATS server a leaf node of that region's). Set: the compiler creates the
    #: stream as a mirror of the stream of the same name in that domain (sequence numbers,
    #: hence revisions, kept) and refuses one that is not; the watcher refuses to run (a
    #: mirror takes no publishes; ``run all`` leaves it out). Unset: the stream is the
    #: source, and a mirror found in its place is refused.
    stream_mirror: Annotated[str, msgspec.Meta(pattern=_DOMAIN_OR_NONE)] = ""

    def __post_init__(self) -> None:
        if self.lease_ttl_s < 3 * self.lease_renew_s:
            raise ValueError("CLEARANCE_LEASE_TTL_S must be at least 3 x "
                             "CLEARANCE_LEASE_RENEW_S (a holder stops working TTL - 2 x "
                             "renew after its last renewal, before its lease can expire)")
        if not self.admin_namespace_list:
            raise ValueError("CLEARANCE_ADMIN_NAMESPACES must name at least one namespace")
        # Valkey high availability: a Sentinel URL that cannot be read stops the start.
        if store.is_sentinel(self.redis_url):
            store.parse_sentinel(self.redis_url)

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
    def topology(self) -> Topology:
        """Where this deployment's JetStream state lives, and its replicas."""
        return Topology(stream=self.stream_name, lease_bucket=self.lease_bucket,
                        replicas=self.jetstream_replicas, mirror=self.stream_mirror)

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
        """SystemExit naming the variable for a NATS URL list with an item that is no
        NATS URL, or an inbox or reply prefix that is no subject."""
        for field in _NATS_URLS:
            value = getattr(self, field)
            if field == "nats_url" or value:
                try:
                    nats_urls.parse(value)
                except ValueError as exc:  # the message shows no credentials
                    raise SystemExit(f"invalid configuration: {ENV[field]}: {exc}") from None
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
    # Cached checks near the wire.
    "decision_recent_replies": "CLEARANCE_DECISION_RECENT_REPLIES",
    "decision_scan_misses": "CLEARANCE_DECISION_SCAN_MISSES",
    # NATS clusters.
    "jetstream_replicas": "CLEARANCE_JETSTREAM_REPLICAS",
    "stream_name": "CLEARANCE_STREAM_NAME",
    "lease_bucket": "CLEARANCE_LEASE_BUCKET",
    "lease_ttl_s": "CLEARANCE_LEASE_TTL_S",
    "lease_renew_s": "CLEARANCE_LEASE_RENEW_S",
    # Regions.
    "stream_mirror": "CLEARANCE_STREAM_MIRROR",
}
_BOOLEANS = {"allow_unset", "kubernetes", "write_status"}
_NATS_URLS = ("nats_url", "watcher_nats_url", "compiler_nats_url",
              "cache_invalidator_nats_url", "decision_nats_url", "gateway_nats_url",
              "console_nats_url")
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
