"""NATS server lists: one URL or a cluster's several, each checked once at start."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance_api import inboxes, nats_urls
from clearance_runtime.messaging import bus
from clearance_runtime.process.settings import Settings

hosts = st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z][a-z0-9-]{0,10}){0,2}", fullmatch=True)
urls = st.builds(lambda scheme, host, port: f"{scheme}://{host}:{port}",
                 st.sampled_from(["nats", "tls"]), hosts, st.integers(1, 65535))
separators = st.sampled_from([",", ", ", " ", "\n", " ,\t"])


@given(st.lists(urls, min_size=1, max_size=5, unique=True), separators)
def test_any_separator_gives_the_urls_in_order(servers: list[str], sep: str) -> None:
    assert nats_urls.parse(sep.join(servers)) == servers
    assert nats_urls.parse(f" {sep.join(servers)}{sep}") == servers


@pytest.mark.parametrize(("text", "expected"), [
    ("", "no NATS server URL"),
    ("http://n:4222", "expected nats:// or tls://"),
    ("n:4222", "expected nats:// or tls://"),
    ("nats://n:1,nats://m:99999", "'nats://m:99999' is not a NATS URL"),
    ("nats://:4222", "names no host"),
    ("nats://n:4222/x", "no path"),
])
def test_a_bad_url_is_named(text: str, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        nats_urls.parse(text)


def test_messages_and_logs_show_no_credentials() -> None:
    with pytest.raises(ValueError) as bad:
        nats_urls.parse("nats://u:secret@n:1 http://u:secret@m:2")
    assert "secret" not in str(bad.value)
    assert nats_urls.redacted_list("nats://u:secret@n:1,tls://tok@m") == "nats://n:1,tls://m"
    assert bus.redacted("nats://u:secret@n:1, nats://v:pw@m:2") == \
        "nats://u:***@n:1,nats://v:***@m:2"


def test_the_first_urls_user_names_the_inbox() -> None:
    assert inboxes.prefix_for("nats://watcher:pw@a:1 nats://watcher:pw@b:1") == \
        "_INBOX.watcher"


def test_settings_take_a_list_and_refuse_a_bad_one_naming_the_variable() -> None:
    cluster = "nats://a:4222,nats://b:4222, nats://c:4222"
    assert Settings.from_env({"CLEARANCE_NATS_URL": cluster}).nats_url == cluster
    with pytest.raises(SystemExit) as exit_:
        Settings.from_env({"CLEARANCE_NATS_URL": "nats://a:4222;nats://b:4222"})
    assert str(exit_.value).startswith("invalid configuration: CLEARANCE_NATS_URL: ")
    with pytest.raises(SystemExit) as exit_:
        Settings.from_env({"CLEARANCE_COMPILER_NATS_URL": "compiler:pw@a"})
    message = str(exit_.value)
    assert message.startswith("invalid configuration: CLEARANCE_COMPILER_NATS_URL: ")
    assert "pw" not in message


async def test_connect_refuses_a_bad_list_at_once() -> None:
    with pytest.raises(ValueError, match="not a NATS URL"):
        await bus.connect("nats://a:1,redis://b:2", name="t")
