"""Does a prefix rewrite pay? (docs/engine.md, "Compaction economics").

A compaction rewrites the request from its first changed message on: under prompt
caching those tokens, which the previous request had written to the provider's cache,
are billed again at the cache-write price instead of the cache-read price. What it
buys is the freed tokens, not sent (billed at the write price) on this call and not
read from the cache on every later call until the next compaction::

    cost  = old_suffix × (write − read)
    gain  = freed × (write + read × calls_until_next)

where ``old_suffix`` is the tokens of the previous request from the first changed
message on (the appended messages are written either way), ``read`` / ``write`` the
model's cache prices as multiples of its uncached input price (the model catalogue's
price models, the ones ``ctxpolicy simulate`` bills with), and ``calls_until_next``
the calls until the next compaction the engine predicts: the room the compaction
leaves before the pipeline fires again, divided by the context's growth per call
(the mean growth of the whole request between consecutive calls, every message
counted — the replies and user turns as well as the tool results; the median
learned tool-result size until two calls were seen). The rewrite is taken when
``gain ≥ cost`` and it frees at least ``budget.min_gain``.

Below the trigger a compaction is optional (the request leaves room for what can
arrive) and takes facts out of a conversation that may end before it would have
overflowed: the later calls are weighed by the chance the conversation makes them
(:func:`expected_calls`) and ``gain − cost`` must be at least :data:`OPTIONAL_SHARE` of
the bill expected without the compaction (:func:`expected_bill`).

The thrash guard (:class:`Guard`) holds what the rule alone would repeat: a
compaction due within :data:`REFILL_CALLS` calls of the previous one (the context
refilled at once) is not made; the engine waits until the request would not fit
(:func:`fit_limit`), where the always-fit path takes over whatever it costs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxpolicy.budget import BudgetState
from ctxpolicy.policy.catalogue import catalogue_price_models
from ctxpolicy.policy.models import Policy
from ctxpolicy.policy.scalars import State

__all__ = [
    "GUARD",
    "MAX_PREDICTED_CALLS",
    "MIN_ROOM_CALLS",
    "OPTIONAL_SHARE",
    "REFILL_CALLS",
    "CachePrices",
    "Guard",
    "Rewrite",
    "cache_prices",
    "catalogue_price_models",
    "expected_bill",
    "expected_calls",
    "first_changed",
    "fit_limit",
    "predicted_calls",
    "room_calls",
    "short_room",
]

#: The calls until the next compaction are predicted at most this far ahead (a
#: conversation may end: a saving further away is not counted on).
MAX_PREDICTED_CALLS = 50

#: A compaction the request does not need yet (it still fits: below the fit limit)
#: takes facts out of a conversation that may end before it would have overflowed: it
#: is taken only when the bill it is expected to save, net of its rewrite, is at least
#: this share of what the conversation is expected to cost from here without it
#: (:meth:`Rewrite.pays`; docs/engine.md, "Compaction economics").
OPTIONAL_SHARE = 0.15

#: A compaction due again within this many calls of the previous one (counted in the
#: conversation's units: each call adds at least one) refilled at once: it is held
#: until the request would not fit (:class:`Guard`).
REFILL_CALLS = 3

#: A compaction below the fit limit must leave room for at least this many calls of
#: the request's growth before the fit limit, else it waits for that limit: compacting
#: more often than every this many calls is the thrash the guard bounds (12 prefix
#: rewrites per 100 calls: tests/engine/test_thrash.py).
MIN_ROOM_CALLS = 9

#: The growth per call is the mean of the last this many calls' growth.
GROWTH_SAMPLES = 20

#: ``SessionState.memory`` slot of the thrash guard (persisted with the session).
GUARD = "~guard"


@dataclass(frozen=True)
class CachePrices:
    """A model's prompt-cache prices per input token, as multiples of its uncached
    input price (``ctxpolicy/data/models.json``, ``price_models``)."""

    name: str
    read: float
    write: float


def _price(entry: Mapping[str, Any], key: str, default: float) -> float:
    v = entry.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1000:
        return default
    return float(v)


@functools.lru_cache(maxsize=64)
def _prices_for(names: tuple[str, ...]) -> CachePrices:
    models, by_model = catalogue_price_models()
    per_model: Mapping[str, Any] = {}
    spec = str(models.get("default", "anthropic"))
    for name in names:
        entry = by_model.get(name)
        if isinstance(entry, Mapping):
            per_model, spec = entry, str(entry.get("price_model"))
            break
    base = models.get(spec)
    if not isinstance(base, Mapping):
        spec, base = "anthropic", {"cache_read": 0.1, "cache_write": 1.25}
    merged = {**base, **per_model}
    return CachePrices(spec, _price(merged, "cache_read", 1.0), _price(merged, "cache_write", 1.0))


def cache_prices(policy: Policy) -> CachePrices:
    """The cache prices of ``policy``'s model: the catalogue entry of its catalogue key
    or provider id, else the catalogue's ``default`` price model (as ``simulate``)."""
    names = tuple(n for n in (policy.model_name, policy.model.name) if n)
    return _prices_for(names)


