"""Tool results that arrive inside the messages of ``prepare`` get their tool's rule.

The gateway, prepare-only adapters and a replayed recording pass tool results in the
messages instead of through ``add_tool_result``: the engine applies the tool's rule
(preprocessor, snapshot, reference) to each of them once, remembers the text in the
session state, and sends it on every later call. Both paths prepare the same requests.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxpolicy import Session
from ctxpolicy.policy.models import Policy
from ctxpolicy.sim import replay
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.state.memory import MemoryStateStore
from tests.engine_helpers import bare_policy
from tests.shared_data import KINDS, shared_traces

ROOT = Path(__file__).resolve().parents[2]


def psql_table(rows: int = 300) -> str:
    """What ``psql`` prints for a query of ``rows`` rows (about 6 KB for 300)."""
    lines = [" id |   name    | amount ", "----+-----------+--------"]
    lines += [f" {i:>2} | item_{i:04d} | {i * 7 % 1000:>6} " for i in range(1, rows + 1)]
    lines.append(f"({rows} rows)")
    return "\n".join(lines)


def make_policy(tmp: Path, **over: Any) -> Policy:
    tools = {
        "query_*": {"preprocess": "table_rows", "options": {"max_rows": 15}},
        "*": {"preprocess": "head_tail", "options": {"max_chars": 3000}},
    }
    snapshots = {"path": str(tmp / "snaps")}
    return bare_policy("sql_agent", 128000, **{"tools": tools, "snapshots": snapshots, **over})


def call(cid: str, name: str, args: str = "{}") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def conversation(result: str = "") -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You answer questions with SQL."},
        {"role": "user", "content": "Which items sold best?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("call_1", "query_db", '{"sql": "select * from items"}')],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": result or psql_table()},
    ]


def tool_text(out: list[Mapping[str, Any]], cid: str = "call_1") -> str:
    return next(str(m["content"]) for m in out if m.get("tool_call_id") == cid)


def preprocessed(session: Session) -> list[dict[str, Any]]:
    return [e for e in session.events if e["type"] == "tool.preprocessed"]


def test_a_table_that_arrives_in_prepare_gets_its_tools_preprocessor(tmp_path: Path) -> None:
    raw = psql_table()
    assert len(raw) > 6000
    s = Session(make_policy(tmp_path), conv_id="sql")
    text = tool_text(s.prepare(conversation(raw)))
    assert text.startswith("[table_rows: psql, 300 rows × 3 columns; showing first 15]")
    assert "item_0015" in text and "item_0016" not in text
    assert "ctxsnap://" in text  # shortened: the reference to the original
    assert len(text) < len(raw) / 3
    # the same result through add_tool_result is the same text
    s2 = Session(make_policy(tmp_path / "b"), conv_id="sql")
    assert s2.add_tool_result(
        call("call_1", "query_db", '{"sql": "select * from items"}'), raw
    ) == (text)
    # the original is one recall away
    ref = text.rsplit("available at: ", 1)[1].rstrip("]")
    assert s.recall(ref) == raw


def test_a_result_is_processed_once_and_sent_the_same_on_every_call(tmp_path: Path) -> None:
    s = Session(make_policy(tmp_path), conv_id="once")
    convo = conversation()
    first = s.prepare(convo)
    convo += [{"role": "assistant", "content": "item_0299 sold best."}]
    convo += [{"role": "user", "content": "thanks"}]
    second = s.prepare(convo)
    third = s.prepare(list(convo))
    assert tool_text(first) == tool_text(second) == tool_text(third)
    assert len(preprocessed(s)) == 1
    assert s.state.step == 1
    assert s.stats.tool_results == 1
    # a new process resumes the stored state: the same text, nothing processed again
    resumed = Session(make_policy(tmp_path), conv_id="once")
    assert resumed.prepare(convo) == third
    assert preprocessed(resumed) == []


def test_add_tool_result_texts_are_not_processed_again(tmp_path: Path) -> None:
    s = Session(make_policy(tmp_path), conv_id="both")
    convo = conversation()
    text = s.add_tool_result(convo[2]["tool_calls"][0], convo[3]["content"])
    convo[3] = {**convo[3], "content": text}
    out = s.prepare(convo)
    assert tool_text(out) == text
    assert len(preprocessed(s)) == 1
    # also when a framework renamed the call id
    convo[3] = {**convo[3], "tool_call_id": "renamed"}
    convo[2] = {**convo[2], "tool_calls": [call("renamed", "query_db")]}
    assert tool_text(s.prepare(convo), "renamed") == text
    assert len(preprocessed(s)) == 1


def test_the_tool_name_comes_from_the_assistants_call(tmp_path: Path) -> None:
    """``query_db`` gets table_rows; another tool's table only the ``*`` rule."""
    s = Session(make_policy(tmp_path), conv_id="names")
    convo = conversation()
    convo += [
        {"role": "assistant", "content": None, "tool_calls": [call("call_2", "run_shell")]},
        {"role": "tool", "tool_call_id": "call_2", "content": psql_table()},
    ]
    out = s.prepare(convo)
    assert tool_text(out).startswith("[table_rows:")
    assert not tool_text(out, "call_2").startswith("[table_rows:")
    assert [e["tool"] for e in preprocessed(s)] == ["query_db", "run_shell"]


