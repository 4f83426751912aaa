"""The rulers of a replay: what a prepared list kept of the conversation.

* :class:`RetentionRuler` — fact retention: identifiers of each assistant message
  that appeared earlier (:func:`ruler_facts`), in the prepared list, recoverable from
  a referenced snapshot, or lost (:func:`measure_facts`, :class:`SentTexts`);
* :class:`OwnTextRuler` — instruction retention, the ledger + summary share and
  duplicated lines.

Definitions in :mod:`ctxpolicy.sim.metrics` and docs/simulate.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxpolicy.conversation.messages import call_arguments, call_name, tool_calls

__all__ = [
    "DUP_LINE_CHARS",
    "INSTRUCTION_CHARS",
    "OwnTextRuler",
    "RetentionRuler",
    "SentTexts",
    "measure_facts",
    "mentioned_text",
    "ruler_facts",
    "sent_text",
]

#: What the ruler calls a fact (docs/simulate.md, "Retention"): paths, file names and
#: dotted identifiers, snake_case, CamelCase and camelCase identifiers, numbers of
#: three or more digits or with decimals, ``*Error``/``*Exception``/``*Warning``
#: names, and quoted spans (backticks or double quotes, 6-120 characters). Every
#: pattern is linear (no nested ambiguous repetition).
_FACT_RES = (
    re.compile(r"(?<![\w/.-])/?(?:[\w.-]{1,200}/){1,40}[\w.-]{0,200}\w"),
    re.compile(r"\b[A-Za-z_][\w-]{0,200}(?:\.[A-Za-z0-9_][\w-]{0,200}){1,20}\b"),
    re.compile(r"\b[A-Za-z][A-Za-z0-9]{0,200}_[A-Za-z0-9_]{1,200}\b"),
    re.compile(r"\b[A-Z][a-z0-9]{1,100}(?:[A-Z][a-z0-9]{0,100}){1,20}\b"),
    re.compile(r"\b[a-z][a-z0-9]{0,100}(?:[A-Z][a-z0-9]{0,100}){1,20}\b"),
    re.compile(r"(?<![\w.])\d{1,30}\.\d{1,30}(?![\w.])|(?<![\w.])\d{3,30}(?![\w.])"),
    re.compile(r"\b\w{0,200}(?:Error|Exception|Warning)\b"),
)
_QUOTED_RES = (re.compile(r"`([^`\n]{6,120})`"), re.compile(r'"([^"\n]{6,120})"'))
_FACT_TEXT_LIMIT = 200_000
_FAR_WINDOW = 6


def ruler_facts(text: str) -> list[str]:
    """The facts a text mentions, in order of first mention (the retention ruler)."""
    text = text[:_FACT_TEXT_LIMIT]
    found: dict[str, None] = {}
    for rx in _FACT_RES:
        for m in rx.finditer(text):
            f = m.group(0)
            if len(f) >= 3:
                found[f] = None
    for rx in _QUOTED_RES:
        for m in rx.finditer(text):
            found[m.group(1)] = None
    return list(found)


def _decoded_args(arguments: Any) -> list[str]:
    """String values (and keys) of tool-call arguments, JSON-decoded when a string."""
    value = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except ValueError:
            return [arguments]
    out: list[str] = []
    stack = [value]
    while stack and len(out) < 10_000:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, Mapping):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif v is not None:
            out.append(json.dumps(v))
    out.reverse()
    return out


def sent_text(m: Mapping[str, Any]) -> str:
    """What a message carries for the ruler: content, tool-call names, raw and decoded
    arguments (a fact in a JSON string argument is sent, escaped or not)."""
    from ctxpolicy.conversation import content_text

    parts = [content_text(m.get("content"))]
    for tc in tool_calls(m):
        parts.append(call_name(tc))
        args = call_arguments(tc, "")
        parts.append(args if isinstance(args, str) else json.dumps(args))
        parts.extend(_decoded_args(args))
    return "\n".join(p for p in parts if p)


def mentioned_text(m: Mapping[str, Any]) -> str:
    """What an assistant message mentions: content and decoded tool-call arguments."""
    from ctxpolicy.conversation import content_text

    parts = [content_text(m.get("content"))]
    for tc in tool_calls(m):
        parts.extend(_decoded_args(call_arguments(tc, "")))
    return "\n".join(p for p in parts if p)


class RetentionRuler:
    """Retention and far retention of one replay, call by call.

    Facts of assistant message *i* (:func:`ruler_facts` of its content and decoded
    tool-call arguments) that occur in an earlier non-system message and not in a
    system message; *retained* when the fact occurs in the text sent for call *i*
    (references and recall tools are not followed); *far* facts are those absent from
    the 6 messages before call *i*.
    """

    def __init__(self) -> None:
        self._texts: list[str] = []
        self._system: list[str] = []
        self._found: set[str] = set()
        self._checked: dict[str, int] = {}

    def add(self, m: Mapping[str, Any]) -> None:
        """A message entered the conversation (as the trace has it)."""
        text = sent_text(m)
        if m.get("role") in ("system", "developer"):
            self._system.append(text)
        elif text:
            self._texts.append(text)

    def _seen(self, fact: str) -> bool:
        if fact in self._found:
            return True
        start = self._checked.get(fact, 0)
        for t in self._texts[start:]:
            if fact in t:
                self._found.add(fact)
                return True
        self._checked[fact] = len(self._texts)
        return False

    def facts_of(self, m: Mapping[str, Any]) -> tuple[tuple[str, bool], ...]:
        """``((fact, far), ...)`` that assistant message ``m`` reuses, given the messages
        added so far: what :meth:`measure` checks against the text sent. It depends on
        the trace alone (never on what a policy sent), so a replay may take it from a
        :class:`ctxpolicy.sim.prepared.PreparedTrace` computed once per trace."""
        facts = [
            f
            for f in ruler_facts(mentioned_text(m))
            if self._seen(f) and not any(f in s for s in self._system)
        ]
        if not facts:
            return ()
        near = "\n".join(self._texts[-_FAR_WINDOW:])
        return tuple((f, f not in near) for f in facts)

    def measure(
        self, m: Mapping[str, Any], prepared: Sequence[Mapping[str, Any]]
    ) -> tuple[list[tuple[str, bool, bool]], str]:
        """``[(fact, retained, far)]`` for assistant message ``m`` sent after ``prepared``,
        and the text sent."""
        return measure_facts(self.facts_of(m), prepared)


class SentTexts:
    """:func:`sent_text` of the messages of one replay, each message's text built once.

    A prepared list mostly holds the very message objects of the call before (the
    engine never mutates a message: docs/engine.md), so the text of one is remembered
    by its identity, with the message held (its id cannot be reused) and its
    ``content`` and ``tool_calls`` objects checked again on every hit. Bounded:
    past ``max_messages`` the memo starts afresh.
    """

    def __init__(self, max_messages: int = 50_000) -> None:
        self.max_messages = max_messages
        self._by_id: dict[int, tuple[Mapping[str, Any], Any, Any, str]] = {}

    def __call__(self, m: Mapping[str, Any]) -> str:
        content, calls = m.get("content"), m.get("tool_calls")
        hit = self._by_id.get(id(m))
        if hit is not None and hit[0] is m and hit[1] is content and hit[2] is calls:
            return hit[3]
        text = sent_text(m)
        if len(self._by_id) >= self.max_messages:
            self._by_id = {}
        self._by_id[id(m)] = (m, content, calls, text)
        return text


def measure_facts(
    facts: Sequence[tuple[str, bool]],
    prepared: Sequence[Mapping[str, Any]],
    texts: Callable[[Mapping[str, Any]], str] = sent_text,
) -> tuple[list[tuple[str, bool, bool]], str]:
    """``[(fact, retained, far)]`` of the ruler's ``facts`` (:meth:`RetentionRuler.facts_of`)
    for a call sent with ``prepared``, and the text sent ("" when there is no fact).
    ``texts``: :func:`sent_text`, or a replay's :class:`SentTexts`."""
    if not facts:
        return [], ""
    ctx = "\n".join(texts(x) for x in prepared)
    return [(f, f in ctx, far) for f, far in facts], ctx


