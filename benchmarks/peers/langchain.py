"""LangChain 1.x context middleware driven call by call over a recorded trace.

Not a re-implementation: :class:`LangChainStrategy` holds a LangChain agent's state
and runs the real middleware the way ``langchain.agents.create_agent`` does before
each model call:

1. the new messages of the trace (converted once with ``convert_to_messages``) are
   appended to the agent state's ``messages``;
2. ``SummarizationMiddleware.before_model(state, runtime)`` runs; its update
   (``RemoveMessage(REMOVE_ALL_MESSAGES)`` + summary + kept messages) is applied
   with LangGraph's own ``add_messages`` reducer, so the summary persists in the
   state as it does in an agent;
3. ``ContextEditingMiddleware.wrap_model_call(request, handler)`` (when
   configured) edits a copy of the request; the ``handler`` — the model call —
   records the messages it receives. The system prompt travels as
   ``request.system_message``, outside the state, as in ``create_agent``.

What the handler received is mapped back to the trace's OpenAI dicts by message id
(an unchanged message is the exact dict of the trace, so token counts do not drift
through a format round trip; a cleared tool result keeps its dict with the
placeholder as content; the summary becomes a user message) and measured by the
replay loop of ``ctxpolicy.sim.replay`` with the same counter as every other run.

Configuration: the trigger and keep of the summary are the compared policy's
``trigger`` and ``target`` at the window (``("tokens", n)``); ``ClearToolUsesEdit``
fires at the policy's ``warning`` level and keeps the 3 newest tool results (its
default). LangChain counts with its default ``count_tokens_approximately`` and
summarizes at most its default ``trim_tokens_to_summarize`` (4000) of the folded
messages: the library as a user gets it, only the thresholds set to the same budget.
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    ModelRequest,
    ModelResponse,
    SummarizationMiddleware,
)
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langgraph.graph.message import add_messages

from benchmarks.peers.catalog import LABELS
from benchmarks.peers.summary import DigestChatModel
from ctxpolicy.conversation import content_text
from ctxpolicy.policy.models import Policy
from ctxpolicy.sim.baselines import BaselineStrategy
from ctxpolicy.sim.metrics import SummaryMeter

__all__ = ["LangChainStrategy", "MessageStateStrategy"]

Message = dict[str, Any]


class MessageStateStrategy(BaselineStrategy):
    """What the LangChain-family peers share: the agent state's ``messages`` and the
    replay step around the library's own call (:meth:`_step`).

    The trace's new messages are converted once (``convert_to_messages``) and given
    ids ``trace-N``; the leading system messages stay outside the state (joined in
    one ``SystemMessage``). :meth:`_to_dict` maps a message a peer sends back to the
    trace's exact dict when it is unchanged. Budget numbers (the ruler's hard limit),
    raw tool results and "nothing is recoverable" come from ``BaselineStrategy``. The
    summary model is the shared deterministic one, billed by the ruler (``count``).
    """

    kind = "peer"

    def __init__(self, name: str, policy: Policy, *, count: Any, **model: Any) -> None:
        super().__init__(name, policy)
        self.label = LABELS.get(name, name)
        self.model = DigestChatModel(count=count, meter=SummaryMeter(count), **model)
        self.agent_state: dict[str, Any] = {"messages": []}
        self.system: list[Message] = []
        self._system_lc: SystemMessage | None = None
        self._seen = 0  # trace messages already in the state
        self._leading = True
        self._by_id: dict[str, tuple[Message, BaseMessage]] = {}
        self.summaries: list[str] = []

    def summarizer_tokens(self) -> tuple[int, int, int]:
        """The summary model's calls and tokens so far (billed by the ruler)."""
        meter = self.model.meter
        return meter.totals() if meter is not None else (0, 0, 0)

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]:
        self._ingest(convo)
        sent, layers = self._step()
        for layer in layers:
            self._events.append({"type": "context.compacted", "layer": layer})
        return self._dicts(sent), layers

    def _step(self) -> tuple[list[AnyMessage], list[str]]:
        """The library's work before one model call: what the model receives, and the
        layers that fired."""
        raise NotImplementedError

    def _dicts(self, sent: list[AnyMessage]) -> list[Message]:
        return [*self.system, *(self._to_dict(m) for m in sent)]

    def _ingest(self, convo: list[Message]) -> None:
        new = convo[self._seen :]
        self._seen = len(convo)
        for d in new:
            if self._leading and d.get("role") in ("system", "developer"):
                self.system.append(d)
                continue
            self._leading = False
            (lc,) = convert_to_messages([d])
            lc.id = f"trace-{len(self._by_id)}"
            self._by_id[lc.id] = (d, lc)
            self.agent_state["messages"].append(lc)
        if self.system and self._system_lc is None:
            self._system_lc = SystemMessage(
                content="\n\n".join(content_text(d.get("content")) for d in self.system)
            )

    def _to_dict(self, m: BaseMessage) -> Message:
        known = self._by_id.get(str(m.id))
        if known is not None:
            original, ingested = known
            if m.content == ingested.content and getattr(m, "tool_calls", None) == getattr(
                ingested, "tool_calls", None
            ):
                return original
            if isinstance(m, ToolMessage):
                return {**original, "content": m.text}
        (out,) = convert_to_openai_messages([m])
        return dict(out)

    def _model_call(self, middleware: Any = None, **extra: Any) -> tuple[list[AnyMessage], Any]:
        """What the model receives (the state, through ``middleware`` if any), and the
        middleware's response; ``extra``: more fields of the request."""
        received: list[AnyMessage] = []

        def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
            received.extend(request.messages)
            return ModelResponse(result=[AIMessage(content="")])

        request = ModelRequest(
            model=self.model,
            messages=list(self.agent_state["messages"]),
            system_message=self._system_lc,
            state=self.agent_state,  # type: ignore[arg-type]
            runtime=None,
            **extra,
        )
        if middleware is None:
            return received, handler(request)
        return received, middleware.wrap_model_call(request, handler)


class LangChainStrategy(MessageStateStrategy):
    """``SummarizationMiddleware``, with ``ContextEditingMiddleware(ClearToolUsesEdit)``
    for the ``langchain_summarize_edit`` peer."""

    def __init__(self, name: str, policy: Policy, *, count: Any) -> None:
        super().__init__(name, policy, count=count)
        n = self.budget_numbers()
        self.summarization = SummarizationMiddleware(
            self.model, trigger=("tokens", n["trigger"]), keep=("tokens", n["target"])
        )
        self.editing = (
            ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=n["warning"])])
            if name == "langchain_summarize_edit"
            else None
        )
        self._cleared: set[str] = set()

    def _step(self) -> tuple[list[AnyMessage], list[str]]:
        layers: list[str] = []
        update = self.summarization.before_model(self.agent_state, None)  # type: ignore[arg-type]
        if update:
            state = self.agent_state
            state["messages"] = add_messages(state["messages"], update["messages"])
            summary = next((m for m in state["messages"] if m.id not in self._by_id), None)
            if summary is not None:
                self.summaries.append(summary.text)
            layers.append("summarization")
        sent, _ = self._model_call(self.editing)
        cleared = {
            str(m.id)
            for m in sent
            if isinstance(m, ToolMessage)
            and m.response_metadata.get("context_editing", {}).get("cleared")
        }
        if cleared - self._cleared:
            layers.append("clear_tool_uses")
        self._cleared = cleared
        return sent, layers
