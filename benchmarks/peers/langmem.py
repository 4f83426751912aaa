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

Configuration: ``max_tokens_before_summary`` is the compared
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

from benchmarks.peers.langchain import MessageStateStrategy
from benchmarks.peers.summary import SUMMARY_TOKENS
from ctxpolicy.policy.models import Policy

__all__ = ["LangMemStrategy"]

Message = dict[str, Any]


class LangMemStrategy(MessageStateStrategy):
    """langmem's ``summarize_messages`` with its running summary, at ``policy``'s budget."""

    def __init__(self, name: str, policy: Policy, *, count: Any) -> None:
        super().__init__(name, policy, count=count)
        self.running_summary: RunningSummary | None = None

    def _step(self) -> tuple[list[AnyMessage], list[str]]:
        n = self.budget_numbers()
        head: list[AnyMessage] = [self._system_lc] if self._system_lc is not None else []
        before = self.running_summary
        result = summarize_messages(
            [*head, *self.agent_state["messages"]],
            running_summary=self.running_summary,
            model=self.model,
            max_tokens=n["hard_limit"],
            max_tokens_before_summary=n["trigger"],
            max_summary_tokens=SUMMARY_TOKENS,
        )
        self.running_summary = result.running_summary
        if self.running_summary is None or self.running_summary is before:
            return list(result.messages), []
        self.summaries.append(str(self.running_summary.summary))
        return list(result.messages), ["summarization"]

    def _dicts(self, sent: list[AnyMessage]) -> list[Message]:
        return [d for m in sent for d in self._message_dicts(m)]

    def _message_dicts(self, m: BaseMessage) -> list[Message]:
        if m is self._system_lc or (
            isinstance(m, SystemMessage)
            and self._system_lc is not None
            and m.content == self._system_lc.content
        ):
            return list(self.system)
        return [self._to_dict(m)]
