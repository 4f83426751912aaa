"""The engine: a :class:`Session` prepares every model call of one conversation.

``prepare(messages)`` groups messages into units, re-applies the compaction
decisions taken earlier in this session (so summaries are not recomputed and the
prefix stays stable), counts, and runs the policy's pipeline while the context is
above the target. Every layer runs isolated: an exception, broken pairing, a
removed pinned unit or a layer that grows the context discards that layer's output
and is reported with the plugin's name; history is never lost.

``on_error(exc, messages)`` is the reactive path (design A L4): on a provider's
context-overflow error it learns the stated limit, runs the ``on_overflow`` layer
and returns the messages to retry with, at most ``retries`` times in a row.
"""

from __future__ import annotations

import bisect
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ctxpolicy import plugins
from ctxpolicy.budget import BudgetState, ToolGrowthEstimator, compute_budget
from ctxpolicy.components import (
    CompactionContext,
    Layer,
    LayerResult,
    SnapshotStore,
    Summarizer,
    ToolCall,
)
from ctxpolicy.conversation import (
    Message,
    Unit,
    check_messages,
    check_units,
    content_text,
    group_units,
    message_fingerprint,
    pin_units,
    render,
)
from ctxpolicy.policy.models import Policy, ResolvedStep, State
from ctxpolicy.tokens import _NO_SNAPSHOT, TokenCounter, _snapshot, _value_key, get_counter

__all__ = ["ContextOverflowError", "PreparedStats", "Session", "prepare"]

#: First line of the ledger message; lets a re-ingested ledger be recognised.
LEDGER_MARK = "[ctxpolicy progress ledger]"
#: First line of a pinned handover message.
HANDOVER_MARK = "[ctxpolicy handover]"
_SQUEEZE_MARK = "[ctxpolicy: {n} characters of this tool result removed to fit the window]"


class ContextOverflowError(RuntimeError):
    """The provider kept rejecting the prompt after every allowed retry."""

    def __init__(
        self, message: str, *, attempts: int, used: int | None = None, limit: int | None = None
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.used = used
        self.limit = limit


@dataclass
class PreparedStats:
    """Running numbers of a session (``Session.stats``)."""

    prepares: int = 0
    compactions: Counter[str] = field(default_factory=Counter)
    layer_failures: Counter[str] = field(default_factory=Counter)
    overflows: int = 0
    reactive: int = 0
    tool_results: int = 0
    tool_tokens_before: int = 0
    tool_tokens_after: int = 0
    tokens_in: int = 0
    tokens_sent: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "prepares": self.prepares,
            "compactions": dict(self.compactions),
            "layer_failures": dict(self.layer_failures),
            "overflows": self.overflows,
            "reactive": self.reactive,
            "tool_results": self.tool_results,
            "tool_tokens_before": self.tool_tokens_before,
            "tool_tokens_after": self.tool_tokens_after,
            "tokens_in": self.tokens_in,
            "tokens_sent": self.tokens_sent,
        }


def _tool_call_info(tool_call: Any) -> ToolCall:
    if isinstance(tool_call, ToolCall):
        return tool_call
    if isinstance(tool_call, str):
        return ToolCall(name=tool_call)
    if isinstance(tool_call, Mapping):
        fn = tool_call.get("function")
        if isinstance(fn, Mapping):
            return ToolCall(
                name=str(fn.get("name", "")), arguments=fn.get("arguments"), id=tool_call.get("id")
            )
        return ToolCall(
            name=str(tool_call.get("name", "")),
            arguments=tool_call.get("arguments", tool_call.get("input", tool_call.get("args"))),
            id=tool_call.get("id"),
        )
    name = getattr(tool_call, "name", None) or getattr(
        getattr(tool_call, "function", None), "name", ""
    )
    return ToolCall(
        name=str(name),
        arguments=getattr(tool_call, "arguments", None),
        id=getattr(tool_call, "id", None),
    )


