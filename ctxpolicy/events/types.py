"""One definition per event type the host and the built-in components emit.

Each event type is a frozen dataclass here, registered in :data:`EVENTS` (type →
class). An emit site builds its event through its class::

    ctx.emit(StateResumed(version=3))            # the engine's emit takes an Event
    ctx.emit(ev.TYPE, **ev.fields())             # a layer's CompactionContext.emit

:meth:`Event.fields` gives the payload in the order the fields are declared here: an
optional field left :data:`ABSENT` is not in the payload at all (``None`` is a value
and is kept). The session adds ``type``, ``conv_id`` and ``ts`` in front; events of a
layer's compaction (:attr:`Event.SCOPE` ``"layer"``) also get ``layer`` and
``plugin`` after them. The table of docs/engine.md is generated from these classes
(``python -m ctxpolicy.testing.eventdocs --write``; ``--check`` fails when stale).

Two classes end in ``Event`` where the plain name is an exception
(:class:`ContextOverflowErrorEvent`, :class:`StateConflictEvent`). :func:`problems`
checks an emitted dict against its definition. This module imports nothing of
ctxpolicy, so every layer of the package can use it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, dataclass_transform

__all__ = [
    "ABSENT",
    "EVENTS",
    "Absent",
    "Event",
    "field_doc",
    "problems",
    "span_fields",
    "status_fields",
]


class Absent(enum.Enum):
    """The type of :data:`ABSENT`."""

    ABSENT = "absent"

    def __repr__(self) -> str:
        return "ABSENT"


#: An optional field's default: the field is left out of the payload.
ABSENT = Absent.ABSENT

#: Every event type → its class, in the order of this module.
EVENTS: dict[str, type[Event]] = {}

E = TypeVar("E", bound="Event")


def _f(doc: str = "", *, span: bool = False) -> Any:
    """A field always present (``span``: an OTel attribute of the prepare span)."""
    return field(metadata={"doc": doc, "span": span})


def _opt(doc: str = "") -> Any:
    """A field present only where the emit site gives it."""
    return field(default=ABSENT, metadata={"doc": doc, "optional": True})


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every event definition."""

    #: the event's ``type``
    TYPE: ClassVar[str] = ""
    #: when it is emitted (the docs table's second column)
    WHEN: ClassVar[str] = ""
    #: ``"layer"``: always from a layer's compaction (``layer``, ``plugin`` added);
    #: ``"either"``: from a layer's compaction (then with them) or from the session
    SCOPE: ClassVar[str] = ""
    _NAMES: ClassVar[tuple[str, ...]] = ()

    def fields(self) -> dict[str, Any]:
        """The payload without ``type``: every field in declared order, optional
        fields only when given."""
        out: dict[str, Any] = {}
        for name in self._NAMES:
            value = getattr(self, name)
            if value is not ABSENT:
                out[name] = value
        return out

    def send(self, emit: Callable[..., Any]) -> Any:
        """``emit(TYPE, **fields())``: for an ``emit(type, **fields)`` callable (a
        layer's :attr:`CompactionContext.emit`, the state store's)."""
        return emit(self.TYPE, **self.fields())

    def as_dict(self) -> dict[str, Any]:
        """``{"type": TYPE, **fields()}``: the event where a dict is passed on."""
        return {"type": self.TYPE, **self.fields()}


@dataclass_transform(kw_only_default=True, frozen_default=True)
def _event(type_: str, when: str, *, scope: str = "") -> Callable[[type[E]], type[E]]:
    """Define an event type: the class becomes a frozen, slotted, keyword-only
    dataclass, registered in :data:`EVENTS` under ``type_``."""

    def register(cls: type[E]) -> type[E]:
        if type_ in EVENTS:  # pragma: no cover - a definition error
            raise ValueError(f"event type {type_!r} is defined twice")
        cls = dataclass(frozen=True, slots=True, kw_only=True)(cls)
        cls.TYPE, cls.WHEN, cls.SCOPE = type_, when, scope
        cls._NAMES = tuple(f.name for f in dataclasses.fields(cls))
        EVENTS[type_] = cls
        return cls

    return register


