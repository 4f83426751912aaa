"""The layer pipeline of one ``prepare`` call.

Escalation rule (docs/engine.md, "When layers run"): compaction starts when the
context is above the target and its state at that moment — the *entry state* — is at
or above the ``at`` of some pipeline step. Every step whose ``at`` is at or below the
entry state may run, in pipeline order, recounting after each, until the context is
at or below the target; a step whose ``at`` is above the entry state does not run.
So a compaction that starts at ``warning`` goes all the way down to the target with
the cheap layers instead of stopping just under ``warning`` and firing again on the
next call. The ``on_overflow`` layer runs when forced (the reactive path) or when the
context is still above the trigger after the pipeline (above the fit limit while a
compaction is held).

Thrash guard (docs/engine.md, "No thrash"): a compaction is held — no step runs —
while the context is below the fit limit (:func:`~ctxpolicy.engine.economics.fit_limit`)
and the last compaction ended above the target and the context has not grown by the
trigger − target gap since (``SessionState.hold_until``), or the last compaction was
at most :data:`~ctxpolicy.engine.economics.REFILL_CALLS` calls ago (it refilled at
once: held until the fit limit, ``context.compaction_held`` once), or the layers'
result would leave room for fewer than :data:`~ctxpolicy.engine.economics.MIN_ROOM_CALLS`
calls of growth before the fit limit (held until that limit, where ``on_overflow``
goes deeper when the forced compaction still leaves too little room). Below the fit
limit a compaction is also weighed by the economics (it must buy its rewrite back
before the next predicted compaction) and, below the trigger, must save a share of
the bill the conversation is expected to run up without it (docs/engine.md,
"Compaction economics"); above it, it runs whatever it costs.

Every layer runs isolated: an exception, broken pairing, a removed pinned unit or a
layer that grows the context discards that layer's output and is reported with the
plugin's name; history is never lost. Units a layer drops are archived verbatim
first; when the archive cannot be written the layer's output is discarded, unless the
request would otherwise not fit (then a ``data.lost`` event lists what went).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxpolicy.budget import BudgetState
from ctxpolicy.components import CompactionContext, LayerResult
from ctxpolicy.conversation import Unit, check_units, content_text
from ctxpolicy.engine import economics
from ctxpolicy.engine.archiving import archive_units, ensure_snapshots
from ctxpolicy.engine.call import Call
from ctxpolicy.engine.derived import with_refs
from ctxpolicy.engine.economics import (
    MIN_ROOM_CALLS,
    Guard,
    Rewrite,
    cache_prices,
    expected_bill,
    first_changed,
    fit_limit,
    predicted_calls,
    room_calls,
    short_room,
)
from ctxpolicy.engine.refs import ensure_refs
from ctxpolicy.engine.specials import ledger_changed
from ctxpolicy.events.types import (
    ABSENT,
    Absent,
    ContextCompacted,
    ContextCompactionHeld,
    DataLost,
    Event,
    LayerDeferred,
    LayerFailed,
    LayerRejected,
    LedgerFailed,
)
from ctxpolicy.policy.models import ResolvedStep
from ctxpolicy.policy.scalars import State

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext

#: The key-facts check after a compaction reads a unit's changed messages up to this size: a
#: bigger one (a file dump, a long log) holds too many "facts" to list, costs more to
#: scan than to tokenize, and stays one recall away through its snapshot.
_FACTS_MAX_CHARS = 20_000
_FACTS_PER_COMPACTION = 100

#: ``SessionState.memory`` entry: per pipeline step (``layer#index``), the keys of the
#: units on which its result was larger than its input. A result that changes only
#: those units again is not counted nor offered (nothing changed for it to gain on).
NO_GAIN = "~no_gain"
_NO_GAIN_KEYS = 2000


def _changed_keys(before: Sequence[Unit], after: Sequence[Unit]) -> set[str]:
    """Keys of the units of ``before`` that ``after`` changed or removed."""
    new = {u.key: u for u in after}
    return {
        u.key
        for u in before
        if (n := new.get(u.key)) is None or (n is not u and n.messages != u.messages)
    }


def eligible_steps(ctx: EngineContext, call: Call) -> list[tuple[int, ResolvedStep]]:
    """The pipeline steps allowed to run on this call, by the entry state (the state
    of ``call.entry_used``, the tokens when the call started).

    ``(index, step)``; the ``on_overflow`` layer is handled by :func:`run_pipeline`.
    """
    if call.forced or call.at_target():
        return []
    budget, entry_used = call.budget, call.entry_used
    entry = budget.state_for(entry_used)
    if ctx.state.unfit is not None and entry_used <= call.hard_limit:
        return []  # the learned window cannot hold the policy: compact only to fit
    if is_held(ctx, budget, entry_used):
        return []  # the target was out of reach, or the context refilled at once
    steps = [(i, st) for i, st in enumerate(ctx.policy.pipeline) if entry >= State(st.at)]
    if steps and entry_used <= fit_limit(budget):
        guard = Guard(ctx.state.memory)
        since = guard.refilled(_call_mark(ctx))
        if since is not None:  # due again right after the last one: wait until it must
            per_call = guard.per_call()
            _hold(ctx, budget, entry_used, since, ABSENT if per_call is None else per_call)
            return []
    return steps


def _call_mark(ctx: EngineContext) -> int:
    """Where the conversation is: its number of units (each model call adds at least
    one). Taken from the messages, not from a count of ``prepare`` calls, so a
    prepare retried with the same messages, or run by another worker on the same
    state, decides the same."""
    groups = ctx.derived.caches.groups
    return len(groups.units) if groups is not None else 0


def is_held(ctx: EngineContext, budget: BudgetState, entry_used: int) -> bool:
    """A hold is in force (``SessionState.hold_until`` not reached) and the request
    still fits (at most the fit limit): no compaction on this call."""
    hold = ctx.state.hold_until
    return hold is not None and entry_used < hold and entry_used <= fit_limit(budget)


def run_pipeline(ctx: EngineContext, call: Call, *, cache_lost: bool = False) -> str | None:
    """Run the eligible steps, then ``on_overflow`` if needed, on ``call.view``; the
    view and its tokens taken are left in ``call``; returns the last layer that
    changed the view (None: nothing changed).

    The call is the unit of deferral: the steps' outputs are held until together they
    free the minimum gain (``budget.min_gain``, or ``cache.min_gain_tokens`` with
    ``cache.preserve_prefix`` when larger) *and* the rewrite pays
    (:mod:`ctxpolicy.engine.economics`: the cache write of the old suffix against the
    saving until the next predicted compaction), then all are taken (the prompt cache
    is lost either way, so every eligible step runs in the same call); when they
    cannot, none is taken (``layer.deferred``) until the request would not fit (the fit
    limit), and ``on_overflow`` waits for that limit too.
    ``cache_lost``: an earlier pass of this call already rewrote the prefix (a rewrite
    costs nothing more: only the minimum gain applies).
    """
    pol = ctx.policy
    budget, forced, entry = call.budget, call.forced, call.entry_used
    changed_by: str | None = None
    guard = Guard(ctx.state.memory)
    mark = _call_mark(ctx)
    if not cache_lost:  # the first pass of the call: its growth since the last request
        prev_sent = ctx.state.status.get("used") if ctx.state.status else None
        if guard.observe(mark, entry, prev_sent if isinstance(prev_sent, int) else None):
            ctx.state.touch("memory")
    steps = eligible_steps(ctx, call)
    over = _over(ctx, call)
    if not steps and not forced and not over:
        return None  # the common call: nothing may run
    if steps:
        call.view = _referenced(ctx, call.view)
    cache = pol.cache
    min_gain = max(budget.min_gain, cache.min_gain_tokens if cache.preserve_prefix else 0)
    # below the fit limit a rewrite must free the minimum gain and pay for itself;
    # above it (the request would not fit) whatever the layers free is taken
    batch = not forced and entry <= fit_limit(budget)
    floor = call.used - min_gain if batch and min_gain > 0 else None
    start_view, start_used = call.view, call.used
    # the economics weigh candidate views of the steps: none without a step to run
    weigh = (
        _weigher(ctx, budget, start_view, start_used, guard.per_call())
        if steps and batch and not cache_lost
        else None
    )
    rewrite: Rewrite | None = None
    # a call whose steps could not pay even at their best (down to the target, the
    # rewrite starting at the ledger) runs none of them: a summarizer is not asked for
    # a summary the call would not take
    declined = (
        weigh is not None and economics.OPTIONAL_SHARE > 0 and not weigh(None, budget.target).pays
    )
    if declined:
        steps = []
    held: list[_Outcome] = []
    took_step = False
    # a rewrite that leaves room for fewer than MIN_ROOM_CALLS calls before the fit
    # limit waits for that limit (compacting there leaves the most room)
    per_call = guard.per_call() if batch and not cache_lost else None
    short = False
    for index, step in steps:
        if call.at_target():
            break
        out = _apply(ctx, call, step, index, floor=floor)
        if out is None:
            continue
        if not batch:
            if _take(ctx, out, call):
                call.view, call.used, changed_by = out.units, out.used, step.layer
                took_step = True
            continue
        held.append(out)
        call.view, call.used = out.units, out.used
        if start_used - call.used >= min_gain and (
            weigh is None or (rewrite := weigh(call.view, call.used)).pays
        ):
            short = short_room(budget, call.used, per_call)
            if short:
                continue  # the next steps may leave more room
            batch, floor = False, None
            call.view, call.used, changed_by = _take_all(ctx, held, call)
            took_step = took_step or changed_by is not None
            held = []
    if held and short and per_call is not None:
        _hold_to_fit(ctx, guard, mark, start_used, call.used, budget, per_call)
    deferred = bool(held) or declined
    if held and not short and rewrite is not None and rewrite.lacking:
        # an optional compaction that did not pay its fact loss: not offered again
        # before the context has grown by the tokens it lacked (or the trigger)
        ctx.state.hold_until = min(start_used + rewrite.lacking, budget.trigger)
        ctx.state.touch("meta")
    if held:  # together they free too little: wait for a batch worth the cache
        for out in held:
            out.emit(
                LayerDeferred(
                    gain=out.used_before - out.used,
                    call_gain=start_used - call.used,
                    min_gain_tokens=min_gain,
                    **(rewrite.to_fields() if rewrite is not None else {}),
                )
            )
        call.view, call.used = start_view, start_used
    over = call.used > fit_limit(budget) if deferred else _over(ctx, call)
    deeper: int | None = None
    if took_step and not forced and entry > fit_limit(budget):
        # a compaction the fit limit forced: when it leaves room for too few calls,
        # on_overflow goes deeper, so the next one is not due again a few calls later
        grow = guard.per_call()
        if grow is not None and short_room(budget, call.used, grow):
            deeper = max(0, fit_limit(budget) - MIN_ROOM_CALLS * grow)
    if pol.on_overflow.layer and (forced or over or deeper is not None):
        if not steps:
            call.view = _referenced(ctx, call.view)
        out = _apply(ctx, call, pol.on_overflow, -1, floor=deeper)
        if out is not None and _take(ctx, out, call):
            call.view, call.used, changed_by = out.units, out.used, pol.on_overflow.layer
    if took_step and not forced:
        guard.compacted(mark)
        ctx.state.touch("memory")
    return changed_by


def _hold_to_fit(
    ctx: EngineContext,
    guard: Guard,
    mark: int,
    used: int,
    after: int,
    budget: BudgetState,
    per_call: int,
) -> None:
    """Hold compaction until the request would not fit (``context.compaction_held``
    once): the rewrite on offer (``used`` → ``after`` tokens) leaves room for too few
    calls of ``per_call`` growth before the fit limit to be taken earlier."""
    last = guard.last()
    since = mark - last if last is not None else mark
    _hold(ctx, budget, used, since, per_call, room_calls(budget, after, per_call))


def _hold(
    ctx: EngineContext,
    budget: BudgetState,
    used: int,
    calls_since: int,
    growth_per_call: int | Absent = ABSENT,
    room_calls: int | Absent = ABSENT,
) -> None:
    """Hold compaction until the request would not fit: ``hold_until`` just past the
    fit limit, and ``context.compaction_held``."""
    resume_at = fit_limit(budget) + 1
    ctx.state.hold_until = resume_at
    ctx.state.touch("meta")
    ctx.emit(
        ContextCompactionHeld(
            used=used,
            calls_since=calls_since,
            resume_at=resume_at,
            growth_per_call=growth_per_call,
            room_calls=room_calls,
        )
    )


def _over(ctx: EngineContext, call: Call) -> bool:
    """``on_overflow`` is due: the context is above the trigger — above the fit limit
    while a compaction is held, above ``window − reserve_output`` for a policy that
    cannot fit its learned window (``SessionState.unfit``, reported once)."""
    used, budget = call.used, call.budget
    if ctx.state.unfit is not None:
        return used > call.hard_limit
    if is_held(ctx, budget, call.entry_used):
        return used > fit_limit(budget)
    return used > budget.trigger


def _weigher(
    ctx: EngineContext,
    budget: BudgetState,
    start: Sequence[Unit],
    start_used: int,
    per_call: int | None = None,
) -> Callable[[Sequence[Unit] | None, int], Rewrite]:
    """Weighs a candidate view of this call against ``start`` (the view the call began
    with) by the compaction economics (docs/engine.md); ``per_call``: the request's
    measured growth per call (None: the typical tool result until it is known). A
    view of None weighs the best any view of ``used`` tokens could do: the rewrite
    starting at the ledger, as many calls as the room could hold."""
    prices = cache_prices(ctx.policy)
    count_unit = _unit_counter(ctx)
    prev = ctx.state.status.get("used") if ctx.state.status else None
    if per_call is None:
        growth = ctx.state.growth
        per_call = growth.typical() if growth is not None else budget.tool_growth

    # a taken compaction updates the ledger (what it dropped, the facts it shortened
    # away), which sits right after the pinned head: the rewrite starts there at the latest
    ledger_at = _ledger_index(start) if ctx.state.ledger is not None else len(start)
    # the request still fits: what the conversation is expected to cost from here
    age = _calls_made(ctx) if economics.OPTIONAL_SHARE > 0 else None
    bill = expected_bill(age, start_used, per_call, prices) if age is not None else 0.0

    def weigh(view: Sequence[Unit] | None, used: int) -> Rewrite:
        if not isinstance(prev, int) or prev <= 0:
            old_suffix = 0  # no request was sent before: nothing cached to lose
        else:
            i = ledger_at if view is None else min(first_changed(start, view), ledger_at)
            suffix = start_used - sum(count_unit(u) for u in start[:i])
            appended = max(0, start_used - prev)  # written either way
            old_suffix = max(0, suffix - appended)
        calls = predicted_calls(budget, ctx.policy, used, per_call)
        if view is None:  # the best case: the most calls it could leave room for
            calls = max(calls, predicted_calls(budget, ctx.policy, used + 1, per_call))
        # from the trigger on the compaction is due (the next results may not fit):
        # the cache alone decides, the calls still weighed by the chance they are made
        due = start_used >= budget.trigger
        return Rewrite(
            max(0, start_used - used), old_suffix, calls, prices, age, 0.0 if due else bill
        )

    return weigh


def _calls_made(ctx: EngineContext) -> int:
    """The model calls the conversation has made, this one included: its assistant
    steps (the replies to the earlier calls) plus one, from the messages (a retried
    prepare or another worker counts the same)."""
    groups = ctx.derived.caches.groups
    units = groups.units if groups is not None else ()
    for u in reversed(units):
        if u.kind == "step" and u.round is not None:
            return u.round + 2
    return 1


def _ledger_index(view: Sequence[Unit]) -> int:
    """Index of the ledger unit of ``view``, or where a first one goes (after the
    leading pinned units: the system prompt and the task)."""
    for i, u in enumerate(view):
        if u.kind == "ledger" or not u.pinned:
            return i
    return len(view)


def _take_all(
    ctx: EngineContext, held: Sequence[_Outcome], call: Call
) -> tuple[list[Unit], int, str | None]:
    """Take held outputs in order; one that cannot be taken (its archive write failed)
    ends the batch there: the later ones were computed from it."""
    view, used, by = held[0].before, held[0].used_before, None
    for out in held:
        if not _take(ctx, out, call):
            break
        view, used, by = out.units, out.used, out.step.layer
    return view, used, by


def _referenced(ctx: EngineContext, view: list[Unit]) -> list[Unit]:
    """``view`` with every long tool result snapshotted and its reference in the unit's
    ``meta["refs"]``, so the layers about to run can point at originals."""
    ensure_snapshots(ctx, view)
    refs = ctx.state.refs
    return [with_refs(u, refs) for u in view]


def _unit_counter(s: EngineContext) -> Callable[[Unit], int]:
    """``CompactionContext.count_unit``: a grouped unit's tokens as counted when it was
    grouped, any other unit's from the counter's message cache; calibrated like
    ``count``."""
    scale = s.state.calibration if s.counter.approximate else 1.0
    count_message = s.counter.count_message

    def count_unit(u: Unit) -> int:
        n = s.derived.caches.unit_tokens(u)
        if n is None:
            n = sum(count_message(m) for m in u.messages)
        return n if scale == 1.0 else round(n * scale)

    return count_unit


@dataclass
class _Outcome:
    """A layer's validated output, not yet taken (nothing archived or recorded)."""

    step: ResolvedStep
    before: list[Unit]
    used_before: int
    units: list[Unit]
    used: int
    result: LayerResult
    unarchived: list[str]
    emit: Callable[..., None]
    started: float


