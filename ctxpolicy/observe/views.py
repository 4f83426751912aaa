"""Fold engine events into the views of the dashboard and of ``ctxpolicy report``.

:class:`Views` is an event observer (``on_event=``, or :meth:`Views.observer` for the
events of one agent's sessions). Per conversation it keeps:

* the context of every call (a bounded series): tokens sent (``used``), the trigger
  (``budget``), the window, the tokens of the history as given (``tokens_in``), the
  state, and the layer that fired when a compaction ran (``context.status``);
* each compaction: its layer, tokens before and after (``context.compacted``);
* estimated prompt-cache reads and writes: a call re-reads the previous call's request
  from the provider's cache (after a compaction only the prefix it kept,
  ``prefix_tokens``), and writes the rest; the same for sending the whole history
  every time (which only ever appends);
* overflows (``context.overflow``), provider overflow errors retried through the
  reactive layer (``context.overflow_error``), failures, deferred layers, data lost,
  the provider's prompt tokens (``context.usage``), tokens saved on tool results.

:meth:`Views.snapshot` prices the token sums with ``ctxpolicy/data/prices.json``
(input and cached-input list prices of the agent's model; ``default`` when unknown)
and returns a JSON-ready dict: ``totals``, ``agents``, ``conversations`` (most recent
first, each with its ``series`` and ``marks``). Only numbers and names: the events'
text fields (errors, reasons, facts) are never kept, so no message content or key can
reach a view. Memory is bounded: at most ``max_conversations`` conversations (the
least recently active forgotten), ``max_points`` calls and ``max_marks`` compactions
each. One event costs a dictionary lookup and a few additions under a lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "FAILURES",
    "MAX_CONVERSATIONS",
    "MAX_MARKS",
    "MAX_POINTS",
    "STATES",
    "Views",
    "price_of",
]

MAX_CONVERSATIONS = 1000
MAX_POINTS = 500
MAX_MARKS = 200
#: Longest name (conversation id, agent, layer, model) a view keeps.
MAX_NAME = 160
STATES = ("normal", "warning", "error", "critical", "overflow")
_STATE_CODE = {s: i for i, s in enumerate(STATES)}
#: Events counted as failures of a conversation.
FAILURES = frozenset(
    {
        "layer.failed",
        "layer.rejected",
        "summarizer.failed",
        "summarizer.hung",
        "ledger.failed",
        "snapshot.failed",
        "engine.invariant_failed",
        "state.save_failed",
        "observer.failed",
        "tool.preprocess_failed",
    }
)


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return 0


def _float(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


def _name(value: Any) -> str:
    return value[:MAX_NAME] if isinstance(value, str) else ""


def price_of(
    model: str | None, prices: Mapping[str, Any] | None = None
) -> tuple[str, float, float]:
    """``(price entry used, input, cached input)`` in USD per token for ``model`` from
    ``prices`` (the shape of ``ctxpolicy/data/prices.json``; the packaged table when
    None); the table's ``default`` entry for a model it does not list."""
    from ctxpolicy.policy.catalogue import default_prices, token_prices

    return token_prices(prices if prices is not None else default_prices(), model)


