"""Realistic, seeded agent conversations for tests (OpenAI Chat messages).

:func:`make_conversation` builds what an agent loop really sends: a system prompt,
a task, rounds of assistant tool calls (some parallel) each answered by its tool
results, occasional big outputs (file reads, test logs), errors, unicode, and a
final user turn. The same arguments always give the same messages.

:func:`conversation_strategy` is a hypothesis strategy of arbitrary (but well
paired) conversations, used by :mod:`ctxpolicy.testing.conformance`.

This module is the one source of synthetic conversations: :data:`WORDS`,
:func:`tool_call` and :class:`CallIds` are what the scripted domain sessions of
:mod:`ctxpolicy.sim.synth` (coding, data analysis; demo traces and benchmarks) and
the tests' builders (``tests/helpers_conv.Conv``, ``tests/engine_helpers``) are
made of.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ctxpolicy.conversation.messages import call_name, new_call

if TYPE_CHECKING:  # pragma: no cover
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "ERROR_OUTPUTS",
    "UNICODE_SAMPLES",
    "WORDS",
    "CallIds",
    "conversation_strategy",
    "make_conversation",
    "tool_call",
]

Message = dict[str, Any]

#: Text in many scripts (CJK, RTL, emoji with ZWJ, combining marks, astral plane).
UNICODE_SAMPLES: tuple[str, ...] = (
    "上下文窗口已满，需要压缩历史记录。",
    "コンテキストを要約してください。",
    "مرحبا، هذا اختبار للنص من اليمين إلى اليسار",
    "Ünïcödé façade — naïve café ✓",
    "👩‍💻 deploying 🚀 to prod 🔥🔥",
    "e\u0301 a\u0308 combining marks",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝟙𝟚𝟛",
    "Ελληνικά και Кириллица вместе",
)

#: Tool outputs that look like failures (what ``keep_errors``-style layers look for).
ERROR_OUTPUTS: tuple[str, ...] = (
    'Traceback (most recent call last):\n  File "app.py", line 12, in <module>\n'
    "    main()\nKeyError: 'user_id'",
    "FAILED tests/test_api.py::test_login - AssertionError: expected 200, got 500",
    "error: cannot open file 'config/settings.toml': No such file or directory",
    "ERROR 2024-05-01T10:12:03Z worker-3 connection refused (ECONNREFUSED 10.0.0.7:5432)",
    "npm ERR! code ERESOLVE\nnpm ERR! unable to resolve dependency tree",
)

#: The vocabulary of every synthetic conversation (:mod:`ctxpolicy.sim.synth` draws
#: from all of it).
WORDS: tuple[str, ...] = (
    "cache",
    "config",
    "parser",
    "token",
    "window",
    "budget",
    "layer",
    "policy",
    "session",
    "result",
    "value",
    "index",
    "record",
    "buffer",
    "stream",
    "handler",
    "request",
    "response",
    "client",
    "server",
    "queue",
    "worker",
    "batch",
    "schema",
    "field",
    "option",
    "default",
    "limit",
    "retry",
    "timeout",
    "error",
    "state",
    "event",
    "metric",
)
#: What :func:`make_conversation` draws from (its seeded output predates two words).
_WORDS = [w for w in WORDS if w not in ("result", "error")]

_TOOLS = (
    "read_file",
    "grep",
    "run_tests",
    "list_dir",
    "search_logs",
    "execute_command",
    "query_database",
)


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _file_body(rng: random.Random, n_lines: int) -> str:
    lines = []
    for i in range(n_lines):
        fn = f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}_{i}"
        lines.append(f"def {fn}(value: int) -> int:  # {_sentence(rng, 4)}")
    return "\n".join(lines)


def _ok_output(rng: random.Random, tool: str, big: bool, unicode: bool) -> str:
    if tool == "read_file":
        text = _file_body(rng, 400 if big else rng.randint(3, 25))
    elif tool == "run_tests":
        n = rng.randint(5, 300)
        text = "\n".join(
            f"tests/test_{rng.choice(_WORDS)}.py::test_{i} PASSED" for i in range(n if big else 5)
        )
        text += f"\n==== {n} passed in {rng.uniform(0.1, 30):.2f}s ===="
    elif tool == "list_dir":
        text = "\n".join(f"{rng.choice(_WORDS)}_{i}.py" for i in range(rng.randint(2, 40)))
    elif tool == "query_database":
        rows = [
            {"id": i, "name": rng.choice(_WORDS), "score": round(rng.random(), 3)}
            for i in range(200 if big else 4)
        ]
        text = json.dumps(rows, sort_keys=True)
    else:
        text = "\n".join(_sentence(rng, 8) for _ in range(300 if big else rng.randint(1, 6)))
    if unicode and rng.random() < 0.5:
        text += "\n" + rng.choice(UNICODE_SAMPLES)
    return text


def tool_call(
    call_id: str, name: str, arguments: Mapping[str, Any], *, sort_keys: bool = True
) -> Message:
    """One OpenAI tool call: ``{"id", "type": "function", "function": {name, arguments}}``
    with the arguments as JSON text (keys sorted unless ``sort_keys=False``)."""
    return new_call(call_id, name, json.dumps(dict(arguments), sort_keys=sort_keys))


class CallIds:
    """Unique tool-call ids ``<prefix>0001``, ``<prefix>0002``, …"""

    def __init__(self, prefix: str = "call_") -> None:
        self.prefix = prefix
        self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n:04d}"


def _call(call_id: str, tool: str, rng: random.Random) -> Message:
    args: dict[str, Any]
    if tool == "read_file":
        args = {"path": f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}.py"}
    elif tool in ("grep", "search_logs"):
        args = {"pattern": rng.choice(_WORDS)}
    elif tool == "execute_command":
        args = {"command": f"make {rng.choice(_WORDS)}"}
    elif tool == "query_database":
        args = {"sql": f"SELECT * FROM {rng.choice(_WORDS)} LIMIT 200"}
    else:
        args = {}
    return tool_call(call_id, tool, args)


def make_conversation(
    rounds: int = 8,
    *,
    seed: int = 0,
    parallel: float = 0.3,
    big_outputs: float = 0.15,
    errors: float = 0.25,
    unicode: bool = True,
    system: str | None = "You are a careful coding agent. Work step by step and use the tools.",
    task: str | None = None,
    user_every: int = 4,
    final_user: bool = True,
) -> list[Message]:
    """A deterministic agent conversation of ``rounds`` assistant tool-call steps.

    * ``parallel`` — share of steps with 2–3 parallel tool calls;
    * ``big_outputs`` — share of tool results that are large (≈ 10–25k characters);
    * ``errors`` — share of tool results that are failures (tracebacks, FAILED, ERROR);
    * ``unicode`` — mix in non-Latin scripts, emoji and combining marks;
    * ``user_every`` — a user follow-up every N rounds (0: never);
    * ``final_user`` — end with a user turn (what an agent loop prepares for).

    Every tool call is answered by exactly one result, right after its assistant
    message; call ids are unique. Same arguments, same messages.
    """
    if rounds < 0:
        raise ValueError("rounds must be >= 0")
    rng = random.Random(seed)
    msgs: list[Message] = []
    if system is not None:
        msgs.append({"role": "system", "content": system})
    first = (
        task
        or f"Fix the failing {rng.choice(_WORDS)} test and keep the {rng.choice(_WORDS)} API stable."
    )
    if unicode:
        first += " " + rng.choice(UNICODE_SAMPLES)
    msgs.append({"role": "user", "content": first})
    n_call = 0
    for r in range(rounds):
        n_calls = rng.choice((2, 3)) if rng.random() < parallel else 1
        calls = []
        for _ in range(n_calls):
            n_call += 1
            calls.append(_call(f"call_{seed}_{n_call:04d}", rng.choice(_TOOLS), rng))
        thought = f"Step {r + 1}: check the {rng.choice(_WORDS)} {rng.choice(_WORDS)}."
        msgs.append({"role": "assistant", "content": thought, "tool_calls": calls})
        for c in calls:
            tool = call_name(c)
            if rng.random() < errors:
                out = rng.choice(ERROR_OUTPUTS)
            else:
                out = _ok_output(rng, tool, rng.random() < big_outputs, unicode)
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": out})
        if user_every and (r + 1) % user_every == 0 and r + 1 < rounds:
            msgs.append({"role": "user", "content": f"Also check the {rng.choice(_WORDS)} module."})
    if rounds:
        msgs.append(
            {"role": "assistant", "content": f"I changed the {rng.choice(_WORDS)} handler."}
        )
    if final_user:
        msgs.append({"role": "user", "content": "Thanks. Now run the whole test suite again."})
    return msgs


def conversation_strategy(
    max_rounds: int = 12, max_output: int = 4000
) -> SearchStrategy[list[Message]]:
    """Hypothesis strategy of well-paired conversations with arbitrary text.

    Covers: no system prompt, consecutive user turns, steps with 0–3 calls (an
    assistant message without ``tool_calls`` is a plain step), empty and unicode
    outputs, content as a list of parts, ``None`` assistant content.
    """
    from hypothesis import strategies as st

    text = st.text(max_size=200)
    output = st.one_of(
        st.text(max_size=max_output),
        st.sampled_from(ERROR_OUTPUTS),
        st.sampled_from(UNICODE_SAMPLES),
        st.integers(0, 20000).map(lambda n: "x" * n),
    )
    content = st.one_of(text, st.none(), text.map(lambda t: [{"type": "text", "text": t}]))

    @st.composite
    def build(draw: Any) -> list[Message]:
        msgs: list[Message] = []
        if draw(st.booleans()):
            msgs.append({"role": "system", "content": draw(text)})
        msgs.append({"role": "user", "content": draw(text)})
        n_rounds = draw(st.integers(0, max_rounds))
        call_no = 0
        for _ in range(n_rounds):
            kind = draw(st.sampled_from(("step", "step", "step", "user", "assistant")))
            if kind == "user":
                msgs.append({"role": "user", "content": draw(text)})
                continue
            if kind == "assistant":
                msgs.append({"role": "assistant", "content": draw(content)})
                continue
            n = draw(st.integers(1, 3))
            calls = []
            for _ in range(n):
                call_no += 1
                calls.append(new_call(f"c{call_no}", draw(st.sampled_from(_TOOLS)), "{}"))
            msgs.append({"role": "assistant", "content": draw(content), "tool_calls": calls})
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": draw(output)})
        if draw(st.booleans()):
            msgs.append({"role": "user", "content": draw(text)})
        return msgs

    return build()