def problems(event: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``event`` (a dict as emitted) against its definition: an
    unknown type, a field not defined or out of order, a missing field. ``[]``: fine."""
    type_ = event.get("type")
    cls = EVENTS.get(type_) if isinstance(type_, str) else None
    if cls is None:
        return [f"unknown event type {type_!r}"]
    keys = [k for k in event if k not in ("type", "conv_id", "ts")]
    out: list[str] = []
    if cls.SCOPE and keys[:2] == ["layer", "plugin"]:
        keys = keys[2:]
    elif cls.SCOPE == "layer":
        out.append(f"{type_}: no layer, plugin")
    declared = iter(cls._NAMES)
    if not all(k in declared for k in keys):  # a subsequence of the declared order
        out.append(f"{type_}: fields {keys} are not {list(cls._NAMES)} in order")
    required = [f.name for f in dataclasses.fields(cls) if not _optional(f)]
    out += [f"{type_}: no {name}" for name in required if name not in event]
    return out


def status_fields() -> tuple[str, ...]:
    """Keys every ``context.status`` has, in order (``type`` first; ``conv_id``,
    ``ts`` not included)."""
    return ("type", *(f.name for f in dataclasses.fields(ContextStatus) if not _optional(f)))


def span_fields(cls: type[Event]) -> tuple[str, ...]:
    """The fields of ``cls`` that the OTel sink sets as span attributes."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("span"))


def field_doc(cls: type[Event]) -> str:
    """The fields column of the docs table: ``name (doc)``, optional ones marked."""
    parts = []
    if cls.SCOPE == "layer":
        parts.append("layer, plugin")
    elif cls.SCOPE == "either":
        parts.append("layer, plugin (from a layer's compaction)")
    for f in dataclasses.fields(cls):
        doc = str(f.metadata.get("doc", ""))
        text = f.name
        if _optional(f):
            doc = f"optional{': ' + doc if doc else ''}"
        parts.append(f"{text} ({doc})" if doc else text)
    return ", ".join(parts)


def _optional(f: dataclasses.Field[Any]) -> bool:
    return bool(f.metadata.get("optional"))


# ---------------------------------------------------------------------- the prepare
@_event("context.status", "every `prepare`")
class ContextStatus(Event):
    # design A's fields first; ``budget`` is design A's effective budget (our trigger)
    used: int = _f(span=True)
    budget: int = _f(span=True)
    ratio: float = _f(span=True)
    state: str = _f(span=True)
    compact_layer: str | None = _f(span=True)
    compacted_from: int | None = _f("tokens before the compaction; None when none ran")
    window: int = _f(span=True)
    trigger: int = _f(span=True)
    target: int = _f(span=True)
    tokenizer: str = _f(span=True)
    approximate: bool = _f(span=True)
    calibration: float = _f()
    used_raw: int = _f("before calibration")
    messages: int = _f(span=True)
    messages_in: int = _f(span=True)
    tokens_in: int = _f(span=True)
    duration_ms: float = _f(span=True)
    unfit: str | Absent = _opt("the reason, once `context.window_unfit` was sent")


@_event("context.compacted", "a layer changed the context", scope="layer")
class ContextCompacted(Event):
    before: int = _f()
    after: int = _f()
    units_before: int = _f()
    units_after: int = _f()
    units_removed: int = _f()
    duration_ms: float = _f()
    report: Any = _f()
    lost_facts: list[str] = _f(
        "the JSONL and OTel sinks export `lost_facts_count` instead, see docs/security.md §11.1"
    )
    prefix_tokens: int | Absent = _opt(
        "tokens in front of the first changed unit: the prefix a prompt cache still serves"
    )


@_event("layer.failed", "a layer raised", scope="layer")
class LayerFailed(Event):
    error: str = _f()


@_event(
    "layer.rejected",
    "a layer broke an invariant, or what it dropped could not be archived",
    scope="layer",
)
class LayerRejected(Event):
    problems: list[str] = _f()


@_event(
    "layer.deferred",
    "the call's layers together freed less than `budget.min_gain` (or `cache.min_gain_tokens`)",
    scope="layer",
)
class LayerDeferred(Event):
    gain: int = _f("this layer's")
    call_gain: int = _f()
    min_gain_tokens: int = _f()
    # the rewrite's economics, when the policy prices a rewrite (engine/economics.py)
    rewrite_tokens: int | Absent = _opt()
    predicted_calls: float | Absent = _opt()
    rewrite_cost: float | Absent = _opt()
    rewrite_saving: float | Absent = _opt()
    price_model: str | Absent = _opt()


@_event(
    "ledger.failed",
    "updating the progress ledger or the key-facts check raised (the compaction still applies)",
    scope="layer",
)
class LedgerFailed(Event):
    error: str = _f()


@_event(
    "context.above_target",
    "a compaction ended above the target; none runs before `resume_at` "
    "(or before the request would not fit)",
)
class ContextAboveTarget(Event):
    used: int = _f()
    target: int = _f()
    pinned_tokens: int = _f()
    rest_tokens: int = _f()
    units: int = _f()
    resume_at: int = _f()


@_event(
    "context.compaction_held",
    "once per hold: a compaction due again within a few calls of the last one, or one "
    "that would leave room for too few calls before the fit limit, is not made; "
    "none runs before `resume_at` (the request would not fit)",
)
class ContextCompactionHeld(Event):
    used: int = _f()
    calls_since: int = _f("calls since the last compaction")
    resume_at: int = _f()
    growth_per_call: int | Absent = _opt("mean growth of the request per call")
    room_calls: int | Absent = _opt(
        "calls of growth the compaction on offer would leave before the fit limit "
        "(held for too little room)"
    )


@_event("context.window_unfit", "once: the learned window cannot hold the policy")
class ContextWindowUnfit(Event):
    window: int = _f()
    trigger: int = _f()
    used: int = _f()
    pinned_tokens: int = _f()
    reason: str = _f()


@_event("context.overflow", "the prepared list is above the trigger or the hard limit")
class ContextOverflow(Event):
    used: int = _f()
    trigger: int = _f()
    hard_limit: int = _f()
    unavoidable: bool = _f("above the hard limit")
    reason: str = _f()


@_event("context.overflow_error", "`on_error` saw an overflow")
class ContextOverflowErrorEvent(Event):
    attempt: int = _f()
    retries: int = _f()
    limit: int | None = _f("the limit the error stated")
    error: str = _f()


@_event(
    "context.truncated_pinned",
    "pinned messages were shortened: the request would not fit otherwise",
)
class ContextTruncatedPinned(Event):
    before: int = _f()
    after: int = _f()
    limit: int = _f()


@_event("context.usage", "`record_usage`")
class ContextUsage(Event):
    prompt_tokens: int = _f()
    counted: int = _f()
    calibration: float = _f()


@_event("context.window_learned", "a provider error stated a smaller limit")
class ContextWindowLearned(Event):
    window: int = _f()
    previous: int | None = _f()


@_event(
    "context.window_ignored",
    "a provider error stated a limit below the policy's floor: not learned",
)
class ContextWindowIgnored(Event):
    stated: int = _f()
    floor: int = _f()
    window: int = _f()


@_event("context.reset", "history was edited; decisions discarded")
class ContextReset(Event):
    reason: str = _f()


@_event("engine.invariant_failed", "the prepared list broke an invariant; the input is sent")
class EngineInvariantFailed(Event):
    violations: list[str] = _f()


# ---------------------------------------------------------------------- the messages
@_event("conversation.repaired", "malformed input repaired (once per kind and message)")
class ConversationRepaired(Event):
    repair: str = _f()
    index: int = _f()
    detail: str = _f()
    removed: int = _f()
    archived: str | None = _f()


@_event(
    "data.lost",
    "content left the context without an archive (the request would not fit otherwise),"
    " or retention took references the context cited",
    scope="either",
)
class DataLost(Event):
    units: list[str] | Absent = _opt("keys of the units")
    messages: int | Absent = _opt()
    chars: int | Absent = _opt("characters cut by the squeeze")
    refs: list[str] | Absent = _opt("references retention took")
    count: int | Absent = _opt()
    reason: str = _f()


# ---------------------------------------------------------------------- tool results
@_event(
    "tool.preprocessed", "`add_tool_result`; `prepare`, for a result that arrived in its messages"
)
class ToolPreprocessed(Event):
    tool: str = _f()
    preprocessor: str = _f()
    chars_before: int = _f()
    chars_after: int = _f()
    tokens_before: int = _f()
    tokens_after: int = _f()
    snapshot: str | None = _f()
    step: int = _f()


@_event("tool.redacted", "secrets were redacted from a tool result's context text")
class ToolRedacted(Event):
    tool: str = _f()
    counts: dict[str, int] = _f("per pattern")


@_event("tool.preprocess_failed", "a preprocessor raised; the fallback was used")
class ToolPreprocessFailed(Event):
    tool: str = _f()
    preprocessor: str = _f()
    plugin: str | None = _f()
    error: str = _f()


@_event("tokenizer.fallback", "the wanted tokenizer could not load")
class TokenizerFallback(Event):
    wanted: str = _f()
    using: str = _f()
    reason: str = _f()
    approximate: bool = _f()
    model: str | None = _f()
    tried: list[dict[str, Any]] = _f()


# ---------------------------------------------------------------------- snapshots
@_event("snapshot.unavailable", "the snapshot store could not be opened or read")
class SnapshotUnavailable(Event):
    error: str = _f()


@_event(
    "snapshot.failed",
    "a snapshot or archive write failed (the original stays in context)",
    scope="either",
)
class SnapshotFailed(Event):
    tool: str | Absent = _opt("a tool result's snapshot")
    store: str | Absent = _opt()
    root: Any = _opt()
    errno: int | Absent | None = _opt()
    error: str = _f()
    action: str | Absent = _opt("`history`: the archive of compacted messages")


@_event(
    "snapshot.too_large",
    "a snapshot or archived message was above the store's size limit: its start is kept",
    scope="either",
)
class SnapshotTooLarge(Event):
    action: str | Absent = _opt("`history`: an archived message")
    tool: str | Absent = _opt("a tool result's snapshot")
    role: str | Absent | None = _opt()
    bytes: int = _f()
    max_snapshot_bytes: int | Absent = _opt()
    kept_bytes: int = _f()


@_event("record.failed", "the session's recording (`record=`) could not be written")
class RecordFailed(Event):
    path: str = _f()
    error: str = _f()


@_event("observer.failed", "an observer raised (in `session.events` only; no `ts`)")
class ObserverFailed(Event):
    error: str = _f()


# ---------------------------------------------------------------------- state store
@_event(
    "state.resumed",
    "a new session loaded its conversation's stored state ([state](state.md))",
)
class StateResumed(Event):
    version: int = _f()


@_event(
    "state.conflict",
    "a save lost the compare-and-set race; the call is redone on the stored state",
)
class StateConflictEvent(Event):
    call: str = _f()
    attempt: int = _f()
    expected_version: int | None = _f()
    gave_up: bool = _f()


@_event("state.save_failed", "the state store failed during a save (the changes stay pending)")
class StateSaveFailed(Event):
    call: str = _f()
    error: str = _f()


@_event(
    "state.unavailable",
    "the state store could not be opened or read; the session works in memory",
)
class StateUnavailable(Event):
    store: str = _f()
    error: str = _f()


@_event(
    "state.invalid",
    "a stored entry did not fit the state's model: not obeyed, started afresh"
    " ([state](state.md#stored-state-is-checked-before-it-is-obeyed))",
)
class StateInvalid(Event):
    key: str = _f()
    reason: str = _f()


@_event(
    "state.reload_failed",
    "the store failed during the reload after a lost race; the next call reloads first",
)
class StateReloadFailed(Event):
    call: str = _f()
    error: str = _f()


@_event(
    "state.entry_refused",
    "a change under a key, or with a value, no store can hold was dropped (the call and"
    " the other changes went on)",
)
class StateEntryRefused(Event):
    key: str = _f()
    reason: str = _f()


@_event(
    "state.pruned",
    "a session opening the store deleted conversations idle longer than"
    " `state.max_age_days` ([state](state.md#retention))",
)
class StatePruned(Event):
    store: str = _f()
    conversations: int = _f()
    max_age_days: float = _f()


@_event("state.prune_failed", "deleting idle conversations failed; the session goes on")
class StatePruneFailed(Event):
    store: str = _f()
    error: str = _f()


# ---------------------------------------------------------------------- summarize layer
@_event("summarizer.failed", "the summarizer raised or answered unusably", scope="layer")
class SummarizerFailed(Event):
    summarizer: str = _f()
    reason: str = _f()
    failures: int = _f("in a row")


@_event("summarizer.hung", "a summarizer call passed `timeout_s`", scope="layer")
class SummarizerHung(Event):
    summarizer: str = _f()
    timeout_s: float = _f()


@_event("summarizer.busy", "the summarizer is still hung from an earlier call", scope="layer")
class SummarizerBusy(Event):
    summarizer: str = _f()
    hung_for_s: float = _f()


@_event(
    "breaker.open", "`max_failures` failures in a row: the summarizer is skipped", scope="layer"
)
class BreakerOpen(Event):
    summarizer: str = _f()
    failures: int = _f()


@_event("breaker.closed", "the summarizer answered again after the breaker opened", scope="layer")
class BreakerClosed(Event):
    summarizer: str = _f()
