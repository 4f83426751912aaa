"""OpenAI Agents SDK adapter (extra ``openai_agents``): a ``call_model_input_filter``.

::

    from agents import Agent, Runner, SQLiteSession
    from ctxpolicy.integrations.openai_agents import AgentsContext

    chat = SQLiteSession("user-42")                      # the SDK's own session
    ctx = AgentsContext("policies/agents.yaml", agent="coding_agent", sdk_session=chat)
    agent = Agent(name="coder", tools=[*my_tools, *ctx.recall_tools()])
    result = await ctx.run(agent, "Fix BUG-1234")       # Runner.run + overflow retry

One :class:`AgentsContext` is one ctxpolicy conversation. Its id is, in this order,
``conv_id=``, the SDK session's ``session_id`` (``sdk_session=``), else a fresh
private id (nothing is shared with another context, and nothing resumes it unless
you pass that id again). A named conversation is stored as ``"<agent>/<id>"``, so two
agents with different policies on one SDK session never share a state.

Before every model call the SDK runs the filter (:meth:`AgentsContext.filter`, set as
``RunConfig.call_model_input_filter`` by :meth:`~AgentsContext.run_config`):

* every ``function_call_output`` item not seen before goes through
  ``session.add_tool_result`` (preprocessed, snapshotted) — the SDK keeps the raw
  output in its own session, the model is sent the processed text; the filter is
  the one place that sees the results of every tool kind (function, MCP, hosted);
* the item list is prepared under the policy (:class:`~ctxpolicy.integrations.openai.ResponsesInput`:
  unchanged items are sent as they were, ids and reasoning intact), the agent's
  function-tool schemas counted.

The SDK raises the provider's overflow error out of ``Runner.run`` (its own retry
replays the already filtered input, so it cannot compact). :meth:`AgentsContext.run`
catches it, and the next filter call sends ``session.on_error``'s compacted messages
(the window learned from the error); the policy's ``on_overflow.retries`` bounds
this and then :class:`ctxpolicy.ContextOverflowError` is raised. ``hooks`` records
the provider's ``usage.input_tokens`` (``on_llm_end``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.calls.driver import off_loop
from ctxpolicy.calls.pool import resolve_policy
from ctxpolicy.conversation.messages import function_tool, new_call
from ctxpolicy.integrations._common import (
    Message,
    as_session,
    conversation_key,
    is_given,
    json_args,
    require,
    to_plain,
)

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session

__all__ = ["AgentsContext", "function_tool_schemas"]

#: processed tool results remembered per context (a bound, not a goal)
MAX_REMEMBERED = 100_000


def _agents() -> Any:
    return require("agents", "openai_agents")


def run_config_module() -> Any:
    """``agents.run_config`` (``ModelInputData`` is not exported by the package root)."""
    _agents()
    return require("agents.run_config", "openai_agents")


def function_tool_schemas(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """The chat-format schemas of an agent's ``FunctionTool`` objects (others skipped)."""
    out: list[dict[str, Any]] = []
    for t in tools:
        schema = getattr(t, "params_json_schema", None)
        name = getattr(t, "name", None)
        if not isinstance(schema, Mapping) or not isinstance(name, str):
            continue
        description = str(getattr(t, "description", "") or "")
        out.append(function_tool(name, description, dict(schema)))
    return out


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):  # content parts
        texts = [str(p.get("text", "")) for p in output if isinstance(p, Mapping) and "text" in p]
        if len(texts) == len(output):
            return "\n".join(texts)
    return json.dumps(output, ensure_ascii=False, default=str)


