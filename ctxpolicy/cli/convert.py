"""``ctxpolicy convert FILE --to yaml|toml [-o OUT]``: write the native DSL.

Reads a native policy file or a compat file (DB-GPT's
``[service.web.agent_context]`` TOML, a ``CompressionConfig`` YAML),
converts it with :func:`ctxpolicy.policy.compat.to_native`, and writes the native
tree as YAML or TOML. Values are written as they are in the source: ``${ENV}``
references stay references.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

__all__ = ["convert", "convert_data", "to_toml", "to_yaml"]

SCHEMA_REF = "../schemas/ctxpolicy.schema.json"
_INLINE_MAX = 72
#: Tables whose key order is meaningful.
_ORDERED_TABLES = frozenset({"tools"})
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


# --------------------------------------------------------------------------- YAML


def to_yaml(data: Mapping[str, Any], *, header: str = "") -> str:
    """Block-style YAML (ruamel.yaml), with ``header`` comment lines first."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 100
    yaml.indent(mapping=2, sequence=4, offset=2)
    buf = io.StringIO()
    yaml.dump(_plain(data), buf)
    return header + buf.getvalue()


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- TOML


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        text = repr(value)
        return text if any(c in text for c in ".eE") else text + ".0"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _inline(value: Any) -> str:
    if isinstance(value, Mapping):
        items = [f"{_key(str(k))} = {_inline(v)}" for k, v in value.items() if v is not None]
        return "{" + ", ".join(items) + "}" if items else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_inline(v) for v in value if v is not None) + "]"
    return _scalar(value)


def _is_leaf(value: Any) -> bool:
    if isinstance(value, Mapping):
        return False
    if isinstance(value, list | tuple):
        return all(_is_leaf(v) for v in value)
    return True


def _is_table(value: Any) -> bool:
    """A mapping written as a ``[table]`` (small flat mappings are written inline)."""
    if not isinstance(value, Mapping) or not value:
        return False
    flat = all(_is_leaf(v) for v in value.values())
    return not (flat and len(_inline(value)) <= _INLINE_MAX)


def _is_table_array(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(v, Mapping) for v in value)
    )


def _layout(table: Mapping[str, Any], ordered: bool) -> list[tuple[str, Any, str]]:
    """(key, value, mode) in source order; mode is ``leaf``, ``table`` or ``array``.

    TOML writes a table's plain keys before its sub-tables. Where key order matters
    (``ordered``: the ``tools`` globs, first match wins) and a plain key would move
    ahead of a sub-table, mappings are promoted to tables, or failing that the
    sub-tables are written inline.
    """
    items = []
    for k, v in table.items():
        if v is None:
            continue
        mode = "table" if _is_table(v) else "array" if _is_table_array(v) else "leaf"
        items.append((str(k), v, mode))
    if not ordered:
        return items
    first = next((i for i, it in enumerate(items) if it[2] != "leaf"), len(items))
    items = [
        (k, v, "table" if i > first and m == "leaf" and isinstance(v, Mapping) else m)
        for i, (k, v, m) in enumerate(items)
    ]
    if any(m == "leaf" for _, _, m in items[first:]):
        items = [(k, v, "leaf") for k, v, _ in items]
    return items


def _ordered(path: list[str]) -> bool:
    return bool(path) and path[-1] in _ORDERED_TABLES


def _emit_table(out: list[str], path: list[str], table: Mapping[str, Any]) -> None:
    layout = _layout(table, _ordered(path))
    for k, v, mode in layout:
        if mode == "leaf":
            out.append(f"{_key(k)} = {_inline(v)}")
    for k, v, mode in layout:
        sub = [*path, _key(k)]
        if mode == "table":
            # A table holding only sub-tables needs no header of its own.
            if not v or any(m == "leaf" for _, _, m in _layout(v, _ordered(sub))):
                out.append("")
                out.append(f"[{'.'.join(sub)}]")
            _emit_table(out, sub, v)
        elif mode == "array":
            for item in v:
                out.append("")
                out.append(f"[[{'.'.join(sub)}]]")
                _emit_table(out, sub, item)


def to_toml(data: Mapping[str, Any], *, header: str = "") -> str:
    """TOML text of a JSON-like tree (``None`` values are left out: TOML has no null)."""
    out: list[str] = []
    _emit_table(out, [], data)
    text = "\n".join(out).lstrip("\n")
    return header + text + "\n"


# --------------------------------------------------------------------------- command


def convert_data(path: str) -> tuple[dict[str, Any], str]:
    """(native tree, detected source format) of a policy or compat file.

    Raises :class:`ctxpolicy.policy.diagnostics.PolicyError` when it cannot be read.
    """
    from ctxpolicy.policy.compat import detect_format, to_native
    from ctxpolicy.policy.diagnostics import PolicyError
    from ctxpolicy.policy.load import load_document

    doc, diags = load_document(path)
    errors = [d for d in diags if d.severity == "error"]
    if doc is None or errors:
        raise PolicyError(errors or diags)
    fmt = detect_format(doc.data)
    native = dict(doc.data) if fmt == "native" else to_native(doc.data, fmt)
    return native, fmt


def _header(kind: str, source: str, fmt: str, schema_ref: str) -> str:
    modeline = (
        f"# yaml-language-server: $schema={schema_ref}\n"
        if kind == "yaml"
        else f"#:schema {schema_ref}\n"
    )
    return modeline + f"# Converted by `ctxpolicy convert` from {source} ({fmt} format).\n"


@click.command(name="convert")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--to", "to", type=click.Choice(["yaml", "toml"]), required=True, help="Output syntax."
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write here instead of standard output.",
)
@click.option(
    "--schema-ref",
    default=SCHEMA_REF,
    show_default=True,
    help="Schema path or URL written in the editor modeline.",
)
@click.pass_context
def convert(ctx: click.Context, file: Path, to: str, output: Path | None, schema_ref: str) -> None:
    """Write FILE (native, DB-GPT `agent_context` TOML or `CompressionConfig` YAML) in the native DSL.

    Exit 1 when FILE cannot be read (its diagnostics are printed).
    """
    from ctxpolicy.policy.diagnostics import PolicyError

    try:
        native, fmt = convert_data(str(file))
    except PolicyError as exc:
        for d in exc.diagnostics:
            click.echo(d.format(), err=True)
        ctx.exit(1)
        return
    native.pop("$schema", None)
    header = _header(to, file.name, fmt, schema_ref)
    text = to_yaml(native, header=header) if to == "yaml" else to_toml(native, header=header)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output} ({to}, from {fmt} format)", err=True)
