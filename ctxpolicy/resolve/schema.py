"""The published JSON Schema of policy files, and validation against it.

The schema is generated from :class:`ctxpolicy.policy.models.PolicyFile` (the single
source of truth) and extended with the ``Options`` schema of every registered
component: each slot that names a component (``PipelineStep.layer``,
``OverflowStep.layer``, ``ToolRule.preprocess``, ``Snapshots.store``, ``StateSpec.store``) gets an
``allOf`` of ``if {<field>: {const: name}} then {options: <Options schema>}``, the
way tox 4 folds plugin configuration into ``tox schema``.

The output is draft-07 (``definitions``, ``#/definitions/...`` refs) and is also
valid under draft 2020-12, so both validators accept it. It is deterministic
(sorted keys) and committed at ``schemas/ctxpolicy.schema.json``; regenerate it
with ``make schema`` (or ``ctxpolicy schema > schemas/ctxpolicy.schema.json``).

:func:`schema_diagnostics` validates a loaded document with ``jsonschema`` and
maps every error to ``file:line:col`` through the document's source map.

Nothing here imports tiktoken or the engine; ``jsonschema`` is imported only when a
document fails the schema (a valid document is recognised by the compiled check of
:mod:`ctxpolicy.policy.schemacheck`) or a schema is given explicitly.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ctxpolicy.policy.diagnostics import CODES, Diagnostic, Severity
from ctxpolicy.policy.models import PolicyFile
from ctxpolicy.policy.schemacheck import Check, Unsupported, compile_schema

if TYPE_CHECKING:  # pragma: no cover
    from jsonschema.exceptions import ValidationError

    from ctxpolicy.plugins import Kind, Registry

__all__ = [
    "COMPONENT_SLOTS",
    "DRAFT",
    "REGENERATE",
    "SCHEMA_CODES",
    "SCHEMA_ID",
    "ComponentSlot",
    "build_schema",
    "dedupe",
    "dumps",
    "schema_diagnostics",
    "schema_text",
]

SCHEMA_ID = "https://ctxpolicy.dev/schema/v1/ctxpolicy.schema.json"
DRAFT = "http://json-schema.org/draft-07/schema#"
#: The command that rewrites the committed schema and docs/policy-reference.md.
REGENERATE = "make schema  (or: ctxpolicy schema > schemas/ctxpolicy.schema.json)"

_REF_PREFIX = "#/definitions/"


@dataclass(frozen=True)
class ComponentSlot:
    """A place in a policy file that names a component of a registry kind: the JSON
    Schema folds the component's ``Options`` into it, the reference docs list the
    kind's built-in components under it."""

    kind: Kind
    #: where a policy names it, for the reference docs ("" when said by the slot before)
    named_in: str
    #: the pydantic model holding the field (None: a slot the schema does not check)
    definition: str | None = None
    #: the field naming the component, and the one holding its options
    field: str = ""
    options: str = "options"


#: Every component slot, once, in the order the docs list the kinds.
COMPONENT_SLOTS: tuple[ComponentSlot, ...] = (
    ComponentSlot("layer", "`pipeline[].layer`", "PipelineStep", "layer"),
    ComponentSlot("layer", "`on_overflow.layer`", "OverflowStep", "layer"),
    ComponentSlot("preprocessor", "`tools.<glob>.preprocess`", "ToolRule", "preprocess"),
    ComponentSlot("preprocessor", "", "PreprocessStep", "name"),
    ComponentSlot("summarizer", "`options.summarizer` of the `summarize` layer"),
    ComponentSlot("tokenizer", "entries of `model.tokenizer`"),
    ComponentSlot("snapshot_store", "`snapshots.store`", "Snapshots", "store"),
    ComponentSlot("state_store", "`state.store`", "StateSpec", "store"),
)


#: Diagnostic codes of schema errors, by JSON Schema keyword. They are the codes
#: the pydantic-based loader uses for the same kind of problem (CTX1xx, see
#: docs/diagnostics.md), so that a problem found by both is reported once
#: (see :func:`dedupe`).
UNKNOWN_KEY = "CTX101"
WRONG_VALUE = "CTX103"
MISSING_KEY = "CTX104"
FORMAT_VERSION = "CTX105"
NOT_ALLOWED = "CTX106"
SCHEMA_CODES: dict[str, tuple[Severity, str]] = {
    UNKNOWN_KEY: ("error", "unknown key"),
    WRONG_VALUE: ("error", "wrong type or value out of range"),
    MISSING_KEY: ("error", "missing required key"),
    FORMAT_VERSION: ("error", "missing or unknown format version"),
    NOT_ALLOWED: ("error", "value not one of the allowed names"),
}
for _code, _entry in SCHEMA_CODES.items():
    CODES.setdefault(_code, _entry)

