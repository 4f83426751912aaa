"""deepagents' context middleware driven call by call over a recorded trace.

Not a re-implementation: :class:`DeepAgentsStrategy` holds a Deep Agent's state and
runs the two middleware of ``deepagents.create_deep_agent`` that manage its context:

* ``FilesystemMiddleware.wrap_tool_call`` on every tool result of the trace (the
  handler returns the recorded result): a result over its
  ``tool_token_limit_before_evict`` (default 20,000 tokens) is written to the
  backend and replaced by a preview with the file's path;
* the deepagents ``SummarizationMiddleware.wrap_model_call`` before every model
  call: it reads the summary event kept in the private state key
  ``_summarization_event`` (the messages themselves stay intact), truncates large
  tool-call arguments of old messages, summarizes and offloads the folded history
  to the backend (``/conversation_history/<session>.md``), clips an oversized tail
  against the model profile's input budget. Its ``ExtendedModelResponse`` command
  is applied to the state (the event, the session id, replaced messages through
  LangGraph's ``add_messages``); the ``handler`` — the model call — records the
  messages it receives.

Configuration: what ``create_summarization_middleware``
(the factory ``create_deep_agent`` calls) sets for a model whose profile has
``max_input_tokens`` — the deepagents summary prompt, no ``trim_tokens_to_summarize``,
argument truncation at the same thresholds as the summary — with the fractions
(0.85 / 0.10 of the window) replaced by the compared policy's ``trigger`` and
``target`` in tokens, so the budget is the same as every other contestant's. The
model behind it is the shared deterministic :class:`DigestChatModel` with profile
``max_input_tokens`` = the window and ``max_tokens`` = the policy's
``reserve_output`` (the request's ``model_settings``). deepagents counts with its
default ``count_tokens_approximately``. The backend is a ``FilesystemBackend`` in a
temporary directory (removed at the end of the run); the session id in the state is
fixed per run so the history path (and its tokens) is deterministic.

Not driven: ``FilesystemMiddleware.wrap_model_call`` (it adds the file tools'
instructions to the system prompt and evicts an oversized *user* message, which the
traces do not have), sub-agents, the todo list and prompt caching middleware (no
effect on which messages are sent).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from deepagents.backends import FilesystemBackend
from deepagents.middleware.filesystem import FilesystemMiddleware
from deepagents.middleware.summarization import (
    DEEPAGENTS_DEFAULT_SUMMARY_PROMPT,
    SummarizationMiddleware,
)
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.graph.message import add_messages
from langgraph.prebuilt.tool_node import ToolCallRequest

from benchmarks.peers.langchain import MessageStateStrategy
from ctxpolicy.budget import compute_budget
from ctxpolicy.conversation import content_text
from ctxpolicy.policy.models import Policy

__all__ = ["DeepAgentsStrategy"]

EVENT = "_summarization_event"
SESSION = "_summarization_session_id"


class DeepAgentsStrategy(MessageStateStrategy):
    """deepagents' summarization and filesystem middleware at ``policy``'s budget."""

    def __init__(self, name: str, policy: Policy, *, count: Any) -> None:
        window = compute_budget(policy).window
        super().__init__(name, policy, count=count, profile={"max_input_tokens": window})
        n = self.budget_numbers()
        self.root = Path(tempfile.mkdtemp(prefix="ctxpolicy-deepagents-"))
        backend = FilesystemBackend(root_dir=self.root, virtual_mode=True)
        self.summarization = SummarizationMiddleware(
            model=self.model,
            backend=backend,
            trigger=("tokens", n["trigger"]),
            keep=("tokens", n["target"]),
            summary_prompt=DEEPAGENTS_DEFAULT_SUMMARY_PROMPT,
            trim_tokens_to_summarize=None,
            truncate_args_settings={
                "trigger": ("tokens", n["trigger"]),
                "keep": ("tokens", n["target"]),
            },
        )
        self.filesystem = FilesystemMiddleware(backend=backend)
        self.reserve_output = n["reserve_output"]
        session = hashlib.blake2b(name.encode("utf-8"), digest_size=16).hexdigest()
        self.agent_state[SESSION] = f"session_{session}"
        self.evicted = 0

    def tool_result(self, call: Any, content: Any, step: int) -> str:
        """The recorded result through ``FilesystemMiddleware.wrap_tool_call``."""
        text = content if isinstance(content, str) else content_text(content)
        fn = (call or {}).get("function") or {}
        tool_call_id = str((call or {}).get("id") or f"call-{step}")
        request = ToolCallRequest(
            tool_call={"name": str(fn.get("name", "")), "args": {}, "id": tool_call_id},
            tool=None,
            state=self.agent_state,
            runtime=None,  # type: ignore[arg-type]
        )

        def handler(_: ToolCallRequest) -> ToolMessage:
            return ToolMessage(content=text, tool_call_id=tool_call_id)

        out = self.filesystem.wrap_tool_call(request, handler)
        if isinstance(out, ToolMessage):
            if out.text != text:
                self.evicted += 1
            return out.text
        return text

    def _step(self) -> tuple[list[AnyMessage], list[str]]:
        before = self.agent_state.get(EVENT)
        settings = {"max_tokens": self.reserve_output}
        received, response = self._model_call(self.summarization, tools=[], model_settings=settings)
        layers: list[str] = []
        if isinstance(response, ExtendedModelResponse) and response.command is not None:
            update = dict(response.command.update or {})
            replaced = update.pop("messages", None)
            if replaced:
                self.agent_state["messages"] = add_messages(self.agent_state["messages"], replaced)
                layers.append("offload_tail")
            self.agent_state.update(update)
        event = self.agent_state.get(EVENT)
        if event is not None and event is not before:
            self.summaries.append(event["summary_message"].text)
            layers.append("summarization")
        if any(self._args_truncated(m) for m in received):
            layers.append("truncate_args")
        return received, layers

    def _args_truncated(self, m: AnyMessage) -> bool:
        known = self._by_id.get(str(m.id))
        return (
            known is not None
            and isinstance(m, AIMessage)
            and m.tool_calls != getattr(known[1], "tool_calls", None)
        )

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
