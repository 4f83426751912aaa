"""``ctxpolicy simulate``: replay recorded traces against a policy (see docs/simulate.md).

Exit codes: 0 done (and, with ``--check``, no problem); 1 ``--check`` found an
overflow, a pairing violation or an alert; 2 usage error, unreadable trace or a
policy that does not resolve.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from ctxpolicy.cli._shared import agent_option, load_agent, policy_option

BASELINE_CHOICES = ("none", "last_n", "observation_mask", "summary_at_fraction")
FORMAT_CHOICES = ("table", "json", "csv", "markdown")
#: Width of the tables when stdout is not a terminal and ``COLUMNS`` is not set.
PIPE_WIDTH = 100


def output_width() -> int:
    """``COLUMNS`` when set (also when piped), else the terminal's width, else 100."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((PIPE_WIDTH, 24)).columns
    return PIPE_WIDTH


def _parse_compare(spec: str, policy: str, agent: str) -> tuple[str, str]:
    """``FILE``, ``FILE:AGENT`` or ``:AGENT`` (same file as ``--policy``)."""
    file, sep, other = spec.rpartition(":")
    if not sep or "/" in other or other.endswith((".yaml", ".yml", ".toml")):
        return spec, agent
    return (file or policy), (other or agent)


@click.command("simulate")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@policy_option()
@agent_option()
@click.option(
    "--window",
    type=click.IntRange(min=256),
    default=None,
    help="Override the context window (tokens).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMAT_CHOICES),
    default="table",
    show_default=True,
    help="table: for people (fits COLUMNS); json (schemas/simulate-output.schema.json), "
    "csv (every run, raw numbers) or markdown: for machines and PRs.",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option(
    "--wide", is_flag=True, help="All columns in table and markdown output (needs ~200 columns)."
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a self-contained HTML report.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a PNG of tokens per call (needs matplotlib, extra `plot`; skipped with a "
    "warning without it).",
)
@click.option(
    "--compare",
    "compare",
    multiple=True,
    metavar="POLICY2[:AGENT]",
    help="Also replay this policy (':AGENT' = same file).",
)
@click.option(
    "--baseline",
    "baselines",
    multiple=True,
    type=click.Choice(BASELINE_CHOICES),
    help="Baseline to compare with (repeatable).",
)
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 on any overflow, pairing violation or alert of the policy.",
)
@click.option(
    "--workers",
    "--jobs",
    "jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes replaying traces in parallel (default: the CPU count).",
)
@click.option(
    "--prices",
    "prices_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Price table JSON (default: packaged).",
)
@click.option(
    "--price-model",
    "price_model_text",
    default=None,
    metavar="NAME[,KEY=VALUE...]",
    help="Cache price model billing input (anthropic, openai, google, deepseek, no_cache; "
    "default: the policy model's in the model catalogue), optionally overriding "
    "cache_read, cache_write, summarizer_input, summarizer_output.",
)
@click.option(
    "--alert-ratio",
    type=click.FloatRange(0, 1),
    default=0.9,
    show_default=True,
    help="Alert when the mean compression ratio is above this.",
)
@click.option(
    "--alert-repeats",
    type=click.FloatRange(min=0),
    default=0.3,
    show_default=True,
    help="Alert when repeated reads exceed this share of compactions.",
)
@click.option(
    "--snapshots",
    "snapshots_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Keep snapshots here (default: a temporary directory, removed).",
)
@click.option(
    "--events",
    "events_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append the policy runs' engine events to this file, one JSON object per line "
    "(numbers and names only; each conversation named RUN/TRACE): the log "
    "`ctxpolicy report` reads.",
)
@click.option(
    "--steps",
    "show_steps",
    is_flag=True,
    help="Also print one status line per model call (used, ratio, state, layers fired).",
)
@click.pass_context
def simulate(
    ctx: click.Context,
    traces: tuple[str, ...],
    policy_file: str,
    agent: str,
    window: int | None,
    fmt: str,
    as_json: bool,
    wide: bool,
    report: str | None,
    plot: str | None,
    compare: tuple[str, ...],
    baselines: tuple[str, ...],
    check: bool,
    jobs: int | None,
    prices_file: str | None,
    price_model_text: str | None,
    alert_ratio: float,
    alert_repeats: float,
    snapshots_dir: str | None,
    events_file: str | None,
    show_steps: bool,
) -> None:
    """Replay agent traces step by step under a policy and report what it does.

    TRACE files: JSONL (one OpenAI Chat message per line), a JSON array, Anthropic
    Messages JSON, a SWE-agent .traj or OpenHands events.
    """
    from ctxpolicy.policy.catalogue import load_prices
    from ctxpolicy.sim.importers import TraceError
    from ctxpolicy.sim.parallel import default_workers
    from ctxpolicy.sim.run import RunSpec
    from ctxpolicy.sim.run import simulate as run_simulation

    if as_json:
        fmt = "json"
    policy = load_agent(ctx, policy_file, agent, code=2)
    runs = [RunSpec(label=agent, policy=policy, file=policy_file, agent=agent)]
    for spec in compare:
        cfile, cagent = _parse_compare(spec, policy_file, agent)
        if not Path(cfile).is_file():
            raise click.BadParameter(f"{cfile}: no such policy file", param_hint="--compare")
        label = (
            cagent if cagent not in {r.label for r in runs} else f"{cagent} ({Path(cfile).name})"
        )
        runs.append(
            RunSpec(
                label=label, policy=load_agent(ctx, cfile, cagent, code=2), file=cfile, agent=cagent
            )
        )
    try:
        prices = load_prices(prices_file)
    except (OSError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--prices") from None
    pm = None
    if price_model_text is not None:
        from ctxpolicy.sim.metrics import parse_price_model, price_model

        try:
            name, overrides = parse_price_model(price_model_text)
            pm = price_model(name, policy.model_name, overrides)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--price-model") from None
    baselines = tuple(dict.fromkeys(baselines))
    if window is not None:
        from ctxpolicy.budget import compute_budget
        from ctxpolicy.sim.replay import with_window

        for r in runs:
            try:
                compute_budget(with_window(r.policy, window))
            except ValueError as exc:
                raise click.BadParameter(f"{r.label}: {exc}", param_hint="--window") from None

    from ctxpolicy.sim.importers import mark_warning

    for trace in traces:
        warning = mark_warning(trace)
        if warning is not None:
            click.echo(f"warning: {warning}", err=True)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    show_progress = fmt == "table" and err.is_terminal
    sink = None
    if events_file is not None:
        from ctxpolicy.events.sinks import JsonlEventSink

        sink = JsonlEventSink(events_file)

        def write_events(events: list[dict[str, Any]]) -> None:
            try:
                for event in events:
                    sink(event)
            except OSError as exc:
                raise click.ClickException(
                    f"--events {events_file}: {exc.strerror or exc}"
                ) from None

    tmp = None
    if snapshots_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ctxpolicy-simulate-")
        snapshots_dir = tmp.name
    try:
        with Progress(
            TextColumn("[bold]replaying[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=err,
            disable=not show_progress,
            transient=True,
        ) as bar:
            task = bar.add_task("", total=len(traces))

            def progress(done: int, total: int, name: str) -> None:
                bar.update(task, completed=done, description=name)

            try:
                output = run_simulation(
                    list(traces),
                    runs,
                    baselines=baselines,
                    window=window,
                    jobs=default_workers() if jobs is None else jobs,
                    snapshots_dir=snapshots_dir,
                    prices=prices,
                    prices_source=prices_file or "builtin",
                    alert_ratio=alert_ratio,
                    alert_repeats=alert_repeats,
                    progress=progress,
                    price_model=pm,
                    on_events=None if sink is None else write_events,
                )
            except TraceError as exc:
                click.echo(f"error: {exc}", err=True)
                ctx.exit(2)
                return
    finally:
        if sink is not None:
            sink.close()
        if tmp is not None:
            tmp.cleanup()
    png: bytes | None = None
    plot_note = ""
    if plot or report:
        try:
            from ctxpolicy.sim.plot import plot_output

            png = plot_output(output, plot)
        except RuntimeError as exc:  # no matplotlib: everything else is still written
            plot_note = str(exc)
            if plot:
                click.echo(f"warning: --plot {plot} skipped: {exc}", err=True)
    if report:
        from ctxpolicy.sim.report import html_report

        Path(report).write_text(html_report(output, png, plot_note), encoding="utf-8")
    if fmt == "table":
        from rich.console import Console

        from ctxpolicy.sim.report import print_report

        width = output_width()
        if show_steps:
            _print_steps(output, {r.label for r in runs}, width)
        print_report(output, Console(file=sys.stdout, width=width), wide=wide)
        if report:
            click.echo(f"wrote {report}")
        if plot and png is not None:
            click.echo(f"wrote {plot}")
    else:
        from ctxpolicy.sim.report import render

        click.echo(render(output, fmt, wide=wide), nl=False)
    if check and not output["check"]["passed"]:
        ctx.exit(1)


def _print_steps(output: dict[str, Any], labels: set[str], width: int) -> None:
    """Per-call status of the policy runs (not the baselines), as `context.status` sees it."""
    for trace in output["traces"]:
        for run in trace["runs"]:
            if run["run"] not in labels:
                continue
            series = run["series"]
            click.echo(f"== {trace['trace']} · {run['run']}"[:width])
            click.echo(
                "  call    before  reached      used   trigger  ratio  state     compacted by"
            )
            before = series.get("before") or series["used"]
            reached = series.get("state_before") or series["state"]
            for i, used in enumerate(series["used"]):
                trigger = series["trigger"][i]
                ratio = used / trigger if trigger else 0.0
                layers = ", ".join(series["layers"][i]) or "-"
                # before compaction: the tokens and the state that made it fire
                was = (
                    f"{before[i]:9,d}  {reached[i]:9s}"
                    if before[i] != used or reached[i] != series["state"][i]
                    else f"{'':9s}  {'':9s}"
                )
                line = (
                    f"  {i + 1:4d} {was} {used:9,d} {trigger:9,d}  {ratio:5.2f}  "
                    f"{series['state'][i]:9s} {layers}"
                )
                click.echo(line if len(line) <= width else line[: width - 1] + "…")
