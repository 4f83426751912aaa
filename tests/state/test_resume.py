"""The resume contract, end to end with real processes and SIGKILL (issue 20, item 4).

A shared trace runs under a shipped policy (``coding_agent`` of policies/agents.yaml
at a 16k window, so it summarises a dozen times) once without interruption, and once
in processes that are killed (SIGKILL) at random moments — during start-up, inside
``prepare``, inside a summary (one run kills itself there for certain) — each time
continued by a fresh process from the run's own journal (tests/state/_resume.py).
Snapshots go to a real directory; the state to sqlite or to a real PostgreSQL.

Asserted: the prepared messages of every call (re-done calls too) are byte-identical
to the uninterrupted run, and no summary that a completed call had already used is
ever requested again.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.shared_data import TRACES, require

ROOT = Path(__file__).resolve().parents[2]
TRACE = "mini-swe-agent__20251118_gemini-3-pro-74pct.django__django-13297.jsonl"
AGENT = "coding_agent"
WINDOW = 16384
KILLS = 8
# every test runs the whole trace a few times, with each state store
pytestmark = [pytest.mark.slow, pytest.mark.parametrize("kind", ["sqlite", "postgres"])]


def _config(tmp: Path, name: str, state: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Both runs use the same conv_id and snapshot directory (references name them)."""
    return {
        "journal": str(tmp / f"{name}.journal.jsonl"),
        "policy": str(ROOT / "policies" / "agents.yaml"),
        "agent": AGENT,
        "window": WINDOW,
        "snapshots": str(tmp / "snapshots"),
        "state": state,
        "trace": str(require(TRACES / TRACE)),
        "conv_id": "resume",
        **extra,
    }


def _run(config: dict[str, Any], kill_after: float | None = None, home: Path | None = None) -> int:
    """Run the child on ``config``; SIGKILL it after ``kill_after`` s. ``home``: the
    child's HOME, CTXPOLICY_HOME (``home/.ctxpolicy``) and working directory."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cwd = ROOT
    if home is not None:
        home.mkdir(exist_ok=True)
        env["HOME"], env["CTXPOLICY_HOME"] = str(home), str(home / ".ctxpolicy")
        cwd = home
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.state._resume", json.dumps(config)], cwd=cwd, env=env
    )
    try:
        return proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.kill()  # SIGKILL
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:  # pragma: no cover - never leave a child behind
            proc.kill()


def _journal(config: dict[str, Any]) -> list[dict[str, Any]]:
    path = Path(config["journal"])
    if not path.exists():  # killed before its first line (a start-up slower than the kill)
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a kill
    return out


def _state(kind: str, name: str, tmp: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    if kind == "sqlite":
        return {"store": "sqlite", "options": {"path": str(tmp / f"{name}.sqlite3")}}
    server = request.getfixturevalue("postgres_server")
    return {"store": "postgres", "options": {"dsn": server.dsn, "table": f"resume_{name}"}}


def _baseline(
    kind: str, tmp: Path, request: pytest.FixtureRequest
) -> tuple[dict[int, str], int, float]:
    """The uninterrupted run: digest of every prepared list, summaries, duration."""
    base = _config(tmp, "baseline", _state(kind, "baseline", tmp, request))
    start = time.monotonic()
    assert _run(base) == 0
    took = time.monotonic() - start
    (tmp / "snapshots").rename(tmp / "baseline-snapshots")  # the next run uses the path
    events = _journal(base)
    expected = {e["i"]: e["digest"] for e in events if e["ev"] == "prepare"}
    summaries = sum(e["ev"] == "summary.done" for e in events)
    assert len(expected) > 50 and summaries >= 5, (len(expected), summaries)
    return expected, summaries, took


def _baseline_and_cut(
    kind: str, tmp: Path, request: pytest.FixtureRequest
) -> tuple[dict[int, str], int, float, dict[str, Any]]:
    """The baseline's numbers (see ``_baseline``) and the config of the run to interrupt."""
    expected, summaries, took = _baseline(kind, tmp, request)
    return expected, summaries, took, _config(tmp, "killed", _state(kind, "killed", tmp, request))


