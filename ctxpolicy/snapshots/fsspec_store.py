"""The ``fsspec`` snapshot store: the ``local`` layout under any fsspec URL.

Registered (and re-exported) by :mod:`ctxpolicy.snapshots`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from ctxpolicy.components import SnapshotRef, SnapshotStore
from ctxpolicy.policy.models import ComponentOptions
from ctxpolicy.snapshots._common import (
    PROBES,
    SAME_SIZE_SLACK,
    Names,
    check_log,
    located,
    same_document_data,
    sort_key,
)
from ctxpolicy.snapshots.document import dump_document as _dump
from ctxpolicy.snapshots.document import load_document as _load
from ctxpolicy.snapshots.names import (
    NAME_RE,
    SnapshotError,
    base_name,
    conv_folder,
    is_store_folder,
    snapshot_uri,
)

__all__ = ["FsspecOptions", "FsspecStore"]


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
    instant may collide; give workers distinct conv_ids (the usual case). History
    logs are appended with the file system's append mode where it has one, else
    the current segment (at most ``max_snapshot_bytes``) is rewritten. Retention:
    use the bucket's lifecycle rules (``ctxpolicy snapshots prune`` is local only).
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
                errno.ENOENT, "the `fsspec` snapshot store needs `pip install ctxpolicy[fsspec]`"
            ) from exc
        self.fs, path = fsspec.core.url_to_fs(
            root or "memory://ctxpolicy", **self.options.storage_options
        )
        protocol = self.fs.protocol
        self.protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
        base = posixpath.normpath(path) if path else ""
        if "file" in self.protocols:
            base = os.path.realpath(base)
        self.base = base.rstrip("/")
        self.protocol = self.protocols[0]
        self._lock = threading.Lock()
        self._names = Names()

    def _url(self, path: str) -> str:
        return str(self.fs.unstrip_protocol(path))

    def _dir(self, folder: str) -> str:
        if not is_store_folder(folder):
            raise SnapshotError(errno.EACCES, "not a conversation folder of this store")
        return f"{self.base}/{folder}"

    def ref_for(self, folder: str, name: str) -> SnapshotRef:
        path = f"{self._dir(folder)}/{name}.json"
        return SnapshotRef(
            uri=snapshot_uri(folder, name), path=self._url(path), conv_id=folder, name=name
        )

    def write(
        self, conv_id: str, step: int, action: str, document: Mapping[str, Any]
    ) -> SnapshotRef:
        folder = conv_folder(conv_id)
        d = self._dir(folder)
        data = _dump(document)
        base = base_name(step, action)
        with contextlib.suppress(FileExistsError):
            self.fs.makedirs(d, exist_ok=True)
        tmp = f"{d}/.tmp-{uuid.uuid4().hex}.json"
        self.fs.pipe_file(tmp, data)
        try:
            with self._lock:
                n = self._names.first(folder, base)
                if n > 1:  # a redo in this process: its first attempt's name if the same
                    name = Names.name(base, n - 1)
                    if self._same(f"{d}/{name}.json", data):
                        return self.ref_for(folder, name)
                probes = 0
                for _ in range(16):
                    name = Names.name(base, n)
                    final = f"{d}/{name}.json"
                    if self.fs.exists(final):
                        if self._same(final, data):
                            # the same document written again (a call redone after a
                            # crash between the write and the state commit): same ref
                            self._names.taken(folder, base, n)
                            return self.ref_for(folder, name)
                        # one next name (a resumed process meets its predecessor's
                        # files in order), then a time-based jump: O(1) attempts
                        probes += 1
                        n = n + 1 if probes <= PROBES else self._names.collided(n)
                        continue
                    self.fs.mv(tmp, final)
                    self._names.taken(folder, base, n)
                    return self.ref_for(folder, name)
        finally:
            with contextlib.suppress(Exception):
                if self.fs.exists(tmp):
                    self.fs.rm(tmp)
        raise SnapshotError(errno.EEXIST, f"no free snapshot name for {base}")

    def _same(self, final: str, data: bytes) -> bool:
        """Whether ``final`` holds the document ``data`` but for its write time (sizes
        compared first: a different document is rarely read)."""
        try:
            size = self.fs.size(final)
            if size is None or abs(int(size) - len(data)) > SAME_SIZE_SLACK:
                return False
            return same_document_data(self.fs.cat_file(final), data)
        except (OSError, ValueError, TypeError):
            return False

    def locate(self, ref: str) -> SnapshotRef:
        """Resolve a ``ctxsnap://`` URI or a URL/path of this store to its canonical
        ``(folder, name)``: protocol checked, ``..`` collapsed *before* the prefix
        check; nothing is percent-decoded (names that need it are not ours)."""
        return self.ref_for(*located(ref, self._below_base))

    def _below_base(self, ref: str) -> list[str]:
        """The pieces of URL/path ``ref`` below the store's base (none: not below)."""
        scheme, sep, _ = ref.partition("://")
        if sep and scheme not in self.protocols:
            raise SnapshotError(errno.EACCES, "not a snapshot of this store")
        path = str(self.fs._strip_protocol(ref))
        norm = posixpath.normpath(path)
        if "file" in self.protocols:  # a local file system: symlinks resolve too
            norm = os.path.realpath(norm)
        prefix = self.base + "/"
        rest = norm[len(prefix) :] if norm.startswith(prefix) else ""
        return rest.split("/") if rest else []

    def read(self, ref: str) -> dict[str, Any]:
        loc = self.locate(ref)
        path = f"{self._dir(loc.conv_id)}/{loc.name}.json"
        try:
            data = self.fs.cat_file(path)
        except FileNotFoundError as exc:
            raise SnapshotError(errno.ENOENT, f"no snapshot {loc.uri}") from exc
        return _load(data, loc.uri)

    def list(self, conv_id: str) -> list[SnapshotRef]:
        folder = conv_folder(conv_id)
        try:
            entries = self.fs.ls(self._dir(folder), detail=False)
        except FileNotFoundError:
            return []
        refs = []
        for p in entries:
            stem = str(p).rstrip("/").rsplit("/", 1)[-1]
            if stem.endswith(".json") and NAME_RE.match(stem[:-5]):
                refs.append(self.ref_for(folder, stem[:-5]))
        return sorted(refs, key=lambda r: sort_key(r.name))

    # -- append-only logs (history archive)
    def _log(self, folder: str, name: str) -> str:
        check_log(folder, name)
        return f"{self._dir(folder)}/{name}"

    def append(self, folder: str, name: str, data: bytes) -> int:
        path = self._log(folder, name)
        with self._lock:
            with contextlib.suppress(FileExistsError):
                self.fs.makedirs(self._dir(folder), exist_ok=True)
            offset = self.size(folder, name)
            try:
                with self.fs.open(path, "ab") as fh:
                    fh.write(data)
            except (NotImplementedError, ValueError, OSError):
                old = self.fs.cat_file(path) if offset else b""
                tmp = f"{self._dir(folder)}/.tmp-{uuid.uuid4().hex}"
                self.fs.pipe_file(tmp, old + data)
                self.fs.mv(tmp, path)
        return offset

    def read_range(self, folder: str, name: str, offset: int, length: int) -> bytes:
        path = self._log(folder, name)
        start = max(int(offset), 0)
        try:
            return bytes(self.fs.cat_file(path, start=start, end=start + max(int(length), 0)))
        except FileNotFoundError as exc:
            raise SnapshotError(errno.ENOENT, f"{name} is no longer in the store") from exc

    def size(self, folder: str, name: str) -> int:
        path = self._log(folder, name)
        try:
            return int(self.fs.size(path) or 0)
        except FileNotFoundError:
            return 0
