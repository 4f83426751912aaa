"""Output of ``ctxpolicy simulate``: terminal tables, JSON, CSV, Markdown and an HTML page.

The terminal tables are designed for 80–100 columns: a few columns by default, the
rest with ``wide=True`` (``--wide``). Numbers never wrap: numeric columns do not fold,
and trace names are shortened in the middle until the table fits the console width.
CSV is for machines: one row per trace and run (baselines included) plus one ``*``
row per run with the totals, raw numbers, every column.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FORMATS",
    "STATE_STYLES",
    "SUMMARY_COLUMNS",
    "TRACE_COLUMNS",
    "html_report",
    "print_report",
    "render",
    "summary_rows",
    "to_csv",
    "to_json",
    "to_markdown",
    "trace_rows",
]

FORMATS = ("table", "json", "csv", "markdown")

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

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Column:
    """A table column: header, cell text of a run, alignment, default or ``--wide`` only."""

    header: str
    cell: Callable[[Row], str]
    wide: bool = False
    left: bool = False


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:.1f}%"


def _ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def _layers(comp: Mapping[str, int]) -> str:
    return ", ".join(f"{k}:{v}" for k, v in comp.items()) or "–"


def _states_text(states: Mapping[str, int]) -> str:
    return " ".join(f"{k[0]}{v}" for k, v in states.items() if v)


def overflow_note(r: Row) -> str:
    """`` (overflowed on 38 of 51 calls)`` for a baseline whose requests did not fit,
    else empty: a ratio against it compares with a run the provider would have refused."""
    overflows = r.get("overflows") or 0
    if r.get("kind") != "baseline" or not overflows:
        return ""
    return f" (overflowed on {overflows:,} of {r.get('steps', 0):,} calls)"


def _run_name(r: Row) -> str:
    return str(r["run"]) + overflow_note(r)


def _none_label(output: Mapping[str, Any]) -> str:
    """How the ``none`` run ratios divide by is named: "send everything", with its
    overflows when it had some."""
    runs = list((output.get("summary") or {}).values())
    row = next((r for r in runs if isinstance(r, Mapping)), None)
    over = int(row.get("overflows_none") or 0) if row is not None else 0
    if not over:
        return "send everything"
    return f"send everything (overflowed on {over:,} of {row.get('steps', 0):,} calls)"  # type: ignore[union-attr]


def _n(key: str) -> Callable[[Row], str]:
    return lambda r: f"{r[key]:,}"


#: The cost, retention and cache-churn columns of both tables.
_RATIO_COLUMNS: tuple[Column, ...] = (
    Column("cost÷none", lambda r: _ratio(r["billing"]["total_ratio"]), wide=True),
    Column("billed÷none", lambda r: _ratio(r["billing"]["billed_ratio"]), wide=True),
    Column("ret.", lambda r: _pct(r["retention"]["in_context_rate"]), wide=True),
    Column("far ret.", lambda r: _pct(r["retention"]["far_rate"]), wide=True),
    Column("prefix chg/100", lambda r: f"{r['per_100_calls']['prefix_changes']:.1f}", wide=True),
)

# The per-trace table (policy runs; baselines are in the summary and the CSV).
TRACE_COLUMNS: tuple[Column, ...] = (
    Column("trace", lambda r: str(r["trace"]), left=True),
    Column("run", lambda r: str(r["run"]), left=True),
    Column("steps", _n("steps")),
    Column("max ratio", lambda r: f"{r['ratio']['max']:.2f}"),
    Column("compactions", _n("compactions_total")),
    Column("saving", lambda r: _pct(r["saving"])),
    *_RATIO_COLUMNS,
    Column("overflows", _n("overflows")),
    Column("states", lambda r: _states_text(r["states"]), wide=True, left=True),
    Column("by layer", lambda r: _layers(r["compactions"]), wide=True, left=True),
    Column("tool tok saved", lambda r: f"{r['tool_tokens']['saved']:,}", wide=True),
    Column("viol.", _n("pairing_violations"), wide=True),
    Column("repeats", _n("repeated_reads"), wide=True),
    Column("in ctx+ref %", lambda r: _pct(r["retention"]["retained_rate"]), wide=True),
    Column("alerts", lambda r: str(len(r["alerts"])), wide=True),
)

SUMMARY_COLUMNS: tuple[Column, ...] = (
    Column("run", _run_name, left=True),
    Column("traces", _n("traces"), wide=True),
    Column("steps", _n("steps")),
    Column("max ratio", lambda r: f"{r['ratio']['max']:.2f}"),
    Column("prompt tokens", _n("prompt_tokens")),
    Column("saving", lambda r: _pct(r["saving"])),
    *_RATIO_COLUMNS,
    Column("est. $", lambda r: f"{r['cost']['usd']:.4f}", wide=True),
    Column("cached %", lambda r: _pct(r["cache"]["cached_fraction"]), wide=True),
    Column("overflows", _n("overflows")),
    Column("pairing viol.", _n("pairing_violations"), wide=True),
    Column("by layer", lambda r: _layers(r["compactions"]), wide=True, left=True),
    Column("repeated reads", _n("repeated_reads"), wide=True),
    Column("in ctx+ref %", lambda r: _pct(r["retention"]["retained_rate"]), wide=True),
    Column("alerts", lambda r: str(r["alerts"]), wide=True),
)


def _columns(cols: Sequence[Column], wide: bool) -> list[Column]:
    return [c for c in cols if wide or not c.wide]


def _summary_runs(output: Mapping[str, Any]) -> list[Row]:
    return [{**s, "run": run} for run, s in output["summary"].items()]


def _policy_runs(output: Mapping[str, Any]) -> list[Row]:
    return [
        {**r, "trace": t["trace"]}
        for t in output["traces"]
        for r in t["runs"]
        if r["kind"] == "policy"
    ]


def summary_rows(output: Mapping[str, Any], *, wide: bool = True) -> list[list[str]]:
    """One row per run (policy, compared policies, baselines), in run order."""
    cols = _columns(SUMMARY_COLUMNS, wide)
    return [[c.cell(r) for c in cols] for r in _summary_runs(output)]


def trace_rows(output: Mapping[str, Any], *, wide: bool = True) -> list[list[str]]:
    """Per trace, one row per policy run (baselines are in the summary)."""
    cols = _columns(TRACE_COLUMNS, wide)
    return [[c.cell(r) for c in cols] for r in _policy_runs(output)]


def _tokenizer_lines(output: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """``(line, approximate)`` per policy run: what counted the tokens."""
    out = []
    for spec in [output["policy"], *(output.get("compare") or [])]:
        tok = spec.get("tokenizer")
        if not tok:
            continue
        if tok["exact"]:
            out.append((f"{spec['run']}: tokens counted by {tok['name']} (exact)", False))
        else:
            why = f" — {tok['fallback']}" if tok.get("fallback") else ""
            out.append((f"{spec['run']}: token counts APPROXIMATE, {tok['name']}{why}", True))
    return out


def _header_lines(output: Mapping[str, Any]) -> list[str]:
    pol = output["policy"]
    return [
        f"{pol['file']} · {pol['agent']} (model {pol['model']})",
        f"window {pol['window']:,} · reserve {pol['reserve_output']:,} · "
        f"trigger {pol['trigger']:,} · target {pol['target']:,}",
    ]


def _shorten(text: str, limit: int) -> str:
    """``text`` cut in the middle to ``limit`` characters (the ends are what differ)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 3
    return text[:head] + "…" + text[len(text) - (limit - 1 - head) :]


