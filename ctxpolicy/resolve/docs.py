"""Generate docs/policy-reference.md from the models and the built-in components.

Run as ``python -m ctxpolicy.resolve.docs > docs/policy-reference.md`` (``make
schema`` does it together with the JSON Schema). Every section of the DSL gets a
table of its fields (type, default, constraints, description), read from the
same JSON Schema that ``ctxpolicy schema`` publishes, so the reference cannot
drift from the code; a test checks the committed file is fresh.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ctxpolicy.resolve.schema import COMPONENT_SLOTS, REGENERATE, build_schema

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.plugins import Registry

__all__ = ["main", "render_reference"]

_REF = "#/definitions/"
#: Where each definition sits in a policy file (for section headings).
_WHERE: dict[str, str] = {
    "PolicyFile": "top level",
    "ModelSpec": "`models.<name>` or `policies.<agent>.model`",
    "AgentPolicy": "`policies.<agent>`",
    "Budget": "`policies.<agent>.budget`",
    "ToolGrowth": "`policies.<agent>.budget.tool_growth`",
    "LearnSpec": "`policies.<agent>.budget.tool_growth.learn`",
    "Thresholds": "`policies.<agent>.thresholds`",
    "PipelineStep": "`policies.<agent>.pipeline[]`",
    "OverflowStep": "`policies.<agent>.on_overflow`",
    "ToolRule": "`policies.<agent>.tools.<glob>`",
    "PreprocessStep": "`policies.<agent>.tools.<glob>.preprocess[]`",
    "Snapshots": "`policies.<agent>.snapshots`",
    "Pinned": "`policies.<agent>.pinned`",
    "Ledger": "`policies.<agent>.ledger`",
    "CacheSpec": "`policies.<agent>.cache`",
    "StateSpec": "`policies.<agent>.state`",
    "TuneSpec": "`policies.<agent>.tune`",
    "TuneObjectives": "`policies.<agent>.tune.objectives`",
    "TuneRange": "`policies.<agent>.tune.space.<path>`",
}
_PERCENT_PATTERN = r"^\s*\d+(\.\d+)?\s*%\s*$"
_CONSTRAINTS: tuple[tuple[str, str], ...] = (
    ("exclusiveMinimum", "> {}"),
    ("minimum", "≥ {}"),
    ("exclusiveMaximum", "< {}"),
    ("maximum", "≤ {}"),
    ("minLength", "length ≥ {}"),
    ("maxLength", "length ≤ {}"),
    ("minItems", "≥ {} items"),
    ("maxItems", "≤ {} items"),
    ("pattern", "matches `{}`"),
)


def _anchor(name: str) -> str:
    return name.lower()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def _value(value: Any) -> str:
    return "`" + json.dumps(value, ensure_ascii=False) + "`"


def _type(schema: Mapping[str, Any], local: set[str]) -> str:
    """A short type name for a schema (links to sections for referenced models)."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(_REF)
        return f"[{name}](#{_anchor(name)})" if name in local else name
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(dict.fromkeys(_type(s, local) for s in schema[key]))
    if "const" in schema:
        return _value(schema["const"])
    if "enum" in schema:
        return " \\| ".join(_value(v) for v in schema["enum"])
    t = schema.get("type")
    if t == "array":
        return f"list of {_type(schema.get('items', {}), local)}"
    if t == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return f"map of string → {_type(extra, local)}"
        return "object"
    if t == "null":
        return "null"
    if isinstance(t, list):
        return " or ".join(str(x) for x in t)
    return str(t) if t else "any"


def _constraints(schema: Mapping[str, Any]) -> list[str]:
    out = []
    for branch in schema.get("anyOf", schema.get("oneOf", [schema])):
        found = [
            'a percentage such as `"25%"`'
            if k == "pattern" and branch[k] == _PERCENT_PATTERN
            else fmt.format(branch[k])
            for k, fmt in _CONSTRAINTS
            if k in branch
        ]
        if found:
            prefix = f"{branch.get('type', '')}: " if "anyOf" in schema or "oneOf" in schema else ""
            out.append(prefix + ", ".join(found))
    return out


def _default(schema: Mapping[str, Any], required: bool) -> str:
    if required:
        return "*required*"
    if "default" in schema:
        return _value(schema["default"])
    if "$ref" in schema:
        return "*(see section)*"
    if schema.get("type") == "array":
        return "`[]`"
    if schema.get("type") == "object":
        return "`{}`"
    return "—"


def _fields_table(schema: Mapping[str, Any], local: set[str]) -> Iterator[str]:
    props: Mapping[str, Any] = schema.get("properties", {})
    if not props:
        yield "*No options.*"
        return
    required = set(schema.get("required", []))
    yield "| Field | Type | Default | Constraints | Description |"
    yield "|---|---|---|---|---|"
    for name, prop in props.items():
        yield (
            f"| `{name}` | {_cell(_type(prop, local))} | {_cell(_default(prop, name in required))} "
            f"| {_cell('; '.join(_constraints(prop)))} | {_cell(prop.get('description', ''))} |"
        )


def _model_order(schema: Mapping[str, Any]) -> list[str]:
    """Definitions in the order a reader meets them, from the top level down."""
    defs = schema["definitions"]
    order: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(_REF):
                name = ref.removeprefix(_REF)
                if name not in order and name in _WHERE:
                    order.append(name)
                    visit(defs[name].get("properties", {}))
            for key, value in node.items():
                if key not in ("allOf",):
                    visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema.get("properties", {}))
    return order


