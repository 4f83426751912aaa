"""Shorten JSON text so that it stays JSON: the cut of a tool call's ``arguments``.

A tool call's ``arguments`` is JSON text that servers parse (vLLM and llama.cpp
reject a history whose arguments do not parse, with HTTP 400). :func:`cut_json`
keeps the head and the tail of the text, like a plain head/tail cut, but only at
places where the result is still RFC 8259 JSON:

* the cut falls inside one string (the common case: ``{"path": …, "content": "<50 KB>"}``):
  that string keeps its head and tail with the marker between them, everything
  else is untouched;
* it falls inside one huge number: the number becomes a string of its head, the
  marker and its tail (a number cannot be shortened and stay itself);
* otherwise the head ends after a whole value (or inside a string value, which then
  ends with the marker), the marker is an element (``"…"``) or a member
  (``"ctxpolicy_cut": "…"``) of the innermost container open there, the head's
  containers are closed, the tail's containers are reopened with their keys, and
  the tail starts at a member, an element or a closing bracket.

Escapes are never split (``\\n``, ``\\u00e9``, nor the two halves of an escaped
surrogate pair). The text is read once by an iterative scanner (no recursion, so a
document nested 100,000 levels deep is fine; numbers of any length; possessive
regular expressions, so a failing match never backtracks): O(length) time, memory
O(depth). Text that is not RFC 8259 JSON (``NaN``, a trailing comma, a raw control
character, truncated output) is reported as ``None``; the caller decides.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CUT_KEY", "cut_json", "is_json"]

#: The member name under which an object carries the marker (``_2``, ``_3``… when taken).
CUT_KEY = "ctxpolicy_cut"

_WS = re.compile(r"[ \t\n\r]*+")
_STRING = re.compile(r'"[^"\\\x00-\x1f]*+(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*+)*+"')
_NUMBER = re.compile(r"-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][-+]?+[0-9]++)?+")
#: a string body up to a position: ends before an escape that position would split
_BODY = re.compile(r"[^\\]*+(?:\\(?:u[0-9a-fA-F]{4}|[^u])[^\\]*+)*+")
_HIGH = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")

_SCALAR = rf"(?:{_STRING.pattern}|{_NUMBER.pattern}|true|false|null)"
#: runs of scalar elements / members after a value, each followed by its delimiter
#: (so that an ``endpos`` never leaves a number cut in two)
_ARRAY_RUN = re.compile(rf"(?:[ \t\n\r]*+,[ \t\n\r]*+{_SCALAR}(?=[ \t\n\r]*+[,\]]))*+")
#: a member name the fast path may skip: no escape, no marker name (those are read
#: one by one, so that a taken marker name is seen); the run stops before any other
_PLAIN_KEY = r'"(?:(?!ctxpolicy)[^"\\\x00-\x1f])*+"'
_OBJECT_RUN = re.compile(
    rf"(?:[ \t\n\r]*+,[ \t\n\r]*+{_PLAIN_KEY}[ \t\n\r]*+:[ \t\n\r]*+{_SCALAR}"
    rf"(?=[ \t\n\r]*+[,}}]))*+"
)
_SLACK = 80  # separators, a member name for the marker, quotes

# what the scanner expects next
_VALUE, _FIRST_VALUE, _FIRST_KEY, _KEY, _COLON, _AFTER = range(6)


class _Frame:
    """A container open at some point of the scan."""

    __slots__ = ("cut_keys", "end", "key", "obj")

    def __init__(self, obj: bool, key: tuple[int, int] | None) -> None:
        self.obj = obj
        self.key = key  # the member name this container is the value of
        self.end = -1
        self.cut_keys: set[str] | None = None  # member names starting with CUT_KEY


@dataclass
class _Edge:
    """Where the kept head ends or the kept tail starts."""

    pos: int  # head: end of the kept text; tail: start of the kept text
    stack: list[_Frame]
    has_elem: bool = False  # head: the innermost container already has an element
    string: bool = False  # the edge is inside a string value (pos is escape-safe)
    key: tuple[int, int] | None = None  # tail string: its member name
    tok_end: int = -1  # tail string: the end of that string


def _end(m: re.Match[str] | None) -> int:
    assert m is not None  # a pattern that matches the empty string
    return m.end()


def _skip(text: str, pos: int = 0) -> int:
    """The position after the whitespace at ``pos``."""
    return _end(_WS.match(text, pos))


def _boundary(text: str, body: int, x: int) -> int:
    """The last escape boundary ≤ ``x`` in the string body starting at ``body``."""
    return _end(_BODY.match(text, body, x))


def _high_before(text: str, body: int, b: int) -> bool:
    """Whether the escape boundary ``b`` directly follows an escaped high surrogate."""
    return (
        b - 6 >= body and bool(_HIGH.match(text, b - 6)) and _boundary(text, body, b - 6) == b - 6
    )


def _head_in_string(text: str, body: int, p: int) -> int:
    """The largest cut point ≤ ``p`` inside the string body starting at ``body``."""
    b = _boundary(text, body, p)
    if _LOW.match(text, b) and _high_before(text, body, b):
        b -= 6
    return b


def _tail_in_string(text: str, body: int, q: int) -> int:
    """The smallest cut point ≥ ``q`` inside the string body starting at ``body``."""
    b = _boundary(text, body, q)
    if b < q:  # q is inside the escape at b
        if text[b + 1] != "u":
            return b + 2
        if _LOW.match(text, b) and _high_before(text, body, b):
            return b + 6  # the low half of a pair: the pair ends here
        b += 6
        if _HIGH.match(text, b - 6) and _LOW.match(text, b):
            b += 6
    elif _LOW.match(text, b) and _high_before(text, body, b):
        b += 6
    return b


def _esc(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)[1:-1]


def _decoded(text: str, span: tuple[int, int]) -> str:
    raw = text[span[0] : span[1]]
    return raw[1:-1] if "\\" not in raw else str(json.loads(raw))


@dataclass
class _Scan:
    text: str
    lo: int
    hi: int
    p: int
    q: int
    head: _Edge | None = None
    tail: _Edge | None = None
    inner: tuple[str, int, int, int, int] | None = None  # (kind, start, end, p', q')


def _scan(s: _Scan) -> bool:
    """Validate ``text[lo:hi]`` as JSON and find the edges around ``[p, q)``."""
    text, hi, p, q = s.text, s.hi, s.p, s.q
    pos = s.lo
    stack: list[_Frame] = []
    expect = _VALUE
    done = False
    last_end = s.lo
    key: tuple[int, int] | None = None  # the member name just read
    has_elem = False  # the innermost container has an element (at last_end)
    while True:
        if expect == _AFTER and stack:  # the fast path over scalar runs
            limit = p if s.head is None else q if s.tail is None else hi
            obj = stack[-1].obj
            run = (_OBJECT_RUN if obj else _ARRAY_RUN).match(text, pos, limit)
            if run is not None and run.end() > pos:
                pos = last_end = run.end()
        pos = _skip(text, pos)
        if pos >= hi:
            break
        if done:
            return False
        c = text[pos]
        if c == '"':
            m = _STRING.match(text, pos, hi)
            if m is None:
                return False
            kind = "key" if expect in (_FIRST_KEY, _KEY) else "string"
        elif c in "{[":
            kind, m = "open", None
        elif c in "}]":
            kind, m = "close", None
        elif c == ",":
            kind, m = "comma", None
        elif c == ":":
            kind, m = "colon", None
        else:
            m = _NUMBER.match(text, pos, hi)
            kind = "number"
            if m is None:
                for lit in ("true", "false", "null"):
                    if text.startswith(lit, pos) and pos + len(lit) <= hi:
                        kind, end = "literal", pos + len(lit)
                        break
                else:
                    return False
        end = m.end() if m is not None else (end if kind == "literal" else pos + 1)
        # ---- grammar
        if kind in ("string", "number", "literal", "open"):
            if expect not in (_VALUE, _FIRST_VALUE):
                return False
        elif kind == "key":
            pass
        elif kind == "close":
            if not stack or stack[-1].obj != (c == "}"):
                return False
            if expect not in (_AFTER, _FIRST_KEY if c == "}" else _FIRST_VALUE):
                return False
        elif kind == "comma":
            if expect != _AFTER or not stack:
                return False
        elif expect != _COLON:  # colon
            return False
        # ---- the edges
        if s.head is None and end > p:
            if pos < p and end > q and kind in ("string", "key", "number"):
                if kind == "number":
                    s.inner = ("number", pos, end, p, q)
                else:
                    a = _head_in_string(text, pos + 1, p)
                    b = _tail_in_string(text, pos + 1, q)
                    s.inner = ("string", pos, end, a, b)
                s.head = s.tail = _Edge(pos, [])
            elif pos < p and kind == "string":
                a = _head_in_string(text, pos + 1, p)
                s.head = _Edge(a, list(stack), string=True)
            else:
                s.head = _Edge(last_end, list(stack), has_elem=has_elem)
        if s.tail is None and s.head is not None:
            if pos < q < end and kind == "string":
                b = _tail_in_string(text, pos + 1, q)
                named = key if stack and stack[-1].obj else None
                s.tail = _Edge(b, list(stack), string=True, key=named, tok_end=end)
            elif pos >= q and (
                kind == "close"
                or (kind == "key")
                or (expect in (_VALUE, _FIRST_VALUE) and stack and not stack[-1].obj)
            ):
                s.tail = _Edge(pos, list(stack))
        # ---- the state
        if kind == "open":
            stack.append(_Frame(c == "{", key if stack and stack[-1].obj else None))
            expect = _FIRST_KEY if c == "{" else _FIRST_VALUE
            has_elem = False
            last_end = end
        elif kind == "close":
            f = stack.pop()
            f.end = end
            last_end = end
            has_elem = True
            expect = _AFTER
            done = not stack
        elif kind == "key":
            key = (pos, end)
            if CUT_KEY in text[pos:end] or "\\" in text[pos:end]:
                name = _decoded(text, key)
                if name.startswith(CUT_KEY):
                    top = stack[-1]
                    if top.cut_keys is None:
                        top.cut_keys = set()
                    top.cut_keys.add(name)  # in place: a copy per member is quadratic
            expect = _COLON
        elif kind == "colon":
            expect = _VALUE
        elif kind == "comma":
            expect = _KEY if stack[-1].obj else _VALUE
        else:  # a scalar value
            last_end = end
            has_elem = True
            expect = _AFTER
            done = not stack
        pos = end
    return done


def _marker_key(f: _Frame) -> str:
    name, n = CUT_KEY, 1
    while name in (f.cut_keys or ()):
        n += 1
        name = f"{CUT_KEY}_{n}"
    return name


def _attempt(text: str, lo: int, hi: int, keep: int, mark: Callable[[int], str]) -> str | None:
    s = _Scan(text, lo, hi, lo + max(1, keep // 2), hi - max(1, keep - keep // 2))
    if not _scan(s):
        return None
    if s.inner is not None:
        kind, start, end, a, b = s.inner
        removed = b - a + (lo + len(text) - hi)
        if kind == "string":
            return f"{text[lo:a]}{_esc(chr(10) + mark(removed) + chr(10))}{text[b:hi]}"
        value = f"{text[start:a]}\n{mark(removed)}\n{text[b:end]}"
        return f"{text[lo:start]}{json.dumps(value, ensure_ascii=False)}{text[end:hi]}"
    head, tail = s.head, s.tail
    if head is None or not head.stack or tail is None:  # a literal: nothing to shorten
        return text[lo:hi]
    common = 0
    while (
        common < len(head.stack)
        and common < len(tail.stack)
        and head.stack[common] is tail.stack[common]
    ):
        common += 1
    budget_t = hi - tail.pos
    opener: list[str] = []
    for f in tail.stack[common:]:
        if f.key is not None:
            opener.append(text[f.key[0] : f.key[1]] + ": ")
        opener.append("{" if f.obj else "[")
    if tail.string:
        if tail.key is not None:
            opener.append(text[tail.key[0] : tail.key[1]] + ": ")
        opener.append('"')
    tail_pos, tail_stack, tail_string = tail.pos, tail.stack, tail.string
    if sum(map(len, opener)) > max(budget_t, 64) and common < len(tail.stack) + tail.string:
        # the reopened path would cost more than the tail: start after it instead
        if common < len(tail.stack):
            t = tail.stack[common].end
            t = _skip(text, t)
            if text.startswith(",", t):
                t = _skip(text, t + 1)
        else:  # a string directly in the common container with a huge member name
            t = _skip(text, tail.tok_end)
            if text.startswith(",", t):
                t = _skip(text, t + 1)
        tail_pos, tail_stack, tail_string, opener = t, tail.stack[:common], False, []
    removed = (tail_pos - head.pos) + (lo + len(text) - hi)
    note = mark(removed)
    out = [text[lo : head.pos]]
    if head.string:
        out.append(_esc("\n" + note) + '"')
    else:
        top = head.stack[-1]
        sep = ", " if head.has_elem else ""
        name = f"{json.dumps(_marker_key(top))}: " if top.obj else ""
        out.append(f"{sep}{name}{json.dumps(note, ensure_ascii=False)}")
    for f in reversed(head.stack[common:]):
        out.append("}" if f.obj else "]")
    more = len(tail_stack) > common or tail_string or text[tail_pos] not in "]}"
    if more:
        out.append(", ")
    out.extend(opener)
    out.append(text[tail_pos:hi])
    return "".join(out)


def is_json(text: str) -> bool:
    """Whether ``text`` is RFC 8259 JSON (iterative: any depth, any number length)."""
    lo = _skip(text)
    hi = len(text.rstrip(" \t\n\r"))
    if lo >= hi:
        return False
    return _scan(_Scan(text, lo, hi, hi + 1, hi + 1))


def cut_json(text: str, keep: int, mark: Callable[[int], str]) -> str | None:
    """``text`` shortened to about ``keep`` characters of its own (head and tail) plus
    the marker ``mark(removed_characters)``, still JSON; ``None`` when ``text`` is not
    RFC 8259 JSON. ``text`` is returned as is when there is nothing to remove.

    The result is at most ``keep + len(mark(n)) + 80`` characters long (containers
    closed after the head and reopened before the tail included)."""
    lo = _skip(text)
    hi = len(text.rstrip(" \t\n\r"))
    if lo >= hi:
        return None
    keep = max(2, keep)
    if hi - lo <= keep:
        return text if is_json(text) else None
    bound = keep + len(mark(len(text))) + _SLACK
    out = _attempt(text, lo, hi, keep, mark)
    if out is None:
        return None
    while len(out) > bound and keep > 2:  # deep on both sides, long member names
        keep //= 2  # at most twice: the closers and the reopened path are ≤ what is kept
        out = _attempt(text, lo, hi, keep, mark) or out
    return out
