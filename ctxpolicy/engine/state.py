"""What a session has decided: the persisted part of a :class:`~ctxpolicy.engine.Session`.

Everything here cannot be recomputed from the messages (sticky compaction decisions
and the summaries they hold, the progress ledger, the archive index, learned tool
growth, a learned window, tokenizer calibration, layer memory such as a summarizer's
circuit breaker, counters). Everything else a session keeps — grouped units, pinning,
the rendered view, budgets, layer and summarizer instances — is derived
(:mod:`ctxpolicy.engine.derived`) and rebuilt from the messages after a restart.

:meth:`SessionState.to_entries` turns the state into small JSON documents keyed by
string (``meta``, ``status``, ``scalars``, ``texts``, ``repairs``, ``ledger``,
``memory``, ``growth``, ``decision/<unit key>``, ``ref/<tool call id>``,
``archived/<unit key>``, ``tool/<digest>``); :meth:`SessionState.take_changes` returns only the entries
that changed since the last call, so a state store writes what changed, not the whole
history.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ctxpolicy.conversation import Unit
from ctxpolicy.engine.stored import (
    Invalid,
    Problem,
    WindowBounds,
    check_decision,
    check_growth,
    check_ledger,
    check_memory,
    check_meta_field,
    check_ref,
    check_repairs,
    check_seen_repairs,
    check_stats,
    check_tool_key,
    check_tool_text,
)
from ctxpolicy.state.codec import UNSTORABLE, built_text, check_key, entry_text, unstorable

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.budget import ToolGrowthEstimator
    from ctxpolicy.engine.ledger import ProgressLedger

#: Reports a changed entry left out of a save: ``(key, reason)``.
Refuse = Callable[[str, str], None]

#: Version of the entry format; a store holding another major version is not read.
STATE_FORMAT = 1


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

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PreparedStats:
        data = dict(d)
        return cls(
            **{
                **data,
                "compactions": Counter(data.get("compactions", {})),
                "layer_failures": Counter(data.get("layer_failures", {})),
            }
        )


#: Prefix of the entry of a tool call id that cannot be a key itself (too long, a NUL,
#: a lone surrogate): ``refh/<digest of the id>``, the value ``{"id": …, "uri": …}``.
HASHED_REF = "refh/"


def ref_key(call_id: str) -> str:
    """The state key of the snapshot reference of ``call_id``: ``ref/<id>`` for every id
    that makes a valid key (what 0.1 stored, so its state resumes), else
    ``refh/<blake2b of the id>`` — a tool-call id is chosen by the model, any text."""
    key = f"ref/{call_id}"
    try:
        return check_key(key)
    except ValueError:
        return HASHED_REF + _digest(call_id)


def _digest(call_id: str) -> str:
    return hashlib.blake2b(call_id.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def unit_to_json(u: Unit) -> dict[str, Any]:
    return {
        "kind": u.kind,
        "key": u.key,
        "messages": list(u.messages),
        "origin": list(u.origin),
        "round": u.round,
        "pinned": u.pinned,
        "meta": dict(u.meta),
    }


def unit_from_json(d: Mapping[str, Any]) -> Unit:
    return Unit(
        kind=d["kind"],
        messages=tuple(d["messages"]),
        key=str(d["key"]),
        origin=tuple(d.get("origin") or ()),
        round=d.get("round"),
        pinned=bool(d.get("pinned", False)),
        meta=dict(d.get("meta") or {}),
    )


#: Repairs remembered one by one in the ``repairs`` entry; past this many, the oldest
#: message indices are kept as one floor per kind (the entry stays bounded).
MAX_SEEN_REPAIRS = 256

#: ``touch("meta")`` marks the scalars of the state changed; a save writes each of
#: the three entries that hold them only when its value differs from what was last
#: written (or loaded), so a commit is proportional to what changed:
#:
#: * ``meta``: the format and the per-call counters (the step counter, ``stats``;
#:   about 0.25 KB, written by every call — what a 0.1 reader needs most);
#: * ``status``: the last ``context.status`` (about 0.4 KB, written by ``prepare``,
#:   never by ``add_tool_result``);
#: * ``scalars``: the fields that rarely change (a learned window, calibration,
#:   overflow attempts, a compaction hold), written on the save after one changed.
#:
#: Before 0.2 ``meta`` held all of them (:data:`_LEGACY_META`, still read from there).
SCALAR_ENTRIES = ("meta", "status", "scalars")
_SCALAR_FIELDS = ("learned_window", "calibration", "usage_seen", "overflow_attempts", "hold_until")
#: Entries the engine builds from typed fields, every dict keyed by text: encoded
#: with :func:`ctxpolicy.state.codec.built_text` (no walk over the value first).
_BUILT = frozenset({*SCALAR_ENTRIES, "growth"})
#: Fields a ``meta`` entry written before 0.2 holds besides the counters: read from
#: there over the entries that hold them now, and moved with the next save.
_LEGACY_META = (*_SCALAR_FIELDS, "status")
#: Texts that rarely change, kept in the ``texts`` entry: written on the save after
#: they changed, never by a call that did not change them (a handover text can be
#: many KB). Before 0.2 they were fields of ``meta`` (still read from there).
_TEXT_FIELDS = ("handover_text", "unfit")
#: The ``texts`` entry must be written (or deleted) with the next save.
_UNSAVED: Any = object()


@dataclass
class SessionState:
    """The persisted state of one conversation (see the module docstring).

    Mutate through the methods that name what changed (``set_decisions``,
    ``add_ref``, ``mark_archived``, ``touch``) so :meth:`take_changes` stays exact.
    The progress ledger and the learned tool-growth samples are objects of their
    own (:class:`~ctxpolicy.engine.ledger.ProgressLedger`,
    :class:`~ctxpolicy.budget.ToolGrowthEstimator`) held here; a change to them is
    marked with ``touch("ledger")`` / ``touch("growth")``.
    """

    step: int = 0
    decisions: dict[str, tuple[Unit, ...]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    archived: set[str] = field(default_factory=set)
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    learned_window: int | None = None
    calibration: float = 1.0
    usage_seen: bool = False
    overflow_attempts: int = 0
    handover_text: str | None = None
    status: dict[str, Any] | None = None
    #: after a compaction that could not reach the target: no pipeline step runs
    #: before the context reaches this many tokens (or ``critical``)
    hold_until: int | None = None
    #: the learned window cannot hold the policy's pinned content and newest round
    #: (reported once with ``context.window_unfit``); the reason
    unfit: str | None = None
    #: repairs reported (kind, message index): the newest ones one by one, older ones
    #: by :attr:`repair_floor` (bounded: :data:`MAX_SEEN_REPAIRS`); entry ``repairs``
    seen_repairs: set[tuple[str, int]] = field(default_factory=set)
    #: per kind, every message index up to this one was reported
    repair_floor: dict[str, int] = field(default_factory=dict)
    stats: PreparedStats = field(default_factory=PreparedStats)
    #: the progress ledger (None when the policy disables it)
    ledger: ProgressLedger | None = field(default=None, repr=False, compare=False)
    #: the learned tool-growth samples (None: a state without a policy, as in tests)
    growth: ToolGrowthEstimator | None = field(default=None, repr=False, compare=False)
    #: bumped by every change of ``decisions`` (a cache key of the rendered view)
    decisions_version: int = 0
    #: stored entries that were invalid when this state was loaded (not obeyed; each
    #: replaced by what a new conversation starts with and rewritten with the next save)
    problems: list[Problem] = field(default_factory=list, repr=False, compare=False)
    #: a learned window loaded from the store, not yet held against the pinned content
    #: of a request (:func:`ctxpolicy.engine.window.verify_learned_window`)
    window_unverified: bool = field(default=False, repr=False, compare=False)
    _dirty: set[str] = field(
        default_factory=lambda: {"meta", "ledger", "growth", "memory"}, repr=False
    )
    _deleted: set[str] = field(default_factory=set, repr=False)
    #: ``(handover_text, unfit)`` as last written to the ``texts`` entry
    _texts_saved: Any = field(default=(None, None), repr=False)
    #: the value last written to (or loaded from) each of :data:`SCALAR_ENTRIES`
    _scalars_saved: dict[str, Any] = field(default_factory=dict, repr=False)
    #: where a loaded learned window came from (the key of its ``state.invalid``)
    window_key: str = field(default="scalars.learned_window", repr=False, compare=False)
    #: ``refh/<digest>`` key → its call id
    _hashed: dict[str, str] = field(default_factory=dict, repr=False)
    #: tool results whose rule was applied (:func:`ctxpolicy.engine.tool_results.tool_key`
    #: of the call id and the content as it arrives → the text that replaces it, None
    #: when it enters as it is): a result that arrives inside the messages of
    #: ``prepare`` is processed once, and the same text is sent on every later call
    #: and after a resume; entries ``tool/<digest>``
    tool_texts: dict[str, str | None] = field(default_factory=dict)
    #: a state stored before tool results were remembered (``tool/`` entries): the
    #: tool messages among the first this many of the next input were sent as they are
    #: then and are left so (not processed again, not changed); not persisted
    legacy_upto: int = field(default=0, repr=False, compare=False)

    # ------------------------------------------------------------------ mutation
    def set_decisions(self, decisions: dict[str, tuple[Unit, ...]]) -> None:
        old = self.decisions
        for k, v in decisions.items():
            prev = old.get(k)
            if prev is not v and prev != v:
                self._put(f"decision/{k}")
        for k in old.keys() - decisions.keys():
            self._drop(f"decision/{k}")
        self.decisions = decisions
        self.decisions_version += 1

    def add_ref(self, call_id: str, uri: str) -> None:
        """The snapshot of the result of ``call_id``. A reused id keeps the first: in
        the conversation the first use keeps the id and later uses are renamed
        (:mod:`ctxpolicy.conversation.repair`), and get their own snapshot when first shortened."""
        if call_id in self.refs:
            return
        self.refs[call_id] = uri
        key = ref_key(call_id)
        if key.startswith(HASHED_REF):
            self._hashed[key] = call_id
        self._put(key)

    def add_tool_text(self, key: str, text: str | None) -> None:
        """Remember the text a tool result enters the context as (see :attr:`tool_texts`)."""
        if key in self.tool_texts and self.tool_texts[key] == text:
            return
        self.tool_texts[key] = text
        self._put(f"tool/{key}")

    def repair_seen(self, kind: str, index: int) -> bool:
        """Whether the repair ``kind`` of message ``index`` was reported already."""
        return index <= self.repair_floor.get(kind, -1) or (kind, index) in self.seen_repairs

    def see_repair(self, kind: str, index: int) -> None:
        """Remember that the repair ``kind`` of message ``index`` was reported (the
        ``repairs`` entry: rewritten only when a new repair is reported, and bounded —
        past :data:`MAX_SEEN_REPAIRS` the oldest indices become a floor per kind)."""
        self.seen_repairs.add((kind, index))
        if len(self.seen_repairs) > MAX_SEEN_REPAIRS:
            self._bound_repairs()
        self._put("repairs")

    def _bound_repairs(self) -> None:
        ordered = sorted(self.seen_repairs, key=lambda r: (r[1], r[0]))
        cut = len(ordered) - MAX_SEEN_REPAIRS // 2
        floor = self.repair_floor
        for kind, index in ordered[:cut]:
            floor[kind] = max(floor.get(kind, -1), index)
        self.seen_repairs = {(k, i) for k, i in ordered[cut:] if i > floor.get(k, -1)}

    def mark_archived(self, key: str) -> None:
        self.archived.add(key)
        self._put(f"archived/{key}")

    def touch(self, *sections: str) -> None:
        """Mark whole sections (``meta``, ``ledger``, ``memory``, ``growth``) changed."""
        for s in sections:
            self._put(s)

    def _put(self, key: str) -> None:
        self._dirty.add(key)
        self._deleted.discard(key)

    def _drop(self, key: str) -> None:
        self._deleted.add(key)
        self._dirty.discard(key)

    # ------------------------------------------------------------------ serialisation
    def _entry(self, key: str) -> Any:
        """The value of one entry."""
        section, _, name = key.partition("/")
        if section == "meta":
            return {"format": STATE_FORMAT, "step": self.step, "stats": self.stats.to_dict()}
        if section == "status":
            return dict(self.status) if self.status is not None else None
        if section == "scalars":
            return {f: getattr(self, f) for f in _SCALAR_FIELDS}
        if section == "texts":
            return {f: getattr(self, f) for f in _TEXT_FIELDS}
        if section == "repairs":
            return {
                "seen": sorted([k, i] for k, i in self.seen_repairs),
                "floor": dict(sorted(self.repair_floor.items())),
            }
        if section == "ledger":
            return self.ledger.to_dict() if self.ledger is not None else None
        if section == "growth":
            return self.growth.to_dict() if self.growth is not None else None
        if section == "memory":
            return self.memory
        if section == "decision":
            return [unit_to_json(u) for u in self.decisions[name]]
        if section == "ref":
            return self.refs[name]
        if section + "/" == HASHED_REF:
            call_id = self._hashed[key]
            return {"id": call_id, "uri": self.refs[call_id]}
        if section == "archived":
            return True
        if section == "tool":
            text = self.tool_texts[name]
            return True if text is None else text
        raise KeyError(key)

    def to_entries(self) -> dict[str, Any]:
        """Every entry (a full save)."""
        keys = ["meta", "scalars", "ledger", "growth", "memory"]
        keys += ["status"] if self.status is not None else []
        keys += ["texts"] if self.handover_text is not None or self.unfit is not None else []
        keys += ["repairs"] if self.seen_repairs or self.repair_floor else []
        keys += [f"decision/{k}" for k in self.decisions]
        keys += [ref_key(k) for k in self.refs]
        keys += [f"archived/{k}" for k in self.archived]
        keys += [f"tool/{k}" for k in self.tool_texts]
        return {k: _jsonable(self._entry(k)) for k in keys}

    def take_changes(self, refuse: Refuse | None = None) -> tuple[dict[str, Any], list[str]]:
        """Entries changed and deleted since the last call (then forgotten).

        A value JSON cannot hold (NaN, a circular reference, nesting too deep: what
        a layer may put in its ``memory``) is a ValueError, or with ``refuse`` is
        left out and reported as ``refuse(key, reason)``: the other changes are
        still taken, and the entry is tried again when it next changes. Of the
        ``memory`` entry only the layers' memories that cannot be held are left out
        (``refuse("memory/<layer>#<index>", reason)``)."""
        return self._take(lambda _key, value: _jsonable(value), refuse)

    def take_encoded_changes(
        self, refuse: Refuse | None = None
    ) -> tuple[dict[str, str], list[str]]:
        """:meth:`take_changes` with each value as its canonical JSON text (what a
        JSON state store writes; :func:`ctxpolicy.state.codec.entry_text`): one
        encoding per changed entry, no round trip through ``json.loads``."""
        built = _BUILT
        return self._take(
            lambda key, value: (built_text if key in built else entry_text)(key, value), refuse
        )

    def _take(
        self, encode: Callable[[str, Any], Any], refuse: Refuse | None
    ) -> tuple[dict[str, Any], list[str]]:
        put = {}
        for key, value in self._changed_values():
            try:
                put[key] = encode(key, value)
            except UNSTORABLE as exc:
                if refuse is None:
                    self._forget_changes()  # not taken again and again by every save
                    raise ValueError(f"state entry {key!r} is {unstorable(exc)}") from None
                if key == "memory" and type(value) is dict:
                    # one layer's memory is refused, the others' (and the engine's) saved
                    value = {
                        name: sub
                        for name, sub in value.items()
                        if _encoded(f"{key}/{name}", {name: sub}, encode, refuse) is not None
                    }
                    if (text := _encoded(key, value, encode, refuse)) is not None:
                        put[key] = text
                else:
                    refuse(key, unstorable(exc))
        return put, self._forget_changes()

    def _changed_values(self) -> list[tuple[str, Any]]:
        """``(key, value)`` of every changed entry, in key order. A ``touch("meta")``
        yields those of :data:`SCALAR_ENTRIES` whose value differs from the one last
        written: one comparison each, and an unchanged one is neither encoded nor
        written (``add_tool_result`` leaves ``status`` and ``scalars`` alone)."""
        self._note_texts()
        dirty = self._dirty
        out: list[tuple[str, Any]] = []
        if "meta" in dirty:
            dirty.discard("meta")
            saved = self._scalars_saved
            for key in SCALAR_ENTRIES:
                value = self._entry(key)
                if value is None or value == saved.get(key, _UNSAVED):
                    continue
                saved[key] = value
                self._deleted.discard(key)
                out.append((key, value))
        out += [(k, self._entry(k)) for k in dirty]
        out.sort(key=lambda kv: kv[0])
        return out

    def _note_texts(self) -> None:
        """Mark the ``texts`` entry changed (or deleted: both texts unset) when the texts
        differ from what was last written: one tuple comparison per save, and no
        mutation site has to remember to say so."""
        now = (self.handover_text, self.unfit)
        if now == self._texts_saved:
            return
        if now == (None, None):
            self._drop("texts")
        else:
            self._put("texts")
        self._texts_saved = now

    def _forget_changes(self) -> list[str]:
        deleted = sorted(self._deleted)
        self._dirty.clear()
        self._deleted.clear()
        return deleted

    @classmethod
    def from_entries(
        cls,
        entries: Mapping[str, Any],
        *,
        ledger: ProgressLedger | None = None,
        growth: ToolGrowthEstimator | None = None,
        count_text: Callable[[str], int] | None = None,
        bounds: WindowBounds | None = None,
    ) -> SessionState:
        """The state saved by :meth:`to_entries`, each entry checked against the model
        (:mod:`ctxpolicy.engine.stored`).

        ``ledger`` and ``growth`` are fresh objects of the policy (what a new
        conversation starts with): a stored ledger replaces ``ledger`` (when the
        policy has one; its size limit and constraints stay the policy's), stored
        growth samples are loaded into ``growth``. ``bounds``: what a learned window
        may be under the policy. An invalid entry (or ``meta`` field) is not obeyed:
        it is listed in :attr:`problems`, replaced by a new conversation's value and
        rewritten (or deleted) with the next save. Only a stored format other than
        :data:`STATE_FORMAT` refuses the whole state (ValueError).
        """
        problems: list[Problem] = []
        raw_meta = entries.get("meta")
        meta: Mapping[str, Any] = {}
        if isinstance(raw_meta, dict):
            meta = raw_meta
        elif raw_meta is not None:
            problems.append(Problem("meta", "not an object"))
        fmt = meta.get("format", STATE_FORMAT)
        if fmt != STATE_FORMAT:
            raise ValueError(f"session state format {fmt!r:.40} is not supported ({STATE_FORMAT})")
        st = cls()
        st._dirty.clear()  # as stored

        def check(key: str, fn: Callable[[], Any]) -> Any:
            try:
                return fn()
            except Invalid as exc:
                problems.append(Problem(key, str(exc)[:200]))
                return None

        if "step" in meta:
            try:
                st.step = check_meta_field("step", meta["step"], bounds)
            except Invalid as exc:
                problems.append(Problem("meta.step", str(exc)[:200]))
        st._load_scalars(entries, meta, problems, bounds)
        st._load_texts(entries.get("texts"), meta, problems, bounds)
        if st.unfit is not None and st.learned_window is None:
            st.unfit = None  # judged against a learned window only
        st.window_unverified = st.learned_window is not None
        repairs = entries.get("repairs")
        if repairs is not None:
            checked = check("repairs", lambda: check_repairs(repairs))
            if checked is None:
                st._put("repairs")
            else:
                st.seen_repairs, st.repair_floor = checked
        elif "seen_repairs" in meta:  # the layout of 0.1: in meta (rewritten on its own)
            seen = check("meta.seen_repairs", lambda: check_seen_repairs(meta["seen_repairs"]))
            st.seen_repairs = seen if seen is not None else set()
            st._put("repairs")
        if len(st.seen_repairs) > MAX_SEEN_REPAIRS:
            st._bound_repairs()
        if "stats" in meta:
            stats = check("meta.stats", lambda: check_stats(meta["stats"]))
            if stats is not None:
                st.stats = PreparedStats.from_dict(stats)
        if problems:
            st._put("meta")
        if "meta" not in st._dirty and isinstance(raw_meta, dict):
            st._scalars_saved["meta"] = st._entry("meta")
        raw_memory = entries.get("memory")
        if raw_memory is not None:
            memory = check("memory", lambda: check_memory(raw_memory))
            st.memory = dict(memory) if memory is not None else {}
            if memory is None:
                st._put("memory")
        stored_ledger, stored_growth = entries.get("ledger"), entries.get("growth")
        if ledger is not None and stored_ledger is not None:
            fields = check("ledger", lambda: check_ledger(stored_ledger))
            if fields is None:
                st._put("ledger")
            else:
                from ctxpolicy.engine.ledger import ProgressLedger

                fields.update(max_tokens=ledger.max_tokens, constraints=ledger.constraints)
                ledger = ProgressLedger.from_dict(fields, count_text=count_text)
        if growth is not None and stored_growth is not None:
            samples = check("growth", lambda: check_growth(stored_growth))
            if samples is None:
                st._put("growth")
            else:
                growth.load_dict(samples)
        st.ledger, st.growth = ledger, growth
        for key, value in entries.items():
            section, _, name = key.partition("/")
            if section not in ("decision", "ref", "refh", "archived", "tool"):
                continue
            if not name or not st._load_entry(key, section, name, value):
                problems.append(Problem(key[:120], f"invalid {section} entry"))
                st._drop(key)
        st.problems = problems
        if st.stats.prepares and not st.tool_texts and st.status is not None:
            seen = st.status.get("messages_in")
            st.legacy_upto = seen if type(seen) is int and seen > 0 else 0
        return st

    def _load_scalars(
        self,
        entries: Mapping[str, Any],
        meta: Mapping[str, Any],
        problems: list[Problem],
        bounds: WindowBounds | None,
    ) -> None:
        """The ``scalars`` and ``status`` entries, then any of their fields a ``meta``
        written before 0.2 holds (over them: a state written since never has both).
        An entry read as valid is remembered as written; a legacy field makes the next
        save rewrite ``meta`` without it and write the entry that holds it now."""
        sources: list[tuple[str, Mapping[str, Any]]] = []
        raw = entries.get("scalars")
        if type(raw) is dict:
            sources.append(("scalars", raw))
        elif raw is not None:
            problems.append(Problem("scalars", "not an object"))
        if "status" in entries:
            sources.append(("", {"status": entries["status"]}))
        legacy = {f: meta[f] for f in _LEGACY_META if f in meta}
        if legacy:
            sources.append(("meta", legacy))
            self._put("meta")
        invalid: set[str] = set()
        for where, source in sources:
            for f in (*_SCALAR_FIELDS, "status"):
                if f not in source:
                    continue
                key = f"{where}.{f}" if where else f
                if f == "learned_window":
                    self.window_key = f"{where or 'scalars'}.{f}"
                try:
                    setattr(self, f, check_meta_field(f, source[f], bounds))
                    invalid.discard(f)
                except Invalid as exc:
                    problems.append(Problem(key, str(exc)[:200]))
                    setattr(self, f, getattr(_FRESH, f))
                    invalid.add(f)
        if "status" in invalid and self.status is None and "status" in entries:
            self._drop("status")  # unless a prepare writes a new one first
        if legacy:
            return  # every entry is written with the next save
        if type(raw) is dict and not invalid & set(_SCALAR_FIELDS):
            self._scalars_saved["scalars"] = self._entry("scalars")
        if "status" in entries and "status" not in invalid:
            self._scalars_saved["status"] = self._entry("status")

    def _load_texts(
        self,
        texts: Any,
        meta: Mapping[str, Any],
        problems: list[Problem],
        bounds: WindowBounds | None,
    ) -> None:
        """The ``texts`` entry, or (a state written before it existed) the same fields
        of ``meta``: then ``texts`` is written and ``meta`` rewritten without them with
        the next save."""
        where, source = "texts", texts
        if texts is None:
            where, source = "meta", meta
            if any(f in meta for f in _TEXT_FIELDS):
                self._texts_saved = _UNSAVED
                self._put("meta")
        elif type(texts) is not dict:
            problems.append(Problem("texts", "not an object"))
            self._texts_saved, source = _UNSAVED, {}
        for f in _TEXT_FIELDS:
            if f in source:
                try:
                    setattr(self, f, check_meta_field(f, source[f], bounds))
                except Invalid as exc:
                    problems.append(Problem(f"{where}.{f}", str(exc)[:200]))
                    self._texts_saved = _UNSAVED
        if where == "texts" and self._texts_saved is not _UNSAVED:
            self._texts_saved = (self.handover_text, self.unfit)

    def _load_entry(self, key: str, section: str, name: str, value: Any) -> bool:
        """Load one ``decision``/``ref``/``refh``/``archived``/``tool`` entry; False if
        invalid."""
        try:
            if section == "tool":
                self.tool_texts[check_tool_key(name)] = check_tool_text(value)
            elif section == "decision":
                self.decisions[name] = tuple(unit_from_json(u) for u in check_decision(value))
            elif section == "archived":
                if value is not True:
                    return False
                self.archived.add(name)
            else:
                call_id, uri = check_ref(value)
                if section == "ref":
                    if call_id is not None:
                        return False
                    self.refs[name] = uri
                elif call_id is None or ref_key(call_id) != key:
                    return False
                else:
                    self.refs[call_id] = uri
                    self._hashed[key] = call_id
        except Invalid:
            return False
        return True


#: What a new conversation starts with (a field that was stored invalid starts afresh).
_FRESH = SessionState()


def _encoded(key: str, value: Any, encode: Callable[[str, Any], Any], refuse: Refuse) -> Any:
    """``encode(key, value)``, or None after ``refuse(key, reason)`` when it fails."""
    try:
        return encode(key, value)
    except UNSTORABLE as exc:
        refuse(key, unstorable(exc))
        return None


def _jsonable(value: Any) -> Any:
    """``value`` as it will read back from JSON (tuples become lists; non-JSON leaves
    become strings), so a resumed session sees exactly what the saved one would."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str, allow_nan=False))
