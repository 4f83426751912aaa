"""The resume contract on both ways tool results arrive, in two home directories (issue 28, items 5 and 7).

A shared trace runs under ``coding_agent`` (policies/agents.yaml, 16k window) once
without interruption in one home directory, and once in another home directory in
real child processes that stop cleanly twice, are killed (SIGKILL) after a call,
inside a summary (so inside ``prepare``, after the call's snapshots were written and
before its state commit) and at a random moment, each followed by a fresh process
(tests/state/_resume.py). Snapshots and the sqlite state live where the policy puts
them, under the run's ``$CTXPOLICY_HOME`` (and ``$HOME``, its working directory);
the two runs share nothing.

Tool results arrive either through ``add_tool_result`` or through ``messages`` only
(the engine snapshots the long ones itself). Asserted: every prepared list, re-done
calls included, is byte-identical to the uninterrupted run's. That needs snapshot
names that are a function of the persisted state (not of a per-process counter)
and references without the machine's path (the two homes differ).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.snapshots import LocalStore
from tests.shared_data import TRACES, require
from tests.state.test_resume import AGENT, TRACE, WINDOW, _check, _interrupted, _journal
from tests.state.test_resume import _run as _run_child

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp: Path, home: str, via: str, state: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "journal": str(tmp / f"{home}.journal.jsonl"),
        "home": str(tmp / home),
        "policy": str(ROOT / "policies" / "agents.yaml"),
        "agent": AGENT,
        "window": WINDOW,
        "snapshots": None,  # the policy's own path: $CTXPOLICY_HOME/snapshots
        "state": state,
        "trace": str(require(TRACES / TRACE)),
        "conv_id": "resume",
        "via": via,
        **extra,
    }


def _state(kind: str, home: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if kind == "sqlite":
        return {"store": "sqlite"}  # the default file, in the snapshot root under $HOME
    server = request.getfixturevalue("postgres_server")
    return {"store": "postgres", "options": {"dsn": server.dsn, "table": f"paths_{home}"}}


def _run(config: dict[str, Any], kill_after: float | None = None) -> int:
    """The child of test_resume, in the config's own home directory."""
    return _run_child(config, kill_after, home=Path(config["home"]))


def _prepared(events: list[dict[str, Any]]) -> dict[int, str]:
    return {e["i"]: e["digest"] for e in events if e["ev"] == "prepare"}


@pytest.mark.slow
@pytest.mark.parametrize("via", ["add_tool_result", "messages"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_resume_in_another_home_is_byte_identical(
    kind: str, via: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    base = _config(tmp_path, "home-a", via, _state(kind, f"a_{via[:3]}", request), full=True)
    start = time.monotonic()
    assert _run(base) == 0
    took = time.monotonic() - start
    events = _journal(base)
    expected = _prepared(events)
    summaries = sum(e["ev"] == "summary.done" for e in events)
    assert len(expected) > 50 and summaries >= 5, (len(expected), summaries)
    store = LocalStore(root=str(tmp_path / "home-a" / ".ctxpolicy" / "snapshots"))
    snaps = [r for d in store.root_path.iterdir() if d.is_dir() for r in store.list_folder(d.name)]
    assert len(snaps) > 20  # the engine snapshotted results on this path too
    calls = sorted(expected)
    cut = _config(tmp_path, "home-b", via, _state(kind, f"b_{via[:3]}", request), full=True)
    rng = random.Random(f"paths-{kind}-{via}")
    plan: list[dict[str, Any]] = [
        {"stop_after": 12},  # a clean exit
        {"die_after_call": [calls[30]]},  # SIGKILL after a committed call
        {"stop_after": 9},  # a clean exit
        {"die_in_summary": 2, "summary_sleep": 0.05},  # SIGKILL inside prepare
        {"kill_after": rng.uniform(0.5, took), "summary_sleep": 0.05},  # at random
    ]
    done, kills = _interrupted(cut, plan, home=Path(cut["home"]))
    assert kills >= 2 and sum(e["ev"] == "start" for e in done) >= 5
    _check(f"{kind}/{via}", done, expected, summaries, kills)
    # no machine path in any prepared list: the homes differ, the bytes do not
    assert str(tmp_path) not in json.dumps([e for e in done if e["ev"] == "prepare"])
