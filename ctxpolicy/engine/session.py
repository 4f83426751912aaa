"""The public :class:`Session`: prepares every model call of one conversation.

``prepare(messages)`` groups messages into units, re-applies the compaction
decisions taken earlier (so summaries are not recomputed and the prefix stays
stable), counts, and runs the policy's pipeline (:mod:`ctxpolicy.engine.pipeline`);
when the request still exceeds ``window − reserve_output`` the last-resort squeeze
(:mod:`ctxpolicy.engine.squeeze`) makes it fit; what the call reports
(``context.status`` and the events around it) is :mod:`ctxpolicy.engine.report`.

``on_error(exc, messages)`` is the reactive path: on a provider's context-overflow
error it learns the stated limit, runs the ``on_overflow`` layer and returns the
messages to retry with, at most ``retries`` times in a row.

What a session decided is its :class:`~ctxpolicy.engine.state.SessionState`
(``session.state``); everything else it keeps is derived
(:mod:`ctxpolicy.engine.derived`).
"""

from __future__ import annotations

import functools
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ctxpolicy import plugins
from ctxpolicy.budget import BudgetState
from ctxpolicy.components import SnapshotStore, StateStore, Summarizer, ToolCall
from ctxpolicy.conversation import Message, Unit, check_messages, render
from ctxpolicy.engine.call import Call
from ctxpolicy.engine.context import EngineContext
from ctxpolicy.engine.derived import Components, Derived, remember
from ctxpolicy.engine.ledger import ProgressLedger
from ctxpolicy.engine.overflow import is_context_overflow, parse_limit
from ctxpolicy.engine.own import as_summarizer, check_tool_name, insert_specials, tool_call_info
from ctxpolicy.engine.persistence import (
    Persistence,
    new_state,
    open_persistence,
    refuser,
    restore,
)
from ctxpolicy.engine.pipeline import run_pipeline
from ctxpolicy.engine.recorder import TraceRecorder
from ctxpolicy.engine.repairs import flatten_message, report_repairs
from ctxpolicy.engine.report import report_call
from ctxpolicy.engine.specials import history_changed, ledger_changed, special_units, sync_ledger
from ctxpolicy.engine.squeeze import squeeze
from ctxpolicy.engine.state import PreparedStats, SessionState
from ctxpolicy.engine.tool_rules import arrived, tool_result
from ctxpolicy.engine.window import budget_in_force, learn_window
from ctxpolicy.events.types import (
    ContextOverflowErrorEvent,
    ContextUsage,
    EngineInvariantFailed,
    Event,
    ObserverFailed,
    SnapshotUnavailable,
)
from ctxpolicy.plugins import Registry
from ctxpolicy.policy.models import Policy
from ctxpolicy.tokens import TokenCounter, get_counter

if TYPE_CHECKING:
    from ctxpolicy.snapshots.lost import LostRefs

__all__ = ["ContextOverflowError", "PreparedStats", "Session", "SessionInternals", "prepare"]

T = TypeVar("T")
P = ParamSpec("P")

#: Pipeline passes per call at most (see ``_prepare``).
_PASSES = 3


