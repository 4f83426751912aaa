"""A small builder of realistic agent conversations for tests (reusable by anyone).

    conv = (Conv().system("You are a coding agent.").user("Fix the failing test")
            .step(("read_file", {"path": "src/app.py"}, "def main(): ..."))
            .step(("run_tests", {}, "1 failed"), ("grep", {"q": "x"}, "hit"), text="Running")
            .assistant("Done.").user("thanks"))
    conv.messages  -> OpenAI chat messages
    conv.units()   -> units (ctxpolicy.conversation.to_units)

:func:`make_ctx` builds a :class:`CompactionContext` with a simple count function
(sum of len(json)/4 of rendered messages); :func:`conversations` is a hypothesis
strategy of random conversations (parallel tool calls, long outputs, unicode).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxpolicy.components import CompactionContext, Summarizer
from ctxpolicy.conversation import Unit, render, to_units
from ctxpolicy.policy.scalars import State
from ctxpolicy.testing.conversations import tool_call

Call = tuple[str, Mapping[str, Any], str]


def ref_line(conv_id: str, step: int, action: str) -> str:
    """Design A's reference line (``snapshots.reference_form: path``) under a snapshotted
    result; the default form is the URI alone, and layers parse both."""
    path = f"/tmp/snap/{conv_id}/step_{step:03d}_{action}.json"
    return f"[Full detail available at: {path} (ctxsnap://{conv_id}/step_{step:03d}_{action})]"


class Conv:
    """Fluent builder of OpenAI chat messages."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._calls = 0

    def system(self, text: str) -> Conv:
        self.messages.append({"role": "system", "content": text})
        return self

    def user(self, text: str) -> Conv:
        self.messages.append({"role": "user", "content": text})
        return self

    def assistant(self, text: str) -> Conv:
        self.messages.append({"role": "assistant", "content": text})
        return self

    def step(self, *calls: Call, text: str | None = None) -> Conv:
        """An assistant message with tool calls, followed by their results."""
        tcs = []
        results = []
        for name, args, output in calls:
            self._calls += 1
            cid = f"call_{self._calls}"
            tcs.append(tool_call(cid, name, args))
            results.append({"role": "tool", "tool_call_id": cid, "content": output})
        self.messages.append({"role": "assistant", "content": text, "tool_calls": tcs})
        self.messages.extend(results)
        return self

    def units(self, **kw: Any) -> list[Unit]:
        units, _ = to_units(self.messages, **kw)
        return units


def approx_count(units: Sequence[Unit]) -> int:
    """Tokens as sum of ceil(len(json(message)) / 4)."""
    return sum(
        math.ceil(len(json.dumps(m, ensure_ascii=False, sort_keys=True)) / 4) for m in render(units)
    )


def approx_text(text: str) -> int:
    return math.ceil(len(text) / 4)


class Events(list):
    """Collects ``ctx.emit`` calls as dicts."""

    def __call__(self, type: str, **fields: Any) -> None:
        self.append({"type": type, **fields})


def make_ctx(
    units: Sequence[Unit],
    *,
    window: int = 10_000,
    trigger: int | None = None,
    target: int | None = None,
    state: State = State.warning,
    summarizer: Callable[[str, Mapping[str, Any]], Summarizer] | None = None,
    memory: dict[str, Any] | None = None,
    snapshots: Any = None,
    constraints: Sequence[str] = (),
    count: Callable[[Sequence[Unit]], int] = approx_count,
    conv_id: str = "conv",
) -> CompactionContext:
    """A CompactionContext for layer tests (events collected in ``ctx.emit``)."""

    def default_summarizer(name: str, options: Mapping[str, Any]) -> Summarizer:
        from ctxpolicy.plugins import get_registry

        cls = get_registry().summarizers[name]
        return cls(cls.Options(**dict(options)))

    trig = trigger if trigger is not None else int(window * 0.9)
    return CompactionContext(
        count=count,
        used=count(units),
        window=window,
        trigger=trig,
        target=target if target is not None else int(trig * 0.7),
        state=state,
        conv_id=conv_id,
        summarizer=summarizer or default_summarizer,
        emit=Events(),
        memory=memory if memory is not None else {},
        snapshots=snapshots,
        constraints=tuple(constraints),
        count_text=approx_text,
    )


def frozen_copy(units: Sequence[Unit]) -> list[Unit]:
    """Deep copy to compare against after a layer ran (no-mutation checks)."""
    return copy.deepcopy(list(units))


# --------------------------------------------------------------------------- hypothesis