class AgentsContext:
    """ctxpolicy for one conversation of the OpenAI Agents SDK.

    ``policy`` is a :class:`ctxpolicy.Session`, a resolved policy or a policy file
    (``agent`` names the agent in it); ``session_options`` go to the new
    :class:`~ctxpolicy.Session` (``env``, ``snapshot_store``, ``on_event`` …).
    """

    def __init__(
        self,
        policy: Session | Any,
        *,
        agent: str = "default",
        conv_id: str | None = None,
        sdk_session: Any = None,
        record_usage: bool = True,
        **session_options: Any,
    ) -> None:
        _agents()
        if conv_id is None and sdk_session is not None:
            sid = getattr(sdk_session, "session_id", None)
            if not isinstance(sid, str) or not sid:
                raise ValueError("sdk_session has no session_id; pass conv_id=")
            conv_id = sid
        from ctxpolicy.engine import Session

        if isinstance(policy, Session):
            self.session: Session = as_session(policy, conv_id=conv_id)
        else:  # stored as "<agent>/<conv_id>": two agents on one id never share a state
            resolved = resolve_policy(policy, agent)
            key = conversation_key(resolved.agent, conv_id) if conv_id else None
            self.session = as_session(resolved, conv_id=key, **session_options)
        self._conv_id = conv_id or self.session.conv_id
        self.sdk_session = sdk_session
        self.record_usage = record_usage
        self._processed: dict[str, str] = {}
        self._overflow: BaseException | None = None
        self.hooks = self._make_hooks()

    @property
    def conv_id(self) -> str:
        """The conversation's id (``conv_id=`` or the SDK session's); its state is
        stored under ``"<agent>/<conv_id>"`` (``ctx.session.conv_id``)."""
        return self._conv_id

    # -- the filter ----------------------------------------------------------------
    async def filter(self, data: Any) -> Any:
        """``RunConfig.call_model_input_filter``: the prepared ``ModelInputData`` (the
        engine runs in a worker thread, never on the SDK's event loop)."""
        return await off_loop(self.prepare_input, data)

    def prepare_input(self, data: Any) -> Any:
        """:meth:`filter`'s work, synchronously (tool results processed, items prepared)."""
        from ctxpolicy.integrations.openai import ResponsesInput

        model_data = data.model_data
        instructions = model_data.instructions if is_given(model_data.instructions) else None
        items = self._with_processed_results([to_plain(i) for i in model_data.input])
        tools = function_tool_schemas(getattr(data.agent, "tools", None) or []) or None
        conv = ResponsesInput(items, instructions=instructions)
        prepared: list[Message] | None = None
        if self._overflow is not None:
            error, self._overflow = self._overflow, None
            prepared = self.session.on_error(error, conv.messages, tools)
        if prepared is None:
            prepared = self.session.prepare(conv.messages, tools=tools)
        return run_config_module().ModelInputData(
            input=conv.to_items(prepared), instructions=instructions
        )

    def _with_processed_results(self, items: list[Any]) -> list[Any]:
        calls: dict[str, Mapping[str, Any]] = {}
        out: list[Any] = []
        for it in items:
            if not isinstance(it, dict):
                out.append(it)
                continue
            if it.get("type") == "function_call":
                calls[str(it.get("call_id") or "")] = it
            elif it.get("type") == "function_call_output":
                call_id = str(it.get("call_id") or "")
                text = self._processed.get(call_id)
                if text is None:
                    call = calls.get(call_id, {})
                    text = self.session.add_tool_result(
                        new_call(
                            call_id, str(call.get("name", "")), json_args(call.get("arguments"))
                        ),
                        _output_text(it.get("output")),
                    )
                    if len(self._processed) >= MAX_REMEMBERED:
                        self._processed.clear()
                    self._processed[call_id] = text
                it = {**it, "output": text}
            out.append(it)
        return out

    # -- the SDK's objects ---------------------------------------------------------
    def run_config(self, **options: Any) -> Any:
        """A ``RunConfig`` with this filter (other ``RunConfig`` fields as keywords)."""
        if options.get("call_model_input_filter") is not None:
            raise ValueError("run_config() sets call_model_input_filter itself")
        options.pop("call_model_input_filter", None)
        options.setdefault("group_id", self.conv_id)
        return _agents().RunConfig(call_model_input_filter=self.filter, **options)

    def recall_tools(self) -> list[Any]:
        """``ctx_recall`` and ``ctx_search`` as SDK ``FunctionTool`` objects."""
        agents = _agents()
        schemas, handler = self.session.recall_tool()
        out = []
        for schema in schemas:
            fn = schema["function"]

            async def invoke(_ctx: Any, arguments: str, _name: str = fn["name"]) -> str:
                return await off_loop(handler, _name, arguments)

            out.append(
                agents.FunctionTool(
                    name=fn["name"],
                    description=fn["description"],
                    params_json_schema=fn["parameters"],
                    on_invoke_tool=invoke,
                    strict_json_schema=False,
                )
            )
        return out

    def _make_hooks(self) -> Any:
        agents = _agents()
        owner = self

        class _Hooks(agents.RunHooks):  # type: ignore[name-defined]
            async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
                tokens = getattr(getattr(response, "usage", None), "input_tokens", None)
                if owner.record_usage and isinstance(tokens, int) and tokens > 0:
                    await off_loop(owner.session.record_usage, tokens)

        return _Hooks()

    # -- running -------------------------------------------------------------------
    async def run(self, agent: Any, input: Any, **options: Any) -> Any:
        """``Runner.run(agent, input, session=sdk_session, run_config=…, hooks=…)``.

        A provider overflow error is answered by compaction and a new run of the same
        input, bounded by the policy's ``on_overflow.retries``. With an SDK session that
        already stored the input (and the turns that succeeded), the retry continues
        from the stored items with an empty input, so nothing is added twice.
        """
        from ctxpolicy.engine.overflow import is_context_overflow

        agents = _agents()
        if self.sdk_session is not None:
            options.setdefault("session", self.sdk_session)
        options.setdefault("run_config", self.run_config())
        options.setdefault("hooks", self.hooks)
        sdk_session = options.get("session")
        stored = len(await sdk_session.get_items()) if sdk_session is not None else 0
        while True:
            try:
                return await agents.Runner.run(agent, input, **options)
            except Exception as exc:
                if not is_context_overflow(exc) or self._overflow is not None:
                    raise
                self._overflow = exc
                if sdk_session is not None and len(await sdk_session.get_items()) > stored:
                    input = []  # the SDK stored the input (and finished turns): go on from it

    def run_sync(self, agent: Any, input: Any, **options: Any) -> Any:
        """:meth:`run` in a new event loop (for code that is not async)."""
        import asyncio

        return asyncio.run(self.run(agent, input, **options))