def _apply(
    ctx: EngineContext,
    call: Call,
    step: ResolvedStep,
    index: int,
    *,
    floor: int | None = None,
) -> _Outcome | None:
    """Run one layer isolated on ``call.view`` and validate its output; None when it
    changed nothing or its output is rejected (reported). ``floor`` lowers the layer's
    target."""
    s = ctx
    view, used, budget, count = call.view, call.used, call.budget, call.count
    state = budget.state_for(used)
    plugin = s.registry.plugin_of("layer", step.layer) or "?"
    target = budget.target if floor is None else min(budget.target, floor)
    memory = s.state.memory.setdefault(f"{step.layer}#{index}", {})
    layer_name = step.layer

    def emit(type_: str | Event, **fields: Any) -> None:
        s.emit(type_, layer=layer_name, plugin=plugin, **fields)

    cctx = CompactionContext(
        count=count,
        used=used,
        window=budget.window,
        trigger=budget.trigger,
        target=max(0, target),
        state=state,
        conv_id=s.conv_id,
        summarizer=s.derived.components.summarizer,
        emit=emit,
        memory=memory,
        snapshots=s.snapshots,
        ledger=s.state.ledger,
        constraints=tuple(s.policy.constraints),
        count_text=s.counter.count_text,
        count_unit=_unit_counter(s),
    )
    started = time.perf_counter()
    before = list(view)
    try:
        result = s.derived.components.layer(step, index).apply(cctx, tuple(before))
        if not isinstance(result, LayerResult):
            raise TypeError(f"apply() returned {type(result).__name__}, not LayerResult")
        new_units = list(result.units)
        if not all(isinstance(u, Unit) for u in new_units):
            raise TypeError("apply() returned something that is not a Unit")
    except Exception as exc:
        s.state.stats.layer_failures[step.layer] += 1
        s.state.touch("memory", "meta")
        emit(LayerFailed(error=f"{type(exc).__name__}: {exc}"[:500]))
        return None
    s.state.touch("memory")
    if [u.key for u in new_units] == [u.key for u in before] and all(
        a is b for a, b in zip(new_units, before, strict=True)
    ):
        return None
    # a result that was not smaller is not offered again for the same units
    slot = f"{step.layer}#{index}"
    no_gain = s.state.memory.setdefault(NO_GAIN, {})
    changed = _changed_keys(before, new_units)
    if changed and slot in no_gain and changed <= set(no_gain[slot]):
        return None
    # a shortened result keeps a reference to its original (unarchived: the store failed)
    new_units, unarchived = ensure_refs(s, before, new_units)
    problems = [v.detail for v in check_units(before, new_units)]
    new_used = count(new_units)
    if new_used > used:
        problems.append(f"returned {new_used} tokens from {used}")
        no_gain[slot] = sorted(changed | set(no_gain.get(slot, ())))[-_NO_GAIN_KEYS:]
    else:  # smaller on other units: offered again from now on
        no_gain.pop(slot, None)
    if problems:
        s.state.stats.layer_failures[step.layer] += 1
        emit(LayerRejected(problems=problems[:10]))
        return None
    return _Outcome(step, before, used, new_units, new_used, result, unarchived, emit, started)


