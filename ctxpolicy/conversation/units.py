"""Conversations as atomic units, and the invariants every prepared context keeps.

At the boundary messages are OpenAI Chat Completions dicts. Inside, a conversation
is a list of :class:`Unit`: a system message, a user turn, an assistant step (the
assistant message plus exactly the tool results answering its ``tool_calls``), a
summary, or the pinned ledger. Layers work on units, so a tool call can never be
separated from its result.

Repairs of malformed input (documented in docs/engine.md):

* a ``tool`` message whose ``tool_call_id`` matches no pending call becomes part of a
  ``orphan`` unit rendered as a user message ``[tool result without call: ...]``;
* an assistant ``tool_calls`` entry with no result gets a synthetic result
  ``[no result recorded for this tool call]`` so the pair is complete;
* malformed ``tool_calls`` (one object, a string, non-object entries, missing or
  duplicate ids — also across messages — non-string arguments) are repaired or
  removed by :mod:`ctxpolicy.conversation.repair`;
* a message that is not an object is left out of the context;
* an empty ``tool_calls`` list is removed (providers reject it).

What a repair removes travels in ``Repair.removed`` (the engine archives it).

Each repair is reported by :func:`to_units` so the engine can emit an event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ctxpolicy.conversation.messages import (
    Message,
    call_arguments,
    call_id,
    call_name,
    content_text,
    message_fingerprint,
    result_id,
    tool_calls,
)
from ctxpolicy.conversation.repair import call_key, repair_calls

#: ``"ledger"`` is every pinned message of ours: the progress ledger (key ``"ledger"``)
#: and a handover (key ``"handover"``); the key, not the kind, tells them apart. Kept
#: one kind on purpose: the kind is stored with decided units (checked on load by
#: ``engine/stored.py``), and layers see it (``emergency`` keeps ``"ledger"`` units; a
#: third-party layer may do the same), so a new kind would change both (issue 26).
UnitKind = Literal["system", "user", "step", "summary", "ledger", "orphan", "other"]

MISSING_RESULT = "[no result recorded for this tool call]"

#: The fields :meth:`Unit.replace` sets without ``dataclasses.replace`` (changing
#: ``key`` or ``origin`` goes through ``__init__``/``__post_init__``).
_FAST_CHANGES = frozenset({"kind", "messages", "round", "pinned", "meta"})


@dataclass(frozen=True)
class Unit:
    """An atomic piece of conversation. Never split by a layer.

    * ``kind`` — see :data:`UnitKind`;
    * ``messages`` — the OpenAI messages it renders to (treat as read-only);
    * ``key`` — stable id (original units: index of the first message + content hash);
    * ``origin`` — keys of the original units this unit stands for (itself for an
      original unit; all replaced units for a summary);
    * ``round`` — index of the assistant step (0-based) for ``step`` units;
    * ``pinned`` — may not be removed or rewritten by a layer;
    * ``meta`` — free annotations (e.g. ``refs`` of snapshots, ``masked``).
    """

    kind: UnitKind
    messages: tuple[Message, ...]
    key: str
    origin: tuple[str, ...] = ()
    round: int | None = None
    pinned: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.origin:
            object.__setattr__(self, "origin", (self.key,))

    # -- constructors used by layers -------------------------------------------------
    def replace(self, **changes: Any) -> Unit:
        """A rewritten copy that keeps ``key`` and ``origin`` (e.g. a masked result)."""
        if "messages" in changes:
            changes["messages"] = tuple(changes["messages"])
        if type(self) is not Unit or not _FAST_CHANGES.issuperset(changes):
            return replace(self, **changes)
        # what ``dataclasses.replace`` makes of these fields, without a call of
        # ``__init__`` (``origin`` is already set: ``__post_init__`` would keep it)
        new = object.__new__(Unit)
        fields = new.__dict__
        fields.update(self.__dict__)
        fields.update(changes)
        return new

    @staticmethod
    def summary(
        text: str, replaces: Sequence[Unit], *, meta: Mapping[str, Any] | None = None
    ) -> Unit:
        """A summary unit standing for ``replaces`` (rendered as a user message)."""
        origin: list[str] = []
        for u in replaces:
            origin.extend(u.origin)
        digest = hashlib.blake2b("|".join(origin).encode(), digest_size=8).hexdigest()
        msg: Message = {"role": "user", "content": text}
        return Unit(
            kind="summary",
            messages=(msg,),
            key=f"summary-{digest}",
            origin=tuple(origin) or (f"summary-{digest}",),
            meta=dict(meta or {}),
        )

    # -- views ------------------------------------------------------------------------
    @property
    def tool_messages(self) -> list[Message]:
        return [m for m in self.messages if m.get("role") == "tool"]

    @property
    def tool_calls(self) -> list[Mapping[str, Any]]:
        if self.kind != "step" or not self.messages:
            return []
        return tool_calls(self.messages[0])

    def text(self) -> str:
        """All text of the unit (content, tool-call names and arguments)."""
        parts: list[str] = []
        for m in self.messages:
            parts.append(content_text(m.get("content")))
            for tc in tool_calls(m):
                parts.append(call_name(tc))
                parts.append(str(call_arguments(tc, "")))
        return "\n".join(p for p in parts if p)


@dataclass
class Repair:
    """One repair applied to malformed input."""

    kind: Literal[
        "orphan_result",
        "missing_result",
        "duplicate_call",
        "bad_message",
        "tool_calls_wrapped",
        "tool_calls_invalid",
        "bad_tool_call",
        "bad_arguments",
        "missing_call_id",
    ]
    index: int
    detail: str
    #: what left the context (a non-object message, an unusable call), kept verbatim
    removed: tuple[Any, ...] = ()


def _key(index: int, msgs: Iterable[Message]) -> str:
    h = hashlib.blake2b(digest_size=8)
    for m in msgs:
        h.update(message_fingerprint(m).encode())
    return f"m{index}-{h.hexdigest()}"


def to_units(
    messages: Sequence[Mapping[str, Any]],
    *,
    pin_system: bool = True,
    pin_first_user: bool = True,
    pin_last_user: bool = True,
    fingerprints: Sequence[str] | None = None,
) -> tuple[list[Unit], list[Repair]]:
    """Group OpenAI messages into units, repairing what is malformed.

    ``fingerprints`` may carry precomputed :func:`message_fingerprint` values (one per
    message) so a growing conversation is not rehashed.
    """
    units, _starts, repairs = group_units(messages, fingerprints=fingerprints)
    return pin_units(
        units, system=pin_system, first_user=pin_first_user, last_user=pin_last_user
    ), repairs


def group_units(
    messages: Sequence[Mapping[str, Any]],
    *,
    offset: int = 0,
    first_round: int = 0,
    fingerprints: Sequence[str] | None = None,
    call_ids: dict[str, int] | None = None,
    sources: list[tuple[int, ...] | None] | None = None,
) -> tuple[list[Unit], list[int], list[Repair]]:
    """The unpinned units of ``messages`` (which start at index ``offset`` of the
    conversation), the index where each unit's group of messages starts, and the
    repairs. A growing conversation can be grouped from the start of its last group
    on (see :class:`ctxpolicy.engine.Session`) with the same result as from scratch:
    ``call_ids`` then holds the tool-call ids of the messages before ``offset``
    (id -> message index; updated in place, in message order).

    ``sources``, when given, receives one entry per unit: the conversation indices
    of the messages it holds when each is an unchanged copy of that message (so
    what is known of the originals, such as token counts, holds for the unit), or
    None when a repair changed or made up one of them.
    """
    units: list[Unit] = []
    starts: list[int] = []
    repairs: list[Repair] = []
    n = len(messages)
    fps = fingerprints if fingerprints is None or type(fingerprints) is list else list(fingerprints)
    seen_ids: dict[str, int] = {} if call_ids is None else call_ids
    blake2b = hashlib.blake2b

    def key_for(start: int, msgs: Sequence[Message], end: int) -> str:
        if fps is not None:  # one update of the joined fingerprints = one per fingerprint
            data = "".join(fps[start:end]).encode()
            return f"m{start + offset}-{blake2b(data, digest_size=8).hexdigest()}"
        return _key(start + offset, msgs)

    def add(unit: Unit, start: int, src: tuple[int, ...] | None) -> None:
        units.append(unit)
        starts.append(start + offset)
        if sources is not None:
            sources.append(src)

    i = 0
    round_no = first_round
    while i < n:
        raw = messages[i]
        if type(raw) is not dict and not isinstance(raw, Mapping):
            repairs.append(
                Repair(
                    "bad_message",
                    i + offset,
                    f"message {i + offset} is a {type(raw).__name__}, not an object; left out",
                    removed=(raw,),
                )
            )
            i += 1
            continue
        m = dict(raw)
        role = m.get("role")
        if role == "assistant":
            fixed = repair_calls(m, i + offset, seen_ids)
            verbatim = fixed.message is m
            m, calls, aliases = fixed.message, fixed.calls, fixed.aliases
            for rkind, detail, removed in fixed.repairs:
                repairs.append(Repair(rkind, i + offset, detail, removed))  # type: ignore[arg-type]
            start = i
            i += 1
            # the results that follow: final id -> (message index, result)
            got: dict[str, tuple[int, Message]] = {}
            extra_orphans: list[tuple[int, Message]] | None = None
            while i < n:
                tm = messages[i]
                if not (type(tm) is dict or isinstance(tm, Mapping)) or tm.get("role") != "tool":
                    break
                tm = dict(tm)
                written = tm.get("tool_call_id")
                tid = None
                for t in aliases.get(call_key(written), ()):
                    if t not in got:
                        tid = t
                        break
                if tid is None:
                    if extra_orphans is None:
                        extra_orphans = []
                    extra_orphans.append((i, tm))
                else:
                    if tid != written:
                        tm["tool_call_id"] = tid
                        verbatim = False
                    got[tid] = (i + offset, tm)
                i += 1
            msgs: list[Message] = [m]
            at = [start + offset]
            for tc in calls:
                tid = str(tc["id"])
                hit = got.get(tid)
                if hit is not None:
                    at.append(hit[0])
                    msgs.append(hit[1])
                else:
                    repairs.append(
                        Repair("missing_result", start + offset, f"tool call {tid!r} has no result")
                    )
                    msgs.append({"role": "tool", "tool_call_id": tid, "content": MISSING_RESULT})
                    verbatim = False
            add(
                _unit("step", tuple(msgs), key_for(start, msgs, i), round_no),
                start,
                tuple(at) if verbatim else None,
            )
            round_no += 1
            for idx, tm in extra_orphans or ():
                repairs.append(
                    Repair(
                        "orphan_result",
                        idx + offset,
                        f"tool result {tm.get('tool_call_id')!r} has no call",
                    )
                )
                add(_orphan_unit(idx + offset, tm, key_for(idx, [tm], idx + 1)), start, None)
            continue
        if role == "tool":
            repairs.append(
                Repair(
                    "orphan_result",
                    i + offset,
                    f"tool result {m.get('tool_call_id')!r} has no call",
                )
            )
            add(_orphan_unit(i + offset, m, key_for(i, [m], i + 1)), i, None)
            i += 1
            continue
        kind: UnitKind = (
            "system" if role in ("system", "developer") else "user" if role == "user" else "other"
        )
        add(_unit(kind, (m,), key_for(i, [m], i + 1)), i, (i + offset,))
        i += 1
    return units, starts, repairs


def _unit(
    kind: UnitKind, messages: tuple[Message, ...], key: str, round_no: int | None = None
) -> Unit:
    """``Unit(kind=kind, messages=messages, key=key, round=round_no)`` without the
    frozen dataclass's ``__init__`` (one per grouped message: the grouping's hot path)."""
    u = object.__new__(Unit)
    u.__dict__.update(
        kind=kind,
        messages=messages,
        key=key,
        origin=(key,),
        round=round_no,
        pinned=False,
        meta={},
    )
    return u


def _orphan_unit(index: int, m: Message, key: str) -> Unit:
    text = content_text(m.get("content"))
    msg: Message = {
        "role": "user",
        "content": f"[tool result without call: {m.get('tool_call_id')!s}]\n{text}",
    }
    return Unit(kind="orphan", messages=(msg,), key=key)


def pin_units(units: list[Unit], *, system: bool, first_user: bool, last_user: bool) -> list[Unit]:
    """Mark pinned units per the policy's ``pinned`` section."""
    first_user_i = next((i for i, u in enumerate(units) if u.kind == "user"), None)
    last_user_i = next((i for i in range(len(units) - 1, -1, -1) if units[i].kind == "user"), None)
    out = []
    for i, u in enumerate(units):
        pin = u.pinned or (system and u.kind == "system") or u.kind == "ledger"
        pin = pin or (first_user and i == first_user_i) or (last_user and i == last_user_i)
        out.append(u if pin == u.pinned else u.replace(pinned=pin))
    return out


