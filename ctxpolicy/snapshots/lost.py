"""References a context cites after retention removed what they name.

Retention (:mod:`ctxpolicy.snapshots.retention`) marks every folder that lost files
with a tombstone. :class:`LostRefs` is what a session runs on each prepared list:
one ``lstat`` of its folder's tombstone (:meth:`LocalStore.evicted`) when nothing
was ever lost. Once something was, the references of the conversation's own folder
that the messages cite are checked (each at most once per loss, cached) and every
one that no longer resolves is

* reported once (:meth:`LostRefs.apply` returns it: the session emits ``data.lost``),
* and no longer cited: its reference line (``[Full detail available at: …]``)
  becomes :data:`GONE_LINE`, any other mention of it :data:`GONE_TOKEN` (both
  shorter than what they replace, so the prepared list never grows).

Memory is bounded (:data:`MAX_KNOWN` references remembered), time is linear in the
text of the messages that mention the folder.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxpolicy.components import SnapshotStore
from ctxpolicy.events.types import DataLost
from ctxpolicy.snapshots.names import INDEX_NAME, URI_SCHEME, parse_history_ref, segment_name

__all__ = ["GONE_LINE", "GONE_TOKEN", "LostRefs"]

GONE_LINE = "[Full detail removed by snapshot retention]"
GONE_TOKEN = "(removed)"
MAX_KNOWN = 10_000
_TOKEN = r"[A-Za-z0-9._#-]{1,140}"
_ENTRY_BYTES = 16


class LostRefs:
    """Per session: finds and un-cites the references retention took (see module)."""

    def __init__(self, store: SnapshotStore, conv_id: str) -> None:
        self.store = store
        self.folder = store.folder(conv_id)
        evicted = getattr(store, "evicted", None)
        self._evicted: Callable[[str], int] | None = evicted if callable(evicted) else None
        where = getattr(store, "tombstone_path", None)
        self._path: str | None = where(self.folder) if callable(where) else None
        self._mark = 0
        self._ok: set[str] = set()  # resolved at the current mark
        self.lost: set[str] = set()
        self._rx = re.compile(re.escape(f"{URI_SCHEME}{self.folder}/") + _TOKEN)

    def apply(self, messages: list[Any]) -> tuple[list[Any], list[str]]:
        """``messages`` with lost references un-cited, and the ones newly found lost."""
        if self._path is not None:  # the local store: one lstat, nothing else
            try:
                st = os.lstat(self._path)
                mark = st.st_mtime_ns if stat.S_ISREG(st.st_mode) else 0
            except OSError:
                mark = 0
        elif self._evicted is not None:
            mark = self._evicted(self.folder)
        else:
            return messages, []
        if mark == 0 and not self.lost:
            return messages, []
        if mark != self._mark:
            self._mark = mark
            self._ok.clear()
        new: list[str] = []
        out: list[Any] | None = None
        prefix = f"{URI_SCHEME}{self.folder}/"
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping):
                continue
            content = m.get("content")
            if isinstance(content, str):
                fixed = self._fix(content, prefix, new) if prefix in content else content
                if fixed is not content:
                    out = list(messages) if out is None else out
                    out[i] = {**m, "content": fixed}
            elif isinstance(content, list):
                parts = content
                for j, part in enumerate(content):
                    text = part.get("text") if isinstance(part, Mapping) else None
                    if isinstance(text, str) and prefix in text:
                        fixed = self._fix(text, prefix, new)
                        if fixed is not text:
                            parts = list(content) if parts is content else parts
                            parts[j] = {**part, "text": fixed}
                if parts is not content:
                    out = list(messages) if out is None else out
                    out[i] = {**m, "content": parts}
        return (messages if out is None else out), new

    def _fix(self, text: str, prefix: str, new: list[str]) -> str:
        gone: list[str] = []
        for match in self._rx.finditer(text):
            ref = self._canonical(match.group(0))
            if ref is not None and self._is_lost(ref, new):
                gone.append(ref)
        if not gone:
            return text
        lines = text.split("\n")
        for k, line in enumerate(lines):
            if prefix not in line:
                continue
            hit = [g for g in gone if g in line]
            if not hit:
                continue
            if line.startswith("[Full detail available at:"):
                lines[k] = GONE_LINE
            else:
                for g in sorted(hit, key=len, reverse=True):
                    line = re.sub(re.escape(g) + r"(?![A-Za-z0-9_#-])", GONE_TOKEN, line)
                lines[k] = line
        return "\n".join(lines)

    def _canonical(self, token: str) -> str | None:
        """The reference a matched token names (a trailing ``.`` of a sentence is
        tried without), or None."""
        for cand in (token, token.rstrip(".")):
            if parse_history_ref(cand) is not None:
                return cand
            try:
                return self.store.locate(cand).uri
            except Exception:
                continue
        return None

    def _is_lost(self, ref: str, new: list[str]) -> bool:
        if ref in self.lost:
            return True
        if ref in self._ok:
            return False
        if self._resolves(ref):
            if len(self._ok) >= MAX_KNOWN:
                self._ok.clear()
            self._ok.add(ref)
            return False
        if len(self.lost) >= MAX_KNOWN:
            self.lost.clear()
        self.lost.add(ref)
        new.append(ref)
        return True

    def _resolves(self, ref: str) -> bool:
        store = self.store
        hist = parse_history_ref(ref)
        try:
            if hist is None:
                exists = getattr(store, "exists", None)
                if callable(exists):
                    return bool(exists(ref))
                store.read(ref)
                return True
            size = store.size(hist.folder, INDEX_NAME)
            if hist.last is None:
                return size >= _ENTRY_BYTES
            if size < hist.last * _ENTRY_BYTES:
                return False
            for n in {hist.first, hist.last}:
                entry = store.read_range(
                    hist.folder, INDEX_NAME, (n - 1) * _ENTRY_BYTES, _ENTRY_BYTES
                )
                seg = int.from_bytes(entry[:4], "little")
                if seg == 0 or store.size(hist.folder, segment_name(seg)) == 0:
                    return False
            return True
        except Exception:
            return False


def lost_event(refs: Sequence[str]) -> DataLost:
    """The ``data.lost`` event for references retention took."""
    return DataLost(
        refs=list(refs[:100]),
        count=len(refs),
        reason="snapshot retention removed them; the context no longer cites them",
    )
