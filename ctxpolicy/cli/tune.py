"""``ctxpolicy tune``: search a policy's numbers on recorded traces (see docs/tune.md).

Exit codes: 0 done; 1 ``--check`` found a policy better than the committed one by
more than ``--margin`` on held-out traces; 2 usage error, unreadable trace, a policy
that does not resolve or a missing extra; 130 interrupted (Ctrl-C) — the best
candidate so far is still compared, reported and written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ctxpolicy._install import extra_hint
from ctxpolicy.cli._shared import agent_option, load_agent, policy_option


@click.command("tune")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@policy_option()
@agent_option("Agent type to tune.")
@click.option("--window", type=click.IntRange(min=256), default=None, help="Window to tune for.")
@click.option("--trials", type=click.IntRange(min=1), default=None, help="Trials (default 50).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of split and search.")
@click.option(
    "--holdout",
    type=click.FloatRange(0, 1, max_open=True),
    default=None,
    help="Share of traces held out for the final comparison (default 0.3).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Local worker processes (default: the CPU count).",
)
@click.option("--cluster", default=None, metavar="tcp://HOST:PORT", help="Dask scheduler.")
@click.option("--storage", default=None, metavar="URL", help="Optuna storage (sqlite:///tune.db).")
@click.option("--study", "study_name", default=None, help="Optuna study name (shared studies).")
@click.option(
    "--retention-floor",
    type=click.FloatRange(0, 1),
    default=None,
    help="Least retention of a candidate (default: the base policy's).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the machine output.")
@click.option("--check", is_flag=True, help="Exit 1 when the best found beats the policy.")
@click.option(
    "--margin",
    type=click.FloatRange(min=0),
    default=0.05,
    show_default=True,
    help="With --check: tolerated held-out saving of the best found.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory for the diff, report.html, pareto.png, tune.json (default tune-AGENT).",
)
@click.pass_context
def tune(
    ctx: click.Context,
    traces: tuple[str, ...],
    policy_file: str,
    agent: str,
    window: int | None,
    trials: int | None,
    seed: int,
    holdout: float | None,
    workers: int | None,
    cluster: str | None,
    storage: str | None,
    study_name: str | None,
    retention_floor: float | None,
    as_json: bool,
    check: bool,
    margin: float,
    out_dir: str | None,
) -> None:
    """Find the numbers of an agent's policy that cost least for what the agent keeps.

    Replays TRACE files (as `simulate` does) under candidate policies proposed by a
    seeded multi-objective optuna search, compares the chosen one with the policy on
    held-out traces, and writes a reviewed policy diff, an HTML report and JSON.
    """
    try:
        import optuna  # noqa: F401
    except ImportError:
        click.echo(f"ctxpolicy tune needs optuna: {extra_hint('tune')}", err=True)
        ctx.exit(2)
    from ctxpolicy.sim.importers import TraceError, mark_warning
    from ctxpolicy.tune.runner import TuneConfig, run_tune
    from ctxpolicy.tune.space import SpaceError

    base = load_agent(ctx, policy_file, agent, code=2)
    for trace in traces:
        warning = mark_warning(trace)
        if warning is not None:
            click.echo(f"warning: {warning}", err=True)
    spec = base.tune
    cfg = TuneConfig(
        traces=list(traces),
        policy_file=policy_file,
        agent=agent,
        window=window,
        trials=trials or spec.trials or 50,
        seed=seed,
        holdout=holdout
        if holdout is not None
        else (spec.holdout if spec.holdout is not None else 0.3),
        workers=workers,
        cluster=cluster,
        storage=storage,
        study_name=study_name,
        objectives=spec.objectives,
        retention_floor=retention_floor if retention_floor is not None else spec.retention_floor,
        margin=margin,
    )
    if window is not None:
        from ctxpolicy.budget import compute_budget
        from ctxpolicy.sim.replay import with_window

        try:
            compute_budget(with_window(base, window))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--window") from None
    try:
        with _progress(enabled=not as_json) as hooks:
            result = run_tune(cfg, base, hooks=hooks)
    except SpaceError as exc:
        click.echo(f"{_where(policy_file, agent, exc.path)}error: {exc}", err=True)
        ctx.exit(2)
        return
    except (TraceError, RuntimeError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
        return
    except Exception as exc:  # optuna storage URLs, dask connection errors
        if type(exc).__module__.split(".")[0] not in ("optuna", "sqlalchemy", "distributed"):
            raise
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        ctx.exit(2)
        return
    written = _write_outputs(result, base, Path(out_dir or f"tune-{agent}"))
    if as_json:
        from ctxpolicy.tune.report import to_dict

        click.echo(json.dumps({**to_dict(result), "files": written}, indent=1, default=str))
    else:
        _print_summary(result, written)
    if result.interrupted:
        ctx.exit(130)
    if check and result.recommended and result.gain is not None and result.gain > margin:
        if not as_json:
            click.echo(
                f"check failed: the best policy found saves {result.gain:.1%} on held-out "
                f"traces (> margin {margin:.1%})",
                err=True,
            )
        ctx.exit(1)


def _where(policy_file: str, agent: str, key: str) -> str:
    """``file:line:col: `` of ``tune.space.<key>`` when this file sets it, else ``file: ``."""
    from ctxpolicy.policy.load import load_document

    doc, _ = load_document(policy_file)
    path = ("policies", agent, "tune", "space", key)
    if doc is not None and path in doc.source_map.keys:
        line, col = doc.source_map.keys[path]
        return f"{policy_file}:{line}:{col}: "
    return f"{policy_file}: "


def _write_outputs(result: Any, base: Any, out: Path) -> dict[str, str | None]:
    from ctxpolicy.tune.diff import DiffError, write_diff
    from ctxpolicy.tune.report import diff_comments, diff_header, html_report, pareto_png, to_dict

    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str | None] = {"diff": None, "report": None, "plot": None, "json": None}
    diff_text = None
    if result.recommended and result.chosen is not None:
        body, comments = diff_comments(result, base)
        target = out / f"{result.config.agent}_tuned.yaml"
        try:
            diff_text = write_diff(
                target,
                base_file=result.config.policy_file,
                agent=f"{result.config.agent}_tuned",
                body=body,
                comments=comments,
                header=diff_header(result),
                expected=result.chosen_policy,
            )
            files["diff"] = str(target)
        except DiffError as exc:
            result.recommended = False
            result.reasons.append(str(exc))
            for d in exc.diagnostics:
                click.echo(d.format(), err=True)
    png = None
    try:
        png = pareto_png(result)
        (out / "pareto.png").write_bytes(png)
        files["plot"] = str(out / "pareto.png")
    except RuntimeError as exc:
        click.echo(f"warning: {exc}", err=True)
    (out / "report.html").write_text(html_report(result, png, diff_text), encoding="utf-8")
    files["report"] = str(out / "report.html")
    (out / "tune.json").write_text(
        json.dumps({**to_dict(result), "files": files}, indent=1, default=str), encoding="utf-8"
    )
    files["json"] = str(out / "tune.json")
    return files


#: Held-out traces below this many are thin evidence for a recommendation (warned).
THIN_HELD_OUT = 3

#: How each cost objective is named where its value is printed.
_COST_NAMES = {
    "total": "total cost",
    "billed": "billed input",
    "tokens": "tokens",
    "usd": "USD",
}


def _change(before: float, after: float) -> str:
    return f"{(after - before) / before:+.1%}" if before else "n/a"


def _print_summary(r: Any, files: dict[str, str | None]) -> None:
    """The held-out numbers, then a headline that is one of them: the saving on the
    objective the study minimised (``tune.objectives.cost``), beside the change in
    tokens and dollars; a warning when the held-out traces are too few to trust it."""
    obj = r.config.objectives
    name = _COST_NAMES.get(obj.cost, obj.cost)
    click.echo(
        f"tune {r.config.agent}: {len(r.candidates)} trials on {r.where}; "
        f"{len(r.tuning)} tuning / {len(r.held_out)} held-out traces"
        + (" (interrupted: best so far)" if r.interrupted else "")
    )
    if r.base_held is not None and r.chosen_held is not None:
        b, c = r.base_held, r.chosen_held
        extra = obj.cost in ("total", "billed")  # a cost not among tokens and USD
        for label, sc in (("base:  ", b), ("chosen:", c)):
            click.echo(
                f"  held-out  {label} "
                + (f"{name} {sc.cost(obj):>12,.0f}  " if extra else "")
                + f"{sc.tokens:>12,} tokens  ${sc.usd:.4f}  retention "
                f"{sc.retention(obj):.2%}  avoidable overflows {sc.avoidable}"
            )
        changes = {name: _change(b.cost(obj), c.cost(obj))}
        changes.setdefault("tokens", _change(b.tokens, c.tokens))
        changes.setdefault("USD", _change(b.usd, c.usd))
        click.echo("  held-out  change:  " + ", ".join(f"{k} {v}" for k, v in changes.items()))
    if r.held_out and len(r.held_out) < THIN_HELD_OUT:
        click.echo(
            f"warning: thin evidence: the held-out comparison rests on {len(r.held_out)} "
            f"trace(s); a saving on so few may not hold on your other conversations "
            f"(give more traces, or a larger --holdout)",
            err=True,
        )
    if r.recommended:
        click.echo(
            f"recommended ({name} {-r.gain:+.1%} on {len(r.held_out)} held-out "
            f"trace(s)): {files['diff']}"
        )
    else:
        click.echo("no recommendation: " + "; ".join(r.reasons))
    click.echo(f"report: {files['report']}")


class _progress:
    """Rich progress bars (trials, replays) on a terminal; silent otherwise."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(stderr=True)
        self.bar = Progress(
            TextColumn("[bold]{task.fields[what]:8s}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            disable=not (enabled and console.is_terminal),
            transient=True,
        )
        self.t_trials = self.bar.add_task("", total=None, what="trials")
        self.t_replays = self.bar.add_task("", total=None, what="replays")

    def __enter__(self) -> _progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def trials(self, done: int, total: int) -> None:
        self.bar.update(self.t_trials, completed=done, total=total)

    def replays(self, done: int, total: int, name: str) -> None:
        self.bar.update(self.t_replays, completed=done, total=total, description=name[:40])

    def phase(self, text: str) -> None:
        self.bar.update(self.t_trials, description=text)
