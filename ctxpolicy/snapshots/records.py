"""One snapshot as a record of a segment file: its bytes, and what reads them back.

A record is ``prefix · name · meta · body · trailer``:

* ``prefix`` — :data:`PREFIX` (22 bytes, little-endian): the magic ``CSR1`` (the body
  holds the observation) or ``CSR0`` (no body), the segment's 8-byte *nonce*, and
  the lengths of name (``uint16``), meta and body (``uint32`` each);
* ``name`` — the snapshot's name (``step_003_bash``), ASCII; an empty name is a
  *seal*: the segment is closed, and any record after it is void;
* ``meta`` — the document as compact JSON (UTF-8, lone surrogates kept with
  ``surrogatepass``), its ``observation`` written as ``0`` when the body holds it
  (so the keys keep their order);
* ``body`` — the observation's UTF-8 bytes (``surrogatepass``): written as they are,
  never JSON-escaped, so a tool result is encoded once, at memory speed;
* ``trailer`` — :data:`TRAILER`: the record's total length and ``\\nCSE``.

The nonce (random per segment, in its header) is what a reader resynchronises on
after a torn record: a tool output cannot forge a record boundary, since it cannot
know the nonce. A record is *whole* when its prefix has the segment's nonce, its
lengths stay within the file and its trailer is where the lengths say; there is no
checksum (one would cost more than the write itself at ``durability: flush``;
docs/snapshots.md says what is and is not detected).
"""

from __future__ import annotations

import errno
import json
import struct
from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import Any

from ctxpolicy.snapshots.document import dump_document, load_document
from ctxpolicy.snapshots.names import SnapshotError

__all__ = [
    "MAGIC_BODY",
    "MAGIC_META",
    "PREFIX",
    "TOOL_RESULT_KEYS",
    "TRAILER",
    "decode",
    "encode",
    "record",
    "seal",
]

PREFIX = struct.Struct("<4s8sHII")  # magic, nonce, name length, meta length, body length
TRAILER = struct.Struct("<I4s")  # total length, end mark
END = b"\nCSE"
MAGIC_BODY = b"CSR1"
MAGIC_META = b"CSR0"
#: Most bytes one record may have (its lengths are ``uint32``).
MAX_RECORD = 2**32 - 1

_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
if _c_make_encoder is not None:  # CPython: the C encoder, made once (no circular check:
    # a cycle is a RecursionError, and design A's writer takes over)
    _c_encode = _c_make_encoder(None, str, encode_basestring, None, ":", ",", False, False, True)

    def _meta_json(doc: Mapping[str, Any]) -> str:
        return "".join(_c_encode(doc, 0))

else:  # pragma: no cover - other interpreters
    _encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)

    def _meta_json(doc: Mapping[str, Any]) -> str:
        return _encoder.encode(doc)


#: The keys of the document ``add_tool_result`` writes when the call brings no
#: ``meta`` and the rendering no notes (``ToolResultProcessor._snapshot``), in order.
TOOL_RESULT_KEYS = (
    "step",
    "action",
    "phase",
    "action_intention",
    "action_reason",
    "thought",
    "action_input",
    "observation",
    "timestamp",
    "conv_id",
    "tool_call_id",
)


def _tool_result_meta(doc: dict[str, Any]) -> str | None:
    """``_meta_json`` of ``doc`` with its observation written as ``0``, for the common
    tool-result document (:data:`TOOL_RESULT_KEYS`, no phase/intention/reason/thought,
    strings where strings are usual); None for any other document.

    The same text the C encoder writes (keys and ``null``s written once, here, as
    constants; each string through the same ``encode_basestring``), in a third of its
    time: the compact encoder's separators are ``,`` and ``:``, an exact ``int`` is
    its ``repr``, and a nested value encodes alone as it does inside the document."""
    if tuple(doc) != TOOL_RESULT_KEYS:
        return None
    step, action, conv, call_id, stamp = (
        doc["step"],
        doc["action"],
        doc["conv_id"],
        doc["tool_call_id"],
        doc["timestamp"],
    )
    if (
        type(step) is not int
        or type(action) is not str
        or type(conv) is not str
        or type(call_id) is not str
        or type(stamp) is not str
        or doc["phase"] is not None
        or doc["action_intention"] is not None
        or doc["action_reason"] is not None
        or doc["thought"] is not None
    ):
        return None
    given = doc["action_input"]
    if type(given) is str:
        inp = encode_basestring(given)
    elif given is None:
        inp = "null"
    else:
        inp = _meta_json(given)
    return (
        f'{{"step":{int.__repr__(step)},"action":{encode_basestring(action)},"phase":null,'
        f'"action_intention":null,"action_reason":null,"thought":null,"action_input":{inp},'
        f'"observation":0,"timestamp":{encode_basestring(stamp)},'
        f'"conv_id":{encode_basestring(conv)},"tool_call_id":{encode_basestring(call_id)}}}'
    )


