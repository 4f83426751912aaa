"""OpenAI Responses on the wire (the stateless form: the whole ``input`` item list on
every call): items to the engine's messages and back, usage, output items, stream events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxpolicy.conversation import Message, content_text
from ctxpolicy.conversation.messages import nth_original
from ctxpolicy.conversation.samejson import content_key
from ctxpolicy.wire._stream import StreamCalls
from ctxpolicy.wire.base import (
    Extracted,
    ToolCall,
    WireError,
    converted_tools,
    dumps_request,
    json_args,
    positive_int,
    request_state,
    to_plain,
)
from ctxpolicy.wire.chat import function_name, openai_error

__all__ = ["ResponsesInput", "ResponsesStreamTurn", "ResponsesWire", "tools_for_count"]

_INSTRUCTIONS_MARK = "instructions"


def _part_to_chat(part: Any) -> Any:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, Mapping):
        return {"type": "text", "text": str(part)}
    ptype = part.get("type")
    if ptype in ("input_text", "output_text", "text"):
        return {"type": "text", "text": str(part.get("text", ""))}
    if ptype == "refusal":
        return {"type": "text", "text": str(part.get("refusal", ""))}
    if ptype == "input_image":
        url = part.get("image_url") or ""
        return {
            "type": "image_url",
            "image_url": {"url": url, "detail": part.get("detail") or "auto"},
        }
    if ptype == "input_file":
        return {
            "type": "text",
            "text": f"[file {part.get('filename') or part.get('file_id') or ''}]",
        }
    return {"type": "text", "text": str(part)}


def _content_to_chat(content: Any) -> Any:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return [_part_to_chat(p) for p in content]
    return str(content)


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return content_text([_part_to_chat(p) for p in output])
    return json_args(output)


def _carry_reasoning(msg: Message, pending: list[dict[str, Any]]) -> None:
    """Put the ``reasoning`` items just before an assistant turn into its content, whole:
    counted with the turn, dropped with it, sent back byte-identical when it is rewritten
    (never as text: ``content_text`` does not read them)."""
    reasoning = [dict(it) for it in pending if it.get("type") == "reasoning"]
    if not reasoning:
        return
    content = msg.get("content")
    if isinstance(content, list):
        parts = list(content)
    elif content:
        parts = [{"type": "text", "text": str(content)}]
    else:
        parts = []
    msg["content"] = [*reasoning, *parts]


class ResponsesInput:
    """A Responses API ``input`` item list seen as chat messages, and back.

    * message items → chat messages (``input_text``/``output_text`` → text parts);
    * consecutive ``function_call`` items → one assistant message with parallel
      ``tool_calls`` (an assistant message item or ``reasoning`` items right before
      them belong to the same message, so they are kept or dropped together);
    * ``function_call_output`` → a ``tool`` message;
    * ``reasoning`` items right before an assistant turn are parts of its content,
      whole (counted, never text): dropped with the turn or sent back byte-identical
      (``encrypted_content`` untouched), also when its text or arguments were shortened;
    * other items (``item_reference``, built-in tool calls) stay attached to the next
      message (kept when it is unchanged);
    * ``instructions`` (if given) are counted as a leading system message and not
      sent back as an item.

    :meth:`to_items` maps a prepared message list back: unchanged messages become
    their original items (ids, reasoning, ``encrypted_content`` intact); messages a
    layer rewrote (a truncated result, a summary, the ledger) become new items.
    """

    def __init__(self, items: Sequence[Any], *, instructions: str | None = None) -> None:
        self.messages: list[Message] = []
        groups: list[list[dict[str, Any]]] = []
        self._instructions_fp: Any = None  # content keys: equal when fingerprints are
        if instructions:
            sys_msg: Message = {"role": "system", "content": str(instructions)}
            self.messages.append(sys_msg)
            groups.append([])
        pending: list[dict[str, Any]] = []
        open_assistant: int | None = None
        self._calls: dict[str, dict[str, Any]] = {}
        self._outputs: dict[str, dict[str, Any]] = {}
        for raw in items:
            it = to_plain(raw)
            if not isinstance(it, dict):
                continue
            itype = it.get("type") or ("message" if "role" in it else None)
            if itype == "message":
                role = str(it.get("role", "user"))
                msg: Message = {
                    "role": role
                    if role in ("system", "developer", "user", "assistant")
                    else "user",
                    "content": _content_to_chat(it.get("content")),
                }
                if role == "assistant":
                    _carry_reasoning(msg, pending)
                self.messages.append(msg)
                groups.append([*pending, it])
                pending = []
                open_assistant = len(self.messages) - 1 if role == "assistant" else None
            elif itype == "function_call":
                call_id = str(it.get("call_id") or it.get("id") or "")
                self._calls[call_id] = it
                tc = {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": str(it.get("name", "")),
                        "arguments": json_args(it.get("arguments")),
                    },
                }
                if open_assistant is not None:
                    am = self.messages[open_assistant]
                    am.setdefault("tool_calls", []).append(tc)
                    if not am.get("content"):
                        am["content"] = None
                    _carry_reasoning(am, pending)
                    groups[open_assistant].extend([*pending, it])
                else:
                    new: Message = {"role": "assistant", "content": None, "tool_calls": [tc]}
                    _carry_reasoning(new, pending)
                    self.messages.append(new)
                    groups.append([*pending, it])
                    open_assistant = len(self.messages) - 1
                pending = []
            elif itype == "function_call_output":
                call_id = str(it.get("call_id", ""))
                self._outputs[call_id] = it
                self.messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": _output_text(it.get("output")),
                    }
                )
                groups.append([*pending, it])
                pending = []
                open_assistant = None
            else:
                pending.append(it)
        self._tail = pending
        if instructions:
            self._instructions_fp = content_key(self.messages[0])
        self._groups: dict[Any, list[list[dict[str, Any]]]] = {}
        for m, g in zip(self.messages, groups, strict=True):
            self._groups.setdefault(content_key(m), []).append(g)

    def to_items(self, prepared: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The ``input`` items standing for ``prepared``."""
        out: list[dict[str, Any]] = []
        used: dict[Any, int] = {}
        for i, m in enumerate(prepared):
            fp = content_key(m)
            if i == 0 and self._instructions_fp is not None and fp == self._instructions_fp:
                continue
            group = nth_original(self._groups, used, fp)
            if group is not None:
                out.extend(group)
                continue
            out.extend(self._rebuild(m))
        out.extend(self._tail)
        return out

    def _rebuild(self, m: Mapping[str, Any]) -> list[dict[str, Any]]:
        role = m.get("role")
        if role == "tool":
            call_id = str(m.get("tool_call_id", ""))
            base = self._outputs.get(call_id, {})
            item = {k: v for k, v in base.items() if k not in ("output", "id")}
            item.update(
                {
                    "type": "function_call_output",
                    "call_id": call_id,
                    "output": content_text(m.get("content")),
                }
            )
            return [item]
        if role == "assistant":
            content = m.get("content")
            # reasoning items first, as they were received (never text), then the text
            items: list[dict[str, Any]] = [
                dict(p)
                for p in (content if isinstance(content, list) else [])
                if isinstance(p, Mapping) and p.get("type") == "reasoning"
            ]
            text = content_text(content)
            if text:
                items.append({"role": "assistant", "content": text})
            for tc in m.get("tool_calls") or []:
                call_id = str(tc.get("id", ""))
                orig = self._calls.get(call_id)
                fn = tc.get("function") or {}
                args = json_args(fn.get("arguments"))
                if orig is not None and json_args(orig.get("arguments")) == args:
                    items.append(orig)
                elif orig is not None:  # squeezed arguments: sent as prepared
                    items.append({**orig, "arguments": args})
                else:
                    items.append(
                        {
                            "type": "function_call",
                            "call_id": call_id,
                            "name": fn.get("name", ""),
                            "arguments": json_args(fn.get("arguments")),
                        }
                    )
            return items
        r = role if role in ("system", "developer", "user") else "user"
        return [{"role": r, "content": content_text(m.get("content"))}]


