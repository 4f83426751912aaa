"""From a raw tool result to the text that enters the context.

:class:`ToolResultProcessor` is what ``Session.add_tool_result`` runs:

1. **render** the output to text (:func:`render_output`);
2. **snapshot** the full rendered text (design A's JSON document) to the store;
3. **redact** secrets that look like API keys (``sk-…``, ``AKIA…``, ``ghp_…``) —
   always in the context text; in the snapshot only when the store's ``redact``
   option is set (so that recall stays exact; see docs/snapshots.md);
4. **preprocess** with the rule picked by :func:`select_rule` (an exception falls
   back to ``head_tail`` and is reported as a ``tool.preprocess_failed`` event);
5. **reference**: append ``[Full detail available at: <ctxsnap uri>]`` (the portable
   form, the default: no machine path enters a prompt) or, with
   ``snapshots.reference_form: path``, design A's ``[Full detail available at: <path>
   (<ctxsnap uri>)]`` (the path is machine-specific: see :func:`format_reference`).

Nothing here raises because of the tool result or the store: failures become
events in :attr:`ToolResultOutcome.events` and the agent keeps working.
"""

from __future__ import annotations

import base64
import codecs
import dataclasses
import datetime as _dt
import fnmatch
import hashlib
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxpolicy.budget import effective_window
from ctxpolicy.components import Preprocessor, SnapshotRef, SnapshotStore, ToolCall
from ctxpolicy.conversation.jsontext import to_json
from ctxpolicy.events.types import (
    SnapshotFailed,
    SnapshotTooLarge,
    ToolPreprocessFailed,
    ToolRedacted,
)
from ctxpolicy.policy.models import Policy, ToolRule
from ctxpolicy.policy.paths import interpolate_path
from ctxpolicy.policy.scalars import resolve_amount

__all__ = [
    "DEFAULT_RULE",
    "REFERENCE_PREFIX",
    "ToolResultOutcome",
    "ToolResultProcessor",
    "arrived_text",
    "format_reference",
    "interpolate_path",
    "open_store",
    "parse_reference",
    "render_output",
    "select_rule",
    "tool_key",
]

REFERENCE_PREFIX = "[Full detail available at: "
DEFAULT_RULE = ToolRule()
_REF_RE = re.compile(
    r"\[Full detail available at: (?P<path>[^\n\]]*?)(?: \((?P<uri>ctxsnap://[^\s()\]]+)\))?\]"
)

# --------------------------------------------------------------------------- render

_counter = threading.local()


def _count_replace(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):  # pragma: no cover
        raise exc
    _counter.n = getattr(_counter, "n", 0) + (exc.end - exc.start)
    return "\ufffd", exc.end


codecs.register_error("ctxpolicy-count-replace", _count_replace)


def render_output(output: Any) -> tuple[str, dict[str, Any]]:
    """Text of a tool result, and notes about the rendering.

    * ``str`` — as is;
    * ``bytes``/``bytearray``/``memoryview`` — UTF-8, invalid bytes replaced by
      U+FFFD; ``info["replaced_bytes"]`` counts the bytes replaced;
    * ``dict``/``list``/``tuple`` — compact JSON (``ensure_ascii=False``, no indent:
      fewer tokens; ``json_prune``/``table_rows`` parse it back), values JSON cannot
      represent rendered with ``str``; ``info["format"] = "json"``;
    * an exception — ``Error: <Type>: <message>``, ``info["error"] = True``;
    * ``None`` — empty text; anything else — ``str(output)``.
    """
    info: dict[str, Any] = {}
    try:
        if isinstance(output, str):
            return output, info
        if isinstance(output, (bytes, bytearray, memoryview)):
            _counter.n = 0
            text = bytes(output).decode("utf-8", errors="ctxpolicy-count-replace")
            info["replaced_bytes"] = _counter.n
            return text, info
        if isinstance(output, BaseException):
            info["error"] = True
            msg = str(output)
            return (
                f"Error: {type(output).__name__}: {msg}"
                if msg
                else f"Error: {type(output).__name__}"
            ), info
        if output is None:
            return "", info
        if isinstance(output, (dict, list, tuple)):
            info["format"] = "json"
            text, exact = to_json(output)  # any depth; cycles cut (and said so)
            if not exact:
                info["render_error"] = "cyclic structure: repeated parts written as '<cycle>'"
            return text, info
        return str(output), info
    except Exception as exc:  # a __str__ that raises, a cyclic structure, ...
        info["render_error"] = f"{type(exc).__name__}: {exc}"
        try:
            return repr(output), info
        except Exception:
            return f"<unrenderable {type(output).__name__}>", info