def first_changed(before: Sequence[Any], after: Sequence[Any]) -> int:
    """Index of the first unit of ``before`` that ``after`` does not keep unchanged at the
    same place (``len(before)`` when ``after`` only appends)."""
    for i, (a, b) in enumerate(zip(before, after, strict=False)):
        if a is not b and (a.key != b.key or a.messages != b.messages):
            return i
    return min(len(before), len(after))


def predicted_calls(budget: BudgetState, policy: Policy, used_after: int, per_call: int) -> int:
    """Calls until the next compaction: from ``used_after``, growing ``per_call`` tokens a
    call, until the lowest state a pipeline step runs at (above the target: until the
    trigger − target gap the engine holds for); 1 to :data:`MAX_PREDICTED_CALLS`."""
    ats = [budget.tokens_for(State(s.at)) for s in policy.pipeline]
    fire = max(budget.target, min(ats, default=budget.trigger))
    if used_after > budget.target:
        room = max(0, budget.trigger - budget.target)
    else:
        room = max(0, fire - used_after)
    return max(1, min(MAX_PREDICTED_CALLS, math.ceil(room / max(1, per_call))))


def expected_calls(age: int, calls: int) -> float:
    """How many of the next ``calls`` calls a conversation that has made ``age`` calls
    is expected to make: the k-th is made with probability ``age / (age + k)`` (a
    conversation that has gone on for ``age`` calls is as likely as not to go on for as
    many again; a young one may end at any call)."""
    age = max(1, age)
    return sum(age / (age + k) for k in range(1, max(0, calls) + 1))


def expected_bill(age: int, used: int, per_call: int, prices: CachePrices) -> float:
    """The input a conversation of ``used`` tokens, growing ``per_call`` a call, is
    expected to be billed from this call on without a compaction (in uncached input
    tokens): each call reads the request from the cache and writes its growth, the
    k-th later call weighed by the chance it is made (:func:`expected_calls`), over
    :data:`MAX_PREDICTED_CALLS` calls."""
    age, grow = max(1, age), max(0, per_call)
    total = used * prices.read + grow * prices.write
    for k in range(1, MAX_PREDICTED_CALLS + 1):
        total += age / (age + k) * ((used + k * grow) * prices.read + grow * prices.write)
    return total