def _components(registry: Registry, kind: str) -> list[tuple[str, type[Any]]]:
    out = []
    for name in registry.names(kind):  # type: ignore[arg-type]
        provider = registry.plugin_of(kind, name)  # type: ignore[arg-type]
        info = registry.plugins.get(provider) if provider else None
        if info is not None and info.builtin:
            out.append((name, registry.components[kind][name]))  # type: ignore[index]
    return out


def render_reference(registry: Registry | None = None) -> str:
    """The whole of docs/policy-reference.md."""
    if registry is None:
        from ctxpolicy.plugins import get_registry

        registry = get_registry()
    schema = build_schema(plugins=False, registry=registry, null_deletes=False)
    defs = schema["definitions"]
    order = _model_order(schema)
    local = set(order) | {"PolicyFile"}
    lines = [
        "<!-- Generated by `python -m ctxpolicy.resolve.docs`; do not edit.",
        f"     Regenerate with: {REGENERATE}. -->",
        "",
        "# Policy file reference",
        "",
        "A policy file is YAML or TOML (the same tree). Start it with the editor modeline",
        "so that completion and checking work while you type:",
        "",
        "```yaml",
        "# yaml-language-server: $schema=../schemas/ctxpolicy.schema.json",
        "ctxpolicy: 1",
        "```",
        "",
        "```toml",
        "#:schema ../schemas/ctxpolicy.schema.json",
        "ctxpolicy = 1",
        "```",
        "",
        "Unknown keys are errors (with a did-you-mean hint), never ignored. Amounts of",
        'tokens are integers or a share of the window such as `"25%"`. `${NAME}`,',
        "`${NAME:-default}` and `${env:NAME}` are interpolated from the environment.",
        "`extends` deep-merges one agent's policy over another's: maps merge, lists",
        "replace, `null` deletes a key.",
        "",
        "## Contents",
        "",
        f"- [PolicyFile](#{_anchor('PolicyFile')}) — top level",
    ]
    lines += [f"- [{name}](#{_anchor(name)}) — {_WHERE[name]}" for name in order]
    lines.append("- [Built-in models](#built-in-models)")
    lines.append("- [Built-in components](#built-in-components)")
    lines.append("")

    sections = [("PolicyFile", schema), *((name, defs[name]) for name in order)]
    for name, sub in sections:
        lines += [f"## {name}", "", f"*Where:* {_WHERE.get(name, '')}", ""]
        description = sub.get("description", "")
        if name == "PolicyFile":
            from ctxpolicy.policy.models import PolicyFile

            description = (PolicyFile.__doc__ or "").strip()
        if description:
            lines += [description, ""]
        lines += list(_fields_table(sub, local))
        lines.append("")

    lines += list(_models_section())
    lines += [
        "## Built-in components",
        "",
        "Components are named in the policy and resolved only through the plugin",
        "registry (`ctxpolicy plugins` lists what is installed; third-party options are",
        "in `ctxpolicy schema --plugins`). Each component validates its `options` with",
        "its own model:",
        "",
    ]
    for kind in dict.fromkeys(slot.kind for slot in COMPONENT_SLOTS):
        title = kind.replace("_", " ").capitalize() + "s"
        where = " / ".join(s.named_in for s in COMPONENT_SLOTS if s.kind == kind and s.named_in)
        comps = _components(registry, kind)
        lines += [f"### {title}", "", f"*Named in:* {where}", ""]
        if not comps:
            lines += ["*None built in.*", ""]
            continue
        for cname, cls in comps:
            lines += [f"#### `{cname}`", ""]
            desc = (getattr(cls, "description", "") or "").strip()
            if desc:
                lines += [desc, ""]
            options = getattr(cls, "Options", None)
            if options is None or not hasattr(options, "model_json_schema"):
                lines += ["*No options.*", ""]
                continue
            opt_schema = options.model_json_schema(ref_template=_REF + "{model}")
            lines += list(_fields_table(opt_schema, set()))
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _models_section() -> Iterator[str]:
    """The built-in model catalogue, with the tokenizer each resolves to by name."""
    from ctxpolicy.policy.catalogue import builtin_models
    from ctxpolicy.tokens import encoding_for_model

    yield from (
        "## Built-in models",
        "",
        "*Named in:* `policies.<agent>.model` (without a `models:` entry)",
        "",
        "A policy can name these models without defining them; a `models:` entry of the",
        "same name (in the file or one it includes) wins. Data: `ctxpolicy/data/models.json`.",
        "The tokenizer is derived from the provider's model id (`ctxpolicy explain` shows",
        "the one actually loaded); *approximate* means the provider publishes no tokenizer",
        "and the closest public vocabulary is used, so keep a `safety_margin`.",
        "",
        "| model | provider id | context_window | max_output_tokens | tokenizer |",
        "| --- | --- | ---: | ---: | --- |",
    )
    for key, spec in builtin_models().items():
        provider_id = spec.get("name") or key
        enc, exact = encoding_for_model(provider_id)
        tok = f"`{enc}`" + ("" if exact else " (approximate)")
        yield (
            f"| `{key}` | `{provider_id}` | {spec['context_window']:,} | "
            f"{spec.get('max_output_tokens') or '—':,} | {tok} |"
        )
    yield ""


def main() -> None:
    import sys

    sys.stdout.write(render_reference())


if __name__ == "__main__":  # pragma: no cover
    main()
