"""Events: what the engine reports, and where the reports go.

* :mod:`ctxpolicy.events.types` — the catalogue: one typed definition per event type
  (docs/engine.md's table is generated from it); host code emits these.
* :mod:`ctxpolicy.events.sinks` — the export form of an event (redaction, bounds) and
  :class:`~ctxpolicy.events.sinks.JsonlEventSink`, the file sink.
* :mod:`ctxpolicy.events.otel` — the OpenTelemetry sink, a plugin: a user registers it
  (``register_plugin(OtelEventSink(...), "otel")``) exactly as a third-party
  ``ctxpolicy_event`` observer; no host module imports it (an import contract).

Nothing is re-exported here, so importing the catalogue never loads a sink.
"""
