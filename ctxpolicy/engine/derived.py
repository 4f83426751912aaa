"""Everything a session rebuilds: the incremental per-call path and its caches.

Nothing here is persisted: after a restart (or :meth:`Derived.reset`) every cache
starts empty and the first ``prepare`` rebuilds it from the messages (same result as
the cached path; the property test ``tests/engine/test_incremental.py`` checks
cached == uncached).

* :class:`Derived` — the one derived object of a conversation, with one ``reset``;
* :class:`Components` — the component instances built from the policy (layers,
  summarizers, the tool-result processor), kept across a reset;

* :class:`_InputCache` — snapshots of the previous call's input, to find the first
  changed message in one C-level list comparison;
* :class:`_GroupCache` — units, their start indices, step and token prefix sums;
* :class:`_PinCache` — pinned units and where the first/last user turns are;
* :class:`_ViewCache` — the rendered view of all but the last unit and its tokens, so
  the prepared list's count is the cached part's plus the grouping's prefix sums of
  the units after it (no second pass over the messages).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxpolicy.components import Layer, Summarizer
from ctxpolicy.conversation import (
    Message,
    Unit,
    group_units,
    message_fingerprint,
    render,
)
from ctxpolicy.conversation.messages import result_id
from ctxpolicy.engine.own import insert_specials, own_kind, own_text
from ctxpolicy.tokens.msgkeys import NO_SNAPSHOT, snapshot, value_key

if TYPE_CHECKING:
    from ctxpolicy.budget import BudgetState
    from ctxpolicy.conversation import Repair
    from ctxpolicy.engine.ledger import ProgressLedger
    from ctxpolicy.engine.state import SessionState
    from ctxpolicy.plugins import Registry
    from ctxpolicy.policy.models import Pinned, Policy, ResolvedStep
    from ctxpolicy.snapshots.archive import HistoryArchive
    from ctxpolicy.tokens import TokenCounter

#: ``Caches.input``'s hook: the message a new tool message enters the context as.
Arrived = Callable[[Sequence[Mapping[str, Any]], int, Mapping[str, Any]], Mapping[str, Any]]
#: ``Caches.input``'s hook: a message too deep for the engine's recursive steps, flattened
#: (``(message, index)``; :func:`ctxpolicy.engine.repairs.flatten_message`).
Flatten = Callable[[Any, int], Any]
#: ``Caches.units``'s hook: the repairs the grouping made of new messages
#: (:func:`ctxpolicy.engine.repairs.report_repairs`).
Repaired = Callable[[list["Repair"]], None]

#: Stands for a message that cannot be snapshotted: equal to nothing, so it is
#: always looked at again.
_UNEQUAL: Any = type("_Unequal", (), {"__eq__": lambda self, other: False, "__hash__": None})()


def _is_tool_message(m: Any) -> bool:
    """Whether ``m`` would join the step before it as a tool result (see
    :func:`~ctxpolicy.conversation.group_units`)."""
    return (type(m) is dict or isinstance(m, Mapping)) and m.get("role") == "tool"


def content_key(m: Any) -> str:
    """Stable content hash of a message for unit keys (the same in every process: keys
    are persisted in the session state)."""
    if type(m) is dict:
        return _hash_value_key(value_key(m))
    return message_fingerprint(m) if isinstance(m, Mapping) else ""


def _hash_value_key(key: Any) -> str:
    """:func:`content_key` of a dict message from its value key."""
    data = repr(key).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=8).hexdigest()


@dataclass
class _InputCache:
    snaps: list[Any]  # snapshot of every input message
    kept: list[int]  # kept[i]: messages of ours dropped -> length of msgs after input[i]
    msgs: list[Mapping[str, Any]]  # the input without messages of ours
    ckeys: list[str]  # content_key of each of msgs
    counts: list[int]  # tokens of each of msgs (-1: not counted)
    owns: list[tuple[int, str, str]]  # (input index, kind, text) of messages of ours


@dataclass
class _GroupCache:
    length: int  # messages grouped
    units: list[Unit]
    starts: list[int]  # message index where each unit's group starts
    steps: list[int]  # step units among units[: i + 1]
    tokens: list[int]  # tokens of the messages of units[: i + 1] (framing included)
    call_ids: dict[str, int]  # tool-call id -> message index, in message order


@dataclass
class _PinCache:
    units: list[Unit]
    first_user: int | None
    last_user: int | None


@dataclass
class _ViewCache:
    key: tuple[int, tuple[Any, ...]]
    upto: int  # originals[:upto] are rendered by view/out
    originals: list[Unit]
    view: list[Unit]
    out: list[Message]
    tokens: int  # tokens of out (framing included, reply priming not)
    #: the pinning (:attr:`Caches.pin_calls`) at which ``originals`` was last seen to
    #: be the conversation's first ``upto`` units
    checked: int


class Components:
    """The component instances a conversation builds from its policy: one layer per
    pipeline step, one summarizer per distinct options, the tool-result processor.
    They hold no conversation state (a layer's memory is in ``SessionState.memory``),
    so a :meth:`Derived.reset` keeps them."""

    def __init__(self, registry: Registry, summarizer: Summarizer | None = None) -> None:
        self.registry = registry
        #: a summarizer given to the session, used instead of the policy's
        self.summarizer_override = summarizer
        self.layers: dict[tuple[str, int], Layer] = {}
        self.summarizers: dict[tuple[str, str], Summarizer] = {}
        self.tool_processor: Any = None

    def summarizer(self, name: str, options: Mapping[str, Any]) -> Summarizer:
        """The summarizer ``name`` with ``options`` (one instance per distinct options),
        or the session's own summarizer when one was given
        (``CompactionContext.summarizer``)."""
        if self.summarizer_override is not None:
            return self.summarizer_override
        okey = (name, repr(sorted(options.items())))
        cache = self.summarizers
        s = cache.get(okey)
        if s is None:
            made = self.registry.create("summarizer", name, options)
            assert isinstance(made, Summarizer)
            cache[okey] = s = made
        return s

    def layer(self, step: ResolvedStep, index: int) -> Layer:
        """The layer instance of pipeline step ``index`` (``-1``: ``on_overflow``)."""
        key = (step.layer, index)
        layers = self.layers
        layer = layers.get(key)
        if layer is None:
            made = self.registry.create("layer", step.layer, step.options)
            assert isinstance(made, Layer)
            layers[key] = layer = made
        return layer


class Derived:
    """What a conversation rebuilds from its messages and its policy.

    :meth:`reset` (a resume, a lost compare-and-set) empties what was derived from
    the conversation; the :class:`Components` built from the policy are kept.
    """

    def __init__(
        self,
        policy: Policy,
        counter: TokenCounter,
        components: Components,
        ledger: ProgressLedger | None,
    ) -> None:
        self.pinned = policy.pinned
        self.counter = counter
        self.components = components
        self.reset(ledger)

    def reset(self, ledger: ProgressLedger | None) -> None:
        """Drop every conversation-derived cache (the next ``prepare`` rebuilds them);
        ``ledger``: the conversation's ledger now (rendered again)."""
        self.caches = Caches(self.counter, self.pinned)
        self.budgets: dict[tuple[int, int | None], BudgetState] = {}
        #: the units of the last prepared view
        self.last_units: list[Unit] = []
        #: the conversation's history archive, opened on the first compaction
        self.history: HistoryArchive | None = None
        #: the last special units (handover, ledger) and the texts they were made of
        self.specials: tuple[tuple[str | None, str | None], list[Unit]] | None = None
        #: the ledger as rendered into the context (None: no ledger or empty)
        self.ledger_text: str | None = ledger.render() if ledger is not None else None


class Caches:
    """The incremental per-call path of one conversation (derived state only)."""

    def __init__(self, counter: TokenCounter, pinned: Pinned) -> None:
        self.counter = counter
        self.pinned = pinned
        self.inputs: _InputCache | None = None
        self.groups: _GroupCache | None = None
        self.pins: _PinCache | None = None
        self.views: _ViewCache | None = None
        #: tokens of the messages :meth:`view` last returned, as
        #: ``TokenCounter.count_messages`` counts them (reply priming included)
        self.out_tokens = 0
        #: the reply priming ``count_messages`` adds to every list (``count_messages([])``)
        self.priming: int = counter.count_messages([])
        self._by_messages: tuple[_GroupCache, dict[int, int]] | None = None
        #: pinnings so far, and how many leading units the last one kept as the
        #: previous one's objects (the view cache's prefix check is then an identity)
        self.pin_calls = 0
        self.pin_same = 0

    @property
    def tokens_in(self) -> int:
        """Tokens of every grouped message (framing included) as last grouped."""
        g = self.groups
        return g.tokens[-1] if g and g.tokens else 0

    def unit_tokens(self, unit: Unit) -> int | None:
        """Tokens of ``unit``'s messages (framing included) when they are those of a
        grouped unit, counted when it was grouped; None for any other unit.

        Serves ``CompactionContext.count_unit``: a layer counts each unit once
        without a second pass over the token counter's caches.
        """
        g = self.groups
        if g is None:
            return None
        if self._by_messages is None or self._by_messages[0] is not g:
            self._by_messages = (g, {id(u.messages): i for i, u in enumerate(g.units)})
        i = self._by_messages[1].get(id(unit.messages))
        if i is None or g.units[i].messages is not unit.messages:
            return None
        return g.tokens[i] - (g.tokens[i - 1] if i else 0)

    @property
    def own_messages(self) -> list[tuple[str, str]]:
        """``(kind, text)`` of the ledger/handover messages of ours in the last input."""
        owns = self.inputs.owns if self.inputs else None
        return [(kind, text) for _, kind, text in owns] if owns else []

    def input(
        self,
        messages: Sequence[Mapping[str, Any]],
        arrived: Arrived | None,
        flatten: Flatten,
    ) -> tuple[list[Mapping[str, Any]], int]:
        """The conversation without ledger/handover messages of ours that an agent fed
        back in (the cache's list: valid until the next call), and how many of its
        messages are unchanged since the previous call.

        ``arrived(messages, i, m)`` gives the message a new tool message ``m`` enters
        the context as (its tool's rule applied: ``Session._arrived``); the input as it
        came is what the next call is compared with.

        Incremental: the input is compared with snapshots of the previous call's input
        in one C-level list comparison (equal snapshots = same content, even when a
        message was edited in place), so only new messages are looked at. The
        messages of ours are kept aside (:attr:`own_messages`); ``flatten(m, index)``
        gives a message nested too deep for the engine's recursive steps as it is kept.
        """
        if type(messages) is not list:
            messages = list(messages)
        cache = self.inputs
        k = 0
        if cache is not None:
            snaps = cache.snaps
            k = min(len(messages), len(snaps))
            if messages[:k] != (snaps if k == len(snaps) else snaps[:k]):
                k = next(i for i, (a, b) in enumerate(zip(messages, snaps, strict=False)) if a != b)
        if cache is not None and k == len(cache.snaps):
            # the previous input is a prefix (a growing conversation): extend its lists
            # in place; until they are complete there is no cache (an exception below
            # leaves none half-extended)
            self.inputs = None
            snaps, kept, msgs, ckeys = cache.snaps, cache.kept, cache.msgs, cache.ckeys
            counts, owns = cache.counts, cache.owns
        elif cache is not None:
            kept = cache.kept[:k]
            n_kept = kept[-1] if k else 0
            msgs, ckeys = cache.msgs[:n_kept], cache.ckeys[:n_kept]
            counts = cache.counts[:n_kept]
            snaps = cache.snaps[:k]
            owns = [o for o in cache.owns if o[0] < k]
        else:
            snaps, kept, msgs, ckeys, counts, owns = [], [], [], [], [], []
        # one token-counter lookup per new message gives its snapshot, its count (for
        # the grouping that follows) and its value key (hashed into the unit keys)
        counter = self.counter
        counter.reserve(len(messages))
        for i, m in enumerate(messages[k:], k):
            ckey: str | None = None
            n = -1
            came: Any = None
            if arrived is not None and _is_tool_message(m):
                new = arrived(messages, i, m)
                if new is not m:
                    try:
                        came = snapshot(m)
                    except RecursionError:
                        came = NO_SNAPSHOT
                    m = new
            try:
                if type(m) is dict:
                    e = counter.lookup(m, True)
                    snap, ckey, n = e[1], _hash_value_key(e[3]), e[2]
                else:
                    snap = snapshot(m)
            except RecursionError:  # nested too deep: its deep fields as exact JSON text
                try:
                    snap = snapshot(m)
                except RecursionError:
                    m, snap = flatten(m, len(msgs)), NO_SNAPSHOT
                    n = -1
            if came is not None:
                snap = came
            snaps.append(_UNEQUAL if snap is NO_SNAPSHOT else snap)
            kind = own_kind(m)
            if kind is None:
                msgs.append(m)
                ckeys.append(ckey if ckey is not None else content_key(m))
                counts.append(n)
            else:
                owns.append((i, kind, own_text(m)))
            kept.append(len(msgs))
        self.inputs = _InputCache(snaps, kept, msgs, ckeys, counts, owns)
        # the cache's own list (no copy per call): read it now, never keep or change it
        return msgs, kept[k - 1] if k else 0

    def units(
        self,
        msgs: list[Mapping[str, Any]],
        unchanged: int,
        refs: Mapping[str, str],
        repaired: Repaired,
    ) -> tuple[list[Unit], int]:
        """Units of ``msgs`` (the first ``unchanged`` messages as in the previous call),
        pinned per policy, snapshot refs attached (``refs``: tool call id -> reference);
        and how many leading units are the previous call's unit objects.
        ``repaired(repairs)`` is told the repairs the grouping made of new messages.

        A growing conversation is grouped incrementally: units of the unchanged prefix
        are reused up to the group of the last unchanged message (which may take in
        tool messages that follow it now); the rest is grouped afresh. Same result as
        grouping from scratch, O(new messages).
        """
        cache = self.groups
        units: list[Unit] = []
        starts: list[int] = []
        steps: list[int] = []
        tokens: list[int] = []
        cut = keep = 0
        call_ids: dict[str, int] = {}
        if cache is not None and cache.starts:
            same = min(unchanged, cache.length)
            if same == cache.length and (
                cache.units[-1].kind not in ("step", "orphan")
                or same == len(msgs)
                or not _is_tool_message(msgs[same])
            ):
                # the last group is complete: only tool messages right after it join it
                cut, keep = same, len(cache.units)
            else:
                # regroup from the group of the last unchanged message: a group can
                # take in tool messages that now follow it (results that arrived late,
                # or orphans moved up when a message before them was removed)
                at = bisect.bisect_right(cache.starts, same - 1) - 1
                cut = min(cache.starts[-1], cache.starts[at] if at >= 0 else 0)
                keep = bisect.bisect_left(cache.starts, cut)
            # the cached lists are extended in place (the cache is rebuilt below; an
            # exception in between leaves none)
            self.groups = None
            units, starts, steps, tokens = cache.units, cache.starts, cache.steps, cache.tokens
            for lst in (units, starts, steps, tokens):
                del lst[keep:]
            call_ids = cache.call_ids
            while call_ids and next(reversed(call_ids.values())) >= cut:
                call_ids.popitem()  # ids of the regrouped messages (the newest entries)
        tail = msgs[cut:]
        # ``msgs`` is what :meth:`input` returned: keys and counts are known
        inputs = self.inputs if self.inputs and len(self.inputs.ckeys) == len(msgs) else None
        fps = inputs.ckeys[cut:] if inputs is not None else [content_key(m) for m in tail]
        sources: list[tuple[int, ...] | None] = []
        new_units, new_starts, repairs = group_units(
            tail,
            offset=cut,
            first_round=steps[-1] if steps else 0,
            fingerprints=fps,
            call_ids=call_ids,
            sources=sources,
        )
        if repairs:
            repaired(repairs)
        if refs:
            new_units = [with_refs(u, refs) for u in new_units]
        n_steps = steps[-1] if steps else 0
        n_tokens = tokens[-1] if tokens else 0
        count = self.counter.count_message
        counts = inputs.counts if inputs is not None else None
        for u, src in zip(new_units, sources, strict=True):
            n_steps += u.kind == "step"
            steps.append(n_steps)
            known = [counts[j] for j in src] if counts is not None and src is not None else [-1]
            if min(known) >= 0:  # unchanged copies of input messages: counted there
                n_tokens += sum(known)
            else:
                n_tokens += sum(count(m) for m in u.messages)
            tokens.append(n_tokens)
        units.extend(new_units)
        starts.extend(new_starts)
        self.groups = _GroupCache(len(msgs), units, starts, steps, tokens, call_ids)
        return self._pin(units, keep), keep

    def _pin(self, units: list[Unit], keep: int) -> list[Unit]:
        """:func:`~ctxpolicy.conversation.pin_units` of ``units``, incrementally: the
        first ``keep`` are the previous call's units, so only the new ones and the
        units whose first/last-user status moved are looked at."""
        pol = self.pinned
        prev = self.pins
        n = len(units)
        if prev is None:
            keep = 0
        users = [i for i in range(keep, n) if units[i].kind == "user"]
        # the previous call's first/last user units (None: it had none, so none of
        # ``units[:keep]`` is one); a number at or above ``keep`` was regrouped
        first_user = prev.first_user if prev is not None else None
        if first_user is None or first_user >= keep:
            first_user = users[0] if users else None
        if users:
            last_user: int | None = users[-1]
        else:
            last_user = prev.last_user if prev is not None else None
            if last_user is not None and last_user >= keep:
                last_user = next(
                    (i for i in range(keep - 1, -1, -1) if units[i].kind == "user"), None
                )
        pin_system, pin_first, pin_last = pol.system, pol.first_user, pol.last_user

        def pinned(i: int) -> Unit:
            u = units[i]
            kind = u.kind
            pin = (
                u.pinned
                or (pin_system and kind == "system")
                or kind == "ledger"
                or (pin_first and i == first_user)
                or (pin_last and i == last_user)
            )
            return u if pin == u.pinned else u.replace(pinned=pin)

        self.pin_calls += 1
        self.pin_same = 0
        if prev is not None:  # extended in place (no cache until it is complete)
            self.pins = None
            out = prev.units
            del out[keep:]
            moved = prev.first_user != first_user or prev.last_user != last_user
        else:
            out, moved = [], False
        for i in range(keep, n):
            out.append(pinned(i))
        same = keep
        if moved:
            assert prev is not None
            for j in {prev.first_user, prev.last_user, first_user, last_user}:
                if j is not None and j < keep:
                    out[j] = pinned(j)
                    same = min(same, j)
        self.pins = _PinCache(out, first_user, last_user)
        self.pin_same = same
        # the cache's own list (no copy per call): read it now, never keep or change it
        return out

    def view(
        self,
        originals: list[Unit],
        keep: int,
        st: SessionState,
        specials_of: Callable[[], list[Unit]],
        history_changed: Callable[[], None],
    ) -> tuple[list[Unit], list[Message]]:
        """The units to send (the sticky decisions of ``st`` applied, the ledger/handover
        units ``specials_of()`` inserted) and their messages; ``history_changed()`` is
        called when units a decision was taken on are gone (it drops the decisions).

        The view of all units but the last (and at least up to the last decided unit)
        is cached: while those units and the decisions are the same, a call only
        renders the units after them.
        """
        specials = specials_of()
        key = (st.decisions_version, tuple([u.messages[0]["content"] for u in specials]))
        c = self.views
        span = self._span(originals)
        if (
            c is not None
            and c.key == key
            and keep >= c.upto
            # the cached units are the same objects as when last checked (the pinning
            # since then kept them), or equal to them
            and (
                (c.checked == self.pin_calls - 1 and self.pin_same >= c.upto)
                or originals[: c.upto] == c.originals
            )
        ):
            tail = originals[c.upto :]
            new = render(tail)
            units, out = [*c.view, *tail], [*c.out, *new]
            n = len(originals)
            # the count from the cached part's and the grouping's prefix sums: no
            # second pass over the messages (same number as count_messages(out))
            self.out_tokens = (
                c.tokens + span(c.upto, n) + self.priming
                if span is not None
                else self.counter.count_messages(out)
            )
            c.checked = self.pin_calls
            if len(tail) > 1:  # the next call regroups at most the last unit
                if span is None:
                    self.views = None
                else:  # the cache takes in all new units but the last (in place)
                    grown = tail[:-1]
                    c.originals.extend(grown)
                    c.view.extend(grown)
                    c.out.extend(new[: len(new) - len(tail[-1].messages)])
                    c.tokens += span(c.upto, n - 1)
                    c.upto = n - 1
            return units, out
        keys = {u.key for u in originals}
        if st.decisions and any(k not in keys for k in st.decisions):
            history_changed()
            specials = specials_of()
            key = (st.decisions_version, tuple([u.messages[0]["content"] for u in specials]))
        view: list[Unit] = []
        decided_upto = 0
        # units of ours in the view (decided, special): counted by the counter; the
        # originals by the grouping's prefix sums (no pass over every message)
        added: list[Unit] = list(specials)
        dropped = 0  # tokens of the originals a decision replaced
        for i, u in enumerate(originals):
            if u.key in st.decisions:
                decided_upto = i + 1
                if not u.pinned:
                    view.extend(st.decisions[u.key])
                    added.extend(st.decisions[u.key])
                    dropped += span(i, i + 1) if span is not None else 0
                    continue
            view.append(u)
        view = insert_specials(view, specials)
        # cache all but the last unit (which the next call may regroup) and the decided
        # ones; a cached part ending with the ledger takes one unit more (the ledger's
        # place depends on the unit after it)
        p, q = len(originals), len(view)
        floor = max(decided_upto, p - 1)
        while p > floor and q > 0 and view[q - 1] is originals[p - 1]:
            p, q = p - 1, q - 1
        if q and view[q - 1].kind == "ledger" and p < len(originals):
            p, q = p + 1, q + 1
        out = render(view)
        counter = self.counter
        priming = self.priming
        if span is not None:  # the same number as count_messages(out)
            total = priming + span(0, len(originals)) - dropped
            total += sum(counter.count_message(m) for u in added for m in u.messages)
        else:
            total = counter.count_messages(out)
        self.out_tokens = total
        self.views = (
            None
            if (q and view[q - 1].kind == "ledger") or span is None
            else _ViewCache(
                key,
                p,
                originals[:p],
                view[:q],
                out[: len(out) - sum(len(u.messages) for u in view[q:])],
                total - priming - span(p, len(originals)),
                self.pin_calls,
            )
        )
        return view, out

    def _span(self, originals: Sequence[Unit]) -> Callable[[int, int], int] | None:
        """Tokens of ``originals[a:b]`` from the grouping's prefix sums (None when the
        grouping is not the one of ``originals``)."""
        g = self.groups
        if g is None or len(g.tokens) != len(originals):
            return None
        t = g.tokens

        def span(a: int, b: int) -> int:
            return (t[b - 1] if b else 0) - (t[a - 1] if a else 0)

        return span


def with_refs(unit: Unit, refs: Mapping[str, str]) -> Unit:
    """``unit`` with the snapshot refs of its tool results (``meta["refs"]``; ``refs``:
    tool call id -> reference)."""
    if unit.kind != "step" or not refs:
        return unit
    found: dict[str, str] = {}
    for m in unit.messages:
        if m.get("role") == "tool":
            tid = result_id(m)
            if tid in refs:
                found[tid] = refs[tid]
    if not found or unit.meta.get("refs") == found:
        return unit
    return unit.replace(meta={**unit.meta, "refs": found})


def remember(view: Sequence[Unit], originals: Sequence[Unit]) -> dict[str, tuple[Unit, ...]]:
    """The sticky decisions that reproduce ``view`` from ``originals``."""
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
            if by_key.get(u.key) is u or (u.key == first and by_key[first].messages == u.messages):
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
    return {k: tuple(v) for k, v in decisions.items()}