def render(units: Iterable[Unit]) -> list[Message]:
    """The OpenAI message list a unit list stands for."""
    out: list[Message] = []
    for u in units:
        out.extend(u.messages)
    return out


def rounds(units: Sequence[Unit]) -> list[int]:
    """Indices of the step units, oldest first."""
    return [i for i, u in enumerate(units) if u.kind == "step"]


@dataclass
class Violation:
    """A broken invariant in a prepared message list."""

    code: Literal["orphan_result", "missing_result", "pinned_missing", "last_user_missing", "order"]
    detail: str


def check_messages(messages: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """Tool-call pairing of a rendered list: every result has its call and vice versa.

    Results must directly follow the assistant message that issued their calls.
    """
    out: list[Violation] = []
    pending: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            tid = result_id(m)
            if tid in pending:
                pending.discard(tid)
            else:
                out.append(
                    Violation("orphan_result", f"message {i}: tool result {tid!r} has no call")
                )
            continue
        if pending:
            out.append(
                Violation(
                    "missing_result", f"before message {i}: calls {sorted(pending)} unanswered"
                )
            )
            pending = set()
        if role == "assistant":
            pending = {call_id(tc) for tc in tool_calls(m)}
    if pending:
        out.append(Violation("missing_result", f"at end: calls {sorted(pending)} unanswered"))
    return out


def check_units(before: Sequence[Unit], after: Sequence[Unit]) -> list[Violation]:
    """Invariants between a layer's input and output.

    Pairing holds, pinned units are present unchanged, the order of surviving
    units is preserved.
    """
    out = check_messages(render(after))
    after_by_key = {u.key: u for u in after}
    for u in before:
        if u.pinned:
            v = after_by_key.get(u.key)
            if v is None or v.messages != u.messages:
                out.append(
                    Violation(
                        "pinned_missing", f"pinned unit {u.key} ({u.kind}) removed or changed"
                    )
                )
    pos = {u.key: i for i, u in enumerate(before)}
    last = -1
    for u in after:
        if u.key in pos:
            if pos[u.key] < last:
                out.append(Violation("order", f"unit {u.key} moved"))
            last = pos[u.key]
    return out
