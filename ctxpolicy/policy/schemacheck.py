"""A yes/no check of a document against the generated JSON Schema, without ``jsonschema``.

``ctxpolicy validate`` runs every file through the published schema. Importing
``jsonschema`` (with ``referencing``, ``rpds``, ``attrs`` and the format checkers)
costs more than the rest of a cold ``validate`` run, and almost every file checked
in CI is valid. :func:`compile_schema` turns the schema into a predicate that answers
only "is this instance valid?", with Draft 7 semantics as implemented by
``jsonschema.Draft7Validator`` (no format assertion, ``$ref`` siblings ignored,
``1.0`` is an integer, ``True`` is not ``1``). When the answer is no,
:mod:`ctxpolicy.resolve.schema` runs the real validator to produce the messages, so
diagnostics are unchanged.

Only the keywords the generated schema uses are implemented. A schema with any other
Draft 7 validation keyword, or a ``$ref`` that is not ``#/definitions/<name>``, makes
:func:`compile_schema` raise :class:`Unsupported`; the caller then uses
``jsonschema`` for every document. Annotations (``title``, ``description``,
``default``, ``examples``, ...) are ignored, as Draft 7 does.

``tests/policy/test_schemacheck.py`` checks the predicate against
``Draft7Validator.is_valid`` on the corpus and on generated documents.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Check", "Unsupported", "compile_schema"]

Check = Callable[[Any], bool]

#: Draft 7 validation keywords the compiled check does not implement: a schema using
#: one is :class:`Unsupported`. Every other Draft 7 keyword is checked, except
#: ``format``, an annotation in Draft 7 unless a format checker is configured
#: (``schema_diagnostics`` configures none); ``then``/``else`` belong to ``if``.
_UNIMPLEMENTED = frozenset(
    {
        "additionalItems",
        "contains",
        "dependencies",
        "maxProperties",
        "minProperties",
        "multipleOf",
        "not",
        "oneOf",
        "patternProperties",
        "propertyNames",
        "uniqueItems",
    }
)

_DEFS_PREFIX = "#/definitions/"


class Unsupported(ValueError):
    """The schema uses something :func:`compile_schema` does not implement."""


# --------------------------------------------------------------------------- types


def _is_number(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, numbers.Number)


def _is_integer(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or (isinstance(x, float) and x.is_integer())


_TYPES: dict[str, Check] = {
    "array": lambda x: isinstance(x, list),
    "boolean": lambda x: isinstance(x, bool),
    "integer": _is_integer,
    "null": lambda x: x is None,
    "number": _is_number,
    "object": lambda x: isinstance(x, dict),
    "string": lambda x: isinstance(x, str),
}


_TRUE = object()
_FALSE = object()


def _unbool(x: Any) -> Any:
    if x is True:
        return _TRUE
    if x is False:
        return _FALSE
    return x


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON Schema means it: ``True != 1``, recursively in containers."""
    if a is b:
        return True
    if isinstance(a, str) or isinstance(b, str):
        return bool(a == b)
    if isinstance(a, Sequence) and isinstance(b, Sequence):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return bool(_unbool(a) == _unbool(b))


# --------------------------------------------------------------------------- compiler


def _always(_: Any) -> bool:
    return True


def _never(_: Any) -> bool:
    return False


def _all_of(checks: list[Check]) -> Check:
    return lambda x: all(f(x) for f in checks)


def _any_of(checks: list[Check]) -> Check:
    return lambda x: any(f(x) for f in checks)


def _bound(key: str, b: Any) -> Check:
    """``minimum`` and friends: only numbers are constrained."""
    if key == "minimum":
        return lambda x: not _is_number(x) or not x < b
    if key == "exclusiveMinimum":
        return lambda x: not _is_number(x) or not x <= b
    if key == "maximum":
        return lambda x: not _is_number(x) or not x > b
    return lambda x: not _is_number(x) or not x >= b