class _Conv:
    """What one conversation did (see the module docstring)."""

    __slots__ = (
        "agent",
        "cache_read",
        "cache_write",
        "calls",
        "compactions",
        "conv_id",
        "deferred",
        "failures",
        "first",
        "freed",
        "last",
        "lost",
        "marks",
        "none_read",
        "none_write",
        "overflows",
        "peak",
        "pending",
        "prefix",
        "prepare_ms",
        "prev_in",
        "prev_used",
        "provider_tokens",
        "retries",
        "saved",
        "sent",
        "series",
        "status",
        "tokens_in",
        "tool_saved",
    )

    def __init__(self, conv_id: str, agent: str, ts: float, points: int, marks: int) -> None:
        self.conv_id = conv_id
        self.agent = agent
        self.first = self.last = ts
        self.calls = 0
        self.series: deque[list[Any]] = deque(maxlen=points)
        self.marks: deque[list[Any]] = deque(maxlen=marks)
        self.pending: list[list[Any]] = []
        self.compactions: dict[str, int] = {}
        self.status: list[Any] | None = None  # the last point
        self.prev_used: int | None = None
        self.prev_in: int | None = None
        self.cache_read = self.cache_write = 0
        self.none_read = self.none_write = 0
        self.sent = self.tokens_in = self.saved = self.freed = self.peak = 0
        self.overflows = self.retries = self.failures = self.deferred = self.lost = 0
        self.provider_tokens: int | None = None
        self.tool_saved = 0
        self.prepare_ms = 0.0
        self.prefix: int | None = None  # tokens this call's compactions kept in front