class ContextOverflowError(RuntimeError):
    """The provider kept rejecting the prompt after every allowed retry."""

    def __init__(
        self, message: str, *, attempts: int, used: int | None = None, limit: int | None = None
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.used = used
        self.limit = limit


@dataclass(frozen=True)
class SessionInternals:
    """The engine behind a :class:`Session` (``Session.internals``), for tests and
    debugging. **Unstable**: it follows the engine's internals and may change in any
    release without notice; an agent never needs it."""

    #: the conversation's engine: policy, components, ``state``, ``derived`` caches
    context: EngineContext
    #: the link to the state store (None: the state is kept in memory only)
    persistence: Persistence | None


def _transaction(what: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """A state-changing call of :class:`Session`: serialised on the session's lock and,
    with a state store, run by :meth:`Persistence.run` (what it changed is committed
    with a compare-and-set; after a lost race the state is reloaded and the call runs
    again, so its body must take everything it decides from the state)."""

    def wrap(method: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(method)
        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            self = args[0]
            assert isinstance(self, Session)
            with self._lock:
                if self._persist is None:
                    return method(*args, **kwargs)
                return self._persist.run(what, lambda: method(*args, **kwargs))

        return call

    return wrap


class Session:
    """Context management for one conversation under one policy.

    Thread-safe: calls on one session are serialised; sessions share token caches.

    A tool result that arrives in the messages of ``prepare`` (not through
    ``add_tool_result``) gets its tool's rule once, like ``add_tool_result`` would
    apply it; ``tool_rules_in_prepare=False`` sends such results as they are (an
    adapter whose user turned tool preprocessing off).
    """

    def __init__(
        self,
        policy: Policy,
        conv_id: str | None = None,
        *,
        summarizer: Summarizer | Callable[..., str] | None = None,
        snapshot_store: SnapshotStore | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        handover: Any = None,
        counter: TokenCounter | None = None,
        env: Mapping[str, str] | None = None,
        state_store: StateStore | None = None,
        record: str | os.PathLike[str] | None = None,
        tool_rules_in_prepare: bool = True,
    ) -> None:
        self.policy = policy
        self.conv_id = conv_id or uuid.uuid4().hex[:12]
        self._on_event = on_event
        self._lost: LostRefs | None = None  # references retention took (lazily)
        self._lock = threading.RLock()
        self.events: deque[dict[str, Any]] = deque(maxlen=1000)
        registry = plugins.get_registry()
        counter = counter or get_counter(policy.model, model_name=policy.model_name, on_event=None)
        for fb in getattr(counter, "fallbacks", []) or []:
            self._emit(
                str(fb.get("type", "tokenizer.fallback")),
                **{k: v for k, v in fb.items() if k != "type"},
            )
        #: the engine of this conversation (what engine modules get; see its module)
        state = new_state(policy, counter)
        components = Components(registry, as_summarizer(summarizer))
        self._ctx = ctx = EngineContext(
            policy,
            self.conv_id,
            registry,
            counter,
            self._emit,
            state=state,
            derived=Derived(policy, counter, components, state.ledger),
        )
        # what the per-call path (derived.Caches, which keeps no engine) calls back
        self._flatten = functools.partial(flatten_message, ctx)
        self._repaired = functools.partial(report_repairs, ctx)
        self._specials = functools.partial(special_units, ctx)
        self._history_changed = functools.partial(history_changed, ctx)
        if handover is not None:
            self._load_handover(handover)
        ctx.snapshots = snapshot_store if snapshot_store is not None else self._open_store(env)
        # the stored state of conv_id (policy's `state:` store, or state_store); a
        # session without a conv_id is a new conversation nobody can resume: memory only
        self._persist: Persistence | None = (
            open_persistence(ctx, state_store, env)
            if conv_id is not None or state_store is not None
            else None
        )
        self._arrive = functools.partial(arrived, ctx) if tool_rules_in_prepare else None
        #: the trace this conversation records to (``record=``; engine/recorder.py)
        self.recorder: TraceRecorder | None = (
            TraceRecorder.open(record, self.conv_id, self._emit) if record is not None else None
        )

    # ------------------------------------------------------------------ public API
    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def internals(self) -> SessionInternals:
        """The engine behind this session, for tests and debugging (**unstable**: see
        :class:`SessionInternals` and docs/engine.md, "Inspecting a session")."""
        return SessionInternals(self._ctx, self._persist)

    @property
    def state(self) -> SessionState:
        """What this conversation decided (persisted; see :mod:`ctxpolicy.engine.state`)."""
        return self._ctx.state

    @property
    def ledger(self) -> ProgressLedger | None:
        """The progress ledger (None when the policy disables it)."""
        return self._ctx.state.ledger

    @property
    def snapshots(self) -> SnapshotStore | None:
        """The snapshot store (None: disabled or unavailable)."""
        return self._ctx.snapshots

    @property
    def counter(self) -> TokenCounter:
        """The token counter of the policy's model."""
        return self._ctx.counter

    @property
    def registry(self) -> Registry:
        """The plugin registry the session's components come from."""
        return self._ctx.registry

    @property
    def stats(self) -> PreparedStats:
        """Running numbers of this session."""
        return self.state.stats

    @property
    def status(self) -> dict[str, Any] | None:
        """The last ``context.status`` event (None before the first ``prepare``)."""
        return self.state.status

    def budget(self) -> BudgetState:
        """The budget in force now (learned tool growth and learned window included)."""
        return budget_in_force(self._ctx)

    def prepare(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Message]:
        """The message list to send now: fits the budget, pairs intact, pinned kept."""
        out = self._prepare_call(messages, tools)
        if self.recorder is not None:
            self.recorder.record(messages, sent=out)
        return out

    @_transaction("prepare")
    def _prepare_call(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> list[Message]:
        st = self.state
        if st.overflow_attempts:
            st.overflow_attempts = 0
            st.touch("meta")
        return self._prepare(messages, tools, forced=False)

    def on_error(
        self,
        error: BaseException | str | Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Message] | None:
        """Reactive compaction after a provider error.

        Returns the messages to retry with, or None when ``error`` is not a
        context overflow. Raises :class:`ContextOverflowError` once the
        ``on_overflow`` layer's ``retries`` are used up without a successful call.
        """
        return self._on_error_call(error, messages, tools)

    @_transaction("on_error")
    def _on_error_call(
        self,
        error: BaseException | str | Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[Message] | None:
        if not is_context_overflow(error):
            return None
        limit = parse_limit(error)
        if limit is not None:
            learn_window(self._ctx, limit)
        retries = int(self.policy.on_overflow.options.get("retries", 1))
        st = self.state
        st.overflow_attempts += 1
        st.stats.reactive += 1
        st.touch("meta")
        self._emit(
            ContextOverflowErrorEvent(
                attempt=st.overflow_attempts, retries=retries, limit=limit, error=str(error)[:500]
            )
        )
        if st.overflow_attempts > retries:
            raise ContextOverflowError(
                f"provider rejected the prompt {st.overflow_attempts} times in a row "
                f"(retries allowed: {retries}): {str(error)[:300]}",
                attempts=st.overflow_attempts,
                limit=limit,
            )
        return self._prepare(messages, tools, forced=True)

    def record_usage(self, prompt_tokens: int, counted: int | None = None) -> float:
        """Tell the session the provider's own prompt count for the last call.

        The ratio provider/ours is smoothed (EMA 0.3) and bounded to [0.5, 2.0];
        with an approximate tokenizer it scales every count from then on, so
        estimates converge to the provider's real numbers. Returns the ratio.
        """
        return self._record_usage_call(prompt_tokens, counted)

    @_transaction("record_usage")
    def _record_usage_call(self, prompt_tokens: int, counted: int | None) -> float:
        st = self.state
        ours = counted if counted is not None else (st.status or {}).get("used_raw")
        if not ours or prompt_tokens <= 0:
            return st.calibration
        sample = min(2.0, max(0.5, prompt_tokens / ours))
        st.calibration = round(0.7 * st.calibration + 0.3 * sample if st.usage_seen else sample, 4)
        st.usage_seen = True
        st.touch("meta")
        self._emit(
            ContextUsage(prompt_tokens=int(prompt_tokens), counted=ours, calibration=st.calibration)
        )
        return st.calibration

    def add_tool_result(
        self,
        tool_call: Any,
        output: Any,
        *,
        step: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> str:
        """Preprocess and snapshot one tool result; returns the text for the context."""
        # the result is processed (preprocessed, snapshotted, counted) once; a redo after
        # a lost state race only re-applies what it changes in the session state
        if isinstance(tool_call, str):
            check_tool_name(tool_call, self.policy)
        call = tool_call_info(tool_call)
        text = self._tool_result_call(call, output, step, meta, {})
        if self.recorder is not None:
            self.recorder.tool_result(call, output)
        return text

    @_transaction("add_tool_result")
    def _tool_result_call(
        self,
        call: ToolCall,
        output: Any,
        step: int | None,
        meta: Mapping[str, Any] | None,
        done: dict[str, Any],
    ) -> str:
        return tool_result(self._ctx, call, output, step, meta, done)

    def close(self) -> None:
        """Release the state store this session opened (a store passed in stays open)."""
        if self._persist is not None:
            self._persist.close()

    def recall(self, ref: str, *, lines: Any = None, grep: str | None = None) -> str:
        """The exact original of a snapshot (or a slice of it)."""
        from ctxpolicy.snapshots.recall import recall

        if self.snapshots is None:
            raise LookupError("this session has no snapshot store (snapshots.enabled is false)")
        return recall(self.snapshots, ref, lines=lines, grep=grep)

    def recall_tool(self) -> tuple[list[dict[str, Any]], Callable[[str, Any], str]]:
        """OpenAI tool schemas (``ctx_recall``, ``ctx_search``) and their handler; an
        answer is capped by the budget in force (``answer_chars(budget.tool_growth)``)."""
        from ctxpolicy.snapshots.recall import answer_chars, handle_tool_call, recall_tools

        store = self.snapshots

        def handler(name: str, arguments: Any) -> str:
            if store is None:
                return "Error: no snapshot store is configured for this session."
            cap = answer_chars(self.budget().tool_growth)
            return handle_tool_call(store, self.conv_id, name, arguments, max_chars=cap)

        return recall_tools(), handler

    def handover(self) -> Any:
        """A :class:`ctxpolicy.engine.handover.Handover` built from the ledger and context."""
        from ctxpolicy.engine.handover import build_handover

        return build_handover(self._ctx)

    # ------------------------------------------------------------------ state
    def state_entries(self) -> dict[str, Any]:
        """Every entry of this session's state (a full save; see SessionState)."""
        with self._lock:
            return self.state.to_entries()

    def take_state_changes(self) -> tuple[dict[str, Any], list[str]]:
        """Entries changed and deleted since the last call (an incremental save); a
        value JSON cannot hold is left out (``state.entry_refused``)."""
        with self._lock:
            return self.state.take_changes(refuser(self._ctx.emit))

    def load_state(self, entries: Mapping[str, Any]) -> None:
        """Resume from saved entries: the decided state is replaced, the derived caches
        are dropped (the next ``prepare`` rebuilds them from the messages)."""
        with self._lock:
            restore(self._ctx, entries)

    # ------------------------------------------------------------------ internals
    def _emit(self, type_: str | Event, **fields: Any) -> dict[str, Any]:
        ts = round(time.time(), 6)
        if isinstance(type_, Event):  # a typed event (ctxpolicy/events/types.py)
            event = {"type": type_.TYPE, "conv_id": self.conv_id, "ts": ts, **fields}
            event.update(type_.fields())
        else:
            event = {"type": type_, "conv_id": self.conv_id, "ts": ts, **fields}
        self.events.append(event)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception as exc:  # an observer must not break the agent
                failed = ObserverFailed(error=repr(exc))
                self.events.append(
                    {"type": failed.TYPE, "conv_id": self.conv_id, **failed.fields()}
                )
        for problem in plugins.emit_event(event):
            failed = ObserverFailed(error=problem)
            self.events.append({"type": failed.TYPE, "conv_id": self.conv_id, **failed.fields()})
        return event

    def _load_handover(self, handover: Any) -> None:
        from ctxpolicy.engine.handover import Handover

        if isinstance(handover, Mapping):
            handover = Handover.model_validate(handover)
        elif isinstance(handover, str):
            handover = Handover.model_validate_json(handover)
        self.state.handover_text = handover.as_text()
        self.state.touch("meta")
        if self.ledger is not None:
            for c in handover.constraints:
                if c not in self.ledger.constraints:
                    self.ledger.constraints.append(c)
            if handover.goal and self.ledger.goal is None:
                self.ledger.goal = handover.goal
            ledger_changed(self._ctx)

    def _open_store(self, env: Mapping[str, str] | None) -> SnapshotStore | None:
        if not self.policy.snapshots.enabled:
            return None
        from ctxpolicy.engine.tool_results import open_store

        try:
            return open_store(self.policy, self.registry, env=env)
        except Exception as exc:
            self._emit(SnapshotUnavailable(error=repr(exc)))
            return None

    # ------------------------------------------------------------------ the call
    def _prepare(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        forced: bool,
    ) -> list[Message]:
        started = time.perf_counter()
        if type(messages) is not list and (
            isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence)
        ):
            raise TypeError("messages must be a list of OpenAI chat messages (dicts)")
        ctx = self._ctx
        st = ctx.state
        counter = ctx.counter
        caches = ctx.derived.caches
        msgs, unchanged = caches.input(messages, self._arrive, self._flatten)
        originals, keep = caches.units(msgs, unchanged, st.refs, self._repaired)
        view, out = caches.view(originals, keep, st, self._specials, self._history_changed)
        tools_tokens = counter.count_tools(tools) if tools else 0
        scale = st.calibration if counter.approximate else 1.0

        def scaled(raw: int) -> int:
            return raw if scale == 1.0 else int(raw * scale + 0.999)

        def count(units: Sequence[Unit]) -> int:
            return scaled(counter.count_messages(render(units)) + tools_tokens)

        # counted by the view from the grouping's prefix sums (no pass over ``out``)
        out_tokens = caches.out_tokens
        used = scaled(out_tokens + tools_tokens)
        call = Call(
            view,
            used,
            budget_in_force(ctx),
            count,
            forced=forced,
            entry_used=used,
            started=started,
            messages_in=len(msgs),
            tokens_in=caches.tokens_in + tools_tokens + caches.priming,
        )
        start = view
        for _ in range(_PASSES):
            # a pass can grow the ledger (facts of what it dropped) back above the
            # target: the eligible layers then run again over the new ledger
            by = run_pipeline(ctx, call, cache_lost=call.compact_layer is not None)
            if by is None:
                break
            call.compact_layer = by
            rest = [u for u in call.view if u.kind != "ledger"]
            sync_ledger(ctx, start, rest, tools)
            call.view = insert_specials(rest, special_units(ctx))
            call.used = count(call.view)
            if call.forced or call.at_target():
                break
        call.changed = call.compact_layer is not None
        squeeze(ctx, call)  # the last resort, when the request does not fit
        if call.changed:
            st.set_decisions(remember(call.view, originals))
            out = render(call.view)
            # the view cache of the new decisions, built now: the calls after this one
            # that compact nothing render only their new units (no pass over them all)
            caches.view(originals, keep, st, self._specials, self._history_changed)
        ctx.derived.last_units = call.view
        # grouping guarantees pairs; a changed view is re-checked as a whole as well
        violations = check_messages(out) if call.changed else []
        if violations:  # pragma: no cover - layers are checked one by one
            self._emit(EngineInvariantFailed(violations=[v.detail for v in violations]))
            out = render(originals)
            call.used = count(originals)
        changed = call.changed
        call.messages = len(out)
        call.used_raw = (
            call.used
            if scale == 1.0
            else (out_tokens if not changed else counter.count_messages(out)) + tools_tokens
        )
        report_call(ctx, call)
        return self._uncite_lost(out)

    def _uncite_lost(self, out: list[Message]) -> list[Message]:
        """``out`` without references retention took: each is a ``data.lost`` event
        once, and its reference line says it is gone (ctxpolicy/snapshots/lost.py).
        One ``lstat`` per call while nothing of this conversation was lost."""
        lost = self._lost
        store = self._ctx.snapshots
        if lost is None or lost.store is not store:
            if store is None:
                return out
            from ctxpolicy.snapshots.lost import LostRefs

            lost = self._lost = LostRefs(store, self.conv_id)
        try:
            out, new = lost.apply(out)
        except Exception as exc:  # a third-party store's odd error: nothing un-cited
            self._emit(SnapshotUnavailable(error=repr(exc)))
            return out
        if new:
            from ctxpolicy.snapshots.lost import lost_event

            self._emit(lost_event(new))
        return out


def prepare(
    messages: Sequence[Mapping[str, Any]],
    *,
    policy: Policy | str,
    agent: str = "default",
    tools: Sequence[Mapping[str, Any]] | None = None,
    **session_options: Any,
) -> list[Message]:
    """One-shot: prepare ``messages`` under a policy (object or file path)."""
    if not isinstance(policy, Policy):
        from ctxpolicy.resolve.load import load_policy

        policy = load_policy(policy, agent=agent)
    return Session(policy, **session_options).prepare(messages, tools=tools)
