"""``ctxpolicy init-plugin NAME [--dir DIR]``: write a ready plugin package.

The skeleton has a pyproject.toml with the ``ctxpolicy`` entry point, a layer and
its typed options, tests that run the conformance suite, and a README. Its tests
pass as generated (``python -m pytest`` inside it, after ``pip install -e .`` or
with the package on ``PYTHONPATH``).
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from string import Template

import click

__all__ = ["init_plugin", "names_for", "render_files"]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


def taken_layer_names() -> set[str]:
    """Layer names already registered (built-in and installed plugins)."""
    from ctxpolicy.plugins import get_registry

    return set(get_registry().names("layer"))


def names_for(
    name: str, layer: str | None = None, *, taken: set[str] | None = None
) -> dict[str, str]:
    """Distribution, package, plugin, layer and class names derived from ``name``.

    A layer name derived from ``name`` that is already ``taken`` (``summarize`` is a
    built-in layer) becomes ``<name>_custom``, so the generated plugin never clashes;
    an explicit ``layer`` that is taken is an error.
    """
    if not _NAME.match(name):
        raise click.BadParameter(
            "use letters, digits, '-', '_' or '.', starting with a letter", param_hint="NAME"
        )
    slug = re.sub(r"[-_.]+", "-", name.lower()).strip("-")
    short = slug.removeprefix("ctxpolicy-") or slug
    dist = slug if slug.startswith("ctxpolicy-") else f"ctxpolicy-{slug}"
    package = dist.replace("-", "_")
    layer_name = layer or short.replace("-", "_")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", layer_name) or keyword.iskeyword(layer_name):
        raise click.BadParameter(f"{layer_name!r} is not a valid layer name", param_hint="--layer")
    taken = taken_layer_names() if taken is None else taken
    if layer_name in taken:
        if layer is not None:
            raise click.BadParameter(
                f"a layer named {layer_name!r} is already registered (built in or installed); "
                "choose another name",
                param_hint="--layer",
            )
        layer_name = f"{layer_name}_custom"
        while layer_name in taken:
            layer_name += "_"
    cls = "".join(part.capitalize() for part in layer_name.split("_")) or "MyLayer"
    return {
        "dist": dist,
        "package": package,
        "plugin": package,
        "layer": layer_name,
        "cls": cls,
    }


PYPROJECT = Template("""\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "A ctxpolicy plugin providing the $layer compaction layer."
readme = "README.md"
requires-python = ">=3.11"
# ctxpolicy is not on a package index yet: install it first (see README.md,
# "Develop"), then this requirement is met by the ctxpolicy already installed.
dependencies = ["ctxpolicy>=0.1"]

[project.optional-dependencies]
test = ["pytest>=8", "hypothesis>=6.100"]

# ctxpolicy loads every entry point of this group; the name on the left is the
# plugin name shown by `ctxpolicy plugins` and selected by CTXPOLICY_PLUGINS.
[project.entry-points.ctxpolicy]
$plugin = "$package"

[tool.setuptools]
packages = ["$package"]

[tool.pytest.ini_options]
testpaths = ["tests"]
""")

INIT = Template('''\
"""$dist: a ctxpolicy plugin providing the ``$layer`` layer."""

from __future__ import annotations

from collections.abc import Callable

from ctxpolicy import hookimpl
from $package.layer import $cls, ${cls}Options

__all__ = ["$cls", "${cls}Options"]
__version__ = "0.1.0"


@hookimpl
def ctxpolicy_register_layers(register: Callable[[type], None]) -> None:
    register($cls)
''')

LAYER = Template('''\
"""The ``$layer`` layer.

Replace this with your own compaction. As generated, it truncates the tool results
of rounds older than ``keep_recent_rounds`` to ``max_chars`` characters (head and
tail kept), oldest round first, until the context fits ``ctx.target``.

Rules every layer follows (the engine checks them, the conformance suite tests
them): return units in order, never split a unit, keep pinned units unchanged,
never mutate the input, be deterministic, never return more tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from ctxpolicy import CompactionContext, ComponentOptions, Layer, LayerResult, Unit

MARKER = "\\n[… {n} characters removed by $layer …]\\n"


class ${cls}Options(ComponentOptions):
    """Options of ``$layer`` (validated from the policy file; part of its schema)."""

    keep_recent_rounds: int = Field(default=2, ge=0, description="Newest rounds left intact.")
    max_chars: int = Field(default=300, ge=50, description="Characters kept of an old tool result.")


class $cls(Layer):
    name = "$layer"
    description = "Truncate the tool results of old rounds."
    Options = ${cls}Options
    options: ${cls}Options

    def shorten(self, text: str) -> str:
        limit = self.options.max_chars
        marker = MARKER.format(n=len(text) - limit)
        if len(text) <= limit + len(marker):
            return text
        head = limit * 2 // 3
        return text[:head] + marker + text[len(text) - (limit - head) :]

    def trimmed(self, unit: Unit) -> Unit:
        messages = []
        for m in unit.messages:
            content = m.get("content")
            if m.get("role") == "tool" and isinstance(content, str):
                m = {**m, "content": self.shorten(content)}  # a new dict: never mutate
            messages.append(m)
        return unit.replace(messages=messages)

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        out = list(units)
        steps = [i for i, u in enumerate(out) if u.kind == "step" and not u.pinned]
        old = steps[: max(0, len(steps) - self.options.keep_recent_rounds)]
        trimmed = 0
        for i in old:
            if ctx.count(out) <= ctx.target:
                break
            new = self.trimmed(out[i])
            if new.messages != out[i].messages:
                out[i] = new
                trimmed += 1
        return LayerResult(units=out, report={"trimmed_rounds": trimmed})
