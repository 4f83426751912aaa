"""The thrash guard (docs/engine.md, "No thrash"): over synthetic conversations of
every shape — many medium results, one huge result, a fat pinned prefix, a tiny
window — prefix rewrites stay at most 12 per 100 calls, and no request that could
fit goes out over ``window − reserve_output``."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import check_messages
from ctxpolicy.engine import Session
from ctxpolicy.engine.economics import (
    GUARD,
    MIN_ROOM_CALLS,
    REFILL_CALLS,
    Guard,
    fit_limit,
    short_room,
)
from tests.engine_helpers import call, make_policy

Message = dict[str, Any]

#: The bound the issue sets for every kind of agent and window.
MAX_REWRITES_PER_100 = 12

PIPELINE = [
    {"layer": "observation_mask", "at": "warning", "options": {"max_age_rounds": 2}},
    {
        "layer": "summarize",
        "at": "warning",
        "options": {
            "summarizer": "extractive",
            "keep_recent_rounds": 1,
            "max_summary_tokens": "5%",
        },
    },
    {"layer": "drop_rounds", "at": "warning", "options": {"keep_recent_rounds": 2}},
]

WORDS = ["alpha", "beta", "src/app.py", "BUG-7", "line 42", "retry", "config.yaml", "ok", "42"]


def _body(rng_words: list[str], chars: int) -> str:
    text = " ".join(rng_words) or "ok"
    return (text + "\n") * (chars // (len(text) + 1) + 1)


@st.composite
def shapes(draw: Any) -> tuple[str, int, int, list[int], int]:
    """``(shape, window, system_chars, result sizes in characters, user every)``.

    Every shape leaves room for about ten calls between the fit limit and what a
    compaction must keep (a call adds at most ~1/16 of the window): below that no
    policy can compact less often than every few calls, whatever it does.
    """
    shape = draw(st.sampled_from(["medium", "huge_once", "fat_pinned", "tiny_window"]))
    calls = draw(st.integers(60, 110))
    window = draw(st.sampled_from([8192, 16384, 32768]))
    system = 200
    per_call = window * 3 // 16  # characters: ~window/16 tokens of these words
    if shape == "medium":  # many medium results (a data-analysis agent)
        window = draw(st.sampled_from([16384, 32768]))
        sizes = [draw(st.integers(1500, 4000)) for _ in range(calls)]
    elif shape == "huge_once":  # one result far above the window
        sizes = [draw(st.integers(200, min(3000, per_call))) for _ in range(calls)]
        sizes[draw(st.integers(0, calls - 1))] = draw(st.integers(60_000, 200_000))
    elif shape == "fat_pinned":  # the system prompt takes half the window
        system = int(window * draw(st.floats(1.2, 1.8)))  # ~0.4-0.6 of the window in tokens
        sizes = [draw(st.integers(100, per_call // 4)) for _ in range(calls)]
    else:  # a tiny window and small results
        window = draw(st.sampled_from([2048, 3072, 4096]))
        sizes = [draw(st.integers(50, window * 3 // 16)) for _ in range(calls)]
    user_every = draw(st.integers(3, 12))
    return shape, window, system, sizes, user_every


def _policy(window: int) -> Any:
    return make_policy(
        model={"context_window": window, "max_output_tokens": 1000, "tokenizer": "cl100k_base"},
        budget={
            "reserve_output": "10%",
            "tool_growth": {"learn": {"quantile": 0.95, "window": 20}, "initial": "8%"},
            "safety_margin": "3%",
            "target": 0.5,
        },
        thresholds={"warning": 0.8, "error": 0.9, "critical": 0.95},
        ledger={"max_tokens": "4%"},
        pipeline=PIPELINE,
    )


def replay(window: int, system: int, sizes: list[int], user_every: int) -> dict[str, int]:
    """The loop of ``ctxpolicy simulate``: a result through ``add_tool_result``,
    ``prepare`` before every model call; prefix rewrites, overflows, calls."""
    s = Session(_policy(window))
    msgs: list[Message] = [
        {"role": "system", "content": _body(WORDS, system)[:system]},
        {"role": "user", "content": "Fix BUG-7 in src/app.py; keep config.yaml unchanged."},
    ]
    previous: list[Message] = []
    rewrites = overflows = 0
    b = s.budget()
    hard = b.window - b.reserve_output
    for n, chars in enumerate(sizes):
        out = s.prepare(msgs)
        assert not check_messages(out)
        used = s.status["used"] if s.status else 0
        floor = s.counter.count_messages(msgs[:2] + msgs[-1:])
        if used > hard and floor <= hard:
            overflows += 1
        if previous and out[: len(previous)] != previous:
            rewrites += 1
        previous = out
        c = call(f"c{n}", "run", step=n)
        msgs.append({"role": "assistant", "content": f"step {n}: run", "tool_calls": [c]})
        words = [WORDS[(n + i) % len(WORDS)] for i in range(5)]
        text = s.add_tool_result(c, _body(words, chars)[:chars])
        msgs.append({"role": "tool", "tool_call_id": c["id"], "content": text})
        if n % user_every == user_every - 1:
            msgs.append({"role": "user", "content": f"also check line {n}"})
    return {"rewrites": rewrites, "overflows": overflows, "calls": len(sizes)}


@settings(
    max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(shapes())
def test_prefix_rewrites_per_100_calls_are_bounded(
    shape: tuple[str, int, int, list[int], int],
) -> None:
    kind, window, system, sizes, user_every = shape
    got = replay(window, system, sizes, user_every)
    assert got["overflows"] == 0, (kind, got)
    assert 100 * got["rewrites"] / got["calls"] <= MAX_REWRITES_PER_100, (kind, window, got)


def test_a_refill_within_a_few_calls_is_held_once(no_fact_price: None) -> None:
    """Results as large as the target-to-trigger band: the compaction after the first
    is due at once, or would leave room for too few calls; it is held (one event)
    until the request would not fit."""
    got = replay(8192, 200, [5000] * 40, 50)
    assert got["overflows"] == 0
    s = Session(_policy(8192))
    msgs: list[Message] = [
        {"role": "system", "content": "You are a test agent."},
        {"role": "user", "content": "Task: BUG-7."},
    ]
    held = 0
    for n in range(40):
        s.prepare(msgs)
        held = sum(1 for e in s.events if e["type"] == "context.compaction_held")
        c = call(f"c{n}", "run", step=n)
        msgs.append({"role": "assistant", "content": f"step {n}", "tool_calls": [c]})
        msgs.append({"role": "tool", "tool_call_id": c["id"], "content": "x " * 2500})
    events = [e for e in s.events if e["type"] == "context.compaction_held"]
    assert events and held == len(events)
    for e in events:  # each says why (refilled, or too little room) and until when
        assert 0 < e["calls_since"] <= REFILL_CALLS or e["room_calls"] < MIN_ROOM_CALLS
        assert e["resume_at"] == fit_limit(s.budget()) + 1
    # never two held events in a row without a compaction between them
    compacted = [i for i, e in enumerate(s.events) if e["type"] == "context.compacted"]
    held_at = [i for i, e in enumerate(s.events) if e["type"] == "context.compaction_held"]
    for a, b in itertools.pairwise(held_at):
        assert any(a < i < b for i in compacted)


def test_guard_memory_survives_a_resume_and_garbage() -> None:
    memory: dict[str, dict[str, Any]] = {}
    g = Guard(memory)
    assert g.observe(10, 1000, None) and not g.observe(10, 1200, 900)
    assert g.per_call() is None
    g.observe(11, 1300, 1000)
    g.observe(12, 1500, 1300)
    assert g.per_call() == 250
    g.compacted(12)
    assert g.refilled(13) == 1 and g.refilled(12 + REFILL_CALLS + 1) is None
    # a stored slot that is not the guard's reads as empty, never raises
    for junk in ("x", [1], {"grow": "no", "last": "12", "seen": None}, {"grow": [-5, "a", 3]}):
        memory = {GUARD: junk}  # type: ignore[dict-item]
        g = Guard(memory)
        assert g.refilled(13) is None
        assert g.per_call() in (None, 3)
        g.observe(1, 10, 5)


def test_a_compaction_leaving_too_little_room_waits_for_the_fit_limit() -> None:
    """A fat pinned first message (a web agent's first page) and results of ~1/12 of
    the window each: a compaction that would leave room for fewer than MIN_ROOM_CALLS
    calls before the fit limit is held there (one event with the numbers); every
    compaction after a hold starts above the fit limit, and no request goes out over
    ``window - reserve_output``."""
    s = Session(_policy(8192))
    msgs: list[Message] = [
        {"role": "system", "content": "You are a web agent."},
        {"role": "user", "content": _body(WORDS, 8000)},
    ]
    for n in range(40):
        s.prepare(msgs)
        c = call(f"c{n}", "click", step=n)
        msgs.append({"role": "assistant", "content": f"step {n}: click", "tool_calls": [c]})
        words = [WORDS[(n + i) % len(WORDS)] for i in range(5)]
        text = s.add_tool_result(c, _body(words, 3000))
        msgs.append({"role": "tool", "tool_call_id": c["id"], "content": text})
    b = s.budget()
    fit = fit_limit(b)
    events = list(s.events)
    held = [i for i, e in enumerate(events) if e["type"] == "context.compaction_held"]
    assert held
    for i in held:
        e = events[i]
        assert e["room_calls"] < MIN_ROOM_CALLS and e["resume_at"] == fit + 1
        assert e["used"] <= fit and e["growth_per_call"] > 0
        after = [x for x in events[i:] if x["type"] == "context.compacted"]
        assert after and after[0]["before"] > fit
    sent = [e["used"] for e in s.events if e["type"] == "context.status"]
    assert max(sent) <= b.window - b.reserve_output


def test_short_room() -> None:
    s = Session(_policy(16384))
    b = s.budget()
    assert not short_room(b, 0, None)
    assert short_room(b, fit_limit(b) - MIN_ROOM_CALLS * 100 + 1, 100)
    assert not short_room(b, fit_limit(b) - MIN_ROOM_CALLS * 100, 100)
