"""``table_rows``: query results → header, first rows, row count, column summary.

Design B's ``query_database`` rule (``max_rows``, ``summarize_large_result``).
Recognised shapes: a JSON array of objects (or of arrays, first one the header),
a JSON object with ``rows`` (and optional ``columns``), CSV/TSV, markdown tables,
and psql's aligned output (``----+----`` separator, ``(N rows)`` footer).

Output: ``[table_rows: <format>, N rows × M columns; showing first K]``, the
header and the first ``max_rows`` rows *as they were printed* (exact original
lines for text formats), ``... [N more rows]``, and — when the table is larger
than ``max_rows`` and ``summarize_large_result`` is on — per column the number of
distinct values and the min/max (numeric when every non-null value is a number).
Anything else falls back to a head/tail of ``fallback_chars``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field

from ctxpolicy.components import Preprocessor, ToolCall
from ctxpolicy.conversation.facts import DERIVED_HEADING
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions, TuneRange
from ctxpolicy.preprocessors._text import cut_chars, head_tail_chars, never_longer
from ctxpolicy.preprocessors.head_tail import fallback_field

_PSQL_SEP = re.compile(r"^\s*-+(\+-+)*\s*$")
_PSQL_FOOTER = re.compile(r"^\s*\((\d+) rows?\)\s*$")
_MD_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_NULLS = {"", "null", "none", "nan", "\\n", "<null>"}


class TableRowsOptions(ComponentOptions):
    """Options of ``table_rows``."""

    max_rows: int = Field(default=20, ge=0, description="Rows shown (after the header).")
    summarize_large_result: bool = Field(
        default=True,
        description="When there are more rows than shown, add per-column distinct count and min/max.",
    )
    max_columns_summarized: int = Field(
        default=30, ge=0, description="Summarize at most this many columns."
    )
    fallback_chars: int = fallback_field("no table is recognised")


@dataclass
class Table:
    fmt: str
    columns: list[str]
    rows: list[list[Any]]  # parsed cells (for the summary)
    header_lines: list[str]  # printed header (text formats)
    row_lines: list[str]  # printed rows (text formats), same order as rows
    footer: list[str]


def _from_json(text: str) -> Table | None:
    s = text.lstrip()
    if not s or s[0] not in "[{":
        return None
    try:
        data = json.loads(s)
    except (ValueError, RecursionError):
        return None
    cols: list[str] | None = None
    if isinstance(data, dict):
        rows_val = data.get("rows", data.get("data", data.get("results")))
        if not isinstance(rows_val, list):
            return None
        c = data.get("columns") or data.get("fields")
        if isinstance(c, list):
            cols = [str(x.get("name", x)) if isinstance(x, dict) else str(x) for x in c]
        data = rows_val
    if not isinstance(data, list) or not data:
        return None
    if all(isinstance(r, dict) for r in data):
        if cols is None:
            cols = list(dict.fromkeys(k for r in data for k in r))
        rows = [[r.get(c) for c in cols] for r in data]
    elif all(isinstance(r, list) for r in data):
        if cols is None:
            cols = [str(x) for x in data[0]]
            data = data[1:]
        rows = [list(r) for r in data]
    else:
        return None
    lines = [
        json.dumps(dict(zip(cols, r, strict=False)), ensure_ascii=False, default=str) for r in rows
    ]
    return Table("json", cols, rows, [], lines, [])


def _split_md(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return [c.strip() for c in s.split("|")]


def _from_markdown(lines: Sequence[str]) -> Table | None:
    for i in range(len(lines) - 1):
        if "|" in lines[i] and _MD_SEP.match(lines[i + 1]) and "|" in lines[i + 1]:
            cols = _split_md(lines[i])
            body: list[str] = []
            for ln in lines[i + 2 :]:
                if "|" not in ln:
                    break
                body.append(ln)
            footer = [ln for ln in lines[i + 2 + len(body) :] if ln.strip()]
            return Table(
                "markdown", cols, [_split_md(b) for b in body], list(lines[: i + 2]), body, footer
            )
    return None


def _from_psql(lines: Sequence[str]) -> Table | None:
    has_footer = any(_PSQL_FOOTER.match(ln) for ln in lines[-5:])
    for i in range(1, len(lines)):
        sep, head = lines[i], lines[i - 1]
        if not _PSQL_SEP.match(sep) or not head.strip():
            continue
        if not ("+" in sep or "|" in head or has_footer):
            continue
        cols = [c.strip() for c in head.split("|")]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() and not _PSQL_FOOTER.match(lines[j]):
            body.append(lines[j])
            j += 1
        footer = [ln for ln in lines[j:] if ln.strip()]
        rows = [[c.strip() for c in b.split("|")] for b in body]
        return Table("psql", cols, rows, list(lines[: i + 1]), body, footer)
    return None


def _from_csv(text: str, lines: Sequence[str]) -> Table | None:
    if len(lines) < 2:
        return None
    sample = lines[: min(len(lines), 20)]
    for delim in ("\t", ",", ";"):
        counts = [ln.count(delim) for ln in sample if ln.strip()]
        if not counts or counts[0] == 0:
            continue
        if sum(1 for c in counts if c == counts[0]) < 0.8 * len(counts):
            continue
        try:
            parsed = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delim))
        except csv.Error:
            return None
        if not parsed:
            return None
        width = len(parsed[0])
        if width < 2:
            continue
        good = [r for r in parsed[1:] if r]
        if sum(1 for r in good if len(r) == width) < 0.8 * max(len(good), 1):
            continue
        fmt = "tsv" if delim == "\t" else "csv"
        # printed lines equal parsed records only without quoted newlines
        simple = len(parsed) == len([ln for ln in lines if ln.strip()]) == len(lines)
        row_lines = list(lines[1:]) if simple else [delim.join(r) for r in parsed[1:]]
        return Table(fmt, parsed[0], [r for r in parsed[1:]], [lines[0]], row_lines, [])
    return None


def detect(text: str) -> Table | None:
    t = _from_json(text)
    if t is not None:
        return t
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    return _from_psql(lines) or _from_markdown(lines) or _from_csv(text, lines)


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip().replace(",", "")) if v.strip() else None
        except ValueError:
            return None
    return None


def _fmt(v: Any) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
    return cut_chars(s, 40)


def summarize(columns: Sequence[str], rows: Sequence[Sequence[Any]], max_columns: int) -> list[str]:
    out: list[str] = []
    for ci, col in enumerate(columns[:max_columns]):
        vals = [r[ci] if ci < len(r) else None for r in rows]
        present = [
            v
            for v in vals
            if v is not None and not (isinstance(v, str) and v.strip().lower() in _NULLS)
        ]
        nulls = len(vals) - len(present)
        keyed = {
            json.dumps(v, sort_keys=True, default=str) if not isinstance(v, str) else v
            for v in present
        }
        nums = [_num(v) for v in present]
        desc = f"distinct={len(keyed)}"
        if present and all(n is not None for n in nums):
            fl = [n for n in nums if n is not None]
            desc += f" min={_fmt(min(fl))} max={_fmt(max(fl))}"
        elif present:
            strs = [v if isinstance(v, str) else json.dumps(v, default=str) for v in present]
            desc += f" min={_fmt(min(strs))!s} max={_fmt(max(strs))!s}"
        if nulls:
            desc += f" nulls={nulls}"
        out.append(f"  {cut_chars(str(col), 40)}: {desc}")
    if len(columns) > max_columns:
        out.append(f"  … {len(columns) - max_columns} more columns")
    return out


class TableRows(Preprocessor):
    name = "table_rows"
    description = (
        "Tables (JSON/CSV/markdown/psql) → header, first max_rows rows, row count, column summary."
    )
    Options = TableRowsOptions
    tune_space: ClassVar[dict[str, TuneRange]] = {
        "max_rows": TuneRange(low=5, high=100, step=5),
    }

    options: TableRowsOptions

    def process(self, text: str, call: ToolCall | None = None) -> str:
        opts = self.options
        table = detect(text)
        if table is None:
            return head_tail_chars(text, opts.fallback_chars)
        n = len(table.rows)
        shown = min(n, opts.max_rows)
        if n <= opts.max_rows:
            return text
        parts = [
            f"[table_rows: {table.fmt}, {n} rows × {len(table.columns)} columns; showing first {shown}]"
        ]
        if table.fmt == "json":
            parts.append("columns: " + json.dumps(table.columns, ensure_ascii=False))
        else:
            parts.extend(table.header_lines)
        parts.extend(table.row_lines[:shown])
        parts.append(f"... [{n - shown} more rows] ...")
        parts.extend(table.footer)
        if opts.summarize_large_result:
            parts.append(DERIVED_HEADING)  # not mined for facts (conversation/facts)
            parts.extend(summarize(table.columns, table.rows, opts.max_columns_summarized))
        return never_longer(text, "\n".join(parts))


@hookimpl
def ctxpolicy_register_preprocessors(register):  # type: ignore[no-untyped-def]
    register(TableRows)
