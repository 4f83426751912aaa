"""Snapshot stores: the full tool results, so compaction loses nothing recoverable.

Two stores are built in (registered as plugins like any other):

* ``local`` (default) — a directory, one folder per conversation (``<folder>`` is
  the injective encoding of the conversation id,
  :func:`ctxpolicy.snapshots.names.conv_folder`). ``layout: segments`` (what a
  policy gets by default): each tool result is one record appended to the
  conversation's segment files ``snapshots_000001.seg``… (:mod:`.segments`, records
  in :mod:`.records`): one ``writev`` per result on a segment kept open. ``layout:
  files`` (ctxpolicy 0.1's, and what ``reference_form: path`` gets with ``layout:
  auto``): ``<root>/<folder>/step_003_<action>.json`` written atomically (temp
  file, then a hard link to the final name, which fails if the name exists — so
  concurrent writers never overwrite each other and never expose a partial file).
  Either layout reads both. Files are 0600 and directories 0700. ``durability``
  chooses ``fsync`` or ``flush``. Retention (``max_total_mb``, ``max_age_days``) is
  applied incrementally while the session writes
  (:class:`ctxpolicy.snapshots.retention.Sweeper`), on whole files.
* ``fsspec`` — any fsspec URL (``s3://bucket/prefix``, ``memory://x``, ``file:///…``)
  so many workers share one store. Needs the ``[fsspec]`` extra.

References are ``ctxsnap://<folder>/<name>`` (``name`` without ``.json``); a file's
path is kept beside it for design A's ``[Full detail available at: …]`` (a record
has none: ``SnapshotRef.path`` is empty).
Every store resolves a reference (``..``, symlinks, URL forms) to its canonical
``(folder, name)`` in :meth:`locate` before anything is read, so the recall tools
check ownership on what will actually be opened. Both stores also implement the
append-only logs of the history archive (:mod:`ctxpolicy.snapshots.archive`).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import errno
import itertools
import os
import stat
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import Field

try:  # POSIX: appends of several processes are serialised by an advisory lock
    import fcntl
except ImportError:  # pragma: no cover - not POSIX (Windows): one process per store
    fcntl = None  # type: ignore[assignment]

from ctxpolicy.components import SnapshotRef, SnapshotStore
from ctxpolicy.policy.models import ComponentOptions
from ctxpolicy.snapshots._common import (
    MAX_NEXT,
    PROBES,
    Names,
    check_log,
    located,
    record_ref,
    same_document,
    sort_key,
)
from ctxpolicy.snapshots.document import dump_document
from ctxpolicy.snapshots.document import load_document as _load
from ctxpolicy.snapshots.names import (
    SnapshotError,
    base_name,
    conv_folder,
    is_store_folder,
    safe_action,
    snapshot_uri,
)
from ctxpolicy.snapshots.records import encode as encode_record
from ctxpolicy.snapshots.retention import TOMBSTONE, sweeper_for
from ctxpolicy.snapshots.segments import Folder, Segments

__all__ = ["LocalOptions", "LocalStore"]

_LINK_ERRNOS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK)


# --------------------------------------------------------------------------- local


class LocalOptions(ComponentOptions):
    """Options of the ``local`` snapshot store."""

    redact: bool = Field(
        default=False,
        description="Redact secrets (API keys, tokens) in the stored observation too. "
        "Off by default so that recall returns the exact original; files are 0600.",
    )
    file_mode: int = Field(default=0o600, ge=0, le=0o777, description="Mode of snapshot files.")
    dir_mode: int = Field(default=0o700, ge=0, le=0o777, description="Mode of directories.")
    durability: Literal["fsync", "flush"] = Field(
        default="flush",
        description="`flush`: a write is complete when the OS has the data (survives a "
        "crash of the process, not of the machine). `fsync`: also fsync the file and "
        "its directory before the reference is returned (survives power loss; costs "
        "a disk flush per tool result, see docs/benchmarks.md).",
    )
    max_total_mb: float | None = Field(
        default=1024,
        gt=0,
        description="Keep the whole store (every conversation under the root) below "
        "this size: conversations idle for an hour go first, whole, least recently "
        "written first; then the oldest files. A folder that lost files is marked and "
        "the engine stops citing what went (a `data.lost` event). Applied "
        "incrementally while sessions write; `null` = no size limit. "
        "`snapshots.max_total_mb` overrides it.",
    )
    layout: Literal["auto", "segments", "files"] = Field(
        default="auto",
        description="`segments`: a conversation's tool results are records appended to "
        "segment files (`snapshots_000001.seg`, one `write` per result; see "
        "docs/snapshots.md). `files`: one JSON file per result (ctxpolicy 0.1's layout, "
        "which `snapshots.reference_form: path` needs: the path names a file of its "
        "own). `auto` (default): `files` for a policy with `reference_form: path`, "
        "else `segments`. Either layout reads the other's snapshots.",
    )
    segment_mb: float = Field(
        default=1.0,
        gt=0,
        le=1024,
        description="Size at which a segment is closed and the next one started "
        "(at most 1/16 of `max_total_mb`: retention removes whole segments).",
    )
    max_age_days: float | None = Field(
        default=30,
        gt=0,
        description="Remove snapshot and archive files older than this, incrementally "
        "while sessions write; `null` = keep forever. `snapshots.max_age_days` "
        "overrides it.",
    )


def segment_bytes(segment_mb: float, max_total_mb: float | None) -> int:
    """Where a segment is closed: ``segment_mb``, but at most 1/16 of the store's size
    limit, so that retention (whole segments) stays fine-grained."""
    size = segment_mb * 1024 * 1024
    if max_total_mb is not None:
        size = min(size, max_total_mb * 1024 * 1024 / 16)
    return int(size)


_fallback_lock = threading.Lock()
#: Off POSIX (no ``fcntl``) appends are serialised within this process only.
_APPEND_LOCK = threading.Lock()
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_TEMP_PREFIX = ""
_TEMPS = itertools.count()  # next() is atomic: one counter for every store of the process


def _new_temp_prefix() -> None:
    """Temp names are ``.tmp-<random>-<counter>``: a random part per process (new
    after a fork or a collision), a counter per process."""
    global _TEMP_PREFIX
    _TEMP_PREFIX = f"{os.urandom(6).hex()}-"


_new_temp_prefix()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_temp_prefix)


class LocalStore(SnapshotStore):
    """Snapshots in a local directory tree: records appended to segment files (the
    default), or one JSON document per tool result (``layout: files``)."""

    name = "local"
    description = (
        "Tool results appended to <root>/<folder>/snapshots_NNNNNN.seg (or one "
        "step_003_<action>.json each with layout: files); 0600."
    )
    Options = LocalOptions

    options: LocalOptions

    def __init__(self, options: ComponentOptions | None = None, *, root: str = "") -> None:
        super().__init__(options, root=root)
        self.root_path = Path(os.path.abspath(os.path.expanduser(root or ".ctxpolicy/snapshots")))
        self.root = str(self.root_path)
        self._names = Names()
        self._folders: dict[str, str] = {}
        self.retention = sweeper_for(
            self.root_path,
            max_total_mb=self.options.max_total_mb,
            max_age_days=self.options.max_age_days,
        )
        self._segments = Segments(
            file_mode=self.options.file_mode,
            dir_mode=self.options.dir_mode,
            fsync=self.options.durability == "fsync",
            max_bytes=segment_bytes(self.options.segment_mb, self.options.max_total_mb),
        )
        self._segmented = self.options.layout != "files"  # auto: see open_store
        self._sweeps_seen = self.retention.removals

    def close(self) -> None:
        """Close the open segment files (the store stays usable: they reopen)."""
        self._segments.close()

    # -- paths
    def _real_root(self) -> str:
        return os.path.realpath(self.root_path)

    def _conv_dir(self, conv_id: str) -> Path:
        return self._folder_dir(conv_folder(conv_id))

    def _folder_dir(self, folder: str) -> Path:
        if not is_store_folder(folder):
            raise SnapshotError(errno.EACCES, "not a conversation folder of this store")
        d = self.root_path / folder
        if os.path.realpath(d) != os.path.join(self._real_root(), folder):
            raise SnapshotError(errno.EACCES, "a conversation folder may not be a symlink")
        return d

    def _check_inside(self, p: Path) -> None:
        root = self._real_root()
        real = os.path.realpath(p)
        if os.path.commonpath([root, real]) != root or real == root:
            raise SnapshotError(errno.EACCES, f"snapshot path {p} escapes the store root")

    def _mkdir(self, d: Path) -> None:
        mode = self.options.dir_mode
        for p in (self.root_path, d):
            try:
                p.mkdir(mode=mode, parents=True, exist_ok=True)
            except FileExistsError as exc:
                raise SnapshotError(errno.ENOTDIR, f"{p} exists and is not a directory") from exc
        self._check_inside(d)

    def ref_for(self, folder: str, name: str) -> SnapshotRef:
        path = os.path.join(self.root, folder, f"{name}.json")
        return SnapshotRef(uri=snapshot_uri(folder, name), path=path, conv_id=folder, name=name)

    def folder(self, conv_id: str) -> str:
        return conv_folder(conv_id)

    # -- write
    def _sync(self, fd: int) -> None:
        if self.options.durability == "fsync":
            os.fsync(fd)

    def _sync_dir(self, d: str | Path) -> None:
        if self.options.durability != "fsync":
            return
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write(
        self, conv_id: str, step: int, action: str, document: Mapping[str, Any]
    ) -> SnapshotRef:
        if self._segmented:
            return self._append(conv_id, step, action, document)
        folder, conv_dir = self._ready_dir(conv_id)
        data = dump_document(document)
        base = base_name(step, action)
        tmp = self._write_temp(conv_dir, data)
        try:
            ref = self._publish(folder, conv_dir, base, tmp)
            self._sync_dir(conv_dir)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self.retention.note_write(len(data))
        return ref

    def _append(
        self, conv_id: str, step: int, action: str, document: Mapping[str, Any]
    ) -> SnapshotRef:
        """``layout: segments``: one record appended (:mod:`.segments`)."""
        if self.retention.removals != self._sweeps_seen:  # a sweep here removed files
            self._sweeps_seen = self.retention.removals
            self._segments.close_files()
        folder = self._folders.get(conv_id)
        f = None if folder is None else self._segments.folders.get(folder)
        if f is None:
            folder, conv_dir = self._ready_dir(conv_id)
            f = self._segments.folder(folder, conv_dir)
        assert folder is not None
        magic, meta, body = encode_record(document)
        if type(step) is int and 0 <= step <= 10**18:  # base_name's common case, inline
            base = f"step_{step:03d}_{safe_action(action)}"
        else:
            base = base_name(step, action)
        name = self._segments.write(f, folder, base, magic, meta, body)
        self.retention.note_write(len(meta) + len(body))  # a sweep: files closed next time
        return record_ref(snapshot_uri(folder, name), folder, name)

    def _segment_folder(self, folder: str) -> Folder | None:
        """The segment index of an existing folder (None: no such folder)."""
        d = self._folder_dir(folder)
        if not d.is_dir():
            return None
        return self._segments.folder(folder, str(d))

    def _ready_dir(self, conv_id: str) -> tuple[str, str]:
        """The conversation's folder and its path, created if needed; never through a
        symlink.

        A folder that exists as a real directory (``lstat``: its last component is
        not a symlink, and its name is one component) is the fast path: one syscall
        instead of resolving every component of the root each time."""
        folder = self._folders.get(conv_id)
        if folder is not None:
            d = os.path.join(self.root, folder)
            try:
                if stat.S_ISDIR(os.lstat(d).st_mode):
                    return folder, d
            except FileNotFoundError:
                pass
        folder = conv_folder(conv_id)
        path = self._folder_dir(folder)  # the full checks, and their errors
        self._mkdir(path)
        if len(self._folders) >= MAX_NEXT:
            self._folders.clear()
        self._folders[conv_id] = folder
        return folder, str(path)

    def _write_temp(self, conv_dir: str, data: bytes) -> str:
        """A complete temp file (mode ``file_mode``) in ``conv_dir``; its path."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
        for _ in range(100):
            tmp = os.path.join(conv_dir, f".tmp-{_TEMP_PREFIX}{next(_TEMPS):x}.json")
            try:
                fd = os.open(tmp, flags, 0o600)
            except FileExistsError:  # a fork or a namesake process: another prefix
                _new_temp_prefix()
                continue
            break
        else:  # pragma: no cover - 100 collisions
            raise SnapshotError(errno.EEXIST, f"no free temp file name in {conv_dir}")
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, self.options.file_mode)
                self._sync(fd)
            finally:
                os.close(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    def _publish(self, folder: str, conv_dir: str, base: str, tmp: str) -> SnapshotRef:
        """Give the complete temp file its final, unused name in O(1) attempts."""
        n = self._names.first(folder, base)
        if n > 1:  # a redo in this process: its first attempt's name, if it is the same
            name = Names.name(base, n - 1)
            if same_document(os.path.join(conv_dir, f"{name}.json"), tmp):
                os.unlink(tmp)
                return self.ref_for(folder, name)
        probes = 0
        for _ in range(16):
            name = Names.name(base, n)
            final = os.path.join(conv_dir, f"{name}.json")
            try:
                os.link(tmp, final)  # atomic, and fails if the name is taken
            except FileExistsError:
                if same_document(final, tmp):
                    # the same document written again (a call redone after a crash
                    # between the write and the state commit): same name, same ref
                    os.unlink(tmp)
                    self._names.taken(folder, base, n)
                    return self.ref_for(folder, name)
                # a few next names first (a resumed process meets its predecessor's
                # files in order), then a time-based jump: O(1) attempts either way
                probes += 1
                n = n + 1 if probes <= PROBES else self._names.collided(n)
                continue
            except OSError as exc:
                if exc.errno not in _LINK_ERRNOS:
                    raise
                if not self._publish_without_link(tmp, final):
                    n = self._names.collided(n)
                    continue
            self._names.taken(folder, base, n)
            return self.ref_for(folder, name)
        raise SnapshotError(errno.EEXIST, f"no free snapshot name for {base}")

    def _publish_without_link(self, tmp: str, final: str) -> bool:
        """Filesystems without hard links: reserve the name with O_EXCL, then replace."""
        with _fallback_lock:
            try:
                fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self.options.file_mode)
            except FileExistsError:
                return False
            os.close(fd)
            # the empty placeholder is replaced atomically by the complete file
            os.replace(tmp, final)
            return True

    # -- read
    def locate(self, ref: str) -> SnapshotRef:
        """Resolve ``ref`` (``ctxsnap://`` URI, absolute path, ``file://`` URL) to the
        canonical snapshot it names: ``..`` collapsed and symlinks followed *first*;
        then the result must be ``<root>/<folder>/<name>.json`` with well-formed
        names, and the canonical path must itself be free of symlinks."""
        root = self._real_root()  # once: the pieces and the canonical path share it
        folder, name = located(ref, lambda path: self._below_root(path, root))
        canonical = os.path.join(root, folder, f"{name}.json")
        if os.path.realpath(canonical) != canonical:
            raise SnapshotError(errno.EACCES, "snapshot path goes through a symlink")
        return SnapshotRef(
            uri=snapshot_uri(folder, name), path=canonical, conv_id=folder, name=name
        )

    def _below_root(self, ref: str, root: str) -> list[str]:
        """The pieces of absolute path or ``file:`` URL ``ref`` below ``root`` (the
        store's, symlinks resolved), symlinks followed (none: not below)."""
        text = ref
        if text.lower().startswith("file:"):
            parts = urlsplit(text)
            if parts.netloc not in ("", "localhost"):
                raise SnapshotError(errno.ENOENT, "not a snapshot reference")
            text = unquote(parts.path)
            if "\x00" in text:
                raise SnapshotError(errno.ENOENT, "not a snapshot reference")
        if not os.path.isabs(text):
            raise SnapshotError(errno.ENOENT, "not a snapshot reference")
        real = os.path.realpath(text)
        rel = os.path.relpath(real, root) if os.path.commonpath([root, real]) == root else ""
        return rel.split(os.sep) if rel and rel != "." else []

    def resolve(self, ref: str) -> Path:
        return Path(self.locate(ref).path)

    def read(self, ref: str) -> dict[str, Any]:
        """The document a reference names: its file (``layout: files``, ctxpolicy
        0.1) or its record in a segment, whichever the folder holds."""
        loc = self.locate(ref)
        try:
            data = _read_nofollow(loc.path)
        except FileNotFoundError:
            f = self._segment_folder(loc.conv_id)
            doc = None if f is None else self._segments.read(f, loc.name)
            if doc is None:
                raise SnapshotError(errno.ENOENT, f"no snapshot {loc.uri}") from None
            return doc
        return _load(data, loc.uri)

    def list(self, conv_id: str) -> list[SnapshotRef]:
        return self.list_folder(conv_folder(conv_id))

    def list_folder(self, folder: str) -> builtins.list[SnapshotRef]:
        """The snapshots of a folder, files and records, in step order (a record's
        ``path`` is empty: it is no file of its own)."""
        f = self._segment_folder(folder)
        if f is None:
            return []
        refs = []
        for name, is_record in self._segments.names(f):
            ref = self.ref_for(folder, name)
            refs.append(dataclasses.replace(ref, path="") if is_record else ref)
        return sorted(refs, key=lambda r: sort_key(r.name))

    # -- append-only logs (history archive)
    def _log_path(self, folder: str, name: str) -> Path:
        check_log(folder, name)
        return self._folder_dir(folder) / name

    def append(self, folder: str, name: str, data: bytes) -> int:
        path = self._log_path(folder, name)
        self._mkdir(path.parent)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), self.options.file_mode)
        guard = _APPEND_LOCK if fcntl is None else contextlib.nullcontext()
        with guard:
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                offset = os.fstat(fd).st_size
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                self._sync(fd)
            finally:
                os.close(fd)  # releases the lock
        if offset == 0:
            self._sync_dir(path.parent)
        self.retention.note_write(len(data))
        return offset

    # -- losses (retention)
    def evicted(self, folder: str) -> int:
        """When retention last removed files of ``folder`` (the tombstone's mtime in
        ns; 0 when it never did). One ``lstat``: cheap enough for every call."""
        path = self.tombstone_path(folder)
        if path is None:
            return 0
        try:
            st = os.lstat(path)
        except OSError:
            return 0
        return st.st_mtime_ns if stat.S_ISREG(st.st_mode) else 0

    def tombstone_path(self, folder: str) -> str | None:
        """Where retention marks ``folder``'s losses (None for a name that is not a
        folder of this store)."""
        return os.path.join(self.root, folder, TOMBSTONE) if is_store_folder(folder) else None

    def exists(self, ref: str) -> bool:
        """Whether the snapshot a reference names is in the store (no read)."""
        try:
            loc = self.locate(ref)
        except SnapshotError:
            return False
        try:
            if stat.S_ISREG(os.lstat(loc.path).st_mode):
                return True
        except OSError:
            pass
        try:
            f = self._segment_folder(loc.conv_id)
            return f is not None and self._segments.has(f, loc.name)
        except OSError:
            return False

    def read_range(self, folder: str, name: str, offset: int, length: int) -> bytes:
        path = self._log_path(folder, name)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError as exc:
            raise SnapshotError(errno.ENOENT, f"{name} is no longer in the store") from exc
        try:
            return os.pread(fd, max(int(length), 0), max(int(offset), 0))
        finally:
            os.close(fd)

    def size(self, folder: str, name: str) -> int:
        path = self._log_path(folder, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return 0
        return st.st_size


def _read_nofollow(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        os.close(fd)
