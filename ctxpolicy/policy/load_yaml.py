"""Read a YAML policy document into plain Python data with source positions.

Nothing here constructs objects from the file: YAML is read as a stream of parser
events (libyaml's C parser for a clean file, ruamel.yaml's round-trip parser when
anything is off, which words the diagnostics) and turned into dicts, lists, strings,
numbers, booleans and None by this module (YAML 1.2 core schema). That is how
tags, duplicate keys, merge keys, alias bombs, deep nesting and numbers no field can
take become diagnostics instead of objects, exceptions or a hung process.
:mod:`ctxpolicy.policy.load` reads the bytes and dispatches here or to
:mod:`ctxpolicy.policy.load_toml`.

Limits (each a diagnostic): :data:`MAX_DEPTH`, :data:`MAX_NODES` (alias expansions
included), 64-bit integers.
"""

from __future__ import annotations

import copy
import io
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from ctxpolicy.policy.diagnostics import Diagnostic, make
from ctxpolicy.policy.readfile import Abort as _Abort
from ctxpolicy.policy.source import (
    INT_MAX,
    MAX_DEPTH,
    OddNumber,
    PathT,
    Pos,
    SourceMap,
    odd_diagnostic,
    too_deep,
)

__all__ = ["FAST_YAML", "MAX_NODES", "load_yaml"]

MAX_NODES = 5_000

#: Read YAML with libyaml's C parser first when PyYAML has it (see _load_yaml_fast).
FAST_YAML = True