class Views:
    """An event observer folding events into views; thread-safe.

    ``models``: agent → model name (prices); ``model``: the model of conversations of
    no known agent; ``prices``: a price table (the packaged one when None).
    """

    def __init__(
        self,
        *,
        models: Mapping[str, str | None] | None = None,
        model: str | None = None,
        prices: Mapping[str, Any] | None = None,
        max_conversations: int = MAX_CONVERSATIONS,
        max_points: int = MAX_POINTS,
        max_marks: int = MAX_MARKS,
    ) -> None:
        self.models = dict(models or {})
        self.model = model
        self.prices = prices
        self.max_conversations = max(1, int(max_conversations))
        self.max_points = max(2, int(max_points))
        self.max_marks = max(1, int(max_marks))
        self.events = 0  # events folded
        self.forgotten = 0  # conversations dropped to stay within max_conversations
        self._convs: OrderedDict[str, _Conv] = OrderedDict()
        self._lock = threading.Lock()
        self._fold: dict[str, Callable[[_Conv, Mapping[str, Any]], None]] = {
            "context.status": self._status,
            "context.compacted": self._compacted,
            "context.overflow": self._overflow,
            "context.overflow_error": self._overflow_error,
            "context.usage": self._usage,
            "layer.deferred": self._deferred,
            "data.lost": self._lost,
            "tool.preprocessed": self._tool,
        }
        for kind in FAILURES:
            self._fold[kind] = self._failure

    # -- observing -----------------------------------------------------------------
    def __call__(self, event: Mapping[str, Any]) -> None:
        """Fold one event (its ``agent`` field, if any, names the agent)."""
        self.add(event)

    def observer(self, agent: str | None) -> Callable[[Mapping[str, Any]], None]:
        """An ``on_event`` for the sessions of ``agent``."""

        def observe(event: Mapping[str, Any]) -> None:
            self.add(event, agent)

        return observe

    def add(self, event: Mapping[str, Any], agent: str | None = None) -> None:
        """Fold ``event``; ``agent`` when the event does not carry one."""
        fold = self._fold.get(event.get("type"))  # type: ignore[arg-type]
        if fold is None:
            return
        conv_id = event.get("conv_id")
        if not isinstance(conv_id, str) or not conv_id:
            return
        ts = _float(event.get("ts")) or time.time()
        with self._lock:
            self.events += 1
            conv = self._convs.get(conv_id)
            if conv is None:
                who = _name(agent if agent is not None else event.get("agent"))
                conv = _Conv(conv_id[:MAX_NAME], who, ts, self.max_points, self.max_marks)
                model = event.get("model")  # an event log of the gateway names it
                if who and isinstance(model, str) and who not in self.models:
                    self.models[who] = model[:MAX_NAME]
                self._convs[conv_id] = conv
                while len(self._convs) > self.max_conversations:
                    self._convs.popitem(last=False)
                    self.forgotten += 1
            else:
                self._convs.move_to_end(conv_id)
            conv.last = max(conv.last, ts)
            fold(conv, event)

    def extend(self, events: Iterable[Mapping[str, Any]]) -> None:
        for event in events:
            self.add(event)

    # -- the folds (under the lock) ----------------------------------------------------
    def _status(self, c: _Conv, e: Mapping[str, Any]) -> None:
        used = _int(e.get("used"))
        tokens_in = _int(e.get("tokens_in")) or used
        layer = e.get("compact_layer")
        layer = _name(layer) or None
        i = c.calls
        c.calls += 1
        # the provider's prompt cache, estimated: the previous request is read back, up
        # to the prefix a compaction kept when one rewrote it; the rest is written
        if c.prev_used is None:
            read = 0
        elif layer is None:
            read = min(c.prev_used, used)
        else:
            read = min(c.prefix or 0, c.prev_used, used)
        c.prefix = None
        c.cache_read += read
        c.cache_write += used - read
        none_read = min(c.prev_in, tokens_in) if c.prev_in is not None else 0
        c.none_read += none_read
        c.none_write += tokens_in - none_read
        c.prev_used, c.prev_in = used, tokens_in
        c.sent += used
        c.tokens_in += tokens_in
        c.saved += max(0, tokens_in - used)
        c.peak = max(c.peak, used)
        c.prepare_ms += _float(e.get("duration_ms"))
        point = [
            i,
            round(_float(e.get("ts")), 3),
            used,
            _int(e.get("budget")),
            _int(e.get("window")),
            tokens_in,
            _STATE_CODE.get(e.get("state"), 0),  # type: ignore[arg-type]
            layer,
        ]
        c.series.append(point)
        c.status = point
        if c.pending:
            for mark in c.pending:
                mark[0] = i
                c.marks.append(mark)
            c.pending.clear()
        elif layer is not None:  # a squeeze, or a layer that sent no compacted event
            c.marks.append([i, layer, None, used])

    def _compacted(self, c: _Conv, e: Mapping[str, Any]) -> None:
        layer = _name(e.get("layer")) or "?"
        before, after = _int(e.get("before")), _int(e.get("after"))
        c.compactions[layer] = c.compactions.get(layer, 0) + 1
        c.freed += max(0, before - after)
        if "prefix_tokens" in e:
            prefix = _int(e.get("prefix_tokens"))
            c.prefix = prefix if c.prefix is None else min(c.prefix, prefix)
        if len(c.pending) < self.max_marks:
            c.pending.append([c.calls, layer, before, after])

    def _overflow(self, c: _Conv, e: Mapping[str, Any]) -> None:
        c.overflows += 1

    def _overflow_error(self, c: _Conv, e: Mapping[str, Any]) -> None:
        c.retries += 1

    def _usage(self, c: _Conv, e: Mapping[str, Any]) -> None:
        c.provider_tokens = _int(e.get("prompt_tokens"))

    def _deferred(self, c: _Conv, e: Mapping[str, Any]) -> None:
        c.deferred += 1

    def _lost(self, c: _Conv, e: Mapping[str, Any]) -> None:
        c.lost += 1

    def _tool(self, c: _Conv, e: Mapping[str, Any]) -> None:
        c.tool_saved += max(0, _int(e.get("tokens_before")) - _int(e.get("tokens_after")))

    def _failure(self, c: _Conv, e: Mapping[str, Any]) -> None:
        c.failures += 1

    # -- reading -----------------------------------------------------------------------
    def conversations(self) -> int:
        with self._lock:
            return len(self._convs)

    def snapshot(
        self,
        *,
        limit: int = 200,
        source: str = "",
        series: int | None = None,
        series_of: str | None = None,
    ) -> dict[str, Any]:
        """The views as a JSON-ready dict (see the module docstring); at most ``limit``
        conversations in ``conversations``, the most recently active first (the totals
        and agents count every conversation kept). ``series``: only that many of them
        (and ``series_of``, by id) carry their ``series`` and ``marks``, the others
        empty lists (a live page shows one chart; copying every series costs)."""
        with self._lock:
            pairs = [(c, _copy(c)) for c in self._convs.values()]
            events, forgotten = self.events, self.forgotten
        pairs.sort(key=lambda p: p[1]["last"], reverse=True)
        convs = [d for _, d in pairs]
        with self._lock:
            for i, (kept, d) in enumerate(pairs[: max(0, limit)]):
                if series is None or i < series or kept.conv_id == series_of:
                    d["series"] = [list(p) for p in kept.series]
                    d["marks"] = [list(m) for m in kept.marks]
        agents: dict[str, dict[str, Any]] = {}
        totals = _zero_totals()
        prices: dict[str, tuple[str, float, float]] = {}
        for c in convs:
            model = self.models.get(c["agent"], self.model) if c["agent"] else self.model
            if model not in prices:
                prices[model] = price_of(model, self.prices)  # type: ignore[index]
            price_name, p_in, p_cached = prices[model]  # type: ignore[index]
            usd_sent = c["cache_write"] * p_in + c["cache_read"] * p_cached
            usd_none = c["none_write"] * p_in + c["none_read"] * p_cached
            c.update(
                model=model,
                price=price_name,
                usd_sent=round(usd_sent, 6),
                usd_none=round(usd_none, 6),
                usd_saved=round(usd_none - usd_sent, 6),
            )
            a = agents.get(c["agent"])
            if a is None:
                a = agents[c["agent"]] = {
                    "agent": c["agent"],
                    "model": model,
                    "price": price_name,
                    **_zero_totals(),
                }
            for bucket in (a, totals):
                bucket["conversations"] += 1
                for key in _SUMS:
                    bucket[key] += c[key] if key != "compactions" else sum(c[key].values())
        for bucket in (*agents.values(), totals):
            for key in ("usd_sent", "usd_none", "usd_saved"):
                bucket[key] = round(bucket[key], 6)
        return {
            "source": source,
            "generated": round(time.time(), 3),
            "events": events,
            "forgotten": forgotten,
            "states": list(STATES),
            "totals": totals,
            "agents": sorted(agents.values(), key=lambda a: str(a["agent"])),
            "conversations": convs[: max(0, limit)],
        }


