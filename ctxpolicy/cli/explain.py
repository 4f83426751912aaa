"""``ctxpolicy explain POLICY [--agent NAME] [--full] [--json] [--show-env] [--prefix-file
REQUEST.json | --prefix-tokens N]``.

Prints the budget arithmetic first, line by line, then the token counter that
will actually count (exact, or the fallback and why)::

    window = min(policy 120000, model 32768) = 32768 (the smaller wins)
    trigger = 32768 − 4096 (reserve_output) − 0 (tool_growth) − 0 (safety_margin) = 28672
    target = 0.7 × 28672 = 20070
    ...
    tokens: quicktok:cl100k_base (exact)

``--full`` adds the resolved policy (``extends`` merged, environment interpolated,
model catalogue applied, component options completed) as YAML that parses back
to the same data. Values that came from ``${NAME}`` interpolation are shown as
``${NAME}`` unless ``--show-env``. A file with one agent (or a ``default`` one)
needs no ``--agent``.

The numbers come from :func:`ctxpolicy.budget.compute_budget` (with the initial
tool growth when it is learned).

``--prefix-file`` takes a request body a client sent (an OpenAI chat or Responses
request, or an Anthropic Messages one, as captured by a proxy or ``serve --record``)
and says how much of the window its fixed prefix — system prompt and tool
definitions, sent again with every request — takes, counted by the policy's token
counter; ``--prefix-tokens`` takes that number as documented (the presets in
``policies/coding_clients.yaml`` give theirs).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from ctxpolicy.policy.models import Policy, ToolGrowth

__all__ = [
    "budget_lines",
    "budget_table",
    "explain",
    "policy_yaml",
    "prefix_lines",
    "prefix_tokens",
    "token_counter_line",
]


def budget_table(policy: Policy) -> dict[str, int]:
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
        n = budget_table(policy)
    except ValueError as exc:
        return [f"budget does not work out: {exc}"]
    lines = []
    if b.window is not None:
        if b.window == model_window:
            note = " (equal)"
        else:
            note = (
                " (the smaller wins: the policy's)"
                if b.window < model_window
                else (" (the smaller wins: the model's)")
            )
        lines.append(f"window = min(policy {b.window}, model {model_window}) = {n['window']}{note}")
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


def _system_texts(body: Mapping[str, Any]) -> list[str]:
    """The system prompt of a request body: Anthropic's ``system``, Responses'
    ``instructions``, and the leading ``system``/``developer`` messages (or input
    items) of a chat or Responses request."""
    texts: list[str] = []
    system = body.get("system")
    if isinstance(system, str):
        texts.append(system)
    elif isinstance(system, list):
        texts += [str(b.get("text", "")) for b in system if isinstance(b, Mapping)]
    if isinstance(body.get("instructions"), str):
        texts.append(body["instructions"])
    items = body.get("messages", body.get("input"))
    for m in items if isinstance(items, list) else []:
        if not isinstance(m, Mapping) or m.get("role") not in ("system", "developer"):
            break
        content = m.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [str(b.get("text", "")) for b in content if isinstance(b, Mapping)]
    return texts


def prefix_tokens(policy: Policy, body: Mapping[str, Any]) -> dict[str, int]:
    """Tokens of the fixed prefix of a request body (system prompt and tool
    definitions), counted by the policy's token counter."""
    from ctxpolicy.tokens import TokenCounter

    counter = TokenCounter(policy.model, model_name=policy.model_name)
    texts = _system_texts(body)
    priming = counter.count_messages([])
    system = (
        counter.count_messages([{"role": "system", "content": t} for t in texts]) - priming
        if texts
        else 0
    )
    raw_tools = body.get("tools")
    tools = [t for t in raw_tools if isinstance(t, Mapping)] if isinstance(raw_tools, list) else []
    n_tools = counter.count_tools(tools) if tools else 0
    return {"system": system, "tools": n_tools, "tool_count": len(tools), "total": system + n_tools}