_KEYWORD_CODE: dict[str, str] = {
    "additionalProperties": UNKNOWN_KEY,
    "required": MISSING_KEY,
    "enum": NOT_ALLOWED,
    "const": NOT_ALLOWED,
}


# --------------------------------------------------------------------------- building


def _rewrite_refs(node: Any, rename: Mapping[str, str]) -> Any:
    """Return ``node`` with every ``#/$defs/X`` / ``#/definitions/X`` ref renamed."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                for prefix in ("#/$defs/", _REF_PREFIX):
                    if value.startswith(prefix):
                        name = value[len(prefix) :]
                        value = _REF_PREFIX + rename.get(name, name)
                        break
                out[key] = value
            else:
                out[key] = _rewrite_refs(value, rename)
        return out
    if isinstance(node, list):
        return [_rewrite_refs(v, rename) for v in node]
    return node


def _model_schema(model: type[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(root schema, definitions) of a pydantic model, refs pointing at ``definitions``."""
    raw = model.model_json_schema(ref_template=_REF_PREFIX + "{model}")
    defs = raw.pop("$defs", {})
    return raw, defs


def _components(registry: Registry, kind: Kind, *, plugins: bool) -> list[tuple[str, type[Any]]]:
    out = []
    for name in registry.names(kind):
        provider = registry.plugin_of(kind, name)
        info = registry.plugins.get(provider) if provider else None
        if not plugins and not (info is not None and info.builtin):
            continue
        out.append((name, registry.components[kind][name]))
    return out


def _options_schema(kind: Kind, name: str, cls: type[Any], definitions: dict[str, Any]) -> str:
    """Add the component's Options schema to ``definitions``; return its definition name."""
    options_model = getattr(cls, "Options", None)
    from ctxpolicy.plugins import KIND_BASES

    # named after the kind's base class (Layer_drop_rounds_Options, SnapshotStore_…)
    root_name = f"{KIND_BASES[kind].__name__}_{name}_Options"
    if options_model is None or not hasattr(options_model, "model_json_schema"):
        definitions[root_name] = {"type": "object"}
        return root_name
    root, defs = _model_schema(options_model)
    rename = {d: f"{root_name}__{d}" for d in defs}
    for d, sub in defs.items():
        definitions[rename[d]] = _rewrite_refs(sub, rename)
    root = _rewrite_refs(root, rename)
    description = getattr(cls, "description", "") or root.get("description")
    root["title"] = f"Options of {kind.replace('_', ' ')} {name!r}"
    if description:
        root["description"] = description
    definitions[root_name] = root
    return root_name


_NULL = {"type": "null"}
_META = ("title", "description", "default", "examples")


def _nullable(prop: Mapping[str, Any]) -> dict[str, Any]:
    """``prop`` or null (``null`` deletes an inherited key in ``extends``)."""
    if prop.get("type") == "null" or _NULL in prop.get("anyOf", []):
        return dict(prop)
    meta = {k: prop[k] for k in _META if k in prop}
    core = {k: v for k, v in prop.items() if k not in _META}
    if "anyOf" in core and len(core) == 1:
        return {**meta, "anyOf": [*core["anyOf"], _NULL]}
    return {**meta, "anyOf": [core, _NULL]}


def _allow_null_deletes(definitions: dict[str, Any]) -> None:
    """Let every mapping value inside a policy be ``null`` (the DSL's "delete")."""
    for name, sub in definitions.items():
        if name == "ModelSpec" or not isinstance(sub, dict):
            continue
        props = sub.get("properties")
        if isinstance(props, dict):
            sub["properties"] = {k: _nullable(v) for k, v in props.items()}
    agent = definitions.get("AgentPolicy", {})
    for key in ("tools",):
        prop = agent.get("properties", {}).get(key, {})
        for branch in [prop, *prop.get("anyOf", [])]:
            extra = branch.get("additionalProperties")
            if isinstance(extra, dict):
                branch["additionalProperties"] = _nullable(extra)


