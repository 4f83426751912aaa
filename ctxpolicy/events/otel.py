"""OpenTelemetry event sink: a span per ``prepare``, metrics for tokens and compactions.

Extra ``otel`` (``pip install 'ctxpolicy[otel]'``). :class:`OtelEventSink` is an event
observer like :class:`ctxpolicy.events.sinks.JsonlEventSink`: pass it as a session's
``on_event``, or register it for every session with
``ctxpolicy.plugins.register_plugin(sink, "otel")`` (it implements the
``ctxpolicy_event`` hook). It uses the global tracer and meter providers unless given
its own.

Spans — one ``ctxpolicy.prepare`` span per ``context.status`` event, timed from the
event's ``ts`` and ``duration_ms``; the status fields are its attributes
(``ctxpolicy.context.*``), the compactions and failures of that ``prepare`` are span
events, and the span's status is ERROR when the context overflows. GenAI semantic
conventions where they apply: ``gen_ai.conversation.id`` (the session's ``conv_id``),
``gen_ai.request.model`` (``model=``), ``gen_ai.agent.name`` (``agent=``),
``error.type``.

Each compaction is also a span of its own, ``compact <layer>``, a child of its
``prepare`` span, timed by the layer's ``duration_ms``: ``gen_ai.operation.name`` =
``compact``, ``gen_ai.usage.input_tokens`` / ``gen_ai.usage.output_tokens`` = the
context's tokens before and after the layer, the GenAI names above, and
``ctxpolicy.compaction.*`` for the rest (:data:`COMPACTION_ATTRIBUTES`: layer, plugin,
trigger, target, window, tokens before/after/freed, units, the prefix kept for the
prompt cache, the estimated cost of the rewrite and saving per later call at the list
prices of ``model=``). Numbers and names only, whatever ``content=`` says.

Metrics (instrument names, units and attributes in docs/integrations/observability.md):

* ``ctxpolicy.context.tokens`` — histogram of the tokens each prepared request holds;
* ``ctxpolicy.context.ratio`` — histogram of ``used / trigger`` per ``prepare``;
* ``ctxpolicy.tokens.saved`` — counter of tokens removed, by ``ctxpolicy.source``
  (``layer:<name>`` for compactions, ``preprocess:<name>`` for tool results);
* ``ctxpolicy.compactions`` — counter of compactions, by ``ctxpolicy.layer``;
* ``ctxpolicy.failures`` — counter of failure events, by ``error.type``;
* ``gen_ai.client.token.usage`` — the GenAI histogram, with
  ``gen_ai.token.type = input``, recorded from ``context.usage`` (the provider's own
  prompt-token count, :meth:`ctxpolicy.Session.record_usage`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import Any

from ctxpolicy._install import extra_hint
from ctxpolicy.events.sinks import export_event
from ctxpolicy.events.types import ContextStatus, span_fields
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.catalogue import default_prices, token_prices

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        f"the OpenTelemetry sink needs the opentelemetry SDK: {extra_hint('otel')}"
    ) from exc

__all__ = [
    "COMPACTION_ATTRIBUTES",
    "FAILURE_EVENTS",
    "MAX_PENDING_CONVERSATIONS",
    "SCOPE",
    "OtelEventSink",
]

SCOPE = "ctxpolicy"
#: Events counted in ``ctxpolicy.failures`` and shown as span events.
FAILURE_EVENTS = frozenset(
    {
        "layer.failed",
        "layer.rejected",
        "summarizer.failed",
        "snapshot.failed",
        "tool.preprocess_failed",
        "observer.failed",
        "ledger.failed",
        "context.overflow",
        "context.overflow_error",
    }
)
#: Events of one ``prepare`` that become events of its span (kept until its status).
_SPAN_EVENTS = FAILURE_EVENTS | {"context.compacted", "layer.deferred", "tokenizer.fallback"}
#: ``context.status`` fields that become span attributes (``span=True`` in its definition).
_STATUS_ATTRS = span_fields(ContextStatus)
_MAX_PENDING = 256  # span events kept per conversation between two statuses
#: Conversations with pending span events at most; the oldest one is flushed (as a
#: span of its own) when one more arrives, so finished conversations cannot pile up.
MAX_PENDING_CONVERSATIONS = 1024


#: The attributes of a ``compact <layer>`` span besides the GenAI ones (docs table).
COMPACTION_ATTRIBUTES: dict[str, str] = {
    "ctxpolicy.compaction.layer": "the layer that compacted (pipeline step or on_overflow)",
    "ctxpolicy.compaction.plugin": "the plugin that provides the layer",
    "ctxpolicy.compaction.trigger": "tokens at which the pipeline runs (the prepare's trigger)",
    "ctxpolicy.compaction.target": "tokens the compaction aims at or below",
    "ctxpolicy.compaction.window": "the model's context window (tokens)",
    "ctxpolicy.compaction.state": "the context's state after the prepare",
    "ctxpolicy.compaction.tokens_before": "tokens of the context the layer got",
    "ctxpolicy.compaction.tokens_after": "tokens of the context it returned",
    "ctxpolicy.compaction.tokens_freed": "tokens_before − tokens_after",
    "ctxpolicy.compaction.units_before": "units (messages with their tool results) before",
    "ctxpolicy.compaction.units_after": "units after",
    "ctxpolicy.compaction.units_removed": "units dropped whole",
    "ctxpolicy.compaction.prefix_tokens": "tokens kept unchanged in front of the first change"
    " (what a prompt cache still serves)",
    "ctxpolicy.compaction.lost_facts": "facts of the compacted messages found nowhere after it"
    " (a count)",
    "ctxpolicy.compaction.duration_ms": "the layer's own time",
    "ctxpolicy.compaction.cost_estimate_usd": "the rewrite's estimated cost: tokens after the"
    " kept prefix written again, at input minus cached-input list price of `model=`",
    "ctxpolicy.compaction.saving_per_call_usd": "tokens freed at the cached-input list price:"
    " saved on each later call",
    "ctxpolicy.compaction.price": "the price table entry used (`default` for an unknown model)",
}
_COMPACTION_FIELDS = (
    ("before", "tokens_before"),
    ("after", "tokens_after"),
    ("units_before", "units_before"),
    ("units_after", "units_after"),
    ("units_removed", "units_removed"),
    ("prefix_tokens", "prefix_tokens"),
    ("lost_facts_count", "lost_facts"),
    ("duration_ms", "duration_ms"),
)


@functools.lru_cache(maxsize=64)
def _prices(model: str | None) -> tuple[str, float, float]:
    """``(entry, input, cached input)`` USD per token of ``model`` in the packaged price
    table (``ctxpolicy/data/prices.json``; its ``default`` entry when not listed)."""
    return token_prices(default_prices(), model)


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _ns(ts: float) -> int:
    return int(ts * 1e9)


def _attr(value: Any) -> Any:
    """An OTel attribute value: str, bool, int, float (others as str, None dropped)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    return str(value)


