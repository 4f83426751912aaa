"""Issue 29 item 2: no error, event or log line contains a PostgreSQL DSN's password.

libpq quotes the token it cannot parse (``invalid percent-encoded token:
"Tr0ub4d…"``); that text reached ``StateStoreError`` and the ``state.unavailable``
event. A DSN that does not parse is now reported without libpq's message, and every
other message is scrubbed of the password in each form it may be written in.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy import Session
from ctxpolicy.components import StateStoreError
from ctxpolicy.state.postgres import PostgresOptions, PostgresStateStore, dsn_secrets, scrub
from tests.engine_helpers import conversation, make_policy

PW = "Tr0ub4d%zzor&3"

#: hostile DSNs, each with {pw} somewhere libpq may quote it
HOSTILE = [
    "postgresql://u:{pw}@127.0.0.1:1/db",  # invalid percent-encoding
    "postgresql://u:{pw}@[::1/db",  # IPv6 bracket never closed: the whole URI quoted
    "postgresql://u:{pw}@h/db?{pw}=1",  # the password as a query parameter name
    "postgresql://u:{pw}@h/db?sslmode={pw}",
    "host=127.0.0.1 port=1 password='{pw}",  # unterminated quote
    "host=127.0.0.1 port=1 password={pw} {pw}=x",  # the password as an option name
    "host=127.0.0.1 password={pw} port={pw}",
    "{pw}",
    "postgres://u:{pw}@h:port/db",
    "host=127.0.0.1 port=1 user=u password={pw} connect_timeout=1",
]


def _texts(dsn: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    out: list[str] = []
    with caplog.at_level(logging.DEBUG):
        try:
            store = PostgresStateStore(PostgresOptions(dsn=dsn, connect_timeout_s=1), env={})
            store.load("c")
            out.append(repr(store))
        except StateStoreError as exc:
            out.append(str(exc))
            out.append(repr(exc))
        pol = make_policy(
            None, state={"store": "postgres", "options": {"dsn": dsn, "connect_timeout_s": 1}}
        )
        s = Session(pol, conv_id="dsn")
        s.prepare(conversation(1, 100))
        out.extend(str(e) for e in s.events)
    out.extend(r.getMessage() for r in caplog.records)
    return out


def _assert_clean(texts: list[str], pw: str) -> None:
    for t in texts:
        for form in {pw, quote(pw, safe=""), pw[:10]}:
            assert form not in t, (form, t)


@pytest.mark.parametrize("shape", HOSTILE)
def test_hostile_dsns_never_show_the_password(shape: str, caplog: pytest.LogCaptureFixture) -> None:
    texts = _texts(shape.format(pw=PW), caplog)
    _assert_clean(texts, PW)
    assert any("state.unavailable" in t for t in texts)


def test_unparsable_dsn_is_a_clear_error() -> None:
    with pytest.raises(StateStoreError) as info:
        PostgresStateStore(PostgresOptions(dsn=f"postgresql://u:{PW}@h/db"), env={})
    msg = str(info.value)
    assert "not a valid libpq connection string" in msg
    assert "invalid percent-encoded token" in msg
    assert PW not in msg and "zzor" not in msg


def test_scrub_forms() -> None:
    secrets = dsn_secrets("postgresql://u:p%40ss%20w0rd@h/db")
    assert scrub("x p@ss w0rd y p%40ss%20w0rd", secrets) == "x *** y ***"


_pw = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), min_size=8, max_size=24
).filter(lambda p: p.strip() == p and len(set(p)) > 4)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pw=_pw, shape=st.sampled_from(HOSTILE))
def test_fuzz_hostile_dsns(pw: str, shape: str, caplog: pytest.LogCaptureFixture) -> None:
    """Random passwords (quotes, %, spaces, non-ASCII) in every hostile shape."""
    dsn = shape.replace("{pw}", pw)
    texts: list[str] = []
    try:
        PostgresStateStore(PostgresOptions(dsn=dsn, connect_timeout_s=1), env={})
    except StateStoreError as exc:
        texts.append(str(exc))
    for t in texts:
        assert pw not in t and quote(pw, safe="") not in t, (pw, t)
