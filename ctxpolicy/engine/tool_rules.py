"""A tool result in a conversation: its tool's rule applied once, and what it changes.

A result reaches the engine through ``Session.add_tool_result`` (:func:`tool_result`)
or inside the messages of ``prepare`` (:func:`arrived`, the hook of the per-call
path). Either way its tool's rule (preprocess, redact, snapshot, reference:
:class:`~ctxpolicy.engine.tool_results.ToolResultProcessor`) is applied once
(:func:`apply_rule`) and the result is counted in the state (:func:`count_result`:
its reference, the learned tool growth, the running numbers), so the gateway,
prepare-only adapters and ``simulate`` send the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.components import ToolCall
from ctxpolicy.conversation.messages import result_id, tool_calls
from ctxpolicy.engine.own import tool_call_info
from ctxpolicy.engine.tool_results import (
    ToolResultOutcome,
    ToolResultProcessor,
    arrived_text,
    tool_key,
)
from ctxpolicy.events.types import ToolPreprocessed

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext

__all__ = [
    "RECALL_TOOLS",
    "apply_rule",
    "arrived",
    "call_of",
    "count_result",
    "emit_all",
    "processor",
    "tool_result",
]

#: The recall tools' names (their answers enter as they are: bounded, never snapshotted)
RECALL_TOOLS = frozenset({"ctx_recall", "ctx_search"})
#: How far back from a tool message its assistant call is looked for (bounded: a
#: request of many results without calls stays linear in its size).
_CALL_LOOKBACK = 128


def call_of(
    messages: Sequence[Mapping[str, Any]], index: int, call_id: str, m: Mapping[str, Any]
) -> ToolCall:
    """The assistant's tool call a tool message answers (the nearest before it with
    that id); without one, a call named by the message's ``name`` or ``unknown``."""
    if call_id:
        for j in range(index - 1, max(-1, index - 1 - _CALL_LOOKBACK), -1):
            prev = messages[j]
            if not isinstance(prev, Mapping) or prev.get("role") != "assistant":
                continue
            for tc in tool_calls(prev):
                if str(tc.get("id")) == call_id:
                    return tool_call_info(tc)
    name = m.get("name")
    return ToolCall(name=name if isinstance(name, str) and name else "unknown", id=call_id or None)


def tool_result(
    ctx: EngineContext,
    call: ToolCall,
    output: Any,
    step: int | None,
    meta: Mapping[str, Any] | None,
    done: dict[str, Any],
) -> str:
    """``add_tool_result``'s work on the state (one transaction): the result gets its
    tool's rule once (``done`` keeps what was processed, so a redo after a lost
    state race only re-applies what it changes in the state), at step ``step`` (None:
    the next), and is counted; returns the text for the context."""
    st = ctx.state
    if step is None:
        st.step += 1
        at = st.step
    else:
        at = step
        st.step = max(st.step, step)
    if not done:
        outcome, before, after = apply_rule(ctx, call, output, at, meta)
        done.update(outcome=outcome, before=before, after=after, at=at)
    elif done["at"] != at:
        # redone after a lost state race: the first attempt's step came from the
        # stale counter; the snapshot takes the name a sequential run gives it
        outcome = processor(ctx).restep(done["outcome"], call, conv_id=ctx.conv_id, step=at)
        emit_all(ctx, outcome.events)
        after = done["after"]
        if outcome.text != done["outcome"].text:
            after = ctx.counter.count_text(outcome.text)
        done.update(outcome=outcome, after=after, at=at)
    outcome, before, after = done["outcome"], done["before"], done["after"]
    count_result(ctx, call, outcome, before, after)
    # the text returned is known when it arrives in ``prepare``: not processed again
    st.add_tool_text(tool_key("", outcome.text), None)
    return str(outcome.text)


def processor(ctx: EngineContext) -> ToolResultProcessor:
    """The conversation's tool-result processor (built once, from the policy)."""
    components = ctx.derived.components
    if components.tool_processor is None:
        components.tool_processor = ToolResultProcessor(
            ctx.policy, store=ctx.snapshots, registry=ctx.registry
        )
    processor: ToolResultProcessor = components.tool_processor
    return processor


def emit_all(ctx: EngineContext, events: Sequence[Mapping[str, Any]]) -> None:
    """Emit the events a processor returned (plain dicts with a ``type``)."""
    for ev in events:
        ev = dict(ev)
        ctx.emit(str(ev.pop("type", "tool.event")), **ev)


def apply_rule(
    ctx: EngineContext, call: ToolCall, output: Any, at: int, meta: Mapping[str, Any] | None
) -> tuple[ToolResultOutcome, int, int]:
    """The tool's rule on one result (preprocess, snapshot, reference), its events,
    and the result's tokens before and after."""
    outcome = processor(ctx).process(call, output, conv_id=ctx.conv_id, step=at, meta=meta)
    emit_all(ctx, outcome.events)
    before = ctx.counter.count_text(outcome.raw_text)
    same = outcome.text is outcome.raw_text or outcome.text == outcome.raw_text
    after = before if same else ctx.counter.count_text(outcome.text)
    ctx.emit(
        ToolPreprocessed(
            tool=call.name,
            preprocessor=outcome.preprocessor or "",
            chars_before=outcome.chars_before,
            chars_after=outcome.chars_after,
            tokens_before=before,
            tokens_after=after,
            snapshot=outcome.ref.uri if outcome.ref is not None else None,
            step=at,
        )
    )
    return outcome, before, after


def count_result(
    ctx: EngineContext, call: ToolCall, outcome: ToolResultOutcome, before: int, after: int
) -> None:
    """What a processed result changes in the state: its snapshot reference, the
    learned tool growth and the running numbers."""
    st = ctx.state
    if outcome.ref is not None and call.id:
        st.add_ref(str(call.id), outcome.ref.uri)
    growth = st.growth
    if growth is not None:
        growth.observe(call.name, after)
    st.stats.tool_results += 1
    st.stats.tool_tokens_before += before
    st.stats.tool_tokens_after += after
    # a fixed tool_growth learns nothing: its entry is not encoded again
    st.touch(*(("meta", "growth") if growth is not None and growth.learned else ("meta",)))


def arrived(
    ctx: EngineContext, messages: Sequence[Mapping[str, Any]], index: int, m: Mapping[str, Any]
) -> Mapping[str, Any]:
    """A tool message as it enters the context when it arrives in ``prepare``
    (not through ``add_tool_result``): its tool's rule applied once (the tool named
    by the assistant's matching call), the result remembered in the state by its
    call id and text, so every later call and a resumed session send the same text.
    A text ``add_tool_result`` returned, a recall answer and a content that is not
    text enter as they are."""
    text = arrived_text(m.get("content"))
    if text is None:
        return m
    cid = result_id(m)
    st = ctx.state
    key = tool_key(cid, text)
    texts = st.tool_texts
    if key in texts:
        new = texts[key]
    elif cid and (plain := tool_key("", text)) in texts:
        new = texts[plain]  # what add_tool_result returned
    elif index < st.legacy_upto:
        # stored before results were remembered: it went to the model as it is
        # (processed by add_tool_result, or sent raw): it stays so
        st.add_tool_text(key, None)
        return m
    else:
        call = call_of(messages, index, cid, m)
        if call.name in RECALL_TOOLS:
            return m  # a recall answer is bounded already, never snapshotted again
        st.step += 1
        outcome, before, after = apply_rule(ctx, call, text, st.step, None)
        count_result(ctx, call, outcome, before, after)
        new = None if outcome.text == text else outcome.text
        st.add_tool_text(key, new)
    if new is None:
        return m
    return {**m, "content": new}
