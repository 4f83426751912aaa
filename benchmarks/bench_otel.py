"""Event-sink overhead: what observing a session costs per ``prepare``.

Usage::

    python benchmarks/bench_otel.py [--rounds 5] [--quick]

Replays a real trace (the largest shared one; ``--quick``: the first 60 messages of a
smaller one) through a ``Session`` the way ``simulate`` does — ``prepare`` before every
assistant message, tool results through ``add_tool_result`` — three ways, interleaved
round by round:

(a) no observer (the baseline);
(b) :class:`ctxpolicy.events.sinks.JsonlEventSink` writing to a temporary file;
(c) :class:`ctxpolicy.events.otel.OtelEventSink` on the OpenTelemetry SDK (a ``TracerProvider``
    with a ``SimpleSpanProcessor`` into an in-memory exporter, a ``MeterProvider`` with an
    in-memory reader: the SDK's full cost, no network).

Reports the median over rounds of (b) ÷ (a) and (c) ÷ (a) timed in the same round, and
the spans / events produced. Writes benchmarks/results/bench_otel.{json,md}.
"""

from __future__ import annotations

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
from ctxpolicy.sim.replay import load_policy_file

ROOT = Path(__file__).resolve().parents[1]
FULL = "mini-swe-agent__20251118_gemini-3-pro-74pct.sympy__sympy-13091.jsonl"
QUICK = "mini-swe-agent__20251118_gemini-3-pro-74pct.django__django-15629.jsonl"


def replay(messages: list[dict[str, Any]], on_event: Any, home: str) -> tuple[float, int]:
    """Seconds to replay ``messages`` through a fresh session; number of prepares."""
    import ctxpolicy

    policy = load_policy_file(ROOT / "policies" / "agents.yaml", "coding_agent_16k")
    session = ctxpolicy.Session(
        policy, conv_id="bench", on_event=on_event, env={"CTXPOLICY_HOME": home}
    )
    convo: list[dict[str, Any]] = []
    calls: dict[str, Any] = {}
    prepares = 0
    t0 = time.perf_counter()
    for m in messages:
        if m.get("role") == "assistant" and convo:
            session.prepare(convo)
            prepares += 1
        if m.get("role") == "tool" and m.get("tool_call_id") in calls:
            text = session.add_tool_result(calls[m["tool_call_id"]], m.get("content") or "")
            m = {**m, "content": text}
        for c in m.get("tool_calls") or []:
            calls[c["id"]] = c
        convo.append(m)
    return time.perf_counter() - t0, prepares


def otel_sink() -> tuple[Any, Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ctxpolicy.events.otel import OtelEventSink

    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    sink = OtelEventSink(
        tracer_provider=tp,
        meter_provider=MeterProvider(metric_readers=[reader]),
        model="qwen2.5-coder-32b",
        agent="coding_agent_16k",
    )
    return sink, spans, reader


def main(argv: list[str] | None = None) -> int:
    args = replay_args(__doc__.splitlines()[0], argv, full=FULL, quick=QUICK)
    if args is None:
        return 2
    name, messages, rounds = args.name, args.messages, args.rounds
    info = machine(["ctxpolicy", "opentelemetry-sdk", "quicktok-v1"])
    from ctxpolicy.events.sinks import JsonlEventSink

    times: dict[str, list[float]] = {"a": [], "b": [], "c": []}
    spans_n = events_n = prepares = 0
    replay(messages, None, tempfile.mkdtemp())  # warm caches shared by all variants
    for r in range(rounds):
        eprint(f"round {r + 1}/{rounds} ...")
        with tempfile.TemporaryDirectory() as home:
            t, prepares = replay(messages, None, home)
            times["a"].append(t)
        with tempfile.TemporaryDirectory() as home:
            sink = JsonlEventSink(Path(home) / "events.jsonl")
            t, _ = replay(messages, sink, home)
            sink.close()
            times["b"].append(t)
            events_n = sink.count
        with tempfile.TemporaryDirectory() as home:
            osink, spans, _reader = otel_sink()
            t, _ = replay(messages, osink, home)
            times["c"].append(t)
            spans_n = len(spans.get_finished_spans())
    paired = {
        k: statistics.median(x / a for x, a in zip(times[k], times["a"], strict=True))
        for k in ("b", "c")
    }
    med = {k: statistics.median(v) for k, v in times.items()}
    data = {
        "machine": info,
        "quick": args.quick,
        "trace": name,
        "messages": len(messages),
        "prepares": prepares,
        "rounds": rounds,
        "seconds": times,
        "median_s": med,
        "paired_over_a": paired,
        "events": events_n,
        "spans": spans_n,
    }
    per_prepare_ms = {k: med[k] / max(prepares, 1) * 1000 for k in med}
    md = [
        "## Event-sink overhead (JSONL, OpenTelemetry)",
        "",
        header_markdown(info),
        "",
        f"Replay of `{name}` ({len(messages)} messages, {prepares} prepares, policy "
        f"`coding_agent_16k`), {rounds} interleaved rounds; {events_n} events, {spans_n} "
        "spans per replay.",
        "",
        markdown_table(
            ["variant", "median s", "ms / prepare", "× (a), paired"],
            [
                ["(a) no observer", med["a"], per_prepare_ms["a"], 1.0],
                ["(b) JsonlEventSink", med["b"], per_prepare_ms["b"], paired["b"]],
                ["(c) OtelEventSink (SDK, in-memory)", med["c"], per_prepare_ms["c"], paired["c"]],
            ],
        ),
        "",
        "Paired ratio: the median over rounds of the variant ÷ (a) timed in the same round.",
        "",
        f"Reproduce: `.venv/bin/python benchmarks/bench_otel.py{' --quick' if args.quick else ''}`",
    ]
    publish("bench_otel", data, "\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
