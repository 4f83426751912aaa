"""Output of ``ctxpolicy simulate``: rich tables, JSON, and a self-contained HTML report."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "STATE_STYLES",
    "html_report",
    "print_report",
    "summary_rows",
    "to_json",
    "trace_rows",
]

STATE_STYLES = {
    "normal": "green",
    "warning": "yellow",
    "error": "red",
    "critical": "magenta",
    "overflow": "bold red",
}
_HTML_COLORS = {
    "normal": "#2e7d32",
    "warning": "#b8860b",
    "error": "#c62828",
    "critical": "#8e24aa",
    "overflow": "#b71c1c",
}

SUMMARY_COLUMNS = (
    "run",
    "traces",
    "steps",
    "max ratio",
    "prompt tokens",
    "saving vs none",
    "est. cost $",
    "cached %",
    "overflows",
    "pairing viol.",
    "compactions",
    "repeated reads",
    "facts in ctx %",
    "in ctx+ref %",
    "alerts",
)
TRACE_COLUMNS = (
    "trace",
    "run",
    "steps",
    "max ratio",
    "states",
    "compactions",
    "saving",
    "tool tok saved",
    "overflows",
    "viol.",
    "repeats",
    "in ctx %",
    "in ctx+ref %",
    "alerts",
)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:.1f}%"


def _layers(comp: Mapping[str, int]) -> str:
    return ", ".join(f"{k}:{v}" for k, v in comp.items()) or "–"


def summary_rows(output: Mapping[str, Any]) -> list[list[str]]:
    """One row per run (policy, compared policies, baselines), in run order."""
    rows = []
    for run, s in output["summary"].items():
        rows.append(
            [
                str(run),
                str(s["traces"]),
                str(s["steps"]),
                f"{s['ratio']['max']:.2f}",
                f"{s['prompt_tokens']:,}",
                _pct(s["saving"]),
                f"{s['cost']['usd']:.4f}",
                _pct(s["cache"]["cached_fraction"]),
                str(s["overflows"]),
                str(s["pairing_violations"]),
                _layers(s["compactions"]),
                str(s["repeated_reads"]),
                _pct(s["retention"]["in_context_rate"]),
                _pct(s["retention"]["retained_rate"]),
                str(s["alerts"]),
            ]
        )
    return rows


def _states_text(states: Mapping[str, int]) -> str:
    return " ".join(f"{k[0]}{v}" for k, v in states.items() if v)


def trace_rows(output: Mapping[str, Any]) -> list[tuple[list[str], Mapping[str, int]]]:
    """Per trace, one row per policy run (baselines are in the summary)."""
    rows = []
    for t in output["traces"]:
        for r in t["runs"]:
            if r["kind"] != "policy":
                continue
            rows.append(
                (
                    [
                        t["trace"],
                        str(r["run"]),
                        str(r["steps"]),
                        f"{r['ratio']['max']:.2f}",
                        _states_text(r["states"]),
                        _layers(r["compactions"]),
                        _pct(r["saving"]),
                        f"{r['tool_tokens']['saved']:,}",
                        str(r["overflows"]),
                        str(r["pairing_violations"]),
                        str(r["repeated_reads"]),
                        _pct(r["retention"]["in_context_rate"]),
                        _pct(r["retention"]["retained_rate"]),
                        str(len(r["alerts"])),
                    ],
                    r["states"],
                )
            )
    return rows


def print_report(output: Mapping[str, Any], console: Any = None) -> None:
    """Per-trace table, summary table (runs side by side), check problems."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    pol = output["policy"]
    title = f"{pol['file']} · {pol['agent']} · window {pol['window']:,} · trigger {pol['trigger']:,} · target {pol['target']:,}"
    tt = Table(title=f"Traces — {title}", title_justify="left", header_style="bold")
    for c in TRACE_COLUMNS:
        tt.add_column(
            c,
            justify="left" if c in ("trace", "run", "states", "compactions") else "right",
            overflow="fold",
        )
    for cells, states in trace_rows(output):
        state_text = Text()
        for k, v in states.items():
            if v:
                state_text.append(f"{k} {v} ", style=STATE_STYLES.get(k, ""))
        styled: list[Any] = list(cells)
        styled[4] = state_text
        if cells[8] != "0":
            styled[8] = Text(cells[8], style="bold red")
        if cells[9] != "0":
            styled[9] = Text(cells[9], style="bold red")
        tt.add_row(*styled)
    console.print(tt)
    st = Table(title="Summary (all traces)", title_justify="left", header_style="bold")
    for c in SUMMARY_COLUMNS:
        st.add_column(
            c, justify="left" if c in ("run", "compactions") else "right", overflow="fold"
        )
    for row in summary_rows(output):
        st.add_row(*row)
    console.print(st)
    chk = output["check"]
    if chk["problems"]:
        console.print(f"[bold red]check: {len(chk['problems'])} problem(s)[/]")
        for p in chk["problems"][:50]:
            console.print(
                f"  [red]{escape(p['trace'])}[/] {escape('[' + str(p['run']) + ']')} "
                f"{escape(p['code'])}: {escape(p['message'])}"
            )
    else:
        console.print("[green]check: no overflow, no pairing violation, no alert[/]")


