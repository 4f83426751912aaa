"""What ``ctx_recall`` answers, read as a stream: never more than the answer needs.

The model's recall tool returns at most ``max_chars`` characters (the head and the
tail of the text, the middle omitted). :func:`bounded_recall` produces exactly that
answer without holding the whole text:

* a whole-history reference (``ctxsnap://<folder>/history``) reads messages from
  the start until the head is full, then from the end (the archive's index gives
  each message's place) until the tail is full; the messages between are named,
  not read. Bytes read: the answer's messages plus one message each side, whatever
  the archive's size;
* with ``lines`` the text is read from the start and reading stops after the last
  line asked for; with ``grep`` every line is scanned. Either way at most
  :data:`MAX_SCAN_BYTES` characters are scanned (the bound of ``ctx_search``), and
  only the head and tail of the answer are kept (:class:`HeadTail`);
* a snapshot (one tool result) is one piece, at most the policy's
  ``snapshots.max_snapshot_bytes`` when it was written.

Text is passed through ``clean`` (the secret redactor) one whole piece at a time (an
archived message, a tool result) *before* it is cut or its lines are matched, so a
secret is never cut short of what the redactor recognises and ``grep`` cannot probe
a redacted secret character by character.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ctxpolicy.components import SnapshotStore
from ctxpolicy.snapshots.names import SnapshotError, history_uri, parse_history_ref

__all__ = ["MAX_SCAN_BYTES", "HeadTail", "bounded", "bounded_recall", "observation_text"]

#: Most characters one ``ctx_search`` or ``ctx_recall`` scans.
MAX_SCAN_BYTES = 32 * 1024 * 1024
#: The separator of archived messages in a transcript (one blank line).
MESSAGE_SEP = "\n\n"


def observation_text(doc: Mapping[str, Any]) -> str:
    """The text a snapshot document stands for (its observation, or the transcript
    of the messages of a history document written by a store without append)."""
    if "observation" not in doc and isinstance(doc.get("messages"), list):
        from ctxpolicy.snapshots.archive import render_transcript

        step = doc["step"] if isinstance(doc.get("step"), int) else 0
        return render_transcript([(i, step, m) for i, m in enumerate(doc["messages"], 1)])
    obs = doc.get("observation", "")
    if isinstance(obs, str):
        return obs
    from ctxpolicy.conversation.jsontext import to_json

    return to_json(obs)[0]


def bounded(text: str, max_chars: int) -> str:
    """``text``, or its head and tail with the middle omitted (at most about
    ``max_chars`` characters)."""
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    omitted = len(text) - 2 * half
    return (
        f"{text[:half]}\n... [{omitted} chars omitted; ask for a line range or grep] ...\n"
        f"{text[len(text) - half :]}"
    )


class HeadTail:
    """Pieces joined by ``sep``, of which only what :func:`bounded` shows is kept:
    :meth:`text` equals ``bounded(sep.join(pieces), max_chars)`` in
    O(``max_chars``) memory (a piece longer than that is kept as its two ends)."""

    def __init__(self, max_chars: int, sep: str) -> None:
        self.max_chars = max(int(max_chars), 0)
        self.half = self.max_chars // 2
        self.sep = sep
        self.total = 0  # characters of the joined text
        self.count = 0
        self._head: list[str] = []  # a prefix of the text, at least max_chars + 1 long
        self._head_len = 0
        # the last pieces, each as its last ``half`` characters, covering at least
        # the last ``half`` characters of the text
        self._tail: deque[tuple[str, int]] = deque()
        self._tail_len = 0  # their real length, joined

    def add(self, piece: str) -> None:
        sep = len(self.sep) if self.count else 0
        self.total += sep + len(piece)
        self.count += 1
        if self._head_len <= self.max_chars:
            self._head.append(piece[: self.max_chars + 1])
            self._head_len += sep + len(piece)
        self._tail.append((piece[-self.half :] if self.half else "", len(piece)))
        self._tail_len += (len(self.sep) if len(self._tail) > 1 else 0) + len(piece)
        while len(self._tail) > 1:
            rest = self._tail_len - self._tail[0][1] - len(self.sep)
            if rest < self.half:
                break
            self._tail.popleft()
            self._tail_len = rest

    def text(self) -> str:
        if self.total <= self.max_chars:
            return self.sep.join(self._head)
        head = self.sep.join(self._head)[: self.half]
        tail = self.sep.join(t for t, _ in self._tail)[-self.half :] if self.half else ""
        omitted = self.total - 2 * self.half
        return f"{head}\n... [{omitted} chars omitted; ask for a line range or grep] ...\n{tail}"


def _same(text: str) -> str:
    return text


def _pieces(
    store: SnapshotStore, ref: str, clean: Callable[[str], str]
) -> Iterator[tuple[int | None, str]]:
    """``(message number, cleaned text)`` of every piece a reference names, in order
    (a snapshot is one piece numbered ``None``)."""
    hist = parse_history_ref(ref)
    if hist is None:
        yield None, clean(observation_text(store.read(ref)))
        return
    from ctxpolicy.snapshots.archive import HistoryArchive, render_transcript

    archive = HistoryArchive.from_folder(store, hist.folder)
    if hist.last is None and len(archive) == 0:
        raise SnapshotError(2, "nothing has been archived in this conversation yet")
    if hist.last is not None and hist.first == hist.last:
        step, m = archive.message(hist.first)
        yield hist.first, clean(render_transcript([(hist.first, step, m)]))
        return
    for n, step, m in archive.iter_messages(hist.first, hist.last):
        yield n, clean(render_transcript([(n, step, m)]))


def _lines(pieces: Iterator[tuple[int | None, str]]) -> Iterator[tuple[int, str, int]]:
    """``(line number, line, characters scanned so far)`` of the pieces joined by a
    blank line, as :func:`~ctxpolicy.snapshots.recall.recall` numbers them."""
    n = 0
    scanned = 0
    for i, (_, text) in enumerate(pieces):
        scanned += len(text)
        if i:
            n += 1
            yield n, "", scanned
        for line in text.split("\n"):
            n += 1
            yield n, line, scanned


def bounded_recall(
    store: SnapshotStore,
    ref: str,
    *,
    lines: tuple[int, int] | None = None,
    grep: str | None = None,
    max_chars: int,
    clean: Callable[[str], str] = _same,
    max_scan_bytes: int = MAX_SCAN_BYTES,
) -> str:
    """The ``ctx_recall`` answer for a canonical reference: what
    ``bounded(clean(recall(...)), max_chars)`` would be, read as a stream (see the
    module docstring). Raises ``SnapshotError`` like :func:`recall`."""
    if lines is None and grep is None:
        hist = parse_history_ref(ref)
        if hist is not None and (hist.last is None or hist.last > hist.first):
            return _history_ends(store, ref, max_chars, clean)
    first, last = lines if lines is not None else (1, None)
    out = HeadTail(max_chars, "\n")
    note = ""
    for n, line, scanned in _lines(_pieces(store, ref, clean)):
        if scanned > max_scan_bytes:
            mb = max_scan_bytes // (1024 * 1024)
            note = (
                f"\n(stopped after scanning {mb} MB, the limit; recall a narrower "
                "reference, e.g. …/history#a-b)"
            )
            break
        if last is not None and n > last:
            break
        if n < first:
            continue
        if grep is None:
            out.add(line)
        elif grep in line:
            out.add(f"{n}: {line}")
    if grep is not None and not out.count and not note:
        return ""
    return out.text() + note


def _history_ends(
    store: SnapshotStore, ref: str, max_chars: int, clean: Callable[[str], str]
) -> str:
    """A history range's answer from its two ends: the messages until the head is
    full, then from the last message back until the tail is full."""
    from ctxpolicy.snapshots.archive import HistoryArchive, render_transcript

    hist = parse_history_ref(ref)
    assert hist is not None
    archive = HistoryArchive.from_folder(store, hist.folder)
    total = len(archive)
    if hist.last is None and total == 0:
        raise SnapshotError(2, "nothing has been archived in this conversation yet")
    first = max(hist.first, 1)
    last = total if hist.last is None else min(hist.last, total)
    head: list[tuple[int, str]] = []
    size = 0
    for n, step, m in archive.iter_messages(first, last):
        text = clean(render_transcript([(n, step, m)]))
        head.append((n, text))
        size += len(text) + len(MESSAGE_SEP)
        if size > max_chars:
            break
    if not head or head[-1][0] >= last:  # the whole range was read: the plain answer
        return bounded(MESSAGE_SEP.join(t for _, t in head), max_chars)
    marker_room = 100 + 2 * len(history_uri(hist.folder, last, last))
    half = max(max_chars - marker_room, 0) // 2
    tail: list[tuple[int, str]] = []
    size = 0
    for n, step, m in archive.iter_messages(head[-1][0] + 1, last, reverse=True):
        text = clean(render_transcript([(n, step, m)]))
        tail.append((n, text))
        size += len(text) + len(MESSAGE_SEP)
        if size > half:
            break
    tail.reverse()
    if tail and tail[0][0] == head[-1][0] + 1:  # the two ends met: all of it was read
        whole = MESSAGE_SEP.join(t for _, t in [*head, *tail])
        return bounded(whole, max_chars)
    # the first message not shown whole at the head, the last not shown whole at the tail
    pos = 0
    gap_from = head[-1][0]
    for n, t in head:
        pos += len(t)
        if pos > half:
            gap_from = n
            break
        pos += len(MESSAGE_SEP)
    pos = 0
    gap_to = tail[0][0] if tail else last
    for n, t in reversed(tail):
        pos += len(t)
        if pos > half:
            gap_to = n
            break
        pos += len(MESSAGE_SEP)
    head_text = MESSAGE_SEP.join(t for _, t in head)[:half]
    tail_text = MESSAGE_SEP.join(t for _, t in tail)[-half:] if half else ""
    gap = history_uri(hist.folder, gap_from, gap_to)
    return (
        f"{head_text}\n... [archived messages #{gap_from}-#{gap_to} not shown whole; "
        f"recall {gap}, a line range or grep] ...\n{tail_text}"
    )
