"""What the engine keeps of what it shortens or drops: snapshots and the history archive.

* :func:`ensure_snapshots` — a long tool result that entered through ``messages``
  (not ``add_tool_result``) is snapshotted before a layer may shorten it, under the
  next step of the persisted step counter (so its name is the same after a restart);
* :func:`archive_units` — every message a layer drops is appended verbatim to the
  conversation's history archive (:class:`ctxpolicy.snapshots.archive.HistoryArchive`), whose
  reference the ledger shows; the archive's length is kept in the state, so a call
  redone after a crash reuses its first attempt's uncommitted append (same
  ``history#n`` numbers) instead of appending the messages twice;
* :func:`ref_for_message` — the reference of one message's verbatim original
  (archived now when it has none), for :mod:`ctxpolicy.engine.refs` and the squeeze.

A write that fails returns None or False: the caller then keeps what it would have
dropped, so nothing is lost without an event.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.conversation import Message, Unit, content_text
from ctxpolicy.conversation.messages import call_id, call_name, result_id, tool_calls
from ctxpolicy.engine.specials import ledger_changed
from ctxpolicy.events.types import SnapshotFailed, SnapshotTooLarge

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext

__all__ = ["archive_messages", "archive_units", "ensure_snapshots", "ref_for_message"]

#: Tool results longer than this are snapshotted before a layer may shorten them.
SNAPSHOT_MIN_CHARS = 400
#: Engine memory entry: the history archive's message count as of this state.
ARCHIVE_MEMORY = "~history"


def ensure_snapshots(ctx: EngineContext, view: Sequence[Unit]) -> None:
    """Snapshot every long tool result that entered through ``messages`` (not
    ``add_tool_result``) before a layer may shorten it: every shortened result
    has a reference to its verbatim original."""
    if ctx.snapshots is None:
        return
    st = ctx.state
    for u in view:
        if u.pinned or u.kind != "step":
            continue
        names = _call_names(u)
        for m in u.tool_messages:
            cid = result_id(m)
            text = content_text(m.get("content"))
            if not cid or cid in st.refs or len(text) <= SNAPSHOT_MIN_CHARS:
                continue
            # each snapshot takes the next step of the persisted counter: its name
            # (step_<NNN>_<tool>) is a function of the stored state, the same after a
            # restart, and a call redone after a crash writes the same document there
            step = st.step + 1
            try:
                ref = ctx.snapshots.write(
                    ctx.conv_id,
                    step,
                    names.get(cid, "tool"),
                    {
                        "step": step,
                        "action": names.get(cid, "tool"),
                        "phase": "context",
                        "observation": text,
                        "message": dict(m),
                        "timestamp": time.time(),
                        "conv_id": ctx.conv_id,
                    },
                )
            except Exception as exc:
                ctx.emit(SnapshotFailed(error=f"{type(exc).__name__}: {exc}"[:300]))
                return
            st.step = step
            st.touch("meta")
            st.add_ref(cid, ref.uri)


def archive_units(ctx: EngineContext, dropped: Sequence[Unit], emit: Callable[..., None]) -> bool:
    """Keep every dropped message verbatim in the history archive; False when it
    could not be written (the caller then keeps the units)."""
    msgs: list[Message] = []
    keys: list[str] = []
    for u in dropped:
        # a dropped summary or pointer stands for units archived when it was made
        if u.kind in ("summary", "ledger") or u.key in ctx.state.archived:
            continue
        keys.append(u.key)
        msgs.extend(u.messages)
    if not msgs:
        return True
    if ctx.snapshots is None:
        return not ctx.policy.snapshots.enabled
    ref = archive_messages(ctx, msgs, emit)
    if ref is None:
        return False
    for k in keys:
        ctx.state.mark_archived(k)
    if ctx.state.ledger is not None and ctx.state.ledger.archive != ref:
        ctx.state.ledger.archive = ref
        ledger_changed(ctx)
    return True


def archive_messages(
    ctx: EngineContext, msgs: Sequence[Message], emit: Callable[..., Any]
) -> str | None:
    """Append ``msgs`` to the conversation's history archive; its stable reference,
    or None when the write failed (the caller then keeps what it would drop)."""
    if ctx.derived.history is None:
        from ctxpolicy.snapshots.archive import HistoryArchive

        assert ctx.snapshots is not None
        ctx.derived.history = HistoryArchive(
            ctx.snapshots,
            ctx.conv_id,
            max_bytes=ctx.policy.snapshots.max_snapshot_bytes,
        )
    history, st = ctx.derived.history, ctx.state
    # how many messages the archive held when this state was committed: messages past
    # that were appended by an attempt that never committed (killed, or redone after a
    # lost race); when they are the very messages archived now they are reused, so
    # the numbering (history#n) is the one an uninterrupted run gives
    mem = st.memory.get(ARCHIVE_MEMORY)
    count = mem.get("count") if isinstance(mem, Mapping) else None
    expected = count if isinstance(count, int) and not isinstance(count, bool) else 0
    try:
        if len(history) > expected >= 0 and history.holds(expected + 1, msgs, step=st.step):
            ref = history.ref
        else:
            ref = history.append(msgs, step=st.step)
    except Exception as exc:
        emit(SnapshotFailed(error=f"{type(exc).__name__}: {exc}"[:300], action="history"))
        return None
    for t in history.last_truncated:
        emit(
            SnapshotTooLarge(
                action="history", role=t["role"], bytes=t["bytes"], kept_bytes=t["kept_bytes"]
            )
        )
    if history.last_range is not None:
        st.memory[ARCHIVE_MEMORY] = {"count": history.last_range[1]}
        st.touch("memory")
    return str(ref)


def ref_for_message(ctx: EngineContext, m: Mapping[str, Any]) -> str | None:
    """The reference of the verbatim original of ``m`` (archived now if needed)."""
    if m.get("role") == "tool":
        ref = ctx.state.refs.get(result_id(m))
        if ref:
            return ref
    if ctx.snapshots is None or archive_messages(ctx, [dict(m)], ctx.emit) is None:
        return None
    assert ctx.derived.history is not None
    return ctx.derived.history.last_ref


def _call_names(unit: Unit) -> dict[str, str]:
    """Tool-call id → tool name of a step's assistant message."""
    names: dict[str, str] = {}
    for m in unit.messages:
        for tc in tool_calls(m):
            names[call_id(tc)] = call_name(tc) or "tool"
    return names
