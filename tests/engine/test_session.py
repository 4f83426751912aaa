"""The Session: pipeline, isolation of layers, sticky decisions, reactive path."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ctxpolicy.components import CompactionContext, Layer, LayerResult
from ctxpolicy.conversation import Unit, check_messages
from ctxpolicy.engine import LEDGER_MARK, ContextOverflowError, Session
from tests.engine_helpers import conversation, make_policy, pad_first_step, plugin_module


class DropOldest(Layer):
    """Drops the oldest unpinned step until the target is met (test layer)."""

    name = "t_drop_oldest"
    calls = 0

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        type(self).calls += 1
        out = list(units)
        dropped = []
        while ctx.count(out) > ctx.target:
            idx = next((i for i, u in enumerate(out) if u.kind == "step" and not u.pinned), None)
            if idx is None:
                break
            dropped.append(out.pop(idx))
        return LayerResult(out, dropped=dropped, report={"dropped": len(dropped)})


class Raises(Layer):
    name = "t_raises"

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        raise RuntimeError("layer bug")


class BreaksPairs(Layer):
    name = "t_breaks_pairs"

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        out = []
        for u in units:
            if u.kind == "step" and len(u.messages) > 1:
                out.append(u.replace(messages=u.messages[:1]))  # tool results removed
            else:
                out.append(u)
        return LayerResult(out)


class Grows(Layer):
    name = "t_grows"

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        return LayerResult(pad_first_step(units, 500))


@pytest.fixture
def test_layers(register_plugin: Callable[[object, str], str]) -> None:
    layers = plugin_module("engine_test_layers", DropOldest, Raises, BreaksPairs, Grows)
    register_plugin(layers, "engine_test_layers")
    DropOldest.calls = 0


def _events(session: Session, type_: str) -> list[dict[str, Any]]:
    return [e for e in session.events if e["type"] == type_]


def test_small_conversation_passes_unchanged() -> None:
    s = Session(make_policy())
    msgs = conversation(2, 100)
    out = s.prepare(msgs)
    assert out == msgs
    st = s.status
    assert st is not None
    assert {"type", "used", "budget", "ratio", "state", "compact_layer"} <= set(st)
    assert st["state"] == "normal" and st["compact_layer"] is None
    assert st["budget"] == 8000 - 1000  # window − reserve_output (max_output_tokens)


def test_pipeline_compacts_to_target_and_records_ledger(test_layers: None) -> None:
    pol = make_policy(pipeline=[{"layer": "t_drop_oldest", "at": "warning", "options": {}}])
    s = Session(pol)
    msgs = conversation(12, 2000)
    before = copy.deepcopy(msgs)
    out = s.prepare(msgs)
    assert msgs == before  # input never mutated
    st = s.status
    assert st is not None
    assert st["compact_layer"] == "t_drop_oldest"
    assert check_messages(out) == []
    assert out[0] == msgs[0] and out[-1] == msgs[-1]
    assert any(m["content"] == msgs[1]["content"] for m in out)  # first user pinned
    assert any(
        isinstance(m.get("content"), str) and m["content"].startswith(LEDGER_MARK) for m in out
    )
    compacted = _events(s, "context.compacted")
    assert compacted and compacted[0]["after"] < compacted[0]["before"]
    assert compacted[0]["plugin"] == "engine_test_layers"


def test_facts_a_layer_masks_away_are_kept_by_the_ledger() -> None:
    pol = make_policy(
        pipeline=[{"layer": "observation_mask", "at": "normal", "options": {"max_age_rounds": 1}}],
        budget={"target": 0.05},
    )
    s = Session(pol)
    msgs = conversation(6, 1200)
    # an id and a path in the middle of an old result, which masking cuts out
    body = msgs[3]["content"]
    msgs[3] = {**msgs[3], "content": body[:600] + " BOOKING-4242 in lib/util.py " + body[600:]}
    out = s.prepare(msgs)
    (compacted,) = _events(s, "context.compacted")
    assert compacted["layer"] == "observation_mask"
    assert {"BOOKING-4242", "lib/util.py"} <= set(compacted["lost_facts"])
    masked = next(m for m in out if m.get("tool_call_id") == msgs[3]["tool_call_id"])
    assert "BOOKING-4242" not in masked["content"]
    (ledger,) = [m["content"] for m in out if str(m.get("content", "")).startswith(LEDGER_MARK)]
    assert "BOOKING-4242" in ledger and "lib/util.py" in ledger


def test_a_summary_stays_in_place_of_what_it_summarized() -> None:
    pol = make_policy(
        pipeline=[{"layer": "summarize", "at": "warning", "options": {"keep_recent_rounds": 2}}]
    )
    s = Session(pol)
    msgs = conversation(12, 1500)
    first = s.prepare(msgs)
    (compacted,) = _events(s, "context.compacted")
    assert compacted["report"]["summarized_units"] >= 10
    msgs2 = [
        *msgs,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go on"},
    ]
    second = s.prepare(msgs2)
    # the summarized rounds do not come back with the next call: it starts from the
    # summary (and the layer, below its threshold now, does not run again)
    assert len(_events(s, "context.compacted")) == 1
    assert not any(m.get("tool_call_id") == "c0_0" for m in second)
    assert second[: len(first) - 1] == first[:-1]
    assert check_messages(second) == []


def test_decisions_are_sticky_across_calls(test_layers: None) -> None:
    pol = make_policy(pipeline=[{"layer": "t_drop_oldest", "at": "warning", "options": {}}])
    s = Session(pol)
    msgs = conversation(12, 2000)
    first = s.prepare(msgs)
    calls_after_first = DropOldest.calls
    msgs2 = [*msgs, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}]
    second = s.prepare(msgs2)
    # the earlier drop is re-applied without running the layer again (below target)
    if s.status and s.status["used"] <= s.budget().target:
        assert DropOldest.calls == calls_after_first
    assert second[: len(first) - 1] == first[:-1]
    assert check_messages(second) == []


@pytest.mark.parametrize(
    "layer,event",
    [
        ("t_raises", "layer.failed"),
        ("t_breaks_pairs", "layer.rejected"),
        ("t_grows", "layer.rejected"),
    ],
)
def test_bad_layers_are_isolated(test_layers: None, layer: str, event: str) -> None:
    pol = make_policy(
        pipeline=[
            {"layer": layer, "at": "warning", "options": {}},
            {"layer": "t_drop_oldest", "at": "warning", "options": {}},
        ]
    )
    s = Session(pol)
    msgs = conversation(12, 2000)
    out = s.prepare(msgs)
    evs = _events(s, event)
    assert len(evs) == 1 and evs[0]["layer"] == layer and evs[0]["plugin"] == "engine_test_layers"
    assert s.stats.layer_failures[layer] == 1
    assert check_messages(out) == []
    assert s.status is not None and s.status["compact_layer"] == "t_drop_oldest"


def test_on_error_ignores_other_errors() -> None:
    s = Session(make_policy())
    assert s.on_error(ValueError("rate limited"), conversation(2, 100)) is None


@pytest.mark.parametrize(
    ("err", "retries"),
    [
        (
            "This model's maximum context length is 8000 tokens. However, your messages "
            "resulted in 9000 tokens.",
            1,
        ),
        ({"error": {"code": "context_length_exceeded", "message": "too long"}}, 2),
    ],
    ids=["message", "code"],
)
def test_on_error_runs_emergency_then_gives_up(err: str | dict[str, Any], retries: int) -> None:
    s = Session(
        make_policy(
            on_overflow={
                "layer": "emergency",
                "options": {"keep_recent_rounds": 2, "retries": retries},
            }
        )
    )
    msgs = conversation(6, 300)
    s.prepare(msgs)
    retry = s.on_error(err, msgs)
    assert retry is not None
    assert check_messages(retry) == []
    steps = [m for m in retry if m["role"] == "assistant"]
    assert len(steps) == 2  # keep_recent_rounds
    for _ in range(retries - 1):
        assert s.on_error(err, msgs) is not None
    with pytest.raises(ContextOverflowError) as info:
        s.on_error(err, msgs)
    assert info.value.attempts == retries + 1
    s.prepare(msgs)  # a new call resets the count
    assert s.on_error(err, msgs) is not None


def test_window_is_learned_from_the_error() -> None:
    s = Session(
        make_policy(
            model={"context_window": 32000, "max_output_tokens": 1000, "tokenizer": "cl100k_base"}
        )
    )
    msgs = conversation(4, 300)
    s.prepare(msgs)
    s.on_error("maximum context length is 6000 tokens", msgs)
    learned = _events(s, "context.window_learned")
    assert learned and learned[0]["window"] == 6000
    assert s.budget().window == 6000


def test_feeding_prepared_output_back_does_not_duplicate_the_ledger(test_layers: None) -> None:
    pol = make_policy(pipeline=[{"layer": "t_drop_oldest", "at": "warning", "options": {}}])
    s = Session(pol)
    out = s.prepare(conversation(12, 2000))
    again = s.prepare([*out, {"role": "user", "content": "next"}])
    ledgers = [
        m
        for m in again
        if isinstance(m.get("content"), str) and m["content"].startswith(LEDGER_MARK)
    ]
    assert len(ledgers) == 1
    assert check_messages(again) == []


def test_observer_callback_gets_every_event() -> None:
    seen: list[dict[str, Any]] = []
    s = Session(make_policy(), on_event=seen.append, conv_id="c1")
    s.prepare(conversation(1, 10))
    assert [e["type"] for e in seen][-1] == "context.status"
    assert all(e["conv_id"] == "c1" for e in seen)


def test_giant_last_result_is_squeezed_to_fit() -> None:
    s = Session(make_policy(pipeline=[]))
    msgs = conversation(1, 60_000)
    out = s.prepare(msgs)
    st = s.status
    assert st is not None
    assert st["used"] <= 8000 - 1000
    assert check_messages(out) == []


def test_ledger_is_trimmed_when_it_alone_breaks_the_window(tmp_path: Any) -> None:
    # a long pinned task leaves ~1,000 tokens; emergency drops 58 rounds, whose facts
    # would make a ~2,900-token ledger
    events: list[dict[str, Any]] = []
    s = Session(
        make_policy(tmp_path, pipeline=[], ledger={"max_tokens": 3000}), on_event=events.append
    )
    msgs = conversation(60, 200)
    msgs[1] = {"role": "user", "content": "Task: fix BUG-1234. " + "word " * 5600}
    out = s.prepare(msgs)
    b = s.budget()
    assert s.status is not None and s.status["used"] <= b.window - b.reserve_output
    assert "context.overflow" not in [e["type"] for e in events]
    (ledger,) = [m["content"] for m in out if str(m.get("content", "")).startswith(LEDGER_MARK)]
    # the archive reference survives the trim: every dropped fact stays recoverable
    assert re.search(r"kept verbatim outside this prompt: ctxsnap://\S+", ledger)
    assert "ctx_recall" not in ledger  # the model is not offered that tool here
    full = s.ledger.render()
    assert full is not None and s.counter.count_text(ledger) < s.counter.count_text(full) / 2
    assert check_messages(out) == []


def test_learned_window_smaller_than_reserve_is_clamped_not_fatal() -> None:
    pol = make_policy(
        model={"context_window": 32000, "max_output_tokens": 4096, "tokenizer": "cl100k_base"},
        budget={"safety_margin": 2000},
    )
    s = Session(pol)
    msgs = conversation(4, 300)
    s.prepare(msgs)
    out = s.on_error("This model's maximum context length is 6000 tokens.", msgs)
    assert out is not None and check_messages(out) == []
    b = s.budget()
    assert b.window == 6000 and b.reserve_output <= 1500 and b.trigger > 0


def test_untouched_results_carry_refs_for_layers(tmp_path: Any) -> None:
    pol = make_policy(
        tmp_path,
        pipeline=[
            {
                "layer": "observation_mask",
                "at": "normal",
                "options": {"max_age_rounds": 1, "max_chars": 100},
            }
        ],
        budget={"target": 0.05},
    )
    s = Session(pol)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
    ]
    for i in range(4):
        c = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "read_file", "arguments": "{}"},
        }
        text = s.add_tool_result(c, f"short result {i} " * 60)
        assert "Full detail available" not in text  # not shortened: no reference line
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [c]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": text},
        ]
    out = s.prepare(msgs)
    masked = [m for m in out if m.get("role") == "tool" and "Full detail available" in m["content"]]
    assert masked, "masking an old result must add its snapshot reference"
    from ctxpolicy.engine.tool_results import parse_reference

    (ref,) = parse_reference(masked[0]["content"])
    assert s.recall(ref).startswith("short result 0")


def test_dropped_history_is_archived_verbatim_and_referenced(
    tmp_path: Any, test_layers: None
) -> None:
    pol = make_policy(
        tmp_path, pipeline=[{"layer": "t_drop_oldest", "at": "warning", "options": {}}]
    )
    s = Session(pol)
    msgs = conversation(12, 2000)
    msgs[2]["content"] = "I think the bug is in src/app.py line 42 (BUG-1234)."
    out = s.prepare(msgs)
    assert msgs[2] not in out  # the first round was dropped
    ledger = next(m["content"] for m in out if str(m.get("content", "")).startswith(LEDGER_MARK))
    (ref,) = re.findall(r"kept verbatim outside this prompt: (ctxsnap://\S+)", ledger)
    history = s.recall(ref)
    assert "I think the bug is in src/app.py line 42 (BUG-1234)." in history
    assert "→ call read_file" in history


def test_incremental_grouping_equals_grouping_from_scratch() -> None:
    """A growing conversation (and in-place edits) gives what a fresh session gives."""
    pol = make_policy(
        model={"context_window": 200_000, "max_output_tokens": 1000, "tokenizer": "cl100k_base"}
    )
    grown = Session(pol)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
    ]
    for i in range(6):
        c = {"id": f"k{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        msgs.append({"role": "assistant", "content": f"r{i}", "tool_calls": [c]})
        assert grown.prepare(msgs) == Session(pol).prepare(msgs)  # call still unanswered
        msgs.append({"role": "tool", "tool_call_id": f"k{i}", "content": f"out {i}"})
        assert grown.prepare(msgs) == Session(pol).prepare(msgs)
    msgs[3]["content"] = "edited in place"  # a tool result rewritten by the agent
    out = grown.prepare(msgs)
    assert out == Session(pol).prepare(msgs) and any(
        m.get("content") == "edited in place" for m in out
    )


def test_entry_state_decides_which_layers_run(no_fact_price: None) -> None:
    """A compaction that starts at warning runs every warning layer down to the
    target, never the error layer; with target == warning it stops under warning."""
    pipeline = [
        {"layer": "observation_mask", "at": "warning", "options": {"max_age_rounds": 1}},
        {
            "layer": "drop_rounds",
            "at": "warning",
            "options": {"keep_recent_rounds": 1, "min_keep_tokens": 0},
        },
        {"layer": "summarize", "at": "error", "options": {"summarizer": "extractive"}},
    ]
    for target in (0.4, 0.7):
        pol = make_policy(
            model={"context_window": 9000, "max_output_tokens": 500, "tokenizer": "cl100k_base"},
            budget={"reserve_output": 1000, "tool_growth": 0, "safety_margin": 0, "target": target},
            thresholds={"warning": 0.7, "error": 0.9, "critical": 0.95},
            pipeline=pipeline,
        )
        s = Session(pol)
        msgs = conversation(40, 300)
        b = s.budget()
        n = next(
            k for k in range(4, len(msgs)) if s.counter.count_messages(msgs[:k]) >= b.warning_tokens
        )
        s.prepare(msgs[:n])  # enters at warning (below error)
        layers = [e["layer"] for e in _events(s, "context.compacted")]
        assert "summarize" not in layers and layers, layers
        assert s.status is not None
        # at the target, or the kept round and pinned content alone are above it
        assert s.status["used"] <= b.target or _events(s, "context.above_target")
        assert s.status["used"] < b.warning_tokens


def test_a_tool_call_id_for_the_call_is_a_clear_error(tmp_path) -> None:
    """``add_tool_result("call_1", out)`` silently got the ``*`` rule (issue 31 item 7)."""
    s = Session(make_policy())
    for cid in ("call_1", "toolu_01A2b3", "call_abc123XYZ", "fc_68a1", "adk-4f2a-11"):
        with pytest.raises(ValueError, match=r"looks like a tool call id.*pass the tool call"):
            s.add_tool_result(cid, "out")
    assert s.add_tool_result("read_file", "out") == "out"  # a tool name is fine
    assert s.add_tool_result("call_api", "out") == "out"  # a name without a digit too
    named = make_policy(
        tools={"call_v2": {"preprocess": "head_tail"}, "*": {"preprocess": "head_tail"}}
    )
    assert Session(named).add_tool_result("call_v2", "out") == "out"  # a rule names it


def test_recall_answers_are_sized_from_the_budget(tmp_path) -> None:
    """A recall answer is capped by the budget's tool growth, not a fixed 20,000
    characters (issue 31 item 7: one grep took a context from 6,778 to 15,479 tokens)."""
    from ctxpolicy.snapshots.recall import answer_chars

    big = "\n".join(f"line {i}: value_{i} = compute({i})" for i in range(6000))
    sizes = {}
    for growth in (600, 12000):
        pol = make_policy(
            tmp_path / str(growth),
            budget={"tool_growth": growth},
            model={"context_window": 200_000},
        )
        s = Session(pol)
        text = s.add_tool_result({"id": "c1", "name": "read_file"}, big)
        ref = re.findall(r"ctxsnap://[^\s)\]]+", text)[-1]
        answer = s.recall_tool()[1]("ctx_recall", {"ref": ref})
        cap = answer_chars(s.budget().tool_growth)
        assert len(answer) <= cap + 100 < len(big)  # + the omission marker
        sizes[growth] = len(answer)
    assert answer_chars(600) == 2400 and answer_chars(12000) == 48000
    assert sizes[600] < 2600 and sizes[12000] > 40000