@dataclass(frozen=True)
class Rewrite:
    """One call's candidate prefix rewrite, weighed (the fields of ``layer.deferred``).

    ``age``: the calls the conversation has made (None: the saving counts every
    predicted call, and nothing more is asked of it); with it, the predicted calls are
    weighed by the chance the conversation makes them (:func:`expected_calls`) and a
    compaction must save :data:`OPTIONAL_SHARE` of ``bill`` (:func:`expected_bill`).
    """

    freed: int
    old_suffix: int
    calls: int
    prices: CachePrices
    age: int | None = None
    bill: float = 0.0

    @property
    def cost(self) -> float:
        """Extra input billed for writing the old suffix again instead of reading it."""
        return self.old_suffix * max(0.0, self.prices.write - self.prices.read)

    @property
    def per_token(self) -> float:
        """Input one freed token is not billed: written on this call, read on the
        predicted calls (weighed by the chance they are made, when the age is known)."""
        calls = self.calls if self.age is None else expected_calls(self.age, self.calls)
        return self.prices.write + self.prices.read * calls

    @property
    def saving(self) -> float:
        """Input not billed: the freed tokens on this call and on the predicted calls."""
        return self.freed * self.per_token

    @property
    def pays(self) -> bool:
        """The saving buys the rewrite back, and (age known) what is left is at least
        :data:`OPTIONAL_SHARE` of the bill expected without the compaction."""
        net = self.saving - self.cost
        return net >= 0 and net >= OPTIONAL_SHARE * self.bill

    @property
    def lacking(self) -> int:
        """Tokens more this rewrite would have to free to pay the rule that asked more
        than the cache (the age known): 0 when it pays or the age is not known."""
        if self.age is None or self.pays:
            return 0
        need = (self.cost + OPTIONAL_SHARE * self.bill) / max(self.per_token, 1e-9)
        return max(1, math.ceil(need) - self.freed)

    def to_fields(self) -> dict[str, Any]:
        return {
            "rewrite_tokens": self.old_suffix,
            "predicted_calls": self.calls,
            "rewrite_cost": round(self.cost, 1),
            "rewrite_saving": round(self.saving, 1),
            "price_model": self.prices.name,
        }


def fit_limit(budget: BudgetState) -> int:
    """Tokens above which a request is compacted whatever the rewrite costs and however
    recently the last compaction ran: the window less the reply's reserve and the
    safety margin (never below the trigger). Between the trigger and this limit a
    held or unprofitable compaction waits; above it the always-fit path holds."""
    return max(budget.trigger, budget.window - budget.reserve_output - budget.safety_margin)


def room_calls(budget: BudgetState, used_after: int, per_call: int) -> int:
    """Whole calls of ``per_call`` (≥ 1) growth a compaction ending at ``used_after``
    leaves before the fit limit."""
    return max(0, fit_limit(budget) - used_after) // per_call


def short_room(budget: BudgetState, used_after: int, per_call: int | None) -> bool:
    """A compaction ending at ``used_after`` leaves room for fewer than
    :data:`MIN_ROOM_CALLS` calls of ``per_call`` growth before the fit limit (False
    while the growth is not known)."""
    if per_call is None:
        return False
    return room_calls(budget, used_after, per_call) < MIN_ROOM_CALLS


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


class Guard:
    """The thrash guard's memory (``SessionState.memory[GUARD]``, persisted): the growth
    of the whole request over the last calls and the call of the last compaction.

    A stored slot that is not what this class writes (a hand-edited or foreign state)
    reads as empty: the guard starts afresh, it never raises.
    """

    def __init__(self, memory: dict[str, dict[str, Any]]) -> None:
        slot = memory.get(GUARD)
        if type(slot) is not dict:
            slot = memory[GUARD] = {}
        self.slot: dict[str, Any] = slot

    def _samples(self) -> list[int]:
        grow = self.slot.get("grow")
        if type(grow) is not list:
            return []
        return [x for x in grow[-GROWTH_SAMPLES:] if type(x) is int and x >= 0]

    def observe(self, call: int, entry: int, previous: int | None) -> bool:
        """Record call ``call`` (once): it starts at ``entry`` tokens, the call before
        sent ``previous``; the difference is this call's growth. True when new."""
        if _int(self.slot.get("seen")) == call:
            return False
        self.slot["seen"] = call
        if previous is not None and previous > 0 and entry >= previous:
            self.slot["grow"] = [*self._samples(), entry - previous][-GROWTH_SAMPLES:]
        return True

    def per_call(self) -> int | None:
        """Mean growth of the request per call (None before two calls were seen)."""
        samples = self._samples()
        if not samples:
            return None
        return max(1, math.ceil(sum(samples) / len(samples)))

    def compacted(self, call: int) -> None:
        """Call ``call`` took a compaction of the pipeline."""
        self.slot["last"] = call

    def last(self) -> int | None:
        """The call of the last compaction of the pipeline (None: none yet)."""
        return _int(self.slot.get("last"))

    def refilled(self, call: int) -> int | None:
        """Calls since the last compaction when at most :data:`REFILL_CALLS` (the
        context refilled at once), else None."""
        last = _int(self.slot.get("last"))
        if last is None or not 0 < call - last <= REFILL_CALLS:
            return None
        return call - last
