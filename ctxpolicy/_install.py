"""How this ctxpolicy was installed, and the ``pip install`` that adds an extra to it.

ctxpolicy is not on a package index yet: an error that says "pip install
'ctxpolicy[otel]'" sends the user to a command that finds nothing. The hints built
here name what works for the installation at hand: its clone (a local path, editable
or not) or git URL, from PEP 610's ``direct_url.json``; the index name only when the
distribution came from an index.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import metadata
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = ["extra_hint", "source"]


def _direct_url() -> dict[str, Any]:
    # the first copy that says where it came from: a clone's own ``ctxpolicy.egg-info``
    # (on the path when run from the clone) says nothing and comes first
    raw = next(
        (
            t
            for d in metadata.distributions(name="ctxpolicy")
            if (t := d.read_text("direct_url.json"))
        ),
        None,
    )
    try:
        info = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


@lru_cache(maxsize=1)
def source() -> str:
    """What to ``pip install`` to get the ctxpolicy running now: its clone (a local
    path) or git URL when it was installed from one, else the distribution name."""
    info = _direct_url()
    url = info.get("url")
    if not isinstance(url, str):
        return "ctxpolicy"
    vcs = info.get("vcs_info")
    if isinstance(vcs, dict) and isinstance(vcs.get("vcs"), str):
        ref = vcs.get("commit_id")
        return f"ctxpolicy @ {vcs['vcs']}+{url}" + (f"@{ref}" if isinstance(ref, str) else "")
    if url.startswith("file://"):
        return unquote(urlparse(url).path)  # a clone (editable or not) or a wheel file
    return f"ctxpolicy @ {url}"


@lru_cache(maxsize=32)
def extra_hint(extra: str) -> str:
    """The command that installs ``extra`` into this ctxpolicy's installation."""
    src = source()
    if src == "ctxpolicy":
        return f"pip install 'ctxpolicy[{extra}]'"
    if src.startswith("ctxpolicy @ "):
        return f"pip install 'ctxpolicy[{extra}] @ {src.removeprefix('ctxpolicy @ ')}'"
    if src.endswith(".whl"):  # a wheel file: its extras from the same file
        return f"pip install '{src}[{extra}]'"
    info = _direct_url().get("dir_info")
    editable = isinstance(info, dict) and info.get("editable") is True
    return f"pip install {'-e ' if editable else ''}'{src}[{extra}]'"
