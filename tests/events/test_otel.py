"""The OpenTelemetry sink, against the real SDK (in-memory span exporter, in-memory reader)."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ctxpolicy import Session
from ctxpolicy.events.otel import OtelEventSink
from ctxpolicy.plugins import register_plugin, unregister_plugin
from tests.engine_helpers import call, conversation, make_policy


@pytest.fixture
def otel():
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    sink = OtelEventSink(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        model="gpt-4o",
        agent="test",
    )
    yield sink, exporter, reader
    tracer_provider.shutdown()
    meter_provider.shutdown()


def metrics_by_name(reader) -> dict[str, list]:
    out: dict[str, list] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(m.data.data_points)
    return out


def test_a_span_per_prepare_with_the_status_and_the_compactions(otel, tmp_path):
    sink, exporter, reader = otel
    session = Session(make_policy(tmp_path), conv_id="conv-1", on_event=sink)
    history = conversation(2, 200)
    session.prepare(history)
    big = conversation(30, 2500)  # well above the 8000-token window: layers fire
    prepared = session.prepare(big)
    session.record_usage(1234)

    spans = [s for s in exporter.get_finished_spans() if s.name.startswith("ctxpolicy.prepare")]
    assert [s.name for s in spans] == ["ctxpolicy.prepare test"] * 2
    status = [e for e in session.events if e["type"] == "context.status"]
    for span, ev in zip(spans, status, strict=True):
        a = span.attributes
        assert a["gen_ai.conversation.id"] == "conv-1"
        assert a["gen_ai.request.model"] == "gpt-4o" and a["gen_ai.agent.name"] == "test"
        assert a["ctxpolicy.context.used"] == ev["used"]
        assert a["ctxpolicy.context.state"] == ev["state"]
        assert a["ctxpolicy.context.ratio"] == pytest.approx(ev["ratio"])
        assert a["ctxpolicy.context.trigger"] == ev["trigger"]
        assert a["ctxpolicy.context.tokenizer"] == ev["tokenizer"]
        assert span.end_time >= span.start_time
    compacted = [e for e in session.events if e["type"] == "context.compacted"]
    assert compacted, "the big conversation must be compacted"
    second = spans[1]
    assert [e.name for e in second.events if e.name == "context.compacted"] == [
        "context.compacted"
    ] * len(compacted)
    # the first prepare compacted nothing; its span holds the tokenizer note, if any
    assert {e.name for e in spans[0].events} <= {"tokenizer.fallback"}
    assert session.stats  # the session itself was not disturbed
    assert len(prepared) < len(big)

    m = metrics_by_name(reader)
    tokens = m["ctxpolicy.context.tokens"]
    assert sum(p.count for p in tokens) == 2
    assert sum(p.sum for p in tokens) == sum(e["used"] for e in status)
    saved = sum(
        p.value
        for p in m["ctxpolicy.tokens.saved"]
        if p.attributes["ctxpolicy.source"].startswith("layer:")
    )  # tool results arriving in prepare add their own `preprocess:` savings
    assert saved == sum(e["before"] - e["after"] for e in compacted)
    by_layer = {p.attributes["ctxpolicy.layer"]: p.value for p in m["ctxpolicy.compactions"]}
    expected: dict[str, int] = {}
    for e in compacted:
        expected[e["layer"]] = expected.get(e["layer"], 0) + 1
    assert by_layer == expected
    usage = m["gen_ai.client.token.usage"]
    assert [(p.sum, p.attributes["gen_ai.token.type"]) for p in usage] == [(1234, "input")]


def test_preprocessed_tool_results_count_as_saved(otel, tmp_path):
    sink, _, reader = otel
    session = Session(make_policy(tmp_path), conv_id="c2", on_event=sink)
    c = call("t1", path="big.log")
    session.add_tool_result(c, "x " * 20_000)
    pre = [e for e in session.events if e["type"] == "tool.preprocessed"]
    assert pre and pre[0]["tokens_before"] > pre[0]["tokens_after"]
    points = metrics_by_name(reader)["ctxpolicy.tokens.saved"]
    assert [p.attributes["ctxpolicy.source"] for p in points] == ["preprocess:head_tail"]
    assert points[0].value == pre[0]["tokens_before"] - pre[0]["tokens_after"]


def test_overflow_marks_the_span_as_error(otel):
    sink, exporter, reader = otel
    sink({"type": "context.overflow", "conv_id": "c3", "ts": 100.0, "used": 9000, "trigger": 10})
    sink(
        {
            "type": "context.status",
            "conv_id": "c3",
            "ts": 100.5,
            "duration_ms": 250.0,
            "used": 9000,
            "ratio": 1.4,
            "state": "overflow",
            "compact_layer": None,
        }
    )
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "context.overflow"
    assert "ctxpolicy.context.compact_layer" not in span.attributes  # None is dropped
    assert span.end_time - span.start_time == 250_000_000
    assert [e.name for e in span.events] == ["context.overflow"]
    fails = metrics_by_name(reader)["ctxpolicy.failures"]
    assert [(p.attributes["error.type"], p.value) for p in fails] == [("context.overflow", 1)]


def test_registered_as_a_plugin_it_observes_every_session(otel, tmp_path):
    sink, exporter, _ = otel
    name = register_plugin(sink, "otel-test")
    try:
        for conv in ("a", "b"):
            Session(make_policy(tmp_path), conv_id=conv).prepare(conversation(1, 100))
    finally:
        unregister_plugin(name)
    ids = sorted(s.attributes["gen_ai.conversation.id"] for s in exporter.get_finished_spans())
    assert ids == ["a", "b"]


def test_a_span_per_compaction_in_genai_names(otel, tmp_path):
    sink, exporter, _ = otel
    session = Session(make_policy(tmp_path), conv_id="conv-9", on_event=sink)
    session.prepare(conversation(2, 200))
    session.prepare(conversation(30, 2500))
    compacted = [e for e in session.events if e["type"] == "context.compacted"]
    status = [e for e in session.events if e["type"] == "context.status"][-1]
    finished = exporter.get_finished_spans()
    spans = [s for s in finished if s.name.startswith("compact ")]
    assert [s.name for s in spans] == [f"compact {e['layer']}" for e in compacted]
    prepare = [s for s in finished if s.name.startswith("ctxpolicy.prepare")][-1]
    for span, ev in zip(spans, compacted, strict=True):
        a = span.attributes
        assert span.parent is not None and span.parent.span_id == prepare.context.span_id
        assert span.context.trace_id == prepare.context.trace_id
        assert a["gen_ai.operation.name"] == "compact"
        assert a["gen_ai.request.model"] == "gpt-4o" and a["gen_ai.agent.name"] == "test"
        assert a["gen_ai.conversation.id"] == "conv-9"
        assert a["gen_ai.usage.input_tokens"] == ev["before"]
        assert a["gen_ai.usage.output_tokens"] == ev["after"]
        assert a["ctxpolicy.compaction.layer"] == ev["layer"]
        assert a["ctxpolicy.compaction.plugin"] == ev["plugin"]
        assert a["ctxpolicy.compaction.tokens_freed"] == ev["before"] - ev["after"]
        assert a["ctxpolicy.compaction.trigger"] == status["trigger"]
        assert a["ctxpolicy.compaction.target"] == status["target"]
        assert a["ctxpolicy.compaction.window"] == status["window"]
        assert a["ctxpolicy.compaction.prefix_tokens"] == ev["prefix_tokens"]
        assert 0 <= ev["prefix_tokens"] <= ev["after"]
        assert a["ctxpolicy.compaction.price"] == "gpt-4o"
        # gpt-4o: $2.50 input, $1.25 cached input per million tokens
        rewritten = ev["after"] - ev["prefix_tokens"]
        assert a["ctxpolicy.compaction.cost_estimate_usd"] == pytest.approx(rewritten * 1.25e-6)
        saving = a["ctxpolicy.compaction.saving_per_call_usd"]
        assert saving == pytest.approx((ev["before"] - ev["after"]) * 1.25e-6)
        assert span.end_time - span.start_time == pytest.approx(ev["duration_ms"] * 1e6, abs=1_000)
        from ctxpolicy.events.otel import COMPACTION_ATTRIBUTES

        own = {k for k in a if k.startswith("ctxpolicy.")}
        assert own <= set(COMPACTION_ATTRIBUTES)  # every name is documented


def test_a_compaction_without_its_status_still_gets_its_span(otel):
    sink, exporter, _ = otel
    sink(
        {
            "type": "context.compacted",
            "conv_id": "c5",
            "ts": 50.0,
            "layer": "drop_rounds",
            "plugin": "builtin",
            "before": 900,
            "after": 400,
            "duration_ms": 2.0,
            "lost_facts": ["secret fact"],
        }
    )
    sink.close()
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["compact drop_rounds", "ctxpolicy.events test"]
    span = next(s for s in exporter.get_finished_spans() if s.name == "compact drop_rounds")
    assert span.attributes["ctxpolicy.compaction.lost_facts"] == 1
    assert "ctxpolicy.compaction.trigger" not in span.attributes  # no status: unknown
    assert span.attributes["ctxpolicy.compaction.cost_estimate_usd"] == pytest.approx(400 * 1.25e-6)
