"""``ctxpolicy report``: the dashboard's views from an event log a real Session wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy import Session
from ctxpolicy.cli import LAZY_COMMANDS, main
from ctxpolicy.events.sinks import JsonlEventSink
from tests.engine_helpers import conversation, make_policy


@pytest.fixture
def event_log(tmp_path: Path) -> Path:
    path = tmp_path / "events.jsonl"
    with JsonlEventSink(path) as sink:
        for conv in ("run-1", "run-2"):
            session = Session(make_policy(tmp_path), conv_id=conv, on_event=sink)
            for rounds in (2, 8, 20, 30):
                session.prepare(conversation(rounds, 2500))
    return path


def test_registered() -> None:
    assert LAZY_COMMANDS["report"] == "ctxpolicy.cli.report:report"


def test_text(runner: CliRunner, event_log: Path) -> None:
    result = runner.invoke(main, ["report", str(event_log), "--model", "gpt-4o"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "events.jsonl: 2 conversations, 8 calls" in out
    assert "run-1" in out and "run-2" in out and "gpt-4o list prices" in out
    assert "saved" in out and "$" in out


def test_json_and_html(runner: CliRunner, event_log: Path, tmp_path: Path) -> None:
    page = tmp_path / "out" / "report.html"
    page.parent.mkdir()
    result = runner.invoke(main, ["report", str(event_log), "--json", "--html", str(page)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["totals"]["conversations"] == 2 and data["totals"]["compactions"] > 0
    assert data["totals"]["usd_saved"] > 0
    html = page.read_text()
    assert '"run-1"' in html and "<style>" in html and "dashboard/app.js" not in html


def test_problems(runner: CliRunner, tmp_path: Path, event_log: Path) -> None:
    missing = runner.invoke(main, ["report", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2 and "nope.jsonl" in missing.output
    assert "Traceback" not in missing.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"role": "user", "content": "a recorded trace, not events"}\n')
    none = runner.invoke(main, ["report", str(empty)])
    assert none.exit_code == 1 and "no ctxpolicy events" in none.output
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("garbage\n" + event_log.read_text())
    ok = runner.invoke(main, ["report", str(mixed), str(event_log)])
    assert ok.exit_code == 0
    assert "1 of" in ok.output and "first at line 1" in ok.output
    bad_prices = tmp_path / "prices.json"
    bad_prices.write_text("{}")
    assert (
        runner.invoke(main, ["report", str(event_log), "--prices", str(bad_prices)]).exit_code == 2
    )
