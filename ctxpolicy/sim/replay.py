"""Replay a recorded agent conversation against a policy, step by step.

The replay rebuilds the conversation as the agent saw it: messages are appended in
trace order; **before each assistant message** the strategy prepares the context
(for a policy: ``Session.prepare(conversation)``) and the prepared list is measured;
each tool result passes through the strategy's tool-result path (for a policy:
``Session.add_tool_result(call, content)``) and the text it returns is what enters
the conversation. The assistant message itself (what the model answered) is taken
from the trace, so every strategy is measured on the same decisions.

Public API (used by ``ctxpolicy simulate`` and the benchmarks)::

    policy = load_policy_file("policies/agents.yaml", "coding_agent")
    result = replay_trace(load_trace(path), policy, window=16384)
    result.to_dict()

Metrics (and the records they are computed from) are in :mod:`ctxpolicy.sim.metrics`;
baselines (no compaction, last N messages, observation masking, summary at a fraction
of the window) run through the same loop in :mod:`ctxpolicy.sim.baselines`; many
traces under many policies and baselines (``ctxpolicy simulate``) in
:mod:`ctxpolicy.sim.run`.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ctxpolicy.conversation import check_messages, content_text
from ctxpolicy.conversation.messages import (
    call_arguments,
    call_id,
    call_name,
    new_call,
    result_id,
    tool_calls,
)
from ctxpolicy.engine.tool_results import parse_reference
from ctxpolicy.policy.models import Policy
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.sim.metrics import StepRecord, SummaryMeter, TraceResult
from ctxpolicy.sim.prepared import PreparedTrace
from ctxpolicy.sim.rulers import (
    OwnTextRuler,
    RetentionRuler,
    SentTexts,
    measure_facts,
    ruler_facts,
    sent_text,
)

__all__ = [
    "PolicyStrategy",
    "StepRecord",
    "Strategy",
    "TraceResult",
    "call_for",
    "load_policy_file",
    "load_trace",
    "message_text",
    "replay_trace",
    "run_strategy",
    "with_snapshots",
    "with_window",
]

Message = dict[str, Any]
_URI_RE = re.compile(r"ctxsnap://[^\s)\]\"']+")

#: a repeated call's result is searched for a fact in its first this many characters
_REPEAT_FACTS_CHARS = 4000


# --------------------------------------------------------------------------- policies


def load_policy_file(path: str | Path, agent: str) -> Policy:
    """Resolve ``agent`` from a policy file with :func:`ctxpolicy.load_policy`.

    Raises ``ctxpolicy.PolicyError`` (diagnostics) when the policy does not resolve.
    """
    from ctxpolicy.resolve.load import load_policy

    return load_policy(str(path), agent=agent)


def with_window(policy: Policy, window: int | None) -> Policy:
    """``policy`` with its window set to ``window`` tokens (model and budget)."""
    if window is None:
        return policy
    if window <= 0:
        raise ValueError("window must be positive")
    return policy.model_copy(
        update={
            "budget": policy.budget.model_copy(update={"window": int(window)}),
            "model": policy.model.model_copy(update={"context_window": int(window)}),
        }
    )


def with_snapshots(policy: Policy, directory: str | Path) -> Policy:
    """``policy`` writing its snapshots under ``directory`` (a local store)."""
    snaps = policy.snapshots.model_copy(update={"path": str(directory), "store": "local"})
    return policy.model_copy(update={"snapshots": snaps})


class Strategy(Protocol):
    """What the replay loop needs from a policy session or a baseline."""

    name: str
    label: str
    kind: str

    def tool_result(self, call: Mapping[str, Any], content: Any, step: int) -> str: ...

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]: ...

    def budget_numbers(self) -> dict[str, int]: ...

    def recall(self, ref: str) -> str | None: ...

    def events(self) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- policy


class PolicyStrategy:
    """A :class:`ctxpolicy.Session` under a policy (the thing being evaluated)."""

    kind = "policy"

    def __init__(
        self,
        policy: Policy,
        *,
        conv_id: str,
        label: str | None = None,
        store: Any = None,
        meter: SummaryMeter | None = None,
    ) -> None:
        from ctxpolicy.engine import Session

        self.meter = meter

        self.policy = policy
        self.name = "policy"
        self.label = label or policy.agent
        self._events: list[dict[str, Any]] = []
        if store is None and policy.snapshots.enabled:
            raise ValueError("a policy replay needs a snapshot store (see replay_trace)")
        from ctxpolicy.state.memory import MemoryStateStore

        # a replay is one-shot: it must never resume (nor leave) durable session state
        self.session = Session(
            policy,
            conv_id=conv_id,
            on_event=self._events.append,
            snapshot_store=store,
            state_store=MemoryStateStore(),
        )
        self.counter = self.session.counter
        self.above_target = False
        self.before: int | None = None
        self.state_before: str | None = None
        self._recalled: dict[str, str | None] = {}

    def tool_result(self, call: Mapping[str, Any], content: Any, step: int) -> str:
        return self.session.add_tool_result(call, content)

    def summarizer_tokens(self) -> tuple[int, int, int]:
        """LLM summarizer calls and their input/output tokens so far (``meter``; none
        without one: the built-in extractive summarizer makes no LLM call)."""
        return self.meter.totals() if self.meter is not None else (0, 0, 0)

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]:
        start = len(self._events)
        out = self.session.prepare(convo)
        self.above_target = any(
            e.get("type") == "context.above_target" for e in self._events[start:]
        )
        if any(e.get("type") == "context.compacted" for e in self._events[start:]):
            self._recalled.clear()  # the history archive behind a reference grew
        layers = [
            str(e.get("layer"))
            for e in self._events[start:]
            if e.get("type") == "context.compacted"
        ]
        status = self.session.status or {}
        entry = status.get("compacted_from")
        self.before = int(entry) if isinstance(entry, int) else None
        self.state_before = (
            self.session.budget().state_for(self.before).value if self.before is not None else None
        )
        if status.get("compact_layer") == "squeeze" and "squeeze" not in layers:
            layers.append("squeeze")
            self._events.append(
                {"type": "context.compacted", "layer": "squeeze", "before": None, "after": None}
            )
        return out, layers

    def budget_numbers(self) -> dict[str, int]:
        b = self.session.budget()
        at = {"normal": 0, "warning": b.warning_tokens, "error": b.error_tokens}
        at["critical"] = b.critical_tokens
        lowest = [at.get(str(step.at), b.trigger) for step in self.policy.pipeline]
        return {
            "fires": min(lowest) if lowest else b.trigger,
            "trigger": b.trigger,
            "target": b.target,
            "warning": b.warning_tokens,
            "error": b.error_tokens,
            "hard_limit": b.window - b.reserve_output,
            "window": b.window,
            "reserve_output": b.reserve_output,
        }

    def state(self) -> str:
        return str((self.session.status or {}).get("state", "normal"))

    def recall(self, ref: str) -> str | None:
        if ref not in self._recalled:
            try:
                self._recalled[ref] = self.session.recall(ref)
            except Exception:
                self._recalled[ref] = None
        return self._recalled[ref]

    def events(self) -> list[dict[str, Any]]:
        return self._events

    def close(self) -> None:
        return None


# --------------------------------------------------------------------------- loop


def _call_key(call: Mapping[str, Any]) -> str:
    name = call_name(call)
    args = call_arguments(call)
    if isinstance(args, str):
        with contextlib.suppress(json.JSONDecodeError, ValueError):
            args = json.loads(args)
    try:
        canon = json.dumps(args, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        canon = str(args)
    return f"{name} {canon}"


def message_text(m: Mapping[str, Any]) -> str:
    """Content plus tool-call names and arguments of one message."""
    parts = [content_text(m.get("content"))]
    for tc in tool_calls(m):
        parts.append(call_name(tc))
        parts.append(str(call_arguments(tc, "")))
    return "\n".join(p for p in parts if p)


def run_strategy(
    messages: Sequence[Mapping[str, Any]],
    strategy: Strategy,
    *,
    counter: Any,
    trace: str = "trace",
    model: str | None = None,
    example_limit: int = 10,
    plan: Mapping[int, Sequence[tuple[str, bool]]] | None = None,
) -> TraceResult:
    """Replay ``messages`` through ``strategy``; the common loop of policies and baselines.

    ``plan``: the ruler's facts per assistant message of these very messages
    (:func:`ctxpolicy.sim.prepared.ruler_plan`), computed once per trace instead of at
    every replay; without it the loop runs the ruler itself (same numbers).
    """
    nums = strategy.budget_numbers()
    result = TraceResult(
        trace=trace,
        strategy=strategy.name,
        label=strategy.label,
        kind=strategy.kind,
        model=model,
        window=nums["window"],
        reserve_output=nums["reserve_output"],
        messages=len(messages),
    )
    convo: list[Message] = []
    # the uncompacted conversation only grows: its tokens are a running sum (counting
    # the whole list at every step made simulate quadratic, issue 29 item 8)
    priming = counter.count_messages([])
    count_one = getattr(counter, "count_message", None) or (
        lambda msg: counter.count_messages([msg]) - priming
    )
    raw_tokens = 0
    prev_raw_tokens = 0
    pending: dict[str, Mapping[str, Any]] = {}
    issued: dict[str, str] = {}  # call key -> tool_call_id of its latest result
    added: dict[str, str] = {}  # tool_call_id -> text that entered the conversation
    raw_by_id: dict[str, str] = {}  # tool_call_id -> raw result text
    candidates: dict[str, str] = {}  # new tool_call_id -> earlier id whose result was compacted
    ruler = RetentionRuler() if plan is None else None
    sent = SentTexts()  # the text of a message kept call after call is built once
    own = OwnTextRuler(count_one)
    summary_seen = (0, 0, 0)
    task: list[Message] = []  # leading system messages and the first user message
    task_open = True
    previous: list[Message] = []
    prev_raw_len = 0
    tool_step = 0
    for index, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant" and convo:
            prepared, layers = strategy.prepare(convo)
            nums = strategy.budget_numbers()
            used = counter.count_messages(prepared)
            none = raw_tokens + priming
            k = 0
            for a, b in zip(prepared, previous, strict=False):
                if a != b:
                    break
                k += 1
            cached = counter.count_messages(prepared[:k]) if k else 0
            # the uncompacted conversation only ever grows: its cached prefix is the last call
            none_cached = prev_raw_tokens + priming if prev_raw_len else 0
            result.none_cached += none_cached
            prev_raw_len, prev_raw_tokens = index, raw_tokens
            meter = getattr(strategy, "summarizer_tokens", None)
            summary_now = tuple(meter()) if callable(meter) else (0, 0, 0)
            s_calls, s_in, s_out = (a - b for a, b in zip(summary_now, summary_seen, strict=True))
            summary_seen = summary_now
            state = strategy.state() if hasattr(strategy, "state") else _state(used, nums)
            rec = StepRecord(
                index=len(result.steps),
                used=used,
                none=none,
                trigger=nums["trigger"],
                target=nums["target"],
                warning=nums["warning"],
                error=nums["error"],
                hard_limit=nums["hard_limit"],
                state=state,
                layers=layers,
                cached=min(cached, used),
                output=counter.count_text(message_text(m)),
                violations=len(check_messages(prepared)),
                floor=counter.count_messages(
                    task if any(convo[-1] is t for t in task) else [*task, convo[-1]]
                ),
                prefix_changed=bool(previous) and k < len(previous),
                above_target=bool(getattr(strategy, "above_target", False)),
                none_cached=none_cached,
                summary_calls=s_calls,
                summary_in=s_in,
                summary_out=s_out,
                before=getattr(strategy, "before", None),
                state_before=getattr(strategy, "state_before", None),
                fires=nums.get("fires"),
            )
            result.steps.append(rec)
            facts = ruler.facts_of(m) if ruler is not None else (plan or {}).get(index, ())
            _retention(facts, prepared, strategy, result, example_limit, sent)
            checked, kept, own_tokens, dup = own.measure(prepared, sent)
            result.instructions["checked"] += checked
            result.instructions["retained"] += kept
            result.own_tokens += own_tokens
            result.duplicated_lines += dup
            _repeats(m, prepared, issued, added, candidates)
            previous = prepared
        if role == "assistant":
            pending = {}
            for tc in tool_calls(m):
                pending[call_id(tc)] = tc
                issued[_call_key(tc)] = call_id(tc)
            convo.append(dict(m))
        elif role == "tool":
            tid = result_id(m)
            call = call_for(pending, tid)
            tool_step += 1
            text = strategy.tool_result(call, m.get("content"), tool_step)
            added[tid] = text
            raw_by_id[tid] = content_text(m.get("content"))
            prev = candidates.pop(tid, None)
            # a result without a single fact of the ruler (an edit such as ``sed -i``:
            # ``<returncode>0</returncode><output></output>``) held nothing compaction
            # could take away: running the same call again is not a repeated read
            if (
                prev is not None
                and raw_by_id.get(prev) == raw_by_id[tid]
                and ruler_facts(raw_by_id[tid][:_REPEAT_FACTS_CHARS])
            ):
                result.repeated_reads += 1
                if len(result.repeated_examples) < example_limit:
                    result.repeated_examples.append(
                        f"step {len(result.steps) - 1}: {_call_key(call)}"[:200]
                    )
            convo.append({**m, "content": text})
        else:
            convo.append(dict(m))
        if task_open:
            task_open = role in ("system", "developer")
            if task_open or role == "user":
                task.append(convo[-1])
        raw_tokens += count_one(dict(m))
        own.add(m)
        if ruler is not None:
            ruler.add(m)
    result.events = list(strategy.events())
    if hasattr(strategy, "session"):
        st = strategy.session.stats
        result.tool_tokens_before = st.tool_tokens_before
        result.tool_tokens_after = st.tool_tokens_after
    strategy.close()
    return result


def _state(used: int, nums: Mapping[str, int]) -> str:
    if used >= nums["trigger"]:
        return "overflow"
    if used >= nums.get("critical", nums["trigger"]):
        return "critical"
    if used >= nums["error"]:
        return "error"
    if used >= nums["warning"]:
        return "warning"
    return "normal"


def _retention(
    facts: Sequence[tuple[str, bool]],
    prepared: Sequence[Mapping[str, Any]],
    strategy: Strategy,
    result: TraceResult,
    limit: int,
    sent: SentTexts | None = None,
) -> None:
    """The ruler's retention of an assistant message whose reused facts are ``facts``
    (:meth:`RetentionRuler.facts_of`); a fact not sent is also looked up behind the
    references sent (``recoverable``, reported beside the ruler, never counted as
    retained by it)."""
    measured, ctx = measure_facts(facts, prepared, sent or sent_text)
    recovered: _Recoverable | None = None
    ret = result.retention
    for f, kept, far in measured:
        ret["facts"] += 1
        ret["far_facts"] += far
        if kept:
            ret["in_context"] += 1
            ret["far_in_context"] += far
            continue
        if recovered is None:
            recovered = _Recoverable(_recoverable_texts(ctx, strategy))
        if f in recovered:
            ret["recoverable"] += 1
            continue
        ret["lost"] += 1
        if len(result.lost_examples) < limit:
            result.lost_examples.append(f"step {len(result.steps) - 1}: {f}"[:200])


def _recoverable_texts(ctx: str, strategy: Strategy, hops: int = 2) -> Iterator[str]:
    """Everything the agent can read back with ``ctx_recall`` from this context, text
    by text, recalled as it is asked for.

    References in the context are recalled; references inside what they return (the
    compacted-history archive lists the snapshot of each dropped, shortened result)
    are followed once more — two hops, as an agent with the recall tool can.
    """
    seen: set[str] = set()
    frontier = ctx
    for _ in range(hops):
        refs = [
            r
            for r in dict.fromkeys([*parse_reference(frontier), *_URI_RE.findall(frontier)])
            if r not in seen
        ]
        if not refs:
            break
        seen.update(refs)
        found: list[str] = []
        for r in refs:
            found.append(strategy.recall(r) or "")
            yield found[-1]
        frontier = "\n".join(found)


class _Recoverable:
    """``fact in`` the text :func:`_recoverable_texts` yields, joined — reading only
    as far as needed: a fact of the ruler never holds a newline, so it is in the
    joined text exactly when it is in one of the texts, and the first text holding
    it settles the answer (the recalls after it are made only for a fact not found
    yet, in the same order)."""

    def __init__(self, texts: Iterator[str]) -> None:
        self._pending = texts
        self._read: list[str] = []

    def __contains__(self, fact: str) -> bool:
        if "\n" in fact:  # never from the ruler; kept exact all the same
            self._read.extend(self._pending)
            return fact in "\n".join(self._read)
        if any(fact in t for t in self._read):
            return True
        for t in self._pending:
            self._read.append(t)
            if fact in t:
                return True
        return False


def _repeats(
    m: Mapping[str, Any],
    prepared: Sequence[Mapping[str, Any]],
    issued: Mapping[str, str],
    added: Mapping[str, str],
    candidates: dict[str, str],
) -> None:
    """Mark calls repeating an earlier call (name + arguments) whose result was no
    longer intact in the context the agent saw (masked, cut, dropped, summarized).

    The repeat is counted when its result arrives and equals the earlier one: the
    agent fetched again what compaction took away. A re-run whose output changed
    (tests after an edit) is a new observation, not a repeated read; nor is one whose
    result holds no fact of the retention ruler (an edit command's empty output:
    compaction took nothing from it).
    """
    calls = tool_calls(m)
    if not calls:
        return
    present = {result_id(x): x.get("content") for x in prepared if x.get("role") == "tool"}
    keys: set[str] = set()
    for tc in calls:
        key = _call_key(tc)
        prev = issued.get(key)
        if prev is None or key in keys or prev not in added:
            continue
        keys.add(key)
        if present.get(prev) != added[prev]:
            candidates[call_id(tc)] = prev


# --------------------------------------------------------------------------- entry


def replay_trace(
    messages: Sequence[Mapping[str, Any]] | PreparedTrace,
    policy: Policy,
    *,
    window: int | None = None,
    snapshots_dir: str | Path | None = None,
    trace: str = "trace",
    label: str | None = None,
) -> TraceResult:
    """Replay one trace under ``policy`` (optionally at another ``window``).

    Snapshots go to ``snapshots_dir`` (default: a temporary directory removed
    afterwards), never to the policy's configured path. ``messages`` may be a
    :class:`~ctxpolicy.sim.prepared.PreparedTrace` (the ruler's side computed once per
    trace; same metrics).
    """
    plan: Mapping[int, Sequence[tuple[str, bool]]] | None = None
    if isinstance(messages, PreparedTrace):
        plan = messages.ruler
        messages = messages.messages
    pol = with_window(policy, window)
    tmp: str | None = None
    if snapshots_dir is None:
        tmp = tempfile.mkdtemp(prefix="ctxpolicy-sim-")
        snapshots_dir = tmp
    store = _sim_store(pol, Path(snapshots_dir) / _safe(trace))
    try:
        strat = PolicyStrategy(pol, conv_id=_safe(trace), label=label, store=store)
        return run_strategy(
            messages, strat, counter=strat.counter, trace=trace, model=pol.model_name, plan=plan
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def call_for(pending: Mapping[str, Mapping[str, Any]], tool_call_id: str) -> Mapping[str, Any]:
    """The assistant's tool call a tool result answers (``pending``: call id → call of
    the last assistant message); a trace that lost it gets an ``unknown`` call."""
    return pending.get(tool_call_id) or new_call(tool_call_id, "unknown", "{}")


def _sim_store(policy: Policy, directory: Path) -> Any:
    """A local store writing under ``directory`` whose references show the path the
    policy would use in production, so the context text (and its token count) does
    not depend on where the simulation keeps its files."""
    if not policy.snapshots.enabled:
        return None
    from ctxpolicy.components import SnapshotRef
    from ctxpolicy.policy.paths import interpolate_path
    from ctxpolicy.snapshots import LocalOptions, LocalStore

    try:
        shown = interpolate_path(policy.snapshots.path)
    except ValueError:
        shown = ".ctxpolicy/snapshots"
    try:
        options = LocalOptions.model_validate(dict(policy.snapshots.options))
    except Exception:
        options = LocalOptions()

    class SimStore(LocalStore):
        def ref_for(self, conv_dir: str, name: str) -> SnapshotRef:
            ref = super().ref_for(conv_dir, name)
            return SnapshotRef(
                uri=ref.uri,
                path=f"{shown.rstrip('/')}/{conv_dir}/{name}.json",
                conv_id=ref.conv_id,
                name=ref.name,
            )

    return SimStore(options, root=str(directory))


def _safe(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(name).name)[:80]
    return s or "trace"
