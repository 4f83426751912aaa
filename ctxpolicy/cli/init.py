"""``ctxpolicy init``: write a commented starter policy, and the schema it names.

The starters are package data (``ctxpolicy/data/starter*.yaml.in``), so ``init`` works
from any install, anywhere: it writes ``policies/agents.yaml`` (the path every example of
the docs loads) and ``schemas/ctxpolicy.schema.json`` (the schema of this install, its
plugins included, which the policy's ``yaml-language-server`` modeline points at), then
checks what it wrote the way ``ctxpolicy validate --strict`` does.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import click

__all__ = ["AGENTS", "DEFAULT_MODELS", "init", "render_starter"]

#: kind -> the agent the starter defines besides ``default``
AGENTS: dict[str, str] = {
    "coding": "coding_agent",
    "support": "support_agent",
    "data": "data_analysis_agent",
    "review": "code_review_agent",
}
#: kind -> the model of the built-in catalogue the starter names unless --model is given
DEFAULT_MODELS: dict[str, str] = {
    "coding": "gpt-4o",
    "support": "gpt-4o-mini",
    "data": "gpt-4o",
    "review": "gpt-4o",
}
POLICY = Path("policies") / "agents.yaml"
SCHEMA = Path("schemas") / "ctxpolicy.schema.json"


def _data(name: str) -> str:
    return resources.files("ctxpolicy").joinpath("data", name).read_text(encoding="utf-8")


def render_starter(kind: str, model: str) -> str:
    """The starter policy of ``kind`` naming ``model`` (a key of the built-in catalogue)."""
    block = _data(f"starter_{kind}.yaml.in").rstrip("\n")
    text = _data("starter.yaml.in")
    for key, value in (
        ("{{agent_block}}", block),
        ("{{agent}}", AGENTS[kind]),
        ("{{kind}}", kind),
        ("{{model}}", model),
    ):
        text = text.replace(key, value)
    return text


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)


@click.command(name="init")
@click.option(
    "--kind",
    type=click.Choice(sorted(AGENTS)),
    default="coding",
    show_default=True,
    help="The agent the starter is tuned for.",
)
@click.option(
    "--model",
    metavar="NAME",
    help="A model of the built-in catalogue (default: gpt-4o, gpt-4o-mini for support).",
)
@click.option("--force", is_flag=True, help="Overwrite files that exist.")
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
def init(kind: str, model: str | None, force: bool, directory: Path) -> None:
    """Write a commented starter policy to DIRECTORY/policies/agents.yaml.

    Also writes DIRECTORY/schemas/ctxpolicy.schema.json, the schema of this install
    (plugins included) that the policy's first line points editors at. Existing
    files are kept unless --force. Exit 0 written, 1 refused, 2 usage error.
    """
    from ctxpolicy.policy.catalogue import builtin_models
    from ctxpolicy.policy.diagnostics import suggestion

    known = builtin_models()
    model = model or DEFAULT_MODELS[kind]
    if model not in known:
        raise click.BadParameter(
            f"{model!r} is not in the built-in catalogue{suggestion(model, list(known))}; "
            f"known: {', '.join(known)}. For another model, start from one of these and "
            "declare yours under `models:` in the file.",
            param_hint="--model",
        )
    policy_path = directory / POLICY
    schema_path = directory / SCHEMA
    present = [p for p in (policy_path, schema_path) if p.exists()]
    if present and not force:
        names = ", ".join(_shown(p) for p in present)
        click.echo(
            f"ctxpolicy init: {names} already exist(s); nothing written "
            "(--force overwrites, or give another DIRECTORY)",
            err=True,
        )
        raise SystemExit(1)
    for p in present:
        if not p.is_file():
            click.echo(f"ctxpolicy init: {_shown(p)} is not a file; nothing written", err=True)
            raise SystemExit(1)

    from ctxpolicy.resolve.schema import schema_text

    text = render_starter(kind, model)
    schema = schema_text(plugins=True)
    try:
        policy_path.parent.mkdir(parents=True, exist_ok=True)
        schema_path.parent.mkdir(parents=True, exist_ok=True)
        policy_path.write_text(text, encoding="utf-8")
        schema_path.write_text(schema, encoding="utf-8")
    except OSError as exc:
        click.echo(f"ctxpolicy init: cannot write: {exc.strerror or exc}", err=True)
        raise SystemExit(2) from None

    from ctxpolicy.resolve.load import validate_file

    diags = validate_file(policy_path, env={})
    agent = AGENTS[kind]
    click.echo(f"wrote {_shown(policy_path)} (agents: default, {agent}; model {model})")
    click.echo(f"wrote {_shown(schema_path)} (the schema its first line points editors at)")
    if diags:  # a starter always validates (a test checks every kind and model)
        for d in diags:
            click.echo(d.format(), err=True)
        raise SystemExit(1)
    where = "" if directory == Path(".") else f"cd {_shown(directory)} && "
    click.echo("next:")
    click.echo(f"  {where}ctxpolicy validate --strict policies/")
    click.echo(f"  ctxpolicy explain policies/agents.yaml --agent {agent}")
    click.echo(f'  ctxpolicy.load_policy("policies/agents.yaml", agent="{agent}")  # in Python')
