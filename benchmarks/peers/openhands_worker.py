"""OpenHands' condenser over a recorded trace, in OpenHands' own Python (3.12).

Run by :mod:`benchmarks.peers.openhands` in a virtualenv of its own (``openhands-sdk``
needs Python ≥ 3.12; ctxpolicy's benchmarks run on 3.11), this script imports only
the standard library and ``openhands.sdk``. It answers one JSON request per stdin
line with one JSON line on stdout:

* ``{"cmd": "reset", "max_tokens": N, "max_input_tokens": M, "max_size": S,
  "keep_first": K, "base_url": URL}`` — a new conversation: an agent LLM counting
  with litellm's tokenizer for ``gpt-4`` (cl100k) whose input limit is ``M``, and an
  ``LLMSummarizingCondenser(max_tokens=N, max_size=S, keep_first=K)`` whose summary
  LLM is the OpenAI-compatible endpoint at ``URL``;
* ``{"cmd": "step", "messages": [...]}`` — the trace's messages new since the last
  step (OpenAI chat dicts) become OpenHands events (system prompt, user and agent
  messages, one ``ActionEvent`` per tool call, one ``ObservationEvent`` per result);
  then, as the agent does before each LLM call, the condenser condenses the view
  and a ``Condensation`` it returns is appended to the event log (up to three
  times); the answer is the view sent to the model: ``{"view": [{"i": trace
  index} | {"summary": text}, ...], "condensed": n}``.

Nothing here decides what to keep: that is the library's ``condense``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# this directory holds benchmarks/peers/openhands.py: ``openhands`` must be the library
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
os.environ.setdefault("LOG_LEVEL", "WARNING")
os.environ.setdefault("ALLOW_SHORT_CONTEXT_WINDOWS", "true")  # a 8k-32k benchmark window
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "true")  # no network lookups

from openhands.sdk import LLM  # noqa: E402
from openhands.sdk.context.condenser import LLMSummarizingCondenser  # noqa: E402
from openhands.sdk.context.view import View  # noqa: E402
from openhands.sdk.event import (  # noqa: E402
    ActionEvent,
    MessageEvent,
    ObservationEvent,
    SystemPromptEvent,
)
from openhands.sdk.event.condenser import Condensation, CondensationSummaryEvent  # noqa: E402
from openhands.sdk.llm import Message, MessageToolCall, TextContent  # noqa: E402
from openhands.sdk.tool.client_tool import ClientToolObservation  # noqa: E402
from pydantic import SecretStr  # noqa: E402


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else json.dumps(content)


class Conversation:
    def __init__(self, req: dict[str, Any]) -> None:
        self.agent_llm = LLM(
            model="gpt-4", max_input_tokens=int(req["max_input_tokens"]), usage_id="agent"
        )
        summary_llm = LLM(
            model="openai/digest",
            base_url=req["base_url"],
            api_key=SecretStr("benchmark"),
            usage_id="condenser",
            num_retries=0,
        )
        self.condenser = LLMSummarizingCondenser(
            llm=summary_llm,
            max_tokens=int(req["max_tokens"]),
            max_size=int(req.get("max_size", 80)),
            keep_first=int(req.get("keep_first", 4)),
        )
        self.events: list[Any] = []
        self.index: dict[str, int] = {}  # event id -> trace message index
        self.seen = 0
        self.leading = True
        self.actions: dict[str, ActionEvent] = {}  # tool call id -> its action

    def _add(self, event: Any, i: int) -> None:
        self.events.append(event)
        self.index[event.id] = i

    def ingest(self, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            i = self.seen
            self.seen += 1
            role = m.get("role")
            text = _text(m.get("content"))
            if role in ("system", "developer") and self.leading:
                self._add(SystemPromptEvent(system_prompt=TextContent(text=text), tools=[]), i)
                continue
            self.leading = False
            calls = (m.get("tool_calls") or []) if role == "assistant" else []
            if role == "assistant" and calls:
                response_id = f"response-{i}"
                for k, call in enumerate(calls):
                    fn = call.get("function") or {}
                    args = fn.get("arguments")
                    tc = MessageToolCall(
                        id=str(call.get("id") or f"call-{i}-{k}"),
                        name=str(fn.get("name") or "tool"),
                        arguments=args if isinstance(args, str) else json.dumps(args),
                        origin="completion",
                    )
                    ev = ActionEvent(
                        thought=[TextContent(text=text)] if k == 0 and text else [],
                        action=None,
                        tool_name=tc.name,
                        tool_call_id=tc.id,
                        tool_call=tc,
                        llm_response_id=response_id,
                    )
                    self.actions[tc.id] = ev
                    self._add(ev, i)
                continue
            if role == "tool" and str(m.get("tool_call_id")) in self.actions:
                action = self.actions[str(m.get("tool_call_id"))]
                self._add(
                    ObservationEvent(
                        observation=ClientToolObservation.from_text(text=text),
                        action_id=action.id,
                        tool_name=action.tool_name,
                        tool_call_id=action.tool_call_id,
                    ),
                    i,
                )
                continue
            source = "agent" if role == "assistant" else "user"
            msg_role = "assistant" if role == "assistant" else "user"
            self._add(
                MessageEvent(
                    source=source,
                    llm_message=Message(role=msg_role, content=[TextContent(text=text)]),
                ),
                i,
            )

    def step(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        self.ingest(messages)
        condensed = 0
        view = View.from_events(self.events)
        for _ in range(3):
            out = self.condenser.condense(view, agent_llm=self.agent_llm)
            if not isinstance(out, Condensation):
                view = out
                break
            self.events.append(out)
            condensed += 1
            view = View.from_events(self.events)
        items: list[dict[str, Any]] = []
        for ev in view.events:
            if isinstance(ev, CondensationSummaryEvent):
                items.append({"summary": ev.summary})
                continue
            i = self.index.get(ev.id)
            if i is None:
                continue
            if items and items[-1].get("i") == i:  # the other calls of one assistant message
                continue
            items.append({"i": i})
        return {"view": items, "condensed": condensed}


def main() -> None:
    conv: Conversation | None = None
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["cmd"] == "reset":
                conv = Conversation(req)
                answer: dict[str, Any] = {"ok": True}
            elif req["cmd"] == "step" and conv is not None:
                answer = conv.step(req["messages"])
            else:
                answer = {"error": f"unexpected command {req['cmd']!r}"}
        except Exception as exc:  # reported to the parent, which raises
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