def _response_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses tool definition as the chat function shape the counter expects."""
    if tool.get("type") == "function" and "function" not in tool:
        fn = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
        return {"type": "function", "function": fn}
    return dict(tool)


def tools_for_count(tools: Any) -> list[dict[str, Any]] | None:
    """A Responses request's ``tools`` in the chat function shape (others as they are)."""
    return _tools_and_key(tools)[0]


def _tools_and_key(tools: Any) -> tuple[list[dict[str, Any]] | None, bytes | None]:
    if not isinstance(tools, list):
        return None, None
    return converted_tools(tools, "responses", _convert_tools)


def _convert_tools(tools: Any) -> list[dict[str, Any]]:
    return [_response_tool(t) for t in to_plain(tools) if isinstance(t, Mapping)]


class ResponsesWire:
    """``POST /v1/responses``, stateless (the whole ``input`` list on every call)."""

    name = "responses"
    provider = "openai"
    paths: tuple[str, ...] = ("/v1/responses",)

    def extract(self, body: Mapping[str, Any]) -> Extracted:
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise WireError("'input' must be a string or a list of objects")
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise WireError("'instructions' must be a string")
        conv = ResponsesInput(items, instructions=instructions)
        tools, key = _tools_and_key(body.get("tools"))
        return Extracted(dict(body), conv.messages, tools, conv, key)

    def stateless(self, body: Mapping[str, Any]) -> bool:
        """True when ``body`` carries its whole history (no ``previous_response_id`` nor
        ``conversation``: the history lives at the provider, so nothing here can prepare
        it and the request is forwarded as it is)."""
        return not body.get("previous_response_id") and not body.get("conversation")

    def conversation(self, req: Extracted) -> ResponsesInput:
        return request_state(req, ResponsesInput)

    def build(
        self, req: Extracted, prepared: Sequence[Mapping[str, Any]], tools: Any = None
    ) -> bytes:
        out = dict(req.body)
        items = self.conversation(req).to_items(prepared)
        if isinstance(req.body.get("input"), str) and items == [
            {"role": "user", "content": req.body["input"]}
        ]:
            out["input"] = req.body["input"]
        else:
            out["input"] = items
        return dumps_request(out, req, tools)

    def with_round(
        self, req: Extracted, assistant: Mapping[str, Any], results: Sequence[tuple[str, str]]
    ) -> Extracted:
        items = req.body.get("input")
        base = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
        outputs = [
            {"type": "function_call_output", "call_id": cid, "output": text}
            for cid, text in results
        ]
        return self.extract({**req.body, "input": [*base, *assistant.get("output", []), *outputs]})

    def usage(self, resp: Any) -> int | None:
        if not isinstance(resp, Mapping):
            return None
        u = resp.get("usage")
        return positive_int(u.get("input_tokens")) if isinstance(u, Mapping) else None

    def stream_usage(self, event: Mapping[str, Any]) -> int | None:
        if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            return self.usage(event.get("response"))
        return None

    def is_usage_only_event(self, event: Mapping[str, Any]) -> bool:
        return False

    def with_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        return None  # response.completed always carries usage

    def assistant_and_calls(self, resp: Any) -> tuple[dict[str, Any] | None, list[ToolCall]]:
        """The output items (``{"output": [...]}``, to append to ``input``) and their
        ``function_call`` items as calls."""
        if not isinstance(resp, Mapping) or not isinstance(resp.get("output"), list):
            return None, []
        output = [i for i in resp["output"] if isinstance(i, Mapping)]
        calls = [
            ToolCall(
                str(i.get("call_id") or i.get("id") or ""),
                str(i.get("name", "")),
                i.get("arguments"),
            )
            for i in output
            if i.get("type") == "function_call"
        ]
        return {"output": [dict(i) for i in output]}, calls

    def stream_turn(self) -> ResponsesStreamTurn:
        return ResponsesStreamTurn()

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return openai_error(message)

    def tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for t in functions:
            fn = t.get("function", {})
            tool = {"type": "function", "name": fn.get("name", "")}
            for key in ("description", "parameters", "strict"):
                if key in fn:
                    tool[key] = fn[key]
            out.append(tool)
        return out

    def tool_name(self, tool: Mapping[str, Any]) -> str:
        return function_name(tool)

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}


