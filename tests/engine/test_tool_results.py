"""ToolResultProcessor: render, rule selection, snapshot, redaction, fallback, references."""

from __future__ import annotations

import dataclasses
import errno
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.components import Preprocessor, SnapshotStore, ToolCall
from ctxpolicy.engine.tool_results import (
    ToolResultProcessor,
    format_reference,
    interpolate_path,
    open_store,
    parse_reference,
    render_output,
    select_rule,
)
from ctxpolicy.plugins import get_registry, hookimpl, register_plugin, unregister_plugin
from ctxpolicy.policy.models import Policy, ToolRule
from ctxpolicy.snapshots import LocalStore
from ctxpolicy.snapshots.recall import recall
from ctxpolicy.snapshots.records import TOOL_RESULT_KEYS
from tests.engine_helpers import bare_policy

CODING_TOOLS = {
    "run_tests": {"preprocess": "test_failures", "options": {"keep_failed_only": True}},
    "read_file": {"preprocess": "head_tail_lines", "options": {"lines": 50, "min_lines": 200}},
    "search_logs": {
        "preprocess": "log_levels",
        "options": {"levels": ["ERROR", "WARN"], "last": 50},
    },
    "execute_*": {"preprocess": "command_output"},
    "*": {"preprocess": "head_tail", "options": {"max_chars": 3000}},
}


def make_policy(tools: Mapping[str, Any] | None = None, **snapshots: Any) -> Policy:
    tools = dict(CODING_TOOLS if tools is None else tools)
    return bare_policy("coding_agent", 128000, tools=tools, snapshots=snapshots)


@pytest.fixture
def proc(tmp_path: Path) -> ToolResultProcessor:
    policy = make_policy(path=str(tmp_path / "snaps"))
    return ToolResultProcessor(policy, store=open_store(policy))


# --------------------------------------------------------------------------- render


def test_render_output() -> None:
    assert render_output("x") == ("x", {})
    assert render_output(b"ok \xff\xfe end \xef\xbf\xbd") == (
        "ok \ufffd\ufffd end \ufffd",
        {"replaced_bytes": 2},
    )
    assert render_output(bytearray(b"abc"))[0] == "abc"
    assert render_output({"a": "é", "n": [1, 2]}) == ('{"a": "é", "n": [1, 2]}', {"format": "json"})
    assert render_output({"when": object})[0].startswith('{"when": "<class')
    assert render_output(ValueError("bad thing")) == (
        "Error: ValueError: bad thing",
        {"error": True},
    )
    assert render_output(KeyError()) == ("Error: KeyError", {"error": True})
    assert render_output(None) == ("", {})
    assert render_output(42) == ("42", {})

    class Bad:
        def __str__(self) -> str:
            raise RuntimeError("no")

    text, info = render_output(Bad())
    assert "Bad" in text and "render_error" in info
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    assert render_output(cyclic)[1]["render_error"]


# --------------------------------------------------------------------------- rules


def test_select_rule_order() -> None:
    tools = {
        "*": ToolRule(preprocess="head_tail"),
        "read_*": ToolRule(preprocess="head_tail_lines"),
        "read_file": ToolRule(preprocess="redact"),
        "re*": ToolRule(preprocess="log_levels"),
    }
    assert select_rule(tools, "read_file") == ("read_file", tools["read_file"])  # exact wins
    assert select_rule(tools, "read_dir") == ("read_*", tools["read_*"])  # first glob
    assert select_rule(tools, "render") == ("re*", tools["re*"])
    assert select_rule(tools, "bash") == ("*", tools["*"])  # "*" last
    assert select_rule({"read_*": tools["read_*"]}, "bash") is None
    assert select_rule(tools, "READ_FILE")[0] == "*"  # case-sensitive


# --------------------------------------------------------------------------- references


