"""``ctxpolicy tune`` end to end: determinism, improvement over a bad base, the diff,
--check exit codes, a shared sqlite study, --json, and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy.cli.tune import tune
from ctxpolicy.resolve.load import load_policy, validate_file
from ctxpolicy.tune.diff import same_policy
from tests.engine_helpers import cache_alone

from .conftest import ROOT, WASTEFUL


def run(traces: list[str], out: Path, *extra: str) -> tuple[int, dict]:
    args = [*traces, "--policy", str(WASTEFUL), "--agent", "wasteful", "--workers", "1"]
    res = CliRunner().invoke(
        tune, [*args, "--out", str(out), "--json", *extra], catch_exceptions=False
    )
    return res.exit_code, json.loads(res.output)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, dict]]]:
    """The same seeded tune twice; --check with margin 0 (strict) and 0.99 (lenient)."""
    from tests.shared_data import TRACES, require

    from .conftest import SHORT

    traces = [str(require(TRACES / n)) for n in SHORT]
    tmp = tmp_path_factory.mktemp("tune")
    # the wasteful base compacts by the cache alone (the engine's price of an optional
    # compaction's lost facts would already hold most of its waste back)
    with cache_alone():
        return tmp, [
            run(traces, tmp / "a", "--seed", "7", "--check", "--margin", "0"),
            run(traces, tmp / "b", "--seed", "7", "--check", "--margin", "0.99"),
        ]


def test_seeded_tune_is_deterministic_and_beats_a_bad_base(two_runs):
    tmp_path, [(_, doc1), (_, doc2)] = two_runs
    assert doc1["chosen"]["changes"] == doc2["chosen"]["changes"] != {}
    assert doc1["trials_table"] == doc2["trials_table"]
    diff1 = (tmp_path / "a" / "wasteful_tuned.yaml").read_text()
    assert diff1 == (tmp_path / "b" / "wasteful_tuned.yaml").read_text()
    # honest: held-out numbers of both, the chosen one cheaper by the objective (the
    # bill under prompt caching) and keeping as much
    assert doc1["objectives"]["cost"] == "total"
    assert doc1["traces"]["held_out"] and doc1["recommended"] is True
    base, chosen = doc1["base"]["held_out"], doc1["chosen"]["held_out"]
    assert chosen["total"] < base["total"]
    assert chosen["compactions"] < base["compactions"]  # the needless rewrite is gone
    assert chosen["in_context"] >= base["in_context"]
    assert chosen["avoidable_overflows"] <= base["avoidable_overflows"]
    assert doc1["held_out_gain"] > 0
    for name in ("report.html", "pareto.png", "tune.json"):
        assert (tmp_path / "a" / name).stat().st_size > 0
    assert "Held-out comparison" in (tmp_path / "a" / "report.html").read_text()


def test_json_output_matches_its_schema(two_runs):
    import jsonschema

    schema = json.loads((ROOT / "schemas" / "tune-output.schema.json").read_text())
    _, runs = two_runs
    for _, doc in runs:
        jsonschema.Draft202012Validator(schema).validate(doc)


def test_the_diff_validates_and_sets_only_what_changed(two_runs):
    tmp_path, [(_, doc), _] = two_runs
    path = tmp_path / "a" / "wasteful_tuned.yaml"
    assert [d for d in validate_file(path) if d.severity == "error"] == []
    tuned = load_policy(path, "wasteful_tuned")
    base = load_policy(WASTEFUL, "wasteful")
    assert not same_policy(tuned, base)
    text = path.read_text()
    assert 'extends: "wasteful"' in text
    body = text.split("policies:")[1]
    assert "description" not in body and "model" not in body
    assert text.count("# was ") == len(doc["chosen"]["changes"])
    assert "reverting it alone" in text


def test_check_exit_codes(two_runs):
    _, [(strict, doc), (lenient, _)] = two_runs
    assert doc["held_out_gain"] > 0
    assert strict == 1
    assert lenient == 0


def test_a_sqlite_study_is_shared_between_runs(traces3: list[str], tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    args = ("--seed", "1", "--trials", "2", "--storage", url, "--study", "shared")
    _, first = run(traces3, tmp_path / "one", *args)
    _, second = run(traces3, tmp_path / "two", *args)
    assert len(first["trials_table"]) == 2
    assert len(second["trials_table"]) == 4
    assert second["trials_table"][:2] == first["trials_table"]


def test_unknown_space_path_is_a_usage_error(traces3: list[str], tmp_path: Path):
    pol = tmp_path / "p.yaml"
    pol.write_text(
        f"ctxpolicy: 1\ninclude: [{json.dumps(str(WASTEFUL))}]\npolicies:\n"
        "  mine:\n    extends: wasteful\n"
        "    tune: {space: {'pipeline[summarize].keep_recent_rounds': {low: 1, high: 4}}}\n"
    )
    res = CliRunner().invoke(tune, [*traces3, "--policy", str(pol), "--agent", "mine"])
    assert res.exit_code == 2
    assert "pipeline[summarize].keep_recent_rounds" in res.output
    assert f"{pol}:6:" in res.output  # file:line:col of the key
    assert "Traceback" not in res.output


def test_ctrl_c_keeps_the_best_so_far_and_writes_the_report(traces3: list[str], tmp_path: Path):
    db = tmp_path / "study.db"
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "ctxpolicy.cli", "tune", *traces3, "--policy", str(WASTEFUL)]
    cmd += ["--agent", "wasteful", "--trials", "400", "--workers", "1", "--out", str(out)]
    cmd += ["--storage", f"sqlite:///{db}", "--study", "sigint"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Ctrl-C as from a terminal: a pytest-xdist worker ignores SIGINT, and an ignored
    # signal stays ignored in the programs it starts
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        done = 0
        while done < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if db.exists():
                try:
                    with closing(sqlite3.connect(db, timeout=30)) as con:
                        done = con.execute(
                            "select count(*) from trials where state = 'COMPLETE'"
                        ).fetchone()[0]
                except sqlite3.Error:
                    pass
        assert done >= 3, proc.stderr.read().decode() if proc.poll() is not None else done
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr.decode()
    assert "interrupted" in stdout.decode()
    doc = json.loads((out / "tune.json").read_text())
    assert doc["interrupted"] is True
    assert 3 <= len(doc["trials_table"]) < 400
    assert doc["chosen"] is not None and doc["base"]["held_out"] is not None
    assert (out / "report.html").exists()


def test_trace_with_truncation_markers_is_warned_about(traces3: list[str], tmp_path: Path):
    hist = tmp_path / "history.jsonl"
    hist.write_text(
        '{"role": "user", "content": "go"}\n'
        '{"role": "tool", "tool_call_id": "c", "content": "a\\n... [1200 chars omitted] ...\\nb"}\n'
    )
    pol = tmp_path / "p.yaml"
    pol.write_text(
        f"ctxpolicy: 1\ninclude: [{json.dumps(str(WASTEFUL))}]\npolicies:\n"
        "  mine:\n    extends: wasteful\n"
        "    tune: {space: {'pipeline[summarize].keep_recent_rounds': {low: 1, high: 4}}}\n"
    )
    res = CliRunner().invoke(tune, [str(hist), *traces3, "--policy", str(pol), "--agent", "mine"])
    assert f"warning: {hist}:2: this trace already holds a truncation marker" in res.output


def test_headline_is_a_printed_number_and_one_held_out_trace_is_thin(
    traces3: list[str], tmp_path: Path
):
    """The headline's saving is the printed change of the minimised cost (it used to be
    a number printed nowhere else), and a held-out comparison on one trace is flagged."""
    import re

    args = [*traces3, "--policy", str(WASTEFUL), "--agent", "wasteful", "--workers", "1"]
    res = CliRunner().invoke(
        tune,
        [*args, "--out", str(tmp_path), "--seed", "7", "--trials", "3"],
        catch_exceptions=False,
    )
    out = res.output
    assert "1 held-out traces" in out
    assert "warning: thin evidence: the held-out comparison rests on 1 trace(s)" in out
    change = re.search(r"held-out  change:  (\w[\w ]*?) ([+-]\d+\.\d%)", out)
    assert change, out
    assert change.group(1) == "total cost"  # the objective of this policy's tune section
    if "recommended (" in out:
        assert f"recommended (total cost {change.group(2)} on 1 held-out trace(s))" in out
