"""context.status shape and the JSONL sink."""

from __future__ import annotations

import json
import threading

import pytest

from ctxpolicy.budget import compute_budget
from ctxpolicy.events import STATUS_FIELDS, JsonlEventSink, fallback_event, status_event
from ctxpolicy.policy.models import Policy


def budget(window: int = 120000, reserve: int = 4096):
    return compute_budget(
        Policy.model_validate(
            {
                "agent": "t",
                "model": {"context_window": window},
                "budget": {"reserve_output": reserve},
                "thresholds": {},
                "pipeline": [],
                "on_overflow": {"layer": "emergency"},
                "tools": {},
                "snapshots": {},
                "pinned": {},
                "ledger": {},
                "constraints": [],
                "cache": {},
            }
        )
    )


def test_status_event_has_exactly_the_fields():
    b = budget()
    ev = status_event(used=81133, budget=b, tokenizer="tiktoken:cl100k_base", approximate=False)
    assert tuple(ev) == STATUS_FIELDS
    assert set(STATUS_FIELDS[:6]) == {"type", "used", "budget", "ratio", "state", "compact_layer"}
    assert ev["type"] == "context.status"
    assert ev["budget"] == ev["trigger"] == 115904
    assert ev["ratio"] == pytest.approx(81133 / 115904)
    assert ev["state"] == "warning"
    assert ev["compact_layer"] is None
    assert ev["window"] == 120000 and ev["target"] == b.target
    assert ev["approximate"] is False
    json.dumps(ev)


def test_status_event_layer_state_and_extra():
    b = budget()
    ev = status_event(
        used=10,
        budget=b,
        tokenizer="heuristic",
        approximate=True,
        compact_layer="drop_rounds",
        conv_id="run-42",
    )
    assert ev["compact_layer"] == "drop_rounds" and ev["state"] == "normal"
    assert list(ev)[-1] == "conv_id"
    assert (
        status_event(used=200000, budget=b, tokenizer="x", approximate=False)["state"] == "overflow"
    )
    with pytest.raises(ValueError):
        status_event(used=1, budget=b, tokenizer="x", approximate=False, ratio=5)


def test_fallback_event():
    ev = fallback_event("tiktoken:o200k_base", "quicktok:o200k_base", "not cached")
    assert ev == {
        "type": "tokenizer.fallback",
        "wanted": "tiktoken:o200k_base",
        "using": "quicktok:o200k_base",
        "reason": "not cached",
    }


def test_jsonl_sink_appends_flushes_and_is_thread_safe(tmp_path):
    path = tmp_path / "sub" / "events.jsonl"
    sink = JsonlEventSink(path)
    sink({"type": "a", "n": 0, "odd": {1, 2}})
    # flushed: readable before close
    assert json.loads(path.read_text(encoding="utf-8").splitlines()[0])["type"] == "a"

    def work(k: int) -> None:
        for i in range(200):
            sink({"type": "context.status", "thread": k, "i": i, "text": "中文 " * 20})

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 801 and sink.count == 801
    events = [json.loads(x) for x in lines]
    assert sorted((e["thread"], e["i"]) for e in events[1:]) == [
        (k, i) for k in range(4) for i in range(200)
    ]
    with JsonlEventSink(path) as again:  # appends
        again({"type": "b"})
    assert len(path.read_text(encoding="utf-8").splitlines()) == 802
