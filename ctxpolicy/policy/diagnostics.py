"""Diagnostics: every problem a user sees, with file, line and column.

Codes are stable and documented in docs/diagnostics.md (a test keeps the two in
sync with :data:`CODES`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["error", "warning"]

#: code -> (severity, one-line summary). Extended by the checks that emit them.
#: Ranges: CTX0xx file and syntax, CTX1xx schema and names, CTX2xx semantics,
#: CTX3xx include / extends / environment, CTX4xx compat readers.
CODES: dict[str, tuple[Severity, str]] = {
    "CTX000": ("error", "internal error while reading or checking the file"),
    "CTX001": ("error", "YAML or TOML syntax error"),
    "CTX002": ("error", "duplicate key"),
    "CTX003": ("error", "YAML tag (tags are never constructed)"),
    "CTX004": ("error", "alias expansion too large or alias to an unknown anchor"),
    "CTX005": ("error", "file is not UTF-8 text"),
    "CTX006": ("error", "file too large (bytes or nodes)"),
    "CTX007": ("error", "empty file"),
    "CTX008": ("error", "nesting too deep"),
    "CTX009": ("error", "YAML merge key `<<` not supported"),
    "CTX010": ("error", "cannot read the file"),
    "CTX101": ("error", "unknown key"),
    "CTX102": ("error", "unknown component (layer, preprocessor, summarizer, tokenizer, store)"),
    "CTX103": ("error", "wrong type or value out of range"),
    "CTX104": ("error", "missing required key"),
    "CTX105": ("error", "missing or unknown format version"),
    "CTX106": ("error", "value not one of the allowed names"),
    "CTX201": ("error", "effective budget (trigger) is not positive"),
    "CTX202": ("error", "thresholds not strictly increasing"),
    "CTX203": ("error", "target not below the trigger"),
    "CTX204": ("error", "kept tokens cannot fit the budget"),
    "CTX205": ("warning", "layer appears twice in the pipeline"),
    "CTX206": ("warning", "tool rule shadowed by an earlier glob"),
    "CTX207": ("error", "policy has no model"),
    "CTX208": ("error", "unknown model"),
    "CTX209": ("error", "target in tokens so small it is likely meant as a fraction"),
    "CTX210": ("warning", "target above the threshold compaction starts at (thrashing)"),
    "CTX301": ("error", "extends an unknown agent"),
    "CTX302": ("error", "extends cycle"),
    "CTX303": ("error", "included file not found"),
    "CTX304": ("error", "included path is not a file"),
    "CTX305": ("error", "include cycle"),
    "CTX306": ("error", "environment variable not set"),
    "CTX307": ("error", "invalid ${...} interpolation"),
    "CTX308": ("error", "requested agent not defined"),
    "CTX309": ("error", "environment interpolation makes the policy too large"),
    "CTX401": ("warning", "compat reader: setting not understood, ignored"),
}


def severity_of(code: str) -> Severity:
    """Severity registered for ``code`` (``error`` when unknown)."""
    entry = CODES.get(code)
    return entry[0] if entry else "error"


def make(
    file: str, pos: tuple[int, int], code: str, message: str, hint: str | None = None
) -> Diagnostic:
    """Build a diagnostic whose severity comes from :data:`CODES`."""
    return Diagnostic(file, max(1, pos[0]), max(1, pos[1]), code, severity_of(code), message, hint)


def did_you_mean(word: object, candidates: Iterable[str]) -> str | None:
    """The closest candidate to ``word`` (difflib), or None."""
    if not isinstance(word, str):
        return None
    pool = [c for c in candidates if isinstance(c, str)]
    best = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    if not best:
        lowered = {c.lower(): c for c in pool}
        best = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
        return lowered[best[0]] if best else None
    return best[0]


def suggestion(word: object, candidates: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` or empty."""
    best = did_you_mean(word, candidates)
    return f" (did you mean {best!r}?)" if best else ""


@dataclass(frozen=True, order=True)
class Related:
    """Another place a diagnostic is about (SARIF ``relatedLocations``)."""

    file: str
    line: int
    col: int
    message: str

    def format(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.message}"


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem in one file. ``line``/``col`` are 1-based (line 1 col 1 when unknown).

    ``related`` are other places the problem is about (a value inherited through
    ``extends`` that the reported one conflicts with)."""

    file: str
    line: int
    col: int
    code: str
    severity: Severity
    message: str
    hint: str | None = None
    related: tuple[Related, ...] = ()

    def format(self) -> str:
        """``path:line:col: CODE message`` (+ an indented hint line, which names the
        related locations)."""
        text = f"{self.file}:{self.line}:{self.col}: {self.code} {self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``related`` only when there are related locations)."""
        data = asdict(self)
        related = data.pop("related")
        if related:
            data["related"] = list(related)
        return data


class PolicyError(Exception):
    """A policy could not be loaded; carries every diagnostic found."""

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics = sorted(diagnostics)
        super().__init__("\n".join(d.format() for d in self.diagnostics) or "invalid policy")


# --------------------------------------------------------------------------- pydantic errors

