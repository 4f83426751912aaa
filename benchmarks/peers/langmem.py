"""langmem's short-term summarization driven call by call over a recorded trace.

Not a re-implementation: :class:`LangMemStrategy` keeps what ``SummarizationNode``
keeps — the agent state's full ``messages`` and a ``RunningSummary`` in the context —
and before every model call runs ``langmem.short_term.summarize_messages`` (the
function the node calls) on them with the running summary:

1. the new messages of the trace (converted once with ``convert_to_messages``, ids
   ``trace-N``) are appended to the state; the trace's leading system messages are
   one ``SystemMessage`` at its head, as langmem expects it;
2. ``summarize_messages(messages, running_summary=..., model=..., ...)`` folds the
   messages not summarized yet once they reach ``max_tokens_before_summary``
   (extending the previous summary with its "existing summary" prompt) and returns
   what the model receives: the system message, the summary as a system message
   ("Summary of the conversation so far: …"), the messages after the last
   summarized one. The returned ``RunningSummary`` is kept for the next call.

What the model receives is mapped back to the trace's OpenAI dicts by message id
(an unchanged message is the exact dict of the trace; the system message is the
trace's own leading messages) and measured by the replay loop of
``ctxpolicy.sim.replay`` with the same counter as every other run.

Configuration (:func:`langmem_peer`): ``max_tokens_before_summary`` is the compared
policy's ``trigger`` at the window, ``max_tokens`` (the most langmem returns and
feeds to the summary model) its hard limit (window − reserve_output),
``max_summary_tokens`` the shared summary budget. langmem has no "keep" setting: it
folds everything up to the message at which the unsummarized tokens reach the
trigger (and the tool results answering it), so the policy's ``target`` has no
counterpart. It counts with its default ``count_tokens_approximately``; the model
is the shared deterministic :class:`DigestChatModel`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage, SystemMessage
from langmem.short_term import RunningSummary, summarize_messages

from benchmarks.peers.catalog import LABELS
from benchmarks.peers.langchain import MessageStateStrategy
from benchmarks.peers.summary import SUMMARY_TOKENS, DigestChatModel, peer_model
from ctxpolicy.budget import compute_budget
from ctxpolicy.policy.models import Policy

__all__ = ["PEERS", "LangMemStrategy", "langmem_peer"]

Message = dict[str, Any]
PEERS = ("langmem",)


class LangMemStrategy(MessageStateStrategy):
    """A ``ctxpolicy.sim.replay.Strategy`` backed by langmem's ``summarize_messages``."""

    def __init__(
        self,
        name: str,
        policy: Policy,
        *,
        model: DigestChatModel,
        max_tokens: int,
        max_tokens_before_summary: int,
        max_summary_tokens: int,
    ) -> None:
        super().__init__(name, policy, model=model, label=LABELS.get(name, name))
        self.max_tokens = max_tokens
        self.max_tokens_before_summary = max_tokens_before_summary
        self.max_summary_tokens = max_summary_tokens
        self.running_summary: RunningSummary | None = None
        self.last_request: list[AnyMessage] = []

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]:
        self._ingest(convo)
        head: list[AnyMessage] = [self._system_lc] if self._system_lc is not None else []
        before = self.running_summary
        result = summarize_messages(
            [*head, *self.agent_state["messages"]],
            running_summary=self.running_summary,
            model=self.model,
            max_tokens=self.max_tokens,
            max_tokens_before_summary=self.max_tokens_before_summary,
            max_summary_tokens=self.max_summary_tokens,
        )
        self.running_summary = result.running_summary
        layers: list[str] = []
        if self.running_summary is not None and self.running_summary is not before:
            self.summaries.append(str(self.running_summary.summary))
            layers.append("summarization")
            self._events.append({"type": "context.compacted", "layer": "summarization"})
        sent = list(result.messages)
        self.last_request = sent
        return [d for m in sent for d in self._dicts(m)], layers

    def _dicts(self, m: BaseMessage) -> list[Message]:
        if m is self._system_lc or (
            isinstance(m, SystemMessage)
            and self._system_lc is not None
            and m.content == self._system_lc.content
        ):
            return list(self.system)
        return [self._to_dict(m)]


def langmem_peer(
    name: str, policy: Policy, *, count: Any, summary_tokens: int = SUMMARY_TOKENS
) -> LangMemStrategy:
    """Peer ``name`` (in :data:`PEERS`) configured to ``policy``'s budget at its window;
    ``count`` is the ruler's exact ``count_text``, used by the deterministic summary only."""
    b = compute_budget(policy)
    model = peer_model(name, PEERS, count, summary_tokens)
    return LangMemStrategy(
        name,
        policy,
        model=model,
        max_tokens=b.window - b.reserve_output,
        max_tokens_before_summary=b.trigger,
        max_summary_tokens=summary_tokens,
    )
