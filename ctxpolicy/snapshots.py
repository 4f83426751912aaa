"""Snapshot stores: the full tool results, so compaction loses nothing recoverable.

Two stores are built in (registered as plugins like any other):

* ``local`` (default) — a directory: ``<root>/<conv_id>/step_003_<action>.json``
  (design A's layout). Writes are atomic (temp file in the same directory, then a
  hard link to the final name, which fails if the name exists — so concurrent
  writers never overwrite each other and never expose a partial file); files are
  0600 and directories 0700. ``conv_id`` and ``action`` are sanitized
  (:func:`safe_component`): nothing a caller passes can leave ``root``.
* ``fsspec`` — any fsspec URL (``s3://bucket/prefix``, ``memory://x``, ``file:///…``)
  so many workers share one store. Needs the ``[fsspec]`` extra.

References are ``ctxsnap://<conv_id>/<name>`` (``name`` without ``.json``); the
document's path is kept beside it for design A's ``[Full detail available at: …]``.
:func:`prune` applies the retention settings (``max_age_days``, ``max_total_mb``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import tempfile
import threading
import time
import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from ctxpolicy.components import SnapshotRef, SnapshotStore
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions

__all__ = [
    "FsspecStore",
    "LocalStore",
    "PruneReport",
    "SnapshotError",
    "dump_document",
    "parse_uri",
    "prune",
    "safe_component",
]

URI_SCHEME = "ctxsnap://"
MAX_CONV_ID_CHARS = 80
MAX_ACTION_CHARS = 48
_SAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_RE = re.compile(r"^step_\d{3,}_[A-Za-z0-9._-]+$")


class SnapshotError(OSError):
    """A snapshot could not be written or read (disk full, read-only, bad ref)."""


def safe_component(value: object, *, max_chars: int, hash_if_changed: bool) -> str:
    """Turn anything into one safe path component.

    Unicode is NFKC-normalized first (so full-width look-alikes such as ``．．／``
    become ``../`` and are then neutralized), every run of characters outside
    ``[A-Za-z0-9._-]`` becomes ``_``, leading dots are removed (no ``..``, no hidden
    files), and the result is bounded to ``max_chars``. When the value had to be
    changed (and ``hash_if_changed``) or was cut, a short hash of the original is
    appended so that two distinct values never share a directory.
    """
    raw = value if isinstance(value, str) else str(value)
    norm = unicodedata.normalize("NFKC", raw)
    safe = _SAFE_RE.sub("_", norm).lstrip(".")
    safe = safe.replace("..", "_")
    changed = safe != raw
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    if not safe:
        return f"_{digest}"
    if len(safe) > max_chars:
        return f"{safe[: max_chars - 11]}-{digest}"
    if changed and hash_if_changed:
        return f"{safe[: max_chars - 11]}-{digest}"
    return safe


def safe_conv_id(conv_id: object) -> str:
    return safe_component(conv_id, max_chars=MAX_CONV_ID_CHARS, hash_if_changed=True)


def safe_action(action: object) -> str:
    return safe_component(action or "tool", max_chars=MAX_ACTION_CHARS, hash_if_changed=False)


def base_name(step: int, action: object) -> str:
    try:
        n = max(int(step), 0)
    except (TypeError, ValueError):
        n = 0
    return f"step_{n:03d}_{safe_action(action)}"


def parse_uri(ref: str) -> tuple[str, str] | None:
    """``ctxsnap://<conv>/<name>`` → ``(conv, name)`` (both already safe), else None."""
    if not isinstance(ref, str) or not ref.startswith(URI_SCHEME):
        return None
    rest = ref[len(URI_SCHEME) :].strip().removesuffix(".json")
    conv, sep, name = rest.partition("/")
    if not sep or not conv or not name or "/" in name:
        return None
    if safe_conv_id(conv) != conv or not _NAME_RE.match(name):
        return None
    return conv, name


def dump_document(document: Mapping[str, Any]) -> bytes:
    """JSON bytes of a snapshot document (UTF-8; lone surrogates kept via escapes)."""
    text = json.dumps(document, ensure_ascii=False, default=str, indent=1)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them so they round-trip
        return json.dumps(document, ensure_ascii=True, default=str, indent=1).encode("ascii")


