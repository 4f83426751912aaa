"""Segment files of the local store: one append per tool result.

A conversation's snapshots are records (:mod:`ctxpolicy.snapshots.records`) appended
to ``<folder>/snapshots_000001.seg``, ``…_000002.seg``, …: a segment starts with a
header (:data:`HEADER_LEN` bytes: a version and its random 8-byte nonce) and is
closed by a *seal* record once it holds ``max_bytes`` (1 MiB by default); the next
one is created then. The name of a snapshot (``step_003_bash``) is in its record;
the reference handed out is ``ctxsnap://<folder>/<name>`` as before, and is
resolved through an index each process builds from the records' prefixes (read
once per conversation, then kept up to date incrementally).

**One write per result, no lock.** A segment is opened once with ``O_APPEND`` and
kept open (at most :data:`MAX_OPEN` per store, least recently used closed first).
A record is written with exactly one ``write`` (plus ``fsync`` at ``durability:
fsync``): on a local file system, appends of one ``write`` each never interleave
(the kernel holds the file's lock for the whole write), so records of several
processes follow each other whole. After the write the file position (one
``lseek``) says where the record landed. When that is where this process expected
the end of the segment, nobody else appended since: the index was complete, and
the name (chosen from it before the write) is the conversation's only one. When
someone else appended meanwhile, the records between are read first (they are
whole: they precede ours) and the rules settle it:

* *first wins*: when two records carry one name, the earlier in (segment, offset)
  order is the snapshot; a writer whose record came second writes it again under
  the next free name (or, when the earlier one holds the same document, hands out
  that name);
* *nothing after a seal*: a record that lands after a seal is void (a writer that
  had not seen the seal writes it again in the next segment). Since a seal is
  written before the next segment exists, (segment, offset) order is the order in
  time, and first-wins means first written.

So the only lock-like step is the creation of a segment (``O_EXCL``: one process
creates it and writes its header; another that finds it waits for the header).
A record is written with one ``writev`` of its parts (prefix, name, meta, the
observation's bytes, trailer): one system call, no copy of the body.

**Torn records.** A crash in the middle of a write (or a short write: a full disk)
leaves a record whose trailer is missing; later appends follow it. A reader skips
it by searching the segment for the next prefix with the segment's nonce (a tool
output cannot contain it) whose record is whole. Nothing is ever rewritten:
older records stay exactly as they were.

**Retention** removes whole segments (:mod:`ctxpolicy.snapshots.retention`); the
newest segment of a conversation written in the last hour is never taken by the
size limit. A writer whose segment was removed meanwhile notices it before its next
write once it has been idle for :data:`REVALIDATE_S` (one ``fstat``): it starts
a new segment.

Local file systems only: ``O_APPEND`` is not atomic across NFS clients (use the
``fsspec`` store to share a store between machines).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ctxpolicy.snapshots import records
from ctxpolicy.snapshots.names import NAME_RE, SNAP_SEGMENT_RE, SnapshotError, segment_file

__all__ = ["HEADER_LEN", "Folder", "Segments"]

_HEADER_TAG = b"ctxpolicy-snapshots 1 "
HEADER_LEN = len(_HEADER_TAG) + 16 + 1
DEFAULT_SEGMENT_BYTES = 1 << 20
#: Most segment files a store keeps open (least recently written closed first).
MAX_OPEN = 64
#: Most conversations whose index a store keeps in memory.
MAX_FOLDERS = 1024
#: A segment not written for this long is checked (one ``fstat``) before the next write.
REVALIDATE_S = 1.0
#: Most writes of one snapshot (each lost name race or seal costs one).
ATTEMPTS = 64
_HEAD_READ = records.PREFIX.size + 256
_RESYNC_CHUNK = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _write_joined(fd: int, bufs: list[bytes]) -> int:  # pragma: no cover - not POSIX
    """``write`` of the joined buffers (where there is no ``writev``)."""
    return os.write(fd, b"".join(bufs))


#: One system call for the buffers of a record.
_writev = getattr(os, "writev", _write_joined)

_NO_NAME: Any = object()

Loc = tuple[int, int, int]  # segment, offset, length


@dataclass(eq=False, slots=True)
class _Seg:
    nonce: bytes | None
    end: int = HEADER_LEN  # indexed up to here
    sealed: bool = False


@dataclass(eq=False, slots=True)
class Folder:
    """One conversation's index and writer state (guarded by ``lock``)."""

    dir: str
    names: dict[str, Loc | None] = field(default_factory=dict)  # None: a 0.1 file
    segs: dict[int, _Seg] = field(default_factory=dict)
    cur: int = 0
    fd: int | None = None
    used: float = 0.0
    next: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _name(base: str, n: int) -> str:
    return base if n == 1 else f"{base}_{n}"