class _Compiler:
    def __init__(self, root: Mapping[str, Any]) -> None:
        defs = root.get("definitions", {})
        if not isinstance(defs, Mapping):
            raise Unsupported("definitions is not an object")
        self.defs: Mapping[str, Any] = defs
        self.compiled: dict[str, Check] = {}

    def ref(self, ref: Any) -> Check:
        if not isinstance(ref, str) or not ref.startswith(_DEFS_PREFIX):
            raise Unsupported(f"$ref {ref!r}")
        name = ref[len(_DEFS_PREFIX) :]
        if "/" in name or "~" in name or "%" in name or name not in self.defs:
            raise Unsupported(f"$ref {ref!r}")
        table = self.compiled
        if name not in table:
            table[name] = _never  # placeholder while compiling: definitions may recurse
            table[name] = self.compile(self.defs[name])
        return lambda x: table[name](x)

    def compile(self, schema: Any) -> Check:
        if schema is True:
            return _always
        if schema is False:
            return _never
        if not isinstance(schema, Mapping):
            raise Unsupported(f"schema of type {type(schema).__name__}")
        if "$ref" in schema:  # Draft 7: siblings of $ref are ignored
            return self.ref(schema["$ref"])
        unknown = _UNIMPLEMENTED.intersection(schema)
        if unknown:
            raise Unsupported("keywords " + ", ".join(sorted(unknown)))
        checks: list[Check] = []
        if "type" in schema:
            checks.append(self._type(schema["type"]))
        if "enum" in schema:
            checks.append(self._enum(schema["enum"]))
        if "const" in schema:
            checks.append(self._const(schema["const"]))
        checks.extend(self._numeric(schema))
        checks.extend(self._string(schema))
        checks.extend(self._array(schema))
        checks.extend(self._object(schema))
        for key in ("allOf", "anyOf"):
            if key in schema:
                subs = schema[key]
                if not isinstance(subs, list):
                    raise Unsupported(f"{key} is not a list")
                compiled = [self.compile(s) for s in subs]
                checks.append(_all_of(compiled) if key == "allOf" else _any_of(compiled))
        if "if" in schema:
            cond = self.compile(schema["if"])
            then = self.compile(schema["then"]) if "then" in schema else _always
            other = self.compile(schema["else"]) if "else" in schema else _always
            checks.append(lambda x: then(x) if cond(x) else other(x))
        if not checks:
            return _always
        if len(checks) == 1:
            return checks[0]
        return _all_of(checks)

    # -- keyword groups
    def _type(self, types: Any) -> Check:
        names = [types] if isinstance(types, str) else types
        if not isinstance(names, list) or not all(n in _TYPES for n in names):
            raise Unsupported(f"type {types!r}")
        preds = [_TYPES[n] for n in names]
        if len(preds) == 1:
            return preds[0]
        return lambda x: any(p(x) for p in preds)

    def _enum(self, values: Any) -> Check:
        if not isinstance(values, list):
            raise Unsupported("enum is not a list")
        return lambda x: any(json_equal(v, x) for v in values)

    def _const(self, value: Any) -> Check:
        return lambda x: json_equal(x, value)

    def _numeric(self, schema: Mapping[str, Any]) -> list[Check]:
        out: list[Check] = []
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if key not in schema:
                continue
            bound = schema[key]
            if not _is_number(bound):
                raise Unsupported(f"{key} {bound!r}")
            out.append(_bound(key, bound))
        return out

    def _string(self, schema: Mapping[str, Any]) -> list[Check]:
        out: list[Check] = []
        if "pattern" in schema:
            pattern = schema["pattern"]
            if not isinstance(pattern, str):
                raise Unsupported(f"pattern {pattern!r}")
            rx = re.compile(pattern)
            out.append(lambda x: not isinstance(x, str) or rx.search(x) is not None)
        if "maxLength" in schema:
            n = schema["maxLength"]
            out.append(lambda x: not isinstance(x, str) or not len(x) > n)
        if "minLength" in schema:
            n2 = schema["minLength"]
            out.append(lambda x: not isinstance(x, str) or not len(x) < n2)
        return out

    def _array(self, schema: Mapping[str, Any]) -> list[Check]:
        out: list[Check] = []
        if "items" in schema:
            items = schema["items"]
            if isinstance(items, list):
                tuple_checks = [self.compile(s) for s in items]
                out.append(
                    lambda x: (
                        not isinstance(x, list)
                        or all(f(v) for f, v in zip(tuple_checks, x, strict=False))
                    )
                )
            else:
                each = self.compile(items)
                out.append(lambda x: not isinstance(x, list) or all(each(v) for v in x))
        if "minItems" in schema:
            lo = schema["minItems"]
            out.append(lambda x: not isinstance(x, list) or not len(x) < lo)
        if "maxItems" in schema:
            hi = schema["maxItems"]
            out.append(lambda x: not isinstance(x, list) or not len(x) > hi)
        return out

    def _object(self, schema: Mapping[str, Any]) -> list[Check]:
        out: list[Check] = []
        props = schema.get("properties", {})
        if "properties" in schema:
            if not isinstance(props, Mapping):
                raise Unsupported("properties is not an object")
            compiled = {k: self.compile(v) for k, v in props.items()}
            items = list(compiled.items())
            out.append(
                lambda x: not isinstance(x, dict) or all(f(x[k]) for k, f in items if k in x)
            )
        if "required" in schema:
            names = list(schema["required"])
            out.append(lambda x: not isinstance(x, dict) or all(n in x for n in names))
        if "additionalProperties" in schema:
            extra = schema["additionalProperties"]
            known = props if isinstance(props, Mapping) else {}
            if isinstance(extra, dict):
                each = self.compile(extra)
                out.append(
                    lambda x: (
                        not isinstance(x, dict)
                        or all(each(v) for k, v in x.items() if k not in known)
                    )
                )
            elif not extra:  # false (or another falsy value): no extra keys
                out.append(lambda x: not isinstance(x, dict) or all(k in known for k in x))
        return out


def compile_schema(schema: Mapping[str, Any]) -> Check:
    """A predicate: True when ``Draft7Validator(schema).is_valid(instance)`` would be.

    Raises :class:`Unsupported` when the schema uses a keyword or reference form that
    is not implemented (the caller falls back to ``jsonschema``)."""
    compiler = _Compiler(schema)
    return compiler.compile(schema)
