"""recall / search / the ctx_recall and ctx_search tools."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.snapshots import FsspecStore, LocalStore, SnapshotError
from ctxpolicy.snapshots.recall import handle_tool_call, recall, recall_tools, search

LOG = "\n".join(f"line {i} {'ERROR disk full' if i % 10 == 0 else 'ok'}" for i in range(1, 101))


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> object:
    if request.param == "local":
        return LocalStore(root=str(tmp_path))
    return FsspecStore(root=f"memory://recall-{id(tmp_path)}")


def test_recall_exact_slice_grep(store) -> None:  # type: ignore[no-untyped-def]
    ref = store.write("c", 4, "search_logs", {"observation": LOG}).uri
    assert recall(store, ref) == LOG
    assert recall(store, ref, lines="10-12") == "line 10 ERROR disk full\nline 11 ok\nline 12 ok"
    assert recall(store, ref, lines=(99, 500)) == "line 99 ok\nline 100 ERROR disk full"
    assert recall(store, ref, lines="7") == "line 7 ok"
    assert (
        recall(store, ref, grep="ERROR", lines="1-25")
        == "10: line 10 ERROR disk full\n20: line 20 ERROR disk full"
    )
    with pytest.raises(ValueError):
        recall(store, ref, lines="40-10")
    with pytest.raises(SnapshotError):
        recall(store, "ctxsnap://c/step_999_nope")


def test_search(store) -> None:  # type: ignore[no-untyped-def]
    store.write("c", 1, "a", {"observation": "alpha\nbeta", "step": 1, "action": "a"})
    r2 = store.write("c", 2, "b", {"observation": "gamma\nalphabet", "step": 2, "action": "b"}).uri
    store.write("other", 1, "a", {"observation": "alpha"})
    hits = search(store, "c", "alpha")
    assert [(h["line"], h["text"]) for h in hits] == [(1, "alpha"), (2, "alphabet")]
    assert hits[1]["ref"] == r2 and hits[1]["step"] == 2
    assert [h["text"] for h in search(store, "c", r"^a\w+t$", regex=True)] == ["alphabet"]
    assert len(search(store, "c", "a", limit=1)) == 1
    assert search(store, "nobody", "x") == []


def test_tools_schema_and_handler(store) -> None:  # type: ignore[no-untyped-def]
    tools = recall_tools()
    assert [t["function"]["name"] for t in tools] == ["ctx_recall", "ctx_search"]
    assert tools[0]["function"]["parameters"]["required"] == ["ref"]
    ref = store.write("c", 1, "env", {"observation": "KEY=AKIAIOSFODNN7EXAMPLE\n" + LOG}).uri
    out = handle_tool_call(store, "c", "ctx_recall", json.dumps({"ref": ref, "lines": "1-2"}))
    assert out == "KEY=[REDACTED:aws_access_key]\nline 1 ok"
    assert "AKIA" in handle_tool_call(store, "c", "ctx_recall", {"ref": ref}, redact=False)
    out = handle_tool_call(store, "c", "ctx_search", {"pattern": "ERROR"})
    assert out.split("\n")[0] == f"{ref}:11: line 10 ERROR disk full"
    assert (
        handle_tool_call(store, "c", "ctx_recall", {"ref": ref, "grep": "zzz"})
        == "(no line contains 'zzz')"
    )
    big = store.write("c", 2, "big", {"observation": "x" * 100_000}).uri
    assert len(handle_tool_call(store, "c", "ctx_recall", {"ref": big}, max_chars=1000)) < 1100


@pytest.mark.parametrize(
    ("name", "args", "expect"),
    [
        ("ctx_recall", "{not json", "Error: arguments are not valid JSON"),
        ("ctx_recall", "[1]", "Error: arguments must be a JSON object"),
        ("ctx_recall", {}, "Error: `ref`"),
        ("ctx_recall", {"ref": "ctxsnap://c/step_001_missing"}, "Error: that snapshot of this"),
        ("ctx_recall", {"ref": "/etc/passwd"}, "Error: no earlier tool result of this conv"),
        ("ctx_recall", {"ref": "ctxsnap://../../etc/x"}, "Error: no earlier tool result"),
        ("ctx_recall", {"ref": "ctxsnap://c/step_001_x", "lines": "abc"}, "Error:"),
        ("ctx_search", {"pattern": "("}, "No earlier"),
        ("ctx_search", {"pattern": "(", "regex": True}, "Error: invalid or unsupported regular"),
        ("ctx_search", {}, "Error: `pattern` (a non-empty string) is required"),
        ("ctx_other", {}, "Error: unknown tool"),
    ],
)
def test_handler_never_raises(store, name: str, args: object, expect: str) -> None:  # type: ignore[no-untyped-def]
    store.write("c", 1, "x", {"observation": "x"})
    assert handle_tool_call(store, "c", name, args).startswith(expect)  # type: ignore[arg-type]


def test_handler_without_store() -> None:
    assert handle_tool_call(None, "c", "ctx_recall", {"ref": "x"}).startswith(
        "Error: snapshots are disabled"
    )


@settings(max_examples=80, deadline=None)
@given(text=st.text(max_size=500))
def test_recall_round_trip_property(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    store = LocalStore(root=str(tmp_path_factory.mktemp("rt")))
    ref = store.write("c", 1, "x", {"observation": text})
    # a record's path form: where layout files would keep it (resolved to the same name)
    path = ref.path or os.path.join(store.root, ref.conv_id, f"{ref.name}.json")
    assert recall(store, ref.uri) == text == recall(store, path)
    n = len(text.split("\n"))
    assert recall(store, ref.uri, lines=(1, n)) == text


def test_model_cannot_recall_another_conversation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ctxpolicy.snapshots import LocalStore
    from ctxpolicy.snapshots.recall import handle_tool_call

    store = LocalStore(root=str(tmp_path))
    mine = store.write("conv-a", 1, "read_file", {"observation": "mine"})
    other = store.write("conv-b", 1, "read_file", {"observation": "secret of b"})
    assert "mine" in handle_tool_call(store, "conv-a", "ctx_recall", {"ref": mine.uri})
    for ref in (other.uri, str(tmp_path / other.conv_id / f"{other.name}.json")):
        out = handle_tool_call(store, "conv-a", "ctx_recall", {"ref": ref})
        assert out.startswith("Error: no earlier tool result of this conversation")
        assert "secret" not in out and "conv-b" not in out and str(tmp_path) not in out
