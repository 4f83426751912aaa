"""The progress ledger: the task state of compacted history, typed and kept pinned.

Design A keeps a task-progress summary in the system prompt so dropping old rounds
loses no state; design B stores IDs and files in structured fields instead of
relying on a summary. The ledger is that state as data (:class:`TaskState`), fed the
units a layer dropped (:meth:`ProgressLedger.update`), the facts a layer shortened
away (:meth:`ProgressLedger.record_facts`) and, once a compaction is taken, the
context before and after it (:meth:`ProgressLedger.sync`). It holds

* the goal (the task, the first user message) and every later user turn verbatim
  (the user's instructions: the newest ``MAX_INSTRUCTIONS``, each at most
  ``INSTRUCTION_CHARS`` characters (:mod:`ctxpolicy.conversation.facts`), within half
  the ledger's bound, the oldest going first and named by count);
* the policy's constraints, verbatim, never trimmed;
* the plan: the last list the agent's own todo or plan tool wrote (Claude Code's
  ``TodoWrite``, Codex's ``update_plan``, a ``todo``/``plan`` tool: :func:`todo_list`);
* the steps done (unless a summary in the prompt tells them), the artifacts touched (files, tables, tickets and other IDs) with
  their latest state, the decisions the agent stated, the errors still open (an
  error of a call that later succeeded is closed);
* small computed results kept whole (a table of at most :data:`RESULT_LINES` lines
  and :data:`RESULT_CHARS` characters that a tool returned);
* the next action: the plan's first open item, or an intention the agent stated last
  and did not act on — never a step already done.

Nothing is said twice: when a compaction is taken, an entry found verbatim in the rest
of the prompt (a summary, the pinned task, a kept round) is left out of the ledger
until the next compaction (:meth:`ProgressLedger.sync`; between compactions the text
never changes, so the cached prefix holds). The history archive's reference names
``ctx_recall`` only when the model is offered that tool.

:meth:`render` is bounded by ``max_tokens`` (oldest entries go first; the goal,
the constraints and the archive reference never); deterministic; :meth:`to_dict` /
:meth:`from_dict` persist it (version 2; a version 1 ledger is migrated on load).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ctxpolicy.conversation import Unit, content_text
from ctxpolicy.conversation import messages as chat
from ctxpolicy.conversation.cut import describe_call, estimate_tokens, first_meaningful_line, short
from ctxpolicy.conversation.facts import (
    MAX_INSTRUCTIONS,
    call_source,
    error_lines,
    extract,
    instruction_text,
    is_user_turn,
    whole_lines,
    without_derived,
)
from ctxpolicy.conversation.refs import REF_LINE, REF_MARK, meta_ref_for, split_refs
from ctxpolicy.engine.ledger_parts import (
    _DECISION,
    _INTENT,
    _MARK,
    _MAX_PER_LIST,
    _SEEN,
    _STATUS,
    HEADER,
    MAX_DECISIONS,
    MAX_ERRORS,
    MAX_READ,
    MAX_RESULTS,
    VERSION,
    Artifact,
    OpenError,
    Result,
    TaskState,
    Todo,
    _args,
    _artifact_line,
    _bullet,
    _call_part,
    _calls_by_id,
    _fact_kind,
    _first_user_text,
    _has_todo_call,
    _id_kind,
    _int,
    _is_done,
    _is_table,
    _key,
    _maps,
    _opt,
    _strs,
    _tables,
    _trim,
    _verb,
    _verbatim_in,
    todo_list,
)


class ProgressLedger:
    """The typed task state of compacted history (see the module docstring)."""

    def __init__(
        self,
        max_tokens: int = 1500,
        constraints: Sequence[str] = (),
        *,
        count_text: Callable[[str], int] | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.state = TaskState()
        for c in constraints:
            if c not in self.state.constraints:
                self.state.constraints.append(c)
        self._count = count_text or estimate_tokens
        self._said: set[str] = set()
        self._shown_instructions = 0

    # ------------------------------------------------------------------ fields
    @property
    def goal(self) -> str | None:
        return self.state.goal

    @goal.setter
    def goal(self, value: str | None) -> None:
        self.state.goal = value

    @property
    def constraints(self) -> list[str]:
        return self.state.constraints

    @property
    def archive(self) -> str | None:
        return self.state.archive

    @archive.setter
    def archive(self, value: str | None) -> None:
        self.state.archive = value

    @property
    def done(self) -> list[str]:
        return self.state.done

    @property
    def files(self) -> list[str]:
        """Paths among the artifacts (oldest first)."""
        return [a.name for a in self.state.artifacts if a.kind == "file"]

    @property
    def ids(self) -> list[str]:
        """Identifiers, tables and URLs among the artifacts (oldest first)."""
        return [a.name for a in self.state.artifacts if a.kind != "file"]

    @property
    def errors(self) -> list[str]:
        """The open errors' texts."""
        return [e.text for e in self.state.errors]

    @property
    def next_step(self) -> str | None:
        return self.state.next_action

    @property
    def instructions(self) -> list[str]:
        return self.state.instructions

    @property
    def todos(self) -> list[Todo]:
        return self.state.todos

    # ------------------------------------------------------------------ updates
    def set_goal(self, text: str) -> None:
        """Set the goal (e.g. from the pinned first user message) unless one is known."""
        if self.state.goal is None and text.strip():
            self.state.goal = instruction_text(text)

    def record_facts(self, facts: Sequence[str]) -> None:
        """Record facts a compaction took out of the context without dropping a unit
        (a masked or truncated result): paths as files, the rest as identifiers."""
        for f in facts:
            f = short(f, 120)
            self._artifact(f, _fact_kind(f), "seen")

    def update(self, dropped_units: Sequence[Unit]) -> None:
        """Record the task state of units removed from the context (in conversation
        order). Of a drop larger than :data:`MAX_READ` units (a long conversation
        compacted at once) the newest are read: the archive keeps every one verbatim."""
        units = [u for u in dropped_units if u.kind != "ledger"]
        if len(units) > MAX_READ:
            self.set_goal(_first_user_text(units) or "")
            units = units[-MAX_READ:]
        for u in units:
            self._read_unit(u)
        self._settle_next()

    def sync(
        self,
        before: Sequence[Unit],
        after: Sequence[Unit],
        *,
        recall: bool | None = None,
    ) -> bool:
        """After a compaction was taken: ``before`` is the context the call started with,
        ``after`` the one it sends (without the ledger). Keeps whole the small computed
        results a layer shortened, notes which entries the rest of the prompt already
        says and whether recall is offered. True when the ledger changed."""
        old = self.to_dict()
        kept = {u.key: u for u in after}
        for u in before:
            new = kept.get(u.key)
            if new is None or new.messages == u.messages or u.kind in ("ledger", "summary"):
                continue
            now = {chat.result_id(m): m for m in new.tool_messages}
            calls = _calls_by_id(u)
            for m in u.tool_messages:
                cid = chat.result_id(m)
                if now.get(cid) != m:  # shortened (or gone): its original, when small
                    self._keep_result(calls.get(cid), content_text(m.get("content")))
        if recall is not None:
            self.state.recall = recall
        texts = [u.text() for u in after if u.kind != "ledger"]
        summaries = "\n".join(u.text() for u in after if u.kind == "summary")
        self._note_said("\n".join(texts), summaries, [u for u in after if _has_todo_call(u)])
        return self.to_dict() != old

    # ------------------------------------------------------------------ reading
    def _read_unit(self, u: Unit) -> None:
        if u.kind == "summary":
            return  # the units it stood for were read when it was made (the archive has them)
        results = {chat.result_id(m): m for m in u.tool_messages}
        for m in u.messages:
            role = m.get("role")
            text = content_text(m.get("content"))
            if is_user_turn(m):
                self._instruction(text)
                for e in error_lines(without_derived(split_refs(text)[0]), limit=2, max_len=160):
                    self._open_error(e, "user")
            elif role == "assistant":
                calls = chat.tool_calls(m)
                if text.strip():
                    self._statements(text, acted=bool(calls))
                for tc in calls:
                    out = results.get(chat.call_id(tc))
                    self._call(u, tc, content_text(out.get("content")) if out else "")

    def _instruction(self, text: str) -> None:
        st = self.state
        if st.goal is None:
            st.goal = instruction_text(text)
            return
        item = instruction_text(text)
        if item == st.goal:
            return
        if item in st.instructions:
            st.instructions.remove(item)
        st.instructions.append(item)
        if len(st.instructions) > MAX_INSTRUCTIONS:
            del st.instructions[0]
            st.instructions_dropped += 1

    def _statements(self, text: str, *, acted: bool) -> None:
        st = self.state
        body = split_refs(text)[0]
        for sentence in re.split(r"(?<=[.!?])\s+|\n+", body):
            if _DECISION.search(sentence):
                self._add(st.decisions, short(sentence, 200), MAX_DECISIONS)
        intent = _INTENT.search(body)
        # an intention the same message acted on (its tool calls) is done, not next
        st.next_action = None if acted or intent is None else short(intent.group("what"), 300)

    def _call(self, u: Unit, tc: Mapping[str, Any], out: str) -> None:
        st = self.state
        name = chat.call_name(tc) or "?"
        args = _args(chat.call_arguments(tc))
        todos = todo_list(name, args)
        if todos is not None:
            st.todos = todos
            return
        body, _refs = split_refs(out)
        clean = without_derived(whole_lines(body))
        entry = describe_call(tc, 100)
        step = f"step {u.round}" if u.round is not None else None
        if step:
            entry = f"{step}: {entry}"
        outcome = _said_line(clean, 80)
        if outcome and not _is_table(clean):
            entry += f" → {outcome}"
        ref = REF_LINE.search(out) if REF_MARK in out else None
        meta_ref = meta_ref_for(u, str(tc.get("id", "")))
        if ref:
            entry += f" [{ref.group('uri') or ref.group('path')}]"
        elif meta_ref:
            entry += f" [{meta_ref}]"
        self._add(st.done, entry)
        source = call_source(name, args)
        errs = error_lines(clean, limit=2, max_len=160)
        if errs:
            for e in errs:
                self._open_error(e, source)
        else:
            st.errors = [e for e in st.errors if e.source != source]
            self._keep_result(describe_call(tc, 100), out)
        verb = _verb(name, args)
        when = f" ({step})" if step else ""
        arg_text = " ".join(str(v) for v in args.values()) if isinstance(args, dict) else ""
        facts = extract(clean + "\n" + arg_text, only=("paths", "ids", "urls"))
        # in the order found (a set's order follows the hash seed: two processes would
        # write the artifacts of one conversation in different orders)
        arg_paths = dict.fromkeys(extract(arg_text, only=("paths",)).paths)
        for p in facts.paths:
            self._artifact(p, "file", (verb if p in arg_paths else "seen") + when)
        for t in _tables(arg_text):
            self._artifact(t, "table", ("queried" if verb == "read" else verb) + when)
        for x in [*facts.ids, *facts.urls]:
            self._artifact(short(x, 120), _id_kind(x), "seen" + when)
        if errs and arg_paths:
            for p in arg_paths:
                self._artifact(p, "file", f"error{when}")

    def _keep_result(self, call: str | None, text: str) -> None:
        body = without_derived(split_refs(text)[0]).strip()
        if not _is_table(body):
            return
        st = self.state
        st.results = [r for r in st.results if r.text != body]
        st.results.append(Result(call=call or "a tool", text=body))
        del st.results[:-MAX_RESULTS]

    def _open_error(self, text: str, source: str) -> None:
        text = text.strip()
        st = self.state
        st.errors = [e for e in st.errors if e.text != text]
        st.errors.append(OpenError(text=text, source=source))
        del st.errors[:-MAX_ERRORS]

    def _artifact(self, name: str, kind: str, state: str) -> None:
        name = name.strip()
        if not name:
            return
        arts = self.state.artifacts
        old = next((a for a in arts if a.name == name), None)
        if old is not None:
            arts.remove(old)
            # "seen" never hides a stronger state recorded before
            if state.startswith("seen") and not old.state.startswith("seen"):
                state = old.state
        arts.append(Artifact(name=name, kind=kind, state=state))
        del arts[:-_MAX_PER_LIST]

    @staticmethod
    def _add(lst: list[str], item: str, limit: int = _MAX_PER_LIST) -> None:
        item = item.strip()
        if not item:
            return
        if item in lst:
            lst.remove(item)  # move to newest
        lst.append(item)
        del lst[:-limit]

    def _settle_next(self) -> None:
        """The next action: the plan's first open item, else the intention kept (never
        one the plan or the done steps record as done)."""
        st = self.state
        open_items = [t for t in st.todos if t.status == "in_progress"] or [
            t for t in st.todos if t.status == "pending"
        ]
        if open_items:
            st.next_action = open_items[0].text
        elif st.todos:
            st.next_action = None  # every item of the plan is done
        if st.next_action is not None and _is_done(st, st.next_action):
            st.next_action = None

    def _note_said(self, text: str, summaries: str, todo_units: Sequence[Unit]) -> None:
        """The keys of the entries ``text`` (the rest of the prompt) already holds
        verbatim; of the steps and artifacts, also those a summary (``summaries``)
        names."""
        st = self.state
        said: list[str] = []
        if st.goal and _verbatim_in(st.goal, text):
            said.append(_key("goal", st.goal))
        for i in st.instructions:
            if _verbatim_in(i, text):
                said.append(_key("instruction", i))
        for c in st.constraints:
            if c in summaries:
                said.append(_key("constraint", c))
        named = False
        for d in st.done:
            call = _call_part(d)
            if d in text or (summaries and call in summaries):
                said.append(_key("done", d))
                named = named or bool(summaries and call in summaries)
        if named:
            # a summary that tells the steps (it names some) is their home: it keeps the
            # newest and drops the oldest by its own bound; a summary of facts only
            # leaves the steps to the ledger
            said.append("steps")
        for a in st.artifacts:
            if _artifact_line(a) in text or (
                a.name in summaries or (a.state.startswith("seen") and a.name in text)
            ):
                said.append(_key("artifact", a.name))
        for dec in st.decisions:
            if dec.rstrip("…") in text:
                said.append(_key("decision", dec))
        for e in st.errors:
            if e.text in text:
                said.append(_key("error", e.text))
        for r in st.results:
            if r.text in text:
                said.append(_key("result", r.text))
        if todo_units:  # the agent's newest plan is in the prompt itself
            said.append("plan")
        st.said = said
        self._said = set(said)

    # ------------------------------------------------------------------ output
    def __bool__(self) -> bool:
        st = self.state
        return bool(
            st.archive
            or st.goal
            or st.constraints
            or st.instructions
            or st.todos
            or st.next_action
            or st.done
            or st.artifacts
            or st.decisions
            or st.errors
            or st.results
        )

    def _visible(self) -> dict[str, list[Any]]:
        """Each section's entries not said elsewhere in the prompt, oldest first."""
        st, said = self.state, self._said
        return {
            "instructions": [i for i in st.instructions if _key("instruction", i) not in said],
            "todos": [] if "plan" in said else list(st.todos),
            "done": [] if "steps" in said else [d for d in st.done if _key("done", d) not in said],
            "artifacts": [a for a in st.artifacts if _key("artifact", a.name) not in said],
            "decisions": [d for d in st.decisions if _key("decision", d) not in said],
            "errors": [e for e in st.errors if _key("error", e.text) not in said],
            "results": [r for r in st.results if _key("result", r.text) not in said],
        }

    def _render(self, parts: Mapping[str, list[Any]], goal: str | None) -> str:
        st = self.state
        lines = [HEADER]
        if st.archive:
            if st.recall:
                lines.append(f"Compacted history, verbatim (read with ctx_recall): {st.archive}")
            else:
                lines.append(f"Compacted history, kept verbatim outside this prompt: {st.archive}")
        if goal:
            lines.append(f"Goal: {goal}")
        omitted = st.instructions_dropped + self._shown_instructions - len(parts["instructions"])
        if parts["instructions"] or omitted:
            lines.append("User instructions (verbatim, oldest first):")
            if omitted:
                lines.append(f"- ({omitted} earlier turns are in the compacted history)")
            lines.extend(_bullet(i) for i in parts["instructions"])
        constraints = [c for c in st.constraints if _key("constraint", c) not in self._said]
        if constraints:
            lines.append("Constraints (verbatim):")
            lines.extend(f"- {c}" for c in constraints)
        if parts["todos"]:
            lines.append("Plan:")
            lines.extend(f"- {_MARK.get(t.status, '[ ]')} {t.text}" for t in parts["todos"])
        if parts["done"]:
            lines.append("Done:")
            # a step's snapshot reference is a handle for ctx_recall: without the tool
            # it tells the model nothing (the archive line above says where it all is)
            lines.extend(f"- {d if st.recall else _STEP_REF.sub('', d)}" for d in parts["done"])
        changed = [a for a in parts["artifacts"] if not a.state.startswith("seen")]
        if changed:
            lines.append("Artifacts (latest state):")
            lines.extend(f"- {_artifact_line(a)}" for a in changed)
        for kind, label in _SEEN:
            names = [
                a.name for a in parts["artifacts"] if a.kind == kind and a.state.startswith("seen")
            ]
            if names:
                lines.append(f"{label}: " + ", ".join(names))
        if parts["results"]:
            lines.append("Results (kept whole):")
            for r in parts["results"]:
                lines.append(f"- {r.call}:")
                lines.append(r.text)
        if parts["decisions"]:
            lines.append("Decisions:")
            lines.extend(f"- {d}" for d in parts["decisions"])
        if parts["errors"]:
            lines.append("Open errors:")
            lines.extend(f"- {e.text}" for e in parts["errors"])
        if st.next_action and "plan" not in self._said:
            lines.append(f"Next action: {st.next_action}")
        return "\n".join(lines)

    def render(self, max_tokens: int | None = None) -> str | None:
        """The ledger as text within ``max_tokens`` (default: the configured bound;
        None when empty). The archive reference, the goal's first 60 characters and
        the constraints are never trimmed, so the result can stay above a very small
        bound."""
        if not self:
            return None
        limit = self.max_tokens if max_tokens is None else max_tokens
        parts = self._visible()
        self._shown_instructions = len(parts["instructions"])
        # the user's turns take at most half the bound (the oldest go first)
        turns = parts["instructions"]
        room = limit * 2  # characters: half the bound at ~4 characters a token
        while turns and sum(len(t) + 3 for t in turns) > room:
            turns.pop(0)
        goal = self.state.goal
        if goal and _key("goal", goal) in self._said:
            goal = None
        text = self._render(parts, goal)
        # trimming is planned on an estimate (characters per token, 4 until this text
        # is counted, then as counted) and every estimate that fits is checked by one
        # exact count
        cpt = 4.0
        tokens, exact = math.ceil(len(text) / cpt), False
        while True:
            if tokens <= limit:
                if exact:
                    break
                tokens, exact = self._count(text), True
                cpt = max(1.0, len(text) / max(1, tokens))
                if tokens <= limit:
                    break
            if not _trim(parts, (tokens - limit) * cpt):
                if goal and len(goal) > 60:
                    goal = short(goal, 60)
                else:
                    break
            text = self._render(parts, goal)
            tokens, exact = math.ceil(len(text) / cpt), False
        return text

    def unit(self) -> Unit | None:
        """The pinned ``ledger`` unit (key ``ledger``), or None when empty."""
        text = self.render()
        if text is None:
            return None
        return Unit(
            kind="ledger",
            messages=({"role": "user", "content": text},),
            key="ledger",
            pinned=True,
        )

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self.state)
        return {"v": VERSION, "max_tokens": self.max_tokens, **data}

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, count_text: Callable[[str], int] | None = None
    ) -> ProgressLedger:
        """A ledger from :meth:`to_dict`'s output, or from a version 1 ledger (its
        files and identifiers become artifacts, its errors open errors; its next step,
        the last text of the dropped region, is not carried over: it may name a step
        already done)."""
        led = cls(
            int(data.get("max_tokens", 1500)), data.get("constraints", ()), count_text=count_text
        )
        st = led.state
        st.goal = _opt(data.get("goal"))
        st.archive = _opt(data.get("archive"))
        st.done = _strs(data.get("done"))[-_MAX_PER_LIST:]
        if data.get("v") != VERSION:  # version 1
            for f in _strs(data.get("files"))[-_MAX_PER_LIST:]:
                st.artifacts.append(Artifact(name=f, kind="file", state="seen"))
            for x in _strs(data.get("ids"))[-_MAX_PER_LIST:]:
                st.artifacts.append(Artifact(name=x, kind=_id_kind(x), state="seen"))
            st.errors = [OpenError(text=e, source="") for e in _strs(data.get("errors"))]
            del st.errors[:-MAX_ERRORS]
            return led
        st.instructions = _strs(data.get("instructions"))[-MAX_INSTRUCTIONS:]
        st.instructions_dropped = _int(data.get("instructions_dropped"))
        st.todos = [
            Todo(text=str(t["text"]), status=_STATUS.get(str(t.get("status")), "pending"))
            for t in _maps(data.get("todos"), ("text",))
        ][:_MAX_PER_LIST]
        st.artifacts = [
            Artifact(name=str(a["name"]), kind=str(a["kind"]), state=str(a["state"]))
            for a in _maps(data.get("artifacts"), ("name", "kind", "state"))
        ][-_MAX_PER_LIST:]
        st.decisions = _strs(data.get("decisions"))[-MAX_DECISIONS:]
        st.errors = [
            OpenError(text=str(e["text"]), source=str(e["source"]))
            for e in _maps(data.get("errors"), ("text", "source"))
        ][-MAX_ERRORS:]
        st.results = [
            Result(call=str(r["call"]), text=str(r["text"]))
            for r in _maps(data.get("results"), ("call", "text"))
        ][-MAX_RESULTS:]
        st.next_action = _opt(data.get("next_action"))
        st.recall = data.get("recall") is True
        st.said = _strs(data.get("said"))
        led._said = set(st.said)
        return led


