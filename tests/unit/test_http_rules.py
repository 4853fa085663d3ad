"""The HTTP surfaces' pure rules: AuthZEN's decision for Clearance's outcomes (a partial
is never a bare true), the gateway's allowed callers, the console's host names, and the
settings that configure them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from clearance_console.guard import allowed_hosts
from clearance_gateway.authzen import _accepts_partial, _decision
from clearance_gateway.callers import allowed_callers, certificate_caller
from clearance_runtime.process.settings import Settings

outcomes = st.sampled_from(["allow", "partial", "deny", "not_applicable", "error", None, 1])
contexts = st.none() | st.dictionaries(
    st.sampled_from(["clearance", "time", "accept_partial"]),
    st.none() | st.booleans() | st.text(max_size=3) | st.dictionaries(
        st.sampled_from(["accept_partial", "partial"]),
        st.none() | st.booleans() | st.integers(0, 1) | st.just("true"), max_size=2),
    max_size=3)


@given(outcomes, st.none() | st.booleans() | st.integers(0, 1), contexts)
def test_true_only_for_an_allow_or_an_accepted_partial(
        outcome: Any, allowed: Any, context: dict[str, Any] | None) -> None:
    answer = _decision({"decision": outcome, "allowed": allowed, "reason": "r"},
                       _accepts_partial(context))
    assert answer["context"]["outcome"] == outcome  # what it was, always said
    if answer["decision"]:
        assert allowed is True
        assert outcome == "allow" or (
            outcome == "partial" and context is not None
            and context.get("clearance") == {**context["clearance"], "accept_partial": True})


def test_a_partial_needs_exactly_the_opt_in() -> None:
    partial = {"decision": "partial", "allowed": True, "filters": {"pods": {}}}
    assert _decision(partial, False)["decision"] is False
    assert _decision(partial, True)["decision"] is True
    assert not _accepts_partial({"clearance": {"accept_partial": "true"}})
    assert not _accepts_partial({"accept_partial": True})
    assert _accepts_partial({"clearance": {"accept_partial": True}, "time": "now"})


def test_allowed_callers() -> None:
    assert allowed_callers("") == (frozenset(), frozenset())
    assert allowed_callers(" kube-apiserver, user:pep ,group:system:masters,") == (
        frozenset({"kube-apiserver", "pep"}), frozenset({"system:masters"}))
    for bad in ("role:admin", "user:", "group:"):
        with pytest.raises(SystemExit, match="CLEARANCE_GATEWAY_ALLOWED_CALLERS"):
            allowed_callers(bad)


def test_a_certificate_names_its_user_and_groups_as_kubernetes_does() -> None:
    subject = ((("organizationName", "system:masters"),), (("organizationName", "ops"),),
               (("commonName", "admin"),))
    caller = certificate_caller({"subject": subject})
    assert caller is not None
    assert (caller.username, caller.groups) == ("admin", ("system:masters", "ops"))
    assert certificate_caller(None) is None and certificate_caller({}) is None


def test_the_console_answers_loopback_its_bind_address_and_listed_names() -> None:
    hosts = allowed_hosts("127.0.0.1", 8080, ["Console.Example.com", " "])
    assert hosts == {"127.0.0.1:8080", "localhost:8080", "[::1]:8080",
                     "console.example.com:8080"}
    assert "10.0.0.5:9000" in allowed_hosts("10.0.0.5", 9000)
    assert "[fd00::5]:80" in allowed_hosts("fd00::5", 80)
    assert "localhost" in allowed_hosts("127.0.0.1", 80)  # browsers drop port 80


def test_the_http_settings() -> None:
    defaults = Settings()
    assert (defaults.gateway_host, defaults.metrics_host) == ("127.0.0.1", "127.0.0.1")
    assert defaults.gateway_auth_mode == "token"
    settings = Settings.from_env({
        "CLEARANCE_METRICS_HOST": "0.0.0.0", "CLEARANCE_GATEWAY_AUTH": "MTLS-or-Token",
        "CLEARANCE_GATEWAY_ALLOWED_CALLERS": "group:g", "CLEARANCE_GATEWAY_CLIENT_CA": "/ca",
        "CLEARANCE_GATEWAY_MAX_CONNECTIONS": "10", "CLEARANCE_GATEWAY_MAX_EVALUATIONS": "50",
        "CLEARANCE_CONSOLE_TOKEN": "t", "CLEARANCE_CONSOLE_HOSTS": "a,b",
        "CLEARANCE_CONSOLE_MAX_CONNECTIONS": "5", "CLEARANCE_HTTP_HEADER_TIMEOUT": "2.5",
        "CLEARANCE_HTTP_BODY_TIMEOUT": "3"})
    assert settings.gateway_auth_mode == "mtls-or-token"
    assert (settings.metrics_host, settings.gateway_max_connections,
            settings.gateway_max_evaluations, settings.console_token, settings.console_hosts,
            settings.console_max_connections, settings.http_header_timeout,
            settings.http_body_timeout) == ("0.0.0.0", 10, 50, "t", "a,b", 5, 2.5, 3.0)
    assert Settings.from_env({"CLEARANCE_GATEWAY_CLIENT_CA": "/ca"}).gateway_auth_mode == "mtls"


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("CLEARANCE_GATEWAY_AUTH", "off", "expected one of mtls, token, mtls-or-token, none"),
    ("CLEARANCE_GATEWAY_MAX_CONNECTIONS", "0", ">= 1"),
    ("CLEARANCE_HTTP_HEADER_TIMEOUT", "0", "> 0"),
])
def test_a_bad_http_setting_is_one_clear_line(variable: str, value: str,
                                              expected: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        Settings.from_env({variable: value})
    assert str(exit_.value).startswith(f"invalid configuration: {variable}=")
    assert expected in str(exit_.value)


def test_deploy_opens_exactly_what_kubernetes_needs() -> None:
    """Loopback is the default; deploy/ listens on the pod's address where something
    outside the pod must come in — Prometheus and the kubelet's probes on the metrics port
    (every service), clients on the gateway's port — and the gateway asks for a client
    certificate from the CA it is given."""
    deploy = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
    config = yaml.safe_load((deploy / "config.yaml").read_text())["data"]
    assert config["CLEARANCE_METRICS_HOST"] == "0.0.0.0"
    gateway = next(doc for doc in yaml.safe_load_all((deploy / "gateway.yaml").read_text())
                   if doc["kind"] == "Deployment")
    (container,) = gateway["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["CLEARANCE_GATEWAY_HOST"] == "0.0.0.0"
    assert env["CLEARANCE_GATEWAY_AUTH"] == "mtls" and env["CLEARANCE_GATEWAY_CLIENT_CA"]