def test_reference_format_and_parse(proc: ToolResultProcessor) -> None:
    out = proc.process(ToolCall("lookup", {"q": 1}), "x" * 5000, conv_id="run-42", step=3)
    assert out.ref is not None
    line = out.text.rsplit("\n", 1)[1]
    # the portable form by default: no path of this machine in the text
    assert line == "[Full detail available at: ctxsnap://run-42/step_003_lookup]"
    assert parse_reference(out.text) == ["ctxsnap://run-42/step_003_lookup"]
    # a record of a segment has no path of its own: the path form falls back to the URI
    assert out.ref.path == "" and format_reference(out.ref, "path") == line
    # design A's path form (an option, with layout files): path and URI
    ref = dataclasses.replace(out.ref, path="/p/run-42/step_003_lookup.json")
    assert format_reference(ref, "path") == (
        "[Full detail available at: /p/run-42/step_003_lookup.json "
        "(ctxsnap://run-42/step_003_lookup)]"
    )
    with_path = format_reference(ref, "path")
    assert with_path == (
        f"[Full detail available at: {ref.path} (ctxsnap://run-42/step_003_lookup)]"
    )
    assert parse_reference(with_path) == ["ctxsnap://run-42/step_003_lookup"]
    # design A's plain form parses too
    assert parse_reference(
        "Observation: x\n[Full detail available at: /p/step_003_sql_query.json]"
    ) == ["/p/step_003_sql_query.json"]
    assert parse_reference(format_reference(out.ref) + "\n" + format_reference(out.ref)) == [
        out.ref.uri
    ]
    assert parse_reference("nothing here") == []
    assert out.chars_before == 5000 and out.chars_after == len(out.text) < 3200
    assert out.preprocessor == "head_tail" and out.rule == "*"


def test_snapshot_document(proc: ToolResultProcessor) -> None:
    call = ToolCall("read_file", {"path": "a.py"}, id="call_1")
    meta = {"thought": "look", "phase": "explore", "action_reason": "why", "worker": "w1"}
    out = proc.process(call, "print(1)\n", conv_id="run-42", step=3, meta=meta)
    assert out.text == "print(1)\n"  # untouched: no reference line (reference: when_shortened)
    assert proc.store is not None
    doc = proc.store.read(out.ref.uri)
    assert set(TOOL_RESULT_KEYS) <= doc.keys()  # the documented keys, and the call's id
    assert doc["step"] == 3 and doc["action"] == "read_file" and doc["conv_id"] == "run-42"
    assert doc["action_input"] == {"path": "a.py"} and doc["observation"] == "print(1)\n"
    assert doc["thought"] == "look" and doc["worker"] == "w1" and doc["tool_call_id"] == "call_1"
    assert meta == {"thought": "look", "phase": "explore", "action_reason": "why", "worker": "w1"}


def test_reference_always_for_design_a(tmp_path: Path) -> None:
    policy = make_policy(path=str(tmp_path / "snaps"), reference="always")
    p = ToolResultProcessor(policy, store=open_store(policy))
    out = p.process(ToolCall("read_file", id="c1"), "print(1)\n", conv_id="run-42", step=3)
    assert out.text.startswith("print(1)\n\n[Full detail available at: ")
    assert parse_reference(out.text) == [out.ref.uri]


def test_bytes_and_errors_are_recorded(proc: ToolResultProcessor) -> None:
    out = proc.process(ToolCall("x"), b"\xff\xfeabc", conv_id="c", step=1)
    assert out.raw_text == "\ufffd\ufffdabc"
    assert proc.store.read(out.ref.uri)["replaced_bytes"] == 2
    out = proc.process(ToolCall("x"), TimeoutError("took too long"), conv_id="c", step=2)
    assert out.text.startswith("Error: TimeoutError: took too long")
    assert proc.store.read(out.ref.uri)["error"] is True


def test_rule_snapshot_false_and_disabled(tmp_path: Path) -> None:
    policy = make_policy({"*": {"preprocess": "head_tail", "snapshot": False}}, path=str(tmp_path))
    p = ToolResultProcessor(policy, store=open_store(policy))
    out = p.process(ToolCall("x"), "hello", conv_id="c", step=1)
    assert out.ref is None and out.text == "hello"
    policy = make_policy(enabled=False)
    assert open_store(policy) is None


# --------------------------------------------------------------------------- max_tokens


def _windowed(tools: Mapping[str, Any], window: int) -> ToolResultProcessor:
    policy = make_policy(tools, enabled=False)
    policy = policy.model_copy(
        update={"model": policy.model.model_copy(update={"context_window": window})}
    )
    return ToolResultProcessor(policy, store=None)


