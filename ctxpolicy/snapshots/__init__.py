"""Snapshot stores and what reads them back (a built-in plugin module).

* :mod:`.local` — the ``local`` store (a directory, 0600/0700: segments or files);
* :mod:`.segments` — the local store's segment files (one append per tool result);
* :mod:`.records` — one snapshot as a record of a segment (framing, encoding);
* :mod:`.fsspec_store` — the ``fsspec`` store (object stores, many workers);
* :mod:`._common` — what both stores share (reference checks, names, sort order);
* :mod:`.names` — the store's naming rules: conversation folders, snapshot names, URIs;
* :mod:`.document` — the snapshot document (design A's JSON) written and read;
* :mod:`.retention` — size and age limits of a local store, swept incrementally;
* :mod:`.lost` — references retention took: a ``data.lost`` event, then uncited;
* :mod:`.archive` — the append-only history archive of dropped messages;
* :mod:`.recall` — ``ctx_recall`` / ``ctx_search``: the model reads snapshots back;
* :mod:`.streaming` — the ``ctx_recall`` answer read as a stream (bounded memory).

This module registers the two stores through ``ctxpolicy_register_snapshot_stores``
like any third-party plugin, and re-exports the names ``ctxpolicy.snapshots`` had
when it was one module.
"""

from __future__ import annotations

from ctxpolicy.plugins import hookimpl
from ctxpolicy.snapshots.document import dump_document
from ctxpolicy.snapshots.fsspec_store import FsspecOptions, FsspecStore
from ctxpolicy.snapshots.local import LocalOptions, LocalStore
from ctxpolicy.snapshots.names import SnapshotError, parse_uri
from ctxpolicy.snapshots.retention import PruneReport, prune, sweeper_for

__all__ = [
    "FsspecOptions",
    "FsspecStore",
    "LocalOptions",
    "LocalStore",
    "PruneReport",
    "SnapshotError",
    "dump_document",
    "parse_uri",
    "prune",
    "sweeper_for",
]


@hookimpl
def ctxpolicy_register_snapshot_stores(register):  # type: ignore[no-untyped-def]
    register(LocalStore)
    register(FsspecStore)