def _table(title: str, cols: Sequence[Column], rows: Sequence[Sequence[Any]]) -> Any:
    from rich import box
    from rich.table import Table

    t = Table(
        title=title,
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for c in cols:
        t.add_column(
            c.header,
            justify="left" if c.left else "right",
            no_wrap=not c.left,  # numbers never wrap
            overflow="fold" if c.left else "ellipsis",
        )
    for row in rows:
        t.add_row(*row)
    return t


def _natural_width(renderable: Any) -> int:
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=10_000, color_system=None).print(renderable)
    return max((len(line) for line in buf.getvalue().splitlines()), default=0)


def _fits(renderable: Any, width: int) -> bool:
    return _natural_width(renderable) <= width


def _styled(cols: Sequence[Column], r: Row, cells: list[Any]) -> list[Any]:
    from rich.text import Text

    for i, c in enumerate(cols):
        if c.header in ("overflows", "viol.") and cells[i] != "0":
            cells[i] = Text(cells[i], style="bold red")
        elif c.header == "states":
            cells[i] = Text()
            for k, v in r["states"].items():
                if v:
                    cells[i].append(f"{k[0]}{v} ", style=STATE_STYLES.get(k, ""))
    return cells


def _fitted_table(title: str, cols: Sequence[Column], runs: Sequence[Row], width: int) -> Any:
    """A table no wider than ``width``: the longest name cells are cut in the middle first."""
    names = [i for i, c in enumerate(cols) if c.left and c.header in ("trace", "run")]
    texts = [[c.cell(r) for c in cols] for r in runs]
    limits = {i: max((len(t[i]) for t in texts), default=0) for i in names}
    while True:
        rows = []
        for r, t in zip(runs, texts, strict=True):
            cells: list[Any] = list(t)
            for i in names:
                cells[i] = _shorten(cells[i], limits[i])
            rows.append(_styled(cols, r, cells))
        table = _table(title, cols, rows)
        longest = max(names, key=lambda i: limits[i], default=None)
        if longest is None or limits[longest] <= 10 or _fits(table, width):
            return table
        limits[longest] -= 2


