"""simulate's output: tables that fit 80 and 100 columns, CSV / Markdown / JSON, tokenizer line."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.cli.simulate import simulate

from .conftest import COMPARED, DEMO, POLICY, shared_traces


def run(*args: str, columns: int | None = None) -> tuple[int, str, str]:
    env = {"COLUMNS": str(columns)} if columns else {}
    res = CliRunner().invoke(simulate, list(args), env=env, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture(scope="module")
def long_named_traces() -> list[str]:
    """Real traces with long names (60+ characters) plus the demo ones."""
    return [*DEMO, *(str(p) for p in sorted(shared_traces(), key=lambda p: p.stat().st_size)[:3])]


@pytest.mark.parametrize("columns", [80, 100])
def test_tables_fit_the_terminal_and_numbers_stay_whole(columns, long_named_traces):
    args = [*long_named_traces, *COMPARED, "--steps"]
    code, out, _ = run(*args, columns=columns)
    assert code == 0, out
    too_long = [line for line in out.splitlines() if len(line) > columns]
    assert not too_long, too_long[:3]
    doc = json.loads(run(*args[:-1], "--format", "json")[1])
    # every summary number is printed whole, on one line, in the row of its run
    for name, s in doc["summary"].items():
        row = next(
            line
            for line in out.splitlines()
            if line.lstrip().startswith(name[:4]) and f"{s['prompt_tokens']:,}" in line
        )
        assert f"{s['steps']:,}" in row and f"{s['overflows']:,}" in row
    assert "tokens counted by quicktok:qwen3 (exact)" in out
    # a header is never split into pieces like 'ste' / 'ps'
    assert re.search(r"\bsteps\b.*\bmax ratio\b.*\bsaving\b", out)


def test_columns_is_respected_when_piped(long_named_traces):
    narrow = run(*DEMO, "--policy", POLICY, "--agent", "coding_agent", columns=60)[1]
    wide = run(*DEMO, "--policy", POLICY, "--agent", "coding_agent", columns=200)[1]
    assert max(map(len, narrow.splitlines())) <= 60
    assert max(map(len, wide.splitlines())) > 60  # not forced to a fixed width


def test_wide_adds_columns_and_never_cuts_numbers():
    code, out, _ = run(*DEMO, "--policy", POLICY, "--agent", "coding_agent", "--wide", columns=80)
    assert code == 0
    for header in ("tool tok saved", "in ctx+ref %", "repeated reads", "by layer"):
        assert header in out
    assert "…" not in out  # nothing ellipsized: --wide tables take the width they need
    assert "--wide" not in out  # the hint is only for the default view


def test_csv_has_every_run_with_raw_numbers():
    args = [*DEMO, "--policy", POLICY, "--agent", "coding_agent", "--baseline", "none"]
    doc = json.loads(run(*args, "--json")[1])
    code, out, _ = run(*args, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 2 * len(DEMO) + 2  # policy + none per trace, then two totals
    per_trace = {(r["trace"], r["run"]): r for r in rows}
    for t in doc["traces"]:
        for r in t["runs"]:
            row = per_trace[(t["trace"], r["run"])]
            assert int(row["prompt_tokens"]) == r["prompt_tokens"]
            assert float(row["saving"]) == r["saving"]
            assert row["tokenizer"] == "quicktok:qwen3" and row["tokenizer_exact"] == "true"
    totals = {r["run"]: r for r in rows if r["trace"] == "*"}
    assert int(totals["none"]["overflows"]) == doc["summary"]["none"]["overflows"]


def test_markdown_tables():
    code, out, _ = run(*DEMO, "--policy", POLICY, "--agent", "coding_agent", "--format", "markdown")
    assert code == 0
    tables = [line for line in out.splitlines() if line.startswith("|")]
    assert tables[0].startswith("| trace | run | steps")
    assert len(tables) == (2 + len(DEMO)) + (2 + 1)


def test_approximate_counts_are_flagged_in_table_and_json(tmp_path: Path):
    pol = tmp_path / "p.yaml"
    pol.write_text(
        "ctxpolicy: 1\n"
        "policies:\n"
        "  default:\n"
        "    model: {context_window: 16000, max_output_tokens: 1000, "
        "tokenizer: [p50k_base, heuristic]}\n"
    )
    code, out, _ = run(DEMO[0], "--policy", str(pol), columns=100)
    assert code == 0
    assert "token counts APPROXIMATE, heuristic" in out and "p50k_base" in out
    doc = json.loads(run(DEMO[0], "--policy", str(pol), "--json")[1])
    tok = doc["policy"]["tokenizer"]
    assert tok["exact"] is False and tok["name"] == "heuristic"
    assert "p50k_base" in tok["fallback"]


def test_plot_without_matplotlib_degrades(tmp_path: Path, monkeypatch):
    """No matplotlib: one warning line, exit 0, tables printed and the HTML report written."""
    for mod in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(__import__("sys").modules, mod, None)
    png, html = tmp_path / "t.png", tmp_path / "r.html"
    code, out, err = run(
        DEMO[0],
        "--policy",
        POLICY,
        "--agent",
        "coding_agent",
        "--plot",
        str(png),
        "--report",
        str(html),
    )
    assert code == 0
    assert not png.exists() and html.exists()
    assert "Summary (all traces)" in out and f"wrote {html}" in out and f"wrote {png}" not in out
    warnings = [line for line in err.splitlines() if line.strip()]
    assert len(warnings) == 1 and "matplotlib" in warnings[0] and "--plot" in warnings[0]
    assert "matplotlib" in html.read_text()  # the page says why it has no plot


# --------------------------------------------------------------------------- invariant

_NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=90)


@pytest.fixture(scope="module")
def demo_output() -> dict:
    args = [*DEMO, "--policy", POLICY, "--agent", "coding_agent", "--compare", ":coding_agent_16k"]
    return json.loads(run(*args, "--baseline", "none", "--json")[1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    width=st.integers(80, 160),
    traces=st.lists(_NAME, min_size=2, max_size=2, unique=True),
    runs=st.lists(_NAME, min_size=3, max_size=3, unique=True),
    tokens=st.integers(10_000_000, 999_999_999),
    steps=st.integers(0, 99_999),
    overflows=st.integers(0, 99_999),
)
def test_any_names_and_numbers_fit_the_width(
    demo_output, width, traces, runs, tokens, steps, overflows
):
    """Whatever the names and magnitudes: no line longer than the width, numbers whole."""
    from rich.console import Console

    from ctxpolicy.sim.report import print_report

    out = json.loads(json.dumps(demo_output))
    old = list(out["summary"])
    rename = dict(zip(old, runs, strict=True))
    out["summary"] = {rename[k]: v for k, v in out["summary"].items()}
    out["policy"]["run"] = rename[out["policy"]["run"]]
    for c in out["compare"]:
        c["run"] = rename[c["run"]]
    for t, name in zip(out["traces"], traces, strict=True):
        t["trace"] = name + ".jsonl"
        for r in t["runs"]:
            r["run"] = rename[r["run"]]
            r["steps"], r["overflows"] = steps, overflows
    first = next(iter(out["summary"].values()))
    first["prompt_tokens"], first["steps"], first["overflows"] = tokens, steps, overflows
    buf = io.StringIO()
    print_report(out, Console(file=buf, width=width, color_system=None))
    text = buf.getvalue()
    lines = text.splitlines()
    assert max(map(len, lines)) <= width
    summary = lines[next(i for i, line in enumerate(lines) if line.startswith("Summary")) :]
    row = next(line for line in summary if f"{tokens:,}" in line)  # whole, on one line
    assert f"{steps:,}" in row and f"{overflows:,}" in row
