"""Inboxes: which reply subjects a service answers, and which prefix a caller reads."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance_api import inboxes

# Tokens as an attacker writes them: inbox-looking words, wildcards, empty parts, spaces.
_TOKENS = st.sampled_from(["_INBOX", "client", "author", "clientx", "x", "1", "$KV", "*", ">",
                           "", " ", "clearance", "events", "a\tb", "é", "_INBOX_client",
                           "_INBOX_", "_INBOX_*", "_INBOXclient"])
_SUBJECTS = st.lists(_TOKENS, min_size=0, max_size=5).map(".".join)
_PREFIXES = st.lists(st.sampled_from(["_INBOX", "_INBOX.client", "_INBOX.author",
                                      "_INBOX.client.x", "custom", "_INBOX_*",
                                      "_INBOX_client"]), min_size=1, max_size=3)


def _matches(tokens: list[str], prefix: str) -> bool:
    """A prefix's tokens (``P_*``: the last one extended after its ``_``), then at least
    one more token."""
    wanted = prefix.split(".")
    if len(tokens) <= len(wanted):
        return False
    if not prefix.endswith("_*"):
        return tokens[:len(wanted)] == wanted
    stem = wanted[-1][:-1]
    return tokens[:len(wanted) - 1] == wanted[:-1] and \
        tokens[len(wanted) - 1].startswith(stem) and len(tokens[len(wanted) - 1]) > len(stem)


def _reference(reply: str, prefixes: list[str]) -> bool:
    """Token by token: a prefix's tokens, then at least one more; every token a plain one."""
    tokens = reply.split(".")
    plain = all(t and t not in ("*", ">") and "*" not in t and ">" not in t and t.isascii()
                and t.isprintable() and " " not in t for t in tokens)
    return plain and any(_matches(tokens, p) for p in prefixes)


@given(_SUBJECTS, _PREFIXES)
def test_a_reply_is_answered_exactly_when_it_is_an_inbox_under_a_prefix(
        reply: str, prefixes: list[str]) -> None:
    assert inboxes.is_inbox(reply, tuple(prefixes)) is _reference(reply, prefixes)


@pytest.mark.parametrize("reply", [
    "clearance.events.clusterrole.x", "$KV.CLEARANCE_LEASES.compiler", "clearance.status.x",
    "clearance.decisions.changed", "$JS.API.STREAM.DELETE.CLEARANCE_EVENTS", "_INBOX",
    "_INBOX.", "_INBOX.>", "_INBOX.*", "_INBOX.a..b", "_INBOX.author.x", "_INBOX.clientx.y",
    "", "_INBOX.client",
])
def test_what_the_attacks_name_is_not_an_inbox_of_the_client(reply: str) -> None:
    assert not inboxes.is_inbox(reply, ("_INBOX.client",))


def test_nats_py_inboxes_are_inboxes() -> None:
    # nats-py: <prefix>.<nuid> (a subscription) and <prefix>.<nuid>.<token> (a request).
    prefix = ("_INBOX.client",)
    assert inboxes.is_inbox("_INBOX.client.Qz8ydhcVC0hzmGL6l2XyS4", prefix)
    assert inboxes.is_inbox("_INBOX.client.Qz8ydhcVC0hzmGL6l2XyS4.Qz8ydhcVC0hzmGL6l2XyTeab", prefix)
    assert inboxes.is_inbox("_INBOX.anyone.x", ("_INBOX",))


def test_the_default_answers_both_spellings_of_a_custom_prefix_and_nothing_else() -> None:
    accepted = inboxes.parse_prefixes(",".join(inboxes.DEFAULT_ACCEPTED))
    for reply in ("_INBOX.Qz8y", "_INBOX.client.Qz8y.x", "_INBOX_client.Qz8y.x",
                  "_INBOX_gateway.a"):
        assert inboxes.is_inbox(reply, accepted), reply
    for reply in ("_INBOX_.x", "_INBOX_client", "_INBOXclient.x", "clearance.events.x",
                  "$KV.CLEARANCE_LEASES.compiler", "_INBOX_*.x", "x._INBOX_client.y"):
        assert not inboxes.is_inbox(reply, accepted), reply


@pytest.mark.parametrize(("url", "user", "explicit", "prefix"), [
    ("nats://127.0.0.1:4222", None, None, "_INBOX"),
    ("nats://client:pw@nats:4222", None, None, "_INBOX.client"),
    ("tls://cache-invalidator:p%40ss@nats:4222", None, None, "_INBOX.cache-invalidator"),
    ("nats://a:1@h:1,nats://b:2@h:2", None, None, "_INBOX.a"),
    # A lone credential is a token: never a user name, never put in a subject.
    ("nats://s3cr3t-token@nats:4222", None, None, "_INBOX"),
    ("nats://nats:4222", "author", None, "_INBOX.author"),
    ("nats://client:pw@nats:4222", "author", None, "_INBOX.author"),
    ("nats://client:pw@nats:4222", None, "_INBOX.mine.", "_INBOX.mine"),
])
def test_the_prefix_is_explicit_else_the_users_else_the_default(
        url: str, user: str | None, explicit: str | None, prefix: str) -> None:
    assert inboxes.prefix_for(url, user=user, explicit=explicit) == prefix


@pytest.mark.parametrize("bad", ["_INBOX.>", "a..b", "*", "with space", ".", "é"])
def test_a_prefix_that_is_no_subject_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="subject tokens"):
        inboxes.prefix_for("nats://h:1", explicit=bad)
    with pytest.raises(ValueError):
        inboxes.parse_prefixes(f"_INBOX.client,{bad}")
    with pytest.raises(ValueError, match="not a subject token"):
        inboxes.prefix_for(f"nats://{bad.replace(' ', '%20')}:pw@h:1")


def test_reply_prefixes_are_a_comma_separated_list() -> None:
    assert inboxes.parse_prefixes(" _INBOX.client, _INBOX.author.,,_INBOX.client") == (
        "_INBOX.client", "_INBOX.author")
    with pytest.raises(ValueError, match="at least one"):
        inboxes.parse_prefixes(" , ")


@given(st.text(max_size=20))
def test_any_user_name_gives_its_own_prefix_or_a_clear_error(user: str) -> None:
    try:
        prefix = inboxes.prefix_for_user(user)
    except ValueError:
        assert any(c in ".*> " or not (c.isascii() and c.isprintable()) for c in user)
        return
    assert prefix == (f"_INBOX.{user}" if user else "_INBOX")
    assert inboxes.valid_prefix(prefix) and prefix.count(".") == (1 if user else 0)