# --------------------------------------------------------------------------- arrived


def arrived_text(content: Any) -> str | None:
    """The text of a tool message's content as it arrives in ``prepare``: a string,
    or the parts of a list that holds only text parts (``{"type": "text", "text": …}``)
    joined by newlines; None for anything else (an image, a document: the tool rule
    does not apply to it)."""
    if type(content) is str:
        return content
    if not isinstance(content, list) or not content:
        return None
    texts: list[str] = []
    for part in content:
        if not isinstance(part, Mapping) or part.get("type") != "text":
            return None
        text = part.get("text")
        if type(text) is not str:
            return None
        texts.append(text)
    return "\n".join(texts)


def tool_key(call_id: str, text: str) -> str:
    """The state key of a tool result: a digest of its call id (``""`` when it has
    none, or for a text ``add_tool_result`` returned) and its text. Keyed by both, a
    call id reused for another result and a result edited by the agent are new results;
    keyed by the text alone, a result whose id a framework renamed is still known."""
    h = hashlib.blake2b(digest_size=16)
    cid = call_id.encode("utf-8", "surrogatepass")
    h.update(b"%d:" % len(cid))
    h.update(cid)
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


# --------------------------------------------------------------------------- rules


def select_rule(tools: Mapping[str, ToolRule], tool_name: str) -> tuple[str, ToolRule] | None:
    """The rule for a tool and its key: a rule whose key or one of its ``aliases`` is
    the tool's name wins (the first in declaration order; compared without regard to
    case when the rule has ``ignore_case``); else the first rule with a glob (key or
    alias) that matches (``fnmatchcase``), in declaration order; ``"*"`` only after
    every other pattern."""
    if tool_name in tools:
        return tool_name, tools[tool_name]
    folded = tool_name.casefold()
    for key, rule in tools.items():
        if rule.ignore_case and key.casefold() == folded:
            return key, rule
        for alias in rule.aliases:
            if alias == tool_name or (rule.ignore_case and alias.casefold() == folded):
                return key, rule
    star: tuple[str, ToolRule] | None = None
    for key, rule in tools.items():
        name = folded if rule.ignore_case else tool_name
        for pattern in (key, *rule.aliases):
            if pattern == "*":
                if star is None:
                    star = (key, rule)
                continue
            if fnmatch.fnmatchcase(name, pattern.casefold() if rule.ignore_case else pattern):
                return key, rule
    return star


# --------------------------------------------------------------------------- refs


def format_reference(ref: SnapshotRef, form: str = "uri") -> str:
    """The reference line of a snapshot.

    * ``"uri"`` (default): ``[Full detail available at: ctxsnap://<folder>/<name>]``.
      Portable: the same bytes on every worker and machine whatever the store's root
      (its home directory never reaches the provider), and resolved by ``ctx_recall``
      and ``Session.recall``;
    * ``"path"``: design A's ``[Full detail available at: <path> (<uri>)]``, for an
      agent that opens snapshots with its own file tools. The path is where *this*
      machine keeps the store: two workers with different roots send different bytes
      (no shared prompt cache, a resume elsewhere is not byte-identical).

    A store without paths (``ref.path`` empty) always gets the URI form.
    """
    if form != "path" or not ref.path:
        return f"{REFERENCE_PREFIX}{ref.uri}]"
    path = ref.path.replace("\n", " ").replace("]", "%5D")
    return f"{REFERENCE_PREFIX}{path} ({ref.uri})]"


def parse_reference(text: str) -> list[str]:
    """References in a context text: the ``ctxsnap://`` URI when present, else the
    path (design A's plain ``[Full detail available at: <path>]``), in order, unique."""
    out: list[str] = []
    if not isinstance(text, str):
        return out
    for m in _REF_RE.finditer(text):
        ref = m.group("uri") or m.group("path").strip()
        if ref and ref not in out:
            out.append(ref)
    return out


# --------------------------------------------------------------------------- store

_RETENTION_FIELDS = ("max_total_mb", "max_age_days")