def check_stored(value: Mapping[str, Any]) -> dict[str, Any]:
    """A stored version 2 ledger's fields, each of its type (raises ``ValueError``)."""
    out: dict[str, Any] = {"v": VERSION}
    for name in ("goal", "next_action", "archive"):
        v = value.get(name)
        if v is not None and not isinstance(v, str):
            raise ValueError(f"ledger.{name} is not a text")
        out[name] = v
    for name in ("instructions", "done", "decisions", "said"):
        v = value.get(name, [])
        if type(v) is not list or not all(isinstance(x, str) for x in v):
            raise ValueError(f"ledger.{name} is not a list of texts")
        out[name] = v
    shapes = {
        "todos": ("text",),
        "artifacts": ("name", "kind", "state"),
        "errors": ("text", "source"),
        "results": ("call", "text"),
    }
    for name, keys in shapes.items():
        v = value.get(name, [])
        if type(v) is not list or not all(
            isinstance(x, Mapping) and all(isinstance(x.get(k), str) for k in keys) for x in v
        ):
            raise ValueError(f"ledger.{name} is not a list of objects with {', '.join(keys)}")
        out[name] = v
    dropped = value.get("instructions_dropped", 0)
    if type(dropped) is not int or dropped < 0:
        raise ValueError("ledger.instructions_dropped is not a count")
    out["instructions_dropped"] = dropped
    out["recall"] = value.get("recall") is True
    return out


#: the snapshot reference a step's entry ends with (``describe_call … [ctxsnap://…]``)
_STEP_REF = re.compile(r" \[[a-z][a-z0-9+.-]*://[^\]\s]*\]$")


def _said_line(text: str, n: int) -> str:
    """The first line of ``text`` that says something (a letter or a digit, not a
    bracket or a rule alone: a JSON result's ``{``), at most ``n`` characters."""
    for line in text.splitlines()[:200]:
        if any(c.isalnum() for c in line):
            return first_meaningful_line(line, n)
    return ""
