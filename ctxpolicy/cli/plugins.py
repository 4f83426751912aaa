"""``ctxpolicy plugins [--json]``: what is loaded, from where, providing what."""

from __future__ import annotations

import json
from typing import Any

import click

__all__ = ["plugins", "plugins_report"]


def plugins_report() -> dict[str, Any]:
    """Plugins, versions, components and problems, from :func:`get_registry`."""
    from ctxpolicy.plugins import get_registry

    reg = get_registry()
    out_plugins = []
    for name in sorted(reg.plugins):
        info = reg.plugins[name]
        components: dict[str, list[dict[str, Any]]] = {}
        for kind, names in sorted(info.components.items()):
            entries = []
            for cname in sorted(names):
                cls = reg.get(kind, cname)  # type: ignore[arg-type]
                entries.append(
                    {
                        "name": cname,
                        "description": getattr(cls, "description", "") or "",
                        "options": sorted(
                            getattr(getattr(cls, "Options", None), "model_fields", {}) or {}
                        ),
                    }
                )
            components[kind] = entries
        out_plugins.append(
            {
                "name": info.name,
                "module": info.module,
                "distribution": info.distribution,
                "version": info.version,
                "builtin": info.builtin,
                "components": components,
            }
        )
    return {
        "plugins": out_plugins,
        "components": {kind: reg.names(kind) for kind in sorted(reg.components)},
        "problems": [
            {"plugin": p.plugin, "distribution": p.distribution, "message": p.message}
            for p in reg.problems
        ],
    }


@click.command(name="plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a listing.")
@click.pass_context
def plugins(ctx: click.Context, as_json: bool) -> None:
    """List loaded plugins, their versions, the components they provide, and problems.

    Exit 1 when a plugin failed to load or register (it is named in the output).
    """
    report = plugins_report()
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        for p in report["plugins"]:
            origin = "built-in" if p["builtin"] else (p["distribution"] or p["module"])
            version = p["version"] or "?"
            click.echo(f"{p['name']} {version} ({origin})")
            for kind, entries in p["components"].items():
                for e in entries:
                    desc = f" — {e['description']}" if e["description"] else ""
                    click.echo(f"    {kind} {e['name']}{desc}")
        if not report["plugins"]:
            click.echo("no plugins loaded")
        for prob in report["problems"]:
            dist = f" (distribution {prob['distribution']})" if prob["distribution"] else ""
            click.echo(f"problem: plugin {prob['plugin']!r}{dist}: {prob['message']}", err=True)
    ctx.exit(1 if report["problems"] else 0)
