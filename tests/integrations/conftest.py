"""Shared fixtures of the integration tests: policies, tool outputs, pairing checks."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.conversation import check_messages
from ctxpolicy.policy.models import Policy
from ctxpolicy.testing.conversations import tool_call


def make_policy(
    tmp_path: Path,
    *,
    window: int = 6000,
    reserve_output: int = 512,
    tool_growth: int = 600,
    safety_margin: int = 200,
    max_chars: int = 6000,
    keep_recent_rounds: int = 3,
    ledger: bool = False,
) -> Policy:
    """A complete resolved policy, as ``load_policy`` would produce it."""
    return Policy.model_validate(
        {
            "agent": "test_agent",
            "model": {
                "context_window": window,
                "max_output_tokens": 1024,
                "tokenizer": "cl100k_base",
            },
            "budget": {
                "reserve_output": reserve_output,
                "tool_growth": tool_growth,
                "safety_margin": safety_margin,
                "target": 0.7,
            },
            "thresholds": {"warning": 0.7, "error": 0.9, "critical": 0.95},
            "pipeline": [
                {
                    "layer": "observation_mask",
                    "at": "warning",
                    "options": {"max_age_rounds": 4, "max_chars": 200},
                },
                {
                    "layer": "drop_rounds",
                    "at": "warning",
                    "options": {"keep_recent_rounds": keep_recent_rounds, "min_keep_tokens": 500},
                },
            ],
            "on_overflow": {
                "layer": "emergency",
                "options": {"keep_recent_rounds": 2, "retries": 1},
            },
            "tools": {"*": {"preprocess": "head_tail", "options": {"max_chars": max_chars}}},
            "snapshots": {"path": str(tmp_path / "snapshots")},
            "pinned": {"system": True, "first_user": True, "last_user": True},
            "ledger": {"enabled": ledger, "max_tokens": 400},
            "constraints": [],
            "cache": {"preserve_prefix": False, "min_gain_tokens": 0},
        }
    )


#: The one tool the OpenAI-format clients (openai, litellm) are offered.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Path."}},
            },
        },
    }
]


def big_output(step: int, n_lines: int = 160) -> str:
    """A tool output of a few thousand tokens with recognisable lines."""
    return "\n".join(
        f"src/module_{step}.py:{i}: value_{step}_{i} = compute({i}, step={step})  # checked"
        for i in range(n_lines)
    )


def _reads(
    task: str, steps: int, lines: int, call: Callable[[int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """System, ``task``, then ``steps`` tool calls (``call(i)``) each answered by
    ``big_output(i, lines)``."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": task},
    ]
    for i in range(steps):
        tc = call(i)
        msgs.append({"role": "assistant", "content": None, "tool_calls": [tc]})
        msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": big_output(i, lines)})
    return msgs


def read_history(steps: int, lines: int, task: str) -> list[dict[str, Any]]:
    """A chat history: system, ``task``, then ``steps`` read_file calls (``call_0``, ...)
    each answered by ``big_output(i, lines)``."""
    return _reads(
        task, steps, lines, lambda i: tool_call(f"call_{i}", "read_file", {"path": f"f{i}.py"})
    )


def read_until(
    steps: int, records: Callable[[], Sequence[Any]]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A scripted server's answers: one read_file call (of ``f<n>``, ``n`` the tool
    results in the request) until ``steps`` calls were accepted (``records()``, the
    server's), then "done: BUG-1234 fixed"."""

    def script(body: dict[str, Any]) -> dict[str, Any]:
        n = sum(1 for m in body["messages"] if m["role"] == "tool")
        if len([r for r in records() if r.status == 200]) >= steps:
            return {"content": "done: BUG-1234 fixed"}
        return {
            "content": "",
            "tool_calls": [{"name": "read_file", "arguments": {"path": f"f{n}"}}],
        }

    return script


def assert_pairing(messages: list[dict[str, Any]]) -> None:
    violations = check_messages(messages)
    assert not violations, [v.detail for v in violations]


def tool_args(tc: Any) -> dict[str, Any]:
    return json.loads(tc.function.arguments or "{}")


@pytest.fixture
def policy_factory(tmp_path: Path):
    def factory(**kw: Any) -> Policy:
        return make_policy(tmp_path, **kw)

    return factory


def long_history(steps: int = 12, lines: int = 40) -> list[dict[str, Any]]:
    """A tool-call history long enough that a 6,000-token window compacts it: ``steps``
    reads of ``lines`` lines each."""
    return _reads("Fix BUG-1234.", steps, lines, lambda i: tool_call(f"c{i}", "read", {}))


class SeenThreads(dict):  # type: ignore[type-arg]
    """A message that records the threads converting it (``to_plain`` reads its
    items): set ``SeenThreads.threads = []`` before a call, read it after."""

    threads: list[int]

    def items(self):  # type: ignore[no-untyped-def]
        type(self).threads.append(threading.get_ident())
        return super().items()


def resumed(events: list[dict[str, Any]]) -> bool:
    """Whether a session that reported ``events`` resumed a stored state."""
    return any(e.get("type") == "state.resumed" for e in events)


class Crowd:
    """Other conversations opened in the middle of one conversation's step.

    An ``on_event`` sink for an adapter's sessions: at the ``nth`` ``event`` of the
    conversation stored as ``target`` (an event of the step's engine work), another
    thread opens ``others`` through the adapter's pool (:meth:`attach`) and the step
    waits for it. With ``max_sessions=1`` that evicts every session not in use; the
    crowd records whether the target's session was closed then and whether the pool
    dropped a conversation's state (:attr:`~ctxpolicy.calls.SessionPool.released`).
    """

    def __init__(self, target: str, event: str, *, nth: int = 1, others: int = 2) -> None:
        self.target, self.event, self.nth = target, event, nth
        self.others = [f"other-{i}" for i in range(others)]
        self.pool: Any = None
        self.seen = 0
        self.closed: list[str] = []
        #: (target closed, conversations released) right after the others opened
        self.mid_step: tuple[bool, int] | None = None

    @staticmethod
    def policy(tmp_path: Path, **kw: Any) -> Policy:
        """A test policy whose state lives in the pool's shared memory store."""
        policy = make_policy(tmp_path, **kw)
        state = policy.state.model_copy(update={"store": "memory", "options": {}})
        return policy.model_copy(update={"state": state})

    def attach(self, pool: Any) -> None:
        self.pool = pool
        before = pool.on_close

        def on_close(session: Any) -> None:
            self.closed.append(session.conv_id)
            if before is not None:
                before(session)

        pool.on_close = on_close

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("conv_id") != self.target or event.get("type") != self.event:
            return
        self.seen += 1
        if self.seen == self.nth:
            self.now()

    def now(self) -> None:
        """Open the others from another thread now (the step waits for them)."""
        t = threading.Thread(target=lambda: [self.pool.get(c) for c in self.others])
        t.start()
        t.join(30)
        self.mid_step = (self.target in self.closed, self.pool.released)

    def assert_held(self) -> None:
        """The step's session was neither closed nor its state dropped meanwhile."""
        assert self.mid_step == (False, 0), f"{self.mid_step} (closed: {self.closed})"
