"""The simulate command: --check exit codes, JSON schema, PNG size, HTML report, --jobs."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy.cli.simulate import simulate

from .conftest import DEMO, POLICY, ROOT, shared_traces

SCHEMA = ROOT / "schemas" / "simulate-output.schema.json"


def invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(simulate, list(args), catch_exceptions=False)
    return res.exit_code, res.output


@pytest.fixture
def overflow_policy(tmp_path: Path) -> tuple[str, str]:
    """A policy that cannot fit: a 2000-token window and a pinned 3000-word system prompt."""
    pol = tmp_path / "tiny.yaml"
    pol.write_text(
        "ctxpolicy: 1\n"
        "policies:\n"
        "  default:\n"
        "    model: {context_window: 2000, max_output_tokens: 200, tokenizer: cl100k_base}\n"
        "    budget: {reserve_output: 200, tool_growth: 0, safety_margin: 0}\n"
        "    pipeline:\n"
        "      - {layer: observation_mask, at: warning}\n"
    )
    trace = tmp_path / "big.jsonl"
    msgs = [
        {"role": "system", "content": "rule " * 2500},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "assistant", "content": "done"},
    ]
    trace.write_text("".join(json.dumps(m) + "\n" for m in msgs))
    return str(pol), str(trace)


def test_check_exits_1_on_overflow(overflow_policy: tuple[str, str]) -> None:
    pol, trace = overflow_policy
    code, out = invoke(trace, "--policy", pol, "--check", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["check"]["passed"] is False
    assert {p["code"] for p in doc["check"]["problems"]} == {"overflow"}


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def test_json_plot_and_html_report(tmp_path: Path) -> None:
    """One run: JSON valid against its schema, PNG of the expected size, HTML with the tables."""
    import jsonschema

    pytest.importorskip("matplotlib")
    from ctxpolicy.sim.plot import figure_size

    demo = [d for d in DEMO if "data-analysis" in d]
    png, html = tmp_path / "t.png", tmp_path / "r.html"
    code, out = invoke(
        *demo,
        "--policy",
        POLICY,
        "--agent",
        "coding_agent",
        "--json",
        "--plot",
        str(png),
        "--report",
        str(html),
        "--compare",
        ":coding_agent_16k",
        "--baseline",
        "none",
        "--baseline",
        "last_n",
        "--baseline",
        "observation_mask",
        "--baseline",
        "summary_at_fraction",
    )
    assert code == 0, out
    doc = json.loads(out)
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(doc)
    assert list(doc["summary"]) == [
        "coding_agent",
        "coding_agent_16k",
        "none",
        "last_n",
        "observation_mask",
        "summary_at_fraction",
    ]
    cod = doc["summary"]["coding_agent"]
    assert cod["overflows"] == 0 and cod["pairing_violations"] == 0
    assert cod["saving"] > 0.5  # the demo trace has huge tool results
    assert doc["summary"]["none"]["overflows"] > 0

    assert _png_size(png) == figure_size(len(demo))
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert '<table class="summary">' in page and '<table class="traces">' in page
    assert "data-analysis-session.jsonl" in page and "summary_at_fraction" in page
    assert "data:image/png;base64," in page
    body = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page.split("<body>", 1)[1])
    assert "<script" not in page and "http" not in body  # self-contained (the PNG's
    # base64 may spell "http" by chance: only what is outside the embedded images counts)


def test_human_table() -> None:
    demo = [d for d in DEMO if "data-analysis" in d]
    code, out = invoke(*demo, "--policy", POLICY, "--agent", "coding_agent")
    assert code == 0
    assert "Summary" in out and "data-analysis-session" in out and "check:" in out


def test_jobs_2_equals_sequential() -> None:
    traces = sorted(shared_traces(), key=lambda p: p.stat().st_size)[:3]
    args = [
        *map(str, traces),
        "--policy",
        POLICY,
        "--agent",
        "coding_agent",
        "--window",
        "8192",
        "--json",
        "--baseline",
        "last_n",
    ]
    c1, seq = invoke(*args)
    c2, par = invoke(*args, "--jobs", "2")
    assert c1 == c2 == 0
    assert json.loads(seq) == json.loads(par)


def test_bad_trace_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": \n')
    res = CliRunner().invoke(simulate, [str(bad), "--policy", POLICY, "--agent", "coding_agent"])
    assert res.exit_code == 2
    assert f"{bad}:2: invalid JSON" in res.output


def test_unknown_agent_exits_2() -> None:
    res = CliRunner().invoke(simulate, [DEMO[0], "--policy", POLICY, "--agent", "nope"])
    assert res.exit_code == 2


def test_trace_exported_after_compaction_is_warned_about(tmp_path: Path) -> None:
    """An agent's history holds ctxpolicy's reference lines: simulate says so, with the
    file and the first line (issue 31 item 4)."""
    raw = [json.loads(line) for line in Path(DEMO[0]).read_text().splitlines() if line]
    hist = tmp_path / "history.jsonl"
    lines = [json.dumps(m) for m in raw]
    lines[5] = json.dumps(
        {**raw[5], "content": "x\n[Full detail available at: .ctxpolicy/s/a.json]"}
    )
    hist.write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(
        simulate, [str(hist), DEMO[1], "--policy", POLICY, "--agent", "coding_agent_16k"]
    )
    assert res.exit_code == 0
    assert f"warning: {hist}:6: this trace already holds a snapshot reference" in res.output
    assert "record=PATH" in res.output
    assert DEMO[1] not in res.output.split("warning:", 1)[1].split("\n", 1)[0]
    assert res.output.count("warning:") == 1


def test_steps_show_the_state_reached_before_compaction() -> None:
    """``--steps`` said only where compaction left the context; a reader never saw the
    warning crossed (issue 31 item 7)."""
    code, out = invoke(DEMO[0], "--policy", POLICY, "--agent", "coding_agent_16k", "--steps")
    assert code == 0
    assert "before  reached      used" in out
    rows = [line.split() for line in out.splitlines() if "observation_mask" in line]
    row = next(r for r in rows if r[0].isdigit())
    before, reached, used = int(row[1].replace(",", "")), row[2], int(row[3].replace(",", ""))
    assert reached in ("warning", "error", "critical", "overflow") and before > used
    code, js = invoke(DEMO[0], "--policy", POLICY, "--agent", "coding_agent_16k", "--json")
    run = json.loads(js)["traces"][0]["runs"][0]
    i = int(row[0]) - 1
    assert run["series"]["before"][i] == before and run["series"]["state_before"][i] == reached


def test_events_log_feeds_report(tmp_path: Path) -> None:
    """``--events`` writes the policy runs' events; ``ctxpolicy report`` reads them back."""
    from ctxpolicy.cli import main

    log = tmp_path / "logs" / "events.jsonl"
    demo = [d for d in DEMO if "data-analysis" in d]
    args = [*demo, "--policy", POLICY, "--agent", "coding_agent", "--window", "8192"]
    args += ["--compare", f"{POLICY}:default", "--json", "--events", str(log)]
    code, out = invoke(*args)
    assert code == 0, out
    assert "events" not in json.loads(out)["traces"][0]  # the document is unchanged
    events = [json.loads(line) for line in log.read_text().splitlines()]
    name = Path(demo[0]).name
    assert {e["conv_id"] for e in events} == {f"coding_agent/{name}", f"default/{name}"}
    assert any(e["type"] == "context.compacted" for e in events)
    # numbers and names only: no message text reaches the log
    first_user = next(
        json.loads(line)["content"]
        for line in Path(demo[0]).read_text().splitlines()
        if json.loads(line)["role"] == "user"
    )
    assert first_user[:40] not in log.read_text()
    # the same log whatever the number of worker processes (traces keep their order)
    again = tmp_path / "again.jsonl"
    args = [*demo, *demo, "--policy", POLICY, "--agent", "coding_agent", "--window", "8192"]
    code, _ = invoke(*args, "--events", str(again), "--jobs", "2", "--json")
    assert code == 0
    twice = [json.loads(line) for line in again.read_text().splitlines()]
    drop = {"ts", "elapsed_ms", "duration_ms"}
    strip = [{k: v for k, v in e.items() if k not in drop} for e in twice]
    half = len(strip) // 2
    assert strip[:half] == strip[half:]

    report = CliRunner().invoke(main, ["report", str(log), "--json"])
    assert report.exit_code == 0, report.output
    totals = json.loads(report.stdout)["totals"]
    assert totals["conversations"] == 2 and totals["compactions"] > 0


def test_events_log_unwritable_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    demo = [d for d in DEMO if "data-analysis" in d]
    res = CliRunner().invoke(
        simulate,
        [*demo, "--policy", POLICY, "--agent", "coding_agent", "--events", str(tmp_path / "dir")],
    )
    assert res.exit_code != 0
    assert "--events" in res.output and "Traceback" not in res.output
