"""Issue 29 items 1, 6, 7: what telemetry exports.

1. ``context.compacted`` carries ``lost_facts`` (raw facts of what was compacted); a
   key in a user message must not leave the process through the JSONL or the
   OpenTelemetry sink: they export numbers and names unless asked for content,
   and content is redacted.
6. ``OtelEventSink`` keeps pending span events per conversation: bounded, and
   flushed on ``close()``.
7. An event with a lone surrogate reaches the JSONL file (escaped).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy import Session
from ctxpolicy.events.sinks import JsonlEventSink, export_event
from tests.engine_helpers import conversation, make_policy

SECRETS = ["sk-proj-" + "A1b2C3d4" * 5, "Tr0ub4dor&3xyzzy"]


def _leaky_history() -> list[dict[str, Any]]:
    msgs = conversation(6, 1200)
    body = msgs[3]["content"]
    leak = f" DB_PASSWORD={SECRETS[1]} key {SECRETS[0]} in lib/secret_conf.py "
    msgs[3] = {**msgs[3], "content": body[:600] + leak + body[600:]}
    return msgs


def _compacting_session(on_event: Any) -> Session:
    pol = make_policy(
        pipeline=[{"layer": "observation_mask", "at": "normal", "options": {"max_age_rounds": 1}}],
        budget={"target": 0.05},
    )
    return Session(pol, conv_id="leak", on_event=on_event)


def _no_secret(text: str) -> None:
    for s in SECRETS:
        assert s not in text
        assert s[:12] not in text


def test_jsonl_sink_exports_counts_not_facts(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with JsonlEventSink(path) as sink:
        s = _compacting_session(sink)
        s.prepare(_leaky_history())
    raw = path.read_text()
    _no_secret(raw)
    compacted = [json.loads(x) for x in raw.splitlines() if '"context.compacted"' in x]
    assert compacted and compacted[0]["lost_facts_count"] >= 1
    assert "lost_facts" not in compacted[0]
    # in process the facts are still there (the ledger keeps them)
    assert any(e.get("lost_facts") for e in s.events if e["type"] == "context.compacted")


def test_content_only_when_asked_and_then_redacted(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with JsonlEventSink(path, content=True) as sink:
        _compacting_session(sink).prepare(_leaky_history())
    raw = path.read_text()
    _no_secret(raw)
    compacted = [json.loads(x) for x in raw.splitlines() if '"context.compacted"' in x]
    assert "lib/secret_conf.py" in compacted[0]["lost_facts"]


@pytest.mark.parametrize(
    "field", ["error", "reason", "detail", "problems", "layer", "anything", "report"]
)
def test_every_exported_string_is_redacted(field: str) -> None:
    text = f"failed: password={SECRETS[1]} Authorization: Bearer {SECRETS[0]}"
    value: Any = {"summary": text, "n": 3} if field == "report" else text
    for content in (False, True):
        out = json.dumps(export_event({"type": "x", field: value, "n": 1}, content=content))
        _no_secret(out)


@pytest.fixture
def otel_spans() -> Iterator[tuple[Any, Any]]:
    """The real OpenTelemetry SDK: an in-memory span exporter and the tracer provider
    that feeds it (shut down after the test)."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider
    provider.shutdown()


def test_otel_spans_carry_no_content(otel_spans: tuple[Any, Any]) -> None:
    from ctxpolicy.events.otel import OtelEventSink

    exporter, provider = otel_spans
    sink = OtelEventSink(tracer_provider=provider)
    _compacting_session(sink).prepare(_leaky_history())
    spans = exporter.get_finished_spans()
    assert spans
    dumped = "".join(
        json.dumps(dict(sp.attributes or {}), default=str)
        + "".join(json.dumps(dict(e.attributes or {}), default=str) for e in sp.events)
        for sp in spans
    )
    assert "lost_facts_count" in dumped
    assert any(sp.name.startswith("compact ") for sp in spans)  # the compaction spans too
    _no_secret(dumped)
    assert "lib/secret_conf.py" not in dumped


def test_otel_compaction_spans_carry_no_content_even_when_asked(
    otel_spans: tuple[Any, Any],
) -> None:
    from ctxpolicy.events.otel import OtelEventSink

    exporter, provider = otel_spans
    sink = OtelEventSink(tracer_provider=provider, content=True, model="claude-sonnet-4")
    _compacting_session(sink).prepare(_leaky_history())
    spans = [sp for sp in exporter.get_finished_spans() if sp.name.startswith("compact ")]
    assert spans
    for sp in spans:  # numbers and names only: no fact, no report text, no secret
        for key, value in (sp.attributes or {}).items():
            assert key.startswith(("gen_ai.", "ctxpolicy.compaction."))
            assert isinstance(value, int | float) or key in (
                "gen_ai.operation.name",
                "gen_ai.request.model",
                "gen_ai.conversation.id",
                "ctxpolicy.compaction.layer",
                "ctxpolicy.compaction.plugin",
                "ctxpolicy.compaction.state",
                "ctxpolicy.compaction.price",
            ), key
        dumped = json.dumps(dict(sp.attributes or {}), default=str)
        _no_secret(dumped)
        assert "lib/secret_conf.py" not in dumped


def test_otel_pending_is_bounded_and_flushed_on_close(otel_spans: tuple[Any, Any]) -> None:
    from ctxpolicy.events.otel import OtelEventSink

    exporter, provider = otel_spans
    sink = OtelEventSink(tracer_provider=provider, max_pending_conversations=100)
    for i in range(3_000):  # conversations that end after a compaction, no status
        sink({"type": "layer.failed", "conv_id": f"c{i}", "ts": 1.0, "error": "x"})
        assert sink.pending_conversations() <= 100
    flushed = len(exporter.get_finished_spans())
    assert flushed == 2_900
    sink.close()
    assert sink.pending_conversations() == 0
    assert len(exporter.get_finished_spans()) == 3_000


def test_jsonl_sink_writes_events_with_lone_surrogates(tmp_path: Path) -> None:
    bad = os.fsdecode(b"\xff")
    path = tmp_path / "audit.jsonl"
    with JsonlEventSink(path) as sink:
        sink({"type": "tool.preprocessed", "tool": f"read{bad}", "n": 1})
        sink({"type": f"x{bad}", f"k{bad}": [bad, {"a": 1}]})
        sink({"type": "after", "n": 2})
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and sink.count == 3
    assert json.loads(lines[0])["tool"] == f"read{bad}"
    assert json.loads(lines[1])["type"] == f"x{bad}"