''')

TEST = Template('''\
"""Tests of the ``$layer`` layer, including ctxpolicy's conformance suite."""

from __future__ import annotations

import $package
from $package import $cls

from ctxpolicy.conversation import to_units
from ctxpolicy.testing import conformance

# Registers the plugin when it was not found through its entry point (not installed).
conformance.ensure_registered($package)

# The whole ctxpolicy layer conformance suite, in one line.
Test${cls}Conformance = conformance.layer_suite("$layer")


def test_old_results_are_trimmed_recent_ones_kept(make_conversation) -> None:
    messages = make_conversation(8, seed=1, big_outputs=1.0)
    units, _ = to_units(messages)
    _, result = conformance.run_layer($cls, {"keep_recent_rounds": 2}, units, target_ratio=0.0)
    steps = [u for u in result.units if u.kind == "step"]
    assert result.report["trimmed_rounds"] > 0
    assert any("removed by $layer" in m["content"] for u in steps[:-3] for m in u.tool_messages)
    for u in steps[-2:]:
        assert all("removed by $layer" not in m["content"] for m in u.tool_messages)


def test_nothing_to_do_under_target(make_conversation) -> None:
    units, _ = to_units(make_conversation(4, seed=2))
    _, result = conformance.run_layer($cls, None, units, target_ratio=10.0)
    assert result.units == list(units)
''')

README = Template("""\
# $dist

A [ctxpolicy]($project_url) plugin providing the `$layer` compaction layer.

## Use

ctxpolicy is not on a package index yet: install it first, from its git URL (or
`pip install /path/to/your/ctxpolicy/clone`), then this plugin beside it:

```console
pip install 'ctxpolicy @ git+$project_url'
pip install .
```

Once ctxpolicy and this plugin are published, `pip install $dist` alone will do.

```yaml
ctxpolicy: 1
policies:
  default:
    model: gpt-4o
    pipeline:
      - {layer: $layer, at: warning, options: {keep_recent_rounds: 2, max_chars: 300}}
```

`ctxpolicy plugins` lists it; `ctxpolicy schema --plugins` includes its options.

## Develop

```console
pip install 'ctxpolicy @ git+$project_url'   # or your clone of it
pip install -e '.[test]'
python -m pytest
```

The plugin's `ctxpolicy>=0.1` requirement is met by the ctxpolicy installed first.

The tests include ctxpolicy's conformance suite
(`conformance.layer_suite("$layer")`, with `samples=` for conversations of your
agents' domain). Publish with `python -m build` and `twine upload dist/*`. See
[writing a plugin]($project_url/blob/main/docs/plugins.md).
""")

#: Where ctxpolicy lives: the links of generated files point here, never at a local path.
PROJECT_URL = "https://github.com/ctxpolicy/ctxpolicy"


def ctxpolicy_source() -> str:
    """What to ``pip install`` to get the ctxpolicy running now (see
    :func:`ctxpolicy._install.source`)."""
    from ctxpolicy._install import source

    return source()


def render_files(names: dict[str, str]) -> dict[str, str]:
    """Relative path -> content of every file of the skeleton."""
    pkg = names["package"]
    return {
        "pyproject.toml": PYPROJECT.substitute(names),
        "README.md": README.substitute(names, project_url=PROJECT_URL),
        f"{pkg}/__init__.py": INIT.substitute(names),
        f"{pkg}/layer.py": LAYER.substitute(names),
        "tests/test_layer.py": TEST.substitute(names),
    }


@click.command(name="init-plugin")
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Where to create the package directory.",
)
@click.option(
    "--layer", "layer", default=None, metavar="NAME", help="Layer name (default: from NAME)."
)
@click.option("--force", is_flag=True, help="Overwrite files of an existing skeleton.")
def init_plugin(name: str, directory: Path, layer: str | None, force: bool) -> None:
    """Write a ready plugin package NAME (a layer, its options, tests, README).

    NAME becomes the distribution ``ctxpolicy-<name>``; the package directory is
    created under --dir. Then: ``pip install -e '.[test]' && python -m pytest``.
    """
    names = names_for(name, layer)
    root = directory / names["dist"]
    files = render_files(names)
    existing = [rel for rel in files if (root / rel).exists()]
    if existing and not force:
        click.echo(
            f"ctxpolicy init-plugin: {root} already has {', '.join(existing)} (use --force)",
            err=True,
        )
        raise SystemExit(1)
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    click.echo(f"created {root}")
    for rel in files:
        click.echo(f"  {rel}")
    click.echo(f"layer {names['layer']!r} in package {names['package']!r}; next:")
    click.echo(f"  pip install '{ctxpolicy_source()}'   # ctxpolicy first (not on an index yet)")
    click.echo(f"  cd {root} && pip install -e '.[test]' && python -m pytest")
