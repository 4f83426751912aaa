"""An agent loop as a hypothesis state machine: invariants after every prepare.

Rules add user turns, assistant steps with 0–8 parallel tool calls, huge results,
summarizer failures and provider overflow errors. After every ``prepare``: pairs
intact, pinned messages present, last user turn present, the list fits the trigger
or an overflow event was emitted, and the agent's own history is never mutated.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ctxpolicy.components import Summarizer, SummaryRequest
from ctxpolicy.conversation import check_messages
from ctxpolicy.engine import ContextOverflowError, Session
from tests.engine_helpers import make_policy

#: Steps per run × runs: CI profile gives ≥ 10,000 generated steps.
STEPS = int(os.environ.get("CTXPOLICY_STATEFUL_STEPS", "100"))
RUNS = int(os.environ.get("CTXPOLICY_STATEFUL_RUNS", "120"))
#: Steps actually executed (every rule call), checked by the last test.
EXECUTED = {"steps": 0, "prepares": 0}


class FlakySummarizer(Summarizer):
    name = "flaky_test"

    def __init__(self) -> None:
        super().__init__()
        self.fail = False
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        if self.fail:
            raise TimeoutError("summarizer timed out")
        return "Summary: " + " ".join(
            str(m.get("content") or "")[:40] for m in request.messages[:5]
        )


class AgentLoop(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.summarizer = FlakySummarizer()
        policy = make_policy(
            model={"context_window": 6000, "max_output_tokens": 800, "tokenizer": "cl100k_base"},
            budget={"target": 0.6, "safety_margin": 200},
            pipeline=[
                {
                    "layer": "observation_mask",
                    "at": "warning",
                    "options": {"max_age_rounds": 2, "max_chars": 200},
                },
                {
                    "layer": "summarize",
                    "at": "warning",
                    "options": {"keep_recent_rounds": 2, "max_failures": 2},
                },
                {
                    "layer": "drop_rounds",
                    "at": "error",
                    "options": {"keep_recent_rounds": 2, "min_keep_tokens": 500},
                },
            ],
        )
        self.session = Session(policy, summarizer=self.summarizer)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a test agent."},
            {"role": "user", "content": "Task: keep ORDER-7781 in mind."},
        ]
        self.ids = 0
        self.prepared: list[dict[str, Any]] | None = None
        self.snapshot: list[dict[str, Any]] = []
        self.basis: list[dict[str, Any]] = []

    @rule(text=st.text(max_size=60))
    def user_turn(self, text: str) -> None:
        EXECUTED["steps"] += 1
        self.messages.append({"role": "user", "content": "user: " + text})

    @rule(n=st.integers(0, 8), size=st.sampled_from([20, 500, 4000, 40000]))
    def assistant_step(self, n: int, size: int) -> None:
        EXECUTED["steps"] += 1
        calls = []
        for _ in range(n):
            self.ids += 1
            calls.append(
                {
                    "id": f"t{self.ids}",
                    "type": "function",
                    "function": {"name": "run", "arguments": json.dumps({"i": self.ids})},
                }
            )
        msg: dict[str, Any] = {"role": "assistant", "content": f"step {self.ids}"}
        if calls:
            msg["tool_calls"] = calls
        self.messages.append(msg)
        for c in calls:
            body = self.session.add_tool_result(c, f"result {c['id']} " + "x" * size)
            self.messages.append({"role": "tool", "tool_call_id": c["id"], "content": body})

    @rule(fail=st.booleans())
    def summarizer_health(self, fail: bool) -> None:
        EXECUTED["steps"] += 1
        self.summarizer.fail = fail

    @precondition(lambda self: self.messages[-1]["role"] in ("user", "tool"))
    @rule()
    def prepare(self) -> None:
        EXECUTED["steps"] += 1
        EXECUTED["prepares"] += 1
        self.snapshot = copy.deepcopy(self.messages)
        self.prepared = self.session.prepare(self.messages)
        self.basis = list(self.messages)
        assert self.messages == self.snapshot, "prepare mutated the agent's history"

    @precondition(lambda self: self.prepared is not None)
    @rule()
    def provider_overflow(self) -> None:
        EXECUTED["steps"] += 1
        try:
            out = self.session.on_error(
                "context_length_exceeded: maximum context length is 6000 tokens", self.messages
            )
        except ContextOverflowError as exc:
            assert exc.attempts >= 2
            return
        assert out is not None
        self.prepared = out
        self.basis = list(self.messages)

    @invariant()
    def prepared_is_sound(self) -> None:
        if self.prepared is None:
            return
        out = self.prepared
        assert check_messages(out) == []
        assert out[0] == {"role": "system", "content": "You are a test agent."}
        assert {"role": "user", "content": "Task: keep ORDER-7781 in mind."} in out
        last_user = next(m for m in reversed(self.basis) if m["role"] == "user")
        assert last_user in out, "last user turn missing"
        status = self.session.status
        assert status is not None
        if status["used"] > status["trigger"]:
            assert any(e["type"] == "context.overflow" for e in self.session.events)


AgentLoop.TestCase.settings = settings(
    max_examples=RUNS,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
TestAgentLoop = AgentLoop.TestCase


def test_enough_steps_were_generated() -> None:
    """Runs after TestAgentLoop (file order): the machine really explored."""
    if EXECUTED["steps"] == 0:  # run alone with -k
        return
    print(f"stateful: {EXECUTED['steps']} steps, {EXECUTED['prepares']} prepares")
    assert EXECUTED["prepares"] > 0
    if os.environ.get("CI") and RUNS * STEPS >= 10_000:
        assert EXECUTED["steps"] >= 5_000, EXECUTED