_TYPE_WORDS: dict[str, str] = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
    "none_required": "null",
    "string_pattern_mismatch": "a string of the right form",
}


#: pydantic error types that only say "wrong type" (a union branch that did not match)
TYPE_ERRORS = frozenset(_TYPE_WORDS)


@dataclass(frozen=True)
class SchemaFinding:
    """One schema problem: code, data path (relative to the validated data), message."""

    code: str
    path: tuple[str | int, ...]
    message: str
    hint: str | None = None


def describe_value(value: Any, redact: Callable[[str], str] | None = None) -> str:
    """Short, human description of an input value for messages.

    ``redact`` turns an interpolated string back into what was written (before it is
    shortened: a shortened secret would no longer be recognised). Numbers too long
    to read are described by their size.
    """
    import datetime as _dt

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return f"a TOML date/time {value.isoformat()}"
    if isinstance(value, str):
        if redact is not None:
            value = redact(value)
        text = value if len(value) <= 40 else value[:37] + "..."
        return repr(text)
    if isinstance(value, int) and abs(value) >= 10**20:
        return f"an integer of {len(str(abs(value)))} digits"
    return repr(value)


def dotted(path: Sequence[str | int]) -> str:
    """``pipeline[0].options.max_chars`` style rendering of a data path."""
    out = ""
    for el in path:
        if isinstance(el, int):
            out += f"[{el}]"
        else:
            text = el if el and all(c.isalnum() or c in "_-$" for c in el) else repr(el)
            out += f".{text}" if out else text
    return out or "(top level)"


def data_path(loc: Sequence[Any], data: Any, missing: bool) -> tuple[tuple[str | int, ...], Any]:
    path: list[str | int] = []
    cur = data
    for i, el in enumerate(loc):
        last = i == len(loc) - 1
        if (isinstance(cur, dict) and el in cur) or (
            isinstance(cur, list) and isinstance(el, int) and 0 <= el < len(cur)
        ):
            path.append(el)
            cur = cur[el]
        elif last and missing and isinstance(cur, dict):
            path.append(el)
            cur = None
        # else: a union/function tag in the location: not part of the data
    return tuple(path), cur


def _fields_of(model: Any) -> list[str]:
    fields = getattr(model, "model_fields", None)
    if not fields:
        return []
    return [f.alias or name for name, f in fields.items()]


def _model_at(root: Any, path: Sequence[str | int]) -> Any:
    """The pydantic model class describing the value at ``path`` (or None)."""
    import typing

    from pydantic import BaseModel

    def as_model(tp: Any) -> Any:
        seen = 0
        while seen < 10:
            seen += 1
            origin = typing.get_origin(tp)
            if origin is typing.Annotated:
                tp = typing.get_args(tp)[0]
                continue
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                return tp
            args = typing.get_args(tp)
            if origin is not None and args and origin not in (dict, list):
                models = [a for a in args if as_model(a) is not None]
                return as_model(models[0]) if models else None
            return None
        return None

    tp: Any = root
    for el in path:
        model = as_model(tp)
        if model is not None:
            found = None
            for name, f in model.model_fields.items():
                if el in (name, f.alias):
                    found = f.annotation
            if found is None:
                return None
            tp = found
            continue
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is dict and len(args) == 2:
            tp = args[1]
        elif origin is list and args:
            tp = args[0]
        else:
            # unions of containers
            cands = [a for a in args if typing.get_origin(a) in (dict, list)]
            if not cands:
                return None
            tp = cands[0]
            origin = typing.get_origin(tp)
            tp = typing.get_args(tp)[-1] if origin is dict else typing.get_args(tp)[0]
    return as_model(tp)


