"""Recording a real conversation as a trace ``ctxpolicy simulate`` replays.

``Session(policy, conv_id=..., record=PATH)`` appends every message the agent passes
to ``prepare`` to ``PATH``, once, as one OpenAI Chat message per line (the JSONL format
of :mod:`ctxpolicy.sim.importers`). A tool message answering a call that went through
``add_tool_result`` is written with the **raw** output the tool returned (as
``add_tool_result`` rendered it, before redaction, preprocessing and the reference
line), so a replay of the file preprocesses it again exactly as the live run did and
simulates to the numbers of the run itself. Messages of ctxpolicy's own making that an
agent feeds back (the progress ledger, a handover) are never written.

``PATH`` is a file, or a directory (an existing one, or a path ending in ``/``) in which
each conversation gets ``<conversation folder>.jsonl`` (the injective, path-safe name of
:func:`ctxpolicy.snapshots.names.conv_folder`): adapters that serve many conversations
record each to its own file. Two conversations of one process recording to one file is
an error, never an interleaved trace.

The file is append-only (``O_APPEND``; each call is one write), created with mode
0600, never followed through a symbolic link, and opened only while writing. The
recorder keeps no message text: a 16-byte digest per message recorded (which messages
are new on the next call) and the raw outputs of tool results not yet seen in a
``prepare`` (at most :data:`MAX_PENDING` results and :data:`MAX_PENDING_CHARS`
characters; beyond that the oldest are written as passed). Reopening an existing file
(a resumed conversation) reads its digests back in one streaming pass, so nothing is
written twice.

The model's last answer is not passed to any ``prepare``; ``session.recorder.record(
messages)`` writes what a final conversation adds (the same call ``prepare`` makes).
A write that fails (disk full, permissions) emits ``record.failed`` once and stops
the recording; the agent is not interrupted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxpolicy.components import ToolCall
from ctxpolicy.conversation.messages import result_id
from ctxpolicy.engine.own import own_kind
from ctxpolicy.events.types import RecordFailed

__all__ = ["MAX_PENDING", "MAX_PENDING_CHARS", "RecordError", "TraceRecorder", "record_path"]

#: Raw tool outputs kept until their tool message is passed to ``prepare``.
MAX_PENDING = 4096
#: ... and their characters at most.
MAX_PENDING_CHARS = 64 * 1024 * 1024

Message = dict[str, Any]
Emit = Callable[..., Any]

# characters str.splitlines() breaks on that json.dumps(ensure_ascii=False) leaves as is
_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_OPEN: dict[str, tuple[str, weakref.ref[TraceRecorder]]] = {}
_OPEN_LOCK = threading.Lock()


class RecordError(ValueError):
    """``record=`` names a file that cannot be a recording (``str()`` says why)."""


def record_path(record: str | os.PathLike[str], conv_id: str) -> Path:
    """The file conversation ``conv_id`` records to under ``record`` (a file or a
    directory, see the module docstring)."""
    raw = os.fspath(record)
    if not isinstance(raw, str) or not raw:
        raise RecordError(f"record= must be a file or directory path, not {record!r}")
    p = Path(raw).expanduser()
    if raw.endswith(("/", os.sep)) or p.is_dir():
        from ctxpolicy.snapshots.names import conv_folder

        if not p.is_dir():
            try:
                p.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                raise RecordError(
                    f"record={raw}: cannot create the directory: {exc.strerror or exc}"
                ) from None
        return p / f"{conv_folder(conv_id)}.jsonl"
    if not p.parent.is_dir():
        raise RecordError(f"record={raw}: the directory {str(p.parent)!r} does not exist")
    return p


def _line(m: Mapping[str, Any]) -> str:
    """One message as one JSONL line (no character a line reader splits on)."""
    try:
        text = json.dumps(m, ensure_ascii=False, default=str)
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escaped, read back as the same string
        text = json.dumps(m, ensure_ascii=True, default=str)
    if any(ch in text for ch in _LINE_BREAKS):
        for ch, esc in _LINE_BREAKS.items():
            text = text.replace(ch, esc)  # only inside strings: JSON has no other place
    return text


def _digest(m: Mapping[str, Any]) -> bytes:
    """What identifies a message between calls: a tool result by its call id (its text
    is ours, preprocessed, in what the agent passes; raw in the file), else its JSON."""
    if m.get("role") == "tool" and result_id(m):
        key = "tool\0" + result_id(m)
    else:
        try:
            key = json.dumps(m, sort_keys=True, ensure_ascii=True, default=str)
        except (TypeError, ValueError, RecursionError):
            key = repr(sorted(map(str, m.items())))[:100_000]
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class TraceRecorder:
    """Appends one conversation's new messages to a trace file (module docstring)."""

    def __init__(self, path: Path, conv_id: str, emit: Emit | None = None) -> None:
        self.path = path
        self.conv_id = conv_id
        self._emit = emit
        self._lock = threading.Lock()
        self._known: set[bytes] = set()
        self._n = 0  # messages of the previous call accounted for
        self._last_in: bytes | None = None  # digest of the previous call's last message
        self._last_out: bytes | None = None  # ... and of the last one it returned
        self._resume: bytes | None = None  # the file's last message, until passed again
        self._pending: OrderedDict[str, str] = OrderedDict()  # call id -> raw output
        self._pending_chars = 0
        self.failed: str | None = None
        self.written = 0
        key = str(path.absolute())
        with _OPEN_LOCK:
            held = _OPEN.get(key)
            other = held[1]() if held is not None else None
            if other is not None and held is not None and held[0] != conv_id:
                raise RecordError(
                    f"record={path}: conversation {held[0]!r} is already recording to this "
                    f"file; pass a directory (record='traces/') to give each conversation "
                    "its own file"
                )
            self._create()
            self._load()
            _OPEN[key] = (conv_id, weakref.ref(self))

    @classmethod
    def open(
        cls, record: str | os.PathLike[str], conv_id: str, emit: Emit | None = None
    ) -> TraceRecorder:
        """The recorder of ``conv_id`` under ``record`` (file or directory)."""
        return cls(record_path(record, conv_id), conv_id, emit)

    # ------------------------------------------------------------------ the file
    _FLAGS = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)

    def _create(self) -> None:
        """Create the file (mode 0600) or check that an existing one can be appended to."""
        try:
            fd = os.open(self.path, self._FLAGS | os.O_CREAT | os.O_NONBLOCK, 0o600)
        except OSError as exc:
            why = "it is a symbolic link" if self.path.is_symlink() else exc.strerror or exc
            raise RecordError(f"record={self.path}: cannot open for appending: {why}") from None
        try:
            if not os.path.isfile(self.path):
                raise RecordError(f"record={self.path}: not a regular file")
            with contextlib.suppress(OSError):  # not ours: it stays as its owner made it
                os.fchmod(fd, 0o600)
        finally:
            os.close(fd)

    def _load(self) -> None:
        """Digests of what the file already holds (a resumed conversation)."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        if not size:
            return
        last: bytes | None = None
        count = 0
        with self.path.open("rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    m = json.loads(raw)
                except (ValueError, RecursionError):
                    raise RecordError(
                        f"{self.path}:{lineno}: not a trace this recording can continue "
                        "(a line is not JSON); choose another record= path"
                    ) from None
                if not isinstance(m, dict) or "role" not in m:
                    raise RecordError(
                        f"{self.path}:{lineno}: not a trace this recording can continue "
                        "(a line is not a chat message); choose another record= path"
                    )
                last = _digest(m)
                self._known.add(last)
                count += 1
        self._resume = last
        self.written = count

    def _write(self, lines: Sequence[str]) -> None:
        if not lines or self.failed is not None:
            return
        data = ("\n".join(lines) + "\n").encode("utf-8")
        try:
            fd = os.open(self.path, self._FLAGS)
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            finally:
                os.close(fd)
        except OSError as exc:
            self.failed = f"{type(exc).__name__}: {exc.strerror or exc}"
            if self._emit is not None:
                self._emit(RecordFailed(path=str(self.path), error=self.failed))
            return
        self.written += len(lines)

    # ------------------------------------------------------------------ the calls
    def tool_result(self, call: ToolCall, output: Any) -> None:
        """Keep the raw output of ``call`` until its tool message is recorded."""
        if call.id is None or self.failed is not None:
            return
        from ctxpolicy.engine.tool_results import render_output

        raw = render_output(output)[0]
        with self._lock:
            cid = str(call.id)
            old = self._pending.pop(cid, None)
            if old is not None:
                self._pending_chars -= len(old)
            self._pending[cid] = raw
            self._pending_chars += len(raw)
            while self._pending and (
                len(self._pending) > MAX_PENDING or self._pending_chars > MAX_PENDING_CHARS
            ):
                _, dropped = self._pending.popitem(last=False)
                self._pending_chars -= len(dropped)

    def record(
        self,
        messages: Sequence[Mapping[str, Any]],
        sent: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """Append the messages of ``messages`` not recorded yet; ``sent`` is what
        ``prepare`` returned for them (an agent may keep that list and pass it back).
        Returns how many messages were written."""
        if self.failed is not None:
            return 0
        with self._lock:
            new = self._new(messages)
            lines: list[str] = []
            for m in new:
                if not isinstance(m, Mapping) or own_kind(m) is not None:
                    continue
                d = _digest(m)
                self._known.add(d)
                if m.get("role") == "tool":
                    raw = self._pending.pop(result_id(m), None)
                    if raw is not None:
                        self._pending_chars -= len(raw)
                        m = {**m, "content": raw}
                lines.append(_line(m))
            n = len(messages)
            self._n = n
            if n:
                last = messages[-1]
                self._last_in = _digest(last) if isinstance(last, Mapping) else None
            if sent:
                self._last_out = _digest(sent[-1])
            self._write(lines)
            return len(lines)

    def _new(self, messages: Sequence[Mapping[str, Any]]) -> Sequence[Any]:
        """The messages after those recorded: a growing conversation's new tail; after
        a rewrite (an agent that keeps the prepared list), those after the previous
        call's last message; else every message whose digest is unknown. A scan from
        the end hashes only the messages it passes (the new ones, in the common case)."""
        if self._resume is not None:
            # a resumed recording: what follows the file's last message, once the agent
            # passes it; before that only messages the file does not hold
            for j in range(len(messages) - 1, -1, -1):
                m = messages[j]
                if isinstance(m, Mapping) and _digest(m) == self._resume:
                    self._resume = None
                    return messages[j + 1 :]
            return [m for m in messages if isinstance(m, Mapping) and _digest(m) not in self._known]
        n = self._n
        if n == 0 and self._last_in is None:
            return messages
        if (
            0 < n <= len(messages)
            and isinstance(messages[n - 1], Mapping)
            and _digest(messages[n - 1]) == self._last_in
        ):
            return messages[n:]
        marks = {d for d in (self._last_in, self._last_out) if d is not None}
        for j in range(len(messages) - 1, -1, -1):
            m = messages[j]
            if isinstance(m, Mapping) and _digest(m) in marks:
                return messages[j + 1 :]
        return [m for m in messages if isinstance(m, Mapping) and _digest(m) not in self._known]