def _attrs(prefix: str, event: Mapping[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    out = {}
    for k, v in event.items():
        if k in ("type", "conv_id", "ts", *skip):
            continue
        a = _attr(v)
        if a is not None:
            out[f"{prefix}{k}"] = a
    return out


class OtelEventSink:
    """ctxpolicy events → OpenTelemetry spans and metrics (thread-safe)."""

    def __init__(
        self,
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        model: str | None = None,
        agent: str | None = None,
        content: bool = False,
        max_pending_conversations: int = MAX_PENDING_CONVERSATIONS,
    ) -> None:
        from ctxpolicy import __version__

        self.content = content
        self.max_pending_conversations = max(1, int(max_pending_conversations))
        self.model = model
        self.agent = agent
        self.tracer = trace.get_tracer(SCOPE, __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, __version__, meter_provider=meter_provider)
        self.context_tokens = meter.create_histogram(
            "ctxpolicy.context.tokens",
            unit="{token}",
            description="Tokens of each prepared request (after compaction).",
        )
        self.context_ratio = meter.create_histogram(
            "ctxpolicy.context.ratio",
            unit="1",
            description="used / trigger of each prepared request.",
        )
        self.tokens_saved = meter.create_counter(
            "ctxpolicy.tokens.saved",
            unit="{token}",
            description="Tokens removed by compaction layers and tool-result preprocessors.",
        )
        self.compactions = meter.create_counter(
            "ctxpolicy.compactions",
            unit="{compaction}",
            description="Compactions (context.compacted events), by layer.",
        )
        self.failures = meter.create_counter(
            "ctxpolicy.failures",
            unit="{event}",
            description="Failure events (layer.failed, context.overflow, …), by type.",
        )
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Measures number of input and output tokens used",
        )
        self._lock = threading.Lock()
        self._pending: dict[str, list[dict[str, Any]]] = {}

    # -- observer interfaces -------------------------------------------------------
    def __call__(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type", ""))
        common = self._common()
        if kind == "context.status":
            self._status(event, common)
        elif kind == "context.compacted":
            layer = str(event.get("layer"))
            self.compactions.add(1, {**common, "ctxpolicy.layer": layer})
            saved = int(event.get("before", 0)) - int(event.get("after", 0))
            if saved > 0:
                self.tokens_saved.add(saved, {**common, "ctxpolicy.source": f"layer:{layer}"})
        elif kind == "tool.preprocessed":
            saved = int(event.get("tokens_before", 0)) - int(event.get("tokens_after", 0))
            if saved > 0:
                source = f"preprocess:{event.get('preprocessor')}"
                self.tokens_saved.add(saved, {**common, "ctxpolicy.source": source})
        elif kind == "context.usage" and event.get("prompt_tokens") is not None:
            self.token_usage.record(
                int(event["prompt_tokens"]),
                {**common, "gen_ai.token.type": "input", "gen_ai.operation.name": "chat"},
            )
        if kind in FAILURE_EVENTS:
            self.failures.add(1, {**common, "error.type": kind})
        if kind in _SPAN_EVENTS:
            evicted: list[tuple[str, list[dict[str, Any]]]] = []
            with self._lock:
                conv = str(event.get("conv_id"))
                pending = self._pending.get(conv)
                if pending is None:
                    while len(self._pending) >= self.max_pending_conversations:
                        oldest = next(iter(self._pending))
                        evicted.append((oldest, self._pending.pop(oldest)))
                    pending = self._pending[conv] = []
                if len(pending) < _MAX_PENDING:
                    pending.append(export_event(event, content=self.content))
            for conv_id, events in evicted:
                self._flush(conv_id, events, common)

    def close(self) -> None:
        """Flush every pending span event (a span per conversation); call at exit."""
        with self._lock:
            pending, self._pending = self._pending, {}
        common = self._common()
        for conv_id, events in pending.items():
            self._flush(conv_id, events, common)

    def pending_conversations(self) -> int:
        """Conversations whose span events wait for their next ``context.status``."""
        with self._lock:
            return len(self._pending)

    def _flush(self, conv: str, events: list[dict[str, Any]], common: dict[str, Any]) -> None:
        """Events of a ``prepare`` that will not get its status: a span of their own."""
        if not events:
            return
        name = f"ctxpolicy.events {self.agent}" if self.agent else "ctxpolicy.events"
        first = events[0].get("ts")
        span = self.tracer.start_span(
            name,
            attributes={**common, "gen_ai.conversation.id": conv},
            start_time=_ns(float(first)) if first is not None else None,
        )
        try:
            parent = trace.set_span_in_context(span)
            for ev in events:
                ts = ev.get("ts")
                span.add_event(
                    str(ev.get("type")),
                    _attrs("ctxpolicy.", ev),
                    timestamp=_ns(float(ts)) if ts is not None else None,
                )
                if ev.get("type") == "context.compacted":
                    self._compaction(ev, conv, common, None, parent)
        finally:
            span.end()

    def _compaction(
        self,
        ev: Mapping[str, Any],
        conv: str,
        common: dict[str, Any],
        status: Mapping[str, Any] | None,
        parent: Any,
    ) -> None:
        """One ``compact <layer>`` span (``ev``: an exported ``context.compacted``;
        ``status``: the ``context.status`` of its prepare, when known)."""
        layer = str(ev.get("layer") or "?")
        attrs: dict[str, Any] = {
            **common,
            "gen_ai.operation.name": "compact",
            "gen_ai.conversation.id": conv,
            "ctxpolicy.compaction.layer": layer,
        }
        if ev.get("plugin"):
            attrs["ctxpolicy.compaction.plugin"] = str(ev["plugin"])
        for src, dst in _COMPACTION_FIELDS:
            n = _number(ev.get(src))
            if n is not None:
                attrs[f"ctxpolicy.compaction.{dst}"] = n
        before, after = _number(ev.get("before")), _number(ev.get("after"))
        if before is not None:
            attrs["gen_ai.usage.input_tokens"] = int(before)
        if after is not None:
            attrs["gen_ai.usage.output_tokens"] = int(after)
        if status is not None:
            for key in ("trigger", "target", "window"):
                n = _number(status.get(key))
                if n is not None:
                    attrs[f"ctxpolicy.compaction.{key}"] = n
            if isinstance(status.get("state"), str):
                attrs["ctxpolicy.compaction.state"] = status["state"]
        if before is not None and after is not None:
            freed = max(0, int(before) - int(after))
            attrs["ctxpolicy.compaction.tokens_freed"] = freed
            price, p_in, p_cached = _prices(self.model)
            prefix = _number(ev.get("prefix_tokens"))
            rewritten = max(0, int(after) - int(prefix)) if prefix is not None else int(after)
            attrs["ctxpolicy.compaction.cost_estimate_usd"] = round(
                rewritten * max(0.0, p_in - p_cached), 9
            )
            attrs["ctxpolicy.compaction.saving_per_call_usd"] = round(freed * p_cached, 9)
            attrs["ctxpolicy.compaction.price"] = price
        ts = ev.get("ts")
        end = _ns(float(ts)) if isinstance(ts, int | float) else None
        duration = _number(ev.get("duration_ms")) or 0.0
        start = end - int(duration * 1e6) if end is not None else None
        span = self.tracer.start_span(
            f"compact {layer}", context=parent, attributes=attrs, start_time=start
        )
        span.end(end_time=end)

    @hookimpl
    def ctxpolicy_event(self, event: dict[str, Any]) -> None:
        """The plugin hook: ``register_plugin(sink)`` observes every session."""
        self(event)

    # -- internals -----------------------------------------------------------------
    def _common(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.model:
            out["gen_ai.request.model"] = self.model
        if self.agent:
            out["gen_ai.agent.name"] = self.agent
        return out

    def _status(self, event: Mapping[str, Any], common: dict[str, Any]) -> None:
        conv = str(event.get("conv_id"))
        with self._lock:
            pending = self._pending.pop(conv, [])
        end = _ns(float(event.get("ts") or 0.0)) or None
        duration = float(event.get("duration_ms") or 0.0)
        start = end - int(duration * 1e6) if end is not None else None
        attrs = {
            **common,
            "gen_ai.conversation.id": conv,
            **{
                f"ctxpolicy.context.{k}": a
                for k in _STATUS_ATTRS
                if (a := _attr(event.get(k))) is not None
            },
        }
        used = int(event.get("used", 0))
        metric_attrs = {**common, "ctxpolicy.state": str(event.get("state"))}
        self.context_tokens.record(used, metric_attrs)
        if event.get("ratio") is not None:
            self.context_ratio.record(float(event["ratio"]), metric_attrs)
        name = f"ctxpolicy.prepare {self.agent}" if self.agent else "ctxpolicy.prepare"
        span = self.tracer.start_span(name, attributes=attrs, start_time=start)
        try:
            overflow = event.get("state") == "overflow"
            parent = trace.set_span_in_context(span)
            for ev in pending:
                kind = str(ev.get("type"))
                ts = ev.get("ts")
                span.add_event(
                    kind,
                    _attrs("ctxpolicy.", ev),
                    timestamp=_ns(float(ts)) if ts is not None else None,
                )
                overflow = overflow or kind == "context.overflow"
                if kind == "context.compacted":
                    self._compaction(ev, conv, common, event, parent)
            if overflow:
                span.set_attribute("error.type", "context.overflow")
                span.set_status(Status(StatusCode.ERROR, "context above the limit"))
        finally:
            span.end(end_time=end)