class ResponsesStreamTurn:
    """A streamed response (``response.*`` events).

    Output items are followed by ``output_index``: a ``function_call`` item is a call,
    a ``message`` item's text deltas are text, a ``reasoning`` item is ``"thinking"``
    (kept whole for :meth:`answer`), any other item (a built-in tool) is ``"other"``.
    """

    def __init__(self) -> None:
        self._seen = StreamCalls()
        self._items: dict[int, dict[str, Any]] = {}
        self._done: dict[str, Any] | None = None

    @property
    def names(self) -> list[str]:
        return self._seen.names

    def event(self, obj: Mapping[str, Any]) -> str | None:
        kind = obj.get("type")
        if kind in ("error", "response.failed"):
            return "other"
        if kind == "response.completed" and isinstance(obj.get("response"), dict):
            self._done = obj["response"]
            return None
        index = obj.get("output_index")
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = obj.get("item")
            if not isinstance(item, dict) or not isinstance(index, int) or len(self._items) > 64:
                return "other"
            self._items[index] = dict(item)
            itype = item.get("type")
            if itype == "function_call":
                kind_seen = self._seen.start(index, item.get("call_id"), item.get("name"))
                if kind == "response.output_item.done" and isinstance(item.get("arguments"), str):
                    self._seen.calls[index]["args"] = [item["arguments"]]
                return kind_seen
            if itype == "reasoning":
                return "thinking"
            if itype == "message":
                return None
            return "other"
        if kind == "response.function_call_arguments.delta":
            self._seen.args(index, obj.get("delta"))
        elif kind == "response.output_text.delta":
            return self._seen.text_seen(obj.get("delta"))
        elif kind == "response.refusal.delta":
            return "text"
        return None

    def calls(self) -> list[ToolCall]:
        return self._seen.tool_calls(parse=False)

    def answer(self) -> dict[str, Any]:
        if self._done is not None:
            return self._done
        output = []
        for i in sorted(self._items):
            item = dict(self._items[i])
            if item.get("type") == "function_call" and i in self._seen.calls:
                item["arguments"] = "".join(self._seen.calls[i]["args"])
            output.append(item)
        return {"object": "response", "output": output}
