"""context.status shape and the JSONL sink."""

from __future__ import annotations

import json
import threading

from ctxpolicy.budget import compute_budget
from ctxpolicy.events.sinks import STATUS_FIELDS, JsonlEventSink
from ctxpolicy.policy.models import Policy
from tests.engine_helpers import bare_policy


def _policy(window: int = 120000, reserve: int = 4096) -> Policy:
    return bare_policy("t", window, budget={"reserve_output": reserve})


def budget(window: int = 120000, reserve: int = 4096):
    return compute_budget(_policy(window, reserve))


def test_the_engines_status_event_has_the_fields_in_order():
    """The ``context.status`` the engine emits has every field of STATUS_FIELDS (its
    definition, ctxpolicy/events/types.py), in that order (design A's six first), with
    ``conv_id`` and ``ts`` after ``type``."""
    from ctxpolicy import Session

    b = budget()
    s = Session(_policy(), conv_id="run-42")
    s.prepare([{"role": "user", "content": "hello"}])
    ev = s.status
    assert ev is not None
    assert [k for k in ev if k in STATUS_FIELDS] == list(STATUS_FIELDS)
    assert [k for k in ev if k not in STATUS_FIELDS] == ["conv_id", "ts"]
    assert set(STATUS_FIELDS[:6]) == {"type", "used", "budget", "ratio", "state", "compact_layer"}
    assert ev["type"] == "context.status" and ev["budget"] == ev["trigger"] == b.trigger
    assert ev["state"] == "normal" and ev["compact_layer"] is None
    assert ev["window"] == 120000 and ev["target"] == b.target
    json.dumps(ev)


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
