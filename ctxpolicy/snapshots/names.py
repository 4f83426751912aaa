"""Names inside a snapshot store: conversation folders, document names, references.

Light on purpose (no I/O): the stores, the recall tools and the base class in
:mod:`ctxpolicy.components` all use it.

**Conversation folders.** :func:`conv_folder` maps a conversation id to its folder
name with an injective encoding (two distinct ids never share a folder):

* every code point is written as itself when it is one of ``[a-z0-9-]``, otherwise
  as its UTF-8 bytes (lone surrogates included, ``surrogatepass``), each as ``~`` plus
  two upper-case hex digits (``"Run/1"`` → ``~52un~2F1``). That is a prefix code, so
  the folder decodes back to exactly one id (:func:`folder_to_conv`); a folder never
  contains ``.``, ``/``, ``\\`` or a NUL, and never starts with ``.``;
* it is injective on case-insensitive file systems too: letters are written as
  themselves only in lower case, and a ``~`` is always followed by two hex digits;
* an id whose encoding would exceed :data:`MAX_SHORT_FOLDER` characters becomes
  ``<the first ≤ 80 characters of the encoding>=<sha-256 of the id, 64 hex>`` (the
  short form never contains ``=``);
* an id in ``[a-z0-9-]`` that ends in ``-`` plus ten hex digits gets its last ``-``
  escaped (``~2D``): that is the shape of the previous naming's hashed folders, so
  no folder of the new naming can be an old hashed folder of another id.

The previous naming (``[A-Za-z0-9._-]`` kept, anything else ``_``, a 10-hex hash
appended) was not injective. A folder written by it is still readable by the
application (``recall`` by URI or path, contained in the root, when it is a valid
old name), but the model's ``ctx_recall`` / ``ctx_search`` only ever see the
folder :func:`conv_folder` gives for the session's id. Ids made of ``[a-z0-9-]``
only (uuid hex, ``run-42``) have the same folder under both namings.

**Documents.** Snapshot names are ``step_<NNN>_<action>`` with an optional ``_<n>``
suffix; the history archive uses ``history_<NNNNNN>.jsonl`` segments and
``history.idx``. References are ``ctxsnap://<folder>/<name>`` and, for the history
archive, ``ctxsnap://<folder>/history`` (all of it), ``…/history#<n>`` (message
``n``, 1-based) or ``…/history#<a>-<b>``.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from dataclasses import dataclass

__all__ = [
    "HISTORY",
    "URI_SCHEME",
    "HistoryRef",
    "SnapshotError",
    "conv_folder",
    "folder_to_conv",
    "is_folder",
    "is_legacy_folder",
    "parse_history_ref",
    "parse_uri",
    "safe_action",
    "snapshot_uri",
]

URI_SCHEME = "ctxsnap://"
HISTORY = "history"
MAX_SHORT_FOLDER = 120
LONG_PREFIX = 80
MAX_ACTION_CHARS = 48
MAX_REF_CHARS = 4096

_VERBATIM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_OLD_HASH_RE = re.compile(r"-[0-9a-f]{10}$")
_SHORT_RE = re.compile(r"^(?:[a-z0-9-]|~[0-9A-F]{2})+$")
_LONG_RE = re.compile(r"^(?:[a-z0-9-]|~[0-9A-F]{2}){0,80}=[0-9a-f]{64}$")
_LEGACY_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,79}$")
_SAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")
NAME_RE = re.compile(r"^step_\d{3,20}_[A-Za-z0-9._-]{1,96}$")
SEGMENT_RE = re.compile(r"^history_(\d{6,})\.jsonl$")
INDEX_NAME = "history.idx"
#: Snapshot segments of the local store (:mod:`ctxpolicy.snapshots.segments`).
SNAP_SEGMENT_RE = re.compile(r"^snapshots_(\d{6,9})\.seg$")
_HIST_RE = re.compile(r"^history(?:#(\d{1,12})(?:-(\d{1,12}))?)?$")


class SnapshotError(OSError):
    """A snapshot could not be written or read (disk full, read-only, bad ref)."""


def _escape(ch: str) -> str:
    return "".join(f"~{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def conv_folder(conv_id: object) -> str:
    """The folder of a conversation id (injective; see the module docstring).

    Non-string ids are converted with ``str`` first (ids are meant to be strings).
    """
    raw = conv_id if isinstance(conv_id, str) else str(conv_id)
    parts = [ch if ch in _VERBATIM else _escape(ch) for ch in raw]
    if parts and _OLD_HASH_RE.search(raw) and all(ch in _VERBATIM for ch in raw):
        parts[-11] = "~2D"  # never the shape of an old hashed folder
    enc = "".join(parts) if parts else "~"  # "~" alone: the empty id (no escape is that short)
    if len(enc) <= MAX_SHORT_FOLDER:
        return enc
    prefix: list[str] = []
    used = 0
    for p in parts:
        if used + len(p) > LONG_PREFIX:
            break
        prefix.append(p)
        used += len(p)
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()
    return "".join(prefix) + "=" + digest


def folder_to_conv(folder: str) -> str | None:
    """The id a short-form folder encodes (None for the long form or a non-folder)."""
    if folder == "~":
        return ""
    if not _SHORT_RE.match(folder):
        return None
    out = bytearray()
    i = 0
    while i < len(folder):
        if folder[i] == "~":
            out.append(int(folder[i + 1 : i + 3], 16))
            i += 3
        else:
            out.extend(folder[i].encode())
            i += 1
    try:
        return out.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def is_folder(name: str) -> bool:
    """True for a folder name :func:`conv_folder` can produce (no I/O)."""
    return name == "~" or bool(_SHORT_RE.match(name) or _LONG_RE.match(name))


def is_legacy_folder(name: str) -> bool:
    """True for a folder name the previous naming could produce (read-only support)."""
    return bool(_LEGACY_RE.match(name)) and ".." not in name


def is_store_folder(name: str) -> bool:
    """A folder a store may read: new naming, or a well-formed old one."""
    return isinstance(name, str) and (is_folder(name) or is_legacy_folder(name))


def safe_action(action: object) -> str:
    """An action (tool) name as part of a file name: ``[A-Za-z0-9._-]``, ≤ 48 chars."""
    return _safe_action(action if isinstance(action, str) else str(action or "tool"))


@functools.lru_cache(maxsize=1024)  # a session names few tools, once per result
def _safe_action(raw: str) -> str:
    norm = unicodedata.normalize("NFKC", raw or "tool")
    safe = _SAFE_RE.sub("_", norm).lstrip(".").replace("..", "_")[:MAX_ACTION_CHARS]
    return safe or "tool"


def base_name(step: object, action: object) -> str:
    try:
        n = min(max(int(step), 0), 10**18)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        n = 0
    return f"step_{n:03d}_{safe_action(action)}"


def snapshot_uri(folder: str, name: str) -> str:
    """``ctxsnap://<folder>/<name>``: the reference of snapshot ``name`` of ``folder``."""
    return f"{URI_SCHEME}{folder}/{name}"


