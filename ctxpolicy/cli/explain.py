"""``ctxpolicy explain POLICY --agent NAME [--json]``.

Prints the resolved policy (``extends`` merged, env interpolated, model catalogue
applied, component options completed) and the budget arithmetic line by line::

    window = min(policy 128000, model 128000) = 128000
    trigger = 128000 − 16000 (reserve_output) − 20000 (tool_growth) − 4000 (safety_margin) = 88000
    target = 0.6 × 88000 = 52800
    warning = 0.7 × 88000 = 61600
    ...

The numbers come from :func:`ctxpolicy.budget.compute_budget` (with the initial
tool growth when it is learned).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ctxpolicy.policy.models import Policy, ToolGrowth

__all__ = ["budget_lines", "budget_numbers", "explain"]


def budget_numbers(policy: Policy) -> dict[str, int]:
    """The budget in tokens (:func:`ctxpolicy.budget.compute_budget`, initial growth)."""
    from ctxpolicy.budget import compute_budget

    state = compute_budget(policy)
    return {
        k: int(getattr(state, k))
        for k in (
            "window",
            "reserve_output",
            "tool_growth",
            "safety_margin",
            "trigger",
            "target",
            "warning_tokens",
            "error_tokens",
            "critical_tokens",
        )
    }


def budget_lines(policy: Policy) -> list[str]:
    """The arithmetic, one line per quantity, numbers from :mod:`ctxpolicy.budget`."""
    b = policy.budget
    model_window = policy.model.context_window
    try:
        n = budget_numbers(policy)
    except ValueError as exc:
        return [f"budget does not work out: {exc}"]
    lines = []
    if b.window is not None:
        lines.append(f"window = min(policy {b.window}, model {model_window}) = {n['window']}")
    else:
        lines.append(f"window = model {model_window} = {n['window']}")
    if b.reserve_output is None:
        src = "model max_output_tokens" if policy.model.max_output_tokens else "default"
        lines.append(f"reserve_output = {n['reserve_output']} ({src})")
    elif isinstance(b.reserve_output, str):
        lines.append(
            f"reserve_output = {b.reserve_output.strip()} of {n['window']} = {n['reserve_output']}"
        )
    else:
        lines.append(f"reserve_output = {n['reserve_output']}")
    growth = b.tool_growth
    if isinstance(growth, ToolGrowth):
        lines.append(
            f"tool_growth = {n['tool_growth']} (initial; then the {growth.learn.quantile:g} "
            f"quantile of the last {growth.learn.window} tool results)"
        )
    elif isinstance(growth, str):
        lines.append(f"tool_growth = {growth.strip()} of {n['window']} = {n['tool_growth']}")
    else:
        lines.append(f"tool_growth = {n['tool_growth']}")
    lines.append(f"safety_margin = {n['safety_margin']}")
    lines.append(
        f"trigger = {n['window']} − {n['reserve_output']} (reserve_output) − "
        f"{n['tool_growth']} (tool_growth) − {n['safety_margin']} (safety_margin) "
        f"= {n['trigger']}"
    )
    if isinstance(b.target, float):
        lines.append(f"target = {b.target:g} × {n['trigger']} = {n['target']}")
    else:
        lines.append(f"target = {n['target']} tokens")
    t = policy.thresholds
    for name in ("warning", "error", "critical"):
        frac = getattr(t, name)
        lines.append(f"{name} = {frac:.2f} × {n['trigger']} = {n[name + '_tokens']} tokens")
    lines.append(f"overflow = {n['trigger']} tokens (the trigger)")
    return lines


def _policy_dump(policy: Policy) -> dict[str, Any]:
    return policy.model_dump(mode="json", exclude={"source"})


def _yaml(data: Any) -> str:
    import io

    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 100
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


@click.command(name="explain")
@click.argument(
    "policy_path", metavar="POLICY", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--agent", metavar="NAME", default="default", show_default=True, help="Agent type.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: policy, budget, arithmetic.")
@click.pass_context
def explain(ctx: click.Context, policy_path: Path, agent: str, as_json: bool) -> None:
    """Show the resolved policy of one agent and its budget arithmetic.

    Exit 1 when the policy does not resolve (its diagnostics are printed).
    """
    from ctxpolicy.policy.diagnostics import PolicyError
    from ctxpolicy.policy.resolve import load_policy

    try:
        policy = load_policy(str(policy_path), agent)
    except PolicyError as exc:
        for d in exc.diagnostics:
            click.echo(d.format(), err=True)
        click.echo(f"{policy_path}: agent {agent!r} does not resolve", err=True)
        ctx.exit(1)
        return
    try:
        numbers: dict[str, int] | None = budget_numbers(policy)
    except ValueError:
        numbers = None
    lines = budget_lines(policy)
    if as_json:
        doc = {
            "agent": policy.agent,
            "source": str(policy_path),
            "policy": _policy_dump(policy),
            "budget": numbers,
            "arithmetic": lines,
        }
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    click.echo(f"# {policy_path} — agent {policy.agent!r}, resolved")
    click.echo("# (extends merged, environment interpolated, model catalogue applied)")
    click.echo(_yaml(_policy_dump(policy)), nl=False)
    click.echo("")
    click.echo("# budget arithmetic (tokens)")
    for line in lines:
        click.echo(line)