def _num(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: pydantic's constraint errors by type: the message and the ``ctx`` entry it quotes
#: (``ctx_expected`` is a field's own one-message check, budget.target).
_CONSTRAINTS: dict[str, tuple[str, str]] = {
    "ctx_expected": ("must be {}", "expected"),
    "greater_than": ("must be greater than {}", "gt"),
    "greater_than_equal": ("must be at least {}", "ge"),
    "less_than": ("must be less than {}", "lt"),
    "less_than_equal": ("must be at most {}", "le"),
    "too_short": ("must have at least {} item(s)", "min_length"),
    "too_long": ("must have at most {} item(s)", "max_length"),
}


def _constraint_message(err: Mapping[str, Any]) -> str | None:
    ctx = {k: _num(v) for k, v in (err.get("ctx") or {}).items()}
    found = _CONSTRAINTS.get(err["type"])
    if found is None:
        return None
    message, key = found
    return message.format(ctx.get(key))


def _percent_hint(err: Mapping[str, Any], value: Any) -> str | None:
    """For a fraction written as a whole percentage (``warning: 70`` where at most 1 is
    allowed, ``target: 60.0``): the fraction it most likely means."""
    ctx = err.get("ctx") or {}
    kind = err["type"]
    fraction = (kind == "less_than_equal" and ctx.get("le") == 1) or (
        kind == "less_than" and ctx.get("lt") == 1
    )
    if kind == "ctx_expected":
        fraction = "fraction" in str(ctx.get("expected", ""))
    if not fraction or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not (10 <= value <= 100 and float(value).is_integer()):
        return None
    pct = int(value)
    if kind == "ctx_expected":
        return f'for {pct}% of the trigger write {pct / 100:g} or "{pct}%"'
    return f"a fraction: for {pct}% write {pct / 100:g}"


def _expected_word(err: Mapping[str, Any]) -> str:
    if err["type"] == "string_pattern_mismatch":
        pattern = str((err.get("ctx") or {}).get("pattern", ""))
        if "%" in pattern:
            return 'a percentage like "25%"'
        return f"a string matching {pattern!r}"
    return _TYPE_WORDS.get(err["type"], "a valid value")


def validation_findings(
    errors: Sequence[Mapping[str, Any]],
    data: Any,
    model: Any,
    display: Callable[[tuple[str | int, ...]], str] = dotted,
    *,
    redact: Callable[[str], str] | None = None,
) -> list[SchemaFinding]:
    """Turn ``ValidationError.errors()`` of ``model.model_validate(data)`` into findings.

    Union branches are folded into one message per value; unknown keys get a
    did-you-mean against the field names of the model at that place. ``redact``
    shows interpolated values as written (see :func:`describe_value`).
    """
    entries: list[tuple[tuple[str | int, ...], Mapping[str, Any], Any]] = []
    for err in errors:
        path, value = data_path(err.get("loc", ()), data, err["type"] == "missing")
        entries.append((path, err, value))
    # a union branch that went deeper wins over type errors of other branches
    deep = {p for p, _, _ in entries}
    kept = []
    for path, err, value in entries:
        is_type = err["type"] in _TYPE_WORDS
        if is_type and any(len(q) > len(path) and q[: len(path)] == path for q in deep):
            continue
        kept.append((path, err, value))
    groups: dict[tuple[str | int, ...], list[tuple[Mapping[str, Any], Any]]] = {}
    for path, err, value in kept:
        groups.setdefault(path, []).append((err, value))
    out: list[SchemaFinding] = []
    for path, items in groups.items():
        where = display(path)
        others = [(e, v) for e, v in items if e["type"] not in _TYPE_WORDS]
        if others:
            done: set[str] = set()
            for err, value in others:
                f = _one_finding(path, err, value, model, display, redact)
                if f is not None and f.message not in done:
                    done.add(f.message)
                    out.append(f)
            continue
        words: list[str] = []
        for err, _ in items:
            w = _expected_word(err)
            if w not in words:
                words.append(w)
        if "a number" in words and "an integer" in words:
            words.remove("an integer")
        value = items[0][1]
        expected = " or ".join(words)
        out.append(
            SchemaFinding(
                "CTX103", path, f"{where}: must be {expected} (got {describe_value(value, redact)})"
            )
        )
    return out


def _one_finding(
    path: tuple[str | int, ...],
    err: Mapping[str, Any],
    value: Any,
    model: Any,
    display: Callable[[tuple[str | int, ...]], str],
    redact: Callable[[str], str] | None = None,
) -> SchemaFinding | None:
    kind = err["type"]
    where = display(path)
    if kind == "missing":
        key = path[-1] if path else "?"
        parent = path[:-1]
        if key == "ctxpolicy" and not parent:
            return SchemaFinding(
                "CTX105",
                parent,
                "missing format version `ctxpolicy: 1`",
                "add `ctxpolicy: 1` at the top",
            )
        inside = f" in {display(parent)}" if parent and display(parent) else ""
        return SchemaFinding("CTX104", parent, f"missing required key {key!r}{inside}")
    if kind == "extra_forbidden":
        key = path[-1] if path else "?"
        parent = path[:-1]
        fields = _fields_of(_model_at(model, parent))
        inside = f" in {display(parent)}" if parent and display(parent) else ""
        hint = ("allowed keys: " + ", ".join(fields)) if fields else None
        return SchemaFinding(
            "CTX101", path, f"unknown key {key!r}{inside}{suggestion(key, fields)}", hint
        )
    if kind in ("literal_error", "enum"):
        if path == ("ctxpolicy",):
            return SchemaFinding(
                "CTX105",
                path,
                f"unknown format version {describe_value(value, redact)}; this ctxpolicy reads version 1",
                "set `ctxpolicy: 1`",
            )
        expected = str((err.get("ctx") or {}).get("expected", ""))
        import re as _re

        names = _re.findall(r"'([^']*)'", expected)
        return SchemaFinding(
            "CTX106",
            path,
            f"{where}: must be {expected} (got {describe_value(value, redact)})"
            f"{suggestion(value, names)}",
        )
    constraint = _constraint_message(err)
    if constraint is not None:
        return SchemaFinding(
            "CTX103",
            path,
            f"{where}: {constraint} (got {describe_value(value, redact)})",
            _percent_hint(err, value),
        )
    msg = str(err.get("msg", "invalid value"))
    msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return SchemaFinding("CTX103", path, f"{where}: {msg}")