def parse_uri(ref: object) -> tuple[str, str] | None:
    """``ctxsnap://<folder>/<name>`` → ``(folder, name)`` when both are well-formed
    names of a snapshot document; None otherwise (no decoding of any kind)."""
    if not isinstance(ref, str) or len(ref) > MAX_REF_CHARS or not ref.startswith(URI_SCHEME):
        return None
    rest = ref[len(URI_SCHEME) :].removesuffix(".json")
    folder, sep, name = rest.partition("/")
    if not sep or not is_store_folder(folder) or not NAME_RE.match(name):
        return None
    return folder, name


@dataclass(frozen=True)
class HistoryRef:
    """A parsed history-archive reference: messages ``first``..``last`` (1-based,
    inclusive; ``None`` = to the end) of ``folder``'s archive."""

    folder: str
    first: int = 1
    last: int | None = None


def parse_history_ref(ref: object) -> HistoryRef | None:
    """``ctxsnap://<folder>/history[#n[-m]]`` → :class:`HistoryRef`, else None."""
    if not isinstance(ref, str) or len(ref) > MAX_REF_CHARS or not ref.startswith(URI_SCHEME):
        return None
    folder, sep, name = ref[len(URI_SCHEME) :].partition("/")
    m = _HIST_RE.match(name)
    if not sep or m is None or not is_folder(folder):
        return None
    if m.group(1) is None:
        return HistoryRef(folder)
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else first
    if first < 1 or last < first:
        return None
    return HistoryRef(folder, first, last)


def history_uri(folder: str, first: int | None = None, last: int | None = None) -> str:
    if first is None:
        return f"{URI_SCHEME}{folder}/{HISTORY}"
    if last is None or last == first:
        return f"{URI_SCHEME}{folder}/{HISTORY}#{first}"
    return f"{URI_SCHEME}{folder}/{HISTORY}#{first}-{last}"


def segment_name(n: int) -> str:
    return f"history_{n:06d}.jsonl"


def segment_file(n: int) -> str:
    """The file name of snapshot segment ``n``."""
    return f"snapshots_{n:06d}.seg"