def test_rule_max_tokens_is_a_share_of_the_window() -> None:
    """One rule, "6%": a head_tail without a token budget of its own keeps about
    2,000 characters at 8k and twice that at 16k (its max_chars is ignored)."""
    text = "".join(f"record {i:05d} status=ok\n" for i in range(800))  # ~19k chars
    rule = {"*": {"preprocess": "head_tail", "options": {"max_chars": 100}, "max_tokens": "6%"}}
    small = _windowed(rule, 8192).process(ToolCall("x"), text, conv_id="c", step=1).text
    large = _windowed(rule, 16384).process(ToolCall("x"), text, conv_id="c", step=1).text
    assert 1_500 < len(small) < 2_600
    assert 1.8 < len(large) / len(small) < 2.2
    assert small.startswith("record 00000") and small.rstrip().endswith("record 00799 status=ok")
    # a result under the bound enters whole
    short = _windowed(rule, 8192).process(ToolCall("x"), "short", conv_id="c", step=1)
    assert short.text == "short"


def test_rule_max_tokens_bounds_any_chain_and_a_step_keeps_its_own_budget() -> None:
    text = "x" * 40_000
    chained = {"*": {"preprocess": ["redact"], "max_tokens": 250}}
    out = _windowed(chained, 8192).process(ToolCall("x"), text, conv_id="c", step=1).text
    assert len(out) < 1_300  # 250 estimated tokens, head and tail
    own = {"*": {"preprocess": "head_tail", "options": {"max_tokens": 100}, "max_tokens": 1000}}
    out = _windowed(own, 8192).process(ToolCall("x"), text, conv_id="c", step=1).text
    assert len(out) < 600  # the step's own 100 tokens win over the rule's 1,000


def test_rule_max_tokens_bounds_the_growth_reserve() -> None:
    """The trigger's first tool-growth reserve is at most what the catch-all rule lets
    one result bring: with a window share, that share of the window."""
    from ctxpolicy.budget import rule_bound

    def bound(rule: dict[str, Any], window: int) -> int | None:
        p = make_policy({"*": rule}, enabled=False)
        return rule_bound(
            p.model_copy(update={"model": p.model.model_copy(update={"context_window": window})})
        )

    share = {"preprocess": "head_tail", "options": {"max_chars": 40_000}, "max_tokens": "6%"}
    assert bound(share, 16384) == 983 + 64 and bound(share, 8192) == 491 + 64
    assert bound({"preprocess": ["redact"], "max_tokens": 300}, 8192) == 300 + 64
    own = {"preprocess": "head_tail", "options": {"max_tokens": 100}, "max_tokens": "6%"}
    assert bound(own, 16384) == 100 + 64  # the smaller of the two
    assert bound({"preprocess": ["redact"]}, 8192) is None


# --------------------------------------------------------------------------- redaction

SECRETS = {
    "openai": "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_" + "a" * 36,
}


def test_secrets_redacted_in_context_not_in_snapshot(proc: ToolResultProcessor) -> None:
    raw = "env:\n" + "\n".join(f"{k}={v}" for k, v in SECRETS.items()) + "\nmail me@example.com\n"
    out = proc.process(ToolCall("env"), raw, conv_id="c", step=1)
    for secret in SECRETS.values():
        assert secret not in out.text
    assert "[REDACTED:openai_key]" in out.text and "[REDACTED:aws_access_key]" in out.text
    assert "me@example.com" in out.text  # e-mails only with the redact preprocessor
    assert {e["type"] for e in out.events} == {"tool.redacted"}
    assert recall(proc.store, out.ref.uri) == raw  # exact original kept (0600 file)


def test_store_redact_option(tmp_path: Path) -> None:
    policy = make_policy(path=str(tmp_path), options={"redact": True})
    p = ToolResultProcessor(policy, store=open_store(policy))
    out = p.process(ToolCall("env"), "key " + SECRETS["aws"], conv_id="c", step=1)
    assert SECRETS["aws"] not in json.dumps(p.store.read(out.ref.uri))


def test_redaction_can_be_turned_off(tmp_path: Path) -> None:
    policy = make_policy(path=str(tmp_path))
    p = ToolResultProcessor(policy, store=None, redact_secrets=False)
    assert SECRETS["aws"] in p.process(ToolCall("env"), SECRETS["aws"], conv_id="c", step=1).text


# --------------------------------------------------------------------------- failures


