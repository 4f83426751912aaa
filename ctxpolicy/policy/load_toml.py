"""TOML policy files: tomli for the data, a small scan of the (already valid) text for
the positions of keys and values, and the numbers TOML allows that no field takes
(beyond 64 bits, ``inf``, ``nan``) reported and left out. Used by
:func:`ctxpolicy.policy.load.load_document`."""

from __future__ import annotations

import json
import re
from typing import Any

from ctxpolicy.policy.diagnostics import Diagnostic, make
from ctxpolicy.policy.source import (
    MAX_DEPTH,
    ODD_HINT,
    OddNumber,
    PathT,
    Pos,
    SourceMap,
    odd_diagnostic,
    odd_number,
    too_deep,
)

__all__ = ["drop_odd_numbers", "load_toml"]


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class _TomlScanner:
    """Positions of keys and values in a TOML text that tomli already accepted."""

    def __init__(self, text: str) -> None:
        self.t = text
        self.i = 0
        self.n = len(text)
        self.smap = SourceMap()
        self.line_starts = [0]
        for m in re.finditer("\n", text):
            self.line_starts.append(m.end())
        self.arrays: dict[PathT, int] = {}

    def pos(self, i: int) -> Pos:
        import bisect

        line = bisect.bisect_right(self.line_starts, i)
        return (line, i - self.line_starts[line - 1] + 1)

    def ws(self, newlines: bool = False) -> None:
        t = self.t
        while self.i < self.n:
            c = t[self.i]
            if c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            elif c == "#":
                j = t.find("\n", self.i)
                self.i = self.n if j < 0 else j
            else:
                break

    def key_part(self) -> str:
        t = self.t
        c = t[self.i]
        if c == '"':
            j = self.i + 1
            while j < self.n and t[j] != '"':
                j += 2 if t[j] == "\\" else 1
            raw = t[self.i : j + 1]
            self.i = j + 1
            try:
                return str(json.loads(raw))
            except ValueError:
                return raw[1:-1]
        if c == "'":
            j = t.find("'", self.i + 1)
            raw = t[self.i + 1 : j]
            self.i = j + 1
            return raw
        m = _BARE_KEY.match(t, self.i)
        if m is None:
            raise ValueError("bad key")
        self.i = m.end()
        return m.group(0)

    def keys(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        while True:
            self.ws()
            start = self.i
            out.append((self.key_part(), start))
            self.ws()
            if self.i < self.n and self.t[self.i] == ".":
                self.i += 1
                continue
            return out

    def record_keys(self, base: PathT, parts: list[tuple[str, int]]) -> PathT:
        path = base
        for k, start in parts:
            path = (*path, k)
            self.smap.keys.setdefault(path, self.pos(start))
        return path

    def resolve_header(self, parts: list[tuple[str, int]], is_array: bool, start: int) -> PathT:
        path: PathT = ()
        for idx, (k, kstart) in enumerate(parts):
            path = (*path, k)
            last = idx == len(parts) - 1
            if last and is_array:
                n = self.arrays.get(path, -1) + 1
                self.arrays[path] = n
                self.smap.keys.setdefault(path, self.pos(start))
                path = (*path, n)
                self.smap.keys[path] = self.pos(start)
                self.smap.values[path] = self.pos(start)
            else:
                if path in self.arrays:
                    self.smap.keys.setdefault(path, self.pos(kstart))
                    path = (*path, self.arrays[path])
                elif last:
                    self.smap.keys.setdefault(path, self.pos(start))
                    self.smap.values.setdefault(path, self.pos(start))
                else:
                    self.smap.keys.setdefault(path, self.pos(kstart))
        return path

    def string(self) -> None:
        t = self.t
        for q in ('"""', "'''"):
            if t.startswith(q, self.i):
                j = self.i + 3
                while j < self.n:
                    if q == '"""' and t[j] == "\\":
                        j += 2
                        continue
                    if t.startswith(q, j):
                        j += 3
                        while j < self.n and t[j] == q[0]:
                            j += 1
                        break
                    j += 1
                self.i = j
                return
        q = t[self.i]
        j = self.i + 1
        while j < self.n and t[j] != q:
            j += 2 if (q == '"' and t[j] == "\\") else 1
        self.i = j + 1

    def value(self, path: PathT) -> None:
        t = self.t
        self.smap.values.setdefault(path, self.pos(self.i))
        c = t[self.i] if self.i < self.n else ""
        if c in "\"'":
            self.string()
        elif c == "[":
            self.i += 1
            idx = 0
            while True:
                self.ws(newlines=True)
                if self.i >= self.n or t[self.i] == "]":
                    self.i += 1
                    return
                self.value((*path, idx))
                idx += 1
                self.ws(newlines=True)
                if self.i < self.n and t[self.i] == ",":
                    self.i += 1
        elif c == "{":
            self.i += 1
            while True:
                self.ws(newlines=True)
                if self.i >= self.n or t[self.i] == "}":
                    self.i += 1
                    return
                sub = self.record_keys(path, self.keys())
                self.ws()
                self.i += 1  # '='
                self.ws()
                self.value(sub)
                self.ws(newlines=True)
                if self.i < self.n and t[self.i] == ",":
                    self.i += 1
        else:
            while self.i < self.n and t[self.i] not in ",]}\n#":
                self.i += 1

    def scan(self) -> SourceMap:
        t = self.t
        table: PathT = ()
        self.smap.values[()] = (1, 1)
        while True:
            self.ws(newlines=True)
            if self.i >= self.n:
                return self.smap
            start = self.i
            if t.startswith("[[", self.i):
                self.i += 2
                parts = self.keys()
                self.ws()
                self.i += 2
                table = self.resolve_header(parts, True, start)
            elif t[self.i] == "[":
                self.i += 1
                parts = self.keys()
                self.ws()
                self.i += 1
                table = self.resolve_header(parts, False, start)
            else:
                path = self.record_keys(table, self.keys())
                self.ws()
                self.i += 1  # '='
                self.ws()
                self.value(path)


def _data_depth(data: Any) -> int:
    best = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        if best > MAX_DEPTH:
            return best
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return best


def load_toml(name: str, text: str) -> tuple[Any, SourceMap, list[Diagnostic]]:
    import tomli

    try:
        data = tomli.loads(text)
    except tomli.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", 1) or 1
        col = getattr(exc, "colno", 1) or 1
        msg = getattr(exc, "msg", None) or str(exc)
        if msg.startswith(("Cannot overwrite a value", "Cannot declare")):
            return (
                None,
                SourceMap(),
                [
                    make(
                        name,
                        (line, col),
                        "CTX002",
                        f"duplicate key or table: {msg}",
                        "remove one of them",
                    )
                ],
            )
        return None, SourceMap(), [make(name, (line, col), "CTX001", f"invalid TOML: {msg}")]
    except ValueError:  # int() refused a literal of thousands of digits
        m = _LONG_DIGITS_RE.search(text)
        pos = _text_pos(text, m.start()) if m else (1, 1)
        digits = len(m.group(0).replace("_", "")) if m else 0
        odd = OddNumber(str(digits), f"an integer of {digits} digits is out of range")
        return None, SourceMap(), [make(name, pos, "CTX103", odd.problem, ODD_HINT)]
    except RecursionError:
        return None, SourceMap(), [too_deep(name, (1, 1))]
    if _data_depth(data) > MAX_DEPTH:
        return None, SourceMap(), [too_deep(name, (1, 1))]
    try:
        smap = _TomlScanner(text).scan()
    except Exception:  # positions are best effort: fall back to line 1
        smap = SourceMap(values={(): (1, 1)})
    return data, smap, []


_LONG_DIGITS_RE = re.compile(r"(?<![\w.])[+-]?[0-9][0-9_]{999,}")


def _text_pos(text: str, index: int) -> Pos:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def drop_odd_numbers(name: str, data: Any, smap: SourceMap) -> tuple[list[Diagnostic], set[PathT]]:
    """Report (and leave out) TOML numbers out of range: beyond 64 bits, inf, nan."""
    diags: list[Diagnostic] = []
    dropped: set[PathT] = set()
    stack: list[tuple[Any, PathT]] = [(data, ())]
    while stack:
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in list(items):
            sub = (*path, key)
            if isinstance(value, dict | list):
                stack.append((value, sub))
                continue
            odd = odd_number(value)
            if odd is None:
                continue
            diags.append(odd_diagnostic(name, smap.value_position(sub), sub, odd))
            dropped.add(sub)
            if isinstance(node, dict):
                del node[key]
            else:
                node[key] = None
    return sorted(diags), dropped
