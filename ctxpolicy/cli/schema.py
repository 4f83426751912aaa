"""``ctxpolicy schema [--plugins]``: print the JSON Schema of policy files."""

from __future__ import annotations

import click


@click.command(name="schema")
@click.option(
    "--plugins",
    is_flag=True,
    help="Include the options of third-party plugins (default: built-in components only, "
    "which is what schemas/ctxpolicy.schema.json holds).",
)
def schema(plugins: bool) -> None:
    """Print the JSON Schema (draft-07) of policy files.

    Regenerate the committed copy with `make schema`
    (or `ctxpolicy schema > schemas/ctxpolicy.schema.json`).
    """
    from ctxpolicy.resolve.schema import schema_text

    click.echo(schema_text(plugins=plugins), nl=False)
