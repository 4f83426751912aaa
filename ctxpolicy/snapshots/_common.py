"""What the snapshot stores share: reference checks, name allocation, sort order."""

from __future__ import annotations

import errno
import json
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ctxpolicy.components import SnapshotRef
from ctxpolicy.snapshots.names import (
    INDEX_NAME,
    MAX_REF_CHARS,
    NAME_RE,
    SEGMENT_RE,
    URI_SCHEME,
    SnapshotError,
    is_folder,
    is_store_folder,
    parse_uri,
)

#: Most (folder, base) counters a store keeps before it starts over.
MAX_NEXT = 4096

_new_object = object.__new__


def record_ref(uri: str, conv_id: str, name: str) -> SnapshotRef:
    """``SnapshotRef(uri=uri, path="", conv_id=conv_id, name=name)`` (a record's
    reference: no path), built without the frozen dataclass's ``__init__`` (four
    ``object.__setattr__`` calls, a tenth of a snapshot write): the same instance,
    its fields set in its ``__dict__`` (tests/snapshots/test_records.py checks that
    it equals, hashes and prints like the one ``__init__`` builds)."""
    ref: SnapshotRef = _new_object(SnapshotRef)
    ref.__dict__.update(uri=uri, path="", conv_id=conv_id, name=name)
    return ref


def check_ref_text(ref: object) -> str:
    if not isinstance(ref, str) or not ref or len(ref) > MAX_REF_CHARS:
        raise SnapshotError(errno.ENOENT, "not a snapshot reference")
    if any(ord(c) < 0x20 or c == "\x7f" for c in ref):
        raise SnapshotError(errno.ENOENT, "not a snapshot reference (control characters)")
    return ref


def located(ref: object, below_root: Callable[[str], Sequence[str]]) -> tuple[str, str]:
    """``(folder, name)`` of the snapshot ``ref`` names: a ``ctxsnap://`` URI, or a path
    or URL of the store that ``below_root`` splits into its pieces under the store's
    root (canonical, after its own checks), which must be ``<folder>/<name>.json``
    with well-formed names."""
    ref = check_ref_text(ref)
    parsed = parse_uri(ref)
    if parsed is not None:
        return parsed
    if ref.startswith(URI_SCHEME):
        raise SnapshotError(errno.ENOENT, "not a snapshot reference")
    pieces = below_root(ref)
    if len(pieces) != 2 or not pieces[1].endswith(".json"):
        raise SnapshotError(errno.EACCES, "not a snapshot of this store")
    folder, name = pieces[0], pieces[1][:-5]
    if not is_store_folder(folder) or not NAME_RE.match(name):
        raise SnapshotError(errno.EACCES, "not a snapshot of this store")
    return folder, name


def is_log_name(name: str) -> bool:
    return name == INDEX_NAME or SEGMENT_RE.match(name) is not None


def check_log(folder: str, name: str) -> None:
    """EACCES unless ``name`` is an append-only log (history archive) of ``folder``."""
    if not is_folder(folder) or not is_log_name(name):
        raise SnapshotError(errno.EACCES, "not a log of this store")


#: Next names tried after a collision before the time-based jump of :class:`Names`.
PROBES = 1


#: Most a document's size may differ from another's and still be the same document
#: but for its write time (``timestamp``).
SAME_SIZE_SLACK = 64


def same_document(existing: str, tmp: str) -> bool:
    """Whether two snapshot files hold the same document but for its write time."""
    try:
        if abs(os.stat(existing).st_size - os.stat(tmp).st_size) > SAME_SIZE_SLACK:
            return False
        return same_document_data(Path(existing).read_bytes(), Path(tmp).read_bytes())
    except OSError:
        return False


def same_document_data(existing: bytes, new: bytes) -> bool:
    """:func:`same_document` for two documents' bytes (any store)."""
    if abs(len(existing) - len(new)) > SAME_SIZE_SLACK:
        return False
    try:
        a = json.loads(existing)
        b = json.loads(new)
    except ValueError:
        return False
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    a.pop("timestamp", None)
    b.pop("timestamp", None)
    return bool(a == b)


class Names:
    """O(1) snapshot names: a per-(folder, base) counter, and after a collision with
    a name this process did not write, a time-based suffix (microseconds since the
    epoch, larger than any counter) so the next attempt is free in practice.

    A name the engine derives from the persisted state is unique per conversation,
    so the counter is 1 in every process and the name is the same after a restart.
    A call redone in the same process (after a lost state race) writes its document
    again under the same base: the store first checks the name it took last for that
    base (:meth:`first` − 1) and reuses it when it holds the same document."""

    def __init__(self) -> None:
        self._next: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def first(self, folder: str, base: str) -> int:
        with self._lock:
            return self._next.get((folder, base), 1)

    def collided(self, n: int) -> int:
        return max(n + 1, time.time_ns() // 1000 + int.from_bytes(os.urandom(2), "big"))

    def taken(self, folder: str, base: str, n: int) -> None:
        with self._lock:
            if len(self._next) >= MAX_NEXT:
                self._next.clear()
            key = (folder, base)
            self._next[key] = max(self._next.get(key, 1), n + 1)

    @staticmethod
    def name(base: str, n: int) -> str:
        return base if n == 1 else f"{base}_{n}"


_SORT_RE = re.compile(r"^step_(\d+)_(.*?)(?:_(\d+))?$")


def sort_key(name: str) -> tuple[int, str, int]:
    m = _SORT_RE.match(name)
    if not m:
        return (0, name, 0)
    return (int(m.group(1)), m.group(2), int(m.group(3) or 1))
