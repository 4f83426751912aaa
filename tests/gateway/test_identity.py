"""Conversation identity: the gateway's header, the client's own session id, continuity;
tenants from a credential or a gateway token (unit tests, then end to end)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.gateway.identity import Identity, Refused
from ctxpolicy.testing.server import ScriptedLLMServer

from .conftest import config_for, run_gateway

openai = pytest.importorskip("openai", reason="the 'openai' extra is not installed")

SECRET = b"s" * 32


def msgs(*texts: str) -> list[dict[str, Any]]:
    roles = ["system", "user", "assistant"]
    return [
        {"role": roles[0] if i == 0 else roles[1 + (i + 1) % 2], "content": t}
        for i, t in enumerate(texts)
    ]


def test_order_header_then_session_then_continuity() -> None:
    ident = Identity(SECRET)
    base = msgs("sys", "task")
    h = ident.conversation({"x-ctxpolicy-conversation": "a b"}, "ag", "t", {}, base)
    assert h.source == "header" and h.id.startswith("a_b-")
    for headers, body in (
        ({"x-claude-code-session-id": "u1"}, {}),
        ({"session-id": "u1"}, {}),
        ({"x-session-id": "u1"}, {}),
        ({}, {"prompt_cache_key": "u1"}),
        ({}, {"metadata": {"user_id": "u1"}}),
        ({}, {"user": "u1"}),
    ):
        c = ident.conversation(headers, "ag", "t", body, base)
        assert c.source == "session" and c.id.startswith("s-"), (headers, body)
    # the same session id is another conversation for another tenant or agent
    one = ident.conversation({"session-id": "u1"}, "ag", "t", {}, base).id
    assert ident.conversation({"session-id": "u1"}, "ag", "t2", {}, base).id != one
    assert ident.conversation({"session-id": "u1"}, "ag2", "t", {}, base).id != one
    assert ident.conversation({}, "ag", "t", {}, base).source == "continuity"


def test_session_header_from_the_command_line_comes_first() -> None:
    ident = Identity(SECRET, session_headers=["X-My-Run"])
    a = ident.conversation({"x-my-run": "r1", "session-id": "s"}, "ag", "t", {}, [])
    b = ident.conversation({"x-my-run": "r1", "session-id": "other"}, "ag", "t", {}, [])
    assert a == b and a.source == "session"


def test_continuity_forks_at_the_first_divergence() -> None:
    ident = Identity(SECRET)
    opening = msgs("sys", "same task")
    a1 = ident.continue_("t", "ag", opening)
    b1 = ident.continue_("t", "ag", opening)  # identical so far: one conversation
    assert a1 == b1
    a2 = ident.continue_("t", "ag", [*opening, *msgs("x", "A did this", "go on")[1:]])
    b2 = ident.continue_("t", "ag", [*opening, *msgs("x", "B did that", "go on")[1:]])
    assert a2 == a1 and b2 != a1  # the first to move keeps it, the other starts anew
    # each continues its own from now on
    a3 = ident.continue_("t", "ag", [*opening, *msgs("x", "A did this", "go on", "more")[1:]])
    b3 = ident.continue_("t", "ag", [*opening, *msgs("x", "B did that", "go on", "more")[1:]])
    assert (a3, b3) == (a1, b2)
    # a retry of the same request stays; another tenant never continues it
    assert (
        ident.continue_("t", "ag", [*opening, *msgs("x", "B did that", "go on", "more")[1:]]) == b2
    )
    assert ident.continue_("t2", "ag", opening) not in (a1, b2)


def test_the_continuity_index_is_bounded() -> None:
    ident = Identity(SECRET, max_scopes=3, per_scope=5)
    for tenant in range(10):
        for conv in range(20):
            ident.continue_(str(tenant), "ag", msgs("sys", f"task {conv}"))
    assert len(ident._index) == 3
    assert all(len(scope) <= 5 for scope in ident._index.values())


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=8), st.integers(0, 7))
def test_two_histories_share_no_conversation_after_they_differ(common: list[str], cut: int) -> None:
    """Two sessions sending the same opening, then each its own: once their requests
    differ they are never the same conversation again."""
    ident = Identity(SECRET)
    a = msgs("sys", *common)
    b = msgs("sys", *common)
    ca = ident.continue_("t", "ag", a)
    cb = ident.continue_("t", "ag", b)
    assert ca == cb
    seen_a, seen_b = set(), set()
    for i in range(cut + 2):
        a = [*a, {"role": "user", "content": f"A{i}"}]
        b = [*b, {"role": "user", "content": f"B{i}"}]
        seen_a.add(ident.continue_("t", "ag", a))
        seen_b.add(ident.continue_("t", "ag", b))
    assert len(seen_a) == 1 and len(seen_b) == 1 and not seen_a & seen_b


def test_tenants_and_tokens() -> None:
    plain = Identity(SECRET)
    assert plain.tenant({}, server_key=False) == ""  # the client's own upstream decides
    with pytest.raises(Refused, match="credential of its own"):
        plain.tenant({}, server_key=True)
    a = plain.tenant({"authorization": "Bearer key-a"}, server_key=True)
    assert a and a == plain.tenant({"x-api-key": "key-a"}, server_key=True)
    assert "key-a" not in a and a != plain.tenant({"x-api-key": "key-b"}, server_key=True)
    gated = Identity(SECRET, client_tokens=["tok-1", "tok-2"])
    with pytest.raises(Refused, match="gateway token"):
        gated.tenant({"authorization": "Bearer guess"}, server_key=True)
    with pytest.raises(Refused):  # its provider key is not a gateway token
        gated.tenant({"authorization": "Bearer tok-1"}, server_key=False)
    t1 = gated.tenant({"x-ctxpolicy-token": "tok-1"}, server_key=False)
    assert t1 == gated.tenant({"authorization": "Bearer tok-1"}, server_key=True)
    assert t1 != gated.tenant({"x-api-key": "tok-2"}, server_key=True)


# -- end to end ------------------------------------------------------------------------


def _history(tag: str, steps: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test."},
    ]
    for i in range(steps):
        out.append({"role": "assistant", "content": f"{tag} step {i}"})
        out.append({"role": "user", "content": f"{tag} continue {i}"})
    return out


def test_parallel_same_prompt_sessions_stay_apart(
    tmp_path: Path, upstream: ScriptedLLMServer
) -> None:
    """Two clients with the same key and the same opening, no ids: two conversations."""
    with run_gateway(config_for(tmp_path, upstream)) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)

        def run(tag: str) -> None:
            for steps in range(4):
                client.chat.completions.create(model="m", messages=_history(tag, steps))  # type: ignore[arg-type]

        threads = [threading.Thread(target=run, args=(t,)) for t in ("A", "B")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        convs = {key[1] for key in gw.gateway.pool.open_sessions}
    assert len(convs) == 2
    assert len(upstream.accepted) == 8


def test_client_session_ids_separate_conversations(
    tmp_path: Path, upstream: ScriptedLLMServer
) -> None:
    with run_gateway(config_for(tmp_path, upstream)) as gw:
        for sid in ("run-1", "run-2", "run-1"):
            r = httpx.post(
                gw.url + "/v1/chat/completions",
                json={"model": "m", "messages": _history("x", 1)},
                headers={"Authorization": "Bearer k", "x-session-id": sid},
            )
            assert r.status_code == 200
        assert len(gw.gateway.pool.open_sessions) == 2


def test_a_keyless_client_of_a_server_key_gets_401(
    tmp_path: Path, upstream: ScriptedLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with run_gateway(config_for(tmp_path, upstream, api_key="server-key")) as gw:
        r = httpx.post(gw.url + "/v1/chat/completions", json=body)
        assert r.status_code == 401 and "credential of its own" in r.json()["error"]["message"]
        r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"x-api-key": "mine"})
        assert r.status_code == 200
        m = httpx.get(gw.url + "/metrics").text
        assert 'ctxpolicy_gateway_refused_total{reason="no credential"} 1' in m
    cfg = config_for(tmp_path, upstream, api_key="server-key", client_tokens=("tok",))
    with run_gateway(cfg) as gw:
        r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"x-api-key": "mine"})
        assert r.status_code == 401 and "--client-token-env" in r.text
        r = httpx.post(gw.url + "/v1/messages", json=body, headers={"x-api-key": "tok"})
        assert r.status_code == 200 and r.json()["type"] == "message"
    # the server key went upstream, never the token
    assert upstream.accepted