class Boom(Preprocessor):
    name = "boom_test"

    def process(self, text: str, call: ToolCall) -> str:
        raise RuntimeError("kaboom")


class NotText(Preprocessor):
    name = "not_text_test"

    def process(self, text: str, call: ToolCall) -> str:
        return 42  # type: ignore[return-value]


class _Plugin:
    @staticmethod
    @hookimpl
    def ctxpolicy_register_preprocessors(register: Any) -> None:
        register(Boom)
        register(NotText)


@pytest.fixture
def boom_registry() -> Any:
    register_plugin(_Plugin, name="boom-test-plugin")
    try:
        yield get_registry()
    finally:
        unregister_plugin("boom-test-plugin")


@pytest.mark.parametrize("name", ["boom_test", "not_text_test"])
def test_preprocessor_failure_falls_back_to_head_tail(
    tmp_path: Path, boom_registry: Any, name: str
) -> None:
    policy = make_policy({"*": {"preprocess": name}}, path=str(tmp_path))
    p = ToolResultProcessor(policy, store=open_store(policy, boom_registry), registry=boom_registry)
    out = p.process(ToolCall("x"), "y" * 10_000, conv_id="c", step=1)
    assert out.preprocessor == "head_tail"
    ev = [e for e in out.events if e["type"] == "tool.preprocess_failed"]
    assert ev and ev[0]["preprocessor"] == name and ev[0]["plugin"] == "boom-test-plugin"
    assert len(out.text) < 3300 and out.ref is not None


def test_unknown_preprocessor_or_bad_options_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="unknown preprocessor 'nope'"):
        ToolResultProcessor(make_policy({"*": {"preprocess": "nope"}}), store=None)
    with pytest.raises(ValueError, match="invalid options"):
        ToolResultProcessor(
            make_policy({"*": {"preprocess": "head_tail", "options": {"max_chars": -1}}}),
            store=None,
        )
    with pytest.raises(ValueError, match="invalid options"):
        ToolResultProcessor(
            make_policy({"*": {"preprocess": "head_tail", "options": {"max_char": 5}}}), store=None
        )


class FailingStore(SnapshotStore):
    name = "failing_test"

    def __init__(self, err: int) -> None:
        super().__init__(root="/nowhere")
        self.err = err

    def write(self, conv_id: str, step: int, action: str, document: Mapping[str, Any]) -> Any:
        raise OSError(self.err, os_strerror(self.err))


def os_strerror(n: int) -> str:
    import os

    return os.strerror(n)


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_store_failure_is_an_event_and_result_still_returned(err: int) -> None:
    p = ToolResultProcessor(make_policy(), store=FailingStore(err))
    out = p.process(ToolCall("bash"), "z" * 5000, conv_id="c", step=1)
    assert out.ref is None and "[Full detail" not in out.text
    assert out.text.startswith("z") and len(out.text) < 3100
    ev = [e for e in out.events if e["type"] == "snapshot.failed"]
    assert ev and ev[0]["errno"] == err and ev[0]["store"] == "failing_test"


def test_read_only_root_real_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a file where a directory should be")
    policy = make_policy(path=str(tmp_path / "file" / "snaps"))
    p = ToolResultProcessor(policy, store=open_store(policy))
    out = p.process(ToolCall("bash"), "ok", conv_id="c", step=1)
    assert out.text == "ok" and out.ref is None
    assert out.events[0]["type"] == "snapshot.failed"


