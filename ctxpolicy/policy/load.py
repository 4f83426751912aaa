"""Read a policy file (YAML or TOML) into plain Python data with source positions.

This module reads the bytes (regular files only, :mod:`ctxpolicy.policy.readfile`),
tells the format and dispatches: YAML to :mod:`ctxpolicy.policy.load_yaml`, TOML to
:mod:`ctxpolicy.policy.load_toml`; nothing constructs objects from the file.

Limits (each a diagnostic): :data:`MAX_BYTES`, :data:`~ctxpolicy.policy.source.MAX_DEPTH`,
:data:`MAX_NODES` (alias expansions included), 64-bit integers.

Public surface: :class:`LoadedDocument`, :func:`load_document` (:class:`SourceMap` and the
number checks both readers share live in :mod:`ctxpolicy.policy.source`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ctxpolicy.policy.diagnostics import Diagnostic, make
from ctxpolicy.policy.load_yaml import MAX_NODES, load_yaml
from ctxpolicy.policy.readfile import MAX_BYTES, decode, read_regular, too_large
from ctxpolicy.policy.readfile import Abort as _Abort
from ctxpolicy.policy.source import MAX_DEPTH, PathT, SourceMap

__all__ = ["MAX_BYTES", "MAX_NODES", "LoadedDocument", "load_document"]


@dataclass
class LoadedDocument:
    """A parsed policy file: plain data plus where each part came from."""

    path: str
    data: dict[str, Any]
    source_map: SourceMap
    format: Literal["yaml", "toml"]
    #: keys left out because their number was out of range (already reported)
    dropped: set[PathT] = field(default_factory=set)


# --------------------------------------------------------------------------- public


def _format_of(path: str, text: str) -> Literal["yaml", "toml"]:
    suffix = Path(path).suffix.lower()
    if suffix == ".toml":
        return "toml"
    return "yaml"


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())


def load_document(
    path: str | os.PathLike[str], *, text: str | bytes | None = None
) -> tuple[LoadedDocument | None, list[Diagnostic]]:
    """Read and parse one policy file. Never raises: problems come back as diagnostics.

    ``text`` (str or bytes) replaces the file's content (editors, tests). The
    document is None when the file could not be parsed into a mapping.
    """
    name = os.fspath(path)
    try:
        return _load_document(name, text)
    except _Abort as exc:
        return None, [exc.diag]
    except RecursionError:
        return None, [make(name, (1, 1), "CTX008", f"nesting deeper than {MAX_DEPTH} levels")]
    except Exception as exc:  # last resort: never a traceback
        return None, [
            make(
                name,
                (1, 1),
                "CTX000",
                f"internal error while reading {name}: {type(exc).__name__}: {exc}",
                "please report this with the file attached",
            )
        ]


def _load_document(
    name: str, text: str | bytes | None
) -> tuple[LoadedDocument | None, list[Diagnostic]]:
    if text is None:
        raw_or_diag = read_regular(name)
        if isinstance(raw_or_diag, Diagnostic):
            return None, [raw_or_diag]
        raw = raw_or_diag
    elif isinstance(text, str):
        raw = text.encode("utf-8", errors="surrogatepass")
    else:
        raw = bytes(text)
    if len(raw) > MAX_BYTES:
        raise _Abort(too_large(name, len(raw)))
    decoded = decode(name, raw)
    fmt = _format_of(name, decoded)
    if _only_comments(decoded):
        what = "empty file" if not decoded.strip() else "file contains only comments"
        return None, [
            make(name, (1, 1), "CTX007", f"{what}: no policy", "start with `ctxpolicy: 1`")
        ]
    if fmt == "toml":
        from ctxpolicy.policy.load_toml import drop_odd_numbers, load_toml

        data, smap, diags = load_toml(name, decoded)
        dropped: set[PathT] = set()
        if data is not None:
            odd, dropped = drop_odd_numbers(name, data, smap)
            diags.extend(odd)
    else:
        data, smap, diags, dropped = load_yaml(name, decoded)
    if data is None and not diags:
        diags = [
            make(
                name,
                (1, 1),
                "CTX007",
                "document is empty (null): no policy",
                "start with `ctxpolicy: 1`",
            )
        ]
    if diags and any(d.severity == "error" for d in diags) and data is None:
        return None, diags
    if not isinstance(data, dict):
        kinds: dict[type, str] = {list: "a list", str: "a string"}
        kind = kinds.get(type(data), type(data).__name__)
        diags.append(
            make(
                name,
                smap.value_position(()),
                "CTX103",
                f"the file must hold a mapping of keys (got {kind})",
                "start with `ctxpolicy: 1`",
            )
        )
        return None, diags
    smap.values.setdefault((), (1, 1))
    return LoadedDocument(name, data, smap, fmt, dropped), diags
