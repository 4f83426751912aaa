"""``ctxpolicy report EVENTS.jsonl [--html OUT]``: what compaction did, from an event log.

The same views as the gateway's ``/dashboard`` (docs/observability.md), from the
events a :class:`ctxpolicy.events.sinks.JsonlEventSink` wrote: a summary and one line per
conversation on stdout, ``--json`` the views as JSON, ``--html OUT`` the dashboard's
page as one self-contained file (styles, script and data inline; opens offline).
Exit 0 with a report, 1 when the files hold no event, 2 when a file cannot be read.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

__all__ = ["render_text", "report"]


def _tokens(n: float) -> str:
    a = abs(n)
    if a >= 1e6:
        return f"{n / 1e6:.2f}M"
    if a >= 1e4:
        return f"{n / 1e3:.0f}k"
    if a >= 1e3:
        return f"{n / 1e3:.1f}k"
    return str(int(n))


def _usd(n: float) -> str:
    a = abs(n)
    sign = "-$" if n < 0 else "$"
    if a >= 100:
        return f"{sign}{a:.0f}"
    if a >= 1:
        return f"{sign}{a:.2f}"
    if a >= 0.01:
        return f"{sign}{a:.3f}"
    return f"{sign}{a:.5f}"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _layers(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in counts.items()) or "-"


def render_text(data: dict[str, Any], limit: int = 50) -> str:
    """The report as text: totals, agents, then the ``limit`` most recent conversations."""
    t = data["totals"]
    by_layer: dict[str, int] = {}
    for c in data["conversations"]:
        for k, v in c["compactions"].items():
            by_layer[k] = by_layer.get(k, 0) + v
    prices = sorted({str(a["price"]) for a in data["agents"]})
    lines = [
        f"{data['source']}: {t['conversations']} conversations, {t['calls']} calls, "
        f"{t['compactions']} compactions ({_layers(by_layer)})",
        f"tokens sent {_tokens(t['sent'])} of {_tokens(t['tokens_in'])} "
        f"(saved {_tokens(t['saved'])}, {_pct(t['saved'], t['tokens_in'])}); "
        f"est. cost {_usd(t['usd_sent'])} instead of {_usd(t['usd_none'])} "
        f"(saved {_usd(t['usd_saved'])}; {', '.join(prices) or 'default'} list prices)",
        f"prompt cache (est.): {_tokens(t['cache_read'])} read, "
        f"{_tokens(t['cache_write'])} written ({_pct(t['cache_read'], t['cache_read'] + t['cache_write'])} read)",
        f"overflows {t['overflows']}, provider overflow retries {t['retries']}, "
        f"failures {t['failures']}, deferred {t['deferred']}, data lost {t['lost']}",
    ]
    if data.get("forgotten"):
        lines.append(f"(only the {t['conversations']} most recent conversations are kept)")
    head = ("conversation", "agent", "calls", "peak/window", "compactions", "saved", "cost saved")
    rows = [head]
    for c in data["conversations"][:limit]:
        rows.append(
            (
                c["id"],
                c["agent"] or "-",
                str(c["calls"]),
                f"{_tokens(c['peak'])}/{_tokens(c['window'])}",
                _layers(c["compactions"]),
                _tokens(c["saved"]),
                _usd(c["usd_saved"]),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines.append("")
    for r in rows:
        cells = [
            r[i].ljust(widths[i]) if i in (0, 1, 4) else r[i].rjust(widths[i])
            for i in range(len(head))
        ]
        lines.append("  ".join(cells).rstrip())
    more = len(data["conversations"]) - limit
    if more > 0:
        lines.append(f"... {more} more (--limit)")
    return "\n".join(lines) + "\n"


@click.command("report")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--html",
    "html_out",
    default=None,
    type=click.Path(dir_okay=False, writable=True),
    help="Write the dashboard's page, data inline, to this file (opens offline).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the views as JSON.")
@click.option(
    "--model",
    default=None,
    help="Model whose list prices estimate the cost (default: the price table's "
    "`default`; events of the gateway are priced by their agent's model).",
)
@click.option(
    "--prices",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="A price table of the shape of ctxpolicy/data/prices.json.",
)
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Conversations listed (the most recently active first).",
)
def report(
    files: tuple[str, ...],
    html_out: str | None,
    as_json: bool,
    model: str | None,
    prices: str | None,
    limit: int,
) -> None:
    """What compaction did, from event logs (JSONL, as JsonlEventSink writes them):
    context use over time, compactions and the layer that fired, estimated prompt-cache
    reads and writes, tokens and estimated cost saved against sending the whole history,
    overflows and retries. Only numbers and names are shown.
    """
    from ctxpolicy.observe.eventlog import EventLog
    from ctxpolicy.observe.views import Views
    from ctxpolicy.policy.catalogue import load_prices

    try:
        table = load_prices(prices) if prices else None
    except (OSError, ValueError) as exc:
        raise click.BadParameter(str(exc)[:300], param_hint="--prices") from None
    views = Views(model=model, prices=table, max_conversations=100_000)
    for name in files:
        log = EventLog(Path(name))
        try:
            views.extend(log)
        except OSError as exc:
            click.echo(f"ctxpolicy report: {name}: {exc.strerror or exc}", err=True)
            sys.exit(2)
        if log.skipped:
            where = ", ".join(str(n) for n in log.first_bad)
            click.echo(
                f"ctxpolicy report: {name}: {log.skipped} of {log.lines} lines are not events "
                f"(skipped; first at line {where})",
                err=True,
            )
    source = ", ".join(os.path.basename(f) for f in files)
    data = views.snapshot(limit=100_000, source=source)
    if not views.events:
        click.echo(
            f"ctxpolicy report: no ctxpolicy events in {source} (an event log is what "
            "JsonlEventSink, `ctxpolicy serve --events` or `ctxpolicy simulate --events` write)",
            err=True,
        )
        sys.exit(1)
    if html_out:
        from ctxpolicy.observe.page import report_html

        page_data = {**data, "conversations": data["conversations"][:limit]}
        try:
            Path(html_out).write_text(report_html(page_data), encoding="utf-8")
        except OSError as exc:
            click.echo(f"ctxpolicy report: {html_out}: {exc.strerror or exc}", err=True)
            sys.exit(2)
        click.echo(f"wrote {html_out}", err=True)
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False, indent=1))
    else:
        click.echo(render_text(data, limit), nl=False)