def _load(data: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"snapshot {where} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise SnapshotError(f"snapshot {where} is not a JSON object")
    return doc


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


_fallback_lock = threading.Lock()


class LocalStore(SnapshotStore):
    """Snapshots in a local directory tree, one JSON document per tool result."""

    name = "local"
    description = "JSON documents under <root>/<conv_id>/step_003_<action>.json (atomic, 0600)."
    Options = LocalOptions

    options: LocalOptions

    def __init__(self, options: ComponentOptions | None = None, *, root: str = "") -> None:
        super().__init__(options, root=root)
        self.root_path = Path(os.path.abspath(os.path.expanduser(root or ".ctxpolicy/snapshots")))
        self.root = str(self.root_path)

    # -- paths
    def _conv_dir(self, conv_id: str) -> Path:
        d = self.root_path / safe_conv_id(conv_id)
        self._check_inside(d)
        return d

    def _check_inside(self, p: Path) -> None:
        root = os.path.realpath(self.root_path)
        real = os.path.realpath(p)
        if os.path.commonpath([root, real]) != root:
            raise SnapshotError(errno.EACCES, f"snapshot path {p} escapes the store root {root}")

    def _mkdir(self, d: Path) -> None:
        mode = self.options.dir_mode
        for p in (self.root_path, d):
            try:
                p.mkdir(mode=mode, parents=True, exist_ok=True)
            except FileExistsError as exc:
                raise SnapshotError(errno.ENOTDIR, f"{p} exists and is not a directory") from exc

    def ref_for(self, conv_dir: str, name: str) -> SnapshotRef:
        path = self.root_path / conv_dir / f"{name}.json"
        return SnapshotRef(
            uri=f"{URI_SCHEME}{conv_dir}/{name}", path=str(path), conv_id=conv_dir, name=name
        )

    # -- write
    def write(
        self, conv_id: str, step: int, action: str, document: Mapping[str, Any]
    ) -> SnapshotRef:
        conv_dir = self._conv_dir(conv_id)
        self._mkdir(conv_dir)
        data = dump_document(document)
        base = base_name(step, action)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=conv_dir)
        try:
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.chmod(tmp, self.options.file_mode)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            return self._publish(conv_dir, base, tmp)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _publish(self, conv_dir: Path, base: str, tmp: str) -> SnapshotRef:
        """Give the complete temp file its final, unused name (``base``, ``base_2``, …)."""
        for i in range(1, 100_000):
            name = base if i == 1 else f"{base}_{i}"
            final = conv_dir / f"{name}.json"
            try:
                os.link(tmp, final)  # atomic, and fails if the name is taken
            except FileExistsError:
                continue
            except OSError as exc:
                if exc.errno not in (
                    errno.EPERM,
                    errno.ENOTSUP,
                    errno.EOPNOTSUPP,
                    errno.EXDEV,
                    errno.EMLINK,
                ):
                    raise
                if not self._publish_without_link(tmp, final):
                    continue
            return self.ref_for(conv_dir.name, name)
        raise SnapshotError(errno.EEXIST, f"no free snapshot name for {base} in {conv_dir}")

    def _publish_without_link(self, tmp: str, final: Path) -> bool:
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
    def resolve(self, ref: str) -> Path:
        parsed = parse_uri(ref)
        if parsed is not None:
            conv, name = parsed
            p = self.root_path / conv / f"{name}.json"
        else:
            if not isinstance(ref, str) or not ref or "\x00" in ref:
                raise SnapshotError(errno.ENOENT, f"not a snapshot reference: {ref!r}")
            p = Path(os.path.abspath(os.path.expanduser(ref)))
            if p.suffix != ".json":
                raise SnapshotError(errno.ENOENT, f"not a snapshot reference: {ref!r}")
        self._check_inside(p)
        return p

    def read(self, ref: str) -> dict[str, Any]:
        p = self.resolve(ref)
        try:
            data = p.read_bytes()
        except FileNotFoundError as exc:
            raise SnapshotError(errno.ENOENT, f"no snapshot {ref}") from exc
        return _load(data, str(p))

    def list(self, conv_id: str) -> list[SnapshotRef]:
        d = self._conv_dir(conv_id)
        if not d.is_dir():
            return []
        refs = []
        for p in d.iterdir():
            if p.suffix == ".json" and _NAME_RE.match(p.stem):
                refs.append(self.ref_for(d.name, p.stem))
        return sorted(refs, key=lambda r: _sort_key(r.name))


