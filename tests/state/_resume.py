"""A resumable agent run for the resume-contract tests (``python -m tests.state._resume``).

Replays one trace like an agent would (``add_tool_result`` for each tool message,
``prepare`` before each assistant message) under a policy whose snapshots and
state live in real, shared places. Everything it did is appended (and fsynced) to
one journal, so a process killed at any point (SIGKILL) can be followed by a fresh
one that continues where the journal ends — the way an agent restarts from its own
checkpoint. The journal lines are::

    {"ev": "start"}                                a process started
    {"ev": "tool", "i": 7, "text": "..."}          a tool result entered the context
    {"ev": "prepare", "i": 8, "digest": "..."}     the messages prepared for call i
    {"ev": "summary.start", "digest": "..."}       the summarizer was called
    {"ev": "summary.done", "digest": "..."}        ... and returned

The summarizer is deterministic (the extractive one) but slow (``summary_sleep``)
so that kills land inside it.

``"via": "messages"`` feeds tool results through ``messages`` only (no
``add_tool_result``: the LangChain middleware's and the OpenAI wrapper's path);
``"snapshots": null`` keeps the policy's own snapshot path (under ``$HOME``).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = self._read()
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run

    def _read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by the kill: never completed
                break
        return out

    def write(self, **event: Any) -> None:
        line = json.dumps(event, ensure_ascii=False)
        if self.path.stat().st_size and not self._ends_with_newline():
            line = "\n" + line
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"


def run(config: dict[str, Any]) -> None:
    from ctxpolicy import Session, load_policy
    from ctxpolicy.components import SummaryRequest
    from ctxpolicy.plugins import get_registry
    from ctxpolicy.policy.models import StateSpec
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.sim.replay import with_snapshots, with_window

    journal = Journal(Path(config["journal"]))
    policy = with_window(load_policy(config["policy"], agent=config["agent"]), config["window"])
    if config.get("snapshots") is not None:
        policy = with_snapshots(policy, config["snapshots"])
    via_messages = config.get("via") == "messages"
    policy = policy.model_copy(update={"state": StateSpec.model_validate(config["state"])})
    extractive_cls = get_registry().get("summarizer", "extractive")
    assert extractive_cls is not None
    extractive = extractive_cls()
    sleep = float(config.get("summary_sleep", 0.0))
    die_in_summary = config.get("die_in_summary")  # kill ourselves inside this summary
    started = 0

    def summarize(request: SummaryRequest) -> str:
        nonlocal started
        key = digest([request.messages, request.previous_summary, request.max_tokens])
        journal.write(ev="summary.start", digest=key)
        started += 1
        if started == die_in_summary:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(sleep)
        text = str(extractive.summarize(request))  # type: ignore[attr-defined]
        journal.write(ev="summary.done", digest=key)
        return text

    journal.write(ev="start")
    messages = load_trace(config["trace"])
    done = {(e["ev"], e["i"]): e for e in journal.lines if "i" in e}
    session = Session(policy, conv_id=config["conv_id"], summarizer=summarize)
    convo: list[dict[str, Any]] = []
    pending: dict[str, Any] = {}
    tool_step = 0
    prepares = 0
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            if ("prepare", i) not in done:
                prepared = session.prepare(convo)
                full = {"prepared": prepared} if config.get("full") else {}
                journal.write(ev="prepare", i=i, digest=digest(prepared), **full)
                prepares += 1
                if prepares == config.get("stop_after"):  # a clean stop between calls
                    return
                if i in config.get("die_after_call", ()):  # SIGKILL between calls
                    os.kill(os.getpid(), signal.SIGKILL)
            pending = {str(tc.get("id", "")): tc for tc in m.get("tool_calls") or []}
            convo.append(dict(m))
        elif role == "tool" and via_messages:
            convo.append(dict(m))  # the engine snapshots it when it is long
        elif role == "tool":
            tool_step += 1
            if ("tool", i) in done:
                text = done[("tool", i)]["text"]
            else:
                tid = str(m.get("tool_call_id", ""))
                call = pending.get(tid) or {"id": tid, "function": {"name": "unknown"}}
                text = session.add_tool_result(call, m.get("content"), step=tool_step)
                journal.write(ev="tool", i=i, text=text)
            convo.append({**m, "content": text})
        else:
            convo.append(dict(m))
    journal.write(ev="finished")


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