def _take(ctx: EngineContext, out: _Outcome, call: Call) -> bool:
    """Archive what ``out`` dropped, update the ledger and the key facts, record it;
    False when it cannot be taken (the archive failed and the request fits without it)."""
    s, result, before, emit = ctx, out.result, out.before, out.emit
    used, new_units, new_used, unarchived = out.used_before, out.units, out.used, out.unarchived
    if result.dropped and not archive_units(s, result.dropped, emit):
        unarchived = [*(u.key for u in result.dropped), *unarchived]
    if unarchived:
        unarchived_keys = set(unarchived)
        if used <= call.hard_limit:
            emit(LayerRejected(problems=["the dropped or shortened units could not be archived"]))
            return False
        emit(
            DataLost(
                units=unarchived[:100],
                messages=sum(len(u.messages) for u in before if u.key in unarchived_keys),
                reason="archive write failed and the request would not fit otherwise",
            )
        )
    if s.state.ledger is not None and result.dropped:
        try:
            if s.state.ledger.goal is None:
                first_user = next((u for u in before if u.kind == "user"), None)
                if first_user is not None:
                    s.state.ledger.set_goal(content_text(first_user.messages[0].get("content")))
            s.state.ledger.update(result.dropped)
            ledger_changed(s)
        except Exception as exc:  # pragma: no cover - ledger is ours
            emit(LedgerFailed(error=repr(exc)))
    lost: list[str] = []
    try:
        lost = lost_facts(s, before, new_units)
        if lost and s.state.ledger is not None:
            # what a layer shortened away stays in context through the ledger
            s.state.ledger.record_facts(lost)
            ledger_changed(s)
    except Exception as exc:  # pragma: no cover - facts are best effort
        emit(LedgerFailed(error=repr(exc)))
        lost = []
    s.state.stats.compactions[out.step.layer] += 1
    s.state.touch("meta")
    emit(
        ContextCompacted(
            before=used,
            after=new_used,
            units_before=len(before),
            units_after=len(new_units),
            units_removed=len(result.dropped),
            duration_ms=round((time.perf_counter() - out.started) * 1000, 3),
            report=result.report,
            lost_facts=lost[:50],
            prefix_tokens=_prefix_tokens(s, before, new_units),
        )
    )
    return True


def _prefix_tokens(ctx: EngineContext, before: Sequence[Unit], after: Sequence[Unit]) -> int:
    """Tokens of the units in front of the first one ``after`` changed: the part of the
    request a provider's prompt cache can still serve."""
    count_unit = _unit_counter(ctx)
    return sum(count_unit(u) for u in before[: first_changed(before, after)])


def lost_facts(ctx: EngineContext, before: Sequence[Unit], after: Sequence[Unit]) -> list[str]:
    """Facts (:mod:`ctxpolicy.conversation.facts`) of the messages a layer changed or removed
    that are found nowhere in the new context or the ledger.

    Only the messages that differ are read (a masked step's assistant message is
    not), of units where they come to at most ``_FACTS_MAX_CHARS``.
    """
    from ctxpolicy.conversation.facts import first_facts, missing_facts

    kept = {u.key: u.messages for u in after}

    def texts() -> Iterator[str]:
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
                yield from changed

    # the first _FACTS_PER_COMPACTION: more would not stay in a bounded ledger
    facts = first_facts(texts(), _FACTS_PER_COMPACTION)
    return missing_facts(facts, after, ctx.derived.ledger_text)
