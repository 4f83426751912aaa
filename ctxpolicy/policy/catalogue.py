"""The built-in model catalogue (``ctxpolicy/data/models.json``) and the list prices
(``ctxpolicy/data/prices.json``): each file is read here and nowhere else.

Policies name a common model (``model: gpt-4o``) without defining it under
``models:``; a ``models:`` entry of the same name, in the file or one it includes,
wins over the catalogue. Entries are plain data validated by
:class:`~ctxpolicy.policy.models.ModelSpec` when used (and by a test for all of them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "CATALOGUE_PATH",
    "builtin_models",
    "catalogue_price_models",
    "default_prices",
    "load_prices",
    "price_for",
    "token_prices",
]

CATALOGUE_PATH = Path(__file__).resolve().parent.parent / "data" / "models.json"


@lru_cache(maxsize=1)
def _catalogue() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CATALOGUE_PATH.read_text(encoding="utf-8"))
    return data


def _load() -> dict[str, dict[str, Any]]:
    return dict(_catalogue()["models"])


@lru_cache(maxsize=1)
def catalogue_price_models() -> tuple[dict[str, Any], dict[str, Any]]:
    """``(price_models, model_price_models)`` of the packaged model catalogue: the
    prompt-cache prices of each provider as multiples of the uncached input price."""
    data = _catalogue()
    return dict(data.get("price_models") or {}), dict(data.get("model_price_models") or {})


def builtin_models() -> dict[str, dict[str, Any]]:
    """Model key → ModelSpec data (a copy; safe to change)."""
    return {name: dict(spec) for name, spec in _load().items()}


def load_prices(path: str | Path | None = None) -> dict[str, Any]:
    """The price table: the packaged one, or ``path`` (same shape)."""
    if path is None:
        text = resources.files("ctxpolicy").joinpath("data/prices.json").read_text("utf-8")
    else:
        text = Path(path).read_text("utf-8")
    data = json.loads(text)
    models = data.get("models") if isinstance(data, Mapping) else None
    if not isinstance(models, Mapping) or not models:
        raise ValueError(
            f'{path or "prices.json"}: expected {{"models": {{name: {{input, cached_input, output}}}}}}'
        )
    for name, p in models.items():
        if not isinstance(p, Mapping) or not all(
            isinstance(p.get(k), (int, float)) for k in ("input", "output")
        ):
            raise ValueError(
                f"{path or 'prices.json'}: model {name!r} needs numeric input and output prices"
            )
    return dict(data)


@lru_cache(maxsize=1)
def default_prices() -> dict[str, Any]:
    return load_prices()


def price_for(prices: Mapping[str, Any], model: str | None) -> tuple[str, dict[str, float]]:
    """``(name used, {input, cached_input, output})`` for a model (``default`` if unknown)."""
    models = prices["models"]
    if model is not None and model in models:
        name: str = model
    else:
        name = "default" if "default" in models else next(iter(models))
    p = models[name]
    return name, {
        "input": float(p["input"]),
        "cached_input": float(p.get("cached_input", p["input"])),
        "output": float(p["output"]),
    }


def token_prices(prices: Mapping[str, Any], model: str | None) -> tuple[str, float, float]:
    """``(price entry used, input, cached input)`` in USD per token for ``model``: its
    :func:`price_for` entry over the table's ``per`` (1,000,000 when unset)."""
    name, p = price_for(prices, model)
    per = float(prices.get("per") or 1_000_000)
    return name, p["input"] / per, p["cached_input"] / per