def to_json(output: Mapping[str, Any]) -> str:
    return json.dumps(output, indent=2, ensure_ascii=False, sort_keys=False)


def _html_table(columns: Sequence[str], rows: Sequence[Sequence[str]], cls: str) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def html_report(output: Mapping[str, Any], png: bytes | None = None) -> str:
    """One self-contained HTML page: the plot (embedded PNG), the tables, the check."""
    pol = output["policy"]
    summary = _html_table(SUMMARY_COLUMNS, summary_rows(output), "summary")
    trows = []
    for cells, _ in trace_rows(output):
        trows.append(cells)
    traces = _html_table(TRACE_COLUMNS, trows, "traces")
    img = ""
    if png:
        b64 = base64.b64encode(png).decode("ascii")
        img = (
            f'<h2>Tokens per call</h2><img alt="tokens per call" src="data:image/png;base64,{b64}">'
        )
    chk = output["check"]
    if chk["problems"]:
        items = "".join(
            f"<li><b>{html.escape(p['trace'])}</b> [{html.escape(str(p['run']))}] "
            f"{html.escape(p['code'])}: {html.escape(p['message'])}</li>"
            for p in chk["problems"]
        )
        check = (
            f'<p class="bad">check failed: {len(chk["problems"])} problem(s)</p><ul>{items}</ul>'
        )
    else:
        check = '<p class="ok">check passed: no overflow, no pairing violation, no alert</p>'
    legend = " ".join(
        f'<span style="color:{c}">{html.escape(s)}</span>' for s, c in _HTML_COLORS.items()
    )
    compare = ", ".join(f"{c['file']} · {c['agent']}" for c in output.get("compare") or []) or "–"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>ctxpolicy simulate — {html.escape(str(pol["agent"]))}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}
table{{border-collapse:collapse;margin:1em 0;font-size:13px}}
th,td{{border:1px solid #ccc;padding:3px 7px;text-align:right}}
th{{background:#f3f3f3}} td:first-child,td:nth-child(2){{text-align:left}}
.ok{{color:#2e7d32;font-weight:bold}} .bad{{color:#b71c1c;font-weight:bold}}
img{{max-width:100%;border:1px solid #ddd}}
</style></head><body>
<h1>ctxpolicy simulate</h1>
<p>Policy <b>{html.escape(str(pol["file"]))}</b> agent <b>{html.escape(str(pol["agent"]))}</b>
(model {html.escape(str(pol["model"]))}, window {pol["window"]:,}, reserve {pol["reserve_output"]:,},
trigger {pol["trigger"]:,}, target {pol["target"]:,}); compared: {html.escape(compare)};
baselines: {html.escape(", ".join(output.get("baselines") or []) or "–")}; prices: {html.escape(str(output.get("prices")))}.</p>
{check}
<h2>Summary</h2>
{summary}
<h2>Traces</h2>
<p>States: {legend}</p>
{traces}
{img}
</body></html>
"""