def open_store(
    policy: Policy, registry: Any = None, *, env: Mapping[str, str] | None = None
) -> SnapshotStore | None:
    """The snapshot store of a policy (``None`` when ``snapshots.enabled`` is false).

    ``snapshots.path`` is interpolated *here*, with ``env`` (the ``env=`` given to
    ``Session``; ``os.environ`` when None): the loader keeps it as written. The
    policy's ``snapshots.max_total_mb`` / ``max_age_days``, when set, override the
    store's own retention options of the same name; ``reference_form: path`` turns
    a ``layout: auto`` (the ``local`` store's default) into ``layout: files`` (a path
    reference names a file of its own).
    """
    snaps = policy.snapshots
    if not snaps.enabled:
        return None
    if registry is None:
        from ctxpolicy.plugins import get_registry

        registry = get_registry()
    retention = {k: v for k in _RETENTION_FIELDS if (v := getattr(snaps, k, None)) is not None}
    if snaps.reference_form == "path" and snaps.options.get("layout", "auto") == "auto":
        # a path reference must name a file of its own: the local store's `files` layout
        retention["layout"] = "files"
    store = registry.create(
        "snapshot_store",
        snaps.store,
        snaps.options,
        if_known=retention,
        root=interpolate_path(snaps.path, env),
    )
    assert isinstance(store, SnapshotStore)
    return store


# --------------------------------------------------------------------------- processor


@dataclass
class ToolResultOutcome:
    """What :meth:`ToolResultProcessor.process` produced.

    ``text`` goes into the context (reference line included); ``raw_text`` is the
    rendered original (what the snapshot's ``observation`` holds, unless truncated
    or redacted there); ``events`` are dicts with a ``type`` for the engine to emit
    (``tool.preprocess_failed``, ``snapshot.failed``, ``snapshot.too_large``,
    ``tool.redacted``, ``tool.render_notes``).
    """

    text: str
    raw_text: str
    ref: SnapshotRef | None
    preprocessor: str | None
    chars_before: int
    chars_after: int
    events: list[dict[str, Any]] = field(default_factory=list)
    rule: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    redactions: dict[str, int] = field(default_factory=dict)
    #: the caller's ``meta`` as the snapshot got it (for :meth:`ToolResultProcessor.restep`)
    snapshot_meta: dict[str, Any] | None = field(default=None, repr=False)


_DOC_FIELDS = ("phase", "action_intention", "action_reason", "thought")
#: Most tool names whose rule a processor remembers.
_MAX_RULES = 1024

#: The last second :func:`utc_timestamp` formatted, and its text (one tuple: threads
#: swap it whole).
_second: tuple[int, str] = (-1, "")
_UTC = _dt.UTC


def _unsized(options: Mapping[str, Any]) -> bool:
    """Whether ``head_tail`` options take the rule's ``max_tokens`` (a step's own
    ``max_tokens`` wins; its ``max_chars`` is then ignored, as with its own)."""
    return options.get("max_tokens") is None


def utc_timestamp() -> str:
    """``datetime.now(UTC).isoformat(timespec="milliseconds")``, the same text
    (``2026-12-06T02:30:00.123+00:00``) in a tenth of the time: the part up to the
    second is formatted once a second. ``datetime.now`` takes the system clock and
    rounds it down to the microsecond, whose millisecond is this one's."""
    global _second
    sec, ns = divmod(time.time_ns(), 1_000_000_000)
    last, text = _second
    if sec != last:
        text = _dt.datetime.fromtimestamp(sec, _UTC).isoformat(timespec="seconds")[:19]
        _second = (sec, text)
    return f"{text}.{ns // 1_000_000:03d}+00:00"