class Session:
    """Context management for one conversation under one policy.

    Thread-safe: calls on one session are serialised; sessions share token caches.
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
    ) -> None:
        self.policy = policy
        self.conv_id = conv_id or uuid.uuid4().hex[:12]
        self._on_event = on_event
        self._lock = threading.RLock()
        self.registry = plugins.get_registry()
        self.events: deque[dict[str, Any]] = deque(maxlen=1000)
        self.stats = PreparedStats()
        self.counter = counter or get_counter(
            policy.model, model_name=policy.model_name, on_event=None
        )
        for fb in getattr(self.counter, "fallbacks", []) or []:
            self._emit(
                str(fb.get("type", "tokenizer.fallback")),
                **{k: v for k, v in fb.items() if k != "type"},
            )
        self._growth = ToolGrowthEstimator(policy)
        self._learned_window: int | None = None
        self._decisions: dict[str, tuple[Unit, ...]] = {}
        self._memory: dict[str, dict[str, Any]] = {}
        self._layers: dict[tuple[str, int], Layer] = {}
        self._overflow_attempts = 0
        self._step = 0
        self._seen_repairs: set[tuple[str, int]] = set()
        self._status: dict[str, Any] | None = None
        self._summarizer_override = _as_summarizer(summarizer)
        self._summarizers: dict[tuple[str, str], Summarizer] = {}
        self.ledger = self._make_ledger()
        self._ledger_text: str | None = self.ledger.render() if self.ledger is not None else None
        self._handover_text: str | None = None
        if handover is not None:
            self._load_handover(handover)
        self.snapshots = snapshot_store if snapshot_store is not None else self._open_store(env)
        self._tool_processor: Any = None
        self._last_units: list[Unit] = []
        self._refs: dict[str, str] = {}
        self._archive: list[Message] = []
        self._in_cache: _InputCache | None = None
        self._group_cache: _GroupCache | None = None
        self._pin_cache: _PinCache | None = None
        self._view_cache: _ViewCache | None = None
        self._decisions_version = 0
        self._budgets: dict[tuple[int, int | None], BudgetState] = {}
        self._archived: set[str] = set()
        self._calibration = 1.0
        self._usage_seen = False

    # ------------------------------------------------------------------ public API
    @property
    def status(self) -> dict[str, Any] | None:
        """The last ``context.status`` event (None before the first ``prepare``)."""
        return self._status

    def budget(self) -> BudgetState:
        """The budget in force now (learned tool growth and learned window included)."""
        growth = self._growth.estimate()
        key = (growth, self._learned_window)
        b = self._budgets.get(key)
        if b is None:
            b = compute_budget(self.policy, tool_growth=growth)
            if self._learned_window is not None and self._learned_window < b.window:
                b = compute_budget(
                    self._policy_with_window(self._learned_window, b), tool_growth=growth
                )
            if len(self._budgets) > 64:
                self._budgets.clear()
            self._budgets[key] = b
        return b

    def prepare(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Message]:
        """The message list to send now: fits the budget, pairs intact, pinned kept."""
        with self._lock:
            self._overflow_attempts = 0
            return self._prepare(messages, tools, force_overflow_layer=False)

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
        from ctxpolicy.layers.emergency import is_context_overflow, parse_limit

        with self._lock:
            if not is_context_overflow(error):
                return None
            limit = parse_limit(error)
            if limit is not None:
                self._learn_window(limit)
            retries = int(self.policy.on_overflow.options.get("retries", 1))
            self._overflow_attempts += 1
            self.stats.reactive += 1
            self._emit(
                "context.overflow_error",
                attempt=self._overflow_attempts,
                retries=retries,
                limit=limit,
                error=str(error)[:500],
            )
            if self._overflow_attempts > retries:
                raise ContextOverflowError(
                    f"provider rejected the prompt {self._overflow_attempts} times in a row "
                    f"(retries allowed: {retries}): {str(error)[:300]}",
                    attempts=self._overflow_attempts,
                    limit=limit,
                )
            return self._prepare(messages, tools, force_overflow_layer=True)

    def record_usage(self, prompt_tokens: int, counted: int | None = None) -> float:
        """Tell the session the provider's own prompt count for the last call.

        The ratio provider/ours is smoothed (EMA 0.3) and bounded to [0.5, 2.0];
        with an approximate tokenizer it scales every count from then on, so
        estimates converge to the provider's real numbers. Returns the ratio.
        """
        with self._lock:
            ours = counted if counted is not None else (self._status or {}).get("used_raw")
            if not ours or prompt_tokens <= 0:
                return self._calibration
            sample = min(2.0, max(0.5, prompt_tokens / ours))
            self._calibration = round(
                0.7 * self._calibration + 0.3 * sample if self._usage_seen else sample, 4
            )
            self._usage_seen = True
            self._emit(
                "context.usage",
                prompt_tokens=int(prompt_tokens),
                counted=ours,
                calibration=self._calibration,
            )
            return self._calibration

    def add_tool_result(
        self,
        tool_call: Any,
        output: Any,
        *,
        step: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> str:
        """Preprocess and snapshot one tool result; returns the text for the context."""
        from ctxpolicy.toolresults import ToolResultProcessor

        call = _tool_call_info(tool_call)
        with self._lock:
            if self._tool_processor is None:
                self._tool_processor = ToolResultProcessor(
                    self.policy, store=self.snapshots, registry=self.registry
                )
            if step is None:
                self._step += 1
                step = self._step
            else:
                self._step = max(self._step, step)
            outcome = self._tool_processor.process(
                call, output, conv_id=self.conv_id, step=step, meta=meta
            )
            for ev in outcome.events:
                ev = dict(ev)
                self._emit(str(ev.pop("type", "tool.event")), **ev)
            if outcome.ref is not None and call.id:
                self._refs[str(call.id)] = outcome.ref.uri
            before = self.counter.count_text(outcome.raw_text)
            after = self.counter.count_text(outcome.text)
            self._growth.observe(call.name, after)
            self.stats.tool_results += 1
            self.stats.tool_tokens_before += before
            self.stats.tool_tokens_after += after
            self._emit(
                "tool.preprocessed",
                tool=call.name,
                preprocessor=outcome.preprocessor,
                chars_before=outcome.chars_before,
                chars_after=outcome.chars_after,
                tokens_before=before,
                tokens_after=after,
                snapshot=outcome.ref.uri if outcome.ref is not None else None,
                step=step,
            )
            return outcome.text

    def recall(self, ref: str, *, lines: Any = None, grep: str | None = None) -> str:
        """The exact original of a snapshot (or a slice of it)."""
        from ctxpolicy.recall import recall

        if self.snapshots is None:
            raise LookupError("this session has no snapshot store (snapshots.enabled is false)")
        return recall(self.snapshots, ref, lines=lines, grep=grep)

    def recall_tool(self) -> tuple[list[dict[str, Any]], Callable[[str, Any], str]]:
        """OpenAI tool schemas (``ctx_recall``, ``ctx_search``) and their handler."""
        from ctxpolicy.recall import handle_tool_call, recall_tools

        store = self.snapshots

        def handler(name: str, arguments: Any) -> str:
            if store is None:
                return "Error: no snapshot store is configured for this session."
            return handle_tool_call(store, self.conv_id, name, arguments)

        return recall_tools(), handler

    def handover(self) -> Any:
        """A :class:`ctxpolicy.handover.Handover` built from the ledger and context."""
        from ctxpolicy.handover import build_handover

        return build_handover(self)

    # ------------------------------------------------------------------ internals
    def _emit(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type_, "conv_id": self.conv_id, "ts": round(time.time(), 6), **fields}
        self.events.append(event)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception as exc:  # an observer must not break the agent
                self.events.append(
                    {"type": "observer.failed", "conv_id": self.conv_id, "error": repr(exc)}
                )
        for problem in plugins.emit_event(event):
            self.events.append(
                {"type": "observer.failed", "conv_id": self.conv_id, "error": problem}
            )
        return event

    def _make_ledger(self) -> Any:
        if not self.policy.ledger.enabled:
            return None
        from ctxpolicy.ledger import Ledger

        return Ledger(
            max_tokens=self.policy.ledger.max_tokens,
            constraints=tuple(self.policy.constraints),
            count_text=self.counter.count_text,
        )

    def _load_handover(self, handover: Any) -> None:
        from ctxpolicy.handover import Handover

        if isinstance(handover, Mapping):
            handover = Handover.model_validate(handover)
        elif isinstance(handover, str):
            handover = Handover.model_validate_json(handover)
        self._handover_text = handover.as_text()
        if self.ledger is not None:
            for c in handover.constraints:
                if c not in self.ledger.constraints:
                    self.ledger.constraints.append(c)
            if handover.goal and self.ledger.goal is None:
                self.ledger.goal = handover.goal
            self._ledger_text = self.ledger.render()

    def _open_store(self, env: Mapping[str, str] | None) -> SnapshotStore | None:
        if not self.policy.snapshots.enabled:
            return None
        from ctxpolicy.toolresults import open_store

        try:
            return open_store(self.policy, self.registry, env=env)
        except Exception as exc:
            self._emit("snapshot.unavailable", error=repr(exc))
            return None

    def _policy_with_window(self, window: int, full: BudgetState) -> Policy:
        """The policy with a learned (smaller) window.

        The policy's reserve and margin are kept when they fit; when the learned window
        is too small for them they are scaled down (reserve ≤ 25 %, margin ≤ 5 % of the
        window) so the agent keeps working instead of failing on its own budget.
        """
        reserve, margin = full.reserve_output, full.safety_margin
        if window - reserve - margin < window // 4:
            reserve = min(reserve, window // 4)
            margin = min(margin, window // 20)
        budget = self.policy.budget.model_copy(
            update={"window": window, "reserve_output": reserve, "safety_margin": margin}
        )
        return self.policy.model_copy(update={"budget": budget})

    def _learn_window(self, limit: int) -> None:
        current = self.budget().window
        if limit < current:
            self._learned_window = limit
            self._emit("context.window_learned", window=limit, previous=current)

    def _layer(self, step: ResolvedStep, index: int) -> Layer:
        key = (step.layer, index)
        layer = self._layers.get(key)
        if layer is None:
            cls = self.registry.get("layer", step.layer)
            if cls is None:
                raise LookupError(f"no plugin provides layer {step.layer!r}")
            layer = cls(cls.Options.model_validate(step.options))  # type: ignore[assignment]
            assert isinstance(layer, Layer)
            self._layers[key] = layer
        return layer

    def _get_summarizer(self, name: str, options: Mapping[str, Any]) -> Summarizer:
        if self._summarizer_override is not None:
            return self._summarizer_override
        okey = (name, repr(sorted(options.items())))
        s = self._summarizers.get(okey)
        if s is None:
            cls = self.registry.get("summarizer", name)
            if cls is None:
                raise LookupError(f"no plugin provides summarizer {name!r}")
            s = cls(cls.Options.model_validate(dict(options)))  # type: ignore[assignment]
            assert isinstance(s, Summarizer)
            self._summarizers[okey] = s
        return s

    def _count(self, units: Sequence[Unit]) -> int:
        return self.counter.count_messages(render(units))

    def _special_units(self) -> list[Unit]:
        """The pinned handover and ledger messages (system role, marked)."""
        parts = (
            ("handover", HANDOVER_MARK, self._handover_text),
            ("ledger", LEDGER_MARK, self._ledger_text),
        )
        return [_special_unit(key, mark, text) for key, mark, text in parts if text]

    def _input(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
        """The conversation without ledger/handover messages of ours that an agent fed
        back in, and how many of its messages are unchanged since the previous call.

        Incremental: the input is compared with snapshots of the previous call's input
        in one C-level list comparison (equal snapshots = same content, even when a
        message was edited in place), so only new messages are looked at.
        """
        if type(messages) is not list:
            messages = list(messages)
        cache = self._in_cache
        k = 0
        if cache is not None:
            snaps = cache.snaps
            k = min(len(messages), len(snaps))
            if messages[:k] != snaps[:k]:
                k = next(i for i, (a, b) in enumerate(zip(messages, snaps, strict=False)) if a != b)
            kept = cache.kept[:k]
            msgs = cache.msgs[: kept[-1] if k else 0]
            snaps = snaps[:k]
        else:
            snaps, kept, msgs = [], [], []
        for m in messages[k:]:
            snap = _snapshot(m)
            snaps.append(_UNEQUAL if snap is _NO_SNAPSHOT else snap)
            if not _is_own(m):
                msgs.append(m)
            kept.append(len(msgs))
        self._in_cache = _InputCache(snaps, kept, msgs)
        return list(msgs), kept[k - 1] if k else 0

    def _units(self, msgs: list[Mapping[str, Any]], unchanged: int) -> tuple[list[Unit], int]:
        """Units of ``msgs`` (the first ``unchanged`` messages as in the previous call),
        pinned per policy, snapshot refs attached; and how many leading units are the
        previous call's unit objects.

        A growing conversation is grouped incrementally: units of the unchanged prefix
        are reused up to the group of the last unchanged message (which may take in
        tool messages that follow it now); the rest is grouped afresh. Same result as
        grouping from scratch, O(new messages).
        """
        cache = self._group_cache
        units: list[Unit] = []
        starts: list[int] = []
        steps: list[int] = []
        cut = keep = 0
        if cache is not None and cache.starts:
            same = min(unchanged, cache.length)
            if same == cache.length and cache.units[-1].kind not in ("step", "orphan"):
                cut, keep = same, len(cache.units)  # a one-message unit cannot grow
            else:
                # regroup from the group of the last unchanged message: a group can
                # take in tool messages that now follow it (results that arrived late,
                # or orphans moved up when a message before them was removed)
                at = bisect.bisect_right(cache.starts, same - 1) - 1
                cut = min(cache.starts[-1], cache.starts[at] if at >= 0 else 0)
                keep = bisect.bisect_left(cache.starts, cut)
            units, starts, steps = cache.units[:keep], cache.starts[:keep], cache.steps[:keep]
        tail = msgs[cut:]
        fps = [_content_key(m) for m in tail]
        new_units, new_starts, repairs = group_units(
            tail, offset=cut, first_round=steps[-1] if steps else 0, fingerprints=fps
        )
        for r in repairs:
            if (r.kind, r.index) not in self._seen_repairs:
                self._seen_repairs.add((r.kind, r.index))
                self._emit("conversation.repaired", repair=r.kind, index=r.index, detail=r.detail)
        if self._refs:
            new_units = [self._with_refs(u) for u in new_units]
        tokens = cache.tokens[:keep] if cache is not None and keep else []
        n_steps = steps[-1] if steps else 0
        n_tokens = tokens[-1] if tokens else 0
        count = self.counter.count_message
        for u in new_units:
            n_steps += u.kind == "step"
            steps.append(n_steps)
            n_tokens += sum(count(m) for m in u.messages)
            tokens.append(n_tokens)
        units.extend(new_units)
        starts.extend(new_starts)
        self._group_cache = _GroupCache(len(msgs), units, starts, steps, tokens)
        return self._pin(units, keep), keep

    def _pin(self, units: list[Unit], keep: int) -> list[Unit]:
        """:func:`~ctxpolicy.conversation.pin_units` of ``units``, incrementally: the
        first ``keep`` are the previous call's units, so only the new ones and the
        units whose first/last-user status moved are looked at."""
        pol = self.policy.pinned
        prev = self._pin_cache
        n = len(units)
        if prev is None:
            keep = 0
        first_user = prev.first_user if prev is not None else None
        if first_user is None or first_user >= keep:
            first_user = next((i for i in range(keep, n) if units[i].kind == "user"), None)
        last_user = next((i for i in range(n - 1, keep - 1, -1) if units[i].kind == "user"), None)
        if last_user is None:
            last_user = prev.last_user if prev is not None else None
            if last_user is None or last_user >= keep:
                last_user = next(
                    (i for i in range(keep - 1, -1, -1) if units[i].kind == "user"), None
                )

        def pinned(i: int) -> Unit:
            u = units[i]
            pin = u.pinned or (pol.system and u.kind == "system") or u.kind == "ledger"
            pin = pin or (pol.first_user and i == first_user) or (pol.last_user and i == last_user)
            return u if pin == u.pinned else replace(u, pinned=pin)

        out = prev.units[:keep] if prev is not None else []
        out.extend(pinned(i) for i in range(keep, n))
        if prev is not None and (prev.first_user, prev.last_user) != (first_user, last_user):
            for i in {prev.first_user, prev.last_user, first_user, last_user}:
                if i is not None and i < keep:
                    out[i] = pinned(i)
        self._pin_cache = _PinCache(out, first_user, last_user)
        return list(out)

    def _view(self, originals: list[Unit], keep: int) -> tuple[list[Unit], list[Message]]:
        """The units to send (sticky decisions applied, ledger/handover inserted) and
        their messages.

        The view of all units but the last (and at least up to the last decided unit)
        is cached: while those units and the decisions are the same, a call only
        renders the units after them.
        """
        key = (self._decisions_version, self._ledger_text, self._handover_text)
        c = self._view_cache
        if c is not None and c.key == key and keep >= c.upto and originals[: c.upto] == c.originals:
            tail = originals[c.upto :]
            units, out = [*c.view, *tail], [*c.out, *render(tail)]
            if len(tail) > 1:  # the next call regroups at most the last unit
                last = len(tail[-1].messages)
                self._view_cache = _ViewCache(
                    key, len(originals) - 1, originals[:-1], units[:-1], out[: len(out) - last]
                )
            return units, out
        keys = {u.key for u in originals}
        if self._decisions and any(k not in keys for k in self._decisions):
            self._emit(
                "context.reset", reason="history changed: earlier messages were edited or removed"
            )
            self._set_decisions({})
            key = (self._decisions_version, self._ledger_text, self._handover_text)
        view: list[Unit] = []
        decided_upto = 0
        for i, u in enumerate(originals):
            if u.key in self._decisions:
                decided_upto = i + 1
                if not u.pinned:
                    view.extend(self._decisions[u.key])
                    continue
            view.append(u)
        view = _insert_specials(view, self._special_units())
        # cache all but the last unit (which the next call may regroup) and the decided
        # ones; a cached part ending with the ledger takes one unit more (the ledger's
        # place depends on the unit after it)
        p, q = len(originals), len(view)
        floor = max(decided_upto, p - 1)
        while p > floor and q > 0 and view[q - 1] is originals[p - 1]:
            p, q = p - 1, q - 1
        if q and view[q - 1].kind == "ledger" and p < len(originals):
            p, q = p + 1, q + 1
        self._view_cache = (
            None
            if q and view[q - 1].kind == "ledger"
            else _ViewCache(key, p, originals[:p], view[:q], render(view[:q]))
        )
        return view, render(view)

    def _with_refs(self, unit: Unit) -> Unit:
        """Attach the snapshot refs of this session's tool results (``meta["refs"]``)."""
        if unit.kind != "step":
            return unit
        refs = {
            str(m.get("tool_call_id")): self._refs[str(m.get("tool_call_id"))]
            for m in unit.tool_messages
            if str(m.get("tool_call_id")) in self._refs
        }
        return unit.replace(meta={**unit.meta, "refs": refs}) if refs else unit

    def _remember(self, view: Sequence[Unit], originals: Sequence[Unit]) -> None:
        """Derive the sticky decisions from the current view."""
        by_key = {u.key: u for u in originals}
        decisions: dict[str, list[Unit]] = {}
        covered: set[str] = set()
        anchor: str | None = None
        for u in view:
            if u.kind == "ledger":
                continue
            covered.update(u.origin)
            first = u.origin[0]
            if first in by_key:
                anchor = first
                if by_key.get(u.key) is u or (
                    u.key == first and by_key[first].messages == u.messages
                ):
                    if first in decisions:
                        decisions[first].append(u)
                    continue
                decisions.setdefault(first, []).append(u)
            elif anchor is not None:  # a new unit replacing nothing: keep it after its predecessor
                if anchor not in decisions:
                    decisions[anchor] = [by_key[anchor]]
                decisions[anchor].append(u)
        # originals folded into a unit placed at another original (a summary of many
        # rounds sits at the first of them) are gone, like those no unit covers
        placed = {u.origin[0] for u in view if u.kind != "ledger"}
        for k in by_key:
            if k not in decisions and (k not in covered or k not in placed):
                decisions[k] = []
        self._set_decisions({k: tuple(v) for k, v in decisions.items()})

    def _set_decisions(self, decisions: dict[str, tuple[Unit, ...]]) -> None:
        self._decisions = decisions
        self._decisions_version += 1

    def _prepare(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        force_overflow_layer: bool,
    ) -> list[Message]:
        started = time.perf_counter()
        pol = self.policy
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise TypeError("messages must be a list of OpenAI chat messages (dicts)")
        msgs, unchanged = self._input(messages)
        originals, keep = self._units(msgs, unchanged)
        view, out = self._view(originals, keep)
        tools_tokens = self.counter.count_tools(tools) if tools else 0
        scale = self._calibration if self.counter.approximate else 1.0

        def scaled(raw: int) -> int:
            return raw if scale == 1.0 else int(raw * scale + 0.999)

        def count(units: Sequence[Unit]) -> int:
            return scaled(self._count(units) + tools_tokens)

        used = scaled(self.counter.count_messages(out) + tools_tokens)
        grouped = self._group_cache
        tokens_in = (grouped.tokens[-1] if grouped and grouped.tokens else 0) + tools_tokens
        tokens_in += self.counter.count_messages([])  # reply priming
        budget = self.budget()
        state = budget.state_for(used)
        compact_layer: str | None = None
        changed = False

        # (index, step, conditional): pipeline steps run while above target and at
        # their state; the on_overflow layer runs when forced (reactive path) or, as
        # the last line of defence, when the context is still above the trigger.
        plan: list[tuple[int, ResolvedStep, bool]] = (
            [(-1, pol.on_overflow, False)]
            if force_overflow_layer
            else [
                *((i, st, True) for i, st in enumerate(pol.pipeline)),
                (-1, pol.on_overflow, False),
            ]
        )
        for index, step, conditional in plan:
            if conditional:
                if used <= budget.target:
                    continue
                if state < State(step.at):
                    continue
            elif not force_overflow_layer and (used <= budget.trigger or not step.layer):
                continue
            new_view, new_used = self._run_layer(step, index, view, used, budget, state, count)
            if new_view is not None:
                view, used = new_view, new_used
                state = budget.state_for(used)
                compact_layer = step.layer
                changed = True
        if changed:  # the layers' dropped units may have grown the ledger
            view = _insert_specials([u for u in view if u.kind != "ledger"], self._special_units())
            used = count(view)
        hard_limit = budget.window - budget.reserve_output
        if used > hard_limit:
            squeezed, new_used = self._squeeze(view, used, hard_limit, count)
            if new_used < used:
                view, used, changed = squeezed, new_used, True
                compact_layer = compact_layer or "squeeze"
        if changed:
            self._remember(view, originals)
            state = budget.state_for(used)
            out = render(view)
        self._last_units = view
        # grouping guarantees pairs; a changed view is re-checked as a whole as well
        violations = check_messages(out) if changed else []
        if violations:  # pragma: no cover - layers are checked one by one
            self._emit("engine.invariant_failed", violations=[v.detail for v in violations])
            out = render(originals)
            used = count(originals)
            state = budget.state_for(used)
        if used > hard_limit or used > budget.trigger:
            self.stats.overflows += 1
            self._emit(
                "context.overflow",
                used=used,
                trigger=budget.trigger,
                hard_limit=hard_limit,
                reason="pinned content and the most recent rounds alone exceed the budget",
            )
        self.stats.prepares += 1
        self.stats.tokens_in += tokens_in
        self.stats.tokens_sent += used
        self._status = self._emit(
            "context.status",
            used=used,
            budget=budget.trigger,
            ratio=round(budget.ratio(used), 4),
            state=state.value,
            compact_layer=compact_layer,
            window=budget.window,
            trigger=budget.trigger,
            target=budget.target,
            tokenizer=self.counter.name,
            approximate=self.counter.approximate,
            calibration=self._calibration,
            used_raw=used if scale == 1.0 else self._count(view) + tools_tokens,
            messages=len(out),
            messages_in=len(msgs),
            tokens_in=tokens_in,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return out

    def _run_layer(
        self,
        step: ResolvedStep,
        index: int,
        view: list[Unit],
        used: int,
        budget: BudgetState,
        state: State,
        count: Callable[[Sequence[Unit]], int],
    ) -> tuple[list[Unit] | None, int]:
        plugin = self.registry.plugin_of("layer", step.layer) or "?"
        target = budget.target
        if self.policy.cache.preserve_prefix and self.policy.cache.min_gain_tokens:
            target = min(target, used - self.policy.cache.min_gain_tokens)
        memory = self._memory.setdefault(f"{step.layer}#{index}", {})
        layer_name = step.layer

        def emit(type_: str, **fields: Any) -> None:
            self._emit(type_, layer=layer_name, plugin=plugin, **fields)

        ctx = CompactionContext(
            count=count,
            used=used,
            window=budget.window,
            trigger=budget.trigger,
            target=max(0, target),
            state=state,
            conv_id=self.conv_id,
            summarizer=self._get_summarizer,
            emit=emit,
            memory=memory,
            snapshots=self.snapshots,
            ledger=self.ledger,
            constraints=tuple(self.policy.constraints),
            count_text=self.counter.count_text,
        )
        started = time.perf_counter()
        before = list(view)
        try:
            layer = self._layer(step, index)
            result = layer.apply(ctx, tuple(before))
            if not isinstance(result, LayerResult):
                raise TypeError(f"apply() returned {type(result).__name__}, not LayerResult")
            new_units = list(result.units)
            if not all(isinstance(u, Unit) for u in new_units):
                raise TypeError("apply() returned something that is not a Unit")
        except Exception as exc:
            self.stats.layer_failures[step.layer] += 1
            emit("layer.failed", error=f"{type(exc).__name__}: {exc}"[:500])
            return None, used
        if [u.key for u in new_units] == [u.key for u in before] and all(
            a is b for a, b in zip(new_units, before, strict=True)
        ):
            return None, used
        problems = [v.detail for v in check_units(before, new_units)]
        new_used = count(new_units)
        if new_used > used:
            problems.append(f"returned {new_used} tokens from {used}")
        if problems:
            self.stats.layer_failures[step.layer] += 1
            emit("layer.rejected", problems=problems[:10])
            return None, used
        gain = used - new_used
        cache = self.policy.cache
        if (
            cache.preserve_prefix
            and gain < cache.min_gain_tokens
            and state < State.critical
            and index >= 0
        ):
            # a small change would throw the provider's prompt cache away for little:
            # wait until a layer can free a whole batch (or the context is critical)
            emit("layer.deferred", gain=gain, min_gain_tokens=cache.min_gain_tokens)
            return None, used
        if self.ledger is not None and result.dropped:
            try:
                if self.ledger.goal is None:
                    first_user = next((u for u in before if u.kind == "user"), None)
                    if first_user is not None:
                        self.ledger.set_goal(content_text(first_user.messages[0].get("content")))
                self.ledger.update(result.dropped)
                self._archive_dropped(result.dropped, emit)
                self._ledger_text = self.ledger.render()
            except Exception as exc:  # pragma: no cover - ledger is ours
                emit("ledger.failed", error=repr(exc))
        lost: list[str] = []
        try:
            lost = self._lost_facts(before, new_units)
            if lost and self.ledger is not None:
                # what a layer shortened away stays in context through the ledger
                self.ledger.record_facts(lost)
                self._ledger_text = self.ledger.render()
        except Exception as exc:  # pragma: no cover - facts are best effort
            emit("ledger.failed", error=repr(exc))
            lost = []
        self.stats.compactions[step.layer] += 1
        emit(
            "context.compacted",
            before=used,
            after=new_used,
            units_before=len(before),
            units_after=len(new_units),
            units_removed=len(result.dropped),
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
            report=result.report,
            lost_facts=lost[:50],
        )
        return new_units, new_used

    def _lost_facts(self, before: Sequence[Unit], after: Sequence[Unit]) -> list[str]:
        """Facts (:mod:`ctxpolicy.facts`) of the messages a layer changed or removed
        that are found nowhere in the new context or the ledger.

        Only the messages that differ are read (a masked step's assistant message is
        not), of units where they come to at most ``_FACTS_MAX_CHARS``.
        """
        from ctxpolicy.facts import extract, missing_facts

        kept = {u.key: u.messages for u in after}
        texts: list[str] = []
        for u in before:
            new = kept.get(u.key)
            if u.kind == "ledger" or new == u.messages:
                continue
            changed = [
                content_text(m.get("content"))
                for i, m in enumerate(u.messages)
                if new is None or i >= len(new) or new[i] != m
            ]
            if sum(map(len, changed)) <= _FACTS_MAX_CHARS:
                texts.extend(changed)
        # the first _FACTS_PER_COMPACTION: more would not stay in a bounded ledger
        facts = extract("\n".join(texts)).all()[:_FACTS_PER_COMPACTION] if texts else []
        return missing_facts(facts, after, self._ledger_text)

    def _archive_dropped(self, dropped: Sequence[Unit], emit: Callable[..., None]) -> None:
        """Keep every dropped message verbatim in one snapshot the ledger points to.

        Tool results are snapshotted one by one already; this also keeps the
        assistant's reasoning, tool-call arguments and user turns a layer removed, so
        everything compacted stays recoverable (``ctx_recall``). The document is
        rewritten with the whole archive each time (one reference, always complete).
        """
        if self.snapshots is None or self.ledger is None:
            return
        new = False
        for u in dropped:
            # a dropped summary or pointer stands for units archived when it was made
            if u.kind in ("summary", "ledger") or u.key in self._archived:
                continue
            self._archived.add(u.key)
            self._archive.extend(u.messages)
            new = True
        if not new:
            return
        transcript = "\n\n".join(_transcript_line(m) for m in self._archive)
        try:
            ref = self.snapshots.write(
                self.conv_id,
                self._step,
                "compacted_history",
                {
                    "step": self._step,
                    "action": "compacted_history",
                    "phase": "compaction",
                    "observation": transcript,
                    "messages": list(self._archive),
                    "timestamp": time.time(),
                    "conv_id": self.conv_id,
                },
            )
        except Exception as exc:
            emit(
                "snapshot.failed", error=f"{type(exc).__name__}: {exc}", action="compacted_history"
            )
            return
        self.ledger.archive = ref.uri

    def _squeeze(
        self, view: list[Unit], used: int, limit: int, count: Callable[[Sequence[Unit]], int]
    ) -> tuple[list[Unit], int]:
        """Truncate the largest tool results of unpinned steps, then trim the ledger,
        until the view fits.

        Only reached when every layer is done and the context still exceeds
        ``window − reserve_output`` (e.g. one giant result in the last round).
        """
        units = list(view)
        for _ in range(64):
            if used <= limit:
                break
            best: tuple[int, int, int] | None = None  # (size, unit index, message index)
            for ui, u in enumerate(units):
                if u.pinned or u.kind != "step":
                    continue
                for mi, m in enumerate(u.messages):
                    if m.get("role") == "tool":
                        size = len(content_text(m.get("content")))
                        if size > 400 and (best is None or size > best[0]):
                            best = (size, ui, mi)
            if best is None:
                break
            size, ui, mi = best
            excess_chars = (used - limit) * 4 + 200
            keep = max(200, size - excess_chars)
            text = content_text(units[ui].messages[mi].get("content"))
            head, tail = text[: keep // 2], text[len(text) - keep // 2 :]
            cut = _SQUEEZE_MARK.format(n=len(text) - len(head) - len(tail))
            msgs = list(units[ui].messages)
            new_text = f"{head}\n{cut}\n{tail}"
            ref = self._refs.get(str(msgs[mi].get("tool_call_id")))
            if ref and ref not in new_text:
                new_text += f"\n[Full detail available at: {ref}]"
            msgs[mi] = {**msgs[mi], "content": new_text}
            units[ui] = units[ui].replace(messages=msgs)
            used = count(units)
        at = next((i for i, u in enumerate(units) if u.key == "ledger"), None)
        if used > limit and self.ledger is not None and at is not None:
            # then the ledger, our own text: its oldest entries go (the archive
            # reference stays, so every fact remains recoverable)
            bound = self.counter.count_messages(units[at].messages)
            for _ in range(3):  # framing makes a bound inexact
                bound -= used - limit
                text = self.ledger.render(max_tokens=max(0, bound))
                if text is None:
                    break
                shrunk = [*units[:at], _special_unit("ledger", LEDGER_MARK, text), *units[at + 1 :]]
                if (n := count(shrunk)) >= used:
                    break
                units, used = shrunk, n
                if used <= limit:
                    break
        return units, used


#: The key-facts check after a compaction reads a unit's changed messages up to this size: a
#: bigger one (a file dump, a long log) holds too many "facts" to list, costs more to
#: scan than to tokenize, and stays one recall away through its snapshot.
_FACTS_MAX_CHARS = 2_000
_FACTS_PER_COMPACTION = 100

#: Stands for a message that cannot be snapshotted: equal to nothing, so it is
#: always looked at again.
_UNEQUAL: Any = type("_Unequal", (), {"__eq__": lambda self, other: False, "__hash__": None})()


def _content_key(m: Any) -> str:
    """Content hash of a message for unit keys. Keys never leave the process, so
    Python's own hash of the values serves (equal messages, equal keys)."""
    if type(m) is dict:
        return format(hash(_value_key(m)) & 0xFFFFFFFFFFFFFFFF, "x")
    return message_fingerprint(m) if isinstance(m, Mapping) else ""


def _is_own(m: Any) -> bool:
    """A ledger/handover message of ours (an agent fed back what it was sent)."""
    if isinstance(m, Mapping) and m.get("role") == "system":
        text = m.get("content")
        return isinstance(text, str) and text.startswith((LEDGER_MARK, HANDOVER_MARK))
    return False


@dataclass
class _InputCache:
    snaps: list[Any]  # snapshot of every input message
    kept: list[int]  # kept[i]: messages of ours dropped -> length of msgs after input[i]
    msgs: list[Mapping[str, Any]]  # the input without messages of ours


@dataclass
class _GroupCache:
    length: int  # messages grouped
    units: list[Unit]
    starts: list[int]  # message index where each unit's group starts
    steps: list[int]  # step units among units[: i + 1]
    tokens: list[int]  # tokens of the messages of units[: i + 1] (framing included)


@dataclass
class _PinCache:
    units: list[Unit]
    first_user: int | None
    last_user: int | None


@dataclass
class _ViewCache:
    key: tuple[int, str | None, str | None]
    upto: int  # originals[:upto] are rendered by view/out
    originals: list[Unit]
    view: list[Unit]
    out: list[Message]


def _transcript_line(m: Mapping[str, Any]) -> str:
    """One message as plain text for the history archive (searchable with grep)."""
    head = str(m.get("role", "?"))
    if m.get("role") == "tool":
        head += f" [{m.get('tool_call_id', '')}]"
    parts = [f"{head}: {content_text(m.get('content'))}"]
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function") or {} if isinstance(tc, Mapping) else {}
        parts.append(
            f"  → call {fn.get('name', '')}({fn.get('arguments', '')}) [{tc.get('id', '')}]"
        )
    return "\n".join(parts)


def _special_unit(key: str, mark: str, text: str) -> Unit:
    """A pinned message of ours (the ledger or a handover): system role, ``mark`` first."""
    return Unit(
        kind="ledger",
        messages=({"role": "system", "content": f"{mark}\n{text}"},),
        key=key,
        pinned=True,
    )


def _insert_specials(view: list[Unit], specials: list[Unit]) -> list[Unit]:
    if not specials:
        return view
    # after the system prompt and the pinned task: chronologically where the compacted
    # history was, and the cached prefix [system, task] stays stable when it changes
    i = 0
    while i < len(view) and view[i].kind == "system":
        i += 1
    if i < len(view) and view[i].kind == "user" and view[i].pinned:
        i += 1
    return pin_units(
        [*view[:i], *specials, *view[i:]], system=False, first_user=False, last_user=False
    )


def _as_summarizer(obj: Summarizer | Callable[..., str] | None) -> Summarizer | None:
    if obj is None or isinstance(obj, Summarizer):
        return obj
    if callable(obj):
        from ctxpolicy.summarizers.callable import CallableSummarizer

        return CallableSummarizer.from_function(obj)
    raise TypeError("summarizer must be a ctxpolicy.Summarizer or a function")


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
        from ctxpolicy.policy.resolve import load_policy

        policy = load_policy(policy, agent=agent)
    return Session(policy, **session_options).prepare(messages, tools=tools)
