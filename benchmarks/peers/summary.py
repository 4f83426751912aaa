"""One deterministic summary for every contestant, so summaries cost and keep the same.

:func:`digest` turns the text of the messages being folded into a bounded list of
the facts in it (``ctxpolicy.conversation.facts.extract``: paths, identifiers, numbers with
units, error names, settings …), newest facts first when the budget is short.
Both sides call it:

* ctxpolicy through its ``callable`` summarizer — ``Session(policy,
  summarizer=ctxpolicy_summary)`` (:func:`ctxpolicy_summary` flattens the
  ``SummaryRequest``: previous summary plus every message's content, tool-call
  names and arguments);
* LangChain, deepagents and langmem through :class:`DigestChatModel`, a real ``langchain_core``
  ``BaseChatModel`` whose answer to the summary prompt is the digest of the
  ``<messages>`` section of that prompt (the XML LangChain renders, tags stripped
  and entities unescaped). The middleware is the real library; only the model
  behind it is deterministic.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field

from ctxpolicy.components import SummaryRequest
from ctxpolicy.conversation.facts import extract
from ctxpolicy.sim.metrics import SummaryMeter
from ctxpolicy.sim.replay import message_text

__all__ = [
    "HEADER",
    "SUMMARY_TOKENS",
    "DigestChatModel",
    "ctxpolicy_summary",
    "digest",
    "prompt_messages_text",
]

HEADER = "[Digest of earlier conversation]"
#: Budget of one summary, for both sides: the ``summarize`` layer's default
#: ``max_summary_tokens`` (ctxpolicy passes its own value in the request).
SUMMARY_TOKENS = 1200

_XML_TAG = re.compile(r"</?(?:message|content|tool_call|tool_calls|reasoning)\b[^>]*>")
_MESSAGES = re.compile(r"Messages to summarize:\n(.*)</messages>", re.DOTALL)


def digest(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The facts of ``text`` under ``HEADER``, at most ``max_tokens`` by ``count``.

    When not every fact fits, the most recently mentioned ones are kept; the kept
    facts are listed in order of last mention. Deterministic: same input, same text.
    """
    facts = [f for f in extract(text).all() if len(f) >= 3]
    last = {f: text.rfind(f) for f in facts}
    newest_first = sorted(facts, key=lambda f: -last[f])
    budget = max_tokens - count(HEADER) - 1
    kept: list[str] = []
    used = 0
    for f in newest_first:
        cost = count(f) + 1  # one newline token between items
        if used + cost > budget:
            continue
        kept.append(f)
        used += cost
    kept.sort(key=lambda f: last[f])
    out = "\n".join([HEADER, *kept])
    while kept and count(out) > max_tokens:  # joins can merge tokens differently
        kept.pop(0)
        out = "\n".join([HEADER, *kept])
    return out


def ctxpolicy_summary(
    count: Callable[[str], int], meter: SummaryMeter | None = None
) -> Callable[[SummaryRequest], str]:
    """The summary function for ``Session(policy, summarizer=...)``; each call is an
    LLM call the ruler bills (``meter``: the text to summarize in, the summary out)."""

    def summarize(request: SummaryRequest) -> str:
        parts = [request.previous_summary or ""]
        parts += [message_text(m) for m in request.messages]
        ct = request.count_text or count
        text = "\n".join(p for p in parts if p)
        out = digest(text, request.max_tokens, ct)
        if meter is not None:
            meter.record(text, out)
        return out

    return summarize


def prompt_messages_text(prompt: str) -> str:
    """The conversation inside a LangChain summary prompt, as plain text."""
    m = _MESSAGES.search(prompt)
    body = m.group(1) if m else prompt
    return html.unescape(_XML_TAG.sub(" ", body))


def _prompt_text(m: BaseMessage) -> str:
    """One prompt message's text plus its tool calls' names and arguments.

    LangChain and deepagents render the folded conversation into one prompt string
    (tool calls included); langmem passes the folded messages themselves, so their
    tool calls are read here (as ``ctxpolicy.sim.replay.message_text`` reads them).
    """
    parts: list[str] = [str(m.text)]
    for tc in getattr(m, "tool_calls", None) or []:
        parts += [str(tc.get("name", "")), json.dumps(tc.get("args", {}), ensure_ascii=False)]
    return "\n".join(p for p in parts if p)


class DigestChatModel(BaseChatModel):
    """A chat model that answers every prompt with :func:`digest` of its messages.

    ``count`` is the exact counter the budget is measured with; ``calls`` records
    each prompt's length (characters) so a test can see the model was asked.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    count: Callable[[str], int]
    max_tokens: int = SUMMARY_TOKENS
    calls: list[int] = Field(default_factory=list)
    #: bills each call (the prompt in, the digest out) when set
    meter: SummaryMeter | None = None

    @property
    def _llm_type(self) -> str:
        return "ctxpolicy-bench-digest"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        prompt = "\n".join(_prompt_text(m) for m in messages)
        self.calls.append(len(prompt))
        text = digest(prompt_messages_text(prompt), self.max_tokens, self.count)
        if self.meter is not None:
            self.meter.record(prompt, text)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])