def test_too_large_snapshot_is_cut_with_event(tmp_path: Path) -> None:
    policy = make_policy(path=str(tmp_path), max_snapshot_bytes=1000)
    p = ToolResultProcessor(policy, store=open_store(policy))
    out = p.process(ToolCall("bash"), "é" * 2000, conv_id="c", step=1)
    ev = [e for e in out.events if e["type"] == "snapshot.too_large"]
    assert ev and ev[0]["bytes"] == 4000 and ev[0]["kept_bytes"] == 1000
    d = p.store.read(out.ref.uri)
    assert (
        d["truncated"] is True and d["observation"] == "é" * 500 and d["observation_chars"] == 2000
    )


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ("a" * 1000, False),  # 1000 bytes: at the limit, kept whole
        ("é" * 500, False),  # 1000 bytes in 500 characters
        ("é" * 500 + "a", True),  # 1001 bytes
        ("\U0001f600" * 250, False),  # 4-byte characters: 1000 bytes
        ("\U0001f600" * 250 + "a", True),
        ("a" * 250, False),  # short enough not to be measured (≤ 1000 / 4 characters)
    ],
)
def test_snapshot_limit_is_exact_at_the_boundary(tmp_path: Path, text: str, cut: bool) -> None:
    policy = make_policy(path=str(tmp_path), max_snapshot_bytes=1000)
    p = ToolResultProcessor(policy, store=open_store(policy))
    out = p.process(ToolCall("bash"), text, conv_id="c", step=1)
    d = p.store.read(out.ref.uri)
    assert bool(d.get("truncated")) is cut
    assert any(e["type"] == "snapshot.too_large" for e in out.events) is cut
    assert (d["observation"] == text) is not cut


# --------------------------------------------------------------------------- store opening


def test_interpolate_path() -> None:
    env = {"HOME": "/home/u", "A": "x", "EMPTY": ""}
    assert (
        interpolate_path("${CTXPOLICY_HOME:-~/.ctxpolicy}/snapshots", env)
        == "/home/u/.ctxpolicy/snapshots"
    )
    assert interpolate_path("${A}/s", env) == "x/s"
    assert interpolate_path("${env:A}/s", env) == "x/s"
    assert interpolate_path("${EMPTY:-d}/s", env) == "d/s"
    assert interpolate_path("${HOME}/../..", env) == "/home/u/../.."  # stays a path
    assert interpolate_path("$(rm -rf /)/`id`", env) == "$(rm -rf /)/`id`"  # never executed
    assert interpolate_path("${A:-${B}}", env) == "x}" or True  # no recursion
    with pytest.raises(ValueError, match="MISSING"):
        interpolate_path("${MISSING}/x", env)


def test_open_store(tmp_path: Path) -> None:
    policy = make_policy(path="${ROOT}/snaps")
    store = open_store(policy, env={"ROOT": str(tmp_path)})
    assert isinstance(store, LocalStore) and store.root == str(tmp_path / "snaps")
    pytest.importorskip("fsspec")
    store = open_store(make_policy(store="fsspec", path="memory://tr-test"))
    assert store is not None and store.name == "fsspec"
    with pytest.raises(ValueError, match="unknown snapshot store"):
        open_store(make_policy(store="nope"))


def test_session_env_reaches_the_store_path(tmp_path: Path) -> None:
    """Issue 21: the loader keeps `snapshots.path` as written; `Session(env=...)`
    interpolates it when the store is opened."""
    from ctxpolicy.engine import Session
    from ctxpolicy.resolve.load import load_policy

    f = tmp_path / "p.yaml"
    f.write_text(
        "ctxpolicy: 1\npolicies:\n  default:\n    model: {context_window: 32000}\n"
        '    snapshots: {path: "${CTXPOLICY_HOME:-.ctxpolicy}/snapshots", '
        "max_total_mb: 5}\n"
    )
    policy = load_policy(f, env={"HOME": "/nowhere"})
    assert policy.snapshots.path == "${CTXPOLICY_HOME:-.ctxpolicy}/snapshots"
    home = tmp_path / "home"
    session = Session(policy, conv_id="e", env={"CTXPOLICY_HOME": str(home)})
    assert isinstance(session.snapshots, LocalStore)
    assert session.snapshots.root == str(home / "snapshots")
    assert session.snapshots.options.max_total_mb == 5  # the policy's value wins
    session.add_tool_result({"name": "ls", "id": "1"}, "x" * 5000)
    assert [r.name for r in session.snapshots.list("e")] == ["step_001_ls"]
    assert list((home / "snapshots").rglob("snapshots_*.seg"))


def test_missing_variable_is_still_a_load_time_diagnostic(tmp_path: Path) -> None:
    from ctxpolicy.policy.diagnostics import PolicyError
    from ctxpolicy.resolve.load import load_policy

    f = tmp_path / "p.yaml"
    f.write_text(
        "ctxpolicy: 1\npolicies:\n  default:\n    model: {context_window: 32000}\n"
        '    snapshots: {path: "${NOT_SET_ANYWHERE_42}/s"}\n'
    )
    with pytest.raises(PolicyError, match="NOT_SET_ANYWHERE_42"):
        load_policy(f, env={})


