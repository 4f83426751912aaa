"""The views folded from events: a real Session's events, and invariants of the fold."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy import Session
from ctxpolicy.observe.views import MAX_NAME, Views, price_of
from tests.engine_helpers import conversation, make_policy


def status(conv: str, used: int, tokens_in: int, layer: str | None = None, **kw: Any) -> dict:
    return {
        "type": "context.status",
        "conv_id": conv,
        "ts": kw.pop("ts", 100.0),
        "used": used,
        "budget": 5000,
        "window": 8000,
        "tokens_in": tokens_in,
        "state": "normal",
        "compact_layer": layer,
        "duration_ms": 1.5,
        **kw,
    }


def test_a_real_session(tmp_path: Path) -> None:
    views = Views(models={"coder": "gpt-4o"})
    session = Session(make_policy(tmp_path), conv_id="run-1", on_event=views.observer("coder"))
    for rounds in (2, 6, 12, 30, 31):
        session.prepare(conversation(rounds, 2500))
    data = views.snapshot()
    (conv,) = data["conversations"]
    events = list(session.events)
    statuses = [e for e in events if e["type"] == "context.status"]
    compacted = [e for e in events if e["type"] == "context.compacted"]
    assert compacted
    assert conv["agent"] == "coder" and conv["model"] == "gpt-4o" and conv["price"] == "gpt-4o"
    assert conv["calls"] == len(statuses) == len(conv["series"])
    assert [p[2] for p in conv["series"]] == [e["used"] for e in statuses]
    assert sum(conv["compactions"].values()) == len(compacted)
    assert len(conv["marks"]) == len(compacted)
    compacting_calls = {i for i, e in enumerate(statuses) if e["compact_layer"]}
    assert {m[0] for m in conv["marks"]} <= compacting_calls
    assert conv["saved"] == sum(e["tokens_in"] - e["used"] for e in statuses) > 0
    assert conv["cache_read"] + conv["cache_write"] == conv["sent"]
    assert conv["none_read"] + conv["none_write"] == conv["tokens_in"]
    assert conv["usd_saved"] > 0
    assert data["totals"]["calls"] == conv["calls"]
    assert data["agents"][0]["agent"] == "coder"


def test_prices_from_the_catalogue() -> None:
    name, p_in, p_cached = price_of("gpt-4o")
    assert name == "gpt-4o" and p_in == 2.5e-6 and p_cached == 1.25e-6
    assert price_of("no-such-model")[0] == "default"
    assert price_of(None)[0] == "default"


def test_cache_estimate_after_a_compaction_reads_only_the_kept_prefix() -> None:
    views = Views()
    views.add(status("c", 1000, 1000))
    views.add(status("c", 1500, 1500))  # appended: the first 1000 read
    views.add(
        {
            "type": "context.compacted",
            "conv_id": "c",
            "ts": 1.0,
            "layer": "drop_rounds",
            "before": 2000,
            "after": 900,
            "prefix_tokens": 300,
        }
    )
    views.add(status("c", 900, 2000, "drop_rounds"))  # rewritten after 300 tokens
    views.add(status("c", 1200, 2300))
    (c,) = views.snapshot()["conversations"]
    assert c["cache_read"] == 0 + 1000 + 300 + 900
    assert c["cache_write"] == c["sent"] - c["cache_read"]
    assert c["none_read"] == 0 + 1000 + 1500 + 2000
    assert c["marks"] == [[2, "drop_rounds", 2000, 900]]
    assert c["freed"] == 1100 and c["compactions"] == {"drop_rounds": 1}


def test_names_only_and_bounded_strings() -> None:
    views = Views()
    secret = "sk-proj-" + "A1b2C3d4" * 5
    views.add(status("c" * 5000, 10, 10, "x" * 5000))
    views.add({"type": "layer.failed", "conv_id": "c" * 5000, "layer": "l", "error": secret})
    views.add(
        {
            "type": "context.compacted",
            "conv_id": "c" * 5000,
            "layer": "l",
            "before": 5,
            "after": 1,
            "lost_facts": [secret],
            "report": {"summary": secret},
        }
    )
    views.add({"type": "context.overflow_error", "conv_id": "c" * 5000, "error": secret})
    text = json.dumps(views.snapshot())
    assert secret not in text
    (c,) = views.snapshot()["conversations"]
    assert len(c["id"]) == MAX_NAME and len(c["series"][0][7]) == MAX_NAME
    assert c["failures"] == 1 and c["retries"] == 1


def test_hostile_values_do_not_break_the_fold() -> None:
    views = Views()
    for bad in (None, "12", [], {}, float("nan"), float("inf"), True, 10**30):
        views.add(status("c", bad, bad, ts=bad))  # type: ignore[arg-type]
        views.add({"type": "context.compacted", "conv_id": "c", "before": bad, "after": bad})
    views.add({"type": "context.status"})  # no conversation: ignored
    views.add({"type": 3, "conv_id": "c"})  # type: ignore[dict-item]
    views.add({"conv_id": "c"})
    data = views.snapshot()
    json.dumps(data, allow_nan=False)
    assert data["conversations"][0]["calls"] == 8


def test_memory_is_bounded() -> None:
    views = Views(max_conversations=3, max_points=5, max_marks=2)
    for i in range(10):
        views.add(status(f"c{i}", 10, 10))
    for _ in range(20):
        views.add(
            {"type": "context.compacted", "conv_id": "c9", "layer": "l", "before": 2, "after": 1}
        )
        views.add(status("c9", 10, 10, "l"))
    data = views.snapshot()
    assert data["conversations"][0]["id"] == "c9"
    assert data["totals"]["conversations"] == 3 and data["forgotten"] == 7
    c9 = data["conversations"][0]
    assert len(c9["series"]) == 5 and len(c9["marks"]) == 2
    assert c9["calls"] == 21 and c9["compactions"] == {"l": 20}
    assert len(views.snapshot(limit=1)["conversations"]) == 1


def test_threads() -> None:
    views = Views()

    def work(k: int) -> None:
        for i in range(500):
            views.add(status(f"c{k}", i, i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = views.snapshot()
    assert data["totals"]["calls"] == 2000 and data["events"] == 2000


calls = st.lists(
    st.tuples(
        st.integers(0, 200_000),
        st.integers(0, 200_000),
        st.none() | st.sampled_from(["drop_rounds", "summarize"]),
        st.none() | st.integers(0, 200_000),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(calls)
def test_invariants(seq: list[tuple[int, int, str | None, int | None]]) -> None:
    views = Views()
    for used, extra, layer, prefix in seq:
        if layer is not None:
            ev: dict[str, Any] = {
                "type": "context.compacted",
                "conv_id": "c",
                "layer": layer,
                "before": used + extra,
                "after": used,
            }
            if prefix is not None:
                ev["prefix_tokens"] = prefix
            views.add(ev)
        views.add(status("c", used, used + extra, layer))
    data = views.snapshot()
    t = data["totals"]
    assert t["cache_read"] + t["cache_write"] == t["sent"]
    assert t["none_read"] + t["none_write"] == t["tokens_in"]
    assert 0 <= t["cache_read"] <= t["sent"]
    assert t["saved"] == t["tokens_in"] - t["sent"] >= 0
    assert t["calls"] == len(seq)
    assert t["compactions"] == sum(1 for s in seq if s[2])
    json.dumps(data, allow_nan=False)
