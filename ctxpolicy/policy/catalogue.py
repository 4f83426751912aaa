"""The built-in model catalogue (``ctxpolicy/data/models.json``).

Policies name a common model (``model: gpt-4o``) without defining it under
``models:``; a ``models:`` entry of the same name, in the file or one it includes,
wins over the catalogue. Entries are plain data validated by
:class:`~ctxpolicy.policy.models.ModelSpec` when used (and by a test for all of them).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["CATALOGUE_PATH", "builtin_models"]

CATALOGUE_PATH = Path(__file__).resolve().parent.parent / "data" / "models.json"


@lru_cache(maxsize=1)
def _load() -> dict[str, dict[str, Any]]:
    data = json.loads(CATALOGUE_PATH.read_text(encoding="utf-8"))
    return dict(data["models"])


def builtin_models() -> dict[str, dict[str, Any]]:
    """Model key → ModelSpec data (a copy; safe to change)."""
    return {name: dict(spec) for name, spec in _load().items()}