def prefix_lines(
    prefix: Mapping[str, int], numbers: Mapping[str, int] | None, source: str
) -> list[str]:
    """What share of the window, the trigger and the target a fixed prefix takes."""
    total = prefix["total"]
    if "system" in prefix:
        parts = f"system {prefix['system']} + {prefix['tool_count']} tools {prefix['tools']}; "
    else:
        parts = ""
    lines = [f"fixed prefix = {total} tokens ({parts}{source})"]
    if numbers is None:
        return lines
    shares = ", ".join(
        f"{100 * total / numbers[k]:.1f} % of the {k} ({numbers[k]})"
        for k in ("window", "trigger", "target")
        if numbers[k] > 0
    )
    lines.append(f"  = {shares}")
    if total >= numbers["trigger"]:
        lines.append(
            "  the prefix alone is at or above the trigger: every request overflows this "
            "policy; use a larger window (a model that holds the client's prompt and tools)"
        )
    elif total >= numbers["target"]:
        lines.append(
            "  the prefix alone is at or above the target: compaction can never reach it "
            "(the prefix is never compacted); raise the target or use a larger window"
        )
    else:
        room = numbers["target"] - total
        lines.append(f"  fits: {room} tokens of conversation stay after a compaction")
    return lines


def _prefix_of(policy: Policy, body: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return dict(prefix_tokens(policy, body))
    except Exception as exc:  # no tokenizer of the chain loads
        raise click.ClickException(f"cannot count the prefix: {exc}") from None


def _read_prefix(path: Path) -> dict[str, Any]:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise click.BadParameter(
            f"{path}: not a JSON request body ({type(exc).__name__}: {exc})"[:300],
            param_hint="--prefix-file",
        ) from None
    if not isinstance(body, dict):
        raise click.BadParameter(
            f"{path}: a request body is a JSON object", param_hint="--prefix-file"
        )
    return body


def token_counter_line(policy: Policy) -> tuple[str, dict[str, Any]]:
    """Which tokenizer will count (resolved like a session does) and whether it is exact."""
    from ctxpolicy.tokens import TokenCounter

    try:
        counter = TokenCounter(policy.model, model_name=policy.model_name)
    except Exception as exc:  # no tokenizer of the chain loads
        return f"tokens: none of the tokenizer chain loads ({exc})", {
            "using": None,
            "exact": False,
            "reason": str(exc),
        }
    reason = "; ".join(str(e.get("reason", "")) for e in counter.fallbacks if e.get("reason"))
    tried = [str(t["tokenizer"]) for e in counter.fallbacks for t in e.get("tried", [])]
    exact = not counter.approximate
    if exact and not tried:
        line = f"tokens: {counter.name} (exact)"
    elif exact:  # the same vocabulary from another backend: still exact
        line = (
            f"tokens: {counter.name} (exact: the same vocabulary as {', '.join(tried)}, "
            "which is not installed or cannot load its files here; the counts are identical)"
        )
    else:
        line = f"tokens: {counter.name} (APPROXIMATE fallback: {reason})"
    info = {"using": counter.name, "exact": exact, "reason": reason or None}
    return line, info


def _masked(data: Any, mask: Callable[[str], str] | None) -> Any:
    if mask is None:
        return data
    if isinstance(data, str):
        return mask(data)
    if isinstance(data, dict):
        return {mask(k) if isinstance(k, str) else k: _masked(v, mask) for k, v in data.items()}
    if isinstance(data, list):
        return [_masked(v, mask) for v in data]
    return data


def _policy_dump(policy: Policy) -> dict[str, Any]:
    return policy.model_dump(mode="json", exclude={"source"})


def policy_yaml(data: Any) -> str:
    """Block-style YAML that parses back to ``data``: no folded lines, ``null`` written
    out, strings that would read as another type quoted."""
    import io

    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 1 << 16  # never fold a long value (a regex) onto the next line
    yaml.allow_unicode = True
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    yaml.representer.add_representer(
        type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


def _pick_agent(path: Path, agent: str | None) -> str | None:
    """``agent``, else the file's only agent, else ``default`` when there is one."""
    if agent is not None:
        return agent
    from ctxpolicy.resolve.load import list_agents

    agents = list_agents(str(path))
    if len(agents) == 1:
        return agents[0]
    if "default" in agents:
        return "default"
    return None


@click.command(name="explain")
@click.argument(
    "policy_path", metavar="POLICY", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--agent",
    metavar="NAME",
    default=None,
    help="Agent type (default: the file's only agent, else `default`).",
)
@click.option("--full", is_flag=True, help="Also print the resolved policy (YAML).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: policy, budget, arithmetic.")
@click.option(
    "--show-env",
    is_flag=True,
    help="Show values interpolated from the environment (default: shown as ${NAME}).",
)
@click.option(
    "--prefix-file",
    metavar="REQUEST.json",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A request body a client sent (OpenAI chat or Responses, Anthropic Messages): "
    "say how much of the window its system prompt and tool definitions take.",
)
@click.option(
    "--prefix-tokens",
    metavar="N",
    type=click.IntRange(min=0),
    default=None,
    help="The client's fixed prefix in tokens, as documented (instead of --prefix-file).",
)
@click.pass_context
def explain(
    ctx: click.Context,
    policy_path: Path,
    agent: str | None,
    full: bool,
    as_json: bool,
    show_env: bool,
    prefix_file: Path | None,
    prefix_tokens: int | None,
) -> None:
    """Show one agent's budget arithmetic, its token counter and (--full) resolved policy.

    Exit 1 when the policy does not resolve (its diagnostics are printed).
    """
    from ctxpolicy.resolve.load import list_agents, resolve_agent

    name = _pick_agent(policy_path, agent)
    if name is None:
        agents = list_agents(str(policy_path))
        click.echo(
            f"{policy_path}: {len(agents)} agents and none is `default`; choose one with "
            f"--agent: {', '.join(agents) or '(none)'}",
            err=True,
        )
        ctx.exit(1)
        return
    policy, diags, redactor = resolve_agent(str(policy_path), name)
    if policy is None:
        for d in diags:
            click.echo(d.format(), err=True)
        click.echo(f"{policy_path}: agent {name!r} does not resolve", err=True)
        ctx.exit(1)
        return
    mask = None if show_env else redactor.redact
    try:
        numbers: dict[str, int] | None = budget_table(policy)
    except ValueError:
        numbers = None
    lines = _masked(budget_lines(policy), mask)
    prefix: dict[str, Any] | None = None
    if prefix_file is not None:
        prefix = {**_prefix_of(policy, _read_prefix(prefix_file)), "source": str(prefix_file)}
    elif prefix_tokens is not None:
        prefix = {"total": prefix_tokens, "source": "as given"}
    if prefix is not None:
        lines += prefix_lines(prefix, numbers, str(prefix["source"]))
    counter_line, counter = token_counter_line(policy)
    dump = _masked(_policy_dump(policy), mask)
    if as_json:
        doc = {
            "agent": policy.agent,
            "source": str(policy_path),
            "budget": numbers,
            "arithmetic": lines,
            "tokenizer": _masked(counter, mask),
            "policy": dump,
        }
        if prefix is not None:
            doc["prefix"] = prefix
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    click.echo(f"# {policy_path} — agent {policy.agent!r}: budget arithmetic (tokens)")
    for line in lines:
        click.echo(line)
    click.echo(_masked(counter_line, mask))
    if not full:
        click.echo("# (add --full to print the resolved policy)")
        return
    click.echo("")
    click.echo("# resolved policy (extends merged, environment interpolated, model catalogue")
    note = "values from the environment shown" if show_env else "${NAME} values masked"
    click.echo(f"# applied; {note})")
    click.echo(policy_yaml(dump), nl=False)
