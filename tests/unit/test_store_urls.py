"""Store URLs: what a ``redis+sentinel://`` URL names, and a clear refusal of one that
cannot be read (at settings time: never a service restarting for ever)."""

from __future__ import annotations

import pytest

from clearance_runtime.process.settings import Settings
from clearance_runtime.storage import store


def test_sentinel_url_names_its_sentinels_service_database_and_passwords() -> None:
    target = store.parse_sentinel(
        "redis+sentinel://:data%40pw@s1:26379,s2:26380,[::1]:26381/clearance/2"
        "?sentinel_password=sent&socket_timeout=0.25")
    assert target.sentinels == (("s1", 26379), ("s2", 26380), ("::1", 26381))
    assert (target.service, target.db) == ("clearance", 2)
    assert (target.username, target.password) == (None, "data@pw")
    assert target.sentinel_password == "sent"
    assert target.sentinel_timeout == 0.25
    assert not target.tls


def test_defaults_port_database_and_tls_scheme() -> None:
    target = store.parse_sentinel("rediss+sentinel://user:pw@sentinel/mymaster")
    assert target.sentinels == (("sentinel", store.DEFAULT_SENTINEL_PORT),)
    assert (target.service, target.db, target.username, target.tls) == \
        ("mymaster", 0, "user", True)


@pytest.mark.parametrize("url", [
    "redis+sentinel://s1:26379",                      # no service
    "redis+sentinel://s1:26379/svc/notanumber",       # database not a number
    "redis+sentinel://s1:26379/svc/0/extra",          # too long a path
    "redis+sentinel:///svc",                          # no Sentinel
    "redis+sentinel://s1:port/svc",                   # port not a number
    "redis+sentinel://s1:26379/svc?password=x",       # unknown parameter
])
def test_unreadable_sentinel_urls_are_refused_with_the_reason(url: str) -> None:
    with pytest.raises(ValueError, match=r"Sentinel|socket_timeout"):
        store.parse_sentinel(url)


def test_the_error_never_shows_the_password() -> None:
    with pytest.raises(ValueError) as caught:
        store.parse_sentinel("redis+sentinel://:hunter2@s1:26379/svc/x")
    assert "hunter2" not in str(caught.value)


def test_settings_refuse_an_unreadable_sentinel_url_at_start() -> None:
    with pytest.raises(SystemExit, match="Sentinel"):
        Settings.from_env({"CLEARANCE_REDIS_URL": "redis+sentinel://s1:26379"})
    ok = Settings.from_env({"CLEARANCE_REDIS_URL": "redis+sentinel://s1:26379/svc"})
    assert store.is_sentinel(ok.redis_url)


def test_plain_urls_pass_through() -> None:
    assert not store.is_sentinel("redis://127.0.0.1:6379/0")
    client = store.connect("unix:///tmp/valkey.sock?db=3")
    assert client.connection_pool.connection_kwargs["db"] == 3