def _sort_key(name: str) -> tuple[int, str, int]:
    m = re.match(r"^step_(\d+)_(.*?)(?:_(\d+))?$", name)
    if not m:
        return (0, name, 0)
    return (int(m.group(1)), m.group(2), int(m.group(3) or 1))


# --------------------------------------------------------------------------- fsspec


class FsspecOptions(ComponentOptions):
    """Options of the ``fsspec`` snapshot store."""

    redact: bool = Field(default=False, description="Redact secrets in the stored observation too.")
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Passed to fsspec (credentials should come from the environment, "
        "not from policy files).",
    )


class FsspecStore(SnapshotStore):
    """Snapshots under any fsspec URL, same layout as ``local``.

    Writes go to a temporary name first and are then moved to the final name, so a
    reader never sees a partial document. Object stores have no atomic
    create-if-absent: two workers writing the *same* conv_id and step at the same
    instant may collide; give workers distinct conv_ids (the usual case).
    """

    name = "fsspec"
    description = "JSON documents under any fsspec URL (s3://, gcs://, memory://, file://)."
    Options = FsspecOptions

    options: FsspecOptions

    def __init__(self, options: ComponentOptions | None = None, *, root: str = "") -> None:
        super().__init__(options, root=root)
        try:
            import fsspec
        except ImportError as exc:  # pragma: no cover - extra not installed
            raise SnapshotError(
                errno.ENOPKG if hasattr(errno, "ENOPKG") else errno.ENOENT,
                "the `fsspec` snapshot store needs `pip install ctxpolicy[fsspec]`",
            ) from exc
        self.fs, path = fsspec.core.url_to_fs(
            root or "memory://ctxpolicy", **self.options.storage_options
        )
        self.base = path.rstrip("/")
        self.protocol = (
            self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        )
        self._lock = threading.Lock()

    def _url(self, path: str) -> str:
        return self.fs.unstrip_protocol(path)

    def _dir(self, conv: str) -> str:
        return f"{self.base}/{conv}"

    def ref_for(self, conv: str, name: str) -> SnapshotRef:
        path = f"{self._dir(conv)}/{name}.json"
        return SnapshotRef(
            uri=f"{URI_SCHEME}{conv}/{name}", path=self._url(path), conv_id=conv, name=name
        )

    def write(
        self, conv_id: str, step: int, action: str, document: Mapping[str, Any]
    ) -> SnapshotRef:
        conv = safe_conv_id(conv_id)
        d = self._dir(conv)
        data = dump_document(document)
        base = base_name(step, action)
        with contextlib.suppress(FileExistsError):
            self.fs.makedirs(d, exist_ok=True)
        tmp = f"{d}/.tmp-{uuid.uuid4().hex}.json"
        self.fs.pipe_file(tmp, data)
        try:
            with self._lock:
                for i in range(1, 100_000):
                    name = base if i == 1 else f"{base}_{i}"
                    final = f"{d}/{name}.json"
                    if self.fs.exists(final):
                        continue
                    self.fs.mv(tmp, final)
                    return self.ref_for(conv, name)
        finally:
            with contextlib.suppress(Exception):
                if self.fs.exists(tmp):
                    self.fs.rm(tmp)
        raise SnapshotError(errno.EEXIST, f"no free snapshot name for {base}")

    def _resolve(self, ref: str) -> str:
        parsed = parse_uri(ref)
        if parsed is not None:
            conv, name = parsed
            return f"{self._dir(conv)}/{name}.json"
        if not isinstance(ref, str) or "\x00" in ref:
            raise SnapshotError(errno.ENOENT, f"not a snapshot reference: {ref!r}")
        path = self.fs._strip_protocol(ref)
        parts = (
            path[len(self.base) :].strip("/").split("/") if path.startswith(self.base + "/") else []
        )
        if (
            len(parts) != 2
            or safe_conv_id(parts[0]) != parts[0]
            or not _NAME_RE.match(parts[1].removesuffix(".json"))
        ):
            raise SnapshotError(errno.EACCES, f"{ref!r} is not a snapshot of this store")
        return path

    def read(self, ref: str) -> dict[str, Any]:
        path = self._resolve(ref)
        try:
            data = self.fs.cat_file(path)
        except FileNotFoundError as exc:
            raise SnapshotError(errno.ENOENT, f"no snapshot {ref}") from exc
        return _load(data, self._url(path))

    def list(self, conv_id: str) -> list[SnapshotRef]:
        conv = safe_conv_id(conv_id)
        try:
            entries = self.fs.ls(self._dir(conv), detail=False)
        except FileNotFoundError:
            return []
        refs = []
        for p in entries:
            stem = str(p).rstrip("/").rsplit("/", 1)[-1]
            if stem.endswith(".json") and _NAME_RE.match(stem[:-5]):
                refs.append(self.ref_for(conv, stem[:-5]))
        return sorted(refs, key=lambda r: _sort_key(r.name))


