"""What observing a session costs per ``prepare``: event sinks, and the dashboard.

A real trace replayed as ``simulate`` does through one session per variant in lockstep,
the order alternating, ``--rounds`` times. Default (results ``bench_otel``): no
observer, ``JsonlEventSink``, ``OtelEventSink``; ``--dashboard`` (results
``bench_dashboard``): the dashboard's observer, its fold and one poll. The sections
say what each number is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import ROOT, SHARED, eprint, machine, markdown_table, parser, publish

FULL = "mini-swe-agent__20251118_gemini-3-pro-74pct.sympy__sympy-13091.jsonl"
QUICK = "mini-swe-agent__20251118_gemini-3-pro-74pct.django__django-15629.jsonl"
AGENT, MODEL = "coding_agent_16k", "qwen2.5-coder-32b"
GOAL_MS = 0.1  # the dashboard's goal per prepared call
Times = tuple[list[float], list[float]]


def replay(messages: list[dict[str, Any]], observers: list[Any], home: str) -> list[Times]:
    """``messages`` through one fresh session per observer (None: none) in lockstep; per
    session the seconds of each ``prepare`` and of each ``add_tool_result``."""
    import ctxpolicy
    from ctxpolicy.sim.replay import load_policy_file

    policy = load_policy_file(ROOT / "policies" / "agents.yaml", AGENT)
    sessions = [
        ctxpolicy.Session(
            policy, conv_id=f"bench-{i}", on_event=obs, env={"CTXPOLICY_HOME": f"{home}/{i}"}
        )
        for i, obs in enumerate(observers)
    ]
    times: list[Times] = [([], []) for _ in sessions]
    convos: list[list[dict[str, Any]]] = [[] for _ in sessions]
    calls: dict[str, Any] = {}
    clock = time.perf_counter
    for m in messages:
        order = list(range(len(sessions)))[:: -1 if len(times[0][0]) % 2 else 1]
        if m.get("role") == "assistant" and convos[0]:
            for i in order:
                t0 = clock()
                sessions[i].prepare(convos[i])
                times[i][0].append(clock() - t0)
        for c in m.get("tool_calls") or []:
            calls[c["id"]] = c
        for i in order:
            msg = m
            if m.get("role") == "tool" and m.get("tool_call_id") in calls:
                t0 = clock()
                text = sessions[i].add_tool_result(calls[m["tool_call_id"]], m.get("content") or "")
                times[i][1].append(clock() - t0)
                msg = {**m, "content": text}
            convos[i].append(msg)
    for s in sessions:
        s.close()
    return times


def otel_sink() -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ctxpolicy.events.otel import OtelEventSink

    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    sink = OtelEventSink(tracer_provider=tp, meter_provider=meters, model=MODEL, agent=AGENT)
    return sink, spans


def sinks(args: argparse.Namespace, messages: list[dict[str, Any]]) -> tuple[dict, str]:
    """(a) none, (b) JSONL, (c) OpenTelemetry: whole replays, paired per round."""
    from ctxpolicy.events.sinks import JsonlEventSink

    times: dict[str, list[float]] = {"a": [], "b": [], "c": []}
    events_n = spans_n = prepares = 0
    with tempfile.TemporaryDirectory() as home:  # warm caches shared by all variants
        replay(messages, [None], home)
    for r in range(args.rounds):
        eprint(f"round {r + 1}/{args.rounds} ...")
        with tempfile.TemporaryDirectory() as home:
            jsonl = JsonlEventSink(Path(home) / "events.jsonl")
            otel, spans = otel_sink()
            runs = replay(messages, [None, jsonl, otel], home)
            for k, (prep, tools) in zip(times, runs, strict=True):
                times[k].append(sum(prep) + sum(tools))
                prepares = len(prep)
            jsonl.close()
            events_n, spans_n = jsonl.count, len(spans.get_finished_spans())
    paired = {
        k: statistics.median(x / a for x, a in zip(times[k], times["a"], strict=True))
        for k in ("b", "c")
    }
    med = {k: statistics.median(v) for k, v in times.items()}
    ms = {k: med[k] / max(prepares, 1) * 1000 for k in med}
    data = {"prepares": prepares, "seconds": times, "median_s": med, "paired_over_a": paired}
    data |= {"events": events_n, "spans": spans_n}
    rows = [
        ["(a) no observer", med["a"], ms["a"], 1.0],
        ["(b) JsonlEventSink", med["b"], ms["b"], paired["b"]],
        ["(c) OtelEventSink (SDK, in-memory)", med["c"], ms["c"], paired["c"]],
    ]
    md = [
        "## Event-sink overhead (JSONL, OpenTelemetry)",
        f"Replay of `{args.name}` ({len(messages)} messages, {prepares} prepares, policy "
        f"`{AGENT}`), {args.rounds} rounds, the three sessions in lockstep; {events_n} "
        f"events, {spans_n} spans per replay.",
        markdown_table("variant | median s | ms / prepare | × (a), paired", rows),
        "Paired ratio: the median over rounds of the variant ÷ (a) timed in the same round.",
    ]
    return data, "\n\n".join(md)


def fold_seconds(events: list[dict[str, Any]], repeat: int) -> float:
    """Median seconds to fold ``events`` into fresh views (the observer of one agent)."""
    from ctxpolicy.observe.views import Views

    runs = []
    for _ in range(repeat):
        observe = Views(models={AGENT: MODEL}).observer(AGENT)
        t0 = time.perf_counter()
        for e in events:
            observe(e)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def poll_seconds(conversations: int, calls: int, repeat: int) -> tuple[float, int]:
    """Median seconds of one snapshot of views holding ``conversations`` × ``calls``, and
    the size of its JSON as the API sends it (25 series)."""
    from ctxpolicy.observe.views import Views

    views = Views(models={"a": "gpt-4o"})
    observe = views.observer("a")
    for c in range(conversations):
        for i in range(calls):
            layer = "drop_rounds" if i % 20 == 19 else None
            if layer:
                observe({"type": "context.compacted", "conv_id": f"c{c}", "ts": i, "layer": layer,
                         "before": 9000, "after": 5000, "prefix_tokens": 1200})  # fmt: skip
            observe({"type": "context.status", "conv_id": f"c{c}", "ts": float(i),
                     "used": 1000 + i * 40, "budget": 9000, "window": 16000, "state": "normal",
                     "tokens_in": 1000 + i * 90, "compact_layer": layer, "duration_ms": 1.0})  # fmt: skip
    runs, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        size = len(json.dumps(views.snapshot(series=25), separators=(",", ":")))
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), size


def dashboard(args: argparse.Namespace, messages: list[dict[str, Any]]) -> tuple[dict, str]:
    from ctxpolicy.observe.views import Views

    times: dict[str, list[float]] = {"a": [], "b": []}
    recorded: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as home:  # warm caches; the events of one replay
        replay(messages, [recorded.append], home)
    for r in range(args.rounds):
        eprint(f"round {r + 1}/{args.rounds} ...")
        observe = Views(models={AGENT: MODEL}).observer(AGENT)
        with tempfile.TemporaryDirectory() as home:
            (a, _), (b, _) = replay(messages, [None, observe], home)
        times["a"] += a
        times["b"] += b
    prepares = len(times["a"]) // args.rounds
    paired = sum(times["b"]) / sum(times["a"])
    pairs = zip(times["a"], times["b"], strict=True)
    added_ms = statistics.median((b - a) * 1000 for a, b in pairs)
    med = {k: sum(v) / args.rounds for k, v in times.items()}
    ms = {k: statistics.median(v) * 1000 for k, v in times.items()}
    fold_ms = fold_seconds(recorded, 50 if args.quick else 200) / max(prepares, 1) * 1000
    convs = 200 if args.quick else 1000
    poll_s, poll_bytes = poll_seconds(convs, 100, 3 if args.quick else 5)
    data = {"prepares": prepares, "events": len(recorded), "seconds": times, "median_s": med}
    data |= {"paired_b_over_a": paired, "added_ms_per_prepare_replay": added_ms}
    data |= {"fold_ms_per_prepare": fold_ms, "poll_ms": poll_s * 1000}
    data |= {"poll_json_bytes": poll_bytes, "goal_ms": GOAL_MS, "within_goal": fold_ms <= GOAL_MS}
    rows = [
        ["(a) dashboard off", med["a"], ms["a"], 1.0],
        ["(b) dashboard on (its observer)", med["b"], ms["b"], paired],
    ]
    md = [
        "## The dashboard's cost per prepared call",
        "With `ctxpolicy serve --dashboard` the only work added to a call is folding its "
        "events into the dashboard's views (the page's polls read them in a worker thread). "
        f"Goal: ≤ {GOAL_MS} ms added to a prepared call.",
        f"Replay of `{args.name}` ({len(messages)} messages, {prepares} prepares, "
        f"{len(recorded)} events, policy `{AGENT}`) through two sessions in "
        f"lockstep, with and without the dashboard's observer, each call timed on both "
        f"(order alternating), {args.rounds} rounds.",
        markdown_table("variant | s per replay | median ms / prepare | × (a)", rows),
        f"- added per prepare, replay (median over {len(times['a'])} paired calls of b − a): "
        f"**{added_ms:.4f} ms**\n"
        f"- the observer alone, the replay's events folded: **{fold_ms * 1000:.1f} µs per "
        f"prepare** (goal ≤ {GOAL_MS * 1000:.0f} µs: {'met' if fold_ms <= GOAL_MS else 'MISSED'})\n"
        f"- one poll of `/dashboard/api` with {convs} conversations × 100 calls: "
        f"{poll_s * 1000:.1f} ms in a worker thread, {poll_bytes / 1024:.0f} KiB of JSON",
    ]
    return data, "\n\n".join(md)


def main(argv: list[str] | None = None) -> int:
    from ctxpolicy.sim.importers import load_trace

    ap = parser(__doc__, "smaller trace, 3 rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dashboard", action="store_true", help="the dashboard's observer")
    args = ap.parse_args(argv)
    args.name = QUICK if args.quick else FULL
    args.rounds = 3 if args.quick else args.rounds
    path = SHARED / "traces" / args.name
    if not path.exists():
        eprint(f"{path} not found (set CTXPOLICY_SHARED)")
        return 2
    messages = load_trace(path)[: 60 if args.quick else None]
    info = machine(["ctxpolicy", *([] if args.dashboard else ["opentelemetry-sdk", "quicktok-v1"])])
    data, md = (dashboard if args.dashboard else sinks)(args, messages)
    data = {"machine": info, "quick": args.quick, "trace": args.name} | data
    data |= {"messages": len(messages), "rounds": args.rounds}
    variant = "dashboard" if args.dashboard else "otel"
    quick = " --quick" if args.quick else ""
    cmd = f"python -m benchmarks run percall --variant {variant}{quick}"
    publish(f"bench_{variant}", data, f"{md}\n\nReproduce: `.venv/bin/{cmd}`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