def _interrupted(
    cut: dict[str, Any], plan: list[dict[str, Any]], home: Path | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Run ``cut`` once per entry of ``plan`` (config changes, ``kill_after`` seconds),
    then to the end (in ``home``, see ``_run``); returns the journal and the number of
    kills."""
    kills = 0
    for step in [*plan, {}]:
        step = dict(step)
        rc = _run({**cut, **step}, kill_after=step.pop("kill_after", None), home=home)
        assert rc in (0, -9), rc  # finished or killed, never crashed
        kills += rc == -9
        events = _journal(cut)
        if events and events[-1]["ev"] == "finished":
            return events, kills
    raise AssertionError("the run never finished")


def _check(
    kind: str, events: list[dict[str, Any]], expected: dict[int, str], summaries: int, kills: int
) -> None:
    # 1. every prepared list, re-done calls included, is the uninterrupted run's
    got = [(e["i"], e["digest"]) for e in events if e["ev"] == "prepare"]
    assert {i for i, _ in got} == set(expected)
    mismatched = [i for i, d in got if d != expected[i]]
    assert mismatched == [], f"calls {mismatched} differ after resuming"
    # 2. a summary used by a completed call is never requested again
    used: set[str] = set()
    pending: set[str] = set()
    calls = 0
    for e in events:
        if e["ev"] == "summary.start":
            assert e["digest"] not in used, "a summary already used was requested again"
        elif e["ev"] == "summary.done":
            calls += 1
            pending.add(e["digest"])
        elif e["ev"] == "prepare":
            used |= pending
            pending.clear()
    # a restart without durable state would pay again for every summary done before it
    saved, done = 0, 0
    for e in events:
        done += e["ev"] == "summary.done"
        saved += done if e["ev"] == "start" else 0
    print(
        f"{kind}: {len(got)} calls compared ({len(expected)} distinct), {kills} kills, "
        f"summarizer calls {calls} (uninterrupted run: {summaries}), "
        f"{saved} summarizer calls saved by resuming"
    )
    assert calls <= summaries + kills  # at most the summaries a kill interrupted


def test_runs_killed_between_calls_resume_byte_identical(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """SIGKILL right after a call (state committed), during start-up, and clean stops."""
    expected, summaries, _, cut = _baseline_and_cut(kind, tmp_path, request)
    calls = sorted(expected)
    plan: list[dict[str, Any]] = [
        {"die_after_call": [calls[5], calls[30]]},  # dies after call 6
        {"kill_after": 0.2},  # killed while starting
        {"die_after_call": [calls[30]]},
        {"stop_after": 17},
        {"die_after_call": [calls[70]]},
    ]
    events, kills = _interrupted(cut, plan)
    assert kills == 4
    _check(kind, events, expected, summaries, kills)


def test_runs_killed_inside_summaries_resume_byte_identical(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """SIGKILL inside a summary (so inside ``prepare``), twice, then to the end."""
    expected, summaries, _, cut = _baseline_and_cut(kind, tmp_path, request)
    events, kills = _interrupted(cut, [{"die_in_summary": 3}, {"die_in_summary": 4}])
    assert kills == 2
    starts = [e["ev"] for e in events]
    assert starts.count("summary.start") > starts.count("summary.done")  # killed inside
    _check(kind, events, expected, summaries, kills)


def test_runs_killed_at_random_moments_resume_byte_identical(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """SIGKILL at random moments: start-up, tool results, prepare, summaries. A kill
    between a snapshot write and the state commit is covered by idempotent snapshot
    writes (the redone call gets the same name for the same document)."""
    expected, summaries, took, cut = _baseline_and_cut(kind, tmp_path, request)
    cut["summary_sleep"] = 0.3
    rng = random.Random(f"resume-{kind}")
    plan = [{"kill_after": rng.uniform(0.5, took + 2.0)} for _ in range(KILLS)]
    events, kills = _interrupted(cut, plan)
    _check(kind, events, expected, summaries, kills)