_SUMS = (
    "calls",
    "compactions",
    "sent",
    "tokens_in",
    "saved",
    "freed",
    "cache_read",
    "cache_write",
    "none_read",
    "none_write",
    "overflows",
    "retries",
    "failures",
    "deferred",
    "lost",
    "tool_saved",
    "usd_sent",
    "usd_none",
    "usd_saved",
)


def _zero_totals() -> dict[str, Any]:
    out: dict[str, Any] = {"conversations": 0}
    for key in _SUMS:
        out[key] = 0.0 if key.startswith("usd_") else 0
    return out


def _copy(c: _Conv) -> dict[str, Any]:
    last = c.status
    return {
        "id": c.conv_id,
        "agent": c.agent,
        "first": round(c.first, 3),
        "last": round(c.last, 3),
        "calls": c.calls,
        "used": last[2] if last else 0,
        "budget": last[3] if last else 0,
        "window": last[4] if last else 0,
        "state": STATES[last[6]] if last else None,
        "peak": c.peak,
        "compactions": dict(c.compactions),
        "sent": c.sent,
        "tokens_in": c.tokens_in,
        "saved": c.saved,
        "freed": c.freed,
        "cache_read": c.cache_read,
        "cache_write": c.cache_write,
        "none_read": c.none_read,
        "none_write": c.none_write,
        "overflows": c.overflows,
        "retries": c.retries,
        "failures": c.failures,
        "deferred": c.deferred,
        "lost": c.lost,
        "tool_saved": c.tool_saved,
        "provider_tokens": c.provider_tokens,
        "prepare_ms": round(c.prepare_ms / c.calls, 3) if c.calls else 0.0,
        "series": [],
        "marks": [],
    }
