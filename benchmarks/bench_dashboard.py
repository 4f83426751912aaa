"""What the gateway's dashboard costs a prepared call when it is enabled.

Usage::

    python benchmarks/bench_dashboard.py [--rounds 5] [--quick]

With ``--dashboard`` every session's events go to the dashboard's views
(:class:`ctxpolicy.observe.views.Views`, the sessions' ``on_event``); that is the
only work the page adds to a call (the page's polls read the views in a worker
thread). Measured three ways in one run:

1. **replay, paired per call**: a real trace replayed the way ``simulate`` does
   (``prepare`` before every assistant message) through two sessions in lockstep,
   (a) without an observer and (b) with the dashboard's observer, each call timed on
   both, the order alternating: the ratio of the sums (b) ÷ (a) and the median of
   (b − a) over every call of every round (pairs taken microseconds apart, so the
   machine's load cancels out);
2. **the fold alone**: the replay's own events folded into fresh views, many times:
   the observer's time per prepare, without the replay's noise around it;
3. **a poll**: one snapshot of views holding 1,000 conversations of 100 calls each
   (what ``/dashboard/api`` computes every 2 s while a page is open), off the call path.

Writes benchmarks/results/bench_dashboard.{json,md}.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    eprint,
    header_markdown,
    machine,
    markdown_table,
    publish,
    replay_args,
)
from ctxpolicy.observe.views import Views
from ctxpolicy.sim.replay import load_policy_file

ROOT = Path(__file__).resolve().parents[1]
FULL = "mini-swe-agent__20251118_gemini-3-pro-74pct.sympy__sympy-13091.jsonl"
QUICK = "mini-swe-agent__20251118_gemini-3-pro-74pct.django__django-15629.jsonl"
GOAL_MS = 0.1


def replay(messages: list[dict[str, Any]], observers: list[Any], home: str) -> list[list[float]]:
    """Replay ``messages`` through one fresh session per observer (None: none) in
    lockstep; the seconds of each ``prepare``, per session."""
    import ctxpolicy

    policy = load_policy_file(ROOT / "policies" / "agents.yaml", "coding_agent_16k")
    sessions = [
        ctxpolicy.Session(
            policy, conv_id=f"bench-{i}", on_event=obs, env={"CTXPOLICY_HOME": f"{home}/{i}"}
        )
        for i, obs in enumerate(observers)
    ]
    times: list[list[float]] = [[] for _ in sessions]
    convos: list[list[dict[str, Any]]] = [[] for _ in sessions]
    calls: dict[str, Any] = {}
    turn = 0
    for m in messages:
        if m.get("role") == "assistant" and convos[0]:
            order = list(range(len(sessions)))
            if turn % 2:
                order.reverse()
            turn += 1
            for i in order:
                t0 = time.perf_counter()
                sessions[i].prepare(convos[i])
                times[i].append(time.perf_counter() - t0)
        for c in m.get("tool_calls") or []:
            calls[c["id"]] = c
        for i, s in enumerate(sessions):
            msg = m
            if m.get("role") == "tool" and m.get("tool_call_id") in calls:
                text = s.add_tool_result(calls[m["tool_call_id"]], m.get("content") or "")
                msg = {**m, "content": text}
            convos[i].append(msg)
    for s in sessions:
        s.close()
    return times


def fold_seconds(events: list[dict[str, Any]], repeat: int) -> float:
    """Median seconds to fold ``events`` into fresh views (the observer of one agent)."""
    runs = []
    for _ in range(repeat):
        observe = Views(models={"coding_agent_16k": "qwen2.5-coder-32b"}).observer(
            "coding_agent_16k"
        )
        t0 = time.perf_counter()
        for e in events:
            observe(e)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def poll_seconds(conversations: int, calls: int, repeat: int) -> tuple[float, int]:
    """Median seconds of one snapshot of views holding ``conversations`` × ``calls``, and
    the size of its JSON as the API sends it (25 series)."""
    views = Views(models={"a": "gpt-4o"})
    observe = views.observer("a")
    for c in range(conversations):
        for i in range(calls):
            if i % 20 == 19:
                observe(
                    {
                        "type": "context.compacted",
                        "conv_id": f"c{c}",
                        "ts": i,
                        "layer": "drop_rounds",
                        "before": 9000,
                        "after": 5000,
                        "prefix_tokens": 1200,
                    }
                )
            observe(
                {
                    "type": "context.status",
                    "conv_id": f"c{c}",
                    "ts": float(i),
                    "used": 1000 + i * 40,
                    "budget": 9000,
                    "window": 16000,
                    "tokens_in": 1000 + i * 90,
                    "state": "normal",
                    "compact_layer": "drop_rounds" if i % 20 == 19 else None,
                    "duration_ms": 1.0,
                }
            )
    runs = []
    size = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        data = views.snapshot(series=25)
        size = len(json.dumps(data, separators=(",", ":")))
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), size


def main(argv: list[str] | None = None) -> int:
    args = replay_args(__doc__.splitlines()[0], argv, full=FULL, quick=QUICK)
    if args is None:
        return 2
    name, messages, rounds = args.name, args.messages, args.rounds
    info = machine(["ctxpolicy"])

    times: dict[str, list[float]] = {"a": [], "b": []}
    recorded: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as home:  # warm caches; the events of one replay
        replay(messages, [recorded.append], home)
    for r in range(rounds):
        eprint(f"round {r + 1}/{rounds} ...")
        observe = Views(models={"coding_agent_16k": "qwen2.5-coder-32b"}).observer(
            "coding_agent_16k"
        )
        with tempfile.TemporaryDirectory() as home:
            a, b = replay(messages, [None, observe], home)
        times["a"] += a
        times["b"] += b
    prepares = len(times["a"]) // rounds
    paired = sum(times["b"]) / sum(times["a"])
    added_ms = statistics.median(
        (b - a) * 1000 for a, b in zip(times["a"], times["b"], strict=True)
    )
    med = {k: sum(v) / rounds for k, v in times.items()}
    per_prepare_ms = {k: statistics.median(v) * 1000 for k, v in times.items()}
    fold = fold_seconds(recorded, 50 if args.quick else 200)
    fold_ms = fold / max(prepares, 1) * 1000
    poll_s, poll_bytes = poll_seconds(200 if args.quick else 1000, 100, 3 if args.quick else 5)
    data = {
        "machine": info,
        "quick": args.quick,
        "trace": name,
        "messages": len(messages),
        "prepares": prepares,
        "events": len(recorded),
        "rounds": rounds,
        "seconds": times,
        "median_s": med,
        "paired_b_over_a": paired,
        "added_ms_per_prepare_replay": added_ms,
        "fold_ms_per_prepare": fold_ms,
        "poll_ms": poll_s * 1000,
        "poll_json_bytes": poll_bytes,
        "goal_ms": GOAL_MS,
        "within_goal": fold_ms <= GOAL_MS,
    }
    convs = 200 if args.quick else 1000
    md = [
        "## The dashboard's cost per prepared call",
        "",
        header_markdown(info),
        "",
        "With `ctxpolicy serve --dashboard` the only work added to a call is folding its "
        "events into the dashboard's views (the page's polls read them in a worker thread). "
        f"Goal: ≤ {GOAL_MS} ms added to a prepared call.",
        "",
        f"Replay of `{name}` ({len(messages)} messages, {prepares} prepares, "
        f"{len(recorded)} events, policy `coding_agent_16k`) through two sessions in "
        f"lockstep, with and without the dashboard's observer, each call timed on both "
        f"(order alternating), {rounds} rounds.",
        "",
        markdown_table(
            ["variant", "s per replay", "median ms / prepare", "× (a)"],
            [
                ["(a) dashboard off", med["a"], per_prepare_ms["a"], 1.0],
                ["(b) dashboard on (its observer)", med["b"], per_prepare_ms["b"], paired],
            ],
        ),
        "",
        f"- added per prepare, replay (median over {len(times['a'])} paired calls of b − a): "
        f"**{added_ms:.4f} ms**",
        f"- the observer alone, the replay's events folded: **{fold_ms * 1000:.1f} µs per "
        f"prepare** (goal ≤ {GOAL_MS * 1000:.0f} µs: {'met' if fold_ms <= GOAL_MS else 'MISSED'})",
        f"- one poll of `/dashboard/api` with {convs} conversations × 100 calls: "
        f"{poll_s * 1000:.1f} ms in a worker thread, {poll_bytes / 1024:.0f} KiB of JSON",
        "",
        f"Reproduce: `.venv/bin/python benchmarks/bench_dashboard.py{' --quick' if args.quick else ''}`",
    ]
    publish("bench_dashboard", data, "\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
