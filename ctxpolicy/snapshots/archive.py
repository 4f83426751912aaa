"""The history archive: every message compaction removed, appended, never rewritten.

Layout in the conversation's folder of the snapshot store:

* ``history_000001.jsonl``, ``history_000002.jsonl``, … — segments; each archived
  message is one line, its compact JSON (the message exactly as it was, lone
  surrogates as ``\\udcxx`` escapes; anything JSON cannot hold as JSON text of the
  iterative encoder, :mod:`ctxpolicy.conversation.jsontext`). A segment holds at most
  ``max_bytes`` (the policy's ``snapshots.max_snapshot_bytes``); the record that
  would pass the limit starts the next segment (O(1) naming: the number after the
  current one).
* ``history.idx`` — 16 bytes per archived message: segment number, offset, length
  and step (little-endian ``uint32`` each). Message ``n`` (1-based) is at index
  offset ``16·(n-1)``: recalling it reads 16 bytes plus the message (O(its size)).

One :meth:`HistoryArchive.append` per compaction writes the record's lines (one
append per segment touched), then its index entries. Bytes on disk per message:
its JSON + 1 newline + 16 index bytes, so a 1,000-step run stays within 1.2× the
bytes of the messages archived (measured by benchmarks/bench_store.py).

**State lives in the store only.** A new process opens the archive by reading the
size of ``history.idx`` and its last entry; it can append and recall at once. The
data is written before the index, so a crash leaves at most unindexed bytes at the
end of a segment (never an index entry without its data). A torn index entry (the
index size not a multiple of 16) is padded with zeros, and that message then
reads as damaged instead of misaligning every later one.

**At the size limit**: a message whose JSON alone exceeds ``max_bytes`` is stored
cut at that size, as ``{"ctxpolicy_truncated": {...}, "role": …, "prefix": "<the
first bytes of its JSON>"}``: the loss is explicit in the archive, and
:attr:`HistoryArchive.last_truncated` lists it for the caller's event.

**Stores without append** (a third-party store that does not override
:meth:`SnapshotStore.append`): each record is written with ``store.write`` as one
document (``action`` ``history``, the messages under ``"messages"``): still
append-only and linear in bytes; recall and search read it like any snapshot.

References: ``ctxsnap://<folder>/history`` (the whole archive, stable for the
ledger), ``…/history#<n>`` and ``…/history#<a>-<b>`` (messages, 1-based).
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ctxpolicy.components import SnapshotStore
from ctxpolicy.conversation import content_text
from ctxpolicy.conversation.jsontext import dumps_bytes
from ctxpolicy.snapshots.names import (
    INDEX_NAME,
    HistoryRef,
    SnapshotError,
    history_uri,
    segment_name,
)

__all__ = ["HistoryArchive", "render_transcript"]

_ENTRY = struct.Struct("<IIII")  # segment, offset, length (incl. newline), step
_MAX_U32 = 2**32 - 1
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
#: Index entries read at once by :meth:`HistoryArchive.iter_messages` (16 KiB).
INDEX_CHUNK = 1024
#: Most bytes of a segment read at once for consecutive messages (one longer
#: message is read alone).
READ_CHUNK = 256 * 1024


def _supports_append(store: SnapshotStore) -> bool:
    return type(store).append is not SnapshotStore.append


def render_transcript(messages: Sequence[tuple[int, Any, Any]]) -> str:
    """Readable text of archived ``(n, step, message)`` triples (searchable with grep)."""
    out: list[str] = []
    for n, step, m in messages:
        if not isinstance(m, Mapping):
            out.append(f"#{n} (step {step}) ?: {m!r}")
            continue
        head = f"#{n} (step {step}) {m.get('role', '?')}"
        if m.get("role") == "tool" and m.get("tool_call_id"):
            head += f" [{m.get('tool_call_id')}]"
        if "ctxpolicy_json_text" in m:
            out.append(f"{head}: {m['ctxpolicy_json_text']}")
            continue
        if "ctxpolicy_truncated" in m:
            info = m["ctxpolicy_truncated"]
            out.append(f"{head}: [truncated in the archive: {info}]\n{m.get('prefix', '')}")
            continue
        lines = [f"{head}: {content_text(m.get('content'))}"]
        calls = m.get("tool_calls")
        for tc in calls if isinstance(calls, list) else ():
            fn = tc.get("function") if isinstance(tc, Mapping) else None
            fn = fn if isinstance(fn, Mapping) else {}
            tc_id = tc.get("id", "") if isinstance(tc, Mapping) else ""
            lines.append(f"  → call {fn.get('name', '')}({fn.get('arguments', '')}) [{tc_id}]")
        out.append("\n".join(lines))
    return "\n\n".join(out)


class HistoryArchive:
    """Append-only archive of one conversation's compacted messages.

    ``HistoryArchive(store, conv_id, max_bytes=policy.snapshots.max_snapshot_bytes)``;
    :meth:`append` once per compaction. Thread-safe within a process; one writer
    per conversation across processes on the ``local`` store is serialised by the
    store's file lock on each append, but the segment/index pair assumes a single
    writing session per conversation (the engine's model).
    """

    def __init__(
        self, store: SnapshotStore, conv_id: str, *, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self._init(store, store.folder(conv_id), max_bytes, conv_id)

    @classmethod
    def from_folder(
        cls, store: SnapshotStore, folder: str, *, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> HistoryArchive:
        """The archive of a folder (what a ``ctxsnap://<folder>/history`` ref names)."""
        self = cls.__new__(cls)
        self._init(store, folder, max_bytes, None)
        return self

    def _init(self, store: SnapshotStore, folder: str, max_bytes: int, conv_id: str | None) -> None:
        self.store = store
        self.folder = folder
        self.conv_id = conv_id
        self.max_bytes = max(64, min(int(max_bytes), _MAX_U32))
        self.native = _supports_append(store)
        self.last_truncated: list[dict[str, Any]] = []
        self.last_range: tuple[int, int] | None = None
        self._last_doc_ref: str | None = None
        self._lock = threading.Lock()
        self._count: int | None = None
        self._segment = 1
        self._seg_size = 0

    # ------------------------------------------------------------------ state
    @property
    def ref(self) -> str:
        """The stable reference of the whole archive (what the ledger shows)."""
        return history_uri(self.folder)

    @property
    def last_ref(self) -> str | None:
        """The reference of the messages the last :meth:`append` wrote
        (``…/history#a-b``; the document's reference on a store without append)."""
        if self._last_doc_ref is not None:
            return self._last_doc_ref
        if self.last_range is None:
            return None
        return history_uri(self.folder, *self.last_range)

    def _load(self) -> None:
        """Recover count, current segment and its size from the store alone."""
        if self._count is not None:
            return
        size = self.store.size(self.folder, INDEX_NAME)
        if size % _ENTRY.size:  # torn entry from a crash: pad, it reads as damaged
            self.store.append(self.folder, INDEX_NAME, b"\0" * (_ENTRY.size - size % _ENTRY.size))
            size += _ENTRY.size - size % _ENTRY.size
        self._count = size // _ENTRY.size
        seg = 1
        for i in range(self._count - 1, max(self._count - 8, 0) - 1, -1):
            entry = self._entry(i + 1)
            if entry is not None:
                seg = entry[0]
                break
        self._segment = seg
        self._seg_size = self.store.size(self.folder, segment_name(seg))

    def __len__(self) -> int:
        if not self.native:
            return 0
        with self._lock:
            self._load()
            assert self._count is not None
            return self._count

    # ------------------------------------------------------------------ write
    def _line(self, m: Any) -> bytes:
        data = dumps_bytes(m) + b"\n"
        if len(data) <= self.max_bytes:
            return data
        role = m.get("role") if isinstance(m, Mapping) else None
        prefix = data[: max(self.max_bytes - 256, 0)].decode("utf-8", "ignore")
        while True:
            info = {"bytes": len(data) - 1, "kept_bytes": len(prefix.encode("utf-8"))}
            stub = dumps_bytes({"ctxpolicy_truncated": info, "role": role, "prefix": prefix})
            if len(stub) < self.max_bytes or not prefix:
                self.last_truncated.append({"role": role, **info})
                return stub + b"\n"
            prefix = prefix[: len(prefix) // 2]

    def append(self, messages: Sequence[Mapping[str, Any]], *, step: int) -> str:
        """Archive one compaction's messages; return :attr:`ref`.

        Raises (``SnapshotError``/``OSError``) when anything could not be written,
        so the caller can refuse to drop what was not archived. An empty
        ``messages`` writes nothing.
        """
        self.last_truncated = []
        self.last_range = None
        self._last_doc_ref = None
        msgs = list(messages)
        if not msgs:
            return self.ref
        st = min(max(int(step), 0), _MAX_U32)
        if not self.native:
            return self._append_document(msgs, st)
        with self._lock:
            self._load()
            assert self._count is not None
            lines = [self._line(m) for m in msgs]
            entries: list[bytes] = []
            batch: list[bytes] = []
            seg, seg_size = self._segment, self._seg_size
            start_off = seg_size

            def flush() -> None:
                nonlocal batch
                if not batch:
                    return
                data = b"".join(batch)
                off = self.store.append(self.folder, segment_name(seg), data)
                if off != start_off:  # someone else wrote: re-base this batch's entries
                    delta = off - start_off
                    for j in range(len(entries) - len(batch), len(entries)):
                        s_, o_, ln_, stp = _ENTRY.unpack(entries[j])
                        entries[j] = _ENTRY.pack(s_, o_ + delta, ln_, stp)
                batch = []

            for line in lines:
                if seg_size and seg_size + len(line) > self.max_bytes:
                    flush()
                    seg, seg_size = seg + 1, self.store.size(self.folder, segment_name(seg + 1))
                    start_off = seg_size
                entries.append(_ENTRY.pack(seg, seg_size, len(line), st))
                batch.append(line)
                seg_size += len(line)
            flush()
            self.store.append(self.folder, INDEX_NAME, b"".join(entries))
            first = self._count + 1
            self._count += len(entries)
            self._segment, self._seg_size = seg, self.store.size(self.folder, segment_name(seg))
            self.last_range = (first, self._count)
        return self.ref

    def holds(self, first: int, messages: Sequence[Mapping[str, Any]], *, step: int) -> bool:
        """Whether messages ``first``… of the archive are exactly ``messages`` archived
        at ``step``, byte for byte: what a call redone after a crash or a lost state
        race finds (its first attempt's append, never committed). When they are,
        :attr:`last_range` names them as :meth:`append` would have. O(their size),
        read like :meth:`iter_messages` (the index in chunks, a segment's consecutive
        messages with one read)."""
        msgs = list(messages)
        if not self.native or first < 1 or not msgs:
            return False
        st = min(max(int(step), 0), _MAX_U32)
        last = first + len(msgs) - 1
        with self._lock:
            self._load()
            assert self._count is not None
            if last > self._count:
                return False
            self.last_truncated = []
            checked = 0
            for entries in self._index_chunks(first, last):
                for group in _read_groups(entries):
                    lines = [self._line(msgs[e[0] - first]) for e in group]
                    if any(
                        s_ == 0 or ln == 0 or ln != len(line) or at != st
                        for (_, s_, _, ln, at), line in zip(group, lines, strict=True)
                    ):
                        return False
                    blob, lo = self._group_blob(group)
                    if any(
                        blob[off - lo : off - lo + ln] != line
                        for (_, _, off, ln, _), line in zip(group, lines, strict=True)
                    ):
                        return False
                    checked += len(group)
            if checked != len(msgs):
                return False
        self.last_range = (first, last)
        self._last_doc_ref = None
        return True

    def _append_document(self, msgs: list[Mapping[str, Any]], step: int) -> str:
        doc = {"step": step, "action": "history", "phase": "compaction", "messages": msgs}
        ref = self.store.write(self.conv_id or self.folder, step, "history", doc)
        self._last_doc_ref = ref.uri
        return ref.uri

    # ------------------------------------------------------------------ read
    def _entry(self, n: int) -> tuple[int, int, int, int] | None:
        raw = self.store.read_range(self.folder, INDEX_NAME, (n - 1) * _ENTRY.size, _ENTRY.size)
        if len(raw) != _ENTRY.size:
            return None
        seg, off, ln, step = _ENTRY.unpack(raw)
        return None if seg == 0 or ln == 0 else (seg, off, ln, step)

    def message(self, n: int) -> tuple[int, dict[str, Any]]:
        """``(step, message)`` of archived message ``n`` (1-based), in O(its size)."""
        if not self.native:
            raise SnapshotError(2, "this store keeps the history as documents")
        if n < 1 or n > len(self):
            raise SnapshotError(2, f"no archived message #{n} (the archive has {len(self)})")
        entry = self._entry(n)
        if entry is None:
            raise SnapshotError(5, f"archived message #{n} is damaged (interrupted write)")
        seg, off, ln, step = entry
        data = self.store.read_range(self.folder, segment_name(seg), off, ln)
        return step, _parse_line(data, n)

    def messages(self, first: int = 1, last: int | None = None) -> list[tuple[int, int, Any]]:
        """``(n, step, message)`` for ``first``..``last`` (inclusive, clipped)."""
        total = len(self)
        last = total if last is None else min(last, total)
        out: list[tuple[int, int, Any]] = []
        for n, step, m in self.iter_messages(first, last):
            out.append((n, step, m))
        return out

    def iter_messages(
        self, first: int = 1, last: int | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[int, int, Any]]:
        """Archived messages ``first``..``last`` in order (``reverse``: last first).

        Memory is bounded whatever the archive's size: the index is read
        :data:`INDEX_CHUNK` entries at a time, and a segment's consecutive messages
        with one read of at most :data:`READ_CHUNK` bytes (a single longer message,
        at most ``max_bytes``, with its own read). A caller that stops early reads
        nothing more."""
        total = len(self)
        last = total if last is None else min(last, total)
        first = max(first, 1)
        if first > last:
            return
        for entries in self._index_chunks(first, last, reverse=reverse):
            groups = list(_read_groups(entries))
            del entries
            for group in reversed(groups) if reverse else groups:
                got = self._read_group(group)
                yield from reversed(got) if reverse else got
                del got  # before the next read: one group in memory at a time

    def _index_chunks(
        self, first: int, last: int, *, reverse: bool = False
    ) -> Iterator[list[tuple[int, int, int, int, int]]]:
        """``(n, segment, offset, length, step)`` of messages ``first``..``last``, read
        :data:`INDEX_CHUNK` entries at a time (a short read ends a chunk early)."""
        starts = range(first, last + 1, INDEX_CHUNK)
        for lo_n in reversed(starts) if reverse else starts:
            hi_n = min(lo_n + INDEX_CHUNK - 1, last)
            idx = self.store.read_range(
                self.folder, INDEX_NAME, (lo_n - 1) * _ENTRY.size, (hi_n - lo_n + 1) * _ENTRY.size
            )
            yield [
                (lo_n + i, *_ENTRY.unpack_from(idx, i * _ENTRY.size))
                for i in range(len(idx) // _ENTRY.size)
            ]

    def _group_blob(self, group: list[tuple[int, int, int, int, int]]) -> tuple[bytes, int]:
        """The bytes a group of :func:`_read_groups` spans (one read; its undamaged
        entries all lie in one segment) and the offset they start at."""
        run = [e for e in group if e[1] != 0 and e[3] != 0]
        if not run:
            return b"", 0
        lo = min(e[2] for e in run)
        hi = max(e[2] + e[3] for e in run)
        return self.store.read_range(self.folder, segment_name(run[0][1]), lo, hi - lo), lo

    def _read_group(
        self, group: list[tuple[int, int, int, int, int]]
    ) -> list[tuple[int, int, Any]]:
        """The messages of one group of :func:`_read_groups` (one read)."""
        try:
            blob, lo = self._group_blob(group)
            readable = True
        except SnapshotError:
            blob, lo, readable = b"", 0, False
        out: list[tuple[int, int, Any]] = []
        for n, s_, off, ln, step in group:
            if s_ == 0 or ln == 0 or not readable:
                out.append((n, step, {"ctxpolicy_damaged": True}))
                continue
            piece = blob[off - lo : off - lo + ln]
            try:
                out.append((n, step, _parse_line(piece, n)))
            except SnapshotError as exc:
                out.append((n, step, {"ctxpolicy_damaged": str(exc)}))
        return out

    def transcript(self, ref: HistoryRef | None = None) -> str:
        """Readable text of the archive, or of the messages a ref names."""
        first, last = (1, None) if ref is None else (ref.first, ref.last)
        if ref is not None and last is not None and first == last:
            step, m = self.message(first)
            return render_transcript([(first, step, m)])
        return render_transcript(self.messages(first, last))


def _read_groups(
    entries: list[tuple[int, int, int, int, int]],
) -> Iterator[list[tuple[int, int, int, int, int]]]:
    """Split ``(n, segment, offset, length, step)`` entries into runs read with one
    read each: consecutive entries of one segment spanning at most :data:`READ_CHUNK`
    bytes (damaged entries ride along with their neighbours)."""
    group: list[tuple[int, int, int, int, int]] = []
    seg = lo = hi = -1
    for e in entries:
        _, s_, off, ln, _ = e
        if s_ == 0 or ln == 0:
            group.append(e)
            continue
        if group and seg != -1 and (s_ != seg or max(hi, off + ln) - min(lo, off) > READ_CHUNK):
            yield group
            group, seg = [], -1
        if seg == -1:
            seg, lo, hi = s_, off, off + ln
        else:
            lo, hi = min(lo, off), max(hi, off + ln)
        group.append(e)
    if group:
        yield group


def _parse_line(data: bytes, n: int) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
        value = json.loads(text)
    except RecursionError:  # valid JSON nested deeper than Python parses: keep the text
        return {"ctxpolicy_json_text": text.rstrip("\n")}
    except (UnicodeDecodeError, ValueError) as exc:
        raise SnapshotError(5, f"archived message #{n} is damaged") from exc
    return value if isinstance(value, dict) else {"value": value}
