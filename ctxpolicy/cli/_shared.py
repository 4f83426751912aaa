"""What several commands share, declared once: ``--policy FILE`` (the command's
``policy_file`` argument), ``--agent NAME`` (``agent``, default ``default``) and
loading that agent's policy."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.policy.models import Policy

F = TypeVar("F", bound=Callable[..., Any])


def policy_option(
    help: str = "Policy file (YAML or TOML).", *, required: bool = True
) -> Callable[[F], F]:
    """``--policy FILE``: a policy file that exists."""
    return click.option(
        "--policy",
        "policy_file",
        required=required,
        type=click.Path(exists=True, dir_okay=False),
        help=help,
    )


def agent_option(help: str = "Agent type in the policy file.") -> Callable[[F], F]:
    """``--agent NAME``: the agent type of the policy file (default ``default``)."""
    return click.option("--agent", default="default", show_default=True, help=help)


def load_agent(ctx: click.Context, file: str, agent: str, *, code: int) -> Policy:
    """``agent``'s resolved policy from ``file``; when it does not resolve (or the file
    cannot be read), its diagnostics on stderr and exit ``code``."""
    from ctxpolicy.policy.diagnostics import PolicyError
    from ctxpolicy.resolve.load import load_policy

    try:
        return load_policy(file, agent)
    except PolicyError as exc:
        for d in exc.diagnostics:
            click.echo(d.format(), err=True)
        click.echo(f"{file}: agent {agent!r} does not resolve", err=True)
        ctx.exit(code)
    except (OSError, ValueError) as exc:
        click.echo(f"{file}: {exc}", err=True)
        ctx.exit(code)
