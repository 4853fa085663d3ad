"""Configuration: every variable decodes, every bad value ends with one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance_runtime.process.settings import Settings


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


def test_each_service_may_have_its_own_nats_user_and_inbox() -> None:
    settings = Settings.from_env({
        "CLEARANCE_NATS_URL": "nats://operator:pw@n:1",
        "CLEARANCE_DECISION_NATS_URL": "nats://decision:pw@n:1",
        "CLEARANCE_CACHE_INVALIDATOR_NATS_URL": "nats://cache-invalidator:pw@n:1",
        "CLEARANCE_REPLY_PREFIXES": "_INBOX.client,_INBOX.author"})
    assert settings.nats_url_for("decision") == "nats://decision:pw@n:1"
    assert settings.nats_url_for("cache-invalidator") == "nats://cache-invalidator:pw@n:1"
    assert settings.nats_url_for("compiler") == "nats://operator:pw@n:1"
    assert settings.inbox_prefix_for("cache-invalidator") == "_INBOX.cache-invalidator"
    assert settings.inbox_prefix_for("console") == "_INBOX.operator"
    assert settings.reply_prefix_list == ("_INBOX.client", "_INBOX.author")
    explicit = Settings.from_env({"CLEARANCE_NATS_URL": "nats://operator:pw@n:1",
                                  "CLEARANCE_NATS_INBOX_PREFIX": "_INBOX.ops"})
    assert explicit.inbox_prefix_for("watcher") == "_INBOX.ops"
    assert Settings().inbox_prefix_for("watcher") == "_INBOX"


@pytest.mark.parametrize(("variable", "value"), [
    ("CLEARANCE_REPLY_PREFIXES", "_INBOX.>"), ("CLEARANCE_REPLY_PREFIXES", ","),
    ("CLEARANCE_NATS_INBOX_PREFIX", "_INBOX.*")])
def test_a_prefix_that_is_no_subject_ends_with_one_line(variable: str, value: str) -> None:
    with pytest.raises(SystemExit, match=f"invalid configuration: {variable}="):
        Settings.from_env({variable: value})
def test_admin_namespaces_are_a_list_and_never_none() -> None:
    assert Settings.from_env({}).admin_namespace_list == ("clearance-system",)
    settings = Settings.from_env({"CLEARANCE_ADMIN_NAMESPACES": "platform, clearance-system,"})
    assert settings.admin_namespace_list == ("clearance-system", "platform")
    with pytest.raises(SystemExit) as exit_:
        Settings.from_env({"CLEARANCE_ADMIN_NAMESPACES": " , ,"})
    assert str(exit_.value) == ("invalid configuration: CLEARANCE_ADMIN_NAMESPACES must "
                                "name at least one namespace")


def test_a_region_mirroring_another_names_its_domain() -> None:
    settings = Settings.from_env({"CLEARANCE_STREAM_MIRROR": "hub"})
    assert settings.topology.mirror == "hub"
    assert settings.topology.mirror_api == "$JS.hub.API"
    assert Settings.from_env({}).topology.mirror == ""  # the source, as before
    for bad in ("hub.eu", "h*", "a b"):
        with pytest.raises(SystemExit, match="invalid configuration: CLEARANCE_STREAM_MIRROR="):
            Settings.from_env({"CLEARANCE_STREAM_MIRROR": bad})


async def test_no_watcher_runs_where_the_stream_is_a_mirror() -> None:
    from clearance_cli import services  # noqa: PLC0415 - the services' module, as the CLI

    region = Settings.from_env({"CLEARANCE_STREAM_MIRROR": "hub"})
    assert services.every_service(region) == ["compiler", "cache-invalidator", "decision",
                                              "gateway"]
    assert services.every_service(Settings())[0] == "watcher"
    with pytest.raises(SystemExit, match=r"CLEARANCE_STREAM_MIRROR=hub: .* no publishes"):
        await services.run_service("watcher", region)
