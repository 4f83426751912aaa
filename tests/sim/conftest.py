"""Fixtures for the simulate tests: the shared real traces, a word counter, a scripted strategy."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.shared_data import shared_traces  # noqa: F401  (re-exported for the sim tests)

ROOT = Path(__file__).resolve().parents[2]
POLICY = str(ROOT / "policies" / "agents.yaml")
DEMO = sorted(str(p) for p in (ROOT / "examples" / "traces").glob("*.jsonl"))
# the 16k coding agent against the default one and two baselines
COMPARED = [
    "--policy",
    POLICY,
    "--agent",
    "coding_agent_16k",
    "--compare",
    ":coding_agent",
    "--baseline",
    "none",
    "--baseline",
    "observation_mask",
]


class WordCounter:
    """One token per whitespace-separated word of content + tool-call arguments."""

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_messages(self, msgs: Any) -> int:
        from ctxpolicy.sim.replay import message_text

        return sum(len(message_text(m).split()) for m in msgs)


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


class Scripted:
    """A strategy whose prepare() is a function of (step, convo): exact, hand-checkable."""

    kind = "policy"

    def __init__(
        self,
        fn: Callable[[int, list[dict[str, Any]]], list[dict[str, Any]]],
        snapshots: Mapping[str, str] | None = None,
        hard_limit: int = 1000,
    ) -> None:
        self.name = "scripted"
        self.label = "scripted"
        self.fn = fn
        self.step = 0
        self.snapshots = dict(snapshots or {})
        self.hard_limit = hard_limit

    def tool_result(self, call: Mapping[str, Any], content: Any, step: int) -> str:
        return content

    def prepare(self, convo: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
        out = self.fn(self.step, convo)
        self.step += 1
        return out, []

    def budget_numbers(self) -> dict[str, int]:
        return {
            "trigger": 100,
            "target": 50,
            "warning": 70,
            "error": 90,
            "critical": 95,
            "hard_limit": self.hard_limit,
            "window": self.hard_limit + 10,
            "reserve_output": 10,
        }

    def recall(self, ref: str) -> str | None:
        return self.snapshots.get(ref)

    def events(self) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        return None


@pytest.fixture
def counter() -> WordCounter:
    return WordCounter()
