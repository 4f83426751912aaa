"""Per model call: the peers' middleware replayed call by call, like ctxpolicy's path in
:mod:`benchmarks.peers.replay` (timed by :mod:`benchmarks.peers.timing`).

* **LangChain** — ``SummarizationMiddleware.before_model`` on an agent state updated
  by LangGraph's reducer.
* **deepagents** — ``deepagents.middleware.summarization.SummarizationMiddleware``
  (what ``create_deep_agent`` installs), its ``wrap_model_call`` around a handler
  that answers at once; the history it offloads goes to a real
  ``FilesystemBackend`` in a temporary directory, its state update (the
  summarization event, replaced messages) is applied as LangGraph would.
* **langmem** — ``langmem.short_term.summarize_messages`` with its running summary
  carried from call to call (what ``SummarizationNode`` does before each call).

Each gets the policy's trigger and target, the same deterministic summary model
(:class:`benchmarks.peers.summary.DigestChatModel`), its library's default
(approximate) token counter, and the trace's messages converted once
(:func:`langchain_steps`). deepagents and langmem are the ``bench`` extra of
pyproject.toml.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.peers.summary import SUMMARY_TOKENS, DigestChatModel

__all__ = ["PEER_REPLAYS", "langchain_steps", "replay_langchain"]


def langchain_steps(msgs: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """The trace as LangChain messages (system prompt left out: it is not state),
    grouped as the new messages before each model call; converted once."""
    from langchain_core.messages import convert_to_messages

    steps: list[list[Any]] = []
    batch: list[Any] = []
    leading = True
    for n, m in enumerate(msgs, 1):
        if m.get("role") == "assistant" and n > 1:
            steps.append(batch)
            batch = []
        if leading and m.get("role") in ("system", "developer"):
            continue
        leading = False
        (lc,) = convert_to_messages([dict(m)])
        lc.id = f"trace-{n}"
        batch.append(lc)
    return steps


def _per_step(
    steps: Sequence[Sequence[Any]], call: Callable[[dict[str, Any]], None]
) -> list[float]:
    """Seconds of ``call(state)`` per step, each step's new messages appended to
    ``state["messages"]`` first (untimed): the replay loop of every middleware peer."""
    state: dict[str, Any] = {"messages": []}
    clock = time.perf_counter
    out: list[float] = []
    gc.collect()
    for new in steps:
        state["messages"].extend(new)
        t0 = clock()
        call(state)
        out.append(clock() - t0)
    return out


def _budget(policy: Any) -> tuple[int, int]:
    from ctxpolicy.budget import compute_budget

    b = compute_budget(policy)
    return b.trigger, b.target


def replay_langchain(
    policy: Any, steps: Sequence[Sequence[Any]], count: Callable[[str], int]
) -> list[float]:
    """Seconds of ``SummarizationMiddleware.before_model`` (+ its state update) per call."""
    from langchain.agents.middleware import SummarizationMiddleware
    from langgraph.graph.message import add_messages

    trigger, target = _budget(policy)
    mw = SummarizationMiddleware(
        DigestChatModel(count=count), trigger=("tokens", trigger), keep=("tokens", target)
    )

    def call(state: dict[str, Any]) -> None:
        update = mw.before_model(state, None)  # type: ignore[arg-type]
        if update:
            state["messages"] = add_messages(state["messages"], update["messages"])

    return _per_step(steps, call)


def replay_deepagents(
    policy: Any, steps: Sequence[Sequence[Any]], count: Callable[[str], int]
) -> list[float]:
    """Seconds of deepagents' ``SummarizationMiddleware.wrap_model_call`` (+ its state
    update) per call."""
    from deepagents.backends import FilesystemBackend
    from deepagents.middleware.summarization import SummarizationMiddleware
    from langchain.agents.middleware.types import (
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.messages import AIMessage
    from langgraph.graph.message import add_messages

    trigger, target = _budget(policy)
    tmp = tempfile.mkdtemp(prefix="ctxpolicy-deepagents-")
    try:
        model = DigestChatModel(count=count)
        mw = SummarizationMiddleware(
            model,
            backend=FilesystemBackend(root_dir=tmp, virtual_mode=True),
            trigger=("tokens", trigger),
            keep=("tokens", target),
        )
        answer = ModelResponse(result=[AIMessage(content="ok")])

        def call(state: dict[str, Any]) -> None:
            request = ModelRequest(model=model, messages=state["messages"], state=state)  # type: ignore[arg-type]
            res = mw.wrap_model_call(request, lambda _: answer)
            if isinstance(res, ExtendedModelResponse) and res.command is not None:
                update = dict(res.command.update or {})
                if "messages" in update:
                    state["messages"] = add_messages(state["messages"], update.pop("messages"))
                state.update(update)

        return _per_step(steps, call)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replay_langmem(
    policy: Any, steps: Sequence[Sequence[Any]], count: Callable[[str], int]
) -> list[float]:
    """Seconds of langmem's ``summarize_messages`` per call, its running summary kept
    from one call to the next."""
    from langmem.short_term import summarize_messages

    trigger, target = _budget(policy)
    model = DigestChatModel(count=count)

    def call(state: dict[str, Any]) -> None:
        res = summarize_messages(
            state["messages"],
            running_summary=state.get("running"),
            model=model,
            max_tokens=target,
            max_tokens_before_summary=trigger,
            max_summary_tokens=SUMMARY_TOKENS,
        )
        state["running"] = res.running_summary

    return _per_step(steps, call)


#: peer -> its per-call replay (policy, :func:`langchain_steps`, the summary's counter)
PEER_REPLAYS: dict[str, Callable[[Any, Sequence[Sequence[Any]], Any], list[float]]] = {
    "langchain": replay_langchain,
    "deepagents": replay_deepagents,
    "langmem": replay_langmem,
}
