"""``ctxpolicy validate [PATH...]``: check policy files, for humans and CI.

Every file goes through the loader (parse, pydantic models, extends/env, semantic
checks: :func:`ctxpolicy.resolve.load.validate_file`) and through the JSON Schema
(:func:`ctxpolicy.resolve.schema.schema_diagnostics`); a problem found by both is
reported once. Light on imports on purpose (pre-commit runs it on every commit):
no engine, no tiktoken.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import click

from ctxpolicy.cli.output import FORMATS, Report, render
from ctxpolicy.policy.diagnostics import CODES, Diagnostic

__all__ = ["POLICY_SUFFIXES", "collect_files", "validate", "validate_paths"]

POLICY_SUFFIXES = (".yaml", ".yml", ".toml")
INTERNAL_CODE = "CTX000"
CODES.setdefault(INTERNAL_CODE, ("error", "internal error: the file could not be checked"))
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}


def _skipped_name(path: Path) -> bool:
    """Expected-output fixtures (``x.expected.yaml``) are not policy files."""
    return ".expected." in path.name


def collect_files(paths: Iterable[Path]) -> Iterator[Path]:
    """Files named explicitly, plus ``*.yaml|*.yml|*.toml`` under directories (sorted).

    Hidden directories/files and ``*.expected.*`` fixtures are skipped when recursing.
    """
    seen: set[Path] = set()
    for path in paths:
        if path.is_dir():
            found = []
            for p in path.rglob("*"):
                rel = p.relative_to(path).parts
                if any(part.startswith(".") or part in _SKIP_DIRS for part in rel):
                    continue
                if p.is_file() and p.suffix.lower() in POLICY_SUFFIXES and not _skipped_name(p):
                    found.append(p)
            candidates = sorted(found)
        else:
            candidates = [path]
        for p in candidates:
            key = p.resolve()
            if key not in seen:
                seen.add(key)
                yield p


def _internal(path: Path, exc: BaseException) -> Diagnostic:
    return Diagnostic(
        str(path),
        1,
        1,
        INTERNAL_CODE,
        "error",
        f"internal error while validating: {type(exc).__name__}: {exc}",
        "please report this; the file could not be checked",
    )


def validate_one(path: Path, *, agent: str | None = None) -> list[Diagnostic]:
    """Loader + schema diagnostics of one file, deduplicated."""
    from ctxpolicy.resolve.load import validate_file

    try:
        return list(validate_file(str(path), agent=agent, json_schema=True))
    except Exception as exc:
        return [_internal(path, exc)]


def validate_paths(
    paths: Iterable[Path], *, agent: str | None = None, strict: bool = False
) -> Report:
    report = Report(strict=strict)
    for path in collect_files(paths):
        report.files.append(str(path))
        report.diagnostics.extend(validate_one(path, agent=agent))
    return report


@click.command(name="validate")
@click.argument(
    "paths",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=True, file_okay=True, path_type=Path),
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted(FORMATS)),
    default="text",
    show_default=True,
    help="Output format: text for humans, json, github (Actions annotations), sarif (2.1.0).",
)
@click.option("--strict", is_flag=True, help="Warnings fail too (exit 1).")
@click.option("--agent", metavar="NAME", help="Check only this agent's policy.")
@click.pass_context
def validate(
    ctx: click.Context, paths: tuple[Path, ...], fmt: str, strict: bool, agent: str | None
) -> None:
    """Validate policy files and directories (recursing into *.yaml, *.yml, *.toml).

    Native files and the compat formats (DB-GPT `agent_context` TOML,
    `CompressionConfig` YAML) are checked. Only regular files are read. Exit 0 when
    every file is valid, 1 when a file has errors (or warnings with --strict), 2 on a
    usage error.
    """
    # Cold start matters in pre-commit: pydantic's own plugin discovery (an entry-point
    # scan, ~0.1 s) is of no use to this one-shot process. ctxpolicy's plugins still load.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    report = validate_paths(paths, agent=agent, strict=strict)
    if not report.files:
        raise click.UsageError(
            "no policy files found (looked for *.yaml, *.yml, *.toml under "
            + ", ".join(str(p) for p in paths)
            + ")"
        )
    click.echo(render(report, fmt), nl=False)
    ctx.exit(report.exit_code)