_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
#: the integer forms (their digits as group 1) and their bases
_INT_FORMS = (
    (re.compile(r"^[-+]?([0-9]+)$"), 10),
    (re.compile(r"^0o([0-7]+)$"), 8),
    (re.compile(r"^0x([0-9a-fA-F]+)$"), 16),
)
_FLOAT_RE = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_NOT_FINITE_RE = re.compile(r"^(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


def _int_literal(value: str, digits: str, base: int) -> int | OddNumber:
    # the length test comes first: int() of thousands of digits is refused by CPython
    # (and quadratic); nothing near 20 decimal digits is a policy value
    if len(digits.lstrip("0")) > 64:
        return OddNumber(value, f"an integer of {len(digits)} digits is out of range")
    number = int(digits, base) * (-1 if value.startswith("-") else 1)
    if abs(number) > INT_MAX:
        return OddNumber(value, f"{value} is out of range (integers are 64-bit)")
    return number


def _plain_scalar(value: str) -> Any:
    """YAML 1.2 core schema resolution of a plain (unquoted) scalar."""
    if _NULL_RE.match(value):
        return None
    if value in _BOOL:
        return _BOOL[value]
    for form, base in _INT_FORMS:
        if digits := form.match(value):
            return _int_literal(value, digits[1], base)
    if _FLOAT_RE.match(value):
        number = float(value)
        if number in (float("inf"), float("-inf")):
            return OddNumber(value, f"{value} is out of range (too large for a number)")
        return number
    if _NOT_FINITE_RE.match(value):
        return OddNumber(value, f"{value} is not a finite number")
    return value


def _tag_text(tag: Any) -> str:
    text = str(getattr(tag, "value", None) or tag)
    if text.startswith("tag:yaml.org,2002:"):
        return "!!" + text[len("tag:yaml.org,2002:") :]
    return text


def _flow_depth_scan(name: str, text: str) -> None:
    """Reject deeply nested flow collections before the (slow) YAML parser sees them."""
    depth = 0
    quote: str | None = None
    i = 0
    n = len(text)
    line, line_start = 1, 0
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            line_start = i + 1
            if quote == "'":  # single-quoted scalars may span lines; keep state
                pass
        elif quote is not None:
            if quote == '"' and c == "\\":
                i += 1
            elif c == quote:
                if quote == "'" and i + 1 < n and text[i + 1] == "'":
                    i += 1
                else:
                    quote = None
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n"):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        elif c in "\"'" and (i == 0 or text[i - 1] in " \t\n[{,:-?"):
            quote = c
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise _Abort(too_deep(name, (line, i - line_start + 1)))
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1


@dataclass
class _Frame:
    kind: Literal["map", "seq"]
    container: Any
    path: PathT
    anchor: str | None
    nodes: int = 1
    key: str | None = None  # pending key (maps)
    expect_key: bool = True
    skip_value: bool = False
    index: int = 0


class _YamlBuilder:
    """Turns ruamel.yaml parser events into plain data and a source map."""

    def __init__(self, name: str, events: ModuleType) -> None:
        self.name = name
        self.events = events  # ruamel.yaml.events or yaml.events: the same classes
        self.diags: list[Diagnostic] = []
        self.smap = SourceMap()
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.nodes = 0
        self.root: Any = None
        self.has_root = False
        self.stack: list[_Frame] = []
        self.skip = 0  # > 0 while skipping a subtree (depth)
        self.key_lines: dict[PathT, int] = {}
        self.dropped: set[PathT] = set()

    # -- helpers
    def _pos(self, ev: Any) -> Pos:
        m = ev.start_mark
        return (m.line + 1, m.column + 1)

    def _err(self, ev: Any, code: str, message: str, hint: str | None = None) -> None:
        self.diags.append(make(self.name, self._pos(ev), code, message, hint))

    def _count(self, n: int, ev: Any, alias: bool = False) -> None:
        self.nodes += n
        for fr in self.stack:
            fr.nodes += n
        if self.nodes > MAX_NODES:
            if alias:
                raise _Abort(
                    make(
                        self.name,
                        self._pos(ev),
                        "CTX004",
                        f"alias expansion exceeds {MAX_NODES} nodes (alias bomb?)",
                        "policy files do not need deep anchor/alias reuse; write the values out",
                    )
                )
            raise _Abort(
                make(
                    self.name,
                    self._pos(ev),
                    "CTX006",
                    f"document has more than {MAX_NODES} nodes",
                    "a policy file is small; split it or remove generated content",
                )
            )

    # -- placement of a finished value
    def _slot(self, ev: Any) -> tuple[PathT, bool] | None:
        """Path for the next value, or None when it must be skipped."""
        if not self.stack:
            if self.has_root:
                return None
            return ((), True)
        top = self.stack[-1]
        if top.kind == "seq":
            return ((*top.path, top.index), True)
        if top.expect_key:
            return None  # a key: handled by the caller
        if top.skip_value:
            return None
        assert top.key is not None
        return ((*top.path, top.key), True)

    def _place(self, value: Any, anchor: str | None, nodes: int) -> None:
        if anchor:
            self.anchors[anchor] = (value, nodes)
        if not self.stack:
            self.root = value
            self.has_root = True
            return
        top = self.stack[-1]
        if top.kind == "seq":
            top.container.append(value)
            top.index += 1
            return
        if not top.skip_value and top.key is not None:
            top.container[top.key] = value
        top.key = None
        top.skip_value = False
        top.expect_key = True

    def _check_tag(self, ev: Any) -> None:
        tag = getattr(ev, "tag", None)
        if tag is not None:
            self._err(
                ev,
                "CTX003",
                f"YAML tag {_tag_text(tag)!r} is not allowed; policy values are plain data",
                "remove the tag; no tag is ever constructed",
            )

    # -- keys
    def _handle_key(self, ev: Any, top: _Frame) -> None:
        AliasEvent = self.events.AliasEvent
        MappingStartEvent = self.events.MappingStartEvent
        ScalarEvent = self.events.ScalarEvent
        SequenceStartEvent = self.events.SequenceStartEvent

        if isinstance(ev, ScalarEvent):
            self._check_tag(ev)
            self._count(1, ev)
            text = ev.value
            key_path = (*top.path, text)
            if not ev.style and text == "<<":
                self._err(
                    ev,
                    "CTX009",
                    "YAML merge keys ('<<') are not supported",
                    "write the keys out, or use `extends:` between agents",
                )
                top.skip_value = True
            elif text in top.container:
                first = self.key_lines.get(key_path)
                where = f" (first defined on line {first})" if first else ""
                self._err(ev, "CTX002", f"duplicate key {text!r}{where}", "remove one of them")
                top.skip_value = True
            else:
                pos = self._pos(ev)
                self.smap.keys[key_path] = pos
                self.key_lines[key_path] = pos[0]
            top.key = text
            top.expect_key = False
            return
        # complex key: a mapping, sequence or alias used as a key
        self._err(ev, "CTX103", "mapping keys must be plain strings")
        top.key = None
        top.skip_value = True
        top.expect_key = False
        if isinstance(ev, MappingStartEvent | SequenceStartEvent):
            self.skip = 1
        elif isinstance(ev, AliasEvent):  # an alias key: nothing more to skip
            return

    # -- main loop
    def feed(self, ev: Any) -> None:
        AliasEvent = self.events.AliasEvent
        CollectionEndEvent = self.events.CollectionEndEvent
        CollectionStartEvent = self.events.CollectionStartEvent
        DocumentStartEvent = self.events.DocumentStartEvent
        MappingStartEvent = self.events.MappingStartEvent
        ScalarEvent = self.events.ScalarEvent

        if self.skip:
            if isinstance(ev, CollectionStartEvent):
                self.skip += 1
            elif isinstance(ev, CollectionEndEvent):
                self.skip -= 1
            if self.skip == 0:
                self._after_skip()
            return
        if isinstance(ev, DocumentStartEvent):
            if self.has_root:
                raise _Abort(
                    make(
                        self.name,
                        self._pos(ev),
                        "CTX001",
                        "more than one YAML document in the file ('---')",
                        "a policy file holds one document",
                    )
                )
            return
        if not isinstance(ev, ScalarEvent | AliasEvent | CollectionStartEvent | CollectionEndEvent):
            return
        top = self.stack[-1] if self.stack else None
        if isinstance(ev, CollectionEndEvent):
            assert top is not None
            self.stack.pop()
            self._place(top.container, top.anchor, top.nodes)
            return
        if top is not None and top.kind == "map" and top.expect_key:
            self._handle_key(ev, top)
            return
        skipping = top is not None and top.kind == "map" and top.skip_value
        if isinstance(ev, AliasEvent):
            anchor = ev.anchor
            if anchor not in self.anchors:
                raise _Abort(
                    make(
                        self.name,
                        self._pos(ev),
                        "CTX004",
                        f"alias *{anchor} refers to an unknown anchor (or to itself)",
                        "define the anchor (&name) before using it",
                    )
                )
            value, size = self.anchors[anchor]
            self._count(size, ev, alias=True)
            slot = self._slot(ev)
            if slot is not None and not skipping:
                self.smap.values.setdefault(slot[0], self._pos(ev))
            self._place(copy.deepcopy(value), None, size)
            return
        self._check_tag(ev)
        self._count(1, ev)
        slot = self._slot(ev)
        path = slot[0] if slot is not None else (*top.path, "?") if top else ()
        if slot is not None and not skipping:
            self.smap.values.setdefault(path, self._pos(ev))
        anchor = getattr(ev, "anchor", None)
        if isinstance(ev, ScalarEvent):
            plain = not ev.style and ev.implicit[0]  # style: None (ruamel) or "" (libyaml)
            value = _plain_scalar(ev.value) if plain else ev.value
            if isinstance(value, OddNumber):
                self.diags.append(odd_diagnostic(self.name, self._pos(ev), path, value))
                self.dropped.add(path)
                if top is not None and top.kind == "map":
                    top.skip_value = True
                value = None
            self._place(value, anchor, 1)
            return
        if len(self.stack) >= MAX_DEPTH:
            raise _Abort(too_deep(self.name, self._pos(ev)))
        kind: Literal["map", "seq"] = "map" if isinstance(ev, MappingStartEvent) else "seq"
        container: Any = {} if kind == "map" else []
        self.stack.append(_Frame(kind, container, path, anchor))

    def _after_skip(self) -> None:
        # finished skipping a complex key: now its value comes (still skipped)
        pass


def _load_yaml_fast(
    name: str, text: str
) -> tuple[Any, SourceMap, list[Diagnostic], set[PathT]] | None:
    """libyaml's C parser (PyYAML) feeding the same builder: the data and positions of a
    file without problems, about 10× faster than the pure-Python round-trip parser.
    A limit of ours (alias bomb, too many nodes, too deep) is reported from here, so a
    hostile file is not parsed twice. None when libyaml is not available or anything
    else is off (a syntax error, a tag, a duplicate key, an odd number...): the
    round-trip parser then reads the file again and words the diagnostics (tests check
    both agree on every YAML file of the repository)."""
    try:
        import yaml
        import yaml.events

        loader = yaml.CSafeLoader
    except (ImportError, AttributeError):  # no PyYAML, or built without libyaml
        return None
    builder = _YamlBuilder(name, yaml.events)
    try:
        for ev in yaml.parse(text, Loader=loader):
            builder.feed(ev)
    except _Abort as exc:  # a limit of ours (alias bomb, nodes, depth): worded by us
        return None, builder.smap, [*builder.diags, exc.diag], set()
    except Exception:  # any other problem: the careful path reports it
        return None
    if builder.diags or builder.dropped or not builder.has_root:
        return None
    return builder.root, builder.smap, [], set()


def _load_yaml(name: str, text: str) -> tuple[Any, SourceMap, list[Diagnostic], set[PathT]]:
    _flow_depth_scan(name, text)
    if FAST_YAML:
        fast = _load_yaml_fast(name, text)
        if fast is not None:
            return fast
    from ruamel.yaml import YAML
    from ruamel.yaml import events as ruamel_events
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    builder = _YamlBuilder(name, ruamel_events)
    yaml = YAML(typ="rt")
    try:
        for ev in yaml.parse(io.StringIO(text)):
            builder.feed(ev)
    except _Abort as exc:
        return None, builder.smap, [*builder.diags, exc.diag], set()
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        problem = (exc.problem or str(exc)).strip()
        context = (exc.context or "").strip()
        message = f"invalid YAML: {problem}"
        if context:
            message += f" ({context})"
        code = "CTX005" if "special characters are not allowed" in problem else "CTX001"
        return None, builder.smap, [*builder.diags, make(name, pos, code, message)], set()
    except YAMLError as exc:
        text_exc = str(exc).strip().splitlines()
        msg = text_exc[-1] if text_exc else type(exc).__name__
        mark = getattr(exc, "position", None)
        code = "CTX005" if "unacceptable character" in str(exc) else "CTX001"
        pos = (1, 1)
        if hasattr(exc, "line") and hasattr(exc, "column"):  # pragma: no cover - reader errors
            pos = (int(exc.line) + 1, int(exc.column) + 1)
        del mark
        diag = make(name, pos, code, f"invalid YAML: {msg}")
        return None, builder.smap, [*builder.diags, diag], set()
    return builder.root, builder.smap, builder.diags, builder.dropped


def load_yaml(name: str, text: str) -> tuple[Any, SourceMap, list[Diagnostic], set[PathT]]:
    """``(data, source map, diagnostics, keys dropped for an odd number)`` of a YAML text."""
    return _load_yaml(name, text)
