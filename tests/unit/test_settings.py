"""Configuration: every variable decodes, every bad value ends with one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance_runtime.settings import Settings


def test_defaults_without_any_variable() -> None:
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.kubernetes is False


def test_every_variable_is_read() -> None:
    settings = Settings.from_env({
        "CLEARANCE_NATS_URL": "nats://n:1", "CLEARANCE_REDIS_URL": "redis://r:2/1",
        "CLEARANCE_DECISION_CACHE_TTL": "0", "CLEARANCE_LOG_LEVEL": "debug",
        "CLEARANCE_METRICS_PORT": "9090", "CLEARANCE_ALLOW_UNSET": "Off",
        "CLEARANCE_MANIFESTS": "/m", "CLEARANCE_KUBECONFIG": "/k",
        "CLEARANCE_MANIFEST_POLL": "0.5", "CLEARANCE_READY_MAX_LAG": "10"})
    assert settings == Settings(
        nats_url="nats://n:1", redis_url="redis://r:2/1", decision_cache_ttl=0,
        log_level="DEBUG", metrics_port=9090, allow_unset=False, manifests=Path("/m"),
        kubeconfig=Path("/k"), kubernetes=True, manifest_poll_seconds=0.5, ready_max_lag=10)


@pytest.mark.parametrize(("word", "value"), [
    ("true", True), ("1", True), ("YES", True), ("on", True),
    ("false", False), ("0", False), ("No", False), ("off", False)])
def test_booleans(word: str, value: bool) -> None:
    assert Settings.from_env({"CLEARANCE_ALLOW_UNSET": word}).allow_unset is value


def test_in_a_pod_the_kubernetes_source_is_on_unless_turned_off() -> None:
    assert Settings.from_env({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}).kubernetes is True
    assert Settings.from_env({"KUBERNETES_SERVICE_HOST": "10.0.0.1",
                              "CLEARANCE_KUBERNETES": "false"}).kubernetes is False


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("CLEARANCE_ALLOW_UNSET", "ture", "expected a boolean"),
    ("CLEARANCE_KUBERNETES", "maybe", "expected a boolean"),
    ("CLEARANCE_DECISION_CACHE_TTL", "five", "Expected `int`"),
    ("CLEARANCE_DECISION_CACHE_TTL", "-1", ">= 0"),
    ("CLEARANCE_METRICS_PORT", "70000", "<= 65535"),
    ("CLEARANCE_MANIFEST_POLL", "0", "> 0"),
    ("CLEARANCE_READY_MAX_LAG", "1.5", "Expected `int`"),
])
def test_a_bad_value_is_one_clear_line(variable: str, value: str, expected: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        Settings.from_env({variable: value})
    message = str(exit_.value)
    assert message.startswith(f"invalid configuration: {variable}={value!r}: ")
    assert expected in message and "\n" not in message


def test_admin_namespaces_are_a_list_and_never_none() -> None:
    assert Settings.from_env({}).admin_namespace_list == ("clearance-system",)
    settings = Settings.from_env({"CLEARANCE_ADMIN_NAMESPACES": "platform, clearance-system,"})
    assert settings.admin_namespace_list == ("clearance-system", "platform")
    with pytest.raises(SystemExit) as exit_:
        Settings.from_env({"CLEARANCE_ADMIN_NAMESPACES": " , ,"})
    assert str(exit_.value) == ("invalid configuration: CLEARANCE_ADMIN_NAMESPACES must "
                                "name at least one namespace")