# --------------------------------------------------------------------------- instructions, own text

#: A user turn is checked by its first this many characters.
INSTRUCTION_CHARS = 500
#: Lines shorter than this are not counted as duplicated (a heading, a bullet "- ok").
DUP_LINE_CHARS = 16


class OwnTextRuler:
    """Instruction retention, the ledger + summary share and duplicated lines of one
    replay, call by call (see the module docstring).

    ``add`` every message as the conversation grows; ``measure`` each prepared list.
    A message of the prepared list that is a system or user message whose text is not
    one of the conversation's is the strategy's own (the ledger, a summary).
    """

    def __init__(self, count_message: Callable[[Mapping[str, Any]], int]) -> None:
        self._count = count_message
        self._user: list[str] = []
        self._texts: set[str] = set()
        self._lines: dict[int, tuple[Mapping[str, Any], frozenset[str]]] = {}

    def add(self, m: Mapping[str, Any]) -> None:
        from ctxpolicy.conversation import content_text

        if m.get("role") in ("system", "developer", "user"):
            text = content_text(m.get("content"))
            self._texts.add(text)
            if m.get("role") == "user" and text.strip():
                self._user.append(text[:INSTRUCTION_CHARS].strip())

    def _lines_of(self, m: Mapping[str, Any], text: str) -> frozenset[str]:
        hit = self._lines.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        lines = frozenset(
            x for line in text.splitlines() if len(x := line.strip()) >= DUP_LINE_CHARS
        )
        if len(self._lines) > 50_000:
            self._lines = {}
        self._lines[id(m)] = (m, lines)
        return lines

    def measure(
        self, prepared: Sequence[Mapping[str, Any]], texts: Callable[[Mapping[str, Any]], str]
    ) -> tuple[int, int, int, int]:
        """``(instructions checked, retained, own tokens, duplicated lines)`` of a call."""
        from ctxpolicy.conversation import content_text

        own: list[Mapping[str, Any]] = []
        others: list[Mapping[str, Any]] = []
        for m in prepared:
            if m.get("role") in ("system", "developer", "user") and (
                content_text(m.get("content")) not in self._texts
            ):
                own.append(m)
            else:
                others.append(m)
        whole = "\n".join(texts(m) for m in prepared)
        retained = sum(1 for u in self._user if u in whole)
        own_tokens = sum(self._count(m) for m in own)
        dup = 0
        if own:
            seen: set[str] = set()
            for m in others:
                seen |= self._lines_of(m, texts(m))
            for m in own:
                for line in content_text(m.get("content")).splitlines():
                    x = line.strip()
                    if len(x) < DUP_LINE_CHARS:
                        continue
                    if x in seen:
                        dup += 1
                    seen.add(x)
        return len(self._user), retained, own_tokens, dup