class Segments:
    """The segment files of one local store (thread-safe)."""

    def __init__(
        self,
        *,
        file_mode: int = 0o600,
        dir_mode: int = 0o700,
        fsync: bool = False,
        max_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        self.file_mode = file_mode
        self.dir_mode = dir_mode
        self.fsync = fsync
        self.max_bytes = max(int(max_bytes), 4096)
        self.folders: dict[str, Folder] = {}
        self._lock = threading.Lock()
        self._open: dict[str, Folder] = {}

    # ------------------------------------------------------------------ folders
    def folder(self, folder: str, path: str) -> Folder:
        """The index of ``folder`` (at ``path``, checked by the caller), built on first use."""
        f = self.folders.get(folder)
        if f is not None and f.dir == path:
            return f
        f = Folder(path)
        with f.lock:
            self._rebuild(f)
        with self._lock:
            if len(self.folders) >= MAX_FOLDERS:
                for key, old in list(self.folders.items())[: MAX_FOLDERS // 4]:
                    if old.lock.acquire(blocking=False):
                        try:
                            self._close_fd(key, old)
                            del self.folders[key]
                        finally:
                            old.lock.release()
            return self.folders.setdefault(folder, f)

    def forget(self) -> None:
        """Drop every index and close every file (after retention removed segments)."""
        with self._lock:
            folders = list(self.folders.items())
            self.folders = {}
        for key, f in folders:
            with f.lock:
                self._close_fd(key, f)

    close = forget

    def close_files(self) -> None:
        """Close every open segment, keep the indexes (after a retention sweep: a
        writer reopens its segment, or starts a new one when it went)."""
        with self._lock:
            folders = list(self.folders.items())
        for key, f in folders:
            with f.lock:
                self._close_fd(key, f)

    def _close_fd(self, key: str, f: Folder) -> None:
        if f.fd is not None:
            with contextlib.suppress(OSError):
                os.close(f.fd)
            f.fd = None
        self._open.pop(key, None)

    def _rebuild(self, f: Folder) -> None:
        """Index ``f`` from the directory: 0.1 files, then every segment's records."""
        if f.fd is not None:
            with contextlib.suppress(OSError):
                os.close(f.fd)
            f.fd = None
        f.names, f.segs, f.cur, f.next = {}, {}, 0, {}
        self._refresh(f)

    def _refresh(self, f: Folder) -> None:
        """Catch up with what others wrote: new 0.1 files, new segments, new records."""
        try:
            with os.scandir(f.dir) as it:
                entries = [(e.name, e.is_file(follow_symlinks=False)) for e in it]
        except OSError:
            entries = []
        numbers = []
        for name, is_file in entries:
            if not is_file:
                continue
            m = SNAP_SEGMENT_RE.match(name)
            if m:
                numbers.append(int(m.group(1)))
            elif name.endswith(".json") and NAME_RE.match(name[:-5]):
                f.names.setdefault(name[:-5], None)
        for n in sorted(numbers):
            seg = f.segs.get(n)
            if seg is None or not seg.sealed:
                self._scan(f, n)
        if numbers:
            f.cur = max(f.cur, *numbers)

    # ------------------------------------------------------------------ scanning
    def _scan(self, f: Folder, n: int, fd: int | None = None, upto: int | None = None) -> None:
        """Index the records of segment ``n`` from where the index stopped."""
        own = fd is None
        if own:
            try:
                fd = os.open(
                    os.path.join(f.dir, segment_file(n)), os.O_RDONLY | _NOFOLLOW | _CLOEXEC
                )
            except OSError:
                return
        assert fd is not None
        try:
            seg = f.segs.get(n)
            if seg is None or seg.nonce is None:
                head = os.pread(fd, HEADER_LEN, 0)
                nonce = _parse_header(head)
                if nonce is None:
                    if len(head) == HEADER_LEN or not head.startswith(_HEADER_TAG[: len(head)]):
                        f.segs[n] = _Seg(None, sealed=True)  # not a segment: never used
                    return  # being created: its header is not written yet
                seg = f.segs[n] = _Seg(nonce)
            size = os.fstat(fd).st_size if upto is None else upto
            assert seg.nonce is not None
            off = seg.end
            while off < size and not seg.sealed:
                whole = _whole(fd, seg.nonce, off, size)
                if whole is None:
                    nxt = _resync(fd, seg.nonce, off + 1, size)
                    if nxt is None:
                        break  # a torn tail, or a record being written: look again later
                    off = nxt
                    continue
                total, name = whole
                if not name:
                    seg.sealed = True
                else:
                    f.names.setdefault(name, (n, off, total))
                off += total
            seg.end = off
        finally:
            if own:
                os.close(fd)

    # ------------------------------------------------------------------ write
    def write(self, f: Folder, key: str, base: str, magic: bytes, meta: bytes, body: bytes) -> str:
        """Append one snapshot to ``f``'s current segment; its name."""
        size = len(meta) + len(body)
        with f.lock:
            for _ in range(ATTEMPTS):
                fd = f.fd
                seg = f.segs.get(f.cur)
                now = time.monotonic()
                if (  # the fast path: an open segment, used a moment ago, with room
                    fd is None
                    or seg is None
                    or now - f.used >= REVALIDATE_S
                    or (seg.end > HEADER_LEN and seg.end + size > self.max_bytes)
                ):
                    fd = self._writable(f, key, size)
                    seg = f.segs[f.cur]
                f.used = now
                n = f.next.get(base, 1)
                name = base if n == 1 else f"{base}_{n}"
                if n > 1 or name in f.names:
                    n, same = self._choose(f, base, magic, meta, body)
                    name = _name(base, n)
                    if same:
                        return name
                assert seg.nonce is not None
                bufs, length = records.parts(seg.nonce, name, magic, meta, body)
                written = _writev(fd, bufs)  # one system call: the record stays whole
                if written != length:  # a torn record: readers skip it
                    self._close_fd(key, f)
                    raise SnapshotError(errno.ENOSPC, f"short write of snapshot {name}")
                if self.fsync:
                    os.fsync(fd)
                end = os.lseek(fd, 0, os.SEEK_CUR)
                off = end - length
                loc = (f.cur, off, length)
                if off == seg.end:  # nobody else appended: the index was complete
                    seg.end = end
                    f.names[name] = loc
                else:  # read what others appended first (whole: it precedes ours)
                    self._scan(f, f.cur, fd, end)
                    if f.names.get(name) != loc:
                        if seg.sealed:
                            self._close_fd(key, f)  # void after a seal: next segment
                            continue
                        if self._same(f, name, magic, meta, body):
                            return name  # the earlier record of the same document
                        continue  # name lost: the next one
                f.next[base] = n + 1
                return name
        raise SnapshotError(errno.EEXIST, f"no free snapshot name for {base}")

    def _choose(
        self, f: Folder, base: str, magic: bytes, meta: bytes, body: bytes
    ) -> tuple[int, bool]:
        """The first free number for ``base``; or ``(n, True)`` when name ``n`` (the
        last taken for it) already holds this document (a call redone)."""
        n = f.next.get(base, 1)
        names = f.names
        while _name(base, n) in names:
            n += 1
        if n > 1 and self._same(f, _name(base, n - 1), magic, meta, body):
            return n - 1, True
        return n, False

    def _same(self, f: Folder, name: str, magic: bytes, meta: bytes, body: bytes) -> bool:
        """Whether snapshot ``name`` holds this document but for its ``timestamp``."""
        try:
            data = self._record(f, name, head_only=False)
            old = None if data is None else records.decode(data, name)
            new = records.decode(
                records.record(b"\0" * 8, "x", magic, meta, body), "the new snapshot"
            )
        except (OSError, ValueError):
            return False
        if old is None:
            return False
        old.pop("timestamp", None)
        new.pop("timestamp", None)
        return bool(old == new)

    def _writable(self, f: Folder, key: str, size: int) -> int:
        """The open, unsealed current segment of ``f`` with room for ``size`` bytes."""
        fd = f.fd
        now = time.monotonic()
        if fd is not None and now - f.used >= REVALIDATE_S:
            try:
                gone = os.fstat(fd).st_nlink == 0
            except OSError:
                gone = True
            if gone:  # retention removed it: start again from the directory
                self._close_fd(key, f)
                self._rebuild(f)
                fd = None
        f.used = now
        for _ in range(ATTEMPTS):
            if fd is None:
                fd = self._open_current(f, key)
            seg = f.segs[f.cur]
            if seg.end <= HEADER_LEN or seg.end + size <= self.max_bytes:
                return fd
            self._seal(f, key, fd)
            fd = None
        raise SnapshotError(errno.EMFILE, f"no usable snapshot segment in {f.dir}")

    def _seal(self, f: Folder, key: str, fd: int) -> None:
        seg = f.segs[f.cur]
        assert seg.nonce is not None
        os.write(fd, records.seal(seg.nonce))
        if self.fsync:
            os.fsync(fd)
        self._scan(f, f.cur, fd, os.lseek(fd, 0, os.SEEK_CUR))
        seg.sealed = True
        self._close_fd(key, f)

    def _open_current(self, f: Folder, key: str) -> int:
        n = f.cur or 1
        for _ in range(ATTEMPTS):
            seg = f.segs.get(n)
            if seg is None or seg.nonce is None:
                self._create(f, n)
                seg = f.segs.get(n)
                if seg is None:  # being created by another process
                    time.sleep(0.001)
                    continue
            if seg.nonce is None or seg.sealed:
                n += 1
                continue
            flags = os.O_RDWR | os.O_APPEND | _NOFOLLOW | _CLOEXEC  # read: the gap check
            try:
                fd = os.open(os.path.join(f.dir, segment_file(n)), flags)
            except FileNotFoundError:  # retention took it: index the folder again
                self._rebuild(f)
                n = f.cur or 1
                continue
            if _parse_header(os.pread(fd, HEADER_LEN, 0)) != seg.nonce:  # made anew
                os.close(fd)
                self._rebuild(f)
                n = f.cur or 1
                continue
            self._scan(f, n, fd)
            if seg.sealed:
                os.close(fd)
                n += 1
                continue
            f.cur, f.fd = n, fd
            self._track(key, f)
            return fd
        raise SnapshotError(errno.EMFILE, f"no usable snapshot segment in {f.dir}")

    def _track(self, key: str, f: Folder) -> None:
        with self._lock:
            self._open[key] = f
            if len(self._open) <= MAX_OPEN:
                return
            victims = sorted(self._open.items(), key=lambda kv: kv[1].used)
        for vkey, v in victims:
            if v is f or not v.lock.acquire(blocking=False):
                continue
            try:
                self._close_fd(vkey, v)
            finally:
                v.lock.release()
            break

    def _create(self, f: Folder, n: int) -> None:
        """Segment ``n`` of ``f`` with its header, unless another process was first
        (``O_EXCL``); a segment whose header is not written yet is waited for."""
        path = os.path.join(f.dir, segment_file(n))
        if not os.path.lexists(f.dir):
            os.mkdir(f.dir, self.dir_mode)
        if not stat.S_ISDIR(os.lstat(f.dir).st_mode):
            raise SnapshotError(errno.EACCES, "a conversation folder may not be a symlink")
        nonce = os.urandom(8)
        header = _HEADER_TAG + nonce.hex().encode("ascii") + b"\n"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
        try:
            fd = os.open(path, flags, self.file_mode)
        except FileExistsError:
            for _ in range(200):  # the other writer writes its header at once
                self._scan(f, n)
                if n in f.segs:
                    return
                time.sleep(0.0005)
            f.segs[n] = _Seg(None, sealed=True)  # never completed: skipped
            return
        try:
            if os.write(fd, header) != len(header):
                raise SnapshotError(errno.ENOSPC, f"short write of {path}")
            os.fchmod(fd, self.file_mode)  # exact, whatever the umask
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if self.fsync:
            dfd = os.open(f.dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        f.segs[n] = _Seg(nonce)

    # ------------------------------------------------------------------ read
    def lookup(self, f: Folder, name: str) -> Loc | Any | None:
        """Where ``name`` is: a location, None (a 0.1 file), or :data:`_NO_NAME`."""
        with f.lock:
            return self._locate(f, name)

    def _locate(self, f: Folder, name: str) -> Loc | Any | None:
        loc = f.names.get(name, _NO_NAME)
        if loc is _NO_NAME:
            self._refresh(f)
            loc = f.names.get(name, _NO_NAME)
        return loc

    def has(self, f: Folder, name: str) -> bool:
        """Whether ``name`` is a record of ``f`` whose segment is still there (reads
        its prefix only)."""
        with f.lock:
            return self._record(f, name, head_only=True) is not None

    def read(self, f: Folder, name: str) -> dict[str, Any] | None:
        """The document of record ``name``; None when ``name`` is no record."""
        with f.lock:
            data = self._record(f, name, head_only=False)
            return None if data is None else records.decode(data, name)

    def _record(self, f: Folder, name: str, *, head_only: bool) -> bytes | None:
        """Record ``name``'s bytes (its prefix only with ``head_only``); None when it
        is no record. An index that outlived its segment (retention, a segment made
        anew) is rebuilt once."""
        for _ in range(2):
            loc = self._locate(f, name)
            if loc is None or loc is _NO_NAME:
                return None
            n, off, length = loc
            data = self._read_record(f, n, off, _HEAD_READ if head_only else length, name)
            if data is not None:
                return data
            self._rebuild(f)
        return None

    def _read_record(self, f: Folder, n: int, off: int, length: int, name: str) -> bytes | None:
        info = f.segs.get(n)
        try:
            fd = os.open(os.path.join(f.dir, segment_file(n)), os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            nonce = _parse_header(os.pread(fd, HEADER_LEN, 0))
            if info is None or nonce != info.nonce:
                return None
            data = os.pread(fd, length, off)
        finally:
            os.close(fd)
        head = data[: records.PREFIX.size]
        if len(head) < records.PREFIX.size:
            return None
        _, got, nlen, _, _ = records.PREFIX.unpack(head)
        if got != nonce or data[records.PREFIX.size : records.PREFIX.size + nlen] != name.encode():
            return None
        return data

    def names(self, f: Folder) -> list[tuple[str, bool]]:
        """``(name, is_record)`` of every snapshot of ``f`` (records and 0.1 files)."""
        with f.lock:
            self._refresh(f)
            return [(k, v is not None) for k, v in f.names.items()]


def _parse_header(head: bytes) -> bytes | None:
    if len(head) != HEADER_LEN or not head.startswith(_HEADER_TAG) or head[-1:] != b"\n":
        return None
    try:
        return bytes.fromhex(head[len(_HEADER_TAG) : -1].decode("ascii"))
    except ValueError:
        return None


def _whole(fd: int, nonce: bytes, off: int, size: int) -> tuple[int, str] | None:
    """``(length, name)`` of the whole record at ``off``; None when it is not one."""
    head = os.pread(fd, _HEAD_READ, off)
    if len(head) < records.PREFIX.size:
        return None
    magic, got, nlen, mlen, blen = records.PREFIX.unpack_from(head)
    if got != nonce or magic not in (records.MAGIC_BODY, records.MAGIC_META):
        return None
    total = records.PREFIX.size + nlen + mlen + blen + records.TRAILER.size
    if off + total > size or records.PREFIX.size + nlen > len(head):
        return None
    trailer = os.pread(fd, records.TRAILER.size, off + total - records.TRAILER.size)
    if len(trailer) != records.TRAILER.size:
        return None
    if records.TRAILER.unpack(trailer) != (total, records.END):
        return None
    raw = head[records.PREFIX.size : records.PREFIX.size + nlen]
    try:
        name = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    if name and not NAME_RE.match(name):
        return None
    return total, name


def _resync(fd: int, nonce: bytes, start: int, size: int) -> int | None:
    """The offset of the next whole record at or after ``start`` (None: none)."""
    pos = start
    overlap = records.PREFIX.size
    while pos < size:
        chunk = os.pread(fd, min(_RESYNC_CHUNK, size - pos), pos)
        if not chunk:
            return None
        i = chunk.find(nonce)
        while i != -1:
            cand = pos + i - 4
            if cand >= start and _whole(fd, nonce, cand, size) is not None:
                return cand
            i = chunk.find(nonce, i + 1)
        if len(chunk) <= overlap:
            return None
        pos += len(chunk) - overlap
    return None