# --------------------------------------------------------------------------- retention


@dataclass
class PruneReport:
    """What :func:`prune` removed (or would remove, with ``dry_run``)."""

    removed: list[str] = field(default_factory=list)
    removed_bytes: int = 0
    kept_files: int = 0
    kept_bytes: int = 0
    dry_run: bool = False


def prune(
    store_root: str | os.PathLike[str],
    max_age_days: float | None = None,
    max_total_mb: float | None = None,
    dry_run: bool = False,
    *,
    now: float | None = None,
) -> PruneReport:
    """Apply retention to a local store root.

    Removes snapshot files older than ``max_age_days``, then the oldest remaining
    ones until the total is at most ``max_total_mb``; directories left empty are
    removed. Only files that look like snapshots (``step_NNN_*.json`` and stale
    ``.tmp-*`` files older than an hour) under ``<root>/<conv>/`` are touched;
    symlinks are never followed.
    """
    report = PruneReport(dry_run=dry_run)
    root = Path(os.path.abspath(os.path.expanduser(store_root)))
    if not root.is_dir():
        return report
    now = time.time() if now is None else now
    files: list[tuple[float, int, Path]] = []
    for conv in root.iterdir():
        if conv.is_symlink() or not conv.is_dir():
            continue
        for p in conv.iterdir():
            if p.is_symlink() or not p.is_file():
                continue
            is_snap = p.suffix == ".json" and _NAME_RE.match(p.stem)
            is_stale_tmp = p.name.startswith(".tmp-")
            if not (is_snap or is_stale_tmp):
                continue
            st = p.stat()
            if is_stale_tmp and now - st.st_mtime < 3600:
                continue
            files.append((st.st_mtime, st.st_size, p))
    files.sort()
    doomed: list[tuple[float, int, Path]] = []
    keep: list[tuple[float, int, Path]] = []
    for item in files:
        mtime, _size, p = item
        too_old = max_age_days is not None and now - mtime > max_age_days * 86400
        (doomed if too_old or p.name.startswith(".tmp-") else keep).append(item)
    if max_total_mb is not None:
        limit = int(max_total_mb * 1024 * 1024)
        total = sum(s for _, s, _ in keep)
        while keep and total > limit:
            item = keep.pop(0)
            total -= item[1]
            doomed.append(item)
    for _mtime, size, p in doomed:
        report.removed.append(str(p))
        report.removed_bytes += size
        if not dry_run:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    report.kept_files = len(keep)
    report.kept_bytes = sum(s for _, s, _ in keep)
    if not dry_run:
        for conv in root.iterdir():
            if conv.is_dir() and not conv.is_symlink():
                with contextlib.suppress(OSError):
                    conv.rmdir()  # only succeeds when empty
    return report


@hookimpl
def ctxpolicy_register_snapshot_stores(register):  # type: ignore[no-untyped-def]
    register(LocalStore)
    register(FsspecStore)