def _trace_label(name: str) -> str:
    """A trace's file name without the extension every trace has."""
    for ext in (".jsonl", ".json", ".traj"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def ruler_lines(output: Mapping[str, Any]) -> list[str]:
    """One line per run: the ruler users pay (docs/simulate.md, Billing and Retention)."""
    out: list[str] = []
    none = _none_label(output)
    for r in _summary_runs(output):
        b, ret = r["billing"], r["retention"]
        s = b["summarizer"]
        out.append(
            f"{_run_name(r)}: total cost ÷ {none} {_ratio(b['total_ratio'])} "
            f"(billed {_ratio(b['billed_ratio'])}, tokens {_ratio(b['tokens_ratio'])}; "
            f"{_price_name(b['price_model'])}; summarizer {s['llm_calls']:,} calls, "
            f"{s['input_tokens']:,} in / {s['output_tokens']:,} out) · retention "
            f"{_pct(ret['in_context_rate'])}, far {_pct(ret['far_rate'])} · per 100 calls: "
            f"{r['per_100_calls']['compactions']:.1f} compactions, "
            f"{r['per_100_calls']['prefix_changes']:.1f} prefix changes · "
            f"{r['avoidable_overflows']:,} avoidable overflows" + _own_text_part(r)
        )
    return out


def _own_text_part(r: Mapping[str, Any]) -> str:
    """Instruction retention, ledger + summary share, duplicated lines and needless
    compactions (absent from an output written before they were measured)."""
    ins = r.get("instructions")
    if not isinstance(ins, Mapping):
        return ""
    return (
        f" · instructions kept {_pct(ins.get('rate'))}, ledger + summary "
        f"{_pct(r.get('ledger_share'))} of the prompt, {r.get('duplicated_lines', 0):,} "
        f"duplicated lines, {r.get('needless_compactions', 0):,} compactions of "
        "conversations that would have fit"
    )


def print_report(output: Mapping[str, Any], console: Any = None, *, wide: bool = False) -> None:
    """Header, tokenizer, per-trace table, summary table (runs side by side), check.

    Fits ``console.width`` (trace and run names are cut in the middle; numbers never
    wrap); ``wide=True`` adds every column and lets the tables be as wide as they need.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.text import Text

    console = console or Console()
    width = console.width
    for line in _header_lines(output):
        console.print(Text(line, style="bold"))
    for line, approximate in _tokenizer_lines(output):
        console.print(Text(line, style="bold yellow" if approximate else "dim"))
    runs = [{**r, "trace": _trace_label(str(r["trace"]))} for r in _policy_runs(output)]
    trace_cols = _columns(TRACE_COLUMNS, wide)
    if not output.get("compare"):  # one policy: its name is in the header
        trace_cols = [c for c in trace_cols if c.header != "run"]
    fit = 10**6 if wide else width
    tables = [
        _fitted_table(f"Traces ({output['policy']['run']})", trace_cols, runs, fit)
        if not output.get("compare")
        else _fitted_table("Traces (policy runs)", trace_cols, runs, fit),
        _fitted_table(
            "Summary (all traces)", _columns(SUMMARY_COLUMNS, wide), _summary_runs(output), fit
        ),
    ]
    # --wide: every column at its natural width, never cut; wider than COLUMNS if need be
    wide_console = (
        Console(file=console.file, width=max(map(_natural_width, tables)), color_system=None)
        if wide
        else console
    )
    for t in tables:
        wide_console.print(t)
    for line in ruler_lines(output):
        console.print(Text(line))
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
    if not wide:
        console.print("[dim]more columns: --wide; for machines: --format json|csv|markdown[/]")


def to_json(output: Mapping[str, Any]) -> str:
    return json.dumps(output, indent=2, ensure_ascii=False, sort_keys=False)


_CSV_FIELDS = (
    "trace",
    "run",
    "kind",
    "strategy",
    "model",
    "window",
    "steps",
    "ratio_max",
    "ratio_mean",
    "prompt_tokens",
    "prompt_tokens_none",
    "saving",
    "cost_usd",
    "cached_fraction",
    "overflows",
    "overflows_unavoidable",
    "pairing_violations",
    "compactions_total",
    "compactions",
    "tool_tokens_saved",
    "repeated_reads",
    "in_context_rate",
    "retained_rate",
    "alerts",
    "tokenizer",
    "tokenizer_exact",
    "price_model",
    "billed_ratio",
    "total_ratio",
    "summarizer_llm_calls",
    "summarizer_input_tokens",
    "summarizer_output_tokens",
    "far_rate",
    "prefix_changes_per_100",
)


def _csv_record(trace: str, r: Row, tokenizers: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    tok = tokenizers.get(str(r["run"])) or tokenizers.get("") or {}
    saved = r["tool_tokens"]["saved"] if "tool_tokens" in r else r.get("tool_tokens_saved")
    alerts = r["alerts"] if isinstance(r["alerts"], int) else len(r["alerts"])
    return [
        trace,
        r["run"],
        r.get("kind", ""),
        r.get("strategy", ""),
        r.get("model", ""),
        r.get("window", ""),
        r["steps"],
        r["ratio"]["max"],
        r["ratio"]["mean"],
        r["prompt_tokens"],
        r["prompt_tokens_none"],
        r["saving"],
        r["cost"]["usd"],
        r["cache"]["cached_fraction"],
        r["overflows"],
        r["overflows_unavoidable"],
        r["pairing_violations"],
        r["compactions_total"],
        ";".join(f"{k}:{v}" for k, v in r["compactions"].items()),
        saved,
        r["repeated_reads"],
        r["retention"]["in_context_rate"],
        r["retention"]["retained_rate"],
        alerts,
        tok.get("name", ""),
        "" if "exact" not in tok else str(bool(tok["exact"])).lower(),
        _price_name(r["billing"]["price_model"]),
        r["billing"]["billed_ratio"],
        r["billing"]["total_ratio"],
        r["billing"]["summarizer"]["llm_calls"],
        r["billing"]["summarizer"]["input_tokens"],
        r["billing"]["summarizer"]["output_tokens"],
        r["retention"]["far_rate"],
        r["per_100_calls"]["prefix_changes"],
    ]


def _price_name(pm: Any) -> str:
    if isinstance(pm, Mapping):
        return str(pm.get("name", ""))
    return pm if isinstance(pm, str) else ";".join(map(str, pm))


def to_csv(output: Mapping[str, Any]) -> str:
    """Every run of every trace (baselines too), then one ``*`` totals row per run."""
    tokenizers: dict[str, Mapping[str, Any]] = {}
    specs = [output["policy"], *(output.get("compare") or [])]
    for spec in specs:
        if spec.get("tokenizer"):
            tokenizers[str(spec["run"])] = spec["tokenizer"]
    if output["policy"].get("tokenizer"):  # baselines count with the main policy's counter
        tokenizers[""] = output["policy"]["tokenizer"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(_CSV_FIELDS)
    for t in output["traces"]:
        for r in t["runs"]:
            w.writerow(_csv_record(t["trace"], r, tokenizers))
    for r in _summary_runs(output):
        w.writerow(_csv_record("*", r, tokenizers))
    return buf.getvalue()


def _md_table(cols: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[str]:
    def esc(v: str) -> str:
        return v.replace("|", "\\|")

    out = ["| " + " | ".join(c.header for c in cols) + " |"]
    out.append("|" + "|".join("---" if c.left else "---:" for c in cols) + "|")
    out += ["| " + " | ".join(esc(v) for v in row) + " |" for row in rows]
    return out


def to_markdown(output: Mapping[str, Any], *, wide: bool = False) -> str:
    """The terminal tables as GitHub Markdown (for a PR comment or docs)."""
    lines = [f"**{line}**  " for line in _header_lines(output)]
    lines += [f"{line}  " for line, _ in _tokenizer_lines(output)]
    lines += ["", "#### Traces (policy runs)", ""]
    lines += _md_table(_columns(TRACE_COLUMNS, wide), trace_rows(output, wide=wide))
    lines += ["", "#### Summary (all traces)", ""]
    lines += _md_table(_columns(SUMMARY_COLUMNS, wide), summary_rows(output, wide=wide))
    chk = output["check"]
    lines.append("")
    if chk["problems"]:
        lines.append(f"check: {len(chk['problems'])} problem(s)")
        lines += [
            f"- {p['trace']} [{p['run']}] {p['code']}: {p['message']}" for p in chk["problems"]
        ]
    else:
        lines.append("check: no overflow, no pairing violation, no alert")
    return "\n".join(lines) + "\n"


def render(output: Mapping[str, Any], fmt: str, *, wide: bool = False) -> str:
    """``json``, ``csv`` or ``markdown`` text of a simulate output (``table``: print_report)."""
    if fmt == "json":
        return to_json(output) + "\n"
    if fmt == "csv":
        return to_csv(output)
    if fmt == "markdown":
        return to_markdown(output, wide=wide)
    raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")


def _html_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], cls: str) -> str:
    head = "".join(f"<th>{html.escape(c.header)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def html_report(output: Mapping[str, Any], png: bytes | None = None, note: str = "") -> str:
    """One self-contained HTML page: the plot (embedded PNG), all columns, the check.

    ``note`` (e.g. why there is no plot) is shown where the plot would be.
    """
    pol = output["policy"]
    summary = _html_table(SUMMARY_COLUMNS, summary_rows(output), "summary")
    traces = _html_table(TRACE_COLUMNS, trace_rows(output), "traces")
    img = ""
    if png:
        b64 = base64.b64encode(png).decode("ascii")
        img = (
            f'<h2>Tokens per call</h2><img alt="tokens per call" src="data:image/png;base64,{b64}">'
        )
    elif note:
        img = f'<h2>Tokens per call</h2><p class="note">{html.escape(note)}</p>'
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
    tokenizers = "".join(
        f'<p class="{"bad" if approx else "tok"}">{html.escape(line)}</p>'
        for line, approx in _tokenizer_lines(output)
    )
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
th,td{{border:1px solid #ccc;padding:3px 7px;text-align:right;white-space:nowrap}}
th{{background:#f3f3f3}} td:first-child,td:nth-child(2){{text-align:left}}
.ok{{color:#2e7d32;font-weight:bold}} .bad{{color:#b71c1c;font-weight:bold}}
.tok,.note{{color:#555}}
img{{max-width:100%;border:1px solid #ddd}}
</style></head><body>
<h1>ctxpolicy simulate</h1>
<p>Policy <b>{html.escape(str(pol["file"]))}</b> agent <b>{html.escape(str(pol["agent"]))}</b>
(model {html.escape(str(pol["model"]))}, window {pol["window"]:,}, reserve {pol["reserve_output"]:,},
trigger {pol["trigger"]:,}, target {pol["target"]:,}); compared: {html.escape(compare)};
baselines: {html.escape(", ".join(output.get("baselines") or []) or "–")}; prices: {html.escape(str(output.get("prices")))}.</p>
{tokenizers}
{check}
<h2>Summary</h2>
{summary}
<h2>Traces</h2>
<p>States: {legend}</p>
{traces}
{img}
</body></html>
"""