def conversations() -> Any:
    """Hypothesis strategy: OpenAI message lists of a realistic agent run."""
    from hypothesis import strategies as st

    texts = st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=40
    )
    long_text = st.builds(lambda t, n: (t or "x") * n, texts, st.integers(1, 60))
    output = st.one_of(
        texts, long_text, st.sampled_from(["same output", "OK", "ValueError: bad id ABC123"])
    )
    with_ref = st.builds(
        lambda o, add, n: o + "\n" + ref_line("conv", n, "read_file") if add else o,
        output,
        st.booleans(),
        st.integers(0, 99),
    )
    call = st.tuples(
        st.sampled_from(["read_file", "run_tests", "grep", "bash"]), st.just({"a": 1}), with_ref
    )
    event = st.one_of(
        st.tuples(
            st.just("step"), st.lists(call, min_size=1, max_size=3), st.one_of(st.none(), texts)
        ),
        st.tuples(st.just("user"), texts, st.none()),
        st.tuples(st.just("assistant"), texts, st.none()),
    )

    def build(sys: bool, task: str, events: list[Any], last: str) -> list[dict[str, Any]]:
        c = Conv()
        if sys:
            c.system("You are an agent.")
        c.user(task or "task")
        for kind, payload, text in events:
            if kind == "step":
                c.step(*payload, text=text)
            elif kind == "user":
                c.user(payload)
            else:
                c.assistant(payload)
        c.user(last or "continue")
        return c.messages

    return st.builds(build, st.booleans(), texts, st.lists(event, max_size=14), texts)


#: A lone surrogate, as ``os.fsdecode(b"\\xff")`` puts in a file name.
BAD = "\udcff"
#: Values nested too deep for ``copy.deepcopy`` (shared: pass ``{id(v): v}`` as its memo).
DEEP: dict[int, Any] = {}


def hostile_messages(
    text: str, pick: int, n: int, msgs: list[Any], *, depth: int = 5_000
) -> list[Any]:
    """Issue 19 items 8, 9, 11: one hostile shape (chosen by ``pick``) to append to
    ``msgs``: malformed ``tool_calls`` (one object, JSON text, garbage, non-objects,
    missing and duplicate ids), non-object messages, a ``depth``-deep output, lone
    surrogates. The engine must survive each (no exception, pairs intact)."""
    fn = {"name": "read", "arguments": "{}"}
    earlier = [
        c["id"]
        for m in msgs
        if isinstance(m, dict) and isinstance(m.get("tool_calls"), list)
        for c in m["tool_calls"]
        if isinstance(c, dict) and isinstance(c.get("id"), str)
    ]
    dup = earlier[pick % len(earlier)] if earlier else "c0_0"
    result = {"role": "tool", "tool_call_id": dup, "content": f"{text} " * 6}
    shapes: list[list[Any]] = [
        [{"role": "assistant", "content": text, "tool_calls": {"id": f"d{n}", "function": fn}}],
        [{"role": "assistant", "content": None, "tool_calls": f'[{{"id": "s{n}"}}]'}],
        [{"role": "assistant", "content": "x", "tool_calls": f"garbage {text}"}],
        [{"role": "assistant", "content": "y", "tool_calls": [text, 7, None, {"id": f"f{n}"}]}],
        [
            {
                "role": "assistant",
                "content": "z",
                "tool_calls": [{"function": fn}, {"function": fn}],
            },
            {"role": "tool", "content": f"first {text}"},
            {"role": "tool", "tool_call_id": None, "content": "second"},
        ],
        [
            {"role": "assistant", "content": "dup", "tool_calls": [{"id": dup, "function": fn}]},
            result,
        ],
        [text, None, 42, ["role", "user"]],
        [{"role": "tool", "tool_call_id": dup, "content": {"deep": deep_value(depth)}}],
        [{"role": "assistant", "content": "deep", "tool_calls": [deep_value(depth)]}],
        [{"role": "user", "content": f"{BAD} name{BAD}.txt {text}"}],
        # issue 29 item 4: huge numeric tool-call arguments (quadratic fact patterns)
        [
            {
                "role": "assistant",
                "content": "nums",
                "tool_calls": [
                    {
                        "id": f"n{n}",
                        "type": "function",
                        "function": {"name": "plot", "arguments": json.dumps({"v": "1," * 6_000})},
                    },
                    {
                        "id": f"m{n}",
                        "type": "function",
                        "function": {"name": "plot", "arguments": "1." * 4_000 + "AB-" * 1_000},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": f"n{n}", "content": "9" * 5_000},
            {"role": "tool", "tool_call_id": f"m{n}", "content": "x/@" * 2_000},
        ],
        [
            {
                "role": "assistant",
                "content": BAD,
                "tool_calls": [
                    {"id": f"u{n}{BAD}", "function": {"name": f"r{BAD}", "arguments": {"p": BAD}}}
                ],
            },
            {"role": "tool", "tool_call_id": f"u{n}{BAD}", "content": f"{BAD}{text}" * 5},
        ],
    ]
    return shapes[pick % len(shapes)]


def deep_value(depth: int) -> Any:
    if depth in DEEP:
        return DEEP[depth]
    root: dict[str, Any] = {}
    DEEP[depth] = root
    cur = root
    for _ in range(depth):
        cur["a"] = {}
        cur = cur["a"]
    return root
