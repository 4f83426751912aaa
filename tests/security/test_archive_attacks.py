"""Issue 19 items 6, 7 and 10: compacted history stays recoverable.

* item 6 — with ``ledger: {enabled: false}`` the rounds a layer drops are still archived
  verbatim (the archive does not hang off the ledger);
* item 7 — an agent that keeps the *prepared* list as its history and restarts without
  state keeps the ledger (its facts and its archive reference): the fed-back ledger is
  re-adopted, not stripped, and its reference still reads the archive;
* item 10 — a full disk (a real store plugin whose writes raise ``ENOSPC``): nothing
  that could not be archived is dropped or shortened while the request fits
  ``window − reserve_output``; beyond that it goes with a ``data.lost`` event naming it.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.conversation import check_messages, content_text
from ctxpolicy.engine import LEDGER_MARK, Session
from ctxpolicy.engine.own import HANDOVER_MARK
from ctxpolicy.snapshots import LocalStore
from tests.engine_helpers import call, make_policy, plugin_module

BAD = "\udcff"
HISTORY = re.compile(r"ctxsnap://\S+/history")


def _conversation(rounds: int, chars: int, tag: str = "") -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "Task: fix BUG-77 in src/app.py"},
    ]
    for r in range(rounds):
        c = call(f"c{r}", path=f"src/f{r}.py")
        msgs.append({"role": "assistant", "content": f"round {r}", "tool_calls": [c]})
        body = f"{tag}round {r} marker-{r}-ü{BAD}𝔘 " + _filler(r, chars)
        msgs.append({"role": "tool", "tool_call_id": f"c{r}", "content": body})
    msgs.append({"role": "user", "content": "continue"})
    return msgs


def _filler(r: int, chars: int) -> str:
    return "".join(f"line {i} of round {r}: value={i * 7 % 13}\n" for i in range(chars // 30))


def _drop_policy(tmp_path: Path, **extra: Any) -> Any:
    return make_policy(
        tmp_path,
        model={"context_window": 8000, "max_output_tokens": 1000, "tokenizer": "cl100k_base"},
        pipeline=[{"layer": "drop_rounds", "at": "warning", "options": {"keep_recent_rounds": 2}}],
        **extra,
    )


def _types(s: Session) -> list[str]:
    return [e["type"] for e in s.events]


# ----------------------------------------------------------------------------- item 6
def test_rounds_dropped_without_a_ledger_are_archived(tmp_path: Path) -> None:
    s = Session(_drop_policy(tmp_path, ledger={"enabled": False}), conv_id="noledger")
    msgs = _conversation(10, 2500)
    out = s.prepare(msgs)
    assert not check_messages(out)
    assert len(out) < len(msgs), "the attack needs a compaction"
    assert not any(LEDGER_MARK in content_text(m.get("content")) for m in out)
    assert s.internals.context.derived.history is not None
    archived = s.recall(s.internals.context.derived.history.ref)
    sent = "\n".join(content_text(m.get("content")) for m in out)
    for r in range(10):
        if f"marker-{r}-" not in sent:
            assert f"marker-{r}-ü{BAD}𝔘" in archived, f"round {r} dropped without a trace"


# ----------------------------------------------------------------------------- item 7
def test_a_restarted_agent_feeding_back_the_prepared_list_keeps_the_ledger(
    tmp_path: Path,
) -> None:
    policy = _drop_policy(tmp_path)
    first = Session(policy, conv_id="restart")
    prepared = first.prepare(_conversation(10, 2500))
    ledgers = [m for m in prepared if content_text(m.get("content")).startswith(LEDGER_MARK)]
    assert len(ledgers) == 1
    ref = HISTORY.search(ledgers[0]["content"])
    assert ref is not None, "the ledger names the archive"

    # the process restarts: a new session, no state, the prepared list is the history
    again = Session(policy, conv_id="restart")
    history = [*prepared, {"role": "assistant", "content": "resumed"}]
    history.append({"role": "user", "content": "go on"})
    out = again.prepare(history)
    kept = [m for m in out if content_text(m.get("content")).startswith(LEDGER_MARK)]
    assert kept == ledgers, "the fed-back ledger is re-adopted verbatim, exactly once"
    assert "marker-0-" in again.recall(ref.group(0)), "its archive reference still reads"


def test_a_ledger_fed_back_twice_is_not_duplicated(tmp_path: Path) -> None:
    policy = _drop_policy(tmp_path)
    prepared = Session(policy, conv_id="twice").prepare(_conversation(10, 2500))
    ledger = next(m for m in prepared if content_text(m.get("content")).startswith(LEDGER_MARK))
    again = Session(policy, conv_id="twice")
    out = again.prepare([*prepared, dict(ledger), {"role": "user", "content": "more"}])
    assert sum(1 for m in out if content_text(m.get("content")).startswith(LEDGER_MARK)) == 1


def test_a_fed_back_handover_is_re_adopted_after_a_restart(tmp_path: Path) -> None:
    policy = _drop_policy(tmp_path)
    handover = {"goal": f"finish BUG-77 ü{BAD}", "constraints": ["never push to main"]}
    first = Session(policy, conv_id="handover", handover=handover)
    prepared = first.prepare(_conversation(3, 300))
    marked = [m for m in prepared if content_text(m.get("content")).startswith(HANDOVER_MARK)]
    assert len(marked) == 1
    again = Session(policy, conv_id="handover")  # no handover given: only the history has it
    out = again.prepare([*prepared, {"role": "user", "content": "go on"}])
    kept = [m for m in out if content_text(m.get("content")).startswith(HANDOVER_MARK)]
    assert kept == marked


# ----------------------------------------------------------------------------- item 10
class FullDisk(LocalStore):
    """The local store on a full disk: every write raises ENOSPC (reads still work)."""

    name = "full_disk_test"

    def write(self, conv_id: str, step: int, action: str, document: Mapping[str, Any]) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    def append(self, folder: str, name: str, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def full_disk(register_plugin: Callable[[object, str], str]) -> None:
    stores = plugin_module("full_disk", FullDisk, hook="ctxpolicy_register_snapshot_stores")
    register_plugin(stores, "full_disk_test_plugin")


def _full_policy(tmp_path: Path, pipeline: list[dict[str, Any]], window: int = 8000) -> Any:
    return make_policy(
        tmp_path,
        model={"context_window": window, "max_output_tokens": 1000, "tokenizer": "cl100k_base"},
        snapshots={"store": "full_disk_test", "path": str(tmp_path / "snaps")},
        pipeline=pipeline,
        on_overflow={"layer": "emergency", "options": {"keep_recent_rounds": 1, "retries": 1}},
    )


DROP = [
    {
        "layer": "drop_rounds",
        "at": "warning",
        "options": {"keep_recent_rounds": 2, "min_keep_tokens": 0},
    }
]
MASK = [
    {
        "layer": "observation_mask",
        "at": "warning",
        "options": {"max_age_rounds": 1, "max_chars": 100, "dedupe": False},
    }
]


@pytest.fixture(params=[DROP, MASK], ids=["drop", "mask"])
def full_disk_session(request: pytest.FixtureRequest, tmp_path: Path, full_disk: None) -> Session:
    """A session whose snapshot store is always full, with each archiving layer."""
    return Session(
        _full_policy(tmp_path, request.param), conv_id="full", tool_rules_in_prepare=False
    )


def test_full_disk_below_the_hard_limit_keeps_everything(full_disk_session: Session) -> None:
    s = full_disk_session
    budget = s.budget()
    msgs = _conversation(6, 2300)
    used = s.counter.count_messages(msgs)
    assert budget.target < used <= budget.window - budget.reserve_output
    out = s.prepare(msgs)
    assert out == msgs, "nothing that could not be archived leaves the context"
    assert "data.lost" not in _types(s)
    assert "snapshot.failed" in _types(s)
    rejected = [e for e in s.events if e["type"] == "layer.rejected"]
    assert rejected and "could not be archived" in rejected[0]["problems"][0]


def test_full_disk_above_the_hard_limit_drops_with_data_lost(full_disk_session: Session) -> None:
    s = full_disk_session
    budget = s.budget()
    msgs = _conversation(14, 2400)
    assert s.counter.count_messages(msgs) > budget.window - budget.reserve_output
    out = s.prepare(msgs)
    assert not check_messages(out)
    assert s.status is not None and s.status["used"] <= budget.window - budget.reserve_output
    lost = [e for e in s.events if e["type"] == "data.lost"]
    assert lost, "a loss must be explicit"
    named = {k for e in lost for k in e["units"]}
    sent = "\n".join(content_text(m.get("content")) for m in out)
    for r in range(14):  # every round missing from the context is named as lost
        if f"marker-{r}-ü{BAD}𝔘 " + _filler(r, 2400) not in sent:
            assert any(k.startswith(f"m{2 + 2 * r}-") for k in named), r