def test_a_reused_call_id_with_another_result_is_a_new_result(tmp_path: Path) -> None:
    s = Session(make_policy(tmp_path), conv_id="reuse")
    convo = conversation()
    convo += [
        {"role": "assistant", "content": None, "tool_calls": [call("call_1", "query_db")]},
        {"role": "tool", "tool_call_id": "call_1", "content": psql_table(200)},
    ]
    s.prepare(convo)
    s.prepare(convo)
    assert len(preprocessed(s)) == 2


def test_recall_answers_and_non_text_results_enter_as_they_are(tmp_path: Path) -> None:
    s = Session(make_policy(tmp_path), conv_id="recall")
    long = "x" * 5000
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    convo = conversation()
    convo += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("r1", "ctx_recall", '{"ref": "x"}'), call("i1", "screenshot")],
        },
        {"role": "tool", "tool_call_id": "r1", "content": long},
        {"role": "tool", "tool_call_id": "i1", "content": image},
    ]
    out = s.prepare(convo)
    assert tool_text(out, "r1") == long
    assert next(m["content"] for m in out if m.get("tool_call_id") == "i1") == image
    assert [e["tool"] for e in preprocessed(s)] == ["query_db"]


def test_text_parts_are_processed_as_one_text(tmp_path: Path) -> None:
    s = Session(make_policy(tmp_path), conv_id="parts")
    convo = conversation()
    convo[3] = {**convo[3], "content": [{"type": "text", "text": psql_table()}]}
    assert tool_text(s.prepare(convo)).startswith("[table_rows: psql, 300 rows")


def test_a_result_without_a_call_id_is_known_by_its_text(tmp_path: Path) -> None:
    s = Session(make_policy(tmp_path), conv_id="noid")
    convo = conversation()
    convo[3] = {"role": "tool", "content": "y" * 5000}
    s.prepare(convo)
    s.prepare(list(convo))
    assert len(preprocessed(s)) == 1


def test_a_prepare_only_loop_sends_what_the_in_process_loop_sends(tmp_path: Path) -> None:
    """The gateway's way (the client keeps raw results, every request passes them all)
    against an agent that passes each result through add_tool_result: same requests,
    and the compactions happen on the same calls."""
    policy = make_policy(
        tmp_path,
        model={"context_window": 8192},
        pipeline=[{"layer": "observation_mask", "at": "warning"}],
    )
    raw_session = Session(policy, conv_id="gw", state_store=MemoryStateStore())
    own_session = Session(
        policy.model_copy(
            update={
                "snapshots": policy.snapshots.model_copy(update={"path": str(tmp_path / "own")})
            }
        ),
        conv_id="gw",
        state_store=MemoryStateStore(),
    )
    client: list[dict[str, Any]] = conversation()[:2]
    agent: list[dict[str, Any]] = list(client)
    for i in range(16):
        tc = call(f"call_{i}", "query_db", json.dumps({"sql": f"select {i}"}))
        step = {"role": "assistant", "content": None, "tool_calls": [tc]}
        raw = psql_table(120 + i)
        client += [step, {"role": "tool", "tool_call_id": tc["id"], "content": raw}]
        text = own_session.add_tool_result(tc, raw)
        agent += [step, {"role": "tool", "tool_call_id": tc["id"], "content": text}]
        assert raw_session.prepare(client) == own_session.prepare(agent), f"call {i}"
    assert raw_session.stats.compactions == own_session.stats.compactions
    assert sum(raw_session.stats.compactions.values()) >= 1
    assert raw_session.stats.tool_results == own_session.stats.tool_results == 16