class ToolResultProcessor:
    """Preprocess + snapshot + reference, for one policy.

    Preprocessors are instantiated once from the registry with options validated
    by their own model (``cls.Options.model_validate(rule.options)``); an unknown
    preprocessor or invalid options raise ``ValueError`` here, at construction —
    never a silent fallback at run time.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        store: SnapshotStore | None,
        registry: Any = None,
        redact_secrets: bool = True,
    ) -> None:
        if registry is None:
            from ctxpolicy.plugins import get_registry

            registry = get_registry()
        self.policy = policy
        self.store = store
        self.registry = registry
        self.max_snapshot_bytes = policy.snapshots.max_snapshot_bytes
        self.reference_form = policy.snapshots.reference_form
        self.redact_secrets = redact_secrets
        self._pre: dict[str, list[Preprocessor]] = {}
        for pattern, rule in policy.tools.items():
            self._pre[pattern] = self._make(rule, where=f"tools.{pattern}")
        self._fallback = self._make(DEFAULT_RULE, where="fallback head_tail")[0]
        self._rules: dict[str, tuple[str | None, ToolRule, list[Preprocessor]]] = {}
        from ctxpolicy.conversation.redact import default_redactor

        self._redactor = default_redactor()

    def _make(self, rule: ToolRule, *, where: str) -> list[Preprocessor]:
        """The preprocessors of a rule, in the order they run (one unless it chains).

        A rule's ``max_tokens`` (resolved against the policy's window) becomes the
        ``max_tokens`` of each ``head_tail`` step that has none, or else a last
        ``head_tail`` step bounding what the chain returns."""
        chain = rule.steps()
        window = effective_window(self.policy)
        bound: int | None = None
        if rule.max_tokens is not None:
            bound = resolve_amount(rule.max_tokens, window)
        out: list[Preprocessor] = []
        bounded = False
        for i, (name, options) in enumerate(chain):
            at = where if len(chain) == 1 else f"{where}.preprocess[{i}]"
            if bound is not None and name == "head_tail" and _unsized(options):
                options = {**options, "max_tokens": bound}
                bounded = i == len(chain) - 1
            # a preprocessor with a ``window`` option sizes shares of it by the policy's
            pre = self.registry.create(
                "preprocessor",
                name,
                options,
                where=at,
                if_known=None if options.get("window") else {"window": window},
            )
            assert isinstance(pre, Preprocessor)
            out.append(pre)
        if bound is not None and not bounded:
            pre = self.registry.create(
                "preprocessor", "head_tail", {"max_tokens": bound}, where=f"{where}.max_tokens"
            )
            assert isinstance(pre, Preprocessor)
            out.append(pre)
        return out

    def rule_for(self, tool_name: str) -> tuple[str | None, ToolRule, list[Preprocessor]]:
        """The rule of a tool, its pattern and preprocessors (remembered per tool name:
        the preprocessors, made at construction, are those of the policy's rules)."""
        known = self._rules.get(tool_name)
        if known is not None:
            return known
        found = select_rule(self.policy.tools, tool_name)
        if found is None:
            known = (None, DEFAULT_RULE, [self._fallback])
        else:
            known = (found[0], found[1], self._pre[found[0]])
        if len(self._rules) >= _MAX_RULES:
            self._rules.clear()
        self._rules[tool_name] = known
        return known

    def process(
        self,
        call: ToolCall,
        output: Any,
        *,
        conv_id: str,
        step: int,
        meta: Mapping[str, Any] | None = None,
    ) -> ToolResultOutcome:
        events: list[dict[str, Any]] = []
        tool = call.name if isinstance(call.name, str) else str(call.name)
        raw, info = render_output(output)
        pattern, rule, pre = self.rule_for(tool)

        # 2 snapshot (the original, before any redaction unless the store asks for it)
        ref: SnapshotRef | None = None
        if self.store is not None and rule.snapshot:
            if info.get("replaced_bytes") and len(output) <= self.max_snapshot_bytes:
                # not UTF-8: the text has U+FFFD where those bytes were; keep them all
                original = base64.b64encode(bytes(output)).decode("ascii")
                meta = {**(meta or {}), "original_base64": original}
            ref = self._snapshot(
                call, raw, info, conv_id=conv_id, step=step, meta=meta, events=events
            )

        # 3 redact in the context text
        text = raw
        redactions: dict[str, int] = {}
        if self.redact_secrets:
            text, redactions = self._redactor.redact(text)
            if redactions:
                events.append(ToolRedacted(tool=tool, counts=dict(redactions)).as_dict())

        # 4 preprocess (a chain: each on the output of the one before)
        used: str | None = rule.preprocessor_name
        out = text
        for one in pre:
            try:
                out = one.process(out, call)
                if not isinstance(out, str):
                    raise TypeError(f"preprocessor returned {type(out).__name__}, not str")
            except Exception as exc:
                events.append(
                    ToolPreprocessFailed(
                        tool=tool,
                        preprocessor=one.name,
                        plugin=self.registry.plugin_of("preprocessor", one.name),
                        error=f"{type(exc).__name__}: {exc}",
                    ).as_dict()
                )
                used = self._fallback.name
                try:
                    out = self._fallback.process(text, call)
                except Exception:  # pragma: no cover - head_tail does not raise
                    out = text[:3000]
                break

        # 5 reference (the engine passes refs of untouched results to layers via unit meta)
        shortened = out != raw
        if ref is not None and (shortened or self.policy.snapshots.reference == "always"):
            line = format_reference(ref, self.reference_form)
            out = f"{out}\n{line}" if out else line
        return ToolResultOutcome(
            text=out,
            raw_text=raw,
            ref=ref,
            preprocessor=used,
            chars_before=len(raw),
            chars_after=len(out),
            events=events,
            rule=pattern,
            info=info,
            redactions=redactions,
            snapshot_meta=dict(meta) if meta is not None else None,
        )

    def restep(
        self, outcome: ToolResultOutcome, call: ToolCall, *, conv_id: str, step: int
    ) -> ToolResultOutcome:
        """``outcome`` with its snapshot written again at ``step`` (a call redone after a
        lost state race, whose first attempt took its step from a stale counter): the
        sequential run's name, and the reference line in the text renamed to match.
        The text is not preprocessed again. When the new write fails the first
        snapshot (it holds the same observation) stays the reference, with the event."""
        if outcome.ref is None or self.store is None:
            return outcome
        events: list[dict[str, Any]] = []
        ref = self._snapshot(
            call,
            outcome.raw_text,
            outcome.info,
            conv_id=conv_id,
            step=step,
            meta=outcome.snapshot_meta,
            events=events,
        )
        if ref is None or ref.uri == outcome.ref.uri:
            return dataclasses.replace(outcome, events=events)
        text = outcome.text
        old_line = format_reference(outcome.ref, self.reference_form)
        if text.endswith(old_line):
            text = text[: len(text) - len(old_line)] + format_reference(ref, self.reference_form)
        return dataclasses.replace(
            outcome, text=text, ref=ref, chars_after=len(text), events=events
        )

    def _snapshot(
        self,
        call: ToolCall,
        raw: str,
        info: Mapping[str, Any],
        *,
        conv_id: str,
        step: int,
        meta: Mapping[str, Any] | None,
        events: list[dict[str, Any]],
    ) -> SnapshotRef | None:
        assert self.store is not None
        observation = raw
        if getattr(self.store.options, "redact", False):
            observation = self._redactor.redact(observation)[0]
        extra: dict[str, Any] = {}
        # at most 4 UTF-8 bytes a character: a text short enough is not encoded to check
        fits = len(observation) * 4 <= self.max_snapshot_bytes
        encoded = b"" if fits else observation.encode("utf-8", "surrogatepass")
        if not fits and len(encoded) > self.max_snapshot_bytes:
            cut = encoded[: self.max_snapshot_bytes].decode("utf-8", "ignore")
            extra = {
                "truncated": True,
                "observation_chars": len(observation),
                "observation_bytes": len(encoded),
            }
            observation = cut
            events.append(
                SnapshotTooLarge(
                    tool=call.name,
                    bytes=len(encoded),
                    max_snapshot_bytes=self.max_snapshot_bytes,
                    kept_bytes=len(cut.encode("utf-8", "surrogatepass")),
                ).as_dict()
            )
        if meta:
            meta = dict(meta)
            phase = meta.pop("phase", None)
            intention = meta.pop("action_intention", None)
            reason = meta.pop("action_reason", None)
            thought = meta.pop("thought", None)
        else:
            meta = phase = intention = reason = thought = None
        doc: dict[str, Any] = {
            "step": step,
            "action": call.name,
            "phase": phase,
            "action_intention": intention,
            "action_reason": reason,
            "thought": thought,
            "action_input": call.arguments,
            "observation": observation,
            "timestamp": utc_timestamp(),
            "conv_id": conv_id,
        }
        if call.id is not None:
            doc["tool_call_id"] = call.id
        if info:
            for k, v in info.items():
                doc[k] = v
        if extra:
            doc.update(extra)
        if meta:
            for k, v in meta.items():
                if k not in doc:
                    doc[k] = v
        try:
            return self.store.write(conv_id, step, call.name, doc)
        except Exception as exc:
            err = getattr(exc, "errno", None)
            events.append(
                SnapshotFailed(
                    tool=call.name,
                    store=self.store.name,
                    root=self.store.root,
                    errno=err,
                    error=f"{type(exc).__name__}: {exc}",
                ).as_dict()
            )
            return None
