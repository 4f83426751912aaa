"""The fixtures the pytest11 plugin gives every test suite."""

from __future__ import annotations

import json
import urllib.request

import pytest

from ctxpolicy.testing.fixtures import policy_file

POLICY = """\
ctxpolicy: 1
policies:
  default:
    model: {context_window: 6000}
    budget: {reserve_output: 500, safety_margin: 200, tool_growth: 0, target: 0.6}
    pipeline:
      - {layer: drop_rounds, at: warning, options: {keep_recent_rounds: 2, min_keep_tokens: 0}}
    snapshots: {enabled: false}
  small:
    extends: default
    model: {context_window: 3000}
"""


def test_plugin_provides_fixtures(pytestconfig: pytest.Config) -> None:
    plugin = pytestconfig.pluginmanager.get_plugin("ctxpolicy")
    assert plugin is not None, "the pytest11 entry point `ctxpolicy` is not loaded"
    for name in ("ctxpolicy_session", "make_conversation", "local_llm_server"):
        assert hasattr(plugin, name)


def test_make_conversation_fixture(make_conversation) -> None:
    assert make_conversation(3, seed=9) == make_conversation(3, seed=9)


def test_policy_file_writes_text_or_keeps_paths(tmp_path) -> None:
    p = policy_file(tmp_path, POLICY)
    assert p.suffix == ".yaml" and p.read_text() == POLICY
    assert policy_file(tmp_path, str(p)) == p
    assert policy_file(tmp_path, p) == p
    t = policy_file(tmp_path, "ctxpolicy = 1\n[policies.default]\n")
    assert t.suffix == ".toml"
    assert policy_file(tmp_path, POLICY) != p  # never overwrites


def test_ctxpolicy_session_from_text(ctxpolicy_session, make_conversation) -> None:
    session = ctxpolicy_session(POLICY)
    assert session.conv_id == "test"
    out = session.prepare(make_conversation(30, seed=2))
    assert session.status is not None
    assert session.status["used"] <= session.budget().trigger
    assert out[0]["role"] == "system"


def test_ctxpolicy_session_agent_and_kwargs(ctxpolicy_session, tmp_path) -> None:
    events: list[dict] = []
    path = tmp_path / "p.yaml"
    path.write_text(POLICY)
    session = ctxpolicy_session(path, agent="small", conv_id="run-1", on_event=events.append)
    assert session.policy.agent == "small"
    assert session.budget().window == 3000
    session.prepare([{"role": "user", "content": "hi"}])
    assert events and events[-1]["conv_id"] == "run-1"


def test_ctxpolicy_session_invalid_policy(ctxpolicy_session) -> None:
    from ctxpolicy import PolicyError

    with pytest.raises(PolicyError) as info:
        ctxpolicy_session(POLICY.replace("drop_rounds", "drop_roundz"))
    assert any(d.line == 7 for d in info.value.diagnostics)


def test_local_llm_server(local_llm_server) -> None:
    server = local_llm_server(window=2000, script=[{"content": "hello"}])
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(
        server.base_url.rstrip("/") + "/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer test"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        reply = json.load(resp)
    assert reply["choices"][0]["message"]["content"] == "hello"
    assert server.requests[-1]["messages"][0]["content"] == "hi"