def build_schema(
    *, plugins: bool = False, registry: Registry | None = None, null_deletes: bool = True
) -> dict[str, Any]:
    """The JSON Schema of policy files.

    ``plugins=False`` includes only built-in components (what is committed);
    ``plugins=True`` adds every loaded third-party plugin. ``registry`` defaults to
    :func:`ctxpolicy.plugins.get_registry`. ``null_deletes`` lets mapping values
    inside policies be ``null``, which deletes an inherited key under ``extends``
    (the docs generator turns it off to show the plain types).
    """
    if registry is None:
        from ctxpolicy.plugins import get_registry

        registry = get_registry()
    root, definitions = _model_schema(PolicyFile)
    for slot in COMPONENT_SLOTS:
        if slot.definition is None:
            continue
        kind, field_name, options_field = slot.kind, slot.field, slot.options
        target = definitions.get(slot.definition)
        if target is None:  # pragma: no cover - a model was renamed
            continue
        comps = _components(registry, kind, plugins=plugins)
        name_schema = target.get("properties", {}).get(field_name)
        if name_schema is not None and comps:
            name_schema["examples"] = [n for n, _ in comps]
        default = name_schema.get("default") if name_schema else None
        rules = []
        for name, cls in comps:
            options_def = _options_schema(kind, name, cls, definitions)
            cond: dict[str, Any] = {"properties": {field_name: {"const": name}}}
            if name != default:  # an omitted field means the default component
                cond["required"] = [field_name]
            rules.append(
                {
                    "if": cond,
                    "then": {"properties": {options_field: {"$ref": _REF_PREFIX + options_def}}},
                }
            )
        if rules:
            target["allOf"] = rules
    if null_deletes:
        _allow_null_deletes(definitions)
    schema: dict[str, Any] = {
        "$schema": DRAFT,
        "$id": SCHEMA_ID,
        **root,
        "definitions": definitions,
    }
    schema["title"] = "ctxpolicy policy file"
    schema["description"] = (
        "Context-window policies for LLM agents (ctxpolicy format version 1). "
        f"Generated from ctxpolicy.policy.models; regenerate with: {REGENERATE}."
    )
    return schema


