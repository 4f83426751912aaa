"""Per model call: deepagents' and langmem's context management, replayed like
LangChain's in :mod:`benchmarks.peers.timing` (issue 32, item 4).

* **deepagents** — ``deepagents.middleware.summarization.SummarizationMiddleware``
  (what ``create_deep_agent`` installs), its ``wrap_model_call`` around a handler
  that answers at once; the history it offloads goes to a real
  ``FilesystemBackend`` in a temporary directory, its state update (the
  summarization event, replaced messages) is applied as LangGraph would.
* **langmem** — ``langmem.short_term.summarize_messages`` with its running summary
  carried from call to call (what ``SummarizationNode`` does before each call).

Both get the policy's trigger and target (deepagents: ``trigger``/``keep`` in
tokens; langmem: ``max_tokens_before_summary``/``max_tokens``), the same
deterministic summary model as LangChain (:class:`benchmarks.peers.summary.
DigestChatModel`) and the library's default (approximate) token counter. The
packages are the ``bench`` extra of pyproject.toml (``make .venv/.dev`` installs it);
:func:`available` says whether they are installed.
"""

from __future__ import annotations

import gc
import importlib.util
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.peers.summary import SUMMARY_TOKENS, DigestChatModel

__all__ = ["PEERS", "available", "replay_deepagents", "replay_langmem"]

#: Variant name -> the module that must be importable to measure it.
PEERS = {"deepagents": "deepagents", "langmem": "langmem"}


def available() -> list[str]:
    """The peers of :data:`PEERS` whose package is installed."""
    return [name for name, mod in PEERS.items() if importlib.util.find_spec(mod) is not None]


def per_step(steps: Sequence[Sequence[Any]], call: Callable[[dict[str, Any]], None]) -> list[float]:
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


def replay_deepagents(
    policy: Any, steps: Sequence[Sequence[Any]], count: Callable[[str], int]
) -> list[float]:
    """Seconds of deepagents' ``SummarizationMiddleware.wrap_model_call`` (+ its state
    update) per call; the model handler itself answers in O(1)."""
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

        def handler(request: Any) -> Any:
            return answer

        def call(state: dict[str, Any]) -> None:
            request = ModelRequest(model=model, messages=state["messages"], state=state)  # type: ignore[arg-type]
            res = mw.wrap_model_call(request, handler)
            if isinstance(res, ExtendedModelResponse) and res.command is not None:
                update = dict(res.command.update or {})  # type: ignore[call-overload]
                if "messages" in update:
                    state["messages"] = add_messages(state["messages"], update.pop("messages"))
                state.update(update)

        return per_step(steps, call)
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

    return per_step(steps, call)