def _replay_requests(path: Path, policy: Policy, *, raw: bool) -> list[str]:
    """The prepared requests of ``simulate``'s loop over ``path``: tool results through
    ``add_tool_result``, or (``raw``) passed as they are to ``prepare``."""

    class Recording(replay.PolicyStrategy):
        seen: list[str]

        def tool_result(self, call: Mapping[str, Any], content: Any, step: int) -> str:
            return content if raw else super().tool_result(call, content, step)  # type: ignore[no-any-return]

        def prepare(self, convo: list[dict[str, Any]]) -> tuple[list[Any], list[str]]:
            out = super().prepare(convo)
            self.seen.append(json.dumps(out[0], ensure_ascii=False))
            return out

    with tempfile.TemporaryDirectory(prefix="ctxpolicy-arrived-") as tmp:
        store = replay._sim_store(policy, Path(tmp))
        strategy = Recording(policy, conv_id=path.stem[:40], store=store)
        strategy.seen = []
        replay.run_strategy(
            load_trace(path),
            strategy,
            counter=strategy.counter,
            trace=path.stem,
            model=policy.model_name,
        )
        return strategy.seen


#: the shipped policy each kind of trace replays under (one pass over every trace)
KIND_AGENT = {
    "swe": "coding_agent",
    "customer_service": "support_agent",
    "multi_tool": "default",
    "data_analysis": "data_analysis_agent",
}


def test_every_shared_trace_prepares_the_same_requests_on_both_paths() -> None:
    policies = {
        kind: replay.with_window(
            replay.load_policy_file(ROOT / "policies" / "agents.yaml", agent), 16384
        )
        for kind, agent in KIND_AGENT.items()
    }
    seen: set[str] = set()
    for path in shared_traces():
        kind = next((k for k, pre in KINDS.items() if path.name.startswith(pre)), "multi_tool")
        through_add = _replay_requests(path, policies[kind], raw=False)
        arrived = _replay_requests(path, policies[kind], raw=True)
        assert len(through_add) == len(arrived), path.name
        for i, (a, b) in enumerate(zip(through_add, arrived, strict=True)):
            assert a == b, f"{path.name}: prepared request {i} differs"
        seen.add(kind)
    assert seen == set(KIND_AGENT), seen


def test_a_recording_of_the_raw_path_replays_to_the_requests_it_sent(tmp_path: Path) -> None:
    """What the gateway's ``--record`` writes (the raw results the client passed)
    replays through ``simulate``'s loop to the very requests the session sent."""
    policy = make_policy(
        tmp_path,
        model={"context_window": 8192},
        pipeline=[{"layer": "observation_mask", "at": "warning"}],
    )
    trace = tmp_path / "rec.jsonl"
    s = Session(policy, conv_id="rec", record=trace, state_store=MemoryStateStore())
    convo: list[dict[str, Any]] = conversation()[:2]
    sent: list[str] = []
    for i in range(24):
        tc = call(f"call_{i}", "query_db", json.dumps({"sql": f"select {i}"}))
        convo += [
            {"role": "assistant", "content": f"query {i}", "tool_calls": [tc]},
            {"role": "tool", "tool_call_id": tc["id"], "content": psql_table(100 + i)},
        ]
        sent.append(json.dumps(s.prepare(convo), ensure_ascii=False))
    assert s.recorder is not None
    s.recorder.record([*convo, {"role": "assistant", "content": "done"}])
    assert sum(s.stats.compactions.values()) >= 1
    assert _replay_requests(trace, policy, raw=False)[1:] == sent


def test_tool_rules_in_prepare_can_be_turned_off(tmp_path: Path) -> None:
    s = Session(make_policy(tmp_path), conv_id="off", tool_rules_in_prepare=False)
    assert tool_text(s.prepare(conversation())) == psql_table()
    assert preprocessed(s) == [] and s.state.tool_texts == {}