def dumps(schema: Mapping[str, Any]) -> str:
    """Stable text form: sorted keys, two-space indent, trailing newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def schema_text(*, plugins: bool = False, registry: Registry | None = None) -> str:
    """What ``ctxpolicy schema [--plugins]`` prints."""
    return dumps(build_schema(plugins=plugins, registry=registry))


# --------------------------------------------------------------------------- validation


@lru_cache(maxsize=4)
def _cached_schema(plugins: bool) -> dict[str, Any]:
    return build_schema(plugins=plugins)


@lru_cache(maxsize=4)
def _cached_validator(plugins: bool) -> Any:
    from jsonschema.validators import Draft7Validator

    return Draft7Validator(_cached_schema(plugins))


@lru_cache(maxsize=4)
def _cached_check(plugins: bool) -> Check | None:
    """The compiled yes/no check of the schema, or None when it cannot be compiled."""
    try:
        return compile_schema(_cached_schema(plugins))
    except Unsupported:  # pragma: no cover - the generated schema is supported
        return None


def clear_cache() -> None:
    """Forget the cached schema and validators (after plugins change)."""
    _cached_schema.cache_clear()
    _cached_validator.cache_clear()
    _cached_check.cache_clear()


def _position(doc: Any, path: tuple[Any, ...]) -> tuple[int, int]:
    """Line/column of ``path`` in ``doc``, falling back to the nearest known parent."""
    source_map = getattr(doc, "source_map", None)
    if source_map is None:
        return (1, 1)
    p = tuple(path)
    while True:
        try:
            pos = source_map.position(p)
        except Exception:
            pos = None
        if pos:
            line, col = pos
            return (max(int(line), 1), max(int(col), 1))
        if not p:
            return (1, 1)
        p = p[:-1]


def _json_path(path: Iterable[Any]) -> str:
    parts = []
    for p in path:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(f".{p}" if parts else str(p))
    return "".join(parts) or "(top level)"


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _leaf_errors(error: ValidationError, depth: int = 0) -> list[ValidationError]:
    """The errors to report for one top-level error.

    For anyOf/oneOf: when only one branch is not the ``null`` "delete this key"
    branch, every error of that branch (recursively); otherwise the most relevant
    branch error (``best_match``) of the branches that got furthest: a branch whose
    type matched and failed deeper (``tool_growth: {learn: {quantile: 1.5}}``) says
    more than "expected integer" from a branch of another type.
    """
    from jsonschema.exceptions import best_match

    if depth > 32 or error.validator not in ("anyOf", "oneOf") or not error.context:
        return [error]
    context = [e for e in error.context if e.schema != _NULL] or list(error.context)
    branches = {e.schema_path[0] if e.schema_path else None for e in context}
    if len(branches) == 1:
        return [leaf for e in context for leaf in _leaf_errors(e, depth + 1)]
    here = len(error.absolute_path)
    deeper = [e for e in context if len(e.absolute_path) > here]
    context = deeper or [e for e in context if e.validator != "type"] or context
    best = best_match(context)
    return [error] if best is None else _leaf_errors(best, depth + 1)


def _iter_schema_diagnostics(
    doc: Any, errors: Iterable[ValidationError], dropped_parents: set[tuple[Any, ...]]
) -> Iterator[Diagnostic]:
    file = str(getattr(doc, "path", "") or "<input>")
    for error in (leaf for raw in errors for leaf in _leaf_errors(raw)):
        path = tuple(error.absolute_path)
        if error.validator == "required" and path in dropped_parents:
            continue
        where = _json_path(path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            sub = error.schema if isinstance(error.schema, Mapping) else {}
            allowed = sorted(sub.get("properties", {}))
            extras = sorted(k for k in error.instance if k not in allowed)
            for key in extras:
                line, col = _position(doc, (*path, key))
                close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                hint = (
                    f"did you mean {close[0]!r}?"
                    if close
                    else (f"allowed keys: {', '.join(allowed)}" if allowed else None)
                )
                yield Diagnostic(
                    file,
                    line,
                    col,
                    UNKNOWN_KEY,
                    "error",
                    f"unknown key {key!r} in {where}",
                    hint,
                )
            if extras:
                continue
        keyword = str(error.validator)
        code = _KEYWORD_CODE.get(keyword, WRONG_VALUE)
        if path == ("ctxpolicy",) or (keyword == "required" and "ctxpolicy" in str(error.message)):
            code = FORMAT_VERSION
        line, col = _position(doc, path)
        hint = None
        if keyword == "required":
            message = f"{where}: {error.message}"
        elif keyword in ("enum", "const"):
            value: Any = error.validator_value
            allowed_values = [value] if keyword == "const" else list(value)
            message = f"{where}: {_short(error.instance)} is not allowed"
            hint = "allowed: " + ", ".join(_short(v) for v in allowed_values)
        elif keyword == "type":
            message = f"{where}: expected {error.validator_value}, got {_short(error.instance)}"
        else:
            message = f"{where}: {error.message}"
        yield Diagnostic(file, line, col, code, "error", message, hint)


def schema_diagnostics(
    doc: Any, *, plugins: bool = True, schema: Mapping[str, Any] | None = None
) -> list[Diagnostic]:
    """Validate a loaded native policy document against the JSON Schema.

    ``doc`` is a :class:`ctxpolicy.policy.load.LoadedDocument` (``path``, ``data``,
    ``source_map``). Compat formats (DB-GPT TOML, CompressionConfig YAML) are not native and yield no
    schema diagnostics: the compat readers check them. ``plugins`` selects the schema
    with third-party component options (the default, so that a plugin's options are
    checked too); ``schema`` overrides it (tests).
    """
    data = getattr(doc, "data", None)
    if not isinstance(data, dict) or not _is_native(data):
        return []
    if schema is not None:
        from jsonschema.validators import Draft7Validator

        validator = Draft7Validator(schema)
    else:
        # Most files are valid: answer that without importing jsonschema; only a file
        # that fails the check pays for the full validator and its messages.
        check = _cached_check(plugins)
        try:
            if check is not None and check(data):
                return []
        except Exception:  # pragma: no cover - odd values: let jsonschema judge them
            pass
        validator = _cached_validator(plugins)
    # a key the loader left out (an out-of-range number, already reported) is not missing
    dropped_parents = {p[:-1] for p in getattr(doc, "dropped", ())}
    errors = sorted(
        validator.iter_errors(data),
        key=lambda e: (list(map(str, e.absolute_path)), str(e.validator)),
    )
    return sorted(set(_iter_schema_diagnostics(doc, errors, dropped_parents)))


def _is_native(data: Mapping[str, Any]) -> bool:
    if "ctxpolicy" in data:
        return True
    try:
        from ctxpolicy.policy.compat import detect_format
    except ImportError:  # compat reader not available: only `ctxpolicy:` marks native
        return "policies" in data
    try:
        return detect_format(dict(data)) == "native"
    except Exception:
        return False


def dedupe(primary: Iterable[Diagnostic], schema: Iterable[Diagnostic] = ()) -> list[Diagnostic]:
    """Merge loader (``primary``) and schema diagnostics, reporting each problem once.

    Every primary diagnostic is kept (exact duplicates removed). A schema diagnostic
    is dropped when a primary one has the same position and code, or when a primary
    error sits at the same position: the pydantic/semantic message is preferred.
    The result is sorted.
    """
    kept = sorted(set(primary))
    same_code = {(d.file, d.line, d.col, d.code) for d in kept}
    same_pos = {(d.file, d.line, d.col) for d in kept if d.severity == "error"}
    out = list(kept)
    for d in sorted(set(schema)):
        if (d.file, d.line, d.col, d.code) in same_code or (d.file, d.line, d.col) in same_pos:
            continue
        same_code.add((d.file, d.line, d.col, d.code))
        out.append(d)
    return sorted(out)