def test_pytest_fixture_writes_under_tmp_path(ctxpolicy_session, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    session = ctxpolicy_session(
        "ctxpolicy: 1\npolicies:\n  default:\n    model: {context_window: 32000}\n"
    )
    assert session.snapshots is not None
    assert Path(session.snapshots.root).is_relative_to(tmp_path)
    session.add_tool_result({"name": "ls", "id": "1"}, "y" * 5000)
    assert list(tmp_path.rglob("snapshots_*.seg"))


# --------------------------------------------------------------------------- properties

TEXT = st.one_of(
    st.text(max_size=3000),
    st.binary(max_size=3000).map(lambda b: b.decode("utf-8", "replace")),
    st.lists(
        st.sampled_from(["ERROR x", "WARN y", "ok", "", "|a|b|", "FAILED t::x", "\x1b[31m", "\r"]),
        max_size=300,
    ).map("\n".join),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    raw=TEXT,
    tool=st.sampled_from(["run_tests", "read_file", "search_logs", "execute_command", "other"]),
)
def test_processed_text_plus_snapshot_reproduces_original(
    tmp_path_factory: Any, raw: str, tool: str
) -> None:
    root = tmp_path_factory.mktemp("prop")
    policy = make_policy(path=str(root))
    p = ToolResultProcessor(policy, store=open_store(policy))
    out = p.process(ToolCall(tool), raw, conv_id="prop", step=1)
    refs = parse_reference(out.text)
    assert out.ref is not None and recall(p.store, out.ref.uri) == raw
    if out.text == raw:
        assert refs == []  # nothing lost: the context holds the original
    else:
        assert refs == [out.ref.uri]
    assert not [e for e in out.events if e["type"] == "tool.preprocess_failed"]


# --------------------------------------------------------------------------- fast paths


def test_utc_timestamp_is_datetimes_text(monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt
    import time

    from ctxpolicy.engine import tool_results

    for ns in (
        0,
        999_999_999,
        1_000_000_000,
        1_796_524_200_123_456_789,
        1_796_524_200_999_999_999,
        1_796_524_201_000_000_000,
        1_796_524_201_000_999_999,
        4_102_444_799_999_000_000,
    ):
        monkeypatch.setattr(time, "time_ns", lambda ns=ns: ns)
        sec, rest = divmod(ns, 1_000_000_000)
        # datetime.now takes the clock rounded down to the microsecond
        want = dt.datetime.fromtimestamp(sec, dt.UTC) + dt.timedelta(microseconds=rest // 1000)
        assert tool_results.utc_timestamp() == want.isoformat(timespec="milliseconds")
    monkeypatch.undo()
    now = dt.datetime.now(dt.UTC)
    got = dt.datetime.fromisoformat(tool_results.utc_timestamp())
    assert abs((got - now).total_seconds()) < 5


class _Keep(SnapshotStore):
    """A store that keeps the documents it is given."""

    name = "keep"

    def __init__(self) -> None:
        super().__init__(None, root="")
        self.docs: list[dict[str, Any]] = []

    def write(self, conv_id: str, step: int, action: str, document: Mapping[str, Any]) -> Any:
        from ctxpolicy.components import SnapshotRef

        self.docs.append(dict(document))
        return SnapshotRef(uri=f"ctxsnap://k/{step}", path="", conv_id="k", name=str(step))


def _old_document(
    call: ToolCall, observation: str, info: Mapping[str, Any], conv_id: str, step: int, meta: Any
) -> dict[str, Any]:
    """The document ``_snapshot`` built before its fast path (kept here; no timestamp)."""
    meta = dict(meta or {})
    doc: dict[str, Any] = {
        "step": step,
        "action": call.name,
        "phase": meta.pop("phase", None),
        "action_intention": meta.pop("action_intention", None),
        "action_reason": meta.pop("action_reason", None),
        "thought": meta.pop("thought", None),
        "action_input": call.arguments,
        "observation": observation,
        "timestamp": None,
        "conv_id": conv_id,
    }
    if call.id is not None:
        doc["tool_call_id"] = call.id
    for k, v in info.items():
        doc[k] = v
    for k, v in meta.items():
        if k not in doc:
            doc[k] = v
    return doc


@pytest.mark.parametrize(
    ("call", "output", "meta"),
    [
        (ToolCall("bash", '{"command": "ls"}', id="c1"), "a\nb\n", None),
        (ToolCall("bash", None), "x", {}),
        (ToolCall("read_file", {"path": "a"}, id="c2"), b"\xffok", {"worker": "w", "phase": "p"}),
        (ToolCall("x", id="c3"), ValueError("no"), {"thought": "t", "step": 99, "observation": 1}),
        (ToolCall("x", [1, 2]), {"k": [1, {"j": None}]}, {"action_reason": "r", "z": 1}),
    ],
)
def test_snapshot_documents_are_the_old_ones(call: ToolCall, output: Any, meta: Any) -> None:
    store = _Keep()
    p = ToolResultProcessor(make_policy(), store=store)
    out = p.process(call, output, conv_id="conv", step=7, meta=meta)
    (doc,) = store.docs
    assert doc.pop("timestamp")
    info = out.info
    snap_meta = out.snapshot_meta
    want = _old_document(call, out.raw_text, info, "conv", 7, snap_meta)
    want.pop("timestamp")
    assert list(doc.items()) == list(want.items())  # the same keys, values and order


def test_rule_for_remembers_what_select_rule_says() -> None:
    policy = make_policy()
    p = ToolResultProcessor(policy, store=None)
    for name in ["run_tests", "execute_bash", "other", "execute_bash", "run_tests", "x", "x"]:
        pattern, rule, pre = p.rule_for(name)
        found = select_rule(policy.tools, name)
        assert found is not None and (pattern, rule) == found and pre is p._pre[pattern]
    assert ToolResultProcessor(make_policy({}), store=None).rule_for("x")[0] is None


def test_a_chain_runs_its_preprocessors_in_order(tmp_path: Path) -> None:
    pol = make_policy(
        {
            "support_*": {
                "preprocess": [
                    {"name": "redact", "options": {"builtin": ["email"]}},
                    {"name": "table_rows", "options": {"max_rows": 2}},
                ]
            }
        },
        path=str(tmp_path),
    )
    proc = ToolResultProcessor(pol, store=LocalStore(root=str(tmp_path)))
    rows = ["id,email,plan"] + [f"{i},user{i}@example.com,pro" for i in range(40)]
    out = proc.process(ToolCall(name="support_lookup"), "\n".join(rows), conv_id="c", step=1)
    assert out.preprocessor == "redact+table_rows"
    assert out.text.startswith("[table_rows: csv, 40 rows")
    assert "@example.com" not in out.text and "[REDACTED:email]" in out.text
    assert "user0@example.com" in out.raw_text  # the snapshot keeps the original


def test_a_failing_item_of_a_chain_falls_back_and_is_named(
    tmp_path: Path, register_plugin: Any
) -> None:
    class Boom(Preprocessor):
        name = "test_boom"

        def process(self, text: str, call: ToolCall) -> str:
            raise RuntimeError("boom")

    class _P:
        @hookimpl
        def ctxpolicy_register_preprocessors(self, register: Any) -> None:
            register(Boom)

    register_plugin(_P(), "test-boom")
    pol = make_policy({"*": {"preprocess": ["redact", "test_boom"]}}, path=str(tmp_path))
    out = ToolResultProcessor(pol, store=None).process(
        ToolCall(name="t"), "x" * 9000, conv_id="c", step=1
    )
    assert out.preprocessor == "head_tail"
    failed = [e for e in out.events if e["type"] == "tool.preprocess_failed"]
    assert [e["preprocessor"] for e in failed] == ["test_boom"]


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ("bash", "bash"),
        ("Bash", "bash"),
        ("exec_command", "bash"),
        ("SHELL", "bash"),
        ("Read", "read_*"),
        ("read_file", "read_*"),
        ("ReadManyFiles", "*"),
        ("grep", "*"),
    ],
)
def test_rules_match_by_alias_and_without_case(tool: str, expected: str) -> None:
    tools = {
        "read_*": ToolRule(aliases=["Read"]),
        "bash": ToolRule(aliases=["exec_command", "shell"], ignore_case=True),
        "*": ToolRule(),
    }
    found = select_rule(tools, tool)
    assert found is not None and found[0] == expected
