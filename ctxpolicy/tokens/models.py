"""Which vocabulary a model speaks: the model table, the closest encodings to fall
back to, and the files behind tiktoken's OpenAI public encodings.

Read by the tokenizer backends (:mod:`ctxpolicy.tokens.backends`: the encoding of a
``model``) and by the chain (:mod:`ctxpolicy.tokens.chain`); it imports neither.
"""

from __future__ import annotations

__all__ = [
    "CLOSEST",
    "DEFAULT_ENCODING",
    "MODEL_ENCODINGS",
    "OPENAI_PUBLIC_FILES",
    "SORTED_PREFIXES",
    "encoding_for_model",
    "normalize_model",
    "unpublished_tokenizer",
]

#: Files behind tiktoken's OpenAI public encodings (tiktoken_ext.openai_public), so we
#: can tell whether an encoding would load from the cache or go to the network.
_OPENAI_PUBLIC = "https://openaipublic.blob.core.windows.net/"
OPENAI_PUBLIC_FILES: dict[str, tuple[str, ...]] = {
    "gpt2": (
        _OPENAI_PUBLIC + "gpt-2/encodings/main/vocab.bpe",
        _OPENAI_PUBLIC + "gpt-2/encodings/main/encoder.json",
    ),
    "r50k_base": (_OPENAI_PUBLIC + "encodings/r50k_base.tiktoken",),
    "p50k_base": (_OPENAI_PUBLIC + "encodings/p50k_base.tiktoken",),
    "p50k_edit": (_OPENAI_PUBLIC + "encodings/p50k_base.tiktoken",),
    "cl100k_base": (_OPENAI_PUBLIC + "encodings/cl100k_base.tiktoken",),
    "o200k_base": (_OPENAI_PUBLIC + "encodings/o200k_base.tiktoken",),
    "o200k_harmony": (_OPENAI_PUBLIC + "encodings/o200k_base.tiktoken",),
}

#: Models tiktoken does not know → (encoding, exact?). Matched on the lower-cased id
#: without an org prefix ("anthropic/claude-3-5-sonnet" → "claude-3-5-sonnet"), longest
#: prefix first. ``exact`` is False where the provider's tokenizer is not public and the
#: encoding is only the closest available one.
MODEL_ENCODINGS: dict[str, tuple[str, bool]] = {
    "gpt-oss": ("o200k_harmony", True),
    "gpt-5": ("o200k_base", True),
    "gpt-4.1": ("o200k_base", True),
    "gpt-4.5": ("o200k_base", True),
    "gpt-4o": ("o200k_base", True),
    "o1": ("o200k_base", True),
    "o3": ("o200k_base", True),
    "o4": ("o200k_base", True),
    "chatgpt-4o": ("o200k_base", True),
    "gpt-4": ("cl100k_base", True),
    "gpt-3.5": ("cl100k_base", True),
    "text-embedding-3": ("cl100k_base", True),
    "text-embedding-ada-002": ("cl100k_base", True),
    "qwen": ("qwen3", True),
    "qwq": ("qwen3", True),
    "llama-3": ("llama3", True),
    "llama3": ("llama3", True),
    "meta-llama-3": ("llama3", True),
    "claude": ("cl100k_base", False),
    "anthropic": ("cl100k_base", False),
    "gemini": ("o200k_base", False),
    "gemma": ("o200k_base", False),
    "deepseek": ("o200k_base", False),
    "llama": ("cl100k_base", False),
    "mistral": ("cl100k_base", False),
    "mixtral": ("cl100k_base", False),
    "codestral": ("cl100k_base", False),
    "ministral": ("cl100k_base", False),
    "magistral": ("cl100k_base", False),
    "devstral": ("cl100k_base", False),
    "command": ("cl100k_base", False),
    "glm": ("o200k_base", False),
    "kimi": ("o200k_base", False),
    "moonshot": ("o200k_base", False),
    "yi-": ("o200k_base", False),
    "grok": ("o200k_base", False),
    "phi-": ("cl100k_base", False),
}
SORTED_PREFIXES = sorted(MODEL_ENCODINGS, key=len, reverse=True)

#: When an exact encoding cannot load: the closest ones to try instead (approximate).
CLOSEST: dict[str, tuple[str, ...]] = {
    "o200k_base": ("cl100k_base",),
    "o200k_harmony": ("o200k_base", "cl100k_base"),
    "qwen3": ("o200k_base", "cl100k_base"),
    "llama3": ("cl100k_base",),
    "cl100k_base": (),
}

DEFAULT_ENCODING = "cl100k_base"


def normalize_model(model: str) -> str:
    m = model.strip().lower()
    return m.rsplit("/", 1)[-1] if "/" in m else m


def encoding_for_model(model: str) -> tuple[str, bool]:
    """``(encoding, exact)`` for a model id.

    The longest prefix of our table wins when it is approximate (the provider's tokenizer
    is not public) or names a non-OpenAI vocabulary (``qwen3``, ``llama3``); otherwise
    ``tiktoken.model.encoding_name_for_model`` decides, then our table (for a tiktoken too
    old to know the model); an unknown model is ``(cl100k_base, False)``.
    """
    m = normalize_model(model)
    hit = next((p for p in SORTED_PREFIXES if m.startswith(p)), None)
    if hit is not None:
        enc, exact = MODEL_ENCODINGS[hit]
        if not exact or enc not in OPENAI_PUBLIC_FILES:
            return enc, exact
    try:
        from tiktoken.model import encoding_name_for_model

        return encoding_name_for_model(m), True
    except Exception:
        pass
    if hit is not None:
        return MODEL_ENCODINGS[hit]
    return DEFAULT_ENCODING, False


def unpublished_tokenizer(model: str | None) -> bool:
    """True for a model of a family in our table whose tokenizer is not public."""
    if not model:
        return False
    m = normalize_model(model)
    hit = next((p for p in SORTED_PREFIXES if m.startswith(p)), None)
    return hit is not None and not MODEL_ENCODINGS[hit][1]
