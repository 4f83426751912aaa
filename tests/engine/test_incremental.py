"""The engine's per-call caches (input snapshots, grouping, pinning, rendered view,
budget) never change what ``prepare`` returns: a session is compared, call by call,
with a twin whose caches are dropped before every call (same decisions, no reuse)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import check_messages
from ctxpolicy.engine import LEDGER_MARK, Session
from tests.engine_helpers import call, make_policy
from tests.helpers_conv import DEEP, hostile_messages

Message = dict[str, Any]

PIPELINE = [
    {"layer": "observation_mask", "at": "warning", "options": {"max_age_rounds": 2}},
    {"layer": "drop_rounds", "at": "warning", "options": {"keep_recent_rounds": 2}},
    {"layer": "summarize", "at": "error", "options": {"summarizer": "extractive"}},
]
COMPACTED: list[int] = []

WORDS = ["alpha", "beta", "src/app.py", "BUG-7", "line 42", "retry", "config.yaml", "ok"]


def _text(draw: Any, lo: int, hi: int) -> str:
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=lo, max_size=hi)))


def _uncached(s: Session) -> None:
    caches = s.internals.context.derived.caches
    caches.inputs = caches.groups = caches.pins = caches.views = None
    s.internals.context.derived.budgets.clear()


@st.composite
def operations(draw: Any) -> list[tuple[str, Any]]:
    ops: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(12, 30))):
        kind = draw(
            st.sampled_from(
                [
                    *("step", "step", "step", "user", "edit", "edit_args", "drop", "own"),
                    *("same", "malformed", "malformed"),
                ]
            )
        )
        ops.append((kind, (_text(draw, 1, 60), draw(st.integers(0, 10_000)))))
    return ops


def _apply(msgs: list[Any], kind: str, arg: tuple[str, int], n: int) -> None:
    text, pick = arg
    last = msgs[-1]
    if isinstance(last, dict) and isinstance(last.get("tool_calls"), list) and kind != "same":
        msgs.extend(  # results that arrive a call later
            {"role": "tool", "tool_call_id": c.get("id"), "content": text}
            for c in last["tool_calls"]
            if isinstance(c, dict)
        )
    if kind == "step":
        calls = [
            {"id": f"c{n}_{j}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            for j in range(1 + pick % 2)
        ]
        msgs.append({"role": "assistant", "content": text[:40], "tool_calls": calls})
        if pick % 5:  # sometimes the results arrive only at the next call
            out = f"{text} " * 8  # tool output: the bulk of the context
            msgs.extend({"role": "tool", "tool_call_id": c["id"], "content": out} for c in calls)
    elif kind == "user":
        msgs.append({"role": "user", "content": text})
    elif kind == "malformed":
        # deeper than the interpreter's recursion limit and the engine's MAX_DEPTH; not
        # 5,000 deep: the uncached twin re-reads every deep value on every call
        msgs.extend(hostile_messages(text, pick, n, msgs, depth=1_500))
    elif kind == "edit" and len(msgs) > 2:
        target = msgs[2 + pick % (len(msgs) - 2)]
        if isinstance(target, dict):
            target["content"] = f"edited {text}"  # in place
    elif kind == "edit_args":
        with_calls = [
            m
            for m in msgs
            if isinstance(m, dict)
            and isinstance(m.get("tool_calls"), list)
            and m["tool_calls"]
            and isinstance(m["tool_calls"][0], dict)
            and isinstance(m["tool_calls"][0].get("function"), dict)
        ]
        if with_calls:  # a nested value edited in place
            with_calls[pick % len(with_calls)]["tool_calls"][0]["function"]["arguments"] = (
                "{}" + text
            )
    elif kind == "drop" and len(msgs) > 3:
        del msgs[2 + pick % (len(msgs) - 2)]
    elif kind == "own":  # the agent feeds our ledger back in
        msgs.append({"role": "system", "content": f"{LEDGER_MARK}\nold"})


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(operations(), st.sampled_from([1_200, 1_200, 2_000, 200_000]))
def test_cached_calls_equal_uncached_calls(ops: list[tuple[str, Any]], window: int) -> None:
    pol = make_policy(
        model={"context_window": window, "max_output_tokens": 200, "tokenizer": "cl100k_base"},
        budget={"reserve_output": 200, "tool_growth": 0, "safety_margin": 50},
        pipeline=PIPELINE,
    )
    cached, fresh = Session(pol, conv_id="a"), Session(pol, conv_id="a")
    msgs: list[Message] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix BUG-7 in src/app.py."},
    ]
    for n, (kind, arg) in enumerate(ops):
        _apply(msgs, kind, arg, n)
        _uncached(fresh)
        # values too deep for deepcopy are shared (nothing edits them)
        shared = {id(v): v for v in DEEP.values()}
        got, want = cached.prepare(msgs), fresh.prepare(copy.deepcopy(msgs, shared))
        assert got == want, f"call {n} ({kind}) differs"
        assert not check_messages(got), f"call {n} ({kind}): pairs broken"
        assert cached.status is not None and fresh.status is not None
        for field in ("used", "tokens_in", "state", "trigger", "messages"):
            assert cached.status[field] == fresh.status[field], field
    COMPACTED.append(sum(cached.stats.compactions.values()))


def test_the_property_above_saw_compactions() -> None:
    """Guards the oracle: the examples must exercise sticky decisions and the ledger."""
    if not COMPACTED:
        test_cached_calls_equal_uncached_calls()
    assert sum(1 for n in COMPACTED if n) >= 10, (
        f"{sum(1 for n in COMPACTED if n)} of {len(COMPACTED)}"
    )


def test_repeated_call_on_a_long_conversation_reuses_its_units() -> None:
    """A call with nothing new regroups at most the last unit (no full re-grouping)."""
    pol = make_policy(
        model={"context_window": 200_000, "max_output_tokens": 1000, "tokenizer": "cl100k_base"}
    )
    s = Session(pol)
    msgs: list[Message] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    for i in range(50):
        msgs.append({"role": "assistant", "content": f"step {i}"})
        msgs.append({"role": "user", "content": f"observation {i}"})
    s.prepare(msgs)
    assert s.internals.context.derived.caches.groups is not None
    before = list(s.internals.context.derived.caches.groups.units)
    s.prepare(msgs)
    after = s.internals.context.derived.caches.groups.units
    assert all(a is b for a, b in zip(before, after, strict=True))


def test_removing_a_call_makes_its_results_orphans_of_the_step_before() -> None:
    """Tool results moved up against an earlier step by a removal join its group, as
    when grouping from scratch (the earlier step's cached unit is not reused)."""
    pol = make_policy(
        model={"context_window": 200_000, "max_output_tokens": 1000, "tokenizer": "cl100k_base"}
    )
    msgs: list[Message] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    for i in range(3):
        msgs.append(
            {
                "role": "assistant",
                "content": f"step {i}",
                "tool_calls": [
                    {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": ""}}
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i}"})
    cached = Session(pol)
    cached.prepare(msgs)
    del msgs[4]  # the call of c1: its result now follows step 0's result
    fresh = Session(pol)
    assert cached.prepare(msgs) == fresh.prepare(copy.deepcopy(msgs))
    assert (
        cached.internals.context.derived.caches.groups is not None
        and fresh.internals.context.derived.caches.groups is not None
    )
    assert [u.key for u in cached.internals.context.derived.caches.groups.units] == [
        u.key for u in fresh.internals.context.derived.caches.groups.units
    ]


def test_a_plain_call_counts_the_prepared_list_from_the_prefix_sums() -> None:
    """A call that compacts nothing takes its count from the grouping's and the cached
    view's prefix sums: the token counter never walks the prepared list again, and
    the count is the one ``count_messages`` gives (issue 32)."""
    pol = make_policy(
        model={"context_window": 200_000, "max_output_tokens": 1000, "tokenizer": "cl100k_base"}
    )
    s = Session(pol)
    msgs: list[Message] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    walked: list[int] = []
    real = s.counter.count_messages

    def count_messages(ms: Any) -> int:
        walked.append(len(ms))
        return real(ms)

    s.counter.count_messages = count_messages  # type: ignore[method-assign]
    for i in range(40):
        msgs.append({"role": "assistant", "content": f"step {i}"})
        msgs.append({"role": "user", "content": f"observation {i} of src/app.py"})
        walked.clear()
        out = s.prepare(msgs)
        assert s.status is not None
        assert s.status["used"] == real(out)
        if i:  # the first call builds the caches
            assert max(walked, default=0) <= 2, walked


def test_a_rebuilt_view_counts_its_originals_from_the_prefix_sums() -> None:
    """A view built afresh (the caches dropped, decisions and a ledger in force) counts
    the original units kept from the grouping's prefix sums and only the units of ours
    (decided, ledger) with the counter: the same number as ``count_messages``."""
    pol = make_policy(
        model={"context_window": 6000, "max_output_tokens": 200, "tokenizer": "cl100k_base"},
        budget={"reserve_output": 200, "tool_growth": 0, "safety_margin": 50},
        pipeline=PIPELINE,
    )
    s = Session(pol)
    msgs: list[Message] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    for i in range(60):
        msgs.append({"role": "assistant", "content": f"step {i} " + "src/app.py " * 20})
        msgs.append({"role": "user", "content": f"observation {i} BUG-{i} " * 20})
        s.prepare(msgs)
    assert s.state.decisions and s.ledger is not None
    real = s.counter.count_messages
    walked: list[int] = []

    def count_messages(ms: Any) -> int:
        walked.append(len(ms))
        return real(ms)

    s.counter.count_messages = count_messages  # type: ignore[method-assign]
    s.prepare(msgs)  # the same call with every cache in place
    cached, walked[:] = list(walked), []
    _uncached(s)
    out = s.prepare(msgs)
    assert s.status is not None and s.status["compact_layer"] is None
    assert s.status["used"] == real(out)
    # the view itself walks nothing: whatever is counted is what the cached call counts
    # too (a layer tried and refused below the fit limit counts its own candidates)
    assert walked == cached, (walked, cached)


def test_a_compacting_call_leaves_the_view_cache_of_its_decisions() -> None:
    """A compaction builds the view cache of its new decisions before it returns, so the
    calls after it that compact nothing render only their new units (no pass over the
    whole conversation on the first call after each compaction)."""
    pol = make_policy(
        model={"context_window": 6000, "max_output_tokens": 200, "tokenizer": "cl100k_base"},
        budget={"reserve_output": 200, "tool_growth": 0, "safety_margin": 50},
        pipeline=PIPELINE,
    )
    s = Session(pol)
    caches = s.internals.context.derived.caches
    msgs: list[Message] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    compactions = 0
    for i in range(60):
        msgs.append(
            {"role": "assistant", "content": f"step {i}", "tool_calls": [call(f"c{i}", "bash")]}
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i} " * 60})
        s.prepare(msgs)
        assert s.status is not None
        if s.status["compact_layer"] is not None:
            compactions += 1
            assert caches.views is not None
            assert caches.views.key[0] == s.state.decisions_version
    assert compactions >= 2


def test_the_view_cache_follows_the_pinning_without_copies() -> None:
    """A plain call checks the cached view's units by identity (the pinning kept them)
    and extends the cache in place; a new user turn that moves the pinned last user
    turn is seen (the cache then holds the re-pinned units)."""
    s = Session(make_policy())
    caches = s.internals.context.derived.caches
    msgs: list[Message] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    for i in range(12):
        msgs.append({"role": "assistant", "content": f"step {i}"})
        msgs.append(
            {"role": "user", "content": f"next {i}"}
            if i % 4 == 3
            else {"role": "assistant", "content": f"more {i}"}
        )
        out = s.prepare(msgs)
        c, pins = caches.views, caches.pins
        assert c is not None and pins is not None
        assert c.checked == caches.pin_calls
        assert c.originals == pins.units[: c.upto]
        fresh = Session(make_policy())
        assert out == fresh.prepare(msgs)