def encode(document: Mapping[str, Any]) -> tuple[bytes, bytes, bytes]:
    """``(magic, meta, body)`` of a document: one JSON encoding of the small fields,
    the observation's bytes as they are."""
    obs = document.get("observation")
    if type(obs) is str and type(document) is dict:
        magic, body = MAGIC_BODY, obs.encode("utf-8", "surrogatepass")
        try:
            fast = _tool_result_meta(document)
        except (ValueError, TypeError, RecursionError, OverflowError):
            fast = None  # the general path below meets the same value, and handles it
        if fast is not None:
            return magic, fast.encode("utf-8", "surrogatepass"), body
        doc = document.copy()
        doc["observation"] = 0
    else:
        doc, magic, body = dict(document), MAGIC_META, b""
    try:
        meta = _meta_json(doc).encode("utf-8", "surrogatepass")
    except (ValueError, TypeError, RecursionError, OverflowError):
        # what compact JSON cannot hold: design A's document writer (fields as text)
        if magic == MAGIC_BODY:
            doc["observation"] = obs
            magic, body = MAGIC_META, b""
        meta = dump_document(doc)
    return magic, meta, body


def record(nonce: bytes, name: str, magic: bytes, meta: bytes, body: bytes) -> bytes:
    """The bytes of one record (see the module docstring)."""
    raw = name.encode("ascii")
    total = PREFIX.size + len(raw) + len(meta) + len(body) + TRAILER.size
    if total > MAX_RECORD:
        raise SnapshotError(errno.EFBIG, f"snapshot {name} is larger than a record may be")
    return b"".join(
        (
            PREFIX.pack(magic, nonce, len(raw), len(meta), len(body)),
            raw,
            meta,
            body,
            TRAILER.pack(total, END),
        )
    )


_FRAME = PREFIX.size + TRAILER.size
_pack_prefix = PREFIX.pack
_pack_trailer = TRAILER.pack


def parts(
    nonce: bytes, name: str, magic: bytes, meta: bytes, body: bytes
) -> tuple[list[bytes], int]:
    """:func:`record` as the buffers of one ``writev`` (no copy of the body), and its
    length."""
    raw = name.encode("ascii")
    nmeta, nbody = len(meta), len(body)
    total = _FRAME + len(raw) + nmeta + nbody
    if total > MAX_RECORD:
        raise SnapshotError(errno.EFBIG, f"snapshot {name} is larger than a record may be")
    return [
        _pack_prefix(magic, nonce, len(raw), nmeta, nbody),
        raw,
        meta,
        body,
        _pack_trailer(total, END),
    ], total


def seal(nonce: bytes) -> bytes:
    """The record that closes a segment (an empty name, no meta, no body)."""
    total = PREFIX.size + TRAILER.size
    return PREFIX.pack(MAGIC_META, nonce, 0, 0, 0) + TRAILER.pack(total, END)


def decode(data: bytes, where: str) -> dict[str, Any]:
    """The document of one whole record's bytes (checked: magic, lengths, trailer)."""
    if len(data) < PREFIX.size + TRAILER.size:
        raise SnapshotError(errno.EIO, f"snapshot {where} is damaged (short record)")
    magic, _, nlen, mlen, blen = PREFIX.unpack_from(data)
    total = PREFIX.size + nlen + mlen + blen + TRAILER.size
    if (
        magic not in (MAGIC_BODY, MAGIC_META)
        or total != len(data)
        or TRAILER.unpack_from(data, total - TRAILER.size) != (total, END)
    ):
        raise SnapshotError(errno.EIO, f"snapshot {where} is damaged (torn record)")
    start = PREFIX.size + nlen
    meta = data[start : start + mlen]
    try:
        doc = json.loads(meta.decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        doc = load_document(meta, where)  # raises the store's error
    if not isinstance(doc, dict):
        raise SnapshotError(errno.EIO, f"snapshot {where} is not a JSON object")
    if magic == MAGIC_BODY:
        body = data[start + mlen : start + mlen + blen]
        try:
            doc["observation"] = body.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise SnapshotError(errno.EIO, f"snapshot {where} is damaged") from exc
    return doc
