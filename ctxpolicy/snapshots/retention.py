"""Retention of a local snapshot store: :func:`prune`, and :class:`Sweeper`, which
applies it incrementally while a session writes.

What is removed, always whole files: snapshot documents (``step_NNN_*.json``),
snapshot segments (``snapshots_NNNNNN.seg``, with every record in them), history segments
(``history_NNNNNN.jsonl``), a ``history.idx`` only with its whole conversation or
when it is older than the age limit, and stale temp files (``.tmp-*`` older than an
hour), directly under ``<root>/<folder>/``. Symlinks are never followed; folders
left empty are removed.

**Order: idle conversations first.** The size limit takes files by conversation:
every conversation not written for :data:`IDLE_S` (an hour) before any live one,
the least recently written conversation first, its oldest files first. A live
conversation loses files only when the conversations written in the last hour
alone exceed the limit. A ``history.idx`` (16 bytes a message) goes only with its
age, so archive numbers never restart. The newest snapshot segment of a live
conversation (where its writer appends) is never taken by the size limit. The age limit removes files older than it,
wherever they are.

**Every loss is marked.** A folder that lost any file other than a stale temp file
gets the tombstone :data:`TOMBSTONE` (``.evicted``: when, how many files, why); it
is what :meth:`LocalStore.evicted` reports, and the engine then checks the
references its context cites (:mod:`ctxpolicy.snapshots.lost`): a reference that no
longer resolves is a ``data.lost`` event and stops being cited. Tombstones are
removed :data:`TOMBSTONE_KEEP_S` (90 days) after the last loss, with the folder
when nothing else is left in it.

:class:`Sweeper` runs a full :func:`prune` of the root from the write path when

* the bytes this process wrote since the last sweep exceed 5 % of ``max_total_mb``
  (so the store overshoots its size limit by at most that much per writer), or
* the writes since the last sweep reach half the number of files the last sweep
  saw (at least 64): a sweep costs O(files), so this keeps the cost amortised O(1)
  per write, or
* on the first write of a process, when the marker file ``<root>/.ctxpolicy-retention``
  says no process swept in the last hour (so short sessions prune too, and the age
  limit applies at least hourly while anything writes).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ctxpolicy.snapshots.names import INDEX_NAME, NAME_RE, SEGMENT_RE, SNAP_SEGMENT_RE

__all__ = ["MARKER", "TOMBSTONE", "PruneReport", "Sweeper", "prune", "sweeper_for"]

MARKER = ".ctxpolicy-retention"
SWEEP_INTERVAL_S = 3600.0
STALE_TMP_S = 3600.0
#: A conversation not written for this long is idle: the size limit takes it whole first.
IDLE_S = 3600.0
#: The mark a folder gets when retention removed any of its files.
TOMBSTONE = ".evicted"
TOMBSTONE_KEEP_S = 90 * 86400.0
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass
class PruneReport:
    """What :func:`prune` removed (or would remove, with ``dry_run``)."""

    removed: list[str] = field(default_factory=list)
    removed_bytes: int = 0
    kept_files: int = 0
    kept_bytes: int = 0
    dry_run: bool = False
    #: Folders that lost every snapshot and segment (an index may stay).
    evicted_conversations: list[str] = field(default_factory=list)
    #: Folders that lost some of them.
    partly_evicted: list[str] = field(default_factory=list)


def _candidates(root: Path, now: float) -> tuple[list[tuple[float, int, Path]], list[Path]]:
    """(mtime, size, path) of every prunable file, and the stale temp files and
    expired tombstones."""
    files: list[tuple[float, int, Path]] = []
    stale: list[Path] = []
    with os.scandir(root) as top:
        convs = [e for e in top if e.is_dir(follow_symlinks=False)]
    for conv in convs:
        try:
            entries = list(os.scandir(conv.path))
        except OSError:
            continue
        for e in entries:
            if not e.is_file(follow_symlinks=False):
                continue
            name = e.name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if name.startswith(".tmp-"):
                if now - st.st_mtime >= STALE_TMP_S:
                    stale.append(Path(e.path))
                continue
            if name == TOMBSTONE:
                if now - st.st_mtime >= TOMBSTONE_KEEP_S:
                    stale.append(Path(e.path))
                continue
            snap = name.endswith(".json") and NAME_RE.match(name[:-5])
            if snap or SNAP_SEGMENT_RE.match(name) or SEGMENT_RE.match(name) or name == INDEX_NAME:
                files.append((st.st_mtime, st.st_size, Path(e.path)))
    return files, stale


def prune(
    store_root: str | os.PathLike[str],
    max_age_days: float | None = None,
    max_total_mb: float | None = None,
    dry_run: bool = False,
    *,
    now: float | None = None,
) -> PruneReport:
    """Apply retention to a local store root (see the module docstring)."""
    report = PruneReport(dry_run=dry_run)
    root = Path(os.path.abspath(os.path.expanduser(store_root)))
    if not root.is_dir():
        return report
    now = time.time() if now is None else now
    files, stale = _candidates(root, now)
    files.sort()
    doomed: list[tuple[int, Path]] = []
    keep: list[tuple[float, int, Path]] = []
    for item in files:
        mtime, size, p = item
        if max_age_days is not None and now - mtime > max_age_days * 86400:
            doomed.append((size, p))
        else:
            keep.append(item)
    if max_total_mb is not None:
        keep = _size_limit(keep, int(max_total_mb * 1024 * 1024), now, doomed)
    for p in stale:
        with contextlib.suppress(OSError):
            doomed.append((p.stat().st_size, p))
    for size, p in doomed:
        report.removed.append(str(p))
        report.removed_bytes += size
        if not dry_run:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    report.kept_files = len(keep)
    report.kept_bytes = sum(s for _, s, _ in keep)
    kept_in = {p.parent for _, _, p in keep if p.name != INDEX_NAME}
    lost_in = {
        p.parent for _, p in doomed if p.name != TOMBSTONE and not p.name.startswith(".tmp-")
    }
    report.evicted_conversations = sorted(str(d) for d in lost_in if d not in kept_in)
    report.partly_evicted = sorted(str(d) for d in lost_in if d in kept_in)
    if not dry_run:
        per_folder = Counter(p.parent for _, p in doomed)
        for d in lost_in:
            _mark(d, now, per_folder[d])
        for conv in {p.parent for _, p in doomed}:
            with contextlib.suppress(OSError):
                conv.rmdir()  # only succeeds when empty
    return report


def _size_limit(
    keep: list[tuple[float, int, Path]],
    limit: int,
    now: float,
    doomed: list[tuple[int, Path]],
) -> list[tuple[float, int, Path]]:
    """What stays under the size limit. Files go by conversation: idle ones (not
    written for :data:`IDLE_S`) before any live one, the least recently written
    conversation first, its oldest files first (an index only with its age)."""
    total = sum(s for _, s, _ in keep)
    if total <= limit:
        return keep
    last_write: dict[Path, float] = {}
    for m, _, p in keep:
        d = p.parent
        last_write[d] = max(m, last_write.get(d, m))

    def order(item: tuple[float, int, Path]) -> tuple[bool, float, float]:
        lw = last_write[item[2].parent]
        return (now - lw < IDLE_S, lw, item[0])

    # the newest snapshot segment of a live conversation is where its writer appends
    newest: dict[Path, str] = {}
    for _, _, p in keep:
        old = newest.get(p.parent, "")
        if SNAP_SEGMENT_RE.match(p.name) and (len(p.name), p.name) > (len(old), old):
            newest[p.parent] = p.name
    gone: set[Path] = set()
    for item in sorted(keep, key=order):
        if total <= limit:
            break
        p = item[2]
        if newest.get(p.parent) == p.name and now - last_write[p.parent] < IDLE_S:
            continue
        if item[2].name != INDEX_NAME:
            total -= item[1]
            doomed.append((item[1], item[2]))
            gone.add(item[2])
    return [item for item in keep if item[2] not in gone]


def _mark(folder: Path, now: float, files: int) -> None:
    """Write the tombstone of a folder that lost files (never through a symlink)."""
    data = json.dumps({"evicted_at": round(now, 3), "files": files, "by": "retention"})
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(folder / TOMBSTONE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o600)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)


class Sweeper:
    """Incremental retention for one store instance (thread-safe)."""

    def __init__(
        self, root: Path, *, max_total_mb: float | None, max_age_days: float | None
    ) -> None:
        self.root = root
        self.max_total_mb = max_total_mb
        self.max_age_days = max_age_days
        self.enabled = max_total_mb is not None or max_age_days is not None
        self._lock = threading.Lock()
        self._bytes = 0
        self._writes = 0
        self._files_seen = 0
        self._first = True
        #: The next sweep is due at this many writes, or bytes (the rules below, kept
        #: as two numbers: the write path compares, and goes on).
        self._due_writes = 64
        self._due_bytes = (
            max_total_mb * 1024 * 1024 * 0.05 if max_total_mb is not None else math.inf
        )
        self.sweeps = 0
        #: Sweeps that removed a file (a store closes its open segments after one).
        self.removals = 0

    def note_write(self, nbytes: int) -> PruneReport | None:
        """Count one write; run a sweep when one is due (see the module docstring)."""
        if not self.enabled:
            return None
        with self._lock:
            self._bytes += nbytes
            self._writes += 1
            if (
                self._writes < self._due_writes
                and self._bytes < self._due_bytes
                and not self._first
            ):
                return None
            due = self._writes >= max(64, self._files_seen // 2)
            if self.max_total_mb is not None:
                due = due or self._bytes >= self.max_total_mb * 1024 * 1024 * 0.05
            if self._first:
                self._first = False
                due = due or self._marker_stale()
            if not due:
                return None
            self._bytes = 0
            self._writes = 0
        report = prune(self.root, self.max_age_days, self.max_total_mb)
        with self._lock:
            self._files_seen = report.kept_files
            self._due_writes = max(64, report.kept_files // 2)
            self.sweeps += 1
            if report.removed:
                self.removals += 1
        marker = self.root / MARKER
        with contextlib.suppress(OSError):
            marker.touch(mode=0o600)
            os.utime(marker)
        return report

    def _marker_stale(self) -> bool:
        try:
            return time.time() - (self.root / MARKER).stat().st_mtime > SWEEP_INTERVAL_S
        except OSError:
            return True


_sweepers: dict[tuple[str, float | None, float | None], Sweeper] = {}
_sweepers_lock = threading.Lock()


def sweeper_for(root: Path, *, max_total_mb: float | None, max_age_days: float | None) -> Sweeper:
    """The process-wide :class:`Sweeper` of a root and limits: the many sessions of
    one process (each opens its own store) share the counters, so their writes
    together trigger the sweeps."""
    key = (str(root), max_total_mb, max_age_days)
    with _sweepers_lock:
        sw = _sweepers.get(key)
        if sw is None:
            sw = _sweepers[key] = Sweeper(
                root, max_total_mb=max_total_mb, max_age_days=max_age_days
            )
        return sw
